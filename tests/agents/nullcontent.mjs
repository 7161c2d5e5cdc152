// nullcontent.mjs - the null-content check the OpenAI-API clients need
// (used by qwen_code.mjs and pi.mjs): after a tool call, pi and Qwen Code
// send the assistant turn as {"role": "assistant", "content": null,
// "tool_calls": [...]}. Their real second request (recorded) is replayed to
// kvwise as sent and with every null content replaced by "": both must
// tokenize to the same prompt. The second replay proves it through the
// prompt cache: same prompt_tokens, and all but the last token found cached
// (the first replay left exactly that sequence in the cache).
import { check } from './lib.mjs';

async function replay(port, body) {
  const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: false, max_tokens: 1, test_replay: 'x' }),
  });
  return { status: res.status, json: await res.json() };
}

export async function checkNullContent(port, seen, client, firstPrompt) {
  const second = seen.filter((q) => q.url.endsWith('/chat/completions') && q.body && q.body.tools)[1];
  const asst = second ? second.body.messages.find((m) => m.role === 'assistant' && m.tool_calls) : null;
  check(asst && asst.content === null, `${client} sends the assistant tool-call turn with content null`, asst);
  if (!second) return;
  const asSent = structuredClone(second.body), empty = structuredClone(second.body);
  for (const m of empty.messages) if (m.content === null) m.content = '';
  const a = await replay(port, asSent);
  const b = await replay(port, empty);
  check(a.status === 200 && b.status === 200, 'both replays answer 200', [a, b]);
  const pa = a.json.usage, pb = b.json.usage;
  check(pa && pb && pa.prompt_tokens === pb.prompt_tokens && pb.prompt_tokens_details.cached_tokens === pb.prompt_tokens - 1,
    `${client}'s real request: content null and "" give the same prompt tokens`, { pa, pb });
  // nothing fell back to a format without the tools: the second prompt holds all of the first (system
  // prompt, tools, user turn) and more
  check(pa && pa.prompt_tokens > firstPrompt, 'the replayed prompt is longer than the first (tools kept)', { prompt: pa && pa.prompt_tokens, firstPrompt });
}
