/**
 * Helpers of the sub-agent tests: one scripted model for a root and its explorers (told apart by
 * the explorer system prompt), and readers of what a request carried.
 */
import type { SessionUpdateEnvelope } from '../../../src/protocol/updates.js';
import type { ModelRequest } from '../../../src/services/model/port.js';
import { scriptedModel, type ScriptedStep } from '../../../src/services/model/scripted.js';

export function isChild(request: ModelRequest): boolean {
  return request.system[0]!.content.startsWith('You are an explorer');
}

/** The first user text of a request: an explorer's task. */
export function taskOf(request: ModelRequest): string {
  const first = request.messages.find((m) => m.role === 'user');
  return first ? (first.content[0] as { text: string }).text : '';
}

/** The `<agent_message>` envelopes a request carried, in order. */
export function agentMessages(request: ModelRequest): string[] {
  return request.messages.flatMap((m) => (m.role === 'user' && m.kind === 'agent_message' ? [m.content[0]!.text] : []));
}

/** The tool results of a request, in order, as `toolName -> text`. */
export function toolResults(request: ModelRequest): Array<{ toolName: string; status: string; text: string }> {
  return request.messages.flatMap((m) => (m.role === 'tool' ? [{ toolName: m.toolName, status: m.status, text: m.text }] : []));
}

/** One model for the root and its explorers; `root` gets the index of the root's call. */
export function router(
  root: (request: ModelRequest, i: number) => ScriptedStep | Promise<ScriptedStep>,
  child: (request: ModelRequest, i: number) => ScriptedStep | Promise<ScriptedStep>,
) {
  let rootCalls = 0;
  let childCalls = 0;
  return scriptedModel((request) => (isChild(request) ? child(request, childCalls++) : root(request, rootCalls++)));
}

/** Resolves with the first envelope of `stream` that `match` accepts. */
export function firstUpdate(stream: { subscribe(fn: (e: SessionUpdateEnvelope) => void): { unsubscribe(): void } }, match: (e: SessionUpdateEnvelope) => boolean): Promise<SessionUpdateEnvelope> {
  return new Promise((resolve) => {
    const sub = stream.subscribe((e) => {
      if (match(e)) {
        queueMicrotask(() => sub.unsubscribe());
        resolve(e);
      }
    });
  });
}

/**
 * Timers for wait_agent: a timeout of exactly 600,000 ms (the maximum) is a real minute, any other
 * fires after 1 ms. A test thus waits for a delivery with `timeout_ms: 600000` and times out fast
 * with any other value.
 */
export const splitTimers = {
  setTimeout: (fn: () => void, ms: number) => setTimeout(fn, ms === 600_000 ? 60_000 : 1),
  clearTimeout: (handle: unknown) => clearTimeout(handle as NodeJS.Timeout),
};
