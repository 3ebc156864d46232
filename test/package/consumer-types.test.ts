/**
 * Issue 16.3: the published declarations resolve in a host project that checks library types
 * (`skipLibCheck: false`) and has no `@types/pg` (a devDependency of ours, not a dependency). The
 * package is copied into the host's node_modules, as `npm install` would place it, so that its
 * imports resolve from the host's node_modules (which holds our dependencies and `@types/node`, but
 * not `@types/pg`), never from this repository's.
 */
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt, ROOT } from '../support/cli-process.js';

let host: string;

const HOST_TS = `
import { createCore, pgliteStorage, postgresStorage, toResponse, toSSE, type PostgresPoolOptions, type RunResult, type SessionSnapshot } from 'openwork-core';
import { scriptedModel } from 'openwork-core/testing';
import { z } from 'zod';
import { createServer } from 'node:http';

const pool: PostgresPoolOptions = { host: 'db', port: 5432, ssl: { rejectUnauthorized: false }, idleTimeoutMillis: 1000 };
export const server = postgresStorage({ connectionString: 'postgres://x', pool });

const Answer = z.object({ answer: z.string() });
export async function main(): Promise<[RunResult<{ answer: string }>, SessionSnapshot['usage']]> {
  const core = await createCore({ storage: pgliteStorage(), model: scriptedModel([{ text: '{"answer":"4"}' }]), plan: true });
  const session = await core.createSession();
  const result = await session.run('2+2?', { outputSchema: Answer });
  const answer: string | undefined = result.output?.answer;
  void answer;
  createServer((_req, res) => void toSSE(session.stream('hi'), res));
  const response: Response = toResponse(session.stream('hi'));
  void response;
  return [result, session.snapshot().usage];
}
`;

beforeAll(() => {
  ensureBuilt();
  host = realpathSync(mkdtempSync(join(tmpdir(), 'openwork-consumer-')));
  const modules = join(host, 'node_modules');
  mkdirSync(join(modules, '@types'), { recursive: true });
  // Our package as installed: its files, not a link back into this repository.
  const own = join(modules, 'openwork-core');
  mkdirSync(own);
  for (const entry of ['dist', 'package.json']) cpSync(join(ROOT, entry), join(own, entry), { recursive: true });
  // Every other installed package, except @types/pg; of @types only node (a Node host has it).
  for (const entry of readdirSync(join(ROOT, 'node_modules'))) {
    if (entry === 'openwork-core' || entry === '@types' || entry.startsWith('.')) continue;
    symlinkSync(join(ROOT, 'node_modules', entry), join(modules, entry), 'dir');
  }
  symlinkSync(join(ROOT, 'node_modules', '@types', 'node'), join(modules, '@types', 'node'), 'dir');
  writeFileSync(join(host, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }));
  writeFileSync(
    join(host, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: { strict: true, noEmit: true, skipLibCheck: false, target: 'es2022', module: 'nodenext', moduleResolution: 'nodenext', types: ['node'], lib: ['es2023', 'dom'] },
      files: ['host.ts'],
    }),
  );
  writeFileSync(join(host, 'host.ts'), HOST_TS);
}, 300_000);

afterAll(() => {
  if (host) rmSync(host, { recursive: true, force: true });
});

function tsc(): string {
  const bin = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  try {
    execFileSync(process.execPath, [bin, '-p', 'tsconfig.json'], { cwd: host, encoding: 'utf8', stdio: 'pipe' });
    return '';
  } catch (error) {
    return `${(error as { stdout?: string }).stdout ?? ''}${(error as { stderr?: string }).stderr ?? ''}`;
  }
}

describe('published declarations in a consumer project', () => {
  it('compile with skipLibCheck false and no @types/pg installed', { timeout: 240_000 }, () => {
    expect(existsSync(join(host, 'node_modules', '@types', 'pg'))).toBe(false);
    expect(tsc()).toBe('');
  });

  it('and the check looks: a dist declaration that imports pg types fails it', { timeout: 240_000 }, () => {
    // The regression this guards against: a public declaration naming a pg type.
    const file = join(host, 'node_modules', 'openwork-core', 'dist', 'pg-leak.d.ts');
    writeFileSync(file, "import type pg from 'pg';\nexport type Leak = pg.PoolConfig;\n");
    writeFileSync(join(host, 'leak.ts'), "export type { Leak } from './node_modules/openwork-core/dist/pg-leak.js';\n");
    writeFileSync(join(host, 'tsconfig.json'), JSON.stringify({ ...JSON.parse(JSON.stringify({ compilerOptions: { strict: true, noEmit: true, skipLibCheck: false, module: 'nodenext', moduleResolution: 'nodenext', types: ['node'] }, files: ['leak.ts'] })) }));
    try {
      expect(tsc()).toMatch(/pg/);
    } finally {
      rmSync(file);
    }
  });
});
