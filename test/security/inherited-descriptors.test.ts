/**
 * Descriptors the host inherited reach bash. Node opens its own files and sockets close-on-exec,
 * but a host process may hold descriptors it inherited without that flag: a socket handed over by
 * systemd socket activation (`LISTEN_FDS`, starting at 3), a pipe or socket from its supervisor, a
 * connection a native module opened. bubblewrap passes every such descriptor on, so the sandboxed
 * command could read and write through it: an inherited unix socket is not stopped by the network
 * namespace or by the seccomp filter (which refuses creating unix sockets, not using one). The
 * sandbox's shell now closes every descriptor above 2 before the command runs.
 *
 * The attack runs through the real `openwork exec`, started the way a supervisor would start a host:
 * with a connected socket as descriptor 6 (Node's `stdio: 'pipe'` is a unix socketpair). The hostile
 * command writes to every descriptor it finds; nothing may arrive at the other end.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import { describe, expect, it, type TestContext } from 'vitest';
import { ROOT, cleanEnv } from '../support/cli-process.js';
import { useCliBed } from '../support/cli-bed.js';
import { requireSandbox } from '../support/tool-env.js';

/** Writes to every open descriptor above 2 and lists what was open. */
const HOSTILE = 'for f in /dev/fd/*; do n=${f##*/}; if [ "$n" -gt 2 ] && { echo "LEAK through $n" >&$n; } 2>/dev/null; then echo "wrote $n"; fi; done; echo "open: $(ls /dev/fd | tr "\\n" " ")"';

describe('bash does not inherit the host\'s descriptors', { timeout: 180_000 }, () => {
  const bed = useCliBed('openwork-fd-attack-');


  it('a socket the host inherited as descriptor 6 cannot be used by the command', async (ctx: TestContext) => {
    requireSandbox(ctx, bed.probe);
    bed.server.script({ toolCalls: [{ name: 'bash', arguments: { command: HOSTILE }, callId: 'fds' }] }, { text: 'Listed.' });
    const args = [join(ROOT, 'bin', 'openwork.js'), 'exec', '--base-url', bed.server.url, '--model', 'fake-model', '--database-url', bed.databaseUrl, 'list the descriptors'];
    // Descriptors 3 and 4 of bubblewrap are its own (status, seccomp program); a host's from 5 up pass through.
    const child = spawn(process.execPath, args, { cwd: bed.dir, env: cleanEnv(), stdio: ['ignore', 'pipe', 'pipe', 'ignore', 'ignore', 'ignore', 'pipe'] });
    const inherited = (child.stdio as unknown as Duplex[])[6]!;
    let received = '';
    inherited.setEncoding('utf8').on('data', (chunk: string) => (received += chunk));
    let stdout = '';
    let stderr = '';
    child.stdout!.setEncoding('utf8').on('data', (c: string) => (stdout += c));
    child.stderr!.setEncoding('utf8').on('data', (c: string) => (stderr += c));
    const exit = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect({ exit, stderr }).toEqual({ exit: 0, stderr: '' });
    expect(stdout).toBe('Listed.\n');
    // What the model got back: the bash result inside the second request.
    const output = JSON.stringify(bed.server.requests.at(-1)!.body);
    // Only ls's own descriptor for the directory it lists is above 2.
    expect(output).toContain('open: 0 1 2 3 \\n[exit 0;');
    expect(output).not.toMatch(/wrote \d/);
    expect(received).toBe('');
  });
});
