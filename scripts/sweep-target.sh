#!/usr/bin/env bash
# Deletes the executables in the cargo target directory that the current tree no longer builds.
# Why: cargo writes a new <name>-<hash> test binary (~300 MB with burn and wgpu linked in) for every
# change and never removes the old one, so a long-lived CI cache fills the disk within a day.
# Kept: every executable the current tree's test and build commands name, and every file with a
# second hard link (cargo links the current bin and cdylib outputs out of deps/).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
keep="$(mktemp)"
trap 'rm -f "$keep"' EXIT
{
  cargo test --workspace --no-run --message-format=json
  cargo test -p rexvqa-engine --target wasm32-unknown-unknown --no-default-features --test web \
    --no-run --message-format=json
} 2>/dev/null | grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | sort -u > "$keep"
# Nothing listed means the commands failed: sweeping then would delete everything.
[ -s "$keep" ] || { echo "sweep-target: no current executables listed, nothing deleted" >&2; exit 0; }
freed=0
for deps in "$target"/debug/deps "$target"/wasm32-unknown-unknown/debug/deps; do
  [ -d "$deps" ] || continue
  while IFS= read -r -d '' f; do
    grep -qxF "$f" "$keep" && continue
    freed=$((freed + $(stat -c %s "$f")))
    rm -f "$f"
  done < <(find "$deps" -maxdepth 1 -type f -links 1 \( -name '*.wasm' -o \( -perm -u+x ! -name '*.*' \) \) -print0)
done
echo "sweep-target: freed $((freed / 1048576)) MiB of stale executables in $target"
