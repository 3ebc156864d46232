-- Issue 14, the trace's cost per step (docs/benchmarks.md "The trace's cost per step").
--
-- Every span row paid an entry in two indexes whose reads one index serves:
-- idx_trace_spans_session_started (session_id, started_at DESC) and idx_trace_spans_turn_started
-- (turn_id, started_at) WHERE turn_id IS NOT NULL. A turn's spans always carry the turn's session
-- (the composite foreign key (turn_id, session_id) -> turns), so the turn trace reads them by
-- (session_id, turn_id), the session from the turn's row; the session's spans (and the session
-- delete's payload candidates, and the ON DELETE CASCADE of a session or of a turn) read by the
-- leading session_id. Running spans keep their own partial index (0006). One index entry and one
-- WAL record less per span. Reference §9.1 lists the two, but they are neither unique nor partial
-- unique (DECISIONS §4), and §9.2 principle 3 asks for no index that no query needs.
CREATE INDEX IF NOT EXISTS idx_trace_spans_session_turn_started ON trace_spans (session_id, turn_id, started_at);
DROP INDEX IF EXISTS idx_trace_spans_session_started;
DROP INDEX IF EXISTS idx_trace_spans_turn_started;
