/**
 * @module storage/sql/trace-store
 * The trace tables: writing batches of trace signals (one statement on the fast path, one by one
 * under savepoints when a batch fails), payload bodies stored once per content hash with an LRU of
 * the hashes this process already wrote, the retention purge, and reading spans and payloads back.
 */
import { createHash } from 'node:crypto';
import { canonicalJson } from '../../protocol/canonical-json.js';
import type { SpanData, SpanPayload, TraceSignal } from '../../protocol/trace-signals.js';
import { numOrNull, type SqlExecutor } from '../sql.js';
import { UPSERT_SPANS_END, UPSERT_SPANS_START, WRITE_TRACE_BATCH } from '../step-sql.js';
import type { TracePurgeReport, TraceSpanPayloadRecord, TraceSpanRecord, TraceWriteReport } from '../storage.js';
import type { SqlContext } from './context.js';
import { spanFromRow, spanRow } from './rows.js';

/** JSON with object keys sorted (reference §11.1); it lives in protocol/, below the machines that compare by it too. */
export { canonicalJson };

/** The trace half of one `SqlSessionStorage`; its payload caches live as long as the storage object. */
export class SqlTraceStore {
  constructor(
    private readonly ctx: SqlContext,
    /** Largest stored payload body in bytes before it is replaced by a truncated preview. */
    private readonly payloadMaxBytes: number,
    /** Days a span's payloads are kept, counted from the span's start. */
    private readonly payloadRetentionDays: number,
  ) {}

  purgeExpiredTracePayloads(): Promise<TracePurgeReport> {
    return this.ctx.run('trace payload purge', () =>
      this.ctx.db.transaction(async (tx) => {
        // Expiry by the span's start; a trace with any annotation (on the trace or one of its spans) is kept.
        const { rows } = await tx.query<{ payload_hash: string }>(
          `DELETE FROM trace_span_payloads m USING trace_spans s
           WHERE s.id = m.span_id
             AND s.started_at < now() - $1::double precision * interval '1 day'
             AND NOT EXISTS (SELECT 1 FROM trace_annotations a WHERE a.trace_id = s.trace_id)
           RETURNING m.payload_hash`,
          [this.payloadRetentionDays],
        );
        const candidates = [...new Set(rows.map((r) => r.payload_hash))];
        if (candidates.length === 0) return { mappings: 0, bodies: 0 };
        // Candidates only (reference §9.5): a full NOT EXISTS scan could take a body whose mapping is being written.
        const swept = await tx.query(
          `DELETE FROM trace_payloads p WHERE p.hash = ANY($1::text[])
           AND NOT EXISTS (SELECT 1 FROM trace_span_payloads m WHERE m.payload_hash = p.hash)`,
          [candidates],
        );
        for (const hash of candidates) this.knownPayloads.delete(hash);
        return { mappings: rows.length, bodies: swept.rowCount };
      }),
    );
  }

  async writeTraceSignals(signals: readonly TraceSignal[]): Promise<TraceWriteReport> {
    if (signals.length === 0) return { written: 0, failed: 0 };
    try {
      return await this.writeTraceBatch(signals);
    } catch {
      // One bad signal (a span whose turn is gone, say) must not lose the rest: retry one by one.
      return this.ctx.run('write trace', () =>
        this.ctx.db.transaction(async (tx) => {
          // The trace is lossy by design (reference §11.1): its commits never wait for a WAL flush.
          await tx.query(`SET LOCAL synchronous_commit = off`);
          return this.writeTraceOneByOne(tx, signals);
        }),
      );
    }
  }

  /**
   * The fast path: signals coalesced per span, then the whole batch as ONE statement (spans, ends of
   * spans stored earlier, payload bodies, mappings: `WRITE_TRACE_BATCH`), one round trip and one
   * implicit transaction that does not wait for its WAL flush. A span whose start an earlier batch
   * stored as `running` is updated by its end; every other span is one inserted row.
   */
  private async writeTraceBatch(signals: readonly TraceSignal[]): Promise<TraceWriteReport> {
    const spans = new Map<string, SpanData>();
    const ends = new Map<string, SpanData>();
    const payloads = new Map<string, { spanId: string; payload: SpanPayload }>();
    for (const signal of signals) {
      const { id } = signal.span;
      if (signal.type === 'span_ended') {
        const stored = this.storedRunning.has(id);
        const target = stored ? ends : spans;
        // Attributes of the start (or of an earlier end) in this batch stay under the end's.
        const earlier = target.get(id)?.attributes;
        target.set(id, earlier ? { ...signal.span, attributes: { ...earlier, ...signal.span.attributes } } : signal.span);
      } else if (!spans.has(id) && !this.storedRunning.has(id)) {
        spans.set(id, signal.span);
      }
      for (const payload of signal.payloads ?? []) {
        const key = `${id}\u0000${payload.slot}`;
        if (!payloads.has(key)) payloads.set(key, { spanId: id, payload });
      }
    }
    const bodies = new Map<string, { body: string; size: number }>();
    const mappings: Array<Record<string, unknown>> = [];
    for (const { spanId, payload } of payloads.values()) {
      const prepared = this.preparePayload(payload.body);
      bodies.set(prepared.hash, { body: prepared.body, size: Buffer.byteLength(prepared.body) });
      mappings.push({
        span_id: spanId,
        slot: payload.slot,
        payload_hash: prepared.hash,
        truncated: prepared.truncated,
        original_byte_size: prepared.truncated ? prepared.originalSize : null,
      });
    }
    // Bodies this process already stored are not sent again (an LRU of hashes); a body swept in the
    // meantime only sends the batch to the one-by-one path, which writes it.
    const bodyRows = [...bodies.entries()].filter(([hash]) => !this.knownPayloads.has(hash)).map(([hash, b]) => ({ hash, body: b.body, byte_size: b.size }));
    await this.ctx.db.query(WRITE_TRACE_BATCH, [
      JSON.stringify([...spans.values()].map(spanRow)),
      JSON.stringify([...ends.values()].map(spanRow)),
      [...ends.keys()],
      JSON.stringify(bodyRows),
      JSON.stringify(mappings),
    ]);
    for (const hash of bodies.keys()) this.rememberPayload(hash);
    for (const id of ends.keys()) this.storedRunning.delete(id);
    for (const span of spans.values()) if (span.status === 'running') this.rememberRunning(span.id);
    return { written: signals.length, failed: 0 };
  }

  /**
   * Spans this process stored as `running` and has not seen end yet: their end updates the row
   * instead of inserting it. Bounded like the payload LRU; a span that falls out of it (or that
   * another process stored) makes its end's insert fail, and that batch takes the one-by-one path,
   * whose upsert is right either way.
   */
  private readonly storedRunning = new Set<string>();

  private rememberRunning(id: string): void {
    this.storedRunning.add(id);
    if (this.storedRunning.size > 4096) this.storedRunning.delete(this.storedRunning.values().next().value!);
  }

  private async writeTraceOneByOne(tx: SqlExecutor, signals: readonly TraceSignal[]): Promise<TraceWriteReport> {
    let written = 0;
    let failed = 0;
    for (const [i, signal] of signals.entries()) {
      // A savepoint per signal: one bad span never loses the rest of the batch.
      await tx.query(`SAVEPOINT s${i}`);
      try {
        await this.upsertSpans(tx, [signal.span], signal.type === 'span_ended');
        await tx.query(`RELEASE SAVEPOINT s${i}`);
        written += 1;
        // Only once its transaction commits is the row really there; a rollback of the whole
        // transaction leaves an id here whose end then inserts the row whole (`ended_late`).
        if (signal.type === 'span_ended') this.storedRunning.delete(signal.span.id);
        else this.rememberRunning(signal.span.id);
      } catch {
        await tx.query(`ROLLBACK TO SAVEPOINT s${i}`);
        failed += 1;
        continue;
      }
      for (const [j, payload] of (signal.payloads ?? []).entries()) {
        await tx.query(`SAVEPOINT p${i}_${j}`);
        try {
          await this.writePayload(tx, signal.span.id, payload);
          await tx.query(`RELEASE SAVEPOINT p${i}_${j}`);
        } catch {
          await tx.query(`ROLLBACK TO SAVEPOINT p${i}_${j}`);
          failed += 1;
        }
      }
    }
    return { written, failed };
  }

  /** One statement whatever the number of spans: the rows travel as one JSON parameter. */
  private async upsertSpans(tx: SqlExecutor, spans: readonly SpanData[], isEnd: boolean): Promise<void> {
    await tx.query(isEnd ? UPSERT_SPANS_END : UPSERT_SPANS_START, [JSON.stringify(spans.map(spanRow))]);
  }

  private readonly knownPayloads = new Set<string>();

  private rememberPayload(hash: string): void {
    this.knownPayloads.delete(hash);
    this.knownPayloads.add(hash);
    if (this.knownPayloads.size > 4096) this.knownPayloads.delete(this.knownPayloads.values().next().value!);
  }

  private readonly payloadCache = new WeakMap<object, { body: string; hash: string; truncated: boolean; originalSize: number }>();

  /** Canonical body, hash and truncation of one payload; remembered for shared objects (tool surfaces, system parts). */
  private preparePayload(value: unknown): { body: string; hash: string; truncated: boolean; originalSize: number } {
    const cacheable = value !== null && typeof value === 'object';
    const hit = cacheable ? this.payloadCache.get(value) : undefined;
    if (hit) return hit;
    const full = canonicalJson(value ?? null);
    const originalSize = Buffer.byteLength(full);
    let body = full;
    let truncated = false;
    if (originalSize > this.payloadMaxBytes) {
      truncated = true;
      let preview = full.slice(0, Math.max(0, this.payloadMaxBytes - 32));
      body = canonicalJson({ truncatedPreview: preview });
      while (Buffer.byteLength(body) > this.payloadMaxBytes && preview.length > 0) {
        preview = preview.slice(0, Math.floor(preview.length * 0.9));
        body = canonicalJson({ truncatedPreview: preview });
      }
    }
    const prepared = { body, hash: createHash('sha256').update(body).digest('hex'), truncated, originalSize };
    if (cacheable) this.payloadCache.set(value, prepared);
    return prepared;
  }

  private async writePayload(tx: SqlExecutor, spanId: string, payload: SpanPayload): Promise<void> {
    const prepared = this.preparePayload(payload.body);
    await tx.query(
      `INSERT INTO trace_payloads (hash, body, byte_size) VALUES ($1, $2::jsonb, $3) ON CONFLICT (hash) DO NOTHING`,
      [prepared.hash, prepared.body, Buffer.byteLength(prepared.body)],
    );
    await tx.query(
      `INSERT INTO trace_span_payloads (span_id, slot, payload_hash, truncated, original_byte_size)
       VALUES ($1, $2, $3, $4, $5) ON CONFLICT (span_id, slot) DO NOTHING`,
      [spanId, payload.slot, prepared.hash, prepared.truncated, prepared.truncated ? prepared.originalSize : null],
    );
  }

  listTraceSpans(filter: { turnId?: string; sessionId?: string }): Promise<TraceSpanRecord[]> {
    return this.ctx.run('list trace spans', async () => {
      // A turn's spans by (session_id, turn_id), the one index of both reads (migration 0008): the
      // composite foreign key keeps every span of a turn in the turn's session.
      const { rows } = filter.turnId
        ? await this.ctx.db.query(
            `SELECT * FROM trace_spans WHERE session_id = (SELECT t.session_id FROM turns t WHERE t.id = $1) AND turn_id = $1
             ORDER BY started_at, id`,
            [filter.turnId],
          )
        : await this.ctx.db.query('SELECT * FROM trace_spans WHERE session_id = $1 ORDER BY started_at, id', [filter.sessionId]);
      return rows.map(spanFromRow);
    });
  }

  listTraceSpanPayloads(spanIds: readonly string[]): Promise<TraceSpanPayloadRecord[]> {
    return this.ctx.run('list trace payloads', async () => {
      if (spanIds.length === 0) return [];
      const { rows } = await this.ctx.db.query(
        `SELECT m.span_id, m.slot, m.truncated, m.original_byte_size, p.body
         FROM trace_span_payloads m JOIN trace_payloads p ON p.hash = m.payload_hash
         WHERE m.span_id = ANY($1::text[]) ORDER BY m.span_id, m.slot`,
        [[...spanIds]],
      );
      return rows.map((r) => ({
        spanId: String(r.span_id),
        slot: r.slot as TraceSpanPayloadRecord['slot'],
        body: r.body as unknown,
        truncated: Boolean(r.truncated),
        originalByteSize: numOrNull(r.original_byte_size),
      }));
    });
  }
}
