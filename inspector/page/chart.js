// Draws a statechart from the layout the server computed with ELK (src/inspection/chart-layout.ts):
// one SVG with nested state boxes, every transition routed as an arrow with its label where the
// layout put it, and the internal transitions listed inside their state. The picture zooms (wheel,
// buttons) and pans (drag); the active states, the transitions they offer and the transition just
// taken stay highlighted. Nothing here knows the machines' shapes.

const SVG_NS = 'http://www.w3.org/2000/svg';

function svgEl(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
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

function pathOf(points) {
  return points.map((p, i) => `${i === 0 ? 'M' : 'L'}${p.x},${p.y}`).join(' ');
}

/**
 * Builds the chart into `container` and returns `update(value, lastTransition)` to highlight the
 * active states, their transitions and the transition just taken, plus `zoom`, `fit` and `redraw`.
 */
export function buildChart(container, chart) {
  const layout = chart.layout;
  const nodesById = new Map();
  const walk = (node) => {
    nodesById.set(node.id, node);
    node.children.forEach(walk);
  };
  walk(chart.root);
  const edgeById = new Map(chart.edges.map((e) => [e.id, e]));
  const boxes = new Map();
  const edgeItems = new Map();

  container.replaceChildren();
  const tools = document.createElement('div');
  tools.className = 'chart-tools';
  const button = (label, title, testid, onclick) => {
    const b = document.createElement('button');
    b.type = 'button';
    b.textContent = label;
    b.title = title;
    b.dataset.testid = testid;
    b.addEventListener('click', onclick);
    tools.append(b);
  };

  const svg = svgEl('svg', { class: 'chart-svg', 'data-testid': 'chart-svg' });
  svg.append(
    svgEl('defs', {}),
  );
  const markerId = `arrow-${chart.id}`;
  const marker = svgEl('marker', { id: markerId, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 8, markerHeight: 8, markerUnits: 'userSpaceOnUse', orient: 'auto-start-reverse' });
  marker.append(svgEl('path', { d: 'M0,0 L10,5 L0,10 z' }));
  svg.firstChild.append(marker);
  const viewport = svgEl('g', { class: 'chart-viewport', 'data-testid': 'chart-viewport' });
  svg.append(viewport);
  const stateLayer = svgEl('g', { class: 'chart-states' });
  const edgeLayer = svgEl('g', { class: 'chart-edges' });
  viewport.append(stateLayer, edgeLayer);

  const font = layout.font;
  // Parents before children, so inner boxes paint over outer ones.
  const states = [...layout.states].sort((a, b) => (nodesById.get(a.id)?.path.length ?? 0) - (nodesById.get(b.id)?.path.length ?? 0));
  for (const s of states) {
    const node = nodesById.get(s.id);
    const isRoot = s.id === chart.root.id;
    const parent = node && node.path.length > 0 ? nodesById.get(s.id.slice(0, s.id.lastIndexOf('.'))) : null;
    const initial = parent && node && parent.initial === node.key;
    const g = svgEl('g', {
      class: `state state-${node?.type ?? 'atomic'}${isRoot ? ' state-root' : ''}${initial ? ' state-initial' : ''}`,
      'data-state-id': s.id,
    });
    g.append(svgEl('rect', { class: 'state-box', x: s.x, y: s.y, width: s.width, height: s.height, rx: 8, ry: 8 }));
    s.lines.forEach((line, i) => {
      const text = svgEl(
        'text',
        { class: `state-line state-${line.kind}`, x: s.x + 8, y: s.y + 6 + font.lineHeight * (i + 1) - 4, 'font-size': font.size },
        line.text,
      );
      g.append(text);
    });
    if (initial) g.append(svgEl('circle', { class: 'initial-dot', cx: s.x + 3, cy: s.y + 3, r: 3.5 }));
    stateLayer.append(g);
    boxes.set(s.id, g);
  }
  for (const e of layout.edges) {
    const edge = edgeById.get(e.id);
    const g = svgEl('g', { class: `transition transition-${edge?.kind ?? 'event'}`, 'data-edge-id': e.id, 'data-source': edge?.source ?? '', 'data-target': edge?.target ?? '' });
    g.append(svgEl('path', { class: 'arrow', d: pathOf(e.points), 'marker-end': `url(#${markerId})` }));
    if (e.label) {
      const label = svgEl('g', { class: 'transition-label' });
      label.append(svgEl('rect', { class: 'label-box', x: e.label.x, y: e.label.y, width: e.label.width, height: e.label.height, rx: 3 }));
      const text = svgEl('text', { x: e.label.x + 3, y: e.label.y + font.lineHeight - 3, 'font-size': font.size });
      text.append(svgEl('tspan', { class: 'transition-event' }, e.label.text));
      if (e.label.guard) text.append(svgEl('tspan', { class: 'transition-guard', x: e.label.x + 3, dy: font.lineHeight }, e.label.guard));
      label.append(text);
      g.append(label);
    }
    g.addEventListener('mouseenter', () => g.classList.add('hover'));
    g.addEventListener('mouseleave', () => g.classList.remove('hover'));
    edgeLayer.append(g);
    edgeItems.set(e.id, g);
  }

  container.append(tools, svg);

  // Zoom and pan: one transform on the viewport group.
  const view = { x: 0, y: 0, k: 1 };
  let userMoved = false;
  const apply = () => {
    viewport.setAttribute('transform', `translate(${view.x.toFixed(1)},${view.y.toFixed(1)}) scale(${view.k.toFixed(4)})`);
    container.dataset.zoom = view.k.toFixed(3);
  };
  const zoomAt = (factor, cx, cy) => {
    const k = Math.min(4, Math.max(0.1, view.k * factor));
    view.x = cx - ((cx - view.x) * k) / view.k;
    view.y = cy - ((cy - view.y) * k) / view.k;
    view.k = k;
    userMoved = true;
    apply();
  };
  const fit = () => {
    const w = svg.clientWidth || container.clientWidth;
    const h = svg.clientHeight || container.clientHeight;
    if (!w || !h) return;
    const k = Math.min(w / layout.width, h / layout.height, 1.5);
    view.k = k;
    view.x = (w - layout.width * k) / 2;
    view.y = Math.max(0, (h - layout.height * k) / 2);
    userMoved = false;
    apply();
  };
  /** Brings a state into view at a readable scale, without moving what the user placed. */
  let focus = null;
  const reveal = (id, force = false) => {
    focus = id;
    const s = layout.states.find((x) => x.id === id);
    const w = svg.clientWidth;
    const h = svg.clientHeight;
    if (!s || !w || !h || userMoved) return;
    if (force) view.k = 0;
    if (view.k >= 0.55) {
      const left = view.x + s.x * view.k;
      const top = view.y + s.y * view.k;
      const inside = left >= 0 && top >= 0 && left + s.width * view.k <= w && top + s.height * view.k <= h;
      if (inside) return;
    }
    fit();
    if (view.k >= 0.55) return;
    // Too small to read at fit: zoom to a readable scale around the active state.
    view.k = 0.7;
    // Centred on the state, but never past the chart's edges: no empty band beside the drawing.
    const clamp = (v, size, span) => (span * view.k <= size ? (size - span * view.k) / 2 : Math.min(0, Math.max(size - span * view.k, v)));
    view.x = clamp(w / 2 - (s.x + s.width / 2) * view.k, w, layout.width);
    view.y = clamp(h / 2 - (s.y + s.height / 2) * view.k, h, layout.height);
    apply();
  };
  button('−', 'Zoom out', 'chart-zoom-out', () => zoomAt(1 / 1.25, svg.clientWidth / 2, svg.clientHeight / 2));
  button('+', 'Zoom in', 'chart-zoom-in', () => zoomAt(1.25, svg.clientWidth / 2, svg.clientHeight / 2));
  button('Fit', 'Fit the whole chart', 'chart-fit', () => fit());

  svg.addEventListener(
    'wheel',
    (event) => {
      event.preventDefault();
      const r = svg.getBoundingClientRect();
      zoomAt(Math.exp(-event.deltaY * 0.0015), event.clientX - r.left, event.clientY - r.top);
    },
    { passive: false },
  );
  let drag = null;
  svg.addEventListener('pointerdown', (event) => {
    if (event.button !== 0) return;
    drag = { x: event.clientX, y: event.clientY, vx: view.x, vy: view.y };
    svg.setPointerCapture?.(event.pointerId);
    svg.classList.add('panning');
  });
  svg.addEventListener('pointermove', (event) => {
    if (!drag) return;
    view.x = drag.vx + event.clientX - drag.x;
    view.y = drag.vy + event.clientY - drag.y;
    userMoved = true;
    apply();
  });
  const endDrag = () => {
    drag = null;
    svg.classList.remove('panning');
  };
  svg.addEventListener('pointerup', endDrag);
  svg.addEventListener('pointercancel', endDrag);

  let active = new Set();
  let taken = new Set();
  let fitted = false;

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
      item.classList.toggle('available', active.has(edgeById.get(id)?.source));
    }
    // The taken and available arrows are drawn last, so nothing covers them.
    for (const id of [...edgeItems.keys()].filter((id) => active.has(edgeById.get(id)?.source))) edgeLayer.append(edgeItems.get(id));
    for (const id of taken) if (edgeItems.has(id)) edgeLayer.append(edgeItems.get(id));
    container.dataset.activeStates = [...active].join(' ');
    container.dataset.takenEdges = [...taken].join(' ');
    if (!fitted) {
      fit();
      fitted = svg.clientWidth > 0;
    }
    let deepest = null;
    for (const id of active) {
      const node = nodesById.get(id);
      if (node && (!deepest || node.path.length > deepest.path.length)) deepest = node;
    }
    if (deepest && deepest.id !== chart.root.id) reveal(deepest.id);
  }

  update(null, null);
  return {
    update,
    redraw: () => {
      if (userMoved) return;
      fit();
      if (focus) reveal(focus, true);
    },
    fit,
    view,
  };
}
