-- Issue 14, the Postgres CPU of a step (docs/benchmarks.md "The CHECK constraints' cost per
-- statement", docs/decisions.md "The CHECK constraints in cheaper forms").
--
-- Postgres does not keep a table's CHECK constraints ready between statements: every INSERT or
-- UPDATE reads each constraint's stored expression tree back from its text (stringToNode), folds
-- its constants (an IN list is an ARRAY[...] folded by running a small executor each time) and
-- compiles it, then evaluates it once for the row. On the fact statements that was about a tenth of
-- the backend's CPU, in proportion to the size of the stored trees, not to their number.
--
-- Each constraint below keeps its name (DECISIONS §4, reference §9.1) and its rule, row for row: a
-- CHECK rejects a row only when its expression is FALSE (NULL passes), so
--   * `x IS NULL OR f(x)` is `f(x)` for a strict f (it is NULL when x is NULL);
--   * `IN ('a', 'b')` is `= ANY ('{a,b}'::text[])`, one constant instead of an array built per statement;
--   * `(x IS NULL OR x >= 0) AND (y IS NULL OR y >= 0) ...` is `LEAST(x, y, ...) >= 0` (LEAST skips
--     NULLs, and is NULL only when all are NULL);
--   * `(status = 'running' AND ended_at IS NULL) OR (status <> 'running' AND ended_at IS NOT NULL)`,
--     on a NOT NULL status, is the equality of two booleans that are never NULL.
-- test/storage/check-forms.test.ts evaluates every old and new expression over the same grid of edge
-- values and finds no row that one rejects and the other accepts, and tries the violations through
-- the tables.
--
-- Re-running this file (a migration missing from openwork_migrations) drops and adds the same
-- constraints again; adding one validates the rows already stored, which the old rule admitted.

ALTER TABLE turns
  DROP CONSTRAINT turns_status_valid,
  ADD CONSTRAINT turns_status_valid CHECK (status = ANY ('{running,completed,failed,cancelled,interrupted}'::text[])),
  DROP CONSTRAINT turns_counts_non_negative,
  ADD CONSTRAINT turns_counts_non_negative CHECK (LEAST(model_call_count, model_submission_count, tool_call_count) >= 0),
  DROP CONSTRAINT turns_tokens_non_negative,
  ADD CONSTRAINT turns_tokens_non_negative CHECK (LEAST(input_tokens, output_tokens, cached_input_tokens, reasoning_tokens) >= 0),
  DROP CONSTRAINT turns_terminal_time_valid,
  ADD CONSTRAINT turns_terminal_time_valid CHECK ((status = 'running') = (ended_at IS NULL)),
  DROP CONSTRAINT turns_end_after_start,
  ADD CONSTRAINT turns_end_after_start CHECK (ended_at >= started_at),
  DROP CONSTRAINT turns_plan_unfinished_non_negative,
  ADD CONSTRAINT turns_plan_unfinished_non_negative CHECK (plan_unfinished_step_count >= 0);

ALTER TABLE messages
  DROP CONSTRAINT messages_role_valid,
  ADD CONSTRAINT messages_role_valid CHECK (role = ANY ('{system,user,assistant,tool}'::text[])),
  DROP CONSTRAINT messages_kind_valid,
  ADD CONSTRAINT messages_kind_valid CHECK (message_kind = ANY ('{normal,skill_instruction,agent_message,world_state}'::text[])),
  DROP CONSTRAINT messages_tool_identity_valid,
  ADD CONSTRAINT messages_tool_identity_valid CHECK (
    CASE WHEN role = 'tool' THEN COALESCE(btrim(provider_call_id) <> '' AND btrim(tool_name) <> '', FALSE)
    ELSE provider_call_id IS NULL AND tool_name IS NULL END
  );

ALTER TABLE sessions
  DROP CONSTRAINT sessions_title_not_blank,
  ADD CONSTRAINT sessions_title_not_blank CHECK (btrim(title) <> ''),
  DROP CONSTRAINT sessions_status_valid,
  ADD CONSTRAINT sessions_status_valid CHECK (status = ANY ('{active,archived}'::text[])),
  DROP CONSTRAINT sessions_subagent_fields_consistent,
  ADD CONSTRAINT sessions_subagent_fields_consistent CHECK (num_nulls(parent_session_id, task_name, agent_role) = ANY ('{0,3}'::int[])),
  DROP CONSTRAINT sessions_task_name_format,
  ADD CONSTRAINT sessions_task_name_format CHECK (task_name ~ '^[a-z][a-z0-9_]{0,47}$'),
  DROP CONSTRAINT sessions_spawn_not_self,
  ADD CONSTRAINT sessions_spawn_not_self CHECK (parent_session_id <> id),
  DROP CONSTRAINT sessions_tool_result_pruned_through_positive,
  ADD CONSTRAINT sessions_tool_result_pruned_through_positive CHECK (tool_result_pruned_through_sequence > 0),
  DROP CONSTRAINT sessions_sandbox_mode_valid,
  ADD CONSTRAINT sessions_sandbox_mode_valid CHECK (sandbox_mode = ANY ('{auto,accept_edits}'::text[])),
  DROP CONSTRAINT sessions_sandbox_mode_origin_valid,
  ADD CONSTRAINT sessions_sandbox_mode_origin_valid CHECK (sandbox_mode_origin = ANY ('{session_default,user_toggle,inherited}'::text[])),
  DROP CONSTRAINT sessions_client_settings_object,
  ADD CONSTRAINT sessions_client_settings_object CHECK (jsonb_typeof(client_settings) = 'object');

ALTER TABLE trace_spans
  DROP CONSTRAINT trace_spans_kind_valid,
  ADD CONSTRAINT trace_spans_kind_valid CHECK (kind = ANY ('{model_call,tool_call,compaction}'::text[])),
  DROP CONSTRAINT trace_spans_status_valid,
  ADD CONSTRAINT trace_spans_status_valid CHECK (
    status = ANY ('{running,succeeded,failed,denied,cancelled,outcome_unknown}'::text[])
    OR (kind = 'model_call' AND parent_span_id IS NOT NULL
        AND status = ANY ('{degenerate,deterministic,input_overflow,transient,timeout}'::text[]))
  ),
  DROP CONSTRAINT trace_spans_tool_columns_scoped,
  ADD CONSTRAINT trace_spans_tool_columns_scoped CHECK (
    kind = 'tool_call' OR num_nonnulls(provider_call_id, requested_tool_name, resolved_tool_name, permission_wait_ms) = 0
  ),
  DROP CONSTRAINT trace_spans_terminal_time_valid,
  ADD CONSTRAINT trace_spans_terminal_time_valid CHECK ((status = 'running') = (ended_at IS NULL)),
  DROP CONSTRAINT trace_spans_end_after_start,
  ADD CONSTRAINT trace_spans_end_after_start CHECK (ended_at >= started_at),
  DROP CONSTRAINT trace_spans_tokens_non_negative,
  ADD CONSTRAINT trace_spans_tokens_non_negative CHECK (LEAST(input_tokens, output_tokens, cached_input_tokens, reasoning_tokens) >= 0);

ALTER TABLE trace_span_payloads
  DROP CONSTRAINT trace_span_payloads_slot_valid,
  ADD CONSTRAINT trace_span_payloads_slot_valid CHECK (slot = ANY ('{request,system_context,tool_definitions,response}'::text[])),
  DROP CONSTRAINT trace_span_payloads_truncation_shape,
  ADD CONSTRAINT trace_span_payloads_truncation_shape CHECK (truncated = (original_byte_size IS NOT NULL) AND original_byte_size >= 0);

-- Large message contents and trace payload bodies (over about 2 kB, the TOAST threshold: a tool
-- result that reads a file, a model request late in a conversation) are compressed when stored;
-- Postgres's default method, pglz, took a third of the execution time of a fact statement whose tool
-- result held 20 kB of source text; lz4 takes far less to compress and to read back, for a slightly
-- larger result (docs/benchmarks.md, "The CHECK constraints' cost per statement"). Only values
-- written from now on use it; older ones are read as they were stored. A server built without lz4
-- (PGlite is one) keeps pglz: the statement is skipped there, not failed.
DO $$
BEGIN
  ALTER TABLE messages ALTER COLUMN content SET COMPRESSION lz4;
  ALTER TABLE trace_payloads ALTER COLUMN body SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
  NULL;
END $$;
