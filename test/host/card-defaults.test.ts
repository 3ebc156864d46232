/**
 * Issue 16.3: a host's own `authorize` writes only the card's summary; the runtime fills toolName,
 * kind, environmentId and grantKey. The attack: a session-wide grant for one host tool must not let
 * another host tool (whose card also left grantKey out) run unasked.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool } from '../../src/services/tools/define.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { harness } from '../support/harness.js';
import { usePglite } from '../support/databases.js';

const ran: string[] = [];
const hostTool = (name: string) =>
  defineTool({
    name,
    description: `${name} something`,
    parameters: z.object({ what: z.string() }),
    authorize: ({ what }) => ({ kind: 'card', card: { summary: `${name} ${what}` } }),
    execute: ({ what }) => {
      ran.push(`${name}:${what}`);
      return `${name} did ${what}`;
    },
  });

describe('permission cards of a host-defined authorize', () => {
  let storage: SqlSessionStorage;
  usePglite((s) => (storage = s));

  it('get toolName, kind, environmentId and a per-tool grantKey; a grant for one tool never covers another', async () => {
    const h = await harness(
      storage,
      [
        { toolCalls: [{ name: 'deploy', arguments: { what: 'v1' } }] },
        { toolCalls: [{ name: 'deploy', arguments: { what: 'v2' } }] },
        { toolCalls: [{ name: 'delete_db', arguments: { what: 'prod' } }] },
      ],
      { tools: [hostTool('deploy'), hostTool('delete_db')] },
    );
    const cards: unknown[] = [];
    h.session.updates$.subscribe((e) => {
      if (e.update.type !== 'permission_requested') return;
      cards.push(e.update.card);
      const decision = e.update.card.toolName === 'deploy' ? 'allow_for_session' : 'deny';
      void h.session.resolvePermission(e.turnId!, e.update.toolCallId, decision);
    });
    const result = await h.session.run('ship it');
    // A denied card ends the turn (seed 000 §5).
    expect(result.outcome).toMatchObject({ status: 'failed', code: 'permission_denied' });
    expect(cards).toEqual([
      {
        toolName: 'deploy',
        kind: 'approval',
        summary: 'deploy v1',
        environmentId: `workspace:${process.cwd()}`,
        grantKey: 'tool:deploy',
        decisions: ['allow_once', 'deny', 'allow_for_turn', 'allow_for_session'],
      },
      // v2 ran under the session grant; delete_db asked, under its own key, and was denied.
      expect.objectContaining({ toolName: 'delete_db', summary: 'delete_db prod', grantKey: 'tool:delete_db' }),
    ]);
    expect(ran).toEqual(['deploy:v1', 'deploy:v2']);
  });
});
