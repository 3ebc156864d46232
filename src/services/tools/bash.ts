/**
 * @module services/tools/bash
 * `bash`: one command in a fresh bash inside the platform sandbox, cwd = the workspace root, with
 * a minimal environment. stdout and stderr are merged; the result keeps the first 2 KiB and the
 * last 14 KiB (the whole output goes to a spill file past 16 KiB) and ends with a status line. A
 * kernel denial appends the denial marker and the escalation hint. bash never runs outside the
 * sandbox: without one it answers `sandbox_unavailable`.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import { z } from 'zod';
import { bashEscalationParameters } from '../permissions/escalation.js';
import { bashDenialText, DENIAL_IS_POLICY_TEXT, networkDenialText, sandboxUnavailableText } from '../../protocol/model-texts.js';
import type { SandboxPolicy } from '../permissions/policy.js';
import { classify, networkFailureLine } from '../sandbox/classify.js';
import { DISK_CHECK_MS, watchDisk } from '../sandbox/disk-budget.js';
import { runProcess } from '../sandbox/process.js';
import { defineTool, type ToolContext, type ToolResult } from './define.js';
import { OutputCollector, spillPath } from './output.js';
import { approvedNetwork, callPolicy, type SandboxedTool } from './sandboxed.js';
import { cancelledResult, deniedResult, failedResult, outcomeUnknownResult, succeededResult } from '../../protocol/tool-result.js';
import type { ToolRuntime } from './tool-runtime.js';

export const BASH_DEFAULT_TIMEOUT_MS = 30_000;
export const BASH_MAX_TIMEOUT_MS = 120_000;
/**
 * The longest command accepted, in UTF-8 bytes (issue 13.4). The command reaches bash as one
 * argument, and Linux refuses a single argument over 128 KiB (`spawn E2BIG`); a command past this
 * limit is refused as `invalid_arguments` before anything is spawned. Longer scripts belong in a file.
 */
export const BASH_MAX_COMMAND_BYTES = 65_536;
/**
 * The most `|` characters a command may hold (branch attack5b). The bash grammar's parse time grows
 * with the square of a pipeline's length: 32,000 pipes in 64 KiB held the host's main thread for
 * 1.6-5.8 s in danger detection. A real pipeline has a few stages; quoted alternations (`grep -E
 * 'a|b'`) and code in a here-document count too, so the bound is generous. Checked before parsing.
 */
export const BASH_MAX_PIPES = 256;
/**
 * The deepest nesting of `(`/`)` and `{`/`}` a command may have, counted on the raw text before
 * parsing (quotes are not told apart). `$(((…)))` nested 20,000 deep overflowed the stack in danger
 * detection; a real command nests a few levels.
 */
export const BASH_MAX_NESTING = 256;

/** Why a command is refused before it is parsed or shown, or null: pipes and nesting, in one pass. */
export function commandShapeError(command: string): string | null {
  let pipes = 0;
  let depth = 0;
  let deepest = 0;
  for (let i = 0; i < command.length; i += 1) {
    const c = command.charCodeAt(i);
    if (c === 0x7c) pipes += 1;
    else if (c === 0x28 || c === 0x7b) {
      depth += 1;
      if (depth > deepest) deepest = depth;
    } else if ((c === 0x29 || c === 0x7d) && depth > 0) depth -= 1;
  }
  if (pipes > BASH_MAX_PIPES) return `the command holds ${pipes} '|' characters, more than ${BASH_MAX_PIPES}; write a long script to a file and run that instead`;
  if (deepest > BASH_MAX_NESTING) return `the command nests brackets ${deepest} levels deep, more than ${BASH_MAX_NESTING}; write a long script to a file and run that instead`;
  return null;
}

/** Progress is forwarded in batches at most this often. */
const PROGRESS_INTERVAL_MS = 50;
/** A batch is forwarded at once when it reaches this size, so a flood never piles up between ticks. */
const PROGRESS_BATCH_BYTES = 4 * 1024;

const baseParameters = {
  command: z
    .string()
    .min(1)
    .refine((command) => Buffer.byteLength(command) <= BASH_MAX_COMMAND_BYTES, {
      message: `the command is longer than ${BASH_MAX_COMMAND_BYTES} bytes; write a long script to a file and run that instead`,
    })
    .superRefine((command, ctx) => {
      // After the length check (zod runs refinements in order and this one only on a bounded string).
      if (Buffer.byteLength(command) > BASH_MAX_COMMAND_BYTES) return;
      const error = commandShapeError(command);
      if (error !== null) ctx.addIssue({ code: 'custom', message: error });
    })
    .describe('The bash command line to run (cwd is the workspace root).'),
  timeoutMs: z.number().int().optional().describe(`Milliseconds before the command is killed (default ${BASH_DEFAULT_TIMEOUT_MS}, at most ${BASH_MAX_TIMEOUT_MS}).`),
  description: z.string().optional().describe('A few words saying what the command does, for the user.'),
};

const DESCRIPTION = [
  'Runs a bash command in a fresh shell inside a file-system sandbox, with the workspace root as the working directory, and returns its merged stdout and stderr followed by a status line such as "[exit 0; duration 12 ms]".',
  'Long output keeps its first 2 KiB and last 14 KiB; the full output is saved to a file you can read or grep.',
  'The sandbox lets commands read everything except credential directories and write the temp directories, and the workspace when the mode allows it; .git, .env files, editor settings and protected paths are not writable.',
  'Commands have no network (only a private loopback: neither the internet nor servers on the host\'s 127.0.0.1 are reachable) unless the call asks for it with sandboxPermissions {"network": true}, which asks the user.',
  'The number of processes is limited. Commands that delete files recursively or by force ask the user first. Prefer read, grep, glob, list, write and edit for file work.',
  DENIAL_IS_POLICY_TEXT,
].join(' ');

/** What the model reads when no sandbox works: bash is registered but never runs, and nothing can be escalated. */
const UNAVAILABLE_DESCRIPTION = [
  'Would run a bash command inside the platform sandbox, but the sandbox is unavailable in this session, so every call is refused with the reason and nothing runs.',
  'Use read, grep, glob, list, write and edit for file work, and ask the user to run a command in their own terminal when one is needed.',
].join(' ');

function commandEnv(policy: SandboxPolicy): Record<string, string> {
  const temp = policy.environment.tempDirs[policy.environment.tempDirs.length - 1] ?? '/tmp';
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin',
    HOME: policy.environment.home,
    SHELL: '/bin/bash',
    LANG: process.env.LANG ?? 'C.UTF-8',
    TMPDIR: temp,
    // Go's build cache would otherwise sit in $HOME, which bash may not write (reference §4.5).
    GOCACHE: join(temp, 'openwork', 'go-build'),
  };
  if (process.env.LC_ALL) env.LC_ALL = process.env.LC_ALL;
  return env;
}

/** What bash and the C library say of a write past RLIMIT_FSIZE. */
const FILE_SIZE_LINE = /File size limit exceeded|File too large/;

function withStatus(output: string, status: string): string {
  return `${output}${output === '' || output.endsWith('\n') ? '' : '\n'}${status}`;
}

export function bashTool(runtime: ToolRuntime): SandboxedTool {
  const parameters = z.object(runtime.launcher ? { ...baseParameters, ...bashEscalationParameters } : baseParameters);
  const tool = defineTool({
    name: 'bash',
    // Without a sandbox the description names no parameter the schema lacks (issue 20.2).
    description: runtime.launcher ? DESCRIPTION : UNAVAILABLE_DESCRIPTION,
    parameters,
    async execute(args, ctx: ToolContext): Promise<ToolResult> {
      const { command, timeoutMs: requested } = args as z.infer<z.ZodObject<typeof baseParameters>>;
      const launcher = runtime.launcher;
      if (!launcher) {
        const text = sandboxUnavailableText(runtime.sandbox.detail ?? 'no sandbox');
        return deniedResult(text, 'sandbox_unavailable');
      }
      const timeoutMs = Math.min(BASH_MAX_TIMEOUT_MS, Math.max(1, requested ?? BASH_DEFAULT_TIMEOUT_MS));
      const policy = callPolicy(runtime, ctx);
      const network = approvedNetwork(ctx);
      if (!existsSync(policy.workspaceRoot)) return failedResult('execution_failed', `the working directory ${policy.workspaceRoot} does not exist`);
      let spec;
      try {
        spec = launcher.prepare(policy, command, { network, fileSizeLimitBytes: runtime.bashFileSizeLimit });
      } catch (error) {
        return failedResult('execution_failed', `the sandbox could not be prepared: ${(error as Error).message}`);
      }
      // The spec owns the pinned bind sources: every exit from here on closes them (integ8), also
      // one through an exception before the spawn (the collector, the disk watch) or in the flush.
      let collector: OutputCollector;
      const decoder = new StringDecoder('utf8');
      let pending = '';
      let flushTimer: NodeJS.Timeout | undefined;
      const flush = () => {
        flushTimer = undefined;
        if (pending !== '') ctx.progress({ kind: 'stdout', chunk: pending });
        pending = '';
      };
      let outcome;
      try {
        collector = new OutputCollector(spillPath(runtime.spillRoot, ctx.sessionId, ctx.toolCallId), runtime.spill);
        // The disk budget is watched on the file systems the call can write (trust-lease).
        const disk = watchDisk([policy.workspaceRoot, ...policy.environment.tempDirs], runtime.bashDiskLimit);
        const output = collector;
        outcome = await runProcess({
          watch: { everyMs: DISK_CHECK_MS, exceeded: () => disk.exceeded() },
          file: spec.file,
          args: spec.args,
          env: commandEnv(policy),
          cwd: policy.workspaceRoot,
          timeoutMs,
          killGraceMs: runtime.bashKillGraceMs,
          signal: ctx.signal,
          statusFd: spec.statusFd,
          inputFiles: spec.inputFiles,
          descriptors: spec.descriptors,
          onOutput: (chunk) => {
            output.push(chunk);
            pending += decoder.write(chunk);
            if (pending.length >= PROGRESS_BATCH_BYTES) {
              clearTimeout(flushTimer);
              flush();
              return;
            }
            flushTimer ??= setTimeout(flush, PROGRESS_INTERVAL_MS);
          },
        });
      } finally {
        clearTimeout(flushTimer);
        try {
          pending += decoder.end();
          flush();
        } finally {
          spec.cleanup();
        }
      }
      const { text: output } = collector.finish();
      switch (outcome.kind) {
        case 'spawn_failed':
          return failedResult('execution_failed', `${spec.file} could not be started: ${outcome.message}`);
        case 'unconfirmed': {
          const text = withStatus(output, `[${outcome.message}; outcome unknown; duration ${outcome.durationMs} ms]`);
          return outcomeUnknownResult(text, { message: outcome.message });
        }
        case 'timeout': {
          const text = withStatus(output, `[timed out after ${timeoutMs} ms; duration ${outcome.durationMs} ms]`);
          return failedResult('timeout', text, { message: `the command timed out after ${timeoutMs} ms` });
        }
        case 'cancelled': {
          const text = withStatus(output, `[cancelled; duration ${outcome.durationMs} ms]`);
          return cancelledResult(text, { message: 'the command was cancelled' });
        }
        case 'limit': {
          const text = withStatus(output, `[stopped: ${outcome.reason}; what it wrote is still there; duration ${outcome.durationMs} ms]`);
          return failedResult('disk_limit_exceeded', text, { message: outcome.reason });
        }
        case 'exited': {
          const verdict = classify({
            launcher: launcher.kind,
            exitCode: outcome.exitCode,
            output,
            launcherStderr: outcome.launcherStderr,
            status: outcome.status,
            hidden: spec.hidden,
            cwd: policy.workspaceRoot,
            ...(spec.callPaths ? { callPaths: spec.callPaths } : {}),
          });
          if (verdict.kind === 'unavailable') {
            const text = sandboxUnavailableText(verdict.reason);
            return failedResult('sandbox_unavailable', text);
          }
          // A bound path changed between the plan and the mount (attack round 7): nothing ran.
          if (verdict.kind === 'changed') return failedResult('execution_failed', `the sandbox could not be prepared: ${verdict.reason} (a path it binds changed while the call started; the command did not run)`);
          // bubblewrap refused one of this call's paths (integ8): the sandbox works, this call could not start.
          if (verdict.kind === 'refused') return failedResult('execution_failed', `the sandbox could not be prepared for this call: ${verdict.reason} (the sandbox works; this path could not be bound or entered, so the command did not run)`);
          const exit = outcome.exitCode ?? 128;
          const status = outcome.signal && outcome.exitCode === null ? `[killed by ${outcome.signal}; duration ${outcome.durationMs} ms]` : `[exit ${exit}; duration ${outcome.durationMs} ms]`;
          // A process that wrote past RLIMIT_FSIZE was stopped by SIGXFSZ (bash reports it, and
          // 128 + 25 as the status of a command it ran last) or got EFBIG.
          if (outcome.exitCode === 153 || (outcome.exitCode !== 0 && FILE_SIZE_LINE.test(output))) {
            const message = `a process wrote past the file size limit of ${runtime.bashFileSizeLimit} bytes and was stopped`;
            return failedResult('disk_limit_exceeded', `${withStatus(output, status)}\n[${message}; what it wrote is still there]`, { message });
          }
          if (verdict.kind === 'denied') {
            runtime.denials.record(ctx.sessionId, ctx.turnId, verdict.line);
            return succeededResult(`${withStatus(output, status)}\n${bashDenialText(policy.mode)}`, { sandboxDenied: true });
          }
          // Without the network grant a failed lookup or route is the sandbox's doing: say so, once.
          const networkLine = network || outcome.exitCode === 0 ? null : networkFailureLine(output);
          if (networkLine !== null) {
            runtime.denials.record(ctx.sessionId, ctx.turnId, networkLine);
            return succeededResult(`${withStatus(output, status)}\n${networkDenialText()}`, { sandboxDenied: true });
          }
          return succeededResult(withStatus(output, status), { sandboxDenied: false });
        }
        default: {
          const never: never = outcome;
          throw new Error(`unknown outcome ${JSON.stringify(never)}`);
        }
      }
    },
  });
  return Object.assign(tool, {
    sandboxed: {
      actor: 'bash' as const,
      targets: () => [],
      command: (args: unknown) => (args as { command: string }).command,
    },
  });
}
