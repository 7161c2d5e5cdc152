// ref_tokenize.mjs MODULES_DIR TOKENIZER_DIR CORPUS KVWISE MODEL
// Encodes every text of CORPUS (a JSON array of strings, plus 40 seeded
// random ones) with the reference
// implementation (@lenml/tokenizers, add_special_tokens false) and with
// `kvwise tokenize --no-bos --special --json` on MODEL; exits 1 when any
// text's ids differ (printing both), 0 when all are equal.
import { readFileSync, writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { pathToFileURL } from "node:url";

const [modulesDir, tokDir, corpusPath, kvwise, model] = process.argv.slice(2);
const lib = await import(pathToFileURL(join(modulesDir, "@lenml/tokenizers/dist/main.mjs")).href);
const tok = lib.TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(readFileSync(join(tokDir, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(readFileSync(join(tokDir, "tokenizer_config.json"), "utf8")),
});
const corpus = JSON.parse(readFileSync(corpusPath, "utf8"));
// Plus deterministic random texts over a mix of scripts, digits, spaces,
// punctuation and emoji (xorshift32, fixed seed), to reach splits the
// hand-written texts miss.
const pool = Array.from("aAzZ éçñüß 你好世界中文 日本語カタカナ 한국어 Привет مرحبا 0123456789 \t\n\r  .,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~` 😀🎉👍🏽🦊 's 't 're 'll");
let seed = 0x9e3779b9;
const rnd = (n) => { seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0; return seed % n; };
for (let k = 0; k < 40; k++) {
  let t = "";
  for (let n = 1 + rnd(60); n > 0; n--) t += pool[rnd(pool.length)];
  corpus.push(t);
}
// kvwise runs once: the texts joined by a special token that occurs in none
// of them. Special tokens split the text before BPE (in both
// implementations), so the ids split at that token are the per-text ids.
const cfg = JSON.parse(readFileSync(join(tokDir, "tokenizer_config.json"), "utf8"));
const name = (x) => (typeof x === "string" ? x : x?.content);
const sep = [cfg.pad_token, cfg.eos_token, cfg.bos_token].map(name).find((s) => s && !corpus.some((t) => t.includes(s)));
if (!sep) { console.log("no separator token available"); process.exit(1); }
const sepId = Array.from(tok.encode(sep, { add_special_tokens: false }));
if (sepId.length !== 1) { console.log(`separator ${sep} is not one token`); process.exit(1); }
const tmp = mkdtempSync(join(tmpdir(), "kw-hftok-"));
let got;
try {
  const f = join(tmp, "corpus.txt");
  writeFileSync(f, corpus.join(sep));
  got = JSON.parse(execFileSync(kvwise, ["tokenize", "-m", model, "--no-bos", "--special", "--json", "-f", f], { encoding: "utf8" }));
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
const parts = [[]];
for (const id of got) { if (id === sepId[0]) parts.push([]); else parts[parts.length - 1].push(id); }
let bad = 0, total = 0;
if (parts.length !== corpus.length) { console.log(`kvwise: ${parts.length} parts for ${corpus.length} texts`); process.exit(1); }
for (const [i, text] of corpus.entries()) {
  const want = Array.from(tok.encode(text, { add_special_tokens: false }));
  total += want.length;
  if (JSON.stringify(parts[i]) !== JSON.stringify(want)) {
    bad++;
    console.log(`MISMATCH text ${i} ${JSON.stringify(text)}\n  reference ${JSON.stringify(want)}\n  kvwise    ${JSON.stringify(parts[i])}`);
  }
}
// add_special: BOS (or not) as the tokenizer's config / post-processor says
{
  const text = "Hello world";
  const want = Array.from(tok.encode(text));
  const got2 = JSON.parse(execFileSync(kvwise, ["tokenize", "-m", model, "--json", "-p", text], { encoding: "utf8" }));
  if (JSON.stringify(got2) !== JSON.stringify(want)) {
    bad++;
    console.log(`MISMATCH with special tokens added\n  reference ${JSON.stringify(want)}\n  kvwise    ${JSON.stringify(got2)}`);
  }
}
console.log(`${corpus.length - bad}/${corpus.length} texts identical (${total} reference tokens, separator ${sep})`);
process.exit(bad ? 1 : 0);
