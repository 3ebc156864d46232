/**
 * Escalation requests (reference §4.9, acc 18-23): each validation rule refuses without a card and
 * the turn goes on; a valid request becomes one card whose grant lasts exactly one call.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MAX_GRANTS, sandboxPermissionsSchema, validateEscalation } from '../../../src/services/permissions/escalation.js';
import { bashDenialText, fileDenialText } from '../../../src/services/permissions/texts.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../../support/tool-env.js';

let env: ToolEnv;
useToolEnv((e) => (env = e));

const refusal = (reason: string) => `[sandbox: escalation refused without asking the user: ${reason}]`;

function request(paths: Array<{ path: string; access?: 'read' | 'write'; scope?: 'exact' | 'subtree' }>, justification = 'the build needs it') {
  return { sandboxPermissions: { paths: paths.map((p) => ({ access: 'write' as const, scope: 'exact' as const, ...p })) }, justification };
}

/** Every rule is checked through a file tool and through bash (the schema is the same). */
async function refusedBoth(extra: Record<string, unknown>, text: string | RegExp) {
  for (const [tool, args] of [
    ['write', { path: 'notes.txt', content: 'x', ...extra }],
    ['bash', { command: 'make', ...extra }],
  ] as const) {
    const { authorization, card, executed } = await env.call(tool, args);
    expect(card, tool).toBeNull();
    expect(executed, tool).toBe(false);
    expect(authorization.kind, tool).toBe('deny');
    const denial = authorization as { text: string; source: string };
    expect(denial.source).toBe('builtin');
    if (typeof text === 'string') expect(denial.text).toBe(text);
    else expect(denial.text).toMatch(text);
  }
}

describe('escalation validation rules, on the policy alone (no sandbox needed)', () => {
  const validate = (paths: Array<{ path: string; access?: 'read' | 'write'; scope?: 'exact' | 'subtree' }>, justification = 'why', actor: 'bash' | 'file_tool' = 'bash') =>
    validateEscalation(request(paths, justification), env.runtime.policy('auto', env.ws), actor);

  it('each rule refuses with its reason; a valid request yields canonical grants', () => {
    expect(validate([{ path: join(env.outside, 'a') }], ' ')).toEqual({ ok: false, text: refusal('justification is empty; give one sentence for the user saying why the paths are needed, then retry') });
    expect(validate([])).toMatchObject({ ok: false, text: expect.stringContaining('paths is empty') });
    expect(validate(Array.from({ length: 17 }, (_, i) => ({ path: `/x/${i}` })))).toMatchObject({ ok: false, text: expect.stringContaining('17 paths requested') });
    expect(validate([{ path: 'rel/x' }])).toMatchObject({ ok: false, text: expect.stringContaining('is a relative path') });
    expect(validate([{ path: join(env.ws, 'a.txt') }])).toMatchObject({ ok: false, text: expect.stringContaining('grants nothing new') });
    expect(validate([{ path: join(env.ws, '.git', 'hooks', 'x') }])).toMatchObject({ ok: false, text: expect.stringContaining('is protected') });
    expect(validate([{ path: env.home, scope: 'subtree' }])).toMatchObject({ ok: false, text: expect.stringContaining('is too broad') });
    expect(validate([{ path: `${env.outside}/../outside/./new.txt` }, { path: `~/.ssh`, access: 'read', scope: 'subtree' }])).toEqual({
      ok: true,
      grants: [
        { path: join(env.outside, 'new.txt'), access: 'write', scope: 'exact' },
        { path: join(env.home, '.ssh'), access: 'read', scope: 'subtree' },
      ],
      network: false,
    });
  });
});

describe('escalation validation: refused with an explanation, no card', () => {
  it('an empty justification', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const text = refusal('justification is empty; give one sentence for the user saying why the paths are needed, then retry');
    await refusedBoth(request([{ path: join(env.outside, 'a') }], ''), text);
    await refusedBoth(request([{ path: join(env.outside, 'a') }], '   '), text);
    await refusedBoth({ sandboxPermissions: { paths: [{ path: join(env.outside, 'a'), access: 'write', scope: 'exact' }] } }, text);
  });

  it('no paths', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    await refusedBoth(request([]), refusal('sandboxPermissions.paths is empty; list the paths this call needs'));
  });

  it(`more than ${MAX_GRANTS} paths`, async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const paths = Array.from({ length: MAX_GRANTS + 1 }, (_, i) => ({ path: join(env.outside, `f${i}`) }));
    await refusedBoth(request(paths), refusal(`17 paths requested, at most 16 are allowed; list only the paths this call needs`));
    const ok = await env.call('write', { path: join(env.outside, 'f0'), content: 'x', ...request(paths.slice(0, MAX_GRANTS)) }, { decide: () => 'deny' });
    expect(ok.card?.requestedPaths).toHaveLength(MAX_GRANTS);
  });

  it('a relative path', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    await refusedBoth(request([{ path: 'build/out' }]), refusal('"build/out" is a relative path; every path must be absolute'));
    await refusedBoth(request([{ path: '../outside/x' }]), /is a relative path/);
  });

  it('nothing new: a path the current mode already allows', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    await refusedBoth(request([{ path: join(env.ws, 'src', 'main.txt') }]), refusal(`${join(env.ws, 'src', 'main.txt')} (write) is already allowed under auto mode, so the request grants nothing new; retry without sandboxPermissions`));
    await refusedBoth(request([{ path: join(env.outside, 'data.txt'), access: 'read' }]), /\(read\) is already allowed under auto mode/);
    await refusedBoth(request([{ path: env.tmp, scope: 'subtree' }]), /is already allowed/);
    // In accept-edits the workspace is new for bash but not for the file tools.
    const bash = await env.call('bash', { command: 'make', ...request([{ path: env.ws, scope: 'subtree' }]) }, { mode: 'accept_edits', decide: () => 'deny' });
    expect(bash.card?.kind).toBe('escalation');
    const write = await env.call('write', { path: 'x.txt', content: 'x', ...request([{ path: env.ws, scope: 'subtree' }]) }, { mode: 'accept_edits' });
    expect(write.authorization).toMatchObject({ kind: 'deny', text: expect.stringMatching(/already allowed under accept-edits mode/) });
  });

  it('a hard-protected target', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    for (const path of [join(env.home, '.openwork', 'x'), join(env.home, '.agents', 'skills'), join(env.ws, '.git', 'hooks', 'pre-commit')]) {
      const { authorization } = await env.call('bash', { command: 'make', ...request([{ path }]) });
      expect(authorization).toEqual({ kind: 'deny', source: 'builtin', text: refusal(`${path} is protected and cannot be written in any mode; do not retry`) });
    }
  });

  it('a subtree at /, $HOME or an ancestor of them', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    for (const path of ['/', env.home, dirname(env.home), env.base]) {
      await refusedBoth(request([{ path, scope: 'subtree' }]), refusal(`a subtree at ${path} is too broad (it is the filesystem root, the home directory or an ancestor of it); list narrower paths`));
      await refusedBoth(request([{ path, scope: 'subtree', access: 'read' }]), /is too broad/);
    }
  });

  it('the schema has no "allow everything" value: unknown fields are invalid arguments [reference §4.15 acc 23]', () => {
    expect(sandboxPermissionsSchema.safeParse({ paths: [], all: true }).success).toBe(false);
    expect(sandboxPermissionsSchema.safeParse({ paths: [{ path: '/x', access: 'write', scope: 'exact', recursive: true }] }).success).toBe(false);
    expect(sandboxPermissionsSchema.safeParse({ paths: [{ path: '/x', access: 'all', scope: 'exact' }] }).success).toBe(false);
  });
});

describe('escalation cards and single-call grants', () => {
  it('the card lists the command, the reason, each path with access, scope and tier, and the previous denial of the turn [reference §4.15 acc 18]', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const target = join(env.outside, 'card.txt');
    const denied = await env.call('bash', { command: `echo x > ${target}` }, { turnId: 'turn_card' });
    expect(denied.result.sandboxDenied).toBe(true);
    const retry = await env.call('bash', { command: `echo x > ${target}`, ...request([{ path: target }, { path: join(env.home, '.ssh'), access: 'read', scope: 'subtree' }], 'write the report') }, { turnId: 'turn_card', decide: () => 'deny' });
    expect(retry.card).toEqual({
      toolName: 'bash',
      kind: 'escalation',
      summary: `this once, additionally allow writing ${target} (file), reading ${join(env.home, '.ssh')} (subtree)`,
      command: `echo x > ${target}`,
      reason: 'write the report',
      requestedPaths: [
        { path: target, access: 'write', scope: 'exact', tier: 'normal' },
        { path: join(env.home, '.ssh'), access: 'read', scope: 'subtree', tier: 'credential' },
      ],
      previousDenial: expect.stringMatching(/card\.txt: Read-only file system$/),
      environmentId: `workspace:${env.ws}`,
      grantKey: expect.stringMatching(/^escalation:/),
      decisions: ['allow_once', 'deny', 'allow_for_turn', 'allow_for_session'],
    });
    // Another turn has no previous denial to show.
    const other = await env.call('bash', { command: `echo x > ${target}`, ...request([{ path: target }]) }, { turnId: 'turn_other', decide: () => 'deny' });
    expect(other.card?.previousDenial).toBeUndefined();
  });

  it('an approved escalation applies to that one call; the identical command after it is denied again [reference §4.15 acc 19]', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const target = join(env.outside, 'once.txt');
    const command = `echo once >> ${target}`;
    const first = await env.call('bash', { command });
    expect(first.result.text.endsWith(bashDenialText('auto'))).toBe(true);
    const approved = await env.call('bash', { command, ...request([{ path: target }]) }, { decide: () => 'allow_once' });
    expect(approved.result).toMatchObject({ status: 'succeeded', sandboxDenied: false });
    expect(readFileSync(target, 'utf8')).toBe('once\n');
    const again = await env.call('bash', { command });
    expect(again.result.sandboxDenied).toBe(true);
    expect(readFileSync(target, 'utf8')).toBe('once\n');
    // The same request again asks again: the authoriser never remembers an approval.
    const asked = await env.call('bash', { command, ...request([{ path: target }]) }, { decide: () => 'deny' });
    expect(asked.card?.kind).toBe('escalation');
  });

  it('file tools: the approved exact write grant covers that file only, for that call', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const target = join(env.outside, 'file-grant.txt');
    const approved = await env.call('write', { path: target, content: 'granted', ...request([{ path: target }]) }, { decide: () => 'allow_once' });
    expect(approved.result.status).toBe('succeeded');
    expect(readFileSync(target, 'utf8')).toBe('granted');
    await env.call('read', { path: target });
    const after = await env.call('write', { path: target, content: 'again' });
    expect(after.result.text).toBe(fileDenialText('write', target, 'auto'));
  });

  it('an exact write grant for a file that does not exist yet lets bash create it, and nothing beside it', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const target = join(env.outside, 'new-dir', 'created.txt');
    const { result } = await env.call('bash', { command: `echo made > ${target} && echo more > ${join(env.outside, 'new-dir', 'other.txt')}`, ...request([{ path: target }]) }, { decide: () => 'allow_once' });
    expect(result.sandboxDenied).toBe(true);
    expect(readFileSync(target, 'utf8')).toBe('made\n');
    expect(existsSync(join(env.outside, 'new-dir', 'other.txt'))).toBe(false);
    // A placeholder the command never wrote is removed again.
    const unused = join(env.outside, 'unused.txt');
    await env.call('bash', { command: 'true', ...request([{ path: unused }]) }, { decide: () => 'allow_once' });
    expect(existsSync(unused)).toBe(false);
  });

  it('in accept-edits a dangerous command gets no danger card, but its escalation card is annotated [reference §4.15 acc 32]', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const plain = await env.call('bash', { command: 'rm -rf src' }, { mode: 'accept_edits' });
    expect(plain.card).toBeNull();
    expect(plain.result.sandboxDenied).toBe(true);
    expect(existsSync(join(env.ws, 'src', 'main.txt'))).toBe(true);
    const escalated = await env.call('bash', { command: 'rm -rf src', ...request([{ path: join(env.ws, 'src'), scope: 'subtree' }]) }, { mode: 'accept_edits', decide: () => 'deny' });
    expect(escalated.card).toMatchObject({ kind: 'escalation', dangerMatch: 'rm_recursive_or_force', dangerNote: "this command deletes files: `rm -rf src` (rm_recursive_or_force); it still runs inside the current mode's sandbox" });
  });
});
