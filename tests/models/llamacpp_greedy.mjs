// Converted fixtures through the prebuilt llama.cpp (node-llama-cpp, CPU): the greedy continuation of
// each fixture's prompt must be the transformers reference's, token for token. This shows zinc convert
// writes standard GGUF files, not merely files zinc itself agrees with.
// Usage: node llamacpp_greedy.mjs ORACLE_DIR FIXTURES_DIR GGUF_DIR ARCH...   (GGUF_DIR/ARCH.gguf)
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const [oracleDir, fixtures, ggufDir, ...archs] = process.argv.slice(2);
const require = createRequire(path.resolve(oracleDir, "package.json"));
const { getLlama, LlamaLogLevel } = await import(require.resolve("node-llama-cpp"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
let failed = 0;
for (const arch of archs) {
  const ref = JSON.parse(fs.readFileSync(path.join(fixtures, arch, "reference.json")));
  const model = await llama.loadModel({ modelPath: path.join(ggufDir, `${arch}.gguf`) });
  const ctx = await model.createContext({ contextSize: 128, threads: 1 });
  const seq = ctx.getSequence();
  // The reference chose among real tokens only (padding ids suppressed), and never the end-of-sequence
  // token 1 (generated with min_new_tokens): so does this.
  const pick = (logits) => {
    let best = -1, bestV = -Infinity;
    for (const [t, v] of logits) if (t < ref.n_tokens && t !== 1 && v > bestV) { best = t; bestV = v; }
    return best;
  };
  const prompt = ref.greedy_prompt;
  let res = await seq.controlledEvaluate(prompt.map((t, i) => (i === prompt.length - 1 ? [t, { generateNext: { logits: true } }] : t)));
  const out = [];
  for (let i = 0; i < ref.greedy.length; i++) {
    const t = pick(res[res.length - 1].next.logits);
    out.push(t);
    res = await seq.controlledEvaluate([[t, { generateNext: { logits: true } }]]);
  }
  let agree = 0;
  while (agree < out.length && out[agree] === ref.greedy[agree]) agree++;
  const ok = agree === ref.greedy.length;
  if (!ok) failed++;
  console.log(`${ok ? "ok" : "FAIL"} ${arch}: llama.cpp greedy agrees with transformers on ${agree}/${ref.greedy.length} tokens`);
  await ctx.dispose();
  await model.dispose();
}
process.exit(failed ? 1 : 0);
