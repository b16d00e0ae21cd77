#!/usr/bin/env bash
# Quick start, command 1: install what is missing, build zinc (Release), and run a model.
# The model: the GGUF file or managed id given as the first argument; by default Qwen3-0.6B, pulled
# from Hugging Face (about 640 MB). Without a network, the test model in ../shared/testdata is used
# when it sits beside the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target zinc zinc_share -j "$(nproc)"
zinc=./build/src/zinc

$zinc check
echo
model=${1:-qwen3:0.6b}
chat=(--chat --no-think)
if [ ! -f "$model" ] && ! $zinc pull "$model"; then
  fallback=../shared/testdata/models/stories260K.gguf
  [ -f "$fallback" ] || exit 1
  echo "zinc: could not pull $model; running the test model instead" >&2
  model=$fallback
  chat=()
fi
echo
$zinc run -m "$model" "${chat[@]}" -p "Once upon a time" -n 64
echo
echo "Chat with it: $zinc chat -m $model    Serve it: $zinc serve -m $model (then open http://127.0.0.1:8080/)"
