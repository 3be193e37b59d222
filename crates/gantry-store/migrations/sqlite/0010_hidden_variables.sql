-- GitLab's hidden project variables (`masked_and_hidden` at creation, GitLab 17.4): the value
-- is masked in job logs and never shown again by the API. Only masked variables are hidden.
ALTER TABLE project_variables ADD COLUMN hidden INTEGER NOT NULL DEFAULT 0;
