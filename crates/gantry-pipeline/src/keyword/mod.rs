//! Validators for job keywords.
