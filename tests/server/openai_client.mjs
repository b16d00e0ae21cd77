// zinc serve driven by the official OpenAI client (npm "openai", pinned in tests/oracle) over loopback:
// chat and completions, streaming and not, stop sequences, logprobs, usage, tools reaching the
// template, error shapes and statuses, API keys, a client that disconnects mid-stream, and 16
// concurrent streaming clients. stories260K with greedy sampling makes every answer deterministic;
// its published greedy text is the oracle for the completions endpoint, and `zinc run` (the same
// engine without HTTP) for chat.
// Usage: node openai_client.mjs ORACLE_DIR ZINC STORIES.gguf PUBLISHED_TEXT TEMPLATES_DIR
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { testRun } from "./start_server.mjs";

const [oracleDir, zinc, model, publishedFile, templates] = process.argv.slice(2);
const require = createRequire(path.resolve(oracleDir, "package.json"));
const OpenAI = require("openai").default ?? require("openai");
const published = readFileSync(publishedFile, "utf8");
const { check, start: startServer, stopAll, failures } = testRun(zinc, model);

async function expectError(what, promise, status, param, code) {
  try {
    await promise;
    check(false, what, "no error");
  } catch (e) {
    const ok = e.status === status && (param === undefined || e.param === param) && (code === undefined || e.code === code);
    check(ok, what, `status ${e.status} param ${e.param} code ${e.code}: ${e.message}`);
  }
}

try {
  const s = await startServer(["-c", "512", "--parallel", "4", "--queue", "64", "--context-shift", "--keep", "1"]);
  const client = new OpenAI({ baseURL: s.base + "/v1", apiKey: "none", maxRetries: 0 });

  const models = await client.models.list();
  check(models.data.length === 1 && models.data[0].id === "stories260K", "models.list names the served model");

  // Chat, not streamed: the same text as zinc run --chat on the same engine.
  const messages = [{ role: "user", content: "Once upon a time" }];
  const chat = await client.chat.completions.create({ model: "stories260K", messages, max_tokens: 24, temperature: 0 });
  const direct = JSON.parse(execFileSync(zinc, ["run", "--chat", "--json", "-m", model, "-p", "Once upon a time", "-n", "24"],
                                         { encoding: "utf8" }));
  const text = chat.choices[0].message.content;
  check(text === direct.content, "chat answer equals zinc run --chat", JSON.stringify([text, direct.content]));
  check(chat.choices[0].finish_reason === "length" && chat.usage.completion_tokens === 24 &&
        chat.usage.prompt_tokens === direct.prompt_tokens && chat.usage.total_tokens === chat.usage.prompt_tokens + 24,
        "chat usage and finish_reason", JSON.stringify(chat.usage));
  check(chat.object === "chat.completion" && chat.id.startsWith("chatcmpl-") && chat.choices[0].message.role === "assistant",
        "chat completion object");

  // Streamed: role first, the same text in deltas, a finish chunk, then usage.
  const stream = await client.chat.completions.create({ model: "stories260K", messages, max_tokens: 24, temperature: 0,
                                                        stream: true, stream_options: { include_usage: true } });
  let streamed = "", first = null, finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    if (first === null) first = c.delta;
    if (c.delta.content) streamed += c.delta.content;
    if (c.finish_reason) finish = c.finish_reason;
  }
  check(first && first.role === "assistant", "stream starts with the role");
  // Pieces that pile up while a chunk is being written go out together, so the count varies.
  check(streamed === text && chunks >= 3, "stream carries the same text in deltas", JSON.stringify([streamed, text, chunks]));
  check(finish === "length" && usage && usage.completion_tokens === 24, "stream ends with finish_reason and usage");

  // Completions continue the prompt with stories260K's published greedy text.
  const comp = await client.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 30, temperature: 0 });
  check(published.startsWith("Once upon a time" + comp.choices[0].text), "completion follows the published text",
        comp.choices[0].text);
  const stopped = await client.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 30,
                                                    temperature: 0, stop: ["girl"] });
  check(stopped.choices[0].text === ", there was a little " && stopped.choices[0].finish_reason === "stop",
        "stop sequence ends the text before it", JSON.stringify(stopped.choices[0]));
  const cstream = await client.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 30,
                                                    temperature: 0, stream: true });
  let ctext = "";
  for await (const chunk of cstream) ctext += chunk.choices[0]?.text ?? "";
  check(ctext === comp.choices[0].text, "streamed completion equals the non-streamed one");

  // Logprobs.
  const lp = await client.chat.completions.create({ model: "stories260K", messages, max_tokens: 5, temperature: 0,
                                                    logprobs: true, top_logprobs: 3 });
  const content = lp.choices[0].logprobs?.content ?? [];
  check(content.length === 5 && content.every((t) => t.top_logprobs.length === 3 && t.logprob <= 0 &&
                                                    t.top_logprobs[0].logprob >= t.top_logprobs[2].logprob),
        "logprobs with top alternatives", JSON.stringify(content[0]));

  // Errors: OpenAI's shape and statuses.
  await expectError("temperature out of range is 400", client.chat.completions.create(
    { model: "stories260K", messages, temperature: 5 }), 400, "temperature");
  // Serving one model, a request naming another (a client set up for another server) is answered by
  // it, and the answer names the real one; --strict-model-names makes that a 404 (below).
  const renamed = await client.chat.completions.create({ model: "gpt-4o", messages, max_tokens: 3, temperature: 0 });
  check(renamed.model === "stories260K" && renamed.usage.completion_tokens === 3, "another model's name is served by this one",
        renamed.model);
  await expectError("a json_schema with a pattern is 400", client.chat.completions.create(
    { model: "stories260K", messages, response_format: { type: "json_schema", json_schema: { name: "x", schema: { pattern: "a" } } } }),
    400, "response_format.json_schema.schema");
  await expectError("n > 1 is 400", client.chat.completions.create({ model: "stories260K", messages, n: 2 }), 400, "n");
  await expectError("a prompt longer than the context is 400", client.completions.create(
    { model: "stories260K", prompt: "The cat sat on the mat. ".repeat(200) }), 400, "prompt", "context_length_exceeded");
  await expectError("an image part is 400", client.chat.completions.create(
    { model: "stories260K", messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] }),
    400, "messages[0].content[0]");
  const raw = await fetch(s.base + "/v1/chat/completions", { method: "POST", body: "{not json" });
  const rawBody = await raw.json();
  check(raw.status === 400 && rawBody.error?.type === "invalid_request_error", "invalid JSON is a 400 error object");
  // curl -d @body.json sends a form content type: a JSON body over 8 KB is still read as JSON.
  const padded = await fetch(s.base + "/v1/completions", { method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: '{"prompt": "Once upon a time", "max_tokens": 2, "temperature": 0' + " ".repeat(10000) + "}" });
  const paddedBody = await padded.json().catch(() => ({}));
  check(padded.status === 200 && paddedBody.usage?.completion_tokens === 2,
        "a 10 KB JSON body with curl's form content type is answered", `${padded.status} ${JSON.stringify(paddedBody)}`);

  // A client that disconnects mid-stream: the slot is freed and the cancel counted.
  const controller = new AbortController();
  const endless = await client.chat.completions.create({ model: "stories260K", messages, temperature: 0, stream: true },
                                                       { signal: controller.signal });
  let got = 0;
  try {
    for await (const chunk of endless) {
      if (chunk.choices[0]?.delta?.content && ++got === 3) controller.abort();
    }
  } catch (e) {
    // the abort ends the iteration
  }
  let idle = false, cancelled = 0;
  for (let i = 0; i < 100 && !idle; i++) {
    await new Promise((r) => setTimeout(r, 50));
    const h = await (await fetch(s.base + "/health")).json();
    const m = await (await fetch(s.base + "/metrics")).text();
    cancelled = Number((m.match(/^zinc_requests_cancelled_total (\d+)/m) || [0, 0])[1]);
    idle = h.slots_busy === 0 && cancelled >= 1;
  }
  check(got >= 3 && idle, "a disconnect mid-stream cancels the request and frees its slot", `got ${got}, cancelled ${cancelled}, idle ${idle}`);

  // 16 concurrent streaming clients on 4 slots: all finish, each with the single-request answer.
  const runs = await Promise.all(Array.from({ length: 16 }, async () => {
    const st = await client.chat.completions.create({ model: "stories260K", messages, max_tokens: 24, temperature: 0, stream: true });
    let t = "";
    for await (const chunk of st) t += chunk.choices[0]?.delta?.content ?? "";
    return t;
  }));
  check(runs.every((t) => t === text), "16 concurrent streams each get the same answer", JSON.stringify(runs.filter((t) => t !== text)));

  // Tools reach the template (a Qwen3 template renders them); a tool result round trip is accepted.
  const t = await startServer(["-c", "2048", "--chat-template", path.join(templates, "Qwen-Qwen3-0.6B.jinja")]);
  const tc = new OpenAI({ baseURL: t.base + "/v1", apiKey: "none", maxRetries: 0 });
  const tools = [{ type: "function", function: { name: "get_weather", description: "Weather in a city",
                                                 parameters: { type: "object", properties: { city: { type: "string" } } } } }];
  const plain = await tc.chat.completions.create({ messages, max_tokens: 4, temperature: 0 });
  const withTools = await tc.chat.completions.create({ messages, tools, max_tokens: 4, temperature: 0 });
  const roundTrip = await tc.chat.completions.create({ tools, max_tokens: 4, temperature: 0, messages: [
    ...messages,
    { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function",
                                                      function: { name: "get_weather", arguments: "{\"city\":\"Paris\"}" } }] },
    { role: "tool", tool_call_id: "call_1", content: "sunny" }] });
  check(withTools.usage.prompt_tokens > plain.usage.prompt_tokens + 20 &&
        roundTrip.usage.prompt_tokens > withTools.usage.prompt_tokens, "tools and tool results reach the template",
        `${plain.usage.prompt_tokens} ${withTools.usage.prompt_tokens} ${roundTrip.usage.prompt_tokens}`);

  // zinc serve -n N: the limit of a request that sets none (the web page sends none); max_tokens wins.
  const limited = await startServer(["-n", "5", "--strict-model-names", "--log-level", "info"]);
  let serverLog = "";
  limited.proc.stderr.on("data", (d) => { serverLog += d; });
  const lc = new OpenAI({ baseURL: limited.base + "/v1", apiKey: "none", maxRetries: 0 });
  const unlimited = await lc.chat.completions.create({ messages, temperature: 0 });
  const unlimitedText = await lc.completions.create({ prompt: "Once upon a time", temperature: 0 });
  const explicit = await lc.chat.completions.create({ messages, temperature: 0, max_tokens: 7 });
  check(unlimited.usage.completion_tokens === 5 && unlimited.choices[0].finish_reason === "length" &&
        unlimitedText.usage.completion_tokens === 5 && explicit.usage.completion_tokens === 7,
        "serve -n is the default max_tokens of chat and completions requests",
        `${unlimited.usage.completion_tokens} ${unlimitedText.usage.completion_tokens} ${explicit.usage.completion_tokens}`);
  await expectError("with --strict-model-names an unknown model is 404", lc.chat.completions.create(
    { model: "gpt-nonexistent", messages }), 404, "model", "model_not_found");
  await new Promise((r) => setTimeout(r, 100));
  check(/POST \/v1\/chat\/completions 200 \d+ ms/.test(serverLog) && /POST \/v1\/chat\/completions 404/.test(serverLog) &&
        /completion: \d+ prompt tokens \(0 cached\), 5 generated \(length\)/.test(serverLog),
        "--log-level info logs each request and each completion", serverLog.slice(-600));

  // A full queue: one slot busy with an endless answer, no waiting room: the next request is a 503.
  const q = await startServer(["--parallel", "1", "--queue", "0", "-c", "256", "--context-shift"]);
  const busy = new AbortController();
  const qc = new OpenAI({ baseURL: q.base + "/v1", apiKey: "none", maxRetries: 0 });
  const endlessStream = await qc.chat.completions.create({ messages, temperature: 0, stream: true }, { signal: busy.signal });
  const iterator = endlessStream[Symbol.asyncIterator]();
  await iterator.next();  // the slot is working
  await expectError("a full queue is 503", qc.chat.completions.create({ messages, max_tokens: 2 }), 503);
  busy.abort();
  await iterator.next().catch(() => {});
  const big = await fetch(q.base + "/v1/completions", { method: "POST", body: "x".repeat(9 << 20) });
  const bigBody = await big.json().catch(() => ({}));
  check(big.status === 413 && bigBody.error?.message?.includes("larger than the server accepts"), "a body over --max-body is 413",
        `${big.status} ${JSON.stringify(bigBody)}`);

  // CORS: the allowed origin is answered; a page of any other origin is refused (403), so it can
  // neither read answers nor make the server work (a text/plain POST would skip the preflight).
  const cors = await startServer(["--cors-origin", "http://app.example"]);
  const pre = await fetch(cors.base + "/v1/chat/completions", { method: "OPTIONS",
    headers: { Origin: "http://app.example", "Access-Control-Request-Method": "POST" } });
  const other = await fetch(cors.base + "/v1/models", { headers: { Origin: "http://elsewhere.example" } });
  check(pre.status === 204 && pre.headers.get("access-control-allow-origin") === "http://app.example" &&
        (pre.headers.get("access-control-allow-headers") || "").includes("Authorization") &&
        other.status === 403 && other.headers.get("access-control-allow-origin") === null,
        "CORS answers the allowed origin only");

  // An API key: required on the API, not on the page or health.
  const k = await startServer(["--api-key", "sesame"]);
  await expectError("a missing API key is 401", new OpenAI({ baseURL: k.base + "/v1", apiKey: "wrong", maxRetries: 0 })
    .models.list(), 401);
  const ok = await new OpenAI({ baseURL: k.base + "/v1", apiKey: "sesame", maxRetries: 0 }).models.list();
  check(ok.data.length === 1, "the right API key is accepted");
  check((await fetch(k.base + "/health")).status === 200 && (await fetch(k.base + "/")).status === 200,
        "health and the page need no key");
} catch (e) {
  check(false, "test run", e.stack || String(e));
} finally {
  stopAll();
}
process.exit(failures() ? 1 : 0);
