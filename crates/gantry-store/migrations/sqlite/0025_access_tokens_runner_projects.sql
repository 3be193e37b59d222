-- GitLab's personal access tokens (`glpat-`): tokens of the administrator user beyond
-- the admin token made at first start, each with a name, scopes (`api`, `read_api`, as
-- a comma list), an expiry date (`YYYY-MM-DD`, UTC: the token stops working when that day starts)
-- and a revocation flag. Kept only as a SHA-256 hash, like every other token.
CREATE TABLE personal_access_tokens (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id      BIGINT  NOT NULL,
    name         TEXT    NOT NULL,
    token_hash   TEXT    NOT NULL UNIQUE,
    scopes       TEXT    NOT NULL,
    expires_at   TEXT    NULL,
    revoked      BIGINT  NOT NULL DEFAULT 0,
    last_used_at BIGINT  NULL,
    created_at   BIGINT  NOT NULL
);

-- GitLab's `ci_runner_projects` beyond a project runner's own project: the other
-- projects a project runner was enabled for (`POST /projects/:id/runners`).
CREATE TABLE runner_projects (
    runner_id  BIGINT NOT NULL REFERENCES runners(id),
    project_id BIGINT NOT NULL REFERENCES projects(id),
    created_at BIGINT NOT NULL,
    PRIMARY KEY (runner_id, project_id)
);
CREATE INDEX runner_projects_project ON runner_projects (project_id);
