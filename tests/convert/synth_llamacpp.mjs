// zinc synth's files are standard GGUF: the prebuilt llama.cpp (node-llama-cpp, CPU) loads each one
// unchanged, tokenizes with its vocabulary and evaluates a prompt, and its next-token logits match
// zinc's on the same file (random weights make a near-uniform distribution, so the check is the
// logits themselves, not a greedy choice).
// Usage: node synth_llamacpp.mjs ORACLE_DIR ZINC_EVAL_TOOL FILE.gguf...
import { execFileSync } from "node:child_process";
import path from "node:path";
import { createRequire } from "node:module";

const [oracleDir, evalTool, ...files] = process.argv.slice(2);
const require = createRequire(path.resolve(oracleDir, "package.json"));
const { getLlama, LlamaLogLevel } = await import(require.resolve("node-llama-cpp"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
let failures = 0;
for (const file of files) {
  try {
    const model = await llama.loadModel({ modelPath: file });
    const ids = model.tokenize("the cat sat on the mat");
    const ctx = await model.createContext({ contextSize: 64, threads: 2 });
    const res = await ctx.getSequence().controlledEvaluate(
      ids.map((t, i) => (i === ids.length - 1 ? [t, { generateNext: { logits: true } }] : t)));
    const ref = new Map(res[res.length - 1].next.logits);
    const ours = JSON.parse(execFileSync(evalTool, [file, ...ids.map(String)], { encoding: "utf8", maxBuffer: 1 << 28 })).logits;
    let maxDiff = 0, scale = 0;
    for (let i = 0; i < ours.length; i++) {
      maxDiff = Math.max(maxDiff, Math.abs(ours[i] - (ref.get(i) ?? NaN)));
      scale = Math.max(scale, Math.abs(ref.get(i) ?? 0));
    }
    // Quantized activations on both sides: differences of a few percent of the logit range.
    const ok = ids.length > 3 && Number.isFinite(maxDiff) && maxDiff <= 0.05 * scale + 1e-3;
    console.log(`${ok ? "ok" : "FAIL"} ${path.basename(file)}: ${ids.length} prompt tokens, ` +
                `max |zinc - llama.cpp| logit ${maxDiff.toExponential(2)} of range ${scale.toExponential(2)}`);
    if (!ok) failures++;
    await ctx.dispose();
    await model.dispose();
  } catch (e) {
    console.log(`FAIL ${path.basename(file)}: ${e.message}`);
    failures++;
  }
}
process.exit(failures ? 1 : 0);
