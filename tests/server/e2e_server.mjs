// e2e_server.mjs - end-to-end checks of `kvwise serve` over real HTTP.
// Makes a tiny random-weight model with `$KW_BIN mkmodel` (falls back to the
// built-in stub engine when this build cannot load models), starts the server
// on a free loopback port and checks: chat + completions, stream and not;
// stop strings; seed reproducibility; usage; every error status + JSON shape;
// CORS; prompt progress; 16 concurrent streams; a disconnect frees its slot;
// greedy output equals `kvwise generate`; SIGTERM ends streams and exits 0.
import { spawn, spawnSync } from 'node:child_process';
import http from 'node:http';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const BIN = process.env.KW_BIN;
// Every path ends in process.exit(); an event loop that drains first means a
// promise never settled (e.g. a server that died early): that is a failure.
process.on('beforeExit', () => { console.error('test ended without finishing'); process.exit(1); });
// Servers this test started never outlive it, whatever way it ends.
const children = new Set();
const spawnServer = (...a) => { const c = spawn(...a); children.add(c); c.on('exit', () => children.delete(c)); return c; };
process.on('exit', () => { for (const c of children) { try { c.kill('SIGKILL'); } catch { /* gone */ } } });
if (!BIN) { console.error('KW_BIN not set'); process.exit(2); }
let passed = 0, failed = 0;
function check(cond, what, extra) {
  if (cond) passed++;
  else { failed++; console.error(`CHECK failed: ${what}${extra !== undefined ? ' :: ' + JSON.stringify(extra).slice(0, 400) : ''}`); }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const KEY = 'test-key-123';
const ORIGIN = 'http://allowed.example';

// ---- model -----------------------------------------------------------------
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kw-e2e-'));
const modelPath = path.join(tmp, 'tiny.gguf');
let useModel = false, haveGenerate = false;
{
  const r = spawnSync(BIN, ['mkmodel', '--preset', 'tiny', '--seed', '7', '-o', modelPath], { encoding: 'utf8' });
  useModel = r.status === 0 && fs.existsSync(modelPath);
  haveGenerate = useModel && spawnSync(BIN, ['generate', '-m', modelPath, '-p', 'hi', '-n', '1'], { encoding: 'utf8' }).status === 0;
}

// ---- server ------------------------------------------------------------------
const CTX = 512;
async function startServer(extra = []) {
  const args = ['serve', '--port', '0', '--api-key', KEY, '--allowed-origins', ORIGIN, '--ctx-size', String(CTX),
    '--decode-concurrency', '4', '--prefill-step-size', '64', '--max-body', '65536', ...extra];
  // one compute thread: tests share a loaded machine, where a spinning pool only costs time
  if (useModel) args.push('-m', modelPath, '--threads', '1'); else args.push('--stub-engine', '--stub-step-us', '1000');
  const proc = spawnServer(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (d) => { log += d.toString(); });
  const t0 = Date.now();
  while (!/ready on http:\/\/[^:]+:(\d+)/.test(log)) {
    if (proc.exitCode !== null) throw new Error('server exited: ' + log);
    if (Date.now() - t0 > 20000) throw new Error('server did not start: ' + log);
    await sleep(20);
  }
  const port = Number(/ready on http:\/\/[^:]+:(\d+)/.exec(log)[1]);
  return { proc, port, log: () => log };
}

function request(port, method, p, { body, headers = {}, auth = true, raw } = {}) {
  return new Promise((resolve, reject) => {
    const h = { ...headers };
    if (auth) h.Authorization = `Bearer ${KEY}`;
    let data = raw !== undefined ? raw : body !== undefined ? JSON.stringify(body) : undefined;
    if (data !== undefined) h['Content-Type'] = 'application/json';
    const req = http.request({ host: '127.0.0.1', port, method, path: p, headers: h }, (res) => {
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { buf += d; });
      res.on('end', () => {
        let json = null;
        try { json = JSON.parse(buf); } catch { /* SSE or empty */ }
        resolve({ status: res.statusCode, headers: res.headers, text: buf, json });
      });
    });
    req.on('error', reject);
    req.setTimeout(30000, () => req.destroy(new Error('timeout')));
    if (data !== undefined) req.write(data);
    req.end();
  });
}

function parseSSE(text) {
  const events = [], comments = [];
  for (const block of text.split('\n\n')) {
    for (const line of block.split('\n')) {
      if (line.startsWith('data: ')) events.push(line.slice(6));
      else if (line.startsWith(':')) comments.push(line);
    }
  }
  const chunks = events.filter((e) => e !== '[DONE]').map((e) => JSON.parse(e));
  return { chunks, done: events[events.length - 1] === '[DONE]', comments };
}
const chatText = (chunks) => chunks.map((c) => c.choices?.[0]?.delta?.content ?? '').join('');
const complText = (chunks) => chunks.map((c) => c.choices?.[0]?.text ?? '').join('');

function checkErrorShape(r, status, what, code) {
  check(r.status === status, `${what}: status ${status}`, { got: r.status, body: r.text });
  const e = r.json?.error;
  check(e && typeof e.message === 'string' && e.message.length > 0 && typeof e.type === 'string' &&
        'param' in e && 'code' in e, `${what}: OpenAI error shape`, r.json);
  if (code) check(e?.code === code, `${what}: code ${code}`, e);
}

const msgs = (t) => [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: t }];

const T0 = Date.now();
const stage = (name) => { if (process.env.KW_TEST_VERBOSE) console.log(`${((Date.now() - T0) / 1e3).toFixed(2)}s ${name}`); };

async function main() {
  const srv = await startServer();
  const P = srv.port;
  console.log(`server on ${P} (${useModel ? 'tiny model' : 'stub engine'})`);

  // health, models, config
  let r = await request(P, 'GET', '/health', { auth: false });
  check(r.status === 200 && r.json?.status === 'ok', 'health 200 ok', r.json);
  r = await request(P, 'GET', '/v1/models');
  check(r.status === 200 && r.json?.object === 'list' && r.json.data?.[0]?.object === 'model', 'models list', r.json);
  r = await request(P, 'GET', '/v1/config');
  check(r.status === 200 && r.json?.ctx_size === CTX && r.json?.decode_concurrency === 4 &&
        r.json?.prefill_step_size === 64 && r.json?.api_key_set === true, 'config reflects flags', r.json);
  check(srv.log().includes('effective settings') && srv.log().includes('prefill_step_size'), 'startup report in log');
  check(/^jinja \(model\)/.test(r.json?.chat_template ?? ''), "the model's own chat template is rendered (Jinja)", r.json?.chat_template);

  stage('non-stream chat + stream chat');
  // non-stream chat + stream chat (greedy): same text, usage consistent
  const base = { model: 'x', messages: msgs('Say something.'), max_tokens: 12, temperature: 0 };
  r = await request(P, 'POST', '/v1/chat/completions', { body: base });
  const c1 = r.json;
  check(r.status === 200 && c1?.object === 'chat.completion' && c1.choices?.[0]?.message?.role === 'assistant' &&
        typeof c1.choices[0].message.content === 'string', 'chat non-stream shape', c1);
  const u = c1?.usage;
  check(u && u.prompt_tokens > 0 && u.completion_tokens > 0 && u.completion_tokens <= 12 &&
        u.total_tokens === u.prompt_tokens + u.completion_tokens &&
        u.prompt_tokens_details?.cached_tokens >= 0, 'chat usage counts', u);
  check(['stop', 'length'].includes(c1?.choices?.[0]?.finish_reason), 'chat finish_reason', c1?.choices);
  if (c1?.choices?.[0]?.finish_reason === 'length') check(u.completion_tokens === 12, 'length means max_tokens reached', u);

  r = await request(P, 'POST', '/v1/chat/completions', { body: { ...base, stream: true, stream_options: { include_usage: true } } });
  check(r.status === 200 && /text\/event-stream/.test(r.headers['content-type']), 'chat stream content-type', r.headers);
  let s = parseSSE(r.text);
  check(s.done, 'chat stream ends with [DONE]');
  check(s.chunks[0]?.choices?.[0]?.delta?.role === 'assistant', 'first chunk carries the role', s.chunks[0]);
  check(s.chunks.every((c) => c.object === 'chat.completion.chunk' && c.id === s.chunks[0].id), 'chunk object + id');
  const last = s.chunks[s.chunks.length - 1];
  check(last?.choices?.length === 0 && last.usage?.completion_tokens === u?.completion_tokens &&
        last.usage?.prompt_tokens === u?.prompt_tokens, 'usage chunk with include_usage', last);
  const fin = s.chunks.filter((c) => c.choices?.[0]?.finish_reason);
  check(fin.length === 1 && fin[0].choices[0].finish_reason === c1?.choices?.[0]?.finish_reason, 'one finish chunk', fin);
  check(chatText(s.chunks) === c1?.choices?.[0]?.message?.content, 'stream text == non-stream text (greedy)',
        [chatText(s.chunks), c1?.choices?.[0]?.message?.content]);

  stage('completions');
  // completions, stream and not
  const cb = { prompt: 'Once upon a time', max_tokens: 16, temperature: 0 };
  r = await request(P, 'POST', '/v1/completions', { body: cb });
  const k1 = r.json;
  check(r.status === 200 && k1?.object === 'text_completion' && typeof k1.choices?.[0]?.text === 'string', 'completion shape', k1);
  r = await request(P, 'POST', '/v1/completions', { body: { ...cb, stream: true } });
  s = parseSSE(r.text);
  check(s.done && complText(s.chunks) === k1?.choices?.[0]?.text, 'completion stream text == non-stream', [complText(s.chunks), k1?.choices?.[0]?.text]);

  stage('stop strings');
  // stop strings: cut exactly before the first occurrence, never leaked, also when streamed
  r = await request(P, 'POST', '/v1/completions', { body: { prompt: 'Hello', max_tokens: 40, temperature: 0 } });
  const full = r.json?.choices?.[0]?.text ?? '';
  if (full.length >= 8) {
    const stop = full.slice(4, 6);
    const expect = full.slice(0, full.indexOf(stop));
    for (const stream of [false, true]) {
      r = await request(P, 'POST', '/v1/completions', { body: { prompt: 'Hello', max_tokens: 40, temperature: 0, stop: ['\u0001never', stop], stream } });
      const text = stream ? complText(parseSSE(r.text).chunks) : r.json?.choices?.[0]?.text;
      const fr = stream ? parseSSE(r.text).chunks.find((c) => c.choices?.[0]?.finish_reason)?.choices[0].finish_reason : r.json?.choices?.[0]?.finish_reason;
      check(text === expect, `stop string cut (stream=${stream})`, { text, expect, stop });
      check(fr === 'stop', `stop string finish_reason (stream=${stream})`, fr);
    }
  } else check(false, 'greedy text long enough for the stop test', full);

  stage('seed reproducibility');
  // seed reproducibility
  const sb = { prompt: 'Seeds', max_tokens: 16, temperature: 1.0, seed: 42 };
  const a = (await request(P, 'POST', '/v1/completions', { body: sb })).json?.choices?.[0]?.text;
  const b = (await request(P, 'POST', '/v1/completions', { body: sb })).json?.choices?.[0]?.text;
  const c = (await request(P, 'POST', '/v1/completions', { body: { ...sb, seed: 4242 } })).json?.choices?.[0]?.text;
  check(typeof a === 'string' && a === b, 'same seed, same text', [a, b]);
  check(a !== c, 'another seed, another text', [a, c]);

  stage('logprobs');
  // logprobs
  r = await request(P, 'POST', '/v1/chat/completions', { body: { ...base, max_tokens: 4, logprobs: true, top_logprobs: 3 } });
  const lp = r.json?.choices?.[0]?.logprobs?.content;
  check(Array.isArray(lp) && lp.length >= 1 && lp.every((e) => e.logprob <= 0 && e.top_logprobs.length === 3 &&
        Array.isArray(e.bytes)), 'chat logprobs shape', lp);
  check(lp && lp.every((e) => Math.abs(e.logprob - e.top_logprobs[0].logprob) < 1e-4), 'greedy token is the top logprob', lp);

  // max_tokens above the context is clamped, not rejected
  // (a long prompt leaves little room, so the clamped answer stays short)
  r = await request(P, 'POST', '/v1/completions', { body: { prompt: 'ab '.repeat(240), max_tokens: 100000000, temperature: 0, ignore_eos: true } });
  check(r.status === 200 && r.json?.usage?.prompt_tokens > 100 && r.json?.usage?.completion_tokens === CTX - r.json?.usage?.prompt_tokens &&
        r.json?.choices?.[0]?.finish_reason === 'length', 'max_tokens clamped to context', r.json?.usage);

  stage('errors');
  // errors
  checkErrorShape(await request(P, 'POST', '/v1/chat/completions', { raw: '{"messages": [' }), 400, 'malformed JSON');
  checkErrorShape(await request(P, 'POST', '/v1/chat/completions', { body: { messages: 'hi' } }), 400, 'messages not an array');
  checkErrorShape(await request(P, 'POST', '/v1/chat/completions', { body: { messages: msgs('x'), temperature: 'hot' } }), 400, 'bad temperature type');
  checkErrorShape(await request(P, 'POST', '/v1/chat/completions', { body: { messages: msgs('x'), max_tokens: 'many' } }), 400, 'bad max_tokens type');
  checkErrorShape(await request(P, 'POST', '/v1/chat/completions', { body: { messages: [{ role: 'wizard', content: 'x' }] } }), 400, 'unknown role');
  checkErrorShape(await request(P, 'POST', '/v1/chat/completions', { body: { messages: msgs('x') }, auth: false }), 401, 'no API key', 'invalid_api_key');
  checkErrorShape(await request(P, 'POST', '/v1/chat/completions', { body: { messages: msgs('x') }, auth: false, headers: { Authorization: 'Bearer wrong' } }), 401, 'wrong API key');
  checkErrorShape(await request(P, 'GET', '/v1/nothing-here'), 404, 'unknown path');
  checkErrorShape(await request(P, 'GET', '/v1/chat/completions'), 405, 'GET on a POST endpoint');
  checkErrorShape(await request(P, 'POST', '/v1/completions', { body: { prompt: 'x'.repeat(70000) } }), 413, 'body too large', 'request_too_large');
  r = await request(P, 'POST', '/v1/completions', { body: { prompt: 'lorem ipsum dolor sit amet '.repeat(400) } });
  checkErrorShape(r, 400, 'context length exceeded', 'context_length_exceeded');
  check(r.json?.error?.n_ctx === CTX && r.json?.error?.n_prompt_tokens > CTX &&
        r.json?.error?.message.includes(String(CTX)) && r.json?.error?.message.includes(String(r.json?.error?.n_prompt_tokens)),
        'context error names the prompt tokens and the context size', r.json);
  r = await request(P, 'POST', '/v1/chat/completions', { body: { messages: msgs('x'), max_tokens: 2, tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }], tool_choice: 'auto', unknown_field: { a: 1 } } });
  check(r.status === 200, 'tools + tool_choice + unknown fields accepted', r.json);
  checkErrorShape(await request(P, 'POST', '/v1/chat/completions', { body: { messages: msgs('x'), n: 2 } }), 400, 'n > 1');
  // an OpenCode-shaped agent turn: ten tools, tool_choice auto, streaming with usage, a huge
  // max_tokens (clamped), a tool round trip in the history, session headers
  {
    const tools = Array.from({ length: 10 }, (_, i) => ({ type: 'function', function: { name: `tool${i}`, description: 'd', parameters: { type: 'object', properties: { p: { type: 'string' } }, required: ['p'] } } }));
    const history = [
      { role: 'system', content: 'You are an agent. '.repeat(20) },
      { role: 'user', content: 'read the file' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'tool0', arguments: '{"p":"a.txt"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'file contents' },
    ];
    r = await request(P, 'POST', '/v1/chat/completions', { headers: { 'x-session-id': 's1', 'x-session-affinity': 's1' },
      body: { model: 'm', messages: history, tools, tool_choice: 'auto', stream: true, stream_options: { include_usage: true }, max_tokens: 32000, temperature: 0 } });
    s = parseSSE(r.text);
    const fr = s.chunks.filter((c) => c.choices?.[0]?.finish_reason).map((c) => c.choices[0].finish_reason);
    check(r.status === 200 && s.done && fr.length === 1 && ['stop', 'length'].includes(fr[0]) && s.chunks[s.chunks.length - 1]?.usage?.total_tokens > 0,
          'agent-shaped streaming turn: 200, one finish_reason, usage last, [DONE]', { status: r.status, fr, body: r.text.slice(0, 300) });
  }

  stage('CORS');
  // CORS
  r = await request(P, 'OPTIONS', '/v1/chat/completions', { auth: false, headers: { Origin: ORIGIN, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization,content-type' } });
  check(r.status === 204 && r.headers['access-control-allow-origin'] === ORIGIN && /POST/.test(r.headers['access-control-allow-methods'] ?? ''), 'CORS preflight', r.headers);
  r = await request(P, 'GET', '/v1/models', { headers: { Origin: 'http://evil.example' } });
  check(r.status === 200 && !r.headers['access-control-allow-origin'], 'no CORS header for other origins', r.headers);

  stage('prompt progress');
  // prompt progress: a prompt longer than prefill-step-size
  r = await request(P, 'POST', '/v1/completions', { body: { prompt: 'word '.repeat(150), max_tokens: 2, stream: true } });
  s = parseSSE(r.text);
  check(s.done && s.comments.some((x) => /^: prompt_progress \d+\/\d+$/.test(x)), 'SSE prompt_progress comments', s.comments);
  check(/Prompt processing progress: \d+\/\d+/.test(srv.log()), 'progress lines in the log');

  stage('16 concurrent');
  // 16 concurrent streaming clients all complete
  const jobs = [];
  for (let i = 0; i < 16; i++) jobs.push(request(P, 'POST', '/v1/chat/completions', { body: { messages: msgs(`client ${i}`), max_tokens: 24, temperature: 0, stream: true, stream_options: { include_usage: true } } }));
  const res = await Promise.all(jobs);
  const ok = res.filter((x) => { const p = parseSSE(x.text); const us = p.chunks[p.chunks.length - 1]?.usage; return x.status === 200 && p.done && us && us.completion_tokens >= 1; });
  check(ok.length === 16, '16 concurrent streams complete', res.map((x) => x.status));
  // batched greedy equals unbatched greedy for the same prompt
  const solo = (await request(P, 'POST', '/v1/chat/completions', { body: { messages: msgs('client 5'), max_tokens: 24, temperature: 0 } })).json?.choices?.[0]?.message?.content;
  check(chatText(parseSSE(res[5].text).chunks) === solo, 'batched stream == solo greedy', [chatText(parseSSE(res[5].text).chunks), solo]);

  stage('a disconnect mid-stream');
  // a disconnect mid-stream frees the slot
  await new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port: P, method: 'POST', path: '/v1/completions', headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' } }, (res2) => {
      res2.once('data', () => { req.destroy(); resolve(); });
    });
    req.on('error', () => resolve());
    // ignore_eos: sampled from a random model, the stream could otherwise end at
    // an end-of-sequence token before the client goes (seen: completion=1
    // finish=stop), and there would be nothing left to cancel
    req.end(JSON.stringify({ prompt: 'a long story', max_tokens: 100000, min_p: 0.0, stream: true, stop: null, ignore_eos: true }));
  });
  // liveness, not speed: polled for up to 5 s so a loaded host cannot fail it
  let freed = false;
  for (let i = 0; i < 500 && !freed; i++) {
    const h = (await request(P, 'GET', '/health', { auth: false })).json;
    freed = h?.slots_active === 0 && h?.queued === 0;
    if (!freed) await sleep(10);
  }
  check(freed, 'slot freed after the disconnect');
  for (let i = 0; i < 500 && !/finish=cancelled/.test(srv.log()); i++) await sleep(10);
  check(/finish=cancelled/.test(srv.log()), 'the disconnected request is logged as cancelled');
  r = await request(P, 'POST', '/v1/completions', { body: { prompt: 'after', max_tokens: 4 } });
  check(r.status === 200, 'next request served after the disconnect', r.json);

  stage('greedy through the server');
  // greedy through the server == `kvwise generate`
  if (haveGenerate) {
    const g = spawnSync(BIN, ['generate', '-m', modelPath, '-p', 'The capital of', '-n', '12', '--temp', '0', '-t', '1'], { encoding: 'utf8' });
    r = await request(P, 'POST', '/v1/completions', { body: { prompt: 'The capital of', max_tokens: 12, temperature: 0 } });
    check(g.status === 0 && g.stdout === r.json?.choices?.[0]?.text, 'greedy server output == kvwise generate', [g.stdout, r.json?.choices?.[0]?.text, g.stderr]);
  } else console.log('skip: greedy vs generate needs `kvwise generate` in this build');

  stage('SIGTERM');
  // SIGTERM: in-flight stream ends cleanly, exit code 0
  const inflight = request(P, 'POST', '/v1/completions', { body: { prompt: 'forever', max_tokens: 100000, stream: true, ignore_eos: true } });
  await sleep(200);
  const exited = new Promise((resolve) => srv.proc.on('exit', (code) => resolve(code)));
  srv.proc.kill('SIGTERM');
  const lastResp = await inflight.catch((e) => ({ status: 0, text: String(e) }));
  const code = await exited;
  check(code === 0, 'exit code 0 after SIGTERM', code);
  check(parseSSE(lastResp.text).done, 'in-flight stream ended with [DONE] on shutdown', lastResp.text.slice(-300));

  stage('a full queue');
  // a full queue and a queue timeout answer 503 + Retry-After (one slot, slow stub engine)
  {
    const args = ['serve', '--stub-engine', '--stub-step-us', '2000', '--port', '0', '--decode-concurrency', '1',
      '--max-queue', '1', '--queue-timeout', '2', '--ctx-size', '4096'];
    const p2 = spawnServer(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let log2 = '';
    p2.stderr.on('data', (d) => { log2 += d; });
    while (!/ready on http:\/\/[^:]+:(\d+)/.test(log2)) {
      if (p2.exitCode !== null) throw new Error('second server exited: ' + log2);
      await sleep(20);
    }
    const P2 = Number(/ready on http:\/\/[^:]+:(\d+)/.exec(log2)[1]);
    const body = { prompt: 'busy', max_tokens: 2000, ignore_eos: true };   // >= 4 s on the slot (2 ms steps)
    const first = request(P2, 'POST', '/v1/completions', { body, auth: false });
    await sleep(100);
    const second = request(P2, 'POST', '/v1/completions', { body, auth: false });   // queued, times out
    await sleep(50);
    const third = await request(P2, 'POST', '/v1/completions', { body, auth: false }); // queue full
    checkErrorShape(third, 503, 'queue full', 'queue_full');
    check(third.headers['retry-after'] !== undefined, 'queue full has Retry-After', third.headers);
    // the same refusal in each API's own shape: Anthropic 529 overloaded_error (what its clients
    // retry), Ollama {"error": ...}, Responses as OpenAI; each with Retry-After
    const msg = await request(P2, 'POST', '/v1/messages', { body: { max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }, auth: false });
    check(msg.status === 529 && msg.json?.type === 'error' && msg.json?.error?.type === 'overloaded_error' &&
      msg.headers['retry-after'] !== undefined, 'queue full on /v1/messages: 529 overloaded_error + Retry-After', { status: msg.status, body: msg.text });
    const oll = await request(P2, 'POST', '/api/chat', { body: { stream: false, messages: [{ role: 'user', content: 'x' }] }, auth: false });
    check(oll.status === 503 && typeof oll.json?.error === 'string' && oll.headers['retry-after'] !== undefined,
      'queue full on /api/chat: 503 {"error": ...} + Retry-After', { status: oll.status, body: oll.text });
    const rsp = await request(P2, 'POST', '/v1/responses', { body: { input: 'x' }, auth: false });
    checkErrorShape(rsp, 503, 'queue full on /v1/responses', 'queue_full');
    const sec = await second;
    checkErrorShape(sec, 503, 'queue timeout', 'queue_timeout');
    check(sec.headers['retry-after'] !== undefined, 'queue timeout has Retry-After', sec.headers);
    check((await first).status === 200, 'the running request completes', null);
    // a client that hangs up while queued leaves the queue because it hung up, not by the 2 s
    // queue timeout: the queue_timeout counter of /v1/memory must not move (no wall-clock bound,
    // so a loaded host cannot fail it)
    const busy = request(P2, 'POST', '/v1/completions', { body, auth: false });
    await sleep(50);
    const timeouts = async () => (await request(P2, 'GET', '/v1/memory', { auth: false })).json?.requests?.rejected?.queue_timeout;
    const timeouts0 = await timeouts();
    const gone = http.request({ host: '127.0.0.1', port: P2, method: 'POST', path: '/v1/completions', headers: { 'Content-Type': 'application/json' } });
    gone.on('error', () => {});
    gone.end(JSON.stringify(body));
    let queued = 0;
    for (let i = 0; i < 100 && queued !== 1; i++) { await sleep(5); queued = (await request(P2, 'GET', '/health', { auth: false })).json?.queued; }
    check(queued === 1, 'second client is queued', queued);
    // a reset (a client killed, a socket closed with data unread) is a hang-up; a client
    // that only closes its sending side is not (it may still read the answer)
    gone.socket.resetAndDestroy();
    for (let i = 0; i < 1000 && queued !== 0; i++) { await sleep(5); queued = (await request(P2, 'GET', '/health', { auth: false })).json?.queued; }
    const timeouts1 = await timeouts();
    check(queued === 0 && Number.isInteger(timeouts0) && timeouts1 === timeouts0,
      'queued request of a gone client is dropped as hung up, not timed out', { queued, timeouts0, timeouts1 });
    await busy;
    p2.kill('SIGTERM');
    const exit2 = await new Promise((res) => p2.on('exit', (code, signal) => res({ code, signal })));
    check(exit2.code === 0, 'second server exits 0', { ...exit2, log: log2.slice(-300) });
  }

  // greedy == `kvwise generate` on real vocabularies too (SPM and byte-level BPE conformance models)
  const shared = process.env.KW_SHARED_DIR;
  if (haveGenerate && shared && fs.existsSync(path.join(shared, 'conformance/models'))) {
    for (const f of ['llama-q8_0.gguf', 'qwen2-q8_0.gguf']) {
      const mp = path.join(shared, 'conformance/models', f);
      if (!fs.existsSync(mp)) continue;
      const p3 = spawnServer(BIN, ['serve', '-m', mp, '--port', '0', '--threads', '1', '--ctx-size', '256'], { stdio: ['ignore', 'ignore', 'pipe'] });
      let log3 = '';
      p3.stderr.on('data', (d) => { log3 += d; });
      while (!/ready on http:\/\/[^:]+:(\d+)/.test(log3)) {
        if (p3.exitCode !== null) break;
        await sleep(20);
      }
      const m3 = /ready on http:\/\/[^:]+:(\d+)/.exec(log3);
      check(m3, `${f}: server starts`, log3.slice(-500));
      if (!m3) continue;
      const P3 = Number(m3[1]);
      for (const prompt of ['Once upon a time', ' The quick brown fox']) {
        const g = spawnSync(BIN, ['generate', '-m', mp, '-p', prompt, '-n', '16', '--temp', '0', '-t', '1', '-c', '256'], { encoding: 'utf8' });
        const r3 = await request(P3, 'POST', '/v1/completions', { body: { prompt, max_tokens: 16, temperature: 0 }, auth: false });
        check(g.status === 0 && g.stdout === r3.json?.choices?.[0]?.text, `${f}: greedy server == kvwise generate for ${JSON.stringify(prompt)}`, [g.stdout, r3.json?.choices?.[0]?.text]);
      }
      p3.kill('SIGTERM');
      await new Promise((res) => p3.on('exit', res));
    }
  }

  if (failed) console.error('--- server log (tail) ---\n' + srv.log().slice(-3000));
  console.log(`${passed} passed, ${failed} failed`);
  fs.rmSync(tmp, { recursive: true, force: true });
  process.exit(failed ? 1 : 0);
}

main().catch((e) => { console.error(e); process.exit(1); });
