// The explorer's stage: every step of the replay arrives once (parts + per-step part ids), and
// Next, Back, the slider, autoplay, the keyboard and block clicks move through it here, with no
// server run. Only HTML the server built with autoescaping goes into innerHTML (the parts and
// the history tables); everything this file writes itself is set as textContent.
const SPEEDS = { '0.5x': 3000, '1x': 1500, '2x': 750, '4x': 350 };

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function button(cls, label, title) {
  const b = el('button', 'px-sbtn ' + cls, label);
  b.type = 'button';
  b.title = title;
  b.setAttribute('aria-label', title);
  return b;
}

function build(root) {
  const bar = el('div', 'px-stage-bar');
  const s = {
    root, bar,
    first: button('px-b-first', '\u23EE', 'First: before step 1'),
    back: button('px-b-back', '\u2039', 'Back one step (Left arrow)'),
    range: el('input', 'px-range'),
    label: el('div', 'px-range-label'),
    next: button('px-b-next', 'Next \u203A', 'Next step (Right arrow)'),
    last: button('px-b-last', '\u23ED', 'Last step'),
    play: button('px-b-play', 'Play', 'Play: one step after another'),
    speed: el('select', 'px-speed'),
    full: button('px-b-full-page', 'Full page', 'Leave presenter mode: the sidebar and every view of the step come back'),
    body: el('div', 'px-stage-body'),
    share: el('details', 'px-details px-share'),
    shareCode: el('code', 'px-share-link'),
    slots: [], shown: [], timer: null, urlTimer: null,
  };
  s.range.type = 'range'; s.range.min = '0'; s.range.step = '1';
  s.range.setAttribute('aria-label', 'Step');
  s.range.title = '0 = before the first step. Keys: Left and Right arrows.';
  s.next.classList.add('px-primary');
  for (const name of Object.keys(SPEEDS)) {
    const o = el('option', '', name); o.value = name; s.speed.appendChild(o);
  }
  s.speed.value = '1x';
  s.speed.setAttribute('aria-label', 'Speed');
  const rangeBox = el('div', 'px-range-box');
  rangeBox.append(s.label, s.range);
  bar.append(s.first, s.back, rangeBox, s.next, s.last, s.play, s.speed, s.full);
  s.share.append(el('summary', '', 'Share this view'), s.shareCode,
    el('div', 'px-cap', 'The link holds the scenario, settings, playground steps, the step and presenter mode.'));
  root.replaceChildren(bar, s.body, s.share);
  return s;
}

function clamp(k, n) { return Math.max(0, Math.min(n, k)); }

function viewUrl(s) {
  const u = new URL(window.location.href);
  u.searchParams.set('step', String(s.k));
  if (s.block === null) u.searchParams.delete('block'); else u.searchParams.set('block', String(s.block));
  return u.href;
}

function writeUrl(s) {
  const href = viewUrl(s);
  if (href !== window.location.href) window.history.replaceState(window.history.state, '', href);
  s.shareCode.textContent = href;
}

// The address bar follows the step when the page is next idle, after the frame that shows the
// step: replaceState is a round trip to the browser's own process (about 10 ms a call on a busy
// machine), which a Next should not wait for. The share box says the new address at once.
function writeUrlSoon(s) {
  s.shareCode.textContent = viewUrl(s);
  if (s.urlSoon) return;
  s.urlSoon = true;
  const later = window.requestIdleCallback || ((f) => setTimeout(f, 50));
  later(() => { s.urlSoon = false; writeUrl(s); }, { timeout: 250 });
}

function historyBox(s) {
  const box = el('div', 'px-history-box');
  const row = el('div', 'px-history-bar');
  const lab = el('label', 'px-history-label', 'Block history: block id ');
  const input = el('input', 'px-block-input');
  input.type = 'number'; input.min = '0'; input.max = String(Math.max(0, s.data.nblocks - 1));
  input.placeholder = 'click a block';
  if (s.block !== null) input.value = String(s.block);
  input.addEventListener('change', () => {
    const v = parseInt(input.value, 10);
    select(s, Number.isNaN(v) || v < 0 || v >= s.data.nblocks ? null : v);
  });
  lab.appendChild(input);
  row.appendChild(lab);
  box.appendChild(row);
  if (s.block !== null) {
    const panel = el('section', 'px-box px-history');
    const head = el('div', 'px-history-head');
    head.append(el('b', '', 'History of block ' + s.block),
      el('span', '', ' (every step of the scenario; later steps greyed) '));
    const close = button('px-b-close-hist', 'Close', 'Close the history');
    close.addEventListener('click', () => select(s, null));
    head.appendChild(close);
    const table = el('div', 'px-history-table');
    // built on the server with autoescaping (explorer.view.stage.history_table)
    table.innerHTML = s.data.histories[String(s.block)]
      || '<div class="px-empty">Nothing has happened to this block in this scenario.</div>';
    for (const tr of table.querySelectorAll('tr[data-px-step]')) {
      const st = Number(tr.dataset.pxStep);
      tr.classList.toggle('px-cur', st === s.k);
      tr.classList.toggle('px-future', st > s.k);
    }
    panel.append(head, table);
    box.appendChild(panel);
  }
  return box;
}

function markSelected(s) {
  for (const e of s.body.querySelectorAll('.px-sel')) e.classList.remove('px-sel');
  if (s.block === null) return;
  for (const e of s.body.querySelectorAll('[data-px-block="' + s.block + '"]')) e.classList.add('px-sel');
}

function draw(s) {
  const d = s.data;
  const n = d.steps.length - 1;
  s.k = clamp(s.k, n);
  const ids = d.steps[s.k];
  for (let i = 0; i < ids.length; i++) {
    if (!s.slots[i]) { s.slots[i] = el('div', 'px-part'); s.body.appendChild(s.slots[i]); }
    if (s.shown[i] !== ids[i]) {
      s.slots[i].innerHTML = d.parts[ids[i]]; // server-built, autoescaped
      s.shown[i] = ids[i];
    }
  }
  while (s.slots.length > ids.length) { s.slots.pop().remove(); s.shown.pop(); }
  for (const slot of s.body.querySelectorAll('[data-px-history-slot]')) slot.replaceChildren(historyBox(s));
  markSelected(s);
  s.range.max = String(n);
  s.range.value = String(s.k);
  s.range.disabled = n === 0;
  s.label.textContent = n === 0 ? 'This scenario has no steps yet: add some in the playground.' : 'Step ' + s.k + ' of ' + n;
  s.label.hidden = d.presenter && n > 0;
  s.first.disabled = s.back.disabled = s.k === 0;
  s.next.disabled = s.last.disabled = s.k >= n;
  s.play.disabled = n === 0;
  s.play.textContent = s.timer ? 'Pause' : 'Play';
  s.play.setAttribute('aria-pressed', s.timer ? 'true' : 'false');
  s.full.hidden = !d.presenter;
  s.share.hidden = d.presenter;
  s.root.dataset.pxStep = String(s.k);
  window.__pxStageKept = { nav: s.nav, k: s.k, block: s.block };
  writeUrlSoon(s);
  fitPresenter(s);
}

// Presenter mode: the NOW box (the sentence and the lesson note) keeps its whole height, and
// the panels and the state beside them take what is left of the screen, each scrolling alone.
function fitPresenter(s) {
  if (!s.data.presenter) return;
  const minPx = 8 * parseFloat(getComputedStyle(document.documentElement).fontSize);
  for (const box of s.body.querySelectorAll('.px-pres-panel, .px-pres-state')) {
    const top = box.getBoundingClientRect().top;
    box.style.height = Math.max(minPx, window.innerHeight - top - 6) + 'px';
  }
}

function go(s, k) { s.k = clamp(k, s.data.steps.length - 1); draw(s); }

function select(s, b) { s.block = b; draw(s); }

function stop(s) { if (s.timer) { clearInterval(s.timer); s.timer = null; } }

function play(s) {
  if (s.timer) { stop(s); draw(s); return; }
  if (s.k >= s.data.steps.length - 1) s.k = 0;
  s.timer = setInterval(() => {
    if (s.k >= s.data.steps.length - 1) { stop(s); draw(s); return; }
    go(s, s.k + 1);
    if (s.k >= s.data.steps.length - 1) { stop(s); draw(s); }
  }, SPEEDS[s.speed.value] || 1500);
  draw(s);
}

function wire(s, setTriggerValue) {
  s.first.addEventListener('click', () => go(s, 0));
  s.back.addEventListener('click', () => go(s, s.k - 1));
  s.next.addEventListener('click', () => go(s, s.k + 1));
  s.last.addEventListener('click', () => go(s, s.data.steps.length - 1));
  s.range.addEventListener('input', () => go(s, Number(s.range.value)));
  s.play.addEventListener('click', () => play(s));
  s.speed.addEventListener('change', () => { if (s.timer) { stop(s); play(s); } });
  s.full.addEventListener('click', () => setTriggerValue('presenter', false));
  s.body.addEventListener('click', (e) => {
    // "Why it missed": the button to the step whose allocation evicted the first missed block
    const g = e.target && e.target.closest ? e.target.closest('[data-px-goto]') : null;
    if (g) {
      const k = parseInt(g.getAttribute('data-px-goto'), 10);
      if (!Number.isNaN(k)) { stop(s); go(s, k); }
      return;
    }
    const t = e.target && e.target.closest ? e.target.closest('[data-px-block]') : null;
    if (!t) return;
    const id = parseInt(t.getAttribute('data-px-block'), 10);
    if (!Number.isNaN(id) && id >= 0 && id < s.data.nblocks) select(s, id);
  });
  s.onKey = (e) => {
    const t = e.target;
    if (e.altKey || e.ctrlKey || e.metaKey || (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName)) && t !== s.range)) return;
    if (e.key === 'ArrowRight') { e.preventDefault(); go(s, s.k + 1); }
    else if (e.key === 'ArrowLeft') { e.preventDefault(); go(s, s.k - 1); }
  };
  document.addEventListener('keydown', s.onKey);
  s.onResize = () => fitPresenter(s);
  window.addEventListener('resize', s.onResize);
  // Anything above the panels that changes height after a draw (the web fonts arriving, an
  // element above the stage settling) moves them: fit again when the page's column resizes. The
  // fit is idempotent, so the resize it causes itself ends there.
  if (typeof ResizeObserver === 'function') {
    s.fitObserver = new ResizeObserver(() => fitPresenter(s));
    s.fitObserver.observe(s.root.closest('[data-testid="stMainBlockContainer"]') || document.body);
  }
  // The server rewrites the URL when a setting changes; the step it holds stays the browser's.
  s.urlTimer = setInterval(() => writeUrl(s), 400);
}

export default function ({ data, parentElement, setTriggerValue }) {
  let s = parentElement.__pxStage;
  if (!s || !s.root.isConnected) {
    s = build(parentElement);
    parentElement.__pxStage = s;
    // Mounted again (the page's layout moved it, a reconnect): the step the browser was on wins
    // over the server's, which only knows the steps it moved to itself.
    const kept = window.__pxStageKept;
    const own = kept && kept.nav === data.nav;
    s.k = own ? kept.k : Number(data.step) || 0;
    s.block = own ? kept.block : data.block === null || data.block === undefined ? null : Number(data.block);
    s.nav = data.nav;
    wire(s, setTriggerValue);
  } else if (s.nav !== data.nav) {
    // the server moved the view (a new lesson, a playground step): its step wins
    s.nav = data.nav;
    s.k = Number(data.step) || 0;
    s.block = data.block === null || data.block === undefined ? null : Number(data.block);
  }
  if (s.data && s.data.version !== data.version) { s.shown = []; }
  s.data = data;
  if (s.block !== null && !(s.block >= 0 && s.block < data.nblocks)) s.block = null;
  draw(s);
  return () => {
    stop(s);
    clearInterval(s.urlTimer);
    if (s.fitObserver) s.fitObserver.disconnect();
    document.removeEventListener('keydown', s.onKey);
    window.removeEventListener('resize', s.onResize);
    parentElement.__pxStage = null;
  };
}
