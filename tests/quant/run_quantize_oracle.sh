#!/usr/bin/env bash
# `zinc quantize` output checked through the reference implementation. Each mixture of stories260K (F16,
# Q8_0, Q4_0, Q4_K_M; its 64- and 172-wide rows make Q4_K_M fall back to Q5_0/Q8_0/F16) is stored only in
# formats defined by their rounding, so the reference quantizer's bytes are the right answer: a twin file
# holds them (zinc_quant_reference_twin), and the reference implementation must give bit-identical logits
# for zinc's file and its twin, at every position of the prompt. A negative control (Q8_0 against Q4_0)
# shows the comparison sees a change of format.
# Usage: run_quantize_oracle.sh ZINC TWIN_TOOL WORKDIR TESTDATA ORACLE_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
zinc=$1 twin=$2 work=$3 testdata=$4 oracle=$5
source "$here/../oracle/require.sh"
require_oracle "$oracle" node-llama-cpp
rm -rf "$work" && mkdir -p "$work"
src="$testdata/models/stories260K.gguf"
pairs=()
for t in F16 Q8_0 Q4_0 Q4_K_M; do
  "$zinc" quantize "$src" "$work/$t.gguf" "$t" >"$work/$t.log" 2>&1 || { cat "$work/$t.log" >&2; exit 1; }
  "$twin" "$src" "$work/$t.gguf" "$work/${t}_reference.gguf"
  pairs+=("$work/$t.gguf" "$work/${t}_reference.gguf")
done
node "$here/llama_logits.mjs" --all-positions "$oracle" exact "${pairs[@]}"
node "$here/llama_logits.mjs" --all-positions "$oracle" differ "$work/Q8_0.gguf" "$work/Q4_0.gguf"
