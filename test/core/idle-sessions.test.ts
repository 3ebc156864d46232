/**
 * Issue 14.5: a thousand loaded idle sessions. Whatever an idle session no longer holds up front
 * (its update buffer, its waiter tables) must still be there the moment it is used: every one of
 * them, loaded in a fresh runtime, answers commands through its own actor, runs a turn, streams and
 * replays that turn's updates, and keeps its conversation apart from the others'.
 */
import { describe, expect, it } from 'vitest';
import { createCore } from '../../src/core.js';
import { CommandError } from '../../src/errors.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import type { SessionUpdateEnvelope } from '../../src/protocol/updates.js';
import { usePglite } from '../support/databases.js';

const COUNT = Number(process.env.IDLE_SESSIONS ?? 1000);
/** Every n-th session runs a turn (all of them answer the cancel command): keeps the file to seconds. */
const TURN_EVERY = Number(process.env.IDLE_TURN_EVERY ?? 10);

/** Answers with the text of the last user message, so each session's reply names its own input. */
const echo = () =>
  scriptedModel(
    (request) => {
      const users = request.messages.filter((m) => m.role === 'user');
      const last = users.at(-1);
      const text = last?.content.map((p) => ('text' in p ? p.text : '')).join('') ?? '';
      return { text: `echo: ${text}` };
    },
    { record: false },
  );

describe('1,000 idle sessions', () => {
  let storage!: SqlSessionStorage;
  const cores = usePglite((s) => (storage = s));

  it(`${COUNT} stored sessions load idle in a fresh runtime, each answers a command, every ${TURN_EVERY}th runs a turn of its own`, { timeout: 180_000 }, async () => {
    // Stored by another runtime long ago: rows only, nothing loaded.
    const ids: string[] = [];
    for (let i = 0; i < COUNT; i += 1) {
      ids.push((await storage.createSession({ id: `ses_idle_${i}`, workingDirectory: process.cwd(), title: `s${i}`, defaultModelId: 'scripted/echo', permissionMode: 'auto' })).id);
    }

    const core = await createCore({ storage, model: echo(), worldState: false, closeStorageOnShutdown: false });
    cores.push(core);
    const handles = [];
    for (const id of ids) handles.push(await core.loadSession(id));
    const all: SessionUpdateEnvelope[] = [];
    core.updates$.subscribe((e) => all.push(e));

    for (const h of handles) {
      expect(h.status()).toEqual({ type: 'idle' });
      expect(h.snapshot().runtime).toEqual({ type: 'idle' });
      // Nothing was sent yet: an empty replay, not snapshot_required.
      expect(h.replayUpdates(0)).toEqual([]);
    }

    // A command the actor itself must answer: no turn is active.
    const refusals = await Promise.all(handles.map((h) => h.cancelTurn('turn_missing').then(() => null, (e: unknown) => e)));
    for (const e of refusals) {
      expect(e).toBeInstanceOf(CommandError);
      expect((e as CommandError).code).toBe('turn_not_active');
    }

    // Every n-th session runs one turn, all of them at once, and hears its own updates.
    const running = handles.filter((_, i) => i % TURN_EVERY === 0);
    const own = new Map<string, SessionUpdateEnvelope[]>();
    for (const h of running) {
      const list: SessionUpdateEnvelope[] = [];
      own.set(h.sessionId, list);
      h.updates$.subscribe((e) => list.push(e));
    }
    const outcomes = await Promise.all(
      running.map(async (h, i) => {
        const { turnId } = await h.startTurn({ clientRequestId: `r${i}`, input: [{ type: 'text', text: `hello ${i}` }] });
        return { turnId, outcome: await h.waitForTurn(turnId) };
      }),
    );
    outcomes.forEach(({ turnId, outcome }, i) => {
      const h = running[i]!;
      expect(outcome).toEqual({ status: 'completed', finalText: `echo: hello ${i}` });
      const updates = own.get(h.sessionId)!;
      expect(updates.every((e) => e.sessionId === h.sessionId)).toBe(true);
      expect(updates.at(-1)!.update.type).toBe('turn_finished');
      expect(updates.map((e) => e.sequence)).toEqual(updates.map((_, k) => k + 1));
      // The buffer that was not allocated while idle holds the turn now.
      expect(h.replayUpdates(0)).toEqual(updates);
      expect(h.replayUpdates(updates.length - 1).map((e) => e.update.type)).toEqual(['turn_finished']);
      expect(h.acceptedTurn(`r${i}`)).toBe(turnId);
      expect(h.status()).toEqual({ type: 'idle' });
    });
    expect(all.filter((e) => e.update.type === 'turn_finished')).toHaveLength(running.length);
    // The sessions that stayed idle sent nothing.
    expect(new Set(all.map((e) => e.sessionId))).toEqual(new Set(running.map((h) => h.sessionId)));
    for (const h of handles.filter((_, i) => i % TURN_EVERY !== 0)) expect(h.replayUpdates(0)).toEqual([]);

    // Stored, and apart: each session's history holds its own question and answer only.
    for (const i of [0, Math.floor(running.length / 2), running.length - 1]) {
      const texts = (await running[i]!.messages()).map((m) => `${m.role}:${m.content.map((p) => ('text' in p ? p.text : '')).join('')}`);
      expect(texts).toEqual([`user:hello ${i}`, `assistant:echo: hello ${i}`]);
    }
  });
});
