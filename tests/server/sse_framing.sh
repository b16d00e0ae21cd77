#!/usr/bin/env bash
# The exact bytes of a streamed response, as curl receives them: Content-Type text/event-stream, every
# event "data: <one-line JSON>" followed by a blank line, the role first, one finish chunk, the usage
# chunk when asked for, and "data: [DONE]" last.
# Usage: sse_framing.sh ZINC STORIES.gguf WORKDIR
set -euo pipefail
zinc=$1 model=$2 work=$3
for tool in curl node; do
  command -v $tool >/dev/null || { echo "FAIL: $tool is not installed (scripts/deps.sh --test)"; exit 1; }
done
rm -rf "$work" && mkdir -p "$work"
# The log exists before the server starts: the background job opens it when it gets to run, and a
# read before that would fail (and end the script under set -e).
: >"$work/server.log"
"$zinc" serve -m "$model" --port 0 2>"$work/server.log" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  port=$(sed -n 's|.*http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$work/server.log")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "FAIL: the server did not start"; cat "$work/server.log"; exit 1; }
# --noproxy: a machine whose environment names an HTTP proxy must still reach its own loopback.
curl -sS -N --noproxy '*' --max-time 60 -D "$work/headers" -o "$work/body" \
  "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":12,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}' \
  || { echo "FAIL: curl could not fetch the stream"; cat "$work/server.log"; exit 1; }
grep -qi '^content-type: text/event-stream' "$work/headers" || { echo "FAIL: content type"; cat "$work/headers"; exit 1; }
node - "$work/body" <<'JS'
const fs = require("fs");
const body = fs.readFileSync(process.argv[2], "utf8");
const fail = (m) => { console.log("FAIL: " + m + "\n" + body); process.exit(1); };
if (!body.endsWith("data: [DONE]\n\n")) fail("the stream does not end with data: [DONE] and a blank line");
const events = body.slice(0, -2).split("\n\n");
for (const e of events) if (!/^data: [^\n]+$/.test(e)) fail("an event is not a single data line: " + JSON.stringify(e));
const chunks = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)));
if (chunks[0].choices[0].delta.role !== "assistant") fail("the first chunk does not carry the role");
const finishes = chunks.filter((c) => c.choices.length && c.choices[0].finish_reason);
if (finishes.length !== 1) fail("not exactly one finish chunk");
// Greedy text may reach the end-of-text token early on some instruction sets: then "stop" and fewer tokens.
const reason = finishes[0].choices[0].finish_reason;
const last = chunks[chunks.length - 1];
if (last.choices.length !== 0 || !last.usage) fail("no usage chunk before [DONE]");
const n = last.usage.completion_tokens;
if (!(reason === "length" ? n === 12 : reason === "stop" && n >= 1 && n < 12))
  fail(`finish reason ${reason} with ${n} completion tokens of at most 12`);
if (new Set(chunks.map((c) => c.id)).size !== 1) fail("chunks of one stream have different ids");
console.log(`ok ${events.length} events, role first, one finish chunk, usage, [DONE]`);
JS
