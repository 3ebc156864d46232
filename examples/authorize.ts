import { createCore, defineTool, pgliteStorage } from 'openwork-core';
import { scriptedModel } from 'openwork-core/testing';
import { z } from 'zod';

const deploy = defineTool({
  name: 'deploy',
  description: 'Deploys a version.',
  parameters: z.object({ version: z.string() }),
  // Only the summary is the host's to write: toolName, kind, environmentId and grantKey get defaults.
  authorize: ({ version }) => ({ kind: 'card', card: { summary: `deploy ${version} to production` } }),
  execute: ({ version }) => `deployed ${version}`,
});

const core = await createCore({
  storage: pgliteStorage(),
  model: scriptedModel([{ toolCalls: [{ name: 'deploy', arguments: { version: 'v2' } }] }, { text: 'Deployed v2.' }]),
  tools: [deploy],
});
const session = await core.createSession();
session.updates$.subscribe(({ turnId, update }) => {
  if (update.type !== 'permission_requested') return;
  console.log(update.card.summary, update.card.grantKey); // deploy v2 to production tool:deploy
  void session.resolvePermission(turnId!, update.toolCallId, 'allow_for_session');
});
console.log((await session.run('Ship v2')).text); // Deployed v2.
await core.shutdown();
