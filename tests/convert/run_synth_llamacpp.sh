#!/usr/bin/env bash
# zinc synth for each architecture the engine runs (two blocks each; Gemma 4 six, to reach its first
# global layer), then the llama.cpp comparison. The files (about 5 GB) are removed afterwards.
# Usage: run_synth_llamacpp.sh ZINC EVAL_TOOL ORACLE_DIR WORKDIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
zinc=$1 eval_tool=$2 oracle=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
"$zinc" synth qwen3-0.6b "$work/qwen3.gguf" --layers 2 --type Q8_0
"$zinc" synth gemma3-1b "$work/gemma3.gguf" --layers 2 --type Q8_0
"$zinc" synth gemma4-31b "$work/gemma4.gguf" --layers 6 --type Q8_0
node "$here/synth_llamacpp.mjs" "$oracle" "$eval_tool" "$work/qwen3.gguf" "$work/gemma3.gguf" "$work/gemma4.gguf"
