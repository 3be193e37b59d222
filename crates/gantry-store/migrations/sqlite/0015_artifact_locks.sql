-- GitLab's "keep artifacts from the most recent successful jobs" (on by default): a pipeline's
-- artifacts are locked against expiry removal, and stay downloadable and usable as
-- dependencies after `expire_in`, while its family (a pipeline and its same-project child
-- pipelines) is the newest of its ref or the newest successful one. A pipeline is created
-- locked; when one ends (success, failed, canceled, skipped or blocked at a manual job) the
-- older families of its ref are unlocked but for the newest successful one, and deleting a
-- branch or tag unlocks all of its pipelines.
--
-- `root_id`: the family's root pipeline (NULL for a root: a pipeline the project's ref
-- created, or a downstream pipeline of another project).
ALTER TABLE pipelines ADD COLUMN root_id BIGINT NULL;
ALTER TABLE pipelines ADD COLUMN locked BIGINT NOT NULL DEFAULT 1;
CREATE INDEX pipelines_by_ref ON pipelines (project_id, ref_name, tag, id);

-- The pipelines made before: children take their parent's root (child pipelines nest two
-- levels deep at most; three passes cover a multi-project pipeline's children too) ...
UPDATE pipelines SET root_id = (
    SELECT COALESCE(pp.root_id, pp.id) FROM jobs pj JOIN pipelines pp ON pp.id = pj.pipeline_id
    WHERE pj.id = pipelines.parent_job_id AND pp.project_id = pipelines.project_id)
WHERE parent_job_id IS NOT NULL;
UPDATE pipelines SET root_id = (
    SELECT COALESCE(pp.root_id, pp.id) FROM jobs pj JOIN pipelines pp ON pp.id = pj.pipeline_id
    WHERE pj.id = pipelines.parent_job_id AND pp.project_id = pipelines.project_id)
WHERE parent_job_id IS NOT NULL;
UPDATE pipelines SET root_id = (
    SELECT COALESCE(pp.root_id, pp.id) FROM jobs pj JOIN pipelines pp ON pp.id = pj.pipeline_id
    WHERE pj.id = pipelines.parent_job_id AND pp.project_id = pipelines.project_id)
WHERE parent_job_id IS NOT NULL;
-- ... and only the newest family and the newest successful family of each ref stay locked.
UPDATE pipelines SET locked = 0
WHERE COALESCE(root_id, id) NOT IN (
    SELECT MAX(id) FROM pipelines WHERE root_id IS NULL GROUP BY project_id, ref_name, tag
    UNION
    SELECT MAX(id) FROM pipelines WHERE root_id IS NULL AND status = 'success'
    GROUP BY project_id, ref_name, tag
);
