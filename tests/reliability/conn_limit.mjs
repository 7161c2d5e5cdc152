// conn_limit.mjs - --max-client-connections: one client address cannot hold
// more than N open connections (the rest are closed at once, without a
// response), the held ones keep working, and once they close the client is
// served again. The effective limit is reported by GET /v1/config.
import net from 'node:net';
import { check, finish, makeModel, startServer, request, rawExchange, statusOf, sleep } from './lib.mjs';

const LIMIT = 4;

function holdOpen(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.on('error', () => {});
    s.on('connect', () => { s.write('GET /health HTTP/1.1\r\nHost: x\r\nX-Held: '); resolve(s); });
  });
}

async function main() {
  const model = makeModel();
  const srv = await startServer(model, ['--max-client-connections', String(LIMIT), '--timeout', '20']);
  const { port } = srv;
  const cfg = await request(port, 'GET', '/v1/config');
  check(cfg.status === 200 && cfg.json?.max_client_connections === LIMIT, `/v1/config reports max_client_connections ${LIMIT}`, cfg.json?.max_client_connections);

  const held = [];
  for (let i = 0; i < LIMIT; i++) held.push(await holdOpen(port));
  await sleep(200);
  const extra = await rawExchange(port, 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', 5000);
  check(extra.why !== 'timeout' && statusOf(extra.text) === -1, `connection ${LIMIT + 1} from the same address is closed without a response`, extra);

  // a held connection still completes its request
  const done = new Promise((resolve) => {
    const parts = [];
    held[0].on('data', (d) => parts.push(d));
    held[0].on('end', () => resolve(Buffer.concat(parts).toString('latin1')));
    setTimeout(() => resolve(Buffer.concat(parts).toString('latin1')), 5000);
  });
  held[0].write('1\r\nConnection: close\r\n\r\n');
  check(statusOf(await done) === 200, 'a held connection is still served');

  for (const s of held) s.destroy();
  await sleep(300);
  const after = await request(port, 'GET', '/health');
  check(after.status === 200, 'after the held connections close, the client is served again', after.status);
  finish('conn_limit', [srv]);
}
main().catch((e) => { console.error(e); process.exit(1); });
