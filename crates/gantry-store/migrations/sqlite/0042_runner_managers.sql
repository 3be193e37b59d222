-- Runner managers (GitLab's `ci_runner_machines`): one row per runner process — a
-- (runner, `system_id`) pair — created when it first authenticates with a job request or
-- a verify, its `info` and address written with `contacted_at` (at most once a minute).
-- AUTOINCREMENT: a deleted manager's id is never given again, so a job's
-- `runner_manager_id` never names another process.
CREATE TABLE runner_managers (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    runner_id    INTEGER NOT NULL REFERENCES runners(id),
    system_id    TEXT    NOT NULL,
    version      TEXT    NOT NULL DEFAULT '',
    revision     TEXT    NOT NULL DEFAULT '',
    platform     TEXT    NOT NULL DEFAULT '',
    architecture TEXT    NOT NULL DEFAULT '',
    executor     TEXT    NOT NULL DEFAULT '',
    ip_address   TEXT    NOT NULL DEFAULT '',
    created_at   BIGINT  NOT NULL,
    contacted_at BIGINT  NULL,
    UNIQUE (runner_id, system_id)
);
-- The manager that took the job (GitLab's `p_ci_runner_machine_builds`), written by the
-- assignment; no foreign key: a deleted manager shows as none.
ALTER TABLE jobs ADD COLUMN runner_manager_id INTEGER NULL;
-- The `name` a runner gave itself when it registered with a registration token
-- (`info.name`, GitLab's `ci_runners.name`); NULL for runners made otherwise.
ALTER TABLE runners ADD COLUMN name TEXT NULL;
