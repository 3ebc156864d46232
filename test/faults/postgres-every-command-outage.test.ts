/**
 * Every public command during a database outage (integrity-outage, point 1). For each command of a
 * session and of the core, issued while Postgres is down (the server stopped, or a proxy that
 * black-holes every byte: no answer at all), the command answers within its bound: with its result
 * where it needs no database (snapshot, status, replay), otherwise with a typed error carrying a
 * stable `code`; a turn it affects ends within the bound too. Once the database is back, the same
 * session (the same handle, or the session loaded again where the command closed it) takes a new
 * turn and completes it, in the same process: nothing stays wedged (a state that never leaves, a
 * lease never renewed, a lane never rebuilt, a promise never settled).
 *
 * One table, run in two outages: all rows' sessions are prepared first, then the database goes down
 * once, every row's command runs at once, and the database comes back.
 */
import { describe, expect, it } from 'vitest';
import { createCore, type Core } from '../../src/core.js';
import { OpenworkError } from '../../src/errors.js';
import type { SessionHandle } from '../../src/session-handle.js';
import type { ModelPort, ModelRequest } from '../../src/services/model/port.js';
import { scriptedModel, type ScriptedStep } from '../../src/services/model/scripted.js';
import { postgresStorage } from '../../src/storage/postgres.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { approvalTool } from '../../src/testing/tools.js';
import type { TurnOutcome } from '../../src/protocol/updates.js';
import { within } from '../support/faults.js';
import { assertStoredInvariants } from '../support/invariants.js';
import { useStoppablePostgres } from '../support/proxied-postgres.js';
import { skillRoot } from '../support/skill-root.js';
import { join } from 'node:path';

const timeouts = { statementMs: 1_000, answerMs: 1_500, connectMs: 1_500 };
/** Every command, and every turn it affects, settles within this during the outage. */
const BOUND_MS = 15_000;

/** What a command answered: `ok`, or the code of its typed error (an untyped error fails the test). */
type Answer = 'ok' | string;

async function answerOf(promise: Promise<unknown>): Promise<Answer> {
  try {
    await promise;
    return 'ok';
  } catch (error) {
    if (!(error instanceof OpenworkError)) throw new Error(`untyped error: ${String(error)}`, { cause: error });
    return error.code;
  }
}

function lastMessage(request: ModelRequest) {
  return request.messages.at(-1);
}

/**
 * The last user text the host typed: a steer (`steer`) and a sub-agent's report (`<agent_message>`)
 * enter the next turn's conversation after its own input and are skipped.
 */
function lastUserText(request: ModelRequest): string {
  const texts = request.messages.flatMap((m) => (m.role === 'user' ? [m.content.map((b) => b.text).join('')] : []));
  return texts.filter((t) => t !== 'steer' && !t.startsWith('<agent_message>')).at(-1) ?? '';
}

/**
 * A model that answers each request by what it asks (any session, any order): `card ...` asks for
 * an approval, `hang ...` streams until aborted, `spawn ...` starts a sub-agent and then waits for
 * it, the sub-agent's question waits for `childGate`, anything else is answered with its text.
 */
function routerModel(childGate: Promise<void>): ModelPort {
  const route = (request: ModelRequest): ScriptedStep => {
    const last = lastMessage(request);
    if (last?.role === 'tool') return last.toolName === 'spawn_agent' ? { toolCalls: [{ name: 'wait_agent', arguments: {} }] } : { text: `after ${last.toolName}` };
    const text = lastUserText(request);
    if (text.includes('child question')) return { gate: childGate, step: { text: 'child answer' } };
    if (text.includes('child hangs')) return { hang: true };
    if (text.startsWith('card')) return { toolCalls: [{ name: 'guarded', arguments: { action: 'x' } }] };
    if (text.startsWith('hang')) return { hang: true };
    if (text.startsWith('spawn a hanging child')) return { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'probe', message: 'child hangs' } }] };
    if (text.startsWith('spawn')) return { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'probe', message: 'child question' } }] };
    return { text: `answer to ${text}` };
  };
  const template = scriptedModel([]);
  return {
    id: template.id,
    providerId: template.providerId,
    model: template.model,
    contextWindow: template.contextWindow,
    stream: (request, options) => scriptedModel([route(request)]).stream(request, options),
  };
}

let counter = 0;
const input = (text: string) => ({ clientRequestId: `cmd-${(counter += 1)}`, input: [{ type: 'text' as const, text }] });

function running(session: SessionHandle) {
  const runtime = session.snapshot().runtime;
  return runtime.type === 'running' ? runtime : null;
}

async function until(what: string | (() => string), check: () => boolean): Promise<void> {
  for (let i = 0; i < 1_000 && !check(); i += 1) await new Promise((r) => setTimeout(r, 10));
  if (!check()) throw new Error(`${typeof what === 'string' ? what : what()} did not happen`);
}

interface Bed {
  core: Core;
  storage: SqlSessionStorage;
  url: string;
  openStorage(): SqlSessionStorage;
}

/** A row's state once prepared: the session the command acts on, and the turn it affects (if any). */
interface Prepared {
  session: SessionHandle;
  turnId?: string;
  /** Set by `act` when the command closed the session: recovery loads it again. */
  closed?: boolean;
  /** Set by `act` when it started a turn. */
  startedTurn?: string;
  /** A sub-agent's session, where the row acts on one. */
  child?: SessionHandle;
}

interface Row {
  name: string;
  prepare(bed: Bed): Promise<Prepared>;
  /** The command during the outage; answers what it answered (result checks are inside). */
  act(p: Prepared, bed: Bed): Promise<Answer>;
  /** The answers allowed: `ok` only where the command needs no database. */
  answers: Answer[];
  /** The turn's outcome statuses allowed, when the row has a turn. */
  turnEnds?: Array<TurnOutcome['status']>;
}

async function idle(bed: Bed): Promise<Prepared> {
  const session = await bed.core.createSession({ workingDirectory: process.cwd() });
  const { turnId } = await session.startTurn(input('warm up'));
  expect(await session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'answer to warm up' });
  return { session };
}

async function waitingOnCard(bed: Bed): Promise<Prepared> {
  const { session } = await idle(bed);
  const { turnId } = await session.startTurn(input('card please'));
  await until('the card', () => (running(session)?.pendingApprovals.length ?? 0) > 0);
  return { session, turnId };
}

async function inModelCall(bed: Bed): Promise<Prepared> {
  const { session } = await idle(bed);
  const { turnId } = await session.startTurn(input('hang on'));
  await until('the model call', () => running(session)?.phase === 'running_model');
  return { session, turnId };
}

const cardOf = (p: Prepared) => running(p.session)!.pendingApprovals[0]!.toolCallId;

const STORAGE_CODES = ['persistence_error'];

/** The core's skill root (trust-leftovers point 2): one skill, `deploy`, selectable by path. */
const SKILLS = skillRoot({ deploy: '---\ndescription: Deploys the project.\n---\n\nRun the deploy script.\n' });
const DEPLOY = { type: 'skill' as const, name: 'deploy', path: join(SKILLS, 'deploy', 'SKILL.md') };

/** An idle session with two finished turns: the first is no longer the session's last terminal one. */
async function twoTurns(bed: Bed): Promise<Prepared> {
  const { session } = await idle(bed);
  const first = (await session.turns())[0]!.id;
  const { turnId } = await session.startTurn(input('second'));
  expect(await session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'answer to second' });
  return { session, turnId: first };
}

/** Tries a command that may be refused at its door or accepted with a turn that then fails. */
async function startOrRefuse(p: Prepared, start: () => Promise<{ turnId: string }>): Promise<Answer> {
  try {
    p.startedTurn = (await start()).turnId;
    return 'ok';
  } catch (error) {
    return answerOf(Promise.reject(error));
  }
}

const rows: Row[] = [
  {
    name: 'createCore',
    prepare: async (bed) => ({ session: (await idle(bed)).session }),
    act: async (_p, bed) => {
      const storage = bed.openStorage();
      try {
        return await answerOf(createCore({ storage, model: routerModel(Promise.resolve()), tools: [], worldState: false, closeStorageOnShutdown: false, ownership: { leaseMs: 60_000 } }));
      } finally {
        await storage.close().catch(() => undefined);
      }
    },
    answers: STORAGE_CODES,
  },
  { name: 'createSession', prepare: idle, act: (_p, bed) => answerOf(bed.core.createSession({ workingDirectory: process.cwd() })), answers: STORAGE_CODES },
  { name: 'listSessions', prepare: idle, act: (_p, bed) => answerOf(bed.core.listSessions()), answers: STORAGE_CODES },
  {
    name: 'loadSession (not loaded)',
    prepare: async (bed) => {
      const { session } = await idle(bed);
      await session.shutdown();
      return { session, closed: true };
    },
    act: (p, bed) => answerOf(bed.core.loadSession(p.session.sessionId)),
    answers: STORAGE_CODES,
  },
  {
    name: 'startTurn',
    prepare: idle,
    act: async (p) => {
      try {
        p.startedTurn = (await p.session.startTurn(input('while down'))).turnId;
        return 'ok';
      } catch (error) {
        return answerOf(Promise.reject(error));
      }
    },
    // Accepted before anything is written (its turn then fails), or refused at the door.
    answers: ['ok', ...STORAGE_CODES],
    turnEnds: ['failed'],
  },
  { name: 'steerTurn (waiting on a card)', prepare: waitingOnCard, act: (p) => answerOf(p.session.steerTurn(p.turnId!, [{ type: 'text', text: 'steer' }])), answers: ['ok', ...STORAGE_CODES] },
  { name: 'approve a card', prepare: waitingOnCard, act: (p) => answerOf(p.session.resolvePermission(p.turnId!, cardOf(p), 'allow_once')), answers: ['ok'], turnEnds: ['failed'] },
  { name: 'deny a card', prepare: waitingOnCard, act: (p) => answerOf(p.session.resolvePermission(p.turnId!, cardOf(p), 'deny')), answers: ['ok'], turnEnds: ['failed'] },
  { name: 'cancel (waiting on a card)', prepare: waitingOnCard, act: (p) => answerOf(p.session.cancelTurn(p.turnId!)), answers: ['ok'], turnEnds: ['cancelled', 'failed'] },
  { name: 'interrupt (cancel during a model call)', prepare: inModelCall, act: (p) => answerOf(p.session.cancelTurn(p.turnId!)), answers: ['ok'], turnEnds: ['cancelled', 'failed'] },
  { name: 'setPermissionMode', prepare: idle, act: (p) => answerOf(p.session.setPermissionMode('accept_edits')), answers: STORAGE_CODES },
  { name: 'compactConversation', prepare: idle, act: (p) => answerOf(p.session.compactConversation()), answers: ['compaction_error', ...STORAGE_CODES] },
  {
    name: 'snapshot, status and replayUpdates (no database needed)',
    prepare: idle,
    act: async (p) => {
      expect(p.session.snapshot()).toMatchObject({ sessionId: p.session.sessionId, runtime: { type: 'terminal' } });
      expect(p.session.status()).toEqual({ type: 'idle' });
      expect(p.session.replayUpdates(0).length).toBeGreaterThan(0);
      return 'ok';
    },
    answers: ['ok'],
  },
  { name: 'replayConversation', prepare: idle, act: (p) => answerOf(p.session.replayConversation({ latest: true })), answers: ['ok', ...STORAGE_CODES] },
  { name: 'messages and turns', prepare: idle, act: async (p) => (await answerOf(p.session.messages())) + '/' + (await answerOf(p.session.turns())), answers: ['persistence_error/persistence_error'] },
  // trust-leftovers point 2: the rest of the public API that touches the database.
  { name: 'listChildSessions', prepare: idle, act: (p, bed) => answerOf(bed.core.listChildSessions(p.session.sessionId)), answers: STORAGE_CODES },
  // The skill listing and reading read the skill root, and the disabled set read at start-up: no database.
  { name: 'listSkills (no database needed)', prepare: idle, act: async (_p, bed) => {
    const listing = await bed.core.listSkills();
    expect(listing.skills.map((skill) => skill.name)).toEqual(['deploy']);
    return 'ok';
  }, answers: ['ok'] },
  { name: 'readSkill (no database needed)', prepare: idle, act: (_p, bed) => answerOf(bed.core.readSkill(DEPLOY.path)), answers: ['ok'] },
  // Database first, memory only once stored: refused, and the skill stays enabled (checked after the outage).
  { name: 'setSkillDisabled', prepare: idle, act: (_p, bed) => answerOf(bed.core.setSkillDisabled('deploy', true)), answers: STORAGE_CODES },
  {
    name: 'startTurn with an explicitly selected skill',
    prepare: idle,
    act: (p) => startOrRefuse(p, () => p.session.startTurn({ ...input('use $deploy'), input: [DEPLOY, { type: 'text', text: 'use $deploy' }] })),
    answers: ['ok', ...STORAGE_CODES],
    turnEnds: ['failed'],
  },
  {
    name: 'run (the host helper over startTurn)',
    prepare: idle,
    act: async (p) => {
      try {
        // Accepted (its turn then fails, and `run` resolves with that outcome) or refused at the door.
        expect((await p.session.run([{ type: 'text', text: 'run while down' }])).outcome.status).toBe('failed');
        return 'ok';
      } catch (error) {
        return answerOf(Promise.reject(error));
      }
    },
    answers: ['ok', ...STORAGE_CODES],
  },
  { name: 'deleteSession', prepare: idle, act: async (p, bed) => {
    p.closed = true;
    return answerOf(bed.core.deleteSession(p.session.sessionId));
  }, answers: STORAGE_CODES },
  { name: 'checkpoints and readTranscript', prepare: idle, act: async (p) => (await answerOf(p.session.checkpoints())) + '/' + (await answerOf(p.session.readTranscript())), answers: ['persistence_error/persistence_error'] },
  { name: 'rewindConversation', prepare: idle, act: (p) => answerOf(p.session.rewindConversation('cmp_missing')), answers: STORAGE_CODES },
  // A finished turn that is not the last one is read from the database.
  { name: 'waitForTurn (an earlier turn)', prepare: twoTurns, act: (p) => answerOf(p.session.waitForTurn(p.turnId!)), answers: STORAGE_CODES },
  {
    name: 'close the session',
    prepare: idle,
    act: async (p) => {
      p.closed = true;
      return answerOf(p.session.shutdown());
    },
    answers: ['ok'],
  },
  {
    name: 'sub-agent: the root waits on a child whose answer comes during the outage',
    prepare: async (bed) => {
      const { session } = await idle(bed);
      const { turnId } = await session.startTurn(input('spawn one'));
      await until(() => `the wait (${JSON.stringify(session.snapshot().runtime)})`, () => running(session)?.toolCalls.some((t) => t.toolName === 'wait_agent') ?? false);
      return { session, turnId };
    },
    act: async () => 'ok',
    answers: ['ok'],
    turnEnds: ['failed', 'completed'],
  },
  {
    name: "sub-agent: the host cancels a child's turn (closing it) while the root waits on it",
    prepare: async (bed) => {
      const { session } = await idle(bed);
      const { turnId } = await session.startTurn(input('spawn a hanging child'));
      await until('the wait', () => running(session)?.toolCalls.some((t) => t.toolName === 'wait_agent') ?? false);
      const [child] = await bed.core.listChildSessions(session.sessionId);
      const handle = bed.core.session(child!.id)!;
      await until('the child in its model call', () => running(handle)?.phase === 'running_model');
      return { session, turnId, child: handle };
    },
    act: async (p) => {
      const child = running(p.child!)!.turnId;
      const answer = await answerOf(p.child!.cancelTurn(child));
      expect(['cancelled', 'failed']).toContain((await within(BOUND_MS, 'the child turn', p.child!.waitForTurn(child))).status);
      return answer;
    },
    answers: ['ok'],
    turnEnds: ['failed', 'completed'],
  },
];

describe('every command during a database outage', () => {
  const postgres = useStoppablePostgres();

  for (const mode of ['server stopped', 'black-holed'] as const) {
    it(`${mode}: each command answers within its bound, typed; each session takes a new turn once the database is back`, async () => {
      const { server, proxy } = postgres;
      const url = mode === 'black-holed' ? proxy.urlFor(server.url) : server.url;
      const openStorage = (max = 2) => postgres.open(url, { max, timeouts });
      let releaseChild!: () => void;
      const childGate = new Promise<void>((r) => (releaseChild = r));
      const storage = openStorage(10);
      const core = await createCore({
        storage,
        model: routerModel(childGate),
        tools: [approvalTool],
        worldState: false,
        skills: { root: SKILLS },
        agents: true,
        closeStorageOnShutdown: false,
        toolCancelGraceMs: 1_000,
        ownership: { leaseMs: 60_000 },
      });
      const bed: Bed = { core, storage, url, openStorage: () => openStorage() };
      let down = false;
      try {
        const prepared: Prepared[] = [];
        for (const row of rows) prepared.push(await row.prepare(bed));

        down = true;
        if (mode === 'black-holed') proxy.stall();
        else server.halt();
        // The sub-agent's answer arrives while the database is down.
        releaseChild();
        const answers = await Promise.all(rows.map((row, i) => within(BOUND_MS, `${row.name}: the command`, row.act(prepared[i]!, bed))));
        const ends = await Promise.all(
          rows.map(async (row, i) => {
            const p = prepared[i]!;
            const turnId = p.turnId ?? p.startedTurn;
            return row.turnEnds && turnId ? (await within(BOUND_MS, `${row.name}: its turn`, p.session.waitForTurn(turnId))).status : null;
          }),
        );
        console.log(`every command, ${mode}: ${JSON.stringify(rows.map((row, i) => [row.name, answers[i], ends[i]]))}`);
        expect(rows.map((row, i) => [row.name, row.answers.includes(answers[i]!) ? 'allowed' : answers[i]])).toEqual(rows.map((row) => [row.name, 'allowed']));
        expect(rows.map((row, i) => [row.name, row.turnEnds === undefined || ends[i] === null || row.turnEnds.includes(ends[i]!) ? 'allowed' : ends[i]])).toEqual(
          rows.map((row) => [row.name, 'allowed']),
        );

        down = false;
        if (mode === 'black-holed') proxy.resume();
        else server.restart();

        const after = await Promise.all(
          rows.map(async (row, i) => {
            const p = prepared[i]!;
            const session = p.closed ? await within(BOUND_MS, `${row.name}: load again`, core.loadSession(p.session.sessionId)) : p.session;
            const active = running(session)?.turnId;
            if (active) {
              // A turn the command left waiting (a steer keeps it on its card) is ended by the host.
              await session.cancelTurn(active);
              await within(BOUND_MS, `${row.name}: the old turn's end`, session.waitForTurn(active));
            }
            const { turnId } = await within(BOUND_MS, `${row.name}: a new turn`, session.startTurn(input(`after ${i}`)));
            const outcome = await within(BOUND_MS, `${row.name}: the new turn`, session.waitForTurn(turnId));
            await assertStoredInvariants(postgres.direct, session.sessionId);
            return [row.name, outcome, session.status()];
          }),
        );
        expect(after).toEqual(rows.map((row, i) => [row.name, { status: 'completed', finalText: `answer to after ${i}` }, { type: 'idle' }]));
        // The refused `setSkillDisabled` changed nothing in memory either; once back, it is stored.
        expect((await core.listSkills()).skills.map((skill) => [skill.name, skill.disabled])).toEqual([['deploy', false]]);
        expect((await within(BOUND_MS, 'setSkillDisabled', core.setSkillDisabled('deploy', true))).skills.map((skill) => skill.disabled)).toEqual([true]);
        await core.setSkillDisabled('deploy', false);
        // createCore works again in the same process.
        const again = await createCore({ storage: openStorage(), model: routerModel(Promise.resolve()), tools: [], worldState: false, ownership: { leaseMs: 60_000 } });
        try {
          const session = await again.createSession({ workingDirectory: process.cwd() });
          const { turnId } = await session.startTurn(input('fresh core'));
          expect(await session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'answer to fresh core' });
        } finally {
          await again.shutdown();
        }
      } finally {
        if (down && mode === 'black-holed') proxy.resume();
        else if (down) server.restart();
        await core.shutdown().catch(() => undefined);
      }
    }, 120_000);
  }
});
