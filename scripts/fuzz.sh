#!/usr/bin/env bash
# A fuzz campaign on one input parser (cargo-fuzz, libFuzzer, nightly; engine/fuzz/checks.rs says
# what each target checks):
#
#   scripts/fuzz.sh TARGET [SECONDS=600] [RUNS=10000000]
#   TARGET: gguf | split | archive | image | predictions | quiz
#
# Starts from the committed seeds and corpus (tests/fixtures/fuzz/), runs until RUNS executions or
# SECONDS, minimises what it found into tests/fixtures/fuzz/corpus/TARGET/ (commit it: the test
# suite replays it on stable), and records executions, coverage and crashes in
# bench/results/fuzz-<date>.json. A crash leaves its input in engine/fuzz/artifacts/TARGET/: fix
# it, then copy the input into tests/fixtures/fuzz/corpus/TARGET/ as its regression file.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
target="${1:?usage: scripts/fuzz.sh TARGET [SECONDS] [RUNS]}"
secs="${2:-600}"
runs="${3:-10000000}"
case "$target" in
  gguf) max_len=65536; more=(tests/fixtures/gguf-malformed tests/fixtures/quant_types.gguf) ;;
  archive) max_len=16384; more=(tests/fixtures/archive) ;;
  split|image) max_len=16384; more=() ;;
  predictions) max_len=32768; more=() ;;
  quiz) max_len=8192; more=() ;;
  *) echo "unknown target $target: gguf, split, archive, image, predictions or quiz" >&2; exit 2 ;;
esac
rustup toolchain list | grep -q nightly || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
work="${REXVQA_CACHE:-$HOME/.cache/rexvqa-web}/fuzz/$target"
committed="$ROOT/tests/fixtures/fuzz/corpus/$target"
mkdir -p "$work" "$committed"
# The working corpus starts from every committed input (files, so libFuzzer reads them all).
for src in "tests/fixtures/fuzz/seeds/$target" "$committed" "${more[@]}"; do
  if [ -d "$src" ]; then find "$src" -maxdepth 1 -type f -exec cp {} "$work/" \; ; elif [ -f "$src" ]; then cp "$src" "$work/"; fi
done
log="$(mktemp)"
t0=$SECONDS
set +e
(cd engine && cargo +nightly fuzz run -O --debug-assertions "$target" "$work" -- \
  -runs="$runs" -max_total_time="$secs" -max_len="$max_len" -rss_limit_mb=2048 -malloc_limit_mb=512 \
  -timeout=10 -print_final_stats=1) 2>&1 | tee "$log" \
  | { grep -E '^#[0-9]+[[:space:]]+(pulse|DONE|INITED)|ERROR|SUMMARY|panicked' || true; }
# The campaign's status: a `|| true` after the pipeline would replace PIPESTATUS with its own.
rc=${PIPESTATUS[0]}
set -e
elapsed=$((SECONDS - t0))
# The minimised corpus: the inputs that keep the coverage found, committed beside the seeds.
tmp="$(mktemp -d)"
(cd engine && cargo +nightly fuzz cmin -O --debug-assertions "$target" "$work" -- -max_len="$max_len" -rss_limit_mb=2048 -malloc_limit_mb=512) >/dev/null 2>&1 || true
# The smallest inputs, up to 256 kB in all, so the committed corpus stays small (the working one
# keeps the rest for the next campaign).
find "$work" -maxdepth 1 -type f -printf '%s %p\n' | sort -n | awk '{ t += $1; if (t <= 262144) print $2 }' \
  | xargs -r cp -t "$tmp/"
# Regression files (a fixed finding's input) stay whatever the minimisation kept.
find "$committed" -maxdepth 1 -type f -name 'regression-*' -exec cp {} "$tmp/" \; 2>/dev/null || true
rm -rf "$committed" && mkdir -p "$committed" && cp "$tmp"/* "$committed/" 2>/dev/null || true
rm -rf "$tmp"
crashes=$(find "engine/fuzz/artifacts/$target" -type f 2>/dev/null | wc -l)
python3 - "$log" "$target" "$elapsed" "$rc" "$crashes" "$committed" <<'PY'
import datetime, json, os, re, sys
log, target, elapsed, rc, crashes, committed = sys.argv[1:]
text = open(log, errors="replace").read()
stat = dict(re.findall(r"^stat::(\w+):\s+(\d+)", text, re.M))
done = re.findall(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+)", text, re.M)
runs, cov, ft = (int(x) for x in done[-1]) if done else (0, 0, 0)
files = [os.path.join(committed, f) for f in os.listdir(committed)]
entry = {
    "target": target, "executions": int(stat.get("number_of_executed_units", runs)),
    "coverage_edges": cov, "features": ft, "seconds": int(elapsed),
    "execs_per_second": int(stat.get("average_exec_per_sec", 0)),
    "peak_rss_mb": int(stat.get("peak_rss_mb", 0)), "exit_status": int(rc),
    "crashes": int(crashes), "corpus_files": len(files),
    "corpus_bytes": sum(os.path.getsize(f) for f in files),
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
}
path = f"bench/results/fuzz-{entry['date'][:10]}.json"
data = json.load(open(path)) if os.path.exists(path) else {
    "what": "scripts/fuzz.sh campaigns: cargo-fuzz (libFuzzer, ASan, nightly) on the 2-core CI-like VM",
    "campaigns": []}
data["campaigns"] = [c for c in data["campaigns"] if c["target"] != target] + [entry]
json.dump(data, open(path, "w"), indent=1)
print(json.dumps(entry))
PY
exit "$rc"
