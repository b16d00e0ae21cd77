// Many models behind one server (zinc serve --models-dir), through the official OpenAI client and raw
// HTTP: every GGUF file under the directory is listed; a request loads the model it names (by id or
// alias) and is answered by it (stories260K's published greedy text); --max-models 1 unloads the least
// recently used idle model for another, but never one a request is using (that request finishes whole
// and the other waits); keep_alive (the server's and a request's: 0, a duration) unloads idle models;
// /models/load and /models/unload; unknown names are 404s in each API's shape; --models-mem refuses a
// model that cannot fit; `zinc ps` shows what is loaded; /metrics counts loads and unloads; without a
// model or a directory, the installed models are served.
// Usage: node models.mjs ORACLE_DIR ZINC STORIES.gguf PUBLISHED_GREEDY.txt WORK_DIR
import path from "node:path";
import { mkdirSync, rmSync, symlinkSync, readFileSync, writeFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import { testRun } from "./start_server.mjs";

const [oracleDir, zinc, model, publishedPath, work] = process.argv.slice(2);
const require = createRequire(path.resolve(oracleDir, "package.json"));
const OpenAI = require("openai").default ?? require("openai");
const published = readFileSync(publishedPath, "utf8");
const { check, start, stopAll, failures } = testRun(zinc, model);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const metric = (text, name) => Number((text.match(new RegExp(`^${name} ([0-9.e+-]+)`, "m")) || [0, NaN])[1]);

// The directory: stories260K as it is, and a Q8_0 copy of it in a subdirectory (another file, another id).
rmSync(work, { recursive: true, force: true });
mkdirSync(path.join(work, "models", "small"), { recursive: true });
symlinkSync(path.resolve(model), path.join(work, "models", "stories.gguf"));
execFileSync(zinc, ["quantize", model, path.join(work, "models", "small", "stories-q8.gguf"), "Q8_0"], { stdio: "ignore" });

try {
  const s = await start(["--models-dir", path.join(work, "models"), "--backend", "cpu", "-c", "256", "--max-models", "1",
                         "--keep-alive", "1h", "--alias", "tale=stories"], null);
  const client = new OpenAI({ baseURL: s.base + "/v1", apiKey: "none", maxRetries: 0 });
  const models = async () => (await (await fetch(s.base + "/v1/models")).json()).data;
  const status = async (id) => (await models()).find((m) => m.id === id)?.status;
  const metrics = async () => (await fetch(s.base + "/metrics")).text();
  check(/2 models in .*loaded on demand, at most 1 at once, unloaded after 1h idle/.test(s.stderr()),
        "the startup line says where the models are and how they load", s.stderr());

  let list = await models();
  check(list.length === 2 && list.every((m) => m.status === "available"),
        "GET /v1/models lists every GGUF file under the directory, none loaded yet", JSON.stringify(list));
  check(list.find((m) => m.id === "stories")?.aliases?.includes("tale") && list.some((m) => m.id === "small/stories-q8"),
        "models are named by their path without .gguf, with their aliases", JSON.stringify(list.map((m) => [m.id, m.aliases])));

  // A request names a model by its alias: it loads, and the answer is the model's own.
  const first = await client.completions.create({ model: "tale", prompt: "Once upon a time", max_tokens: 30, temperature: 0 });
  check(published.startsWith("Once upon a time" + first.choices[0].text) && first.choices[0].text.length > 40,
        "a request loads the model it names (by alias) and gets its greedy text", first.choices[0].text);
  check(first.model === "stories", "the answer names the model's id", first.model);
  list = await models();
  const st = list.find((m) => m.id === "stories");
  check(st.status === "loaded" && st.meta?.backend === "cpu" && st.meta?.n_ctx === 256 && st.bytes > 0 &&
        st.expires_in > 3500 && st.expires_in <= 3600, "the loaded model shows its backend, context, size and keep-alive",
        JSON.stringify(st));

  // Another model: with --max-models 1 the idle one is unloaded for it.
  const q8 = await client.completions.create({ model: "small/stories-q8", prompt: "Once upon a time", max_tokens: 12, temperature: 0 });
  check(q8.model === "small/stories-q8" && q8.choices[0].text.length > 10, "the second model answers", JSON.stringify(q8));
  check((await status("stories")) === "available" && (await status("small/stories-q8")) === "loaded",
        "--max-models 1: the least recently used idle model was unloaded for it");
  let m = await metrics();
  check(metric(m, "zinc_model_loads_total") === 2 && metric(m, "zinc_model_unloads_total") === 1 &&
        metric(m, "zinc_models_loaded") === 1, "/metrics counts loads and unloads", m.match(/zinc_model.*/g)?.join(" "));

  // No model named: the one used last answers.
  const unnamed = await client.completions.create({ model: "", prompt: "Once upon a time", max_tokens: 4, temperature: 0 });
  check(unnamed.model === "small/stories-q8", "a request naming no model goes to the one used last", unnamed.model);

  // A model in use is never unloaded: a long stream on stories while a request for the other arrives.
  // The stream finishes whole; the other request waits for it, then the other model loads.
  const events = [];
  const long = (async () => {
    const stream = await client.completions.create({ model: "stories", prompt: "Once upon a time", max_tokens: 200,
                                                     temperature: 0, stream: true });
    let text = "", finish = null;
    for await (const c of stream) {
      text += c.choices[0]?.text ?? "";
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    events.push("stream end");
    return { text, finish };
  })();
  while ((await status("stories")) !== "loaded") await sleep(20);
  const other = client.completions.create({ model: "small/stories-q8", prompt: "Once", max_tokens: 4, temperature: 0 })
    .then((r) => { events.push("other answered"); return r; });
  const [longResult, otherResult] = await Promise.all([long, other]);
  check(longResult.finish === "length" && published.startsWith("Once upon a time" + longResult.text.slice(0, 300)),
        "a model in use is not unloaded: its stream ends whole", JSON.stringify(longResult).slice(0, 200));
  check(events.join(",") === "stream end,other answered" && otherResult.model === "small/stories-q8",
        "a request for another model waits for room", events.join(","));

  // Two requests at once for a model that is not loaded: it loads once, both are answered.
  m = await metrics();
  const loadsBefore = metric(m, "zinc_model_loads_total");
  const both = await Promise.all([0, 1].map(() =>
    client.completions.create({ model: "stories", prompt: "Once upon a time", max_tokens: 8, temperature: 0 })));
  m = await metrics();
  check(both.every((r) => r.choices[0].text === both[0].choices[0].text) &&
        metric(m, "zinc_model_loads_total") === loadsBefore + 1, "two requests for an unloaded model load it once",
        `${metric(m, "zinc_model_loads_total")} loads, before ${loadsBefore}`);

  // keep_alive 0: unloaded right after the request (raw body: the field is Ollama's).
  const post = (p, body) => fetch(s.base + p, { method: "POST", headers: { "content-type": "application/json" },
                                               body: JSON.stringify(body) });
  let r = await post("/v1/chat/completions", { model: "stories", messages: [{ role: "user", content: "Hi" }], max_tokens: 4,
                                               temperature: 0, keep_alive: 0 });
  check(r.status === 200, "a request with keep_alive 0 is answered", String(r.status));
  let waited = 0;
  while ((await status("stories")) !== "available" && waited < 5000) { await sleep(50); waited += 50; }
  check(waited < 5000, "keep_alive 0 unloads the model after the request", `${waited} ms`);

  // keep_alive as a duration: idle for it, then unloaded.
  r = await post("/v1/completions", { model: "stories", prompt: "Once", max_tokens: 2, keep_alive: "1s" });
  const idle = (await models()).find((x) => x.id === "stories");
  check(r.status === 200 && idle.status === "loaded" && idle.expires_in <= 1, "keep_alive \"1s\" keeps it a second",
        JSON.stringify(idle));
  waited = 0;
  while ((await status("stories")) !== "available" && waited < 5000) { await sleep(50); waited += 50; }
  check(waited >= 500 && waited < 5000, "... and then unloads it", `${waited} ms`);

  r = await post("/v1/completions", { model: "stories", prompt: "Once", max_tokens: 2, keep_alive: "soon" });
  let body = await r.json();
  check(r.status === 400 && body.error?.param === "keep_alive", "a keep_alive that is no duration is a 400", JSON.stringify(body));

  // Loading and unloading by hand.
  r = await post("/models/load", { model: "tale" });
  check(r.status === 200 && (await status("stories")) === "loaded", "/models/load loads a model", String(r.status));
  r = await post("/models/unload", { model: "stories" });
  waited = 0;
  while ((await status("stories")) !== "available" && waited < 5000) { await sleep(50); waited += 50; }
  check(r.status === 200 && waited < 5000, "/models/unload unloads an idle model", `${r.status}, ${waited} ms`);

  // Unknown names: 404 in each API's shape.
  try {
    await client.chat.completions.create({ model: "nope", messages: [{ role: "user", content: "Hi" }] });
    check(false, "an unknown model is refused");
  } catch (e) {
    check(e.status === 404 && e.code === "model_not_found", "an unknown model is a 404 model_not_found", String(e));
  }
  r = await post("/v1/messages", { model: "nope", max_tokens: 4, messages: [{ role: "user", content: "Hi" }] });
  body = await r.json();
  check(r.status === 404 && body.type === "error" && body.error?.type === "not_found_error",
        "... in Anthropic's shape on /v1/messages", JSON.stringify(body));
  r = await fetch(s.base + "/v1/models/small/stories-q8");
  check(r.status === 200 && (await r.json()).id === "small/stories-q8", "GET /v1/models/ID answers for a model id with a slash");

  // zinc ps: the loaded models (--all: every one).
  await client.completions.create({ model: "stories", prompt: "Once", max_tokens: 2 });
  const ps = execFileSync(zinc, ["ps", "--url", s.base]).toString();
  check(/^model\s+status\s+size/m.test(ps) && /^stories\s+loaded\s+.*cpu\s+256\s+0\/1\s+idle, unloads in (59m|1h)/m.test(ps) &&
        !ps.includes("stories-q8"), "zinc ps lists the loaded model with its backend, context and keep-alive", ps);
  const psAll = execFileSync(zinc, ["ps", "--all", "--url", s.base]).toString();
  check(/^small\/stories-q8\s+available/m.test(psAll), "zinc ps --all lists the models it would load", psAll);

  // A budget the model cannot fit in: a clear 400.
  const tight = await start(["--models-dir", path.join(work, "models"), "--backend", "cpu", "-c", "256",
                             "--models-mem", "0.0001"], null);
  r = await fetch(tight.base + "/v1/completions", { method: "POST", headers: { "content-type": "application/json" },
                                                   body: JSON.stringify({ model: "stories", prompt: "Once", max_tokens: 2 }) });
  body = await r.json();
  check(r.status === 400 && body.error?.code === "model_too_large" && /--models-mem/.test(body.error?.message),
        "a model larger than --models-mem is refused with a 400 that says so", JSON.stringify(body));
  // No model named among several, none loaded: a 400 that lists them.
  r = await fetch(tight.base + "/v1/completions", { method: "POST", headers: { "content-type": "application/json" },
                                                   body: JSON.stringify({ prompt: "Once", max_tokens: 2 }) });
  body = await r.json();
  check(r.status === 400 && body.error?.param === "model" && /stories, small\/stories-q8|small\/stories-q8, stories/.test(body.error?.message),
        "naming no model among several is a 400 listing them", JSON.stringify(body));

  // Without -m or --models-dir: the installed models, by their ids ($ZINC_HOME/models).
  const home = path.join(work, "home");
  mkdirSync(path.join(home, "models", "tiny-stories"), { recursive: true });
  symlinkSync(path.resolve(model), path.join(home, "models", "tiny-stories", "stories.gguf"));
  writeFileSync(path.join(home, "models", "tiny-stories", "zinc.json"),
                JSON.stringify({ id: "tiny:stories", file: "stories.gguf", size: 1 }));
  process.env.ZINC_HOME = home;
  const installed = await start(["--backend", "cpu", "-c", "256"], null);
  const ic = new OpenAI({ baseURL: installed.base + "/v1", apiKey: "none", maxRetries: 0 });
  const answer = await ic.completions.create({ model: "tiny:stories", prompt: "Once upon a time", max_tokens: 20, temperature: 0 });
  check(/1 model in the installed models/.test(installed.stderr()) && answer.model === "tiny:stories" &&
        published.startsWith("Once upon a time" + answer.choices[0].text),
        "zinc serve alone serves the installed models by their ids", installed.stderr() + JSON.stringify(answer));
  process.env.ZINC_HOME = path.join(work, "empty-home");
  let refused = "";
  try {
    execFileSync(zinc, ["serve", "--port", "0"], { stdio: ["ignore", "ignore", "pipe"] });
  } catch (e) {
    refused = String(e.stderr);
  }
  check(/zinc serve needs a model: -m FILE.gguf .*--models-dir DIR.*zinc pull/.test(refused),
        "zinc serve with no model anywhere says how to give one", refused);
} finally {
  stopAll();
}
console.log(failures() ? `${failures()} checks failed` : "all checks passed");
process.exit(failures() ? 1 : 0);
