-- More of GitLab's CI/CD settings of a project (Settings › CI/CD):
-- `build_git_strategy` (`fetch` or `clone`: the job payload's `allow_git_fetch`, what
-- runners do without `GIT_STRATEGY`), `ci_default_git_depth` (NULL: not set; else the
-- project's `GIT_DEPTH`), `auto_cancel_pending_pipelines` (auto-cancel redundant pipelines),
-- `ci_separated_caches` (cache keys of protected and other refs kept apart) and
-- `ci_forward_deployment_enabled` (outdated deployment jobs fail instead of running).
ALTER TABLE projects ADD COLUMN build_git_strategy TEXT NOT NULL DEFAULT 'fetch';
ALTER TABLE projects ADD COLUMN ci_default_git_depth BIGINT NULL;
ALTER TABLE projects ADD COLUMN auto_cancel_pending_pipelines BIGINT NOT NULL DEFAULT 1;
ALTER TABLE projects ADD COLUMN ci_separated_caches BIGINT NOT NULL DEFAULT 1;
ALTER TABLE projects ADD COLUMN ci_forward_deployment_enabled BIGINT NOT NULL DEFAULT 1;
