-- GitLab's group runners: a runner of a group (`group_path`, a namespace such as `acme` or
-- `acme/platform`) runs the jobs of every project under it, subgroups' too. NULL: an
-- instance or project runner.
ALTER TABLE runners ADD COLUMN group_path TEXT NULL;
