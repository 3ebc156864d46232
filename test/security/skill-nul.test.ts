/**
 * A SKILL.md with a NUL character (attack round 3, point 5), through the public API on both
 * backends. U+0000 is valid UTF-8, so the file passed discovery; its description then entered the
 * skill catalog that World State stores before every model call, and Postgres refuses U+0000
 * (22P05), so every turn of every session failed with `persistence_error` for as long as the file
 * was there; selecting the skill stored its body the same way. Now discovery skips such a file with
 * a warning, as it skips any other broken skill, and its siblings still load.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { backends, useBackend } from '../support/databases.js';
import { harness } from '../support/harness.js';
import { skillRoot } from '../support/skill-root.js';


for (const backend of backends) {
  describe(`a SKILL.md with a NUL character (${backend.name})`, () => {
    let storage: SqlSessionStorage;
    useBackend(backend, (s) => (storage = s));

    it('is skipped with a warning; turns run and the good sibling is in the catalog', async () => {
      const root = skillRoot({
        good: '---\ndescription: A good skill.\n---\n\nDo good.\n',
        bad: '---\ndescription: Looks fine\u0000 but is not.\n---\n\nBody\u0000.\n',
      });
      const h = await harness(storage, [{ text: 'one' }, { text: 'two' }], { worldState: {}, skills: { root }, workingDirectory: mkdtempSync(join(tmpdir(), 'openwork-ws-')) });
      const listed = await h.core.listSkills();
      expect(listed.skills.map((s) => s.name)).toEqual(['good']);
      expect(listed.warnings).toEqual([{ path: join(root, 'bad', 'SKILL.md'), reason: 'SKILL.md contains a NUL character' }]);
      expect((await h.run('go')).outcome).toMatchObject({ status: 'completed', finalText: 'one' });
      expect(JSON.stringify(h.model.requests[0]!.messages)).toContain('A good skill.');
      expect((await h.run('again')).outcome).toMatchObject({ status: 'completed', finalText: 'two' });
    });
  });
}
