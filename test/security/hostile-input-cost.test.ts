/**
 * Attack round 7: input a hostile party controls held the host's event loop. A stdio MCP server
 * wrote lines that are JSON but not JSON-RPC (each failed the SDK's schema at tens of microseconds:
 * 64 KiB of `1` lines, one read of its stdout, held the loop for most of a second, and a server can
 * send such reads without end); a SKILL.md whose 64 KiB frontmatter held thousands of keys or deep
 * brackets, or whose body ended in 60,000 blank lines, held it for 0.5-2.7 s at every World State
 * sampling (before every model call); a compaction summary response of 12 Mi characters held it for
 * most of a second in the summary checks.
 *
 * Stalls are read in the process's CPU time between two ticks of a 20 ms timer (`longestCpuStall`),
 * so a loaded machine (where the process waits for a core) does not count; the bounds are a quarter
 * or less of what each stall took before its fix.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SUMMARY_HEADINGS, validateSummary } from '../../src/services/compaction/summary.js';
import { mcpTools, type McpTools } from '../../src/services/mcp/tools.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from '../support/databases.js';
import { longestCpuStall } from '../support/event-loop.js';
import { harness } from '../support/harness.js';
import { skillRoot } from '../support/skill-root.js';

let storage: SqlSessionStorage;
usePglite((s) => (storage = s));
const servers: McpTools[] = [];
afterEach(async () => {
  while (servers.length > 0) await servers.pop()!.close();
});

/** The longest CPU stretch a test allows: far below each stall it guards against (0.5 s or more). */
const STALL_BOUND_MS = 250;

/** CPU milliseconds `run` took (the process's clock, every thread). */
function cpuOf(run: () => void): number {
  const start = process.cpuUsage();
  run();
  const used = process.cpuUsage(start);
  return (used.user + used.system) / 1000;
}

describe('hostile input does not hold the host (attack round 7)', () => {
  it('a stdio MCP server flooding 512 KiB of lines that are not JSON-RPC: the call still answers, the loop is never held long', async () => {
    const server = await mcpTools({ name: 'hostile', command: process.execPath, args: [resolve('test/fixtures/mcp/hostile-server.mjs')], env: { MCP_HOSTILE: 'junk-flood' }, trust: 'trusted' });
    servers.push(server);
    const h = await harness(storage, [{ toolCalls: [{ name: 'hostile__fine', arguments: {} }] }, { text: 'done' }], { tools: [server] });
    const { value, stallMs } = await longestCpuStall(() => h.run('go'));
    expect(value.outcome).toEqual({ status: 'completed', finalText: 'done' });
    const finished = h.updates.flatMap((e) => (e.update.type === 'tool_call_finished' ? [e.update] : []));
    expect(finished.map((f) => [f.status, f.text])).toEqual([['succeeded', 'fine']]);
    // Without the bound the loop was held 4.0 s in one stretch; with it, 5 ms a read (one run read
    // 256 ms around the turn's own work, so this bound is wider than the others).
    expect(stallMs).toBeLessThan(1_000);
  }, 120_000);

  it('skills with huge frontmatter, deep brackets or 60,000 trailing blank lines: each is refused or read without a long stall', async () => {
    const keys = Array.from({ length: 6_000 }, (_, i) => `k${i}: v`).join('\n');
    const root = skillRoot({
      keys: `---\ndescription: many keys\n${keys}\n---\nbody\n`,
      brackets: `---\ndescription: deep\nk: ${'['.repeat(3_900)}\n---\nbody\n`,
      blank: `---\ndescription: blank lines\n---\nbody${'\n'.repeat(60_000)}`,
      good: '---\ndescription: A good skill.\n---\nDo good.\n',
    });
    const h = await harness(storage, [], { skills: { root }, workingDirectory: mkdtempSync(join(tmpdir(), 'openwork-ws-')) });
    const { value: listed, stallMs } = await longestCpuStall(() => h.core.listSkills());
    expect(listed.skills.map((s) => s.name)).toEqual(['blank', 'good']);
    expect(listed.warnings.map((w) => w.reason)).toEqual([
      'SKILL.md frontmatter nests brackets more than 32 levels deep',
      expect.stringMatching(/^SKILL\.md frontmatter is 5\d{4} characters; the limit is 4096$/),
    ]);
    expect(stallMs).toBeLessThan(STALL_BOUND_MS);
  }, 60_000);

  it('a summary response of 12 Mi characters is refused before it is scanned', () => {
    const headings = SUMMARY_HEADINGS.map((heading) => `${heading}\nx`).join('\n');
    const text = `<conversation_summary format_version="1">\n${headings}\n${'< /\u200b'.repeat(1 << 20)}${'<'.repeat(8 << 20)}\n</conversation_summary>`;
    let result: ReturnType<typeof validateSummary> | undefined;
    const cpuMs = cpuOf(() => {
      result = validateSummary(text, 'stop', false);
    });
    expect(result).toEqual({ ok: false, classification: 'degenerate', reason: `the summary response is ${text.length} characters; at most 1048576 are read` });
    expect(cpuMs).toBeLessThan(STALL_BOUND_MS);
  });
});
