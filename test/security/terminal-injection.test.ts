/**
 * Terminal escape injection into the CLI. What the CLI prints of a session (the answer, reasoning,
 * tool names, arguments and results, the fields of an approval card, file contents in a write/edit
 * diff, session titles) is chosen by the model or by a file's contents. Raw control characters
 * there would let the model rewrite the terminal: a carriage return and `ESC [2K` erase the real
 * command on a card and show a harmless one to approve, `ESC [1A` rewrites earlier lines, OSC 52
 * writes the user's clipboard, a bidirectional override reorders what is shown. The CLI shows
 * every such character as a visible token (`^M`, `^[`, `<U+202E>`), so the card shows what will run.
 *
 * The renderer also reads the file a write/edit call names, before the call runs, to show a diff:
 * a FIFO (or `/dev/zero`) named by the model must not freeze the CLI.
 */
import { spawn } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, type TestContext } from 'vitest';
import { UpdateRenderer, type Style } from '../../src/cli/render.js';
import { createCore } from '../../src/core.js';
import type { SessionUpdateEnvelope } from '../../src/protocol/updates.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { workspaceToolOptions } from '../../src/services/tools/workspace.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { ROOT, cleanEnv } from '../support/cli-process.js';
import { usePglite } from '../support/databases.js';
import { useCliBed } from '../support/cli-bed.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../support/tool-env.js';

/** Every terminal control character the attacks below use, and the C1 / bidi ranges. */
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/;
/** A colour terminal's own styling (SGR), the only escape sequence the CLI itself writes. */
const SGR = /\u001b\[[0-9;]*m/g;

describe('openwork exec on a terminal: an approval card shows the command that will run', { timeout: 180_000 }, () => {
  const bed = useCliBed('openwork-tty-attack-');


  it('a carriage return and erase sequences in a dangerous command are shown, not run; the answer cannot write the clipboard', async (ctx: TestContext) => {
    requireSandbox(ctx, bed.probe);
    const cwd = join(bed.dir, 'ws');
    mkdirSync(cwd, { recursive: true });
    // What a terminal would show of this card line: only "echo hello", on the line above.
    const command = 'rm -rf victim\r\u001b[2K\u001b[1Aecho hello \u202e#';
    bed.server.script(
      { toolCalls: [{ name: 'bash', arguments: { command }, callId: 'spoof' }] },
      { text: '\u001b]52;c;cm0gLXJmIH4=\u0007\u001b[2J\u001b[HAll good.\u009b31m' },
    );
    const args = [process.execPath, join(ROOT, 'bin', 'openwork.js'), 'exec', '--base-url', bed.server.url, '--model', 'fake-model', '--database-url', bed.databaseUrl, '--approve', 'on-request', 'clean up'];
    const shell = args.map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
    const child = spawn('script', ['-qfec', shell, '/dev/null'], { cwd, env: cleanEnv({ TERM: 'xterm-256color' }), stdio: 'pipe' });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
    const exit = new Promise<number | null>((resolve) => child.on('close', resolve));
    try {
      await expect.poll(() => out.includes('allow once [y] / deny [n]? '), { timeout: 90_000 }).toBe(true);
      // The whole command is on the card's line, its control characters as visible tokens.
      expect(out).toContain('command: rm -rf victim^M^[[2K^[[1Aecho hello <U+202E>#');
      expect(out).toContain('danger: this command deletes files: `rm -rf victim^M^[[2K^[[1Aecho hello <U+202E>#`');
      // Allowed (the user read the whole command), so that the turn goes on to its answer.
      child.stdin.write('y\r');
      expect(await exit).toBe(0);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
    expect(out).toContain('^[]52;c;cm0gLXJmIH4=^G^[[2J^[[HAll good.<U+009B>31m');
    // A pseudo-terminal turns each "\n" into "\r\n", and readline moves the cursor on its prompt
    // line (CSI G and J) and echoes the typed "\r"; beyond that, and colours, nothing reaches the terminal.
    const written = out.replace(/\r+\n/g, '\n').replace(SGR, '').replace(/\u001b\[\d*[GJ]/g, '');
    expect(written).not.toMatch(CONTROL);
    expect(bed.server.unexpected).toHaveLength(0);
  });
});

describe('openwork chat\'s renderer', () => {
  let storage: SqlSessionStorage;
  const cores = usePglite((s) => (storage = s));
  let env: ToolEnv;
  useToolEnv((e) => (env = e));

  /** A colour terminal: the renderer's own styling is on, as in `openwork chat`. */
  const colour: Style = {
    on: true,
    dim: (t) => `\u001b[2m${t}\u001b[22m`,
    bold: (t) => `\u001b[1m${t}\u001b[22m`,
    red: (t) => `\u001b[31m${t}\u001b[39m`,
    green: (t) => `\u001b[32m${t}\u001b[39m`,
    yellow: (t) => `\u001b[33m${t}\u001b[39m`,
    cyan: (t) => `\u001b[36m${t}\u001b[39m`,
  };

  function renderer(written: string[]): UpdateRenderer {
    return new UpdateRenderer({ write: (chunk: string) => written.push(chunk) } as unknown as NodeJS.WritableStream, colour, { workingDirectory: env.ws });
  }

  it('escape sequences in the answer, reasoning, tool names, arguments, results and a written file are shown as text', async () => {
    const hostile = 'x\u001b]52;c;cm0gLXJmIH4=\u0007\r\u001b[1A\u001b[2Kfake line\u202e\u009b2J';
    const model = scriptedModel([
      {
        reasoning: `thinking ${hostile}`,
        toolCalls: [
          { name: 'write', arguments: { path: 'notes.txt', content: `first ${hostile}\n` } },
          { name: `no_such_tool${hostile}`, arguments: {} },
        ],
      },
      { toolCalls: [{ name: 'read', arguments: { path: 'notes.txt' } }] },
      { text: `done ${hostile}` },
    ]);
    const core = await createCore({ storage, model, ...workspaceToolOptions(env.runtime), closeStorageOnShutdown: false });
    cores.push(core);
    const session = await core.createSession({ workingDirectory: env.ws });
    const updates: SessionUpdateEnvelope[] = [];
    const subscription = session.updates$.subscribe((u) => updates.push(u));
    const written: string[] = [];
    const view = renderer(written);
    const rendering = session.updates$.subscribe((u) => view.render(u));
    try {
      const { turnId } = await session.startTurn({ clientRequestId: 'tty-renderer', input: [{ type: 'text', text: 'take notes' }] });
      expect((await session.waitForTurn(turnId)).status).toBe('completed');
    } finally {
      subscription.unsubscribe();
      rendering.unsubscribe();
    }
    view.breakLine();
    const out = written.join('');
    expect(updates.some((u) => u.update.type === 'tool_call_finished')).toBe(true);
    // The hostile text reached the renderer in every channel, and came out inert.
    expect(out).toContain('done x^[]52;c;cm0gLXJmIH4=^G^M^[[1A^[[2Kfake line<U+202E><U+009B>2J');
    expect(out).toContain('+first x^[]52;c;');
    expect(out.replace(SGR, '')).not.toMatch(CONTROL);
  });

  it('a write call naming a FIFO does not freeze the renderer', async () => {
    const fifo = join(env.ws, 'pipe');
    execFileSync('mkfifo', [fifo]);
    // Without the fix the renderer's read would block until this writer comes, three seconds later.
    const writer = spawn('sh', ['-c', `sleep 3; echo unblocked > '${fifo}'`], { stdio: 'ignore' });
    try {
      const written: string[] = [];
      const view = renderer(written);
      const started = Date.now();
      view.render({ sequence: 1, sessionId: 'ses_x', turnId: 'turn_x', at: new Date().toISOString(), update: { type: 'tool_call_started', toolCallId: 'tc_fifo', toolName: 'write', arguments: JSON.stringify({ path: 'pipe', content: 'x' }) } } as unknown as SessionUpdateEnvelope);
      expect(Date.now() - started).toBeLessThan(1_000);
      expect(written.join('')).toContain('→ write');
    } finally {
      writer.kill('SIGKILL');
    }
  });
});
