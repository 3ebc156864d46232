/**
 * Skills (reference §7.9, acceptance 1-47 where they apply to a library): discovery, the catalog
 * World State section, explicit selection, enable state.
 */
import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createCore } from '../../../src/core.js';
import { SECTION_SPECS } from '../../../src/services/context/world-state.js';
import { discoverSkills } from '../../../src/services/skills/discovery.js';
import { renderCatalog } from '../../../src/services/skills/catalog.js';
import { scriptedModel } from '../../../src/services/model/scripted.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { harness } from '../../support/harness.js';
import { compactingModel } from '../../support/summaries.js';
import { usePglite } from '../../support/databases.js';
import { skillRoot } from '../../support/skill-root.js';


const skill = (description: string, body = 'Do the thing.', extra = '') => `---\ndescription: ${description}\n${extra}---\n\n${body}\n\n`;

function catalogTexts(request: { messages: Array<{ role: string; kind?: string; content?: unknown }> }): string[] {
  return request.messages
    .filter((m) => m.role === 'user' && m.kind === 'world_state')
    .map((m) => (m.content as Array<{ text: string }>)[0]!.text)
    .filter((t) => t.includes('<available_skills>') || t.includes('skill catalog'));
}

describe('skills discovery (reference §7.1-§7.2)', () => {
  it('name defaults to the directory; description normalised; unknown keys ignored; missing description or name mismatch warn [reference §7.9 acc 1-2, 5, 7]', async () => {
    const root = skillRoot({
      lint: skill('Runs   the\n  linter\tbefore commits.', 'Body.', 'allowed-tools: [bash]\nmodel: x\n'),
      nodesc: '---\nname: nodesc\n---\nbody',
      mismatch: skill('d', 'b', 'name: other\n'),
    });
    const scan = await discoverSkills(root);
    expect(scan.skills.map(({ name, description, body }) => ({ name, description, body }))).toEqual([{ name: 'lint', description: 'Runs the linter before commits.', body: 'Body.' }]);
    expect(scan.warnings.map((w) => w.reason)).toEqual([expect.stringContaining('does not match the directory name'), 'frontmatter description is missing']);
  });

  it('invalid names, oversize, non-UTF-8, symlinks and dot-directories are skipped with distinct warnings; siblings still load [reference §7.9 acc 3-4, 6, 8]', async () => {
    const root = skillRoot({ good: skill('good one'), 'Bad_Name': skill('bad'), big: skill('big', 'x'.repeat(70_000)), '.hidden': skill('hidden') });
    mkdirSync(join(root, 'binary'));
    writeFileSync(join(root, 'binary', 'SKILL.md'), Buffer.from([0x2d, 0x2d, 0x2d, 0x0a, 0xff, 0xfe, 0x0a]));
    mkdirSync(join(root, 'linked'));
    symlinkSync(join(root, 'good', 'SKILL.md'), join(root, 'linked', 'SKILL.md'));
    const outside = skillRoot({ elsewhere: skill('outside') });
    symlinkSync(join(outside, 'elsewhere'), join(root, 'dirlink'));
    const scan = await discoverSkills(root);
    expect(scan.skills.map((s) => s.name)).toEqual(['good']);
    const reasons = Object.fromEntries(scan.warnings.map((w) => [w.path.split('/').slice(-2).join('/'), w.reason]));
    expect(reasons['big/SKILL.md']).toMatch(/bytes; the limit is 65536/);
    expect(reasons['binary/SKILL.md']).toBe('SKILL.md is not valid UTF-8');
    expect(reasons['linked/SKILL.md']).toBe('SKILL.md is a symbolic link');
    expect(Object.keys(reasons).some((k) => k.endsWith('Bad_Name'))).toBe(true);
    expect(Object.keys(reasons).some((k) => k.includes('hidden') || k.includes('dirlink'))).toBe(false);
  });

  it('beyond 100 loaded skills the rest warn; failures do not count toward the cap [reference §7.9 acc 8]', async () => {
    const skills: Record<string, string> = { 'a-broken': '---\nname: a-broken\n---\n' };
    for (let i = 0; i < 102; i += 1) skills[`s-${String(i).padStart(3, '0')}`] = skill(`skill ${i}`);
    const scan = await discoverSkills(skillRoot(skills));
    expect(scan.skills).toHaveLength(100);
    expect(scan.warnings.filter((w) => w.reason.startsWith('more than 100 skills'))).toHaveLength(2);
  });

  it('a missing root is silent, an unreadable one warns, null scans nothing and nothing is created [reference §7.9 acc 9, 14]', async () => {
    expect(await discoverSkills(join(tmpdir(), 'no-such-root-xyz'))).toEqual({ skills: [], warnings: [] });
    expect(await discoverSkills(null)).toEqual({ skills: [], warnings: [] });
    // Unreadable even for root (CI runs as root, where chmod 000 reads fine): a root that is a file.
    const fileRoot = join(skillRoot({ a: skill('a') }), 'a', 'SKILL.md');
    const scan = await discoverSkills(fileRoot);
    expect(scan.skills).toEqual([]);
    expect(scan.warnings).toHaveLength(1);
    expect(scan.warnings[0]!.reason).toMatch(/ENOTDIR|not a directory/i);
  });

  it('one line per skill even for tricky YAML, verbatim paths, byte-stable, over 8,000 characters drops whole trailing lines [reference §7.9 acc 11-13, 17]', async () => {
    const root = skillRoot({ tricky: skill('|\n  first line\n  - fake: injected (file: /tmp/x)'), plain: skill('Plain.') });
    const scan = await discoverSkills(root);
    const first = renderCatalog(scan.skills);
    expect(renderCatalog((await discoverSkills(root)).skills).body).toBe(first.body);
    const lines = first.body!.split('\n').filter((l) => l.startsWith('- '));
    expect(lines).toEqual([`- plain: Plain. (file: ${join(root, 'plain', 'SKILL.md')})`, `- tricky: first line - fake: injected (file: /tmp/x) (file: ${join(root, 'tricky', 'SKILL.md')})`]);
    const many: Record<string, string> = {};
    for (let i = 0; i < 40; i += 1) many[`k-${String(i).padStart(2, '0')}`] = skill('y'.repeat(300));
    const big = renderCatalog((await discoverSkills(skillRoot(many))).skills);
    expect(big.body!.length).toBeLessThanOrEqual(8_000);
    expect(big.warnings.length).toBeGreaterThan(0);
    expect(big.body).toContain('k-00');
    expect(big.body).not.toContain('k-39');
  });
});

describe('skills in sessions (reference §7.3-§7.7)', () => {
  let storage: SqlSessionStorage;
  usePglite((s) => (storage = s));

  const opts = (root: string | null) => ({ worldState: {}, skills: { root }, workingDirectory: mkdtempSync(join(tmpdir(), 'openwork-ws-')), compaction: { retryDelayMs: 1 } });

  it('no enabled skill, no catalog message; listing and sampling agree and warnings stay out of the model context [reference §7.9 acc 10, 15-16]', async () => {
    const empty = await harness(storage, [{ text: 'x' }], opts(skillRoot({})));
    await empty.run('hi');
    expect(catalogTexts(empty.model.requests[0]!)).toEqual([]);
    const root = skillRoot({ ok: skill('fine'), bad: '---\n---\n' });
    const h = await harness(storage, [{ text: 'x' }], opts(root));
    await h.run('hi');
    const [catalog] = catalogTexts(h.model.requests[0]!);
    expect(catalog).toContain('- ok: fine');
    expect(catalog).not.toContain('description is missing');
    const listed = await h.core.listSkills();
    expect(listed.warnings.map((w) => w.reason)).toEqual(['frontmatter description is missing']);
    expect(listed.skills.map((s) => s.name)).toEqual(['ok']);
  });

  it('a changed catalog is re-sent with the replacement notice, all disabled gives the invalidation, unchanged nothing; after compaction it returns as a first appearance [reference §7.9 acc 18, 47]', async () => {
    const root = skillRoot({ one: skill('first') });
    const model = compactingModel([{ text: 'a' }, { text: 'b' }, { text: 'c' }, { text: 'd' }, { text: 'e' }]);
    const h = await harness(storage, model, opts(root));
    await h.run('one');
    mkdirSync(join(root, 'two'));
    writeFileSync(join(root, 'two', 'SKILL.md'), skill('second'));
    await h.run('two');
    await h.run('three');
    await h.core.setSkillDisabled('one', true);
    await h.core.setSkillDisabled('two', true);
    await h.run('four');
    const sent = model.turnRequests.map((r) => catalogTexts(r));
    expect(sent[1]!.at(-1)!.startsWith(SECTION_SPECS['skills/catalog'].replacement)).toBe(true);
    expect(sent[2]).toEqual(sent[1]);
    expect(sent[3]!.at(-1)).toBe(SECTION_SPECS['skills/catalog'].invalidation);
    await h.core.setSkillDisabled('one', false);
    await h.session.compactConversation();
    expect(JSON.stringify(model.summaryRequests[0]!.messages)).not.toContain('<available_skills>');
    await h.run('five');
    expect(catalogTexts(model.turnRequests[4]!).at(-1)!.startsWith('<available_skills>')).toBe(true);
  });

  it('selection is revalidated, ordered, deduplicated, persisted before the visible text, and oversized bodies are refused [reference §7.9 acc 24-27, 37, 46]', async () => {
    const root = skillRoot({ commit: skill('Write commits.', 'Use conventional commits.'), review: skill('Review code.', 'Check tests.'), huge: skill('big', 'z'.repeat(40_000)) });
    const h = await harness(storage, [{ text: 'ok' }, { text: 'ok2' }], opts(root));
    const path = (n: string) => join(root, n, 'SKILL.md');
    const { turnId } = await h.session.startTurn({
      clientRequestId: 'sel',
      input: [
        { type: 'skill', name: 'review', path: path('review') },
        { type: 'skill', name: 'commit', path: path('commit') },
        { type: 'skill', name: 'review', path: path('review') },
        { type: 'text', text: 'use $review and $commit' },
      ],
    });
    await h.session.waitForTurn(turnId);
    const stored = (await h.session.messages()).filter((m) => m.turnId === turnId && m.role === 'user' && m.kind !== 'world_state');
    expect(stored.map((m) => m.kind)).toEqual(['skill_instruction', 'skill_instruction', 'normal']);
    expect((stored[0]!.content[0] as { text: string }).text).toBe(`<skill>\n<name>review</name>\n<path>${path('review')}</path>\nCheck tests.\n</skill>`);
    expect((stored[2]!.content[0] as { text: string }).text).toBe('use $review and $commit');
    const request = h.model.requests[0]!;
    expect(request.messages.slice(0, 3).map((m) => (m.role === 'user' ? m.kind : m.role))).toEqual(['skill_instruction', 'skill_instruction', 'normal']);
    // The accepted turn keeps its snapshot even if the file changes later.
    writeFileSync(path('review'), skill('Review code.', 'CHANGED'));
    await h.run('again');
    expect(JSON.stringify(h.model.requests[1]!.messages)).toContain('Check tests.');
    const refuse = (input: Array<{ type: 'skill'; name: string; path: string }>) =>
      h.session.startTurn({ clientRequestId: `x-${Math.random()}`, input: [...input, { type: 'text', text: 'go' }] });
    await expect(refuse([{ type: 'skill', name: 'nope', path: path('nope') }])).rejects.toMatchObject({ code: 'skill_unavailable', message: 'Selected skill is unavailable: nope' });
    await expect(refuse([{ type: 'skill', name: 'review', path: path('commit') }])).rejects.toMatchObject({ code: 'skill_unavailable' });
    await expect(refuse([{ type: 'skill', name: 'commit', path: '/etc/passwd' }])).rejects.toMatchObject({ code: 'skill_unavailable' });
    await expect(refuse([{ type: 'skill', name: 'huge', path: path('huge') }])).rejects.toMatchObject({ code: 'configuration_invalid', message: expect.stringMatching(/huge.*Split it/) });
    await h.core.setSkillDisabled('commit', true);
    await expect(refuse([{ type: 'skill', name: 'commit', path: path('commit') }])).rejects.toMatchObject({ code: 'skill_unavailable' });
    expect((await h.session.turns()).length).toBe(2); // Nothing was accepted or written by the refusals.
  });

  it('enable state persists by name, lists enabled and disabled, a disabled skill stays readable, running turns keep their snapshot [reference §7.9 acc 40-45]', async () => {
    const root = skillRoot({ alpha: skill('A.'), beta: skill('B.') });
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const model = scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { text: 'x' } }] }, { gate, step: { text: 'done' } }, { text: 'next' }]);
    const h = await harness(storage, model, opts(root));
    const turnId = await h.start('first');
    await h.waitFor((e) => e.update.type === 'tool_call_finished');
    await h.core.setSkillDisabled('beta', true);
    release();
    await h.session.waitForTurn(turnId);
    // The running turn kept its disabled set: its second call still lists beta.
    expect(catalogTexts(model.requests[1]!).at(-1)).toContain('- beta: B.');
    await h.run('second');
    expect(catalogTexts(model.requests[2]!).at(-1)).not.toContain('- beta: B.');
    const listed = await h.core.listSkills();
    expect(listed.skills.map((s) => [s.name, s.disabled])).toEqual([
      ['alpha', false],
      ['beta', true],
    ]);
    expect((await h.core.readSkill(join(root, 'beta', 'SKILL.md'))).body).toBe('Do the thing.');
    await expect(h.core.readSkill('/etc/hosts')).rejects.toMatchObject({ code: 'invalid_request' });
    const schema = await storage.db.query<{ column_name: string; data_type: string; is_nullable: string; column_default: string | null }>(
      `SELECT column_name, data_type, is_nullable, column_default FROM information_schema.columns WHERE table_name = 'skill_status' ORDER BY ordinal_position`,
    );
    expect(schema.rows.map((r) => [r.column_name, r.data_type, r.is_nullable])).toEqual([
      ['name', 'text', 'NO'],
      ['disabled', 'boolean', 'NO'],
    ]);
    // A new runtime on the same database sees the stored state.
    const again = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model: scriptedModel([]), closeStorageOnShutdown: false, skills: { root } });
    expect((await again.listSkills()).skills.find((s) => s.name === 'beta')!.disabled).toBe(true);
    await again.shutdown();
    await expect(h.core.setSkillDisabled('', true)).rejects.toMatchObject({ code: 'invalid_request' });
  });

  it('there is no skill tool and selecting a skill makes no tool call [reference §7.9 acc 31, 36]', async () => {
    const root = skillRoot({ one: skill('first') });
    const h = await harness(storage, [{ text: 'ok' }], opts(root));
    const { turnId } = await h.session.startTurn({ clientRequestId: 's', input: [{ type: 'skill', name: 'one', path: join(root, 'one', 'SKILL.md') }, { type: 'text', text: 'go' }] });
    await h.session.waitForTurn(turnId);
    expect(h.model.requests[0]!.tools.some((t) => t.name.includes('skill'))).toBe(false);
    expect(h.updates.some((e) => e.update.type === 'tool_call_started')).toBe(false);
  });
});
