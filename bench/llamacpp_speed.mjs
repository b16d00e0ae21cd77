// Prefill and decode speed of the prebuilt llama.cpp (node-llama-cpp, CPU) on a model file: a prompt of
// N_PROMPT tokens (a fixed text, tokenized by llama.cpp), then N_GEN greedy tokens, one step at a time.
// Prints JSON. Usage: node llamacpp_speed.mjs ORACLE_DIR MODEL.gguf N_PROMPT N_GEN THREADS
import path from "node:path";
import { createRequire } from "node:module";

const [oracleDir, file, nPromptArg, nGenArg, threadsArg] = process.argv.slice(2);
const require = createRequire(path.resolve(oracleDir, "package.json"));
const { getLlama, LlamaLogLevel } = await import(require.resolve("node-llama-cpp"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: file });
const nPrompt = Number(nPromptArg), nGen = Number(nGenArg);
const text = "The quick brown fox jumps over the lazy dog. ".repeat(200);
const prompt = [model.tokens.bos, ...model.tokenize(text)].filter((t) => t !== undefined && t !== null).slice(0, nPrompt);
const ctx = await model.createContext({ contextSize: nPrompt + nGen + 16, batchSize: nPrompt, threads: Number(threadsArg) });
const seq = ctx.getSequence();
let t0 = performance.now();
let r = await seq.controlledEvaluate(prompt.map((t, i) => (i === prompt.length - 1 ? [t, { generateNext: { token: true } }] : t)));
const prefill = (performance.now() - t0) / 1000;
let next = r[r.length - 1].next.token;
t0 = performance.now();
for (let i = 0; i < nGen; i++) {
  r = await seq.controlledEvaluate([[next, { generateNext: { token: true } }]]);
  next = r[0].next.token;
}
const decode = (performance.now() - t0) / 1000;
console.log(JSON.stringify({ prompt_tokens: prompt.length, prefill_tokens_per_s: prompt.length / prefill,
                             decode_tokens_per_s: nGen / decode }));
