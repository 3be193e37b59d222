-- GitLab's protected branches and tags (`/projects/:id/protected_branches`, `…/protected_tags`):
-- a pipeline of a ref that one of its project's patterns matches (`*` a wildcard) is protected,
-- so it sees protected variables and runs on `ref_protected` runners. A project's default
-- branch is protected when the project is created (GitLab's default branch protection); the
-- projects created before this migration get that row here.
CREATE TABLE protected_refs (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    kind       TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (project_id, kind, name)
);
INSERT INTO protected_refs (project_id, kind, name, created_at)
    SELECT id, 'branch', default_branch, created_at FROM projects;
