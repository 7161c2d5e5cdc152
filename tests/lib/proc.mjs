// proc.mjs - what the Node.js test libraries (tests/cache/e2e/lib.mjs,
// tests/reliability/lib.mjs) share about processes: a bounded sleep, and
// whether a server process is an ASan build.
import fs from 'node:fs';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// True when the process is an ASan build (GCC's libasan.so is mapped): its RSS is
// then ASan's shadow memory and quarantine, outside any budget, so checks of the
// kernel's figures against --memory-limit, the ledger or over time hold only for
// a normal build.
export const asanBuild = (pid) => /libasan\.so/.test(fs.readFileSync(`/proc/${pid}/maps`, 'utf8'));
