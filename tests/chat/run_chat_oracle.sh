#!/usr/bin/env bash
# Renders every chat template in the shared test data with @huggingface/jinja (the oracle, pinned in
# tests/oracle/package.json) on the conversations in conversations.json, and the one-construct templates
# in jinja_cases.json, then compares ZINC's renders byte for byte.
# Usage: run_chat_oracle.sh COMPARE_TOOL TEMPLATES_DIR WORKDIR [--verbose]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
compare=$1 templates=$2 work=$3
shift 3
source "$here/../oracle/require.sh"
require_oracle "$here/../oracle" @huggingface/jinja
if [ ! -d "$templates" ]; then
  echo "templates not found at $templates (clone with ../shared beside the checkout)" >&2
  exit 1
fi
rm -rf "$work" && mkdir -p "$work"
# Both renderers read strftime_now() in local time: pin the zone so they agree.
export TZ=UTC
node "$here/render_oracle.mjs" "$templates" "$here/conversations.json" "$here/jinja_cases.json" "$work/expected.json"
"$compare" "$templates" "$here/conversations.json" "$here/jinja_cases.json" "$work/expected.json" "$here/known_mismatches.json" "$@"
