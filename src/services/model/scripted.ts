/**
 * @module services/model/scripted
 * `scriptedModel`: an in-process `ModelPort` that plays scripted steps, records every request, and
 * fails loudly on a call it has no step for (and, through `assertDone`, on a step never used).
 * For unit tests and the offline demo; exported from `openwork-core/testing`.
 */
import { ModelError, OpenworkError, type OpenworkErrorOptions } from '../../errors.js';
import type { TokenUsage } from '../../storage/storage.js';
import { estimateTokens } from '../context/estimate.js';
import { sleep } from '../abortable.js';
import type { FinishReason, ModelCallOptions, ModelPort, ModelRequest, ModelStreamEvent } from './port.js';

export interface ScriptedToolCall {
  name: string;
  /** An object is sent as JSON; a string is sent as is (to script malformed arguments). */
  arguments?: unknown;
  callId?: string;
}

export type ScriptedStep =
  | {
      text?: string;
      reasoning?: string;
      toolCalls?: ScriptedToolCall[];
      usage?: Partial<TokenUsage>;
      finishReason?: FinishReason;
      /** Characters per text delta; defaults to 16. */
      chunk?: number;
      /** Milliseconds between stream events; defaults to the model's `delayMs`. */
      delayMs?: number;
    }
  | { events: ModelStreamEvent[]; delayMs?: number }
  | { error: Error; afterEvents?: ModelStreamEvent[] }
  /** Emits `before`, then waits until the call is aborted. */
  | { hang: true; before?: ModelStreamEvent[] }
  /** Waits for `gate` (or an abort) before playing `step`. */
  | { gate: Promise<unknown>; step: ScriptedStep }
  | ((request: ModelRequest, index: number) => ScriptedStep | Promise<ScriptedStep>);

export interface ScriptedModelOptions {
  provider?: string;
  model?: string;
  contextWindow?: number;
  maxOutputTokens?: number;
  delayMs?: number;
  /** Keep a deep copy of every request in `requests` (default true; benchmarks turn it off). */
  record?: boolean;
}

/**
 * `script_error`: the script and the calls disagree (a call with no step, a step never used). A
 * mistake of the test's script, not a failure of the runtime: `assertDone()` throws it, and a call
 * with no step fails as a `ModelError` (`model_error`, what a turn reports) whose `cause` is one.
 */
export class ScriptError extends OpenworkError {
  declare readonly code: 'script_error';
  constructor(message: string, options?: OpenworkErrorOptions) {
    super('script_error', message, options);
  }
}

export interface ScriptedModel extends ModelPort {
  /** Every request received, in order (deep copies). */
  readonly requests: ModelRequest[];
  /** Calls that had no scripted step. */
  readonly unexpected: ModelRequest[];
  /** Steps not yet played. */
  readonly remaining: number;
  /** Adds steps at the end of the script. */
  push(...steps: ScriptedStep[]): void;
  /** Throws if any step was never used or any call had no step. */
  assertDone(): void;
}


function waitForAbort(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) => {
    if (signal.aborted) reject(signal.reason);
    else signal.addEventListener('abort', () => reject(signal.reason), { once: true });
  });
}

let callCounter = 0;

/**
 * The events of a scripted response, made one at a time as they are played: a step of 12 MB of
 * arguments serialises each call when its turn comes, so the runtime's slices (services/host-slice)
 * fall between them as they do between a provider's events (branch trust-stall).
 */
function* eventsOf(step: Extract<ScriptedStep, { text?: string }>, request: ModelRequest): Generator<ModelStreamEvent> {
  let count = 0;
  if (step.reasoning) {
    count += 1;
    yield { type: 'reasoning_delta', delta: step.reasoning };
  }
  const text = step.text ?? '';
  const chunk = Math.max(1, step.chunk ?? 16);
  for (let i = 0; i < text.length; i += chunk) {
    count += 1;
    yield { type: 'text_delta', delta: text.slice(i, i + chunk) };
  }
  for (const call of step.toolCalls ?? []) {
    callCounter += 1;
    count += 1;
    yield {
      type: 'tool_call',
      callId: call.callId ?? `call_${callCounter}`,
      name: call.name,
      arguments: typeof call.arguments === 'string' ? call.arguments : JSON.stringify(call.arguments ?? {}),
    };
  }
  const usage: TokenUsage = {
    inputTokens: step.usage?.inputTokens ?? estimateTokens(request.messages) + estimateTokens(request.system),
    outputTokens: step.usage?.outputTokens ?? estimateTokens(text) + estimateTokens(step.toolCalls ?? []),
    cachedInputTokens: step.usage?.cachedInputTokens ?? 0,
    reasoningTokens: step.usage?.reasoningTokens ?? (step.reasoning ? estimateTokens(step.reasoning) : 0),
  };
  yield {
    type: 'completed',
    usage,
    responseId: `resp_${callCounter}_${count}`,
    finishReason: step.finishReason ?? ((step.toolCalls?.length ?? 0) > 0 ? 'tool_use' : 'stop'),
  };
}

/**
 * A model that plays a script.
 *
 * @example
 * const model = scriptedModel([
 *   { toolCalls: [{ name: 'echo', arguments: { text: 'hi' } }] },
 *   { text: 'done' },
 * ]);
 */
export function scriptedModel(
  script: ScriptedStep[] | ((request: ModelRequest, index: number) => ScriptedStep | Promise<ScriptedStep>),
  options: ScriptedModelOptions = {},
): ScriptedModel {
  const steps: ScriptedStep[] = Array.isArray(script) ? [...script] : [];
  const generator = Array.isArray(script) ? undefined : script;
  const requests: ModelRequest[] = [];
  const unexpected: ModelRequest[] = [];
  const provider = options.provider ?? 'scripted';
  const model = options.model ?? 'scripted-model';
  let index = 0;

  async function* play(step: ScriptedStep, request: ModelRequest, signal: AbortSignal, callIndex: number): AsyncGenerator<ModelStreamEvent> {
    if (typeof step === 'function') {
      yield* play(await step(request, callIndex), request, signal, callIndex);
      return;
    }
    if ('gate' in step) {
      await Promise.race([step.gate, waitForAbort(signal)]);
      yield* play(step.step, request, signal, callIndex);
      return;
    }
    if ('hang' in step) {
      for (const event of step.before ?? []) yield event;
      await waitForAbort(signal);
      return;
    }
    if ('error' in step) {
      for (const event of step.afterEvents ?? []) yield event;
      throw step.error;
    }
    const events = 'events' in step ? step.events : eventsOf(step, request);
    const delay = step.delayMs ?? options.delayMs ?? 0;
    for (const event of events) {
      if (delay > 0) await sleep(delay, signal);
      if (signal.aborted) throw signal.reason;
      yield event;
    }
  }

  return {
    id: `${provider}/${model}`,
    providerId: provider,
    model,
    ...(options.contextWindow !== undefined ? { contextWindow: options.contextWindow } : {}),
    ...(options.maxOutputTokens !== undefined ? { maxOutputTokens: options.maxOutputTokens } : {}),
    requests,
    unexpected,
    get remaining() {
      return steps.length - Math.min(index, steps.length);
    },
    push(...more) {
      steps.push(...more);
    },
    assertDone() {
      if (unexpected.length > 0) throw new ScriptError(`the model was called ${unexpected.length} time(s) more than scripted`, { details: { unexpectedCalls: unexpected.length } });
      if (!generator && index < steps.length) throw new ScriptError(`${steps.length - index} scripted step(s) were never used`, { details: { unusedSteps: steps.length - index } });
    },
    stream(request: ModelRequest, { signal }: ModelCallOptions): AsyncIterable<ModelStreamEvent> {
      if (options.record !== false) requests.push(structuredClone(request));
      const callIndex = index;
      index += 1;
      const step = generator ? (req: ModelRequest) => generator(req, callIndex) : steps[callIndex];
      if (step === undefined) {
        unexpected.push(structuredClone(request));
        const message = `scripted model: no step for call ${callIndex + 1}`;
        const error = new ModelError('model_error', message, { cause: new ScriptError(message, { details: { call: callIndex + 1 } }), details: { scriptError: true, call: callIndex + 1 } });
        return (async function* () {
          throw error;
        })();
      }
      return play(step, request, signal, callIndex);
    },
  };
}
