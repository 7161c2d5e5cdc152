// soak.mjs - a bounded soak of `kvwise serve` (tiny model, loopback): C
// concurrent clients send a mix of multi-turn conversations (history grows
// turn by turn, shared system prompt), one-off questions under the same
// system prompt and one-off long prompts, all streamed. Checks: every request
// succeeds; after a warm-up, RSS, fd count and thread count return to their
// steady-state values once the load stops (no growth with uptime); the prompt
// cache never exceeds its caps; no slot is left active. Reports throughput
// and p50/p99 time to first token (first content chunk).
// CI runs the short version; the long one:
//   KW_SOAK_REQUESTS=20000 KW_SOAK_SECONDS=3600 KW_BIN=build/kvwise node tests/reliability/soak.mjs
// (KW_SOAK_MODEL=path.gguf soaks a real model instead of the tiny one.)
import http from 'node:http';
import { check, finish, stage, makeModel, startServer, request, procStats, settle, healthIdle, sleep, waitExit,
         asanBuild } from './lib.mjs';

// Bounded by count, with a generous time cap: on a quiet machine 250 requests
// take ~25 s; on a loaded shared 2-core machine (load average 15+) the same
// count takes longer, and the run stops at the cap with fewer requests but
// the same checks (at least MIN_OK must have run; the warm-up reading is
// taken by count or by time, whichever comes first).
const N = Number(process.env.KW_SOAK_REQUESTS || 250);
const MAX_S = Number(process.env.KW_SOAK_SECONDS || 90);
const MIN_OK = Math.min(N, 40);
const CLIENTS = Number(process.env.KW_SOAK_CLIENTS || 4);
const CACHE_SEQS = 8, CACHE_BYTES = 4 << 20;
// Steady-state tolerance: RSS after the load may exceed the warm-up reading
// by allocator slack (glibc arenas keep freed pages) but not grow with the
// number of requests: 25% or 4 MiB, whichever is larger (tiny model RSS ~15 MiB).
const RSS_SLACK = (kib) => Math.max(kib * 0.25, 4096);

const SYSTEM = 'You are a careful assistant. Answer briefly and precisely. ' + 'Follow the house style. '.repeat(10);
const WORDS = 'alpha beta gamma delta river stone cloud paper orange window garden silver market engine winter planet'.split(' ');
let seed = 12345;
const rnd = () => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed / 0x7fffffff; };
const words = (n) => Array.from({ length: n }, () => WORDS[Math.floor(rnd() * WORDS.length)]).join(' ');

function streamChat(port, body) {
  return new Promise((resolve) => {
    const data = JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } });
    const t0 = process.hrtime.bigint();
    let ttft = null, text = '', buf = '', usage = null;
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/v1/chat/completions', agent: false,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } }, (res) => {
      res.setEncoding('utf8');
      res.on('data', (d) => {
        buf += d;
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, i); buf = buf.slice(i + 2);
          if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
          try {
            const c = JSON.parse(ev.slice(6));
            const piece = c.choices?.[0]?.delta?.content;
            if (piece) { if (ttft === null) ttft = Number(process.hrtime.bigint() - t0) / 1e6; text += piece; }
            if (c.usage) usage = c.usage;
          } catch { /* counted below: no usage */ }
        }
      });
      res.on('end', () => resolve({ status: res.statusCode, ttft, text: res.statusCode === 200 ? text : buf, usage }));
    });
    req.on('error', (e) => resolve({ status: -1, error: e.message }));
    req.setTimeout(60000, () => req.destroy(new Error('timeout')));
    req.end(data);
  });
}

async function main() {
  const model = process.env.KW_SOAK_MODEL || makeModel();
  const srv = await startServer(model, ['--ctx-size', '1024', '--decode-concurrency', '4', '--prefill-step-size', '128',
    '--prompt-cache-size', String(CACHE_SEQS), '--prompt-cache-bytes', String(CACHE_BYTES)]);
  const { port } = srv, pid = srv.proc.pid;
  const base = procStats(pid);
  const ttfts = [], stats = { ok: 0, bad: 0, tokens: 0, multi: 0, shared: 0, long: 0, cached: 0, prompt: 0 };
  let sent = 0, done = 0, warm = null, maxCache = { sequences: 0, bytes: 0 };
  const t0 = Date.now();
  const deadline = t0 + MAX_S * 1000;

  async function one(kind, messages) {
    const r = await streamChat(port, { messages, max_tokens: 6 + Math.floor(rnd() * 10), temperature: 0.8, seed: Math.floor(rnd() * 1e6) });
    if (r.status === 200 && r.usage) {                // (an answer may be empty: EOG first)
      stats.ok++; stats[kind]++; if (r.ttft !== null) ttfts.push(r.ttft); stats.tokens += r.usage.completion_tokens;
      stats.prompt += r.usage.prompt_tokens; stats.cached += r.usage.prompt_tokens_details?.cached_tokens ?? 0;
    } else { stats.bad++; if (stats.bad <= 3) console.error('soak: failed request', r.status, r.error ?? '', (r.text ?? '').slice(0, 100)); }
    return r;
  }
  async function client(id) {
    let convo = null;
    while (sent < N && Date.now() < deadline) {
      // The kind follows the request count (6 multi-turn, 3 shared-system, 1 long in every 10),
      // so a run cut short by the time cap still ran every kind; sizes and texts stay random.
      const p = (sent++ % 10) / 10;
      if (p < 0.6) {                                 // multi-turn: continue (or start) a conversation
        if (!convo || convo.length > 9) convo = [{ role: 'system', content: SYSTEM }];
        convo.push({ role: 'user', content: `${words(6)}?` });
        const r = await one('multi', convo);
        convo.push({ role: 'assistant', content: r.text ?? '' });
      } else if (p < 0.85) {                         // shared system prompt, one-off question
        await one('shared', [{ role: 'system', content: SYSTEM }, { role: 'user', content: words(8) }]);
      } else {                                       // one-off long prompt
        await one('long', [{ role: 'user', content: `client ${id} ${words(120 + Math.floor(rnd() * 100))}` }]);
      }
      done++;
      if (!warm && (done >= Math.min(N * 0.2, 60) || Date.now() - t0 > MAX_S * 200)) warm = procStats(pid);
      if (sent % 25 === 0) {
        const m = (await request(port, 'GET', '/v1/memory')).json?.prompt_cache;
        if (m) { maxCache.sequences = Math.max(maxCache.sequences, m.sequences); maxCache.bytes = Math.max(maxCache.bytes, m.bytes); }
      }
    }
  }
  stage('load');
  await Promise.all(Array.from({ length: CLIENTS }, (_, i) => client(i)));
  const secs = (Date.now() - t0) / 1e3;
  stage('settle');
  // Connections close asynchronously and a finished sequence may hold its
  // slot for one more engine step: poll (bounded) instead of reading once.
  const end = await settle(pid, base, 20000);
  const h = await healthIdle(port);
  ttfts.sort((a, b) => a - b);
  const pct = (q) => ttfts.length ? ttfts[Math.min(ttfts.length - 1, Math.floor(q * ttfts.length))] : NaN;
  const summary = {
    requests: stats.ok + stats.bad, ok: stats.ok, failed: stats.bad, seconds: +secs.toFixed(1), clients: CLIENTS,
    mix: { multi_turn: stats.multi, shared_system: stats.shared, long_one_off: stats.long },
    req_per_s: +(stats.ok / secs).toFixed(1), gen_tok_per_s: +(stats.tokens / secs).toFixed(1),
    ttft_ms: { p50: +pct(0.5).toFixed(1), p99: +pct(0.99).toFixed(1) },
    cached_share: +(stats.cached / Math.max(1, stats.prompt)).toFixed(3),
    rss_kib: { start: base.rssKiB, warm: warm?.rssKiB, end: end.rssKiB }, fds: { start: base.fds, end: end.fds },
    threads: { start: base.threads, end: end.threads }, prompt_cache_max: maxCache,
  };
  console.log('soak: ' + JSON.stringify(summary));
  check(stats.ok >= MIN_OK && stats.bad === 0, 'every soak request succeeded', { ok: stats.ok, bad: stats.bad, min: MIN_OK });
  check(stats.multi > 0 && stats.shared > 0 && stats.long > 0, 'the mix ran every kind', summary.mix);
  if (asanBuild(pid)) console.log('soak: ASan build: the RSS check is skipped (its quarantine holds freed memory)');
  else check(warm && end.rssKiB <= warm.rssKiB + RSS_SLACK(warm.rssKiB), 'RSS back to steady state (no growth after warm-up)', summary.rss_kib);
  check(end.fds <= base.fds, 'fd count back to the start', summary.fds);
  check(end.threads <= base.threads, 'thread count back to the start', summary.threads);
  check(maxCache.sequences <= CACHE_SEQS && maxCache.bytes <= CACHE_BYTES, 'prompt cache within its caps', maxCache);
  check(h.json?.slots_active === 0 && h.json?.queued === 0, 'no slot or queue entry left', h.json);
  check(stats.cached > 0, 'the shared prefixes hit the prompt cache', summary.cached_share);
  srv.proc.kill('SIGTERM');
  const ex = await waitExit(srv.proc, 10000);
  check(ex.code === 0, 'exit 0 after the soak', ex);
  finish('soak', [srv]);
}
main().catch((e) => { console.error(e); process.exit(1); });
