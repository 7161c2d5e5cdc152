// multiturn.mjs - a conversation reuses its own KV (issue 5 acceptance):
// turn N+1 reports usage.prompt_tokens_details.cached_tokens covering turn
// N's prompt and answer, prefills only the new part, and its time to first
// token does not grow with the conversation. Also: a second conversation on
// the same system prompt hits the cache for that prompt.
import { check, finish, startServer, streamChat, words } from './lib.mjs';

// The stub engine with real KV (--stub-kv): byte tokens, greedy output is
// plain ASCII, so the answer re-tokenizes to exactly the generated tokens
// and the bound below is exact. A forward call costs 2 ms (--stub-step-us)
// whatever its size, so TTFT counts prefill chunks of 128 tokens.
// KW_E2E_MODEL=path runs the same conversation on a real model instead.
const engine = process.env.KW_E2E_MODEL ? ['-m', process.env.KW_E2E_MODEL]
  : ['--stub-engine', '--stub-kv', '--stub-step-us', '2000'];
const srv = await startServer([...engine,
                               '--prompt-cache-size', '4', '--prompt-cache-bytes', '64MiB',
                               '--ctx-size', '4096', '--decode-concurrency', '2', '--prefill-step-size', '128']);
const system = { role: 'system', content: `You are a careful assistant. ${words(7, 80)}` };
const msgs = [system];
const turns = [];
for (let t = 0; t < 6; t++) {
  msgs.push({ role: 'user', content: `question ${t}: ${words(100 + t, 20)}` });
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
  // On a real model the answer's text may not re-tokenize to the sampled
  // tokens (a random-weight model often samples tokens that render as
  // nothing), so there only turn N's prompt is guaranteed.
  const want = process.env.KW_E2E_MODEL ? prev.prompt : prev.prompt + prev.completion - 1;
  check(turns[t].cached >= want, `turn ${t}: cached_tokens ${turns[t].cached} >= turn ${t - 1} prompt+answer-1 = ${want}`);
  check(turns[t].cached < turns[t].prompt, `turn ${t}: the last prompt token is always computed`);
  // only the new user message (and the template around it) is prefilled
  if (!process.env.KW_E2E_MODEL)
    check(turns[t].prompt - turns[t].cached < 250, `turn ${t}: prefilled ${turns[t].prompt - turns[t].cached} new tokens`);
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
