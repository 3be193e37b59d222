-- Push pipelines: the branches and tags of each project's repository as the coordinator last
-- saw them (`refs/heads/…`, `refs/tags/…` → commit). A pipeline created for a change of a ref
-- moves its row in the same transaction, so each change is taken once, by one coordinator.
CREATE TABLE project_refs (
    project_id BIGINT NOT NULL REFERENCES projects (id),
    ref_name   TEXT   NOT NULL,
    sha        TEXT   NOT NULL,
    PRIMARY KEY (project_id, ref_name)
);
-- When the refs were first recorded; NULL: never, and the next look records them without
-- creating pipelines (what was there before is no push).
ALTER TABLE projects ADD COLUMN refs_seen_at BIGINT;
