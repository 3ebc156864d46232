/**
 * @module cli/demo
 * `openwork demo`: an offline, scripted session through the real runtime and the embedded PGlite
 * storage. The model is scripted; everything else (machines, storage, updates, approvals) is real.
 */
import { join, resolve } from 'node:path';
import { createCore } from '../core.js';
import type { PermissionDecision } from '../protocol/input.js';
import type { PlanStep } from '../protocol/plan.js';
import type { SessionUpdateEnvelope } from '../protocol/updates.js';
import { scriptedModel } from '../services/model/scripted.js';
import { pgliteStorage } from '../storage/pglite.js';
import { askCard } from './card-prompt.js';
import { listDirectoryTool, writeNoteTool } from './example-tools.js';
import { LineInput } from './line-input.js';
import { styleFor } from './render.js';
import { ignoreOpenworkDirectory } from './storage.js';

export interface DemoOptions {
  dataDir?: string;
  workingDirectory?: string;
  /** Answers cards without asking (default when stdin is not a terminal). */
  autoApprove?: boolean;
  out?: NodeJS.WritableStream;
}

const listTool = listDirectoryTool(20);
const noteTool = writeNoteTool('demo', 'the demo agent wants to leave a note');

/** The scripted model's `update_plan` call: the tour's two steps at these statuses. */
function planCall(look: PlanStep['status'], write: PlanStep['status'], explanation?: string) {
  return {
    name: 'update_plan',
    arguments: {
      ...(explanation ? { explanation } : {}),
      plan: [
        { step: 'Look at the working directory', status: look },
        { step: 'Write a note (needs approval)', status: write },
      ],
    },
  };
}

function describe(e: SessionUpdateEnvelope): string | null {
  const u = e.update;
  switch (u.type) {
    case 'turn_started':
      return `turn started (${u.clientRequestId})`;
    case 'phase_changed':
      return `phase → ${u.phase}`;
    case 'text_delta':
    case 'reasoning_delta':
    case 'draft_cleared':
    case 'tool_call_progress':
      return null;
    case 'tool_call_started':
      return `tool ${u.toolName} ${u.arguments}`;
    case 'tool_call_finished':
      return `tool ${u.toolName} ${u.status}: ${u.text.split('\n')[0]}${u.text.includes('\n') ? ' …' : ''}`;
    case 'permission_requested':
      return `permission requested: ${u.card.summary}`;
    case 'permission_resolved':
      return `permission ${u.decision}`;
    case 'user_input_requested':
      return `question: ${u.request.questions.map((q) => q.question).join(' / ')}`;
    case 'user_input_resolved':
      return `question ${u.outcome}`;
    case 'plan_updated':
      return `plan: ${u.plan.map((s) => `[${s.status}] ${s.step}`).join(', ')}`;
    case 'conversation_compacted':
      return `conversation compacted (${u.kind})`;
    case 'turn_finished':
      return `turn finished: ${u.outcome.status}${u.outcome.status === 'failed' ? ` (${u.outcome.code})` : ''}`;
    default: {
      const never: never = u;
      return String(never);
    }
  }
}

export async function runDemo(options: DemoOptions = {}): Promise<number> {
  const out = options.out ?? process.stdout;
  const print = (line: string) => out.write(`${line}\n`);
  const workingDirectory = resolve(options.workingDirectory ?? process.cwd());
  const dataDir = options.dataDir ?? join(workingDirectory, '.openwork', 'db');
  const autoApprove = options.autoApprove ?? !process.stdin.isTTY;

  print('openwork demo: the model is SCRIPTED (no network, no API key). The runtime, the statecharts,');
  print(`the approvals and the storage are real: PGlite in ${dataDir}.`);
  print('');
  const model = scriptedModel(
    [
      {
        reasoning: 'Plan first, then look around, then leave a note.',
        toolCalls: [
          planCall('in_progress', 'pending', 'A short tour of the runtime.'),
          { name: 'list_directory', arguments: {} },
        ],
      },
      (request) => {
        const listing = request.messages.filter((m) => m.role === 'tool').at(-1);
        const count = listing && 'text' in listing ? listing.text.split('\n').length : 0;
        return {
          toolCalls: [
            planCall('completed', 'in_progress'),
            { name: 'write_note', arguments: { name: 'hello.txt', text: `The demo saw ${count} entries here.\n` } },
          ],
        };
      },
      () => ({ toolCalls: [planCall('completed', 'completed')] }),
      { text: 'Done. I listed the directory and, with your approval, left a note in .openwork/demo/hello.txt.', chunk: 12, delayMs: 15 },
    ],
    { provider: 'scripted', model: 'demo' },
  );
  ignoreOpenworkDirectory(workingDirectory, dataDir);
  const core = await createCore({ storage: pgliteStorage({ dataDir }), model, tools: [listTool, noteTool], plan: true });
  const session = await core.createSession({ workingDirectory, title: 'openwork demo' });
  print(`session ${session.sessionId}`);
  // Cards are asked exactly as `openwork chat` asks them (card-prompt.ts).
  const lines = autoApprove ? null : new LineInput(process.stdin, out, true);
  const style = styleFor(out);
  let streaming = false;
  session.updates$.subscribe((e) => {
    if (e.update.type === 'text_delta') {
      if (!streaming) out.write('  assistant: ');
      streaming = true;
      out.write(e.update.delta);
      return;
    }
    if (streaming && e.update.type !== 'draft_cleared') {
      out.write('\n');
      streaming = false;
    }
    const line = describe(e);
    if (line) print(`  #${String(e.sequence).padStart(2)} ${line}`);
  });
  session.updates$.subscribe((e) => {
    if (e.update.type !== 'permission_requested') return;
    const { toolCallId } = e.update;
    const { card } = e.update;
    const answer = async () => {
      let decision: PermissionDecision | undefined = 'allow_once';
      if (lines) {
        decision = await askCard(card, lines, print, style);
      } else {
        print('  (stdin is not a terminal: approving once)');
      }
      await session.resolvePermission(e.turnId!, toolCallId, decision ?? 'deny');
    };
    void answer();
  });
  const { turnId } = await session.startTurn({ clientRequestId: `demo-${Date.now()}`, input: [{ type: 'text', text: 'Show me around.' }] });
  const outcome = await session.waitForTurn(turnId);
  lines?.close();
  const turn = await core.storage.getTurn(turnId);
  const messages = await session.messages();
  print('');
  print(`stored: turn ${turn?.status}, ${turn?.modelCallCount} model calls, ${turn?.toolCallCount} tool calls, ${messages.length} messages`);
  await core.shutdown();
  return outcome.status === 'completed' || outcome.status === 'failed' ? 0 : 1;
}
