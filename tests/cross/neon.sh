#!/usr/bin/env bash
# The CPU product kernels on AArch64 without an ARM machine: cross-compiles the quantization library and
# its kernel tests (tests/quant/test_dot*.cpp) for AArch64 and runs them under qemu's user-mode emulator:
# plain ARMv8.0 NEON (widening multiplies) on a CPU without the dot-product extension, the same on one
# with it (the packed kernels, packed_neon.cpp, run), and ARMv8.2 with the extension throughout (SDOT).
# Every NEON kernel then meets the scalar reference, as the x86 kernels do natively.
# Usage: tests/cross/neon.sh [OUT_DIR] [-- gtest arguments]
# Needs Debian's g++-aarch64-linux-gnu, qemu-user and libgtest-dev (sources under /usr/src/googletest);
# scripts/deps.sh --test installs them. Exits 2 (a skip to ctest) where one is missing. About a minute
# on 2 cores, most of it compiling.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/build-neon}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
cxx=aarch64-linux-gnu-g++
for tool in "$cxx" qemu-aarch64; do
  command -v "$tool" >/dev/null || { echo "neon.sh: $tool not found (scripts/deps.sh --test installs it)" >&2; exit 2; }
done
gtest=/usr/src/googletest/googletest
[ -f "$gtest/src/gtest-all.cc" ] || { echo "neon.sh: $gtest not found (libgtest-dev)" >&2; exit 2; }
mkdir -p "$out/inc"
# fmt is header-only here; only its headers are shared with the host (no other host include directory).
ln -sfn /usr/include/fmt "$out/inc/fmt"

sources=(src/core/big_buffer.cpp src/core/knobs.cpp src/core/system_info.cpp src/core/thread_pool.cpp
         src/gguf/types.cpp
         src/quant/fp16.cpp src/quant/quant_info.cpp src/quant/dequantize.cpp src/quant/quantize.cpp
         src/quant/dot_ref.cpp src/quant/dot_dispatch.cpp src/quant/matmul.cpp src/quant/dot_neon.cpp
         src/quant/dot_avx2.cpp src/quant/dot_avx512.cpp
         src/quant/packed.cpp src/quant/packed_avx2.cpp src/quant/packed_avx512.cpp src/quant/packed_amx.cpp src/quant/packed_neon.cpp
         tests/quant/test_dot.cpp tests/quant/test_dot_isa.cpp)
common=(-std=c++20 -O2 -DFMT_HEADER_ONLY -I"$root/src" -I"$root/tests/unit" -isystem "$out/inc"
        -isystem "$gtest/include")

# One object directory per target; an object is rebuilt when its source or any header of the project
# is newer (a stamp file holds the newest header's time).
# A third argument names a build whose objects this one links, compiling only the sources that read
# the target's features (#if __ARM_FEATURE_DOTPROD: dot_neon.cpp); the rest compile to the same code.
build() {
  local name=$1 march=$2 dir="$out/$1" objs=() base=${3:-}
  mkdir -p "$dir"
  local headers="$dir/.headers"
  touch -d "@$(find "$root/src" "$root/tests/unit" -name '*.h' -printf '%T@\n' | sort -n | tail -n1)" "$headers"
  local gobj="$out/gtest-all.o" mobj="$out/gtest_main.o"
  [ -f "$gobj" ] || "$cxx" -std=c++20 -O1 -I"$gtest/include" -I"$gtest" -c "$gtest/src/gtest-all.cc" -o "$gobj"
  [ -f "$mobj" ] || "$cxx" -std=c++20 -O1 -I"$gtest/include" -c "$gtest/src/gtest_main.cc" -o "$mobj"
  local pids=() src obj flags
  for src in "${sources[@]}"; do
    obj="$dir/$(basename "${src%.cpp}").o"
    if [ -n "$base" ] && [ "$src" != src/quant/dot_neon.cpp ]; then
      objs+=("$out/$base/$(basename "${src%.cpp}").o")
      continue
    fi
    objs+=("$obj")
    [ "$obj" -nt "$root/$src" ] && [ "$obj" -nt "$headers" ] && continue
    flags=()
    # The reference code's exact rounding, as src/quant/CMakeLists.txt compiles it.
    local m=$march
    case $src in
      */packed_neon.cpp) m=armv8.2-a+dotprod ;;  # used only where the CPU reports the extension
      */dequantize.cpp) flags=(-ffp-contract=off) ;;
      */quantize.cpp | */dot_ref.cpp) flags=(-ffp-contract=off -fno-trapping-math) ;;
    esac
    "$cxx" "${common[@]}" -march="$m" "${flags[@]}" -c "$root/$src" -o "$obj" &
    pids+=($!)
    if [ ${#pids[@]} -ge "$(nproc)" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
  done
  for p in "${pids[@]}"; do wait "$p"; done
  # (GoogleTest's unused socket listener makes the static link warn about getaddrinfo.)
  "$cxx" -static -o "$dir/zinc_quant_tests" "${objs[@]}" "$gobj" "$mobj" -lpthread 2>&1 | { grep -v "getaddrinfo\|MakeConnection" || true; } >&2
}

status=0
# Compiled for plain ARMv8.0 (the row kernels widen with SMULL) or with the dot product (SDOT); run on an
# emulated Cortex-A72 (no dot product: no packed kernels) or on qemu's "max" CPU (every extension it
# knows: the packed kernels run).
# (The fourth field: the build whose objects a build links, as build's third argument.)
for variant in "armv8-a:neon:cortex-a72" "armv8-a:neon:max" "armv8.2-a+dotprod:neon-dotprod:max:neon"; do
  IFS=: read -r march name cpu base <<<"$variant"
  echo "== $name (-march=$march) on -cpu $cpu"
  build "$name" "$march" "$base"
  # qemu's user-mode emulation of this threaded program hangs now and then, blocked, not spinning (3 of
  # some 60 runs here; not reproduced in a loop of 34): a run past 2 minutes (it takes seconds) is said
  # and run again, twice at most.
  rc=124 log="$out/$name/run-$cpu.log"
  for attempt in 1 2 3; do
    rc=0
    timeout 120 qemu-aarch64 -cpu "$cpu" "$out/$name/zinc_quant_tests" "$@" >"$log" 2>&1 || rc=$?
    [ $rc -eq 124 ] || break
    echo "neon.sh: emulated run $attempt hung (2 minutes)" >&2
  done
  grep -E '^\[  (PASSED|SKIPPED|FAILED) +\] [0-9]+ test' "$log" || true
  [ $rc -eq 0 ] || { grep -B3 -A12 'Failure$' "$log" | head -n 80; status=1; }
  # The NEON cases must run, not skip: the emulated CPU reports NEON, and the dot product on "max".
  if grep -q "does not run neon" "$log"; then
    echo "neon.sh: the NEON kernel cases were skipped (the emulated CPU's features were not read)" >&2
    status=1
  fi
  if [ "$cpu" = max ] && grep -q "runs no packed kernels" "$log"; then
    echo "neon.sh: the packed kernels did not run on a CPU with the dot product" >&2
    status=1
  fi
done
exit $status
