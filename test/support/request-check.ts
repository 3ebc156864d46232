/**
 * The request check applied to every recorded model request of every test (issue 2, "a check applied
 * to every recorded model request"): each tool call has exactly one result, in provider order, and
 * no result lacks its call. `setup-request-check.ts` (a vitest setup file) registers every
 * `scriptedModel` any test creates here and runs `checkRecordedRequests` after each test, so no
 * suite has to remember to call it.
 */
import type { ScriptedModel } from '../../src/services/model/scripted.js';
import { assertRequestInvariants } from './invariants.js';

const models: Array<WeakRef<ScriptedModel>> = [];
const checked = new WeakMap<ScriptedModel, number>();

/** Called for every scripted model as it is created. */
export function registerScriptedModel(model: ScriptedModel): void {
  models.push(new WeakRef(model));
}

/** How many scripted models created so far are still alive (for the check's own test). */
export function registeredScriptedModels(): ScriptedModel[] {
  return models.map((ref) => ref.deref()).filter((m): m is ScriptedModel => m !== undefined);
}

/**
 * Checks every request recorded since the last check, on every live scripted model; each request
 * is checked once (a failure is reported once, then the request counts as checked).
 */
export function checkRecordedRequests(): number {
  let count = 0;
  const failures: string[] = [];
  for (let i = models.length - 1; i >= 0; i -= 1) {
    const model = models[i]!.deref();
    if (!model) {
      models.splice(i, 1);
      continue;
    }
    const from = checked.get(model) ?? 0;
    const requests = model.requests.slice(from);
    checked.set(model, from + requests.length);
    for (const [k, request] of requests.entries()) {
      count += 1;
      try {
        assertRequestInvariants(request);
      } catch (error) {
        failures.push(`scripted model ${model.id}, request ${from + k + 1}: ${(error as Error).message}`);
      }
    }
  }
  if (failures.length > 0) throw new Error(`recorded model requests break the tool call/result invariant:\n${failures.join('\n')}`);
  return count;
}
