// codex.mjs - Codex itself (npm @openai/codex, pinned in setup.sh) against
// `kvwise serve` through the Responses API: `codex exec` with a custom
// provider (wire_api = "responses", base_url = kvwise behind a recording
// proxy), CODEX_HOME and HOME in a temp folder, update checks and analytics
// off, sandbox workspace-write. A model catalog (model_catalog_json) gives
// the model id Codex's metadata, among it apply_patch_tool_type "freeform",
// so Codex offers apply_patch as a custom tool. The scripted model calls
// apply_patch with a patch adding hello.txt; kvwise answers it as a
// custom_tool_call with the raw patch as input; Codex applies it, sends the
// custom_tool_call_output back, and prints the scripted answer.
// Checks: exit 0, the answer, the file; the request carried apply_patch as
// {"type": "custom"} and the second one a custom_tool_call and its output;
// the session-id header and prompt_cache_key are logged per request; the
// round trip in kvwise's log; Codex's own usage (turn.completed) counts
// cached_input_tokens.
import fs from 'node:fs';
import path from 'node:path';
import { ANSWER, FILE_TEXT, baseEnv, bin, check, checkFile, checkRoundTrip, finish, makeModel, recorder, run, serve,
  setup, stopServer, workspace, writeScript } from './lib.mjs';

setup();
const ws = workspace('codex');
let srv = null, rec = null;

// The model's metadata for Codex: what a catalog entry holds (context window,
// the apply_patch tool type, reasoning settings, shell type, instructions).
function catalog() {
  return { models: [{
    slug: 'kvwise', display_name: 'kvwise', description: 'kvwise serve', visibility: 'list', priority: 1,
    supported_in_api: true, minimal_client_version: '0.1.0', context_window: 32768, max_context_window: 32768,
    auto_compact_token_limit: null, apply_patch_tool_type: 'freeform', shell_type: 'shell_command',
    input_modalities: ['text'], supports_parallel_tool_calls: false, support_verbosity: false, default_verbosity: 'low',
    prefer_websockets: false, web_search_tool_type: 'text', truncation_policy: { mode: 'tokens', limit: 10000 },
    default_reasoning_level: 'medium', default_reasoning_summary: 'none',
    supported_reasoning_levels: [{ effort: 'medium', description: 'default' }],
    supports_reasoning_summaries: false, supports_reasoning_summary_parameter: false,
    experimental_supported_tools: [], base_instructions: 'You are a coding agent. Use apply_patch to edit files.',
  }] };
}

async function main() {
  const model = makeModel(ws);
  const patch = `*** Begin Patch\n*** Add File: hello.txt\n+${FILE_TEXT.trim()}\n*** End Patch\n`;
  const script = writeScript(ws, 'apply_patch', { input: patch });
  srv = await serve(model, script);
  rec = await recorder(srv.port);
  const codexHome = path.join(ws.home, '.codex');
  fs.mkdirSync(codexHome, { recursive: true });
  const cat = path.join(ws.dir, 'catalog.json');
  fs.writeFileSync(cat, JSON.stringify(catalog()));
  fs.writeFileSync(path.join(codexHome, 'config.toml'), [
    'model = "kvwise"', 'model_provider = "kvwise"', `model_catalog_json = ${JSON.stringify(cat)}`,
    'check_for_update_on_startup = false', '[analytics]', 'enabled = false',
    '[model_providers.kvwise]', 'name = "kvwise"', `base_url = "http://127.0.0.1:${rec.port}/v1"`,
    'wire_api = "responses"', 'env_key = "KVWISE_API_KEY"', 'request_max_retries = 0', 'stream_max_retries = 0', ''].join('\n'));
  const env = baseEnv(ws, { CODEX_HOME: codexHome, KVWISE_API_KEY: 'unused' });
  const r = await run(bin('codex'), ['exec', '--json', '--skip-git-repo-check', '-s', 'workspace-write',
    'Add hello.txt saying hello from kvwise.'], { cwd: ws.project, env });
  const events = r.out.split('\n').filter((l) => l.startsWith('{')).map((l) => { try { return JSON.parse(l); } catch { return {}; } });
  const said = events.filter((e) => e.type === 'item.completed' && e.item && e.item.type === 'agent_message').map((e) => e.item.text);
  const change = events.find((e) => e.type === 'item.completed' && e.item && e.item.type === 'file_change');
  const done = events.find((e) => e.type === 'turn.completed');
  check(r.code === 0, 'codex exec exits 0', { code: r.code, out: r.out.slice(-1500), err: r.err.slice(-1500) });
  check(said.includes(ANSWER), 'the final answer is printed', said);
  check(change && change.item.status === 'completed', 'Codex applied the patch (file_change completed)', change);
  checkFile(ws);
  const [, a2] = checkRoundTrip(srv.log(), 'responses', 'stream');
  check(done && done.usage && done.usage.cached_input_tokens >= (a2 ? a2.cached : 1),
    "Codex's usage counts the prompt cache (cached_input_tokens)", done && done.usage);

  const reqs = rec.seen.filter((q) => q.url === '/v1/responses' && q.body);
  const tool = reqs[0] && reqs[0].body.tools.find((t) => t.name === 'apply_patch');
  check(tool && tool.type === 'custom', 'apply_patch is offered as a custom (freeform) tool', tool);
  const input2 = reqs[1] ? reqs[1].body.input : [];
  const call = input2.find((i) => i.type === 'custom_tool_call');
  check(call && call.name === 'apply_patch' && call.input === patch, 'the second request carries the custom_tool_call with the raw patch', call);
  check(input2.some((i) => i.type === 'custom_tool_call_output' && call && i.call_id === call.call_id), '... and its custom_tool_call_output');
  const sid = reqs[0] && reqs[0].headers['session-id'];
  const key = reqs[0] && reqs[0].body.prompt_cache_key;
  check(sid && srv.log().includes(`session=session-id:${sid}`) && key && srv.log().includes(`cache_key=${key}`),
    'the session-id header and prompt_cache_key are logged per request', { sid, key });
  rec.close();
  await stopServer(srv);
}

finish(main, ws, () => { if (rec) rec.close(); if (srv && srv.proc.exitCode === null) srv.proc.kill('SIGKILL'); });
