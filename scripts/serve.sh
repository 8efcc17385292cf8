#!/usr/bin/env bash
# Builds the app (release, wasm-opt) and serves it on http://127.0.0.1:8080/.
#
# Served without trunk's autoreload: its script is moved into a file by the CSP hook, where trunk
# never fills its {{__trunk_address__}} placeholders, and its WebSocket would be refused by the
# app's own Content-Security-Policy, one console error per page load. Reload by hand after a
# rebuild. PORT, REXVQA_SERVE_PROFILE=debug (a quicker build of the same page, which the e2e test
# of this script uses) and REXVQA_SERVE_DIST (output folder) override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh serve
export PATH="$HOME/.cargo/bin:$PWD/node_modules/.bin:$PATH"
export TRUNK_OFFLINE=true TRUNK_SKIP_VERSION_CHECK=true
PORT="${PORT:-8080}"
args=(--address 127.0.0.1 --port "$PORT" --no-autoreload)
[ "${REXVQA_SERVE_PROFILE:-release}" = debug ] || args+=(--release)
[ -z "${REXVQA_SERVE_DIST:-}" ] || args+=(--dist "$REXVQA_SERVE_DIST")
echo "Building; the app will be at http://127.0.0.1:$PORT/ (first build takes several minutes)"
exec trunk serve "${args[@]}"
