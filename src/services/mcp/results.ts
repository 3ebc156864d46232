/**
 * @module services/mcp/results
 * An MCP `tools/call` result as our tool result: text blocks as they are, images and audio as a
 * line that describes them (mime type, size; the bytes never reach the model or the store),
 * resources as their text (or a line for binary ones), `structuredContent` as JSON, and
 * `isError: true` as a failed result with the code `mcp_tool_error`.
 */
import { isDeepStrictEqual } from 'node:util';
import { failedResult, succeededResult, type ToolResult } from '../../protocol/tool-result.js';

/** The parts of `CallToolResult` we read; the SDK has already checked the shape. */
export interface McpCallResult {
  content?: ReadonlyArray<McpContent>;
  structuredContent?: Record<string, unknown>;
  isError?: boolean;
  /** The pre-2024-11 result form, which some servers still send. */
  toolResult?: unknown;
}

type McpContent =
  | { type: 'text'; text: string }
  | { type: 'image'; data: string; mimeType: string }
  | { type: 'audio'; data: string; mimeType: string }
  | { type: 'resource_link'; uri: string; name: string; title?: string; description?: string; mimeType?: string }
  | { type: 'resource'; resource: { uri: string; mimeType?: string; text?: string; blob?: string } }
  | { type: string; [key: string]: unknown };

/** Bytes of base64 data without decoding it. */
function base64Bytes(data: string): number {
  const clean = data.replace(/\s/g, '');
  const padding = clean.endsWith('==') ? 2 : clean.endsWith('=') ? 1 : 0;
  return Math.max(0, Math.floor((clean.length * 3) / 4) - padding);
}

function describe(block: McpContent, artifacts: Array<Record<string, unknown>>): string {
  switch (block.type) {
    case 'text':
      return String(block.text);
    case 'image':
    case 'audio': {
      const { mimeType, data } = block as { mimeType: string; data: string };
      const bytes = base64Bytes(String(data));
      artifacts.push({ type: block.type, mimeType, bytes });
      return `[${block.type}: ${mimeType}, ${bytes} bytes; not shown to the model]`;
    }
    case 'resource_link': {
      const link = block as Extract<McpContent, { type: 'resource_link' }>;
      const label = link.title ?? link.name;
      return `[resource link: ${label} <${link.uri}>${link.mimeType ? ` (${link.mimeType})` : ''}]${link.description ? ` ${link.description}` : ''}`;
    }
    case 'resource': {
      const { resource } = block as Extract<McpContent, { type: 'resource' }>;
      const head = `[resource <${resource.uri}>${resource.mimeType ? ` (${resource.mimeType})` : ''}]`;
      if (typeof resource.text === 'string') return `${head}\n${resource.text}`;
      const bytes = typeof resource.blob === 'string' ? base64Bytes(resource.blob) : 0;
      artifacts.push({ type: 'resource', uri: resource.uri, ...(resource.mimeType ? { mimeType: resource.mimeType } : {}), bytes });
      return `${head} ${bytes} bytes of binary data; not shown to the model`;
    }
    default:
      return `[${block.type} content; not shown to the model]`;
  }
}

/** Whether the text blocks already carry the structured content: as JSON (the spec asks servers to), or as its one string. */
function textRepeats(blocks: readonly McpContent[], structured: Record<string, unknown>): boolean {
  // `{ "content": "<the text>" }` (server-filesystem) says nothing the text does not.
  const values = Object.values(structured);
  const texts = blocks.flatMap((b) => (b.type === 'text' ? [String(b.text)] : []));
  if (values.length === 1 && typeof values[0] === 'string' && texts.join('\n') === values[0]) return true;
  return blocks.some((b) => {
    if (b.type !== 'text') return false;
    try {
      return isDeepStrictEqual(JSON.parse(String(b.text)), structured);
    } catch {
      return false;
    }
  });
}

/** Maps one MCP call result to the result the model and the store see. */
export function mcpToolResult(result: McpCallResult): ToolResult {
  const artifacts: Array<Record<string, unknown>> = [];
  const blocks = result.content ?? [];
  const parts = blocks.map((b) => describe(b, artifacts));
  if (result.structuredContent !== undefined && !textRepeats(blocks, result.structuredContent)) {
    parts.push(`structured content: ${JSON.stringify(result.structuredContent)}`);
  }
  if (blocks.length === 0 && result.structuredContent === undefined && result.toolResult !== undefined) {
    parts.push(typeof result.toolResult === 'string' ? result.toolResult : JSON.stringify(result.toolResult));
  }
  const text = parts.length > 0 ? parts.join('\n') : '(the tool returned no content)';
  const extra = artifacts.length > 0 ? { artifacts } : {};
  if (result.isError === true) {
    return failedResult('mcp_tool_error', text, extra);
  }
  return succeededResult(text, extra);
}
