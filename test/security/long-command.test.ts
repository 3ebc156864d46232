/**
 * Attack round 5b: a command built to make danger detection slow. The bash grammar's parse time grows
 * with the square of a pipeline's length, so 32,000 pipes in 64 KiB held the host's main thread for
 * seconds, and `$(((…)))` nested 20,000 deep overflowed the detector's stack. bash now refuses both
 * shapes as `invalid_arguments` before anything parses them (`BASH_MAX_PIPES`, `BASH_MAX_NESTING`):
 * no card, the turn goes on, and the event loop keeps ticking.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { longestStall } from '../support/event-loop.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from '../support/databases.js';
import type { PermissionCard, SessionUpdateEnvelope, TurnOutcome } from '../../src/protocol/updates.js';
import { scriptedModel, type ScriptedToolCall } from '../../src/services/model/scripted.js';
import { BASH_MAX_NESTING, BASH_MAX_PIPES } from '../../src/services/tools/bash.js';
import { MAX_JUSTIFICATION_CHARS } from '../../src/services/permissions/escalation.js';
import { builtinToolsCore } from '../support/scripted-attack.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../support/tool-env.js';

let storage: SqlSessionStorage;
usePglite((s) => (storage = s));

let env: ToolEnv;
useToolEnv((e) => (env = e));

/** One turn of `calls`, one per step, with the longest stall of the event loop (20 ms timer). */
async function attackTurn(calls: ScriptedToolCall[]): Promise<{ outcome: TurnOutcome; results: string[]; cards: PermissionCard[]; stallMs: number }> {
  const model = scriptedModel([...calls.map((call) => ({ toolCalls: [call] })), { text: 'done' }]);
  const core = await builtinToolsCore(env, storage, model);
  try {
    const session = await core.createSession({ workingDirectory: env.ws, permissionMode: 'auto' });
    const cards: PermissionCard[] = [];
    session.updates$.subscribe((u: SessionUpdateEnvelope) => {
      if (u.update.type !== 'permission_requested') return;
      cards.push(u.update.card);
      const { toolCallId } = u.update;
      queueMicrotask(() => void session.resolvePermission(u.turnId!, toolCallId, 'deny'));
    });
    const { value: outcome, stallMs } = await longestStall(async () => {
      const { turnId } = await session.startTurn({ clientRequestId: `long-${Math.random()}`, input: [{ type: 'text', text: 'go' }] });
      return session.waitForTurn(turnId);
    });
    const results = (model.requests.at(-1)?.messages ?? []).filter((m) => m.role === 'tool').map((m) => (m as { text: string }).text);
    return { outcome, results, cards, stallMs };
  } finally {
    await core.shutdown();
  }
}

describe('a command built to slow danger detection is refused before parsing (attack round 5b)', () => {
  it('32,000 pipes (twice, once after rm -rf) and 20,000 nested $(((: invalid_arguments, no card, the loop keeps ticking, the turn goes on', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const pipes = 'a|'.repeat(32_000) + 'a'; // 64,001 bytes, under the 64 KiB length bound
    const nested = `echo $(((${'('.repeat(20_000)}1${')'.repeat(20_000)})))`;
    const attack = await attackTurn([
      { name: 'bash', arguments: { command: pipes } },
      { name: 'bash', arguments: { command: `rm -rf x; ${pipes.slice(0, 60_000)}` } },
      { name: 'bash', arguments: { command: nested } },
      { name: 'bash', arguments: { command: 'echo ran > after.txt' } },
    ]);
    expect(attack.outcome.status).toBe('completed');
    expect(attack.cards).toEqual([]);
    expect(attack.results).toHaveLength(4);
    expect(attack.results[0]).toContain(`'|' characters, more than ${BASH_MAX_PIPES}`);
    expect(attack.results[1]).toContain(`'|' characters, more than ${BASH_MAX_PIPES}`);
    expect(attack.results[2]).toContain(`levels deep, more than ${BASH_MAX_NESTING}`);
    expect(attack.results[0]).toMatch(/invalid/i);
    expect(readFileSync(join(env.ws, 'after.txt'), 'utf8')).toBe('ran\n');
    // Unbounded, each pipe command held the loop 1.6-5.8 s (the parse budget alone still allows 1 s);
    // generous for a loaded machine: the refusals above are what fails when the bound is removed.
    expect(attack.stallMs).toBeLessThan(3_000);
  }, 120_000);

  it('a real pipeline and a here-document script with | in its code still run without a card', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const script = `cat > gen.js <<'EOF'\n${'for (let i = 0; i < n; i++) { if (a || b) { x |= y; f(i); } }\n'.repeat(60)}EOF\nprintf 'a\\nb\\n' | sort | uniq | wc -l > lines.txt`;
    const attack = await attackTurn([{ name: 'bash', arguments: { command: script } }]);
    expect(attack.outcome.status).toBe('completed');
    expect(attack.cards).toEqual([]);
    expect(readFileSync(join(env.ws, 'lines.txt'), 'utf8').trim()).toBe('2');
  }, 60_000);

  it('a justification of 1,000,000 mixed Cyrillic and Latin characters never reaches a card: invalid_arguments, the turn goes on', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const justification = 'раth '.repeat(200_000); // look-alike words: the slow path of strict card text
    const attack = await attackTurn([
      { name: 'bash', arguments: { command: 'cat /etc/hostname', sandboxPermissions: { network: true }, justification } },
      { name: 'read', arguments: { path: join(env.outside, 'data.txt'), sandboxPermissions: { paths: [{ path: env.outside, access: 'read', scope: 'subtree' }] }, justification } },
      { name: 'bash', arguments: { command: 'echo ran > after-justification.txt' } },
    ]);
    expect(attack.outcome.status).toBe('completed');
    expect(attack.cards).toEqual([]);
    expect(attack.results[0]).toContain(`longer than ${MAX_JUSTIFICATION_CHARS} characters`);
    expect(attack.results[1]).toContain(`longer than ${MAX_JUSTIFICATION_CHARS} characters`);
    expect(readFileSync(join(env.ws, 'after-justification.txt'), 'utf8')).toBe('ran\n');
    // No bound on the stall here: the 12 MB of arguments themselves (JSON, the stored message) held
    // the loop up to 2.9 s at load 8-12, with or without the bound; the response bound covers that.
  }, 120_000);
});
