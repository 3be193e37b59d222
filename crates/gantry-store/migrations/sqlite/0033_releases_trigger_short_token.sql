-- GitLab's `releases` (and `release_links`, kept as JSON): one release per project and
-- tag, made by the coordinator when a job with `release:` succeeded (`releases.rs` in
-- the coordinator). `milestones` and `links` are JSON arrays (`links`: objects with
-- `id`, `name`, `url`, `direct_asset_path`, `link_type`).
CREATE TABLE releases (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id  INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    tag_name    TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    description TEXT    NOT NULL,
    tag_message TEXT    NULL,
    sha         TEXT    NOT NULL,
    job_id      INTEGER NULL,
    pipeline_id INTEGER NULL,
    milestones  TEXT    NOT NULL,
    links       TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    released_at INTEGER NOT NULL,
    UNIQUE (project_id, tag_name)
);

-- GitLab's `CI_TRIGGER_SHORT_TOKEN`: the first 4 characters after `glptt-` of the trigger
-- token that created the pipeline (`Ci::Trigger#short_token`); tokens are kept only as
-- hashes, so the pipeline keeps these. NULL: not created by a trigger token.
ALTER TABLE pipelines ADD COLUMN trigger_short_token TEXT;
