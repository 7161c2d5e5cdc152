// lib.mjs - what the reliability tests share: a tiny model made by
// `$KW_BIN mkmodel --preset tiny`, a server on a free loopback port, HTTP
// helpers (node:http and raw sockets), /proc/<pid> thread/fd/RSS counts,
// and a check() that counts failures. Every wait here is bounded in time.
import { spawn, spawnSync } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sleep } from '../lib/proc.mjs';
export { sleep, asanBuild } from '../lib/proc.mjs';

export const BIN = process.env.KW_BIN;
if (!BIN) { console.error('KW_BIN not set'); process.exit(2); }

let passed = 0, failed = 0;
export function check(cond, what, extra) {
  if (cond) passed++;
  else { failed++; console.error(`CHECK failed: ${what}${extra !== undefined ? ' :: ' + JSON.stringify(extra).slice(0, 400) : ''}`); }
  return cond;
}
export function finish(name, servers = []) {
  for (const s of servers) if (s && s.proc.exitCode === null) s.proc.kill('SIGKILL');
  console.log(`${name}: ${passed} checks passed, ${failed} failed`);
  if (failed) for (const s of servers) if (s) console.error('--- server log tail ---\n' + s.log().slice(-3000));
  process.exit(failed ? 1 : 0);
}
export const T0 = Date.now();
export const stage = (name) => { if (process.env.KW_TEST_VERBOSE) console.log(`${((Date.now() - T0) / 1e3).toFixed(2)}s ${name}`); };

// A tiny model once per process (skip with 77 when this build cannot make one).
export const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kw-rel-'));
process.on('exit', () => { try { fs.rmSync(tmp, { recursive: true, force: true }); } catch { /* ignore */ } });
export function makeModel(name = 'tiny.gguf') {
  const p = path.join(tmp, name);
  const r = spawnSync(BIN, ['mkmodel', '--preset', 'tiny', '--seed', '7', '-o', p], { encoding: 'utf8' });
  if (r.status !== 0 || !fs.existsSync(p)) { console.error('cannot make a model: ' + r.stderr); process.exit(77); }
  return p;
}

export async function startServer(model, extra = [], env = {}) {
  const args = ['serve', '--port', '0', '-m', model, '--threads', '1', ...extra];
  const proc = spawn(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } });
  let log = '';
  proc.stderr.on('data', (d) => { log += d.toString(); if (log.length > 1e6) log = log.slice(-5e5); });
  const t0 = Date.now();
  while (!/ready on http:\/\/[^:]+:(\d+)/.test(log)) {
    if (proc.exitCode !== null) throw new Error('server exited: ' + log);
    if (Date.now() - t0 > 30000) { proc.kill('SIGKILL'); throw new Error('server did not start: ' + log); }
    await sleep(20);
  }
  const port = Number(/ready on http:\/\/[^:]+:(\d+)/.exec(log)[1]);
  return { proc, port, log: () => log };
}

export function waitExit(proc, ms) {
  return new Promise((resolve) => {
    if (proc.exitCode !== null || proc.signalCode !== null) return resolve({ code: proc.exitCode, signal: proc.signalCode });
    const t = setTimeout(() => { proc.kill('SIGKILL'); resolve({ code: null, signal: 'timeout' }); }, ms);
    proc.once('exit', (code, signal) => { clearTimeout(t); resolve({ code, signal }); });
  });
}

// node:http request; body (object) is sent as JSON, raw (string/Buffer) as is.
export function request(port, method, p, { body, raw, headers = {}, timeout = 30000 } = {}) {
  return new Promise((resolve) => {
    const h = { ...headers };
    const data = raw !== undefined ? raw : body !== undefined ? JSON.stringify(body) : undefined;
    if (data !== undefined && !h['Content-Type']) h['Content-Type'] = 'application/json';
    const t0 = Date.now();
    let ttfb = null;
    const req = http.request({ host: '127.0.0.1', port, method, path: p, headers: h, agent: false }, (res) => {
      const parts = [];
      res.on('data', (d) => { if (ttfb === null) ttfb = Date.now() - t0; parts.push(d); });
      res.on('end', () => {
        const text = Buffer.concat(parts).toString('utf8');
        let json = null;
        try { json = JSON.parse(text); } catch { /* SSE or empty */ }
        resolve({ status: res.statusCode, headers: res.headers, text, json, ttfb, ms: Date.now() - t0 });
      });
      res.on('error', (e) => resolve({ status: -1, error: e.message }));
    });
    req.on('error', (e) => resolve({ status: -1, error: e.message }));
    req.setTimeout(timeout, () => req.destroy(new Error('timeout')));
    if (data !== undefined) req.write(data);
    req.end();
  });
}

// Raw bytes over TCP; resolves with everything received when the server
// closes or after ms (then the socket is destroyed).
export function rawExchange(port, bytes, ms = 10000) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    const parts = [];
    let done = false;
    const end = (why) => { if (done) return; done = true; clearTimeout(t); s.destroy(); resolve({ text: Buffer.concat(parts).toString('latin1'), why }); };
    const t = setTimeout(() => end('timeout'), ms);
    s.on('connect', () => s.write(bytes));
    s.on('data', (d) => parts.push(d));
    s.on('end', () => end('closed'));
    s.on('error', (e) => end('error ' + e.code));
  });
}
export const statusOf = (raw) => { const m = /^HTTP\/1\.[01] (\d{3})/.exec(raw); return m ? Number(m[1]) : -1; };

export function parseSSE(text) {
  const events = [];
  for (const line of text.split('\n')) if (line.startsWith('data: ')) events.push(line.slice(6));
  const chunks = [];
  for (const e of events) if (e !== '[DONE]') { try { chunks.push(JSON.parse(e)); } catch { chunks.push({ bad: e }); } }
  return { chunks, done: events[events.length - 1] === '[DONE]' };
}


// Threads, open fds and RSS (KiB) of a process, from /proc.
export function procStats(pid) {
  const st = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const num = (k) => Number((new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(st) || [0, -1])[1]);
  return { threads: num('Threads'), fds: fs.readdirSync(`/proc/${pid}/fd`).length, rssKiB: num('VmRSS') };
}
// Polls until the counts are back to at most the baseline (connections close
// asynchronously); returns the last reading.
export async function settle(pid, base, ms = 8000) {
  const t0 = Date.now();
  let s = procStats(pid);
  while ((s.threads > base.threads || s.fds > base.fds) && Date.now() - t0 < ms) { await sleep(100); s = procStats(pid); }
  return s;
}
export async function health(port) { const r = await request(port, 'GET', '/health', { timeout: 10000 }); return r; }
// /health once the scheduler is idle: a finished request's slot is published
// free after the engine's step, so a reading right after a response can
// still show it. Polls up to ms; returns the last reading (a slot that never
// frees still fails the check). For KV held by a committing sequence, see
// memoryIdle below.
export async function healthIdle(port, ms = 10000) {
  const t0 = Date.now();
  let h = await health(port);
  while (!(h.json?.slots_active === 0 && h.json?.queued === 0) && Date.now() - t0 < ms) { await sleep(50); h = await health(port); }
  return h;
}
// GET /v1/memory once no sequence holds KV: a finished sequence may keep
// its slot and blocks for one more engine step (the commit row that feeds
// its last token before the prompt cache takes it), so a reading right
// after a response can still show it live. Polls up to ms; returns the last
// reading (a leaked sequence or block still fails the caller's check).
export async function memoryIdle(port, ms = 10000) {
  const t0 = Date.now();
  let m = (await request(port, 'GET', '/v1/memory')).json;
  while (!(m?.kv_pool?.live_sequences === 0 && m?.kv_pool?.live_blocks === 0) && Date.now() - t0 < ms) {
    await sleep(50);
    m = (await request(port, 'GET', '/v1/memory')).json;
  }
  return m;
}
