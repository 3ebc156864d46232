/**
 * The Turn's context stays in V8's fast mode (a hidden class) on the step path (branch
 * perf-context, docs/decisions.md "The Turn's context shape"). xstate's `assign` copies the context
 * with `Object.assign({}, context, patch)`; V8 sends such a copy to dictionary mode (a hash table:
 * every read a lookup, every copy rehashed) when it adds a 20th key along a map transition nobody
 * made before, so a context of 20 or more top-level keys is fast or not by the luck of what ran
 * first. The check runs bench/turn-chart.mjs on the sources in a child process with
 * `--allow-natives-syntax`, from the very first turn (no warm-up to hide a slow start), and fails if
 * any Turn snapshot's context lacks fast properties (`%HasFastProperties`).
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../..', import.meta.url));

function runTurnChart(): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', '--allow-natives-syntax', '--expose-gc', 'bench/turn-chart.mjs', 'src'],
      {
        cwd: root,
        env: { ...process.env, TURN_CHART_INSPECT: '1', TURN_CHART_WARMUP: '0', TURN_CHART_INSPECT_TURNS: '3', BENCH_K: '10' },
        timeout: 60_000,
      },
      (error, stdout, stderr) => resolve({ code: error ? ((error as { code?: unknown }).code as number) ?? 1 : 0, out: `${stdout}${stderr}` }),
    );
  });
}

describe('the Turn context on the step path', () => {
  it('has fast properties in every Turn snapshot from the first turn on (K=10 tool steps a turn)', async () => {
    const { code, out } = await runTurnChart();
    expect(out).toContain('Turn contexts with fast properties 100%');
    expect(out).not.toContain('dictionary mode');
    expect(code, out).toBe(0);
  }, 60_000);
});
