#!/usr/bin/env bash
# Runs the GGUF reader fuzzer for a bounded time from generated seeds plus the shared test files.
# Usage: run_fuzz.sh FUZZER SEEDGEN WORKDIR TESTDATA SECONDS
set -euo pipefail
fuzzer=$1 seedgen=$2 work=$3 testdata=$4 seconds=$5
rm -rf "$work" && mkdir -p "$work/corpus" "$work/artifacts"
"$seedgen" "$work/corpus"
seeds=("$work/corpus")
[ -d "$testdata/models" ] && seeds+=("$testdata/models")
[ -d "$testdata/vocab" ] && seeds+=("$testdata/vocab")
# Inputs longer than -max_len are cut, so the large real files seed header-level mutations.
"$fuzzer" -max_total_time="$seconds" -max_len=8192 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "${seeds[@]}" 2>&1 | tail -n 40
