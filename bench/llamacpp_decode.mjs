// Decode speed of the prebuilt llama.cpp (node-llama-cpp, CPU) on a model file: generates N tokens
// greedily after a one-token prompt and prints tokens/s and the weight bandwidth that implies.
// Usage: node llamacpp_decode.mjs ORACLE_DIR MODEL.gguf N_TOKENS THREADS
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const [oracleDir, file, nArg, threadsArg] = process.argv.slice(2);
const require = createRequire(path.resolve(oracleDir, "package.json"));
const { getLlama, LlamaLogLevel } = await import(require.resolve("node-llama-cpp"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: file, useMmap: true });
const ctx = await model.createContext({ contextSize: 256, threads: Number(threadsArg) });
const seq = ctx.getSequence();
const n = Number(nArg);
let count = 0, t0 = 0;
for await (const _ of seq.evaluate([model.tokens.bos], { temperature: 0 })) {
  if (count === 0) t0 = performance.now();  // time from the first generated token: decode only
  if (++count > n) break;
}
const seconds = (performance.now() - t0) / 1000;
const bytes = fs.statSync(file).size;
console.log(JSON.stringify({ file: path.basename(file), tokens_per_s: n / seconds, model_bytes: bytes,
                             gbs: (bytes * n / seconds) / 1e9 }));
