// lib.mjs - helpers for the memory-wall e2e tests: start `kvwise serve` on a
// free loopback port, wait until /health is 200, talk JSON with timeouts,
// stop it with SIGTERM. Only 127.0.0.1 is ever contacted.
import { spawn, spawnSync } from 'node:child_process';
import os from 'node:os';
import net from 'node:net';
import fs from 'node:fs';
import path from 'node:path';
import { sleep } from '../../lib/proc.mjs';
export { sleep, asanBuild } from '../../lib/proc.mjs';

export let passed = 0, failed = 0;
export function check(cond, what) {
  if (cond) passed++;
  else { failed++; console.error(`CHECK failed: ${what}`); }
}
export function finish() {
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}
export function skip(why) { console.log(`SKIPPED: ${why}`); process.exit(77); }

export function sharedModel(name) {
  const dir = process.env.KW_SHARED_DIR || path.resolve(process.env.KW_SOURCE_DIR || '.', '../shared');
  const p = path.join(dir, 'conformance', 'models', name);
  return fs.existsSync(p) ? p : null;
}

export async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
    s.on('error', reject);
  });
}


export async function startServer(args, { readyTimeoutMs = 60000 } = {}) {
  const bin = process.env.KW_BIN;
  if (!bin || !fs.existsSync(bin)) skip('KW_BIN not set');
  const port = await freePort();
  const proc = spawn(bin, ['serve', '--host', '127.0.0.1', '--port', String(port), ...args],
                     { stdio: ['ignore', 'pipe', 'pipe'] });
  const log = [];
  let exited = null;
  const onData = (d) => { for (const l of d.toString().split('\n')) if (l) log.push(l); };
  proc.stdout.on('data', onData);
  proc.stderr.on('data', onData);
  proc.on('exit', (code, sig) => { exited = { code, sig }; });
  const base = `http://127.0.0.1:${port}`;
  const t0 = Date.now();
  for (;;) {
    if (exited) throw new Error(`server exited early (${JSON.stringify(exited)}):\n${log.join('\n')}`);
    try {
      const r = await fetch(`${base}/health`, { signal: AbortSignal.timeout(2000) });
      if (r.status === 200) break;
    } catch { /* not listening yet */ }
    if (Date.now() - t0 > readyTimeoutMs) { proc.kill('SIGKILL'); throw new Error(`server not ready:\n${log.join('\n')}`); }
    await sleep(100);
  }
  return {
    proc, base, log, port,
    alive: () => exited === null,
    async stop() {
      if (exited) return exited;
      proc.kill('SIGTERM');
      for (let i = 0; i < 200 && !exited; i++) await sleep(50);
      if (!exited) { proc.kill('SIGKILL'); await sleep(100); return { code: null, sig: 'SIGKILL(forced)' }; }
      return exited;
    },
  };
}

export async function getJSON(base, p, timeoutMs = 10000) {
  const r = await fetch(base + p, { signal: AbortSignal.timeout(timeoutMs) });
  return { status: r.status, body: await r.json() };
}

// POST JSON; returns {status, headers, body(json or null), text, ms}.
export async function post(base, p, body, timeoutMs = 60000) {
  const t0 = Date.now();
  try {
    const r = await fetch(base + p, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body), signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await r.text();
    let json = null;
    try { json = JSON.parse(text); } catch { /* not JSON */ }
    return { status: r.status, headers: r.headers, body: json, text, ms: Date.now() - t0 };
  } catch (e) {
    return { status: 0, error: String(e), ms: Date.now() - t0 };
  }
}

// Streams a chat completion; returns {status, ttftMs, usage, text, reasoning,
// toolCalls, progress} (progress: the ": prompt_progress a/b" comments, one per
// prefill chunk but the last). TTFT is the first delta that carries output:
// content, reasoning (a template that opens <think> makes the first tokens
// reasoning) or a tool call.
export async function streamChat(base, body, timeoutMs = 60000) {
  const t0 = Date.now();
  const r = await fetch(base + '/v1/chat/completions', {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
    signal: AbortSignal.timeout(timeoutMs),
  });
  if (r.status !== 200) return { status: r.status, text: await r.text() };
  let ttftMs = null, usage = null, text = '', reasoning = '', buf = '', progress = 0, toolCalls = 0;
  const dec = new TextDecoder();
  for await (const chunk of r.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i).trim();
      buf = buf.slice(i + 1);
      if (line.startsWith(': prompt_progress')) progress++;
      if (!line.startsWith('data:')) continue;
      const data = line.slice(5).trim();
      if (data === '[DONE]') continue;
      const j = JSON.parse(data);
      if (j.usage) usage = j.usage;
      const d = j.choices && j.choices[0] && j.choices[0].delta;
      if (!d) continue;
      if ((d.content || d.reasoning_content || d.tool_calls) && ttftMs === null) ttftMs = Date.now() - t0;
      if (d.content) text += d.content;
      if (d.reasoning_content) reasoning += d.reasoning_content;
      if (d.tool_calls) toolCalls++;
    }
  }
  return { status: 200, ttftMs, usage, text, reasoning, toolCalls, progress };
}

// A deterministic word generator: distinct long prompts without randomness.
export function words(seed, n) {
  const vocab = ['alpha', 'river', 'stone', 'cloud', 'maple', 'ember', 'north', 'quiet', 'lumen', 'harbor',
                 'cedar', 'violet', 'copper', 'meadow', 'signal', 'tundra', 'orbit', 'willow', 'prism', 'falcon'];
  let x = seed * 2654435761 >>> 0, out = [];
  for (let i = 0; i < n; i++) { x = (x ^ (x << 13)) >>> 0; x = (x ^ (x >>> 17)) >>> 0; x = (x ^ (x << 5)) >>> 0; out.push(vocab[x % vocab.length]); }
  return out.join(' ');
}

// The fixed overhead line the server measures at startup (RSS minus
// accounted memory, plus its HTTP allowance): tests size --memory-limit
// from it so that they hold in any build (sanitizers make it larger).
export async function measuredOverhead(args) {
  const s = await startServer(args);
  const m = (await getJSON(s.base, '/v1/memory')).body;
  await s.stop();
  return m.budget.lines.overhead.bytes;
}

// The budget's fixed lines (everything but KV: weights, workspace, scratch,
// tokenizer, overhead) and the KV bytes per token, as a server started with
// `args` reports them.
export async function measuredFixed(args) {
  const s = await startServer(args);
  const m = (await getJSON(s.base, '/v1/memory')).body;
  await s.stop();
  const l = m.budget.lines;
  return { fixed: m.budget.used - l.kv_live.bytes - l.kv_cached.bytes,
           perToken: m.kv_pool.block_bytes / m.kv_pool.block_tokens };
}

// Writes a random-weight model with `kvwise mkmodel` (default: the tiny
// preset, q8_0: 3.6 MiB, a trained byte-level BPE tokenizer and a ChatML
// Jinja template) into a fresh temporary folder removed when the test
// exits. Returns its path. Takes a fraction of a second.
export function makeModel(args = ['--preset', 'tiny', '--type', 'q8_0']) {
  const bin = process.env.KW_BIN;
  if (!bin || !fs.existsSync(bin)) skip('KW_BIN not set');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kw-e2e-'));
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  const out = path.join(dir, 'model.gguf');
  const r = spawnSync(bin, ['mkmodel', ...args, '-q', '-o', out], { encoding: 'utf8', timeout: 120000 });
  if (r.status !== 0) throw new Error(`mkmodel failed: ${r.stderr}`);
  return out;
}
