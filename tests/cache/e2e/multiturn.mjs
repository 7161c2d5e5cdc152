// multiturn.mjs - a conversation reuses its own KV (issue 5 acceptance):
// turn N+1 reports usage.prompt_tokens_details.cached_tokens covering turn
// N's prompt and answer, prefills only the new part, and its time to first
// token does not grow with the conversation. Also: a second conversation on
// the same system prompt hits the cache for that prompt.
import { check, finish, startServer, streamChat, words, sharedModel, skip } from './lib.mjs';

const engineArgs = process.env.KW_E2E_ENGINE === 'stub' ? ['--stub-engine'] : (() => {
  const m = sharedModel('llama-q4_0.gguf');
  if (!m) skip('../shared/conformance/models/llama-q4_0.gguf not found');
  return ['-m', m];
})();
const srv = await startServer([...engineArgs, '--prompt-cache-size', '4', '--prompt-cache-bytes', '64MiB',
                               '--ctx-size', '2048', '--decode-concurrency', '2']);
const system = { role: 'system', content: `You are a careful assistant. ${words(7, 150)}` };
const msgs = [system];
const turns = [];
for (let t = 0; t < 6; t++) {
  msgs.push({ role: 'user', content: `question ${t}: ${words(100 + t, 40)}` });
  const r = await streamChat(srv.base, { messages: msgs, max_tokens: 16, temperature: 0 });
  check(r.status === 200, `turn ${t} answered (${r.status} ${r.text || ''})`);
  if (r.status !== 200) break;
  const u = r.usage || {};
  const cached = (u.prompt_tokens_details || {}).cached_tokens;
  turns.push({ prompt: u.prompt_tokens, completion: u.completion_tokens, cached, ttft: r.ttftMs });
  msgs.push({ role: 'assistant', content: r.text });
}
console.log(JSON.stringify(turns));
check(turns.length === 6 && turns[0].cached === 0, `the first turn has nothing cached (${turns[0] && turns[0].cached})`);
for (let t = 1; t < turns.length; t++) {
  const prev = turns[t - 1];
  // The last sampled token of turn N is never fed back through the model,
  // so its KV does not exist: at most prompt + completion - 1 can be cached.
  const want = prev.prompt + prev.completion - 1;
  check(turns[t].cached >= want, `turn ${t}: cached_tokens ${turns[t].cached} >= turn ${t - 1} prompt+answer-1 = ${want}`);
  check(turns[t].cached < turns[t].prompt, `turn ${t}: the last prompt token is always computed`);
}
// TTFT does not grow with the conversation: the prefill per turn is the new
// part only. Bound: the last turn is not slower than 3x the second turn plus
// 50 ms of scheduling noise (the prompt itself grew about 3x over the run).
if (turns.length === 6)
  check(turns[5].ttft <= 3 * turns[1].ttft + 50, `TTFT turn 5 ${turns[5].ttft} ms vs turn 1 ${turns[1].ttft} ms`);
// Another conversation on the same system prompt reuses it.
const other = await streamChat(srv.base, { messages: [system, { role: 'user', content: 'hello there' }], max_tokens: 4, temperature: 0 });
const oc = other.usage && other.usage.prompt_tokens_details && other.usage.prompt_tokens_details.cached_tokens;
check(other.status === 200 && oc >= 100, `a new conversation on the same system prompt hits the cache (${oc} cached)`);
const ex = await srv.stop();
check(ex.code === 0, `clean exit (${JSON.stringify(ex)})`);
finish();
