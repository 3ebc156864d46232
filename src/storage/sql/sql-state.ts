/**
 * @module storage/sql/sql-state
 * The SQLSTATE of a driver error, on its own so that the failure classifiers (`outcome-unknown.ts`,
 * `rolled-back.ts`, `postgres-connect.ts`) and the lease store need none of the row mapping's types.
 */

/** The SQLSTATE of a driver error, when it carries one. */
export function sqlStateOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}
