#!/usr/bin/env bash
# The gateways `conform scenarios --gateway` is tested against, pinned: LiteLLM's proxy from PyPI
# (into a virtual environment), Portkey's open-source gateway from npm, and TensorZero's gateway
# (Rust, embedded in the PyPI wheel `tensorzero`, into a virtual environment of its own). All are cached
# OUTSIDE the repository, in ${CONFORM_CACHE:-$HOME/.cache/conform}, and every step is idempotent:
# a second `install` with all present does nothing.
#
# usage: scripts/gateways.sh install            install all three (if missing)
#        scripts/gateways.sh path litellm       print the `litellm` executable
#        scripts/gateways.sh path portkey       print Portkey's start-server.js
#        scripts/gateways.sh path tensorzero    print the python of TensorZero's venv
#        scripts/gateways.sh spawn litellm      print the --spawn command for conform scenarios
#        scripts/gateways.sh spawn portkey      (with {config} and {port} for conform to fill)
#        scripts/gateways.sh spawn tensorzero   (with {config}; it picks its own port and prints
#                                               its URL: scripts/tensorzero-gateway.py)
# env:   CONFORM_CACHE  cache dir   PYTHON  the python3 to make the venv with
# The versions are the ones docs/gateways.md reports on and tests/gateways.rs asserts: change
# them together.
set -euo pipefail

LITELLM_VERSION=1.108.7
PORTKEY_VERSION=1.15.2
TENSORZERO_VERSION=2026.6.0
CACHE=${CONFORM_CACHE:-$HOME/.cache/conform}
LITELLM_DIR=$CACHE/litellm-$LITELLM_VERSION
PORTKEY_DIR=$CACHE/portkey-$PORTKEY_VERSION
LITELLM_BIN=$LITELLM_DIR/bin/litellm
PORTKEY_JS=$PORTKEY_DIR/node_modules/@portkey-ai/gateway/build/start-server.js
TENSORZERO_DIR=$CACHE/tensorzero-$TENSORZERO_VERSION
TENSORZERO_PY=$TENSORZERO_DIR/bin/python
TENSORZERO_LAUNCHER=$(cd "$(dirname "$0")" && pwd)/tensorzero-gateway.py
PY=${PYTHON:-$(command -v python3)}

log() { echo "gateways: $*" >&2; }

install_litellm() {
  if [ -x "$LITELLM_BIN" ] && "$LITELLM_DIR/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('litellm') != '$LITELLM_VERSION')"; then
    return
  fi
  log "installing litellm[proxy]==$LITELLM_VERSION into $LITELLM_DIR"
  rm -rf "$LITELLM_DIR.part"
  "$PY" -m venv "$LITELLM_DIR.part"
  "$LITELLM_DIR.part/bin/pip" install -q "litellm[proxy]==$LITELLM_VERSION"
  rm -rf "$LITELLM_DIR"
  mv "$LITELLM_DIR.part" "$LITELLM_DIR"
  # A venv's scripts name their interpreter by absolute path: rewrite them for the new place.
  grep -rlI "$LITELLM_DIR.part" "$LITELLM_DIR/bin" | xargs -r sed -i "s|$LITELLM_DIR.part|$LITELLM_DIR|g"
}

install_portkey() {
  if [ -f "$PORTKEY_JS" ] && grep -q "\"version\": \"$PORTKEY_VERSION\"" "$PORTKEY_DIR/node_modules/@portkey-ai/gateway/package.json"; then
    return
  fi
  log "installing @portkey-ai/gateway@$PORTKEY_VERSION into $PORTKEY_DIR"
  mkdir -p "$PORTKEY_DIR"
  (cd "$PORTKEY_DIR" && npm install --no-audit --no-fund --silent "@portkey-ai/gateway@$PORTKEY_VERSION")
}

install_tensorzero() {
  if [ -x "$TENSORZERO_PY" ] && "$TENSORZERO_PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('tensorzero') != '$TENSORZERO_VERSION')"; then
    return
  fi
  log "installing tensorzero==$TENSORZERO_VERSION into $TENSORZERO_DIR"
  rm -rf "$TENSORZERO_DIR.part"
  "$PY" -m venv "$TENSORZERO_DIR.part"
  "$TENSORZERO_DIR.part/bin/pip" install -q "tensorzero==$TENSORZERO_VERSION"
  rm -rf "$TENSORZERO_DIR"
  mv "$TENSORZERO_DIR.part" "$TENSORZERO_DIR"
  grep -rlI "$TENSORZERO_DIR.part" "$TENSORZERO_DIR/bin" | xargs -r sed -i "s|$TENSORZERO_DIR.part|$TENSORZERO_DIR|g"
}

case "${1:-}" in
  install)
    install_litellm
    install_portkey
    install_tensorzero
    ;;
  path)
    case "${2:-}" in
      litellm) echo "$LITELLM_BIN" ;;
      portkey) echo "$PORTKEY_JS" ;;
      tensorzero) echo "$TENSORZERO_PY" ;;
      *) echo "usage: $0 path litellm|portkey|tensorzero" >&2; exit 2 ;;
    esac
    ;;
  spawn)
    case "${2:-}" in
      litellm) echo "exec '$LITELLM_BIN' --config {config} --port {port} --host 127.0.0.1" ;;
      portkey) echo "exec node '$PORTKEY_JS' --port={port} --headless" ;;
      tensorzero) echo "exec '$TENSORZERO_PY' '$TENSORZERO_LAUNCHER' {config}" ;;
      *) echo "usage: $0 spawn litellm|portkey|tensorzero" >&2; exit 2 ;;
    esac
    ;;
  *)
    echo "usage: $0 install | path litellm|portkey|tensorzero | spawn litellm|portkey|tensorzero" >&2
    exit 2
    ;;
esac
