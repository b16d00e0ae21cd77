// Next-token probabilities after a prompt: zinc's CPU backend against the prebuilt llama.cpp
// (node-llama-cpp, CPU) on the same GGUF and the same token ids (tokenized by llama.cpp).
// Usage: node compare_probs.mjs ORACLE_DIR ZINC_EVAL_TOOL MODEL.gguf "PROMPT" MAX_ABS_DIFF
import { execFileSync } from "node:child_process";
import path from "node:path";
import { createRequire } from "node:module";

const [oracleDir, tool, file, prompt, limitArg] = process.argv.slice(2);
const require = createRequire(path.resolve(oracleDir, "package.json"));
const { getLlama, LlamaLogLevel } = await import(require.resolve("node-llama-cpp"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: file });
const ids = [model.tokens.bos, ...model.tokenize(prompt)];
const ctx = await model.createContext({ contextSize: 64, threads: 1 });
const res = await ctx.getSequence().controlledEvaluate(
  ids.map((t, i) => (i === ids.length - 1 ? [t, { generateNext: { logits: true } }] : t)));
const ref = res[res.length - 1].next.logits;

const ours = JSON.parse(execFileSync(tool, [file, ...ids.map(String)], { encoding: "utf8", maxBuffer: 1 << 26 })).logits;
const softmax = (v) => {
  const m = Math.max(...v);
  const e = v.map((x) => Math.exp(x - m));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / s);
};
const refArr = new Array(ours.length).fill(-Infinity);
for (const [t, v] of ref) refArr[t] = v;
const [p, q] = [softmax(ours), softmax(refArr)];
let maxDiff = 0, top = 0;
for (let i = 0; i < p.length; i++) {
  maxDiff = Math.max(maxDiff, Math.abs(p[i] - q[i]));
  if (q[i] > q[top]) top = i;
}
const ok = Number.isFinite(maxDiff) && maxDiff <= Number(limitArg) && p.indexOf(Math.max(...p)) === top;
console.log(`${ok ? "ok" : "FAIL"} ${path.basename(file)} after ${JSON.stringify(prompt)} (${ids.length} tokens): ` +
            `max |p_zinc - p_llama.cpp| = ${maxDiff.toExponential(3)} (limit ${limitArg}), top token ${top} p=${q[top].toFixed(4)}`);
process.exit(ok ? 0 : 1);
