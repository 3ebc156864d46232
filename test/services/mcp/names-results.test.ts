/**
 * The pure parts of the MCP tools: model-visible names within the providers' limit, and the
 * mapping of each MCP content kind to the result text.
 */
import { describe, expect, it } from 'vitest';
import { namespacedToolNames } from '../../../src/services/mcp/names.js';
import { mcpToolResult } from '../../../src/services/mcp/results.js';

const LIMIT = /^[a-zA-Z0-9_-]{1,64}$/;

describe('namespacedToolNames', () => {
  it('keeps clean names readable as <server>__<tool>', () => {
    expect([...namespacedToolNames('everything', ['echo', 'get-sum'])]).toEqual([
      ['echo', 'everything__echo'],
      ['get-sum', 'everything__get-sum'],
    ]);
  });

  it('sanitises, shortens and de-duplicates deterministically, whatever the listing order', () => {
    const tools = ['files.read', 'files_read', 'x'.repeat(80), 'ünïcode', 'a b'];
    const first = namespacedToolNames('my server', tools);
    const second = namespacedToolNames('my server', [...tools].reverse());
    expect(first).toEqual(second);
    const names = [...first.values()];
    for (const name of names) expect(name).toMatch(LIMIT);
    expect(new Set(names).size).toBe(names.length);
    // The tool whose name needs no change wins the readable name from the one that was sanitised.
    expect(namespacedToolNames('s', ['a.b', 'a_b']).get('a_b')).toBe('s__a_b');
    expect(namespacedToolNames('s', ['a.b', 'a_b']).get('a.b')).toMatch(/^s__a_b_[0-9a-f]{8}$/);
    expect(first.get('x'.repeat(80))).toHaveLength(64);
  });
});

describe('mcpToolResult', () => {
  it('describes images, audio, links and resources instead of passing their bytes', () => {
    const png = Buffer.alloc(100, 1).toString('base64');
    const result = mcpToolResult({
      content: [
        { type: 'text', text: 'here' },
        { type: 'image', data: png, mimeType: 'image/png' },
        { type: 'audio', data: Buffer.alloc(7).toString('base64'), mimeType: 'audio/wav' },
        { type: 'resource_link', uri: 'file:///a.txt', name: 'a.txt', mimeType: 'text/plain', description: 'the file' },
        { type: 'resource', resource: { uri: 'demo://t', mimeType: 'text/plain', text: 'inline text' } },
        { type: 'resource', resource: { uri: 'demo://b', blob: Buffer.alloc(10).toString('base64') } },
      ],
    });
    expect(result).toEqual({
      status: 'succeeded',
      text: [
        'here',
        '[image: image/png, 100 bytes; not shown to the model]',
        '[audio: audio/wav, 7 bytes; not shown to the model]',
        '[resource link: a.txt <file:///a.txt> (text/plain)] the file',
        '[resource <demo://t> (text/plain)]\ninline text',
        '[resource <demo://b>] 10 bytes of binary data; not shown to the model',
      ].join('\n'),
      artifacts: [
        { type: 'image', mimeType: 'image/png', bytes: 100 },
        { type: 'audio', mimeType: 'audio/wav', bytes: 7 },
        { type: 'resource', uri: 'demo://b', bytes: 10 },
      ],
    });
  });

  it('adds structured content unless the text already carries it', () => {
    expect(mcpToolResult({ content: [{ type: 'text', text: 'sunny' }], structuredContent: { sky: 'clear', t: 21 } }).text).toBe('sunny\nstructured content: {"sky":"clear","t":21}');
    expect(mcpToolResult({ content: [{ type: 'text', text: '{"t": 21}' }], structuredContent: { t: 21 } }).text).toBe('{"t": 21}');
    expect(mcpToolResult({ content: [], structuredContent: { t: 21 } }).text).toBe('structured content: {"t":21}');
  });

  it('isError is a failed result with mcp_tool_error; no content is said', () => {
    expect(mcpToolResult({ content: [], isError: true })).toEqual({
      status: 'failed',
      text: '(the tool returned no content)',
      error: { code: 'mcp_tool_error', message: '(the tool returned no content)', retryable: false },
    });
  });
});
