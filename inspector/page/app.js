// The inspector page: one event stream from the server (/api/events), one controller per session
// that keeps the runtime view in order (reference §8.5: ignore old sequences, apply the next one,
// replay on a gap, take the snapshot when replay cannot help), and plain DOM rendering.
// The view of each session is kept in sessionStorage, so that a reload replays only what it missed.
// Sub-agents (explorers) are sessions of their own, listed under their root: their updates come on
// the same stream, and their actors live in the root's actor tree.

import { applySnapshot, applyUpdate, classifyEnvelope, createView, isTurnActive, VIEW_VERSION } from './reducer.js';
import { activeStateIds, buildChart } from './chart.js';

const STORE = 'openwork-inspector';
const CHART_TITLES = { session: 'Session', turn: 'Turn', toolCall: 'Tool call' };
const DECISION_LABELS = {
  allow_once: 'Allow once',
  allow_for_turn: 'Allow for this turn',
  allow_for_session: 'Allow for this session',
  deny: 'Deny',
};
const DECISION_ORDER = ['allow_once', 'allow_for_turn', 'allow_for_session', 'deny'];

const ENVELOPE_LIMIT = 4000;

const PROMPT_HINT = 'Show me around  ·  slow …  ·  flood …  ·  fail …  ·  explore …  ·  ask …';

const $ = (id) => document.querySelector(`[data-testid="${id}"]`);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else if (key.startsWith('data-')) node.setAttribute(key, String(value));
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

const app = {
  instanceId: null,
  label: '',
  sessions: [],
  selected: sessionStorage.getItem(`${STORE}:selected`),
  controllers: new Map(),
  actors: new Map(),
  transitions: new Map(),
  messages: new Map(),
  checkpoints: new Map(),
  // Sub-agents: root id → [{ sessionId, taskName, status }], and child id → root id.
  agents: new Map(),
  parents: new Map(),
  charts: [],
  chartViews: new Map(),
  chartTab: sessionStorage.getItem(`${STORE}:chart`) ?? 'turn',
  selectedActorKey: null,
  showFinished: false,
  connection: 'connecting',
  source: null,
  commandError: null,
  bottomTab: sessionStorage.getItem(`${STORE}:bottom`) ?? 'updates',
  logFilter: '',
  logSearch: '',
  // Update rows opened to their payload, by `from-to`; actors opened to their context, by key.
  expandedRows: new Set(),
  expandedActors: new Map(),
  traces: new Map(),
  turns: new Map(),
  traceTurn: null,
};

// ---------------------------------------------------------------------------------------------
// Server calls

// The server's secret travels in an HttpOnly cookie that the address it printed set (script never
// sees it). A 401/403 with a token code means this page lost it, or the server was restarted with a
// new one: only the printed address can let the page in again.
function isTokenRefusal(status, body) {
  return (status === 401 || status === 403) && /^token_/.test(body?.error?.code ?? '');
}

function lockOut() {
  if (app.connection === 'locked') return;
  app.connection = 'locked';
  app.source?.close();
  render('header');
}

async function api(path, body) {
  const init = body === undefined ? {} : { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) };
  const res = await fetch(path, init);
  let json = {};
  try {
    json = await res.json();
  } catch {
    json = {};
  }
  if (isTokenRefusal(res.status, json)) lockOut();
  return { ok: res.ok, status: res.status, body: json };
}

function sessionPath(sessionId, rest = '') {
  return `/api/sessions/${encodeURIComponent(sessionId)}${rest}`;
}

async function command(path, body) {
  const res = await api(path, body);
  if (!res.ok) {
    const error = res.body.error ?? { code: `http_${res.status}`, message: 'request failed' };
    app.commandError = `${error.code}: ${error.message}`;
  } else {
    app.commandError = null;
  }
  render('session');
  return res;
}

// ---------------------------------------------------------------------------------------------
// One controller per session: the ordered runtime view.

function storeKey(sessionId) {
  return `${STORE}:${app.instanceId}:view:${sessionId}`;
}

class SessionController {
  constructor(sessionId) {
    this.sessionId = sessionId;
    this.view = this.restore();
    this.queue = [];
    this.syncing = null;
    this.saveTimer = null;
    // The full envelopes seen by this page (not saved: a reload asks the server's replay buffer).
    this.envelopes = new Map();
  }

  remember(envelope) {
    this.envelopes.set(envelope.sequence, envelope);
    if (this.envelopes.size > ENVELOPE_LIMIT) this.envelopes.delete(this.envelopes.keys().next().value);
  }

  restore() {
    try {
      const text = sessionStorage.getItem(storeKey(this.sessionId));
      if (!text) return null;
      const view = JSON.parse(text);
      return view && view.version === VIEW_VERSION && view.sessionId === this.sessionId ? view : null;
    } catch {
      return null;
    }
  }

  save(now = false) {
    if (!this.view) return;
    const write = () => {
      this.saveTimer = null;
      try {
        sessionStorage.setItem(storeKey(this.sessionId), JSON.stringify(this.view));
      } catch {
        // A full storage only costs a longer resync after a reload.
      }
    };
    if (now) {
      if (this.saveTimer) clearTimeout(this.saveTimer);
      write();
      return;
    }
    if (!this.saveTimer) this.saveTimer = setTimeout(write, 200);
  }

  setView(view) {
    this.view = view;
    this.save();
    if (this.sessionId === app.selected) render('session');
    render('sessions');
  }

  /** Replays what the view missed; takes the snapshot when the buffer or the epoch says so. */
  sync() {
    if (this.syncing) return this.syncing;
    this.syncing = (async () => {
      try {
        const after = this.view ? this.view.lastSequence : 0;
        const res = await api(sessionPath(this.sessionId, `/updates?after=${after}`));
        const sameEpoch = res.ok && (!this.view || res.body.epoch === this.view.epoch);
        if (res.ok && sameEpoch) {
          let view = this.view ?? createView(this.sessionId, res.body.epoch);
          let applied = 0;
          for (const envelope of res.body.updates) {
            this.remember(envelope);
            if (classifyEnvelope(view, res.body.epoch, envelope) !== 'apply') continue;
            view = applyUpdate(view, envelope);
            applied += 1;
          }
          view = { ...view, sync: { source: this.view ? 'replay' : 'live', count: applied } };
          this.setView(view);
        } else {
          await this.fromSnapshot();
        }
      } catch (error) {
        console.error('inspector: resync failed', error);
      } finally {
        this.syncing = null;
      }
      this.drain();
      loadMessages(this.sessionId);
    })();
    return this.syncing;
  }

  async fromSnapshot() {
    const res = await api(sessionPath(this.sessionId, '/state'));
    if (!res.ok) throw new Error(`snapshot of ${this.sessionId}: ${res.status}`);
    const view = applySnapshot(this.view, this.sessionId, res.body.epoch, res.body.snapshot);
    this.setView({ ...view, sync: { source: 'snapshot', count: 0 } });
    app.transitions.set(this.sessionId, res.body.transitions);
    for (const actor of res.body.actors) app.actors.set(actor.key, actor);
    render('actors');
  }

  /** Envelopes that arrived while resynchronising, in order; a gap left after a replay means the snapshot. */
  drain() {
    const queued = this.queue;
    this.queue = [];
    let view = this.view;
    for (const [epoch, envelope] of queued) {
      const verdict = classifyEnvelope(view, epoch, envelope);
      if (verdict === 'ignore') continue;
      if (verdict === 'apply') {
        view = applyUpdate(view, envelope);
        continue;
      }
      this.view = view;
      this.queue = [];
      this.fromSnapshot().catch((error) => console.error('inspector: snapshot failed', error));
      return;
    }
    if (view !== this.view) this.setView(view);
  }

  onEnvelope(epoch, envelope) {
    this.remember(envelope);
    if (this.syncing || !this.view) {
      this.queue.push([epoch, envelope]);
      if (!this.syncing) this.sync();
      return;
    }
    const verdict = classifyEnvelope(this.view, epoch, envelope);
    if (verdict === 'ignore') return;
    if (verdict === 'apply') {
      this.setView({ ...applyUpdate(this.view, envelope), sync: this.view.sync });
      const type = envelope.update.type;
      if (type === 'turn_finished' && this.sessionId === app.selected && app.bottomTab === 'trace') loadTurns(this.sessionId);
      if (type === 'draft_cleared' || type === 'turn_finished') {
        loadMessages(this.sessionId);
        if (app.parents.has(this.sessionId)) loadAgents(app.parents.get(this.sessionId));
        else refreshSessions();
      }
      if (type === 'conversation_compacted') {
        loadCheckpoints(this.sessionId);
        loadMessages(this.sessionId);
      }
      return;
    }
    // A gap: replay first (reference §8.5); a new epoch: the sequence restarted, take the snapshot.
    this.queue.push([epoch, envelope]);
    if (verdict === 'epoch') {
      this.syncing = this.fromSnapshot()
        .catch((error) => console.error('inspector: snapshot failed', error))
        .finally(() => {
          this.syncing = null;
          this.drain();
        });
    } else {
      this.sync();
    }
  }
}

function controllerFor(sessionId) {
  let controller = app.controllers.get(sessionId);
  if (!controller) {
    controller = new SessionController(sessionId);
    app.controllers.set(sessionId, controller);
    controller.sync();
  }
  return controller;
}

/** The actor tree and the latest transitions of a session, e.g. after a reload. */
async function loadActors(sessionId) {
  const res = await api(sessionPath(sessionId, '/state'));
  if (!res.ok) return;
  app.transitions.set(sessionId, res.body.transitions);
  for (const actor of res.body.actors) app.actors.set(actor.key, actor);
  if (sessionId === rootOf(app.selected)) render('actors');
}

/** The checkpoints of a session: where each summary sits among the raw messages, and its text. */
async function loadCheckpoints(sessionId) {
  const res = await api(sessionPath(sessionId, '/checkpoints'));
  if (!res.ok) return;
  app.checkpoints.set(sessionId, res.body.checkpoints);
  if (sessionId === app.selected) render('transcript');
}

/** The explorers of a root session, for the session list. */
async function loadAgents(rootId) {
  const res = await api(sessionPath(rootId, '/agents'));
  if (!res.ok) return;
  app.agents.set(rootId, res.body.agents);
  for (const agent of res.body.agents) app.parents.set(agent.sessionId, rootId);
  render('sessions');
}

/** The root whose actor system holds this session's actors (itself, for a root). */
function rootOf(sessionId) {
  return app.parents.get(sessionId) ?? sessionId;
}

function isSubAgent(sessionId) {
  return app.parents.has(sessionId);
}

async function loadMessages(sessionId) {
  const res = await api(sessionPath(sessionId, '/messages'));
  if (!res.ok) return;
  app.messages.set(sessionId, res.body.messages);
  // The composer too: whether there is anything to compact depends on the messages.
  if (sessionId === app.selected) render('session');
}

async function refreshSessions() {
  const res = await api('/api/sessions');
  if (!res.ok) return;
  app.sessions = res.body.sessions;
  if (app.sessions.length === 0) {
    await createSession();
    return;
  }
  if (app.selected && !app.sessions.some((s) => s.sessionId === app.selected) && !isSubAgent(app.selected)) {
    // A sub-agent selected before a reload: its state says which root it belongs to.
    const state = await api(sessionPath(app.selected, '/state'));
    const parent = state.ok ? state.body.parentSessionId : null;
    if (parent && app.sessions.some((s) => s.sessionId === parent)) {
      app.parents.set(app.selected, parent);
      loadAgents(parent);
    }
  }
  if (!app.selected || !(app.sessions.some((s) => s.sessionId === app.selected) || isSubAgent(app.selected))) select(app.sessions[0].sessionId);
  render('sessions');
  render('session');
}

async function createSession() {
  const res = await command('/api/sessions', { title: `Session ${app.sessions.length + 1}` });
  if (!res.ok) return;
  await refreshSessions();
  select(res.body.sessionId);
}

function select(sessionId) {
  app.selected = sessionId;
  app.selectedActorKey = null;
  app.commandError = null;
  app.traceTurn = null;
  app.expandedRows.clear();
  if (app.bottomTab === 'trace') loadTurns(sessionId);
  sessionStorage.setItem(`${STORE}:selected`, sessionId);
  controllerFor(sessionId);
  if (!app.messages.has(sessionId)) loadMessages(sessionId);
  if (!app.checkpoints.has(sessionId)) loadCheckpoints(sessionId);
  if (!app.transitions.has(rootOf(sessionId))) loadActors(rootOf(sessionId));
  if (!isSubAgent(sessionId)) loadAgents(sessionId);
  render('sessions');
  render('session');
  render('transcript');
  render('actors');
}

// ---------------------------------------------------------------------------------------------
// The event stream

function connect() {
  const source = new EventSource('/api/events');
  app.source = source;
  source.addEventListener('hello', (event) => {
    const hello = JSON.parse(event.data);
    if (app.instanceId !== null && app.instanceId !== hello.instanceId) {
      // Another server process: its sequences and epochs have nothing to do with what we kept.
      app.controllers.clear();
      app.messages.clear();
    }
    app.instanceId = hello.instanceId;
    app.label = hello.label ?? '';
    app.actors = new Map(hello.actors.map((a) => [a.key, a]));
    app.connection = 'live';
    for (const controller of app.controllers.values()) controller.sync();
    refreshSessions().then(() => {
      if (!app.selected) return;
      controllerFor(app.selected);
      loadActors(rootOf(app.selected));
      loadAgents(rootOf(app.selected));
    });
    render('all');
  });
  source.addEventListener('update', (event) => {
    const { epoch, parentSessionId, envelope } = JSON.parse(event.data);
    if (parentSessionId) {
      // A sub-agent: listed under its root, never in the session list itself.
      if (!app.parents.has(envelope.sessionId)) {
        app.parents.set(envelope.sessionId, parentSessionId);
        loadAgents(parentSessionId);
      }
    } else if (!app.sessions.some((s) => s.sessionId === envelope.sessionId)) {
      refreshSessions();
    }
    controllerFor(envelope.sessionId).onEnvelope(epoch, envelope);
  });
  source.addEventListener('actor', (event) => {
    const { actor } = JSON.parse(event.data);
    app.actors.set(actor.key, actor);
    if (app.expandedActors.has(actor.key)) loadActorDetail(actor.key);
    if (actor.sessionId === rootOf(app.selected)) render('actors');
  });
  source.addEventListener('actor_removed', (event) => {
    const { key, sessionId } = JSON.parse(event.data);
    app.actors.delete(key);
    if (sessionId === rootOf(app.selected)) render('actors');
  });
  source.addEventListener('transition', (event) => {
    const { transition } = JSON.parse(event.data);
    const list = app.transitions.get(transition.sessionId) ?? [];
    list.push(transition);
    if (list.length > 200) list.splice(0, list.length - 200);
    app.transitions.set(transition.sessionId, list);
    if (transition.sessionId === rootOf(app.selected)) render('actors');
  });
  source.addEventListener('sessions', () => refreshSessions());
  source.addEventListener('error', () => {
    if (app.connection === 'locked') return;
    app.connection = source.readyState === EventSource.CLOSED ? 'closed' : 'reconnecting';
    render('header');
    // An event stream does not say why it failed; a plain call tells a lost secret from a server that is down.
    api('/api/info').catch(() => undefined);
  });
}

// ---------------------------------------------------------------------------------------------
// Rendering, batched per animation frame

/** Lists that follow their end while the user has not scrolled up. */
const sticky = new WeakMap();

function followEnd(list) {
  if (!sticky.has(list)) {
    sticky.set(list, true);
    list.addEventListener('scroll', () => sticky.set(list, list.scrollHeight - list.scrollTop - list.clientHeight < 24));
  }
  return () => {
    if (sticky.get(list)) list.scrollTop = list.scrollHeight;
  };
}

const dirty = new Set();
let frame = 0;

function render(part) {
  dirty.add(part);
  if (!frame) frame = requestAnimationFrame(flush);
}

function flush() {
  frame = 0;
  const all = dirty.has('all');
  const parts = new Set(dirty);
  dirty.clear();
  if (all || parts.has('header')) renderHeader();
  if (all || parts.has('sessions')) renderSessions();
  if (all || parts.has('session')) renderSession();
  if (all || parts.has('transcript') || parts.has('session')) renderTranscript();
  if (all || parts.has('actors')) renderActors();
  if (all || parts.has('actors') || parts.has('session') || parts.has('charts')) renderCharts();
  if (all || parts.has('trace') || parts.has('session')) renderTrace();
}

function renderHeader() {
  $('runtime-label').textContent = app.label;
  const connection = $('connection');
  connection.dataset.state = app.connection;
  connection.textContent = app.connection === 'locked' ? 'locked: open the address the inspector printed' : app.connection;
}

function statusOf(session) {
  const controller = app.controllers.get(session.sessionId);
  const view = controller && controller.view;
  if (view && isTurnActive(view)) return view.pendingPermission || view.pendingQuestion ? 'waiting' : 'running';
  if (session.status && session.status.type === 'active') return 'running';
  return 'idle';
}

function renderSessions() {
  const list = $('session-list');
  const openRoot = app.selected ? rootOf(app.selected) : null;
  const rows = [];
  for (const s of app.sessions) {
    rows.push(
      el(
        'li',
        { class: s.sessionId === app.selected ? 'selected' : '', 'data-session-id': s.sessionId, 'data-status': statusOf(s), onclick: () => select(s.sessionId) },
        el('span', { class: 'dot' }),
        el('span', { class: 'session-name', text: s.title ?? s.sessionId }),
      ),
    );
    // The explorers of the open root, indented under it.
    if (s.sessionId !== openRoot) continue;
    for (const agent of app.agents.get(s.sessionId) ?? []) {
      rows.push(
        el(
          'li',
          {
            class: `agent-session${agent.sessionId === app.selected ? ' selected' : ''}`,
            'data-testid': 'agent-session',
            'data-session-id': agent.sessionId,
            'data-task-name': agent.taskName ?? '',
            'data-status': statusOf(agent),
            title: `${agent.agentRole ?? 'sub-agent'} ${agent.sessionId}`,
            onclick: () => select(agent.sessionId),
          },
          el('span', { class: 'dot' }),
          el('span', { class: 'session-name', text: `↳ ${agent.taskName ?? agent.sessionId}` }),
        ),
      );
    }
  }
  list.replaceChildren(...rows);
}

function currentView() {
  const controller = app.selected ? app.controllers.get(app.selected) : null;
  return controller ? controller.view : null;
}

function syncText(view) {
  if (!view) return 'syncing…';
  switch (view.sync.source) {
    case 'replay':
      return `replayed ${view.sync.count} update${view.sync.count === 1 ? '' : 's'} after a reconnect`;
    case 'snapshot':
      return 'rebuilt from the snapshot';
    default:
      return 'live';
  }
}

function selectedAgent() {
  if (!app.selected || !isSubAgent(app.selected)) return null;
  return (app.agents.get(rootOf(app.selected)) ?? []).find((a) => a.sessionId === app.selected) ?? { sessionId: app.selected, taskName: null };
}

function renderSession() {
  const session = app.sessions.find((s) => s.sessionId === app.selected);
  const agent = selectedAgent();
  const view = currentView();
  $('session-title').textContent = session ? session.title ?? session.sessionId : agent ? `explorer ${agent.taskName ?? agent.sessionId}` : 'no session';
  const active = view ? isTurnActive(view) : false;
  $('session-status').textContent = view ? (active ? `turn ${view.phase ?? ''}` : 'idle') : '';
  const sync = $('sync-state');
  sync.textContent = syncText(view);
  sync.dataset.source = view ? view.sync.source : 'none';
  $('last-sequence').textContent = view ? `last sequence ${view.lastSequence}` : '';
  $('last-sequence').dataset.sequence = view ? String(view.lastSequence) : '0';
  renderLive(view);
  renderCard(view);
  renderQuestion(view);
  renderComposer(view, active);
  renderLog(view);
}

function toolStatusLabel(call) {
  if (call.status === 'finished' && call.result) return call.result.status;
  return call.status;
}

/** The newest plan of the session, docked above the live turn so it stays in sight (reference §8.7). */
function renderPlan(view) {
  const dock = $('plan-dock');
  if (!view || !view.plan) {
    dock.hidden = true;
    dock.replaceChildren();
    return;
  }
  dock.hidden = false;
  dock.replaceChildren(
    el(
      'div',
      { class: 'plan', 'data-testid': 'plan' },
      el('div', { class: 'plan-title', text: view.plan.explanation ? `Plan · ${view.plan.explanation}` : 'Plan' }),
      el('ol', {}, ...view.plan.steps.map((s) => el('li', { class: `plan-step plan-${s.status}`, 'data-status': s.status, text: s.step }))),
    ),
  );
}

function renderLive(view) {
  renderPlan(view);
  const live = $('live-turn');
  if (!view || !view.turnId) {
    live.hidden = true;
    live.replaceChildren();
    return;
  }
  live.hidden = false;
  const streaming = isTurnActive(view);
  const parts = [
    el(
      'div',
      { class: 'live-head' },
      el('span', { class: 'muted', text: `turn ${view.turnId}` }),
      el('span', { class: `phase phase-${view.phase}`, 'data-testid': 'phase', text: view.phase ?? '' }),
    ),
  ];
  if (view.draft.reasoning) {
    parts.push(el('div', { class: 'reasoning', 'data-testid': 'reasoning-draft', text: view.draft.reasoning }));
  }
  if (view.draft.text) {
    parts.push(el('div', { class: `draft${streaming ? ' streaming' : ''}`, 'data-testid': 'draft', text: view.draft.text }));
  }
  for (const id of view.orderedToolCallIds) {
    const call = view.toolCalls[id];
    // The plan card shows what update_plan did (reference §8.7); its raw call stays in the update log.
    if (!call || call.toolName === 'update_plan') continue;
    const status = toolStatusLabel(call);
    parts.push(
      el(
        'div',
        { class: `tool tool-${status}`, 'data-testid': 'tool-call', 'data-tool': call.toolName, 'data-status': status },
        el(
          'div',
          { class: 'tool-head' },
          el('span', { class: 'tool-name', text: call.toolName }),
          el('span', { class: 'tool-args', text: call.arguments }),
          el('span', { class: 'tool-status', text: status }),
        ),
        call.progress ? el('pre', { class: 'tool-progress', 'data-testid': 'tool-progress', text: call.progress }) : null,
        call.result ? el('pre', { class: 'tool-result', 'data-testid': 'tool-result', text: call.result.text }) : null,
      ),
    );
  }
  if (view.terminal && view.terminal.turnId === view.turnId) {
    const outcome = view.terminal.outcome;
    const text =
      outcome.status === 'failed' ? `Turn failed: ${outcome.code} — ${outcome.message}` : outcome.status === 'cancelled' ? 'Turn cancelled' : 'Turn completed';
    parts.push(el('div', { class: `outcome outcome-${outcome.status}`, 'data-testid': 'turn-outcome', 'data-status': outcome.status, 'data-code': outcome.code ?? '', text }));
  }
  const keepAtEnd = followEnd(live);
  live.replaceChildren(...parts.filter((part) => part !== null));
  keepAtEnd();
}

/**
 * Shows `card` for the pending card or question, hides it when nothing is pending; false when there
 * is nothing (new) to draw, so that a card being filled in is not redrawn on every update.
 */
function openFor(card, pending) {
  if (!pending) {
    card.hidden = true;
    card.replaceChildren();
    delete card.dataset.toolCallId;
    return false;
  }
  if (card.dataset.toolCallId === pending.toolCallId && !card.hidden) return false;
  card.hidden = false;
  card.dataset.toolCallId = pending.toolCallId;
  return true;
}

function renderCard(view) {
  const card = $('permission-card');
  const pending = view ? view.pendingPermission : null;
  if (!openFor(card, pending)) return;
  const c = pending.card;
  const decisions = DECISION_ORDER.filter((d) => c.decisions.includes(d));
  const decide = (decision) => async () => {
    for (const button of card.querySelectorAll('button')) button.disabled = true;
    const res = await command(sessionPath(app.selected, `/turns/${encodeURIComponent(pending.turnId)}/permissions/${encodeURIComponent(pending.toolCallId)}`), { decision });
    if (!res.ok) for (const button of card.querySelectorAll('button')) button.disabled = false;
  };
  const rows = [
    el('div', { class: 'card-kind', text: `${c.kind} · ${c.toolName}` }),
    el('div', { class: 'card-summary', 'data-testid': 'card-summary', text: c.summary }),
    c.path ? el('div', { class: 'card-detail', title: c.path, text: c.path }) : null,
    c.command ? el('pre', { class: 'card-detail', text: c.command }) : null,
    c.reason ? el('div', { class: 'card-reason', text: c.reason }) : null,
    c.network ? el('div', { class: 'card-danger', 'data-testid': 'card-network', text: 'network: this command may reach the internet and the services of this machine (127.0.0.1, unix sockets, a local database)' }) : null,
    c.dangerNote ? el('div', { class: 'card-danger', text: c.dangerNote }) : null,
    el(
      'div',
      { class: 'card-buttons' },
      ...decisions.map((d) =>
        el('button', { type: 'button', class: d === 'deny' ? 'deny' : '', 'data-decision': d, onclick: decide(d), text: DECISION_LABELS[d] }),
      ),
    ),
  ];
  card.replaceChildren(...rows.filter((row) => row !== null));
}

/** The model's questions (request_user_input): one field per question, options as quick picks. */
function renderQuestion(view) {
  const card = $('question-card');
  const pending = view ? view.pendingQuestion : null;
  if (!openFor(card, pending)) return;
  const fields = new Map();
  const submit = async (event) => {
    event.preventDefault();
    const answers = {};
    for (const [id, input] of fields) answers[id] = input.value;
    for (const control of card.querySelectorAll('button, input')) control.disabled = true;
    const path = sessionPath(app.selected, `/turns/${encodeURIComponent(pending.turnId)}/user-input/${encodeURIComponent(pending.toolCallId)}`);
    const res = await command(path, { answers });
    if (!res.ok) for (const control of card.querySelectorAll('button, input')) control.disabled = false;
  };
  const questions = pending.request.questions.map((q) => {
    const input = el('input', { type: 'text', 'data-testid': `answer-${q.id}`, 'aria-label': q.question, required: true });
    fields.set(q.id, input);
    const picks = (q.options ?? []).map((o) =>
      el('button', {
        type: 'button',
        class: 'pick',
        'data-option': o.label,
        title: o.description ?? '',
        text: o.label,
        onclick: () => {
          input.value = o.label;
        },
      }),
    );
    return el(
      'div',
      { class: 'question-item', 'data-question': q.id },
      el('div', { class: 'card-kind', text: q.header ? `question · ${q.header}` : 'question' }),
      el('div', { class: 'card-summary', text: q.question }),
      picks.length > 0 ? el('div', { class: 'card-buttons' }, ...picks) : null,
      input,
    );
  });
  card.replaceChildren(
    el('form', { onsubmit: submit }, ...questions, el('div', { class: 'card-buttons' }, el('button', { type: 'submit', 'data-testid': 'answer-submit', text: 'Answer' }))),
  );
}

function renderComposer(view, active) {
  // A sub-agent is driven by its root's agent tools, not from here.
  const child = app.selected ? isSubAgent(app.selected) : false;
  $('send').textContent = active ? 'Steer' : 'Start turn';
  $('send').dataset.mode = active ? 'steer' : 'start';
  $('send').disabled = child;
  $('prompt').disabled = child;
  $('prompt').placeholder = child ? 'A sub-agent takes its tasks from its root session (spawn_agent, followup_task).' : PROMPT_HINT;
  $('cancel').disabled = !active || child;
  // Compaction answers session_active during a turn, and needs a request of the user to summarise.
  const messages = app.selected ? app.messages.get(app.selected) ?? [] : [];
  const hasRequest = messages.some((m) => m.role === 'user' && (m.kind ?? 'normal') === 'normal');
  $('compact').disabled = !view || active || child || !hasRequest;
  const error = $('command-error');
  error.hidden = !app.commandError;
  error.textContent = app.commandError ?? '';
}

/** The envelopes a log row stands for, as far as this page has them. */
function rowEnvelopes(entry) {
  const controller = app.selected ? app.controllers.get(app.selected) : null;
  const out = [];
  if (!controller) return out;
  for (let seq = entry.from; seq <= entry.to; seq += 1) {
    const envelope = controller.envelopes.get(seq);
    if (envelope) out.push(envelope);
  }
  return out;
}

/** Fetches a row's envelopes the page does not hold (after a reload) from the server's replay buffer. */
async function fetchRowEnvelopes(entry) {
  const controller = app.controllers.get(app.selected);
  if (!controller) return;
  const res = await api(sessionPath(app.selected, `/updates?after=${Math.max(0, entry.from - 1)}`));
  if (!res.ok) return;
  for (const envelope of res.body.updates) if (envelope.sequence <= entry.to) controller.remember(envelope);
  render('session');
}

/** JSON text of a value; the page only ever puts it into textContent, never into markup. */
function pretty(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

const fetchingRows = new Set();

function rowMatches(entry) {
  if (app.logFilter && entry.type !== app.logFilter) return false;
  const needle = app.logSearch.trim().toLowerCase();
  if (!needle) return true;
  if (`${entry.type} ${entry.summary}`.toLowerCase().includes(needle)) return true;
  return rowEnvelopes(entry).some((e) => JSON.stringify(e.update).toLowerCase().includes(needle));
}

function renderLog(view) {
  const log = $('update-log');
  const keepAtEnd = followEnd(log);
  const all = view ? view.log : [];
  // The filter offers the types this session's log holds.
  const filter = $('update-filter');
  const types = [...new Set(all.map((e) => e.type))].sort();
  const offered = [...filter.options].slice(1).map((o) => o.value);
  if (offered.join() !== types.join()) {
    filter.replaceChildren(el('option', { value: '', text: 'all types' }), ...types.map((t) => el('option', { value: t, text: t })));
  }
  filter.value = types.includes(app.logFilter) ? app.logFilter : '';
  const entries = all.filter(rowMatches).slice(-200);
  $('update-count').textContent = app.logFilter || app.logSearch ? `${entries.length} of ${all.length}` : '';
  log.replaceChildren(
    ...entries.map((e) => {
      const key = `${e.from}-${e.to}`;
      const open = app.expandedRows.has(key);
      const toggle = () => {
        if (app.expandedRows.has(key)) app.expandedRows.delete(key);
        else app.expandedRows.add(key);
        render('session');
      };
      let payload = null;
      if (open) {
        const envelopes = rowEnvelopes(e);
        if (envelopes.length < e.to - e.from + 1 && !fetchingRows.has(key)) {
          fetchingRows.add(key);
          fetchRowEnvelopes(e);
        }
        const text =
          envelopes.length === 0
            ? e.type === 'snapshot'
              ? 'the view was rebuilt from the snapshot here'
              : 'not in the replay buffer any more'
            : pretty(envelopes.length === 1 ? envelopes[0] : envelopes);
        payload = el('pre', { class: 'payload', 'data-testid': 'update-payload', text });
      }
      return el(
        'li',
        { class: `log-${e.type}${open ? ' expanded' : ''}`, 'data-type': e.type, 'data-from': e.from, 'data-to': e.to, title: 'Click to show the full update' },
        el('span', { class: 'seq', text: e.from === e.to ? `#${e.from}` : `#${e.from}–${e.to}`, onclick: toggle }),
        el('span', { class: 'type', text: e.count > 1 ? `${e.type} ×${e.count}` : e.type, onclick: toggle }),
        el('span', { class: 'summary', text: e.summary, onclick: toggle }),
        payload,
      );
    }),
  );
  keepAtEnd();
}

function blockText(block) {
  switch (block.type) {
    case 'text':
      return block.text;
    case 'reasoning':
      return block.text;
    case 'tool_call':
      return `→ ${block.name}(${block.arguments})`;
    case 'tool_result':
      return `${block.status}: ${block.text}`;
    default:
      return '';
  }
}

function tokenText(compaction) {
  return compaction ? ` · ${compaction.tokensBefore} → ${compaction.tokensAfter} tokens` : '';
}

/**
 * A checkpoint among the raw messages (reference §3): nothing is deleted; the summary stands for
 * the messages up to its boundary in what the model sees next. Rewinding installs it again.
 */
function checkpointMarker(checkpoint, view) {
  const seen = view ? view.compactions.find((c) => c.compactionId === checkpoint.compactionId) : null;
  const rewind = async (event) => {
    event.stopPropagation();
    await command(sessionPath(app.selected, '/rewind'), { compactionId: checkpoint.compactionId });
  };
  const covered = checkpoint.throughMessageSequence > 0 ? `the summary stands for messages 1–${checkpoint.throughMessageSequence}` : 'nothing summarised yet';
  return el(
    'div',
    {
      class: `checkpoint checkpoint-${checkpoint.kind}`,
      'data-testid': 'checkpoint',
      'data-kind': checkpoint.kind,
      'data-compaction-id': checkpoint.compactionId,
      'data-through': checkpoint.throughMessageSequence,
    },
    el(
      'div',
      { class: 'checkpoint-head' },
      el('span', { class: 'checkpoint-title', text: `Conversation compacted (${checkpoint.kind})` }),
      el('span', { class: 'muted', 'data-testid': 'checkpoint-info', text: `${covered}${tokenText(seen)}` }),
      el('span', { class: 'spacer' }),
      el('button', { type: 'button', class: 'small', 'data-testid': 'rewind', disabled: !view || isTurnActive(view) || isSubAgent(app.selected), onclick: rewind, text: 'Rewind here' }),
    ),
    el(
      'details',
      { class: 'checkpoint-summary' },
      el('summary', { text: 'Summary' }),
      el('pre', { 'data-testid': 'checkpoint-summary', text: checkpoint.summary }),
    ),
  );
}

function renderTranscript() {
  const transcript = $('transcript');
  const keepAtEnd = followEnd(transcript);
  const view = currentView();
  const messages = (app.selected ? app.messages.get(app.selected) ?? [] : []).filter((m) => m.toolName !== 'update_plan');
  const checkpoints = [...(app.selected ? app.checkpoints.get(app.selected) ?? [] : [])].sort((a, b) => a.sequence - b.sequence);
  const rows = [];
  let next = 0;
  const markersThrough = (sequence) => {
    while (next < checkpoints.length && checkpoints[next].throughMessageSequence <= sequence) rows.push(checkpointMarker(checkpoints[next++], view));
  };
  for (const m of messages) {
    markersThrough(m.sequence - 1);
    // World State, skill bodies and agent messages are user-role but not the user's words.
    const contextual = m.role === 'user' && m.kind && m.kind !== 'normal';
    rows.push(
      el(
        'div',
        { class: `message message-${contextual ? 'context' : m.role}`, 'data-role': m.role, 'data-kind': m.kind ?? 'normal', 'data-sequence': m.sequence },
        el('div', { class: 'message-role', text: m.role === 'tool' ? `tool ${m.toolName ?? ''}` : contextual ? m.kind : m.role }),
        ...m.content
          .filter((b) => b.type !== 'provider_opaque' && !(b.type === 'tool_call' && b.name === 'update_plan'))
          .map((b) => el(b.type === 'tool_result' ? 'pre' : 'div', { class: `block block-${b.type}`, text: blockText(b) })),
      ),
    );
  }
  markersThrough(Number.MAX_SAFE_INTEGER);
  transcript.replaceChildren(...rows);
  keepAtEnd();
}

function valueText(value) {
  if (value === null || value === undefined) return '';
  if (typeof value === 'string') return value;
  return Object.entries(value)
    .map(([key, sub]) => (typeof sub === 'string' ? `${key}.${sub}` : `${key}.${valueText(sub)}`))
    .join(' | ');
}

const FIELD_KEYS = ['phase', 'sequence', 'turnId', 'toolCallId', 'modelCallIndex', 'toolCallCount', 'stopRequest', 'permissionMode'];

/** The Session actor of a session: the root's own, or a sub-agent's `agent:<id>` under its root. */
function sessionActorOf(sessionId) {
  const root = rootOf(sessionId);
  const id = root === sessionId ? `session:${sessionId}` : `agent:${sessionId}`;
  const matches = [...app.actors.values()].filter((a) => a.sessionId === root && a.machine === 'session' && a.actorId === id);
  return matches.sort((a, b) => a.startedAtMs - b.startedAtMs).at(-1) ?? null;
}

/** The actors that belong to one session: its Session actor's subtree, without nested sub-agents. */
function actorsOfSession(sessionId) {
  const own = sessionActorOf(sessionId);
  if (!own) return [];
  const all = [...app.actors.values()].filter((a) => a.sessionId === rootOf(sessionId));
  const out = [own];
  const keys = new Set([own.key]);
  for (let grew = true; grew; ) {
    grew = false;
    for (const a of all) {
      if (keys.has(a.key) || !keys.has(a.parentKey) || a.machine === 'session') continue;
      keys.add(a.key);
      out.push(a);
      grew = true;
    }
  }
  return out;
}

/** The whole context (or input and output) of one actor, as the server's tracker has it now. */
const loadingActors = new Set();

async function loadActorDetail(key) {
  const actor = app.actors.get(key);
  if (!actor || loadingActors.has(key)) return;
  loadingActors.add(key);
  let res;
  try {
    res = await api(sessionPath(actor.sessionId, `/actors/${encodeURIComponent(key)}`));
  } finally {
    loadingActors.delete(key);
  }
  if (!app.expandedActors.has(key)) return;
  const detail = res.ok
    ? { state: res.body.actor.value, status: res.body.actor.status, lastEvent: res.body.actor.lastEvent, context: res.body.context, input: res.body.input, output: res.body.output, error: res.body.error }
    : res.body.error ?? { status: res.status };
  app.expandedActors.set(key, pretty(detail));
  render('actors');
}

function renderActors() {
  const tree = $('actor-tree');
  const root = app.selected ? rootOf(app.selected) : null;
  const ownSession = app.selected ? sessionActorOf(app.selected) : null;
  const actors = [...app.actors.values()].filter((a) => a.sessionId === root);
  const visible = actors.filter((a) => app.showFinished || a.status === 'active');
  const keys = new Set(visible.map((a) => a.key));
  const children = new Map();
  for (const a of visible) {
    const parent = a.parentKey && keys.has(a.parentKey) ? a.parentKey : null;
    if (!children.has(parent)) children.set(parent, []);
    children.get(parent).push(a);
  }
  const node = (a) => {
    const kids = children.get(a.key) ?? [];
    const fields = FIELD_KEYS.filter((k) => a.fields[k] !== undefined && a.fields[k] !== null).map((k) => `${k}=${a.fields[k]}`);
    // A sub-agent's Session actor is registered as `agent:<task name>` in its root's system.
    const agent = a.machine === 'session' && a.systemId && a.systemId.startsWith('agent:');
    const name = agent ? a.systemId : a.machine ? a.actorId : `⚙ ${a.src ?? a.actorId}`;
    return el(
      'li',
      {
        class: `actor actor-${a.status}${a.machine ? ' actor-machine' : ' actor-effect'}${agent ? ' actor-agent' : ''}${a.key === app.selectedActorKey ? ' selected' : ''}${ownSession && a.key === ownSession.key && root !== app.selected ? ' actor-own-session' : ''}`,
        'data-actor-id': a.actorId,
        'data-machine': a.machine ?? '',
        'data-system-id': a.systemId ?? '',
        'data-status': a.status,
        'data-key': a.key,
      },
      el(
        'div',
        {
          class: 'actor-line',
          onclick: () => {
            app.selectedActorKey = a.key;
            if (a.machine) app.chartTab = a.machine;
            render('actors');
            render('charts');
          },
        },
        el('button', {
          type: 'button',
          class: 'actor-expand',
          'data-testid': 'actor-expand',
          title: 'Show the full context',
          text: app.expandedActors.has(a.key) ? '▾' : '▸',
          onclick: (event) => {
            event.stopPropagation();
            if (app.expandedActors.has(a.key)) app.expandedActors.delete(a.key);
            else {
              app.expandedActors.set(a.key, null);
              loadActorDetail(a.key);
            }
            render('actors');
          },
        }),
        el('span', { class: 'actor-name', title: a.actorId, text: name }),
        a.machine ? el('span', { class: 'actor-state', 'data-testid': 'actor-state', text: valueText(a.value) }) : el('span', { class: 'actor-state muted', text: a.status }),
        fields.length > 0 ? el('span', { class: 'actor-fields', text: fields.join(' ') }) : null,
      ),
      app.expandedActors.has(a.key)
        ? el('pre', { class: 'actor-detail', 'data-testid': 'actor-detail', text: app.expandedActors.get(a.key) ?? 'loading…' })
        : null,
      kids.length > 0 ? el('ul', {}, ...kids.map(node)) : null,
    );
  };
  tree.replaceChildren(...(children.get(null) ?? []).map(node));
  $('show-finished').checked = app.showFinished;

  const transitions = (app.transitions.get(root) ?? []).slice(-40).reverse();
  $('transitions').replaceChildren(
    ...transitions.map((t) =>
      el(
        'li',
        { 'data-machine': t.machine },
        el('span', { class: 'transition-actor', text: t.actorId }),
        el('span', { class: 'transition-values', text: `${valueText(t.from) || '∅'} → ${valueText(t.to)}` }),
        el('span', { class: 'transition-on', text: t.event }),
      ),
    ),
  );
}

/** The actor whose state a machine's chart shows: the selected one, else the newest of that machine. */
function chartActor(machine) {
  const selected = app.selectedActorKey ? app.actors.get(app.selectedActorKey) : null;
  if (selected && selected.machine === machine && selected.sessionId === rootOf(app.selected)) return selected;
  const candidates = actorsOfSession(app.selected).filter((a) => a.machine === machine);
  const active = candidates.filter((a) => a.status === 'active');
  return (active.length > 0 ? active : candidates).sort((a, b) => a.startedAtMs - b.startedAtMs).at(-1) ?? null;
}

function renderCharts() {
  if (app.charts.length === 0) return;
  const tabs = $('chart-tabs');
  if (tabs.childElementCount !== app.charts.length) {
    tabs.replaceChildren(
      ...app.charts.map((c) =>
        el('button', {
          type: 'button',
          'data-machine': c.id,
          text: CHART_TITLES[c.id] ?? c.id,
          onclick: () => {
            app.chartTab = c.id;
            sessionStorage.setItem(`${STORE}:chart`, c.id);
            render('charts');
          },
        }),
      ),
    );
  }
  for (const button of tabs.children) button.classList.toggle('selected', button.dataset.machine === app.chartTab);
  const chart = app.charts.find((c) => c.id === app.chartTab) ?? app.charts[0];
  const container = $('chart');
  let view = app.chartViews.get(chart.id);
  if (!view || container.dataset.machine !== chart.id) {
    view = buildChart(container, chart);
    app.chartViews.set(chart.id, view);
    container.dataset.machine = chart.id;
  }
  const actor = chartActor(chart.id);
  const transitions = app.transitions.get(rootOf(app.selected)) ?? [];
  const last = actor ? [...transitions].reverse().find((t) => t.actorKey === actor.key) : null;
  container.dataset.actor = actor ? actor.key : '';
  container.dataset.actorStatus = actor ? actor.status : '';
  view.update(actor ? actor.value : null, last ?? null);
}

// ---------------------------------------------------------------------------------------------
// The trace of a turn, read from the trace tables

async function loadTurns(sessionId) {
  const res = await api(sessionPath(sessionId, '/turns'));
  if (!res.ok || sessionId !== app.selected) return;
  app.turns.set(sessionId, res.body.turns);
  const turns = res.body.turns;
  if (!turns.some((t) => t.turnId === app.traceTurn)) app.traceTurn = turns.length > 0 ? turns[turns.length - 1].turnId : null;
  if (app.traceTurn) await loadTrace(sessionId, app.traceTurn);
  render('trace');
}

async function loadTrace(sessionId, turnId) {
  const res = await api(sessionPath(sessionId, `/turns/${encodeURIComponent(turnId)}/trace`));
  if (!res.ok) return;
  app.traces.set(turnId, res.body);
  render('trace');
}

function ms(value) {
  if (value === null || value === undefined) return '–';
  return value >= 1000 ? `${(value / 1000).toFixed(2)} s` : `${Math.round(value)} ms`;
}

function facts(pairs) {
  const dl = el('dl', { class: 'span-facts' });
  for (const [label, value, testid] of pairs) {
    if (value === null || value === undefined || value === '') continue;
    dl.append(el('dt', { text: label }), el('dd', { 'data-testid': testid, text: String(value) }));
  }
  return dl;
}

function section(title, value, testid) {
  return el('details', { class: 'span-section' }, el('summary', { text: title }), el('pre', { 'data-testid': testid, text: typeof value === 'string' ? value : pretty(value) }));
}

function messageText(m) {
  const blocks = Array.isArray(m.content) ? m.content : [m.content];
  const parts = blocks.map((b) => (b && typeof b === 'object' ? (b.type === 'tool_call' ? `→ ${b.name}(${b.arguments})` : b.type === 'tool_result' ? `${b.status}: ${b.text}` : b.text ?? pretty(b)) : String(b)));
  return `[${m.sequence ?? '·'}] ${m.role}${m.toolName ? ` ${m.toolName}` : ''}${m.kind && m.kind !== 'normal' ? ` (${m.kind})` : ''}\n${parts.join('\n')}`;
}

function modelSpan(span) {
  const tokens = span.inputTokens !== null || span.outputTokens !== null ? `${span.inputTokens ?? '?'} in · ${span.outputTokens ?? '?'} out` : null;
  const request = span.request;
  return el(
    'details',
    { class: 'span span-model_call', 'data-testid': 'trace-span', 'data-kind': 'model_call', 'data-status': span.status, 'data-span-id': span.spanId },
    el(
      'summary',
      {},
      el('span', { class: 'span-kind', text: span.parentSpanId ? 'model attempt' : `model call ${span.modelCallIndex ?? ''}` }),
      el('span', { class: 'span-status', 'data-status': span.status, text: span.status }),
      el('span', { class: 'muted', text: ms(span.durationMs) }),
      tokens ? el('span', { class: 'muted', text: tokens }) : null,
      span.finishReason ? el('span', { class: 'muted', text: `finish ${span.finishReason}` }) : null,
    ),
    facts([
      ['tokens', tokens, 'trace-tokens'],
      ['latency', `${ms(span.durationMs)} total · first token ${ms(span.ttftMs)} · stream ${ms(span.streamMs)}`, 'trace-latency'],
      ['attempts', span.attempts === null ? null : `${span.attempts} (${span.retries} ${span.retries === 1 ? 'retry' : 'retries'})`, 'trace-retries'],
      ['finish reason', span.finishReason, 'trace-finish'],
      ['error', span.errorCode ? `${span.errorCode}: ${span.errorMessage ?? ''}` : null, 'trace-error'],
      ['tools offered', span.toolNames.join(', '), 'trace-tools'],
    ]),
    request ? section(`request sent (${request.messages.length} messages${request.truncated ? ', preview' : ''})`, request.messages.map(messageText).join('\n\n'), 'trace-request') : null,
    span.systemContext ? section('system context', span.systemContext, 'trace-system') : null,
    span.response ? section('response', Array.isArray(span.response.content) ? messageText({ sequence: null, role: 'assistant', content: span.response.content }) : span.response.content, 'trace-response') : null,
    section('raw span', span, 'trace-raw'),
  );
}

function toolSpan(span) {
  return el(
    'details',
    { class: 'span span-tool_call', 'data-testid': 'trace-span', 'data-kind': 'tool_call', 'data-tool': span.toolName, 'data-status': span.status, 'data-span-id': span.spanId },
    el(
      'summary',
      {},
      el('span', { class: 'span-kind', text: `tool ${span.toolName}` }),
      el('span', { class: 'span-status', 'data-status': span.status, text: span.status }),
      el('span', { class: 'muted', text: ms(span.durationMs) }),
      span.permissionDecision ? el('span', { class: 'muted', text: `decision ${span.permissionDecision}` }) : null,
    ),
    facts([
      ['duration', ms(span.durationMs), 'trace-duration'],
      ['decision', span.permissionDecision ? `${span.permissionDecision}${span.permissionDecisionSource ? ` (${span.permissionDecisionSource})` : ''}` : null, 'trace-decision'],
      ['waited for approval', span.permissionWaitMs === null ? null : ms(span.permissionWaitMs), 'trace-wait'],
      ['error', span.errorCode ? `${span.errorCode}: ${span.errorMessage ?? ''}` : null, 'trace-error'],
    ]),
    el('pre', { 'data-testid': 'trace-arguments', text: `arguments ${pretty(span.arguments)}` }),
    span.result ? el('pre', { 'data-testid': 'trace-result', text: `${span.result.status}: ${span.result.text}` }) : null,
    section('raw span', span, 'trace-raw'),
  );
}

function renderTrace() {
  const select = $('trace-turn');
  const turns = app.selected ? app.turns.get(app.selected) ?? [] : [];
  const options = turns.map((t) => el('option', { value: t.turnId, text: `turn ${t.sequence} · ${t.status} · ${t.modelCallCount} model / ${t.toolCallCount} tool calls` }));
  select.replaceChildren(...options);
  if (app.traceTurn) select.value = app.traceTurn;
  const trace = app.traceTurn ? app.traces.get(app.traceTurn) : null;
  const box = $('trace');
  const badge = $('trace-completeness');
  if (!trace) {
    $('trace-summary').textContent = turns.length === 0 ? 'no turn yet' : '';
    badge.hidden = true;
    box.replaceChildren();
    return;
  }
  const t = trace.turn;
  $('trace-summary').textContent = `${t.model} · ${ms(t.durationMs)} · ${t.inputTokens ?? 0} in / ${t.outputTokens ?? 0} out tokens`;
  // Reference §4.14: a partial or missing trace must look different from a complete one.
  const c = trace.completeness;
  badge.hidden = !c;
  if (c) {
    badge.dataset.state = c.state;
    badge.className = `trace-completeness trace-${c.state}`;
    badge.textContent =
      c.state === 'complete'
        ? 'trace complete'
        : `trace ${c.state === 'none' ? 'missing' : 'partial'}: ${c.capturedModelCalls}/${c.expectedModelCalls} model, ${c.capturedToolCalls}/${c.expectedToolCalls} tool calls` +
          (c.runningSpans + c.outcomeUnknownSpans + c.orphanToolSpans > 0 ? `, ${c.runningSpans} running, ${c.outcomeUnknownSpans} outcome unknown, ${c.orphanToolSpans} orphaned` : '');
  }
  const open = new Set([...box.querySelectorAll('details[open]')].map((d) => d.dataset.spanId ?? d.querySelector('summary')?.textContent));
  box.replaceChildren(
    ...trace.spans.map((span) => {
      const node = span.kind === 'model_call' ? modelSpan(span) : span.kind === 'tool_call' ? toolSpan(span) : el('details', { class: 'span', 'data-testid': 'trace-span', 'data-kind': span.kind, 'data-span-id': span.spanId }, el('summary', { text: `${span.name} · ${span.status} · ${ms(span.durationMs)}` }), el('pre', { text: pretty(span) }));
      if (open.has(span.spanId)) node.open = true;
      return node;
    }),
  );
}

function selectBottomTab(tab) {
  app.bottomTab = tab;
  sessionStorage.setItem(`${STORE}:bottom`, tab);
  for (const button of $('bottom-tabs').children) button.classList.toggle('selected', button.dataset.tab === tab);
  for (const pane of document.querySelectorAll('.updates .tab-pane')) pane.hidden = pane.dataset.pane !== tab;
  if (tab === 'trace' && app.selected) loadTurns(app.selected);
}

/** The right column and the bottom row follow their drag handles; the sizes survive a reload. */
function wireResizers() {
  const root = document.body;
  const saved = JSON.parse(sessionStorage.getItem(`${STORE}:sizes`) ?? '{}');
  if (saved.right) root.style.setProperty('--right-width', `${saved.right}px`);
  if (saved.bottom) root.style.setProperty('--bottom-height', `${saved.bottom}px`);
  const drag = (handle, onMove) => {
    handle.addEventListener('pointerdown', (event) => {
      event.preventDefault();
      handle.setPointerCapture(event.pointerId);
      handle.classList.add('dragging');
      const move = (e) => onMove(e);
      const up = () => {
        handle.classList.remove('dragging');
        handle.removeEventListener('pointermove', move);
        handle.removeEventListener('pointerup', up);
        const sizes = {
          right: parseFloat(getComputedStyle(root).gridTemplateColumns.split(' ').at(-1)),
          bottom: parseFloat(getComputedStyle(root).gridTemplateRows.split(' ').at(-1)),
        };
        sessionStorage.setItem(`${STORE}:sizes`, JSON.stringify(sizes));
        for (const view of app.chartViews.values()) view.redraw();
      };
      handle.addEventListener('pointermove', move);
      handle.addEventListener('pointerup', up);
    });
  };
  drag($('resize-right'), (e) => {
    const width = Math.min(window.innerWidth - 190 - 320, Math.max(300, window.innerWidth - e.clientX));
    root.style.setProperty('--right-width', `${width}px`);
  });
  drag($('resize-bottom'), (e) => {
    const height = Math.min(window.innerHeight - 40 - 160, Math.max(140, window.innerHeight - e.clientY));
    root.style.setProperty('--bottom-height', `${height}px`);
  });
}

// ---------------------------------------------------------------------------------------------
// Commands from the page

function wire() {
  $('new-session').addEventListener('click', () => createSession());
  for (const button of $('bottom-tabs').children) button.addEventListener('click', () => selectBottomTab(button.dataset.tab));
  $('update-filter').addEventListener('change', (event) => {
    app.logFilter = event.target.value;
    render('session');
  });
  $('update-search').addEventListener('input', (event) => {
    app.logSearch = event.target.value;
    render('session');
  });
  $('trace-turn').addEventListener('change', (event) => {
    app.traceTurn = event.target.value;
    if (app.selected) loadTrace(app.selected, app.traceTurn);
  });
  $('trace-refresh').addEventListener('click', () => app.selected && loadTurns(app.selected));
  wireResizers();
  $('composer').addEventListener('submit', async (event) => {
    event.preventDefault();
    const prompt = $('prompt');
    const text = prompt.value;
    const view = currentView();
    if (!app.selected) return;
    let res;
    if (view && isTurnActive(view)) {
      res = await command(sessionPath(app.selected, `/turns/${encodeURIComponent(view.turnId)}/steer`), { text });
    } else {
      res = await command(sessionPath(app.selected, '/turns'), { clientRequestId: `page-${crypto.randomUUID()}`, text });
    }
    if (res.ok) prompt.value = '';
  });
  $('prompt').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && (event.metaKey || event.ctrlKey)) $('composer').requestSubmit();
  });
  $('compact').addEventListener('click', async () => {
    if (!app.selected) return;
    $('compact').disabled = true;
    const res = await command(sessionPath(app.selected, '/compact'), {});
    if (res.ok) {
      loadCheckpoints(app.selected);
      loadMessages(app.selected);
    }
  });
  $('cancel').addEventListener('click', async () => {
    const view = currentView();
    if (!view || !view.turnId) return;
    await command(sessionPath(app.selected, `/turns/${encodeURIComponent(view.turnId)}/cancel`), {});
  });
  $('show-finished').addEventListener('change', (event) => {
    app.showFinished = event.target.checked;
    render('actors');
  });
  window.addEventListener('pagehide', () => {
    for (const controller of app.controllers.values()) controller.save(true);
  });
  window.addEventListener('resize', () => {
    for (const view of app.chartViews.values()) view.redraw();
  });
}

async function start() {
  wire();
  selectBottomTab(app.bottomTab);
  // The charts' layouts may still be computing on the server: the live view does not wait for them.
  connect();
  const machines = await api('/api/machines');
  if (machines.ok) {
    app.charts = machines.body.machines;
    render('charts');
  }
}

// Exposed for the browser tests and for poking around in the console.
window.openworkInspector = { app, activeStateIds };

start();
