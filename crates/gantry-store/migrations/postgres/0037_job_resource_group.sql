-- A job's resource group key (expanded at creation; its spec has it too), so that the jobs
-- that wait for, hold or will want a project's resources are read through an index
-- (`Store::resource_jobs`), not by reading every job of the project's active pipelines at
-- each resource event.
ALTER TABLE jobs ADD COLUMN resource_group TEXT;
-- The jobs made before that are not done: their key from their spec.
UPDATE jobs SET resource_group = (spec::jsonb -> 'job' ->> 'resource_group')
WHERE status IN ('created', 'scheduled', 'waiting_for_resource', 'pending', 'running', 'canceling')
  AND spec LIKE '%"resource_group":"%';
CREATE INDEX jobs_resource_groups ON jobs (project_id, status) WHERE resource_group IS NOT NULL;
