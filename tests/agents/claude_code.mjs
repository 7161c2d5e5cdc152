// claude_code.mjs - Claude Code itself (npm @anthropic-ai/claude-code,
// pinned in setup.sh) against `kvwise serve` through the Anthropic Messages
// API: `claude -p` with ANTHROPIC_BASE_URL = kvwise (behind a recording
// proxy), HOME in a temp folder, non-essential traffic and the updater off,
// its Write tool allowed (--permission-mode acceptEdits). The scripted model
// calls Write for hello.txt; Claude Code writes the file, sends the
// tool_result back, and prints the scripted answer.
// Checks: exit 0, the answer, the file; its requests are POST
// /v1/messages?beta=true with x-api-key, anthropic-version/-beta and the
// X-Claude-Code-Session-Id header (logged as the request's session); the
// round trip in kvwise's log (the second request took the whole first
// prompt from the prompt cache); Claude Code's own usage report counts
// cache_read_input_tokens; /metrics counts the requests as "messages".
import path from 'node:path';
import { ANSWER, FILE_TEXT, baseEnv, bin, check, checkFile, checkRoundTrip, finish, makeModel, recorder, run, serve,
  setup, stopServer, workspace, writeScript } from './lib.mjs';

setup();
const ws = workspace('claude');
let srv = null, rec = null;

async function main() {
  const model = makeModel(ws);
  const script = writeScript(ws, 'Write', { file_path: path.join(ws.project, 'hello.txt'), content: FILE_TEXT });
  srv = await serve(model, script, ['--api-key', 'sk-kvwise-test']);
  rec = await recorder(srv.port);
  const env = baseEnv(ws, {
    ANTHROPIC_BASE_URL: `http://127.0.0.1:${rec.port}`, ANTHROPIC_API_KEY: 'sk-kvwise-test',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_AUTOUPDATER: '1', DISABLE_TELEMETRY: '1',
    DISABLE_ERROR_REPORTING: '1', CLAUDE_CODE_DISABLE_TERMINAL_TITLE: '1',
  });
  const r = await run(bin('claude'), ['-p', 'Write hello.txt saying hello from kvwise.', '--model', 'kvwise',
    '--permission-mode', 'acceptEdits', '--max-turns', '4', '--output-format', 'json'], { cwd: ws.project, env });
  let result = null;
  try { result = JSON.parse(r.out.trim().split('\n').pop()); } catch { /* checked below */ }
  check(r.code === 0 && result, 'claude -p exits 0 with a JSON result', { code: r.code, out: r.out.slice(-1500), err: r.err.slice(-1500) });
  check(result && result.result === ANSWER && !result.is_error, 'the final answer is printed', result && result.result);
  checkFile(ws);
  const [, a2] = checkRoundTrip(srv.log(), 'messages', 'stream');
  check(result && result.usage && result.usage.cache_read_input_tokens >= (a2 ? a2.cached : 1),
    "Claude Code's usage counts the prompt cache (cache_read_input_tokens)", result && result.usage);

  const msgs = rec.seen.filter((q) => q.url.startsWith('/v1/messages'));
  check(msgs.length >= 2 && msgs.every((q) => q.method === 'POST' && q.url === '/v1/messages?beta=true'),
    'requests are POST /v1/messages?beta=true', rec.seen.map((q) => q.method + ' ' + q.url));
  const h = msgs[0] ? msgs[0].headers : {};
  check(h['x-api-key'] === 'sk-kvwise-test' && h['anthropic-version'] && h['anthropic-beta'], 'x-api-key, anthropic-version and anthropic-beta sent', h);
  const sid = h['x-claude-code-session-id'];
  check(sid && srv.log().includes(`session=X-Claude-Code-Session-Id:${sid}`), 'the session header is logged per request', sid);
  const withTools = msgs.find((q) => q.body && q.body.tools);
  check(withTools && withTools.body.messages.some((m) => m.role === 'system'), 'Claude Code sends role "system" messages inside messages (accepted)');
  const second = msgs.filter((q) => q.body && q.body.tools)[1];
  const results = second ? second.body.messages.flatMap((m) => Array.isArray(m.content) ? m.content : []).filter((b) => b.type === 'tool_result') : [];
  check(results.length === 1, 'the second agent request carries a tool_result block', second && second.body.messages.slice(-2));
  const metrics = await (await fetch(`http://127.0.0.1:${srv.port}/metrics`, { headers: { 'x-api-key': 'sk-kvwise-test' } })).text();
  const n = +((/kvwise_requests_by_api_total\{api="messages"\} (\d+)/.exec(metrics) || [0, 0])[1]);
  check(n === msgs.length, '/metrics counts every Messages request', { n, sent: msgs.length });
  rec.close();
  await stopServer(srv);
}

finish(main, ws, () => { if (rec) rec.close(); if (srv && srv.proc.exitCode === null) srv.proc.kill('SIGKILL'); });
