/**
 * @module machines/grants
 * The one way a grant enters a grant table, for the Session's session-scoped grants and the Turn's
 * turn-scoped ones: a key already granted leaves the table as it is, so no update is made for it.
 */
import type { Grants } from './session/ports.js';

/** The table with `grantKey` allowed in `environmentId` (the same object when it already was). */
export function addGrant(grants: Grants, environmentId: string, grantKey: string): Grants {
  const existing = grants[environmentId] ?? [];
  return existing.includes(grantKey) ? grants : { ...grants, [environmentId]: [...existing, grantKey] };
}
