-- Trigger (bridge) jobs flagged on their row, so lists that leave them out (GitLab's
-- `GET /projects/:id/jobs`) can page in SQL instead of reading every job's spec.
ALTER TABLE jobs ADD COLUMN bridge BIGINT NOT NULL DEFAULT 0;
UPDATE jobs SET bridge = 1 WHERE json_type(spec, '$.job.trigger') = 'object';
CREATE INDEX jobs_by_project ON jobs (project_id, bridge, id);
CREATE INDEX pipelines_by_project ON pipelines (project_id, id);
