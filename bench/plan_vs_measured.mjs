// plan_vs_measured.mjs - `kvwise plan`'s predictions beside what the machine measures.
//
//   node bench/plan_vs_measured.mjs [--bin build/kvwise] [--model M.gguf] [--preset llama3.2-1b]
//        [--type q4_0] [--ctx 2048] [--concurrency 2] [--limit 4GiB] [--threads 2]
//
// Without --model it writes a random-weight model with `kvwise mkmodel --preset`.
// 1. Speed: the plan's decode ceiling (bandwidth / bytes per token, bandwidth
//    probed in the same process) beside `kvwise bench` tg, and beside the
//    plan's own --probe decode measurement.
// 2. Memory: the plan's serve line is started as is; after one warm-up
//    request per sequence, GET /v1/memory gives the ledger and the kernel's
//    figures. Printed: the plan's fixed lines (weights, workspace, tokenizer,
//    overhead) vs the ledger's (target: within 5%), and the plan's fixed
//    lines + the KV the ledger holds vs the kernel's RSS (target: within 10%).
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';

const argv = process.argv.slice(2);
const opt = (name, dflt) => { const i = argv.indexOf(name); return i >= 0 ? argv[i + 1] : dflt; };
const BIN = opt('--bin', process.env.KW_BIN || 'build/kvwise');
const PRESET = opt('--preset', 'llama3.2-1b');
const TYPE = opt('--type', 'q4_0');
const CTX = opt('--ctx', '2048');
const CONC = opt('--concurrency', '2');
const LIMIT = opt('--limit', '4GiB');
const THREADS = opt('--threads', '2');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const gib = (b) => (b / 2 ** 30).toFixed(3) + ' GiB';
const pct = (a, b) => (100 * (a - b) / b).toFixed(1) + '%';

let MODEL = opt('--model', process.env.MODEL);
if (!MODEL) {
  MODEL = path.join(os.tmpdir(), `kvwise-${PRESET}-${TYPE}.gguf`);
  if (!fs.existsSync(MODEL)) {
    console.log(`writing ${MODEL} (kvwise mkmodel --preset ${PRESET} --type ${TYPE}) ...`);
    execFileSync(BIN, ['mkmodel', '--preset', PRESET, '--type', TYPE, '-o', MODEL], { stdio: 'inherit' });
  }
}

const planArgs = ['plan', '-m', MODEL, '--memory-limit', LIMIT, '--ctx', CTX, '--concurrency', CONC, '-t', THREADS, '--json'];
const plan = JSON.parse(execFileSync(BIN, [...planArgs, '--probe'], { encoding: 'utf8' }));

// ---- speed ----
let tg = null;
try {
  const b = JSON.parse(execFileSync(BIN, ['bench', '-m', MODEL, '-t', THREADS, '--json'], { encoding: 'utf8' }));
  tg = b.tg ?? b.tg_tok_s ?? b.decode_tok_s ?? null;
  if (tg && typeof tg === 'object') tg = tg.median ?? tg.tok_s ?? null;
} catch (e) { console.log(`(kvwise bench unavailable: ${String(e.message).split('\n')[0]})`); }
const sp = plan.speed;
console.log(`\nDecode, ${path.basename(MODEL)} (${(sp.bytes_per_token / 1e9).toFixed(3)} GB read per token)`);
console.log(`  ceiling   ${sp.decode_tok_s.toFixed(2)} tok/s  (bandwidth ${(sp.bandwidth_bytes_per_s / 1e9).toFixed(1)} GB/s, measured by plan)`);
console.log(`  plan --probe decode ${sp.decode_measured_tok_s.toFixed(2)} tok/s = ${(100 * sp.decode_measured_tok_s / sp.decode_tok_s).toFixed(0)}% of the ceiling`);
if (tg) console.log(`  kvwise bench tg     ${Number(tg).toFixed(2)} tok/s = ${(100 * tg / sp.decode_tok_s).toFixed(0)}% of the ceiling`);

// ---- memory ----
const serveArgs = plan.serve.split(' ').slice(2); // drop "kvwise serve"
const proc = spawn(BIN, ['serve', ...serveArgs, '--port', '0', '--threads', THREADS], { stdio: ['ignore', 'ignore', 'pipe'] });
let log = '';
proc.stderr.on('data', (d) => { log += d; });
try {
  for (let i = 0; i < 6000 && !/ready on http:\/\/[^:]+:(\d+)/.test(log); i++) {
    if (proc.exitCode !== null) throw new Error(log);
    await sleep(20);
  }
  const port = Number(/ready on http:\/\/[^:]+:(\d+)/.exec(log)[1]);
  const get = (p) => new Promise((res, rej) => http.get({ host: '127.0.0.1', port, path: p }, (r) => {
    let b = ''; r.on('data', (d) => { b += d; }); r.on('end', () => res(JSON.parse(b)));
  }).on('error', rej));
  const post = (body) => new Promise((res, rej) => {
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/v1/completions', headers: { 'Content-Type': 'application/json' } }, (r) => {
      let b = ''; r.on('data', (d) => { b += d; }); r.on('end', () => res(b));
    });
    req.on('error', rej); req.end(JSON.stringify(body));
  });
  const reqs = [];
  for (let i = 0; i < Number(CONC); i++) reqs.push(post({ prompt: `Warm-up request ${i}: `.repeat(20), max_tokens: 16, temperature: 0 }));
  await Promise.all(reqs);
  await sleep(500);
  const mem = await get('/v1/memory');
  const L = mem.budget.lines, m = mem.measured, b = plan.budget;
  const ledgerFixed = L.weights.bytes + L.workspace.bytes + L.scratch.bytes + L.tokenizer.bytes + L.overhead.bytes;
  const ledgerKv = L.kv_live.bytes + L.kv_cached.bytes;
  console.log(`\nMemory (serve ${serveArgs.join(' ')})`);
  console.log('  line        plan          ledger');
  for (const k of ['weights', 'workspace', 'tokenizer', 'overhead'])
    console.log(`  ${k.padEnd(10)}  ${gib(b[k]).padEnd(12)}  ${gib(L[k].bytes + (k === 'workspace' ? L.scratch.bytes : 0))}`);
  console.log(`  fixed       ${gib(b.fixed).padEnd(12)}  ${gib(ledgerFixed)}   (${pct(ledgerFixed, b.fixed)}; target within 5%)`);
  console.log(`  limit       ${gib(b.memory_limit).padEnd(12)}  ${gib(mem.budget.limit)}`);
  const predicted = b.fixed + ledgerKv;
  console.log(`  steady = plan fixed + ledger KV (${gib(ledgerKv)}) = ${gib(predicted)}; kernel RSS ${gib(m.rss)} ` +
              `(${pct(m.rss, predicted)}; target within 10%), anon ${gib(m.anon)}, file-backed ${gib(m.rss_file)}, peak ${gib(m.vm_hwm)}`);
} finally {
  proc.kill('SIGTERM');
}
