-- GitLab's resource groups (`resource_group:`; `/projects/:id/resource_groups`): one per key of a
-- project, made when a pipeline with a job of that key is created. `process_mode` is the
-- order waiting jobs get the resource in: `unordered` (GitLab's default), `oldest_first`,
-- `newest_first` or `newest_ready_first`.
CREATE TABLE resource_groups (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id   INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    key          TEXT    NOT NULL,
    process_mode TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    UNIQUE (project_id, key)
);
