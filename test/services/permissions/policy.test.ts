/**
 * The policy object (reference §4.2-4.4): tiers, the two modes, the home-workspace exception,
 * grants, and the parity of the bash mount plan with the file-tool fence.
 */
import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { detectEnvironment, type SandboxEnvironment } from '../../../src/services/permissions/environment.js';
import { canonicalize } from '../../../src/services/permissions/paths.js';
import { SandboxPolicy, type Access, type PathGrant } from '../../../src/services/permissions/policy.js';
import { CREDENTIAL_PATHS } from '../../../src/services/permissions/tiers.js';
import { buildMountPlan, planAllows } from '../../../src/services/sandbox/mount-plan.js';

let base: string;
let ws: string;
let home: string;
let tmp: string;
let env: SandboxEnvironment;

beforeAll(() => {
  base = realpathSync(mkdtempSync(join(tmpdir(), 'openwork-policy-')));
  ws = join(base, 'ws');
  home = join(base, 'home');
  tmp = join(base, 'tmp');
  for (const d of [join(ws, '.git', 'hooks'), join(ws, 'pkg', '.Git', 'Hooks'), join(ws, '.vscode'), join(ws, 'src'), join(home, '.ssh'), join(home, '.config', 'gh'), join(home, '.local', 'share', 'keyrings'), join(home, '.cargo', 'registry'), join(home, '.agents', 'skills'), join(home, '.openwork'), tmp, join(base, 'outside')]) {
    mkdirSync(d, { recursive: true });
  }
  for (const f of [join(ws, '.env'), join(ws, '.env.local'), join(ws, 'src', 'a.ts'), join(ws, '.git', 'HEAD'), join(ws, '.git', 'hooks', 'pre-commit'), join(home, '.netrc'), join(home, '.ssh', 'id_rsa'), join(home, '.cargo', 'credentials.toml'), join(base, 'outside', 'x')]) {
    writeFileSync(f, 'x');
  }
  symlinkSync(join(base, 'outside'), join(ws, 'out-link'));
  env = detectEnvironment({ home, tempDirs: [tmp], platform: 'linux' });
});
afterAll(() => rmSync(base, { recursive: true, force: true }));

function policy(mode: 'auto' | 'accept_edits', grants: PathGrant[] = [], workspace = ws): SandboxPolicy {
  return new SandboxPolicy({ mode, workspaceRoot: workspace, pathGrants: grants, environment: env });
}

describe('path tiers', () => {
  it('hard-protected: ~/.openwork, skill roots, <ws>/**/.git/hooks in any letter case', () => {
    const p = policy('auto');
    expect(p.tier(join(home, '.openwork', 'spill', 'x'))).toBe('hard_protected');
    expect(p.tier(join(home, '.agents', 'skills', 'demo', 'SKILL.md'))).toBe('hard_protected');
    expect(p.tier(join(ws, '.git', 'hooks', 'pre-commit'))).toBe('hard_protected');
    expect(p.tier(join(ws, 'pkg', '.Git', 'Hooks', 'post-merge'))).toBe('hard_protected');
    expect(p.tier(join(ws, '.GIT', 'HOOKS'))).toBe('hard_protected');
  });

  it('hard-protected: the config and hooks of every git directory, submodules and worktrees included (issue 12.6)', () => {
    const p = policy('auto');
    for (const rel of ['.git/config', 'pkg/.GIT/Config', '.git/config.worktree', '.git/modules/lib/hooks/post-checkout', '.git/modules/a/b/config', '.git/modules/a/modules/b/hooks', '.git/worktrees/wt/config.worktree']) {
      expect(p.tier(join(ws, rel)), rel).toBe('hard_protected');
    }
    // Outside the workspace too: a grant there must not open a hook either.
    expect(p.tier(join(base, 'outside', 'repo', '.git', 'hooks', 'pre-commit'))).toBe('hard_protected');
    // A submodule named like a protected file is not protected as a whole.
    expect(p.tier(join(ws, '.git', 'modules', 'hooks', 'HEAD'))).toBe('sensitive');
    expect(p.tier(join(ws, '.git', 'worktrees', 'wt', 'HEAD'))).toBe('sensitive');
  });

  it('sensitive: .git, .env*, .envrc, .vscode, .idea, git and shell rc files at any depth, case-insensitively', () => {
    const p = policy('auto');
    for (const rel of ['.git/HEAD', '.env', '.env.local', 'sub/.envrc', '.vscode/settings.json', 'a/b/.IDEA/x', '.gitconfig', '.gitmodules', '.bashrc', '.bash_profile', '.zshrc', '.zprofile', '.profile', 'pkg/.GIT/HEAD', '.git/modules/lib/HEAD']) {
      expect(p.tier(join(ws, rel)), rel).toBe('sensitive');
    }
    expect(p.tier(join(ws, 'src', 'environment.ts'))).toBe('normal');
    // Sensitive names only matter inside the workspace.
    expect(p.tier(join(base, 'outside', '.env'))).toBe('normal');
  });

  it('credential: the reference list plus the Linux keyrings and token files', () => {
    const p = policy('auto');
    for (const rel of ['.ssh/id_rsa', '.aws/credentials', '.config/gh/hosts.yml', '.netrc', '.docker/config.json', '.local/share/keyrings/login.keyring', '.password-store/x.gpg', '.mozilla/firefox', '.config/google-chrome/Default/Cookies', '.pgpass', '.cargo/credentials.toml']) {
      expect(p.tier(join(home, rel)), rel).toBe('credential');
    }
    expect(CREDENTIAL_PATHS).toContain('.local/share/keyrings');
    expect(p.tier(join(home, '.cargo', 'registry', 'x'))).toBe('normal');
  });
});

describe('check under the two modes', () => {
  const cases: Array<[string, Access, 'auto' | 'accept_edits', 'bash' | 'file_tool', boolean]> = [
    ['ws/src/a.ts', 'write', 'auto', 'bash', true],
    ['ws/src/a.ts', 'write', 'auto', 'file_tool', true],
    ['ws/src/a.ts', 'write', 'accept_edits', 'bash', false],
    ['ws/src/a.ts', 'write', 'accept_edits', 'file_tool', true],
    ['ws/src/a.ts', 'read', 'accept_edits', 'bash', true],
    ['tmp/x', 'write', 'accept_edits', 'bash', true],
    ['tmp/x', 'write', 'accept_edits', 'file_tool', true],
    ['outside/x', 'write', 'auto', 'bash', false],
    ['outside/x', 'write', 'auto', 'file_tool', false],
    ['outside/x', 'read', 'auto', 'file_tool', true],
    ['ws/.env', 'write', 'auto', 'file_tool', false],
    ['ws/.env', 'read', 'auto', 'bash', true],
    ['ws/.git/HEAD', 'write', 'auto', 'bash', false],
    ['home/.ssh/id_rsa', 'read', 'auto', 'bash', false],
    ['home/.ssh/id_rsa', 'read', 'auto', 'file_tool', false],
    ['home/.openwork/x', 'read', 'auto', 'file_tool', true],
    ['home/.openwork/x', 'write', 'auto', 'file_tool', false],
  ];
  for (const [rel, access, mode, actor, expected] of cases) {
    it(`${actor} ${access} ${rel} under ${mode}: ${expected ? 'allowed' : 'denied'}`, () => {
      expect(policy(mode).check(join(base, rel), access, actor)).toBe(expected);
    });
  }

  it('a workspace inside a temp dir is the workspace there; a temp dir inside the workspace stays temp (attack round 6)', () => {
    const inTemp = join(tmp, 'project');
    expect(policy('accept_edits', [], inTemp).check(join(inTemp, 'src', 'a.ts'), 'write', 'bash')).toBe(false);
    expect(policy('accept_edits', [], inTemp).check(join(inTemp, 'src', 'a.ts'), 'write', 'file_tool')).toBe(true);
    expect(policy('auto', [], inTemp).check(join(inTemp, 'src', 'a.ts'), 'write', 'bash')).toBe(true);
    expect(policy('accept_edits', [], inTemp).check(join(tmp, 'other', 'x'), 'write', 'bash')).toBe(true);
    // The temp dir is below the workspace `base`: still writable by bash under accept-edits.
    expect(policy('accept_edits', [], base).check(join(tmp, 'x'), 'write', 'bash')).toBe(true);
    expect(policy('accept_edits', [], base).check(join(base, 'outside', 'x'), 'write', 'bash')).toBe(false);
  });

  it('a workspace that is $HOME or an ancestor of it is not writable by bash in either mode; file tools still write it [reference §4.15 acc 49]', () => {
    for (const workspace of [home, base]) {
      const p = policy('auto', [], workspace);
      expect(p.bashWritesWorkspace()).toBe(false);
      expect(p.check(join(home, 'notes.txt'), 'write', 'bash')).toBe(false);
      expect(p.check(join(home, 'notes.txt'), 'write', 'file_tool')).toBe(true);
    }
    expect(policy('auto').bashWritesWorkspace()).toBe(true);
  });

  it('symlinks are judged where they point: a link inside the workspace to outside is outside', () => {
    const target = canonicalize(join(ws, 'out-link', 'x'));
    expect(target).toBe(join(base, 'outside', 'x'));
    expect(policy('auto').check(target, 'write', 'file_tool')).toBe(false);
  });
});

describe('grants', () => {
  it('a grant unlocks only the sensitive or credential paths it names; the whole .git never opens hooks', () => {
    const wholeWorkspace = policy('accept_edits', [{ path: ws, access: 'write', scope: 'subtree' }]);
    expect(wholeWorkspace.check(join(ws, 'src', 'a.ts'), 'write', 'bash')).toBe(true);
    expect(wholeWorkspace.check(join(ws, '.git', 'HEAD'), 'write', 'bash')).toBe(false);
    expect(wholeWorkspace.check(join(ws, '.env'), 'write', 'bash')).toBe(false);

    const git = policy('auto', [{ path: join(ws, '.git'), access: 'write', scope: 'subtree' }]);
    expect(git.check(join(ws, '.git', 'HEAD'), 'write', 'bash')).toBe(true);
    expect(git.check(join(ws, '.git', 'hooks', 'pre-commit'), 'write', 'bash')).toBe(false);

    const ssh = policy('auto', [{ path: join(home, '.ssh'), access: 'read', scope: 'subtree' }]);
    expect(ssh.check(join(home, '.ssh', 'id_rsa'), 'read', 'bash')).toBe(true);
    expect(ssh.check(join(home, '.ssh', 'id_rsa'), 'write', 'bash')).toBe(false);

    const cargo = policy('auto', [{ path: join(home, '.cargo'), access: 'write', scope: 'subtree' }]);
    expect(cargo.check(join(home, '.cargo', 'registry', 'a'), 'write', 'bash')).toBe(true);
    expect(cargo.check(join(home, '.cargo', 'credentials.toml'), 'read', 'bash')).toBe(false);

    const exact = policy('auto', [{ path: join(ws, '.env'), access: 'write', scope: 'exact' }]);
    expect(exact.check(join(ws, '.env'), 'write', 'file_tool')).toBe(true);
    expect(exact.check(join(ws, '.env.local'), 'write', 'file_tool')).toBe(false);
  });
});

describe('parity: the bash mount plan answers like the policy (reference §4.4) [reference §4.15 acc 10]', () => {
  const paths = () => [
    ws,
    join(ws, 'src', 'a.ts'),
    join(ws, '.env'),
    join(ws, '.env.local'),
    join(ws, '.git'),
    join(ws, '.git', 'HEAD'),
    join(ws, '.git', 'hooks', 'pre-commit'),
    join(ws, 'pkg', '.Git', 'Hooks'),
    join(ws, '.vscode'),
    join(home, '.ssh', 'id_rsa'),
    join(home, '.netrc'),
    join(home, '.config', 'gh'),
    join(home, '.cargo', 'registry'),
    join(home, '.cargo', 'credentials.toml'),
    join(home, '.openwork'),
    join(home, '.agents', 'skills'),
    join(base, 'outside', 'x'),
    join(tmp),
  ];
  const variants: Array<[string, () => SandboxPolicy]> = [
    ['auto', () => policy('auto')],
    ['accept_edits', () => policy('accept_edits')],
    ['home workspace', () => policy('auto', [], home)],
    ['.git write grant', () => policy('auto', [{ path: join(ws, '.git'), access: 'write', scope: 'subtree' }])],
    ['ssh read grant', () => policy('auto', [{ path: join(home, '.ssh'), access: 'read', scope: 'subtree' }])],
    ['workspace grant in accept_edits', () => policy('accept_edits', [{ path: ws, access: 'write', scope: 'subtree' }])],
    ['.env exact grant', () => policy('accept_edits', [{ path: join(ws, '.env'), access: 'write', scope: 'exact' }])],
    ['cargo subtree grant', () => policy('auto', [{ path: join(home, '.cargo'), access: 'write', scope: 'subtree' }])],
  ];
  for (const [name, make] of variants) {
    it(`${name}: every path, read and write`, () => {
      const p = make();
      const plan = buildMountPlan(p);
      for (const path of paths()) {
        for (const access of ['read', 'write'] as const) {
          expect(planAllows(plan, path, access), `${access} ${path}`).toBe(p.check(path, access, 'bash'));
        }
      }
    });
  }

  it('the only difference between bash and the file tools is the workspace in accept-edits or a home workspace', () => {
    for (const [name, make] of variants) {
      const p = make();
      for (const path of paths()) {
        for (const access of ['read', 'write'] as const) {
          const bash = p.check(path, access, 'bash');
          const file = p.check(path, access, 'file_tool');
          if (bash !== file) {
            expect({ name, path, access, bash, file, inWorkspace: p.isInWorkspace(path), bashWritesWorkspace: p.bashWritesWorkspace() }).toMatchObject({ access: 'write', bash: false, file: true, inWorkspace: true, bashWritesWorkspace: false });
          }
        }
      }
    }
  });
});
