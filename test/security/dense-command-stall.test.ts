/**
 * Trust-stall: a bash command of 64 KiB of dense words, `;` or lines (inside every bound of bash's
 * schema: length, pipes, nesting) cost danger detection up to a second or more of the host's main
 * thread per call, parse and walk together, and every other session of the host waited. Now the
 * authorizer asks the detector for a sliced detection (`detectSliced`): tree-sitter's parse is
 * cancelled at each slice's end and resumed after the host ran, and the walk yields between nodes.
 * The answer is the same: a card where there was one, none where there was none.
 *
 * The stall is read in the process's CPU time between two ticks of a 20 ms timer
 * (`longestCpuStall`), so a loaded machine (where the process waits for a core) does not count.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { longestCpuStall } from '../support/event-loop.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from '../support/databases.js';
import type { PermissionCard, SessionUpdateEnvelope } from '../../src/protocol/updates.js';
import { scriptedModel, type ScriptedToolCall } from '../../src/services/model/scripted.js';
import { builtinToolsCore } from '../support/scripted-attack.js';
import { loadDangerDetector } from '../../src/services/permissions/danger.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../support/tool-env.js';

let storage: SqlSessionStorage;
usePglite((s) => (storage = s));

let env: ToolEnv;
useToolEnv((e) => (env = e));

/** CPU milliseconds `run` took (the process's clock, every thread). */
function cpuOf(run: () => void): number {
  const start = process.cpuUsage();
  run();
  const used = process.cpuUsage(start);
  return (used.user + used.system) / 1000;
}

describe('a dense 64 KiB command does not freeze the host in danger detection (trust-stall)', () => {
  it('the detector, sliced: the same answers, and no stretch of the loop near what one unsliced detection takes', async () => {
    const detector = await loadDangerDetector();
    const commands = [`${':;'.repeat(31_000)}rm -rf gone`, `${':\n'.repeat(31_000)}echo ran`];
    // Warm the grammar's code (its compilation runs on threads the CPU clock counts), then read what
    // one unsliced detection costs on this machine, now.
    for (const command of commands) detector.detect(command);
    for (const command of commands) {
      const expected = detector.detect(command);
      const unsliced = cpuOf(() => detector.detect(command));
      const { value, stallMs, wallStallMs } = await longestCpuStall(() => detector.detectSliced(command));
      expect(value).toEqual(expected);
      // Measured at load 14-18: unsliced 455-1,443 ms of CPU in one stretch; sliced 45-181 ms.
      expect(stallMs, `sliced ${stallMs.toFixed(0)} ms of CPU (wall ${wallStallMs} ms), unsliced ${unsliced.toFixed(0)} ms`).toBeLessThan(250);
    }
    expect(detector.detect(commands[0]!)?.key).toBe('rm_recursive_or_force');
  }, 60_000);

  it('through a turn: 64,000 characters of words, of lines and of `;` before rm: the card as before, every command runs', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const commands = [
      `echo ${'ab '.repeat(21_000)}> words.txt`, // one command of 21,000 words
      `${':\n'.repeat(31_000)}echo ran > after.txt`, // 31,000 lines
      `${':;'.repeat(31_000)}rm -rf gone`, // a hit at its end: a card
    ];
    // Warm the grammar's code first (its compilation runs on other threads the CPU clock counts),
    // and read what each detection costs unsliced on this machine, now.
    const unsliced = commands.map((command) => {
      const start = process.cpuUsage();
      env.runtime.danger.detect(command);
      const used = process.cpuUsage(start);
      return Math.round((used.user + used.system) / 1000);
    });
    const calls: ScriptedToolCall[] = commands.map((command) => ({ name: 'bash', arguments: { command } }));
    const model = scriptedModel([...calls.map((call) => ({ toolCalls: [call] })), { text: 'done' }]);
    const core = await builtinToolsCore(env, storage, model);
    try {
      const session = await core.createSession({ workingDirectory: env.ws, permissionMode: 'auto' });
      const cards: PermissionCard[] = [];
      session.updates$.subscribe((u: SessionUpdateEnvelope) => {
        if (u.update.type !== 'permission_requested') return;
        cards.push(u.update.card);
        const { toolCallId } = u.update;
        queueMicrotask(() => void session.resolvePermission(u.turnId!, toolCallId, 'allow_once'));
      });
      const { value: outcome, stallMs, wallStallMs } = await longestCpuStall(async () => {
        const { turnId } = await session.startTurn({ clientRequestId: `dense-${Math.random()}`, input: [{ type: 'text', text: 'go' }] });
        return session.waitForTurn(turnId);
      });
      expect(outcome.status).toBe('completed');
      // The rm at the end of 31,000 `;` is found through the sliced parse and shown; under heavy load
      // a parse past MAX_PARSE_MS also asks (`unparsable`), as before, so other cards may appear.
      expect(cards.some((card) => card.command?.endsWith('rm -rf gone') && /rm/.test(card.dangerNote ?? ''))).toBe(true);
      expect(readFileSync(join(env.ws, 'words.txt'), 'utf8')).toBe(`${'ab '.repeat(20_999)}ab\n`);
      expect(readFileSync(join(env.ws, 'after.txt'), 'utf8')).toBe('ran\n');
      // The turn's own stall is reported, not bounded: at load 14-18 it read 320-600 ms of CPU with
      // the detection sliced (the rest of the turn's stretches were not looked into).
      console.log(`[dense-command] longest stall ${stallMs.toFixed(0)} ms of CPU (wall ${wallStallMs} ms); unsliced detections ${unsliced.join(', ')} ms of CPU`);
    } finally {
      await core.shutdown();
    }
  }, 120_000);
});
