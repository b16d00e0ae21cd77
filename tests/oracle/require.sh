# Sourced by the oracle scripts: require_oracle ORACLE_DIR PACKAGE ends the script with a clear message
# when the pinned npm oracles are not installed.
require_oracle() {
  if [ ! -d "$1/node_modules/$2" ]; then
    echo "oracle not installed: run 'npm install --prefix tests/oracle --omit=optional --ignore-scripts' (scripts/test.sh does)" >&2
    exit 1
  fi
}
