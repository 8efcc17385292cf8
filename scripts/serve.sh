#!/usr/bin/env bash
# Builds the app (release, wasm-opt) and serves it on http://127.0.0.1:8080/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh serve
export PATH="$HOME/.cargo/bin:$PWD/node_modules/.bin:$PATH"
export TRUNK_OFFLINE=true TRUNK_SKIP_VERSION_CHECK=true
PORT="${PORT:-8080}"
echo "Building; the app will be at http://127.0.0.1:$PORT/ (first build takes several minutes)"
exec trunk serve --release --address 127.0.0.1 --port "$PORT"
