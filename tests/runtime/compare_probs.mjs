// Next-token probabilities after a prompt: zinc's CPU backend against the prebuilt llama.cpp
// (node-llama-cpp, CPU) on the same GGUF and the same token ids (tokenized by llama.cpp).
// Usage: node compare_probs.mjs ORACLE_DIR ZINC_EVAL_TOOL MODEL.gguf "PROMPT" MAX_ABS_DIFF [BASE.gguf]
// With BASE.gguf (the same weights under other settings), llama.cpp's own change between the two files
// must also be at least ten times the zinc/llama.cpp difference: the settings matter, and zinc follows them.
import { execFileSync } from "node:child_process";
import path from "node:path";
import { createRequire } from "node:module";

const [oracleDir, tool, file, prompt, limitArg, baseFile] = process.argv.slice(2);
const require = createRequire(path.resolve(oracleDir, "package.json"));
const { getLlama, LlamaLogLevel } = await import(require.resolve("node-llama-cpp"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: file });
const ids = [model.tokens.bos, ...model.tokenize(prompt)];
async function llamaLogits(m) {
  const ctx = await m.createContext({ contextSize: 64, threads: 1 });
  const res = await ctx.getSequence().controlledEvaluate(
    ids.map((t, i) => (i === ids.length - 1 ? [t, { generateNext: { logits: true } }] : t)));
  return res[res.length - 1].next.logits;
}
const ref = await llamaLogits(model);

const ours = JSON.parse(execFileSync(tool, [file, ...ids.map(String)], { encoding: "utf8", maxBuffer: 1 << 26 })).logits;
const softmax = (v) => {
  const m = Math.max(...v);
  const e = v.map((x) => Math.exp(x - m));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / s);
};
const dense = (m) => {
  const a = new Array(ours.length).fill(-Infinity);
  for (const [t, v] of m) a[t] = v;
  return a;
};
const maxAbsDiff = (a, b) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);
const [p, q] = [softmax(ours), softmax(dense(ref))];
const maxDiff = maxAbsDiff(p, q);
const top = q.indexOf(Math.max(...q));
let ok = Number.isFinite(maxDiff) && maxDiff <= Number(limitArg) && p.indexOf(Math.max(...p)) === top;
let effect = "";
if (baseFile) {
  const change = maxAbsDiff(q, softmax(dense(await llamaLogits(await llama.loadModel({ modelPath: baseFile })))));
  ok = ok && change >= 10 * maxDiff;
  effect = `; llama.cpp's change from ${path.basename(baseFile)} ${change.toExponential(3)} (must be >= 10x)`;
}
console.log(`${ok ? "ok" : "FAIL"} ${path.basename(file)} after ${JSON.stringify(prompt)} (${ids.length} tokens): ` +
            `max |p_zinc - p_llama.cpp| = ${maxDiff.toExponential(3)} (limit ${limitArg})${effect}, top token ${top} p=${q[top].toFixed(4)}`);
process.exit(ok ? 0 : 1);
