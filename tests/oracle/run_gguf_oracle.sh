#!/usr/bin/env bash
# Cross-checks zinc's GGUF reader with an independent parser on the shared test files and on files
# written by zinc's own writer (so the writer's output must load elsewhere too).
# Usage: run_gguf_oracle.sh ZINC SAMPLES_TOOL WORKDIR TESTDATA
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
zinc=$1 samples=$2 work=$3 testdata=$4
source "$here/require.sh"
require_oracle "$here" @huggingface/gguf
rm -rf "$work" && mkdir -p "$work"
"$samples" "$work"
files=("$work"/*.gguf)
if [ -d "$testdata" ]; then
  files+=("$testdata"/models/*.gguf "$testdata"/vocab/*.gguf)
else
  echo "note: $testdata not found; comparing zinc-written files only" >&2
fi
node "$here/gguf_compare.mjs" "$zinc" "${files[@]}"
