-- What a runner said about itself (its `info` on job requests, GitLab's `ci_runners`
-- and `ci_runner_machines` columns) and the address it called from, written with
-- `contacted_at` (at most once a minute); '' until its first job request.
ALTER TABLE runners ADD COLUMN version TEXT NOT NULL DEFAULT '';
ALTER TABLE runners ADD COLUMN revision TEXT NOT NULL DEFAULT '';
ALTER TABLE runners ADD COLUMN platform TEXT NOT NULL DEFAULT '';
ALTER TABLE runners ADD COLUMN architecture TEXT NOT NULL DEFAULT '';
ALTER TABLE runners ADD COLUMN executor TEXT NOT NULL DEFAULT '';
ALTER TABLE runners ADD COLUMN ip_address TEXT NOT NULL DEFAULT '';
