// e2e_tools.mjs - tool calling and reasoning through `kvwise serve` with the
// test-only replay sampler (--test-replay: a request's "test_replay" text is
// emitted as the model's tokens, then end of generation). For each scripted
// output (plain answer, one call, two parallel calls, reasoning then a call,
// a malformed call, a call whose arguments break after it started, a long
// argument, Mistral v11+ `[TOOL_CALLS]NAME[ARGS]{..}` calls and a malformed one) the non-streamed response and the streamed chunks are checked
// field by field against the OpenAI chat.completion format: a streamed call
// is a delta with index, id, type and name (arguments "") and then argument
// fragments whose concatenation is the non-streamed arguments text. Then
// tool_choice: none / required / a named function (the call format each
// template gets: the forced-call grammar's text, and the Mistral prefills) /
// bad values. The replay sampler writes its script as is (the grammar does not
// apply to scripted tokens): the scripts here are what the grammar lets through;
// tests/grammar/tools.mjs checks the grammar itself with a sampling model.
import { spawn, spawnSync } from 'node:child_process';
import http from 'node:http';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const BIN = process.env.KW_BIN;
if (!BIN) { console.log('KW_BIN not set: skipped'); process.exit(77); }
let failed = 0, passed = 0;
const check = (cond, what, extra) => {
  if (cond) { passed++; return; }
  failed++;
  console.error('FAIL: ' + what + (extra !== undefined ? ' :: ' + JSON.stringify(extra).slice(0, 600) : ''));
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kw-tools-'));
const modelPath = path.join(dir, 'tiny.gguf');
const mk = spawnSync(BIN, ['mkmodel', '--preset', 'tiny', '--seed', '7', '-o', modelPath], { encoding: 'utf8' });
if (mk.status !== 0) { console.error('mkmodel failed: ' + mk.stderr); process.exit(1); }

// A Qwen3-style template (Jinja) that renders tools Hermes-style and opens <think> in the
// prompt unless enable_thinking is false.
const tplPath = path.join(dir, 'think.jinja');
fs.writeFileSync(tplPath, "{%- if tools %}<|im_start|>system\n# Tools\n<tools>\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}" +
  "</tools>\nReturn each call as <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call><|im_end|>\n{% endif %}" +
  "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}" +
  "<|im_start|>assistant\n{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n" +
  "{% else %}<think>\n{% endif %}");

function startServer(extra) {
  const p = spawn(BIN, ['serve', '-m', modelPath, '--port', '0', '--ctx-size', '1024', '--threads', '1', '--test-replay', ...extra],
    { stdio: ['ignore', 'ignore', 'pipe'] });
  p.log = '';
  p.stderr.on('data', (d) => { p.log += d.toString(); });
  return p;
}
async function portOf(p) {
  const t0 = Date.now();
  while (!/ready on http:\/\/[^:]+:(\d+)/.test(p.log)) {
    if (p.exitCode !== null) throw new Error('server exited: ' + p.log);
    if (Date.now() - t0 > 20000) throw new Error('server did not start: ' + p.log);
    await sleep(20);
  }
  return Number(/ready on http:\/\/[^:]+:(\d+)/.exec(p.log)[1]);
}
// --test-replay-script: outputs chosen per request by rules (for clients that cannot send test_replay)
const scriptPath = path.join(dir, 'replay.json');
fs.writeFileSync(scriptPath, JSON.stringify([
  { if_last_role: 'tool', if_tools: true, text: 'After the tool.' },
  { if_contains: 'scripted please', text: 'From the script.' },
]));
// Llama 3 style (JSON calls, "parameters") and Mistral style ([AVAILABLE_TOOLS] / [TOOL_CALLS]) templates; the
// Mistral one writes earlier calls in the v11+ form ([TOOL_CALLS]NAME[ARGS]..), so a prompt with such a call in its
// history makes the prefill use that form
const llamaTpl = path.join(dir, 'llama3.jinja'), mistralTpl = path.join(dir, 'mistral.jinja');
fs.writeFileSync(llamaTpl, "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n" +
  "{% if m.role == 'user' and tools and loop.last %}Given the following functions, respond with a JSON for a function call.\n" +
  "{% for t in tools %}{{ t | tojson }}\n{% endfor %}{% endif %}{{ m.content }}<|eot_id|>{% endfor %}" +
  "<|start_header_id|>assistant<|end_header_id|>\n\n");
fs.writeFileSync(mistralTpl, "{{ bos_token }}{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}" +
  "{% for m in messages %}{% if m.role == 'user' %}[INST]{{ m.content }}[/INST]{% elif m.role == 'assistant' %}" +
  "{% if m.tool_calls %}{% for c in m.tool_calls %}[TOOL_CALLS]{{ c.function.name }}[ARGS]{{ c.function.arguments | tojson }}{% endfor %}" +
  "{% else %}{{ m.content }}{% endif %}</s>{% elif m.role == 'tool' %}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]{% endif %}{% endfor %}");
const srv = startServer([]), srvThink = startServer(['--chat-template', tplPath, '--test-replay-script', scriptPath]);
const srvLlama = startServer(['--chat-template', llamaTpl]), srvMistral = startServer(['--chat-template', mistralTpl]);
let log = '';
srv.stderr.on('data', (d) => { log += d.toString(); });
const stop = () => { for (const p of [srv, srvThink, srvLlama, srvMistral]) { try { p.kill('SIGTERM'); } catch { /* gone */ } } };
// The temporary directory goes at exit, kept (and named) as tests/testutil.c keeps its own:
// when a check failed or KW_TEST_KEEP_TMP is set to anything but 0.
process.on('exit', () => {
  stop();
  const keep = process.env.KW_TEST_KEEP_TMP;
  if (failed || (keep && keep !== '0')) console.log('kept ' + dir);
  else fs.rmSync(dir, { recursive: true, force: true });
});

function post(port, body) {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/v1/chat/completions',
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
    });
    req.on('error', reject);
    req.end(data);
  });
}

const TOOLS = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } },
  { type: 'function', function: { name: 'read', description: 'Read a file',
    parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } } },
];

const LONG = 'src/' + Array.from({ length: 24 }, (_, i) => `dir${i}`).join('/') + '/file.txt';
// name -> [scripted output, expected {content, reasoning, calls:[[name, argsObject]]}]
const CASES = {
  plain: ['The weather is fine today.', { content: 'The weather is fine today.', reasoning: null, calls: [] }],
  one_call: ['I will check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    { content: 'I will check.', reasoning: null, calls: [['get_weather', { city: 'Paris' }]] }],
  parallel: ['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n<tool_call>\n{"name": "read", "arguments": {"path": "/tmp/a b.txt"}}\n</tool_call>',
    { content: null, reasoning: null, calls: [['get_weather', { city: 'Oslo' }], ['read', { path: '/tmp/a b.txt' }]] }],
  think_call: ['<think>\nThe user wants a file. I should read it.\n</think>\n\n<tool_call>\n{"name": "read", "arguments": {"path": "README.md"}}\n</tool_call>',
    { content: null, reasoning: 'The user wants a file. I should read it.', calls: [['read', { path: 'README.md' }]] }],
  // not a call (the name is not a JSON string): verbatim content
  malformed: ['<tool_call>\n{"name": read, "arguments": {"path": "a"}}\n</tool_call> oops',
    { content: '<tool_call>\n{"name": read, "arguments": {"path": "a"}}\n</tool_call> oops', reasoning: null, calls: [] }],
  // the call started (name known) and its arguments broke: the call keeps what was written, the rest is content
  broken_args: ['<tool_call>\n{"name": "read", "arguments": {"path": </tool_call> oops',
    { content: '</tool_call> oops', reasoning: null, calls: [['read', { raw: '{"path": ' }]] }],
  // Mistral tokenizer v11+ (Mistral Small 3.2, Devstral, Magistral): [TOOL_CALLS]NAME[ARGS]{..}, one opener per call,
  // optionally [CALL_ID]ID before [ARGS]
  mistral_v11: ['Checking both.[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}[TOOL_CALLS]read[CALL_ID]a1B2c3D4e[ARGS]{"path": "/tmp/a b.txt"}',
    { content: 'Checking both.', reasoning: null, calls: [['get_weather', { city: 'Oslo' }], ['read', { path: '/tmp/a b.txt' }]] }],
  // no JSON object after [ARGS]: verbatim content
  mistral_v11_malformed: ['[TOOL_CALLS]read[ARGS]oops, no JSON',
    { content: '[TOOL_CALLS]read[ARGS]oops, no JSON', reasoning: null, calls: [] }],
  long_args: ['<tool_call>\n{"name": "read", "arguments": {"path": "' + LONG + '"}}\n</tool_call>',
    { content: null, reasoning: null, calls: [['read', { path: LONG }]], minFragments: 8 }],
};

function argsMatch(text, want) {
  if (want && typeof want.raw === 'string') return text === want.raw;
  let parsed;
  try { parsed = JSON.parse(text); } catch { return false; }
  return JSON.stringify(parsed) === JSON.stringify(want);
}

function checkNonStream(name, r, want) {
  check(r.status === 200, `${name}: status 200`, r.text);
  const j = JSON.parse(r.text);
  check(j.object === 'chat.completion' && typeof j.id === 'string' && typeof j.created === 'number', `${name}: envelope`, j);
  const c = j.choices[0], m = c.message;
  check(m.role === 'assistant', `${name}: role`, m);
  check(m.content === want.content, `${name}: content`, m.content);
  check((m.reasoning_content ?? null) === want.reasoning, `${name}: reasoning_content`, m.reasoning_content);
  const calls = m.tool_calls || [];
  check(calls.length === want.calls.length, `${name}: number of tool calls`, calls);
  const ids = new Set();
  want.calls.forEach(([fn, args], i) => {
    const tc = calls[i] || {};
    check(/^call_[0-9a-f]+$/.test(tc.id || ''), `${name}: call ${i} id`, tc);
    ids.add(tc.id);
    check(tc.type === 'function', `${name}: call ${i} type`, tc);
    check(tc.function && tc.function.name === fn, `${name}: call ${i} name`, tc);
    check(typeof tc.function?.arguments === 'string' && argsMatch(tc.function.arguments, args), `${name}: call ${i} arguments`, tc);
  });
  check(ids.size === want.calls.length, `${name}: call ids distinct`);
  check(c.finish_reason === (want.calls.length ? 'tool_calls' : 'stop'), `${name}: finish_reason`, c.finish_reason);
  check(j.usage && j.usage.completion_tokens > 0 && j.usage.prompt_tokens > 0, `${name}: usage`, j.usage);
  return calls.map((tc) => tc.function?.arguments);
}

function checkStream(name, r, want, nonStreamArgs) {
  check(r.status === 200, `${name} stream: status 200`, r.text);
  const events = r.text.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
  check(events[events.length - 1] === '[DONE]', `${name} stream: ends with [DONE]`);
  const chunks = events.filter((e) => e !== '[DONE]').map((e) => JSON.parse(e));
  let content = null, reasoning = null, finish = null, role = null, finishChunks = 0;
  const calls = [];
  for (const ch of chunks) {
    if (!ch.choices.length) continue;   // the usage chunk
    check(ch.object === 'chat.completion.chunk' && ch.id === chunks[0].id, `${name} stream: chunk object and id`, ch);
    check('finish_reason' in ch.choices[0], `${name} stream: finish_reason present (null or a reason) in every chunk`, ch);
    const c = ch.choices[0], d = c.delta || {};
    if (d.role) role = d.role;
    if (typeof d.content === 'string') content = (content ?? '') + d.content;
    if (typeof d.reasoning_content === 'string') reasoning = (reasoning ?? '') + d.reasoning_content;
    check(!d.tool_calls || d.tool_calls.length === 1, `${name} stream: one call per delta`, d);
    for (const tc of d.tool_calls || []) {
      check(Number.isInteger(tc.index) && tc.index === (calls[tc.index] ? tc.index : calls.length), `${name} stream: call index in order`, tc);
      const f = tc.function || {};
      if (!calls[tc.index]) {
        // the first delta of a call: index, id, type and the name, arguments ""
        check(/^call_[0-9a-f]+$/.test(tc.id || '') && tc.type === 'function' && typeof f.name === 'string' && f.arguments === '',
          `${name} stream: first delta of call ${tc.index} is {index, id, type, function: {name, arguments: ""}}`, tc);
        calls[tc.index] = { id: tc.id, name: f.name, frags: [] };
      } else {
        // then fragments: only index and function.arguments, a non-empty string
        check(tc.id === undefined && tc.type === undefined && f.name === undefined && typeof f.arguments === 'string' && f.arguments.length > 0,
          `${name} stream: a later delta of call ${tc.index} carries only an arguments fragment`, tc);
        calls[tc.index].frags.push(f.arguments);
      }
    }
    if (c.finish_reason) { finish = c.finish_reason; finishChunks++; }
  }
  check(role === 'assistant', `${name} stream: role`);
  check((content === '' ? null : content) === want.content, `${name} stream: content`, content);
  check(reasoning === want.reasoning, `${name} stream: reasoning_content`, reasoning);
  check(calls.length === want.calls.length, `${name} stream: number of tool calls`, calls);
  want.calls.forEach(([fn, args], i) => {
    const tc = calls[i] || { frags: [] };
    const joined = tc.frags.join('');
    check(tc.name === fn, `${name} stream: call ${i} name`, tc);
    check(argsMatch(joined, args), `${name} stream: call ${i} fragments concatenate to the arguments`, tc);
    check(joined === nonStreamArgs[i], `${name} stream: call ${i} arguments == non-stream arguments`, [joined, nonStreamArgs[i]]);
    if (want.minFragments) check(tc.frags.length >= want.minFragments, `${name} stream: call ${i} arrives in >= ${want.minFragments} fragments`, tc.frags.length);
  });
  check(finishChunks === 1 && finish === (want.calls.length ? 'tool_calls' : 'stop'), `${name} stream: one finish_reason`, finish);
  const last = chunks[chunks.length - 1];
  check(last && last.choices.length === 0 && last.usage && last.usage.completion_tokens > 0, `${name} stream: usage in the last chunk`, last);
}

async function main() {
  const port = await portOf(srv);
  const messages = [{ role: 'system', content: 'You are a helpful agent.' }, { role: 'user', content: 'What is the weather in Paris?' }];
  for (const [name, [script, want]] of Object.entries(CASES)) {
    const body = { model: 'tiny', messages, tools: TOOLS, tool_choice: 'auto', temperature: 0, test_replay: script };
    const args = checkNonStream(name, await post(port, body), want);
    checkStream(name, await post(port, { ...body, stream: true, stream_options: { include_usage: true } }), want, args);
  }
  // a second turn carrying the assistant's tool call and the tool result is accepted
  const turn2 = [...messages,
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' }];
  const r2 = await post(port, { messages: turn2, tools: TOOLS, test_replay: 'It is 21 degrees.' });
  check(r2.status === 200 && JSON.parse(r2.text).choices[0].message.content === 'It is 21 degrees.', 'tool result turn', r2.text);
  // tool_choice "none": tags stay text
  const r3 = await post(port, { messages, tools: TOOLS, tool_choice: 'none', test_replay: CASES.one_call[0] });
  const m3 = JSON.parse(r3.text).choices[0];
  check(m3.message.content === CASES.one_call[0] && !m3.message.tool_calls && m3.finish_reason === 'stop', 'tool_choice none', m3);
  // parallel_tool_calls: false reports only the first call
  const r5 = await post(port, { messages, tools: TOOLS, parallel_tool_calls: false, test_replay: CASES.parallel[0] });
  const m5 = JSON.parse(r5.text).choices[0];
  check(m5.message.tool_calls?.length === 1 && m5.message.tool_calls[0].function.name === 'get_weather' &&
        m5.finish_reason === 'tool_calls', 'parallel_tool_calls false', m5);
  // a template that opened <think> in the prompt: the output starts inside the reasoning;
  // chat_template_kwargs.enable_thinking=false closes it in the prompt, so the output is content
  const tp = await portOf(srvThink);
  for (const stream of [false, true]) {
    const a = await post(tp, { messages, stream, test_replay: 'Let me think.\n</think>\n\nParis is sunny.' });
    const b = await post(tp, { messages, stream, chat_template_kwargs: { enable_thinking: false }, test_replay: 'Paris is sunny.' });
    const got = (r) => {
      if (!stream) { const m = JSON.parse(r.text).choices[0].message; return [m.content, m.reasoning_content ?? null]; }
      let c = null, rc = null;
      for (const e of r.text.split('\n\n')) {
        if (!e.startsWith('data: {')) continue;
        const d = JSON.parse(e.slice(6)).choices[0]?.delta || {};
        if (d.content) c = (c ?? '') + d.content;
        if (d.reasoning_content) rc = (rc ?? '') + d.reasoning_content;
      }
      return [c, rc];
    };
    check(JSON.stringify(got(a)) === JSON.stringify(['Paris is sunny.', 'Let me think.']), `think opened by the template (stream ${stream})`, got(a));
    check(JSON.stringify(got(b)) === JSON.stringify(['Paris is sunny.', null]), `enable_thinking false (stream ${stream})`, got(b));
  }
  // tool_choice (docs/SERVER.md): values other than none/auto/required/{type:function,function:{name}} are 400
  const bad = [['sometimes', 'invalid_value'], [5, 'invalid_type'], [{ type: 'function' }, 'invalid_value'],
    [{ type: 'function', function: { name: 'nope' } }, 'invalid_value'], [{ type: 'tool', name: 'read' }, 'invalid_value']];
  for (const [tc, code] of bad) {
    const r = await post(port, { messages, tools: TOOLS, tool_choice: tc, test_replay: 'x' });
    const err = r.status === 400 ? JSON.parse(r.text).error : {};
    check(r.status === 400 && err.param === 'tool_choice' && err.code === code, `tool_choice ${JSON.stringify(tc)}: 400 ${code}`, r.text);
  }
  const r6 = await post(port, { messages, tool_choice: 'required', test_replay: 'x' });
  check(r6.status === 400 && JSON.parse(r6.text).error.param === 'tool_choice', 'tool_choice required without tools: 400', r6.text);
  const r7 = await post(port, { messages, tool_choice: 'auto', test_replay: 'x' });
  check(r7.status === 200, 'tool_choice auto without tools: accepted', r7.text);
  // "required" with a template that does not render tools (the tiny model's ChatML fallback): no prefill;
  // a scripted answer without a call (the grammar would not allow it) finishes with "stop"
  const r8 = await post(port, { messages, tools: TOOLS, tool_choice: 'required', test_replay: 'Plain answer.' });
  const m8 = JSON.parse(r8.text).choices[0];
  check(m8.message.content === 'Plain answer.' && !m8.message.tool_calls && m8.finish_reason === 'stop', 'tool_choice required, no call: stop', m8);
  // with the tools-rendering template: "none" leaves the tools out of the prompt
  const usage = async (body) => JSON.parse((await post(tp, { messages, test_replay: 'ok', ...body })).text).usage.prompt_tokens;
  const pNoTools = await usage({}), pNone = await usage({ tools: TOOLS, tool_choice: 'none' }), pAuto = await usage({ tools: TOOLS });
  check(pNone === pNoTools && pAuto > pNone, 'tool_choice none: tools not rendered', { pNoTools, pNone, pAuto });
  // "required" / named with a Hermes template: no prefill, the model may think first (the template opened
  // <think>), then writes <tool_call>{...}</tool_call> (what the forced-call grammar allows)
  const callOf = (r, stream) => {
    if (!stream) {
      const c = JSON.parse(r.text).choices[0];
      return { finish: c.finish_reason, content: c.message.content, reasoning: c.message.reasoning_content ?? null,
        calls: (c.message.tool_calls || []).map((t) => [t.function.name, JSON.parse(t.function.arguments)]) };
    }
    const out = { finish: null, content: null, reasoning: null, calls: [] };
    for (const e of r.text.split('\n\n')) {
      if (!e.startsWith('data: {')) continue;
      const c = JSON.parse(e.slice(6)).choices[0];
      if (!c) continue;
      if (c.finish_reason) out.finish = c.finish_reason;
      if (c.delta.content) out.content = (out.content ?? '') + c.delta.content;
      if (c.delta.reasoning_content) out.reasoning = (out.reasoning ?? '') + c.delta.reasoning_content;
      for (const t of c.delta.tool_calls || []) {
        if (t.function.name) out.calls[t.index] = [t.function.name, ''];
        else out.calls[t.index][1] += t.function.arguments;
      }
    }
    out.calls = out.calls.map(([n, a]) => [n, JSON.parse(a)]);
    return out;
  };
  for (const stream of [false, true]) {
    for (const kw of [{}, { chat_template_kwargs: { enable_thinking: false } }]) {
      const think = !kw.chat_template_kwargs;
      const tag = `(stream ${stream}, ${think ? 'think open' : 'thinking off'})`;
      const pre = think ? 'Let me see.</think>\n\n' : '';
      const req = await post(tp, { messages, tools: TOOLS, tool_choice: 'required', stream, ...kw,
        test_replay: pre + '<tool_call>\n{"name": "read", "arguments": {"path": "x"}}\n</tool_call>' });
      check(JSON.stringify(callOf(req, stream)) === JSON.stringify({ finish: 'tool_calls', content: null, reasoning: think ? 'Let me see.' : null, calls: [['read', { path: 'x' }]] }),
        `tool_choice required: a <tool_call> ${tag}`, callOf(req, stream));
      const named = await post(tp, { messages, tools: TOOLS, tool_choice: { type: 'function', function: { name: 'get_weather' } }, stream, ...kw,
        test_replay: pre + '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>' });
      check(JSON.stringify(callOf(named, stream)) === JSON.stringify({ finish: 'tool_calls', content: null, reasoning: think ? 'Let me see.' : null, calls: [['get_weather', { city: 'Rome' }]] }),
        `tool_choice named: a <tool_call> ${tag}`, callOf(named, stream));
    }
  }
  // the other call formats: Llama 3 JSON ("parameters", bare at the start), Mistral [TOOL_CALLS] (prefilled: a special token)
  const lp = await portOf(srvLlama), mp = await portOf(srvMistral);
  const v11History = [...turn2, { role: 'assistant', content: 'It is 21 degrees.' }, { role: 'user', content: 'And in Rome?' }];
  const fmtCases = [
    ['llama3 named', lp, { type: 'function', function: { name: 'get_weather' } }, '{"name": "get_weather", "parameters": {"city": "Rome"}}', ['get_weather', { city: 'Rome' }]],
    ['llama3 required', lp, 'required', '{"name": "read", "parameters": {"path": "x"}}', ['read', { path: 'x' }]],
    ['llama3 auto (bare JSON)', lp, 'auto', '{"name": "read", "parameters": {"path": "y"}}', ['read', { path: 'y' }]],
    ['mistral named', mp, { type: 'function', function: { name: 'get_weather' } }, '[{"name": "get_weather", "arguments": {"city": "Rome"}}]', ['get_weather', { city: 'Rome' }]],
    ['mistral required', mp, 'required', '[{"name": "read", "arguments": {"path": "x"}}]', ['read', { path: 'x' }]],
    ['mistral v11 named', mp, { type: 'function', function: { name: 'get_weather' } }, ' {"city": "Rome"}', ['get_weather', { city: 'Rome' }], v11History],
  ];
  for (const [what, p, choice, replay, call, msgs] of fmtCases) {
    for (const stream of [false, true]) {
      const r = await post(p, { messages: msgs || messages, tools: TOOLS, tool_choice: choice, stream, test_replay: replay });
      check(JSON.stringify(callOf(r, stream)) === JSON.stringify({ finish: 'tool_calls', content: null, reasoning: null, calls: [call] }),
        `${what} (stream ${stream})`, [r.text.slice(0, 300), callOf(r, stream)]);
    }
  }
  // v11+ "required" with several tools cannot be forced (the name is followed by the special [ARGS]): 400
  {
    const r = await post(mp, { messages: v11History, tools: TOOLS, tool_choice: 'required', test_replay: 'x' });
    check(r.status === 400 && JSON.parse(r.text).error.param === 'tool_choice' && /name the function/.test(r.text), 'mistral v11 required, several tools: 400', r.text);
  }
  // which Mistral prefill was used shows in prompt_tokens (prompt + prefill): the v11+ one
  // ("[TOOL_CALLS]get_weather[ARGS]") is longer than the list one ("[TOOL_CALLS]": the grammar writes the rest)
  const named = { type: 'function', function: { name: 'get_weather' } };
  const pt = async (msgs, choice) => JSON.parse((await post(mp, { messages: msgs, tools: TOOLS, tool_choice: choice, test_replay: ' {}' })).text).usage.prompt_tokens;
  const dV11 = (await pt(v11History, named)) - (await pt(v11History, 'auto')), dList = (await pt(messages, named)) - (await pt(messages, 'auto'));
  check(dList > 0 && dV11 > dList, 'mistral named prefill: the v11+ form when the prompt writes calls with [ARGS]', { dV11, dList });
  // the replay script: rules by last role + tools, by text; no match samples; the request field wins
  const content = async (body) => { const r = await post(tp, { max_tokens: 32, chat_template_kwargs: { enable_thinking: false }, ...body }); return [r.status, r.status === 200 ? JSON.parse(r.text).choices[0].message.content : r.text]; };
  check(JSON.stringify(await content({ messages: [{ role: 'user', content: 'scripted please' }] })) === JSON.stringify([200, 'From the script.']), 'replay script: if_contains');
  check(JSON.stringify(await content({ messages: turn2, tools: TOOLS })) === JSON.stringify([200, 'After the tool.']), 'replay script: if_last_role tool + if_tools');
  check(JSON.stringify(await content({ messages: turn2 })) !== JSON.stringify([200, 'After the tool.']), 'replay script: if_tools must hold');
  check(JSON.stringify(await content({ messages: [{ role: 'user', content: 'scripted please' }], test_replay: 'Field.' })) === JSON.stringify([200, 'Field.']), 'replay script: test_replay field wins');
  // without --test-replay semantics the field is ignored by other servers; here a non-string is a clear 400
  const r4 = await post(port, { messages, test_replay: 5 });
  check(r4.status === 400, 'test_replay must be a string', r4.text);
}

// Graceful shutdown of every server: exit 0 and no sanitizer report (in the ASan+UBSan
// build, label sanitize, exit 0 also means LeakSanitizer found nothing in the tool paths).
async function shutdownAll() {
  for (const p of [srv, srvThink, srvLlama, srvMistral]) {
    const code = p.exitCode !== null ? p.exitCode : await new Promise((resolve) => {
      const timer = setTimeout(() => { p.kill('SIGKILL'); resolve('timeout'); }, 20000);
      p.on('exit', (c) => { clearTimeout(timer); resolve(c); });
      p.kill('SIGTERM');
    });
    check(code === 0 && !/Sanitizer|runtime error/.test(p.log), 'server exits 0 on SIGTERM, no sanitizer report', { code, log: p.log.slice(-600) });
  }
}

main().then(shutdownAll).then(() => {
  stop();
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}, (e) => { stop(); console.error(e); console.log(log); process.exit(1); });
