// Continuous batching through the real server and the official OpenAI client: 16 concurrent streams
// with different prompts and lengths on --parallel 8, each greedy answer identical to the same request
// served alone (the CPU backend steps several sequences bit for bit as each alone); the steps really
// carried several sequences (/metrics); a long prompt arriving while others decode is evaluated in
// chunks beside them, or (--prompt-lane) on a context of its own beside their steps; a stream
// cancelled mid-way frees its sequence at once.
// Usage: node batching.mjs ORACLE_DIR ZINC STORIES.gguf
import path from "node:path";
import { createRequire } from "node:module";
import { testRun } from "./start_server.mjs";

const [oracleDir, zinc, model] = process.argv.slice(2);
const require = createRequire(path.resolve(oracleDir, "package.json"));
const OpenAI = require("openai").default ?? require("openai");
const { check, start, stopAll, failures } = testRun(zinc, model);

const metric = (text, name) => Number((text.match(new RegExp(`^${name} ([0-9.e+-]+)`, "m")) || [0, 0])[1]);

try {
  // A step of at most 64 tokens: the long prompt below takes several steps beside the decoding ones.
  const s = await start(["-c", "512", "--parallel", "8", "--queue", "64", "--backend", "cpu", "--batch-tokens", "64"]);
  const client = new OpenAI({ baseURL: s.base + "/v1", apiKey: "none", maxRetries: 0 });
  const starts = ["Once upon a time", "The little dog", "Lily wanted to", "One day, a big", "Tom and Sue",
                  "The sun was", "A bird", "There was a girl named"];
  const requests = Array.from({ length: 16 }, (_, i) => ({
    prompt: starts[i % starts.length] + (i >= 8 ? " and" : ""), max_tokens: 12 + 7 * i }));
  // A request's streamed greedy text from a server's client.
  const asker = (c) => async (r, signal) => {
    const stream = await c.completions.create({ model: "stories260K", prompt: r.prompt, max_tokens: r.max_tokens,
                                                temperature: 0, stream: true }, signal ? { signal } : undefined);
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
    return text;
  };
  const ask = asker(client);
  // Whether a server's slots all go idle within a second.
  const idleSoon = async (base) => {
    for (let i = 0; i < 40; i++) {
      if ((await (await fetch(base + "/health")).json()).slots_busy === 0) return true;
      await new Promise((r) => setTimeout(r, 25));
    }
    return false;
  };
  // Each alone, one after another.
  const alone = [];
  for (const r of requests) alone.push(await ask(r));
  const before = await (await fetch(s.base + "/metrics")).text();
  // All at once.
  const together = await Promise.all(requests.map((r) => ask(r)));
  const differ = together.map((t, i) => (t === alone[i] ? null : { i, alone: alone[i], together: t })).filter(Boolean);
  check(differ.length === 0, "16 concurrent streams on 8 slots: each answer equals the request served alone",
        JSON.stringify(differ.slice(0, 2)));
  check(new Set(alone).size >= 12, "the requests have different answers", String(new Set(alone).size));
  const after = await (await fetch(s.base + "/metrics")).text();
  const steps = metric(after, "zinc_steps_total") - metric(before, "zinc_steps_total");
  const seqs = metric(after, "zinc_step_sequences_total") - metric(before, "zinc_step_sequences_total");
  check(metric(after, "zinc_step_sequences_max") === 8 && seqs / steps > 4,
        "the steps carried every active sequence (8 at most)", `max ${metric(after, "zinc_step_sequences_max")}, mean ${seqs / steps}`);
  // Half of them waited for a slot: the queue-wait histogram counts every request and their waits.
  const waited = metric(after, "zinc_queue_wait_seconds_count") - metric(before, "zinc_queue_wait_seconds_count");
  const waitSum = metric(after, "zinc_queue_wait_seconds_sum") - metric(before, "zinc_queue_wait_seconds_sum");
  check(waited === 16 && waitSum > 0.001, "/metrics counts each request's wait for a slot", `${waited} requests, ${waitSum} s`);

  // A long prompt (about 300 tokens) arriving while 4 streams decode: it is evaluated in chunks of the
  // step's room beside their tokens, and everyone's answer is still their alone answer.
  const long = { prompt: "The cat sat on the mat and looked at the sun. ".repeat(25), max_tokens: 8 };
  // Alone on a server of its own (here its slot would keep the prompt and the second request reuse it).
  const single = await start(["-c", "1024", "--parallel", "1", "--backend", "cpu"]);
  const singleClient = new OpenAI({ baseURL: single.base + "/v1", apiKey: "none", maxRetries: 0 });
  const longAlone = (await singleClient.completions.create({ model: "stories260K", prompt: long.prompt,
                                                             max_tokens: long.max_tokens, temperature: 0 })).choices[0].text;
  const m0 = await (await fetch(s.base + "/metrics")).text();
  const decoding = requests.slice(8, 12).map((r) => ask(r));
  await new Promise((r) => setTimeout(r, 30));
  const [longTogether, ...rest] = await Promise.all([ask(long), ...decoding]);
  const m1 = await (await fetch(s.base + "/metrics")).text();
  check(longTogether === longAlone && rest.every((t, i) => t === alone[8 + i]),
        "a long prompt chunked beside decoding streams changes no answer");
  const promptChunks = metric(m1, "zinc_step_prompt_tokens_total") - metric(m0, "zinc_step_prompt_tokens_total");
  const stepsLong = metric(m1, "zinc_steps_total") - metric(m0, "zinc_steps_total");
  check(promptChunks >= 300 && stepsLong > 8, "the long prompt went through in several steps",
        `${promptChunks} prompt tokens over ${stepsLong} steps`);

  // The same with --prompt-lane 100: the long prompt is read on a context of its own beside the
  // streams' steps, then joins its slot; again no answer changes. A long prompt cancelled while it is
  // read there frees its slot, and the streams beside it keep their answers.
  const laned = await start(["-c", "1024", "--parallel", "8", "--backend", "cpu", "--batch-tokens", "64", "--prompt-lane", "100"]);
  const lanedClient = new OpenAI({ baseURL: laned.base + "/v1", apiKey: "none", maxRetries: 0 });
  const askLaned = asker(lanedClient);
  // (Streams of 300 tokens: this model decodes one in well under a millisecond, and they must still be
  // decoding when the long prompt arrives.)
  const streams = starts.slice(0, 4).map((prompt) => ({ prompt, max_tokens: 300 }));
  const streamsAlone = [];
  for (const r of streams) streamsAlone.push(await askLaned(r));
  const l0 = await (await fetch(laned.base + "/metrics")).text();
  const lanedDecoding = streams.map((r) => askLaned(r));
  await new Promise((r) => setTimeout(r, 5));
  const [longLaned, ...lanedRest] = await Promise.all([askLaned(long), ...lanedDecoding]);
  const l1 = await (await fetch(laned.base + "/metrics")).text();
  check(longLaned === longAlone && lanedRest.every((t, i) => t === streamsAlone[i]),
        "a long prompt read on a context of its own beside decoding streams changes no answer",
        JSON.stringify({ longLaned, longAlone }));
  const lanePrompts = metric(l1, "zinc_lane_prompts_total") - metric(l0, "zinc_lane_prompts_total");
  const laneTokens = metric(l1, "zinc_lane_prompt_tokens_total") - metric(l0, "zinc_lane_prompt_tokens_total");
  check(lanePrompts === 1 && laneTokens >= 250, "the long prompt was read beside the streams (--prompt-lane)",
        `${lanePrompts} prompts, ${laneTokens} tokens`);
  // A longer prompt beginning with the long one (its beginning found in a slot's or the prefix cache:
  // copied to the background context first, only the rest read there), again beside streams.
  const longer = { prompt: long.prompt + "The dog ran to the park. ".repeat(12), max_tokens: 8 };
  const longerAlone = (await singleClient.completions.create({ model: "stories260K", prompt: longer.prompt,
                                                               max_tokens: longer.max_tokens, temperature: 0 })).choices[0].text;
  const besideLonger = streams.map((r) => askLaned(r));
  await new Promise((r) => setTimeout(r, 5));
  const [longerLaned, ...besideLongerText] = await Promise.all([askLaned(longer), ...besideLonger]);
  const l2 = await (await fetch(laned.base + "/metrics")).text();
  const longerTokens = metric(l2, "zinc_lane_prompt_tokens_total") - metric(l1, "zinc_lane_prompt_tokens_total");  // (its new part only)
  check(longerLaned === longerAlone && besideLongerText.every((t, i) => t === streamsAlone[i]) &&
          metric(l2, "zinc_lane_prompts_total") - metric(l1, "zinc_lane_prompts_total") === 1 && longerTokens > 100 && longerTokens < 200,
        "a prompt extending a cached one is read beside the streams from where the cache left it",
        JSON.stringify({ longerLaned, longerAlone, longerTokens }));
  const abortLong = new AbortController();
  const beside = streams.slice(0, 3).map((r) => askLaned(r));
  await new Promise((r) => setTimeout(r, 5));
  const gone = askLaned({ prompt: long.prompt + "Then", max_tokens: 50 }, abortLong.signal).catch(() => "aborted");
  await new Promise((r) => setTimeout(r, 5));
  abortLong.abort();
  await gone;
  const besideText = await Promise.all(beside);
  check((await idleSoon(laned.base)) && besideText.every((t, i) => t === streamsAlone[i]) && (await askLaned(long)) === longAlone,
        "a long prompt cancelled while read beside the streams frees its slot; the others keep their answers");

  // Cancelling one of several streams mid-way frees its sequence within a step; the others go on.
  const controller = new AbortController();
  const endless = { prompt: "Once upon a time", max_tokens: 400 };
  const others = requests.slice(0, 3).map((r) => ask(r));
  let got = 0;
  const cancelled = (async () => {
    try {
      const stream = await client.completions.create({ model: "stories260K", prompt: endless.prompt, max_tokens: 400,
                                                        temperature: 0, stream: true }, { signal: controller.signal });
      for await (const chunk of stream) if (chunk.choices[0]?.text && ++got === 5) controller.abort();
    } catch (e) {
      // the abort ends the iteration
    }
  })();
  await cancelled;
  const othersText = await Promise.all(others);
  check(got >= 5 && (await idleSoon(s.base)) && othersText.every((t, i) => t === alone[i]),
        "a stream cancelled mid-way frees its sequence; the others finish with their answers");
} catch (e) {
  check(false, "the batching test ran to the end", e.stack);
} finally {
  stopAll();
}
console.log(failures() ? `${failures()} check(s) failed` : "all checks passed");
process.exit(failures() ? 1 : 0);
