// reload.mjs - `kvwise serve --config FILE` and SIGHUP (docs/SERVICE.md):
// the file's values and the flags' reach GET /v1/config with their sources
// (flag over file over default); after the file changes, SIGHUP applies the
// live settings (a lowered --prompt-cache-bytes evicts at once: the cache's
// bytes fall under the new cap with sequences evicted, /v1/memory and the
// ledger's kv_cached line agree; --max-queue and --queue-timeout take
// effect), reports a setting that needs a restart (restart_needed, the log
// line) instead of keeping it silently, says a flag still wins over the
// file, and keeps every setting when the file is broken; a bad file at
// start is refused naming FILE:LINE. Runs under ASan too (label sanitize).
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { BIN, check, finish, makeModel, startServer, request, sleep, tmp, waitExit } from '../reliability/lib.mjs';

const model = makeModel();
const conf = path.join(tmp, 'kvwise.conf');
const write = (text) => fs.writeFileSync(conf, text);
const cfg = async (port) => (await request(port, 'GET', '/v1/config')).json;
const mem = async (port) => (await request(port, 'GET', '/v1/memory')).json;

// a bad file is refused at start, naming the file and line
write('memory-limit = 1GiB\nprompt-cache-bytez = 4MiB\n');
let r = spawnSync(BIN, ['serve', '-m', model, '--port', '0', '--config', conf], { encoding: 'utf8', timeout: 20000 });
check(r.status === 2 && r.stderr.includes(`${conf}:2: unknown setting 'prompt-cache-bytez'`), 'unknown key refused with FILE:LINE', r.stderr);
write('max-queue = lots\n');
r = spawnSync(BIN, ['serve', '-m', model, '--port', '0', '--config', conf], { encoding: 'utf8', timeout: 20000 });
check(r.status === 2 && r.stderr.includes(`${conf}:1: max-queue needs an integer`), 'bad value refused with FILE:LINE', r.stderr);

write('# the service file\nmemory-limit = 512MiB\nprompt-cache-bytes = 4MiB\nprompt-cache-size 8\nctx-size 512\nmax-queue 5\n');
const srv = await startServer(model, ['--config', conf, '--max-queue', '7', '--decode-concurrency', '2']);
const port = srv.port;
let c = await cfg(port);
check(c.prompt_cache_bytes === 4 << 20 && c.sources.prompt_cache_bytes === 'config', 'file value applied, source config', c);
check(c.ctx_size === 512 && c.sources.ctx_size === 'config', 'ctx-size from the file', c.sources);
check(c.max_queue === 7 && c.sources.max_queue === 'flag', 'a flag wins over the file', c.sources);
check(c.sources.kv_block_size === 'default' && c.sources.memory_limit === 'config', 'defaults say default');
check(c.config_file === conf && c.reload.count === 0 && Object.keys(c.restart_needed).length === 0, 'no reload yet', c.reload);
check(srv.log().includes('prompt_cache_bytes') && /prompt_cache_bytes +4194304 +\(config\)/.test(srv.log()), 'startup report shows the source');

// fill the cache with a few conversations
for (let i = 0; i < 5; i++)
  await request(port, 'POST', '/v1/completions', { body: { prompt: `conversation ${i}: ` + 'words and more words '.repeat(6), max_tokens: 12, temperature: 0 } });
await sleep(100);
let m = await mem(port);
const before = m.prompt_cache;
check(before.sequences >= 3 && before.bytes > 64 << 10, 'the cache holds several sequences', before);

// lower the byte cap and change a restart-only setting, then SIGHUP
const cap = Math.max(before.bytes >> 2, m.kv_pool.block_bytes);
write(`memory-limit = 512MiB\nprompt-cache-bytes = ${cap}\nprompt-cache-size 8\nctx-size 1024\nmax-queue 5\nqueue-timeout 12\n`);
srv.proc.kill('SIGHUP');
for (let t = 0; t < 100 && (await cfg(port)).reload.count < 1; t++) await sleep(20);
c = await cfg(port);
m = await mem(port);
check(c.reload.count === 1, 'the reload is counted', c.reload);
check(c.prompt_cache_bytes === cap && c.sources.prompt_cache_bytes === 'config', 'the lower cap is in force', c.prompt_cache_bytes);
check(m.prompt_cache.max_bytes === cap && m.prompt_cache.bytes <= cap, 'the cache is under the new cap at once', m.prompt_cache);
check(m.prompt_cache.evicted_sequences > before.evicted_sequences && m.prompt_cache.sequences < before.sequences, 'sequences were evicted', m.prompt_cache);
check(m.budget.lines.kv_cached.bytes <= m.prompt_cache.bytes, 'the ledger follows the eviction', m.budget.lines.kv_cached);
check(c.queue_timeout_s === 12 && c.sources.queue_timeout_s === 'config', 'queue-timeout applied live', c.queue_timeout_s);
check(c.ctx_size === 512 && c.restart_needed['ctx-size'] && c.restart_needed['ctx-size'].wanted === '1024', 'ctx-size reported as needing a restart, not applied', c.restart_needed);
check(/ctx-size 512 -> 1024 needs a restart/.test(c.reload.last) && /prompt-cache-bytes .*\(applied\)/.test(c.reload.last), 'the reload line says what changed', c.reload.last);
check(/SIGHUP: re-read .*kvwise\.conf: /.test(srv.log()) && /SIGHUP: max-queue is set in .*kvwise\.conf:5, but the command line's --max-queue wins/.test(srv.log()), 'the log says what changed and that the flag wins');
check(c.max_queue === 7, 'the flag still wins after the reload', c.max_queue);
const ok = await request(port, 'POST', '/v1/completions', { body: { prompt: 'still serving', max_tokens: 4 } });
check(ok.status === 200, 'serves after the reload', ok.status);

// a broken file on SIGHUP keeps every setting
write('prompt-cache-bytes = "unterminated\n');
srv.proc.kill('SIGHUP');
for (let t = 0; t < 100 && (await cfg(port)).reload.count < 2; t++) await sleep(20);
c = await cfg(port);
check(c.reload.count === 2 && /failed, every setting kept/.test(c.reload.last) && c.prompt_cache_bytes === cap, 'a broken file changes nothing', c.reload);

// max-queue from the file applies live when no flag sets it
fs.writeFileSync(path.join(tmp, 'q.conf'), 'max-queue 8\n');
const s3 = await startServer(model, ['--config', path.join(tmp, 'q.conf')]);
fs.writeFileSync(path.join(tmp, 'q.conf'), 'max-queue 1\n');
s3.proc.kill('SIGHUP');
for (let t = 0; t < 100 && (await cfg(s3.port)).reload.count < 1; t++) await sleep(20);
c = await cfg(s3.port);
check(c.max_queue === 1 && c.sources.max_queue === 'config', 'max-queue applied live from the file', c.max_queue);

srv.proc.kill('SIGTERM');
s3.proc.kill('SIGTERM');
const e1 = await waitExit(srv.proc, 10000), e2 = await waitExit(s3.proc, 10000);
check(e1.code === 0 && e2.code === 0, 'both exit 0 on SIGTERM', [e1, e2]);
finish('reload', [srv, s3]);
