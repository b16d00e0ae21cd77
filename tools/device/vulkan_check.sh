#!/bin/bash
# The Vulkan checks and knob measurements of a change, in one device call (the GPU machine has no
# network and takes a copy of the tree of at most 64 MiB): `pack` here, then `run` there with carry
# [".devbin", ".gl"].
#
#   tools/device/vulkan_check.sh pack      # build/ must be built; moves tests/models/fixtures aside
#   (device) bash tools/device/vulkan_check.sh run tests
#   (device) bash tools/device/vulkan_check.sh run ab PRESET DEPTHS KNOB V1 V2 [V...]
#   tools/device/vulkan_check.sh unpack    # here again: the fixtures back
#
# pack: the zinc binary, the Vulkan and op-suite tests (xz), the shared libraries they link, a subset
# of the model fixtures (qwen3, qwen3_moe, qwen3_5_moe, gpt_oss, gemma4_moe) and the Vulkan loader's
# packages (.gl) into .devbin; the fixtures' folder moved to /tmp/zinc_fixtures.
# run tests: every Vulkan kernel test, the fixture tests on that subset, the op suite on Vulkan.
# run ab: `zinc synth PRESET` (Q4_K_M), then for each depth of DEPTHS (comma-separated) `zinc bench
# -p 0 -n 64 --runs 2` with KNOB at each value in turn, the whole round twice (so a drifting clock
# shows), then the md5 of 32 greedy token ids with each value (equal: the knob changed no choice) and
# how many of them are the CPU backend's.
# A value `-` leaves KNOB unset. For example, the router split on the 30b:
#   run ab qwen3-30b-a3b 0,4096 ZINC_VULKAN_ROUTER_SPLIT 0 1
# Logs land in $OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/device/common.sh
fixtures=(qwen3 qwen3_moe qwen3_5_moe gpt_oss gemma4_moe)
indices=(2 6 9 10 12)  # their places in the fixture suites' parameter list (tests/vulkan/test_vk_fixtures.cpp)
case "${1:-}" in
pack)
  mkdir -p .devbin
  xz -T2 -6 -c build/src/zinc > .devbin/zinc.xz
  xz -T2 -6 -c build/tests/vulkan/zinc_vulkan_tests > .devbin/vt.xz
  xz -T2 -6 -c build/tests/ops/zinc_op_tests > .devbin/ops.xz
  device_pack_libs
  rm -rf .devbin/fx
  device_pack_fixtures_and_gl "${fixtures[@]}"
  ;;
unpack)
  device_unpack
  ;;
run)
  device_prepare zinc vt ops
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
  set +e
  case "${2:-}" in
  tests)
    # Suites parameterised by fixture name run on the packed subset only (qwen3_5 and qwen3_next left out).
    device_tests "kernel tests" kernels.log 300 /tmp/vt \
      --gtest_filter='-*VulkanFixture.*:*VulkanWarmUp.*:*VulkanDecodeCodes.*:*VulkanNormTails.*:*VulkanGateAdd.*:*VulkanGateNorm.*:*VulkanRecurrentTails.*:*/qwen3_5_vulkan:*/qwen3_next_vulkan'
    filter='*VulkanDecodeCodes.*/0:*VulkanDecodeCodes.*/1:*VulkanNormTails.*/1:*VulkanWarmUp.*/0:*VulkanWarmUp.*/1:*VulkanWarmUp.*/3:*VulkanGateAdd.*/0:*VulkanGateNorm.*/0:*VulkanRecurrentTails.*/1:'
    for i in "${indices[@]}"; do filter="${filter}*VulkanFixture.*/$i:"; done
    device_tests "fixture tests" fixtures.log 300 /tmp/vt --gtest_filter="$filter"
    device_tests "op suite on Vulkan" ops.log 300 /tmp/ops --gtest_filter='Ops/OpSuite.*/vulkan_*:RouterSplit.*:BlockRouter.*:SharedExpertEarly.*:DenseGlu.*:ConvTail.*:GateTail.*'
    ;;
  ab)
    preset=${3:?preset}
    depths=${4:?depths}
    [ "$depths" = - ] && depths=  # (- : no speed rows, the greedy ids only)
    knob=${5:?knob}
    shift 5
    [ $# -ge 1 ] || { echo "values?"; exit 2; }
    cd /tmp
    /tmp/zinc synth "$preset" /tmp/ab.gguf > "$OUT/synth.log" 2>&1 || { tail -3 "$OUT/synth.log"; exit 1; }
    with() {  # with VALUE command...: the command with the knob at VALUE (- unset)
      local v=$1
      shift
      if [ "$v" = - ]; then env -u "$knob" "$@"; else env "$knob=$v" "$@"; fi
    }
    for d in ${depths//,/ }; do
      for round in 1 2; do
        for v in "$@"; do
          row=$(with "$v" /tmp/zinc bench -m /tmp/ab.gguf --backend vulkan -p 0 -n 64 --depth "$d" --runs 2 2>&1 | tee -a "$OUT/bench.log" |
                grep -E '^\| *tg' | head -1)
          echo "$preset depth $d round $round $knob=$v: $row"
        done
      done
    done
    greedy() {  # greedy VALUE BACKEND: the 32 greedy token ids with KNOB at VALUE, one line
      with "$1" /tmp/zinc --json run -m /tmp/ab.gguf --backend "$2" -p "The history of the city" -n 32 --temp 0 2>> "$OUT/run.log" |
        python3 -c 'import json,sys; print(*json.load(sys.stdin)["tokens"])'
    }
    greedy - cpu > "$OUT/ids.cpu" || true
    for v in "$@"; do
      greedy "$v" vulkan > "$OUT/ids.$v"
      python3 - "$OUT/ids.$v" "$OUT/ids.cpu" "$preset greedy ids $knob=$v" <<'PY'
import hashlib, sys
got, cpu = (open(f).read().split() for f in sys.argv[1:3])
first = next((i for i, (a, b) in enumerate(zip(got, cpu)) if a != b), None)
agree = "all 32 the CPU's" if cpu and first is None else f"the CPU's up to token {first}" if cpu else "no CPU ids"
print(f"{sys.argv[3]}: {hashlib.md5(str([int(t) for t in got]).encode()).hexdigest()[:8]} ({agree})")
PY
    done
    ;;
  *)
    sed -n '2,22p' "$0"
    exit 2
    ;;
  esac
  ;;
*)
  sed -n '2,22p' "$0"
  exit 2
  ;;
esac
