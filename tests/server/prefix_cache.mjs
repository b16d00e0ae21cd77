// The prefix cache through the real server and the official OpenAI client: a request sharing a long
// beginning with an earlier one reuses it from another slot (the earlier one's slot busy with a third
// request), its usage counts those tokens as cached, its greedy answer equals the one a server without
// the cache gives, /metrics counts the hits; with --cache-mem 0 the same request reuses nothing; with
// room for two blocks on the device and a host tier (--cache-ram), the blocks evicted to host memory
// come back for B, with the same answer.
// Usage: node prefix_cache.mjs ORACLE_DIR ZINC STORIES.gguf
import path from "node:path";
import { createRequire } from "node:module";
import { testRun } from "./start_server.mjs";

const [oracleDir, zinc, model] = process.argv.slice(2);
const require = createRequire(path.resolve(oracleDir, "package.json"));
const OpenAI = require("openai").default ?? require("openai");
const { check, start, stopAll, failures } = testRun(zinc, model);

const metric = (text, name) => Number((text.match(new RegExp(`^${name} ([0-9.e+-]+)`, "m")) || [0, 0])[1]);

// One scenario on a server started with `flags`: request A; then a long request X, which takes A's
// slot (the first free one: neither shares a beginning with X); then B, which shares A's first part
// (about 250 tokens) and lands in the other slot while X runs. Returns B's answer and usage.
async function scenario(flags) {
  const s = await start(["-c", "512", "--parallel", "2", "--backend", "cpu", ...flags]);
  const client = new OpenAI({ baseURL: s.base + "/v1", apiKey: "none", maxRetries: 0 });
  const shared = "Once upon a time there was a little girl who lived in a small house near the woods. ".repeat(12);
  const ask = (prompt, max_tokens) =>
    client.completions.create({ model: "stories260K", prompt, max_tokens, temperature: 0 });
  const a = await ask(shared + "One day she", 8);
  // Long enough to keep its slot busy while B runs (300 tokens once finished first on a fast machine, and
  // B then took X's slot, sharing its first token).
  const x = ask("The dog ran and ran", 480);
  // B goes once X holds a slot (a loaded machine can take longer than a fixed wait to admit X).
  let health;
  for (const t0 = Date.now(); ; ) {
    await new Promise((r) => setTimeout(r, 10));
    health = await (await fetch(s.base + "/health")).json();
    if (health.slots_busy >= 1 || Date.now() - t0 > 5000) break;
  }
  const b = await ask(shared + "The next morning", 16);
  await x;
  const metrics = await (await fetch(s.base + "/metrics")).text();
  return { a, b, busy: health.slots_busy, metrics, sharedTokens: a.usage.prompt_tokens - 3 };
}

try {
  const withCache = await scenario([]);
  const without = await scenario(["--cache-mem", "0"]);
  // stories260K's KV block (32 positions, 5 layers, K and V rows of 32 f16) is 20 KiB: 50 kB holds two.
  const tiered = await scenario(["--cache-mem", "0.00005", "--cache-ram", "0.01"]);
  check(withCache.busy >= 1, "the first slot was busy with another request while B ran", String(withCache.busy));
  const cached = withCache.b.usage.prompt_tokens_details?.cached_tokens ?? 0;
  check(cached >= withCache.sharedTokens - 32 && cached < withCache.b.usage.prompt_tokens,
        "B, in the other slot, reused the shared beginning from the cache (usage.prompt_tokens_details.cached_tokens)",
        `${cached} of ${withCache.b.usage.prompt_tokens} (shared about ${withCache.sharedTokens})`);
  check(withCache.b.choices[0].text === without.b.choices[0].text && withCache.b.choices[0].text.length > 0,
        "B's greedy answer is the one a server without the cache gives",
        JSON.stringify([withCache.b.choices[0].text, without.b.choices[0].text]));
  check(without.busy >= 1, "without the cache too, the first slot was busy while B ran", String(without.busy));
  check((without.b.usage.prompt_tokens_details?.cached_tokens ?? 0) === 0,
        "with --cache-mem 0 the other slot reuses nothing", JSON.stringify(without.b.usage));
  const m = withCache.metrics;
  check(metric(m, "zinc_prefix_cache_hits_total") >= 1 && metric(m, "zinc_prefix_cache_tokens_reused_total") >= cached &&
          metric(m, "zinc_prefix_cache_kv_bytes") > 0 && metric(m, "zinc_prefix_cache_budget_bytes") === 1e9,
        "/metrics reports the cache's hits, reused tokens, bytes and budget",
        ["hits_total", "tokens_reused_total", "kv_bytes", "budget_bytes"]
          .map((k) => `${k} ${metric(m, "zinc_prefix_cache_" + k)}`).join(", "));
  check(metric(without.metrics, "zinc_prefix_cache_budget_bytes") === 0, "without the cache /metrics shows no budget");
  const tieredCached = tiered.b.usage.prompt_tokens_details?.cached_tokens ?? 0;
  check(tieredCached >= tiered.sharedTokens - 32, "with a host tier, B reused the blocks evicted to host memory",
        `${tieredCached} of ${tiered.b.usage.prompt_tokens} (shared about ${tiered.sharedTokens})`);
  check(tiered.b.choices[0].text === without.b.choices[0].text, "with a host tier, B's greedy answer is the same",
        JSON.stringify([tiered.b.choices[0].text, without.b.choices[0].text]));
  const t = tiered.metrics;
  check(metric(t, "zinc_prefix_cache_spills_total") > 0 && metric(t, "zinc_prefix_cache_restores_total") > 0 &&
          metric(t, "zinc_prefix_cache_host_budget_bytes") === 1e7 && metric(t, "zinc_prefix_cache_host_bytes") > 0 &&
          metric(t, "zinc_prefix_cache_kv_bytes") <= 5e4,
        "/metrics reports the host tier: blocks spilled and restored, its bytes within its budget, the device's within --cache-mem",
        ["spills_total", "restores_total", "host_bytes", "host_budget_bytes", "kv_bytes"]
          .map((k) => `${k} ${metric(t, "zinc_prefix_cache_" + k)}`).join(", "));
} catch (e) {
  check(false, "the prefix cache test ran to the end", e.stack);
} finally {
  stopAll();
}
console.log(failures() ? `${failures()} check(s) failed` : "all checks passed");
process.exit(failures() ? 1 : 0);
