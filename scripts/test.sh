#!/usr/bin/env bash
# Quick start, command 2: install what is missing, build, and run every test:
#   1. Release build (g++): unit tests, CLI tests through the real binary, and oracle tests that
#      compare zinc with independent implementations from npm (tests/oracle);
#   2. sanitizer build (clang, ASan + UBSan): the pure-CPU unit tests again, and the GGUF fuzzer for
#      ZINC_FUZZ_SECONDS (default 60) seconds;
#   3. the tests that run the CPU's numeric kernels (models, sessions, oracles, dot products) again
#      under every other kernel path this CPU can run (ZINC_CPU_ISA=avx2, scalar, ...), so a machine
#      with AVX-512 also sees what an AVX2-only or a plain x86-64 machine would.
# Exits non-zero on any failure. Build directories: build/ and build-san/.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
fuzz_seconds=${ZINC_FUZZ_SECONDS:-60}

scripts/deps.sh --test
echo "== test oracles (npm, pinned)"
npm install --prefix tests/oracle --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error

echo "== release build"
# Without a GPU here the CUDA kernels only need to compile: one architecture (Hopper's) checks that, in
# under half the time of the four a distributable build makes (536 -> 251 CPU-seconds measured). A build
# directory configured before keeps its choice.
cuda_archs=()
if ! nvidia-smi -L >/dev/null 2>&1 && ! grep -qs '^ZINC_CUDA_ARCHS:' build/CMakeCache.txt; then
  cuda_archs=(-DZINC_CUDA_ARCHS=90)
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DZINC_BUILD_TESTS=ON "${cuda_archs[@]}" >/dev/null
cmake --build build -j "$jobs"

echo "== sanitizer build"
# -O1 with line tables: what the sanitizers' reports need (file:line in every frame), in less compile
# time than -O2 -g (single files measured: 71 -> 56 s, 86 -> 30 s). The tests' own sources stay at -O1
# there too: at -O0 they compiled 40% faster but the tokenizer and vocabulary cases, which parse large
# JSON files in test code, ran 4-6 times longer (the stage's tests 480 -> 760 s). No Vulkan backend: the
# sanitizer stage runs no device case, and its sources and shaders are ~200 CPU-seconds here.
CC=clang CXX=clang++ cmake -S . -B build-san -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZINC_BUILD_TESTS=ON \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" -DZINC_TEST_OPT=-O1 -DZINC_SANITIZE=ON -DZINC_FUZZ=ON -DZINC_FUZZ_SECONDS="$fuzz_seconds" -DZINC_CUDA=OFF -DZINC_VULKAN=OFF >/dev/null
cmake --build build-san -j "$jobs" --target zinc_unit_test_targets zinc_fuzz_gguf_reader zinc_fuzz_safetensors zinc_fuzz_tokenizer zinc_fuzz_grammar zinc_gguf_samples

status=0
# ctest leaves an old list of failed tests in place when none fail: start each run without one.
rm -f build/Testing/Temporary/LastTestsFailed.log build-san/Testing/Temporary/LastTestsFailed.log
echo "== tests (release)"
(cd build && ctest -j "$jobs" --output-on-failure) | tee build/ctest.log || status=1
cp build/Testing/Temporary/LastTestsFailed.log build/failed.log 2>/dev/null || rm -f build/failed.log
cp build/Testing/Temporary/LastTest.log build/last.log 2>/dev/null || true
echo "== tests (ASan + UBSan) and fuzzing (${fuzz_seconds}s)"
(cd build-san && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest -j "$jobs" -L 'unit|fuzz' --output-on-failure) | tee build-san/ctest.log || status=1
grep -h "Done [0-9]* runs" build-san/Testing/Temporary/LastTest.log 2>/dev/null | sed 's/^/fuzz: /' || true
cp build-san/Testing/Temporary/LastTestsFailed.log build-san/failed.log 2>/dev/null || rm -f build-san/failed.log
cp build-san/Testing/Temporary/LastTest.log build-san/last.log 2>/dev/null || true

# The kernel paths: the one the CPU runs by default, and the others it can run (zinc check says).
kernels=$(build/src/zinc check | sed -n 's/^cpu kernels: \([a-z0-9]*\) (this CPU runs: \([a-z0-9 ]*\);.*/\1:\2/p')
native=${kernels%%:*}
others=$(for k in ${kernels#*:}; do [ "$k" = "$native" ] || echo "$k"; done)
isa_tests='^(Ops|Architectures|Stories260K|Generate|ChatSession|Session|KvCache|RecurrentState|GptOss|GptOssOps|CpuGemma4Ops|SsmConv|QuantFixture|ModelQuantize|Dot|VulkanRealWeights|Cli)[./]|^oracle\.'
# Not again under the other kernel paths: the GPUs' own cases (the op suite's Vulkan and CUDA cases judge the
# GPU against a double-precision definition; the fixture cases that compare it with the CPU repeat the
# CPU fixtures' own checks) and the web page in a browser. Half of these passes' time, no CPU kernel.
isa_skip='VulkanFixture|VulkanWarmUp|CudaFixture|/vulkan_|_vulkan|/cuda_|_cuda$|^oracle\.web_page'
logs=(build/ctest.log build-san/ctest.log)
for isa in $others; do
  echo "== tests on the $isa kernels (ZINC_CPU_ISA=$isa)"
  mkdir -p "build/isa-$isa"
  rm -f build/Testing/Temporary/LastTestsFailed.log
  (cd build && ZINC_CPU_ISA=$isa ctest -j "$jobs" -R "$isa_tests" -E "$isa_skip" --output-on-failure) | tee "build/isa-$isa/ctest.log" || status=1
  cp build/Testing/Temporary/LastTestsFailed.log "build/isa-$isa/failed.log" 2>/dev/null || rm -f "build/isa-$isa/failed.log"
  cp build/Testing/Temporary/LastTest.log "build/isa-$isa/last.log" 2>/dev/null || true
  logs+=("build/isa-$isa/ctest.log")
done

# One closing line over both runs.
passed=0 failed=0 skipped=0
for log in "${logs[@]}"; do
  line=$(grep -E "tests passed, [0-9]+ tests? failed out of [0-9]+" "$log" | tail -n1 || true)
  total=$(sed -n 's/.*out of \([0-9]*\).*/\1/p' <<<"$line")
  bad=$(sed -n 's/.*passed, \([0-9]*\) tests\? failed.*/\1/p' <<<"$line")
  if [ -z "$total" ]; then status=1; continue; fi
  skip=$(grep -c "\*\*\*Skipped" "$log" || true)
  passed=$((passed + total - bad - skip)) failed=$((failed + bad)) skipped=$((skipped + skip))
done
[ "$failed" -eq 0 ] || status=1
# The failed tests' own output once more, last, where a short tail of the log still shows it.
for log in "${logs[@]}"; do
  dir=$(dirname "$log")
  [ -f "$dir/failed.log" ] || continue
  while IFS=: read -r _ name; do
    echo "== output of $name ($dir)"
    awk -v t="Testing: $name" '$0 ~ t"$" {on=1} on {print} on && /<end of output>/ {exit}' "$dir/last.log" | tail -n 40
  done <"$dir/failed.log"
done
cpu=$(sed -n 's/^zinc [^·]*· [^·]*· \(.*\)$/\1/p' <(build/src/zinc check) | head -n1)
echo "machine: $cpu; $(build/src/zinc check | sed -n 's/^cpu features: //p')"
echo "kernel paths tested: $native (this CPU's)${others:+, then $(echo $others | sed 's/ /, /g') (forced with ZINC_CPU_ISA)}"
echo "tests: $passed passed, $failed failed, $skipped skipped"
exit $status
