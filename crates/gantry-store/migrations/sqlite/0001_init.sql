-- Gantry's schema, SQLite dialect. Query SQL in src/ is portable (positional $N parameters,
-- no dialect functions); only this DDL is per backend.

CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE admin_tokens (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    token_hash TEXT    NOT NULL UNIQUE,
    created_at BIGINT  NOT NULL
);

CREATE TABLE projects (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    name             TEXT    NOT NULL UNIQUE,
    repo_url         TEXT    NOT NULL,
    default_branch   TEXT    NOT NULL,
    timeout_secs     BIGINT  NOT NULL,
    pipeline_counter BIGINT  NOT NULL DEFAULT 0,
    created_at       BIGINT  NOT NULL
);

CREATE TABLE runners (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    token_hash      TEXT    NOT NULL UNIQUE,
    description     TEXT    NOT NULL,
    tags            TEXT    NOT NULL,
    run_untagged    BIGINT  NOT NULL,
    locked          BIGINT  NOT NULL,
    protected_only  BIGINT  NOT NULL,
    project_id      BIGINT  NULL REFERENCES projects(id),
    maximum_timeout BIGINT  NULL,
    paused          BIGINT  NOT NULL DEFAULT 0,
    contacted_at    BIGINT  NULL,
    created_at      BIGINT  NOT NULL
);

CREATE TABLE pipelines (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id     BIGINT  NOT NULL REFERENCES projects(id),
    iid            BIGINT  NOT NULL,
    ref_name       TEXT    NOT NULL,
    tag            BIGINT  NOT NULL,
    sha            TEXT    NOT NULL,
    before_sha     TEXT    NOT NULL,
    source         TEXT    NOT NULL,
    status         TEXT    NOT NULL,
    failure_reason TEXT    NULL,
    yaml_errors    TEXT    NULL,
    variables      TEXT    NOT NULL,
    protected      BIGINT  NOT NULL,
    created_at     BIGINT  NOT NULL,
    started_at     BIGINT  NULL,
    finished_at    BIGINT  NULL,
    updated_at     BIGINT  NOT NULL,
    lock_version   BIGINT  NOT NULL DEFAULT 0,
    UNIQUE (project_id, iid)
);

CREATE TABLE jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    pipeline_id      BIGINT  NOT NULL REFERENCES pipelines(id),
    project_id       BIGINT  NOT NULL REFERENCES projects(id),
    name             TEXT    NOT NULL,
    stage            TEXT    NOT NULL,
    stage_idx        BIGINT  NOT NULL,
    status           TEXT    NOT NULL,
    attempt          BIGINT  NOT NULL,
    retried          BIGINT  NOT NULL DEFAULT 0,
    allow_failure    BIGINT  NOT NULL,
    spec             TEXT    NOT NULL,
    tags             TEXT    NOT NULL,
    protected        BIGINT  NOT NULL,
    runner_id        BIGINT  NULL REFERENCES runners(id),
    token_hash       TEXT    NULL UNIQUE,
    exit_code        BIGINT  NULL,
    failure_reason   TEXT    NULL,
    manual_variables TEXT    NULL,
    created_at       BIGINT  NOT NULL,
    queued_at        BIGINT  NULL,
    scheduled_at     BIGINT  NULL,
    started_at       BIGINT  NULL,
    finished_at      BIGINT  NULL,
    last_contact_at  BIGINT  NULL,
    timeout_secs     BIGINT  NULL,
    trace_size       BIGINT  NOT NULL DEFAULT 0,
    trace_checksum   TEXT    NULL
);
CREATE INDEX jobs_by_status ON jobs (status, queued_at, id);
CREATE INDEX jobs_by_pipeline ON jobs (pipeline_id);

CREATE TABLE trace_chunks (
    job_id BIGINT NOT NULL REFERENCES jobs(id),
    seq    BIGINT NOT NULL,
    data   BLOB   NOT NULL,
    PRIMARY KEY (job_id, seq)
);

CREATE TABLE artifacts (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id      BIGINT  NOT NULL REFERENCES jobs(id),
    file_type   TEXT    NOT NULL,
    file_format TEXT    NOT NULL,
    filename    TEXT    NOT NULL,
    size        BIGINT  NOT NULL,
    sha256      TEXT    NOT NULL,
    blob_key    TEXT    NOT NULL,
    expire_at   BIGINT  NULL,
    created_at  BIGINT  NOT NULL,
    UNIQUE (job_id, file_type)
);
