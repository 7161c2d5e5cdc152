// faults.mjs - the server under faults (tiny model, loopback, free port):
//  1. SIGTERM during a stream: the client gets a terminated stream (a final
//     chunk and [DONE]), the process exits 0 within 10 s;
//  2. SIGKILL mid-stream, then a restart on the same port and model: starts
//     cleanly (no stale socket/lock), serves, and greedy output is unchanged;
//  3. allocation failure at admission (test hook KVWISE_TEST_FAIL_ALLOC=N:
//     every N-th admission fails): that request gets 503 out_of_memory with
//     Retry-After, stream or not, the others succeed, slots return to 0;
//  4. the model file replaced (rename over it) while served: the mapping
//     keeps the old inode, answers are unchanged; truncated while mapped:
//     the behaviour is recorded (docs/RELIABILITY.md);
//  5. the off-loopback-without---api-key warning (nothing is bound off-loopback).
import fs from 'node:fs';
import path from 'node:path';
import { check, finish, stage, makeModel, startServer, request, parseSSE, health, sleep, waitExit, tmp, BIN } from './lib.mjs';
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

  // 3. allocation failure at admission
  stage('alloc failure');
  srv = await startServer(model, ARGS, { KVWISE_TEST_FAIL_ALLOC: '3' }); servers.push(srv);
  {
    const st = [];
    for (let i = 0; i < 6; i++) {
      const r = await request(srv.port, 'POST', '/v1/chat/completions', { body: { ...greedy, stream: i === 5 } });
      st.push(r.status);
      if (i === 2 || i === 5) {
        check(r.status === 503 && r.json?.error?.code === 'out_of_memory', `injected allocation failure (request ${i + 1}): 503 out_of_memory`, { status: r.status, text: r.text.slice(0, 200) });
        check(r.headers?.['retry-after'] === '1', 'injected failure: Retry-After', r.headers);
      } else check(r.status === 200, `request ${i + 1} around injected failures: 200`, r.status);
    }
    const h = await health(srv.port);
    check(h.status === 200 && h.json?.slots_active === 0, 'after injected failures: healthy, no slot held', h.json);
    srv.proc.kill('SIGTERM');
    check((await waitExit(srv.proc, 10000)).code === 0, 'exit 0 after injected failures');
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
