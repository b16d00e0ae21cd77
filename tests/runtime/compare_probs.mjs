// Next-token logits after a prompt: zinc's CPU backend against the prebuilt llama.cpp (node-llama-cpp,
// CPU) on the same GGUF and the same token ids (tokenized by llama.cpp).
// Usage: node compare_probs.mjs ORACLE_DIR ZINC_EVAL_TOOL MODEL.gguf "PROMPT" MAX_REL_DIFF [BASE.gguf]
//
// Both sides evaluate the same float32 function: F32 weights (the test models), an F32 KV cache on
// both, and llama.cpp's flash attention off (its CPU kernel rounds to f16 even with an F32 cache). They
// may differ only in summation order, so the bound follows from float32 rounding, not from a machine:
// a sum of n terms is off by at most n·u·Σ|terms| (Higham, Accuracy and Stability of Numerical
// Algorithms, §4.2), u = 2^-24. The widest reduction in these models is n = 172 (n_ff), 1.0e-5 of the
// magnitudes per reduction; a block chains about four (norm, projections, attention, FFN), and five
// blocks twenty: 2e-4 of the logit scale. So MAX_REL_DIFF = 2e-4 bounds max|z_zinc - z_llama.cpp| /
// max|z|, and the probabilities then differ by at most twice the logit difference (|dp_i| <= 2·p_i·
// max|dz|). Measured: about 5e-7 on AVX2 and AVX-512 machines, so the bound is not tuned to either.
// A wrong formula (a rotary scale off, a norm's epsilon) moves the logits by 1e-2 or more.
// With BASE.gguf (the same weights under other settings), llama.cpp's own change of the probabilities
// between the two files must also be at least ten times zinc's difference: the settings matter, and
// zinc follows them.
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
  const ctx = await m.createContext({
    contextSize: 64, threads: 1, flashAttention: false,
    experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
  });
  const res = await ctx.getSequence().controlledEvaluate(
    ids.map((t, i) => (i === ids.length - 1 ? [t, { generateNext: { logits: true } }] : t)));
  return res[res.length - 1].next.logits;
}
const dense = (m, n) => {
  const a = new Array(n).fill(-Infinity);
  for (const [t, v] of m) a[t] = v;
  return a;
};
const ours = JSON.parse(execFileSync(tool, [file, ...ids.map(String)], {
  encoding: "utf8", maxBuffer: 1 << 26, env: { ...process.env, ZINC_TEST_EVAL_KV: "f32" },
})).logits;
const ref = dense(await llamaLogits(model), ours.length);
const softmax = (v) => {
  const m = Math.max(...v);
  const e = v.map((x) => Math.exp(x - m));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / s);
};
const maxAbsDiff = (a, b) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);
const scale = ref.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
const relDiff = maxAbsDiff(ours, ref) / scale;
const [p, q] = [softmax(ours), softmax(ref)];
const pDiff = maxAbsDiff(p, q);
const top = q.indexOf(Math.max(...q));
let ok = Number.isFinite(relDiff) && relDiff <= Number(limitArg) && p.indexOf(Math.max(...p)) === top;
let effect = "";
if (baseFile) {
  const base = dense(await llamaLogits(await llama.loadModel({ modelPath: baseFile })), ours.length);
  const change = maxAbsDiff(q, softmax(base));
  ok = ok && change >= 10 * pDiff;
  effect = `; llama.cpp's change of p from ${path.basename(baseFile)} ${change.toExponential(3)} (must be >= 10x)`;
}
console.log(`${ok ? "ok" : "FAIL"} ${path.basename(file)} after ${JSON.stringify(prompt)} (${ids.length} tokens): ` +
            `max |z_zinc - z_llama.cpp| / max |z| = ${relDiff.toExponential(3)} (limit ${limitArg}), ` +
            `max |dp| = ${pDiff.toExponential(3)}${effect}, top token ${top} p=${q[top].toFixed(4)}`);
process.exit(ok ? 0 : 1);
