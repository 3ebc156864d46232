// Draws a statechart from the chart model the server derives from the machine definition
// (src/inspection/charts.ts): nested boxes for the state hierarchy, each state's transitions, and
// arrows for the transitions out of the active states. Nothing here knows the machines' shapes.

const SVG_NS = 'http://www.w3.org/2000/svg';

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** `xstate.done.actor.callModel` → `done: callModel`, `''` → `always`. */
export function eventLabel(edge) {
  switch (edge.kind) {
    case 'always':
      return 'always';
    case 'done':
      return `done: ${edge.event.slice('xstate.done.actor.'.length)}`;
    case 'error':
      return `error: ${edge.event.slice('xstate.error.actor.'.length)}`;
    case 'after':
      return `after ${edge.event.split('.')[2] ?? ''}`;
    default:
      return edge.event;
  }
}

/** The ids of the state nodes a state value makes active, the root included. */
export function activeStateIds(chart, value) {
  const ids = new Set();
  if (value === null || value === undefined) return ids;
  const visit = (node, v) => {
    ids.add(node.id);
    if (typeof v === 'string') {
      const child = node.children.find((c) => c.key === v);
      if (child) ids.add(child.id);
      return;
    }
    if (v && typeof v === 'object') {
      for (const [key, sub] of Object.entries(v)) {
        const child = node.children.find((c) => c.key === key);
        if (child) visit(child, sub);
      }
    }
  };
  visit(chart.root, value);
  return ids;
}

function shortTarget(edge, byId) {
  if (edge.targetless) return '(stays)';
  const target = byId.get(edge.target);
  return target ? target.path.join('.') || target.key : edge.target;
}

/**
 * Builds the chart into `container` and returns `update(value, lastTransition)` to highlight the
 * active states, their transitions, and the transition just taken.
 */
export function buildChart(container, chart) {
  const byId = new Map();
  const boxes = new Map();
  const edgeItems = new Map();
  const outgoing = new Map();
  const edgeById = new Map(chart.edges.map((e) => [e.id, e]));
  for (const edge of chart.edges) {
    if (!outgoing.has(edge.source)) outgoing.set(edge.source, []);
    outgoing.get(edge.source).push(edge);
  }

  container.replaceChildren();
  const body = el('div', 'chart-body');
  body.dataset.machine = chart.id;
  const svg = document.createElementNS(SVG_NS, 'svg');
  svg.setAttribute('class', 'chart-arrows');
  svg.innerHTML =
    '<defs><marker id="arrow-' + chart.id + '" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" /></marker></defs>';

  function renderNode(node, isRoot) {
    byId.set(node.id, node);
    const box = el('div', `state state-${node.type}${isRoot ? ' state-root' : ''}`);
    box.dataset.stateId = node.id;
    const head = el('div', 'state-head');
    head.append(el('span', 'state-key', isRoot ? `${node.key} (machine)` : node.key));
    if (node.type === 'final') head.append(el('span', 'badge', 'final'));
    for (const inv of node.invoke) head.append(el('span', 'badge badge-invoke', `invoke ${inv.src}`));
    box.append(head);
    const edges = outgoing.get(node.id) ?? [];
    if (edges.length > 0) {
      const list = el('ul', 'transitions');
      for (const edge of edges) {
        const item = el('li', `transition transition-${edge.kind}`);
        item.dataset.edgeId = edge.id;
        item.append(el('span', 'transition-event', eventLabel(edge)));
        if (edge.guard) item.append(el('span', 'transition-guard', `[${edge.guard}]`));
        item.append(el('span', 'transition-target', `→ ${shortTarget(edge, byId)}`));
        item.addEventListener('mouseenter', () => drawArrows(edge.id));
        item.addEventListener('mouseleave', () => drawArrows(null));
        list.append(item);
        edgeItems.set(edge.id, item);
      }
      box.append(list);
    }
    if (node.children.length > 0) {
      const children = el('div', 'state-children');
      for (const child of node.children) {
        const childBox = renderNode(child, false);
        if (node.initial === child.key) childBox.classList.add('state-initial');
        children.append(childBox);
      }
      box.append(children);
    }
    boxes.set(node.id, box);
    return box;
  }

  body.append(renderNode(chart.root, true));
  body.append(svg);
  container.append(body);
  // Targets are resolved after the whole tree is known.
  for (const edge of chart.edges) {
    const item = edgeItems.get(edge.id);
    if (item) item.querySelector('.transition-target').textContent = `→ ${shortTarget(edge, byId)}`;
  }

  let active = new Set();
  let taken = new Set();

  function rectOf(id) {
    const box = boxes.get(id);
    if (!box) return null;
    const r = box.getBoundingClientRect();
    const b = body.getBoundingClientRect();
    return { x: r.left - b.left, y: r.top - b.top, w: r.width, h: r.height };
  }

  function clip(rect, toward) {
    const cx = rect.x + rect.w / 2;
    const cy = rect.y + Math.min(rect.h / 2, 14);
    const dx = toward.x - cx;
    const dy = toward.y - cy;
    if (dx === 0 && dy === 0) return { x: cx, y: cy };
    const sx = dx === 0 ? Infinity : rect.w / 2 / Math.abs(dx);
    const sy = dy === 0 ? Infinity : Math.min(rect.h / 2, 14) / Math.abs(dy);
    const s = Math.min(sx, sy, 1);
    return { x: cx + dx * s, y: cy + dy * s };
  }

  function drawArrows(hoverEdgeId) {
    for (const old of svg.querySelectorAll('path.arrow')) old.remove();
    svg.setAttribute('width', String(body.scrollWidth));
    svg.setAttribute('height', String(body.scrollHeight));
    const drawn = new Set();
    const edges = chart.edges.filter(
      (e) => e.id === hoverEdgeId || taken.has(e.id) || (active.has(e.source) && !e.targetless && e.target !== e.source && e.source !== chart.root.id),
    );
    for (const edge of edges) {
      const key = `${edge.source}>${edge.target}`;
      if (drawn.has(key) && edge.id !== hoverEdgeId && !taken.has(edge.id)) continue;
      drawn.add(key);
      const from = rectOf(edge.source);
      const to = rectOf(edge.target);
      if (!from || !to) continue;
      const fc = { x: from.x + from.w / 2, y: from.y + Math.min(from.h / 2, 14) };
      const tc = { x: to.x + to.w / 2, y: to.y + Math.min(to.h / 2, 14) };
      const a = clip(from, tc);
      const b = clip(to, fc);
      const mx = (a.x + b.x) / 2 - (b.y - a.y) * 0.15;
      const my = (a.y + b.y) / 2 + (b.x - a.x) * 0.15;
      const path = document.createElementNS(SVG_NS, 'path');
      path.setAttribute('d', `M${a.x},${a.y} Q${mx},${my} ${b.x},${b.y}`);
      const cls = edge.id === hoverEdgeId ? 'arrow arrow-hover' : taken.has(edge.id) ? 'arrow arrow-taken' : 'arrow';
      path.setAttribute('class', cls);
      path.setAttribute('marker-end', `url(#arrow-${chart.id})`);
      svg.append(path);
    }
  }

  function update(value, lastTransition) {
    active = activeStateIds(chart, value);
    taken = new Set();
    if (lastTransition && lastTransition.to && JSON.stringify(lastTransition.to) === JSON.stringify(value)) {
      const before = activeStateIds(chart, lastTransition.from);
      for (const edge of chart.edges) {
        if (edge.event !== lastTransition.event || !before.has(edge.source)) continue;
        if (edge.targetless || active.has(edge.target)) taken.add(edge.id);
      }
    }
    for (const [id, box] of boxes) box.classList.toggle('active', active.has(id));
    for (const [id, item] of edgeItems) {
      item.classList.toggle('taken', taken.has(id));
      item.classList.toggle('available', active.has(edgeById.get(id).source));
    }
    container.dataset.activeStates = [...active].join(' ');
    drawArrows(null);
    revealDeepest();
  }

  /** Keeps the innermost active state in view when the chart is larger than its panel. */
  function revealDeepest() {
    let deepest = null;
    for (const id of active) {
      const node = byId.get(id);
      if (node && (!deepest || node.path.length > deepest.path.length)) deepest = node;
    }
    const box = deepest ? boxes.get(deepest.id) : null;
    if (!box || deepest.id === chart.root.id) return;
    const c = container.getBoundingClientRect();
    const r = box.getBoundingClientRect();
    if (r.top < c.top || r.bottom > c.bottom) container.scrollTop += r.top - c.top - 40;
    if (r.left < c.left || r.right > c.right) container.scrollLeft += r.left - c.left - 40;
  }

  update(null, null);
  return { update, redraw: () => drawArrows(null) };
}
