// admission.mjs - the refusals of admission control, one by one: a request
// that waited longer than --queue-timeout gets 503 + Retry-After (code
// queue_timeout); one longer than the context gets a typed 400 at once; a
// --memory-limit that cannot hold one full-context sequence stops the server
// at startup with the limit that would work; the running process reports
// the caps it applied (GET /v1/config and /v1/memory), byte sizes parsed as
// documented (512MB = 512,000,000 bytes).
import { spawnSync } from 'node:child_process';
import { check, finish, startServer, getJSON, post, words, measuredOverhead } from './lib.mjs';

// 1 slot, 50 ms per step: a 20-token answer holds the slot ~1 s.
const srv = await startServer(['--stub-engine', '--stub-kv', '--stub-step-us', '50000', '--decode-concurrency', '1',
                               '--ctx-size', '1024', '--queue-timeout', '0.3', '--max-queue', '8',
                               '--prompt-cache-size', '3', '--prompt-cache-bytes', '512MB']);
const cfg = (await getJSON(srv.base, '/v1/config')).body;
check(cfg.prompt_cache_size === 3, `/v1/config prompt_cache_size ${cfg.prompt_cache_size}`);
check(cfg.prompt_cache_bytes === 512e6 || cfg.prompt_cache_bytes < 512e6,
      `/v1/config prompt_cache_bytes ${cfg.prompt_cache_bytes} (512MB, or less if the pool is smaller)`);
const mem = (await getJSON(srv.base, '/v1/memory')).body;
check(mem.prompt_cache.max_sequences === 3 && mem.prompt_cache.max_bytes === cfg.prompt_cache_bytes,
      '/v1/memory reports the same caps as /v1/config');
check(mem.budget.limit > 0 && mem.budget.lines.overhead.bytes > 0, 'the budget has a limit and a measured overhead line');

const rs = await Promise.all([0, 1, 2].map((k) =>
  post(srv.base, '/v1/completions', { prompt: `job ${k} ${words(k, 10)}`, max_tokens: 20, ignore_eos: true })));
const ok = rs.filter((r) => r.status === 200).length;
const timedOut = rs.filter((r) => r.status === 503);
check(ok >= 1, `the first request is served (${rs.map((r) => r.status)})`);
check(timedOut.length >= 1, `a request queued past --queue-timeout gets 503 (${rs.map((r) => r.status)})`);
for (const r of timedOut) {
  check(/^\d+$/.test(r.headers.get('retry-after') || ''), `503 has Retry-After (${r.headers.get('retry-after')})`);
  check(r.body && r.body.error && r.body.error.code === 'queue_timeout' && r.body.error.type === 'server_error',
        `503 body is an OpenAI error with code queue_timeout (${r.text})`);
}
const t0 = Date.now();
const big = await post(srv.base, '/v1/completions', { prompt: words(9, 400), max_tokens: 4 });
check(big.status === 400 && big.body.error.code === 'context_length_exceeded' && big.body.error.type === 'invalid_request_error',
      `longer than the context: typed 400 (${big.status} ${big.text})`);
check(Date.now() - t0 < 1000, 'the 400 comes at once, not after queueing');
const metrics = await (await fetch(srv.base + '/metrics')).text();
check(/kvwise_requests_rejected_total\{reason="queue_timeout"\} [1-9]/.test(metrics), '/metrics counts queue_timeout');
check(/kvwise_requests_rejected_total\{reason="context_length"\} 1\n/.test(metrics), '/metrics counts context_length');
const ex = await srv.stop();
check(ex.code === 0, `clean exit (${JSON.stringify(ex)})`);

// A limit too small for one sequence of the context: refuse to start, say what would work.
// (overhead + 1 MiB: one sequence of 4096 tokens needs 16 MiB of KV)
const tight = await measuredOverhead(['--stub-engine', '--stub-kv']) + 1024 * 1024;
const r = spawnSync(process.env.KW_BIN, ['serve', '--stub-engine', '--stub-kv', '--port', '0', '--memory-limit', String(tight),
                                         '--ctx-size', '4096'], { encoding: 'utf8', timeout: 20000 });
check(r.status === 1, `startup refused (exit ${r.status})`);
check(/--memory-limit .* too small.*would work/.test(r.stderr), `says which limit would work: ${r.stderr.trim().split('\n').pop()}`);
finish();
