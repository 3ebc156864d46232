/**
 * @module core/options
 * The options of `createCore` and of `Core.createSession`: what a host configures.
 */
import type { InspectionEvent, Observer } from 'xstate';
import type { TurnLimits } from '../machines/session/ports.js';
import type { PermissionMode } from '../protocol/input.js';
import type { SandboxStatus } from '../protocol/snapshot.js';
import type { Clock, IdGenerator } from '../services/clock.js';
import type { CompactionHooks, CompactionOptions } from '../services/compaction/compaction.js';
import type { WorldStateSources } from '../services/context/world-state.js';
import type { ModelPort } from '../services/model/port.js';
import type { OwnershipOptions } from '../services/ownership/lease-keeper.js';
import type { Authorizer } from '../services/runtime.js';
import type { TelemetryOptions } from '../services/telemetry/otel.js';
import type { AnyTool } from '../services/tools/define.js';
import type { ToolEntry } from '../services/tools/source.js';
import type { TraceRecorder } from '../services/trace/recorder.js';
import type { SessionStorage } from '../storage/storage.js';


export interface CoreOptions {
  storage: SessionStorage;
  model: ModelPort;
  /**
   * Registered tools of root sessions (the real file and shell tools are a separate module), and
   * sources of tools whose catalog may change, such as `mcpTools(...)`.
   */
  tools?: readonly ToolEntry[];
  systemPrompt?: string;
  /** Decides per call whether a tool runs, is refused, or needs a card; defaults to each tool's own rule. */
  authorizer?: Authorizer;
  /** Any XState inspection observer; it receives the events of every actor of every session. */
  inspect?: Observer<InspectionEvent> | ((event: InspectionEvent) => void);
  clock?: Clock;
  ids?: IdGenerator;
  limits?: Partial<TurnLimits>;
  /** User text at or above this estimate answers `input_too_large` (default 32,000 tokens). */
  maxUserInputTokens?: number;
  appVersion?: string;
  /** A custom trace recorder, or options of the built-in bounded queue. */
  trace?: TraceRecorder | { capacity?: number; batchSize?: number };
  /**
   * OpenTelemetry export: every span of the stored trace (model calls, tool calls, compactions),
   * under one `invoke_agent` span per turn, on the host's `Tracer`, with the GenAI semantic
   * conventions. Contents only with `captureContent: true`. A failing tracer never fails a turn.
   */
  telemetry?: TelemetryOptions;
  sandbox?: SandboxStatus;
  /**
   * Summary attempts, their time limit and the pause between them (reference §3.5: 3, 120 s, 3 s).
   * `false` turns automatic compaction off: no threshold compaction, and an explicit context
   * overflow fails the turn with `model_error` (manual compaction still works).
   */
  compaction?: false | (Partial<CompactionOptions> & CompactionHooks);
  /**
   * World State sections appended before model calls (reference §2.3): on by default; `false` turns
   * sampling off (the model then sees no project layout, AGENTS.md, skill catalog or sandbox policy).
   */
  worldState?: false | { skillsCatalog?: WorldStateSources['skillsCatalog']; renderSandboxPolicy?: WorldStateSources['renderSandboxPolicy'] };
  /**
   * Offer root sessions the `request_user_input` tool (default false): the model may ask the user
   * up to three questions, the turn waits in `waiting_user_input` (status flag
   * `waiting_on_user_input`) until the host calls `answerUserInput`, or the turn is cancelled.
   * Turn it on only in a host that shows the `user_input_requested` update to a person.
   */
  userInput?: boolean;
  /**
   * Offer root sessions the `conversation_history` tool (default false): the model may read the
   * session's raw history behind a compaction checkpoint.
   */
  conversationHistory?: boolean;
  /**
   * Offer root sessions the `update_plan` tool (default false): the model keeps a step list, shown
   * to the host as `plan_updated` and in the snapshot.
   */
  plan?: boolean;
  /**
   * Materialises explicit skill selections into `skill_instruction` messages written before the
   * user's text when a turn is accepted (reference §7.4). Without it, skill input is refused.
   */
  resolveSkills?: (inputs: Array<{ type: 'skill'; name: string; path: string }>, disabledSkillNames: string[]) => Promise<import('../protocol/content.js').NewMessage[]>;
  /** The runtime's own directory (default ~/.openwork): spill files live under `<home>/spill`. */
  openworkHome?: string;
  /**
   * Sub-agents (reference §5): with `true` or an object, root sessions get the five agent control
   * tools and may run explorer children (read-only tools, 15 model calls, accept_edits,
   * non-interactive). Off by default. Explorer tools default to the registered tools named read,
   * grep, glob, list and bash.
   */
  agents?: boolean | { maxActiveTurns?: number; explorerTools?: readonly AnyTool[] };
  /** Timers for wait_agent's timeout; injected for tests (defaults to the global timers). */
  timers?: import('../services/agents/signal.js').Timers;
  /**
   * The skill root (reference §7.2): default `$HOME/.agents/skills` (none when HOME is unset);
   * `null` turns skills off.
   */
  skills?: { root?: string | null };
  /**
   * The skill roots the authorizer hard-protects; `workspaceToolOptions` passes the tool runtime's.
   * When given, a skill root outside all of them is refused with `configuration_invalid`: the root
   * that is discovered is the root that is protected (reference §7.2, §7.5).
   */
  protectedSkillRoots?: readonly string[];
  /**
   * Receives the storage's local paths (`storage.protectedPaths`, a PGlite data directory) at
   * start-up so that the permission policy keeps every tool out of them; `workspaceToolOptions`
   * wires it to the tool runtime. A host that wires the built-in tools by hand passes
   * `(paths) => runtime.protectRuntimePaths(paths)`.
   */
  protectRuntimePaths?: (paths: readonly string[]) => void;
  /**
   * How long a cancelled tool may take to stop before its outcome is recorded as unknown (default
   * 10,000 ms): the `toolCancelGrace` delay of the charts' `executing.stopping` state.
   */
  toolCancelGraceMs?: number;
  /**
   * Where a tool result over 32,000 bytes is saved whole before it is cut (reference §11.2); pass
   * `prepareToolRuntime().spillRoot`. Without it the cut result only says how much was omitted.
   */
  toolResultSpillRoot?: string;
  /** Close the storage on `shutdown()` (default true); false when the host shares it. */
  closeStorageOnShutdown?: boolean;
  /** The model of a loaded session by its stored `default_model_id`; defaults to `model`. */
  resolveModel?: (modelId: string | null) => ModelPort | undefined;
  /** Called when an actor fails in a way the machines did not handle (a bug); defaults to console.error. */
  onActorError?: (sessionId: string, error: unknown) => void;
  /**
   * Session ownership for several processes on one Postgres (issue 15, README "Several processes"):
   * each loaded session is leased to this core, every write is fenced by the lease's token, expired
   * owners' running turns are taken over. On by default for `postgresStorage` (lease 5,000 ms); off
   * by default for PGlite, whose store lock already admits one process. `false` turns it off.
   */
  ownership?: false | OwnershipOptions;
}

export interface CreateSessionOptions {
  /**
   * The project the session works in (an existing absolute directory). Optional when no file tool
   * is registered: the session then runs in an empty directory of the runtime's own; with file tools
   * registered, leaving it out is `invalid_request` (see host/working-directory).
   */
  workingDirectory?: string;
  title?: string;
  permissionMode?: PermissionMode;
  id?: string;
  /** This session's model, when it differs from the core's default. */
  model?: ModelPort;
}
