#!/usr/bin/env bash
# Runs the chat fuzzer for a bounded time, seeded with the shared chat templates (as templates, mode byte
# 0) and the output-parser tests' markers. Usage: run_fuzz_chat.sh FUZZER WORKDIR TEMPLATES SECONDS
set -euo pipefail
fuzzer=$1 work=$2 templates=$3 seconds=$4
rm -rf "$work" && mkdir -p "$work/corpus" "$work/artifacts"
if [ -d "$templates" ]; then
  for f in "$templates"/*.jinja; do
    { printf '\x00'; cat "$f"; } > "$work/corpus/$(basename "$f")"
  done
fi
printf '\x81<think>\nr\n</think>\n\n<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>' > "$work/corpus/hermes"
printf '\x83<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a":1}<|call|>' > "$work/corpus/harmony"
printf '\x82<|python_tag|>{"name": "f", "parameters": {"a": 1}}' > "$work/corpus/llama3"
"$fuzzer" -max_total_time="$seconds" -max_len=20000 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$work/corpus" 2>&1 | tail -n 40
