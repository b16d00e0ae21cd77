// Greedy generation with the prebuilt llama.cpp (node-llama-cpp, CPU) from BOS: prints, for each model,
// how many leading tokens agree with the first (reference) model and the largest first-step logit
// difference. With limits given, fails when a model agrees on fewer tokens than required.
// Usage: node llama_greedy.mjs ORACLE_DIR N_TOKENS REF.gguf OTHER.gguf[:MIN_AGREEING[:MAX_LOGIT_DIFF]] ...
import path from "node:path";
import { createRequire } from "node:module";

const [oracleDir, nArg, refFile, ...others] = process.argv.slice(2);
const require = createRequire(path.resolve(oracleDir, "package.json"));
const { getLlama, LlamaLogLevel } = await import(require.resolve("node-llama-cpp"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const n = Number(nArg);

async function greedy(file) {
  const model = await llama.loadModel({ modelPath: file });
  const ctx = await model.createContext({ contextSize: n + 8, threads: 1 });
  const seq = ctx.getSequence();
  const tokens = [];
  let first = null;
  let next = model.tokens.bos;
  for (let i = 0; i < n; i++) {
    const res = await seq.controlledEvaluate([[next, { generateNext: { token: true, logits: i === 0 } }]]);
    const r = res[0].next;
    if (i === 0) first = r.logits;
    next = r.token;
    tokens.push(next);
  }
  const text = model.detokenize(tokens);
  await ctx.dispose();
  await model.dispose();
  return { tokens, first, text };
}

const ref = await greedy(refFile);
console.log(`reference ${path.basename(refFile)}: ${JSON.stringify(ref.text.slice(0, 120))}`);
let failed = 0;
for (const spec of others) {
  const [file, minAgree, maxDiff] = spec.split(":");
  const g = await greedy(file);
  let agree = 0;
  while (agree < n && g.tokens[agree] === ref.tokens[agree]) agree++;
  let diff = 0;
  for (const [tok, v] of ref.first) diff = Math.max(diff, Math.abs(v - (g.first.get(tok) ?? NaN)) || Infinity);
  const ok = (minAgree === undefined || agree >= Number(minAgree)) && (maxDiff === undefined || diff <= Number(maxDiff));
  if (!ok) failed++;
  console.log(`${ok ? "ok" : "FAIL"} ${path.basename(file)}: first ${agree}/${n} greedy tokens agree` +
              `${minAgree ? ` (need ${minAgree})` : ""}, first-step max |logit diff| ${diff.toFixed(4)}` +
              `${maxDiff ? ` (limit ${maxDiff})` : ""}: ${JSON.stringify(g.text.slice(0, 120))}`);
}
process.exit(failed ? 1 : 0);
