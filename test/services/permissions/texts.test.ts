/**
 * The model-visible texts (reference §4.6, §4.11, §4.13) are format constants. Acc 11 of the
 * reference (no text mentions the network) is superseded by issue 12.3: bash has no network unless
 * a call is granted it, and the texts that mention the network say exactly that, nothing more.
 */
import { describe, expect, it } from 'vitest';
import { toolDefinition } from '../../../src/services/tools/define.js';
import {
  bashDenialText,
  bashUnavailablePolicyLine,
  fileDenialText,
  NON_INTERACTIVE_REFUSAL_TEXT,
  protectedPathText,
  renderSandboxPolicySection,
  sandboxUnavailableText,
} from '../../../src/services/permissions/texts.js';
import { type ToolEnv, useToolEnv } from '../../support/tool-env.js';

let env: ToolEnv;
useToolEnv((e) => (env = e));

describe('model-visible texts', () => {
  it('are the reference constants, with the mode word of the current mode', () => {
    expect(bashDenialText('accept_edits')).toBe(
      '[sandbox: file access denied under accept-edits mode]\n[sandbox: to proceed, retry this exact command once with sandboxPermissions listing only the paths it needs, and a one-sentence justification; the user will be asked. If the paths cannot be listed, ask the user to run the command instead]',
    );
    expect(fileDenialText('read', '/h/.ssh/id', 'auto')).toBe(
      '[sandbox: read access to /h/.ssh/id denied under auto mode]\n[sandbox: to proceed, retry this call once with sandboxPermissions listing /h/.ssh/id (read, exact), and a one-sentence justification; the user will be asked]',
    );
    expect(protectedPathText('/w/.git/hooks/x')).toBe('[sandbox: /w/.git/hooks/x is protected and cannot be written in any mode; do not retry]');
    expect(sandboxUnavailableText('bwrap missing')).toBe(
      '[sandbox: unavailable, so bash cannot run commands in this session (bwrap missing). File tools still work; ask the user to run the command in their own terminal if it is needed.]',
    );
    expect(bashUnavailablePolicyLine('darwin')).toBe('bash: unavailable, because the macOS sandbox failed its self-check. Use read / grep / glob / edit for file work, and tell the user which command you need them to run.');
    expect(NON_INTERACTIVE_REFUSAL_TEXT).toMatch(/sub-agent cannot ask for authorization/);
    expect(NON_INTERACTIVE_REFUSAL_TEXT).toMatch(/report to the parent agent/);
  });

  it('the sandbox-policy section states mode, workspace, write / edit and bash (with the network rule)', () => {
    const auto = renderSandboxPolicySection({ mode: 'auto', workspace: '/w', bashAvailable: true, bashWritesWorkspace: true, platform: 'linux' });
    expect(auto.split('\n')).toEqual([
      '<sandbox_policy>',
      'mode: auto',
      'workspace: /w',
      'write / edit: may write the workspace and the temp directories; protected, sensitive and credential paths and paths outside the workspace need sandboxPermissions.',
      'bash: runs in the sandbox; it can write the workspace and the temp directories; no network unless a call is granted it with sandboxPermissions.',
      '</sandbox_policy>',
    ]);
    expect(renderSandboxPolicySection({ mode: 'accept_edits', workspace: '/w', bashAvailable: true, bashWritesWorkspace: false, platform: 'linux' })).toContain(
      'workspace writes and the network need sandboxPermissions',
    );
    expect(renderSandboxPolicySection({ mode: 'auto', workspace: '/w', bashAvailable: false, bashWritesWorkspace: false, platform: 'linux' }).split('\n')).toEqual([
      '<sandbox_policy>',
      'mode: auto',
      'workspace: /w',
      'write / edit: may write the workspace and the temp directories; protected, sensitive and credential paths and paths outside the workspace cannot be written in this session.',
      bashUnavailablePolicyLine('linux'),
      '</sandbox_policy>',
    ]);
  });

  it('only bash texts mention the network, no text claims isolation or says read-only [reference §4.15 acc 11, as amended by issue 12.3]', () => {
    const texts = [
      ...[...env.tools.values()].map((t) => JSON.stringify(toolDefinition(t))),
      bashDenialText('auto'),
      fileDenialText('write', '/x', 'auto'),
      sandboxUnavailableText('r'),
      NON_INTERACTIVE_REFUSAL_TEXT,
      renderSandboxPolicySection({ mode: 'auto', workspace: '/w', bashAvailable: true, bashWritesWorkspace: true, platform: 'linux' }),
    ];
    for (const text of texts) {
      expect(text).not.toMatch(/isolat|offline/i);
      expect(text).not.toMatch(/read-only/i);
      if (/network|internet/i.test(text)) expect(text).toMatch(/^\{"name":"bash"|^<sandbox_policy>/);
    }
  });
});
