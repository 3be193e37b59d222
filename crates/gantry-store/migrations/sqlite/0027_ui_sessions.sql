-- Sessions of the web UI: signing in with the admin token makes one (a random id in an
-- `HttpOnly` cookie, only its SHA-256 hash here), signing out deletes it, and it expires
-- on its own (`expires_at`, milliseconds since the epoch). The cookie no longer holds the
-- admin token itself.
CREATE TABLE ui_sessions (
    id_hash    TEXT PRIMARY KEY,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX ui_sessions_expires_at ON ui_sessions (expires_at);
