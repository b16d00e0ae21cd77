// Quantized fixtures: zinc against the reference implementation on the same file. Each fixture (F32,
// converted by zinc) is quantized by `zinc quantize`; zinc's CPU backend and the prebuilt llama.cpp
// (node-llama-cpp, CPU) both evaluate the fixture's sequences on that file, and each is compared with the
// transformers reference: mean KL(reference || engine) over the positions, the fraction of positions
// whose top token agrees, and the fraction of the reference's greedy continuation each predicts when
// fed the reference's own tokens.
//
// Quantization moves the logits far more than float rounding, so there is no rounding bound to derive
// for these numbers; what must hold is that zinc loses no more than the reference implementation loses
// on the same weights. Both quantize the activations to the same 8-bit codes, so they differ only where
// a sum's order carries a value across a code's rounding boundary, which flips near-tied tokens either
// way and moves the KL a little: measured over zinc's AVX-512, AVX2 and scalar kernels, zinc's KL is
// 0.75 to 1.22 times llama.cpp's and its top-1 and greedy fractions within two positions of llama.cpp's.
// The limits: 1.5 times the KL, three positions. A wrong block layout or scale costs KL of order 1.
// Usage: node quantized_vs_llamacpp.mjs ORACLE_DIR EVAL_TOOL FIXTURES_DIR GGUF_DIR ARCH:MIXTURE...
//        (GGUF_DIR/ARCH_MIXTURE.gguf)
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const [oracleDir, tool, fixtures, ggufDir, ...cases] = process.argv.slice(2);
const require = createRequire(path.resolve(oracleDir, "package.json"));
const { getLlama, LlamaLogLevel } = await import(require.resolve("node-llama-cpp"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });

const softmax = (v) => {
  const m = Math.max(...v);
  const e = v.map((x) => Math.exp(x - m));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / s);
};
const argmax = (v) => v.reduce((b, x, i) => (x > v[b] ? i : b), 0);

// Rows of logits at every position of `ids` (the first nv entries of each row).
async function llamaRows(model, ids, nv) {
  const ctx = await model.createContext({
    contextSize: 128, batchSize: 128, threads: 1, flashAttention: false,
    experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
  });
  const res = await ctx.getSequence().controlledEvaluate(ids.map((t) => [t, { generateNext: { logits: true } }]));
  await ctx.dispose();
  return res.map((r) => {
    const row = new Array(nv).fill(-Infinity);
    for (const [t, v] of r.next.logits) if (t < nv) row[t] = v;
    return row;
  });
}
const zincRows = (file, ids) =>
  JSON.parse(execFileSync(tool, ["--all", file, ...ids.map(String)], {
    encoding: "utf8", maxBuffer: 1 << 28, env: { ...process.env, ZINC_TEST_EVAL_KV: "f32" },
  })).logits;

// KL, top-1 and teacher-forced greedy agreement of one engine's rows with the reference.
function score(ref, rowsOf) {
  let kl = 0, top1 = 0, positions = 0, nv = 0;
  ref.sequences.forEach((seq, s) => {
    const rows = rowsOf(seq);
    nv = rows[0].length;
    rows.forEach((o, t) => {
      const r = Array.from(ref.logits[s].subarray(t * ref.vocab, t * ref.vocab + nv));
      const [p, q] = [softmax(r), softmax(o)];
      for (let v = 0; v < nv; v++) if (p[v] > 0) kl += p[v] * Math.log(p[v] / Math.max(q[v], 1e-30));
      top1 += argmax(o) === argmax(r);
      positions++;
    });
  });
  // The reference chose among real tokens and never the end-of-sequence token 1.
  const forcedSeq = [...ref.greedy_prompt, ...ref.greedy.slice(0, -1)];
  const rows = rowsOf(forcedSeq);
  let agree = 0;
  ref.greedy.forEach((tok, i) => {
    const row = rows[ref.greedy_prompt.length - 1 + i].slice(0, Math.min(ref.n_tokens, nv));
    row[1] = -Infinity;
    agree += argmax(row) === tok;
  });
  return { kl: kl / positions, top1: top1 / positions, forced: agree / ref.greedy.length, positions };
}

let failed = 0;
for (const c of cases) {
  const [arch, mixture] = c.split(":");
  // reference.json names a raw float32 file of [tokens x vocab] logits per sequence.
  const refRaw = JSON.parse(fs.readFileSync(path.join(fixtures, arch, "reference.json")));
  const logits = refRaw.logits.map((l) => {
    const b = fs.readFileSync(path.join(fixtures, arch, l.file));
    return new Float32Array(b.buffer, b.byteOffset, b.length / 4);
  });
  const ref = { ...refRaw, logits, vocab: refRaw.logits[0].shape[1] };
  const file = path.join(ggufDir, `${arch}_${mixture}.gguf`);
  const z = score(ref, (ids) => zincRows(file, ids));
  const model = await llama.loadModel({ modelPath: file });
  const nv = zincRows(file, [ref.sequences[0][0]])[0].length;
  const llamaCache = new Map();
  for (const seq of [...ref.sequences, [...ref.greedy_prompt, ...ref.greedy.slice(0, -1)]]) {
    llamaCache.set(seq.join(","), await llamaRows(model, seq, nv));
  }
  const l = score(ref, (ids) => llamaCache.get(ids.join(",")));
  await model.dispose();
  const slack = 3 / z.positions + 1e-9, forcedSlack = 3 / ref.greedy.length + 1e-9;
  const ok = z.kl <= 1.5 * l.kl + 1e-9 && z.top1 >= l.top1 - slack && z.forced >= l.forced - forcedSlack;
  if (!ok) failed++;
  console.log(`${ok ? "ok" : "FAIL"} ${arch} ${mixture}: KL zinc ${z.kl.toExponential(3)} llama.cpp ${l.kl.toExponential(3)}` +
              ` (ratio ${(z.kl / l.kl).toFixed(3)}); top-1 ${z.top1.toFixed(3)} vs ${l.top1.toFixed(3)};` +
              ` greedy steps ${z.forced.toFixed(3)} vs ${l.forced.toFixed(3)}`);
}
process.exit(failed ? 1 : 0);
