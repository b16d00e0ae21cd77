// Reference logits from the prebuilt llama.cpp (node-llama-cpp, CPU): for each pair of models, runs the
// same tokens through both and compares the logits over the whole vocabulary at every position
// (--all-positions, every token id once) or after a short fixed prompt.
// Usage: node llama_logits.mjs ORACLE_DIR exact|differ|close:TOL A.gguf B.gguf [A2 B2 ...]
//   exact: every logit bit-identical; differ: at least one logit differs (a negative control);
//   close:TOL: max |a-b| <= TOL. Non-finite logits always fail.
import path from "node:path";
import { createRequire } from "node:module";

const args = process.argv.slice(2);
const allPositions = args[0] === "--all-positions";
if (allPositions) args.shift();
const [oracleDir, mode, ...files] = args;
const require = createRequire(path.resolve(oracleDir, "package.json"));
const { getLlama, LlamaLogLevel } = await import(require.resolve("node-llama-cpp"));

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const PROMPT = [1, 20, 300, 45, 7, 99, 250];

async function logits(file) {
  const model = await llama.loadModel({ modelPath: file });
  const vocab = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
  const tokens = allPositions ? Array.from({ length: vocab }, (_, i) => i) : PROMPT;
  const ctx = await model.createContext({ contextSize: tokens.length + 16, batchSize: tokens.length, threads: 1 });
  const seq = ctx.getSequence();
  const want = (i) => allPositions || i === tokens.length - 1;
  const res = await seq.controlledEvaluate(tokens.map((t, i) => (want(i) ? [t, { generateNext: { logits: true } }] : t)));
  const rows = res.filter((r, i) => want(i));
  const out = new Float32Array(rows.length * vocab);
  rows.forEach((r, row) => {
    for (const [tok, v] of r.next.logits) out[row * vocab + tok] = v;
  });
  await ctx.dispose();
  await model.dispose();
  return out;
}

let failed = 0;
const tol = mode.startsWith("close:") ? Number(mode.slice(6)) : 0;
for (let i = 0; i + 1 < files.length; i += 2) {
  const [a, b] = [await logits(files[i]), await logits(files[i + 1])];
  let maxDiff = 0, differing = 0, finite = a.length > 0;
  for (let k = 0; k < a.length; k++) {
    finite &&= Number.isFinite(a[k]) && Number.isFinite(b[k]);
    const d = Math.abs(a[k] - b[k]);
    if (d > 0) differing++;
    maxDiff = Math.max(maxDiff, d);
  }
  const ok = finite && (mode === "exact" ? differing === 0 : mode === "differ" ? differing > 0 : maxDiff <= tol);
  if (!ok) failed++;
  console.log(`${ok ? "ok" : "MISMATCH"} ${path.basename(files[i])} vs ${path.basename(files[i + 1])}: ` +
              `${differing}/${a.length} logits differ, max |diff| ${maxDiff.toExponential(3)}`);
}
process.exit(failed ? 1 : 0);
