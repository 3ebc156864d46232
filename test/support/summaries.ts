/**
 * Scripted models that answer summary requests, and valid or broken summaries.
 */
import type { ModelRequest } from '../../src/services/model/port.js';
import { scriptedModel, type ScriptedModel, type ScriptedModelOptions, type ScriptedStep } from '../../src/services/model/scripted.js';
import { SUMMARY_HEADINGS } from '../../src/services/compaction/summary.js';

export function validSummary(note = 'the task so far', headings: readonly string[] = SUMMARY_HEADINGS): string {
  const body = headings.map((h, i) => `${h}\n${i === 0 ? `The user asked about ${note}.` : 'None'}\nDetails are kept here so that the summary is long enough to be a real continuation summary of the work.`);
  return `<conversation_summary format_version="1">\n${body.join('\n')}\n</conversation_summary>`;
}

export function isSummaryRequest(request: ModelRequest): boolean {
  const last = request.messages.at(-1);
  return request.tools.length === 0 && last?.role === 'user' && JSON.stringify(last.content).includes('durable continuation summary');
}

/**
 * A model whose ordinary calls follow `steps` (or a generator) and whose summary calls answer with
 * `summary` (default: a valid summary). `summaries` counts the summary calls.
 */
export function compactingModel(
  steps: ScriptedStep[] | ((request: ModelRequest, index: number) => ScriptedStep | Promise<ScriptedStep>),
  options: ScriptedModelOptions & { summary?: (request: ModelRequest, attempt: number) => ScriptedStep } = {},
): ScriptedModel & { summaryRequests: ModelRequest[]; turnRequests: ModelRequest[] } {
  const queue = Array.isArray(steps) ? [...steps] : null;
  const generator = Array.isArray(steps) ? null : steps;
  const summaryRequests: ModelRequest[] = [];
  const turnRequests: ModelRequest[] = [];
  let turnIndex = 0;
  const model = scriptedModel(
    (request) => {
      if (isSummaryRequest(request)) {
        summaryRequests.push(request);
        return options.summary ? options.summary(request, summaryRequests.length) : { text: validSummary() };
      }
      turnRequests.push(request);
      const i = turnIndex++;
      if (generator) return generator(request, i);
      const step = queue![i];
      if (!step) throw new Error(`compactingModel: no step for turn call ${i + 1}`);
      return step;
    },
    options,
  );
  return Object.assign(model, { summaryRequests, turnRequests });
}
