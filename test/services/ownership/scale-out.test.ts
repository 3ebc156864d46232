/**
 * Scale-out on real OS processes (issue 15, point 4): three runtime processes (owner-child.ts), each
 * a `createCore` with ownership on one real Postgres, and a tool that appends a line per run to a
 * shared journal. (a) SIGKILL one mid-turn: a survivor corrects its turns within lease + scan
 * interval, other processes load the sessions and run new turns, no call runs twice. (b) SIGSTOP one
 * past its lease: a survivor takes over and runs a turn; after SIGCONT nothing the stopped process
 * writes lands, and it reports `ownership_lost`. (c) Two processes race `loadSession` of one session
 * OWN_RACES times (default 100): exactly one wins each time.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postgresStorage } from '../../../src/storage/postgres.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { compiledChild } from '../../support/compiled-child.js';
import { createTestDatabase } from '../../support/databases.js';
import { assertStoredInvariants } from '../../support/invariants.js';

const CHILD = join(dirname(fileURLToPath(import.meta.url)), 'owner-child.ts');
const LEASE_MS = Number(process.env.OWN_LEASE_MS ?? 1_000);
const SCAN_MS = Number(process.env.OWN_SCAN_MS ?? 250);
const RACES = Number(process.env.OWN_RACES ?? 100);
/** Scheduling slack over the documented bound (lease + scan interval) on a loaded test machine. */
const SLACK_MS = Number(process.env.OWN_SLACK_MS ?? 2_000);

type Line = { kind: string; req?: number; [k: string]: unknown };

class Runtime {
  readonly proc: ChildProcess;
  readonly lines: Line[] = [];
  private waiters: Array<() => void> = [];
  private req = 0;

  constructor(env: Record<string, string>) {
    this.proc = spawn(process.execPath, [compiledChild(CHILD)], { env: { ...process.env, ...env }, stdio: ['pipe', 'pipe', 'inherit'] });
    createInterface({ input: this.proc.stdout! }).on('line', (raw) => {
      this.lines.push(JSON.parse(raw) as Line);
      for (const w of this.waiters.splice(0)) w();
    });
    this.proc.on('exit', () => {
      for (const w of this.waiters.splice(0)) w();
    });
  }

  get dead(): boolean {
    return this.proc.exitCode !== null || this.proc.signalCode !== null;
  }

  async until<T>(find: () => T | undefined, timeoutMs = 30_000): Promise<T> {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const found = find();
      if (found !== undefined) return found;
      const error = this.lines.find((l) => l.kind === 'error');
      if (error || this.dead) throw new Error(`runtime ended: ${JSON.stringify(error ?? this.lines.at(-1))}`);
      if (Date.now() > end) throw new Error(`runtime timed out; last lines ${JSON.stringify(this.lines.slice(-3))}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.max(1, end - Date.now()));
        this.waiters.push(() => (clearTimeout(timer), resolve()));
      });
    }
  }

  line(kind: string, test: (l: Line) => boolean = () => true, timeoutMs?: number): Promise<Line> {
    return this.until(() => this.lines.find((l) => l.kind === kind && test(l)), timeoutMs);
  }

  /** Sends a command and resolves with its answer. */
  async ask(op: string, body: Record<string, unknown> = {}): Promise<Line> {
    this.req += 1;
    const req = this.req;
    this.proc.stdin!.write(`${JSON.stringify({ op, req, ...body })}\n`);
    return this.until(() => this.lines.find((l) => l.req === req));
  }
}

describe('scale-out: three runtime processes on one Postgres (issue 15)', () => {
  let url: string;
  let storage: SqlSessionStorage;
  let dir: string;
  let journal: string;
  const runtimes: Runtime[] = [];
  /** Booted together once (booting dominates the suite's time): r0 is killed in (a), r3 stopped in (b). */
  let r0: Runtime, r1: Runtime, r2: Runtime, r3: Runtime;

  const start = async () => {
    const runtime = new Runtime({ OWN_DATABASE_URL: url, OWN_JOURNAL: journal, OWN_LEASE_MS: String(LEASE_MS), OWN_SCAN_MS: String(SCAN_MS) });
    runtimes.push(runtime);
    await runtime.line('ready', () => true, 120_000);
    return runtime;
  };

  /** Every journal line's call id; each call runs at most once across all processes. */
  const journalCalls = () => (existsSync(journal) ? readFileSync(journal, 'utf8').split('\n').filter(Boolean).map((l) => l.split('\t')[0]!) : []);
  const expectNoCallTwice = () => {
    const ids = journalCalls();
    expect(ids.filter((id, i) => ids.indexOf(id) !== i)).toEqual([]);
  };

  beforeAll(async () => {
    // Compiled (and dist/ rebuilt when src/ is newer) before the test, outside its limit.
    compiledChild(CHILD);
    url = await createTestDatabase();
    storage = postgresStorage({ connectionString: url, max: 2 });
    await storage.migrate();
    dir = mkdtempSync(join(tmpdir(), 'openwork-scale-'));
    journal = join(dir, 'journal.tsv');
    [r0, r1, r2, r3] = await Promise.all([start(), start(), start(), start()]);
  }, 180_000);

  afterAll(async () => {
    for (const r of runtimes) {
      if (r.dead) continue;
      r.proc.kill('SIGCONT');
      r.proc.kill('SIGKILL');
    }
    await storage.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('(a) SIGKILL mid-turn: a survivor corrects the turns within lease + scan, others resume them, no call runs twice', { timeout: 60_000 }, async () => {
    const [victim, b, c] = [r0, r1, r2];
    const owned = ['a_s0', 'a_s1'];
    for (const id of owned) await victim.ask('create', { id });
    await b.ask('create', { id: 'a_b0' });
    const turns = new Map<string, string>();
    for (const id of owned) turns.set(id, String((await victim.ask('turn', { id, tag: `${id}-t1` })).turnId));
    const survivorTurn = String((await b.ask('turn', { id: 'a_b0', tag: 'a_b0-t1' })).turnId);
    // Both of the victim's turns are inside their first journal call.
    for (const id of owned) await victim.line('tool_ran', (l) => l.callId === `${id}-t1-c1`);
    victim.proc.kill('SIGKILL');
    const killedAt = Date.now();

    const corrected = async () => {
      for (const turnId of turns.values()) if ((await storage.getTurn(turnId))?.status !== 'interrupted') return false;
      return true;
    };
    while (!(await corrected())) {
      expect(Date.now() - killedAt, 'corrected within lease + scan interval (+ slack)').toBeLessThan(LEASE_MS + SCAN_MS + SLACK_MS);
      await new Promise((r) => setTimeout(r, 20));
    }
    for (const turnId of turns.values()) expect(await storage.getTurn(turnId)).toMatchObject({ status: 'interrupted', errorCode: 'process_restart' });
    // A live process's turn is never touched.
    expect((await b.line('finished', (l) => l.turnId === survivorTurn)).outcome).toEqual({ status: 'completed', finalText: 'done a_b0-t1' });

    // Each session is loaded by another process and runs a new turn; the lost calls are not run again.
    for (const [i, id] of owned.entries()) {
      const runtime = i === 0 ? b : c;
      expect(await runtime.ask('load', { id })).toMatchObject({ ok: true });
      const turnId = String((await runtime.ask('turn', { id, tag: `${id}-t2` })).turnId);
      expect((await runtime.line('finished', (l) => l.turnId === turnId)).outcome).toEqual({ status: 'completed', finalText: `done ${id}-t2` });
      await assertStoredInvariants(storage, id);
    }
    const ids = journalCalls();
    for (const id of owned) {
      expect(ids.filter((c) => c === `${id}-t1-c1`)).toHaveLength(1);
      expect(ids).not.toContain(`${id}-t1-c2`); // The killed turn never reached its second call.
    }
    expectNoCallTwice();
  });

  it('(b) SIGSTOP past the lease: a survivor takes over and runs a turn; after SIGCONT nothing the stopped process writes lands and it reports ownership_lost', { timeout: 60_000 }, async () => {
    const [stopped, survivor] = [r3, r1];
    await stopped.ask('create', { id: 'b_s' });
    const staleTurn = String((await stopped.ask('turn', { id: 'b_s', tag: 'b_s-t1' })).turnId);
    await stopped.line('tool_ran', (l) => l.callId === 'b_s-t1-c1');
    stopped.proc.kill('SIGSTOP');
    const stoppedAt = Date.now();
    while ((await storage.getTurn(staleTurn))?.status !== 'interrupted') {
      expect(Date.now() - stoppedAt).toBeLessThan(LEASE_MS + SCAN_MS + SLACK_MS);
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(await survivor.ask('load', { id: 'b_s' })).toMatchObject({ ok: true });
    const fresh = String((await survivor.ask('turn', { id: 'b_s', tag: 'b_s-t2' })).turnId);
    expect((await survivor.line('finished', (l) => l.turnId === fresh)).outcome).toEqual({ status: 'completed', finalText: 'done b_s-t2' });
    const messages = await storage.listMessages('b_s');
    const turns = await storage.listTurns('b_s');

    stopped.proc.kill('SIGCONT');
    // Its tool call finishes; the result, the next call and the end are all refused.
    expect((await stopped.line('finished', (l) => l.turnId === staleTurn)).outcome).toMatchObject({ status: 'failed', code: 'ownership_lost' });
    expect(await stopped.ask('turn', { id: 'b_s', tag: 'b_s-t3' })).toMatchObject({ ok: false, code: 'ownership_lost' });
    await new Promise((r) => setTimeout(r, 2 * SCAN_MS));
    expect(await storage.listMessages('b_s')).toEqual(messages);
    expect(await storage.listTurns('b_s')).toEqual(turns);
    expect(await storage.getTurn(staleTurn)).toMatchObject({ status: 'interrupted', errorCode: 'process_restart' });
    expect(journalCalls()).not.toContain('b_s-t1-c2');
    expectNoCallTwice();
    await assertStoredInvariants(storage, 'b_s');
    // The stale process cannot take the session back while the survivor owns it.
    expect(await stopped.ask('load', { id: 'b_s' })).toMatchObject({ ok: false, code: 'session_owned_elsewhere', details: { ownerId: expect.any(String) } });
    await stopped.ask('shutdown');
  });

  it(`(c) two processes race loadSession of one session ${RACES} times: exactly one wins each time`, { timeout: 120_000 }, async () => {
    const [p, q] = [r1, r2];
    await p.ask('create', { id: 'c_s' });
    await p.ask('unload', { id: 'c_s' });
    const wins = { p: 0, q: 0 };
    for (let round = 0; round < RACES; round += 1) {
      const [a, b] = await Promise.all([p.ask('load', { id: 'c_s' }), q.ask('load', { id: 'c_s' })]);
      expect([a.ok, b.ok].filter(Boolean), `round ${round}`).toHaveLength(1);
      const loser = a.ok ? b : a;
      expect(loser).toMatchObject({ code: 'session_owned_elsewhere' });
      if (a.ok) wins.p += 1;
      else wins.q += 1;
      await (a.ok ? p : q).ask('unload', { id: 'c_s' });
    }
    console.log(`loadSession race: ${JSON.stringify(wins)}`);
    expect(wins.p + wins.q).toBe(RACES);
    await Promise.all([p.ask('shutdown'), q.ask('shutdown')]);
  });
});
