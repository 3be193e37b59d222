-- GitLab's CI/CD job token scope of a project: "Limit access to this project"
-- (`ci_inbound_job_token_scope_enabled`) and its inbound allowlist, the projects and
-- groups whose job tokens may read this project's data (its artifacts through
-- `needs:project`, the artifacts API, its repository). A project is always in its own.
-- New projects limit access (GitLab's column default, `DEFAULT true`, since 15.9); the
-- projects made before this migration do not, so what their pipelines read keeps
-- working (GitLab did not turn it on for existing projects either).
ALTER TABLE projects ADD COLUMN ci_inbound_job_token_scope_enabled BIGINT NOT NULL DEFAULT 1;
UPDATE projects SET ci_inbound_job_token_scope_enabled = 0;

-- GitLab's `ci_job_token_project_scope_links` (direction inbound): `project_id` (GitLab's
-- source project) lets job tokens of `target_project_id` in.
CREATE TABLE job_token_project_links (
    project_id        BIGINT NOT NULL REFERENCES projects(id),
    target_project_id BIGINT NOT NULL REFERENCES projects(id),
    created_at        BIGINT NOT NULL,
    PRIMARY KEY (project_id, target_project_id)
);
CREATE INDEX job_token_project_links_target ON job_token_project_links (target_project_id);

-- GitLab's `ci_job_token_group_scope_links`: `project_id` lets job tokens of every project
-- under the group `group_id` (a `group_ids` row: the id stays with its path) in.
CREATE TABLE job_token_group_links (
    project_id BIGINT NOT NULL REFERENCES projects(id),
    group_id   BIGINT NOT NULL REFERENCES group_ids(id),
    created_at BIGINT NOT NULL,
    PRIMARY KEY (project_id, group_id)
);
