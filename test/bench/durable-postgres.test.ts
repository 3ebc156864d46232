/**
 * The benchmarks' PostgreSQL server keeps the server's default durability (issue 14): a baseline
 * measured with fsync off made a slow durable step look cheap. The test suite's server keeps
 * durability off for speed; `startPostgres({ durable: true })` must not.
 */
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { startPostgres, type PostgresServer } from '../support/postgres-server.js';

const servers: PostgresServer[] = [];
afterAll(() => {
  for (const s of servers) s.stop();
});

async function durability(server: PostgresServer): Promise<Record<string, string>> {
  const client = new pg.Client({ connectionString: server.url });
  await client.connect();
  try {
    const { rows } = await client.query(`SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes')`);
    return Object.fromEntries(rows.map((r: { name: string; setting: string }) => [r.name, r.setting]));
  } finally {
    await client.end();
  }
}

describe('benchmark PostgreSQL server', () => {
  it('runs with fsync, synchronous_commit and full_page_writes on when durable', async () => {
    const server = await startPostgres({ durable: true });
    servers.push(server);
    expect(await durability(server)).toEqual({ fsync: 'on', synchronous_commit: 'on', full_page_writes: 'on' });
  });

  it('keeps the test suite default (durability off) otherwise', async () => {
    const server = await startPostgres();
    servers.push(server);
    expect(await durability(server)).toEqual({ fsync: 'off', synchronous_commit: 'off', full_page_writes: 'off' });
  });
});
