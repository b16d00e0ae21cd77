#!/bin/bash
# The CUDA checks of a change, in one device call (the GPU machine has no network and takes a copy of
# the tree of at most 64 MiB): `pack` here, then `run` there with carry [".devbin", ".gl"].
#
#   tools/device/cuda_check.sh pack        # build/ must be built; moves tests/models/fixtures aside
#   (device) bash tools/device/cuda_check.sh run [quick | lane]
#   tools/device/cuda_check.sh unpack      # here again: the fixtures back
#
# pack: the zinc binary, the CUDA tests, the products' and the overlap benches (xz), the shared
# libraries they link, a subset of the model fixtures (qwen3, gemma3, qwen3_moe, qwen3_next,
# qwen3_5_moe, gpt_oss, gemma4_moe) and the Vulkan loader's packages (.gl) into .devbin; the fixtures' folder moved to
# /tmp/zinc_fixtures (the tree's copy must stay small). run: every Cuda* kernel test, the fixture tests
# of speculative steps, sequences stepped together, Q4_K_M logits, a background context beside another
# and a sequence taken from another context on those fixtures, the products'
# bench at 1 and 8 tokens, the 35b's greedy text with --spec off, on and auto (md5 of the token ids:
# equal, or a row's arithmetic depends on the step), and qwen3-8b's speed alone, 8 together and through
# the scheduler at 1, 8 and 16, and a 4,096-token prompt beside 8 streams with --prompt-lane 0 and 512
# (quick: the tests only; lane: the tests, a prompt's product and decode's side by side on two streams and
# on green contexts, then the long prompt chunked, on its own context (the default green context of 8 in
# 11 multiprocessors), sharing every multiprocessor, and on 88 and 104). Logs land in $OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/device/common.sh
mode=${1:-}
fixtures=(qwen3 gemma3 qwen3_moe qwen3_next qwen3_5_moe gpt_oss gemma4_moe)
case "$mode" in
pack)
  mkdir -p .devbin
  xz -T2 -3 -c build/src/zinc > .devbin/zinc.xz
  xz -T2 -3 -c build/tests/cuda/zinc_cuda_tests > .devbin/cut.xz
  xz -T2 -3 -c build/bench/zinc_cuda_matvec_bench > .devbin/mvb.xz
  xz -T2 -3 -c build/bench/zinc_cuda_overlap_bench > .devbin/ovb.xz
  device_pack_libs
  device_pack_fixtures_and_gl "${fixtures[@]}"
  ;;
unpack)
  device_unpack
  ;;
run)
  device_prepare zinc cut mvb ovb
  # The fixture parameters' indices (tests/models): qwen3 2, gemma3 3, qwen3_moe 6, qwen3_next 7,
  # qwen3_5_moe 9, gpt_oss 10, gemma4_moe 12.
  filter=''
  for i in 2 3 6 7 9 10 12; do
    filter="$filter*SpeculativeSteps*/$i:*SequencesSteppedTogetherMatchEachAlone*/$i:*Q4_K_MLogitsStayClose*/$i:"
    filter="$filter*BackgroundContextBesideAnother*/$i:*SequenceTakenFromAnotherContext*/$i:"
  done
  # A 4,096-token prompt beside 8 streams: chunked within their steps (lane 0) or read on a context of
  # its own (then its two contexts' steps also timed directly); the tag, the lane, then knobs.
  long_prompt() {
    local tag=$1 lane=$2
    shift 2
    env "$@" timeout 200 /tmp/zinc bench -m /tmp/q8.gguf --backend cuda -p 64 -n 128 --concurrency 8 --long-prompt 4096 \
      --prompt-lane "$lane" > "$OUT/$tag.log" 2>&1
    echo "$tag $* (exit $?):"
    local got
    got=$(grep -E 'concurrency 8:|background|rounds|multiprocessors' "$OUT/$tag.log" | sort -u)
    if [ -n "$got" ]; then echo "$got"; else tail -n 5 "$OUT/$tag.log"; fi
  }
  set +e
  device_tests "kernel tests" kernels.log 200 /tmp/cut --gtest_filter='Cuda*'
  device_tests "fixture tests" fixtures.log 200 /tmp/cut --gtest_filter="$filter"
  [ "${2:-}" = quick ] && exit 0
  if [ "${2:-}" = lane ]; then
    cd /tmp
    timeout 120 /tmp/ovb 200 88 64 40 2>&1 | tee "$OUT/overlap.txt"
    /tmp/zinc synth qwen3-8b /tmp/q8.gguf 2>&1 | tail -1
    long_prompt lane_0 0
    long_prompt lane_512 512
    long_prompt lane_512_shared 512 ZINC_CUDA_LANE_SMS=0
    long_prompt lane_512_sms88 512 ZINC_CUDA_LANE_SMS=88
    long_prompt lane_512_sms104 512 ZINC_CUDA_LANE_SMS=104
    exit 0
  fi
  for n in 1 8; do timeout 120 /tmp/mvb $n 200 > "$OUT/products_$n.txt" 2>&1; done
  grep -h auto "$OUT"/products_*.txt | head -40
  cd /tmp
  /tmp/zinc synth qwen3.6-35b-a3b /tmp/q35.gguf 2>&1 | tail -1
  for spec in off on auto; do
    /tmp/zinc --json run -m /tmp/q35.gguf --backend cuda -p "The history of the city" -n 48 --temp 0 --spec $spec > /tmp/o.json 2> /tmp/e.log
    echo "spec $spec: $(python3 -c 'import json,hashlib; d=json.load(open("/tmp/o.json")); print(hashlib.md5(str(d["tokens"]).encode()).hexdigest()[:8], "drafted", d["draft_tokens"], "%.1f tok/s" % d["timings"]["decode_tokens_per_s"])')"
  done
  /tmp/zinc synth qwen3-8b /tmp/q8.gguf 2>&1 | tail -1
  timeout 100 /tmp/zinc bench -m /tmp/q8.gguf --backend cuda -p 0 -n 128 --runs 2 --parallel 8 2>&1 | grep -E '^\| tg'
  timeout 150 /tmp/zinc bench -m /tmp/q8.gguf --backend cuda -p 0 -n 128 --concurrency 1,8,16 2>&1 | grep -E '^\| (1|8|16) '
  long_prompt lane_0 0
  long_prompt lane_512 512
  ;;
*)
  sed -n '2,16p' "$0"
  exit 2
  ;;
esac
