// app.js - the memory page (GET /): polls /v1/memory, /v1/memory/history
// and /v1/requests every second (four times a second while requests run
// or wait) and /v1/config every fifth time, and draws
// what they say: the budget as a stacked area over time with the limit and
// the kernel's RSS / PSS / VmHWM as lines, the ledger and kernel figures,
// running and queued requests with prefill progress, TTFT and tok/s, the
// prompt cache's entries, and every setting with where its value came from.
// Every figure on the page is an element with data-value = the number the
// endpoint gave (the tests compare them); text goes in with textContent
// only. The API key (when the server has one) is asked for once and kept in
// sessionStorage; "#key=..." in the address works too (a fragment is never
// sent to the server).
'use strict';

const POLL_MS = 1000, BUSY_POLL_MS = 250, CONFIG_EVERY = 5;   // faster while requests run or wait
const COLORS = {
  weights: '#6c8ebf', kv_live: '#d79b00', kv_cached: '#f2c46d', recurrent: '#b85450', workspace: '#82b366',
  scratch: '#b7d7a8', tokenizer: '#9673a6', overhead: '#a6a6a6', connections: '#67ab9f',
};
const FALLBACK = ['#e07a5f', '#3d405b', '#81b29a', '#f2cc8f', '#5e548e'];
const LINES = [
  {col: 'limit', label: 'limit', color: '#c0392b', dash: '6 4', width: 2},
  {col: 'rss', label: 'RSS (kernel)', color: '#1d1f21', dash: '', width: 1.5},
  {col: 'pss', label: 'PSS (kernel)', color: '#1d1f21', dash: '3 3', width: 1.2},
  {col: 'hwm', label: 'VmHWM (kernel peak)', color: '#7b2d26', dash: '1 3', width: 1.5},
];

const state = {key: null, history: {columns: [], samples: []}, memory: null, requests: null, config: null, tick: 0, renders: 0};
window.kvwisePage = state;          // what the page shows, for the tests and the curious

const $ = (id) => document.getElementById(id);

function fmtBytes(b) {
  if (b === null || b === undefined || !isFinite(b)) return '–';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0, v = b;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return i === 0 ? `${v} B` : `${v.toFixed(2)} ${u[i]}`;
}
const fmtSecs = (s) => s < 1 ? `${(s * 1000).toFixed(0)} ms` : s < 120 ? `${s.toFixed(1)} s` : `${(s / 60).toFixed(1)} min`;
const colorOf = (name, i) => COLORS[name] || FALLBACK[i % FALLBACK.length];

// ---- fetching ------------------------------------------------------------

function loadKey() {
  const m = /(?:^#|&)key=([^&]*)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem('kvwise-key', decodeURIComponent(m[1]));
    history.replaceState(null, '', location.pathname + location.search);
  }
  state.key = sessionStorage.getItem('kvwise-key');
}

async function get(path) {
  const headers = state.key ? {Authorization: `Bearer ${state.key}`} : {};
  const r = await fetch(path, {headers, cache: 'no-store'});
  if (r.status === 401) { const e = new Error('the API key is missing or wrong'); e.auth = true; throw e; }
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  return r.json();
}

function setStatus(text, bad) {
  const s = $('status');
  s.textContent = text;
  s.classList.toggle('bad', !!bad);
}

// ---- small DOM helpers ---------------------------------------------------

function el(tag, text, cls, value) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = text;
  if (cls) e.className = cls;
  if (value !== undefined && value !== null) e.dataset.value = String(value);
  return e;
}
function row(cells) {
  const tr = document.createElement('tr');
  for (const c of cells) tr.appendChild(c instanceof Node ? c : el('td', c));
  return tr;
}
function fill(tbody, rows, emptyText, cols) {
  tbody.replaceChildren(...rows);
  if (!rows.length) {
    const td = el('td', emptyText);
    td.colSpan = cols;
    const tr = row([td]);
    tr.className = 'empty';
    tbody.appendChild(tr);
  }
}
const numCell = (text, value, field) => { const td = el('td', text, 'num', value); if (field) td.dataset.field = field; return td; };

// ---- the chart -------------------------------------------------------------

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

function drawChart() {
  const h = state.history, chart = $('chart');
  const cols = h.columns, S = h.samples;
  const W = 900, H = 300, L = 70, R = 10, T = 10, B = 22;
  chart.replaceChildren();
  chart.dataset.samples = String(S.length);
  if (S.length < 1) return;
  const ix = (name) => cols.indexOf(name);
  const lineCols = cols.slice(ix('rss_file') + 1);
  const t1 = S[S.length - 1][0], t0 = Math.min(S[0][0], t1 - 60000);
  let ymax = 1;
  for (const s of S) {
    ymax = Math.max(ymax, s[ix('used')], s[ix('limit')], s[ix('rss')], s[ix('hwm')]);
  }
  ymax *= 1.08;
  const x = (t) => L + (W - L - R) * (t - t0) / Math.max(1, t1 - t0);
  const y = (v) => T + (H - T - B) * (1 - v / ymax);
  // grid and axis labels
  for (let k = 0; k <= 4; k++) {
    const v = ymax * k / 4;
    chart.appendChild(svg('line', {x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: '#eceeef'}));
    const t = svg('text', {x: L - 6, y: y(v) + 4, 'text-anchor': 'end'});
    t.textContent = fmtBytes(Math.round(v));
    chart.appendChild(t);
  }
  const span = (t1 - t0) / 1000;
  for (const f of [0, 0.5, 1]) {
    const t = svg('text', {x: L + (W - L - R) * f, y: H - 6, 'text-anchor': f === 0 ? 'start' : f === 1 ? 'end' : 'middle'});
    t.textContent = f === 1 ? 'now' : `-${fmtSecs(span * (1 - f))}`;
    chart.appendChild(t);
  }
  // stacked areas, first line at the bottom
  const base = S.map(() => 0);
  lineCols.forEach((name, i) => {
    const c = ix(name);
    const top = S.map((s, j) => base[j] + s[c]);
    if (top.every((v, j) => v === base[j])) return;          // an empty line: nothing to draw
    let d = `M${x(S[0][0])},${y(base[0])}`;
    S.forEach((s, j) => { d += ` L${x(s[0])},${y(top[j])}`; });
    for (let j = S.length - 1; j >= 0; j--) d += ` L${x(S[j][0])},${y(base[j])}`;
    const p = svg('path', {d: d + ' Z', fill: colorOf(name, i), 'fill-opacity': '0.85', class: 'area'});
    p.dataset.line = name;
    chart.appendChild(p);
    top.forEach((v, j) => { base[j] = v; });
  });
  // the limit and the kernel's figures as lines
  for (const ln of LINES) {
    const c = ix(ln.col);
    if (c < 0 || S.every((s) => !s[c])) continue;
    const pts = S.map((s) => `${x(s[0])},${y(s[c])}`).join(' ');
    const e = svg('polyline', {points: S.length > 1 ? pts : `${L},${y(S[0][c])} ${W - R},${y(S[0][c])}`,
                               fill: 'none', stroke: ln.color, 'stroke-width': ln.width, 'stroke-dasharray': ln.dash,
                               class: 'series'});
    e.dataset.series = ln.col;
    chart.appendChild(e);
  }
  // legend
  const leg = $('legend');
  leg.replaceChildren();
  lineCols.forEach((name, i) => {
    const s = el('span', name);
    s.style.setProperty('--c', colorOf(name, i));
    leg.appendChild(s);
  });
  for (const ln of LINES) {
    const s = el('span', ln.label, 'stroke');
    s.style.setProperty('--c', ln.color);
    leg.appendChild(s);
  }
}

// ---- the tables --------------------------------------------------------------

function drawMemory() {
  const m = state.memory, b = m.budget || {}, f = m.measured || {};
  const limit = b.limit || 0;
  const rows = [];
  for (const [name, line] of Object.entries(b.lines || {})) {
    const tr = row([el('td', name), numCell(fmtBytes(line.bytes), line.bytes, `line.${name}`),
                    el('td', limit ? `${(100 * line.bytes / limit).toFixed(1)}%` : '')]);
    tr.title = line.label || '';
    rows.push(tr);
  }
  for (const k of ['used', 'available', 'peak', 'limit'])
    rows.push(row([el('td', k, 'strong'), numCell(fmtBytes(b[k]), b[k], `budget.${k}`), el('td', '')]));
  fill($('ledger').tBodies[0], rows, 'no budget', 3);
  const meas = [['rss', 'RSS'], ['pss', 'PSS'], ['vm_hwm', 'VmHWM (peak)'], ['rss_anon', 'anonymous'],
                ['rss_file', 'file-backed (mapped weights)'], ['swap', 'swapped out'], ['mem_available', 'machine MemAvailable']];
  fill($('measured').tBodies[0], meas.filter(([k]) => k in f).map(([k, label]) =>
    row([el('td', label), numCell(fmtBytes(f[k]), f[k], `measured.${k}`), el('td', '')])), 'not measured', 3);
  // the prompt cache
  const pc = m.prompt_cache;
  if (!pc) {
    $('cachesum').textContent = '(this engine keeps no KV)';
    fill($('entries').tBodies[0], [], 'no prompt cache', 6);
    return;
  }
  $('cachesum').textContent = `${pc.sequences} of ${pc.max_sequences} sequences, ${fmtBytes(pc.bytes)} of ${fmtBytes(pc.max_bytes)}, ` +
    `hit rate ${(100 * pc.hit_rate).toFixed(0)}%, ${pc.evicted_sequences} evicted`;
  $('cachesum').dataset.value = String(pc.bytes);
  fill($('entries').tBodies[0], (pc.entries || []).map((e, i) => row([
    el('td', String(i + 1)), numCell(String(e.tokens), e.tokens, 'tokens'), numCell(fmtBytes(e.bytes), e.bytes, 'bytes'),
    numCell(fmtBytes(e.exclusive_bytes), e.exclusive_bytes, 'exclusive_bytes'), numCell(String(e.hits), e.hits, 'hits'),
    numCell(`${fmtSecs(e.idle_s)} ago`, e.idle_s, 'idle_s')])), 'empty', 6);
}

function progressCell(r) {
  const td = el('td');
  const bar = el('span', null, 'bar');
  const total = Math.max(1, r.prefill.total);
  const cached = el('i', null, 'cached');
  cached.style.width = `${100 * r.cached_tokens / total}%`;
  const done = el('i');
  done.style.left = `${100 * r.cached_tokens / total}%`;
  done.style.width = `${100 * (r.prefill.done - r.cached_tokens) / total}%`;
  bar.append(cached, done);
  const pct = el('span', `${r.prefill.done}/${r.prefill.total}`, 'pct', r.prefill.done);
  pct.dataset.field = 'prefill';
  td.append(bar, pct);
  return td;
}

function drawRequests() {
  const q = state.requests;
  $('reqcount').textContent = `(${q.running.length} running, ${q.queued.length} queued)`;
  fill($('running').tBodies[0], q.running.map((r) => {
    const tr = row([el('td', String(r.id)), el('td', r.api), el('td', r.state, null), progressCell(r),
      numCell(`${r.generated}/${r.max_tokens}`, r.generated, 'generated'),
      numCell(r.ttft_ms === null ? '–' : `${r.ttft_ms.toFixed(0)} ms`, r.ttft_ms, 'ttft_ms'),
      numCell(r.tok_s === null ? '–' : r.tok_s.toFixed(1), r.tok_s, 'tok_s'), numCell(fmtSecs(r.age_s), r.age_s, 'age_s')]);
    tr.dataset.id = String(r.id);
    tr.dataset.state = r.state;
    return tr;
  }), 'nothing running', 8);
  fill($('queued').tBodies[0], q.queued.map((r) => row([el('td', String(r.id)), el('td', r.api),
    numCell(String(r.prompt_tokens), r.prompt_tokens), numCell(fmtSecs(r.age_s), r.age_s)])), 'nothing queued', 4);
}

function drawConfig() {
  const c = state.config, src = c.sources || {};
  $('model').textContent = c.model_id ? `${c.model_id} · ${c.kv_pool || ''}` : '';
  const rows = [];
  for (const [k, v] of Object.entries(c)) {
    if (v !== null && typeof v === 'object') continue;
    const from = src[k] || (k in src ? src[k] : 'derived');
    const bytes = typeof v === 'number' && /(_bytes|memory_limit)$/.test(k) && v >= 1024;
    const tr = row([el('td', k), el('td', bytes ? `${fmtBytes(v)} (${v})` : String(v), null, v), el('td', from, `src-${from}`)]);
    tr.dataset.key = k;
    tr.dataset.source = from;
    rows.push(tr);
  }
  fill($('config').tBodies[0], rows, 'no settings', 3);
  const r = c.reload || {};
  $('reload').textContent = c.config_file ? `(${c.config_file}; SIGHUP re-reads it, ${r.count || 0} so far${r.last ? ': ' + r.last : ''})`
                                          : '(no --config file)';
  const pend = Object.entries(c.restart_needed || {});
  $('restart').hidden = !pend.length;
  $('restart').textContent = pend.length ? 'Needs a restart to apply: ' +
    pend.map(([k, v]) => `${k} ${v.running} → ${v.wanted}`).join(', ') : '';
}

// ---- the loop --------------------------------------------------------------------

function appendHistory(h) {
  if (!state.history.columns.length || h.columns.join() !== state.history.columns.join()) {
    state.history = {columns: h.columns, samples: h.samples, capacity: h.capacity};
    return;
  }
  state.history.samples.push(...h.samples);
  const extra = state.history.samples.length - (h.capacity || 600);
  if (extra > 0) state.history.samples.splice(0, extra);
}

async function tick() {
  if (state.busy) return;         // the previous poll is still out
  state.busy = true;
  try {
    const last = state.history.samples.length ? state.history.samples[state.history.samples.length - 1][0] : 0;
    const wantConfig = !state.config || state.tick % CONFIG_EVERY === 0;
    const [m, r, h, c] = await Promise.all([get('/v1/memory'), get('/v1/requests'), get(`/v1/memory/history?since=${last}`),
                                            wantConfig ? get('/v1/config') : Promise.resolve(null)]);
    state.memory = m;
    state.requests = r;
    appendHistory(h);
    if (c) state.config = c;
    drawMemory();
    drawRequests();
    drawChart();
    if (c) drawConfig();
    state.renders++;
    document.body.dataset.renders = String(state.renders);
    $('keyform').hidden = true;
    setStatus(`updated ${new Date().toLocaleTimeString()}`);
  } catch (e) {
    setStatus(e.message, true);
    if (e.auth) $('keyform').hidden = false;
  }
  state.busy = false;
  state.tick++;
  const active = state.requests && (state.requests.running.length || state.requests.queued.length);
  clearTimeout(state.timer);
  state.timer = setTimeout(tick, active ? BUSY_POLL_MS : POLL_MS);
}

function start() {
  loadKey();
  $('keyform').addEventListener('submit', (ev) => {
    ev.preventDefault();
    sessionStorage.setItem('kvwise-key', $('key').value);
    state.key = $('key').value;
    tick();
  });
  tick();
}

document.addEventListener('DOMContentLoaded', start);
