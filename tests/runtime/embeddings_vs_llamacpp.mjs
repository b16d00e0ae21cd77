// Embeddings against llama.cpp's (the prebuilt CPU build in node-llama-cpp) on stories260K, the same
// file: with no pooling declared, llama.cpp's embedding is the last token's hidden state after the final
// norm; copies of the file declaring mean, cls and last pooling give its pooled vectors. zinc's must be
// the same vectors, from `zinc embed` (as pooled, and scaled to unit length) and from /v1/embeddings
// through the official openai client (float and base64 encodings, batches, dimensions), plus the
// errors a client can cause.
// Usage: node embeddings_vs_llamacpp.mjs ORACLE_DIR ZINC MAKE_VARIANT STORIES.gguf WORK_DIR
import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import { startServer } from "../server/start_server.mjs";

const [oracleDir, zinc, makeVariant, stories, work] = process.argv.slice(2);
const require = createRequire(path.resolve(oracleDir, "package.json"));
const { getLlama, LlamaLogLevel } = await import(require.resolve("node-llama-cpp"));
const OpenAI = require("openai").default ?? require("openai");
fs.mkdirSync(work, { recursive: true });
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });

let failed = 0;
const check = (ok, what, detail = "") => {
  if (!ok) failed++;
  console.log(`${ok ? "ok" : "FAIL"} ${what}${ok || !detail ? "" : ": " + detail}`);
};
// Largest difference relative to the reference's largest magnitude. Both engines keep the KV cache in
// f16, but llama.cpp also rounds q to f16 for its product with the cache (2^-11 relative per element)
// where zinc keeps q in float32: later positions' states differ by a few times 2^-11 of their largest
// value (position 0, whose attention is its own value, agrees to float32 rounding). TOL = 4 × 2^-11 is
// that; the poolings' vectors are more than 0.1 apart, so a wrong token, position or pooling fails.
const TOL = 4 / 2048;
const gap = (a, b) => {
  if (!a || !b || a.length !== b.length) return Infinity;
  const scale = Math.max(...b.map(Math.abs));
  return Math.max(...a.map((x, i) => Math.abs(x - b[i]))) / scale;
};
const unit = (v) => {
  const n = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  return v.map((x) => x / n);
};
const zincEmbed = (model, texts, args = []) =>
  execFileSync(zinc, ["embed", "-m", model, ...args, ...texts], { encoding: "utf8" }).trim().split("\n").map((l) => JSON.parse(l));

const texts = ["Once upon a time, there was a little girl named Lily.", "The cat sat on the mat", "Tom"];
async function reference(model) {
  const m = await llama.loadModel({ modelPath: model });
  const ctx = await m.createEmbeddingContext({ contextSize: 256, threads: 1 });
  const out = [];
  for (const t of texts) out.push([...(await ctx.getEmbeddingFor(t)).vector]);
  await ctx.dispose();
  await m.dispose();
  return out;
}

const variants = { none: stories };
for (const p of ["mean", "cls", "last"]) {
  variants[p] = path.join(work, `stories-${p}.gguf`);
  execFileSync(makeVariant, [stories, variants[p], `pooling-${p}`]);
}
const refs = {};
for (const [p, file] of Object.entries(variants)) refs[p] = await reference(file);
// The poolings differ from each other (else the comparisons below could not tell them apart).
check(gap(refs.mean[0], refs.last[0]) > 0.1 && gap(refs.cls[0], refs.last[0]) > 0.1, "llama.cpp's poolings differ");

// zinc embed: the model's own pooling (or --pooling last for the file that declares none), as pooled and
// at unit length.
for (const [p, file] of Object.entries(variants)) {
  const args = p === "none" ? ["--pooling", "last"] : [];
  const raw = zincEmbed(file, texts, [...args, "--no-normalize"]);
  const g = Math.max(...raw.map((v, i) => gap(v, refs[p][i])));
  check(g < TOL, `zinc embed, ${p === "none" ? "no pooling declared, --pooling last" : p + " pooling"}: llama.cpp's vectors`,
        `gap ${g}`);
  const normed = zincEmbed(file, texts, args);
  const gn = Math.max(...normed.map((v, i) => gap(v, unit(refs[p][i]))));
  check(gn < TOL, `zinc embed, ${p}: unit length by default`, `gap ${gn}`);
}
let refused = "";
try {
  execFileSync(zinc, ["embed", "-m", stories, "x"], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
} catch (e) {
  refused = String(e.stderr);
}
check(/declares no pooling/.test(refused), "zinc embed on a model without pooling asks for --pooling", refused);

// /v1/embeddings through the openai client.
const s = await startServer(zinc, variants.mean, ["-c", "256", "--parallel", "2"]);
try {
  const openai = new OpenAI({ baseURL: s.base + "/v1", apiKey: "none", maxRetries: 0 });
  const batch = await openai.embeddings.create({ model: "stories-mean", input: texts, encoding_format: "float" });
  const gb = Math.max(...batch.data.map((d, i) => gap(d.embedding, unit(refs.mean[i]))));
  check(batch.data.length === 3 && batch.data.every((d, i) => d.index === i && d.object === "embedding") && gb < TOL,
        "/v1/embeddings, a batch of three, float: llama.cpp's mean-pooled vectors at unit length", `gap ${gb}`);
  check(batch.usage.prompt_tokens > texts.length && batch.usage.total_tokens === batch.usage.prompt_tokens,
        "usage counts the inputs' tokens", JSON.stringify(batch.usage));
  // The client's default asks for base64 and decodes it.
  const b64 = await openai.embeddings.create({ model: "stories-mean", input: texts[1] });
  check(gap(b64.data[0].embedding, batch.data[1].embedding) === 0, "base64 encoding decodes to the same floats");
  const raw = await openai.embeddings.create({ model: "stories-mean", input: texts[0], encoding_format: "float",
                                              normalize: false, pooling: "last" });
  check(gap(raw.data[0].embedding, refs.last[0]) < TOL, "pooling and normalize per request");
  const dims = await openai.embeddings.create({ model: "stories-mean", input: texts[0], encoding_format: "float", dimensions: 16 });
  check(dims.data[0].embedding.length === 16 && gap(dims.data[0].embedding, unit(refs.mean[0].slice(0, 16))) < TOL,
        "dimensions keeps the first values, at unit length");
  const ids = execFileSync(zinc, ["tokenize", "--ids", "-m", stories, texts[2]], { encoding: "utf8" }).trim().split(/\s+/).map(Number);
  const byIds = await openai.embeddings.create({ model: "stories-mean", input: ids, encoding_format: "float" });
  check(gap(byIds.data[0].embedding, batch.data[2].embedding) < 1e-6, "token ids as input", JSON.stringify(ids));

  const status = async (body) => {
    try {
      await openai.embeddings.create(body);
      return 200;
    } catch (e) {
      return `${e.status} ${e.error?.param ?? ""}`;
    }
  };
  check((await status({ model: "m", input: "" })) === "400 input", "an empty input is a 400 naming input");
  check((await status({ model: "m", input: [] })) === "400 input", "no inputs is a 400");
  check((await status({ model: "m", input: [1, "a"] })) === "400 input", "mixed inputs are a 400");
  check((await status({ model: "m", input: [999999] })) === "400 input", "a token id past the vocabulary is a 400");
  check((await status({ model: "m", input: "a ".repeat(400) })) === "400 input", "an input longer than the context is a 400");
  check((await status({ model: "m", input: "a", dimensions: 100000 })) === "400 dimensions", "too many dimensions is a 400");
  check((await status({ model: "m", input: "a", encoding_format: "int8" })) === "400 encoding_format", "an unknown encoding is a 400");
} finally {
  s.proc.kill("SIGTERM");
}
const plain = await startServer(zinc, stories, ["-c", "256"]);
try {
  const openai = new OpenAI({ baseURL: plain.base + "/v1", apiKey: "none", maxRetries: 0 });
  let err = null;
  try {
    await openai.embeddings.create({ model: "m", input: "a", encoding_format: "float" });
  } catch (e) {
    err = e;
  }
  check(err?.status === 400 && err?.error?.param === "pooling", "a model without pooling needs it named", String(err));
  const last = await openai.embeddings.create({ model: "m", input: texts[0], encoding_format: "float", pooling: "last", normalize: false });
  check(gap(last.data[0].embedding, refs.none[0]) < TOL, "pooling last on a decoder: llama.cpp's last hidden state");
} finally {
  plain.proc.kill("SIGTERM");
}
console.log(failed ? `${failed} checks failed` : "all checks passed");
process.exit(failed ? 1 : 0);
