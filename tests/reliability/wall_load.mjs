// wall_load.mjs - the wall under a mixed load (label heavy): the 1B model of
// /work/models at a tight --memory-limit, normal chat traffic beside hostile
// bodies (16 MB prompts, 100k-message chats, a stalled body, an endless
// chunked body). Asserts, sampling every 200 ms: VmHWM <= --memory-limit,
// /health within 1 s, every normal request within its time alone (x3 + 2 s).
// First the start-up: too small a limit is refused before the weights are
// read, with one suggested limit; the load runs on a server started with
// that suggestion, which must work on the first try. Skips (77) when the
// model file is absent. Under ASan the VmHWM bound is skipped (the allocator's
// shadow and quarantine are not the server's memory); the rest still holds.
import net from 'node:net';
import fs from 'node:fs';
import { spawnSync } from 'node:child_process';
import { check, finish, startServer, request, sleep, BIN, asanBuild } from './lib.mjs';

const MODEL = process.env.KW_WALL_MODEL || '/work/models/1b-q4_0.gguf';
if (!fs.existsSync(MODEL)) { console.log(`wall_load: skipped: no model at ${MODEL}`); process.exit(77); }
const servers = [];
const vmhwm = (pid) => Number(/VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) * 1024;
const flags = ['--ctx-size', '8192', '--decode-concurrency', '4', '--max-body', '40MiB', '--threads', '2'];

async function startup() {
  const t0 = Date.now();
  const r = spawnSync('/usr/bin/time', ['-f', 'maxrss=%M', BIN, 'serve', '-m', MODEL, '--port', '0', ...flags, '--memory-limit', '300MiB'],
    { encoding: 'utf8', timeout: 60000 });
  const ms = Date.now() - t0;
  const rss = Number((/maxrss=(\d+)/.exec(r.stderr) || [0, -1])[1]) * 1024;
  const m = /--memory-limit (\d+)MiB would work/.exec(r.stderr);
  check(r.status !== 0 && m, 'too small a limit (300MiB) is refused with one suggested --memory-limit', r.stderr.slice(-400));
  check(rss > 0 && rss < 300 * 1048576, `refused without reading the weights: peak RSS ${(rss / 1048576).toFixed(1)} MiB, ${ms} ms`, rss);
  console.log(`wall_load: refusal in ${ms} ms: ${(/kvwise serve: --memory-limit.*/.exec(r.stderr) || [r.stderr.slice(-300)])[0]}`);
  return m ? Number(m[1]) : 1280;
}

// A body whose Content-Length is never sent: held open until closed by the server.
function stalled(port) {
  const s = net.connect(port, '127.0.0.1');
  s.on('error', () => {});
  s.on('connect', () => s.write('POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{"mess'));
  return s;
}
// An endless chunked body (written until the server answers or closes).
function chunkedFlood(port, ms) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    const chunk = `10000\r\n${'x'.repeat(0x10000)}\r\n`;
    let answered = false;
    const pump = () => { while (!answered && s.write(chunk)); };
    s.on('connect', () => { s.write('POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n'); pump(); });
    s.on('drain', pump);
    s.on('data', () => { answered = true; });
    const end = () => { clearTimeout(t); s.destroy(); resolve(answered); };
    s.on('close', end); s.on('error', end);
    const t = setTimeout(end, ms);
  });
}

async function main() {
  const mib = await startup();
  const limit = mib * 1048576;
  const srv = await startServer(MODEL, [...flags, '--memory-limit', `${mib}MiB`]); servers.push(srv);
  check(true, `started at the suggested --memory-limit ${mib}MiB`);
  const P = srv.port;
  const normal = (i) => ({ messages: [{ role: 'user', content: `Tell me about the number ${i}.` }], max_tokens: 16, temperature: 0 });
  const alone = [];
  for (let i = 0; i < 2; i++) { const t0 = Date.now(); await request(P, 'POST', '/v1/chat/completions', { body: normal(i) }); alone.push(Date.now() - t0); }
  const budget = 3 * Math.max(...alone) + 2000;

  const words = []; let n = 0;
  while (n < 16 * 1048576) { const w = `word${words.length % 1000} `; words.push(w); n += w.length; }
  const big = words.join('');
  const many = Array.from({ length: 100000 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: 'w' + i }));
  // bodies stringified before the sampling starts: this process's own work must not delay its /health samples
  const raw = [JSON.stringify({ prompt: big, max_tokens: 1 }), JSON.stringify({ messages: [{ role: 'user', content: big.slice(0, 8 * 1048576) }], max_tokens: 1 }),
    JSON.stringify({ messages: many, max_tokens: 1 })];
  let running = true;
  const samples = [];
  const sampler = (async () => {
    while (running) {
      const t0 = Date.now();
      const h = await request(P, 'GET', '/health', { timeout: 5000 });
      samples.push({ health_ms: Date.now() - t0, status: h.status, hwm: vmhwm(srv.proc.pid) });
      await sleep(200);
    }
  })();
  const held = [stalled(P), stalled(P)];
  const hostile = [
    request(P, 'POST', '/v1/completions', { raw: raw[0], timeout: 60000 }),
    request(P, 'POST', '/v1/chat/completions', { raw: raw[1], timeout: 60000 }),
    request(P, 'POST', '/v1/chat/completions', { raw: raw[2], timeout: 60000 }),
    request(P, 'POST', '/v1/chat/completions', { raw: raw[2], timeout: 60000 }),
    chunkedFlood(P, 5000),
  ];
  const times = [];
  for (let round = 0; round < 3; round++) {
    const rs = await Promise.all([0, 1].map(async (k) => {
      const t0 = Date.now();
      const r = await request(P, 'POST', '/v1/chat/completions', { body: normal(10 * round + k), timeout: 60000 });
      return { status: r.status, ms: Date.now() - t0 };
    }));
    times.push(...rs);
  }
  const h = await Promise.all(hostile);
  running = false;
  await sampler;
  for (const s of held) s.destroy();
  const peak = Math.max(...samples.map((s) => s.hwm), vmhwm(srv.proc.pid));
  const slowHealth = samples.filter((s) => s.status !== 200 || s.health_ms > 1000);
  console.log(`wall_load: limit ${mib} MiB, VmHWM ${(peak / 1048576).toFixed(1)} MiB over ${samples.length} samples; ` +
              `normal requests alone ${alone.join('/')} ms, under load ${times.map((t) => t.ms).join('/')} ms; ` +
              `/health max ${Math.max(...samples.map((s) => s.health_ms))} ms; hostile ${h.map((x) => x.status ?? x).join('/')}`);
  // 400/413 when they can never run; 503 (Retry-After) when the bodies' allowance is taken now
  check(h.slice(0, 4).every((x) => [400, 413, 503].includes(x.status)) && h.slice(0, 4).some((x) => x.status === 400 || x.status === 413),
    'the hostile bodies are refused (400/413, or 503 for now), some for good', h.slice(0, 4).map((x) => `${x.status} ${x.json?.error?.message?.slice(0, 80)}`));
  // ASan build: its shadow memory, redzones and quarantine are outside any budget
  if (asanBuild(srv.proc.pid)) console.log('wall_load: ASan build: the VmHWM bound is skipped');
  else check(peak <= limit, `VmHWM ${(peak / 1048576).toFixed(1)} MiB <= --memory-limit ${mib} MiB at every sample`, peak);
  check(times.every((t) => t.status === 200 && t.ms <= budget), `every normal request served within ${budget} ms`, times);
  check(samples.length > 0 && slowHealth.length === 0, '/health answered within 1 s at every sample', slowHealth);
  finish('reliability_wall_load', servers);
}

main().catch((e) => { console.error(e); check(false, 'the test ran to its end', String(e)); finish('reliability_wall_load', servers); });
