-- A runner's maintenance note (GitLab's `ci_runners.maintenance_note`): free text for its
-- administrators, given at creation, registration or `PUT /runners/:id`; NULL for none.
ALTER TABLE runners ADD COLUMN maintenance_note TEXT NULL;
