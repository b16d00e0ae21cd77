# The steps the device scripts share; sourced by them from the repository root.

# The shared libraries the binaries link that the GPU machine lacks, into .devbin/lib.
device_pack_libs() {
  mkdir -p .devbin/lib
  local lib path
  for lib in libspdlog.so.1.10 libfmt.so.9 libcpp-httplib.so.0.11 libedit.so.2 libbrotlidec.so.1 libbrotlienc.so.1 \
             libbrotlicommon.so.1 libbsd.so.0 libmd.so.0 libtinfo.so.6; do
    path=$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64/ && !found {print $NF; found = 1}')  # (no early exit: a broken pipe fails pipefail)
    [ -n "$path" ] && cp -L "$path" .devbin/lib/
  done
}

# The named model fixtures into .devbin/fx (from the tree, or from where `aside` put them), the Vulkan
# loader's packages into .gl (downloaded once), then the fixtures' folder moved aside: the tree's
# copy must stay small.
device_pack_fixtures_and_gl() {
  mkdir -p .devbin/fx .gl
  local src=tests/models/fixtures f
  [ -d "$src" ] || src=/tmp/zinc_fixtures
  for f in "$@"; do rm -rf ".devbin/fx/$f"; cp -r "$src/$f" .devbin/fx/; done
  if [ -z "$(ls .gl/*.deb 2>/dev/null)" ]; then
    mkdir -p /tmp/amd64/partial
    local o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64)
    apt-get "${o[@]}" update > /dev/null
    (cd .gl && apt-get "${o[@]}" download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 > /dev/null)
  fi
  if [ -d tests/models/fixtures ]; then rm -rf /tmp/zinc_fixtures; mv tests/models/fixtures /tmp/zinc_fixtures; fi
  du -sh .devbin .gl
}

# Here again after a call: the fixtures back in the tree.
device_unpack() {
  if [ -L tests/models/fixtures ]; then rm tests/models/fixtures; fi  # (a local run's link)
  if [ -d /tmp/zinc_fixtures ] && [ ! -d tests/models/fixtures ]; then mv /tmp/zinc_fixtures tests/models/fixtures; fi
}

# On the GPU machine: the Vulkan loader installed, the packed libraries and fixtures in place, and
# the named binaries (.devbin/NAME.xz) unpacked to /tmp/NAME.
device_prepare() {
  OUT=${OUT:-/tmp/out}
  mkdir -p "$OUT"
  local f b
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json LD_LIBRARY_PATH=$PWD/.devbin/lib
  rm -rf tests/models/fixtures
  ln -sfn "$PWD/.devbin/fx" tests/models/fixtures
  for b in "$@"; do xz -dc ".devbin/$b.xz" > "/tmp/$b" && chmod +x "/tmp/$b"; done
}

# device_tests LABEL LOG SECONDS BINARY ARGS...: a test binary's run logged to $OUT/LOG, then its
# summary lines and the first failures.
device_tests() {
  local label=$1 log=$OUT/$2 limit=$3
  shift 3
  timeout "$limit" "$@" > "$log" 2>&1
  echo "== $label: $(grep -E '^\[  (PASSED|FAILED)' "$log" | tr '\n' ' ')"
  grep -A6 Failure "$log" | head -30
}
