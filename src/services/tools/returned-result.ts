/**
 * @module services/tools/returned-result
 * What a host tool's `execute` returned, checked at the boundary (integrity-paths point 3): a string
 * or a tool result of the declared shape whose artifacts are plain JSON. JavaScript lets a tool
 * return anything (a BigInt, a function, a result whose text is a number, artifacts with a cycle);
 * such a value failed later, where it was stored or published, and ended the turn or left it waiting.
 * Here it becomes a `failed` result with `execution_failed` that says what came back, so the model
 * reads why and the turn goes on, as after a tool that threw.
 */
import { z } from 'zod';
import { toolErrorSchema, toolResultStatusSchema } from '../../protocol/content.js';
import { failedResult, succeededResult, type ToolResult } from '../../protocol/tool-result.js';

const returnedResultSchema = z.object({
  status: toolResultStatusSchema,
  text: z.string(),
  error: toolErrorSchema.optional(),
  artifacts: z.array(z.record(z.string(), z.unknown())).optional(),
  sandboxDenied: z.boolean().optional(),
});

/** The text the model reads for a value that is not a result: what kind of value it was, never the value. */
export function notAResultText(reason: string): string {
  return `the tool returned something that is not a tool result (${reason}); nothing of it was kept`;
}

function kindOf(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  const type = typeof value;
  return type === 'object' ? 'an object' : `a ${type}`;
}

/**
 * The result a tool's return value stands for. Artifacts are copied through JSON, so that what is
 * stored, published and shown later is plain data the tool can no longer change; a cycle or a BigInt
 * in them makes the whole value not a result.
 */
export function returnedToolResult(value: unknown): ToolResult {
  if (typeof value === 'string') return succeededResult(value);
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return failedResult('execution_failed', notAResultText(`${kindOf(value)} instead of a string or a result`));
  let parsed: z.infer<typeof returnedResultSchema>;
  try {
    const checked = returnedResultSchema.safeParse(value);
    if (!checked.success) {
      const issue = checked.error.issues[0]!;
      return failedResult('execution_failed', notAResultText(`${issue.path.length > 0 ? issue.path.join('.') : '(root)'}: ${issue.message}`));
    }
    parsed = checked.data;
  } catch {
    // A getter of the returned object threw while it was read.
    return failedResult('execution_failed', notAResultText('reading it threw'));
  }
  if (parsed.artifacts === undefined) return parsed;
  let artifacts: Array<Record<string, unknown>>;
  try {
    artifacts = JSON.parse(JSON.stringify(parsed.artifacts)) as Array<Record<string, unknown>>;
  } catch (error) {
    return failedResult('execution_failed', notAResultText(`its artifacts are not JSON: ${error instanceof Error ? error.message : 'they cannot be serialised'}`));
  }
  return { ...parsed, artifacts };
}
