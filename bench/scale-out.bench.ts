/**
 * Scale-out (issue 15.5): the 100-session scenario of the runtime bench (10 tool steps + an answer
 * per turn, scripted model, instant tool) split over 1, 2 and 4 runtime processes on one PostgreSQL
 * server (fsync on), each process a `createCore` with ownership on (lease 5,000 ms: renewal every
 * 1.7 s, scan every 2.5 s). Prints turns/s for each and the lease traffic it costs (lease statements
 * per second over all processes, against the total statements of the turns), plus one process with
 * ownership off as the baseline of what the fence costs.
 *
 * Run: npm run bench scale-out   (BENCH_SCALE_TURNS turns per session, default 3)
 */
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { postgresStorage } from '../src/storage/postgres.js';
import { startPostgres } from '../test/support/postgres-server.js';

const SESSIONS = Number(process.env.BENCH_SESSIONS ?? 100);
const TURNS = Number(process.env.BENCH_SCALE_TURNS ?? 3);
const WORKER = join(dirname(fileURLToPath(import.meta.url)), 'support', 'scale-out-worker.ts');

interface Done {
  wallMs: number;
  turns: number;
  lost: number;
  takenOver: number;
  leaseStatements: number;
}

/** Starts `processes` workers with an equal share of the sessions, lets them run together, collects their reports. */
async function run(url: string, processes: number, ownership: boolean): Promise<{ wallMs: number; turns: number; lost: number; takenOver: number; leaseStatements: number }> {
  const workers = Array.from({ length: processes }, () => {
    const child = spawn(process.execPath, ['--import', 'tsx', WORKER], {
      env: { ...process.env, SCALE_DATABASE_URL: url, SCALE_SESSIONS: String(SESSIONS / processes), SCALE_TURNS: String(TURNS), SCALE_OWNERSHIP: ownership ? '1' : '0' },
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    const lines: Array<Record<string, unknown>> = [];
    const waiters: Array<() => void> = [];
    createInterface({ input: child.stdout }).on('line', (l) => {
      lines.push(JSON.parse(l) as Record<string, unknown>);
      for (const w of waiters.splice(0)) w();
    });
    const line = async (kind: string) => {
      while (!lines.some((l) => l.kind === kind)) {
        if (child.exitCode !== null) throw new Error(`worker exited ${child.exitCode}`);
        await new Promise<void>((resolve) => waiters.push(resolve));
      }
      return lines.find((l) => l.kind === kind)!;
    };
    return { child, line };
  });
  await Promise.all(workers.map((w) => w.line('ready')));
  const t0 = performance.now();
  for (const w of workers) w.child.stdin.write('go\n');
  const reports = (await Promise.all(workers.map((w) => w.line('done')))) as unknown as Done[];
  const wallMs = performance.now() - t0;
  const sum = (k: keyof Done) => reports.reduce((n, r) => n + r[k], 0);
  return { wallMs, turns: sum('turns'), lost: sum('lost'), takenOver: sum('takenOver'), leaseStatements: sum('leaseStatements') };
}

export async function runScaleOutBench(): Promise<string[]> {
  const server = await startPostgres({ durable: true });
  const lines: string[] = [`${SESSIONS} sessions x ${TURNS} turns x 10 tool steps, one PostgreSQL (fsync on), pg pool 10 per process`];
  try {
    const admin = new pg.Client({ connectionString: server.url });
    await admin.connect();
    const url = (db: string) => server.url.replace(/\/postgres$/, `/${db}`);
    const cases: Array<[string, number, boolean]> = [['off', 1, false], ['on', 1, true], ['on', 2, true], ['on', 4, true]];
    for (const [i, [mode, processes, ownership]] of cases.entries()) {
      await admin.query(`CREATE DATABASE bench_scale_${i}`);
      const schema = postgresStorage({ connectionString: url(`bench_scale_${i}`) });
      await schema.migrate();
      await schema.close();
      const r = await run(url(`bench_scale_${i}`), processes, ownership);
      const seconds = r.wallMs / 1000;
      // Per turn: begin, 11 x (model call start + assistant message) + 10 tool results + end = 34 fact writes.
      const factWrites = r.turns * 34;
      lines.push(
        `  ${processes} process${processes > 1 ? 'es' : '  '} ownership ${mode.padEnd(3)} ${(r.turns / seconds).toFixed(1).padStart(7)} turns/s` +
          (ownership ? `, lease traffic ${(r.leaseStatements / seconds).toFixed(2)} statements/s (${r.leaseStatements} lease statements vs ~${factWrites} fact writes)` : '') +
          (r.lost > 0 ? `, ${r.lost} turns ended ownership_lost (${r.takenOver} sessions taken over: late renewals)` : ''),
      );
    }
    await admin.end();
  } finally {
    server.stop();
  }
  return lines;
}
