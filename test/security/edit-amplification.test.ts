/**
 * Attack round 4: one edit call that makes the host build a string of hundreds of megabytes. The
 * write tool's content and the edited file are bounded to 1 MiB, but `edit` with `replaceAll`
 * built the new text before it measured it: a 1 MiB file of one repeated character, oldString
 * that character and newString 200 characters long made a 200-million-character string (400 MB when
 * they are not Latin-1, seconds of the main thread) only to refuse it, and a few sessions doing so
 * at once exhaust the host's memory. The size is now computed from the count before anything is built. The peak
 * resident memory of this process (VmHWM, reset through /proc/self/clear_refs) must stay small.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from '../support/databases.js';
import { scriptedAttack } from '../support/scripted-attack.js';
import { type ToolEnv, useToolEnv } from '../support/tool-env.js';

let storage: SqlSessionStorage;
usePglite((s) => (storage = s));

let env: ToolEnv;
useToolEnv((e) => (env = e));

/** The peak resident memory of this process since the last reset, in bytes. */
function peakResident(): number {
  const line = /^VmHWM:\s+(\d+) kB$/m.exec(readFileSync('/proc/self/status', 'utf8'));
  return Number(line![1]) * 1024;
}

/** Resets the peak to the current resident size (Linux 4.0+: writing 5 to clear_refs). */
function resetPeak(): void {
  writeFileSync('/proc/self/clear_refs', '5');
}

describe('edit cannot amplify a bounded file into a huge string (attack round 4)', () => {
  it('replaceAll of one character by 200 in a 1 MiB file is refused before the text is built', async () => {
    const path = join(env.ws, 'amp.txt');
    const content = 'a'.repeat(1024 * 1024 - 1);
    resetPeak();
    const before = peakResident();
    const attack = await scriptedAttack(env, storage, [
      { name: 'write', arguments: { path, content } },
      { name: 'read', arguments: { path, limit: 1 } },
      { name: 'edit', arguments: { path, oldString: 'a', newString: 'ж'.repeat(200), replaceAll: true } },
    ]);
    const grown = peakResident() - before;
    // Unprotected, the new text alone held 400 MB (a two-byte string of 200 million characters);
    // the turn's own store and requests take about 100 MB here.
    expect(grown).toBeLessThan(220 * 1024 * 1024);
    expect(attack.outcome.status).toBe('completed');
    expect(attack.results[2]).toBe(`the edited file would be ${(1024 * 1024 - 1) * 400} bytes, larger than 1048576 bytes; nothing was changed.`);
    expect(readFileSync(path, 'utf8')).toBe(content);
  });

  it('an edit that fits is still made, and one that only just does not fit is refused', async () => {
    const path = join(env.ws, 'fits.txt');
    const attack = await scriptedAttack(env, storage, [
      { name: 'write', arguments: { path, content: 'x\n'.repeat(1000) } },
      { name: 'read', arguments: { path, limit: 1 } },
      { name: 'edit', arguments: { path, oldString: 'x', newString: 'yy', replaceAll: true } },
      { name: 'read', arguments: { path, limit: 1 } },
      { name: 'edit', arguments: { path, oldString: 'yy\n', newString: 'z'.repeat(1100), replaceAll: true } },
    ]);
    expect(attack.results[2]).toMatch(/^Edited .*fits\.txt: replaced 1000 occurrences/);
    expect(attack.results[4]).toBe('the edited file would be 1100000 bytes, larger than 1048576 bytes; nothing was changed.');
    expect(readFileSync(path, 'utf8')).toBe('yy\n'.repeat(1000));
  });
});
