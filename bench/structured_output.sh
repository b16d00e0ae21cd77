#!/usr/bin/env bash
# Constrained against free decoding: the same model, prompt, sampler and seed, with and without a JSON
# schema, alternating runs; prints the median decode tok/s of each and their ratio, and how many tokens
# the grammar made the sampler choose again (a random-weight model's choices almost never fit, so every
# step takes the masked path: the worst case for the grammar's cost).
# Usage: [TEMP=0.8] [SCHEMA=JSON] bench/structured_output.sh ZINC MODEL.gguf [RUNS=5] [extra zinc run options...]
# SCHEMA replaces the default schema (an array of 200 objects of four typed properties).
set -euo pipefail
zinc=$1 model=$2 runs=${3:-5} temp=${TEMP:-0.8}
shift $(( $# < 3 ? $# : 3 ))
schema=${SCHEMA:-}
[ -n "$schema" ] || schema='{"type":"array","minItems":200,"items":{"type":"object","properties":{"id":{"type":"integer"},"ok":{"type":"boolean"},"kind":{"enum":["alpha","beta","gamma"]},"name":{"type":"string"}},"required":["id","ok","kind","name"]}}'
run() {
  "$zinc" run --json -m "$model" -p "List the items as JSON" -n 256 --temp "$temp" --seed 5 "$@" |
    python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["timings"]["decode_tokens_per_s"], len(j["tokens"]), j.get("grammar_resamples", 0), 1e3 * j.get("grammar_s", 0) / max(1, len(j["tokens"])))'
}
free=() constrained=() resamples=0 tokens=0 ms=0
for ((i = 0; i < runs; i++)); do
  read -r f _ _ _ < <(run "$@")
  read -r c n r g < <(run -j "$schema" "$@")
  free+=("$f") constrained+=("$c") resamples=$r tokens=$n ms=$g
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mf=$(median "${free[@]}") mc=$(median "${constrained[@]}")
echo "| decode (256 tokens, temperature $temp) | tok/s (median of $runs) |"
echo "|---|---|"
echo "| free | $mf |"
echo "| JSON schema | $mc ($resamples of $tokens tokens chosen over the whole mask; $(printf %.3f "$ms") ms per token choosing under the grammar) |"
echo "| ratio | $(python3 -c "print(f'{$mc/$mf:.3f}')") |"
