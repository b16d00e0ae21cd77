#!/usr/bin/env bash
# Matrix-vector bandwidth of zinc's CPU kernels next to the prebuilt llama.cpp's decode on the same
# shapes (one 4096×14336 FFN layer plus attention, every matrix in the given type).
# Usage: bench/compare_llamacpp.sh BUILD_DIR TOKENIZER.gguf [TYPES] [THREADS]
# Needs tests/oracle/node_modules (npm ci --prefix tests/oracle --omit=optional --ignore-scripts).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$1 tok=$2 types=${3:-Q4_0,Q8_0,Q4_K,Q6_K} threads=${4:-$(nproc)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "| type | zinc matvec GB/s (4096×14336) | llama.cpp decode GB/s (model bytes × tok/s) | llama.cpp tok/s |"
echo "|---|---|---|---|"
for t in ${types//,/ }; do
  ours=$("$build/bench/zinc_quant_bench" --types "$t" --threads "$threads" --skip-matmul --json | \
         node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).results[0].matvec_gbs.toFixed(1)))')
  "$build/bench/zinc_make_ffn_model" "$work/$t.gguf" "$t" "$tok"
  theirs=$(node "$root/bench/llamacpp_decode.mjs" "$root/tests/oracle" "$work/$t.gguf" 32 "$threads")
  echo "| $t | $ours | $(node -e "const r=$theirs;console.log(r.gbs.toFixed(1)+' | '+r.tokens_per_s.toFixed(2))") |"
  rm -f "$work/$t.gguf"
done
