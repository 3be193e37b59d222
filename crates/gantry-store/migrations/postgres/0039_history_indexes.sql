-- What reads or changes a few rows of a long history finds them through an index, not by
-- reading every row ever written (each statement's plan: the store's unit test
-- `the_reads_over_history_use_their_indexes`).
-- The expired artifacts the removal pass takes each minute, oldest expiry first
-- (`Store::take_artifacts`).
CREATE INDEX artifacts_expiry ON artifacts (expire_at, id) WHERE expire_at IS NOT NULL;
-- The unfinished pipelines a restart processes again (`Store::active_pipelines`; the
-- statuses are its `ACTIVE`).
CREATE INDEX pipelines_unfinished ON pipelines (id)
    WHERE status IN ('created', 'waiting_for_resource', 'preparing', 'pending', 'running', 'canceling', 'scheduled', 'manual');
-- A runner's jobs, newest first (`GET /runners/:id/jobs`), and the ones a deleted runner
-- leaves behind (GitLab's `index_ci_builds_on_runner_id_and_id_desc`).
CREATE INDEX jobs_by_runner ON jobs (runner_id, id) WHERE runner_id IS NOT NULL;
-- The jobs of an environment being deleted.
CREATE INDEX jobs_by_environment ON jobs (environment_id) WHERE environment_id IS NOT NULL;
-- `needs:project`'s job: a project's latest successful attempts by name, newest first
-- (`Store::latest_successful_job_of_ref`; GitLab's `index_ci_builds_on_project_id_and_name_and_ref`
-- without the ref, which is the pipeline's here).
CREATE INDEX jobs_latest_success ON jobs (project_id, name, id) WHERE status = 'success' AND retried = 0;
-- A root pipeline's child pipelines of the same project (`Store::latest_artifacts_job_of_ref`).
CREATE INDEX pipelines_by_root ON pipelines (root_id) WHERE root_id IS NOT NULL;
