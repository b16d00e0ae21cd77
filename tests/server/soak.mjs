// Soak test of zinc serve over loopback: for SECONDS, well-behaved clients (chat and completions,
// streamed and not, kept-alive connections) share the server with misbehaving ones (clients that
// disconnect mid-answer, malformed and deeply nested bodies, compressed bodies, a million headers,
// slow heads, foreign origins; long prompts, some abandoned while read beside the others). Every
// answer must be the one its request deserves: 200 for good requests, or 503 when the queue is full
// (backpressure, the only error allowed to a good request);
// 400/403/408/413/415/431 for the bad ones. The server's resident memory must stay flat: after the
// first quarter (warm-up: buffers and the allocator's arenas settle), it may not grow by more than
// 64 MB.
// Usage: node soak.mjs ZINC STORIES.gguf SECONDS   (CI: 60; the manual run: 600)
import zlib from "node:zlib";
import { rawRequest, rssKb, startServer, statusOf } from "./start_server.mjs";

const [zinc, model, secondsArg] = process.argv.slice(2);
const seconds = Number(secondsArg || 60);
// (--prompt-lane 64: long prompts arriving while others decode are read on a context of their own,
// and some are abandoned while read there. --cache-mem 0.02: the prefix cache's blocks, which the
// different long prompts fill, stay within 20 MB; it evicts as it goes.)
const s = await startServer(zinc, model, ["-c", "512", "--parallel", "4", "--queue", "8", "-n", "48", "--prompt-lane", "64",
                                          "--cache-mem", "0.02"]);
const rssMb = () => rssKb(s.proc.pid) / 1024;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const end = Date.now() + seconds * 1000;
const tally = new Map();  // "kind status" -> count
const wrong = [];
function count(kind, status, allowed) {
  const key = `${kind} ${status}`;
  tally.set(key, (tally.get(key) || 0) + 1);
  if (!allowed.includes(status) && wrong.length < 20) wrong.push(key);
}
const messages = [{ role: "user", content: "Once upon a time" }];
// A prompt of ~150 tokens, different each time (a repeated one would come from the prefix cache).
const words = ["the", "cat", "sat", "on", "a", "mat", "and", "looked", "at", "sun", "dog", "ran", "to", "park", "big", "tree"];
const longPrompt = () => Array.from({ length: 120 }, () => words[Math.floor(Math.random() * words.length)]).join(" ");
const json = (o) => JSON.stringify(o);
async function post(path, body, headers = {}, signal) {
  const r = await fetch(s.base + path, { method: "POST", body, headers, signal });
  await r.arrayBuffer().catch(() => {});
  return r.status;
}
const raw = (data, ms = 3000) => rawRequest(s.port, data, ms);

const good = [200, 503];
const clients = {
  async chat() {
    count("chat", await post("/v1/chat/completions", json({ messages, max_tokens: 16, temperature: 0.7 })), good);
  },
  async stream() {
    const r = await fetch(s.base + "/v1/chat/completions", { method: "POST",
      body: json({ messages, max_tokens: 24, stream: true }) });
    const text = await r.text();
    count("stream", r.status === 200 && !text.endsWith("data: [DONE]\n\n") ? -1 : r.status, good);
  },
  async completion() {
    count("completion", await post("/v1/completions", json({ prompt: "The cat", max_tokens: 12 })), good);
  },
  async abandon() {  // a non-streamed answer nobody waits for
    const a = new AbortController();
    const p = post("/v1/chat/completions", json({ messages, max_tokens: 400 }), {}, a.signal).catch(() => "aborted");
    await sleep(50 + Math.random() * 200);
    a.abort();
    count("abandon", await p, ["aborted", 200, 503]);
  },
  async abandonStream() {
    const a = new AbortController();
    try {
      const r = await fetch(s.base + "/v1/chat/completions", { method: "POST", signal: a.signal,
        body: json({ messages, max_tokens: 400, stream: true }) });
      const reader = r.body.getReader();
      await reader.read();
      a.abort();
      count("abandon-stream", r.status, good);
    } catch {
      count("abandon-stream", "aborted", ["aborted"]);
    }
  },
  async long() {
    count("long", await post("/v1/completions", json({ prompt: longPrompt(), max_tokens: 8 })), good);
  },
  async abandonLong() {
    const a = new AbortController();
    const p = post("/v1/completions", json({ prompt: longPrompt(), max_tokens: 64 }), {}, a.signal).catch(() => "aborted");
    await sleep(Math.random() * 20);
    a.abort();
    count("abandon-long", await p, ["aborted", 200, 503]);
  },
  async malformed() {
    count("malformed", await post("/v1/chat/completions", "{\"messages\": [", { "Content-Type": "text/plain" }), [400]);
  },
  async deep() {
    count("deep", await post("/v1/chat/completions", `{"messages":${"[".repeat(5000)}${"]".repeat(5000)}}`), [400]);
  },
  async gzip() {
    count("gzip", await post("/v1/chat/completions", zlib.gzipSync(Buffer.alloc(1 << 20, 32)), { "Content-Encoding": "gzip" }), [415]);
  },
  async tooBig() {
    count("too-big", statusOf(await raw("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 99999999999\r\n\r\n")), [413]);
  },
  async headers() {
    count("headers", statusOf(await raw("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + "X: y\r\n".repeat(5000) + "\r\n")), [431]);
  },
  async foreign() {
    count("foreign-origin", await post("/v1/chat/completions", json({ messages, max_tokens: 1 }), { Origin: "http://evil.example" }), [403]);
  },
  async slowHead() {  // a head that never completes: closed with 408 at the deadline
    const t = await raw("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1\r\n", 12000);
    count("slow-head", statusOf(t), [408, 503]);
  },
  async health() {
    const r = await fetch(s.base + "/health");
    await r.arrayBuffer();
    count("health", r.status, [200]);
  },
};
const names = Object.keys(clients);
const weights = { chat: 4, stream: 4, completion: 3, abandon: 2, abandonStream: 2, health: 3, slowHead: 1 };
const pick = () => {
  const total = names.reduce((a, n) => a + (weights[n] || 1), 0);
  let x = Math.random() * total;
  for (const n of names) if ((x -= weights[n] || 1) < 0) return n;
  return names[0];
};

const samples = [];
const sampler = setInterval(() => samples.push(rssMb()), 1000);
async function worker() {
  while (Date.now() < end) {
    const n = pick();
    try {
      await clients[n]();
    } catch (e) {
      count(n, "exception " + (e.cause?.code || e.message), []);
    }
  }
}
await Promise.all(Array.from({ length: 12 }, worker));
clearInterval(sampler);
await sleep(500);
samples.push(rssMb());
const alive = (await fetch(s.base + "/health")).status === 200;
const metrics = alive ? await (await fetch(s.base + "/metrics")).text() : "";
const lanes = Number((metrics.match(/^zinc_lane_prompts_total ([0-9]+)/m) || [0, 0])[1]);
s.proc.kill("SIGTERM");

const warm = samples[Math.floor(samples.length / 4)] || samples[0];
const last = samples[samples.length - 1], peak = Math.max(...samples);
const flat = last - warm <= 64;
let total = 0;
for (const v of tally.values()) total += v;
console.log(`soak ${seconds} s: ${total} requests; ${[...tally].sort().map(([k, v]) => `${k}: ${v}`).join(", ")}`);
console.log(`rss: ${samples[0]?.toFixed(0)} MB at start, ${warm.toFixed(0)} after warm-up, ${last.toFixed(0)} at the end, ` +
            `${peak.toFixed(0)} peak`);
console.log(`long prompts read beside the others: ${lanes}`);
const ok = wrong.length === 0 && flat && alive && lanes > 0;
console.log(`${ok ? "ok" : "FAIL"} soak: ${wrong.length ? "unexpected answers: " + wrong.join(", ") : "every answer as expected"}` +
            `; memory ${flat ? "flat" : "grew"} (${(last - warm).toFixed(1)} MB after warm-up); server ${alive ? "alive" : "dead"}`);
process.exit(ok ? 0 : 1);
