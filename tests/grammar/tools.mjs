// tools.mjs - forced tool calls through `kvwise serve`: tool_choice naming a
// function or "required" makes the answer a call whose arguments are
// generated under the tool's parameters JSON Schema (chat.c forced_call_*,
// kw_grammar_tool_call). A random-weight model (its free text is noise)
// answers; every call must name the right function and its arguments must
// parse and validate against the schema with ajv (npm, tests/grammar/setup.sh).
// Two prompt formats: the model's plain ChatML template (no tool rendering:
// a bare JSON call) and a Hermes template (<tool_call> ... </tool_call>).
// Greedy and sampled, streamed and not; refusals name the field. Also:
// tool_choice auto with a strict tool (text without call tags, or valid
// calls); Anthropic Messages tool_choice tool / any and output_format /
// output_config.format; Responses tool_choice; a thinking template whose
// think block stays unconstrained.
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
const ajv = new Ajv2020({ strict: false, allErrors: true });
ajv.addFormat('date', /^\d{4}-\d{2}-\d{2}$/);        // the shapes the server's formats generate (docs/GRAMMAR.md)

let passed = 0, failed = 0;
function check(cond, what, extra) {
  if (cond) passed++;
  else { failed++; console.error(`CHECK failed: ${what}${extra !== undefined ? ' :: ' + JSON.stringify(extra).slice(0, 800) : ''}`); }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kw-tools-'));
const modelPath = path.join(tmp, 'tiny.gguf');
{
  const r = spawnSync(BIN, ['mkmodel', '--preset', 'tiny', '--seed', '11', '-o', modelPath], { encoding: 'utf8' });
  if (r.status !== 0) { console.log('SKIPPED: mkmodel failed: ' + r.stderr); process.exit(77); }
}
// A Hermes-style template (Qwen 2.5 shape): tools in the system turn, calls in <tool_call> tags.
const hermesPath = path.join(tmp, 'hermes.jinja');
fs.writeFileSync(hermesPath,
  '{%- if tools %}<|im_start|>system\nYou may call one or more functions.\n<tools>\n' +
  '{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\n' +
  'For each call return <tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n{% endif %}' +
  '{%- for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}' +
  '{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}');

// The same with a thinking generation prompt (the template opens <think>, as Qwen3's does).
const thinkPath = path.join(tmp, 'hermes-think.jinja');
fs.writeFileSync(thinkPath, fs.readFileSync(hermesPath, 'utf8').replace("<|im_start|>assistant\n{% endif %}", "<|im_start|>assistant\n<think>\n{% endif %}"));

async function startServer(extra = []) {
  const args = ['serve', '--port', '0', '--ctx-size', '4096', '--decode-concurrency', '4', '-m', modelPath, '--threads', '1', ...extra];
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

function post(port, p, body) {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: p,
      headers: { 'Content-Type': 'application/json' } }, (res) => {
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
    req.write(data);
    req.end();
  });
}
const tryParse = (s) => { try { return { ok: true, v: JSON.parse(s) }; } catch (e) { return { ok: false, err: String(e) }; } };
const parseSSE = (text) => text.split('\n').filter((l) => l.startsWith('data: ') && l !== 'data: [DONE]').map((l) => JSON.parse(l.slice(6)));

// Tool schemas of real shapes: enums, nested objects, arrays with bounds, $ref/$defs, anyOf.
const WEATHER = {
  type: 'object',
  properties: {
    city: { type: 'string', minLength: 1, maxLength: 20 },
    unit: { enum: ['celsius', 'fahrenheit'] },
    days: { type: 'integer', minimum: 1, maximum: 7 },
  },
  required: ['city', 'unit'], additionalProperties: false,
};
const TICKET = {
  $defs: { person: { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, team: { type: 'string', pattern: '^[A-Z]{2}-[0-9]{3}$' } },
    required: ['name'], additionalProperties: false } },
  type: 'object',
  properties: {
    title: { type: 'string', maxLength: 30 },
    priority: { enum: ['low', 'medium', 'high'] },
    assignee: { $ref: '#/$defs/person' },
    labels: { type: 'array', items: { type: 'string', maxLength: 8 }, minItems: 1, maxItems: 3 },
    due: { anyOf: [{ type: 'string', format: 'date' }, { type: 'null' }] },
  },
  required: ['title', 'priority', 'assignee', 'labels', 'due'], additionalProperties: false,
};
const tool = (name, parameters, strict) => ({ type: 'function', function: { name, description: `the ${name} tool`, parameters, ...(strict === undefined ? {} : { strict }) } });
const TOOLS = [tool('get_weather', WEATHER), tool('create_ticket', TICKET, true)];
const SCHEMAS = { get_weather: ajv.compile(WEATHER), create_ticket: ajv.compile(TICKET) };
const chat = (extra) => ({ messages: [{ role: 'user', content: 'Do what is needed.' }], max_tokens: 1200, tools: TOOLS, ...extra });

// The one call of a finished answer: named as expected, arguments valid. want: a name or a list of allowed names.
function checkCall(what, r, want, calls) {
  const names = Array.isArray(want) ? want : [want];
  check(r.status === 200, `${what}: 200`, r.json ?? r.text);
  check(Array.isArray(calls) && calls.length === 1, `${what}: exactly one tool call`, r.json?.choices?.[0] ?? r.text.slice(0, 800));
  const c = calls?.[0];
  check(c && names.includes(c.function?.name), `${what}: the call names ${names.join('|')}`, c);
  const p = tryParse(c?.function?.arguments);
  const validate = SCHEMAS[c?.function?.name];
  const ok = p.ok && validate && validate(p.v);
  check(ok, `${what}: the arguments parse and validate (ajv)`, { args: c?.function?.arguments, errors: validate?.errors });
  return c;
}

async function suite(label, P) {
  const samplings = [{ temperature: 0 }, { temperature: 1, seed: 1 }, { temperature: 1, seed: 2 }, { temperature: 1.3, seed: 3 }];
  for (const fn of ['get_weather', 'create_ticket']) {
    for (const sp of samplings) {
      const what = `${label} named ${fn} ${JSON.stringify(sp)}`;
      const r = await post(P, '/v1/chat/completions', chat({ ...sp, tool_choice: { type: 'function', function: { name: fn } } }));
      const ch = r.json?.choices?.[0];
      checkCall(what, r, fn, ch?.message?.tool_calls);
      check(ch?.finish_reason === 'tool_calls', `${what}: finish_reason tool_calls`, ch);
    }
  }
  for (const sp of samplings) {
    const what = `${label} required ${JSON.stringify(sp)}`;
    const r = await post(P, '/v1/chat/completions', chat({ ...sp, tool_choice: 'required' }));
    checkCall(what, r, ['get_weather', 'create_ticket'], r.json?.choices?.[0]?.message?.tool_calls);
  }
  // streamed: the call's deltas joined give the same kind of call
  for (const seed of [4, 5]) {
    const what = `${label} stream named create_ticket seed ${seed}`;
    const r = await post(P, '/v1/chat/completions', chat({ stream: true, temperature: 1, seed, tool_choice: { type: 'function', function: { name: 'create_ticket' } } }));
    const calls = [];
    for (const ch of parseSSE(r.text))
      for (const d of ch.choices?.[0]?.delta?.tool_calls ?? []) {
        if (!calls[d.index]) calls[d.index] = { function: { name: '', arguments: '' } };
        if (d.function?.name) calls[d.index].function.name += d.function.name;
        if (d.function?.arguments) calls[d.index].function.arguments += d.function.arguments;
      }
    checkCall(what, r, 'create_ticket', calls);
  }
}

// Anthropic Messages: tool_choice tool / any, strict tools, output_format / output_config.format.
async function messagesSuite(P) {
  const atools = [{ name: 'get_weather', description: 'weather', input_schema: WEATHER },
    { name: 'create_ticket', description: 'ticket', input_schema: TICKET, strict: true }];
  const msg = (extra) => ({ model: 'm', max_tokens: 1200, messages: [{ role: 'user', content: 'Do what is needed.' }], tools: atools, ...extra });
  const uses = (r) => (r.json?.content ?? []).filter((b) => b.type === 'tool_use');
  const checkUse = (what, r, names, list) => {
    check(r.status === 200, `${what}: 200`, r.json ?? r.text);
    check(list.length === 1 && names.includes(list[0].name), `${what}: one tool_use naming ${names.join('|')}`, r.json ?? r.text.slice(0, 800));
    const v = SCHEMAS[list[0]?.name];
    check(v && typeof list[0].input === 'object' && v(list[0].input), `${what}: the input validates (ajv)`, { input: list[0]?.input, errors: v?.errors });
  };
  for (const sp of [{ temperature: 0 }, { temperature: 1, top_k: 0 }, { temperature: 1, top_p: 0.95 }]) {
    for (const fn of ['get_weather', 'create_ticket']) {
      const what = `messages tool ${fn} ${JSON.stringify(sp)}`;
      const r = await post(P, '/v1/messages', msg({ ...sp, tool_choice: { type: 'tool', name: fn } }));
      checkUse(what, r, [fn], uses(r));
      check(r.json?.stop_reason === 'tool_use', `${what}: stop_reason tool_use`, r.json);
    }
    const r = await post(P, '/v1/messages', msg({ ...sp, tool_choice: { type: 'any' } }));
    checkUse(`messages any ${JSON.stringify(sp)}`, r, ['get_weather', 'create_ticket'], uses(r));
  }
  // streamed: input_json_delta fragments join to a valid input
  {
    const r = await post(P, '/v1/messages', msg({ stream: true, temperature: 1, tool_choice: { type: 'tool', name: 'create_ticket' } }));
    const evs = r.text.split('\n').filter((l) => l.startsWith('data: ')).map((l) => JSON.parse(l.slice(6)));
    const start = evs.find((e) => e.type === 'content_block_start' && e.content_block?.type === 'tool_use');
    const json = evs.filter((e) => e.type === 'content_block_delta' && e.delta?.type === 'input_json_delta').map((e) => e.delta.partial_json).join('');
    const p = tryParse(json);
    checkUse('messages stream tool create_ticket', r, ['create_ticket'], start && p.ok ? [{ name: start.content_block.name, input: p.v }] : []);
  }
  // output_format / output_config.format: the text answer under the schema
  for (const [field, seed] of [['output_format', 1], ['output_format', 2], ['output_config', 3]]) {
    const fmt = { type: 'json_schema', schema: TICKET };
    const body = { model: 'm', max_tokens: 1500, temperature: 1, messages: [{ role: 'user', content: 'File a ticket.' }],
      ...(field === 'output_format' ? { output_format: fmt } : { output_config: { format: fmt } }) };
    const r = await post(P, '/v1/messages', body);
    const text = (r.json?.content ?? []).filter((b) => b.type === 'text').map((b) => b.text).join('');
    const p = tryParse(text);
    check(r.status === 200 && r.json.stop_reason === 'end_turn', `messages ${field} ${seed}: 200 end_turn`, r.json);
    check(p.ok && SCHEMAS.create_ticket(p.v), `messages ${field} ${seed}: the text validates (ajv)`, { text, errors: SCHEMAS.create_ticket.errors });
  }
  // refusals name the field
  let r = await post(P, '/v1/messages', msg({ tool_choice: { type: 'tool', name: 'send_mail' } }));
  check(r.status === 400 && /send_mail/.test(r.json?.error?.message ?? ''), 'messages: a tool not in tools -> 400 naming it', r.json);
  r = await post(P, '/v1/messages', { ...msg({}), tools: undefined, output_format: { type: 'xml' } });
  check(r.status === 400 && /output_format/.test(r.json?.error?.message ?? ''), 'messages: output_format of an unknown type -> 400 naming it', r.json);
  r = await post(P, '/v1/messages', { ...msg({}), tools: undefined, output_config: { format: { type: 'json_schema' } } });
  check(r.status === 400 && /output_config\.format/.test(r.json?.error?.message ?? ''), 'messages: output_config.format without a schema -> 400', r.json);
  r = await post(P, '/v1/messages', { ...msg({}), tools: undefined, output_format: { type: 'json_schema', schema: { type: 'object', not: {} } } });
  check(r.status === 400 && /output_format/.test(r.json?.error?.message ?? '') && /'not'/.test(r.json.error.message), 'messages: unsupported schema keyword -> 400 naming it', r.json);
  r = await post(P, '/v1/messages', msg({ output_format: { type: 'json_schema', schema: TICKET } }));
  check(r.status === 400 && /output_format/.test(r.json?.error?.message ?? ''), 'messages: output_format with tools -> 400 naming it', r.json);
}

// Responses: tool_choice {type: function, name} / "required", strict tools; calls are function_call items.
async function responsesSuite(P) {
  const rtools = [{ type: 'function', name: 'get_weather', description: 'weather', parameters: WEATHER },
    { type: 'function', name: 'create_ticket', description: 'ticket', parameters: TICKET, strict: true }];
  const body = (extra) => ({ model: 'm', max_output_tokens: 1200, input: 'Do what is needed.', tools: rtools, ...extra });
  const calls = (r) => (r.json?.output ?? []).filter((o) => o.type === 'function_call');
  const checkFc = (what, r, names, list) => {
    check(r.status === 200, `${what}: 200`, r.json ?? r.text);
    check(list.length === 1 && names.includes(list[0].name), `${what}: one function_call naming ${names.join('|')}`, r.json ?? r.text.slice(0, 800));
    const p = tryParse(list[0]?.arguments), v = SCHEMAS[list[0]?.name];
    check(p.ok && v && v(p.v), `${what}: the arguments validate (ajv)`, { args: list[0]?.arguments, errors: v?.errors });
  };
  for (const sp of [{ temperature: 0 }, { temperature: 1 }, { temperature: 1.2, top_p: 0.9 }]) {
    for (const fn of ['get_weather', 'create_ticket']) {
      const r = await post(P, '/v1/responses', body({ ...sp, tool_choice: { type: 'function', name: fn } }));
      checkFc(`responses function ${fn} ${JSON.stringify(sp)}`, r, [fn], calls(r));
    }
    const r = await post(P, '/v1/responses', body({ ...sp, tool_choice: 'required' }));
    checkFc(`responses required ${JSON.stringify(sp)}`, r, ['get_weather', 'create_ticket'], calls(r));
  }
  {
    const r = await post(P, '/v1/responses', body({ stream: true, temperature: 1, tool_choice: { type: 'function', name: 'create_ticket' } }));
    const evs = r.text.split('\n').filter((l) => l.startsWith('data: ')).map((l) => JSON.parse(l.slice(6)));
    const done = evs.filter((e) => e.type === 'response.output_item.done' && e.item?.type === 'function_call').map((e) => e.item);
    const deltas = evs.filter((e) => e.type === 'response.function_call_arguments.delta').map((e) => e.delta).join('');
    checkFc('responses stream function create_ticket', r, ['create_ticket'], done);
    check(done.length === 1 && deltas === done[0].arguments, 'responses stream: the argument deltas join to the item', { deltas, done });
  }
  const r = await post(P, '/v1/responses', body({ tool_choice: { type: 'function', name: 'send_mail' } }));
  check(r.status === 400 && r.json?.error?.param === 'tool_choice' && /send_mail/.test(r.json.error.message), 'responses: a function not in tools -> 400 naming it', r.json);
}

// tool_choice auto with a strict tool: free text without call tags, or calls that validate.
async function autoStrictSuite(label, P) {
  const TAGS = ['<tool_call>', '<|python_tag|>', '[TOOL_CALLS]'];
  let calls = 0, texts = 0;
  for (const sp of [{ temperature: 0 }, { temperature: 1, seed: 1 }, { temperature: 1, seed: 2 }, { temperature: 1.5, seed: 3 }, { temperature: 2, seed: 4 }]) {
    const what = `${label} auto strict ${JSON.stringify(sp)}`;
    const r = await post(P, '/v1/chat/completions', chat({ ...sp, max_tokens: 200 }));
    const m = r.json?.choices?.[0]?.message;
    check(r.status === 200 && m, `${what}: 200`, r.json);
    const tc = m?.tool_calls ?? [];
    check(!TAGS.some((t) => (m?.content ?? '').includes(t)), `${what}: no call tag in the text`, m?.content);
    for (const c of tc) {
      const p = tryParse(c.function?.arguments), v = SCHEMAS[c.function?.name];
      // only the strict tool's arguments are held to its schema; the other's are any object
      const ok = p.ok && (c.function.name === 'create_ticket' ? v(p.v) : typeof p.v === 'object' && !Array.isArray(p.v));
      check(ok, `${what}: a call's arguments validate`, c);
    }
    if (tc.length) calls++; else texts++;
  }
  check(texts + calls === 5, `${label} auto strict: every answer is text or calls`, { texts, calls });
}

async function main() {
  // the model's own ChatML template renders no tools: bare JSON calls
  let srv = await startServer();
  let P = srv.port;
  await suite('chatml', P);
  // the model's free text is noise: without tool_choice there is no call (the constraint did the work)
  {
    const r = await post(P, '/v1/chat/completions', chat({ temperature: 1, seed: 9, max_tokens: 40 }));
    check(r.status === 200 && !(r.json?.choices?.[0]?.message?.tool_calls?.length), 'auto: the noise model makes no call', r.json?.choices);
  }
  // refusals name the field
  {
    let r = await post(P, '/v1/chat/completions', chat({ tool_choice: { type: 'function', function: { name: 'send_mail' } } }));
    check(r.status === 400 && r.json?.error?.param === 'tool_choice' && /send_mail/.test(r.json.error.message),
      'named function not in tools: 400 naming it', r.json);
    r = await post(P, '/v1/chat/completions', chat({ tool_choice: 'required', tools: [tool('f', { type: 'object', not: { required: ['a'] } })] }));
    check(r.status === 400 && /'not'/.test(r.json?.error?.message ?? ''), 'unsupported schema keyword in a forced tool: 400 naming it', r.json);
    r = await post(P, '/v1/chat/completions', chat({ tool_choice: 'required', tools: undefined }));
    check(r.status === 400 && r.json?.error?.param === 'tool_choice', 'required without tools: 400', r.json);
    r = await post(P, '/v1/chat/completions', chat({ tool_choice: 'required', tools: [tool('f', { type: 'object' }, 'yes')] }));
    check(r.status === 400 && /strict/.test(r.json?.error?.message ?? ''), 'strict not a boolean: 400', r.json);
  }
  await autoStrictSuite('chatml', P);
  await messagesSuite(P);
  await responsesSuite(P);
  srv.proc.kill('SIGTERM');
  // a Hermes template: <tool_call> tags around the call object
  srv = await startServer(['--chat-template', hermesPath]);
  P = srv.port;
  await suite('hermes', P);
  await autoStrictSuite('hermes', P);
  {
    // parallel_tool_calls false: still the one call
    const r = await post(P, '/v1/chat/completions', chat({ temperature: 1, seed: 21, parallel_tool_calls: false, tool_choice: 'required' }));
    checkCall('hermes required parallel_tool_calls false', r, ['get_weather', 'create_ticket'], r.json?.choices?.[0]?.message?.tool_calls);
  }
  srv.proc.kill('SIGTERM');
  // reasoning: the grammar applies after </think>, the think block is free (the noise model never closes it:
  // the answer is all reasoning, unconstrained, and no call within max_tokens)
  srv = await startServer(['--chat-template', thinkPath]);
  P = srv.port;
  {
    const r = await post(P, '/v1/chat/completions', chat({ temperature: 1, seed: 3, max_tokens: 40, tool_choice: { type: 'function', function: { name: 'get_weather' } } }));
    const m = r.json?.choices?.[0]?.message;
    check(r.status === 200 && r.json.choices[0].finish_reason === 'length' && typeof m?.reasoning_content === 'string' &&
      m.reasoning_content.length > 0 && !m.reasoning_content.startsWith('<tool_call>') && !(m.tool_calls?.length),
    'think open + forced call: the think block is unconstrained (reasoning, no call yet)', r.json);
  }
  srv.proc.kill('SIGTERM');
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed || !passed ? 1 : 0);
}
main().catch((e) => { console.error(e); process.exit(1); });
