// server_bench.mjs - what the server costs and what batching buys.
//
//   node bench/server_bench.mjs [--bin build/kvwise] [--model M.gguf] [--tokens 256] [--threads N]
//
// 1. Server overhead per generated token: `kvwise serve --stub-engine` (a
//    zero-cost model) streams N tokens over HTTP/SSE to one client; the time
//    per token is everything but the model: HTTP, JSON, SSE, scheduling,
//    sampling over a 259-entry vocabulary.
// 2. With --model: the model step time (one stream, decode tok/s through the
//    server), overhead as a share of it (target < 3% on the 1B Q4_0 shape), and
//    aggregate decode tok/s with 4 concurrent streams vs 1 (target >= 2.5x).
import { spawn } from 'node:child_process';
import http from 'node:http';

const argv = process.argv.slice(2);
const opt = (name, dflt) => { const i = argv.indexOf(name); return i >= 0 ? argv[i + 1] : dflt; };
const BIN = opt('--bin', process.env.KW_BIN || 'build/kvwise');
const MODEL = opt('--model', process.env.MODEL);
const TOKENS = Number(opt('--tokens', '256'));
const THREADS = opt('--threads', '0');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function start(args) {
  const proc = spawn(BIN, ['serve', '--port', '0', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (d) => { log += d; });
  for (let i = 0; i < 3000 && !/ready on http:\/\/[^:]+:(\d+)/.test(log); i++) {
    if (proc.exitCode !== null) throw new Error(log);
    await sleep(20);
  }
  return { proc, port: Number(/ready on http:\/\/[^:]+:(\d+)/.exec(log)[1]) };
}

// Streams one completion; returns {tokens, firstMs, totalMs} (decode time = after the first token).
function stream(port, prompt, maxTokens) {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let first = 0, n = 0, buf = '', usage = null;
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/v1/completions', headers: { 'Content-Type': 'application/json' } }, (res) => {
      res.setEncoding('utf8');
      res.on('data', (d) => {
        buf += d;
        let k;
        while ((k = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, k); buf = buf.slice(k + 2);
          if (!ev.startsWith('data: {')) continue;
          const j = JSON.parse(ev.slice(6));
          if (j.usage) usage = j.usage;
          if (j.choices?.[0]?.finish_reason === null) { n++; if (n === 1) first = performance.now(); }
        }
      });
      res.on('end', () => resolve({ tokens: usage ? usage.completion_tokens : n, firstMs: first - t0, totalMs: performance.now() - t0, lastMs: performance.now() }));
    });
    req.on('error', reject);
    req.end(JSON.stringify({ prompt, max_tokens: maxTokens, temperature: 0, stream: true, stream_options: { include_usage: true },
                             stop: null, ignore_eos: true }));
  });
}

function health(port) {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: '/health' }, (res) => {
      let b = '';
      res.on('data', (d) => { b += d; });
      res.on('end', () => resolve(JSON.parse(b)));
    }).on('error', reject);
  });
}

// Client view: generated tok/s over the whole requests. Engine view
// (from /health): tokens per second of engine time, the forward share of each
// step, and the time per step spent outside the forward pass.
async function decodeRate(port, nStreams, maxTokens) {
  const h0 = await health(port);
  const t0 = performance.now();
  const res = await Promise.all(Array.from({ length: nStreams }, (_, i) => stream(port, `Stream ${i} begins here`, maxTokens)));
  const h1 = await health(port);
  // (whole requests: a short prompt is one prefill step; random-weight models emit many
  // tokens with no text, so the first text chunk does not mark the first token)
  const tokens = res.reduce((a, r) => a + r.tokens, 0);
  const span = (Math.max(...res.map((r) => r.lastMs)) - t0) / 1e3;
  const steps = h1.steps - h0.steps, fwd = h1.forward_seconds - h0.forward_seconds, stepS = h1.step_seconds - h0.step_seconds;
  const gen = h1.tokens_generated - h0.tokens_generated;
  return { tokens, tokPerS: tokens / span, engineTokPerS: gen / stepS, stepMs: (stepS / steps) * 1e3,
           outsideMs: ((stepS - fwd) / steps) * 1e3, tokensPerStep: gen / steps };
}

async function main() {
  // 1. overhead with the zero-cost stub engine
  const stub = await start(['--stub-engine', '--ctx-size', '100000']);
  await stream(stub.port, 'warm up', 32);
  const r = await stream(stub.port, 'overhead', TOKENS * 8);
  const perTokUs = ((r.totalMs - r.firstMs) / Math.max(1, r.tokens - 1)) * 1e3;
  console.log(`server overhead: ${perTokUs.toFixed(1)} us/token over ${r.tokens} streamed tokens (HTTP + JSON + SSE + scheduling + sampling, zero-cost engine)`);
  stub.proc.kill('SIGTERM');
  await new Promise((res) => stub.proc.on('exit', res));
  if (!MODEL) { console.log('(pass --model M.gguf for the model step time and the concurrency scaling)'); return; }

  // 2. the real model: one stream, then four
  const srv = await start(['-m', MODEL, '--ctx-size', String(TOKENS + 64), '--decode-concurrency', '4', '--threads', THREADS]);
  await stream(srv.port, 'warm up', 8);
  const one = await decodeRate(srv.port, 1, TOKENS);
  const fmt = (r) => `client ${r.tokPerS.toFixed(2)} tok/s, engine ${r.engineTokPerS.toFixed(2)} tok/s, ` +
    `${r.tokensPerStep.toFixed(2)} tokens/step, step ${r.stepMs.toFixed(2)} ms of which ${r.outsideMs.toFixed(3)} ms outside the forward pass`;
  console.log(`1 stream : ${fmt(one)}`);
  console.log(`overhead : HTTP+JSON+SSE ${(perTokUs / 1e3 / one.stepMs * 100).toFixed(3)}% of a step, scheduling+sampling ` +
              `${(one.outsideMs / one.stepMs * 100).toFixed(3)}% of a step`);
  const four = await decodeRate(srv.port, 4, TOKENS);
  console.log(`4 streams: ${fmt(four)}`);
  console.log(`scaling  : client ${(four.tokPerS / one.tokPerS).toFixed(2)}x, engine ${(four.engineTokPerS / one.engineTokPerS).toFixed(2)}x one stream`);
  srv.proc.kill('SIGTERM');
  await new Promise((res) => srv.proc.on('exit', res));
}

main().catch((e) => { console.error(e); process.exit(1); });
