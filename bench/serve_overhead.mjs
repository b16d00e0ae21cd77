// Decode speed through the server against zinc run on the same model, prompt, threads and token count:
// `zinc run --json` reports its own decode tok/s; through HTTP the client times the stream from its
// first token to its last (completions API, greedy, one slot). Prints a markdown table; repeats each
// side and keeps the best, so a busy moment on the machine does not decide the ratio.
// Usage: node bench/serve_overhead.mjs ZINC MODEL.gguf [TOKENS] [THREADS] [REPEATS]
import { execFileSync } from "node:child_process";
import path from "node:path";
import { startServer } from "../tests/server/start_server.mjs";

const [zinc, model, tokensArg = "128", threadsArg = "0", repeatsArg = "3"] = process.argv.slice(2);
const n = Number(tokensArg), repeats = Number(repeatsArg);
const threads = Number(threadsArg) > 0 ? ["-t", threadsArg] : [];
const prompt = "Once upon a time";

let direct = 0;
for (let i = 0; i < repeats; i++) {
  const out = JSON.parse(execFileSync(zinc, ["run", "--json", "-m", model, "-p", prompt, "-n", String(n), "-c", "1024",
                                             ...threads], { encoding: "utf8" }));
  // zinc run times from the first sampled token to the end, like the client below.
  direct = Math.max(direct, out.timings.decode_tokens_per_s);
}

const { port, proc: server } = await startServer(zinc, model, ["-c", "1024", ...threads]);
let http = 0, tokens = 0;
for (let i = 0; i < repeats; i++) {
  const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt, max_tokens: n, temperature: 0, stream: true, stream_options: { include_usage: true } }),
  });
  const reader = res.body.getReader();
  let first = 0, last = 0, buffer = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buffer += Buffer.from(value).toString("utf8");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(6, end);
      buffer = buffer.slice(end + 2);
      if (event === "[DONE]") continue;
      const chunk = JSON.parse(event);
      if (chunk.usage) tokens = chunk.usage.completion_tokens;
      if (chunk.choices?.[0]?.text) {
        const now = performance.now();
        if (!first) first = now;
        last = now;
      }
    }
  }
  // Tokens after the first, over the time between the first and the last one seen.
  if (last > first) http = Math.max(http, (tokens - 1) / ((last - first) / 1000));
}
server.kill("SIGTERM");
console.log("| model | tokens | zinc run decode tok/s | through HTTP tok/s | ratio |");
console.log("|---|---|---|---|---|");
console.log(`| ${path.basename(model)} | ${tokens} | ${direct.toFixed(1)} | ${http.toFixed(1)} | ${(http / direct).toFixed(3)} |`);
