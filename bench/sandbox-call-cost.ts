/**
 * What the sandbox adds to one bash call on Linux (branch race): `prepare` alone (mount plan and,
 * since round 7, the pinned bind sources) and a whole call of `true` under bubblewrap (prepare,
 * spawn, exit, clean-up). Side by side in one process: give it several source trees, e.g. a
 * before and an after, and it alternates them (3 rounds each).
 *
 *   git archive <rev> src | tar -x -C /tmp/before && ln -s "$PWD/node_modules" /tmp/before/ && cp package.json /tmp/before/
 *   npx tsx bench/sandbox-call-cost.ts /tmp/before/src "$PWD/src"   # PKGS=40 for 128 binds
 */
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

type Bubblewrap = typeof import('../src/services/sandbox/bubblewrap.js');
type Process = typeof import('../src/services/sandbox/process.js');
type Policy = typeof import('../src/services/permissions/policy.js');
type Environment = typeof import('../src/services/permissions/environment.js');

const roots = process.argv.length > 2 ? process.argv.slice(2) : [resolve('src')];
const PREPARES = 400;
const CALLS = 60;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const ms = (since: bigint) => Number(process.hrtime.bigint() - since) / 1e6;

const base = realpathSync(mkdtempSync(join(tmpdir(), 'sandbox-cost-')));
const ws = join(base, 'ws');
const home = join(base, 'home');
for (const dir of [join(ws, '.git', 'hooks'), join(ws, 'src'), join(home, '.ssh'), join(base, 'tmp')]) mkdirSync(dir, { recursive: true });
writeFileSync(join(ws, '.env'), 'X=1\n');
writeFileSync(join(ws, '.git', 'config'), '');
for (let p = 0; p < Number(process.env.PKGS ?? 0); p += 1) {
  mkdirSync(join(ws, 'packages', `p${p}`, '.git', 'hooks'), { recursive: true });
  writeFileSync(join(ws, 'packages', `p${p}`, '.env'), '');
}

const totals = new Map<string, { prepare: number[]; call: number[]; binds: number }>();
try {
  for (let round = 0; round < 3; round += 1) {
    for (const root of roots) {
      const { bubblewrapLauncher } = (await import(join(root, 'services/sandbox/bubblewrap.ts'))) as Bubblewrap;
      const { runProcess } = (await import(join(root, 'services/sandbox/process.ts'))) as Process;
      const { SandboxPolicy } = (await import(join(root, 'services/permissions/policy.ts'))) as Policy;
      const { detectEnvironment } = (await import(join(root, 'services/permissions/environment.ts'))) as Environment;
      const environment = detectEnvironment({ home, tempDirs: [join(base, 'tmp')], platform: 'linux' });
      const policy = new SandboxPolicy({ mode: 'auto', workspaceRoot: ws, environment });
      const launcher = bubblewrapLauncher({ bwrapPath: '/usr/bin/bwrap', stateDir: join(home, '.openwork', 'state') });
      const total = totals.get(root) ?? { prepare: [], call: [], binds: 0 };
      totals.set(root, total);
      for (let i = 0; i < PREPARES; i += 1) {
        const t = process.hrtime.bigint();
        const spec = launcher.prepare(policy, 'true');
        total.prepare.push(ms(t));
        total.binds = spec.args.filter((a) => /^--(ro-)?bind/.test(a)).length;
        spec.cleanup();
      }
      for (let i = 0; i < CALLS; i += 1) {
        const t = process.hrtime.bigint();
        const spec = launcher.prepare(policy, 'true');
        const outcome = await runProcess({ file: spec.file, args: spec.args, env: { PATH: '/usr/bin:/bin' }, cwd: ws, timeoutMs: 10_000, signal: new AbortController().signal, statusFd: spec.statusFd, inputFiles: spec.inputFiles, descriptors: spec.descriptors, onOutput() {} });
        spec.cleanup();
        if (outcome.kind !== 'exited' || outcome.exitCode !== 0) throw new Error(`the call failed: ${JSON.stringify(outcome)}`);
        total.call.push(ms(t));
      }
    }
  }
  for (const [root, t] of totals) console.log(`${root}: ${t.binds} binds; prepare median ${median(t.prepare).toFixed(3)} ms (${t.prepare.length}); call median ${median(t.call).toFixed(1)} ms (${t.call.length})`);
} finally {
  rmSync(base, { recursive: true, force: true });
}
