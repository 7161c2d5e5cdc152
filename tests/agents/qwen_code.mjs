// qwen_code.mjs - Qwen Code itself (npm @qwen-code/qwen-code, pinned in
// setup.sh) against `kvwise serve` through the OpenAI chat API: `qwen -p`
// with OPENAI_BASE_URL = kvwise (behind a recording proxy), HOME in a temp
// folder, telemetry and update checks off in its settings, --yolo (tools
// run without asking). The scripted model calls write_file for hello.txt;
// Qwen Code writes it, sends the tool result back, prints the answer.
// Checks: exit 0, the answer, the file, the round trip in kvwise's log,
// Qwen Code's own usage counts cache_read_input_tokens, and its real second
// request tokenizes the same with content null and "" (nullcontent.mjs).
import fs from 'node:fs';
import path from 'node:path';
import { ANSWER, FILE_TEXT, baseEnv, bin, check, checkFile, checkRoundTrip, finish, makeModel, recorder, run, serve,
  setup, stopServer, workspace, writeScript } from './lib.mjs';
import { checkNullContent } from './nullcontent.mjs';

setup();
const ws = workspace('qwen');
let srv = null, rec = null;

async function main() {
  const model = makeModel(ws);
  const script = writeScript(ws, 'write_file', { file_path: path.join(ws.project, 'hello.txt'), content: FILE_TEXT });
  srv = await serve(model, script);
  rec = await recorder(srv.port);
  fs.mkdirSync(path.join(ws.home, '.qwen'), { recursive: true });
  fs.writeFileSync(path.join(ws.home, '.qwen', 'settings.json'), JSON.stringify({
    privacy: { usageStatisticsEnabled: false }, telemetry: { enabled: false },
    general: { disableAutoUpdate: true, disableUpdateNag: true },
  }));
  const env = baseEnv(ws, { OPENAI_BASE_URL: `http://127.0.0.1:${rec.port}/v1`, OPENAI_API_KEY: 'unused', OPENAI_MODEL: 'kvwise' });
  const r = await run(bin('qwen'), ['-p', 'Write hello.txt saying hello from kvwise.', '--yolo', '--output-format', 'json'],
    { cwd: ws.project, env });
  let events = [];
  try { events = JSON.parse(r.out); } catch { /* checked below */ }
  const result = Array.isArray(events) ? events.find((e) => e.type === 'result') : null;
  check(r.code === 0 && result, 'qwen -p exits 0 with a JSON result', { code: r.code, out: r.out.slice(-1500), err: r.err.slice(-1500) });
  check(result && result.result === ANSWER && !result.is_error, 'the final answer is printed', result && result.result);
  checkFile(ws);
  const [a1, a2] = checkRoundTrip(srv.log(), 'chat', 'stream');
  check(result && result.usage && result.usage.cache_read_input_tokens >= (a2 ? a2.cached : 1),
    "Qwen Code's usage counts the prompt cache", result && result.usage);
  rec.close();
  await checkNullContent(srv.port, rec.seen, 'Qwen Code', a1 ? a1.prompt : 1e9);
  await stopServer(srv);
}

finish(main, ws, () => { if (rec) rec.close(); if (srv && srv.proc.exitCode === null) srv.proc.kill('SIGKILL'); });
