// zinc serve under attack, over loopback, as docs/SECURITY.md describes it: each check is a finding of
// the hardening review and fails on a server without its fix.
//   deep JSON (request body, template kwargs, tool schemas, tool-call arguments) -> 400 naming the limit
//   compressed bodies -> 415 (never inflated past --max-body)
//   slow heads (slowloris) -> the server keeps answering; the slow sockets are closed at the head deadline,
//     or earlier to make room when their client holds more than its share of connections
//   too many headers -> 431, and memory stays flat
//   a template that grows strings without bound -> 400, memory bounded
//   an abandoned non-streamed request -> its slot is freed
//   foreign Host (DNS rebinding) and foreign Origin (any web page) -> 403; --allowed-hosts widens
//   a second server on a port in use -> exit 1, "already in use"
//   /tokenize with a non-boolean flag, logit_bias ids past 32 bits -> 400
// Usage: node hardening.mjs ZINC STORIES.gguf
import net from "node:net";
import zlib from "node:zlib";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { spawn } from "node:child_process";
import { rawRequest as raw, rssKb, statusOf, testRun } from "./start_server.mjs";

const [zinc, model] = process.argv.slice(2);
const { check, start: startServer, stopAll, failures } = testRun(zinc, model);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function post(base, path, body, headers = {}) {
  const r = await fetch(base + path, { method: "POST", body, headers });
  return { status: r.status, body: await r.text() };
}
const nested = (n, inner = "1") => "[".repeat(n) + inner + "]".repeat(n);
const messages = [{ role: "user", content: "Once upon a time" }];

try {
  const s = await startServer(["-c", "256", "--parallel", "4", "--context-shift", "-n", "100000"]);
  const health = async () => (await fetch(s.base + "/health")).status === 200;

  // 1. Deep nesting anywhere in a request: a 400 that names the limit, and the server lives on.
  for (const [where, body] of [
    ["the body", `{"messages":${nested(20000)}}`],
    ["chat_template_kwargs", `{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"x":${nested(20000)}}}`],
    ["tools[].function.parameters", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function",` +
                                    `"function":{"name":"f","parameters":${nested(20000)}}}]}`],
    ["tool-call arguments", JSON.stringify({ messages: [{ role: "user", content: "hi" }, { role: "assistant", content: null,
      tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: nested(20000) } }] }] })],
  ]) {
    const r = await post(s.base, "/v1/chat/completions", body, { "Content-Type": "text/plain" });
    check(r.status === 400 && r.body.includes("more than 128 levels") && await health(),
          `JSON nested 20,000 deep in ${where} is a 400 naming the limit`, `${r.status} ${r.body.slice(0, 200)}`);
  }
  const justUnder = await post(s.base, "/v1/chat/completions", JSON.stringify(
    { messages, max_tokens: 1, chat_template_kwargs: { x: JSON.parse(nested(100)) } }));
  check(justUnder.status === 200, "nesting within the limit is served", `${justUnder.status} ${justUnder.body.slice(0, 200)}`);

  // 2. A gzip body is refused before anything is inflated.
  const bomb = zlib.gzipSync(Buffer.alloc(20 << 20, 32));
  const before = rssKb(s.proc.pid);
  const gz = await post(s.base, "/v1/chat/completions", bomb, { "Content-Encoding": "gzip", "Content-Type": "application/json" });
  check(gz.status === 415 && gz.body.includes("Content-Encoding"), "a gzip body is a 415", `${gz.status} ${gz.body}`);
  check(rssKb(s.proc.pid) - before < 20000, "and inflates nothing", `${before} -> ${rssKb(s.proc.pid)} kB`);

  // 4. A million headers: 431 after the first hundred, memory flat.
  const manyHeaders = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + "X-A: b\r\n".repeat(1000000) + "\r\n";
  const rssBefore = rssKb(s.proc.pid);
  const answers = await Promise.all(Array.from({ length: 8 }, () => raw(s.port, manyHeaders)));
  check(answers.every((a) => statusOf(a) === 431), "a request with 1,000,000 headers is a 431",
        answers.map(statusOf).join(","));
  check(rssKb(s.proc.pid) - rssBefore < 50000, "and 8 of them leave memory flat", `${rssBefore} -> ${rssKb(s.proc.pid)} kB`);

  // 7. Browser safety: a foreign Host (DNS rebinding) and a foreign page's Origin are refused.
  const rebinding = await raw(s.port, "GET /v1/models HTTP/1.1\r\nHost: evil.example:8080\r\nConnection: close\r\n\r\n");
  check(statusOf(rebinding) === 403 && rebinding.includes("host_not_allowed"), "Host: evil.example is a 403", rebinding.slice(0, 200));
  for (const host of ["localhost", `127.0.0.1:${s.port}`, `[::1]:${s.port}`, `localhost:${s.port}`]) {
    const ok = await raw(s.port, `GET /health HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
    check(statusOf(ok) === 200, `Host: ${host} is served`, ok.slice(0, 100));
  }
  const foreign = await post(s.base, "/v1/chat/completions", JSON.stringify({ messages, max_tokens: 1 }),
                             { "Content-Type": "text/plain", Origin: "http://evil.example" });
  check(foreign.status === 403 && foreign.body.includes("origin_not_allowed"), "a text/plain POST from another page is a 403",
        `${foreign.status} ${foreign.body}`);
  const same = await post(s.base, "/v1/chat/completions", JSON.stringify({ messages, max_tokens: 1 }),
                          { "Content-Type": "text/plain", Origin: s.base });
  check(same.status === 200, "the server's own page is served", `${same.status} ${same.body.slice(0, 200)}`);
  // A page served by this machine (a local app on another port) is served, and told so by CORS; a
  // name that merely starts like one is not.
  for (const [origin, want] of [["http://localhost:3000", 200], ["http://127.0.0.1:5173", 200], ["http://[::1]:8000", 200],
                                ["http://localhost.evil.example", 403], ["http://127.0.0.1:80.evil.example", 403]]) {
    const r = await post(s.base, "/v1/chat/completions", JSON.stringify({ messages, max_tokens: 1 }),
                         { "Content-Type": "application/json", Origin: origin });
    check(r.status === want, `Origin ${origin} is ${want}`, `${r.status} ${r.body.slice(0, 120)}`);
  }
  const wide = await startServer(["--allowed-hosts", "zinc.lan"]);
  const lan = await raw(wide.port, "GET /health HTTP/1.1\r\nHost: zinc.lan:8080\r\nConnection: close\r\n\r\n");
  const evil = await raw(wide.port, "GET /health HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n");
  check(statusOf(lan) === 200 && statusOf(evil) === 403, "--allowed-hosts widens the list by name", `${statusOf(lan)} ${statusOf(evil)}`);

  // 10. Small ones: a non-boolean flag and a 33-bit token id are 400s.
  const tk = await post(s.base, "/tokenize", JSON.stringify({ content: "hi", add_special: "yes" }));
  check(tk.status === 400 && tk.body.includes("add_special"), "/tokenize with a non-boolean flag is a 400", `${tk.status} ${tk.body}`);
  for (const id of ["4294967296", "512", "99999999999999999999"]) {
    const lb = await post(s.base, "/v1/chat/completions", JSON.stringify({ messages, max_tokens: 1, logit_bias: { [id]: 100 } }));
    check(lb.status === 400 && lb.body.includes("logit_bias"), `logit_bias token ${id} is a 400`, `${lb.status} ${lb.body}`);
  }

  // 3. Slowloris: 100 connections sending one header line a second. The server keeps answering,
  //    and the slow sockets are closed at the head deadline (10 s).
  const slow = Array.from({ length: 100 }, () => {
    const sock = net.connect(s.port, "127.0.0.1");
    const st = { sock, closedAt: 0, got: "" };
    sock.on("error", () => {});
    sock.on("data", (d) => { st.got += d; });
    sock.on("close", () => { st.closedAt = Date.now(); });
    sock.write("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    st.timer = setInterval(() => { if (!sock.destroyed) sock.write("X-Slow: 1\r\n"); }, 1000);
    return st;
  });
  const slowStart = Date.now();
  await sleep(2000);
  const t0 = Date.now();
  const during = await fetch(s.base + "/v1/chat/completions", { method: "POST",
    body: JSON.stringify({ messages, max_tokens: 4, temperature: 0 }) });
  check(during.status === 200 && await health() && Date.now() - t0 < 3000,
        "the server answers while 100 slow clients trickle their heads", `${during.status} in ${Date.now() - t0} ms`);

  // 6. Abandoned non-streamed requests free their slots (meanwhile the slow heads run out of time).
  const aborts = Array.from({ length: 4 }, () => new AbortController());
  const pending = aborts.map((a) => fetch(s.base + "/v1/chat/completions", { method: "POST", signal: a.signal,
    body: JSON.stringify({ messages, temperature: 0, max_tokens: 100000 }) }).catch(() => null));
  await sleep(700);
  const busy = (await (await fetch(s.base + "/health")).json()).slots_busy;
  aborts.forEach((a) => a.abort());
  await Promise.all(pending);
  let idle = false, cancelled = 0;
  for (let i = 0; i < 60 && !idle; i++) {
    await sleep(50);
    const h = await (await fetch(s.base + "/health")).json();
    cancelled = Number(((await (await fetch(s.base + "/metrics")).text()).match(/^zinc_requests_cancelled_total (\d+)/m) || [0, 0])[1]);
    idle = h.slots_busy === 0 && cancelled >= 4;
  }
  check(busy === 4 && idle, "4 abandoned non-streamed requests free their 4 slots within 3 s", `busy ${busy}, cancelled ${cancelled}`);

  while (Date.now() - slowStart < 12500 && slow.some((st) => !st.closedAt)) await sleep(200);
  slow.forEach((st) => clearInterval(st.timer));
  const closed = slow.filter((st) => st.closedAt && st.closedAt - slowStart <= 12500);
  // Past 64 connections per client, the stalest slow socket makes room for a new one (503); those
  // left get 408 at the deadline.
  check(closed.length === 100 && slow.every((st) => [408, 503].includes(statusOf(st.got))) &&
        slow.some((st) => statusOf(st.got) === 408),
        "the slow heads are closed: 408 at the deadline, or 503 to make room for newer connections",
        `${closed.length} closed, statuses ${[...new Set(slow.map((st) => statusOf(st.got)))]} ${JSON.stringify(slow.filter((st) => !statusOf(st.got)).map((st) => [st.closedAt - slowStart, st.got]))}`);

  // 5. A template that grows strings (from the request's text) without bound: a 400 that says why,
  //    and memory stays bounded (it took a server to 4.8 GB).
  const dir = mkdtempSync(path.join(tmpdir(), "zinc-hardening-"));
  const hostile = path.join(dir, "hostile.jinja");
  writeFileSync(hostile, "{% set ns = namespace(s=messages[0].content) %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}" +
                         "{% endfor %}{{ ns.s.replace('a', ns.s) }}");
  const t = await startServer(["--chat-template", hostile]);
  const rss0 = rssKb(t.proc.pid);
  const grown = await post(t.base, "/v1/chat/completions", JSON.stringify({ messages: [{ role: "user", content: "aaaa" }] }));
  check(grown.status === 400 && grown.body.includes("string longer than"), "a template growing strings is a 400 that says why",
        `${grown.status} ${grown.body.slice(0, 300)}`);
  check(rssKb(t.proc.pid) - rss0 < 300000, "and its memory stays bounded", `${rss0} -> ${rssKb(t.proc.pid)} kB`);
  rmSync(dir, { recursive: true, force: true });

  // #26: a second server on the same port fails to start instead of sharing it.
  const second = spawn(zinc, ["serve", "-m", model, "--port", String(s.port)], { stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  second.stderr.on("data", (d) => { err += d; });
  const code = await new Promise((r) => second.on("exit", r));
  check(code === 1 && err.includes("already in use"), "a second server on a port in use exits 1", `exit ${code}: ${err}`);
} catch (e) {
  check(false, "test run", e.stack || String(e));
} finally {
  stopAll();
}
process.exit(failures() ? 1 : 0);
