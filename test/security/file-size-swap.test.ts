/**
 * Attack round 4: a file whose size changes between the file tool's judgement and its read. read
 * (64 MiB), grep (16 MiB) and write/edit (1 MiB) judged the size of the opened file and then called
 * `handle.readFile()`, which takes the size again from an `fstat` of its own: a file that another
 * process truncates back and forth between empty and a sparse 600 MiB (no disk used; an explorer's
 * bash can do it in a temp directory while its parent's tools run, as can any process writing the
 * workspace) passed the check as empty and was then allocated and read whole. Now the tools read
 * at most the size they judged, through the descriptor. The peak resident memory of this process
 * (VmHWM, reset through /proc/self/clear_refs) must stay far below one such read.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { ScriptedToolCall } from '../../src/services/model/scripted.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from '../support/databases.js';
import { scriptedAttack } from '../support/scripted-attack.js';
import { type ToolEnv, useToolEnv } from '../support/tool-env.js';

let storage: SqlSessionStorage;
usePglite((s) => (storage = s));

let env: ToolEnv;
useToolEnv((e) => (env = e));

const BIG = 600 * 1024 * 1024;
let flipper: ChildProcess | undefined;
afterEach(() => {
  flipper?.kill('SIGKILL');
  flipper = undefined;
});

function peakResident(): number {
  const line = /^VmHWM:\s+(\d+) kB$/m.exec(readFileSync('/proc/self/status', 'utf8'));
  return Number(line![1]) * 1024;
}

/** Truncates `path` to 0 and to a sparse `BIG` bytes, back and forth, as fast as it can. */
function startFlipper(path: string): ChildProcess {
  const script = ['import os, sys', 'fd = os.open(sys.argv[1], os.O_WRONLY)', 'while True:', '    os.ftruncate(fd, 0); os.ftruncate(fd, int(sys.argv[2]))'].join('\n');
  return spawn('python3', ['-c', script, path, String(BIG)], { stdio: 'ignore' });
}

describe('a file that changes size between check and read (attack round 4)', () => {
  it('read, grep and edit read no more than the size they judged', async () => {
    const path = join(env.tmp, 'flip.txt');
    writeFileSync(path, '');
    flipper = startFlipper(path);
    // Each call differs a little, so the doom-loop check does not end the turn; ten calls a turn
    // stay under the turn's model-call limit.
    const turns: ScriptedToolCall[][] = [
      Array.from({ length: 10 }, (_, i) => ({ name: 'read', arguments: { path, limit: 2_000 - i } })),
      Array.from({ length: 10 }, (_, i) => ({ name: 'read', arguments: { path, limit: 1_000 - i } })),
      Array.from({ length: 10 }, (_, i) => ({ name: 'grep', arguments: { pattern: `x${i}`, path } })),
      Array.from({ length: 10 }, (_, i) => ({ name: 'edit', arguments: { path, oldString: 'x', newString: `y${i}` } })),
    ];
    writeFileSync('/proc/self/clear_refs', '5');
    const before = peakResident();
    const results: string[] = [];
    for (const calls of turns) {
      const attack = await scriptedAttack(env, storage, calls);
      expect(attack.outcome).toMatchObject({ status: 'completed' });
      results.push(...attack.results);
    }
    const grown = peakResident() - before;
    flipper.kill('SIGKILL');
    // Unprotected, each call that saw the file empty and then read it allocated 600 MiB.
    expect(grown).toBeLessThan(250 * 1024 * 1024);
    // Judged empty, the file is read to its end but never past the tool's own bound.
    for (const text of results.slice(0, 20)) expect(text).toMatch(/ is empty\.$| is \d+ bytes, larger than read handles | is a binary file \(\d+ bytes\)/);
    for (const text of results.slice(20, 30)) expect(text).toMatch(/^No matches for "x\d"/);
  }, 60_000);
});
