// plan_serve.mjs - `kvwise plan` and `kvwise serve` agree, line by line, for
// every conformance model (../shared/conformance/models/manifest.json): serve
// sizes its memory with the plan (plan.h, kw_plan_serve_sizing), so with the
// same settings the plan's figures are what the running server reports in
// GET /v1/config and GET /v1/memory:
//   settings    memory limit, context, decode slots, KV type and block size
//   KV          bytes per token, block bytes, the pool (blocks and bytes)
//   budget      weights, prefill workspace (+ thread scratch), tokenizer,
//               overhead, HTTP connections and their sum (the fixed lines)
//   cache caps  --prompt-cache-bytes in force (the plan's recommendation) and
//               --prompt-cache-size (as given; the plan's count when memory holds
//               that many full-context conversations)
// The overhead line is the one number serve measures at its own startup: the
// plan is given it (--overhead), everything else is computed independently.
// For llama-q8_0 the same holds at the plan's largest context (max_ctx, with
// 16 MiB of margin on the measured overhead: the server must start there,
// with the real allocations of that context).
// A model that neither can read (an architecture not supported yet) must be
// refused by both with the same reason. Skips (77) without ../shared.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { check, finish, skip, startServer, getJSON } from '../cache/e2e/lib.mjs';

const shared = process.env.KW_SHARED_DIR || path.resolve(process.env.KW_SOURCE_DIR || '.', '../shared');
const dir = path.join(shared, 'conformance', 'models');
if (!fs.existsSync(path.join(dir, 'manifest.json'))) skip(`no ${dir}/manifest.json`);
const BIN = process.env.KW_BIN;
if (!BIN || !fs.existsSync(BIN)) skip('KW_BIN not set');
const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'manifest.json'), 'utf8'));

// The settings, as each command spells them.
const OVERHEAD_MARGIN = 16 << 20;
const LIMIT = String(1 << 30), CONC = '4', CACHE = '3', STEP = '128', THREADS = '2';
const serveArgs = (model, ctx) => ['-m', model, '--memory-limit', LIMIT, '--ctx-size', String(ctx), '--decode-concurrency', CONC,
  '--prompt-concurrency', '1', '--prefill-step-size', STEP, '--prompt-cache-size', CACHE, '--threads', THREADS];
const planArgs = (model, ctx, overhead) => ['plan', '-m', model, '--memory-limit', LIMIT, '--ctx', String(ctx), '--concurrency', CONC,
  '--prompt-concurrency', '1', '--prefill-step-size', STEP, '--prompt-cache-size', CACHE, '-t', THREADS,
  '--no-bandwidth-probe', ...(overhead ? ['--overhead', String(overhead)] : []), '--json'];

function plan(model, ctx, overhead) {
  const r = spawnSync(BIN, planArgs(model, ctx, overhead), { encoding: 'utf8', timeout: 60000 });
  let json = null;
  try { json = JSON.parse(r.stdout); } catch { /* an error: no JSON */ }
  return { status: r.status, json, err: r.stderr.trim() };
}

// Every line of the plan against the running server's; returns the plan (or null).
async function compare(name, model, ctx) {
  let srv;
  try {
    srv = await startServer(serveArgs(model, ctx));
  } catch (e) {
    return { refused: String(e.message) };
  }
  const cfg = (await getJSON(srv.base, '/v1/config')).body;
  const mem = (await getJSON(srv.base, '/v1/memory')).body;
  const ex = await srv.stop();
  check(ex.code === 0, `${name}: serve exits 0 (${JSON.stringify(ex)})`);
  const lines = mem.budget.lines, pool = mem.kv_pool;
  const p = plan(model, ctx, lines.overhead.bytes);
  check(p.status === 0 && p.json, `${name}: plan runs (${p.err})`);
  if (!p.json) return {};
  const { settings: s, kv, budget: b } = p.json;
  const same = (what, planned, served) => check(planned === served, `${name} ctx ${ctx}: ${what}: plan ${planned}, serve ${served}`);
  same('memory limit', s.memory_limit, mem.budget.limit);
  same('context', s.ctx, cfg.ctx_size);
  same('decode slots', s.concurrency, cfg.decode_concurrency);
  same('KV block size', s.block_tokens, cfg.kv_block_size);
  same('KV type', s.kv_type, (/\(([a-z0-9_]+)\)/.exec(cfg.kv_pool) || [])[1]);
  same('KV bytes per token', kv.bytes_per_token, pool.block_bytes / pool.block_tokens);
  same('KV block bytes', kv.block_bytes, pool.block_bytes);
  same('KV pool blocks', b.kv_pool_blocks, pool.blocks);
  same('KV pool bytes', b.kv_pool_blocks * kv.block_bytes, pool.bytes);
  same('weights', b.weights, lines.weights.bytes);
  same('prefill workspace + thread scratch', b.workspace, lines.workspace.bytes + lines.scratch.bytes);
  same('tokenizer', b.tokenizer, lines.tokenizer.bytes);
  same('overhead', b.overhead, lines.overhead.bytes);
  same('HTTP connections', b.connections, lines.connections.bytes);
  // a hybrid's recurrent state: one per decode slot, planned per sequence beside its KV
  same('recurrent state', s.concurrency * kv.per_sequence_state_bytes, lines.rec_state.bytes);
  same('fixed lines', b.fixed, mem.budget.used - lines.kv_live.bytes - lines.kv_cached.bytes - lines.rec_state.bytes -
       lines.rec_checkpoints.bytes);
  // the count cap is --prompt-cache-size as given (a setting given is applied); the plan's count is
  // how many full-context conversations the budget holds, the same when memory does not bind
  if (b.prompt_cache_size === Number(CACHE)) same('prompt cache count cap', b.prompt_cache_size, mem.prompt_cache.max_sequences);
  else check(b.prompt_cache_size < Number(CACHE) && mem.prompt_cache.max_sequences === Number(CACHE),
             `${name} ctx ${ctx}: count cap: serve applies --prompt-cache-size ${CACHE} (${mem.prompt_cache.max_sequences}), ` +
             `the plan fits ${b.prompt_cache_size} full-context conversations in the byte cap`);
  same('prompt cache byte cap', b.prompt_cache_bytes, mem.prompt_cache.max_bytes);
  same('prompt cache byte cap (/v1/config)', b.prompt_cache_bytes, cfg.prompt_cache_bytes);
  check(b.fits, `${name} ctx ${ctx}: the plan fits (the comparison covers the plan's own recommendation)`);
  return { plan: p.json };
}

let compared = 0, refused = 0;
for (const e of manifest) {
  const model = path.join(dir, e.file);
  const r = await compare(e.file, model, 512);
  if (r.refused) {
    // serve could not start: the plan must refuse the model too, for the same reason
    const why = (/kvwise serve: (.*)/.exec(r.refused.split('\n').filter((l) => l.startsWith('kvwise serve: ')).pop() || '') || [])[1];
    const p = plan(model, 512, 0);
    check(p.status !== 0 && why && p.err.includes(why), `${e.file}: serve refused it (${why}); the plan refuses it the same way (${p.err})`);
    refused++;
    continue;
  }
  compared++;
  if (e.file === 'llama-q8_0.gguf' && r.plan) {
    // The largest context with the overhead this run measured plus a margin: serve measures its
    // overhead again at its own startup, a few pages more or less, and at the exact boundary
    // those pages alone would decide whether every slot fits.
    const roomy = plan(model, 512, r.plan.budget.overhead + OVERHEAD_MARGIN);
    check(roomy.status === 0 && roomy.json, `llama-q8_0: plan with the overhead margin runs (${roomy.err})`);
    const max = roomy.json ? roomy.json.budget.max_ctx : 0;
    check(max > 512, `llama-q8_0: the plan's largest context ${max} is above 512`);
    await compare(e.file, model, max);
  }
}
console.log(`plan_serve: ${compared} models compared line by line, ${refused} refused by both`);
check(compared >= 1, 'at least one model was compared');
finish();
