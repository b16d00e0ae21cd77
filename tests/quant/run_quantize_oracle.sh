#!/usr/bin/env bash
# `zinc quantize` output loaded by the reference implementation: greedy text from BOS must stay close
# to the F32 model's. Limits (stories260K, 200 tokens): Q8_0 and F16 must agree on at least 100 leading
# tokens and stay within 0.5 of the first-step logits (F16: 0.05); the 4-bit mixtures (mostly Q4_0/Q5_0
# here, as 64-wide rows rule out K-quant blocks) on at least 16 tokens — the first sentences — within 2.0.
# Usage: run_quantize_oracle.sh ZINC WORKDIR TESTDATA ORACLE_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
zinc=$1 work=$2 testdata=$3 oracle=$4
if [ ! -d "$oracle/node_modules/node-llama-cpp" ]; then
  echo "oracle not installed: run 'npm install --prefix tests/oracle --omit=optional --ignore-scripts'" >&2
  exit 1
fi
rm -rf "$work" && mkdir -p "$work"
src="$testdata/models/stories260K.gguf"
for t in F16 Q8_0 Q4_0 Q4_K_M; do "$zinc" quantize "$src" "$work/$t.gguf" "$t" >/dev/null; done
node "$here/llama_greedy.mjs" "$oracle" 200 "$src" \
  "$work/F16.gguf:100:0.05" "$work/Q8_0.gguf:100:0.5" "$work/Q4_0.gguf:16:2.0" "$work/Q4_K_M.gguf:16:2.0"
