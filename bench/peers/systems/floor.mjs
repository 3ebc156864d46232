/**
 * The floors: the least a durable agent loop can do, one commit per message (the user message, each
 * assistant message with its tool call, each tool result), with raw `pg` (a pool of 10, like the
 * other Postgres systems) or raw PGlite. The loop calls the same fake model decision and keeps the
 * conversation in memory; each message is one autocommitted INSERT.
 */
import { randomUUID } from 'node:crypto';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { decide, FINAL_TEXT, instantTool, USER_TEXT } from '../scenario.mjs';

const SCHEMA = `CREATE TABLE IF NOT EXISTS messages (
  thread_id text NOT NULL, seq integer NOT NULL, role text NOT NULL, content jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (thread_id, seq))`;
const INSERT = 'INSERT INTO messages (thread_id, seq, role, content) VALUES ($1, $2, $3, $4)';

function loop(query) {
  return async function turn() {
    const thread = randomUUID();
    const messages = [];
    const append = async (role, content) => {
      messages.push({ role, content });
      await query(INSERT, [thread, messages.length, role, JSON.stringify(content)]);
    };
    await append('user', [{ type: 'text', text: USER_TEXT }]);
    let results = 0;
    for (;;) {
      const next = decide(results);
      if (next === null) {
        await append('assistant', [{ type: 'text', text: FINAL_TEXT }]);
        return;
      }
      const callId = `call_${next}`;
      await append('assistant', [{ type: 'tool_call', callId, name: 'instant', arguments: JSON.stringify({ i: next }) }]);
      await append('tool', [{ type: 'tool_result', callId, text: instantTool(next) }]);
      results += 1;
    }
  };
}

export function setupPg() {
  return async ({ url }) => {
  const pool = new pg.Pool({ connectionString: url, max: 10 });
  await pool.query(SCHEMA);
  return { turn: loop((text, params) => pool.query(text, params)), close: () => pool.end() };
  };
}

export function setupPglite(kind) {
  return async ({ dir }) => {
    const db = kind === 'file' ? new PGlite(`${dir}/pgdata`) : new PGlite();
    await db.exec(SCHEMA);
    return { turn: loop((text, params) => db.query(text, params)), close: () => db.close() };
  };
}
