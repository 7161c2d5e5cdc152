// pi.mjs - pi itself (npm @mariozechner/pi-coding-agent, pinned in
// setup.sh) against `kvwise serve` through the OpenAI chat API: `pi -p
// --mode json` with a provider in ~/.pi/agent/models.json (api
// "openai-completions", baseUrl = kvwise behind a recording proxy), HOME in
// a temp folder, PI_OFFLINE=1 (no update or telemetry calls), no session
// saved. The scripted model calls pi's write tool for hello.txt; pi writes
// it, sends the tool result back, prints the answer.
// Checks: exit 0, the answer, the file, the round trip in kvwise's log,
// pi's own usage of the second turn counts cacheRead, and its real second
// request tokenizes the same with content null and "" (nullcontent.mjs).
import fs from 'node:fs';
import path from 'node:path';
import { ANSWER, FILE_TEXT, baseEnv, bin, check, checkFile, checkRoundTrip, finish, makeModel, recorder, run, serve,
  setup, stopServer, workspace, writeScript } from './lib.mjs';
import { checkNullContent } from './nullcontent.mjs';

setup();
const ws = workspace('pi');
let srv = null, rec = null;

async function main() {
  const model = makeModel(ws);
  const script = writeScript(ws, 'write', { path: path.join(ws.project, 'hello.txt'), content: FILE_TEXT });
  srv = await serve(model, script);
  rec = await recorder(srv.port);
  const agentDir = path.join(ws.home, '.pi', 'agent');
  fs.mkdirSync(agentDir, { recursive: true });
  fs.writeFileSync(path.join(agentDir, 'models.json'), JSON.stringify({ providers: { kvwise: {
    baseUrl: `http://127.0.0.1:${rec.port}/v1`, api: 'openai-completions', apiKey: 'unused',
    compat: { supportsDeveloperRole: false, supportsReasoningEffort: false },
    models: [{ id: 'kvwise', contextWindow: 32768, maxTokens: 1024 }],
  } } }));
  const env = baseEnv(ws, { PI_OFFLINE: '1', PI_TELEMETRY: '0' });
  const r = await run(bin('pi'), ['--no-session', '--model', 'kvwise/kvwise', '--mode', 'json', '-p',
    'Write hello.txt saying hello from kvwise.'], { cwd: ws.project, env });
  const events = r.out.split('\n').filter((l) => l.startsWith('{')).map((l) => { try { return JSON.parse(l); } catch { return {}; } });
  const end = events.filter((e) => e.type === 'agent_end').pop();
  const msgs = end ? end.messages : [];
  const replies = msgs.filter((m) => m.role === 'assistant');
  const last = replies[replies.length - 1];
  const said = last ? last.content.filter((c) => c.type === 'text').map((c) => c.text).join('') : null;
  check(r.code === 0 && end, 'pi -p exits 0 and ends the agent run', { code: r.code, out: r.out.slice(-1500), err: r.err.slice(-1500) });
  check(said === ANSWER, 'the final answer is printed', said);
  checkFile(ws);
  const [a1, a2] = checkRoundTrip(srv.log(), 'chat', 'stream');
  check(last && last.usage && last.usage.cacheRead >= (a2 ? a2.cached : 1), "pi's usage of the second turn counts cacheRead", last && last.usage);
  rec.close();
  await checkNullContent(srv.port, rec.seen, 'pi', a1 ? a1.prompt : 1e9);
  await stopServer(srv);
}

finish(main, ws, () => { if (rec) rec.close(); if (srv && srv.proc.exitCode === null) srv.proc.kill('SIGKILL'); });
