#!/usr/bin/env bash
# Runs every test: formatting, clippy (native and wasm32), native tests, wasm tests in
# headless Chromium with WebGPU, and Playwright end-to-end tests against the built app.
# Prints the time of each stage and a closing summary; exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
export PATH="$HOME/.cargo/bin:$ROOT/node_modules/.bin:$PATH"
export REXVQA_CACHE="${REXVQA_CACHE:-$HOME/.cache/rexvqa-web}"
export TRUNK_OFFLINE=true TRUNK_SKIP_VERSION_CHECK=true
export CHROMEDRIVER="${CHROMEDRIVER:-/usr/bin/chromedriver}"
export WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-600}"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
chmod 700 "$XDG_RUNTIME_DIR"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

passed=0; failed=0; report=()
stage() {
  local name="$1"; shift
  printf '\n\033[1m=== %s\033[0m\n' "$name"
  local t0=$SECONDS
  if "$@"; then passed=$((passed + 1)); report+=("ok    $(printf '%5ss' $((SECONDS - t0)))  $name")
  else failed=$((failed + 1)); report+=("FAIL  $(printf '%5ss' $((SECONDS - t0)))  $name"); fi
}

stage "setup" scripts/setup.sh test || true
stage "cargo fmt --check" cargo fmt --all --check
stage "house limits (scripts/house.sh)" scripts/house.sh
stage "bench figures table current (bench/figures.py --check)" python3 bench/figures.py --check
# The GPU kit's scripts on a stub kit (~10 s, nothing built): bench/device/README.md.
stage "GPU kit scripts (bench/device/check.sh)" bench/device/check.sh
stage "deploy files (deploy/check.py)" python3 deploy/check.py
stage "clippy (native)" cargo clippy --workspace --all-targets -- -D warnings
stage "clippy (wasm32)" bash -c 'cargo clippy --target wasm32-unknown-unknown -p rexvqa-app --lib --bins -- -D warnings &&
  cargo clippy --target wasm32-unknown-unknown -p rexvqa-engine --no-default-features --lib --test web -- -D warnings'
# --no-fail-fast: one failing test binary must not hide the results of the others.
stage "native tests" cargo test --workspace --no-fail-fast
stage "wasm tests (headless Chromium, WebGPU)" cargo test -p rexvqa-engine --target wasm32-unknown-unknown --no-default-features --test web
e2e_fixtures() {
  # A synthetic split, the tiny model pair, and the native CLI's numbers to compare with. The
  # flows use the tiny mmproj at 224 px (tests/reference/small_image_mmproj.py: ~1/200 of the
  # 896-px encode); bench/browser-fullsize.mjs's test keeps the real 896-px geometry.
  local dir="$REXVQA_E2E"
  rm -rf "$dir" && mkdir -p "$dir/cli" || return 1
  # The CLI as the native tests built it: `cargo build -p rexvqa-engine` resolves the features
  # of burn, CubeCL and wgpu apart from the workspace's test build, and on a cold cache built
  # that whole stack a second time (~8 of this stage's 9.5 minutes in CI).
  cargo test -q --workspace --no-run || return 1
  "$REXVQA_BIN" synth --out "$dir/rexvqa" --studies 3 --questions-per-study 3 --min-size 200 --max-size 260 --seed 11 || return 1
  # The same images as the archive ReXGradient-160K ships: tar | zstd, split into numbered parts.
  mkdir -p "$dir/archive" && tar -C "$dir/rexvqa" -cf - deid_png | zstd -q -c \
    | split -d -b 120000 - "$dir/archive/deid_png.part" || return 1
  for f in tiny-q8_0.gguf tiny-q8_0-mmproj.gguf tiny-q8_0-mmproj-224.gguf tinyq-q4_0.gguf tinyq-iq4_xs.gguf tinyq-iq2_m.gguf tinyq-mmproj-224.gguf; do gzip -dc "tests/fixtures/models/$f.gz" > "$dir/$f" || return 1; done
  "$REXVQA_BIN" eval --model "$dir/tiny-q8_0.gguf" --mmproj "$dir/tiny-q8_0-mmproj-224.gguf" \
    --split "$dir/rexvqa/metadata/test_vqa_data.json" --out "$dir/cli/pred.json" || return 1
  "$REXVQA_BIN" eval --model "$dir/tiny-q8_0.gguf" --mmproj "$dir/tiny-q8_0-mmproj-224.gguf" \
    --split "$dir/rexvqa/metadata/test_vqa_data.json" --mode official --full-replies --out "$dir/cli/official.json"
}
export REXVQA_E2E="$ROOT/target/e2e"
export REXVQA_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug/rexvqa"
stage "end-to-end fixtures (synthetic split, CLI reference run)" e2e_fixtures
# A one-node Slurm runs deploy/slurm/'s array and merge on the CLI the native tests built.
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo --preserve-env=REXVQA_BIN,CARGO_TARGET_DIR "$@"; fi; }
stage "scale-out on a one-node Slurm (scripts/slurm-local.sh)" as_root scripts/slurm-local.sh 3
stage "build app (trunk)" trunk build
# As the README's deploy steps do: the wasm compressed once beside the originals, which the
# documented nginx configuration serves (gzip_static); -1 here, where only the setup matters.
stage "compress wasm for nginx" bash -c 'gzip -k -f -1 dist/*.wasm'
stage "end-to-end (Playwright)" node --test --test-concurrency=1 tests/e2e/

printf '\n=== summary\n'
printf '%s\n' "${report[@]}"
printf 'total %ss\n' "$SECONDS"
echo "stages: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
