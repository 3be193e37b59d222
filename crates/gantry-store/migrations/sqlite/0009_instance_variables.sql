-- GitLab's instance CI/CD variables (Admin Area › CI/CD › Variables; `/admin/ci/variables`):
-- every pipeline of every project sees them. A key is unique instance-wide (no environment
-- scope); `variable_type` is `env_var` or `file`; `value` is encrypted as in
-- `project_variables`.
CREATE TABLE instance_variables (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    key               TEXT    NOT NULL UNIQUE,
    value             TEXT    NOT NULL,
    variable_type     TEXT    NOT NULL DEFAULT 'env_var',
    protected         INTEGER NOT NULL DEFAULT 0,
    masked            INTEGER NOT NULL DEFAULT 0,
    raw               INTEGER NOT NULL DEFAULT 0,
    description       TEXT    NULL,
    created_at        INTEGER NOT NULL
);
