#!/usr/bin/env bash
# Quick start, command 1: install what is missing, build zinc (Release), and run it.
# Until model execution lands, the main job is `zinc inspect` on a GGUF file: the one given as the
# first argument, or the bundled test model when ../shared/testdata is beside the checkout.
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
else
  echo "zinc is built at build/src/zinc. Inspect any GGUF model with: build/src/zinc inspect MODEL.gguf"
fi
