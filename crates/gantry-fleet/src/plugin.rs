//! Fleeting plugins over go-plugin gRPC (spec `fleet.md` §2).
