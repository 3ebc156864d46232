/**
 * The Seatbelt profile (reference §4.5). macOS is not available here, so only the profile text and
 * its parameters are checked, not its effect.
 */
import { describe, expect, it } from 'vitest';
import { detectEnvironment } from '../../../src/services/permissions/environment.js';
import { SandboxPolicy } from '../../../src/services/permissions/policy.js';
import { CREDENTIAL_PATHS } from '../../../src/services/permissions/tiers.js';
import { escapeRegex, seatbeltLauncher, seatbeltProfile } from '../../../src/services/sandbox/seatbelt.js';
import { CLOSE_INHERITED_DESCRIPTORS } from '../../../src/services/sandbox/launcher.js';

const environment = detectEnvironment({ home: '/Users/ada', tempDirs: ['/private/tmp', '/private/var/folders/x/T'], platform: 'darwin', env: {} });

function profile(mode: 'auto' | 'accept_edits', grants: Array<{ path: string; access: 'read' | 'write'; scope: 'exact' | 'subtree' }> = []) {
  return seatbeltProfile(new SandboxPolicy({ mode, workspaceRoot: '/Users/ada/work/app', pathGrants: grants, environment }));
}

describe('Seatbelt profile', () => {
  it('holds only parameter names; every path and regex is a -D definition, numbered in order', () => {
    const { profile: text, params } = profile('auto');
    expect(text.startsWith('(version 1)\n(allow default)\n(deny file-write*)\n')).toBe(true);
    expect(text).not.toContain('/Users/ada');
    expect(params.map(([k]) => k)).toEqual(params.map((_, i) => `P${i}`));
    expect(params.slice(0, 5).map(([, v]) => v)).toEqual(['/dev/null', '/dev/zero', '/dev/tty', '^/dev/fd/[0-9]+$', '^/dev/ttys[0-9]+$']);
    const values = params.map(([, v]) => v);
    expect(values).toContain('/Users/ada/.openwork');
    expect(values).toContain('/Users/ada/.ssh');
    expect(values).toContain('^(.*/)?\\.[gG][iI][tT]/([mM][oO][dD][uU][lL][eE][sS]/.+/)?([hH][oO][oO][kK][sS]|[cC][oO][nN][fF][iI][gG]|[cC][oO][nN][fF][iI][gG]\\.[wW][oO][rR][kK][tT][rR][eE][eE])(/.*)?$');
    // The workspace is a writable root in auto, not in accept-edits.
    expect(values).toContain('/Users/ada/work/app');
    expect(profile('accept_edits').params.map(([, v]) => v)).not.toContain('/Users/ada/work/app');
  });

  it('a workspace inside a temp dir is taken out of that temp root under accept-edits (attack round 6)', () => {
    const ws = '/private/tmp/checkout';
    const build = (mode: 'auto' | 'accept_edits') => seatbeltProfile(new SandboxPolicy({ mode, workspaceRoot: ws, pathGrants: [], environment }));
    const { profile: text, params } = build('accept_edits');
    const tmpKey = params.find(([, v]) => v === '/private/tmp')![0];
    const wsKey = params.find(([, v]) => v === ws)![0];
    const tmpRule = text.split('\n').find((l) => l.startsWith(`(allow file-write* (require-all (subpath (param "${tmpKey}"))`))!;
    expect(tmpRule).toContain(`(require-not (subpath (param "${wsKey}")))`);
    // Only that temp root's rule; in auto the workspace is a writable root of its own.
    expect(text.split('\n').filter((l) => l.includes(`(require-not (subpath (param "${wsKey}")))`))).toHaveLength(1);
    const auto = build('auto');
    const autoWsKey = auto.params.find(([, v]) => v === ws)![0];
    expect(auto.profile).not.toContain(`(require-not (subpath (param "${autoWsKey}")))`);
  });

  it('a read grant inside a credential path is subtracted from its read denial', () => {
    const { profile: text, params } = profile('auto', [{ path: '/Users/ada/.ssh', access: 'read', scope: 'subtree' }]);
    // Registered last: the credential read denials, each followed by the grants it subtracts.
    const sshParams = params.filter(([, v]) => v === '/Users/ada/.ssh').map(([k]) => k).slice(-2);
    expect(text).toContain(`(deny file-read* (require-all (subpath (param "${sshParams[0]}")) (require-not (subpath (param "${sshParams[1]}")))))`);
    expect(text.trimEnd().split('\n').filter((l) => l.startsWith('(deny file-read*'))).toHaveLength(CREDENTIAL_PATHS.length);
  });

  it('issue 12.3: every socket operation is denied unless the call was granted the network', () => {
    const policy = new SandboxPolicy({ mode: 'auto', workspaceRoot: '/Users/ada/work/app', environment });
    expect(seatbeltProfile(policy).profile.split('\n').slice(0, 4)).toEqual(['(version 1)', '(allow default)', '(deny file-write*)', '(deny network*)']);
    expect(seatbeltProfile(policy, { network: true }).profile).not.toMatch(/network/);
  });

  it('runs /bin/bash under sandbox-exec with stderr joined to stdout', () => {
    const spec = seatbeltLauncher().prepare(new SandboxPolicy({ mode: 'auto', workspaceRoot: '/Users/ada/work/app', environment }), 'make test');
    expect(spec.file).toBe('/usr/bin/sandbox-exec');
    expect(spec.args[0]).toBe('-p');
    expect(spec.args.slice(-5)).toEqual(['--', '/bin/bash', '-c', `${CLOSE_INHERITED_DESCRIPTORS}exec /bin/bash -c "$0" 2>&1`, 'make test']);
  });
});
