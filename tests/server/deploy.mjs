// The scale-out recipe of docs/DEPLOY.md, run as written: three `zinc serve` replicas behind HAProxy with
// deploy/haproxy.cfg (only its addresses replaced by free loopback ports). Requests with the same
// beginning go to the same replica (prefix affinity); different ones spread; concurrent clients keep
// asking while one replica is killed (SIGKILL): every answer that had not started streaming when it died
// is retried on another replica, so the only requests lost are streams it was in the middle of sending,
// and after the health checks take it out every request is served by the others.
// Usage: node deploy.mjs ZINC STORIES.gguf PUBLISHED_GREEDY.txt CONFIG WORK_DIR
import net from "node:net";
import path from "node:path";
import { spawn, execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { testRun } from "./start_server.mjs";

const [zinc, model, publishedPath, configPath, work] = process.argv.slice(2);
const published = readFileSync(publishedPath, "utf8");
const { check, start, stopAll, failures } = testRun(zinc, model);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const freePort = () => new Promise((resolve) => {
  const srv = net.createServer().listen(0, "127.0.0.1", () => { const p = srv.address().port; srv.close(() => resolve(p)); });
});

let haproxy = null;
try {
  execFileSync("haproxy", ["-v"], { stdio: "ignore" });
} catch {
  console.log("FAIL haproxy is not installed (scripts/deps.sh --test installs it)");
  process.exit(1);
}

try {
  const replicas = [];
  for (let i = 0; i < 3; i++) replicas.push(await start(["--backend", "cpu", "-c", "256", "--parallel", "2", "--alias", "stories"]));
  const lbPort = await freePort();
  let config = readFileSync(configPath, "utf8");
  check(config.includes("bind 127.0.0.1:8080") && [8081, 8082, 8083].every((p) => config.includes(`127.0.0.1:${p} check`)),
        "the recipe's configuration names the addresses the test replaces");
  config = config.replace("bind 127.0.0.1:8080", `bind 127.0.0.1:${lbPort}`);
  replicas.forEach((r, i) => { config = config.replace(`127.0.0.1:${8081 + i} check`, `127.0.0.1:${r.port} check`); });
  mkdirSync(work, { recursive: true });
  writeFileSync(path.join(work, "haproxy.cfg"), config);
  haproxy = spawn("haproxy", ["-db", "-f", path.join(work, "haproxy.cfg")], { stdio: ["ignore", "ignore", "pipe"] });
  let haproxyLog = "";
  haproxy.stderr.on("data", (d) => { haproxyLog += d; });
  const base = `http://127.0.0.1:${lbPort}`;
  let up = false;
  for (let i = 0; i < 100 && !up; i++) {
    try { up = (await fetch(base + "/health")).status === 200; } catch { await sleep(100); }
  }
  check(up, "the balancer answers /health from a replica", haproxyLog);
  await sleep(1200);  // the first health checks pass (rise 2 at 500 ms)

  const ask = async (system, { stream = false, maxTokens = 24 } = {}) => {
    const t0 = Date.now();
    const res = await fetch(base + "/v1/chat/completions", {
      method: "POST", headers: { "content-type": "application/json" }, signal: AbortSignal.timeout(60000),
      body: JSON.stringify({ model: "stories", messages: [{ role: "system", content: system }, { role: "user", content: "Once upon a time" }],
                             max_tokens: maxTokens, temperature: 0, stream }) });
    const servedBy = res.headers.get("x-served-by");
    const text = await res.text();  // throws when the connection is cut mid-stream
    return { status: res.status, servedBy, text, t0, stream };
  };

  // Prefix affinity: the same beginning always lands on the same replica; different ones spread.
  const same = [];
  for (let i = 0; i < 5; i++) same.push((await ask("You tell short stories about a cat.")).servedBy);
  check(same[0] && same.every((s) => s === same[0]), "requests with the same prefix go to the same replica", same.join(","));
  const spread = new Set();
  for (let i = 0; i < 12; i++) spread.add((await ask(`Story number ${i} is about a ${["dog", "bird", "fish"][i % 3]}.`)).servedBy);
  check(spread.size >= 2, "requests with different prefixes spread over the replicas", [...spread].join(","));

  // Concurrent clients for 8 s; one replica killed at 3 s.
  const prompts = Array.from({ length: 24 }, (_, i) => `You are storyteller ${i}.`);
  const results = [];
  let killedAt = 0, killed = "";
  const stopAt = Date.now() + 8000;
  const client = async (w) => {
    for (let k = 0; Date.now() < stopAt; k++) {
      const stream = (w + k) % 3 === 0;
      const t0 = Date.now();
      try {
        results.push(await ask(prompts[(w * 7 + k) % prompts.length], { stream, maxTokens: stream ? 64 : 24 }));
      } catch (e) {
        results.push({ status: 0, error: String(e), t0, stream });
      }
    }
  };
  const killer = (async () => {
    await sleep(3000);
    // The replica that answered last: it is busy.
    const recent = results.filter((r) => r.servedBy).at(-1);
    killed = recent?.servedBy ?? "replica1";
    const index = Number(killed.replace("replica", "")) - 1;
    killedAt = Date.now();
    replicas[index].proc.kill("SIGKILL");
  })();
  await Promise.all([...Array.from({ length: 6 }, (_, w) => client(w)), killer]);

  const ok = results.filter((r) => r.status === 200 && r.text.length > 0);
  const lost = results.filter((r) => !(r.status === 200 && r.text.length > 0));
  const lostNonStream = lost.filter((r) => !r.stream);
  const lostLate = lost.filter((r) => r.t0 > killedAt);
  console.log(`# ${results.length} requests, ${ok.length} answered, ${lost.length} lost (${lostNonStream.length} not streamed), ` +
              `replica ${killed} killed at +3 s`);
  check(results.length >= 30 && ok.length >= results.length - 6, "concurrent clients were served through the balancer",
        `${ok.length} of ${results.length}`);
  check(lostNonStream.length === 0, "no whole (not streamed) request is lost: those on the killed replica are retried",
        JSON.stringify(lostNonStream.slice(0, 3)));
  check(lostLate.length === 0, "no request started after the kill is lost", JSON.stringify(lostLate.slice(0, 3)));
  check(lost.length <= 6, "at most the streams in flight on the killed replica are lost", String(lost.length));
  const afterCheck = results.filter((r) => r.t0 > killedAt + 2000);
  check(afterCheck.length > 0 && afterCheck.every((r) => r.status === 200 && r.servedBy !== killed),
        "once its health checks fail, the other replicas serve everything", JSON.stringify(afterCheck.map((r) => r.servedBy)));
  // Answers through the balancer are the model's own (greedy, same on every replica).
  const plain = await fetch(base + "/v1/completions", { method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "stories", prompt: "Once upon a time", max_tokens: 30, temperature: 0 }) });
  const pj = await plain.json();
  check(published.startsWith("Once upon a time" + pj.choices?.[0]?.text), "an answer through the balancer is the model's greedy text",
        JSON.stringify(pj));
} finally {
  if (haproxy) haproxy.kill("SIGTERM");
  stopAll();
}
console.log(failures() ? `${failures()} checks failed` : "all checks passed");
process.exit(failures() ? 1 : 0);
