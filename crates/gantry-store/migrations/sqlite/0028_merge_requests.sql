-- Merge requests and pull requests (issue 41): GitLab's `merge_requests` for the ones
-- `gantry run --merge-request` opens and the ones a GitLab forge's webhook describes, and
-- its `external_pull_requests` for GitHub's and Gitea's/Forgejo's pull requests, in one
-- table (`forge` tells them apart). `iid` is the forge's number (GitHub's and Gitea's
-- pull request number, GitLab's merge request iid), unique per project; the branches'
-- heads are those of the last event. Labels are one comma-joined text.
CREATE TABLE merge_requests (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id        BIGINT  NOT NULL REFERENCES projects(id),
    iid               BIGINT  NOT NULL,
    forge             TEXT    NOT NULL,
    state             TEXT    NOT NULL,
    title             TEXT    NOT NULL,
    description       TEXT    NOT NULL,
    source_branch     TEXT    NOT NULL,
    target_branch     TEXT    NOT NULL,
    source_sha        TEXT    NOT NULL,
    target_sha        TEXT    NOT NULL,
    source_repository TEXT    NOT NULL,
    target_repository TEXT    NOT NULL,
    draft             BIGINT  NOT NULL,
    labels            TEXT    NOT NULL,
    author            TEXT    NOT NULL,
    web_url           TEXT    NOT NULL,
    created_at        BIGINT  NOT NULL,
    updated_at        BIGINT  NOT NULL,
    UNIQUE (project_id, iid)
);
CREATE INDEX merge_requests_source ON merge_requests (project_id, source_branch, state);

-- A merge request pipeline's merge request (GitLab's `ci_pipelines.merge_request_id`,
-- `source_sha`, `target_sha` and the diff's base): written with the pipeline.
CREATE TABLE merge_request_pipelines (
    pipeline_id      BIGINT NOT NULL PRIMARY KEY REFERENCES pipelines(id),
    merge_request_id BIGINT NOT NULL REFERENCES merge_requests(id),
    event_type       TEXT   NOT NULL,
    source_sha       TEXT   NOT NULL,
    target_sha       TEXT   NOT NULL,
    base_sha         TEXT   NULL
);
CREATE INDEX merge_request_pipelines_request ON merge_request_pipelines (merge_request_id);

-- The shared secret a forge's webhook proves itself with (GitHub's and Gitea's HMAC key,
-- GitLab's `X-Gitlab-Token`), sealed as CI/CD variables are; NULL: no webhook.
ALTER TABLE projects ADD COLUMN forge_hook_secret TEXT NULL;
