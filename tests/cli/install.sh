#!/usr/bin/env bash
# `cmake --install` into a fresh prefix: the binary runs, man finds the manual page, and each shell's
# completion lands where that shell looks (bash-completion loads it by the command's name).
# Usage: install.sh BUILD_DIR WORKDIR
set -euo pipefail
build=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"
fail() { echo "FAIL: $*"; cat "$work/install.log"; exit 1; }
"$prefix/bin/zinc" --version | grep -q "^zinc " || fail "the installed binary does not run"
for f in share/man/man1/zinc.1 share/bash-completion/completions/zinc share/zsh/site-functions/_zinc \
         share/fish/vendor_completions.d/zinc.fish; do
  [ -s "$prefix/$f" ] || fail "$f not installed"
done
MANWIDTH=80 man -M "$prefix/share/man" zinc 2>/dev/null | grep -q "local LLM inference engine" || fail "man zinc does not show the page"
out=$(bash -c "source '$prefix/share/bash-completion/completions/zinc'; complete -p zinc")
[ "$out" = "complete -o filenames -F _zinc zinc" ] || fail "bash completion not registered: $out"
echo "ok installed: bin/zinc, man page, bash, zsh and fish completions"
