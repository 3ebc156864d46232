/**
 * @module storage/step-sql
 * The statements of a durable step (issue 14): each fact the runtime writes during a turn is ONE
 * statement with data-modifying CTEs, so it is one round trip and one implicit transaction (no
 * BEGIN/COMMIT round trips), and, on `pg`, a named prepared statement parsed and planned once per
 * connection.
 *
 * The shape every fact statement shares: a `locked` CTE finds the running turn and locks it and its
 * session (`FOR NO KEY UPDATE`, as the old `lockTurn` did: a turn corrected or ended by another
 * writer takes no more writes, and message sequences of a session are allocated under the session's
 * row lock); the writes read from `locked`, so a turn that is not running writes nothing and the
 * statement returns no row.
 *
 * The lease fence (issue 15, `fence.ts`) goes into `locked` as one more condition: the turn's
 * session lease must still carry the token the turn began under (`turns.lease_token`), checked and
 * share-locked in the same statement, so a fenced-off writer finds no row and writes nothing, with
 * no extra round trip. Each fact therefore has two fixed texts (`FactStatement`): `plain`, for a
 * storage without a fence (one process by construction), and `fenced`, whose last parameter is the
 * writing cores' owner ids; each text has its own prepared-statement name.
 *
 * The next message sequence is `MAX + 1` read inside the statement. A statement that had to wait
 * for the session lock reads MAX from its own snapshot, which may miss the row the lock holder just
 * committed; its INSERT then hits `messages_session_sequence` and the whole statement (atomic)
 * fails with 23505, and `SqlSessionStorage` runs it again with a fresh snapshot. Only two writers on
 * one session at once ever see it.
 */
import { fenceSql } from './fence.js';
import { statement, type NamedStatement } from './sql.js';

/** One fact statement in its two fixed texts (see the module header). */
export interface FactStatement {
  /** Without the fence: for a storage no core attached a fence to. */
  readonly plain: NamedStatement;
  /** With the fence: one more parameter after the plain ones, the writing cores' owner ids (`text[]`). */
  readonly fenced: NamedStatement;
}

/** Both texts of a fact; `text` gets the owners' parameter (e.g. `'$8'`) for the fenced one, null for the plain one. */
function factStatement(name: string, ownersParam: string, text: (owners: string | null) => string): FactStatement {
  return Object.freeze({ plain: statement(name, text(null)), fenced: statement(`${name}_fenced`, text(ownersParam)) });
}

/** The fence of a turn-keyed write on the turn `t`: its session's lease still carries the turn's token. */
function turnFence(owners: string | null): string {
  return owners ? ` AND ${fenceSql({ session: 't.session_id', token: 't.lease_token', owners })}` : '';
}

export const MESSAGE_COLUMNS = `id, session_id, turn_id, sequence, role, content, message_kind, provider_call_id, tool_name, created_at`;

/**
 * "The turn `t` is running", written so that the planner cannot answer it with the partial index
 * `uq_turns_one_running_per_session` (predicate `status = 'running'`). A prepared statement runs on
 * a generic plan planned once per connection, often while the turns table is new and has no
 * statistics; that plan then found the turn by scanning every running turn of every session
 * through the partial index and filtering on the id (measured: 299 rows read and dropped for one
 * fact with 300 sessions running). `(…) IS TRUE` is the same test for a NOT NULL column, but it does
 * not match the index predicate, so the turn is found by its id. (docs/decisions.md, "The Postgres
 * side of a step".)
 */
const TURN_RUNNING = `(t.status = 'running') IS TRUE`;

/**
 * The running turn ($1), locked with its session: the seam of every fact write, and of the lease
 * fence when `owners` names the parameter holding the owner ids.
 */
function lockedTurn(owners: string | null): string {
  return `locked AS (
    SELECT t.session_id FROM turns t JOIN sessions s ON s.id = t.session_id
    WHERE t.id = $1 AND ${TURN_RUNNING}${turnFence(owners)}
    FOR NO KEY UPDATE
  )`;
}

/**
 * One message ($2..$7) at the session's next sequence, for the turn in `locked`. It returns only what
 * the statement decided (`STORED_COLUMNS`): the caller has the rest, and sending the content back
 * cost the server its jsonb output and the client its parse, on every fact.
 */
const INSERT_ONE_MESSAGE = `message AS (
    INSERT INTO messages (id, session_id, turn_id, sequence, role, content, message_kind, provider_call_id, tool_name)
    SELECT $2, locked.session_id, $1,
      (SELECT COALESCE(MAX(m.sequence), 0) + 1 FROM messages m WHERE m.session_id = locked.session_id),
      $3, $4::jsonb, $5, $6, $7
    FROM locked
    RETURNING session_id, sequence, created_at
  )`;

/**
 * Before the provider call (reference §9.3): the logical call count (GREATEST) and one more
 * submission, committed and flushed before the call like every fact. Only for a call no fact
 * reserved (`RESERVE_MODEL_CALL`, `BEGIN_TURN`'s $9): a resubmission, or a call after a result the
 * tool-call machine recorded. (It once skipped its flush
 * wait, on the grounds that the next fact's flush covers it; but when the database itself crashes
 * between the two and the runtime carries on, the restarted server has the later fact and not the
 * counter: an assistant message with no model call counted. `postgres-outage-soak` found it.)
 */
export const RECORD_MODEL_CALL_START = factStatement(
  'model_call_start',
  '$3',
  (owners) => `WITH counted AS (
    UPDATE turns t SET model_call_count = GREATEST(model_call_count, $2),
      model_submission_count = model_submission_count + 1, updated_at = now()
    WHERE t.id = $1 AND ${TURN_RUNNING}${turnFence(owners)}
    RETURNING 1
  )
  SELECT (SELECT count(*) FROM counted)::int AS counted`,
);

/**
 * The repeat of `RECORD_MODEL_CALL_START` after an unknown outcome (integrity-outage): keyed by the
 * submission count the turn had before the call ($3, as the storage object's own facts left it), so
 * that a first attempt that committed is not counted twice. It counts only while the count is still
 * $3; `recorded` says the count is already $3 + 1 on the running turn (the first attempt's commit).
 * Never on a step's path: only a lost answer to a model-call start runs it.
 */
export const RECORD_MODEL_CALL_START_REPEAT = factStatement(
  'model_call_start_repeat',
  '$4',
  (owners) => `WITH counted AS (
    UPDATE turns t SET model_call_count = GREATEST(model_call_count, $2),
      model_submission_count = model_submission_count + 1, updated_at = now()
    WHERE t.id = $1 AND ${TURN_RUNNING} AND t.model_submission_count = $3::int${turnFence(owners)}
    RETURNING 1
  )
  SELECT (SELECT count(*) FROM counted)::int AS counted,
    (SELECT count(*) FROM turns t WHERE t.id = $1 AND ${TURN_RUNNING} AND t.model_submission_count = $3::int + 1
       AND t.model_call_count >= $2${turnFence(owners)})::int AS recorded`,
);

/**
 * The assistant message with its tool calls, its tokens and tool call count on the turn: one
 * statement. With $13 true (a final answer the Turn knows ends the turn) the same UPDATE ends the
 * turn as `completed`, with $14 its unfinished plan steps, as `finishTurn` writes it: the answer and
 * the end commit together, and the end costs no round trip of its own (docs/decisions.md, "The end
 * of a turn in its final answer's statement").
 */
export const COMMIT_ASSISTANT_MESSAGE = factStatement(
  'commit_assistant',
  '$15',
  (owners) => `WITH ${lockedTurn(owners)},
  counted AS (
    UPDATE turns SET
      input_tokens = COALESCE(input_tokens, 0) + $8, output_tokens = COALESCE(output_tokens, 0) + $9,
      cached_input_tokens = COALESCE(cached_input_tokens, 0) + $10,
      reasoning_tokens = COALESCE(reasoning_tokens, 0) + $11,
      tool_call_count = tool_call_count + $12, updated_at = now(),
      status = CASE WHEN $13::boolean THEN 'completed' ELSE status END,
      ended_at = CASE WHEN $13::boolean THEN GREATEST(now(), started_at) ELSE ended_at END,
      plan_unfinished_step_count = CASE WHEN $13::boolean THEN $14::int ELSE plan_unfinished_step_count END
    WHERE id = $1 AND EXISTS (SELECT 1 FROM locked)
  ),
  ${INSERT_ONE_MESSAGE}
  SELECT * FROM message`,
);

/**
 * The counters of the next model call ($8, 0 for none) reserved by the fact before it, for the turn
 * in `locked`: the same two counters `RECORD_MODEL_CALL_START` writes, in the same statement (and so
 * the same flushed commit) as the fact, so the provider call that follows needs no commit of its
 * own. `$8 > 0` is a one-time filter: with 0 the UPDATE reads and writes nothing.
 * (docs/decisions.md, "The durable step's writes".)
 */
const RESERVE_MODEL_CALL = `reserved AS (
    UPDATE turns SET model_call_count = GREATEST(model_call_count, $8::int),
      model_submission_count = model_submission_count + 1, updated_at = now()
    WHERE id = $1 AND $8::int > 0 AND EXISTS (SELECT 1 FROM locked)
  )`;

/**
 * One tool result: one statement. With $8 > 0 (the Turn knows a model call is next: the last result
 * of the batch, no stop asked, under the call limit) it reserves model call $8 as well.
 */
export const COMMIT_TOOL_RESULT = factStatement(
  'commit_tool_result',
  '$9',
  (owners) => `WITH ${lockedTurn(owners)},
  ${RESERVE_MODEL_CALL},
  ${INSERT_ONE_MESSAGE}
  SELECT * FROM message`,
);

/** The plan row ($8..$10) and its success tool result (reference §6.6): one statement. */
export const COMMIT_PLAN_UPDATE = factStatement(
  'commit_plan',
  '$11',
  (owners) => `WITH ${lockedTurn(owners)},
  plan AS (
    INSERT INTO turn_plans (turn_id, explanation, steps, updated_at)
    SELECT $1, $8, $9::jsonb, $10 FROM locked
    ON CONFLICT (turn_id) DO UPDATE SET explanation = EXCLUDED.explanation, steps = EXCLUDED.steps,
      updated_at = EXCLUDED.updated_at
  ),
  ${INSERT_ONE_MESSAGE}
  SELECT * FROM message`,
);

/** The rows of several messages, one JSON parameter; `ord` keeps their order. */
const MESSAGE_RECORDSET = `jsonb_to_recordset($2::jsonb) AS r(ord integer, id text, role text, content jsonb, message_kind text,
      provider_call_id text, tool_name text)`;

/**
 * Contextual messages ($2, a JSON array) with `ON CONFLICT (id) DO NOTHING`: those whose id is
 * already stored are left out before numbering, so the sequences stay dense.
 */
export const APPEND_TURN_MESSAGES = factStatement(
  'append_messages',
  '$3',
  (owners) => `WITH ${lockedTurn(owners)},
  fresh AS (
    SELECT r.*, row_number() OVER (ORDER BY r.ord) AS n FROM ${MESSAGE_RECORDSET}
    WHERE NOT EXISTS (SELECT 1 FROM messages e WHERE e.id = r.id)
  ),
  message AS (
    INSERT INTO messages (id, session_id, turn_id, sequence, role, content, message_kind, provider_call_id, tool_name)
    SELECT fresh.id, locked.session_id, $1,
      (SELECT COALESCE(MAX(m.sequence), 0) FROM messages m WHERE m.session_id = locked.session_id) + fresh.n,
      fresh.role, fresh.content, fresh.message_kind, fresh.provider_call_id, fresh.tool_name
    FROM locked, fresh
    ON CONFLICT (id) DO NOTHING
    RETURNING ${MESSAGE_COLUMNS}
  )
  SELECT * FROM message ORDER BY sequence`,
);

/**
 * Start Turn (reference §9.3) in one statement: the session ($2) locked, the turn row at the next
 * turn sequence, its messages ($8, a JSON array) in order, `last_turn_at`. A second running turn
 * hits `uq_turns_one_running_per_session` and nothing is written. $9 = 1 reserves the first model
 * call (its counters are written with the row, as `RESERVE_MODEL_CALL` does for a tool result).
 *
 * Fenced, it is session-keyed: $10 the owner ids, $11 the core's token for the session, checked on
 * the session's lease in `locked` and written as the turn's `lease_token`, which every later fact
 * of the turn is fenced by.
 */
export const BEGIN_TURN = factStatement(
  'begin_turn',
  '$10',
  (owners) => `WITH locked AS (
    SELECT s.id FROM sessions s
    WHERE s.id = $2${owners ? ` AND ${fenceSql({ session: 's.id', token: '$11::bigint', owners })}` : ''}
    FOR NO KEY UPDATE
  ),
  turn AS (
    INSERT INTO turns (id, session_id, client_request_id, sequence, model_id, resolved_provider_id,
      resolved_model_name, app_version, status, model_call_count, model_submission_count${owners ? ', lease_token' : ''})
    SELECT $1, locked.id, $3, (SELECT COALESCE(MAX(t.sequence), 0) + 1 FROM turns t WHERE t.session_id = locked.id),
      $4, $5, $6, $7, 'running', $9::int, $9::int${owners ? ', $11::bigint' : ''}
    FROM locked
    RETURNING id, session_id
  ),
  touched AS (
    UPDATE sessions SET last_turn_at = now(), updated_at = now() WHERE id = (SELECT session_id FROM turn)
  ),
  message AS (
    INSERT INTO messages (id, session_id, turn_id, sequence, role, content, message_kind, provider_call_id, tool_name)
    SELECT r.id, turn.session_id, turn.id,
      (SELECT COALESCE(MAX(m.sequence), 0) FROM messages m WHERE m.session_id = turn.session_id) + r.ord,
      r.role, r.content, r.message_kind, r.provider_call_id, r.tool_name
    FROM turn, jsonb_to_recordset($8::jsonb) AS r(ord integer, id text, role text, content jsonb, message_kind text,
      provider_call_id text, tool_name text)
    RETURNING ${MESSAGE_COLUMNS}
  )
  SELECT * FROM message ORDER BY sequence`,
);

/** Diagnosis after a fact statement wrote nothing: why the turn took no write. */
export const TURN_STATUS = statement('turn_status', `SELECT status FROM turns WHERE id = $1`);

/**
 * The same diagnosis with a fence attached ($2 the owner ids): the turn's status and whether its
 * lease still carries its token (`owned` false: the fence refused the write, `ownership_lost`).
 */
export const TURN_OWNERSHIP = statement(
  'turn_ownership',
  `SELECT t.session_id, t.status, t.lease_token, ${fenceSql({ session: 't.session_id', token: 't.lease_token', owners: '$2' })} AS owned
  FROM turns t WHERE t.id = $1`,
);

/**
 * Diagnosis after the fenced `BEGIN_TURN` returned fewer rows than it had messages: whether the
 * session ($1) exists, whether the turn ($4) was stored (a turn without messages), and whether the
 * session's lease still carries the core's token ($3, owners $2).
 */
export const SESSION_OWNERSHIP = statement(
  'session_ownership',
  `SELECT EXISTS (SELECT 1 FROM sessions WHERE id = $1) AS found, EXISTS (SELECT 1 FROM turns WHERE id = $4) AS began,
    ${fenceSql({ session: '$1', token: '$3::bigint', owners: '$2' })} AS owned`,
);

/**
 * A trace batch in one statement (`WRITE_TRACE_BATCH`): spans, the ends of spans stored earlier,
 * payload bodies (deduplicated by hash) and their mappings. The foreign keys between them are
 * checked at the end of the statement, when every CTE has run.
 *
 * The trace is not a durability guarantee (reference §11.1: a bounded, lossy queue): the batch's
 * transaction commits without waiting for its WAL flush (`synchronous_commit = off` for this
 * transaction only). A crash may lose the last few hundred milliseconds of spans, as a full queue
 * would; it never touches a fact, and it never makes a fact wait for a flush of its own.
 */
const SPAN_RECORD = `AS r(id text, trace_id text, session_id text, turn_id text, parent_span_id text,
      kind text, name text, status text, model_id text, resolved_model_name text, provider_request_id text,
      provider_call_id text, requested_tool_name text, resolved_tool_name text, attempt_count integer,
      input_tokens bigint, output_tokens bigint, cached_input_tokens bigint, reasoning_tokens bigint,
      response_message_id text, permission_wait_ms bigint, started_at timestamptz, ended_at timestamptz,
      error_code text, error_message text, attributes jsonb)`;
const SPAN_INSERT = `INSERT INTO trace_spans (id, trace_id, session_id, turn_id, parent_span_id, kind, name, status, model_id,
      resolved_model_name, provider_request_id, provider_call_id, requested_tool_name, resolved_tool_name,
      attempt_count, input_tokens, output_tokens, cached_input_tokens, reasoning_tokens, response_message_id,
      permission_wait_ms, started_at, ended_at, error_code, error_message, attributes)
    SELECT id, trace_id, session_id, turn_id, parent_span_id, kind, name, status, model_id,
      resolved_model_name, provider_request_id, provider_call_id, requested_tool_name, resolved_tool_name,
      attempt_count, input_tokens, output_tokens, cached_input_tokens, reasoning_tokens, response_message_id,
      permission_wait_ms, started_at, ended_at, error_code, error_message, COALESCE(attributes, '{}'::jsonb)`;
/**
 * What an ended span sets over its stored start, read from the row `src` (`EXCLUDED` in the
 * one-by-one upsert, `r` in the batch): names and ids only when the end knows them, attributes merged.
 */
function spanEndAssignments(src: 'EXCLUDED' | 'r'): string {
  return `status = ${src}.status, ended_at = ${src}.ended_at,
      resolved_model_name = COALESCE(${src}.resolved_model_name, trace_spans.resolved_model_name),
      provider_request_id = COALESCE(${src}.provider_request_id, trace_spans.provider_request_id),
      resolved_tool_name = COALESCE(${src}.resolved_tool_name, trace_spans.resolved_tool_name),
      attempt_count = ${src}.attempt_count, input_tokens = ${src}.input_tokens,
      output_tokens = ${src}.output_tokens, cached_input_tokens = ${src}.cached_input_tokens,
      reasoning_tokens = ${src}.reasoning_tokens, response_message_id = ${src}.response_message_id,
      permission_wait_ms = ${src}.permission_wait_ms, error_code = ${src}.error_code,
      error_message = ${src}.error_message, attributes = trace_spans.attributes || COALESCE(${src}.attributes, '{}'::jsonb)`;
}
const SPAN_END_UPDATE = `UPDATE SET ${spanEndAssignments('EXCLUDED')}`;

/** One statement per table for the one-by-one path (a savepoint per signal); `isEnd` upserts. */
export const UPSERT_SPANS_START = statement(
  'span_start',
  `${SPAN_INSERT} FROM jsonb_to_recordset($1::jsonb) ${SPAN_RECORD} ON CONFLICT (id) DO NOTHING`,
);
export const UPSERT_SPANS_END = statement(
  'span_end',
  `${SPAN_INSERT} FROM jsonb_to_recordset($1::jsonb) ${SPAN_RECORD} ON CONFLICT (id) DO ${SPAN_END_UPDATE}`,
);

/**
 * The batch statement. The writer knows which spans it already stored as `running` (an earlier
 * batch of this process wrote their start, `SqlTraceStore`), so the statement tests nothing row by
 * row: every other span ($1, started or ended, a span that starts and ends within one batch being
 * one row) and every payload mapping ($5) is a plain insert, without `ON CONFLICT` (a speculative
 * insertion writes one more WAL record per row) and without a `NOT EXISTS` probe (the insert's own
 * unique check probes the same index). A row that is already there after all (another process, a
 * batch whose commit was reported lost) fails the whole statement, and the batch goes through the
 * one-by-one path, whose upserts keep reference §11.1's semantics.
 *
 * The ends of stored spans ($2, ids in $3) update their row, found through the primary key (`= ANY`:
 * a join of the whole table against the recordset was a sequential scan of trace_spans on a plan
 * made while the table was small); an end whose row is not there after all (the start's write was
 * lost) is inserted whole (`ended_late`). Payload bodies ($4) are sent only when this process has
 * not written their hash lately and keep their `NOT EXISTS` test: bodies are shared across
 * sessions and processes. (docs/decisions.md, "The trace batch's shape".)
 *
 * The ids go through `ARRAY(SELECT unnest($3))`, a sub-select the planner does not fold, so that a
 * custom plan (which sees $3 as a constant, most often `{}`) estimates the ends' index scan as the
 * generic plan does (ten ids). With `= ANY ($3)` the custom plans came out cheaper than the generic
 * one on a database with older spans (pkey index scan of 0 or 1 id against 10), so Postgres kept
 * planning the batch at every call (docs/benchmarks.md, "Perf-pgside").
 */
export const WRITE_TRACE_BATCH = statement(
  'trace_batch',
  `WITH spans AS (
    ${SPAN_INSERT} FROM jsonb_to_recordset($1::jsonb) ${SPAN_RECORD}
  ),
  ended_stored AS (
    UPDATE trace_spans SET ${spanEndAssignments('r')}
    FROM jsonb_to_recordset($2::jsonb) ${SPAN_RECORD}
    WHERE trace_spans.id = ANY (ARRAY(SELECT unnest($3::text[]))) AND trace_spans.id = r.id
    RETURNING trace_spans.id
  ),
  ended_late AS (
    ${SPAN_INSERT} FROM jsonb_to_recordset($2::jsonb) ${SPAN_RECORD}
    WHERE NOT EXISTS (SELECT 1 FROM ended_stored u WHERE u.id = r.id)
  ),
  bodies AS (
    INSERT INTO trace_payloads (hash, body, byte_size)
    SELECT hash, body::jsonb, byte_size FROM jsonb_to_recordset($4::jsonb) AS r(hash text, body text, byte_size bigint)
    WHERE NOT EXISTS (SELECT 1 FROM trace_payloads e WHERE e.hash = r.hash)
  ),
  mappings AS (
    INSERT INTO trace_span_payloads (span_id, slot, payload_hash, truncated, original_byte_size)
    SELECT span_id, slot, payload_hash, truncated, original_byte_size
    FROM jsonb_to_recordset($5::jsonb) AS r(span_id text, slot text, payload_hash text, truncated boolean, original_byte_size bigint)
  )
  SELECT set_config('synchronous_commit', 'off', true) AS commit_mode`,
);

/**
 * The read-backs of a fact whose first attempt's outcome was unknown (`sql/outcome-unknown.ts`): run
 * only on that path, after the repeat found the fact's key taken or its turn no longer running, never
 * on a step's hot path. A message by its id ($1), with whether its content equals $2.
 */
export const MESSAGE_READ_BACK = statement(
  'message_read_back',
  `SELECT session_id, turn_id, sequence, created_at, role, message_kind, provider_call_id, tool_name,
    content = $2::jsonb AS same_content
  FROM messages WHERE id = $1`,
);

/** The messages of the turn $1 among the ids $2, in order (a begin or contextual messages whose reply was lost). */
export const TURN_MESSAGES_READ_BACK = statement(
  'turn_messages_read_back',
  `SELECT ${MESSAGE_COLUMNS} FROM messages WHERE turn_id = $1 AND id = ANY ($2::text[]) ORDER BY sequence`,
);

/** A turn's identity and end ($1): whether a begin or an end whose reply was lost committed. */
export const TURN_READ_BACK = statement(
  'turn_read_back',
  `SELECT session_id, client_request_id, status, error_code, error_message, plan_unfinished_step_count FROM turns WHERE id = $1`,
);
