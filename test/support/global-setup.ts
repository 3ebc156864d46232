/**
 * Vitest global setup: one real PostgreSQL server for the whole run (unless TEST_DATABASE_URL
 * names one). Test files create their own databases on it.
 */
import type { TestProject } from 'vitest/node';
import { startPostgres, type PostgresServer } from './postgres-server.js';

let server: PostgresServer | undefined;

export async function setup(project: TestProject): Promise<void> {
  let url = process.env.TEST_DATABASE_URL;
  if (!url) {
    server = await startPostgres();
    url = server.url;
  }
  project.provide('databaseUrl', url);
}

export async function teardown(): Promise<void> {
  server?.stop();
}

declare module 'vitest' {
  export interface ProvidedContext {
    databaseUrl: string;
  }
}
