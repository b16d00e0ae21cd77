#!/usr/bin/env bash
# Rotary scaling against llama.cpp: stories260K rewritten with linear, YaRN and per-pair frequency
# factors; next-token logits after a 35-token prompt must match llama.cpp's on each file within the
# float32 summation bound derived in compare_probs.mjs, and llama.cpp's own change of the probabilities
# from the unscaled model must be ten times larger than the difference.
# Usage: run_rope_variants.sh ORACLE_DIR EVAL_TOOL MAKE_VARIANT_TOOL STORIES.gguf WORKDIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
oracle=$1 eval_tool=$2 make_variant=$3 model=$4 work=$5
prompt="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her mom."
rm -rf "$work" && mkdir -p "$work"
status=0
for kind in linear yarn freqs; do
  "$make_variant" "$model" "$work/$kind.gguf" "$kind"
  node "$here/compare_probs.mjs" "$oracle" "$eval_tool" "$work/$kind.gguf" "$prompt" 2e-4 "$model" || status=1
done
exit $status
