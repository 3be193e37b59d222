-- GitLab's erased jobs (`POST /projects/:id/jobs/:job_id/erase`): when the job's log and
-- artifacts were erased (Unix ms); NULL: never.
ALTER TABLE jobs ADD COLUMN erased_at BIGINT NULL;
