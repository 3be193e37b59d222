-- The pipelines a new pipeline's auto-cancel may cancel: its ref's unfinished ones in a
-- cancelable status (`Store::cancelable_pipelines_of_ref`), found without reading every
-- pipeline the project ever ran. The statuses are `JobStatus::is_cancelable`'s.
CREATE INDEX pipelines_cancelable ON pipelines (project_id, ref_name, tag, id)
    WHERE status IN ('created', 'waiting_for_resource', 'preparing', 'waiting_for_callback', 'pending', 'running', 'scheduled');
