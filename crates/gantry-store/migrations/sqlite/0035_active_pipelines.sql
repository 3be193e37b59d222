-- The pipelines not finished, by project and status: what the metrics' scrape counts
-- (`cicd_pipeline_run_active`) without reading every pipeline ever run.
CREATE INDEX pipelines_active ON pipelines (project_id, status)
    WHERE status IN ('created', 'waiting_for_resource', 'preparing', 'pending', 'scheduled', 'running', 'canceling');
