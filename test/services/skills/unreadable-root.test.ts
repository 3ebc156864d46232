/**
 * A skill root that exists but cannot be read (reference §7.2, §7.8, §7.9 acc 9): the scan is
 * empty with exactly one warning, and turns still start. Permission bits do not stop root (CI runs
 * as root), so the unreadable roots here are ones no user can list: a regular file, a symlink loop,
 * and a path through a file. A dangling symlink is a missing root: silent, like any missing root.
 */
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCore } from '../../../src/core.js';
import { discoverSkills } from '../../../src/services/skills/discovery.js';
import { scriptedModel } from '../../../src/services/model/scripted.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { usePglite } from '../../support/databases.js';

describe('an unreadable skill root (reference §7.8)', () => {
  let base: string;
  let storage: SqlSessionStorage;
  usePglite((s) => (storage = s));
  beforeAll(async () => {
    base = mkdtempSync(join(tmpdir(), 'openwork-unreadable-'));
    writeFileSync(join(base, 'a-file'), 'not a directory\n');
    symlinkSync(join(base, 'loop-b'), join(base, 'loop-a'));
    symlinkSync(join(base, 'loop-a'), join(base, 'loop-b'));
    symlinkSync(join(base, 'nowhere'), join(base, 'dangling'));
    mkdirSync(join(base, 'fine', 'ok'), { recursive: true });
    writeFileSync(join(base, 'fine', 'ok', 'SKILL.md'), '---\ndescription: Fine.\n---\nBody.\n');
  });
  afterAll(async () => {
    rmSync(base, { recursive: true, force: true });
  });

  it.each([
    ['a regular file', 'a-file', /^the skill root cannot be read: ENOTDIR/],
    ['a symlink loop', 'loop-a', /^the skill root cannot be read: ELOOP/],
    ['a path through a file', join('a-file', 'skills'), /^the skill root cannot be read: ENOTDIR/],
  ])('%s: no skills and exactly one warning naming the root', async (_label, relative, reason) => {
    const root = join(base, relative);
    const scan = await discoverSkills(root);
    expect(scan.skills).toEqual([]);
    expect(scan.warnings).toHaveLength(1);
    expect(scan.warnings[0]!.path).toBe(root);
    expect(scan.warnings[0]!.reason).toMatch(reason);
  });

  it('a dangling symlink is a missing root: empty and silent', async () => {
    expect(await discoverSkills(join(base, 'dangling'))).toEqual({ skills: [], warnings: [] });
  });

  it('through the core: listSkills reports the one warning, a turn still starts, and the model sees no catalog', async () => {
    const model = scriptedModel([{ text: 'started anyway' }]);
    const root = join(base, 'a-file');
    const core = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model, closeStorageOnShutdown: false, skills: { root }, worldState: {} });
    try {
      const listed = await core.listSkills();
      expect(listed.skills).toEqual([]);
      expect(listed.warnings).toEqual([{ path: root, reason: expect.stringMatching(/^the skill root cannot be read: ENOTDIR/) }]);
      const session = await core.createSession({ workingDirectory: join(base, 'fine') });
      const { turnId } = await session.startTurn({ clientRequestId: 'unreadable', input: [{ type: 'text', text: 'go' }] });
      expect(await session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'started anyway' });
      const texts = model.requests[0]!.messages.flatMap((m) => (m.role === 'user' ? m.content.map((b) => b.text) : []));
      expect(texts.some((t) => t.includes('<available_skills>'))).toBe(false);
      expect(texts.some((t) => t.includes('cannot be read'))).toBe(false); // Warnings never reach the model.
    } finally {
      await core.shutdown();
    }
  });

  it('the same core with a readable root does show a catalog (the check above can fail)', async () => {
    const model = scriptedModel([{ text: 'ok' }]);
    const core = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model, closeStorageOnShutdown: false, skills: { root: join(base, 'fine') }, worldState: {} });
    try {
      const session = await core.createSession({ workingDirectory: join(base, 'fine') });
      const { turnId } = await session.startTurn({ clientRequestId: 'readable', input: [{ type: 'text', text: 'go' }] });
      await session.waitForTurn(turnId);
      const texts = model.requests[0]!.messages.flatMap((m) => (m.role === 'user' ? m.content.map((b) => b.text) : []));
      expect(texts.some((t) => t.includes('<available_skills>') && t.includes('- ok: Fine.'))).toBe(true);
    } finally {
      await core.shutdown();
    }
  });
});
