/**
 * Issue 12, point 2: time-of-check/time-of-use on the file tools. A concurrent process (a real
 * child process spinning as fast as it can) swaps symbolic links between what the fence checks and
 * what the tool then opens: the last component of a path (a regular file in the workspace one
 * moment, a link to a credential or to a file outside the next) and an intermediate directory (a
 * real workspace directory one moment, a link to `~/.ssh` or to a directory outside the next).
 * The built-in `read` and `write` run thousands of times against it, most through the tool call
 * the way the tool-call machine runs it (authorise, then execute), some inside real turns of a core
 * (createCore + scripted model + the built-in tools on PGlite). Not one attempt may return the
 * secret or change anything outside the workspace.
 *
 * `RACE_ATTEMPTS` (default 1,000 reads per read scenario and two thirds of that per write scenario:
 * 2,000 reads and 2,000 writes, plus the reads before the overwrites) scales the attack.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createCore } from '../../src/core.js';
import { scriptedModel, type ScriptedToolCall } from '../../src/services/model/scripted.js';
import { workspaceToolOptions } from '../../src/services/tools/workspace.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from '../support/databases.js';
import { type ToolEnv, useToolEnv } from '../support/tool-env.js';

const READS = Number(process.env.RACE_ATTEMPTS ?? 1_000);
const WRITES = Math.ceil((READS * 2) / 3);
const SECRET = 'SECRET-PRIVATE-KEY-3f9c2a';

let storage: SqlSessionStorage;
const cores = usePglite((s) => (storage = s));

let env: ToolEnv;
useToolEnv((e) => (env = e));
beforeAll(async () => {
  writeFileSync(join(env.home, '.ssh', 'id_rsa'), `${SECRET}\n`);
});

/**
 * The swapper: a separate node process that flips `target` between two states forever. `file`
 * puts a regular file there by rename (atomic) and `absent` removes it; `dir` parks the real
 * directory under another name while the link stands in for it, then puts it back (removing
 * whatever a tool created in the gap). The other state is always a symlink to `link`.
 */
const SWAPPER = `
const fs = require('node:fs');
const { kind, target, link, content } = JSON.parse(process.argv[1]);
const tmpLink = target + '.swap-link';
const tmpFile = target + '.swap-file';
const parked = target + '.parked';
const parent = process.ppid;
console.log('ready');
// A synchronous loop never runs signal handlers; SIGTERM's default action ends it, and it stops by
// itself when the test process is gone (it is re-parented).
for (let i = 0; ; i += 1) {
  if (i % 1024 === 0 && process.ppid !== parent) process.exit(0);
  if (kind === 'dir') {
    try { fs.renameSync(target, parked); } catch { continue; }
    try { fs.symlinkSync(link, tmpLink); fs.renameSync(tmpLink, target); } catch { try { fs.unlinkSync(tmpLink); } catch {} }
    // Whatever is there now (the link, or a directory a tool created meanwhile) goes; the real one comes back.
    for (;;) {
      try { fs.unlinkSync(target); } catch { try { fs.rmSync(target, { recursive: true, force: true }); } catch {} }
      try { fs.renameSync(parked, target); break; } catch {}
    }
    continue;
  }
  try { fs.symlinkSync(link, tmpLink); fs.renameSync(tmpLink, target); } catch {}
  try {
    if (kind === 'file') { fs.writeFileSync(tmpFile, content); fs.renameSync(tmpFile, target); }
    else fs.unlinkSync(target);
  } catch {}
}
`;

const swappers: ChildProcess[] = [];
async function stopSwappers(): Promise<void> {
  const died: string[] = [];
  for (const child of swappers.splice(0)) {
    // A swapper that died early would make the attack a no-op and the test pass for nothing.
    if (child.exitCode !== null || child.signalCode !== null) {
      died.push(`swapper ${child.pid} exited early (${child.exitCode ?? child.signalCode})`);
      continue;
    }
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  }
  if (died.length > 0) throw new Error(died.join('; '));
}
afterEach(stopSwappers);

async function swap(config: { kind: 'file' | 'absent' | 'dir'; target: string; link: string; content?: string }): Promise<void> {
  const child = spawn(process.execPath, ['-e', SWAPPER, JSON.stringify(config)], { stdio: ['ignore', 'pipe', 'inherit'] });
  swappers.push(child);
  await new Promise<void>((resolve, reject) => {
    child.stdout!.once('data', () => resolve());
    child.once('error', reject);
  });
}

/** One tool call; a tool that throws is a failed call, as the tool-call machine records it. */
async function attempt(name: string, args: Record<string, unknown>): Promise<{ status: string; text: string }> {
  try {
    return (await env.call(name, args)).result;
  } catch (error) {
    return { status: 'failed', text: String(error) };
  }
}

function race(name: string): string {
  const dir = join(env.ws, name);
  mkdirSync(dir, { recursive: true });
  return dir;
}

// Thousands of attempts against a process that holds a core: seconds alone, longer on a loaded machine.
describe('file tools against a process swapping symlinks', { timeout: 120_000 }, () => {
  it(`read: ${READS} reads of a file swapped with a link to ~/.ssh/id_rsa, and ${READS} through a directory swapped with a link to ~/.ssh: no secret`, async () => {
    const dir = race('read-race');
    writeFileSync(join(dir, 'key'), 'public\n');
    mkdirSync(join(dir, 'keys'));
    writeFileSync(join(dir, 'keys', 'id_rsa'), 'public\n');

    const outcomes = { leaked: 0, read: 0, refused: 0 };
    const attack = async (path: string) => {
      for (let i = 0; i < READS; i += 1) {
        const result = await attempt('read', { path });
        if (result.text.includes(SECRET)) outcomes.leaked += 1;
        else if (result.status === 'succeeded') outcomes.read += 1;
        else outcomes.refused += 1;
      }
    };
    await swap({ kind: 'file', target: join(dir, 'key'), link: join(env.home, '.ssh', 'id_rsa'), content: 'public\n' });
    await attack(join(dir, 'key'));
    await stopSwappers();
    await swap({ kind: 'dir', target: join(dir, 'keys'), link: join(env.home, '.ssh') });
    await attack(join(dir, 'keys', 'id_rsa'));
    expect(outcomes.leaked).toBe(0);
    // The race really ran: both outcomes were seen.
    expect(outcomes.read).toBeGreaterThan(0);
    expect(outcomes.refused).toBeGreaterThan(0);
  });

  it('grep and list: a directory swapped with a link to ~/.ssh is never searched nor listed', async () => {
    const dir = race('search-race');
    // Nested, so that the swapped directory is an intermediate component of every file grep opens.
    mkdirSync(join(dir, 'keys', 'sub'), { recursive: true });
    writeFileSync(join(dir, 'keys', 'sub', 'id_rsa'), 'public\n');
    mkdirSync(join(env.home, '.ssh', 'sub'), { recursive: true });
    writeFileSync(join(env.home, '.ssh', 'sub', 'id_rsa'), `${SECRET}\n`);
    await swap({ kind: 'dir', target: join(dir, 'keys'), link: join(env.home, '.ssh') });
    let leaked = 0;
    let found = 0;
    for (let i = 0; i < READS / 5; i += 1) {
      const grep = await attempt('grep', { pattern: 'SECRET|public', path: 'search-race' });
      const list = await attempt('list', { path: 'search-race', recursive: true });
      // id_ed25519 lives only in ~/.ssh; its name in a listing is a leak as much as the key is.
      if (grep.text.includes(SECRET) || list.text.includes('id_ed25519')) leaked += 1;
      if (grep.text.includes('public')) found += 1;
    }
    expect(leaked).toBe(0);
    expect(found).toBeGreaterThan(0);
  });

  it(`write: ${WRITES} creations through a name swapped with a dangling link out, ${WRITES} overwrites of a file swapped with a link to an identical file outside, ${WRITES} through a swapped directory: nothing outside changes`, async () => {
    const dir = race('write-race');
    const outside = join(env.outside, 'write-race');
    mkdirSync(join(outside, 'dir', 'sub'), { recursive: true });
    writeFileSync(join(outside, 'same.txt'), 'same\n');
    writeFileSync(join(dir, 'same.txt'), 'same\n');
    mkdirSync(join(dir, 'dir', 'sub'), { recursive: true });
    let leaked = 0;
    let written = 0;
    let refused = 0;
    const checkOutside = () => {
      const landed = readdirSync(outside).filter((n) => n !== 'dir' && n !== 'same.txt');
      const landedInDir = readdirSync(join(outside, 'dir')).filter((n) => n !== 'sub');
      const landedInSub = readdirSync(join(outside, 'dir', 'sub'));
      const same = readFileSync(join(outside, 'same.txt'), 'utf8');
      const found = landed.length + landedInDir.length + landedInSub.length + (same === 'same\n' ? 0 : 1);
      if (found > 0) {
        leaked += found;
        for (const n of landed) rmSync(join(outside, n), { force: true });
        for (const n of landedInDir) rmSync(join(outside, 'dir', n), { force: true });
        for (const n of landedInSub) rmSync(join(outside, 'dir', 'sub', n), { force: true });
        writeFileSync(join(outside, 'same.txt'), 'same\n');
      }
    };

    await swap({ kind: 'absent', target: join(dir, 'new.txt'), link: join(outside, 'landed.txt') });
    for (let i = 0; i < WRITES; i += 1) {
      const result = await attempt('write', { path: join(dir, 'new.txt'), content: 'planted\n' });
      if (result.status === 'succeeded') written += 1;
      else refused += 1;
      checkOutside();
    }
    await stopSwappers();

    // Read-before-edit is satisfied by an identical file: the outside one has the same content.
    await swap({ kind: 'file', target: join(dir, 'same.txt'), link: join(outside, 'same.txt'), content: 'same\n' });
    for (let i = 0; i < WRITES; i += 1) {
      await attempt('read', { path: join(dir, 'same.txt') });
      const result = await attempt('write', { path: join(dir, 'same.txt'), content: 'planted\n' });
      if (result.status === 'succeeded') written += 1;
      else refused += 1;
      checkOutside();
    }
    await stopSwappers();

    await swap({ kind: 'dir', target: join(dir, 'dir'), link: join(outside, 'dir') });
    for (let i = 0; i < WRITES; i += 1) {
      // The swapped directory is the parent, or (every other time) the grandparent of the new file.
      const result = await attempt('write', { path: join(dir, 'dir', ...(i % 2 === 0 ? [] : ['sub']), `x${i}.txt`), content: 'planted\n' });
      if (result.status === 'succeeded') written += 1;
      else refused += 1;
      checkOutside();
    }
    expect(leaked).toBe(0);
    // The race really ran: both outcomes were seen.
    expect(written).toBeGreaterThan(0);
    expect(refused).toBeGreaterThan(0);
  });

  it('inside real turns: reads and writes of swapped paths never return the secret nor write outside', async () => {
    const dir = race('turn-race');
    const outside = join(env.outside, 'turn-race');
    mkdirSync(outside, { recursive: true });
    writeFileSync(join(dir, 'key'), 'public\n');
    await swap({ kind: 'file', target: join(dir, 'key'), link: join(env.home, '.ssh', 'id_rsa'), content: 'public\n' });
    await swap({ kind: 'absent', target: join(dir, 'new.txt'), link: join(outside, 'landed.txt') });

    const calls = (n: number): ScriptedToolCall[] =>
      Array.from({ length: n }, (_, i) => (i % 2 === 0 ? { name: 'read', arguments: { path: 'turn-race/key' } } : { name: 'write', arguments: { path: 'turn-race/new.txt', content: 'planted\n' } }));
    const TURNS = 2;
    const model = scriptedModel(Array.from({ length: TURNS }, () => [{ toolCalls: calls(24) }, { text: 'done' }]).flat());
    const core = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model, ...workspaceToolOptions(env.runtime), closeStorageOnShutdown: false });
    cores.push(core);
    const session = await core.createSession({ workingDirectory: env.ws });
    for (let t = 0; t < TURNS; t += 1) {
      const { turnId } = await session.startTurn({ clientRequestId: `race-${t}`, input: [{ type: 'text', text: 'read the key and write the file' }] });
      expect(await session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'done' });
      expect(existsSync(join(outside, 'landed.txt'))).toBe(false);
    }
    // The last request carries the whole conversation: every tool result of every turn.
    const toolTexts = model.requests.at(-1)!.messages.filter((m) => m.role === 'tool').map((m) => (m as { text: string }).text);
    expect(toolTexts).toHaveLength(TURNS * 24);
    expect(toolTexts.filter((t) => t.includes(SECRET))).toEqual([]);
    const stored = JSON.stringify(await storage.listMessages(session.sessionId));
    expect(stored).not.toContain(SECRET);
    expect(readdirSync(outside)).toEqual([]);
  });
});
