-- GitLab's environments and deployments (Operate › Environments; `/projects/:id/environments`,
-- `/projects/:id/deployments`). A job with `environment:` names an environment of its project,
-- created (state `available`) when the pipeline is created; a job whose action is `start`
-- (the default) is a deployment, whose status follows the job's. `state` is `available`,
-- `stopping` (its stop jobs run) or `stopped`. Times are Unix ms.
CREATE TABLE environments (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id   INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name         TEXT    NOT NULL,
    slug         TEXT    NOT NULL,
    external_url TEXT    NULL,
    state        TEXT    NOT NULL,
    tier         TEXT    NOT NULL,
    auto_stop_at INTEGER NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    UNIQUE (project_id, name)
);
CREATE INDEX environments_auto_stop ON environments (auto_stop_at);

-- `iid` counts a project's deployments (`projects.deployment_iid` is the last one given).
-- `job_id` is NULL once the job's pipeline is deleted (the deployment stays in the history).
-- `on_stop`, `url`, `tier` and `auto_stop_in` (ms) are the job's `environment:` settings,
-- applied to the environment when the deployment succeeds.
CREATE TABLE deployments (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id     INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    iid            INTEGER NOT NULL,
    environment_id INTEGER NOT NULL REFERENCES environments(id) ON DELETE CASCADE,
    job_id         INTEGER NULL,
    pipeline_id    INTEGER NULL,
    ref_name       TEXT    NOT NULL,
    tag            INTEGER NOT NULL,
    sha            TEXT    NOT NULL,
    status         TEXT    NOT NULL,
    on_stop        TEXT    NULL,
    url            TEXT    NULL,
    tier           TEXT    NULL,
    auto_stop_in   INTEGER NULL,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    finished_at    INTEGER NULL,
    UNIQUE (project_id, iid)
);
CREATE INDEX deployments_environment ON deployments (environment_id, id);
CREATE INDEX deployments_job ON deployments (job_id);
ALTER TABLE projects ADD COLUMN deployment_iid INTEGER NOT NULL DEFAULT 0;

-- The environment a job names (NULL: none, or it could not be created) and the job's
-- `environment:action` (`start`, `prepare`, `stop`, `verify`, `access`).
ALTER TABLE jobs ADD COLUMN environment_id INTEGER NULL;
ALTER TABLE jobs ADD COLUMN environment_action TEXT NULL;
