/**
 * The inspector page in headless Chromium (Debian's package, driven by playwright-core) against
 * the real runtime with the scripted scenario: start a turn and watch the draft stream in,
 * approve and deny cards, cancel, reload mid-turn (replay, and the snapshot when replay cannot
 * reach back), the actor tree and statechart following the Turn's phases, an explorer sub-agent
 * in the actor tree under its root, and a compaction (and a rewind) started from the page showing
 * in the update stream and as a checkpoint in the transcript.
 * The page gets in only through the address the server prints (its secret becomes an HttpOnly
 * cookie) and says so when it is locked out.
 * Each test saves a screenshot under test-results/. Without Chromium the tests say why and skip
 * (they fail instead with OPENWORK_REQUIRE_BROWSER=1).
 */
import { join } from 'node:path';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import type { Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startInspectorRuntime, type InspectorRuntime } from '../../../src/inspector/runtime.js';
import { EXPLORER_TASK } from '../../../src/inspector/scenario.js';
import type { SessionSnapshot } from '../../../src/protocol/snapshot.js';
import { RESULTS_DIR, browserUnavailable, launchBrowser, requireBrowser, type TestBrowser } from '../../support/browser.js';
import { inspectorFetch } from '../../support/inspector-client.js';

// The callbacks given to page.evaluate and waitForFunction run in the page; the project compiles
// without the DOM library, so these declarations only let them type-check.
declare const document: { querySelector(selector: string): any; querySelectorAll(selector: string): ArrayLike<any> & Iterable<any> };
declare const window: any;
declare const MutationObserver: any;
type HTMLElement = { dataset: Record<string, string | undefined>; textContent: string | null };

let runtime: InspectorRuntime;
let browser: TestBrowser;
const pages: Page[] = [];
const pageErrors: string[] = [];

async function serverState(sessionId: string): Promise<{ snapshot: SessionSnapshot }> {
  const res = await inspectorFetch(runtime.server, `/api/sessions/${sessionId}/state`);
  return (await res.json()) as { snapshot: SessionSnapshot };
}

async function sessionIds(): Promise<string[]> {
  const res = await inspectorFetch(runtime.server, '/api/sessions');
  return ((await res.json()) as { sessions: Array<{ sessionId: string }> }).sessions.map((s) => s.sessionId);
}

/** Opens the page and makes a new session the selected one. */
async function openInspector(): Promise<{ page: Page; sessionId: string }> {
  const page = await browser.context.newPage();
  pages.push(page);
  page.on('pageerror', (error) => pageErrors.push(error.message));
  await page.goto(runtime.url);
  await page.locator('[data-testid=connection][data-state=live]').waitFor();
  await page.locator('[data-testid=session-list] li.selected').waitFor();
  const before = await sessionIds();
  await page.click('[data-testid=new-session]');
  const handle = await page.waitForFunction((known: string[]) => {
    const li = document.querySelector('[data-testid=session-list] li.selected') as HTMLElement | null;
    return li && !known.includes(li.dataset.sessionId ?? '') ? li.dataset.sessionId : null;
  }, before);
  const sessionId = (await handle.jsonValue()) as string;
  return { page, sessionId };
}

async function send(page: Page, text: string): Promise<void> {
  await page.fill('[data-testid=prompt]', text);
  await page.click('[data-testid=send]');
}

async function draftLength(page: Page): Promise<number> {
  return page.evaluate(() => document.querySelector('[data-testid=draft]')?.textContent?.length ?? 0);
}

async function waitForDraft(page: Page, min: number): Promise<void> {
  await page.waitForFunction((n: number) => (document.querySelector('[data-testid=draft]')?.textContent?.length ?? 0) > n, min);
}

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(RESULTS_DIR, `inspector-${name}.png`) });
}

beforeAll(async () => {
  // Nothing to start without a browser: each test then skips with the reason (requireBrowser).
  if (browserUnavailable() !== null && process.env.OPENWORK_REQUIRE_BROWSER !== '1') return;
  const workingDirectory = await mkdtemp(join(tmpdir(), 'openwork-inspector-page-'));
  await writeFile(join(workingDirectory, 'README.md'), 'a project\n');
  await writeFile(join(workingDirectory, 'package.json'), '{}\n');
  [runtime, browser] = await Promise.all([startInspectorRuntime({ workingDirectory, timeScale: 0.5, port: 0 }), launchBrowser()]);
}, 120_000);

beforeEach((ctx) => requireBrowser(ctx));

afterEach(async () => {
  while (pages.length > 0) await pages.pop()!.close();
  expect(pageErrors).toEqual([]);
});

afterAll(async () => {
  await browser?.close();
  await runtime?.close();
});

describe('inspector page (headless Chromium)', () => {
  it('starts a turn from the prompt box and shows the reasoning and the text draft streaming in', async () => {
    const { page, sessionId } = await openInspector();
    await send(page, 'slow, please');
    await page.locator('[data-testid=reasoning-draft]').waitFor();
    await waitForDraft(page, 10);
    const first = await draftLength(page);
    await waitForDraft(page, first + 12);
    expect(await page.textContent('[data-testid=phase]')).toBe('running_model');
    expect(await page.textContent('[data-testid=send]')).toBe('Steer');
    expect(await page.isEnabled('[data-testid=cancel]')).toBe(true);
    const rows = await page.$$eval('[data-testid=update-log] li', (lis) => lis.map((li) => (li as HTMLElement).dataset.type));
    expect(rows.slice(0, 3)).toEqual(['turn_started', 'phase_changed', 'phase_changed']);
    expect(rows).toContain('reasoning_delta');
    expect(rows).toContain('text_delta');
    expect((await serverState(sessionId)).snapshot.runtime).toMatchObject({ type: 'running', phase: 'running_model' });
    await shot(page, 'draft');
  });

  it('shows the card; approving it runs the tool, and the turn goes on', async () => {
    const { page } = await openInspector();
    await send(page, 'Show me around');
    const card = page.locator('[data-testid=permission-card]');
    await card.waitFor({ state: 'visible' });
    expect(await page.textContent('[data-testid=card-summary]')).toBe('write .openwork/inspector/tour-note.txt');
    expect(await card.locator('button').allTextContents()).toEqual(['Allow once', 'Allow for this turn', 'Allow for this session', 'Deny']);
    expect(await page.textContent('[data-testid=phase]')).toBe('waiting_permission');
    expect(await page.locator('[data-testid=tool-call][data-tool=run_checks] [data-testid=tool-progress]').textContent()).toContain('check 5/5: ok');
    expect(await page.locator('[data-testid=tool-call][data-tool=write_note]').getAttribute('data-status')).toBe('waiting_permission');
    expect(await page.$$eval('[data-testid=plan] li', (lis) => lis.map((li) => (li as HTMLElement).dataset.status))).toEqual(['completed', 'completed', 'in_progress']);
    await shot(page, 'card');
    await card.locator('[data-decision=allow_once]').click();
    await card.waitFor({ state: 'hidden' });
    const note = page.locator('[data-testid=tool-call][data-tool=write_note]');
    await page.locator('[data-testid=tool-call][data-tool=write_note][data-status=succeeded]').waitFor();
    expect(await note.locator('[data-testid=tool-result]').textContent()).toMatch(/^wrote \.openwork\/inspector\/tour-note\.txt/);
    await page.locator('[data-testid=update-log] li[data-type=permission_resolved]').waitFor();
    expect(await page.locator('[data-testid=update-log] li[data-type=permission_resolved] .summary').textContent()).toBe('allow_once');
    await shot(page, 'approved');
  });

  it('denying the card fails the turn with permission_denied', async () => {
    const { page } = await openInspector();
    await send(page, 'Show me around, but I will say no');
    const card = page.locator('[data-testid=permission-card]');
    await card.waitFor({ state: 'visible' });
    await card.locator('[data-decision=deny]').click();
    const outcome = page.locator('[data-testid=turn-outcome]');
    await outcome.waitFor();
    expect(await outcome.getAttribute('data-status')).toBe('failed');
    expect(await outcome.getAttribute('data-code')).toBe('permission_denied');
    expect(await page.locator('[data-testid=tool-call][data-tool=write_note]').getAttribute('data-status')).toBe('denied');
    expect(await card.isHidden()).toBe(true);
    expect(await page.textContent('[data-testid=send]')).toBe('Start turn');
    await shot(page, 'denied');
  });

  it('shows the model\'s questions; the answers given on the page reach the model, also after a reload', async () => {
    const { page, sessionId } = await openInspector();
    await send(page, 'ask me first');
    const card = page.locator('[data-testid=question-card]');
    await card.waitFor({ state: 'visible' });
    expect(await page.textContent('[data-testid=phase]')).toBe('waiting_user_input');
    expect(await card.locator('.card-summary').allTextContents()).toEqual(['Which language should the note be in?', 'What should the note be called?']);
    expect(await card.locator('button.pick').allTextContents()).toEqual(['English', 'German']);
    const state = await serverState(sessionId);
    expect(state.snapshot.runtime).toMatchObject({ type: 'running', phase: 'waiting_user_input', pendingUserInput: [{ request: { questions: [{ id: 'language' }, { id: 'name' }] } }] });
    expect(await page.locator('[data-testid=session-list] li.selected').getAttribute('data-status')).toBe('waiting');

    // A reload rebuilds the open question (replayed or from the snapshot) and still answers it.
    await page.reload();
    await page.locator('[data-testid=connection][data-state=live]').waitFor();
    await card.waitFor({ state: 'visible' });
    await card.locator('button.pick[data-option=German]').click();
    expect(await page.inputValue('[data-testid=answer-language]')).toBe('German');
    await page.fill('[data-testid=answer-name]', 'notes');
    await shot(page, 'question');
    await page.click('[data-testid=answer-submit]');
    await card.waitFor({ state: 'hidden' });
    await page.locator('[data-testid=turn-outcome][data-status=completed]').waitFor();
    expect(await page.locator('[data-testid=update-log] li[data-type=user_input_resolved] .summary').textContent()).toBe('answered: German / notes');
    const messages = (await (await inspectorFetch(runtime.server, `/api/sessions/${sessionId}/messages`)).json()) as { messages: Array<{ role: string; content: Array<{ type: string; text?: string }> }> };
    const last = messages.messages.filter((m) => m.role === 'assistant').at(-1)!;
    expect(last.content.map((b) => b.text ?? '').join('')).toContain('You answered {"answers":{"language":"German","name":"notes"}}.');
  });

  it('cancels a running turn from the page', async () => {
    const { page, sessionId } = await openInspector();
    await send(page, 'slow answer to cancel');
    await waitForDraft(page, 20);
    await page.click('[data-testid=cancel]');
    const outcome = page.locator('[data-testid=turn-outcome][data-status=cancelled]');
    await outcome.waitFor();
    expect(await page.textContent('[data-testid=phase]')).toBe('cancelled');
    expect(await page.isDisabled('[data-testid=cancel]')).toBe(true);
    expect(await page.locator('[data-testid=draft]').count()).toBe(0);
    expect((await serverState(sessionId)).snapshot.runtime).toMatchObject({ type: 'terminal', outcome: { status: 'cancelled' } });
    await shot(page, 'cancelled');
  });

  it('steers the running turn from the same prompt box', async () => {
    const { page } = await openInspector();
    await send(page, 'slow, and I will add something');
    await waitForDraft(page, 10);
    expect(await page.getAttribute('[data-testid=send]', 'data-mode')).toBe('steer');
    await send(page, 'mention the weather');
    // The box empties once the server has accepted the steering input (an answered command).
    await expect.poll(() => page.inputValue('[data-testid=prompt]')).toBe('');
    await page.locator('[data-testid=turn-outcome][data-status=completed]').waitFor({ timeout: 20_000 });
    await page.waitForFunction(() =>
      [...document.querySelectorAll('[data-testid=transcript] .message-assistant .block-text')].some((b) => b.textContent === 'Noted: “mention the weather”. I will keep that in mind.'),
    );
    expect(await page.$$eval('[data-testid=transcript] .message-user', (m) => m.map((x) => x.textContent))).toEqual([
      'userslow, and I will add something',
      'usermention the weather',
    ]);
  });

  it('reloaded mid-turn, rebuilds the same state by replaying what it missed', async () => {
    const { page, sessionId } = await openInspector();
    await send(page, 'slow, then reload');
    await waitForDraft(page, 40);
    const before = (await page.textContent('[data-testid=draft]')) ?? '';
    await page.reload();
    await page.locator('[data-testid=sync-state][data-source=replay]').waitFor();
    // Still mid-turn: the draft is the one from before the reload plus what was replayed.
    expect(await page.textContent('[data-testid=phase]')).toBe('running_model');
    const after = (await page.textContent('[data-testid=draft]')) ?? '';
    expect(after.startsWith(before)).toBe(true);
    expect(await page.textContent('[data-testid=sync-state]')).toMatch(/^replayed \d+ updates? after a reconnect$/);
    // The log from before the reload is still there, from turn_started on.
    expect(await page.locator('[data-testid=update-log] li').first().getAttribute('data-type')).toBe('turn_started');
    await shot(page, 'replayed');
    await page.locator('[data-testid=turn-outcome][data-status=completed]').waitFor({ timeout: 20_000 });
    const state = await serverState(sessionId);
    expect(await page.getAttribute('[data-testid=last-sequence]', 'data-sequence')).toBe(String(state.snapshot.lastUpdateSequence));
    const finalText = state.snapshot.runtime.type === 'terminal' && state.snapshot.runtime.outcome.status === 'completed' ? state.snapshot.runtime.outcome.finalText : '';
    expect(finalText.startsWith(before)).toBe(true);
    await page.waitForFunction((text: string) => [...document.querySelectorAll('[data-testid=transcript] .message-assistant .block-text')].some((b) => b.textContent === text), finalText);
    const sequences = await page.$$eval('[data-testid=update-log] li', (lis) => lis.map((li) => [Number((li as HTMLElement).dataset.from), Number((li as HTMLElement).dataset.to)]));
    for (let i = 1; i < sequences.length; i += 1) expect(sequences[i]![0]).toBe(sequences[i - 1]![1]! + 1);
  });

  it('back after missing more updates than the replay buffer holds, rebuilds from the snapshot and goes on live', async () => {
    const { page, sessionId } = await openInspector();
    await send(page, 'flood');
    await page.locator('[data-testid=reasoning-draft]').waitFor();
    const seen = Number(await page.getAttribute('[data-testid=last-sequence]', 'data-sequence'));
    await page.goto('about:blank');
    for (;;) {
      const { snapshot } = await serverState(sessionId);
      if (snapshot.lastUpdateSequence > seen + 600) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    await page.goto(runtime.url);
    await page.locator('[data-testid=sync-state][data-source=snapshot]').waitFor();
    expect(await page.textContent('[data-testid=sync-state]')).toBe('rebuilt from the snapshot');
    expect(await page.locator('[data-testid=update-log] li[data-type=snapshot]').count()).toBe(1);
    const length = await draftLength(page);
    expect(length).toBeGreaterThan(700);
    // Live updates apply on top of the snapshot.
    await waitForDraft(page, length + 12);
    expect(await page.textContent('[data-testid=phase]')).toBe('running_model');
    await shot(page, 'snapshot');
    await page.click('[data-testid=cancel]');
    await page.locator('[data-testid=turn-outcome][data-status=cancelled]').waitFor();
  });

  it('the actor tree and the Turn statechart follow the phases as they happen', async () => {
    const { page } = await openInspector();
    await page.click('[data-testid=chart-tabs] button[data-machine=turn]');
    // Record every state the tree shows for the Turn actor.
    await page.evaluate(() => {
      const seen: string[] = [];
      (window as unknown as { turnStates: string[] }).turnStates = seen;
      new MutationObserver(() => {
        const text = document.querySelector('[data-actor-id=turn][data-status=active] > .actor-line [data-testid=actor-state]')?.textContent;
        if (text && seen.at(-1) !== text) seen.push(text);
      }).observe(document.querySelector('[data-testid=actor-tree]')!, { childList: true, subtree: true, characterData: true });
    });
    await send(page, 'Show me around, and watch the actors');
    await page.locator('[data-testid=permission-card]').waitFor({ state: 'visible' });
    const turn = page.locator('[data-actor-id=turn][data-status=active]');
    await turn.locator('> .actor-line [data-testid=actor-state]', { hasText: 'tools.call.waiting_permission' }).waitFor();
    expect(await turn.locator('> .actor-line .actor-fields').textContent()).toContain('phase=waiting_permission');
    expect(await turn.locator('[data-actor-id=toolCall] [data-testid=actor-state]').textContent()).toBe('waiting_permission');
    await page.locator('[data-testid=chart] .state.active[data-state-id="turn.tools.call.waiting_permission"]').waitFor();
    // `tools` has its own id in the machine (`#tools`); the chart uses the definition's ids.
    expect(await page.getAttribute('[data-testid=chart]', 'data-active-states')).toBe('turn tools turn.tools.call turn.tools.call.waiting_permission');
    // The transition just taken is marked on the chart.
    expect(await page.locator('[data-testid=chart] .transition.taken .transition-event').first().textContent()).toBe('toolcall.permission_requested');
    await shot(page, 'actors');
    await page.click('[data-testid=permission-card] [data-decision=allow_for_session]');
    await page.locator('[data-testid=chart] .state.active[data-state-id="turn.running_model.streaming"]').waitFor();
    const states = await page.evaluate(() => (window as unknown as { turnStates: string[] }).turnStates);
    // A state counts with its substates (`running_model.streaming.requesting`, `.receiving`).
    const within = (state: string) => (s: string) => s === state || s.startsWith(`${state}.`);
    // The Turn validates and authorises the call itself (`tools.run`), then spawns the tool-call machine for its card.
    const order = ['running_model.streaming', 'tools.run', 'tools.call.waiting_permission'];
    let at = -1;
    for (const state of order) {
      const next = states.findIndex((s, i) => i > at && within(state)(s));
      expect(next, `${state} after ${states.slice(0, at + 1).join(', ')}`).toBeGreaterThan(at);
      at = next;
    }
    expect(states.slice(at + 1).some(within('running_model.streaming'))).toBe(true);
    const transitions = await page.$$eval('[data-testid=transitions] li', (lis) => lis.map((li) => li.textContent ?? ''));
    expect(transitions.some((t) => t.includes('tools.call.waiting_permission → tools.call.running_tools'))).toBe(true);
  });

  it('compacts from the page between turns: the compaction shows in the update stream and as a checkpoint with its summary; a rewind follows', async () => {
    const { page, sessionId } = await openInspector();
    expect(await page.isDisabled('[data-testid=compact]')).toBe(true);
    await send(page, 'slow, then compact');
    await waitForDraft(page, 20);
    // Compaction answers session_active during a turn: the page offers it only between turns.
    expect(await page.isDisabled('[data-testid=compact]')).toBe(true);
    await page.click('[data-testid=cancel]');
    await page.locator('[data-testid=turn-outcome][data-status=cancelled]').waitFor();
    await page.locator('[data-testid=compact]:not([disabled])').waitFor();
    await page.click('[data-testid=compact]');

    const row = page.locator('[data-testid=update-log] li[data-type=conversation_compacted]');
    await row.waitFor();
    const summary = (await row.locator('.summary').textContent()) ?? '';
    const [, before, after, compactionId] = /^manual: (\d+) → (\d+) tokens · checkpoint (cmp_\S+)$/.exec(summary) ?? [];
    expect(compactionId, summary).toBeTruthy();
    const res = await inspectorFetch(runtime.server, `/api/sessions/${sessionId}/checkpoints`);
    const { checkpoints } = (await res.json()) as { checkpoints: Array<{ compactionId: string; throughMessageSequence: number; summary: string }> };
    expect(checkpoints.map((c) => c.compactionId)).toEqual([compactionId]);

    // In the transcript: a marker after the messages the summary stands for, with the numbers and the text.
    const marker = page.locator(`[data-testid=checkpoint][data-compaction-id="${compactionId}"]`);
    await marker.waitFor();
    expect(await marker.getAttribute('data-kind')).toBe('manual');
    const through = checkpoints[0]!.throughMessageSequence;
    expect(await marker.locator('[data-testid=checkpoint-info]').textContent()).toBe(`the summary stands for messages 1–${through} · ${before} → ${after} tokens`);
    const order = await page.$$eval('[data-testid=transcript] > *', (nodes) =>
      nodes.map((n) => ((n as HTMLElement).dataset.testid === 'checkpoint' ? 'checkpoint' : Number((n as HTMLElement).dataset.sequence))),
    );
    expect(order.indexOf('checkpoint')).toBe(order.filter((x) => typeof x === 'number' && x <= through).length);
    await marker.locator('summary').click();
    const text = (await marker.locator('[data-testid=checkpoint-summary]').textContent()) ?? '';
    expect(text).toBe(checkpoints[0]!.summary);
    expect(text).toContain('## 1. Primary Request and Intent\nThe user asked: “slow, then compact”.');
    await shot(page, 'compacted');

    // Rewinding to it writes a new checkpoint of kind rewind: a second update and a second marker.
    await marker.locator('[data-testid=rewind]').click();
    await page.locator('[data-testid=checkpoint][data-kind=rewind]').waitFor();
    const rows = await page.$$eval('[data-testid=update-log] li[data-type=conversation_compacted] .summary', (nodes) => nodes.map((n) => n.textContent ?? ''));
    expect(rows).toHaveLength(2);
    expect(rows[1]).toMatch(/^rewind: \d+ → \d+ tokens · checkpoint cmp_/);
    expect(await page.isHidden('[data-testid=command-error]')).toBe(true);
  });

  it('an explorer sub-agent shows in the actor tree under the root session, with its own Turn, and can be opened from the session list', async () => {
    const { page, sessionId } = await openInspector();
    await send(page, 'explore the project');
    const tree = page.locator('[data-testid=actor-tree]');
    // The explorer's Session actor is a child of the root's Session actor, named by its system id.
    const agent = tree.locator(`> li[data-actor-id="session:${sessionId}"] > ul > li[data-machine=session][data-system-id="agent:explorer_1"]`);
    await agent.waitFor();
    expect(await agent.locator('> .actor-line .actor-name').textContent()).toBe('agent:explorer_1');
    // While it works, its Turn runs under it, beside the root's own Turn (waiting in wait_agent or spawning).
    await agent.locator('> ul > li[data-actor-id=turn][data-status=active]').waitFor();
    expect(await tree.locator(`> li[data-actor-id="session:${sessionId}"] > ul > li[data-actor-id=turn][data-status=active]`).count()).toBe(1);
    await shot(page, 'explorer');

    const entry = page.locator('[data-testid=agent-session][data-task-name=explorer_1]');
    await entry.waitFor();
    await page.locator('[data-testid=turn-outcome][data-status=completed]').waitFor({ timeout: 20_000 });
    await page.waitForFunction(() =>
      [...document.querySelectorAll('[data-testid=transcript] .message-assistant .block-text')].some((b) => (b.textContent ?? '').startsWith('The explorer reported back:')),
    );
    // The explorer's Session actor stays, idle, after its turn.
    await agent.locator('> .actor-line [data-testid=actor-state]', { hasText: 'idle' }).waitFor();

    // Opened from the list: its own conversation; the tree is still its root's, its own actor marked.
    await entry.click();
    await page.locator('[data-testid=agent-session][data-task-name=explorer_1].selected').waitFor();
    expect(await page.textContent('[data-testid=session-title]')).toBe('explorer explorer_1');
    await page.waitForFunction(
      (task: string) => [...document.querySelectorAll('[data-testid=transcript] .message-user')].some((m) => (m.textContent ?? '').includes(task)),
      EXPLORER_TASK,
    );
    expect(await page.locator('[data-testid=transcript] .message-tool .message-role').allTextContents()).toEqual(['tool list_directory']);
    expect(await page.isDisabled('[data-testid=prompt]')).toBe(true);
    expect(await page.isDisabled('[data-testid=compact]')).toBe(true);
    expect(await page.getAttribute('[data-testid=agent-session].selected', 'data-session-id')).toBe(await agent.getAttribute('data-actor-id').then((id) => id!.slice('agent:'.length)));
    await page.locator('[data-testid=actor-tree] li.actor-own-session[data-system-id="agent:explorer_1"]').waitFor();
    await page.locator('[data-testid=turn-outcome][data-status=completed]').waitFor();
    // A reload keeps the explorer selected.
    await page.reload();
    await page.locator('[data-testid=agent-session][data-task-name=explorer_1].selected').waitFor();
    expect(await page.textContent('[data-testid=session-title]')).toBe('explorer explorer_1');
    await shot(page, 'explorer-opened');
  });

  it('gets in only through the printed address: the secret becomes an HttpOnly SameSite=Strict cookie, and a page that loses it is locked out', async () => {
    // Without the secret (a browser that never opened the printed address) there is no page at all.
    await browser.context.clearCookies();
    const bare = await browser.context.newPage();
    pages.push(bare);
    const refused = await bare.goto(runtime.server.origin);
    expect(refused!.status()).toBe(401);
    expect(JSON.parse(await refused!.text())).toMatchObject({ error: { code: 'token_required' } });
    await bare.close();
    pages.pop();

    const { page } = await openInspector();
    // The printed address was traded for the cookie; the address bar no longer carries the secret.
    expect(page.url()).toBe(runtime.server.origin);
    const cookies = await browser.context.cookies(runtime.server.origin);
    expect(cookies.find((c) => c.name === `openwork_inspector_${runtime.server.port}`)).toMatchObject({ value: runtime.server.token, httpOnly: true, sameSite: 'Strict', path: '/' });
    // Script in the page cannot read it.
    expect(await page.evaluate(() => (document as unknown as { cookie: string }).cookie)).toBe('');

    // Another inspector's (or a stale) secret: the page's next command is refused and the page says so.
    await browser.context.clearCookies();
    await browser.context.addCookies([{ name: `openwork_inspector_${runtime.server.port}`, value: 'stale', url: runtime.server.origin }]);
    await page.click('[data-testid=new-session]');
    await page.locator('[data-testid=connection][data-state=locked]').waitFor();
    expect(await page.textContent('[data-testid=connection]')).toBe('locked: open the address the inspector printed');
    await shot(page, 'locked');
    // The printed address lets it in again.
    await page.goto(runtime.url);
    await page.locator('[data-testid=connection][data-state=live]').waitFor();
  });
});
