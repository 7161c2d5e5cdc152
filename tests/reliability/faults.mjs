// faults.mjs - the server under faults (tiny model, loopback, free port):
//  1. SIGTERM during a stream: the client gets a terminated stream (a final
//     chunk and [DONE]), the process exits 0 within 10 s;
//  2. SIGKILL mid-stream, then a restart on the same port and model: starts
//     cleanly (no stale socket/lock), serves, and greedy output is unchanged;
//  3. real allocation failures (serve --test-fail-alloc SPEC, testctl.h): a KV
//     block or the ledger reservation at admission, the KV check mid-prefill
//     (stream or not): 503 out_of_memory + Retry-After (or an error chunk in
//     a started stream), every reservation returned, the server keeps
//     serving; failed prompt-cache inserts and tokenizer memory; startup
//     allocations (exit 1, one line); the hook refused off loopback;
//  4. the model file replaced (rename over it) while served: the mapping
//     keeps the old inode, answers are unchanged; truncated while mapped:
//     the behaviour is recorded (docs/RELIABILITY.md);
//  5. the off-loopback-without---api-key warning (nothing is bound off-loopback).
import fs from 'node:fs';
import path from 'node:path';
import { check, finish, stage, makeModel, startServer, request, parseSSE, health, healthIdle, memoryIdle, sleep, waitExit, tmp, BIN } from './lib.mjs';
import http from 'node:http';

const greedy = { messages: [{ role: 'user', content: 'The capital of France is' }], max_tokens: 8, temperature: 0 };

// A stream that records bytes; resolves when the response ends or errors.
function openStream(port, body, onFirst) {
  return new Promise((resolve) => {
    const data = JSON.stringify(body);
    let text = '', first = false;
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/v1/chat/completions', agent: false,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } }, (res) => {
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; if (!first && text.includes('data: ')) { first = true; onFirst && onFirst(); } });
      res.on('end', () => resolve({ status: res.statusCode, text, ended: 'end' }));
      res.on('error', (e) => resolve({ status: res.statusCode, text, ended: 'error ' + e.message }));
      res.on('aborted', () => resolve({ status: res.statusCode, text, ended: 'aborted' }));
    });
    req.on('error', (e) => resolve({ status: -1, text, ended: 'error ' + e.message }));
    req.setTimeout(30000, () => req.destroy(new Error('timeout')));
    req.end(data);
  });
}

const ARGS = ['--ctx-size', '512', '--decode-concurrency', '4'];

async function main() {
  const model = makeModel();
  let srv;
  const servers = [];

  // 1. SIGTERM during streaming
  stage('sigterm');
  srv = await startServer(model, ARGS); servers.push(srv);
  const ref = await request(srv.port, 'POST', '/v1/chat/completions', { body: greedy });
  check(ref.status === 200, 'reference answer', ref.text);
  {
    const s = await openStream(srv.port, { ...greedy, max_tokens: 400, ignore_eos: true, stream: true }, () => srv.proc.kill('SIGTERM'));
    const ex = await waitExit(srv.proc, 10000);
    const sse = parseSSE(s.text);
    check(s.status === 200 && sse.done, 'SIGTERM mid-stream: the stream ends with [DONE]', { ended: s.ended, tail: s.text.slice(-200) });
    check(sse.chunks.length < 400, 'SIGTERM mid-stream: the stream was cut short', sse.chunks.length);
    check(ex.code === 0, 'SIGTERM: exit code 0', ex);
  }

  // 2. SIGKILL then restart on the same port
  stage('sigkill');
  srv = await startServer(model, ARGS); servers.push(srv);
  const port = srv.port;
  {
    const s = openStream(port, { ...greedy, max_tokens: 400, ignore_eos: true, stream: true }, () => srv.proc.kill('SIGKILL'));
    const r = await s;
    const ex = await waitExit(srv.proc, 10000);
    check(ex.signal === 'SIGKILL', 'SIGKILL: the process died', ex);
    check(!parseSSE(r.text).done, 'SIGKILL: the client sees a broken stream (no [DONE])', r.ended);
    const t0 = Date.now();
    const srv2 = await startServer(model, [...ARGS, '--port', String(port)]); servers.push(srv2);
    console.log(`faults: restart after SIGKILL on the same port: ready in ${Date.now() - t0} ms`);
    check(srv2.port === port, 'restart binds the same port', srv2.port);
    const again = await request(port, 'POST', '/v1/chat/completions', { body: greedy });
    check(again.status === 200 && again.json?.choices?.[0]?.message?.content === ref.json?.choices?.[0]?.message?.content,
          'after restart: same greedy answer', { a: again.json?.choices?.[0]?.message?.content, b: ref.json?.choices?.[0]?.message?.content });
    srv2.proc.kill('SIGTERM');
    check((await waitExit(srv2.proc, 10000)).code === 0, 'restarted server exits 0');
  }

  // 3. real allocation failures (--test-fail-alloc, include/kvwise/testctl.h): the calls fail for real
  //    and their callers' failure paths run. One server, six requests, in order:
  //    r1 the 1st KV block taken after startup fails (admission)           -> 503 out_of_memory
  //    r2 (stream) the 1st ledger reservation fails (admission)            -> 503 before any stream byte
  //    r3 a long prompt, prefill step 16: the 2nd KV check fails (mid-prefill) -> 503, reservation returned
  //    r4 (stream) the same prompt: its 2nd KV check fails mid-prefill     -> 200 stream, progress, error chunk, [DONE]
  //    r5, r6 -> 200 and the reference answer; then no slot, no live KV block, no kv_live byte, exit 0
  //    (under ASan+UBSan, label sanitize: exit 0 also means LeakSanitizer found nothing).
  stage('alloc failure');
  const longMsg = { messages: [{ role: 'user', content: 'please summarise: ' + 'river stone cloud paper '.repeat(12) }], max_tokens: 4, temperature: 0 };
  const isOom = (r) => r.status === 503 && r.json?.error?.code === 'out_of_memory' && r.json?.error?.type === 'server_error' &&
                       typeof r.json?.error?.message === 'string' && r.headers?.['retry-after'] === '1';
  srv = await startServer(model, [...ARGS, '--prefill-step-size', '16', '--test-fail-alloc', 'kv_block=1,ledger=1,kv_ensure=2,kv_ensure=4']);
  servers.push(srv);
  {
    check(/WARNING: --test-fail-alloc .*TEST-ONLY/.test(srv.log()), 'fault injection: warned at startup');
    const cfg = await request(srv.port, 'GET', '/v1/config');
    check(cfg.json?.test_fail_alloc === 'kv_block=1,ledger=1,kv_ensure=2,kv_ensure=4', 'fault injection: shown in /v1/config', cfg.json?.test_fail_alloc);
    const r1 = await request(srv.port, 'POST', '/v1/chat/completions', { body: greedy });
    check(isOom(r1) && /admit/.test(r1.json.error.message), 'KV block allocation fails at admission: 503 out_of_memory + Retry-After', { status: r1.status, text: r1.text.slice(0, 200), ra: r1.headers?.['retry-after'] });
    const r2 = await request(srv.port, 'POST', '/v1/chat/completions', { body: { ...greedy, stream: true } });
    check(isOom(r2), 'ledger reservation fails at admission (stream): 503 out_of_memory before any stream byte', { status: r2.status, text: r2.text.slice(0, 200) });
    const r3 = await request(srv.port, 'POST', '/v1/chat/completions', { body: longMsg });
    check(isOom(r3) && /KV for this sequence/.test(r3.json.error.message), 'KV check fails mid-prefill: 503 out_of_memory', { status: r3.status, text: r3.text.slice(0, 200) });
    const r4 = await request(srv.port, 'POST', '/v1/chat/completions', { body: { ...longMsg, stream: true } });
    const sse4 = parseSSE(r4.text);
    const errChunk = sse4.chunks.find((c) => c.error);
    check(r4.status === 200 && /: prompt_progress 16\//.test(r4.text) && errChunk?.error?.code === 'out_of_memory' && sse4.done &&
          !sse4.chunks.some((c) => c.choices?.[0]?.delta?.content),
          'KV check fails mid-prefill (stream): progress, an out_of_memory error chunk, [DONE], no content', r4.text.slice(0, 400));
    const r5 = await request(srv.port, 'POST', '/v1/chat/completions', { body: greedy });
    check(r5.status === 200 && r5.json?.choices?.[0]?.message?.content === ref.json?.choices?.[0]?.message?.content,
          'after the injected failures: 200 and the same greedy answer', r5.text.slice(0, 200));
    const r6 = await request(srv.port, 'POST', '/v1/chat/completions', { body: { ...longMsg, stream: true } });
    check(r6.status === 200 && parseSSE(r6.text).done && !parseSSE(r6.text).chunks.some((c) => c.error), 'after the injected failures: a long stream is served', r6.text.slice(-200));
    const h = await healthIdle(srv.port);
    check(h.status === 200 && h.json?.slots_active === 0 && h.json?.queued === 0, 'after injected failures: healthy, no slot held', h.json);
    const mem = await memoryIdle(srv.port);
    check(mem?.kv_pool?.live_blocks === 0 && mem?.kv_pool?.live_sequences === 0 && mem?.budget?.lines?.kv_live?.bytes === 0,
          'after injected failures: every reservation returned (no live KV block, kv_live 0 bytes)', { pool: mem?.kv_pool, kv_live: mem?.budget?.lines?.kv_live });
    check(mem?.kv_pool?.free_blocks + mem?.kv_pool?.cached_only_blocks === mem?.kv_pool?.blocks, 'after injected failures: the pool is free but for the cache', mem?.kv_pool);
    check(mem?.budget?.reservations?.failed >= 1, 'the ledger counted the refused reservation', mem?.budget?.reservations);
    srv.proc.kill('SIGTERM');
    check((await waitExit(srv.proc, 15000)).code === 0, 'exit 0 after injected failures');
  }
  // 3a. the KV check fails mid-decode (whole prompt in one chunk; calls: 1 prefill, 2 first decode
  //     step, 3 second): a stream already carrying text ends with an out_of_memory error chunk and
  //     [DONE]; the same for a non-stream request gives 503 (its partial text is dropped); then 200.
  srv = await startServer(model, [...ARGS, '--test-fail-alloc', 'kv_ensure=3,kv_ensure=6']);
  servers.push(srv);
  {
    const body = { ...greedy, max_tokens: 8, ignore_eos: true };
    const d1 = await request(srv.port, 'POST', '/v1/chat/completions', { body: { ...body, stream: true } });
    const sse = parseSSE(d1.text);
    const content = sse.chunks.filter((c) => c.choices?.[0]?.delta?.content).length;
    const errAt = sse.chunks.findIndex((c) => c.error);
    check(d1.status === 200 && errAt > 0 && sse.chunks[errAt].error.code === 'out_of_memory' && sse.done &&
          content >= 1 && !sse.chunks.some((c) => c.choices?.[0]?.finish_reason),
          'KV check fails mid-decode (stream): text, then an out_of_memory error chunk and [DONE], no finish_reason', d1.text.slice(0, 600));
    const d2 = await request(srv.port, 'POST', '/v1/chat/completions', { body });
    check(isOom(d2), 'KV check fails mid-decode (non-stream): 503 out_of_memory', { status: d2.status, text: d2.text.slice(0, 200) });
    const d3 = await request(srv.port, 'POST', '/v1/chat/completions', { body });
    check(d3.status === 200 && d3.json?.usage?.completion_tokens === 8, 'after mid-decode failures: 200 with 8 tokens', d3.text.slice(0, 200));
    const h = await healthIdle(srv.port);
    const mem = await memoryIdle(srv.port);
    check(h.json?.slots_active === 0 && mem?.kv_pool?.live_blocks === 0 && mem?.budget?.lines?.kv_live?.bytes === 0,
          'after mid-decode failures: no slot, no live KV block, kv_live 0', { h: h.json, pool: mem?.kv_pool });
    srv.proc.kill('SIGTERM');
    check((await waitExit(srv.proc, 15000)).code === 0, 'exit 0 after mid-decode failures');
  }
  // 3b. allocations after startup that may fail without failing the request: prompt-cache bookkeeping
  //     (kind other) cannot grow -> the request is still served, nothing is cached; workspace and
  //     scratch are allocated once at startup, so failing every later one changes nothing.
  //     Tokenizer memory failing -> 503 out_of_memory (the server's problem, not a 400).
  srv = await startServer(model, [...ARGS, '--test-fail-alloc', 'alloc.other=1+,alloc.workspace=1+,alloc.scratch=1+,alloc.tokenizer=1']);
  servers.push(srv);
  {
    const t1 = await request(srv.port, 'POST', '/v1/chat/completions', { body: greedy });
    check(isOom(t1) && /tokenize/.test(t1.json.error.message), 'tokenizer allocation fails: 503 out_of_memory', { status: t1.status, text: t1.text.slice(0, 200) });
    const st = [];
    for (let i = 0; i < 4; i++) st.push(await request(srv.port, 'POST', '/v1/chat/completions', { body: { ...greedy, stream: i % 2 === 1, stream_options: i % 2 ? { include_usage: true } : undefined } }));
    check(st.every((r) => r.status === 200), 'cache bookkeeping / workspace / scratch allocations failing: every request served', st.map((r) => r.status));
    const last = st[2].json;
    check(last?.choices?.[0]?.message?.content === ref.json?.choices?.[0]?.message?.content, 'same greedy answer without a prompt cache', last?.choices?.[0]?.message?.content);
    check(last?.usage?.prompt_tokens_details?.cached_tokens === 0, 'a repeated prompt found nothing cached (the cache could not insert)', last?.usage);
    const mem = await memoryIdle(srv.port);   // the last sequence may hold its slot one more step (commit row)
    check(mem?.prompt_cache?.sequences === 0 && mem?.kv_pool?.free_blocks === mem?.kv_pool?.blocks && mem?.budget?.lines?.kv_live?.bytes === 0 &&
          mem?.budget?.lines?.kv_cached?.bytes === 0, 'cache insert failures leak no block or ledger byte', { cache: mem?.prompt_cache?.sequences, pool: mem?.kv_pool });
    srv.proc.kill('SIGTERM');
    check((await waitExit(srv.proc, 15000)).code === 0, 'exit 0 after failed cache inserts');
  }
  // 3c. startup allocations (@start): a one-line reason and exit 1, no crash; off loopback the hook is refused.
  {
    const { spawnSync } = await import('node:child_process');
    const run = (extra) => spawnSync(BIN, ['serve', '--port', '0', '-m', model, '--threads', '1', ...extra], { encoding: 'utf8', timeout: 30000 });
    for (const [spec, re] of [['alloc.workspace=1@start', /cannot allocate the workspace/], ['alloc.kv=1@start', /kv pool: cannot allocate/]]) {
      const r = run(['--test-fail-alloc', spec]);
      check(r.status === 1 && re.test(r.stderr) && !/Sanitizer|runtime error/.test(r.stderr), `startup allocation fails (${spec}): one-line reason, exit 1`, { status: r.status, signal: r.signal, err: r.stderr.slice(-300) });
    }
    const off = spawnSync(BIN, ['serve', '--host', '192.0.2.1', '--port', '0', '-m', model, '--test-fail-alloc', 'kv_block=1'], { encoding: 'utf8', timeout: 10000 });
    check(off.status === 2 && /refused when listening on 192\.0\.2\.1/.test(off.stderr), '--test-fail-alloc refused off loopback', off.stderr);
    const bad = run(['--test-fail-alloc', 'kv_blok=1']);
    check(bad.status === 2 && /fault spec: bad rule/.test(bad.stderr), 'a bad fault spec is refused', bad.stderr);
  }

  // 4. model file replaced / truncated while mapped
  stage('model file');
  {
    const m2 = path.join(tmp, 'served.gguf');
    fs.copyFileSync(model, m2);
    srv = await startServer(m2, ARGS); servers.push(srv);
    const other = path.join(tmp, 'other.gguf');
    fs.writeFileSync(other, Buffer.alloc(1024, 7));
    fs.renameSync(other, m2);                       // replaced: the mapping keeps the old inode
    const r1 = await request(srv.port, 'POST', '/v1/chat/completions', { body: greedy });
    check(r1.status === 200 && r1.json?.choices?.[0]?.message?.content === ref.json?.choices?.[0]?.message?.content,
          'model file replaced while served: answers unchanged', r1.text.slice(0, 200));
    srv.proc.kill('SIGTERM');
    check((await waitExit(srv.proc, 10000)).code === 0, 'exit 0 after the file was replaced');

    fs.copyFileSync(model, m2);
    srv = await startServer(m2, ARGS); servers.push(srv);
    fs.truncateSync(m2, 4096);                     // truncated in place: mapped pages past EOF are gone
    const r2 = await request(srv.port, 'POST', '/v1/chat/completions', { body: greedy, timeout: 15000 });
    await sleep(200);
    const died = srv.proc.exitCode !== null || srv.proc.signalCode !== null;
    const same = r2.status === 200 && r2.json?.choices?.[0]?.message?.content === ref.json?.choices?.[0]?.message?.content;
    console.log(`faults: model truncated while mapped: status ${r2.status}, answer ${same ? 'unchanged' : 'different'}, ` +
                `process ${died ? `died (${srv.proc.signalCode ?? srv.proc.exitCode})` : 'alive'}`);
    // Documented behaviour: either the answer is unchanged (the weights were repacked into memory at load)
    // or the process dies with SIGBUS; never a 200 with different (garbage) text.
    check(same || (died && r2.status !== 200), 'model truncated while mapped: unchanged answer or SIGBUS, never silent garbage', { status: r2.status, died });
    if (died) check(/fatal SIGBUS: a memory-mapped file \(the model\)/.test(srv.log()), 'model truncated: the server says why it died', srv.log().slice(-300));
    if (!died) { srv.proc.kill('SIGTERM'); await waitExit(srv.proc, 10000); }
  }
  // 5. security default: a warning when binding off-loopback without --api-key. Checked without
  // binding anything: 192.0.2.1 (TEST-NET-1) is not on this machine, so the bind fails after the warning.
  stage('off-loopback warning');
  {
    const { spawnSync } = await import('node:child_process');
    const run = (extra) => spawnSync(BIN, ['serve', '--host', '192.0.2.1', '--port', '0', '-m', model, ...extra], { encoding: 'utf8', timeout: 10000 });
    const w = run([]);
    check(/WARNING: listening on 192\.0\.2\.1 without --api-key/.test(w.stderr) && w.status !== 0, 'off-loopback without --api-key: warning', w.stderr);
    const k = run(['--api-key', 'k']);
    check(!/WARNING/.test(k.stderr), 'off-loopback with --api-key: no warning', k.stderr);
    check(!/WARNING: listening/.test(servers[0].log()), 'loopback: no warning');
  }
  finish('faults', servers);
}
main().catch((e) => { console.error(e); process.exit(1); });
