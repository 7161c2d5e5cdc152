// conn_memory.mjs - --max-connections K is a memory line that holds
// (docs/MEMORY.md, "HTTP connections"). The ledger's "connections" line is
// (K + the shed margin) x connection_bytes + --max-body (GET /v1/memory,
// /v1/config). K clients each hold a keep-alive connection after a request
// (the costliest idle state: MHD's 64 KiB pool touched) and EXTRA more
// connect: each extra is served in place of the oldest idle held one (shut
// down to make room) or, while the margin is lent out, closed at once; none
// hangs, the connections still held answer again, the server's RSS grows by
// no more than the line's connections part, and a normal request is served.
// Request bodies share the --max-body allowance (503 beside a big upload
// whose bytes have arrived; a Content-Length alone holds nothing).
// Afterwards no connection, fd or thread is left behind.
import net from 'node:net';
import fs from 'node:fs';
import { check, finish, makeModel, startServer, request, rawExchange, statusOf, procStats, settle, health, sleep,
         asanBuild } from './lib.mjs';

const K = 64;           // held connections: 64 x 68 KiB = 4.25 MiB, far above RSS noise at idle
const EXTRA = 32;
const MAX_BODY = 1 << 20;

// A connection that sent one keep-alive request and read its answer; stays open.
function holdAfterRequest(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    const h = { s, text: '', closed: false };
    s.on('error', () => { h.closed = true; });
    s.on('end', () => { h.closed = true; resolve(h); });
    s.on('data', (d) => { h.text += d.toString('latin1'); if (/\r\n\r\n[\s\S]*\}/.test(h.text)) resolve(h); });
    s.on('connect', () => s.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n'));
    setTimeout(() => resolve(h), 10000);
  });
}
function again(h) {          // a second request on a held connection
  return new Promise((resolve) => {
    h.text = '';
    h.s.once('end', () => resolve(h.text));
    h.s.write('GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    setTimeout(() => resolve(h.text), 10000);
  });
}
const vmKiB = (pid, key) => Number((new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8')) || [0, -1])[1]);

async function main() {
  const model = makeModel();
  const srv = await startServer(model, ['--max-connections', String(K), '--max-body', String(MAX_BODY), '--timeout', '30',
                                        '--ctx-size', '256', '--decode-concurrency', '2']);
  const { port } = srv, pid = srv.proc.pid;
  const cfg = (await request(port, 'GET', '/v1/config')).json;
  check(cfg?.max_connections === K, `/v1/config max_connections ${K}`, cfg?.max_connections);
  const perConn = cfg?.connection_bytes, margin = cfg?.connection_shed_margin;
  check(perConn >= 64 * 1024, 'per-connection bytes cover at least MHD\'s 64 KiB pool', perConn);
  const mem = (await request(port, 'GET', '/v1/memory')).json;
  const line = mem?.budget?.lines?.connections?.bytes;
  const threads = cfg?.http_threads, reqMem = cfg?.request_memory_bytes;
  check(threads >= 1 && reqMem > 0 && margin > 0 && line === (K + margin) * perConn + MAX_BODY + threads * reqMem,
    `ledger line "connections" = (${K} + ${margin}) x ${perConn} + ${MAX_BODY} + ${threads} HTTP threads x ${reqMem} (--request-memory)`, line);
  check(/HTTP connections/.test(srv.log()), 'the startup ledger table shows the connections line');
  const warm = await request(port, 'POST', '/v1/chat/completions', { body: { messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 } });
  check(warm.status === 200, 'warm-up request served', warm.status);
  await sleep(300);
  const base = procStats(pid);

  // K held connections, each answered once
  const held = [];
  for (let i = 0; i < K; i++) held.push(await holdAfterRequest(port));
  const answered = held.filter((h) => statusOf(h.text) === 200 && !h.closed).length;
  check(answered === K, `${K} connections accepted and answered`, answered);
  // EXTRA more, once the held ones have idled past the shed age: each served in
  // place of an idle one, or closed at once
  await sleep(1200);
  const extra = await Promise.all(Array.from({ length: EXTRA }, () => rawExchange(port, 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', 5000)));
  const servedX = extra.filter((r) => statusOf(r.text) === 200).length;
  const closedX = extra.filter((r) => r.why !== 'timeout' && statusOf(r.text) === -1).length;
  check(servedX + closedX === EXTRA && servedX > 0, `${EXTRA} connections over the limit: served in place of idle ones or closed at once, none hangs`,
        { servedX, closedX, why: extra.map((r) => r.why) });
  await sleep(500);
  const shedOnes = held.filter((h) => h.closed).length;
  // (an extra that is done gives its place to the next one: fewer held ones close than extras are served)
  check(shedOnes > 0 && shedOnes <= servedX, 'the extras took the places of idle held connections', { shedOnes, servedX });
  const rssHeld = vmKiB(pid, 'VmRSS');
  const growth = (rssHeld - base.rssKiB) * 1024;
  console.log(`conn_memory: ${K} held keep-alive connections: RSS ${base.rssKiB} -> ${rssHeld} KiB ` +
              `(${(growth / K / 1024).toFixed(1)} KiB each; ledger ${perConn / 1024} KiB each)`);
  if (asanBuild(pid)) console.log('conn_memory: ASan build: the RSS bound is skipped (its redzones and shadow memory are outside the ledger)');
  else check(growth <= K * perConn, `RSS growth with ${K} connections held (${growth} B) within the ledger's ${K} x ${perConn} B`);

  // each held connection still works
  const open = held.filter((h) => !h.closed);
  const second = await Promise.all(open.map(again));
  check(second.every((t) => statusOf(t) === 200), 'every connection still held answers a second request', second.filter((t) => statusOf(t) !== 200).length);
  for (const h of held) h.s.destroy();
  await sleep(300);
  const after = await request(port, 'POST', '/v1/chat/completions', { body: { messages: [{ role: 'user', content: 'still there?' }], max_tokens: 2 } });
  check(after.status === 200, 'a normal request is served once places free', after.status);
  const h = await health(port);
  check(h.json?.connections_refused === closedX, '/health counts the refused connections', { h: h.json, closedX });
  check(h.json?.connections_open <= 2, '/health: the held connections were given back', h.json?.connections_open);
  // request bodies share --max-body: a 700 KB upload whose first 690 KB have
  // arrived holds them of the 1 MiB, so a 400 KB body beside it gets 503 +
  // Retry-After; once the first is gone the same body is read (and judged on
  // its content: not 503)
  const big = net.connect(port, '127.0.0.1');
  big.on('error', () => {});
  await new Promise((r) => big.on('connect', r));
  big.write('POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 700000\r\n\r\n{"messages":[{"role":"user","content":"' + 'z'.repeat(690000));
  await sleep(300);
  const bodyB = JSON.stringify({ messages: [{ role: 'user', content: 'y'.repeat(400000) }], max_tokens: 2 });
  const busy = await request(port, 'POST', '/v1/chat/completions', { raw: bodyB });
  check(busy.status === 503 && busy.json?.error?.code === 'out_of_memory' && busy.headers['retry-after'],
        'a body that does not fit beside another in the --max-body allowance: 503 out_of_memory + Retry-After', { status: busy.status, body: busy.text?.slice(0, 200) });
  big.destroy();
  await sleep(300);
  const later = await request(port, 'POST', '/v1/chat/completions', { raw: bodyB });
  check(later.status !== 503 && later.status > 0, `the same body is read once the other upload is gone (${later.status} ${later.json?.error?.code || ''})`, later.status);
  const end = await settle(pid, base);
  check(end.threads <= base.threads && end.fds <= base.fds, 'no thread or fd left behind', { base, end });
  finish('conn_memory', [srv]);
}
main().catch((e) => { console.error(e); process.exit(1); });
