// sdks.mjs - the client libraries against `kvwise serve`, each one a tool
// round trip the test itself runs as the client: the model (scripted)
// calls write_file, the test writes the file with the call's arguments,
// sends the result back, and reads the answer; the second request of each
// session reports cached tokens in that API's own usage field.
//   - `ollama` JS library: list / show / version, chat (stream and not) with
//     tools -> tool_calls, role "tool" result -> answer; prompt_eval_cached_count.
//   - official `openai` SDK: responses.create (function_call ->
//     function_call_output -> answer; input_tokens_details.cached_tokens) and
//     responses.stream (events, finalResponse); a custom tool answered as a
//     custom_tool_call; a streamed prompt longer than the context ends in
//     response.failed (context_length_exceeded); the 400s for
//     previous_response_id, an unknown text.format type, a non-boolean strict.
//   - official `@anthropic-ai/sdk`: messages.create (tool_use -> tool_result
//     -> answer; cache_read_input_tokens), messages.stream (events,
//     finalMessage), countTokens, thinking blocks, stop_sequence, the 400
//     for an unknown output_config.format type, typed errors (401).
import fs from 'node:fs';
import path from 'node:path';
import { ANSWER, FILE_TEXT, check, finish, makeModel, modulePath, serve, setup, stopServer, workspace, writeScript } from './lib.mjs';

setup();
const ws = workspace('sdks');
let srv = null;
const KEY = 'sk-kvwise-sdk';
const { Ollama } = await import(path.join(modulePath('ollama'), 'dist', 'index.mjs'));
const OpenAI = (await import(path.join(modulePath('openai'), 'index.mjs'))).default;
const Anthropic = (await import(path.join(modulePath('@anthropic-ai/sdk'), 'index.mjs'))).default;

const WRITE = { name: 'write_file', description: 'Write a file', schema: { type: 'object',
  properties: { path: { type: 'string' }, content: { type: 'string' } }, required: ['path', 'content'] } };

// The test is the client: it runs the model's write_file call.
function runWrite(args, name) {
  const target = path.join(ws.project, path.basename(args.path));
  fs.writeFileSync(target, args.content);
  check(fs.readFileSync(target, 'utf8') === FILE_TEXT && path.basename(args.path) === name, `${name} written by the client`, args);
  return `wrote ${FILE_TEXT.length} bytes to ${name}`;
}

async function ollamaLib(port) {
  const ollama = new Ollama({ host: `http://127.0.0.1:${port}`, headers: { Authorization: `Bearer ${KEY}` } });
  const list = await ollama.list();
  check(list.models.length === 1 && list.models[0].details.family === 'qwen3', 'ollama.list: the one model', list);
  const show = await ollama.show({ model: list.models[0].name });
  check(show.capabilities.includes('tools') && show.model_info['qwen3.context_length'] === 32768 && show.template.includes('<tool_call>'),
    'ollama.show: tools capability, context length, template', { caps: show.capabilities, info: show.model_info });
  const ver = await (await fetch(`http://127.0.0.1:${port}/api/version`, { headers: { Authorization: `Bearer ${KEY}` } })).json();
  check(/^\d+\.\d+\.\d+$/.test(ver.version), '/api/version', ver);
  const tools = [{ type: 'function', function: { name: WRITE.name, description: WRITE.description, parameters: WRITE.schema } }];
  const messages = [{ role: 'user', content: 'Write ollama.txt (ollama)' }];
  for (const stream of [false, true]) {
    const msgs = structuredClone(messages);
    let first;
    if (stream) {
      let calls = [], content = '', lines = 0;
      for await (const part of await ollama.chat({ model: 'kvwise', messages: msgs, tools, stream: true })) {
        lines++;
        if (part.message.tool_calls) calls = calls.concat(part.message.tool_calls);
        content += part.message.content;
        if (part.done) first = { ...part, message: { role: 'assistant', content, tool_calls: calls } };
      }
      check(lines >= 2, 'ollama.chat stream: NDJSON pieces then done', lines);
    } else {
      first = await ollama.chat({ model: 'kvwise', messages: msgs, tools, stream: false });
    }
    const call = first.message.tool_calls && first.message.tool_calls[0];
    check(call && call.function.name === 'write_file' && typeof call.function.arguments === 'object', `ollama.chat (stream=${stream}): a tool call with object arguments`, first.message);
    if (!call) continue;
    msgs.push(first.message, { role: 'tool', content: runWrite(call.function.arguments, 'ollama.txt'), tool_name: 'write_file' });
    const second = await ollama.chat({ model: 'kvwise', messages: msgs, tools, stream: false });
    check(second.message.content === ANSWER && second.done_reason === 'stop', `ollama.chat (stream=${stream}): the answer after the tool result`, second);
    check(second.prompt_eval_count > first.prompt_eval_count && second.prompt_eval_cached_count >= first.prompt_eval_count,
      `ollama.chat (stream=${stream}): the second request reports prompt_eval_cached_count`, { first: first.prompt_eval_count, second });
  }
  const gen = await ollama.generate({ model: 'kvwise', prompt: 'Say hi', stream: false, options: { num_predict: 8 } });
  check(gen.done && typeof gen.response === 'string' && gen.eval_count > 0, 'ollama.generate', gen);
  let err = null;
  try { await ollama.chat({ model: 'kvwise', messages, format: 'yaml' }); } catch (e) { err = e; }
  check(err && err.status_code === 400 && /format/.test(err.error), 'ollama format other than json or a schema -> 400 naming it', err && err.error);
}

async function openaiResponses(port) {
  const client = new OpenAI({ apiKey: KEY, baseURL: `http://127.0.0.1:${port}/v1` });
  const tools = [{ type: 'function', name: WRITE.name, description: WRITE.description, parameters: WRITE.schema, strict: false }];
  const input = [{ role: 'user', content: 'Write responses.txt (responses)' }];
  const first = await client.responses.create({ model: 'kvwise', input, tools });
  const call = first.output.find((o) => o.type === 'function_call');
  check(call && call.name === 'write_file', 'responses.create: a function_call item', first.output);
  if (call) {
    const out = runWrite(JSON.parse(call.arguments), 'responses.txt');
    const second = await client.responses.create({ model: 'kvwise', tools,
      input: [...input, ...first.output, { type: 'function_call_output', call_id: call.call_id, output: out }] });
    check(second.output_text === ANSWER && second.status === 'completed', 'responses.create: the answer after function_call_output', second.output);
    check(second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens,
      'responses.create: the second request reports input_tokens_details.cached_tokens', { first: first.usage, second: second.usage });
  }
  // streamed: the events and the final response
  const stream = client.responses.stream({ model: 'kvwise', input: [{ role: 'user', content: 'Write streamed.txt (streamed)' }], tools });
  const types = new Set();
  let deltas = '';
  for await (const ev of stream) {
    types.add(ev.type);
    if (ev.type === 'response.function_call_arguments.delta') deltas += ev.delta;
  }
  const fin = await stream.finalResponse();
  const scall = fin.output.find((o) => o.type === 'function_call');
  check(['response.created', 'response.output_item.added', 'response.function_call_arguments.delta', 'response.output_item.done',
    'response.completed'].every((t) => types.has(t)), 'responses.stream: the event sequence', [...types]);
  check(scall && scall.arguments === deltas && JSON.parse(deltas).path, 'responses.stream: the deltas make the arguments', { deltas, scall });
  // a custom (freeform) tool is answered as custom_tool_call, never function_call
  const custom = await client.responses.create({ model: 'kvwise', input: 'Patch (custom)',
    tools: [{ type: 'custom', name: 'apply_patch', description: 'Apply a patch' }] });
  const cc = custom.output.find((o) => o.type === 'custom_tool_call');
  check(cc && cc.input === '*** Begin Patch\n*** End Patch\n' && !custom.output.some((o) => o.type === 'function_call'),
    'a custom tool is answered as a custom_tool_call with the raw input', custom.output);
  // a streamed request longer than the context: a stream with response.failed, code context_length_exceeded
  const long = await fetch(`http://127.0.0.1:${port}/v1/responses`, { method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ model: 'kvwise', stream: true, input: 'hello '.repeat(40000) }) });
  const events = (await long.text()).split('\n').filter((l) => l.startsWith('data: ')).map((l) => JSON.parse(l.slice(6)));
  check(long.status === 200 && events.length === 2 && events[0].type === 'response.created' && events[1].type === 'response.failed' &&
    events[1].response.error.code === 'context_length_exceeded', 'a streamed prompt longer than the context: response.failed context_length_exceeded',
  events.map((e) => [e.type, e.response && e.response.error]));
  for (const [what, body, param] of [
    ['previous_response_id', { previous_response_id: 'resp_x' }, 'previous_response_id'],
    ['text.format xml', { text: { format: { type: 'xml' } } }, 'text.format'],
    ['strict not a boolean', { tools: [{ ...tools[0], strict: 'yes' }] }, 'tools']]) {
    let err = null;
    try { await client.responses.create({ model: 'kvwise', input: 'x', ...body }); } catch (e) { err = e; }
    check(err && err.status === 400 && err.param === param, `responses: ${what} -> 400 naming ${param}`, err && err.error);
  }
}

async function anthropicSdk(port) {
  const client = new Anthropic({ apiKey: KEY, baseURL: `http://127.0.0.1:${port}` });
  const tools = [{ name: WRITE.name, description: WRITE.description, input_schema: WRITE.schema }];
  const messages = [{ role: 'user', content: 'Write anthropic.txt (anthropic)' }];
  const first = await client.messages.create({ model: 'kvwise', max_tokens: 256, messages, tools });
  const use = first.content.find((b) => b.type === 'tool_use');
  check(first.stop_reason === 'tool_use' && use && use.name === 'write_file' && typeof use.input === 'object', 'messages.create: a tool_use block', first);
  if (use) {
    const out = runWrite(use.input, 'anthropic.txt');
    const second = await client.messages.create({ model: 'kvwise', max_tokens: 256, tools, messages: [...messages,
      { role: 'assistant', content: first.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: out }] }] });
    const text = second.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
    check(text === ANSWER && second.stop_reason === 'end_turn', 'messages.create: the answer after the tool_result', second);
    const total1 = first.usage.input_tokens + first.usage.cache_read_input_tokens;
    check(second.usage.cache_read_input_tokens >= total1, 'messages.create: the second request reports cache_read_input_tokens',
      { first: first.usage, second: second.usage });
  }
  // streamed: events (thinking, text, tool_use) and the final message
  const stream = client.messages.stream({ model: 'kvwise', max_tokens: 256, messages: [{ role: 'user', content: 'Think, then write stream.txt (stream)' }], tools });
  const types = new Set();
  stream.on('streamEvent', (ev) => { types.add(ev.type + (ev.type === 'content_block_delta' ? ':' + ev.delta.type : '')); });
  const fin = await stream.finalMessage();
  const kinds = fin.content.map((b) => b.type);
  check(['message_start', 'content_block_start', 'content_block_delta:thinking_delta', 'content_block_delta:text_delta',
    'content_block_delta:input_json_delta', 'content_block_stop', 'message_delta', 'message_stop'].every((t) => types.has(t)),
  'messages.stream: the event sequence', [...types]);
  check(kinds.join() === 'thinking,text,tool_use' && fin.content[2].input.path === 'stream.txt' && fin.stop_reason === 'tool_use',
    'messages.stream: finalMessage has thinking, text and tool_use', fin.content);
  const count = await client.messages.countTokens({ model: 'kvwise', messages, tools });
  check(count.input_tokens > 20, 'messages.countTokens', count);
  const stopped = await client.messages.create({ model: 'kvwise', max_tokens: 64, stop_sequences: ['STOP'],
    messages: [{ role: 'user', content: 'count (stop)' }] });
  check(stopped.stop_reason === 'stop_sequence' && stopped.stop_sequence === 'STOP' && stopped.content[0].text === 'one two ',
    'stop_sequences: stop_reason stop_sequence naming it', stopped);
  let err = null;
  try { await client.messages.create({ model: 'kvwise', max_tokens: 8, messages, output_config: { format: { type: 'xml' } } }); } catch (e) { err = e; }
  check(err && err.status === 400 && err.error && err.error.error && err.error.error.type === 'invalid_request_error' &&
    /output_config\.format/.test(err.error.error.message), 'output_config.format of an unknown type -> 400 in Anthropic\'s error shape', err && err.error);
  err = null;
  try { await new Anthropic({ apiKey: 'wrong', baseURL: `http://127.0.0.1:${port}`, maxRetries: 0 }).messages.create({ model: 'kvwise', max_tokens: 8, messages }); } catch (e) { err = e; }
  check(err instanceof Anthropic.AuthenticationError, 'a wrong x-api-key -> AuthenticationError (401)', err && String(err));
}

async function main() {
  const model = makeModel(ws);
  const script = writeScript(ws, 'write_file', { path: 'FILE', content: FILE_TEXT });
  // per-test rules: the file's name comes from the user turn ("(name)"); thinking and stop cases
  const call = (name) => `<tool_call>\n${JSON.stringify({ name: 'write_file', arguments: { path: name, content: FILE_TEXT } })}\n</tool_call>`;
  fs.writeFileSync(script, JSON.stringify([
    { if_tool_result: true, text: ANSWER },
    { if_contains: '(custom)', text: `<tool_call>\n${JSON.stringify({ name: 'apply_patch', arguments: { input: '*** Begin Patch\n*** End Patch\n' } })}\n</tool_call>` },
    { if_contains: '(stop)', text: 'one two STOP three' },
    { if_contains: '(stream)', text: `<think>\nThe user wants a file.\n</think>\n\nWriting it.\n${call('stream.txt')}` },
    ...['ollama', 'responses', 'streamed', 'anthropic'].map((n) => ({ if_contains: `(${n})`, text: call(`${n}.txt`) })),
    { text: 'Hello.' },
  ]));
  srv = await serve(model, script, ['--api-key', KEY]);
  await ollamaLib(srv.port);
  await openaiResponses(srv.port);
  await anthropicSdk(srv.port);
  await stopServer(srv);
}

finish(main, ws, () => { if (srv && srv.proc.exitCode === null) srv.proc.kill('SIGKILL'); });
