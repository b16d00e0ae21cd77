// Speculative decoding through the real server and the official OpenAI client: with a draft model (the
// same stories model rounded to 4 bits, so it mostly agrees and sometimes does not), 8 concurrent
// streams on --parallel 4 (verifying steps batched with other slots' tokens), greedy and sampled with
// a seed, give exactly the answers of a server without a draft; /metrics counts the drafted tokens and
// those the model kept, many of them but not all. And a hybrid model with its own multi-token-prediction
// head (tests/models/fixtures-mtp over tests/models/fixtures) drafts with the head on every slot, the
// answers again those of a server that does not draft.
// Usage: node speculative.mjs ORACLE_DIR ZINC STORIES.gguf WORKDIR MTP_FIXTURES_DIR
import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import { testRun } from "./start_server.mjs";

const [oracleDir, zinc, model, work, mtpFixtures] = process.argv.slice(2);
const require = createRequire(path.resolve(oracleDir, "package.json"));
const OpenAI = require("openai").default ?? require("openai");
const { check, start, stopAll, failures } = testRun(zinc, model);
const metric = (text, name) => Number((text.match(new RegExp(`^${name} ([0-9.e+-]+)`, "m")) || [0, 0])[1]);

try {
  fs.mkdirSync(work, { recursive: true });
  const draft = path.join(work, "draft-q4_0.gguf");
  execFileSync(zinc, ["quantize", model, draft, "Q4_0"], { stdio: "ignore" });
  const args = ["-c", "512", "--parallel", "4", "--backend", "cpu"];
  const plain = await start(args);
  const spec = await start([...args, "-md", draft, "--draft-max", "5", "--spec", "on"]);
  const starts = ["Once upon a time", "The little dog", "Lily wanted to", "One day, a big", "Tom and Sue",
                  "The sun was", "A bird", "There was a girl named"];
  const ask = async (s, prompt, i, sampled) => {
    const client = new OpenAI({ baseURL: s.base + "/v1", apiKey: "none", maxRetries: 0 });
    const stream = await client.completions.create({ model: "stories260K", prompt, max_tokens: 40 + 9 * i, stream: true,
                                                      ...(sampled ? { temperature: 0.8, seed: 100 + i } : { temperature: 0 }) });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
    return text;
  };
  for (const sampled of [false, true]) {
    const want = await Promise.all(starts.map((p, i) => ask(plain, p, i, sampled)));
    const got = await Promise.all(starts.map((p, i) => ask(spec, p, i, sampled)));
    const differ = got.map((t, i) => (t === want[i] ? null : { i, want: want[i], got: t })).filter(Boolean);
    check(differ.length === 0, `8 ${sampled ? "sampled (seeded)" : "greedy"} streams on 4 slots with a draft model: the answers of a server without one`,
          JSON.stringify(differ.slice(0, 2)));
    check(new Set(want).size >= 6, "the requests have different answers", String(new Set(want).size));
  }
  const m = await (await fetch(spec.base + "/metrics")).text();
  const drafted = metric(m, "zinc_draft_tokens_total"), kept = metric(m, "zinc_draft_accepted_tokens_total");
  // (Greedy answers keep about 70% of the drafts, sampled ones fewer.)
  check(drafted > 100 && kept > drafted / 3 && kept < drafted, "/metrics: drafted tokens, many of them kept, not all",
        `${kept} of ${drafted}`);
  const none = await (await fetch(plain.base + "/metrics")).text();
  check(metric(none, "zinc_draft_tokens_total") === 0, "a server without a draft model drafts nothing");
  check(/speculative decoding/.test(spec.stderr()), "the server says it decodes speculatively", spec.stderr());

  // The model's own head: the checkpoint is the fixture's model with the head's shard beside it.
  const ckpt = path.join(work, "qwen3_5-mtp");
  fs.rmSync(ckpt, { recursive: true, force: true });
  fs.mkdirSync(ckpt);
  for (const f of fs.readdirSync(path.join(mtpFixtures, "qwen3_5"))) fs.symlinkSync(path.join(mtpFixtures, "qwen3_5", f), path.join(ckpt, f));
  fs.symlinkSync(path.join(mtpFixtures, "..", "fixtures", "qwen3_5", "model.safetensors"), path.join(ckpt, "model.safetensors"));
  const hybrid = path.join(work, "qwen3_5-mtp.gguf");
  execFileSync(zinc, ["convert", ckpt, hybrid, "--outtype", "f32"], { stdio: "ignore" });
  const hargs = ["-c", "256", "--parallel", "3", "--backend", "cpu"];
  const hplain = await start([...hargs, "--spec", "off"], hybrid);
  const hspec = await start([...hargs, "--spec", "on"], hybrid);
  for (const sampled of [false, true]) {
    const want = await Promise.all(starts.slice(0, 5).map((p, i) => ask(hplain, p, i, sampled)));
    const got = await Promise.all(starts.slice(0, 5).map((p, i) => ask(hspec, p, i, sampled)));
    const differ = got.map((t, i) => (t === want[i] ? null : { i, want: want[i], got: t })).filter(Boolean);
    check(differ.length === 0, `5 ${sampled ? "sampled (seeded)" : "greedy"} streams on 3 slots drafting with the model's own head: the answers of a server that does not draft`,
          JSON.stringify(differ.slice(0, 2)));
  }
  const hm = await (await fetch(hspec.base + "/metrics")).text();
  check(metric(hm, "zinc_draft_tokens_total") > 200, "/metrics: the head drafted", String(metric(hm, "zinc_draft_tokens_total")));
  check(/prediction head drafts up to 3 tokens/.test(hspec.stderr()), "the server says the model's head drafts", hspec.stderr());
  check(metric(await (await fetch(hplain.base + "/metrics")).text(), "zinc_draft_tokens_total") === 0, "--spec off: the head drafts nothing");
} catch (e) {
  check(false, "speculative decoding through the server", e.stack || String(e));
} finally {
  stopAll();
}
process.exit(failures() ? 1 : 0);
