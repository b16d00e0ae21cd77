#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages ZINC needs, and nothing when they are all present.
# Usage: scripts/deps.sh [--test]   (--test adds what the test suite needs: GoogleTest, clang, libFuzzer,
# tmux for the terminal-chat test, curl, chromium and haproxy for the server tests, man and groff for the manual page,
# clang-19, lld-19 and llvm-19 for ZINC_RT's AMDGPU kernels and the tool that checks them,
# and on x86-64 an AArch64 cross compiler and qemu for the NEON kernels' tests)
set -euo pipefail

pkgs=(cmake ninja-build g++ pkg-config git
      libvulkan-dev libvulkan-volk-dev glslang-dev glslang-tools mesa-vulkan-drivers
      libcpp-httplib-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libssl-dev libedit-dev)
if [ "${1:-}" = "--test" ]; then
  pkgs+=(libgtest-dev libgmock-dev clang tmux curl chromium haproxy man-db groff-base clang-19 lld-19 llvm-19)
  [ "$(dpkg --print-architecture 2>/dev/null)" = amd64 ] && pkgs+=(g++-aarch64-linux-gnu qemu-user)
fi

missing() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

install() {
  [ $# -eq 0 ] && return 0
  echo "zinc: installing $*" >&2
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if ! command -v dpkg-query >/dev/null; then
  echo "zinc: this script needs a Debian or Ubuntu system (dpkg/apt); install the packages by hand: ${pkgs[*]}" >&2
  exit 1
fi

mapfile -t todo < <(missing "${pkgs[@]}")
install "${todo[@]}"

# Node.js runs the test oracles (tests/oracle); any installed node >= 18 will do.
if [ "${1:-}" = "--test" ] && ! { command -v node && command -v npm; } >/dev/null; then
  install nodejs npm
fi

# libFuzzer ships with the compiler-rt package that matches the installed clang's major version.
if [ "${1:-}" = "--test" ]; then
  major=$(clang --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -n1)
  mapfile -t todo < <(missing "libclang-rt-${major}-dev")
  install "${todo[@]}"
fi
