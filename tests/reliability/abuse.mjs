// abuse.mjs - misbehaving clients against a running `kvwise serve` (tiny
// model, loopback, free port). Each case gets its documented status (see
// docs/SERVER.md, docs/SECURITY.md), a normal request is served while or
// right after it, and at the end the server's thread and fd counts
// (/proc/<pid>) are back to what they were before the abuse.
// Cases: slowloris (stalled and trickled headers), a stream nobody reads,
// N connections at once (KW_ABUSE_CONNS, default 600; over --max-connections
// they are closed at once), oversized header
// block, body over --max-body (Content-Length and chunked), invalid UTF-8,
// lone surrogates, deeply nested JSON, huge max_tokens, negative/NaN/
// out-of-range sampling values, unknown fields, wrong content types.
import fs from 'node:fs';
import net from 'node:net';
import { check, finish, stage, makeModel, startServer, request, rawExchange, statusOf, parseSSE,
         procStats, settle, health, sleep, asanBuild } from './lib.mjs';

const IDLE_TIMEOUT_S = 2;        // --timeout for this server: stalled connections close after it
const CONNS = Math.max(10, Math.min(Number(process.env.KW_ABUSE_CONNS || 600), 1000));
const MAX_BODY = 65536;

const chat = (content, extra = {}) => ({ messages: [{ role: 'user', content }], max_tokens: 4, temperature: 0, ...extra });
async function served(port, what) {
  const r = await request(port, 'POST', '/v1/chat/completions', { body: chat('still there?') });
  check(r.status === 200 && r.json?.choices?.[0]?.message, `${what}: a normal request is served`, { status: r.status, text: r.text?.slice(0, 200) });
}
function errIs(r, status, code, what) {
  check(r.status === status, `${what}: status ${status}`, { got: r.status, body: (r.text || r.error || '').slice(0, 300) });
  if (code) check(r.json?.error?.code === code, `${what}: code ${code}`, r.json);
}

async function main() {
  const model = makeModel();
  const srv = await startServer(model, ['--ctx-size', '256', '--decode-concurrency', '4', '--prefill-step-size', '64',
    '--max-body', String(MAX_BODY), '--timeout', String(IDLE_TIMEOUT_S)]);
  const { port } = srv, pid = srv.proc.pid;
  await served(port, 'warm-up');
  const base = procStats(pid);
  const sanitized = asanBuild(pid);   // ASan build: RSS figures are its allocator's
  stage(`baseline ${JSON.stringify(base)}`);

  // ---- slowloris: stalled headers are closed after --timeout; others served meanwhile
  stage('slowloris');
  {
    const stalled = [];
    for (let i = 0; i < 20; i++) stalled.push(rawExchange(port, 'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le', (IDLE_TIMEOUT_S + 6) * 1000));
    await served(port, 'slowloris (20 stalled header blocks)');
    const t0 = Date.now();
    const res = await Promise.all(stalled);
    const closedBy = (Date.now() - t0) / 1e3;
    check(res.every((r) => r.why === 'closed' || r.why.startsWith('error')), 'stalled header blocks are closed by the server', res.map((r) => r.why));
    check(closedBy < IDLE_TIMEOUT_S + 5, `stalled connections closed within --timeout (+slack): ${closedBy.toFixed(1)} s`);
    // trickle: one header byte every 300 ms keeps a connection alive (bounded by the connection limit, see SECURITY.md)
    const s = net.connect(port, '127.0.0.1');
    await new Promise((r) => s.on('connect', r));
    s.on('error', () => {});
    s.write('GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ');
    for (let i = 0; i < 8; i++) { s.write('a'); await sleep(300); }
    await served(port, 'trickled headers');
    s.destroy();
  }

  // ---- a client that never reads its stream
  stage('unread stream');
  {
    const body = JSON.stringify({ ...chat('talk a lot'), max_tokens: 200, ignore_eos: true, stream: true });
    const s = net.connect(port, '127.0.0.1');
    s.on('error', () => {});
    await new Promise((r) => s.on('connect', r));
    s.pause();                                  // never read a byte
    s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    await sleep(300);
    await served(port, 'while a stream is not read');
    s.destroy();
    // its slot is freed once the hang-up is seen
    const t0 = Date.now();
    let h;
    do { await sleep(100); h = await health(port); } while (h.json?.slots_active !== 0 && Date.now() - t0 < 10000);
    check(h.json?.slots_active === 0, 'unread stream: slot freed after the client left', h.json);
  }

  // ---- many connections at once
  stage(`${CONNS} connections`);
  {
    // --max-connections (default 128) caps open connections: the server
    // closes the ones over it at once and counts them (/health
    // connections_refused); every connection it accepted gets its 200, and
    // the kernel-measured peak RSS grows by no more than the ledger's
    // connections line (release build: ASan's allocator keeps freed memory).
    const cfg = (await request(port, 'GET', '/v1/config')).json;
    const line = (await request(port, 'GET', '/v1/memory')).json?.budget?.lines?.connections?.bytes;
    const refused0 = (await health(port)).json?.connections_refused;
    const rss0 = procStats(pid).rssKiB * 1024;
    const t0 = Date.now();
    const all = [];
    for (let i = 0; i < CONNS; i++) all.push(rawExchange(port, 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', 20000));
    const res = await Promise.all(all);
    const ok = res.filter((r) => statusOf(r.text) === 200).length;
    const refused = res.filter((r) => statusOf(r.text) === -1 && r.why !== 'timeout').length;
    const byLimit = (await health(port)).json?.connections_refused - refused0;
    const hwm = Number(/^VmHWM:\s+(\d+)/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) * 1024;
    console.log(`abuse: ${CONNS} simultaneous connections (limit ${cfg?.max_connections}): ${ok} x 200, ${refused} closed ` +
                `without answer (${byLimit} by the limit), peak RSS ${rss0} -> ${hwm} B (line ${line} B), ${((Date.now() - t0) / 1e3).toFixed(1)} s`);
    check(cfg?.max_connections > 0 && line > 0, 'the connection limit and its ledger line are reported', { cfg: cfg?.max_connections, line });
    check(ok + refused === CONNS, `${CONNS} connections: each answered 200 or closed, none hangs`, { ok, refused });
    check(refused === byLimit, 'only connections over --max-connections go unanswered: every accepted one got its 200', { refused, byLimit });
    check(ok >= Math.min(CONNS, cfg?.max_connections), 'at least --max-connections of them were served', { ok });
    if (!sanitized) check(hwm - rss0 <= line, 'peak RSS over the burst grows by at most the ledger\'s connections line', { rss0, hwm, line });
    await served(port, 'after the connection burst');
  }

  // ---- oversized headers
  stage('headers');
  {
    let hdr = '';
    for (let i = 0; i < 200; i++) hdr += `X-Filler-${i}: ${'v'.repeat(500)}\r\n`;
    const r = await rawExchange(port, `GET /health HTTP/1.1\r\nHost: x\r\n${hdr}\r\n`, 10000);
    const st = statusOf(r.text);
    check(st === 431 || st === 413 || (st === -1 && r.why !== 'timeout'), '100 KB of headers: 431/413 or closed', { st, why: r.why });
    await served(port, 'after oversized headers');
  }

  // ---- bodies over the limit
  stage('bodies');
  {
    const r1 = await rawExchange(port, `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 10000000000\r\n\r\n{`, 10000);
    check(statusOf(r1.text) === 413, 'Content-Length 10 GB: 413 before reading', r1.text.slice(0, 100));
    const big = JSON.stringify(chat('x'.repeat(MAX_BODY)));
    errIs(await request(port, 'POST', '/v1/chat/completions', { raw: big }), 413, 'request_too_large', 'body over --max-body');
    const r2 = await request(port, 'POST', '/v1/chat/completions', { raw: big, headers: { 'Transfer-Encoding': 'chunked' } });
    errIs(r2, 413, 'request_too_large', 'chunked body over --max-body');
    await served(port, 'after big bodies');
  }

  // ---- invalid text and JSON
  stage('json');
  {
    const bad = Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"bad \xff\xfe\xc0\xaf utf8 ', 'latin1'),
      Buffer.from('"}],"max_tokens":4}')]);
    const r = await request(port, 'POST', '/v1/chat/completions', { raw: bad });
    check(r.status === 200 || r.status === 400, 'invalid UTF-8 in a prompt: 200 (bytes tokenized as is) or 400', r.status);
    check(r.status !== 200 || Buffer.from(r.text).toString('utf8') === r.text, 'invalid UTF-8: the response is valid UTF-8');
    const sur = await request(port, 'POST', '/v1/chat/completions', { raw: '{"messages":[{"role":"user","content":"\\ud800 lone \\udfff"}],"max_tokens":4}' });
    check(sur.status === 200 || sur.status === 400, 'lone surrogate escapes: 200 or 400', sur.status);
    // 30000 levels (60 KB, under --max-body): deeper than cJSON's nesting limit (1000) -> not JSON
    const nested = '{"messages":' + '['.repeat(30000) + ']'.repeat(30000) + '}';
    errIs(await request(port, 'POST', '/v1/chat/completions', { raw: nested }), 400, 'invalid_json', '30000-deep JSON');
    const nested2 = '{"messages":[{"role":"user","content":"hi"}],"x":' + '{"a":'.repeat(5000) + '1' + '}'.repeat(5000) + '}';
    const rn2 = await request(port, 'POST', '/v1/chat/completions', { raw: nested2 });
    check(rn2.status === 200 || rn2.status === 400, '5000-deep unknown field: 200 or 400', rn2.status);
    errIs(await request(port, 'POST', '/v1/chat/completions', { raw: '{"messages":[{"role":"user","content":"hi"}],"temperature":NaN}' }), 400, 'invalid_json', 'NaN literal');
    errIs(await request(port, 'POST', '/v1/chat/completions', { raw: '' }), 400, 'invalid_json', 'empty body');
    errIs(await request(port, 'POST', '/v1/chat/completions', { raw: '[1,2]' }), 400, 'invalid_json', 'array body');
  }

  // ---- values
  stage('values');
  {
    const huge = await request(port, 'POST', '/v1/chat/completions', { body: chat('hi', { max_tokens: 1e12 }) });
    check(huge.status === 200 && huge.json?.usage?.total_tokens <= 256, 'max_tokens 1e12: clamped to the context, 200', huge.json?.usage ?? huge.text);
    errIs(await request(port, 'POST', '/v1/chat/completions', { body: chat('hi', { max_tokens: 1e300 }) }), 400, 'invalid_value', 'max_tokens 1e300');
    errIs(await request(port, 'POST', '/v1/chat/completions', { body: chat('hi', { max_tokens: -5 }) }), 400, 'invalid_value', 'max_tokens -5');
    for (const [k, v] of [['temperature', -1], ['top_p', -0.5], ['top_p', 7], ['min_p', -1], ['top_k', 1e10],
                          ['presence_penalty', -1e9], ['frequency_penalty', 1e308], ['temperature', 1e308]]) {
      const r = await request(port, 'POST', '/v1/chat/completions', { body: chat('hi', { [k]: v }) });
      errIs(r, 400, 'invalid_value', `${k}=${v}`);
      check(r.json?.error?.param === k, `${k}=${v}: param names the field`, r.json);
    }
    errIs(await request(port, 'POST', '/v1/chat/completions', { body: chat('hi', { temperature: 'NaN' }) }), 400, 'invalid_type', 'temperature "NaN"');
    const k0 = await request(port, 'POST', '/v1/chat/completions', { body: chat('hi', { top_k: -3 }) });
    check(k0.status === 200, 'top_k <= 0 means off (vLLM uses -1): 200', k0.status);
    const unk = await request(port, 'POST', '/v1/chat/completions', { body: chat('hi', { frobnicate: { a: [1, 2] }, user: 'u', metadata: {} }) });
    check(unk.status === 200, 'unknown fields are ignored: 200', unk.text?.slice(0, 200));
  }

  // ---- content types
  stage('content types');
  {
    // a body must be sent as JSON: the media types a web page can POST without a
    // CORS preflight (text/plain, forms) are refused, whatever the body holds
    for (const ct of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=xyz', 'application/xml']) {
      const r = await request(port, 'POST', '/v1/chat/completions', { body: chat('hi'), headers: { 'Content-Type': ct } });
      errIs(r, 415, 'unsupported_media_type', `Content-Type ${ct} with a JSON body`);
    }
    const vnd = await request(port, 'POST', '/v1/chat/completions', { body: chat('hi'), headers: { 'Content-Type': 'application/vnd.api+json' } });
    check(vnd.status === 200, 'Content-Type application/...+json: parsed as JSON, 200', vnd.status);
    const form = await request(port, 'POST', '/v1/chat/completions', { raw: 'a=1&b=2', headers: { 'Content-Type': 'application/json' } });
    errIs(form, 400, 'invalid_json', 'form body sent as JSON');
    const xml = await request(port, 'POST', '/v1/chat/completions', { raw: '<xml/>', headers: { 'Content-Type': 'application/json' } });
    errIs(xml, 400, 'invalid_json', 'XML body sent as JSON');
    const strm = await request(port, 'POST', '/v1/completions', { body: { prompt: 'x', max_tokens: 3, stream: true } });
    check(strm.status === 200 && parseSSE(strm.text).done, 'stream still works after the abuse', strm.text?.slice(0, 200));
  }

  // ---- no leaks
  stage('leaks');
  const after = await settle(pid, base);
  console.log(`abuse: threads ${base.threads} -> ${after.threads}, fds ${base.fds} -> ${after.fds}, RSS ${base.rssKiB} -> ${after.rssKiB} KiB`);
  check(after.threads <= base.threads, 'no thread leak', { base, after });
  check(after.fds <= base.fds, 'no fd leak', { base, after });
  check((await health(port)).status === 200, 'server healthy at the end');
  srv.proc.kill('SIGTERM');
  const { waitExit } = await import('./lib.mjs');
  const ex = await waitExit(srv.proc, 10000);
  check(ex.code === 0, 'clean exit after the abuse', ex);
  finish('abuse', [srv]);
}
main().catch((e) => { console.error(e); process.exit(1); });
