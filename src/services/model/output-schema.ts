/**
 * @module services/model/output-schema
 * Structured output of a turn: a host's zod schema becomes the JSON Schema the model is asked to
 * follow, and the final answer is checked against the zod schema itself before the turn completes.
 *
 * The zod schema is a handle, not data, so it never enters machine context: `SessionHandle.startTurn`
 * registers it in the session's services under the turn id, the model and final-answer actors look it
 * up there, and it is dropped when the turn finishes.
 */
import { z } from 'zod';
import { InputError } from '../../errors.js';
import type { ResponseFormat } from './port.js';

/** What a turn with `outputSchema` carries while it runs. */
export interface TurnOutputFormat {
  schema: z.ZodType;
  responseFormat: ResponseFormat;
}

/** The name sent with the schema; providers want `^[a-zA-Z0-9_-]{1,64}$`. */
export const OUTPUT_FORMAT_NAME = 'final_answer';

/**
 * Checks a host's `outputSchema` and derives its JSON Schema: `invalid_request` when it is not a zod
 * schema, cannot be expressed as JSON Schema (dates, transforms), or its root is not an object (the
 * providers' structured output takes an object at the root).
 */
export function outputFormatOf(schema: unknown): TurnOutputFormat {
  if (!(schema instanceof z.ZodType)) {
    throw new InputError('invalid_request', 'outputSchema must be a zod schema (from the zod 4 package this library uses)');
  }
  let json: Record<string, unknown>;
  try {
    json = z.toJSONSchema(schema, { target: 'draft-7', io: 'output' }) as Record<string, unknown>;
  } catch (error) {
    throw new InputError('invalid_request', `outputSchema cannot be expressed as JSON Schema: ${(error as Error).message}`, { cause: error });
  }
  delete json.$schema;
  if (json.type !== 'object') {
    throw new InputError('invalid_request', 'outputSchema must describe an object at its root (wrap other values in a field)');
  }
  return { schema, responseFormat: { name: OUTPUT_FORMAT_NAME, schema: json } };
}

/**
 * The problem with a final answer, or null when it parses as JSON and fits the schema. Models often
 * wrap JSON in a Markdown fence even when asked not to; one fence around the whole answer is allowed.
 */
export function outputProblem(format: TurnOutputFormat, text: string): string | null {
  const parsed = parseAnswer(text);
  if (!parsed.ok) return `the final answer is not JSON: ${parsed.error}`;
  const checked = format.schema.safeParse(parsed.value);
  if (checked.success) return null;
  return `the final answer does not match outputSchema: ${checked.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ')}`;
}

/** The typed value of a final answer that `outputProblem` accepted. */
export function parseOutput<T>(schema: z.ZodType<T>, text: string): T {
  const parsed = parseAnswer(text);
  if (!parsed.ok) throw new InputError('invalid_request', `the final answer is not JSON: ${parsed.error}`);
  return schema.parse(parsed.value);
}

function parseAnswer(text: string): { ok: true; value: unknown } | { ok: false; error: string } {
  const fenced = /^\s*```(?:json)?\s*\n([\s\S]*?)\n\s*```\s*$/.exec(text);
  try {
    return { ok: true, value: JSON.parse(fenced ? fenced[1]! : text) };
  } catch (error) {
    return { ok: false, error: (error as Error).message };
  }
}
