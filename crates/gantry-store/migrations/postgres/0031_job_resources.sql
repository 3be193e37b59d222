-- A job's resource use as its runner last reported it (`resources` in the job updates):
-- cumulative CPU seconds, peak memory and storage bytes. One row per job that reported
-- any, replaced by each report; removed with the job.
CREATE TABLE job_resources (
    job_id BIGINT PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,
    cpu_user_seconds DOUBLE PRECISION NOT NULL,
    cpu_system_seconds DOUBLE PRECISION NOT NULL,
    peak_memory_bytes BIGINT NOT NULL,
    read_bytes BIGINT NOT NULL,
    written_bytes BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
