-- GitLab's project setting "CI/CD configuration file" (`ci_config_path`).
ALTER TABLE projects ADD COLUMN ci_config_path TEXT NOT NULL DEFAULT '.gitlab-ci.yml';
