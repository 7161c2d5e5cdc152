// prefix_cache_bench.mjs - what a prompt-cache hit buys (target: docs/PERFORMANCE.md, Targets):
// time to first token of a 4,000-token prompt whose first 3,900 tokens are
// cached, against the same prompt uncached. Target: <= 5% of the uncached time.
//
//   node bench/prefix_cache_bench.mjs --model M.gguf [--bin build/kvwise] [--prompt 4000] [--cached 3900] [--reps 3]
//
// Prompts are token-id lists (ids 10..--vocab-1, default 256, deterministic), sent to
// POST /v1/completions with max_tokens 1, so the time is prefill + one step.
// Without --model it runs on the stub engine with real KV (--stub-kv): that
// only shows the mechanism (a stub forward costs the same for 1 or 512
// tokens), not a speed figure.
import { spawn } from 'node:child_process';
import os from 'node:os';

const argv = process.argv.slice(2);
const opt = (name, dflt) => { const i = argv.indexOf(name); return i >= 0 ? argv[i + 1] : dflt; };
const BIN = opt('--bin', process.env.KW_BIN || 'build/kvwise');
const MODEL = opt('--model', process.env.MODEL);
const N = Number(opt('--prompt', '4000'));
const CACHED = Number(opt('--cached', '3900'));
const REPS = Number(opt('--reps', '3'));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function start(args) {
  const proc = spawn(BIN, ['serve', '--port', '0', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (d) => { log += d; });
  for (let i = 0; i < 6000 && !/ready on http:\/\/[^:]+:(\d+)/.test(log); i++) {
    if (proc.exitCode !== null) throw new Error(log);
    await sleep(20);
  }
  return { proc, base: `http://127.0.0.1:${/ready on http:\/\/[^:]+:(\d+)/.exec(log)[1]}` };
}

async function complete(base, prompt) {
  const t0 = performance.now();
  const r = await fetch(base + '/v1/completions', {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: 1, temperature: 0 }),
  });
  const j = await r.json();
  if (r.status !== 200) throw new Error(JSON.stringify(j));
  return { ms: performance.now() - t0, cached: j.usage.prompt_tokens_details.cached_tokens };
}

function tokens(seed, n, vocab) {
  let x = (seed * 2654435761) >>> 0 || 1;
  return Array.from({ length: n }, () => { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; return 10 + (x % (vocab - 10)); });
}

const args = MODEL ? ['-m', MODEL] : ['--stub-engine', '--stub-kv', '--stub-step-us', '1000'];
const srv = await start([...args, '--ctx-size', String(N + 64), '--decode-concurrency', '1',
                         '--prompt-cache-size', '8', '--prompt-cache-bytes', '8GiB', '--prefill-step-size', '512']);
const vocab = Number(opt('--vocab', '256'));   // ids below every model's vocabulary size
const uncached = [], hit = [];
const laStart = os.loadavg()[0];
await complete(srv.base, tokens(999, 64, vocab));                 // warm-up
for (let r = 0; r < REPS; r++) {
  const prefix = tokens(100 + r, CACHED, vocab);
  const a = await complete(srv.base, [...prefix, ...tokens(200 + r, N - CACHED, vocab)]);   // nothing cached
  const b = await complete(srv.base, [...prefix, ...tokens(300 + r, N - CACHED, vocab)]);   // shares CACHED tokens
  if (a.cached !== 0 || b.cached < CACHED) throw new Error(`unexpected cache use: ${a.cached} / ${b.cached}`);
  uncached.push(a.ms); hit.push(b.ms);
}
const med = (v) => v.slice().sort((x, y) => x - y)[v.length >> 1];
const la0 = os.loadavg()[0];
const ratio = med(hit) / med(uncached);
console.log(`prompt ${N} tokens, ${CACHED} cached: TTFT uncached ${med(uncached).toFixed(1)} ms, ` +
            `cached ${med(hit).toFixed(1)} ms = ${(100 * ratio).toFixed(1)}% (target <= 5%)${MODEL ? '' : ' [stub engine: mechanism only]'}`);
console.log(`each of ${REPS} runs: uncached ${uncached.map((x) => x.toFixed(0)).join(' ')} ms, cached ${hit.map((x) => x.toFixed(0)).join(' ')} ms; ` +
            `load average ${laStart.toFixed(1)} at start, ${la0.toFixed(1)} at end`);
srv.proc.kill('SIGTERM');
