-- The artifacts download by ref (`GET …/jobs/artifacts/:ref/download`) takes the ref's
-- newest pipeline whose status is `success` (`Store::latest_artifacts_job_of_ref`): found
-- here at once, not by walking the ref's pipelines newer than it (GitLab's
-- `index_ci_pipelines_on_project_id_and_ref_and_status_and_id`, for that status only).
CREATE INDEX pipelines_success_by_ref ON pipelines (project_id, ref_name, id) WHERE status = 'success';
