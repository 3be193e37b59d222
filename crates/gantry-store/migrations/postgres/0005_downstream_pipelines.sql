-- Downstream (child) pipelines: the trigger (bridge) job that created a pipeline. A bridge
-- creates at most one pipeline (the unique index makes a second creation fail instead of
-- running the child twice); NULL for pipelines created from a ref.
ALTER TABLE pipelines ADD COLUMN parent_job_id BIGINT NULL REFERENCES jobs(id);
CREATE UNIQUE INDEX pipelines_parent_job ON pipelines (parent_job_id);
