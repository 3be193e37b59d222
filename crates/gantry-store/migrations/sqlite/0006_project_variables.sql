-- GitLab's project CI/CD variables (Settings › CI/CD › Variables; `/projects/:id/variables`).
-- A key is unique per environment scope; `variable_type` is `env_var` or `file`.
CREATE TABLE project_variables (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id        INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    key               TEXT    NOT NULL,
    value             TEXT    NOT NULL,
    variable_type     TEXT    NOT NULL DEFAULT 'env_var',
    protected         INTEGER NOT NULL DEFAULT 0,
    masked            INTEGER NOT NULL DEFAULT 0,
    raw               INTEGER NOT NULL DEFAULT 0,
    environment_scope TEXT    NOT NULL DEFAULT '*',
    description       TEXT    NULL,
    created_at        INTEGER NOT NULL,
    UNIQUE (project_id, key, environment_scope)
);
