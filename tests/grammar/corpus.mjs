// corpus.mjs - the schema corpus (tests/grammar/schemas/*.json, 220+ schemas of
// real shapes written by gen_corpus.py) through `kvwise serve` and all three
// structured-output front-ends: chat response_format, Responses text.format
// and Messages output_format take turns (schema i goes to front-end i % 3),
// each schema answered greedy and sampled by a random-weight model (its free
// text is noise; only the grammar makes it JSON). Every answer that finished
// must parse and validate against its schema with ajv (npm, with ajv-formats
// and ajv-draft-04; tests/grammar/setup.sh); the server must accept every
// schema (200). Every answer must also finish (finish_reason stop) within
// max_tokens: a random model's greedy decoding loops inside an unbounded
// string, and the budget-aware closing (docs/GRAMMAR.md) ends the JSON once
// the tokens left only just cover a shortest completion (the corpus's
// longest is 120 bytes, far below MAX). Four requests at a time (the server
// batches grammar sequences together).
import { spawn, spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import http from 'node:http';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const BIN = process.env.KW_BIN;
const here = path.dirname(fileURLToPath(import.meta.url));
process.on('beforeExit', () => { console.error('test ended without finishing'); process.exit(1); });
const children = new Set();
process.on('exit', () => { for (const c of children) { try { c.kill('SIGKILL'); } catch { /* gone */ } } });
if (!BIN) { console.error('KW_BIN not set'); process.exit(2); }
const setup = spawnSync('bash', [path.join(here, 'setup.sh')], { stdio: 'inherit' });
if (setup.status === 77) { console.log('SKIPPED: ajv not installable'); process.exit(77); }
if (setup.status !== 0) { console.error('setup.sh failed'); process.exit(1); }
const require = createRequire(path.join(here, 'npm', 'node_modules', 'x.js'));
const Ajv2020 = require('ajv/dist/2020').default;
const AjvDraft7 = require('ajv').default;
const AjvDraft4 = require('ajv-draft-04').default;
const addFormats = require('ajv-formats').default;

let passed = 0, failed = 0;
function check(cond, what, extra) {
  if (cond) passed++;
  else { failed++; console.error(`CHECK failed: ${what}${extra !== undefined ? ' :: ' + JSON.stringify(extra).slice(0, 800) : ''}`); }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kw-corpus-'));
process.on('exit', () => { try { fs.rmSync(tmp, { recursive: true, force: true }); } catch { /* ignore */ } });
const modelPath = path.join(tmp, 'tiny.gguf');
{
  const r = spawnSync(BIN, ['mkmodel', '--preset', 'tiny', '--seed', '11', '-o', modelPath], { encoding: 'utf8' });
  if (r.status !== 0) { console.log('SKIPPED: mkmodel failed: ' + r.stderr); process.exit(77); }
}

async function startServer() {
  const args = ['serve', '--port', '0', '--ctx-size', '4096', '--decode-concurrency', '4', '-m', modelPath, '--threads', '1'];
  const proc = spawn(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  children.add(proc);
  let log = '';
  proc.stderr.on('data', (d) => { log += d.toString(); if (log.length > 1e6) log = log.slice(-5e5); });
  const t0 = Date.now();
  while (!/ready on http:\/\/[^:]+:(\d+)/.test(log)) {
    if (proc.exitCode !== null) throw new Error('server exited: ' + log);
    if (Date.now() - t0 > 20000) throw new Error('server did not start: ' + log);
    await sleep(20);
  }
  return { proc, port: Number(/ready on http:\/\/[^:]+:(\d+)/.exec(log)[1]) };
}

function post(port, p, body) {
  return new Promise((resolve) => {
    const data = JSON.stringify(body);
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: p, headers: { 'Content-Type': 'application/json' } }, (res) => {
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { buf += d; });
      res.on('end', () => { let json = null; try { json = JSON.parse(buf); } catch { /* not JSON */ } resolve({ status: res.statusCode, json, text: buf }); });
    });
    req.on('error', (e) => resolve({ status: -1, json: null, text: String(e) }));
    req.setTimeout(120000, () => req.destroy(new Error('timeout')));
    req.write(data);
    req.end();
  });
}

const MAX = 400;
// Each front-end: the request for a schema, and the answer's text and whether it finished.
const FRONTS = {
  chat: {
    path: '/v1/chat/completions',
    body: (schema, sp) => ({ messages: [{ role: 'user', content: 'Answer in JSON.' }], max_tokens: MAX, ...sp,
      response_format: { type: 'json_schema', json_schema: { name: 'out', schema, strict: true } } }),
    read: (j) => ({ text: j?.choices?.[0]?.message?.content, done: j?.choices?.[0]?.finish_reason === 'stop' }),
  },
  responses: {
    path: '/v1/responses',
    body: (schema, sp) => ({ input: 'Answer in JSON.', max_output_tokens: MAX, ...sp,
      text: { format: { type: 'json_schema', name: 'out', schema, strict: true } } }),
    read: (j) => ({ text: (j?.output ?? []).flatMap((o) => o.content ?? []).filter((c) => c.type === 'output_text').map((c) => c.text).join(''),
      done: j?.status === 'completed' }),
  },
  messages: {
    path: '/v1/messages',
    body: (schema, sp) => ({ model: 'm', max_tokens: MAX, messages: [{ role: 'user', content: 'Answer in JSON.' }], ...sp,
      output_format: { type: 'json_schema', schema } }),
    read: (j) => ({ text: (j?.content ?? []).filter((b) => b.type === 'text').map((b) => b.text).join(''), done: j?.stop_reason === 'end_turn' }),
  },
};
const NAMES = Object.keys(FRONTS);

async function main() {
  const dir = path.join(here, 'schemas');
  const files = fs.readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
  check(files.length >= 200, `the corpus has at least 200 schemas (${files.length})`);
  // draft 2020-12 unless the schema is only valid as draft-07 (a tuple `items: [...]`) or
  // draft-04 (boolean exclusiveMinimum / exclusiveMaximum): the drafts the server reads
  const ajvs = [Ajv2020, AjvDraft7, AjvDraft4].map((A) => addFormats(new A({ strict: false, allErrors: true })));
  const compile = (schema) => {
    for (let k = 0; ; k++) { try { return ajvs[k].compile(schema); } catch (e) { if (k === ajvs.length - 1) throw e; } }
  };
  const jobs = [];
  files.forEach((f, i) => {
    const schema = JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8'));
    const front = NAMES[i % 3];
    const validate = compile(schema);
    for (const sp of [{ temperature: 0 }, { temperature: 1, seed: i + 1 }]) jobs.push({ f, schema, validate, front, sp, mode: sp.temperature ? 'sampled' : 'greedy' });
  });
  const srv = await startServer();
  const t0 = Date.now();
  const tally = {};
  for (const n of NAMES) for (const m of ['greedy', 'sampled']) tally[`${n} ${m}`] = { n: 0, done: 0, valid: 0 };
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) {
      const job = jobs[next++];
      const F = FRONTS[job.front];
      const r = await post(srv.port, F.path, F.body(job.schema, job.sp));
      const what = `${job.f} via ${job.front} ${job.mode}`;
      const t = tally[`${job.front} ${job.mode}`];
      t.n++;
      check(r.status === 200, `${what}: 200`, r.json ?? r.text);
      if (r.status !== 200) continue;
      const { text, done } = F.read(r.json);
      if (!done) continue;
      t.done++;
      let v = null, err = null;
      try { v = JSON.parse(text); } catch (e) { err = String(e); }
      const validate = job.validate;
      const ok = err === null && validate(v);
      if (ok) t.valid++;
      check(ok, `${what}: the answer parses and validates (ajv)`, { text: text?.slice(0, 300), err, errors: validate.errors?.slice(0, 3) });
    }
  };
  await Promise.all([0, 1, 2, 3].map(worker));
  const ms = Date.now() - t0;
  const rows = Object.entries(tally).map(([k, t]) => `${k}: ${t.valid}/${t.done} valid of ${t.done} finished, ${t.n - t.done} cut at ${MAX} tokens (of ${t.n})`);
  console.log(`corpus: ${files.length} schemas, ${jobs.length} answers in ${(ms / 1000).toFixed(1)} s\n  ` + rows.join('\n  '));
  for (const [k, t] of Object.entries(tally))
    check(t.n > 0 && t.done === t.n && t.valid === t.n, `${k}: every answer finishes within ${MAX} tokens and validates (${t.valid}/${t.n})`);
  // the closing did the work: greedy answers of a random model end only through it
  const h = await new Promise((resolve) => http.get({ host: '127.0.0.1', port: srv.port, path: '/health' }, (res) => {
    let buf = '';
    res.on('data', (d) => { buf += d; });
    res.on('end', () => { try { resolve(JSON.parse(buf)); } catch { resolve(null); } });
  }).on('error', () => resolve(null)));
  console.log(`grammar tokens ${h?.grammar_tokens}, of which under the closing mask ${h?.grammar_closing_tokens}`);
  check(h?.grammar_closing_tokens > 0 && h.grammar_closing_tokens < h.grammar_tokens, '/health counts the tokens drawn under the closing mask', h);
  srv.proc.kill('SIGTERM');
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed || passed === 0 ? 1 : 0);
}

main().catch((e) => { console.error(e); process.exit(1); });
