/**
 * The provider wire shapes of `test/fixtures/wire/`: one JSON file per shape, each the body a
 * provider sends (SSE events, a JSON answer or an HTML page) and the port events `openaiModel` must
 * turn it into. `loadWireFixtures` validates every file and renders it as a raw reply of the fake
 * server, so the real `openai` client reads the same bytes a provider would send.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import type { FakeRawReply } from './fake-openai-server.js';

const sseEventSchema = z.object({
  /** The SSE `event:` field (the Responses API names every event; Chat Completions names none). */
  event: z.string().optional(),
  /** A string is sent verbatim (`[DONE]`); anything else as one line of JSON. */
  data: z.unknown(),
});

const expectedErrorSchema = z.object({
  code: z.string(),
  message: z.string(),
  retryable: z.boolean(),
  semanticOutput: z.boolean(),
  details: z.record(z.string(), z.unknown()),
});

export const wireFixtureSchema = z
  .object({
    /** What the shape is, in a line. */
    title: z.string().min(1),
    /** The documentation or SDK type the shape is written from. */
    source: z.string().min(1),
    /** The API(s) whose endpoint answers with this body. */
    apis: z.array(z.enum(['responses', 'chat'])).min(1),
    status: z.number().int().default(200),
    headers: z.record(z.string(), z.string()).default({ 'content-type': 'text/event-stream' }),
    sse: z.array(sseEventSchema).optional(),
    /** A body that is not an event stream: a string verbatim, anything else as JSON. */
    body: z.unknown().optional(),
    expect: z.object({
      /** The port events, in order, whole. */
      events: z.array(z.record(z.string(), z.unknown())),
      /** The `ModelError` the stream ends with (with retries off), if it fails. */
      error: expectedErrorSchema.optional(),
    }),
  })
  .refine((f) => (f.sse === undefined) !== (f.body === undefined), 'a fixture has either `sse` or `body`');

export type WireFixture = z.infer<typeof wireFixtureSchema> & { name: string };

export const WIRE_FIXTURE_DIR = fileURLToPath(new URL('../fixtures/wire/', import.meta.url));

/** Every fixture, validated, sorted by file name. */
export function loadWireFixtures(dir = WIRE_FIXTURE_DIR): WireFixture[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort()
    .map((file) => {
      const parsed = wireFixtureSchema.safeParse(JSON.parse(readFileSync(join(dir, file), 'utf8')));
      if (!parsed.success) throw new Error(`${file}: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
      return { ...parsed.data, name: file.replace(/\.json$/, '') };
    });
}

/** The fixture as the fake server's raw reply: one write per SSE event, or the body in one piece. */
export function rawReply(fixture: WireFixture): FakeRawReply {
  const chunks =
    fixture.sse !== undefined
      ? fixture.sse.map((e) => `${e.event !== undefined ? `event: ${e.event}\n` : ''}data: ${typeof e.data === 'string' ? e.data : JSON.stringify(e.data)}\n\n`)
      : [typeof fixture.body === 'string' ? fixture.body : JSON.stringify(fixture.body)];
  return { raw: { status: fixture.status, headers: fixture.headers, chunks } };
}
