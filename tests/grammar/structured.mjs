// structured.mjs - structured outputs through `kvwise serve` (grammar_req.c,
// the scheduler's grammar mask): a random-weight model (its free text is
// noise) answers chat response_format json_schema / json_object and a raw
// GBNF `grammar` on completions, greedy and sampled, streamed and not; every
// answer parses and satisfies the schema (checked here by hand, independent
// of the server); grammar and plain requests run batched together; a schema
// feature the compiler lacks gets a 400 naming it; the ledger's grammar
// line counts the compiled grammars.
import { spawn, spawnSync } from 'node:child_process';
import http from 'node:http';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const BIN = process.env.KW_BIN;
process.on('beforeExit', () => { console.error('test ended without finishing'); process.exit(1); });
const children = new Set();
process.on('exit', () => { for (const c of children) { try { c.kill('SIGKILL'); } catch { /* gone */ } } });
if (!BIN) { console.error('KW_BIN not set'); process.exit(2); }
let passed = 0, failed = 0;
function check(cond, what, extra) {
  if (cond) passed++;
  else { failed++; console.error(`CHECK failed: ${what}${extra !== undefined ? ' :: ' + JSON.stringify(extra).slice(0, 600) : ''}`); }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kw-structured-'));
const modelPath = path.join(tmp, 'tiny.gguf');
{
  const r = spawnSync(BIN, ['mkmodel', '--preset', 'tiny', '--seed', '11', '-o', modelPath], { encoding: 'utf8' });
  if (r.status !== 0) { console.log('SKIPPED: mkmodel failed: ' + r.stderr); process.exit(77); }
}

async function startServer() {
  const args = ['serve', '--port', '0', '--ctx-size', '2048', '--decode-concurrency', '4', '-m', modelPath, '--threads', '1'];
  const proc = spawn(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  children.add(proc);
  let log = '';
  proc.stderr.on('data', (d) => { log += d.toString(); });
  const t0 = Date.now();
  while (!/ready on http:\/\/[^:]+:(\d+)/.test(log)) {
    if (proc.exitCode !== null) throw new Error('server exited: ' + log);
    if (Date.now() - t0 > 20000) throw new Error('server did not start: ' + log);
    await sleep(20);
  }
  return { proc, port: Number(/ready on http:\/\/[^:]+:(\d+)/.exec(log)[1]), log: () => log };
}

function post(port, p, body, method = 'POST') {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const req = http.request({ host: '127.0.0.1', port, method, path: p,
      headers: data ? { 'Content-Type': 'application/json' } : {} }, (res) => {
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { buf += d; });
      res.on('end', () => {
        let json = null;
        try { json = JSON.parse(buf); } catch { /* SSE */ }
        resolve({ status: res.statusCode, text: buf, json });
      });
    });
    req.on('error', reject);
    req.setTimeout(120000, () => req.destroy(new Error('timeout')));
    if (data) req.write(data);
    req.end();
  });
}

const tryParse = (s) => { try { return { ok: true, v: JSON.parse(s) }; } catch (e) { return { ok: false, err: String(e) }; } };
const isInt = (x) => Number.isInteger(x);

// The schemas and a hand-written check of each (independent of the server's compiler).
const CLASSIFY = {
  type: 'object',
  properties: { label: { enum: ['spam', 'ham', 'unsure'] }, score: { type: 'integer', minimum: 0, maximum: 10 } },
  required: ['label', 'score'], additionalProperties: false,
};
const classifyOk = (v) => v && typeof v === 'object' && !Array.isArray(v) && ['spam', 'ham', 'unsure'].includes(v.label) &&
  isInt(v.score) && v.score >= 0 && v.score <= 10 && Object.keys(v).every((k) => k === 'label' || k === 'score');
const RECORD = {
  type: 'object',
  properties: {
    ok: { type: 'boolean' },
    tags: { type: 'array', items: { enum: ['a', 'b', 'c'] }, minItems: 1, maxItems: 3 },
    when: { type: 'string', format: 'date' },
    code: { type: 'string', pattern: '^[A-Z]{2}[0-9]{2}$' },
    n: { type: ['integer', 'null'] },
  },
  required: ['ok', 'tags', 'when', 'code', 'n'], additionalProperties: false,
};
const recordOk = (v) => v && typeof v.ok === 'boolean' && Array.isArray(v.tags) && v.tags.length >= 1 && v.tags.length <= 3 &&
  v.tags.every((t) => ['a', 'b', 'c'].includes(t)) && /^\d{4}-\d{2}-\d{2}$/.test(v.when) && /^[A-Z]{2}[0-9]{2}$/.test(v.code) &&
  (v.n === null || isInt(v.n)) && Object.keys(v).length === 5;
const rf = (schema) => ({ type: 'json_schema', json_schema: { name: 'out', schema, strict: true } });
const chat = (extra) => ({ messages: [{ role: 'user', content: 'Classify this message.' }], max_tokens: 300, ...extra });
const content = (r) => r.json?.choices?.[0]?.message?.content;

function parseSSE(text) {
  return text.split('\n').filter((l) => l.startsWith('data: ') && l !== 'data: [DONE]').map((l) => JSON.parse(l.slice(6)));
}

async function main() {
  const srv = await startServer();
  const P = srv.port;

  // chat json_schema, greedy and sampled
  for (const [name, schema, ok] of [['classify', CLASSIFY, classifyOk], ['record', RECORD, recordOk]]) {
    for (const sp of [{ temperature: 0 }, { temperature: 1, seed: 1 }, { temperature: 1, seed: 2 }, { temperature: 1.5, seed: 3 }]) {
      const r = await post(P, '/v1/chat/completions', chat({ ...sp, response_format: rf(schema) }));
      const c = content(r), p = tryParse(c);
      check(r.status === 200 && r.json.choices[0].finish_reason === 'stop', `${name} ${JSON.stringify(sp)}: 200 stop`, r.json);
      check(p.ok && ok(p.v), `${name} ${JSON.stringify(sp)}: parses and matches the schema`, c);
    }
  }
  // streamed: the deltas joined are the same kind of answer
  {
    const r = await post(P, '/v1/chat/completions', chat({ stream: true, temperature: 1, seed: 5, response_format: rf(CLASSIFY) }));
    const chunks = parseSSE(r.text);
    const c = chunks.map((x) => x.choices?.[0]?.delta?.content ?? '').join('');
    const p = tryParse(c);
    check(r.status === 200 && p.ok && classifyOk(p.v), 'stream: content parses and matches', c);
  }
  // json_object: any object
  for (const seed of [1, 2]) {
    const r = await post(P, '/v1/chat/completions', chat({ temperature: 1, seed, max_tokens: 1500, response_format: { type: 'json_object' } }));
    const c = content(r), p = tryParse(c);
    check(r.status === 200 && r.json.choices[0].finish_reason === 'stop', `json_object seed ${seed}: stop`, r.json?.choices);
    check(p.ok && p.v && typeof p.v === 'object' && !Array.isArray(p.v), `json_object seed ${seed}: an object`, c);
  }
  // response_format text: unconstrained as before
  {
    const r = await post(P, '/v1/chat/completions', chat({ temperature: 0, max_tokens: 8, response_format: { type: 'text' } }));
    check(r.status === 200 && typeof content(r) === 'string', 'response_format text: plain answer', r.json);
  }
  // GBNF on completions: arithmetic, checked with a parser written here
  const ARITH = 'root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= factor (("*" | "/") factor)*\n' +
    'factor ::= num | "(" expr ")"\nnum ::= [1-9] [0-9]{0,2}';
  // full: the whole text is an expression; else a prefix of one (an answer cut by max_tokens)
  const arithOk = (s, full) => {
    let i = 0;
    const eof = () => { if (i >= s.length) throw new Error('eof'); };
    const num = () => { eof(); const m = /^[1-9][0-9]{0,2}/.exec(s.slice(i)); if (!m) return false; i += m[0].length; return true; };
    const factor = () => { eof(); if (s[i] === '(') { i++; if (!expr()) return false; eof(); if (s[i] !== ')') return false; i++; return true; } return num(); };
    const term = () => { if (!factor()) return false; while (s[i] === '*' || s[i] === '/') { i++; if (!factor()) return false; } return true; };
    function expr() { if (!term()) return false; while (s[i] === '+' || s[i] === '-') { i++; if (!term()) return false; } return true; }
    try { return expr() && i === s.length; } catch { return !full; }
  };
  check(arithOk('1+(23*4)', true) && !arithOk('1+(23*4', true) && arithOk('1+(23*4', false) && !arithOk('1+)', false) &&
    !arithOk('01', true), 'the arithmetic checker itself');
  for (const sp of [{ temperature: 0 }, { temperature: 1, seed: 7 }, { temperature: 1, seed: 8 }]) {
    const r = await post(P, '/v1/completions', { prompt: 'Compute:', max_tokens: 300, grammar: ARITH, ...sp });
    const t = r.json?.choices?.[0]?.text, fin = r.json?.choices?.[0]?.finish_reason;
    check(r.status === 200 && typeof t === 'string' && t.length > 0 && arithOk(t, fin === 'stop'),
      `gbnf arithmetic ${JSON.stringify(sp)}: the text parses (${fin})`, r.json?.choices?.[0]);
  }
  // batched: grammar and plain requests at once, 4 slots
  {
    const reqs = [];
    for (let k = 0; k < 8; k++) {
      const body = k % 2 ? chat({ temperature: 1, seed: 100 + k, max_tokens: 40 })
        : chat({ temperature: 1, seed: 100 + k, response_format: rf(CLASSIFY) });
      reqs.push(post(P, '/v1/chat/completions', body));
    }
    const rs = await Promise.all(reqs);
    rs.forEach((r, k) => {
      check(r.status === 200, `batch ${k}: 200`, r.json);
      if (k % 2 === 0) { const p = tryParse(content(r)); check(p.ok && classifyOk(p.v), `batch ${k}: grammar answer valid`, content(r)); }
      else check(typeof content(r) === 'string' && r.json.usage.completion_tokens > 0, `batch ${k}: plain answer`, r.json);
    });
    // the plain ones are noise, not JSON: the mask did not leak into them
    const plain = rs.filter((_, k) => k % 2).map(content);
    check(plain.some((c) => !tryParse(c).ok), 'plain answers in the batch are unconstrained', plain);
  }
  // refusals: a 400 naming the feature / the field
  {
    let r = await post(P, '/v1/chat/completions', chat({ response_format: rf({ type: 'object', not: { required: ['a'] } }) }));
    check(r.status === 400 && r.json?.error?.param === 'response_format' && /'not'/.test(r.json.error.message),
      'unsupported keyword: 400 naming it', r.json);
    r = await post(P, '/v1/chat/completions', chat({ response_format: rf({ type: 'string', format: 'color' }) }));
    check(r.status === 400 && /color/.test(r.json?.error?.message), 'unsupported format: 400 naming it', r.json);
    r = await post(P, '/v1/chat/completions', chat({ response_format: { type: 'xml' } }));
    check(r.status === 400 && r.json?.error?.param === 'response_format', 'unknown response_format type: 400', r.json);
    r = await post(P, '/v1/chat/completions', chat({ response_format: { type: 'json_schema' } }));
    check(r.status === 400, 'json_schema without json_schema: 400', r.json);
    r = await post(P, '/v1/completions', { prompt: 'x', grammar: 'root ::= undefined_rule' });
    check(r.status === 400 && r.json?.error?.param === 'grammar' && /undefined_rule/.test(r.json.error.message),
      'bad GBNF: 400 naming the rule', r.json);
    r = await post(P, '/v1/completions', { prompt: 'x', grammar: 7 });
    check(r.status === 400 && r.json?.error?.param === 'grammar', 'grammar not a string: 400', r.json);
    r = await post(P, '/v1/chat/completions', chat({ response_format: rf(CLASSIFY), tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }] }));
    check(r.status === 400 && /tools/.test(r.json?.error?.message), 'grammar with tools: 400 (not yet supported)', r.json);
    // hostile: deep nesting and a recursive $ref without a base case end in 400, fast
    let deep = { type: 'string' };
    for (let k = 0; k < 200; k++) deep = { type: 'array', items: deep };
    const t0 = Date.now();
    r = await post(P, '/v1/chat/completions', chat({ response_format: rf(deep) }));
    check(r.status === 400 && /depth|nest/i.test(r.json?.error?.message) && Date.now() - t0 < 5000, 'deep nesting: 400 within 5 s', r.json);
  }
  // memory: the compiled grammars are on the ledger's grammar line; compiles were cached
  {
    const r = await post(P, '/v1/memory', undefined, 'GET');
    const line = r.json?.budget?.lines?.grammar ?? r.json?.lines?.grammar ?? r.json?.ledger?.lines?.grammar;
    check(r.status === 200 && line && line.bytes > 0, 'ledger line grammar > 0', r.json && Object.keys(r.json));
    const compiles = (srv.log().match(/grammar: compiled json_schema/g) || []).length;
    check(compiles === 2 + 0, 'each schema compiled once (cached after)', compiles);
  }
  // Ollama format: a schema or "json" takes the same grammar as response_format
  {
    const ol = (extra) => ({ model: 'm', stream: false, messages: [{ role: 'user', content: 'Classify this message.' }], ...extra });
    for (const opts of [{ temperature: 0, num_predict: 300 }, { temperature: 1, seed: 7, num_predict: 300 }]) {
      const r = await post(P, '/api/chat', ol({ format: CLASSIFY, options: opts }));
      const c = r.json?.message?.content, p = tryParse(c);
      check(r.status === 200 && r.json.done_reason === 'stop', `ollama chat format schema ${JSON.stringify(opts)}: 200 stop`, r.json);
      check(p.ok && classifyOk(p.v), `ollama chat format schema ${JSON.stringify(opts)}: parses and matches`, c);
    }
    let r = await post(P, '/api/chat', ol({ format: 'json', options: { temperature: 1, seed: 3, num_predict: 1500 } }));
    let p = tryParse(r.json?.message?.content);
    check(r.status === 200 && p.ok && p.v && typeof p.v === 'object' && !Array.isArray(p.v), 'ollama chat format json: an object', r.json);
    r = await post(P, '/api/generate', { model: 'm', stream: false, prompt: 'Classify.', format: RECORD, options: { temperature: 1, seed: 4, num_predict: 300 } });
    p = tryParse(r.json?.response);
    check(r.status === 200 && p.ok && recordOk(p.v), 'ollama generate format schema: parses and matches', r.json);
    r = await post(P, '/api/chat', ol({ format: 'yaml' }));
    check(r.status === 400 && /format/.test(JSON.stringify(r.json)), 'ollama format yaml: 400 naming format', r.json);
    r = await post(P, '/api/chat', ol({ format: { type: 'string', format: 'color' } }));
    check(r.status === 400 && /format/.test(JSON.stringify(r.json)), 'ollama format unsupported schema: 400', r.json);
  }
  // Responses text.format: json_schema (flat: name, schema, strict) and json_object
  {
    const rs = (extra) => ({ input: 'Classify this message.', max_output_tokens: 300, ...extra });
    const outText = (r) => (r.json?.output || []).filter((o) => o.type === 'message').flatMap((o) => o.content || []).map((c) => c.text || '').join('');
    for (const sp of [{ temperature: 0 }, { temperature: 1, seed: 9 }]) {
      const r = await post(P, '/v1/responses', rs({ ...sp, text: { format: { type: 'json_schema', name: 'out', schema: CLASSIFY, strict: true } } }));
      const c = outText(r), p = tryParse(c);
      check(r.status === 200 && p.ok && classifyOk(p.v), `responses json_schema ${JSON.stringify(sp)}: parses and matches`, r.json ?? r.text);
    }
    // json_object leaves strings unbounded: a random model's answer can run to max_output_tokens
    // (status incomplete, cut, not wrong). Every finished answer is an object; one of 4 seeds finishes.
    let finished = 0, r, p;
    for (const seed of [2, 3, 4, 5]) {
      r = await post(P, '/v1/responses', rs({ temperature: 1, seed, max_output_tokens: 1500, text: { format: { type: 'json_object' } } }));
      p = tryParse(outText(r));
      check(r.status === 200, `responses json_object seed ${seed}: 200`, r.json);
      if (r.json?.status !== 'completed') continue;
      finished++;
      check(p.ok && p.v && typeof p.v === 'object' && !Array.isArray(p.v), `responses json_object seed ${seed}: an object`, r.json);
    }
    check(finished > 0, 'responses json_object: at least one of 4 sampled answers finishes');
    r = await post(P, '/v1/responses', rs({ text: { format: { type: 'xml' } } }));
    check(r.status === 400 && /text\.format/.test(JSON.stringify(r.json)), 'responses text.format xml: 400 naming text.format', r.json);
    r = await post(P, '/v1/responses', rs({ text: { format: { type: 'json_schema', name: 'x' } } }));
    check(r.status === 400 && /text\.format/.test(JSON.stringify(r.json)), 'responses json_schema without schema: 400', r.json);
  }
  srv.proc.kill('SIGTERM');
  await new Promise((res) => srv.proc.on('exit', res));
  fs.rmSync(tmp, { recursive: true, force: true });
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}
main().catch((e) => { console.error(e); process.exit(1); });
