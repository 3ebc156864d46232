/**
 * One attack through the public API: `createCore` with the built-in tools wired by
 * `workspaceToolOptions` (the real permission policy, real bubblewrap), a scripted model that makes
 * the hostile calls, and a host that answers every card with the given decision. It returns what
 * the model was told and which cards the user saw.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createCore, type Core, type CoreOptions } from '../../src/core.js';
import type { PermissionMode } from '../../src/protocol/input.js';
import type { PermissionCard, SessionUpdateEnvelope, TurnOutcome } from '../../src/protocol/updates.js';
import { scriptedModel, type ScriptedToolCall } from '../../src/services/model/scripted.js';
import { builtinTools } from '../../src/services/tools/builtin.js';
import { permissionPolicy } from '../../src/services/permissions/authorizer.js';
import type { ModelPort } from '../../src/services/model/port.js';
import { workspaceToolOptions } from '../../src/services/tools/workspace.js';
import type { SessionHandle } from '../../src/session-handle.js';
import type { SessionStorage } from '../../src/storage/storage.js';
import { assertAllRequests } from './invariants.js';
import type { Decision, ToolEnv } from './tool-env.js';

export interface AttackOptions {
  mode?: PermissionMode;
  /** The host's answer to each card (default: deny). */
  decide?: (card: PermissionCard) => Decision;
}

export interface AttackOutcome {
  outcome: TurnOutcome;
  /** The text of each tool result, in call order, as the model saw it. */
  results: string[];
  /** Every card the host was shown. */
  cards: PermissionCard[];
}

/** Runs one turn in which the model makes `calls`, one per step, then answers "done". */
export async function scriptedAttack(env: ToolEnv, storage: SessionStorage, calls: ScriptedToolCall[], options: AttackOptions = {}): Promise<AttackOutcome> {
  const model = scriptedModel([...calls.map((call) => ({ toolCalls: [call] })), { text: 'done' }]);
  const core = await createCore({ plan: true, conversationHistory: true, storage, model, closeStorageOnShutdown: false, agents: false, ...workspaceToolOptions(env.runtime), worldState: false });
  try {
    const session = await core.createSession({ workingDirectory: env.ws, permissionMode: options.mode ?? 'auto' });
    const cards: PermissionCard[] = [];
    session.updates$.subscribe((u: SessionUpdateEnvelope) => {
      if (u.update.type !== 'permission_requested') return;
      const { card, toolCallId } = u.update;
      cards.push(card);
      const decision = options.decide?.(card) ?? 'deny';
      queueMicrotask(() => void session.resolvePermission(u.turnId!, toolCallId, decision));
    });
    const { turnId } = await session.startTurn({ clientRequestId: `attack-${Math.random()}`, input: [{ type: 'text', text: 'go' }] });
    const outcome = await session.waitForTurn(turnId);
    assertAllRequests(model.requests);
    const last = model.requests.at(-1);
    const results = (last?.messages ?? []).filter((m) => m.role === 'tool').map((m) => (m as { text: string }).text);
    return { outcome, results, cards };
  } finally {
    await core.shutdown();
  }
}

/**
 * A core with the built-in tools wired by hand, for an attack that drives its own session (watches
 * its progress or its cards as they come): the tools, the permission policy, the sandbox and the
 * spill root of `env`, agent tools on, the storage left open. `extra` adds or overrides options.
 */
export function builtinToolsCore(env: ToolEnv, storage: SessionStorage, model: ModelPort, extra: Partial<CoreOptions> = {}): Promise<Core> {
  return createCore({
    plan: true,
    conversationHistory: true,
    agents: true,
    storage,
    model,
    toolResultSpillRoot: env.runtime.spillRoot,
    tools: builtinTools(env.runtime),
    authorizer: permissionPolicy(env.runtime),
    sandbox: env.runtime.sandbox,
    closeStorageOnShutdown: false,
    ...extra,
  });
}

/** A deleting command and the directory it deletes (`victim`, inside the workspace), with the danger key its card must name. */
export interface GatedDeletion {
  victim: string;
  command: string;
  key: string;
}

/**
 * The danger-card attack of the danger-detection suites: each command's victim directory is made,
 * a scripted model sends the commands one bash call each, and the host approves every card. Returns
 * the turn's outcome, the cards shown, and whether each command's victim was still there while its
 * card was pending (the command had not run before the card).
 */
export async function deletionsBehindCards(
  env: ToolEnv,
  storage: SessionStorage,
  open: Core[],
  deletions: readonly GatedDeletion[],
): Promise<{ outcome: TurnOutcome; cards: PermissionCard[]; presentAtCard: boolean[] }> {
  for (const { victim } of deletions) {
    mkdirSync(join(env.ws, victim, 'nested'), { recursive: true });
    writeFileSync(join(env.ws, victim, 'nested', 'file.txt'), 'keep me\n');
  }
  const model = scriptedModel([...deletions.map(({ command }) => ({ toolCalls: [{ name: 'bash', arguments: { command } }] })), { text: 'done' }]);
  const core = await builtinToolsCore(env, storage, model);
  open.push(core);
  const session = await core.createSession({ workingDirectory: env.ws });
  const cards: PermissionCard[] = [];
  const presentAtCard: boolean[] = [];
  session.updates$.subscribe((u: SessionUpdateEnvelope) => {
    if (u.update.type !== 'permission_requested') return;
    const card = u.update.card;
    cards.push(card);
    const deletion = deletions.find((d) => d.command === card.command);
    presentAtCard.push(deletion !== undefined && existsSync(join(env.ws, deletion.victim, 'nested', 'file.txt')));
    const toolCallId = u.update.toolCallId;
    queueMicrotask(() => void session.resolvePermission(u.turnId!, toolCallId, 'allow_once'));
  });
  const { turnId } = await session.startTurn({ clientRequestId: 'req-deletions', input: [{ type: 'text', text: 'clean up' }] });
  const outcome = await session.waitForTurn(turnId);
  assertAllRequests(model.requests);
  return { outcome, cards, presentAtCard };
}

/**
 * The bed of the grant-scope attacks: a workspace with `build/` and `src/`, a model that asks bash for
 * `approved` twice and then each of `others` (one call a step), and a host that answers the card of
 * `approved` "allow for session" and denies every other card. `cards` collects what the user saw.
 */
export async function grantThenDeny(
  env: ToolEnv,
  storage: SessionStorage,
  approved: string,
  others: string[],
): Promise<{ core: Core; session: SessionHandle; cards: PermissionCard[] }> {
  mkdirSync(join(env.ws, 'build'), { recursive: true });
  mkdirSync(join(env.ws, 'src'), { recursive: true });
  const steps = [approved, approved, ...others].map((command) => ({ toolCalls: [{ name: 'bash', arguments: { command } }] }));
  const core = await builtinToolsCore(env, storage, scriptedModel(steps));
  const session = await core.createSession({ workingDirectory: env.ws });
  const cards: PermissionCard[] = [];
  session.updates$.subscribe((u: SessionUpdateEnvelope) => {
    if (u.update.type !== 'permission_requested') return;
    const card = u.update.card;
    cards.push(card);
    const toolCallId = u.update.toolCallId;
    // A denied card stops its turn, so each later command runs in a turn of its own.
    queueMicrotask(() => void session.resolvePermission(u.turnId!, toolCallId, card.command === approved ? 'allow_for_session' : 'deny'));
  });
  return { core, session, cards };
}
