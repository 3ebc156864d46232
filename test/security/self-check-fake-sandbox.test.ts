/**
 * Attack (reference §4.6, §4.15 acc 12): a launcher that starts without error but does not confine
 * the command. The self-check must call the sandbox available only when a write the policy denies
 * fails with a kernel denial (EPERM / EROFS) and leaves the host file alone; then bash must never
 * run on the fake. Two fakes stand in for `bwrap`, each reporting its exit code on the status fd the
 * way bubblewrap does: one runs the command unconfined, one swallows it and reports success.
 */
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { toolEnv, type ToolEnv } from '../support/tool-env.js';

const dir = mkdtempSync(join(tmpdir(), 'openwork-fake-bwrap-'));
const envs: ToolEnv[] = [];
afterAll(() => {
  for (const env of envs) env.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

/** A `bwrap` that drops every sandbox option, then does `body` with the command in "$@". */
function fakeBwrap(name: string, body: string): string {
  const path = join(dir, name);
  writeFileSync(path, `#!/bin/bash\nwhile [ $# -gt 0 ] && [ "$1" != "--" ]; do shift; done\nshift\n${body}\nprintf '{"exit-code": %d}\\n' "$code" >&3\nexit "$code"\n`);
  chmodSync(path, 0o755);
  return path;
}

describe('the self-check refuses a launcher that does not confine [reference §4.15 acc 12]', () => {
  const cases = [
    { name: 'runs the command unconfined', body: '"$@"; code=$?', reason: /a write the policy denies reached the file system/ },
    { name: 'swallows the command and reports success', body: 'code=0', reason: /the denied write did not fail with a kernel denial/ },
  ];
  for (const { name, body, reason } of cases) {
    it(`a fake bwrap that ${name} leaves the sandbox unavailable, and bash never runs`, async () => {
      const env = await toolEnv({ bwrapPath: fakeBwrap(name.replace(/\W+/g, '-'), body) });
      envs.push(env);
      expect(env.runtime.sandbox).toMatchObject({ available: false, kind: 'bubblewrap', detail: expect.stringMatching(reason) });
      const marker = join(env.ws, 'must-not-exist');
      const { card, executed, result } = await env.call('bash', { command: `touch ${marker}` });
      expect(card).toBeNull();
      expect(executed).toBe(false);
      expect(result.error?.code).toBe('sandbox_unavailable');
      expect(existsSync(marker)).toBe(false);
    });
  }
});
