// page.mjs - the live memory page (GET /) in headless Chromium (Debian's
// /usr/bin/chromium, driven by playwright-core from npm: tests/ops/setup.sh).
//
// Server A (a tiny model, --api-key, --config): the page asks for the key
// and shows no data without it; with the key it renders; the chart draws
// (stacked areas of the ledger lines, the limit and the kernel's RSS /
// PSS / VmHWM lines, several samples); every figure shown (data-value and
// its text) equals the /v1/memory body the page received, and the stable
// ones (ledger lines, limit, cache entries) equal a /v1/memory the test
// fetches itself at the same moment (RSS within 5%); the cache entries and
// the settings with their sources (config, flag, default) are there; no
// request leaves the server's origin, no console error (CSP included).
// Server B (the stub engine, 100 ms per step, 32-token prefill chunks): a
// 480-token prompt's prefill progress shows up on the page while it runs
// (two different done/total figures, state "prefill"), then the request
// leaves the table. A screenshot goes to build/test-artifacts/memory-page.png
// (KW_UPDATE_SCREENSHOT=1 also writes docs/images/memory-page.png).
// Exit 77 when Chromium or the npm registry is missing.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { spawnSync } from 'node:child_process';
import { check, finish, makeModel, startServer, request, sleep, tmp, waitExit } from '../reliability/lib.mjs';

const here = path.dirname(new URL(import.meta.url).pathname);
const CHROMIUM = '/usr/bin/chromium';
if (!fs.existsSync(CHROMIUM)) { console.log('SKIPPED: /usr/bin/chromium absent (scripts/install-deps.sh installs it)'); process.exit(77); }
const setup = spawnSync('bash', [path.join(here, 'setup.sh')], { stdio: 'inherit' });
if (setup.status === 77) process.exit(77);
if (setup.status !== 0) { console.error('setup.sh failed'); process.exit(1); }
const require = createRequire(path.join(here, 'npm', 'node_modules', 'x.js'));
const { chromium } = require('playwright-core');

const KEY = 'page-test-key';
const model = makeModel();
const conf = path.join(tmp, 'page.conf');
fs.writeFileSync(conf, 'prompt-cache-size = 6\nmax-queue 16\n');
const A = await startServer(model, ['--api-key', KEY, '--memory-limit', '768MiB', '--config', conf]);
const B = await startServer(model, ['--stub-engine', '--stub-kv', '--stub-step-us', '100000', '--prefill-step-size', '32',
                                     '--memory-limit', '512MiB']);
const auth = { Authorization: `Bearer ${KEY}` };
for (let i = 0; i < 4; i++)
  await request(A.port, 'POST', '/v1/chat/completions', { headers: auth,
    body: { messages: [{ role: 'user', content: `question ${i}: ` + 'tell me about memory '.repeat(4) }], max_tokens: 16, temperature: 0 } });

const fmtBytes = (b) => {          // the page's formatting, to check the text shown
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0, v = b;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return i === 0 ? `${v} B` : `${v.toFixed(2)} ${u[i]}`;
};

const userDir = fs.mkdtempSync(path.join(tmp, 'chromium-'));
// a new --user-data-dir (playwright passes it from launchPersistentContext)
const ctx = await chromium.launchPersistentContext(userDir, {
  executablePath: CHROMIUM, headless: true, viewport: { width: 1280, height: 1100 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
         '--disable-component-update', '--disable-sync'],
});
const page = await ctx.newPage();
const errors = [], foreign = [], memBodies = [];
page.on('console', (m) => { if (m.type() === 'error' && !/status of 401/.test(m.text())) errors.push(m.text()); });   // the 401s before the key are expected
page.on('pageerror', (e) => errors.push(String(e)));
const originA = `http://127.0.0.1:${A.port}`, originB = `http://127.0.0.1:${B.port}`;
page.on('request', (r) => { if (!r.url().startsWith(originA) && !r.url().startsWith(originB)) foreign.push(r.url()); });
page.on('response', async (r) => {
  if (r.url().startsWith(originA + '/v1/memory') && !r.url().includes('history') && r.status() === 200)
    try { memBodies.push(await r.text()); } catch { /* navigation */ }
});
const waitFor = async (fn, ms, what) => {
  const t0 = Date.now();
  for (;;) {
    const v = await fn().catch(() => false);
    if (v) return v;
    if (Date.now() - t0 > ms) { check(false, `timed out waiting for ${what}`); return null; }
    await sleep(50);
  }
};

// without the key: the form, no data
await page.goto(originA + '/');
await waitFor(() => page.isVisible('#keyform'), 5000, 'the key form');
check(/API key/.test(await page.textContent('#status')), 'the status says the key is missing', await page.textContent('#status'));
check((await page.$$('#ledger [data-value]')).length === 0, 'no figure shown without the key');
// with it
await page.fill('#key', KEY);
await page.click('#keyform button');
await waitFor(async () => Number(await page.getAttribute('body', 'data-renders')) >= 2, 8000, 'two renders');
check(!(await page.isVisible('#keyform')), 'the form is gone once the key works');

// the chart
const chart = await page.evaluate(() => {
  const c = document.getElementById('chart');
  return { samples: Number(c.dataset.samples), areas: [...c.querySelectorAll('path.area')].map((p) => p.dataset.line),
           series: [...c.querySelectorAll('polyline.series')].map((p) => p.dataset.series) };
});
check(chart.samples >= 2, 'the chart has samples', chart);
check(chart.areas.includes('weights') && chart.areas.includes('overhead') && chart.areas.length >= 4, 'stacked areas of the ledger lines', chart.areas);
check(['limit', 'rss', 'pss', 'hwm'].every((s) => chart.series.includes(s)), 'limit, RSS, PSS and VmHWM lines', chart.series);

// the figures shown = the /v1/memory the page received, and = one fetched now
const shown = await page.evaluate(() => ({
  fields: Object.fromEntries([...document.querySelectorAll('#ledger [data-field], #measured [data-field]')]
    .map((e) => [e.dataset.field, { v: Number(e.dataset.value), text: e.textContent }])),
  entries: [...document.querySelectorAll('#entries tbody tr')].filter((tr) => !tr.classList.contains('empty'))
    .map((tr) => Object.fromEntries([...tr.querySelectorAll('[data-field]')].map((td) => [td.dataset.field, Number(td.dataset.value)]))),
  memory: JSON.stringify(window.kvwisePage.memory),
}));
const mine = (await request(A.port, 'GET', '/v1/memory', { headers: auth })).json;
const got = JSON.parse(shown.memory);
check(memBodies.some((b) => JSON.stringify(JSON.parse(b)) === shown.memory), 'the page shows a body the server sent');
let same = 0, wrongText = [];
for (const [name, line] of Object.entries(got.budget.lines)) {
  const f = shown.fields[`line.${name}`];
  if (f && f.v === line.bytes) same++;
  if (!f || f.text !== fmtBytes(line.bytes)) wrongText.push([name, f && f.text]);
}
check(same === Object.keys(got.budget.lines).length && same >= 8, 'every ledger line shown as received', shown.fields);
check(!wrongText.length, 'each line reads as its bytes', wrongText);
for (const k of ['rss', 'pss', 'vm_hwm', 'rss_anon', 'rss_file'])
  check(shown.fields[`measured.${k}`] && shown.fields[`measured.${k}`].v === got.measured[k], `measured ${k} shown as received`);
check(shown.fields['budget.limit'].v === 768 * 1024 * 1024 && shown.fields['budget.limit'].text === '768.00 MiB', 'the limit');
for (const [name, line] of Object.entries(mine.budget.lines))
  check(line.bytes === got.budget.lines[name].bytes, `ledger ${name} equals /v1/memory now`, [line.bytes, got.budget.lines[name].bytes]);
check(Math.abs(mine.measured.rss - got.measured.rss) <= 0.05 * mine.measured.rss, 'RSS equals /v1/memory now within 5%', [mine.measured.rss, got.measured.rss]);
check(shown.entries.length === mine.prompt_cache.entries.length && shown.entries.length >= 2, 'the cache entries', shown.entries);
check(shown.entries.every((e, i) => e.tokens === mine.prompt_cache.entries[i].tokens && e.bytes === mine.prompt_cache.entries[i].bytes),
  'entries equal /v1/memory now', [shown.entries, mine.prompt_cache.entries]);

// settings and where they came from
const src = await page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#config tbody tr[data-key]')]
  .map((tr) => [tr.dataset.key, tr.dataset.source])));
check(src.prompt_cache_size === 'config' && src.memory_limit === 'flag' && src.kv_block_size === 'default', 'sources shown', src);

// prefill progress on server B while a long prompt runs
const p2 = await ctx.newPage();
p2.on('pageerror', (e) => errors.push(String(e)));
await p2.goto(originB + '/');
await waitFor(async () => Number(await p2.getAttribute('body', 'data-renders')) >= 1, 5000, 'server B renders');
const long = request(B.port, 'POST', '/v1/completions', { body: { prompt: 'x'.repeat(480), max_tokens: 2 } });
const seen = new Set();
const t0 = Date.now();
while (Date.now() - t0 < 8000) {
  const r = await p2.evaluate(() => {
    const tr = document.querySelector('#running tbody tr[data-state]');
    return tr ? { state: tr.dataset.state, prefill: tr.querySelector('[data-field="prefill"]').textContent } : null;
  });
  if (r && r.state === 'prefill') seen.add(r.prefill);
  if (seen.size >= 2) break;
  await sleep(100);
}
const figs = [...seen].map((s) => s.split('/').map(Number));
check(figs.length >= 2 && figs.every(([d, t]) => t >= 480 && d > 0 && d < t), 'prefill progress shown while it runs', [...seen]);
const done = await long;
check(done.status === 200, 'the long request finishes', done.status);
await waitFor(async () => (await p2.$$('#running tbody tr[data-state]')).length === 0, 4000, 'the request leaves the table');
await p2.close();

// a screenshot of server A with the requests shown
const art = path.join(process.env.KW_BUILD_DIR || tmp, 'test-artifacts');
fs.mkdirSync(art, { recursive: true });
await page.screenshot({ path: path.join(art, 'memory-page.png'), fullPage: true });
check(fs.statSync(path.join(art, 'memory-page.png')).size > 20000, 'screenshot saved', path.join(art, 'memory-page.png'));
if (process.env.KW_UPDATE_SCREENSHOT)
  fs.copyFileSync(path.join(art, 'memory-page.png'), path.join(process.env.KW_SOURCE_DIR || '.', 'docs', 'images', 'memory-page.png'));

check(!foreign.length, 'no request leaves the server (no CDN)', foreign);
check(!errors.length, 'no console or page error', errors);
await ctx.close();
A.proc.kill('SIGTERM');
B.proc.kill('SIGTERM');
const ea = await waitExit(A.proc, 10000), eb = await waitExit(B.proc, 10000);
check(ea.code === 0 && eb.code === 0, 'servers exit 0', [ea, eb]);
finish('page', [A, B]);
