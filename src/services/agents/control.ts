/**
 * @module services/agents/control
 * Agent control (reference §5.2, §5.5, §5.7): one per root session, shared with its children. It
 * owns child creation and addressing by task name, and the concurrency slots (at most 3 active child
 * turns; a slot is held by a child's turn and returned however it ends). The five control tools
 * run through it; domain errors are failed results `<code>: <message>` and the parent turn goes on.
 */
import { z } from 'zod';
import { errorMessage, isOpenworkError } from '../../errors.js';
import type { ControlToolSpec } from '../tools/registry.js';
import { failedResult, succeededResult, type ToolResult } from '../../protocol/tool-result.js';
import { invalidInputText } from '../../protocol/model-texts.js';
import type { MailboxSignal } from './signal.js';

export const MAX_ACTIVE_SUB_AGENT_TURNS = 3;
export const TASK_NAME_PATTERN = '^[a-z][a-z0-9_]{0,47}$';
const TASK_NAME_RE = new RegExp(TASK_NAME_PATTERN);
export const WAIT_DEFAULT_MS = 60_000;
export const WAIT_MIN_MS = 10_000;
export const WAIT_MAX_MS = 600_000;

/**
 * The most explorers one root session may create in all (attack round 3; the reference has no
 * cumulative cap). The active-turn cap does not bound creation: explorers that answer at once free
 * their slots, so one model response of 256 `spawn_agent` calls, nineteen times in a turn, created
 * 4,864 child sessions (10 minutes and 170 MB of heap in one turn). Past this, `spawn_agent`
 * answers `agent_limit_reached` and the model reuses an explorer with `followup_task`.
 */
export const MAX_SUB_AGENTS_PER_SESSION = 64;

export type AgentToolName = 'spawn_agent' | 'wait_agent' | 'list_agents' | 'followup_task' | 'interrupt_agent';
export const AGENT_TOOL_NAMES: readonly AgentToolName[] = ['spawn_agent', 'wait_agent', 'list_agents', 'followup_task', 'interrupt_agent'];

export type AgentErrorCode =
  | 'invalid_task_name'
  | 'duplicate_task_name'
  | 'unknown_agent'
  | 'agent_limit_reached'
  | 'agent_host_unavailable'
  | 'agent_start_failed'
  | 'agent_turn_start_failed'
  | 'agent_inspection_failed'
  | 'agent_interrupt_failed';

export type AgentStatus = 'idle' | 'running' | 'completed' | 'failed' | 'cancelled';

/** What the core does for agent control; agent control never holds session handles itself. */
export interface SubAgentHost {
  /**
   * Creates the child session (row + actor under the root), calls `beforeStart` with its id, then
   * starts its first turn.
   */
  spawnChild(
    input: { rootSessionId: string; taskName: string; message: string; spawnSpanId: string },
    beforeStart: (childSessionId: string) => void,
  ): Promise<string>;
  /** Starts a new turn on an existing, idle child (loading its actor if needed). */
  startChildTurn(childSessionId: string, message: string): Promise<void>;
  /** Cancels the child's active turn; false when it has none. */
  interruptChild(childSessionId: string): Promise<boolean>;
  childStatus(childSessionId: string): Promise<{ status: AgentStatus; startedAt: string }>;
}

const taskName = z.string().regex(TASK_NAME_RE, 'task_name must match ^[a-z][a-z0-9_]{0,47}$');
const message = z.string().refine((m) => m.trim() !== '', 'message must not be blank');

const schemas = {
  spawn_agent: z.strictObject({ task_name: taskName, message }),
  wait_agent: z.strictObject({ timeout_ms: z.number().int().min(WAIT_MIN_MS).max(WAIT_MAX_MS).optional() }),
  list_agents: z.strictObject({}),
  followup_task: z.strictObject({ task_name: taskName, message }),
  interrupt_agent: z.strictObject({ task_name: taskName }),
} as const;

function definition(name: AgentToolName, description: string): ControlToolSpec['definition'] {
  const json = z.toJSONSchema(schemas[name], { target: 'draft-7' }) as Record<string, unknown>;
  delete json.$schema;
  return { name, description, parameters: json };
}

export function delegationPromptRules(max = MAX_ACTIVE_SUB_AGENT_TURNS): string {
  return `## Sub-agent delegation
- You can run up to ${max} read-only explorer sub-agents at the same time with spawn_agent; each answers one question and reports back.
- Delegate when there are several specific, bounded codebase questions that can proceed independently, especially when their intermediate research should stay out of your context.
- Keep working yourself while explorers run. Handle a single small question locally, and keep research on your critical path local.
- Do not delegate work you already investigated, and do not re-delegate the same unresolved question.
- Call wait_agent only when waiting is the next useful thing to do; delivered results appear in the conversation before your next model call.
- Reuse an idle explorer with followup_task when its context helps.`;
}

/** The five control tools of a root session (reference §5.5). */
export function agentControlTools(max = MAX_ACTIVE_SUB_AGENT_TURNS): ControlToolSpec[] {
  return [
    {
      name: 'spawn_agent',
      definition: definition(
        'spawn_agent',
        `Start a read-only explorer sub-agent on one specific, bounded codebase question. It returns at once; the explorer's final answer arrives in the conversation later. At most ${max} explorer turns run at the same time. Do not use it for a single small question you can answer yourself.`,
      ),
      promptRules: delegationPromptRules(max),
    },
    {
      name: 'wait_agent',
      definition: definition(
        'wait_agent',
        `Wait until a sub-agent message arrives (any explorer), or the timeout (default ${WAIT_DEFAULT_MS} ms, ${WAIT_MIN_MS}-${WAIT_MAX_MS}). Returns whether a message was delivered; the message itself appears before your next model call. Use it only when waiting is the next useful action.`,
      ),
    },
    { name: 'list_agents', definition: definition('list_agents', 'List the explorers of this session with their status and start time.') },
    {
      name: 'followup_task',
      definition: definition(
        'followup_task',
        `Give an idle explorer a new question; it keeps its earlier context. At most ${max} explorer turns run at the same time. Fails if that explorer is still running.`,
      ),
    },
    { name: 'interrupt_agent', definition: definition('interrupt_agent', "Cancel an explorer's running turn. Its interruption is reported back as a message.") },
  ];
}

export interface AgentToolOutcome {
  result: ToolResult;
  /** wait_agent only: whether it ended by its timeout (consecutive timeouts count toward doom_loop). */
  waitTimedOut?: boolean;
}

function failure(code: AgentErrorCode | 'invalid_arguments', messageText: string): AgentToolOutcome {
  const text = code === 'invalid_arguments' ? invalidInputText(messageText) : `${code}: ${messageText}`;
  return { result: failedResult(code === 'invalid_arguments' ? 'invalid_arguments' : 'execution_failed', text) };
}

const HOST_GONE = 'the runtime that owns the sub-agents has shut down';

/** A host call that met a runtime closing under it (`core_closed`) reports the host as gone. */
function hostFailure(code: AgentErrorCode, error: unknown): AgentToolOutcome {
  if (isOpenworkError(error) && error.code === 'core_closed') return failure('agent_host_unavailable', HOST_GONE);
  return failure(code, errorMessage(error));
}

function ok(text: string): AgentToolOutcome {
  return { result: succeededResult(text) };
}

export class AgentControl {
  /** task_name → child session id; names are reserved before the row exists. */
  private readonly registry = new Map<string, string | null>();
  /** Children whose current turn holds a slot. */
  private readonly active = new Set<string>();

  /**
   * `host` is the reference's weak link to the runtime (§5.2): it answers null once the runtime
   * that owns the sub-agents has shut down, and every control tool but `wait_agent` then fails with
   * `agent_host_unavailable` instead of creating or touching sessions of a closed runtime.
   */
  constructor(
    readonly rootSessionId: string,
    private readonly host: () => SubAgentHost | null,
    private readonly mailbox: MailboxSignal,
    readonly maxActiveTurns = MAX_ACTIVE_SUB_AGENT_TURNS,
  ) {}

  /** Restores the identities of existing children without starting them or taking slots. */
  restore(children: ReadonlyArray<{ id: string; taskName: string | null }>): void {
    for (const child of children) if (child.taskName) this.registry.set(child.taskName, child.id);
  }

  get activeTurns(): number {
    return this.active.size;
  }

  childId(name: string): string | null {
    return this.registry.get(name) ?? null;
  }

  forget(childSessionId: string): void {
    for (const [name, id] of this.registry) if (id === childSessionId) this.registry.delete(name);
    this.active.delete(childSessionId);
  }

  /** The child's turn ended (however it ended): its slot is free again. */
  turnEnded(childSessionId: string): void {
    this.active.delete(childSessionId);
  }

  private acquire(childSessionId: string): boolean {
    if (this.active.has(childSessionId)) return true;
    if (this.active.size >= this.maxActiveTurns) return false;
    this.active.add(childSessionId);
    return true;
  }

  async execute(tool: AgentToolName, rawArgs: unknown, ctx: { sessionId: string; toolCallId: string; spawnSpanId: string; signal: AbortSignal }): Promise<AgentToolOutcome> {
    const parsed = schemas[tool].safeParse(rawArgs);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      const text = `${issue.path.join('.') || '(root)'}: ${issue.message}`;
      return issue.path[0] === 'task_name' && issue.code !== 'invalid_type' ? failure('invalid_task_name', text) : failure('invalid_arguments', text);
    }
    const host = this.host();
    if (!host && tool !== 'wait_agent') return failure('agent_host_unavailable', HOST_GONE);
    switch (tool) {
      case 'spawn_agent': {
        const { task_name: name, message: text } = parsed.data as z.infer<(typeof schemas)['spawn_agent']>;
        if (this.registry.has(name)) return failure('duplicate_task_name', `an explorer named ${name} already exists in this session`);
        if (this.active.size >= this.maxActiveTurns) return failure('agent_limit_reached', `${this.maxActiveTurns} explorer turns are already running; wait for one to finish`);
        if (this.registry.size >= MAX_SUB_AGENTS_PER_SESSION) {
          return failure('agent_limit_reached', `this session has ${MAX_SUB_AGENTS_PER_SESSION} explorers already; give one of them a new task with followup_task`);
        }
        // The name and a slot are reserved before the row exists, and released if the spawn fails.
        this.registry.set(name, null);
        const placeholder = `pending:${name}`;
        this.active.add(placeholder);
        let childId: string | null = null;
        try {
          await host!.spawnChild({ rootSessionId: this.rootSessionId, taskName: name, message: text, spawnSpanId: ctx.spawnSpanId }, (id) => {
            childId = id;
            this.registry.set(name, id);
            this.active.delete(placeholder);
            this.active.add(id);
          });
          return ok(JSON.stringify({ task_name: name }));
        } catch (error) {
          this.registry.delete(name);
          this.active.delete(placeholder);
          if (childId) this.active.delete(childId);
          if (isOpenworkError(error) && error.code === 'invalid_request' && /task/.test(error.message)) return failure('duplicate_task_name', error.message);
          return hostFailure('agent_start_failed', error);
        }
      }
      case 'followup_task': {
        const { task_name: name, message: text } = parsed.data as z.infer<(typeof schemas)['followup_task']>;
        const childId = this.registry.get(name);
        if (!childId) return failure('unknown_agent', `no explorer named ${name}`);
        const status = await host!.childStatus(childId).catch(() => null);
        if (status?.status === 'running') return failure('agent_turn_start_failed', `explorer ${name} is still running`);
        if (!this.acquire(childId)) return failure('agent_limit_reached', `${this.maxActiveTurns} explorer turns are already running; wait for one to finish`);
        try {
          await host!.startChildTurn(childId, text);
          return ok('Follow-up task started');
        } catch (error) {
          this.active.delete(childId);
          return hostFailure('agent_turn_start_failed', error);
        }
      }
      case 'interrupt_agent': {
        const { task_name: name } = parsed.data as z.infer<(typeof schemas)['interrupt_agent']>;
        const childId = this.registry.get(name);
        if (!childId) return failure('unknown_agent', `no explorer named ${name}`);
        try {
          if (!(await host!.interruptChild(childId))) return failure('agent_interrupt_failed', `explorer ${name} has no running turn`);
          return ok('Interrupt requested');
        } catch (error) {
          return hostFailure('agent_interrupt_failed', error);
        }
      }
      case 'list_agents': {
        try {
          const rows = await Promise.all(
            [...this.registry.entries()]
              .filter((entry): entry is [string, string] => entry[1] !== null)
              .map(async ([name, id]) => {
                const s = await host!.childStatus(id);
                return { task_name: name, status: s.status, started_at: s.startedAt };
              }),
          );
          rows.sort((a, b) => (a.task_name < b.task_name ? -1 : 1));
          return ok(JSON.stringify(rows));
        } catch (error) {
          return hostFailure('agent_inspection_failed', error);
        }
      }
      case 'wait_agent': {
        const { timeout_ms } = parsed.data as z.infer<(typeof schemas)['wait_agent']>;
        const delivered = await this.mailbox.wait(ctx.sessionId, timeout_ms ?? WAIT_DEFAULT_MS, ctx.signal);
        return { result: succeededResult(JSON.stringify({ delivered, timed_out: !delivered })), waitTimedOut: !delivered };
      }
      default: {
        const never: never = tool;
        return failure('invalid_arguments', `unknown agent tool ${String(never)}`);
      }
    }
  }
}
