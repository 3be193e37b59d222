-- Job logs move out of the database: their bytes go to one append-only file per job in the
-- coordinator's data directory; `jobs.trace_size` stays here as the truth about how many of
-- those bytes exist (a reader reads exactly that many; an append writes at that offset,
-- then commits the new size).
--
-- Logs written before this migration stay in `trace_chunks`, readable as they are; this
-- flag marks them. A job still running across the upgrade has its chunks moved to its file
-- by its next append (flag cleared, chunks deleted in the same transaction). No data is
-- copied here, so the upgrade takes no time whatever the size of the old logs.
ALTER TABLE jobs ADD COLUMN trace_in_db BIGINT NOT NULL DEFAULT 0;
UPDATE jobs SET trace_in_db = 1 WHERE id IN (SELECT DISTINCT job_id FROM trace_chunks);
