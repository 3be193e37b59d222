-- GitLab's `coverage`: the percentage the job's `coverage` regex found in its log.
ALTER TABLE jobs ADD COLUMN coverage DOUBLE PRECISION NULL;
