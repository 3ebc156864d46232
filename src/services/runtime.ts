/**
 * @module services/runtime
 * The handles every invoked actor works through, kept apart from machine data (style habit 4):
 * one `RuntimeServices` per core, one `SessionServices` per loaded session.
 */
import type { SessionStorage } from '../storage/storage.js';
import type { Clock, IdGenerator } from './clock.js';
import type { ChatState } from './context/chat-state.js';
import type { ModelPort } from './model/port.js';
import type { Authorization, AnyTool, AuthorizeContext } from './tools/define.js';
import type { Toolset } from './tools/registry.js';
import type { TraceRecorder } from './trace/recorder.js';
import type { OpenSpans } from './trace/open-spans.js';
import type { WorldStateBaseline, WorldStateSources } from './context/world-state.js';
import type { SandboxStatus } from '../protocol/snapshot.js';
import type { AgentControl } from './agents/control.js';
import type { MailboxSignal } from './agents/signal.js';
import type { TurnOutputFormat } from './model/output-schema.js';

/** Decides, per call, whether a registered tool runs, is refused by rule, or needs a card. */
export interface Authorizer {
  authorize(tool: AnyTool, args: unknown, ctx: AuthorizeContext): Promise<Authorization> | Authorization;
}

/** Uses each tool's own `authorize`, or runs it. The real permission policy replaces this. */
export const toolAuthorizer: Authorizer = {
  authorize(tool, args, ctx) {
    return tool.authorize ? tool.authorize(args, ctx) : { kind: 'execute' };
  },
};

export interface SessionServices {
  sessionId: string;
  workingDirectory: string;
  chat: ChatState;
  toolset: Toolset;
  model: ModelPort;
  authorizer: Authorizer;
  nonInteractive: boolean;
  /** The agent's system prompt without tool rules (a manual compaction's summary request). */
  agentPrompt: string;
  sandbox: SandboxStatus;
  /** Structured output of the running turns that asked for it, by turn id (see services/model/output-schema). */
  outputFormats?: Map<string, TurnOutputFormat>;
  /** World State sampling; null when the host turned it off. */
  worldState: {
    baseline: WorldStateBaseline;
    /** The catalog body for a turn's disabled set, or null when no skill is enabled. */
    skillsCatalog?: (disabledSkillNames: readonly string[]) => Promise<string | null>;
    renderSandboxPolicy?: WorldStateSources['renderSandboxPolicy'];
  } | null;
}

export interface RuntimeServices {
  storage: SessionStorage;
  trace: TraceRecorder;
  /** Model and tool spans between their start and end: the actors start and end them by id. */
  spans: OpenSpans;
  clock: Clock;
  ids: IdGenerator;
  appVersion: string;
  /** Root of spill files: `<spillDir>/<session-id>/<call-id>.txt` (default ~/.openwork/spill). */
  spillDir: string;
  mailbox: MailboxSignal;
  /** The agent control of a root session (shared by its children); null where sub-agents are off. */
  agentControl(sessionId: string): AgentControl | null;
  /** Where tool results past 32,000 bytes are saved whole (`~/.openwork/spill`); null: cut without saving. */
  toolResultSpillRoot: string | null;
  session(sessionId: string): SessionServices;
  /**
   * Resolves once this core is sure it still owns the session (its lease confirmed within the lease
   * period, or renewed now), before a tool's side effect; rejects `ownership_lost`, or
   * `persistence_error` when the database cannot confirm it. Answers `undefined` (nothing to wait
   * for) while the lease is within its period. Absent where ownership is off.
   */
  confirmOwnership?(sessionId: string): Promise<void> | undefined;
}
