//! The taskscaler (spec `fleet.md` §4).
