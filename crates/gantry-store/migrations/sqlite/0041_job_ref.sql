-- A job carries its pipeline's ref (GitLab's `ci_builds.ref`), so `needs:project`'s job —
-- the newest successful latest attempt of a name on a ref (`Store::latest_successful_job_of_ref`)
-- — is found at once by `jobs_latest_success_of_ref` (GitLab's
-- `index_ci_builds_on_project_id_and_name_and_ref`), not by walking the project's successful
-- jobs of that name on other refs newer than it.
ALTER TABLE jobs ADD COLUMN ref_name TEXT NOT NULL DEFAULT '';
UPDATE jobs SET ref_name = (SELECT p.ref_name FROM pipelines p WHERE p.id = jobs.pipeline_id);
DROP INDEX jobs_latest_success;
CREATE INDEX jobs_latest_success_of_ref ON jobs (project_id, ref_name, name, id)
    WHERE status = 'success' AND retried = 0;
