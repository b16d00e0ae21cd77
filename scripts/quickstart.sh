#!/usr/bin/env bash
# Quick start, command 1: install what is missing, build zinc (Release), and run it.
# Until model pulls land, the main job runs a GGUF file on the CPU: the one given as the first
# argument, or the test model when ../shared/testdata is beside the checkout. Then `zinc chat -m FILE`.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target zinc -j "$(nproc)"

model=${1:-../shared/testdata/models/stories260K.gguf}
./build/src/zinc check
echo
if [ -f "$model" ]; then
  ./build/src/zinc inspect "$model"
  echo
  ./build/src/zinc run -m "$model" -p "Once upon a time" -n 64
  echo
  echo "Chat with it: build/src/zinc chat -m $model"
else
  echo "zinc is built at build/src/zinc. Run a GGUF model with: build/src/zinc chat -m MODEL.gguf"
fi
