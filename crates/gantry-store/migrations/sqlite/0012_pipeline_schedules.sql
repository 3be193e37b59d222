-- GitLab's pipeline schedules (Build › Pipeline schedules; `/projects/:id/pipeline_schedules`):
-- a ref's pipeline at the times a cron expression names, in a time zone, with variables.
-- `next_run_at` (Unix ms) is NULL while the schedule is inactive; a run moves it by
-- compare-and-set in the transaction that creates the pipeline. `variables` is a sealed
-- JSON list (encrypted like pipeline variables).
CREATE TABLE pipeline_schedules (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id    INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    description   TEXT    NOT NULL,
    ref_name      TEXT    NOT NULL,
    cron          TEXT    NOT NULL,
    cron_timezone TEXT    NOT NULL,
    active        INTEGER NOT NULL,
    next_run_at   INTEGER NULL,
    variables     TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
CREATE INDEX pipeline_schedules_project ON pipeline_schedules (project_id);
CREATE INDEX pipeline_schedules_due ON pipeline_schedules (next_run_at);
-- The schedule a pipeline ran for (`last_pipeline`, `…/pipeline_schedules/:id/pipelines`).
ALTER TABLE pipelines ADD COLUMN schedule_id INTEGER NULL;
CREATE INDEX pipelines_schedule ON pipelines (schedule_id);
