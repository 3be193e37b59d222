-- Numeric ids of groups (GitLab's `/groups/:id` and `group_id`). A group is still a namespace of
-- project paths (`acme`, `acme/platform`); a path gets its id the first time the API shows or
-- names it, and keeps it.
CREATE TABLE group_ids (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    path       TEXT    NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
);
