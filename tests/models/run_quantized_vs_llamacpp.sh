#!/usr/bin/env bash
# Every fixture quantized by zinc (F16, Q8_0, Q6_K, Q4_K_M; GPT-OSS also MXFP4_MOE as released) scored by zinc
# and by llama.cpp on the same file against the transformers reference (quantized_vs_llamacpp.mjs).
# The rotary-scaling variants test conversion, not quantization: skipped.
# Usage: run_quantized_vs_llamacpp.sh ZINC EVAL_TOOL FIXTURES_DIR WORKDIR ORACLE_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
zinc=$1 eval_tool=$2 fixtures=$3 work=$4 oracle=$5
source "$here/../oracle/require.sh"
require_oracle "$oracle" node-llama-cpp
rm -rf "$work" && mkdir -p "$work"
cases=()
for d in "$fixtures"/*/; do
  a=$(basename "$d")
  case "$a" in llama_rope_llama3|qwen3_yarn) continue ;; esac
  "$zinc" --json convert "$d" "$work/$a.gguf" --outtype f32 >/dev/null
  mixtures="F16 Q8_0 Q6_K Q4_K_M"
  [ "$a" = gpt_oss ] && mixtures="$mixtures MXFP4_MOE"
  for m in $mixtures; do
    "$zinc" quantize "$work/$a.gguf" "$work/${a}_$m.gguf" "$m" >"$work/${a}_$m.log" 2>&1 || { cat "$work/${a}_$m.log" >&2; exit 1; }
    cases+=("$a:$m")
  done
done
node "$here/quantized_vs_llamacpp.mjs" "$oracle" "$eval_tool" "$fixtures" "$work" "${cases[@]}"
