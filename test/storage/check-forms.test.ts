/**
 * The CHECK constraints that migration 0009 rewrote in cheaper forms (issue 14, branch perf-pgcpu)
 * keep their names and their rules: on both backends, each installed expression is evaluated beside
 * the expression the constraint had before (reference §9.1, migrations 0001-0003) over the same grid
 * of edge values of its columns, and no row is rejected by one and admitted by the other (a CHECK
 * rejects a row only when its expression is FALSE; NULL passes). The violations still reach the
 * tables under the constraints' names, and no stored CHECK builds an array per statement any more.
 * The same migration stores large message contents and payload bodies with lz4 where the server has
 * it (Postgres), and is skipped there on PGlite, which has not.
 */
import { describe, expect, it } from 'vitest';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { backends, useBackend } from '../support/databases.js';

/** Each rewritten constraint's expression as migrations 0001-0003 wrote it. */
const BEFORE: Record<string, string> = {
  turns_status_valid: `status IN ('running', 'completed', 'failed', 'cancelled', 'interrupted')`,
  turns_counts_non_negative: `model_call_count >= 0 AND model_submission_count >= 0 AND tool_call_count >= 0`,
  turns_tokens_non_negative: `(input_tokens IS NULL OR input_tokens >= 0) AND (output_tokens IS NULL OR output_tokens >= 0)
    AND (cached_input_tokens IS NULL OR cached_input_tokens >= 0) AND (reasoning_tokens IS NULL OR reasoning_tokens >= 0)`,
  turns_terminal_time_valid: `(status = 'running' AND ended_at IS NULL) OR (status <> 'running' AND ended_at IS NOT NULL)`,
  turns_end_after_start: `ended_at IS NULL OR ended_at >= started_at`,
  turns_plan_unfinished_non_negative: `plan_unfinished_step_count IS NULL OR plan_unfinished_step_count >= 0`,
  messages_role_valid: `role IN ('system', 'user', 'assistant', 'tool')`,
  messages_kind_valid: `message_kind IN ('normal', 'skill_instruction', 'agent_message', 'world_state')`,
  messages_tool_identity_valid: `(role = 'tool' AND provider_call_id IS NOT NULL AND btrim(provider_call_id) <> ''
      AND tool_name IS NOT NULL AND btrim(tool_name) <> '')
    OR (role <> 'tool' AND provider_call_id IS NULL AND tool_name IS NULL)`,
  sessions_title_not_blank: `title IS NULL OR btrim(title) <> ''`,
  sessions_status_valid: `status IN ('active', 'archived')`,
  sessions_subagent_fields_consistent: `(parent_session_id IS NULL AND task_name IS NULL AND agent_role IS NULL)
    OR (parent_session_id IS NOT NULL AND task_name IS NOT NULL AND agent_role IS NOT NULL)`,
  sessions_task_name_format: `task_name IS NULL OR task_name ~ '^[a-z][a-z0-9_]{0,47}$'`,
  sessions_spawn_not_self: `parent_session_id IS NULL OR parent_session_id <> id`,
  sessions_tool_result_pruned_through_positive: `tool_result_pruned_through_sequence IS NULL OR tool_result_pruned_through_sequence > 0`,
  sessions_sandbox_mode_valid: `sandbox_mode IN ('auto', 'accept_edits')`,
  sessions_sandbox_mode_origin_valid: `sandbox_mode_origin IN ('session_default', 'user_toggle', 'inherited')`,
  sessions_client_settings_object: `client_settings IS NULL OR jsonb_typeof(client_settings) = 'object'`,
  trace_spans_kind_valid: `kind IN ('model_call', 'tool_call', 'compaction')`,
  trace_spans_status_valid: `status IN ('running', 'succeeded', 'failed', 'denied', 'cancelled', 'outcome_unknown')
    OR (kind = 'model_call' AND parent_span_id IS NOT NULL
        AND status IN ('degenerate', 'deterministic', 'input_overflow', 'transient', 'timeout'))`,
  trace_spans_tool_columns_scoped: `kind = 'tool_call'
    OR (provider_call_id IS NULL AND requested_tool_name IS NULL AND resolved_tool_name IS NULL AND permission_wait_ms IS NULL)`,
  trace_spans_terminal_time_valid: `(status = 'running' AND ended_at IS NULL) OR (status <> 'running' AND ended_at IS NOT NULL)`,
  trace_spans_end_after_start: `ended_at IS NULL OR ended_at >= started_at`,
  trace_spans_tokens_non_negative: `(input_tokens IS NULL OR input_tokens >= 0) AND (output_tokens IS NULL OR output_tokens >= 0)
    AND (cached_input_tokens IS NULL OR cached_input_tokens >= 0) AND (reasoning_tokens IS NULL OR reasoning_tokens >= 0)`,
  trace_span_payloads_slot_valid: `slot IN ('request', 'system_context', 'tool_definitions', 'response')`,
  trace_span_payloads_truncation_shape: `(truncated = FALSE AND original_byte_size IS NULL)
    OR (truncated = TRUE AND original_byte_size IS NOT NULL AND original_byte_size >= 0)`,
};

const quote = (s: string) => `'${s.replace(/'/g, "''")}'`;

/** Edge values of a column of this type, and every string literal of the old expression for text. */
function valuesOf(type: string, notNull: boolean, literals: string[]): string[] {
  const base: Record<string, string[]> = {
    text: ['', ' ', '  x ', 'x', 'a', 'A', 'a_1', 'a'.repeat(48), 'a'.repeat(49), '1a', ...literals].map(quote),
    integer: ['-1', '0', '1', '2'],
    bigint: ['-1', '0', '1', '2'],
    'timestamp with time zone': [`'2026-01-01T00:00:00Z'`, `'2026-01-01T00:00:01Z'`, `'2026-01-02T00:00:00Z'`],
    boolean: ['true', 'false'],
    jsonb: [`'[]'`, `'{}'`, `'{"a":1}'`, `'"s"'`, `'1'`, `'null'`],
  };
  const values = base[type];
  if (!values) throw new Error(`no edge values for type ${type}`);
  return notNull ? values : ['NULL', ...values];
}

interface Installed {
  table: string;
  expr: string;
  columns: Array<{ name: string; type: string; notNull: boolean }>;
}

async function installed(storage: SqlSessionStorage, name: string): Promise<Installed> {
  const { rows } = await storage.db.query<{ table: string; expr: string; columns: Array<{ name: string; type: string; not_null: boolean }> }>(
    `SELECT c.conrelid::regclass::text AS table, pg_get_expr(c.conbin, c.conrelid) AS expr,
       (SELECT json_agg(json_build_object('name', a.attname, 'type', format_type(a.atttypid, NULL), 'not_null', a.attnotnull) ORDER BY a.attnum)
        FROM pg_attribute a WHERE a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)) AS columns
     FROM pg_constraint c WHERE c.conname = $1 AND c.contype = 'c' AND c.connamespace = 'public'::regnamespace`,
    [name],
  );
  expect(rows, `constraint ${name} exists once`).toHaveLength(1);
  const row = rows[0]!;
  return { table: row.table, expr: row.expr, columns: row.columns.map((c) => ({ name: c.name, type: c.type, notNull: c.not_null })) };
}

describe.each(backends)('CHECK constraints in cheaper forms ($name)', (backend) => {
  let storage: SqlSessionStorage;
  useBackend(backend, (s) => (storage = s));

  it('every rewritten constraint keeps its name and admits exactly the rows its old expression admitted', async () => {
    for (const [name, before] of Object.entries(BEFORE)) {
      const now = await installed(storage, name);
      const literals = [...before.matchAll(/'([^']*)'/g)].map((m) => m[1]!).filter((l) => !l.startsWith('^'));
      const grid = now.columns
        .map((c) => `CROSS JOIN unnest(ARRAY[${valuesOf(c.type, c.notNull, literals).join(', ')}]::${c.type}[]) AS "g_${c.name}"("${c.name}")`)
        .join(' ');
      const { rows } = await storage.db.query<{ total: number; rejected: number; differ: number }>(
        `SELECT count(*)::int AS total, count(*) FILTER (WHERE NOT COALESCE((${before}), TRUE))::int AS rejected,
           count(*) FILTER (WHERE COALESCE((${before}), TRUE) IS DISTINCT FROM COALESCE((${now.expr}), TRUE))::int AS differ
         FROM (SELECT 1) AS one ${grid}`,
      );
      const { total, rejected, differ } = rows[0]!;
      // The grid holds rows the rule rejects and rows it admits, so a wrong form shows as a difference.
      expect({ name, differ, someRejected: rejected > 0, someAdmitted: rejected < total }).toEqual({ name, differ: 0, someRejected: true, someAdmitted: true });
    }
  });

  it('no stored CHECK of the step tables builds an array per statement (an IN list is one constant)', async () => {
    const { rows } = await storage.db.query<{ conname: string }>(
      `SELECT conname FROM pg_constraint WHERE contype = 'c' AND connamespace = 'public'::regnamespace
         AND conrelid::regclass::text IN ('turns', 'messages', 'sessions', 'trace_spans', 'trace_span_payloads')
         AND conbin::text LIKE '%{ARRAYEXPR%'`,
    );
    expect(rows.map((r) => r.conname)).toEqual([]);
  });

  it('the rewritten rules are enforced on the tables, under their names', async () => {
    const id = `cf_${backend.name}_${Date.now()}`;
    const reject = (sql: string, params: unknown[], constraint: string) =>
      expect(storage.db.query(sql, params)).rejects.toMatchObject({ code: '23514', message: expect.stringContaining(constraint) });
    await storage.db.query(`INSERT INTO sessions (id, working_directory) VALUES ($1, '/w')`, [id]);
    await reject(`UPDATE sessions SET title = '  ' WHERE id = $1`, [id], 'sessions_title_not_blank');
    await reject(`UPDATE sessions SET task_name = 'x' WHERE id = $1`, [id], 'sessions_subagent_fields_consistent');
    await reject(`UPDATE sessions SET status = 'gone' WHERE id = $1`, [id], 'sessions_status_valid');
    await reject(`UPDATE sessions SET tool_result_pruned_through_sequence = 0 WHERE id = $1`, [id], 'sessions_tool_result_pruned_through_positive');
    await reject(`UPDATE sessions SET client_settings = '[]' WHERE id = $1`, [id], 'sessions_client_settings_object');
    await storage.db.query(
      `INSERT INTO turns (id, session_id, client_request_id, sequence, resolved_provider_id, resolved_model_name, app_version, status)
       VALUES ($1, $2, 'r', 1, 'p', 'm', 'v', 'running')`,
      [`${id}_t`, id],
    );
    const turn = [`${id}_t`];
    await reject(`UPDATE turns SET status = 'done' WHERE id = $1`, turn, 'turns_status_valid');
    await reject(`UPDATE turns SET status = 'completed' WHERE id = $1`, turn, 'turns_terminal_time_valid');
    await reject(`UPDATE turns SET ended_at = now() WHERE id = $1`, turn, 'turns_terminal_time_valid');
    await reject(`UPDATE turns SET status = 'completed', ended_at = started_at - interval '1 second' WHERE id = $1`, turn, 'turns_end_after_start');
    await reject(`UPDATE turns SET tool_call_count = -1 WHERE id = $1`, turn, 'turns_counts_non_negative');
    await reject(`UPDATE turns SET input_tokens = 5, reasoning_tokens = -1 WHERE id = $1`, turn, 'turns_tokens_non_negative');
    await reject(`UPDATE turns SET plan_unfinished_step_count = -1 WHERE id = $1`, turn, 'turns_plan_unfinished_non_negative');
    const message = (role: string, callId: string | null, tool: string | null, kind = 'normal') =>
      reject(
        `INSERT INTO messages (id, session_id, turn_id, sequence, role, content, message_kind, provider_call_id, tool_name)
         VALUES ($1, $2, $3, 1, $4, '[]', $5, $6, $7)`,
        [`${id}_m`, id, `${id}_t`, role, kind, callId, tool],
        role === 'robot' ? 'messages_role_valid' : kind !== 'normal' ? 'messages_kind_valid' : 'messages_tool_identity_valid',
      );
    await message('robot', null, null);
    await message('user', null, null, 'aside');
    await message('tool', null, 'echo');
    await message('tool', ' ', 'echo');
    await message('tool', 'call_1', '');
    await message('assistant', 'call_1', null);
    const span = (status: string, extra: Record<string, unknown>, constraint: string) => {
      const columns = { id: `${id}_s`, trace_id: 'tr', session_id: id, kind: 'model_call', name: 'n', status, started_at: '2026-01-01T00:00:00Z', ...extra };
      const keys = Object.keys(columns);
      return reject(
        `INSERT INTO trace_spans (${keys.join(', ')}) VALUES (${keys.map((_, i) => `$${i + 1}`).join(', ')})`,
        Object.values(columns),
        constraint,
      );
    };
    await span('transient', {}, 'trace_spans_status_valid');
    await span('running', { kind: 'guess' }, 'trace_spans_kind_valid');
    await span('running', { provider_call_id: 'c' }, 'trace_spans_tool_columns_scoped');
    await span('succeeded', {}, 'trace_spans_terminal_time_valid');
    await span('succeeded', { ended_at: '2025-12-31T00:00:00Z' }, 'trace_spans_end_after_start');
    await span('running', { output_tokens: -3 }, 'trace_spans_tokens_non_negative');
  });

  it('migration 0009 applies on a database that holds rows of every rewritten table', async () => {
    const id = `cfm_${backend.name}_${Date.now()}`;
    await storage.db.query(`INSERT INTO sessions (id, working_directory, title, client_settings) VALUES ($1, '/w', 'kept', '{}')`, [id]);
    await storage.db.query(
      `INSERT INTO sessions (id, working_directory, parent_session_id, task_name, agent_role) VALUES ($1, '/w', $2, 'child_task', 'explorer')`,
      [`${id}_c`, id],
    );
    await storage.db.query(
      `INSERT INTO turns (id, session_id, client_request_id, sequence, resolved_provider_id, resolved_model_name, app_version, status,
         ended_at, input_tokens, model_call_count, model_submission_count, plan_unfinished_step_count)
       VALUES ($1, $2, 'r', 1, 'p', 'm', 'v', 'completed', now(), 12, 1, 1, 0)`,
      [`${id}_t`, id],
    );
    await storage.db.query(
      `INSERT INTO messages (id, session_id, turn_id, sequence, role, content, provider_call_id, tool_name)
       VALUES ($1, $2, $3, 1, 'tool', '[]', 'call_1', 'echo'), ($4, $2, $3, 2, 'assistant', '[]', NULL, NULL)`,
      [`${id}_m1`, id, `${id}_t`, `${id}_m2`],
    );
    await storage.db.query(
      `INSERT INTO trace_spans (id, trace_id, session_id, turn_id, parent_span_id, kind, name, status, started_at, ended_at)
       VALUES ($1, 'tr', $2, $3, 'p', 'model_call', 'n', 'transient', now(), now())`,
      [`${id}_s`, id, `${id}_t`],
    );
    await storage.db.query(`INSERT INTO trace_payloads (hash, body, byte_size) VALUES ($1, '{}', 2)`, [`${id}_h`]);
    await storage.db.query(
      `INSERT INTO trace_span_payloads (span_id, slot, payload_hash, truncated, original_byte_size) VALUES ($1, 'request', $2, TRUE, 10)`,
      [`${id}_s`, `${id}_h`],
    );
    const migration = '0009_check_forms_and_lz4';
    await storage.db.query('DELETE FROM openwork_migrations WHERE id = $1', [migration]);
    const report = await storage.migrate();
    expect(report.applied).toEqual([migration]);
    const { rows } = await storage.db.query<{ n: number }>(
      `SELECT (SELECT count(*) FROM sessions WHERE id LIKE $1) + (SELECT count(*) FROM turns WHERE id LIKE $1)
         + (SELECT count(*) FROM messages WHERE id LIKE $1) + (SELECT count(*) FROM trace_span_payloads WHERE span_id LIKE $1) AS n`,
      [`${id}%`],
    );
    expect(Number(rows[0]!.n)).toBe(6);
  });

  it('large message contents and payload bodies are compressed with lz4 where the server has it (not PGlite)', async () => {
    const { rows: methods } = await storage.db.query<{ col: string; method: string }>(
      `SELECT attrelid::regclass::text || '.' || attname AS col, attcompression::text AS method FROM pg_attribute
       WHERE (attrelid, attname) IN (('messages'::regclass, 'content'), ('trace_payloads'::regclass, 'body')) ORDER BY 1`,
    );
    const lz4 = backend.name === 'postgres';
    expect(methods).toEqual([
      { col: 'messages.content', method: lz4 ? 'l' : '' },
      { col: 'trace_payloads.body', method: lz4 ? 'l' : '' },
    ]);
    const id = `cfz_${backend.name}_${Date.now()}`;
    const text = Array.from({ length: 800 }, (_, k) => `line ${k}: const value${k} = compute(${k * 7});`).join('\n');
    await storage.db.query(`INSERT INTO sessions (id, working_directory) VALUES ($1, '/w')`, [id]);
    await storage.db.query(`INSERT INTO messages (id, session_id, sequence, role, content) VALUES ($1, $2, 1, 'system', $3::jsonb)`, [
      `${id}_m`,
      id,
      JSON.stringify([{ type: 'text', text }]),
    ]);
    const { rows } = await storage.db.query<{ method: string; text: string }>(
      `SELECT pg_column_compression(content) AS method, content->0->>'text' AS text FROM messages WHERE id = $1`,
      [`${id}_m`],
    );
    expect(rows[0]).toEqual({ method: lz4 ? 'lz4' : 'pglz', text });
  });
});
