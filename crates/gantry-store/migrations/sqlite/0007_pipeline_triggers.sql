-- GitLab's pipeline trigger tokens (Settings › CI/CD › Pipeline trigger tokens;
-- `/projects/:id/triggers`, `POST /projects/:id/trigger/pipeline`). The token is kept
-- only as a hash; `token_prefix` is what lists show of it.
CREATE TABLE pipeline_triggers (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id   INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    token_hash   TEXT    NOT NULL UNIQUE,
    token_prefix TEXT    NOT NULL,
    description  TEXT    NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER NULL
);
CREATE INDEX pipeline_triggers_project ON pipeline_triggers (project_id);
