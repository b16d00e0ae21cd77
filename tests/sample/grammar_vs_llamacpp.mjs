// Grammar-constrained greedy generation, zinc against llama.cpp (the prebuilt CPU build in node-llama-cpp),
// on stories260K: the same GBNF grammar, the same prompt, and the tokens must be identical. A greedy
// choice under a grammar is the most likely token the grammar allows, so any difference in what either
// engine's grammar accepts (a class, a repetition count, a UTF-8 byte split over tokens, the end of the
// sentence) shows up as a different token. The grammars: llama.cpp's own example files (json, c, chess,
// arithmetic, ...), hand-written ones for each GBNF construct, and grammars that llama.cpp's JSON schema
// converter (node-llama-cpp's) writes. Then zinc's own JSON schema conversion: its output must parse and
// satisfy the schema by node-llama-cpp's validator.
// Usage: node grammar_vs_llamacpp.mjs ORACLE_DIR ZINC STORIES.gguf WORK_DIR
import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";

const [oracleDir, zinc, model, work] = process.argv.slice(2);
const require = createRequire(path.resolve(oracleDir, "package.json"));
const nlc = await import(require.resolve("node-llama-cpp"));
const { getLlama, LlamaLogLevel, LlamaGrammar, LlamaGrammarEvaluationState } = nlc;
// llama.cpp's grammar engine itself, through the binding's internal entry points: whether a token can
// come next, and accepting one.
const { LlamaSampler } = await import(path.join(path.dirname(require.resolve("node-llama-cpp")), "evaluator/LlamaContext/LlamaSampler.js"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const m = await llama.loadModel({ modelPath: model });
const ctx = await m.createContext({ contextSize: 512, threads: 1 });
fs.mkdirSync(work, { recursive: true });
let failed = 0, n = 0;
const check = (ok, what, detail) => {
  n++;
  if (!ok) failed++;
  console.log(`${ok ? "ok" : "FAIL"} ${what}${ok ? "" : ": " + detail}`);
};

// Greedy under a grammar, step by step: llama.cpp's logits, and the most likely token that llama.cpp's
// grammar engine allows (an end-of-generation token when the grammar allows it and the model prefers it).
async function llamacpp(grammarText, prompt, maxTokens) {
  const seq = ctx.getSequence();
  const state = new LlamaGrammarEvaluationState({ model: m, grammar: new LlamaGrammar(llama, { grammar: grammarText }) });
  const tokens = [];
  let input = [m.tokens.bos, ...m.tokenize(prompt)];
  for (let step = 0; step < maxTokens; step++) {
    const res = await seq.controlledEvaluate(input.map((t, i) => (i === input.length - 1 ? [t, { generateNext: { logits: true } }] : t)));
    const ranked = [...res[res.length - 1].next.logits.entries()].sort((a, b) => b[1] - a[1] || a[0] - b[0]);
    const pick = ranked.find(([t]) => LlamaSampler._canBeNextTokenForGrammarEvaluationState(llama, state, t));
    if (!pick || m.isEogToken(pick[0])) break;
    LlamaSampler._acceptTokenOnGrammarEvaluationState(llama, state, pick[0]);
    tokens.push(pick[0]);
    input = [pick[0]];
  }
  seq.dispose();
  return tokens;
}

function zincRun(args, prompt, maxTokens) {
  const out = execFileSync(zinc, ["run", "--json", "-m", model, "-p", prompt, "-n", String(maxTokens), "--temp", "0",
                                  "--repeat-penalty", "1", ...args], { encoding: "utf8" });
  return JSON.parse(out);
}

async function compare(name, grammarText, prompt, maxTokens) {
  const file = path.join(work, `${name}.gbnf`);
  fs.writeFileSync(file, grammarText);
  const ref = await llamacpp(grammarText, prompt, maxTokens);
  const z = zincRun(["--grammar-file", file], prompt, maxTokens).tokens;
  // llama.cpp appends the end-of-sequence token it stopped at to nothing; zinc neither: compare as is.
  let agree = 0;
  while (agree < ref.length && ref[agree] === z[agree]) agree++;
  check(agree === ref.length && z.length === ref.length && ref.length > 0, `${name}: ${ref.length} tokens identical`,
        `agree on ${agree}; llama.cpp ${JSON.stringify(ref)} zinc ${JSON.stringify(z)}`);
}

const prompt = "Once upon a time";
try {
  // llama.cpp's example grammars.
  for (const type of ["json", "json_arr", "list", "arithmetic", "c", "chess", "english", "japanese"]) {
    const g = await LlamaGrammar.getFor(llama, type);
    await compare(`example-${type}`, g.grammar, prompt, 48);
  }
  // Each construct.
  const cases = {
    "literals-and-classes": String.raw`root ::= " there was a " [a-z]+ " named " [A-Z] [a-z]* "."`,
    "alternatives-groups": String.raw`root ::= ( " " ( "cat" | "dog" | "girl" | "boy" | "park" ) )+ "."`,
    "negated-class": String.raw`root ::= [^.!?]+ [.!?]`,
    "counts": String.raw`root ::= ( [a-z ]{3,5} "," ){2} [^\n]{0,40}`,
    "counts-open": String.raw`root ::= "Lily" [a-z ]{2,} "."`,
    "optional": String.raw`root ::= ( " She" )? " was" [a-z ]+ "."`,
    "any-char": String.raw`root ::= .{5,12} "!"`,
    "utf8-and-escapes": String.raw`root ::= ( "caf\xE9" | "\u00fcber" | "na\u00efve" | "\U0001F600" ) " " [a-z\u00e0-\u00ff]{1,8}`,
    "comments-and-lines": "# a list of words\nroot ::= item ( \",\" item )*   # items\n\nitem ::= \" \" [a-z]+\n",
    "nested-rules": String.raw`root ::= sentence sentence
sentence ::= " " word ( " " word )* "."
word ::= [a-z]+ | [A-Z] [a-z]*`,
    "empty-alternative": String.raw`root ::= " " [a-z]+ ( "," | ) " " [a-z]+ "."`,
  };
  for (const [name, g] of Object.entries(cases)) await compare(name, g, prompt, 40);

  // JSON schemas as llama.cpp's converter (node-llama-cpp) writes them.
  const schemas = {
    person: { type: "object", properties: { name: { type: "string" }, age: { type: "number" } } },
    list: { type: "array", items: { type: "string" }, minItems: 1, maxItems: 3 },
    choice: { type: "object", properties: { pet: { enum: ["cat", "dog", "bird"] }, happy: { type: "boolean" } } },
  };
  for (const [name, schema] of Object.entries(schemas)) {
    const g = await llama.createGrammarForJsonSchema(schema);
    await compare(`schema-${name}`, g.grammar, prompt, 60);
  }

  // zinc's own conversion: the output parses and satisfies the schema (node-llama-cpp's validator).
  const own = {
    object: { type: "object", properties: { name: { type: "string" }, age: { type: "integer" },
                                            tags: { type: "array", items: { type: "string" }, maxItems: 2 } },
              required: ["name", "age", "tags"] },
    nested: { type: "object", properties: { pet: { type: "object", properties: { kind: { enum: ["cat", "dog"] },
                                                                                  legs: { type: "integer" } },
                                                   required: ["kind", "legs"] },
                                            ok: { type: "boolean" } }, required: ["pet", "ok"] },
    union: { type: "object", properties: { v: { oneOf: [{ type: "string" }, { type: "null" }] },
                                           w: { const: "fixed" } }, required: ["v", "w"] },
    short: { type: "object", properties: { s: { type: "string", minLength: 2, maxLength: 5 } }, required: ["s"] },
  };
  for (const [name, schema] of Object.entries(own)) {
    const r = zincRun(["-j", JSON.stringify(schema)], prompt, 120);
    let value, err = "";
    try {
      value = JSON.parse(r.text);
    } catch (e) {
      err = String(e);
    }
    const g = await llama.createGrammarForJsonSchema(schema);
    let valid = false;
    try {
      g.parse(r.text);
      valid = true;
    } catch (e) {
      err += String(e);
    }
    check(value !== undefined && valid && r.stop_reason === "eog", `zinc's schema '${name}': valid JSON of the schema`,
          `${JSON.stringify(r.text)} ${r.stop_reason} ${err}`);
  }
} catch (e) {
  check(false, "grammar comparison run", e.stack || String(e));
}
console.log(`${n - failed}/${n} grammar checks passed`);
process.exit(failed ? 1 : 0);
