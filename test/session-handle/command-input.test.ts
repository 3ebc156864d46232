/**
 * Issue 13, point 4: bad command input is refused at the door. Each input below used to be
 * accepted and fail later (a turn id handed out, then an index row too large; a session whose every
 * turn fails; a `persistence_error`; an inspector 500; `spawn E2BIG`). Now each is a typed
 * `invalid_request` (HTTP 400 on the inspector) and nothing is stored; an oversized bash command is
 * answered with an `invalid_arguments` result before anything is spawned, and the turn goes on.
 */
import { existsSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createCore, type Core } from '../../src/core.js';
import { InputError } from '../../src/errors.js';
import { createActorTracker } from '../../src/inspector/server/actor-tracker.js';
import { startInspectorServer, type InspectorServer } from '../../src/inspector/server/server.js';
import { MAX_ID_LENGTH } from '../../src/protocol/command-input.js';
import type { ToolResultBlock } from '../../src/protocol/content.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { permissionPolicy } from '../../src/services/permissions/authorizer.js';
import { BASH_MAX_COMMAND_BYTES } from '../../src/services/tools/bash.js';
import { builtinTools } from '../../src/services/tools/builtin.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from '../support/databases.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../support/tool-env.js';

let storage: SqlSessionStorage;
const cores: Core[] = usePglite((s) => {
  storage = s;
});

let env: ToolEnv;
useToolEnv((e) => (env = e));

async function newCore(steps: Parameters<typeof scriptedModel>[0] = []): Promise<Core> {
  const core = await createCore({ plan: true, conversationHistory: true, agents: true,
    storage,
    model: scriptedModel(steps),
    tools: builtinTools(env.runtime),
    authorizer: permissionPolicy(env.runtime),
    sandbox: env.runtime.sandbox,
    closeStorageOnShutdown: false,
  });
  cores.push(core);
  return core;
}

const invalidRequest = { constructor: InputError, code: 'invalid_request' };

describe('commands refuse bad input before anything is stored', () => {
  it('startTurn: a 5 MB clientRequestId, one past the limit, a NUL or a lone surrogate in it answer invalid_request; no turn exists', async () => {
    const core = await newCore([{ text: 'ok' }]);
    const session = await core.createSession({ workingDirectory: env.ws });
    const text = [{ type: 'text' as const, text: 'hi' }];
    for (const clientRequestId of ['r'.repeat(5 * 1024 * 1024), 'r'.repeat(MAX_ID_LENGTH + 1), 'a\u0000b', 'a\ud800']) {
      await expect(session.startTurn({ clientRequestId, input: text })).rejects.toMatchObject(invalidRequest);
    }
    expect(await storage.listTurns(session.sessionId)).toEqual([]);
    expect(await storage.listMessages(session.sessionId)).toEqual([]);
    // The limit itself is accepted.
    const { turnId } = await session.startTurn({ clientRequestId: 'r'.repeat(MAX_ID_LENGTH), input: text });
    expect(await session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'ok' });
    expect((await storage.getTurn(turnId))?.clientRequestId).toBe('r'.repeat(MAX_ID_LENGTH));
  });

  it('createSession: a relative, missing or non-directory workingDirectory, a NUL in it, in the id or the title, or a 5 MB id answer invalid_request; no session is stored', async () => {
    const core = await newCore();
    const before = (await storage.listSessions({ limit: 1000 })).length;
    const refused: Array<Parameters<Core['createSession']>[0]> = [
      { workingDirectory: 'relative/dir' },
      { workingDirectory: '.' },
      { workingDirectory: join(env.base, 'does-not-exist') },
      { workingDirectory: join(env.ws, 'src', 'main.txt') },
      { workingDirectory: `${env.ws}\u0000x` },
      { workingDirectory: env.ws, id: 'ses_\u0000' },
      { workingDirectory: env.ws, id: 's'.repeat(5 * 1024 * 1024) },
      { workingDirectory: env.ws, title: 'title \u0000' },
      {} as Parameters<Core['createSession']>[0],
    ];
    for (const options of refused) await expect(core.createSession(options)).rejects.toMatchObject(invalidRequest);
    expect(await storage.listSessions({ limit: 1000 })).toHaveLength(before);
  });

  it('loadSession, deleteSession and listChildSessions with a NUL answer invalid_request, not persistence_error', async () => {
    const core = await newCore();
    await expect(core.loadSession('ses_\u0000')).rejects.toMatchObject(invalidRequest);
    await expect(core.loadSession('')).rejects.toMatchObject(invalidRequest);
    await expect(core.deleteSession('ses_\u0000')).rejects.toMatchObject(invalidRequest);
    await expect(core.listChildSessions('ses_\u0000')).rejects.toMatchObject(invalidRequest);
    // An ordinary unknown id is still session_not_found.
    await expect(core.loadSession('ses_unknown')).rejects.toMatchObject({ code: 'session_not_found' });
    const session = await core.createSession({ workingDirectory: env.ws });
    await expect(session.rewindConversation('cmp_\u0000')).rejects.toMatchObject(invalidRequest);
    await expect(session.readTranscript({ compactionId: 'cmp_\u0000' })).rejects.toMatchObject(invalidRequest);
  });

  it(`bash: a 200 KB command is refused as invalid_arguments before anything is spawned (limit ${BASH_MAX_COMMAND_BYTES} bytes); the turn goes on`, async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const marker = join(env.ws, 'spawned.txt');
    const padding = `: ${'x'.repeat(200 * 1024)}`;
    const withinLimit = `echo fits; : ${'y'.repeat(BASH_MAX_COMMAND_BYTES - 100)}`;
    const core = await newCore([
      { toolCalls: [{ name: 'bash', arguments: { command: `touch ${marker}; ${padding}` } }, { name: 'bash', arguments: { command: withinLimit } }] },
      { text: 'done' },
    ]);
    const session = await core.createSession({ workingDirectory: env.ws, permissionMode: 'accept_edits' });
    const { turnId } = await session.startTurn({ clientRequestId: 'big', input: [{ type: 'text', text: 'run it' }] });
    expect(await session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'done' });
    const results = (await storage.listMessages(session.sessionId)).filter((m) => m.role === 'tool').map((m) => m.content[0] as ToolResultBlock);
    expect(results[0]).toMatchObject({ status: 'failed', error: { code: 'invalid_arguments' } });
    expect(results[0]!.text).toContain(`longer than ${BASH_MAX_COMMAND_BYTES} bytes`);
    expect(existsSync(marker)).toBe(false);
    expect(results[1]).toMatchObject({ status: 'succeeded' });
    expect(results[1]!.text.startsWith('fits\n')).toBe(true);
  });
});

function get(server: InspectorServer, path: string): Promise<{ status: number; json: { error?: { code: string } } }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: server.port, method: 'GET', path, headers: { host: `127.0.0.1:${server.port}`, authorization: `Bearer ${server.token}` } }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += String(d)));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(text || '{}') }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('the inspector decodes paths at the door', () => {
  it('bad percent-encoding and %00 answer 400 invalid_request, not 500', async () => {
    const tracker = createActorTracker();
    const core = await newCore();
    const server = await startInspectorServer({ core, tracker, heartbeatMs: 100, workingDirectory: env.ws });
    try {
      for (const path of ['/api/sessions/%E0%A4%A/state', '/api/sessions/%/state', '/api/sessions/%ED%A0%80/state', '/api/sessions/ses%00x/state', '/%00']) {
        const reply = await get(server, path);
        expect({ path, status: reply.status, code: reply.json.error?.code }).toEqual({ path, status: 400, code: 'invalid_request' });
      }
      expect((await get(server, '/api/sessions/ses_unknown/state')).status).toBe(404);
    } finally {
      await server.close();
    }
  });
});
