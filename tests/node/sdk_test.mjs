// sdk_test.mjs - the official OpenAI Node SDK drives kvwise serve: chat
// (stream and not), completions (stream and not), models, and typed errors.
// The server runs a tiny model from `kvwise mkmodel` (or the stub engine when
// this build cannot load models) on a free loopback port.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';

const BIN = process.env.KW_BIN;
// Every path ends in process.exit(); an event loop that drains first means a
// promise never settled (e.g. a server that died early): that is a failure.
process.on('beforeExit', () => { console.error('test ended without finishing'); process.exit(1); });
// Servers this test started never outlive it, whatever way it ends.
const children = new Set();
const spawnServer = (...a) => { const c = spawn(...a); children.add(c); c.on('exit', () => children.delete(c)); return c; };
process.on('exit', () => { for (const c of children) { try { c.kill('SIGKILL'); } catch { /* gone */ } } });
let passed = 0, failed = 0;
function check(cond, what, extra) {
  if (cond) passed++;
  else { failed++; console.error(`CHECK failed: ${what}${extra !== undefined ? ' :: ' + JSON.stringify(extra).slice(0, 400) : ''}`); }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kw-sdk-'));
const model = path.join(tmp, 'tiny.gguf');
const mk = spawnSync(BIN, ['mkmodel', '--preset', 'tiny', '--seed', '5', '-o', model]);
const useModel = mk.status === 0;
const args = ['serve', '--port', '0', '--api-key', 'sdk-key', '--ctx-size', '512'];
if (useModel) args.push('-m', model, '--threads', '1'); else args.push('--stub-engine');
const proc = spawnServer(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] });
const exited = new Promise((r) => proc.on('exit', (code, sig) => r(code ?? sig)));
let log = '';
proc.stderr.on('data', (d) => { log += d; });

async function main() {
  for (let i = 0; i < 1000 && !/ready on http:\/\/[^:]+:(\d+)/.test(log); i++) await sleep(20);
  const port = /ready on http:\/\/[^:]+:(\d+)/.exec(log)?.[1];
  if (!port) throw new Error('server did not start: ' + log);
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'sdk-key', maxRetries: 0 });

  const models = await client.models.list();
  check(models.data.length === 1 && typeof models.data[0].id === 'string', 'models.list', models.data);
  const modelId = models.data[0].id;

  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello there' }];
  const chat = await client.chat.completions.create({ model: modelId, messages, max_tokens: 10, temperature: 0 });
  check(chat.object === 'chat.completion' && chat.choices[0].message.role === 'assistant', 'chat non-stream', chat);
  check(['stop', 'length'].includes(chat.choices[0].finish_reason), 'chat finish_reason', chat.choices[0]);
  check(chat.usage.total_tokens === chat.usage.prompt_tokens + chat.usage.completion_tokens, 'chat usage', chat.usage);

  const stream = await client.chat.completions.create({ model: modelId, messages, max_tokens: 10, temperature: 0,
    stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null;
  for await (const chunk of stream) {
    if (chunk.choices[0]?.delta?.content) text += chunk.choices[0].delta.content;
    if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
    if (chunk.usage) usage = chunk.usage;
  }
  check(text === chat.choices[0].message.content, 'chat stream text == non-stream', [text, chat.choices[0].message.content]);
  check(finish === chat.choices[0].finish_reason, 'chat stream finish_reason', finish);
  check(usage && usage.completion_tokens === chat.usage.completion_tokens, 'chat stream usage', usage);

  const comp = await client.completions.create({ model: modelId, prompt: 'The sky is', max_tokens: 8, temperature: 0 });
  check(comp.object === 'text_completion' && typeof comp.choices[0].text === 'string', 'completion non-stream', comp);
  const cs = await client.completions.create({ model: modelId, prompt: 'The sky is', max_tokens: 8, temperature: 0, stream: true });
  let ctext = '';
  for await (const chunk of cs) ctext += chunk.choices[0]?.text ?? '';
  check(ctext === comp.choices[0].text, 'completion stream text == non-stream', [ctext, comp.choices[0].text]);

  try {
    await client.chat.completions.create({ model: modelId, messages: [{ role: 'user', content: 'word '.repeat(600) }] });
    check(false, 'context overflow must throw');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.status === 400 && e.code === 'context_length_exceeded', 'typed 400 context_length_exceeded', { status: e.status, code: e.code, msg: e.message });
  }
  try {
    const bad = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'wrong', maxRetries: 0 });
    await bad.models.list();
    check(false, 'wrong key must throw');
  } catch (e) {
    check(e instanceof OpenAI.AuthenticationError && e.status === 401, 'typed 401', { status: e.status });
  }
}

main().catch((e) => { failed++; console.error(e); }).finally(async () => {
  proc.kill('SIGTERM');
  const code = await exited;
  check(code === 0, 'server exits 0 on SIGTERM', code);
  fs.rmSync(tmp, { recursive: true, force: true });
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
});
