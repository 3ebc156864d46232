-- Issue 15, the takeover scan. A process that died during a compaction outside a turn leaves that
-- compaction's spans `running` with no running turn beside them; the scan finds such sessions by
-- their running spans too. Running spans are few at any moment, so a partial index keeps that
-- lookup off the whole trace table.
CREATE INDEX IF NOT EXISTS idx_trace_spans_running ON trace_spans (session_id) WHERE status = 'running';
