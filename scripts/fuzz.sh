#!/usr/bin/env bash
# Fuzzes the GGUF parser with cargo-fuzz (nightly toolchain, libFuzzer), seeded with the
# committed malformed corpus. Not part of scripts/test.sh: the corpus itself runs there as an
# ordinary test (engine/tests/cpu/gguf_corpus.rs). Usage: scripts/fuzz.sh [seconds, default 600]
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-600}"
rustup toolchain list | grep -q nightly || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
work="${REXVQA_CACHE:-$HOME/.cache/rexvqa-web}/fuzz-corpus"
mkdir -p "$work" && cp tests/fixtures/gguf-malformed/*.gguf tests/fixtures/quant_types.gguf "$work/"
cd engine && cargo +nightly fuzz run gguf "$work" -- -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536
