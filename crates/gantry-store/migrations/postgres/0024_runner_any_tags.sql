-- A runner that takes every job whatever its tags (Gantry's, no GitLab equivalent):
-- `gantry run`'s local runner, as gitlab-ci-local runs every job. 0: the runner's tags
-- and `run_untagged` decide, as GitLab's.
ALTER TABLE runners ADD COLUMN any_tags BIGINT NOT NULL DEFAULT 0;
