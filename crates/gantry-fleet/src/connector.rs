//! SSH to fleet instances (spec `fleet.md` §5).
