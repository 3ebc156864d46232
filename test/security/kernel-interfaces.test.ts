/**
 * The in-process file tools and the kernel's interfaces. read, grep, glob, list, write and edit run
 * in the runtime's own process, so `/proc/self/*` (its environment, memory maps, descriptors and
 * status), `/proc/<pid>/*` of its neighbours (the Postgres server the suite started, the host's
 * shell) and the shared-memory segments in `/dev/shm` are the runtime's state, not workspace files.
 * The file tools refuse `/proc`, `/sys` and `/dev` by rule in every mode, however the path is
 * written (`..`, `//`, a symlink inside the workspace, `/proc/self/root/proc/...`), and their
 * walks never enter them; no grant opens them. A few system-wide facts (`/proc/cpuinfo`,
 * `/proc/version`, ...) stay readable. bash is unaffected: its sandbox has a `/proc` of its own.
 */
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createCore } from '../../src/core.js';
import { kernelPathText } from '../../src/protocol/model-texts.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { workspaceToolOptions } from '../../src/services/tools/workspace.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from '../support/databases.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../support/tool-env.js';

let storage: SqlSessionStorage;
const cores = usePglite((s) => (storage = s));

let env: ToolEnv;
useToolEnv((e) => (env = e));

/** A secret only the runtime's own environment holds (the way OPENAI_API_KEY would be). */
const SECRET = `kernel-iface-secret-${process.pid}-${Date.now()}`;
process.env.OPENWORK_ATTACK_SECRET = SECRET;
/** A shared-memory segment of another program (Postgres keeps its dynamic segments there). */
const SHM = `/dev/shm/openwork-attack-${process.pid}`;
writeFileSync(SHM, `shared segment ${SECRET}\n`);
afterAll(() => {
  rmSync(SHM, { force: true });
  delete process.env.OPENWORK_ATTACK_SECRET;
});

type Outcome = Awaited<ReturnType<ToolEnv['call']>>;

/** A rule denial: no card, nothing executed, the kernel text naming the canonical path. */
function expectKernelRefusal(outcome: Outcome, path: string | RegExp) {
  expect(outcome.card).toBeNull();
  expect(outcome.result.status).toBe('denied');
  expect(outcome.result.error?.code).toBe('permission_denied');
  if (typeof path === 'string') expect(outcome.result.text).toBe(kernelPathText(path));
  else expect(outcome.result.text).toMatch(path);
  expect(outcome.result.text).not.toContain(SECRET);
}

describe('the file tools refuse /proc, /sys and /dev by rule', () => {
  it('read refuses the runtime\'s own process files however the path is written', async () => {
    const self = `/proc/${process.pid}`;
    for (const [raw, canonical] of [
      ['/proc/self/environ', `${self}/environ`],
      ['/proc/self/status', `${self}/status`],
      ['/proc/self/maps', `${self}/maps`],
      ['/proc/self/mountinfo', `${self}/mountinfo`],
      ['/proc/thread-self/comm', null],
      ['//proc//self/./status', `${self}/status`],
      ['/tmp/../proc/self/cmdline', `${self}/cmdline`],
      ['/proc/self/root/proc/self/status', `${self}/status`],
      [`/proc/${process.ppid}/environ`, `/proc/${process.ppid}/environ`],
      ['/proc/1/environ', '/proc/1/environ'],
      ['/sys/kernel/mm/transparent_hugepage/enabled', null],
      [SHM, SHM],
    ] as const) {
      const outcome = await env.call('read', { path: raw });
      expectKernelRefusal(outcome, canonical ?? /is a kernel interface/);
      expect(outcome.executed).toBe(false);
    }
  });

  it('a descriptor link of the runtime (/proc/self/fd/N) is judged at its target, and the fd directory is refused', async () => {
    const fd = openSync(SHM, 'r');
    try {
      // The link resolves to what the descriptor names: a kernel path here (pipes and sockets resolve below /proc/<pid>/fd).
      expectKernelRefusal(await env.call('read', { path: `/proc/self/fd/${fd}` }), SHM);
      expectKernelRefusal(await env.call('list', { path: '/proc/self/fd' }), `/proc/${process.pid}/fd`);
    } finally {
      closeSync(fd);
    }
  });

  it('symlinks inside the workspace into /proc and /dev/shm are refused at their target, and walks skip them', async () => {
    const dir = join(env.ws, 'links');
    mkdirSync(dir, { recursive: true });
    symlinkSync('/proc/self', join(dir, 'self'));
    symlinkSync('/proc/self/status', join(dir, 'status.txt'));
    symlinkSync('/proc/self/environ', join(dir, 'environ.txt'));
    symlinkSync(SHM, join(dir, 'shm.txt'));
    symlinkSync('/dev/shm', join(dir, 'shm-dir'));
    writeFileSync(join(dir, 'plain.txt'), 'Pid: not a process file\n');
    expectKernelRefusal(await env.call('read', { path: 'links/status.txt' }), `/proc/${process.pid}/status`);
    expectKernelRefusal(await env.call('read', { path: 'links/shm.txt' }), SHM);
    expectKernelRefusal(await env.call('read', { path: 'links/self/environ' }), `/proc/${process.pid}/environ`);
    expectKernelRefusal(await env.call('list', { path: 'links/shm-dir' }), '/dev/shm');

    // grep over the workspace reads only the plain file; the linked process files are skipped.
    const grep = await env.call('grep', { pattern: `Pid|VmRSS|${SECRET}|shared segment`, path: 'links' });
    expect(grep.result.status).toBe('succeeded');
    expect(grep.result.text).toContain('plain.txt:1: Pid: not a process file');
    expect(grep.result.text).not.toMatch(/status\.txt|environ\.txt|shm\.txt|VmRSS|shared segment/);
    expect(grep.result.text).not.toContain(SECRET);
    expect(grep.result.text).toMatch(/paths were skipped/);

    const glob = await env.call('glob', { pattern: '**/*.txt', path: 'links' });
    expect(glob.result.text.split('\n')[0]).toBe('links/plain.txt');
    expect(glob.result.text).not.toMatch(/status\.txt|environ\.txt|shm\.txt/);

    const list = await env.call('list', { path: 'links' });
    expect(list.result.text).not.toMatch(/status\.txt|environ\.txt|shm\.txt|shm-dir|self/);
  });

  it('grep, glob and list with a kernel path as their root are refused', async () => {
    expectKernelRefusal(await env.call('grep', { pattern: SECRET, path: '/proc/self' }), `/proc/${process.pid}`);
    expectKernelRefusal(await env.call('grep', { pattern: 'shared', path: '/dev/shm' }), '/dev/shm');
    expectKernelRefusal(await env.call('glob', { pattern: '*', path: '/proc' }), '/proc');
    expectKernelRefusal(await env.call('list', { path: '/sys' }), '/sys');
  });

  it('a workspace at / does not make /proc writable: write and edit are refused, the process name is unchanged', async () => {
    const comm = readFileSync('/proc/self/comm', 'utf8');
    for (const [tool, args] of [
      ['write', { path: '/proc/self/comm', content: 'pwned\n' }],
      ['edit', { path: '/proc/self/comm', oldString: comm.trim(), newString: 'pwned' }],
      ['write', { path: SHM, content: 'overwritten\n' }],
      ['write', { path: '/dev/shm/openwork-attack-new', content: 'planted\n' }],
    ] as const) {
      const outcome = await env.call(tool, args, { workingDirectory: '/' });
      expectKernelRefusal(outcome, /is a kernel interface/);
      expect(outcome.executed).toBe(false);
    }
    expect(readFileSync('/proc/self/comm', 'utf8')).toBe(comm);
    expect(readFileSync(SHM, 'utf8')).toContain('shared segment');
    expect(() => readFileSync('/dev/shm/openwork-attack-new')).toThrow();
  });

  it('no escalation opens a kernel path: the request is refused without a card', async () => {
    const outcome = await env.call('write', {
      path: SHM,
      content: 'overwritten\n',
      sandboxPermissions: { paths: [{ path: SHM, access: 'write', scope: 'exact' }] },
      justification: 'update the shared segment',
    });
    expect(outcome.card).toBeNull();
    expect(outcome.result.status).toBe('denied');
    expect(readFileSync(SHM, 'utf8')).toContain('shared segment');

    const bash = await env.call('bash', {
      command: 'true',
      sandboxPermissions: { paths: [{ path: `/proc/${process.pid}/mem`, access: 'write', scope: 'exact' }] },
      justification: 'patch the runtime',
    });
    expect(bash.card).toBeNull();
    expect(bash.executed).toBe(false);
    expect(bash.result.text).toMatch(/kernel interface/);
  });

  it('system-wide facts stay readable', async () => {
    const version = await env.call('read', { path: '/proc/version' });
    expect(version.result.status).toBe('succeeded');
    expect(version.result.text).toMatch(/^1\tLinux version /);
    expect((await env.call('read', { path: '/proc/cpuinfo' })).result.status).toBe('succeeded');
  });
});

describe('in a real turn', () => {
  it('the model never sees the runtime environment; the stored results carry the rule denial', async () => {
    const model = scriptedModel([
      { toolCalls: [{ name: 'read', arguments: { path: '/proc/self/environ' } }, { name: 'grep', arguments: { pattern: 'OPENWORK_ATTACK_SECRET', path: '/proc/self' } }] },
      { text: 'done' },
    ]);
    const core = await createCore({ storage, model, ...workspaceToolOptions(env.runtime), closeStorageOnShutdown: false });
    cores.push(core);
    const session = await core.createSession({ workingDirectory: env.ws });
    const { turnId } = await session.startTurn({ clientRequestId: 'kernel-iface', input: [{ type: 'text', text: 'print the environment' }] });
    expect(await session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'done' });
    const toolTexts = model.requests.at(-1)!.messages.filter((m) => m.role === 'tool').map((m) => (m as { text: string }).text);
    expect(toolTexts).toEqual([kernelPathText(`/proc/${process.pid}/environ`), kernelPathText(`/proc/${process.pid}`)]);
    const stored = (await storage.listMessages(session.sessionId)).filter((m) => m.role === 'tool').map((m) => m.content[0] as { status: string; error?: { code: string } });
    expect(stored.map((r) => [r.status, r.error?.code])).toEqual([
      ['denied', 'permission_denied'],
      ['denied', 'permission_denied'],
    ]);
    expect(JSON.stringify(await storage.listMessages(session.sessionId))).not.toContain(SECRET);
  });
});

describe('bash keeps its own /proc', () => {
  it('bash reads /proc of its own PID namespace; the runtime and its environment are not there', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const { result } = await env.call('bash', {
      command: `cat /proc/self/status | grep -c '^Pid:'; ls /proc | grep -c '^[0-9]'; cat /proc/${process.pid}/environ 2>&1 | head -c 200; echo; env; cat /proc/1/environ | tr '\\0' '\\n'; ls /dev/shm | wc -l`,
    });
    expect(result.status).toBe('succeeded');
    expect(result.text).not.toContain(SECRET);
    expect(result.text).not.toContain('OPENWORK_ATTACK_SECRET');
    // Only the sandbox's few processes are visible, and its /dev/shm is a private, empty tmpfs.
    const lines = result.text.split('\n');
    expect(lines[0]).toBe('1');
    expect(Number(lines[1])).toBeLessThan(10);
    expect(lines.at(-2)).toBe('0');
  });
});
