-- openwork-core initial schema: reference.md §9 in the generation named by DECISIONS.md §4.
-- No models / provider_credentials tables; model ids are `<provider>/<model>` text;
-- turns.resolved_provider_id; sessions.reasoning_effort; four message kinds; timestamptz everywhere.

CREATE TABLE skill_status (
  name     TEXT PRIMARY KEY,
  disabled BOOLEAN NOT NULL DEFAULT FALSE,
  CONSTRAINT skill_status_name_not_blank CHECK (btrim(name) <> '')
);

CREATE TABLE sessions (
  id                                  TEXT PRIMARY KEY,
  title                               TEXT NULL,
  working_directory                   TEXT NOT NULL,
  default_model_id                    TEXT NULL,
  status                              TEXT NOT NULL DEFAULT 'active',
  created_at                          TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at                          TIMESTAMPTZ NOT NULL DEFAULT now(),
  last_turn_at                        TIMESTAMPTZ NULL,
  parent_session_id                   TEXT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  task_name                           TEXT NULL,
  agent_role                          TEXT NULL,
  spawn_span_id                       TEXT NULL,
  tool_result_pruned_through_sequence BIGINT NULL,
  sandbox_mode                        TEXT NOT NULL DEFAULT 'auto',
  reasoning_effort                    TEXT NULL,
  CONSTRAINT sessions_id_not_blank CHECK (btrim(id) <> ''),
  CONSTRAINT sessions_title_not_blank CHECK (title IS NULL OR btrim(title) <> ''),
  CONSTRAINT sessions_working_directory_not_blank CHECK (btrim(working_directory) <> ''),
  CONSTRAINT sessions_status_valid CHECK (status IN ('active', 'archived')),
  CONSTRAINT sessions_subagent_fields_consistent CHECK (
    (parent_session_id IS NULL AND task_name IS NULL AND agent_role IS NULL)
    OR (parent_session_id IS NOT NULL AND task_name IS NOT NULL AND agent_role IS NOT NULL)
  ),
  CONSTRAINT sessions_task_name_format CHECK (task_name IS NULL OR task_name ~ '^[a-z][a-z0-9_]{0,47}$'),
  CONSTRAINT sessions_spawn_not_self CHECK (parent_session_id IS NULL OR parent_session_id <> id),
  CONSTRAINT sessions_tool_result_pruned_through_positive CHECK (
    tool_result_pruned_through_sequence IS NULL OR tool_result_pruned_through_sequence > 0
  ),
  CONSTRAINT sessions_sandbox_mode_valid CHECK (sandbox_mode IN ('auto', 'accept_edits'))
);
CREATE INDEX idx_sessions_status_updated ON sessions (status, updated_at DESC, id);
CREATE INDEX idx_sessions_default_model ON sessions (default_model_id) WHERE default_model_id IS NOT NULL;
CREATE UNIQUE INDEX uq_sessions_parent_task_name ON sessions (parent_session_id, task_name)
  WHERE parent_session_id IS NOT NULL;
CREATE INDEX idx_sessions_parent ON sessions (parent_session_id, created_at) WHERE parent_session_id IS NOT NULL;

CREATE TABLE turns (
  id                         TEXT PRIMARY KEY,
  session_id                 TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  client_request_id          TEXT NOT NULL,
  sequence                   BIGINT NOT NULL,
  model_id                   TEXT NULL,
  resolved_provider_id       TEXT NOT NULL,
  resolved_model_name        TEXT NOT NULL,
  app_version                TEXT NOT NULL,
  status                     TEXT NOT NULL,
  model_call_count           INTEGER NOT NULL DEFAULT 0,
  model_submission_count     INTEGER NOT NULL DEFAULT 0,
  tool_call_count            INTEGER NOT NULL DEFAULT 0,
  input_tokens               BIGINT NULL,
  output_tokens              BIGINT NULL,
  cached_input_tokens        BIGINT NULL,
  reasoning_tokens           BIGINT NULL,
  error_code                 TEXT NULL,
  error_message              TEXT NULL,
  started_at                 TIMESTAMPTZ NOT NULL DEFAULT now(),
  ended_at                   TIMESTAMPTZ NULL,
  updated_at                 TIMESTAMPTZ NOT NULL DEFAULT now(),
  plan_unfinished_step_count INTEGER NULL,
  CONSTRAINT turns_id_not_blank CHECK (btrim(id) <> ''),
  CONSTRAINT turns_client_request_not_blank CHECK (btrim(client_request_id) <> ''),
  CONSTRAINT turns_sequence_positive CHECK (sequence > 0),
  CONSTRAINT turns_provider_not_blank CHECK (btrim(resolved_provider_id) <> ''),
  CONSTRAINT turns_model_not_blank CHECK (btrim(resolved_model_name) <> ''),
  CONSTRAINT turns_app_version_not_blank CHECK (btrim(app_version) <> ''),
  CONSTRAINT turns_status_valid CHECK (status IN ('running', 'completed', 'failed', 'cancelled', 'interrupted')),
  CONSTRAINT turns_counts_non_negative CHECK (
    model_call_count >= 0 AND model_submission_count >= 0 AND tool_call_count >= 0
  ),
  CONSTRAINT turns_model_submission_covers_logical_calls CHECK (model_submission_count >= model_call_count),
  CONSTRAINT turns_tokens_non_negative CHECK (
    (input_tokens IS NULL OR input_tokens >= 0) AND (output_tokens IS NULL OR output_tokens >= 0)
    AND (cached_input_tokens IS NULL OR cached_input_tokens >= 0)
    AND (reasoning_tokens IS NULL OR reasoning_tokens >= 0)
  ),
  CONSTRAINT turns_terminal_time_valid CHECK (
    (status = 'running' AND ended_at IS NULL) OR (status <> 'running' AND ended_at IS NOT NULL)
  ),
  CONSTRAINT turns_end_after_start CHECK (ended_at IS NULL OR ended_at >= started_at),
  CONSTRAINT turns_id_session UNIQUE (id, session_id),
  CONSTRAINT turns_session_sequence UNIQUE (session_id, sequence),
  CONSTRAINT turns_client_request UNIQUE (session_id, client_request_id),
  CONSTRAINT turns_plan_unfinished_non_negative CHECK (
    plan_unfinished_step_count IS NULL OR plan_unfinished_step_count >= 0
  )
);
CREATE UNIQUE INDEX uq_turns_one_running_per_session ON turns (session_id) WHERE status = 'running';
CREATE INDEX idx_turns_session_sequence ON turns (session_id, sequence DESC);

CREATE TABLE messages (
  id                     TEXT PRIMARY KEY,
  session_id             TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  turn_id                TEXT NULL,
  sequence               BIGINT NOT NULL,
  role                   TEXT NOT NULL,
  content                JSONB NOT NULL,
  message_kind           TEXT NOT NULL DEFAULT 'normal',
  content_format_version SMALLINT NOT NULL DEFAULT 1,
  provider_call_id       TEXT NULL,
  tool_name              TEXT NULL,
  created_at             TIMESTAMPTZ NOT NULL DEFAULT now(),
  CONSTRAINT messages_turn_session_fk FOREIGN KEY (turn_id, session_id)
    REFERENCES turns (id, session_id) ON DELETE CASCADE,
  CONSTRAINT messages_id_not_blank CHECK (btrim(id) <> ''),
  CONSTRAINT messages_sequence_positive CHECK (sequence > 0),
  CONSTRAINT messages_role_valid CHECK (role IN ('system', 'user', 'assistant', 'tool')),
  CONSTRAINT messages_kind_valid CHECK (message_kind IN ('normal', 'skill_instruction', 'agent_message', 'world_state')),
  CONSTRAINT messages_content_is_array CHECK (jsonb_typeof(content) = 'array'),
  CONSTRAINT messages_content_format_positive CHECK (content_format_version > 0),
  CONSTRAINT messages_turn_required CHECK (turn_id IS NOT NULL OR role = 'system'),
  CONSTRAINT messages_tool_identity_valid CHECK (
    (role = 'tool' AND provider_call_id IS NOT NULL AND btrim(provider_call_id) <> ''
      AND tool_name IS NOT NULL AND btrim(tool_name) <> '')
    OR (role <> 'tool' AND provider_call_id IS NULL AND tool_name IS NULL)
  ),
  CONSTRAINT messages_session_sequence UNIQUE (session_id, sequence)
);
CREATE INDEX idx_messages_session_sequence ON messages (session_id, sequence);
CREATE UNIQUE INDEX uq_messages_tool_result ON messages (turn_id, provider_call_id) WHERE role = 'tool';

CREATE TABLE conversation_compactions (
  id                                TEXT PRIMARY KEY,
  session_id                        TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  sequence                          BIGINT NOT NULL,
  through_message_sequence          BIGINT NOT NULL,
  replaced_through_message_sequence BIGINT NOT NULL,
  source_message_count              INTEGER NOT NULL,
  checkpoint_format_version         SMALLINT NOT NULL DEFAULT 0,
  kind                              TEXT NOT NULL DEFAULT 'manual',
  summary_format_version            SMALLINT NOT NULL DEFAULT 0,
  last_user_message_id              TEXT NULL REFERENCES messages(id),
  last_user_message_sequence        BIGINT NULL,
  resolved_model_name               TEXT NOT NULL,
  summary                           TEXT NOT NULL,
  runtime_state                     JSONB NOT NULL
    DEFAULT '{"schemaVersion":1,"editedPaths":[],"extensions":{},"warnings":[]}'::jsonb,
  runtime_reminder_format_version   SMALLINT NOT NULL DEFAULT 1,
  runtime_reminder                  TEXT NOT NULL
    DEFAULT E'<system_reminder format_version="1">\nNo additional durable runtime state was recorded at compaction time.\n</system_reminder>',
  trigger_turn_id                   TEXT NULL,
  parent_compaction_id              TEXT NULL,
  input_tokens                      BIGINT NULL,
  output_tokens                     BIGINT NULL,
  created_at                        TIMESTAMPTZ NOT NULL DEFAULT now(),
  CONSTRAINT conversation_compactions_id_not_blank CHECK (btrim(id) <> ''),
  CONSTRAINT conversation_compactions_sequence_positive CHECK (sequence > 0),
  CONSTRAINT conversation_compactions_message_sequence_non_negative CHECK (through_message_sequence >= 0),
  CONSTRAINT conversation_compactions_replacement_covers_source CHECK (
    replaced_through_message_sequence >= through_message_sequence
  ),
  CONSTRAINT conversation_compactions_source_count_positive CHECK (source_message_count > 0),
  CONSTRAINT conversation_compactions_checkpoint_format_non_negative CHECK (checkpoint_format_version >= 0),
  CONSTRAINT conversation_compactions_kind_valid CHECK (kind IN ('manual', 'threshold', 'overflow', 'rewind')),
  CONSTRAINT conversation_compactions_summary_format_non_negative CHECK (summary_format_version >= 0),
  CONSTRAINT conversation_compactions_last_user_pair CHECK (
    (last_user_message_id IS NULL AND last_user_message_sequence IS NULL)
    OR (last_user_message_id IS NOT NULL AND last_user_message_sequence IS NOT NULL)
  ),
  CONSTRAINT conversation_compactions_last_user_within_source CHECK (
    last_user_message_sequence IS NULL OR last_user_message_sequence <= through_message_sequence
  ),
  CONSTRAINT conversation_compactions_model_not_blank CHECK (btrim(resolved_model_name) <> ''),
  CONSTRAINT conversation_compactions_summary_not_blank CHECK (btrim(summary) <> ''),
  CONSTRAINT conversation_compactions_runtime_state_is_object CHECK (jsonb_typeof(runtime_state) = 'object'),
  CONSTRAINT conversation_compactions_runtime_reminder_format_positive CHECK (runtime_reminder_format_version > 0),
  CONSTRAINT conversation_compactions_runtime_reminder_not_blank CHECK (btrim(runtime_reminder) <> ''),
  CONSTRAINT conversation_compactions_tokens_non_negative CHECK (
    (input_tokens IS NULL OR input_tokens >= 0) AND (output_tokens IS NULL OR output_tokens >= 0)
  ),
  CONSTRAINT conversation_compactions_trigger_shape CHECK (
    (kind IN ('threshold', 'overflow') AND trigger_turn_id IS NOT NULL)
    OR (kind NOT IN ('threshold', 'overflow') AND trigger_turn_id IS NULL)
  ),
  CONSTRAINT conversation_compactions_parent_shape CHECK (
    (kind = 'rewind' AND parent_compaction_id IS NOT NULL)
    OR (kind <> 'rewind' AND parent_compaction_id IS NULL)
  ),
  CONSTRAINT conversation_compactions_session_sequence UNIQUE (session_id, sequence),
  CONSTRAINT conversation_compactions_id_session_unique UNIQUE (id, session_id),
  CONSTRAINT conversation_compactions_trigger_turn_fk FOREIGN KEY (trigger_turn_id, session_id)
    REFERENCES turns (id, session_id),
  CONSTRAINT conversation_compactions_parent_fk FOREIGN KEY (parent_compaction_id, session_id)
    REFERENCES conversation_compactions (id, session_id)
);
CREATE INDEX idx_conversation_compactions_session_sequence ON conversation_compactions (session_id, sequence DESC);

CREATE TABLE trace_spans (
  id                  TEXT PRIMARY KEY,
  trace_id            TEXT NOT NULL,
  session_id          TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  turn_id             TEXT NULL,
  parent_span_id      TEXT NULL,
  kind                TEXT NOT NULL,
  name                TEXT NOT NULL,
  status              TEXT NOT NULL,
  model_id            TEXT NULL,
  resolved_model_name TEXT NULL,
  provider_request_id TEXT NULL,
  provider_call_id    TEXT NULL,
  requested_tool_name TEXT NULL,
  resolved_tool_name  TEXT NULL,
  attempt_count       INTEGER NULL,
  input_tokens        BIGINT NULL,
  output_tokens       BIGINT NULL,
  cached_input_tokens BIGINT NULL,
  reasoning_tokens    BIGINT NULL,
  response_message_id TEXT NULL REFERENCES messages(id) ON DELETE SET NULL,
  permission_wait_ms  BIGINT NULL,
  started_at          TIMESTAMPTZ NOT NULL,
  ended_at            TIMESTAMPTZ NULL,
  error_code          TEXT NULL,
  error_message       TEXT NULL,
  attributes          JSONB NOT NULL DEFAULT '{}'::jsonb,
  CONSTRAINT trace_spans_trace_not_blank CHECK (btrim(trace_id) <> ''),
  CONSTRAINT trace_spans_turn_session_fk FOREIGN KEY (turn_id, session_id)
    REFERENCES turns (id, session_id) ON DELETE CASCADE,
  CONSTRAINT trace_spans_kind_valid CHECK (kind IN ('model_call', 'tool_call', 'compaction')),
  CONSTRAINT trace_spans_status_valid CHECK (
    status IN ('running', 'succeeded', 'failed', 'denied', 'cancelled', 'outcome_unknown')
    OR (kind = 'model_call' AND parent_span_id IS NOT NULL
        AND status IN ('degenerate', 'deterministic', 'input_overflow', 'transient', 'timeout'))
  ),
  CONSTRAINT trace_spans_tool_columns_scoped CHECK (
    kind = 'tool_call'
    OR (provider_call_id IS NULL AND requested_tool_name IS NULL
        AND resolved_tool_name IS NULL AND permission_wait_ms IS NULL)
  ),
  CONSTRAINT trace_spans_terminal_time_valid CHECK (
    (status = 'running' AND ended_at IS NULL) OR (status <> 'running' AND ended_at IS NOT NULL)
  ),
  CONSTRAINT trace_spans_end_after_start CHECK (ended_at IS NULL OR ended_at >= started_at),
  CONSTRAINT trace_spans_tokens_non_negative CHECK (
    (input_tokens IS NULL OR input_tokens >= 0) AND (output_tokens IS NULL OR output_tokens >= 0)
    AND (cached_input_tokens IS NULL OR cached_input_tokens >= 0)
    AND (reasoning_tokens IS NULL OR reasoning_tokens >= 0)
  ),
  CONSTRAINT trace_spans_response_message_scoped CHECK (response_message_id IS NULL OR kind = 'model_call'),
  CONSTRAINT trace_spans_attributes_is_object CHECK (jsonb_typeof(attributes) = 'object')
);
CREATE INDEX idx_trace_spans_trace_started ON trace_spans (trace_id, started_at);
CREATE INDEX idx_trace_spans_session_started ON trace_spans (session_id, started_at DESC);
CREATE INDEX idx_trace_spans_turn_started ON trace_spans (turn_id, started_at) WHERE turn_id IS NOT NULL;

CREATE TABLE trace_payloads (
  hash       TEXT PRIMARY KEY,
  body       JSONB NOT NULL,
  byte_size  BIGINT NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  CONSTRAINT trace_payloads_hash_not_blank CHECK (btrim(hash) <> ''),
  CONSTRAINT trace_payloads_byte_size_non_negative CHECK (byte_size >= 0)
);

CREATE TABLE trace_span_payloads (
  span_id            TEXT NOT NULL REFERENCES trace_spans(id) ON DELETE CASCADE,
  slot               TEXT NOT NULL,
  payload_hash       TEXT NOT NULL REFERENCES trace_payloads(hash) ON DELETE RESTRICT,
  truncated          BOOLEAN NOT NULL DEFAULT FALSE,
  original_byte_size BIGINT NULL,
  redacted_count     INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (span_id, slot),
  CONSTRAINT trace_span_payloads_slot_valid CHECK (slot IN ('request', 'system_context', 'tool_definitions', 'response')),
  CONSTRAINT trace_span_payloads_truncation_shape CHECK (
    (truncated = FALSE AND original_byte_size IS NULL)
    OR (truncated = TRUE AND original_byte_size IS NOT NULL AND original_byte_size >= 0)
  ),
  CONSTRAINT trace_span_payloads_redacted_non_negative CHECK (redacted_count >= 0)
);
CREATE INDEX idx_trace_span_payloads_hash ON trace_span_payloads (payload_hash);

CREATE TABLE trace_annotations (
  id         TEXT PRIMARY KEY,
  session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  trace_id   TEXT NOT NULL,
  span_id    TEXT NULL REFERENCES trace_spans(id) ON DELETE CASCADE,
  rating     TEXT NOT NULL,
  note       TEXT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  CONSTRAINT trace_annotations_id_not_blank CHECK (btrim(id) <> ''),
  CONSTRAINT trace_annotations_trace_not_blank CHECK (btrim(trace_id) <> ''),
  CONSTRAINT trace_annotations_rating_valid CHECK (rating IN ('good', 'bad', 'unsure')),
  CONSTRAINT trace_annotations_note_not_blank CHECK (note IS NULL OR btrim(note) <> '')
);
CREATE UNIQUE INDEX uq_trace_annotations_target ON trace_annotations (trace_id, COALESCE(span_id, ''));
CREATE INDEX idx_trace_annotations_session_created ON trace_annotations (session_id, created_at DESC);

CREATE TABLE turn_plans (
  turn_id     TEXT PRIMARY KEY REFERENCES turns(id) ON DELETE CASCADE,
  explanation TEXT,
  steps       JSONB NOT NULL,
  updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
  CONSTRAINT turn_plans_steps_is_array CHECK (jsonb_typeof(steps) = 'array')
);
CREATE INDEX turn_plans_turn_id_idx ON turn_plans (turn_id);
