/**
 * The acceptance list of seed 000 §12 (items 1-15), with every gap it names closed, run on PGlite
 * and on a real Postgres server.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createCore } from '../../src/core.js';
import { BusyError, CommandError } from '../../src/errors.js';
import { REMAINING_CALL_TEXT } from '../../src/machines/turn.js';
import { INTERRUPTED_RESULT_TEXT } from '../../src/services/context/assemble.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { defineTool } from '../../src/services/tools/define.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { echoTool } from '../../src/testing/tools.js';
import { backends, useBackend } from '../support/databases.js';
import { faultyStorage } from '../support/faults.js';
import { harness, updateTypes, type Harness } from '../support/harness.js';
import { assertAllRequests, assertSequences, assertStoredInvariants } from '../support/invariants.js';

const denyRuleTool = defineTool({
  name: 'forbidden',
  description: 'Always refused by rule.',
  parameters: z.object({}),
  authorize: () => ({ kind: 'deny', text: '[sandbox: /etc/passwd is protected and cannot be written in any mode; do not retry]', source: 'builtin' }),
  execute: () => {
    throw new Error('a rule-denied tool must never run');
  },
});

/** Resolves once the harness model has received `n` requests (a cancel before that would leave its step unplayed). */
async function modelCalled(h: Harness, n = 1): Promise<void> {
  for (let i = 0; i < 1_000 && h.model.requests.length < n; i += 1) await new Promise((r) => setTimeout(r, 5));
  expect(h.model.requests.length).toBeGreaterThanOrEqual(n);
}

function hangingTool(started: () => void) {
  return defineTool({
    name: 'hang',
    description: 'Never returns.',
    parameters: z.object({}),
    execute: () => {
      started();
      return new Promise<string>(() => undefined);
    },
  });
}

describe.each(backends)('session runtime on $name', (backend) => {
  let storage: SqlSessionStorage;

  useBackend(backend, (s) => (storage = s));

  it('a turn without tool calls completes after one model call [seed 000 acc 1]', async () => {
    const h = await harness(storage, [{ text: 'Hello there.' }]);
    const { turnId, outcome } = await h.run('hi');
    expect(outcome).toEqual({ status: 'completed', finalText: 'Hello there.' });
    expect(h.model.requests).toHaveLength(1);
    h.model.assertDone();
    const turn = await storage.getTurn(turnId);
    expect(turn).toMatchObject({ status: 'completed', modelCallCount: 1, modelSubmissionCount: 1, toolCallCount: 0 });
    const messages = await h.session.messages();
    expect(messages.map((m) => m.role)).toEqual(['user', 'assistant']);
    expect(updateTypes(h.updates)).toEqual([
      'turn_started',
      'phase_changed',
      'phase_changed',
      'text_delta',
      'draft_cleared',
      'phase_changed',
      'turn_finished',
    ]);
    assertSequences(h.updates);
    expect(h.updates[0]!.sequence).toBe(1);
  });

  it('a tool result is in the next model request [seed 000 acc 2]', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'echo', arguments: { text: 'ping' }, callId: 'c1' }] }, { text: 'pong received' }]);
    const { outcome } = await h.run('echo ping');
    expect(outcome).toEqual({ status: 'completed', finalText: 'pong received' });
    const second = h.model.requests[1]!;
    expect(second.messages.slice(-2)).toEqual([
      { role: 'assistant', content: [{ type: 'tool_call', callId: 'c1', name: 'echo', arguments: '{"text":"ping"}' }] },
      { role: 'tool', callId: 'c1', toolName: 'echo', status: 'success', text: 'ping' },
    ]);
  });

  it('several tool results keep provider order in the next request and in storage [seed 000 acc 3]', async () => {
    const h = await harness(storage, [
      {
        toolCalls: [
          { name: 'echo', arguments: { text: 'one' }, callId: 'a' },
          { name: 'echo', arguments: { text: 'two' }, callId: 'b' },
          { name: 'echo', arguments: { text: 'three' }, callId: 'c' },
        ],
      },
      { text: 'done' },
    ]);
    const { turnId } = await h.run('three calls');
    const tools = h.model.requests[1]!.messages.filter((m) => m.role === 'tool');
    expect(tools.map((m) => (m as { callId: string }).callId)).toEqual(['a', 'b', 'c']);
    // Write order: each result in its own transaction, in provider order, after the assistant message.
    const stored = (await h.session.messages()).filter((m) => m.turnId === turnId);
    expect(stored.map((m) => `${m.role}:${m.providerCallId ?? ''}`)).toEqual(['user:', 'assistant:', 'tool:a', 'tool:b', 'tool:c', 'assistant:']);
    const sequences = stored.map((m) => m.sequence);
    expect([...sequences].sort((x, y) => x - y)).toEqual(sequences);
    expect((await storage.getTurn(turnId))!.toolCallCount).toBe(3);
    await assertStoredInvariants(storage, h.session.sessionId);
  });

  it('an unknown tool becomes a result with its text and the model continues [seed 000 acc 4]', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'nope', arguments: {}, callId: 'u1' }] }, { text: 'ok' }]);
    const { outcome } = await h.run('call something unknown');
    expect(outcome.status).toBe('completed');
    expect(h.model.requests[1]!.messages.at(-1)).toEqual({ role: 'tool', callId: 'u1', toolName: 'nope', status: 'error', text: "tool 'nope' not found" });
    // The code the model never sees, on the live update and in the stored result.
    const error = { code: 'tool_not_found', message: "tool 'nope' not found", retryable: false };
    expect(h.updates.find((e) => e.update.type === 'tool_call_finished')!.update).toMatchObject({ toolName: 'nope', status: 'failed', error });
    const stored = (await h.session.messages()).find((m) => m.role === 'tool')!;
    expect(stored.content).toEqual([{ type: 'tool_result', callId: 'u1', status: 'failed', text: "tool 'nope' not found", error }]);
  });

  it('invalid arguments of an ordinary tool become a result [seed 000 acc 4]', async () => {
    const h = await harness(storage, [
      {
        toolCalls: [
          { name: 'echo', arguments: { text: 5 }, callId: 'bad-shape' },
          { name: 'echo', arguments: '{"text": "unterminated', callId: 'bad-json' },
        ],
      },
      { text: 'ok' },
    ]);
    await h.run('bad args');
    const [shape, json] = h.model.requests[1]!.messages.slice(-2) as Array<{ status: string; text: string }>;
    expect(shape!.status).toBe('error');
    expect(shape!.text).toMatch(/^invalid tool input: text: /);
    expect(json!.status).toBe('error');
    expect(json!.text).toMatch(/^invalid tool input: /);
    const results = (await h.session.messages()).filter((m) => m.role === 'tool');
    expect(results.map((m) => (m.content[0] as { error?: { code: string } }).error?.code)).toEqual(['invalid_arguments', 'invalid_arguments']);
  });

  it('a tool failure is returned to the model and present in the next request [seed 000 acc 5]', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'fail', arguments: { message: 'disk on fire' }, callId: 'f1' }] }, { text: 'I see the error' }]);
    const { outcome } = await h.run('fail please');
    expect(outcome).toEqual({ status: 'completed', finalText: 'I see the error' });
    expect(h.model.requests[1]!.messages.at(-1)).toEqual({ role: 'tool', callId: 'f1', toolName: 'fail', status: 'error', text: 'disk on fire' });
  });

  it('an approved card runs the tool [seed 000 acc 6]', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'guarded', arguments: { action: 'deploy' }, callId: 'g1' }] }, { text: 'deployed' }]);
    const turnId = await h.start('deploy');
    const requested = await h.waitFor((e) => e.update.type === 'permission_requested');
    const toolCallId = (requested.update as { toolCallId: string }).toolCallId;
    expect(h.session.snapshot().runtime).toMatchObject({ type: 'running', phase: 'waiting_permission', pendingApprovals: [{ toolCallId }] });
    expect(h.session.status()).toEqual({ type: 'active', activeFlags: ['waiting_on_approval'] });
    await h.session.resolvePermission(turnId, toolCallId, 'allow_once');
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'deployed' });
    expect(h.model.requests[1]!.messages.at(-1)).toMatchObject({ status: 'success', text: 'did deploy' });
    expect(h.session.status()).toEqual({ type: 'idle' });
  });

  it('a user denial stops the turn without running the tool [seed 000 acc 6]', async () => {
    const ran: string[] = [];
    const spy = defineTool({
      name: 'guarded',
      description: 'asks',
      parameters: z.object({ action: z.string() }),
      authorize: () => ({ kind: 'card', card: { toolName: 'guarded', kind: 'approval', summary: 's', environmentId: 'local', grantKey: 'g' } }),
      execute: ({ action }) => {
        ran.push(action);
        return 'ran';
      },
    });
    const h = await harness(storage, [{ toolCalls: [{ name: 'guarded', arguments: { action: 'rm' }, callId: 'd1' }] }], { tools: [spy] });
    const turnId = await h.start('remove');
    const requested = await h.waitFor((e) => e.update.type === 'permission_requested');
    await h.session.resolvePermission(turnId, (requested.update as { toolCallId: string }).toolCallId, 'deny');
    const outcome = await h.session.waitForTurn(turnId);
    expect(outcome).toMatchObject({ status: 'failed', code: 'permission_denied' });
    expect(ran).toEqual([]);
    expect(h.model.requests).toHaveLength(1);
    const result = (await h.session.messages()).find((m) => m.role === 'tool')!;
    expect(result.content[0]).toMatchObject({ status: 'denied' });
    expect((await storage.getTurn(turnId))).toMatchObject({ status: 'failed', errorCode: 'permission_denied' });
  });

  it('a rule denial is a result and the turn continues [seed 000 acc 6]', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'forbidden', arguments: {}, callId: 'r1' }] }, { text: 'understood' }], { tools: [denyRuleTool] });
    const { outcome } = await h.run('try the forbidden thing');
    expect(outcome).toEqual({ status: 'completed', finalText: 'understood' });
    expect(h.model.requests[1]!.messages.at(-1)).toMatchObject({ status: 'denied', text: expect.stringContaining('protected') });
    expect(updateTypes(h.updates)).not.toContain('permission_requested');
  });

  it('cancelling during a model call aborts it and discards the draft [seed 000 acc 7]', async () => {
    let aborted = false;
    const model = scriptedModel([
      async (_req) => ({ hang: true as const, before: [{ type: 'text_delta' as const, delta: 'partial answer' }] }),
    ]);
    const original = model.stream.bind(model);
    model.stream = (request, options) => {
      options.signal.addEventListener('abort', () => (aborted = true));
      return original(request, options);
    };
    const h = await harness(storage, model);
    const turnId = await h.start('think forever');
    await h.waitFor((e) => e.update.type === 'text_delta');
    expect(h.session.snapshot().runtime).toMatchObject({ phase: 'running_model', draft: { text: 'partial answer' } });
    await h.session.cancelTurn(turnId);
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'cancelled' });
    expect(aborted).toBe(true);
    expect(updateTypes(h.updates)).toContain('draft_cleared');
    expect(h.updates.find((e) => e.update.type === 'draft_cleared')!.update).toEqual({ type: 'draft_cleared', reason: 'discarded' });
    expect((await h.session.messages()).map((m) => m.role)).toEqual(['user']);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'cancelled', modelCallCount: 1 });
    await h.core.flushTrace();
    const spans = await storage.listTraceSpans({ turnId });
    // Cancelled by the user: no error code (a span the runtime stops is outcome_unknown instead, test/faults/reference-deviations.test.ts).
    expect(spans.map((s) => [s.kind, s.status, s.errorCode])).toEqual([['model_call', 'cancelled', null]]);
  });

  it('cancelling a turn cancels the active tool call [seed 000 acc 7]', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'slow', arguments: { ms: 60_000 }, callId: 's1' }, { name: 'echo', arguments: { text: 'later' }, callId: 's2' }] }]);
    const turnId = await h.start('go slow');
    await h.waitFor((e) => e.update.type === 'tool_call_progress');
    await h.session.cancelTurn(turnId);
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'cancelled' });
    const results = (await h.session.messages()).filter((m) => m.role === 'tool');
    expect(results.map((m) => [m.providerCallId, (m.content[0] as { status: string }).status])).toEqual([
      ['s1', 'cancelled'],
      ['s2', 'cancelled'],
    ]);
    expect((results[1]!.content[0] as { text: string }).text).toBe(REMAINING_CALL_TEXT);
  });

  it('cancelling during an approval wait clears the waiter [seed 000 acc 7]', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'guarded', arguments: { action: 'x' }, callId: 'w1' }] }]);
    const turnId = await h.start('needs approval');
    const requested = await h.waitFor((e) => e.update.type === 'permission_requested');
    const toolCallId = (requested.update as { toolCallId: string }).toolCallId;
    await h.session.cancelTurn(turnId);
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'cancelled' });
    expect(h.updates.find((e) => e.update.type === 'permission_resolved')!.update).toEqual({ type: 'permission_resolved', toolCallId, decision: 'cancelled' });
    await expect(h.session.resolvePermission(turnId, toolCallId, 'allow_once')).rejects.toMatchObject({ code: 'turn_not_active' });
    const result = (await h.session.messages()).find((m) => m.role === 'tool')!;
    expect(result.content[0]).toMatchObject({ status: 'cancelled' });
  });

  it('three identical calls end the turn as doom_loop [seed 000 acc 8]', async () => {
    const call = { name: 'echo', arguments: { text: 'same' } };
    const h = await harness(storage, [{ toolCalls: [call] }, { toolCalls: [call] }, { toolCalls: [{ ...call, arguments: { text: 'same' } }] }]);
    const { turnId, outcome } = await h.run('loop');
    expect(outcome).toMatchObject({ status: 'failed', code: 'doom_loop', message: "doom loop detected for tool 'echo'" });
    const results = (await h.session.messages()).filter((m) => m.role === 'tool');
    expect(results).toHaveLength(3);
    expect(results[2]!.content[0]).toMatchObject({ text: "doom loop detected for tool 'echo'" });
    expect(h.model.requests).toHaveLength(3);
    expect(await storage.getTurn(turnId)).toMatchObject({ errorCode: 'doom_loop' });
  });

  it('a different call resets the doom count and normalised arguments match [seed 000 acc 8]', async () => {
    const h = await harness(storage, [
      { toolCalls: [{ name: 'echo', arguments: '{"text":"a"}' }] },
      { toolCalls: [{ name: 'echo', arguments: '{ "text" : "a" }' }] },
      { toolCalls: [{ name: 'echo', arguments: { text: 'b' } }] },
      { toolCalls: [{ name: 'echo', arguments: { text: 'a' } }] },
      { text: 'fine' },
    ]);
    const { outcome } = await h.run('no loop');
    expect(outcome.status).toBe('completed');
  });

  /** Two top-level keys and a record: the shape the normalised-argument tests of acc 8 need. */
  const pair = defineTool({
    name: 'pair',
    description: 'Takes two keys and a map.',
    parameters: z.object({ path: z.string(), limit: z.number(), flags: z.record(z.string(), z.boolean()) }),
    execute: ({ path }) => `read ${path}`,
  });

  it('calls differing only in whitespace and key order are the same call [seed 000 acc 8]', async () => {
    // Two keys at the top (zod rebuilds those in schema order) and a record inside (zod keeps the
    // model's key order there): only the normalised signature makes these three one call.
    const h = await harness(
      storage,
      [
        { toolCalls: [{ name: 'pair', arguments: '{"path":"a.txt","limit":5,"flags":{"x":true,"y":false}}' }] },
        { toolCalls: [{ name: 'pair', arguments: '{ "limit" : 5 ,\n  "path" : "a.txt", "flags": { "y": false, "x": true } }' }] },
        { toolCalls: [{ name: 'pair', arguments: '\t{"flags":{"y":false,"x":true},"limit":5,"path":"a.txt"}  ' }] },
      ],
      { tools: [pair] },
    );
    const { turnId, outcome } = await h.run('loop with reordered keys');
    expect(outcome).toMatchObject({ status: 'failed', code: 'doom_loop', message: "doom loop detected for tool 'pair'" });
    const results = (await h.session.messages()).filter((m) => m.role === 'tool');
    expect(results.map((m) => (m.content[0] as { status: string; text: string }).text)).toEqual(['read a.txt', 'read a.txt', "doom loop detected for tool 'pair'"]);
    expect(h.model.requests).toHaveLength(3);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: 'doom_loop' });
  });

  it('a changed value inside the record is a different call [seed 000 acc 8]', async () => {
    // The same shape as above with one nested value changed: the count restarts, no doom loop.
    const h = await harness(
      storage,
      [
        { toolCalls: [{ name: 'pair', arguments: { path: 'a.txt', limit: 5, flags: { x: true, y: false } } }] },
        { toolCalls: [{ name: 'pair', arguments: { limit: 5, path: 'a.txt', flags: { y: false, x: true } } }] },
        { toolCalls: [{ name: 'pair', arguments: { path: 'a.txt', limit: 5, flags: { x: true, y: true } } }] },
        { text: 'fine' },
      ],
      { tools: [pair] },
    );
    expect((await h.run('no loop')).outcome).toEqual({ status: 'completed', finalText: 'fine' });
  });

  it('the default limit ends the turn after exactly 20 model calls [seed 000 acc 9]', async () => {
    // No `limits` option: DEFAULT_LIMITS (seed 000 §4, max_model_calls = 20).
    const h = await harness(storage, scriptedModel((_req, i) => ({ toolCalls: [{ name: 'echo', arguments: { text: `step ${i}` } }] })));
    const { turnId, outcome } = await h.run('never stop');
    expect(outcome).toMatchObject({ status: 'failed', code: 'max_model_calls' });
    expect(h.model.requests).toHaveLength(20);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: 'max_model_calls', modelCallCount: 20, modelSubmissionCount: 20, toolCallCount: 20 });
    // Every one of the 20 responses' calls ran and has its result; the 21st call was never made.
    expect((await h.session.messages()).filter((m) => m.role === 'tool')).toHaveLength(20);
  });

  it('reaching max_model_calls fails the turn [seed 000 acc 9]', async () => {
    const h = await harness(
      storage,
      scriptedModel((_req, i) => ({ toolCalls: [{ name: 'echo', arguments: { text: `step ${i}` } }] })),
      { limits: { maxModelCalls: 4 } },
    );
    const { turnId, outcome } = await h.run('never stop');
    expect(outcome).toMatchObject({ status: 'failed', code: 'max_model_calls' });
    expect(h.model.requests).toHaveLength(4);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: 'max_model_calls', modelCallCount: 4, toolCallCount: 4 });
  });

  it('a trace recorder whose every call fails changes nothing [seed 000 acc 10]', async () => {
    const steps = [{ toolCalls: [{ name: 'echo', arguments: { text: 'x' } }] }, { text: 'same result' }];
    const failing = {
      record: () => {
        throw new Error('recorder down');
      },
      flush: () => Promise.reject(new Error('recorder down')),
      stats: () => {
        throw new Error('recorder down');
      },
      close: () => Promise.reject(new Error('recorder down')),
    };
    const broken = await harness(storage, steps, { trace: failing });
    const healthy = await harness(storage, steps);
    const a = await broken.run('trace me');
    const b = await healthy.run('trace me');
    expect(a.outcome).toEqual(b.outcome);
    expect(updateTypes(broken.updates)).toEqual(updateTypes(healthy.updates));
    expect(broken.core.traceStats().droppedSignals).toBeGreaterThan(0);
    expect((await broken.session.messages()).map((m) => m.role)).toEqual((await healthy.session.messages()).map((m) => m.role));
  });

  // acc 10, a trace store that fails every write: test/faults/degradation.test.ts, 'trace queue full and trace database failing: the loop continues, ...'.

  // acc 11: test/faults/degradation.test.ts, 'assistant message write fails: no tool runs, the turn fails' (on PGlite and Postgres).

  it('restart marks running turns and spans and the next request carries the synthesized result [seed 000 acc 12]', async () => {
    const faulty = faultyStorage(storage);
    let started!: () => void;
    const toolStarted = new Promise<void>((r) => (started = r));
    const model1 = scriptedModel([{ toolCalls: [{ name: 'hang', arguments: {}, callId: 'lost' }] }]);
    // On Postgres, ownership is on: the restarted process has the same owner id (a host's stable
    // process name), so it frees its previous incarnation's leases at once instead of waiting for expiry.
    const ownership = { ownerId: `restart-${backend.name}` };
    const first = await createCore({ plan: true, conversationHistory: true, agents: true, storage: faulty, model: model1, tools: [hangingTool(() => started())], closeStorageOnShutdown: false, worldState: false, ownership });
    const session1 = await first.createSession({ workingDirectory: process.cwd() });
    const { turnId } = await session1.startTurn({ clientRequestId: 'before-crash', input: [{ type: 'text', text: 'run it' }] });
    await toolStarted;
    await first.flushTrace();
    faulty.freeze(); // The process dies here: nothing it does from now on reaches the database.

    const before = await storage.listTraceSpans({ turnId });
    expect(before.map((s) => `${s.kind}:${s.status}`)).toEqual(['model_call:succeeded', 'tool_call:running']);

    const model2 = scriptedModel([{ text: 'fresh start' }]);
    const second = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model: model2, tools: [echoTool], closeStorageOnShutdown: false, worldState: false, ownership });
    expect(second.startup.correction.turns).toBeGreaterThanOrEqual(1);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'interrupted', errorCode: 'process_restart' });
    const after = await storage.listTraceSpans({ turnId });
    expect(after.map((s) => `${s.kind}:${s.status}:${s.errorCode ?? ''}`)).toEqual(['model_call:succeeded:', 'tool_call:outcome_unknown:process_restart']);

    const session2 = await second.loadSession(session1.sessionId);
    // The old turn is never scheduled again: no active turn, its outcome is terminal.
    expect(session2.snapshot().runtime).toMatchObject({ type: 'terminal', turnId, outcome: { status: 'failed', code: 'process_restart' } });
    const stored = await storage.listMessages(session1.sessionId);
    const { turnId: next } = await session2.startTurn({ clientRequestId: 'after-crash', input: [{ type: 'text', text: 'again' }] });
    expect(await session2.waitForTurn(next)).toEqual({ status: 'completed', finalText: 'fresh start' });
    expect(model2.requests).toHaveLength(1);
    const messages = model2.requests[0]!.messages;
    expect(messages.slice(1, 3)).toEqual([
      { role: 'assistant', content: [{ type: 'tool_call', callId: 'lost', name: 'hang', arguments: '{}' }] },
      { role: 'tool', callId: 'lost', toolName: 'hang', status: 'interrupted', text: INTERRUPTED_RESULT_TEXT, synthetic: true },
    ]);
    assertAllRequests(model2.requests);
    // The database is unchanged by the synthesis: still no result row for the lost call.
    const afterTurn = await storage.listMessages(session1.sessionId);
    expect(afterTurn.filter((m) => m.providerCallId === 'lost')).toHaveLength(0);
    expect(afterTurn.slice(0, stored.length)).toEqual(stored);
    await second.shutdown();
  });

  it('startup purges expired trace payloads after the correction and a purge failure fails startup [seed 000 acc 12]', async () => {
    // Reference §9.4: migrate, mark running interrupted, purge expired payloads, then the recorder and turns.
    const session = await storage.createSession({ id: `ses_purge_${backend.name}`, workingDirectory: process.cwd() });
    const spanId = `span_purge_${backend.name}`;
    await storage.writeTraceSignals([
      {
        type: 'span_started',
        span: { id: spanId, traceId: `trace_purge_${backend.name}`, sessionId: session.id, turnId: null, parentSpanId: null, kind: 'compaction', name: 'session.compact', status: 'running', startedAt: new Date(Date.now() - 45 * 86_400_000).toISOString(), attributes: {} },
        payloads: [{ slot: 'request', body: { expired: backend.name } }],
      },
    ]);
    const faulty = faultyStorage(storage);
    faulty.failOn('purgeExpiredTracePayloads', 1);
    // The single-process order (ownership off); with ownership, the takeover scan is the correction (test/ownership).
    await expect(createCore({ plan: true, conversationHistory: true, agents: true, storage: faulty, model: scriptedModel([]), closeStorageOnShutdown: false, worldState: false, ownership: false })).rejects.toMatchObject({ code: 'persistence_error' });
    const order = faulty.calls.map((c) => c.method).filter((m) => ['migrate', 'markRunningInterrupted', 'purgeExpiredTracePayloads'].includes(m));
    expect(order).toEqual(['migrate', 'markRunningInterrupted', 'purgeExpiredTracePayloads']);
    // The failed purge changed nothing; the next start purges, and reports it.
    expect((await storage.db.query('SELECT 1 FROM trace_span_payloads WHERE span_id = $1', [spanId])).rowCount).toBe(1);
    const core = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model: scriptedModel([]), closeStorageOnShutdown: false, worldState: false });
    try {
      expect(core.startup.tracePurge.mappings).toBeGreaterThanOrEqual(1);
      expect((await storage.db.query('SELECT 1 FROM trace_span_payloads WHERE span_id = $1', [spanId])).rowCount).toBe(0);
      expect((await storage.listTraceSpans({ sessionId: session.id })).map((s) => s.id)).toEqual([spanId]);
    } finally {
      await core.shutdown();
    }
  });

  it('the remaining calls of a terminated batch are cancelled in order [seed 000 acc 13]', async () => {
    const h = await harness(storage, [
      {
        toolCalls: [
          { name: 'echo', arguments: { text: 'first' }, callId: 'k1' },
          { name: 'guarded', arguments: { action: 'no' }, callId: 'k2' },
          { name: 'echo', arguments: { text: 'third' }, callId: 'k3' },
          { name: 'update_plan', arguments: { plan: [{ step: 'x', status: 'pending' }] }, callId: 'k4' },
        ],
      },
    ]);
    const turnId = await h.start('batch');
    const requested = await h.waitFor((e) => e.update.type === 'permission_requested');
    await h.session.resolvePermission(turnId, (requested.update as { toolCallId: string }).toolCallId, 'deny');
    expect(await h.session.waitForTurn(turnId)).toMatchObject({ status: 'failed', code: 'permission_denied' });
    const results = (await h.session.messages()).filter((m) => m.role === 'tool');
    expect(results.map((m) => [m.providerCallId, (m.content[0] as { status: string; text: string }).status])).toEqual([
      ['k1', 'succeeded'],
      ['k2', 'denied'],
      ['k3', 'cancelled'],
      ['k4', 'cancelled'],
    ]);
    expect(results.slice(2).map((m) => (m.content[0] as { text: string }).text)).toEqual([REMAINING_CALL_TEXT, REMAINING_CALL_TEXT]);
    expect(updateTypes(h.updates)).not.toContain('plan_updated');
    await h.core.flushTrace();
    const spans = await storage.listTraceSpans({ turnId });
    const remaining = spans.filter((s) => s.providerCallId === 'k3' || s.providerCallId === 'k4');
    expect(remaining.map((s) => [s.status, s.attributes.permissionDecisionSource])).toEqual([
      ['cancelled', 'system'],
      ['cancelled', 'system'],
    ]);
    await assertStoredInvariants(storage, h.session.sessionId);
  });

  it('a duplicate client request is idempotent and a different turn is busy [seed 000 acc 14]', async () => {
    const h = await harness(storage, [{ hang: true }]);
    const turnId = await h.start('first', 'same-request');
    const again = await h.session.startTurn({ clientRequestId: 'same-request', input: [{ type: 'text', text: 'first' }] });
    expect(again.turnId).toBe(turnId);
    const busy = await h.session.startTurn({ clientRequestId: 'other', input: [{ type: 'text', text: 'second' }] }).catch((e: unknown) => e);
    expect(busy).toBeInstanceOf(BusyError);
    expect(busy).toMatchObject({ code: 'busy', activeTurnId: turnId });
    await modelCalled(h);
    await h.session.cancelTurn(turnId);
    await h.session.waitForTurn(turnId);
    // Still idempotent after the turn ended.
    expect((await h.session.startTurn({ clientRequestId: 'same-request', input: [{ type: 'text', text: 'first' }] })).turnId).toBe(turnId);
  });

  it('compaction and rewind answer session_active during a turn [seed 000 acc 15]', async () => {
    const h = await harness(storage, [{ hang: true }]);
    const turnId = await h.start('busy');
    await expect(h.session.beginMaintenance('compact')).rejects.toMatchObject({ code: 'session_active' });
    await expect(h.session.beginMaintenance('rewind')).rejects.toMatchObject({ code: 'session_active' });
    await modelCalled(h);
    await h.session.cancelTurn(turnId);
    await h.session.waitForTurn(turnId);
    await h.session.beginMaintenance('compact');
    const during = await h.session.startTurn({ clientRequestId: 'during-maintenance', input: [{ type: 'text', text: 'x' }] }).catch((e: unknown) => e);
    expect(during).toMatchObject({ code: 'session_active' });
    h.session.endMaintenance(false);
  });

  it('reload_required refuses a turn [seed 000 acc 15]', async () => {
    const h = await harness(storage, []);
    await h.session.beginMaintenance('compact');
    h.session.endMaintenance(true); // A checkpoint was committed but could not be installed.
    const refused = await h.session.startTurn({ clientRequestId: 'after-failed-install', input: [{ type: 'text', text: 'x' }] }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(CommandError);
    expect(refused).toMatchObject({ code: 'reload_required' });
    expect(h.session.snapshot().reloadRequired).toBe(true);
    await expect(h.session.beginMaintenance('rewind')).rejects.toMatchObject({ code: 'reload_required' });
  });

  it('reload_required is checked before an idempotent client request id [seed 000 acc 14]', async () => {
    // Seed 000 §2, StartTurn: reload_required, then an accepted client_request_id, then busy.
    const h = await harness(storage, [{ text: 'done' }]);
    const { turnId, outcome } = await h.run('first', 'seen-before');
    expect(outcome.status).toBe('completed');
    expect((await h.session.startTurn({ clientRequestId: 'seen-before', input: [{ type: 'text', text: 'first' }] })).turnId).toBe(turnId);
    await h.session.beginMaintenance('compact');
    h.session.endMaintenance(true);
    const refused = await h.session.startTurn({ clientRequestId: 'seen-before', input: [{ type: 'text', text: 'first' }] }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(CommandError);
    expect(refused).toMatchObject({ code: 'reload_required' });
  });

  it('permission decisions are matched by turn and tool call id [seed 000 acc 15]', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'guarded', arguments: { action: 'a' } }] }, { text: 'ok' }]);
    const turnId = await h.start('match ids');
    const requested = await h.waitFor((e) => e.update.type === 'permission_requested');
    const toolCallId = (requested.update as { toolCallId: string }).toolCallId;
    await expect(h.session.resolvePermission('turn_other', toolCallId, 'allow_once')).rejects.toMatchObject({ code: 'turn_not_active' });
    await expect(h.session.resolvePermission(turnId, 'tc_other', 'allow_once')).rejects.toMatchObject({ code: 'permission_not_pending' });
    await expect(h.session.resolvePermission(turnId, toolCallId, 'maybe' as never)).rejects.toMatchObject({ code: 'invalid_request' });
    await h.session.resolvePermission(turnId, toolCallId, 'allow_once');
    await expect(h.session.resolvePermission(turnId, toolCallId, 'allow_once')).rejects.toMatchObject({ code: 'permission_not_pending' });
    expect(await h.session.waitForTurn(turnId)).toMatchObject({ status: 'completed' });
    await expect(h.session.cancelTurn(turnId)).rejects.toMatchObject({ code: 'turn_not_active' });
  });
});
