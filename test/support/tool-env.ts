/**
 * A hermetic tool environment per test file: a temp workspace, a temp HOME (with credential and
 * protected directories in it), a private temp directory, and a directory outside everything.
 * `call` runs one tool call the way the tool-call machine does: authorise, then (after an
 * approval decided by the test) execute.
 */
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, type TestContext } from 'vitest';
import type { PermissionMode } from '../../src/protocol/input.js';
import type { PermissionCard, ToolProgress } from '../../src/protocol/updates.js';
import { permissionPolicy } from '../../src/services/permissions/authorizer.js';
import type { Authorizer } from '../../src/services/runtime.js';
import { builtinTools } from '../../src/services/tools/builtin.js';
import { completeCard, normalizeToolResult, type AnyTool, type Authorization, type ToolResult } from '../../src/services/tools/define.js';
import { prepareToolRuntime, type ToolRuntime, type ToolRuntimeOptions } from '../../src/services/tools/tool-runtime.js';
import { NON_INTERACTIVE_REFUSAL_TEXT } from '../../src/services/permissions/texts.js';

export type Decision = 'allow_once' | 'allow_for_turn' | 'allow_for_session' | 'deny';

export interface CallOptions {
  mode?: PermissionMode;
  sessionId?: string;
  turnId?: string;
  toolCallId?: string;
  nonInteractive?: boolean;
  /** Decides a card; without it a card fails the test. */
  decide?: (card: PermissionCard) => Decision;
  signal?: AbortSignal;
  onProgress?: (p: ToolProgress) => void;
  /** Defaults to the workspace. */
  workingDirectory?: string;
}

export interface CallOutcome {
  authorization: Authorization;
  card: PermissionCard | null;
  /** The result (for a rule denial: what the machine records). */
  result: ToolResult;
  executed: boolean;
}

export interface ToolEnv {
  base: string;
  ws: string;
  home: string;
  tmp: string;
  outside: string;
  runtime: ToolRuntime;
  tools: Map<string, AnyTool>;
  authorizer: Authorizer;
  call(name: string, args: Record<string, unknown>, options?: CallOptions): Promise<CallOutcome>;
  cleanup(): void;
}

let counter = 0;

export async function toolEnv(options: Omit<ToolRuntimeOptions, 'home' | 'tempDirs'> = {}): Promise<ToolEnv> {
  const base = realpathSync(mkdtempSync(join(tmpdir(), 'openwork-tools-')));
  const ws = join(base, 'ws');
  const home = join(base, 'home');
  const tmp = join(base, 'tmp');
  const outside = join(base, 'outside');
  for (const dir of [ws, home, tmp, outside, join(home, '.ssh'), join(home, '.config', 'gh'), join(home, '.agents', 'skills', 'demo'), join(ws, '.git', 'hooks'), join(ws, 'src')]) {
    mkdirSync(dir, { recursive: true });
  }
  writeFileSync(join(home, '.ssh', 'id_ed25519'), 'PRIVATE KEY\n');
  writeFileSync(join(home, '.config', 'gh', 'hosts.yml'), 'oauth_token: secret\n');
  writeFileSync(join(home, '.netrc'), 'machine example.com password hunter2\n');
  writeFileSync(join(home, '.agents', 'skills', 'demo', 'SKILL.md'), '# demo skill\n');
  writeFileSync(join(ws, '.git', 'HEAD'), 'ref: refs/heads/main\n');
  writeFileSync(join(ws, '.git', 'hooks', 'pre-commit'), '#!/bin/sh\nexit 0\n');
  writeFileSync(join(ws, '.env'), 'TOKEN=abc\n');
  writeFileSync(join(ws, 'src', 'main.txt'), 'hello\nworld\n');
  writeFileSync(join(outside, 'data.txt'), 'outside data\n');
  const runtime = await prepareToolRuntime({ ...options, home, tempDirs: [tmp] });
  const tools = new Map(builtinTools(runtime).map((t) => [t.name, t]));
  const authorizer = permissionPolicy(runtime);
  return {
    base,
    ws,
    home,
    tmp,
    outside,
    runtime,
    tools,
    authorizer,
    async call(name, args, opts = {}) {
      const tool = tools.get(name);
      if (!tool) throw new Error(`no tool ${name}`);
      const parsed = tool.parameters.safeParse(args);
      if (!parsed.success) throw new Error(`invalid arguments for ${name}: ${parsed.error.message}`);
      const mode = opts.mode ?? 'auto';
      const sessionId = opts.sessionId ?? 'ses_test';
      const turnId = opts.turnId ?? 'turn_test';
      const authorization = await authorizer.authorize(tool, parsed.data, { sessionId, turnId, workingDirectory: opts.workingDirectory ?? ws, permissionMode: mode, nonInteractive: opts.nonInteractive ?? false });
      if (authorization.kind === 'deny') {
        const code = authorization.source === 'sandbox_unavailable' ? 'sandbox_unavailable' : 'permission_denied';
        return { authorization, card: null, executed: false, result: { status: 'denied', text: authorization.text, error: { code, message: authorization.text, retryable: false } } };
      }
      let card: PermissionCard | null = null;
      let decision: Decision | 'none' = 'none';
      if (authorization.kind === 'card') {
        card = completeCard(authorization.card, tool.name, opts.workingDirectory ?? ws, ['allow_once', 'deny', 'allow_for_turn', 'allow_for_session']);
        if (opts.nonInteractive) {
          return { authorization, card, executed: false, result: { status: 'denied', text: NON_INTERACTIVE_REFUSAL_TEXT, error: { code: 'permission_denied', message: NON_INTERACTIVE_REFUSAL_TEXT, retryable: false } } };
        }
        if (!opts.decide) throw new Error(`unexpected ${card.kind} card for ${name}: ${card.summary}`);
        decision = opts.decide(card);
        if (decision === 'deny') return { authorization, card, executed: false, result: { status: 'denied', text: 'The user denied this tool call.' } };
      }
      counter += 1;
      const raw = await tool.execute(parsed.data, {
        sessionId,
        turnId,
        toolCallId: opts.toolCallId ?? `tc_${counter}`,
        providerCallId: `call_${counter}`,
        workingDirectory: opts.workingDirectory ?? ws,
        permissionMode: mode,
        signal: opts.signal ?? new AbortController().signal,
        progress: opts.onProgress ?? (() => {}),
        approval: { decision, ...(card ? { card } : {}) },
      });
      return { authorization, card, executed: true, result: normalizeToolResult(raw) };
    },
    cleanup() {
      rmSync(base, { recursive: true, force: true });
    },
  };
}

/**
 * Sandbox tests need bubblewrap and a kernel that lets it build namespaces. Where that fails the
 * test is skipped with the self-check's reason (printed, never silent); with
 * OPENWORK_REQUIRE_SANDBOX=1 (set by .ci/run when bwrap works there) it fails instead.
 */
export function requireSandbox(ctx: TestContext, runtime: ToolRuntime): void {
  if (runtime.sandbox.available) return;
  const reason = `sandbox unavailable on this machine: ${runtime.sandbox.detail ?? 'unknown reason'}`;
  if (process.env.OPENWORK_REQUIRE_SANDBOX === '1') throw new Error(`${reason} (OPENWORK_REQUIRE_SANDBOX=1 says it must work here)`);
  console.warn(`[sandbox] "${ctx.task.name}" cannot run: ${reason}`);
  ctx.skip(reason);
}

/**
 * A tool environment for the enclosing `describe` (or the file): made before its tests, handed to
 * `use`, removed after them. Hooks registered after this one run before its clean-up.
 */
export function useToolEnv(use: (env: ToolEnv) => void, options: Omit<ToolRuntimeOptions, 'home' | 'tempDirs'> = {}): void {
  let env: ToolEnv | undefined;
  beforeAll(async () => {
    env = await toolEnv(options);
    use(env);
  });
  afterAll(() => env?.cleanup());
}
