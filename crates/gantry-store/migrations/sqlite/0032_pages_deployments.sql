-- GitLab's `pages_deployments`: a Pages job's site, copied out of its artifacts archive
-- into its own blob (`blob_key`, a zip whose root is the site) when the job succeeded,
-- so expiring artifacts do not take the site down. The newest active row of a project
-- and `path_prefix` ('' for the main site) is served; a newer one deactivates the older
-- (`deleted_at`), as GitLab's `deactivate_deployments_older_than`. `expires_at`:
-- `pages:expire_in` (NULL: never).
CREATE TABLE pages_deployments (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id  INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    job_id      INTEGER NOT NULL,
    pipeline_id INTEGER NOT NULL,
    sha         TEXT    NOT NULL,
    path_prefix TEXT    NOT NULL,
    blob_key    TEXT    NOT NULL,
    file_count  INTEGER NOT NULL,
    size        INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NULL,
    deleted_at  INTEGER NULL
);
CREATE INDEX pages_deployments_project ON pages_deployments (project_id, path_prefix, id);
