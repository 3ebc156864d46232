/**
 * OpenTelemetry export (issue 16 point 2), through the public `createCore({ telemetry })` with the
 * real OpenTelemetry SDK: full turns with the scripted model (a transport retry, a tool that
 * succeeds, one behind an approval card, one that fails), checked span by span against the stored
 * trace of the same turn; contents only when opted in; a tracer that throws leaves the turn
 * completed; and an export over OTLP/HTTP to a receiver in this file that decodes what arrives.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { AsyncLocalStorage } from 'node:async_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT_CONTEXT, SpanStatusCode, context as otelContext, trace as otelTrace, type Context, type ContextManager, type Tracer } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { harness, type Harness } from '../../support/harness.js';
import { usePglite } from '../../support/databases.js';
import type { ScriptedStep } from '../../../src/services/model/scripted.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import type { CoreOptions } from '../../../src/core.js';
import type { TraceRecorder } from '../../../src/services/trace/recorder.js';
import type { TraceSignal } from '../../../src/services/trace/signals.js';

let storage!: SqlSessionStorage;
usePglite((s) => (storage = s));

/** A turn with every kind of tool call: echo succeeds, guarded asks (approved), fail fails. */
function script(): ScriptedStep[] {
  return [
    {
      events: [
        // The adapter retried the transport once before any output: one span, two attempts.
        { type: 'retry', attempt: 2, reason: 'HTTP 503' },
        { type: 'tool_call', callId: 'call_echo', name: 'echo', arguments: JSON.stringify({ text: 'secret-echo-argument' }) },
        { type: 'tool_call', callId: 'call_guarded', name: 'guarded', arguments: JSON.stringify({ action: 'deploy' }) },
        { type: 'tool_call', callId: 'call_fail', name: 'fail', arguments: JSON.stringify({ message: 'disk on fire' }) },
        { type: 'completed', usage: { inputTokens: 120, outputTokens: 30, cachedInputTokens: 100, reasoningTokens: 5 }, responseId: 'resp_first', finishReason: 'tool_use' },
      ],
    },
    { text: 'all done, secret-final-answer', usage: { inputTokens: 200, outputTokens: 12 } },
  ];
}

function sdk() {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  return { exporter, provider, tracer: provider.getTracer('openwork-core-test') };
}

/** Runs the scripted turn, approving the card as soon as it is shown. */
async function runTurn(h: Harness, clientRequestId?: string) {
  const from = h.updates.length;
  const approving = h.waitFor((u) => u.update.type === 'permission_requested' && h.updates.indexOf(u) >= from).then((u) =>
    h.session.resolvePermission(u.turnId!, (u.update as { toolCallId: string }).toolCallId, 'allow_once'),
  );
  const run = await h.run('please work, secret-user-prompt', clientRequestId);
  await approving;
  return run;
}

const byName = (spans: readonly ReadableSpan[], name: string) => spans.filter((s) => s.name === name);
const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId;

async function telemetryHarness(options: Partial<CoreOptions>) {
  return harness(storage, script(), options);
}

describe('createCore({ telemetry }) with the OpenTelemetry SDK', () => {
  it('emits the turn, its model calls and its tool calls, nested as the stored trace, with GenAI attributes', async () => {
    const { exporter, tracer } = sdk();
    const h = await telemetryHarness({ telemetry: { tracer } });
    const { turnId, outcome } = await runTurn(h);
    expect(outcome.status).toBe('completed');
    const spans = exporter.getFinishedSpans();

    const [turn, ...moreTurns] = byName(spans, 'invoke_agent');
    expect(moreTurns).toEqual([]);
    expect(turn).toBeDefined();
    // The turn is a root: no ambient or invented parent.
    expect(turn!.parentSpanContext).toBeUndefined();
    expect(turn!.attributes).toMatchObject({
      'gen_ai.operation.name': 'invoke_agent',
      'gen_ai.conversation.id': h.session.sessionId,
      'gen_ai.provider.name': 'scripted',
      'gen_ai.system': 'scripted',
      'gen_ai.request.model': 'scripted-model',
      'gen_ai.usage.input_tokens': 320,
      'gen_ai.usage.output_tokens': 42,
      'openwork.session.id': h.session.sessionId,
      'openwork.turn.id': turnId,
      'openwork.turn.outcome': 'completed',
    });
    expect(turn!.status.code).toBe(SpanStatusCode.UNSET);

    const models = byName(spans, 'chat scripted-model').sort((a, b) => Number(a.attributes['openwork.model.call_index']) - Number(b.attributes['openwork.model.call_index']));
    expect(models).toHaveLength(2);
    for (const m of models) {
      expect(parentOf(m)).toBe(turn!.spanContext().spanId);
      expect(m.spanContext().traceId).toBe(turn!.spanContext().traceId);
      expect(m.attributes).toMatchObject({ 'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': 'scripted', 'gen_ai.request.model': 'scripted-model', 'gen_ai.response.model': 'scripted-model' });
    }
    expect(models[0]!.attributes).toMatchObject({
      'gen_ai.response.id': 'resp_first',
      'gen_ai.response.finish_reasons': ['tool_call'],
      'gen_ai.usage.input_tokens': 120,
      'gen_ai.usage.output_tokens': 30,
      'openwork.usage.cached_input_tokens': 100,
      'openwork.usage.reasoning_tokens': 5,
      'openwork.model.attempts': 2,
      'openwork.model.retries': 1,
      'openwork.status': 'succeeded',
    });
    expect(models[1]!.attributes).toMatchObject({ 'gen_ai.response.finish_reasons': ['stop'], 'openwork.model.retries': 0 });

    const tools = spans.filter((s) => s.attributes['gen_ai.operation.name'] === 'execute_tool');
    expect(tools.map((t) => t.name).sort()).toEqual(['execute_tool echo', 'execute_tool fail', 'execute_tool guarded']);
    // Tool calls sit under the model call that asked for them, as in the stored trace.
    for (const t of tools) expect(parentOf(t)).toBe(models[0]!.spanContext().spanId);
    const tool = (name: string) => tools.find((t) => t.attributes['gen_ai.tool.name'] === name)!;
    expect(tool('echo').attributes).toMatchObject({ 'gen_ai.tool.call.id': 'call_echo', 'gen_ai.tool.type': 'function', 'openwork.tool.status': 'succeeded', 'openwork.permission.decision': 'allow' });
    expect(tool('echo').status.code).toBe(SpanStatusCode.UNSET);
    expect(tool('guarded').attributes).toMatchObject({ 'gen_ai.tool.call.id': 'call_guarded', 'openwork.tool.status': 'succeeded', 'openwork.permission.decision': 'allow', 'openwork.permission.source': 'user' });
    expect(typeof tool('guarded').attributes['openwork.permission.wait_ms']).toBe('number');
    expect(tool('fail').attributes).toMatchObject({ 'gen_ai.tool.call.id': 'call_fail', 'openwork.tool.status': 'failed', 'error.type': 'execution_failed' });
    expect(tool('fail').status).toMatchObject({ code: SpanStatusCode.ERROR, message: expect.stringContaining('disk on fire') });

    // The stored trace of the same turn has the same spans, parents and times.
    await h.core.flushTrace();
    const stored = await storage.listTraceSpans({ turnId });
    expect(stored).toHaveLength(5);
    const otelByStoredId = new Map(spans.filter((s) => s !== turn).map((s) => [s.attributes['openwork.span.id'] as string, s]));
    expect([...otelByStoredId.keys()].sort()).toEqual(stored.map((s) => s.id).sort());
    for (const row of stored) {
      const span = otelByStoredId.get(row.id)!;
      const expectedParent = row.parentSpanId === null ? turn!.spanContext().spanId : otelByStoredId.get(row.parentSpanId)!.spanContext().spanId;
      expect(parentOf(span)).toBe(expectedParent);
      expect(span.startTime[0] * 1000 + Math.floor(span.startTime[1] / 1e6)).toBe(Date.parse(row.startedAt));
    }

    // No contents without the opt-in.
    for (const span of spans) {
      const keys = Object.keys(span.attributes);
      expect(keys.filter((k) => /^gen_ai\.(input|output)\.messages$|^gen_ai\.system_instructions$|^gen_ai\.tool\.call\.(arguments|result)$/.test(k))).toEqual([]);
      expect(JSON.stringify(span.attributes)).not.toMatch(/secret-/);
    }
  });

  it('records prompts, completions, tool arguments and results only with captureContent: true', async () => {
    const { exporter, tracer } = sdk();
    // A host's own trace recorder sees exactly the signals the store would: contents are stripped.
    const recorded: TraceSignal[] = [];
    const recorder: TraceRecorder = {
      record: (signal) => recorded.push(signal),
      flush: async () => ({ flushed: true, droppedSignals: 0, writeFailures: 0, written: 0, queued: 0 }),
      stats: () => ({ droppedSignals: 0, writeFailures: 0, written: 0, queued: 0 }),
      close: async () => undefined,
    };
    const h = await telemetryHarness({ telemetry: { tracer, captureContent: true }, trace: recorder });
    const { outcome } = await runTurn(h);
    expect(outcome.status).toBe('completed');
    const spans = exporter.getFinishedSpans();
    const models = byName(spans, 'chat scripted-model').sort((a, b) => Number(a.attributes['openwork.model.call_index']) - Number(b.attributes['openwork.model.call_index']));
    const input = JSON.parse(models[0]!.attributes['gen_ai.input.messages'] as string) as Array<{ role: string; parts: Array<{ type: string; content?: string }> }>;
    expect(input.at(-1)).toEqual({ role: 'user', parts: [{ type: 'text', content: 'please work, secret-user-prompt' }] });
    expect(JSON.parse(models[0]!.attributes['gen_ai.system_instructions'] as string)[0]).toMatchObject({ type: 'text', content: expect.any(String) });
    const output = JSON.parse(models[0]!.attributes['gen_ai.output.messages'] as string);
    expect(output).toEqual([
      {
        role: 'assistant',
        finish_reason: 'tool_call',
        parts: [
          { type: 'tool_call', id: 'call_echo', name: 'echo', arguments: { text: 'secret-echo-argument' } },
          { type: 'tool_call', id: 'call_guarded', name: 'guarded', arguments: { action: 'deploy' } },
          { type: 'tool_call', id: 'call_fail', name: 'fail', arguments: { message: 'disk on fire' } },
        ],
      },
    ]);
    // The second call sees the tool results as tool messages.
    const second = JSON.parse(models[1]!.attributes['gen_ai.input.messages'] as string) as Array<{ role: string; parts: Array<Record<string, unknown>> }>;
    expect(second.filter((m) => m.role === 'tool').map((m) => m.parts[0])).toEqual([
      { type: 'tool_call_response', id: 'call_echo', response: 'secret-echo-argument' },
      { type: 'tool_call_response', id: 'call_guarded', response: 'did deploy' },
      { type: 'tool_call_response', id: 'call_fail', response: expect.stringContaining('disk on fire') },
    ]);
    expect(JSON.parse(models[1]!.attributes['gen_ai.output.messages'] as string)).toEqual([
      { role: 'assistant', finish_reason: 'stop', parts: [{ type: 'text', content: 'all done, secret-final-answer' }] },
    ]);
    const echo = spans.find((s) => s.name === 'execute_tool echo')!;
    expect(echo.attributes['gen_ai.tool.call.arguments']).toBe(JSON.stringify({ text: 'secret-echo-argument' }));
    expect(echo.attributes['gen_ai.tool.call.result']).toBe('secret-echo-argument');
    const turn = byName(spans, 'invoke_agent')[0]!;
    expect(JSON.parse(turn.attributes['gen_ai.output.messages'] as string)[0].parts[0].content).toBe('all done, secret-final-answer');
    expect(recorded).toHaveLength(10);
    expect(recorded.filter((signal) => 'content' in signal)).toEqual([]);
    expect(JSON.stringify(recorded)).not.toContain('secret-echo-argument');
  });

  it('a tracer that throws, or whose spans throw, loses spans but never the turn', async () => {
    const errors: unknown[] = [];
    const throwing: Tracer = {
      startSpan() {
        throw new Error('tracer exploded');
      },
      startActiveSpan() {
        throw new Error('tracer exploded');
      },
    } as unknown as Tracer;
    const h = await telemetryHarness({ telemetry: { tracer: throwing, captureContent: true, onError: (e) => errors.push(e) } });
    const { turnId, outcome } = await runTurn(h);
    expect(outcome).toEqual({ status: 'completed', finalText: 'all done, secret-final-answer' });
    expect(errors.length).toBeGreaterThan(0);
    // The stored trace is whole.
    await h.core.flushTrace();
    expect(await storage.listTraceSpans({ turnId })).toHaveLength(5);

    // Spans whose every method throws, and an error handler that throws as well.
    const { tracer } = sdk();
    const brokenSpans: Tracer = {
      startSpan: (name: string, options: unknown, ctx: Context) => {
        const real = tracer.startSpan(name, options as never, ctx);
        return new Proxy(real, {
          get(target, key) {
            if (key === 'spanContext') return () => target.spanContext();
            return () => {
              throw new Error(`span.${String(key)} exploded`);
            };
          },
        });
      },
    } as unknown as Tracer;
    const h2 = await harness(storage, script(), {
      telemetry: {
        tracer: brokenSpans,
        onError: () => {
          throw new Error('the handler exploded too');
        },
      },
    });
    const second = await runTurn(h2);
    expect(second.outcome.status).toBe('completed');
  });

  it('parents the turn under the host context it returns, never under the ambient one', async () => {
    // A real async context manager, so that an ambient span would be seen if the runtime used it.
    const storageOfContext = new AsyncLocalStorage<Context>();
    const manager: ContextManager = {
      active: () => storageOfContext.getStore() ?? ROOT_CONTEXT,
      with: (ctx, fn, thisArg, ...args) => storageOfContext.run(ctx, () => fn.call(thisArg, ...args)),
      bind: (_ctx, target) => target,
      enable() {
        return this;
      },
      disable() {
        return this;
      },
    };
    otelContext.setGlobalContextManager(manager);
    try {
      const { exporter, tracer } = sdk();
      const hostRequest = tracer.startSpan('host request');
      const ambient = tracer.startSpan('ambient host span');
      const hostContexts = new Map([['req-with-parent', otelTrace.setSpan(ROOT_CONTEXT, hostRequest)]]);
      const h = await telemetryHarness({ telemetry: { tracer, parentContext: ({ clientRequestId }) => hostContexts.get(clientRequestId) } });
      await otelContext.with(otelTrace.setSpan(ROOT_CONTEXT, ambient), () => runTurn(h, 'req-with-parent'));
      h.model.push(...script());
      await otelContext.with(otelTrace.setSpan(ROOT_CONTEXT, ambient), () => runTurn(h, 'req-without-parent'));
      const turns = byName(exporter.getFinishedSpans(), 'invoke_agent');
      const withParent = turns.find((t) => t.attributes['openwork.turn.client_request_id'] === 'req-with-parent')!;
      const without = turns.find((t) => t.attributes['openwork.turn.client_request_id'] === 'req-without-parent')!;
      expect(parentOf(withParent)).toBe(hostRequest.spanContext().spanId);
      expect(withParent.spanContext().traceId).toBe(hostRequest.spanContext().traceId);
      expect(without.parentSpanContext).toBeUndefined();
      for (const span of exporter.getFinishedSpans()) expect(span.spanContext().traceId).not.toBe(ambient.spanContext().traceId);
    } finally {
      otelContext.disable();
    }
  });
});

describe('export over OTLP/HTTP', () => {
  let server: Server;
  const bodies: unknown[] = [];
  let url = '';
  beforeAll(async () => {
    server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        bodies.push({ path: req.url, contentType: req.headers['content-type'], body: JSON.parse(Buffer.concat(chunks).toString('utf8')) });
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{}');
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it('sends the turn to a collector, which decodes the same spans and nesting', async () => {
    const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(new OTLPTraceExporter({ url }))] });
    const h = await telemetryHarness({ telemetry: { tracer: provider.getTracer('openwork-core') } });
    const { turnId } = await runTurn(h);
    await provider.forceFlush();
    await provider.shutdown();

    type OtlpValue = { stringValue?: string; intValue?: string | number; arrayValue?: { values: OtlpValue[] } };
    type OtlpSpan = { traceId: string; spanId: string; parentSpanId?: string; name: string; status?: { code?: number }; attributes: Array<{ key: string; value: OtlpValue }> };
    const received = bodies as Array<{ path: string; contentType: string; body: { resourceSpans: Array<{ scopeSpans: Array<{ scope: { name: string }; spans: OtlpSpan[] }> }> } }>;
    expect(received.length).toBeGreaterThan(0);
    expect(received[0]!.path).toBe('/v1/traces');
    expect(received[0]!.contentType).toContain('application/json');
    const spans = received.flatMap((r) => r.body.resourceSpans.flatMap((rs) => rs.scopeSpans.flatMap((ss) => ss.spans.map((s) => ({ ...s, scope: ss.scope.name })))));
    const attr = (s: OtlpSpan, key: string) => s.attributes.find((a) => a.key === key)?.value;
    const ofTurn = spans.filter((s) => attr(s, 'openwork.turn.id')?.stringValue === turnId);
    expect(ofTurn.map((s) => s.name).sort()).toEqual(['chat scripted-model', 'chat scripted-model', 'execute_tool echo', 'execute_tool fail', 'execute_tool guarded', 'invoke_agent']);
    const turn = ofTurn.find((s) => s.name === 'invoke_agent')!;
    expect(turn.parentSpanId ?? '').toBe('');
    expect(new Set(ofTurn.map((s) => s.traceId))).toEqual(new Set([turn.traceId]));
    const models = ofTurn.filter((s) => s.name.startsWith('chat '));
    for (const m of models) expect(m.parentSpanId).toBe(turn.spanId);
    const first = models.find((m) => attr(m, 'gen_ai.response.id')?.stringValue === 'resp_first')!;
    expect(attr(first, 'gen_ai.response.finish_reasons')?.arrayValue?.values.map((v) => v.stringValue)).toEqual(['tool_call']);
    expect(Number(attr(first, 'gen_ai.usage.input_tokens')?.intValue)).toBe(120);
    const failed = ofTurn.find((s) => s.name === 'execute_tool fail')!;
    expect(failed.parentSpanId).toBe(first.spanId);
    expect(failed.status?.code).toBe(2);
    expect(attr(failed, 'error.type')?.stringValue).toBe('execution_failed');
    expect(attr(failed, 'gen_ai.tool.call.id')?.stringValue).toBe('call_fail');
    expect(spans.every((s) => s.scope === 'openwork-core')).toBe(true);
  });
});
