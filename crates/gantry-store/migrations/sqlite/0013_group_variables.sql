-- GitLab's group CI/CD variables (a group's Settings › CI/CD › Variables; `/groups/:id/variables`).
-- Gantry has no group rows: a group is a project namespace (`acme` and `acme/platform` for the
-- project `acme/platform/widget`), addressed by its full path. A key is unique per environment
-- scope in its group; `variable_type` is `env_var` or `file`.
CREATE TABLE group_variables (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    group_path        TEXT    NOT NULL,
    key               TEXT    NOT NULL,
    value             TEXT    NOT NULL,
    variable_type     TEXT    NOT NULL DEFAULT 'env_var',
    protected         INTEGER NOT NULL DEFAULT 0,
    masked            INTEGER NOT NULL DEFAULT 0,
    hidden            INTEGER NOT NULL DEFAULT 0,
    raw               INTEGER NOT NULL DEFAULT 0,
    environment_scope TEXT    NOT NULL DEFAULT '*',
    description       TEXT    NULL,
    created_at        INTEGER NOT NULL,
    UNIQUE (group_path, key, environment_scope)
);
