-- A pipeline's OpenTelemetry trace id (32 lower-case hex digits), drawn at creation when
-- the coordinator traces (`gantry-telemetry`); the pipeline's and its jobs' span ids are
-- derived from it, so every replica names the same spans. NULL: not traced.
ALTER TABLE pipelines ADD COLUMN trace_id TEXT;
