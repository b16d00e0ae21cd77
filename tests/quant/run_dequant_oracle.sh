#!/usr/bin/env bash
# Dequantization checked bit for bit against the reference implementation (see make_oracle_models.cpp).
# Usage: run_dequant_oracle.sh MODELS_TOOL WORKDIR TESTDATA ORACLE_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tool=$1 work=$2 testdata=$3 oracle=$4
source "$here/../oracle/require.sh"
require_oracle "$oracle" node-llama-cpp
rm -rf "$work" && mkdir -p "$work"
"$tool" "$work" "$testdata/models/stories260K.gguf" >/dev/null
pairs=()
for f in "$work"/emb_*_zinc_f32.gguf; do pairs+=("${f%_zinc_f32.gguf}.gguf" "$f"); done
node "$here/llama_logits.mjs" --all-positions "$oracle" exact "${pairs[@]}"
node "$here/llama_logits.mjs" --all-positions "$oracle" differ "$work/emb_Q4_K_zinc_f32.gguf" "$work/control_Q4_K_one_ulp_f32.gguf"
