-- GitLab's project setting "Keep artifacts from most recent successful jobs"
-- (`keep_latest_artifact`, on by default): a pipeline is created locked only while it is on.
-- Turning it off locks no new pipeline; the ones locked before stay locked until a newer
-- pipeline of their ref ends (as on GitLab).
ALTER TABLE projects ADD COLUMN keep_latest_artifact BIGINT NOT NULL DEFAULT 1;
