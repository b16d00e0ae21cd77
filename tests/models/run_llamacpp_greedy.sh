#!/usr/bin/env bash
# Converts every fixture with zinc convert (F32) and checks llama.cpp's greedy continuation.
# Usage: run_llamacpp_greedy.sh ZINC FIXTURES_DIR WORKDIR ORACLE_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
zinc=$1 fixtures=$2 work=$3 oracle=$4
source "$here/../oracle/require.sh"
require_oracle "$oracle" node-llama-cpp
rm -rf "$work" && mkdir -p "$work"
archs=()
for d in "$fixtures"/*/; do
  a=$(basename "$d")
  "$zinc" convert "$d" "$work/$a.gguf" --outtype f32 >/dev/null
  archs+=("$a")
done
node "$here/llamacpp_greedy.mjs" "$oracle" "$fixtures" "$work" "${archs[@]}"
