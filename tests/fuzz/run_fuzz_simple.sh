#!/usr/bin/env bash
# Runs a libFuzzer target for a bounded time, seeded with the given files.
# Usage: run_fuzz_simple.sh FUZZER WORKDIR SECONDS [SEED_FILE...]
set -euo pipefail
fuzzer=$1 work=$2 seconds=$3
shift 3
rm -rf "$work" && mkdir -p "$work/corpus" "$work/artifacts"
for f in "$@"; do [ -f "$f" ] && cp "$f" "$work/corpus/"; done
"$fuzzer" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$work/corpus" 2>&1 | tail -n 30
