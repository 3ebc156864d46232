-- Issue 14, the Postgres side of a durable step (bench/step-statements.ts, docs/benchmarks.md "The
-- Postgres side of a step").
--
-- idx_trace_spans_trace_started (trace_id, started_at): no statement reads trace spans by trace id.
-- The spans of a turn carry the turn's id as their trace id, and every read of them goes by
-- turn_id (idx_trace_spans_turn_started) or session_id (idx_trace_spans_session_started); the
-- annotation exemption of the payload purge reads trace_annotations by trace id, not spans. Each span
-- row paid one more index entry for it: about 330 bytes of WAL per tool step (two spans a step), and
-- its share of the trace batch's CPU. Reference §9.1 lists it, but it is neither unique nor partial,
-- and §9.2 principle 3 asks for no index that no query needs.
DROP INDEX IF EXISTS idx_trace_spans_trace_started;

-- turn_plans_turn_id_idx indexes exactly turn_plans' primary key (turn_id), which serves every read
-- and the ON CONFLICT (turn_id) of a plan update: a duplicate, as migration 0004's two were.
DROP INDEX IF EXISTS turn_plans_turn_id_idx;
