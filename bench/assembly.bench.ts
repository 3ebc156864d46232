/**
 * Request assembly cost per model call against the stored history size (1k, 10k, 100k messages),
 * with the history compacted (a checkpoint near the end) and, as the baseline, uncompacted.
 * Assembly after a checkpoint must not grow with the raw history behind it.
 */
import pg from 'pg';
import { buildSystemContext } from '../src/services/context/assemble.js';
import { assembleRequest } from '../src/services/context/assemble.js';
import { ChatState } from '../src/services/context/chat-state.js';
import { postgresStorage } from '../src/storage/postgres.js';
import { startPostgres } from '../test/support/postgres-server.js';

const SIZES = [1_000, 10_000, 100_000];
const TAIL = 20;

async function seed(pool: pg.Pool, sessionId: string, n: number): Promise<void> {
  await pool.query(`INSERT INTO sessions (id, working_directory) VALUES ($1, '/bench')`, [sessionId]);
  await pool.query(
    `INSERT INTO turns (id, session_id, client_request_id, sequence, resolved_provider_id, resolved_model_name, app_version, status, ended_at)
     VALUES ($1 || '-t', $1, 'r', 1, 'p', 'm', 'bench', 'completed', now())`,
    [sessionId],
  );
  await pool.query(
    `INSERT INTO messages (id, session_id, turn_id, sequence, role, content)
     SELECT $1 || '-m' || g, $1, $1 || '-t', g, CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
            jsonb_build_array(jsonb_build_object('type', 'text', 'text', 'message number ' || g || ' with some ordinary length of text in it'))
     FROM generate_series(1, $2::int) g`,
    [sessionId, n],
  );
}

async function checkpoint(pool: pg.Pool, sessionId: string, through: number): Promise<void> {
  await pool.query(
    `INSERT INTO conversation_compactions (id, session_id, sequence, through_message_sequence, replaced_through_message_sequence,
       source_message_count, kind, summary_format_version, checkpoint_format_version, last_user_message_id, last_user_message_sequence,
       resolved_model_name, summary)
     VALUES ($1 || '-c', $1, 1, $2::bigint, $2::bigint, $2::int, 'manual', 1, 1, $1 || '-m' || ($2::bigint - 1), $2::bigint - 1, 'm', 'a summary of everything before')`,
    [sessionId, through],
  );
}

function timePerCall(chat: ChatState, calls: number): number {
  const system = buildSystemContext('You are a bench agent.', '');
  const t0 = performance.now();
  for (let i = 0; i < calls; i += 1) assembleRequest({ system, conversation: chat.view(), tools: [], maxOutputTokens: 1000 });
  return ((performance.now() - t0) * 1000) / calls;
}

export async function runAssemblyBench(): Promise<string[]> {
  const server = await startPostgres();
  const lines: string[] = [];
  try {
    const storage = postgresStorage({ connectionString: server.url });
    await storage.migrate();
    const pool = new pg.Pool({ connectionString: server.url });
    lines.push(`assembly per model call (µs), ${TAIL} raw messages after the checkpoint; baseline: the same history uncompacted`);
    for (const n of SIZES) {
      const compacted = `bench-c-${n}`;
      const plain = `bench-p-${n}`;
      await seed(pool, compacted, n);
      await seed(pool, plain, n);
      await checkpoint(pool, compacted, n - TAIL);
      const tLoad = performance.now();
      const loadedC = (await storage.loadSession(compacted))!;
      const loadMsC = performance.now() - tLoad;
      const tLoadP = performance.now();
      const loadedP = (await storage.loadSession(plain))!;
      const loadMsP = performance.now() - tLoadP;
      const chatC = ChatState.fromLoaded({ ...loadedC, pruneWatermark: null });
      const chatP = ChatState.fromLoaded({ ...loadedP, pruneWatermark: null });
      timePerCall(chatC, 500);
      timePerCall(chatP, 3);
      const c = timePerCall(chatC, 200);
      const p = timePerCall(chatP, n >= 100_000 ? 5 : 20);
      lines.push(
        `  ${String(n).padStart(7)} stored: compacted ${c.toFixed(1).padStart(8)} µs/call (${chatC.length} items, load ${loadMsC.toFixed(0)} ms)` +
          `   uncompacted ${p.toFixed(0).padStart(9)} µs/call (${chatP.length} items, load ${loadMsP.toFixed(0)} ms)   ratio ${(p / c).toFixed(0)}x`,
      );
    }
    await pool.end();
    await storage.close();
  } finally {
    server.stop();
  }
  return lines;
}
