/**
 * Reference §4.15 acc 38 (acceptance audit, branch audit-a): the permission mode is never in the
 * system prompt; the model learns it from the sandbox-policy World State section, and a mode switch
 * appends a new snapshot of that section (with its replacement notice) without rewriting anything
 * sent before, so the cached prefix survives.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { ModelRequest } from '../../../src/services/model/port.js';
import { SECTION_SPECS } from '../../../src/services/context/world-state.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { modeLabel } from '../../../src/services/permissions/texts.js';
import { usePglite } from '../../support/databases.js';
import { harness } from '../../support/harness.js';

function worldStateTexts(request: ModelRequest): string[] {
  return request.messages
    .filter((m) => m.role === 'user' && (m as { kind?: string }).kind === 'world_state')
    .map((m) => ((m as { content: Array<{ text: string }> }).content).map((b) => b.text).join(''));
}

describe('a permission mode switch in the context window [reference §4.15 acc 38]', () => {
  let storage: SqlSessionStorage;
  usePglite((s) => (storage = s));

  it('the mode is only in the sandbox-policy section; a switch appends a replacement snapshot and leaves the system prompt and earlier messages byte-identical', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'openwork-mode-ws-'));
    writeFileSync(join(dir, 'README.md'), 'x');
    const h = await harness(storage, [{ text: 'one' }, { text: 'two' }, { text: 'three' }], { worldState: {}, workingDirectory: dir });
    await h.run('first');
    await h.session.setPermissionMode('accept_edits');
    await h.run('second');
    await h.run('third');
    const [a, b, c] = h.model.requests as [ModelRequest, ModelRequest, ModelRequest];

    // The system prompt names no mode, before or after the switch, and does not change.
    for (const request of [a, b]) {
      const system = JSON.stringify(request.system);
      expect(system).not.toContain(modeLabel('auto'));
      expect(system).not.toContain(modeLabel('accept_edits'));
    }
    expect(JSON.stringify(b.system)).toBe(JSON.stringify(a.system));

    // Everything the first request sent is an unchanged prefix of the second.
    expect(JSON.stringify(b.messages.slice(0, a.messages.length))).toBe(JSON.stringify(a.messages));
    // The first request's policy says auto; after the switch one new policy snapshot says accept-edits,
    // behind the replacement notice; the third request repeats nothing.
    const policy = (texts: string[]) => texts.filter((t) => t.includes('<sandbox_policy>'));
    expect(policy(worldStateTexts(a))).toHaveLength(1);
    expect(policy(worldStateTexts(a))[0]).toContain(modeLabel('auto'));
    const added = worldStateTexts(b).slice(worldStateTexts(a).length);
    expect(added).toHaveLength(1);
    expect(added[0]!.startsWith(`${SECTION_SPECS['runtime/sandbox-policy'].replacement}\n\n<sandbox_policy>`)).toBe(true);
    expect(added[0]).toContain(modeLabel('accept_edits'));
    expect(added[0]).not.toContain(modeLabel('auto'));
    expect(worldStateTexts(c)).toEqual(worldStateTexts(b));
  });
});
