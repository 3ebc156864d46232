/**
 * Issue 20.2: the tool definitions and the World State the model receives say only what the
 * current mode offers. With the sandbox disabled the escalation parameters leave the schemas, and
 * no description, World State line or denial text may name them either. Checked on the requests the
 * scripted model recorded, for a core with a working sandbox and one with it disabled.
 */
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { createCore, type Core } from '../../../src/core.js';
import type { ModelRequest } from '../../../src/services/model/port.js';
import { scriptedModel } from '../../../src/services/model/scripted.js';
import { DENIAL_IS_FINAL_TEXT, DENIAL_IS_POLICY_TEXT } from '../../../src/services/permissions/texts.js';
import { BUILTIN_TOOL_NAMES } from '../../../src/services/tools/builtin.js';
import { workspaceToolOptions } from '../../../src/services/tools/workspace.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../../support/tool-env.js';
import { usePglite } from '../../support/databases.js';

let available: ToolEnv;
let disabled: ToolEnv;
let storage: SqlSessionStorage;
const cores: Core[] = [];

usePglite((s) => (storage = s));
useToolEnv((e) => (available = e));
useToolEnv((e) => (disabled = e), { sandbox: 'disabled' });

afterAll(async () => {
  for (const core of cores) await core.shutdown();
});

/** One turn: the model reads a credential file (a fence denial), then answers. Returns its requests. */
async function requestsOf(env: ToolEnv): Promise<ModelRequest[]> {
  const model = scriptedModel([{ toolCalls: [{ name: 'read', arguments: { path: join(env.home, '.ssh', 'id_ed25519') } }] }, { text: 'done' }]);
  const core = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model, closeStorageOnShutdown: false, ...workspaceToolOptions(env.runtime) });
  cores.push(core);
  const session = await core.createSession({ workingDirectory: env.ws });
  const { turnId } = await session.startTurn({ clientRequestId: randomUUID(), input: [{ type: 'text', text: 'read the key' }] });
  expect(await session.waitForTurn(turnId)).toMatchObject({ status: 'completed' });
  return model.requests;
}

function allText(request: ModelRequest): string {
  return JSON.stringify({ tools: request.tools, system: request.system, messages: request.messages });
}

describe('tool texts match the mode (issue 20.2)', () => {
  it('sandbox disabled: no schema, description, World State line or denial names sandboxPermissions or justification', async () => {
    const requests = await requestsOf(disabled);
    const first = requests[0]!;
    expect(first.tools.map((t) => t.name).filter((n) => (BUILTIN_TOOL_NAMES as readonly string[]).includes(n)).sort()).toEqual([...BUILTIN_TOOL_NAMES].sort());
    for (const request of requests) {
      expect(allText(request)).not.toMatch(/sandboxPermissions|justification/);
    }
    for (const tool of first.tools.filter((t) => t.name !== 'bash' && (BUILTIN_TOOL_NAMES as readonly string[]).includes(t.name))) {
      expect(tool.description.endsWith(DENIAL_IS_FINAL_TEXT), tool.name).toBe(true);
    }
    expect(first.tools.find((t) => t.name === 'bash')!.description).toMatch(/^Would run a bash command inside the platform sandbox, but the sandbox is unavailable/);
    // World State says what this session can do.
    expect(allText(first)).toContain('cannot be written in this session');
    // The read of a credential was refused, and the refusal names no way the schema lacks.
    const denial = requests[1]!.messages.filter((m) => m.role === 'tool').at(-1) as unknown as { text: string };
    expect(denial.text).toContain('denied under auto mode');
    expect(denial.text).toContain('this session cannot grant extra paths (the sandbox is off); do not retry');
  });

  it('sandbox available: every built-in tool carries the escalation parameters and the rule that names them; bash also the network', async (ctx) => {
    requireSandbox(ctx, available.runtime);
    const requests = await requestsOf(available);
    const first = requests[0]!;
    for (const tool of first.tools.filter((t) => (BUILTIN_TOOL_NAMES as readonly string[]).includes(t.name))) {
      expect(tool.description.endsWith(DENIAL_IS_POLICY_TEXT), tool.name).toBe(true);
      expect(Object.keys((tool.parameters as { properties: Record<string, unknown> }).properties), tool.name).toEqual(expect.arrayContaining(['sandboxPermissions', 'justification']));
    }
    const bash = first.tools.find((t) => t.name === 'bash')!;
    expect(JSON.stringify(bash.parameters)).toContain('"network"');
    expect(bash.description).toContain('unless the call asks for it with sandboxPermissions {"network": true}');
    const write = first.tools.find((t) => t.name === 'write')!;
    expect(JSON.stringify(write.parameters)).not.toContain('"network"');
    expect(allText(first)).toContain('need sandboxPermissions');
    const denial = requests[1]!.messages.filter((m) => m.role === 'tool').at(-1) as unknown as { text: string };
    expect(denial.text).toContain('retry this call once with sandboxPermissions');
  });
});
