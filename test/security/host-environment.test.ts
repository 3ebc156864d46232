/**
 * Attack round 5, checked and holding: the host's secrets in its environment (an API key, a database
 * URL, libpq's PG* variables) do not reach a sandboxed command. bash gets a fixed, minimal
 * environment, and its own PID namespace hides the host process's `/proc/<pid>/environ`.
 */
import { describe, expect, it } from 'vitest';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { requireSandbox, type ToolEnv } from '../support/tool-env.js';
import { useToolTurnBed } from '../support/tool-turn-bed.js';
import { scriptedAttack } from '../support/scripted-attack.js';

let storage: SqlSessionStorage;
let env: ToolEnv;
useToolTurnBed((s) => (storage = s), (e) => (env = e));

const SECRETS = { OPENAI_API_KEY: 'sk-attack5-host-secret', DATABASE_URL: 'postgres://u:attack5pw@h/db', PGPASSWORD: 'attack5-pgpass' };

describe("the host's environment", () => {
  it('no host secret reaches bash: not in env, not through /proc of any process it can see', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const saved = Object.fromEntries(Object.keys(SECRETS).map((k) => [k, process.env[k]]));
    Object.assign(process.env, SECRETS);
    try {
      const command = `env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; echo parent=$PPID; ls /proc | grep -c '^[0-9]'`;
      const { outcome, results } = await scriptedAttack(env, storage, [{ name: 'bash', arguments: { command } }]);
      expect(outcome).toMatchObject({ status: 'completed' });
      expect(results[0]).toContain('HOME=');
      for (const value of Object.values(SECRETS)) expect(results[0]).not.toContain(value);
      expect(results[0]).not.toMatch(/^(OPENAI_API_KEY|DATABASE_URL|PG[A-Z]+)=/m);
    } finally {
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  }, 60_000);
});
