#!/usr/bin/env bash
# Files what bench/device/run.sh returned from a GPU machine under bench/results/:
#
#   bench/device/collect.sh FILES_AT MACHINE_NAME [NOTE]
#
# FILES_AT is the folder the run tool copied $OUT into (steps.tar, summary.json, run.log);
# MACHINE_NAME names the machine in the file names (e.g. h100-x1). Writes
#   bench/results/device/MACHINE_NAME-SCALE-DATE/   steps.tar unpacked (the step JSONs and logs),
#                                                   summary.json and run.log
#   bench/results/MACHINE_NAME-medgemma4b-synthetic-gpu-kit.json (full scale; -small- otherwise):
#     summarize.py's summary: machine, adapter, step status, ratios vs llama.cpp, issue #15's targets
# and prints the summary's ratios and targets. Needs python3 (this side only).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
src=$1 machine=$2 note=${3:-}
[ -f "$src/steps.tar" ] || { echo "collect.sh: $src has no steps.tar (is it run.sh's \$OUT?)" >&2; exit 1; }
case "$machine" in *[!A-Za-z0-9._-]*) echo "collect.sh: MACHINE_NAME may hold letters, digits, . _ - only" >&2; exit 2 ;; esac

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
tar -C "$stage" -xf "$src/steps.tar"
[ -f "$stage/00-machine.json" ] || { echo "collect.sh: steps.tar holds no 00-machine.json" >&2; exit 1; }
scale=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["scale"])' "$stage/00-machine.json")
date=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["date_utc"][:16].replace(":", ""))' "$stage/00-machine.json")
dest=bench/results/device/$machine-$scale-$date
mkdir -p "$dest"
cp -r "$stage"/. "$dest"/
for f in run.log summary.json; do [ -f "$src/$f" ] && cp "$src/$f" "$dest/$f"; done
chmod -R u+w "$dest"
if [ "$scale" = full ]; then
  summary=bench/results/$machine-medgemma4b-synthetic-gpu-kit.json
else
  summary=bench/results/$machine-small-gpu-kit.json
fi
python3 bench/device/summarize.py "$dest" --machine "$machine" --note "$note" >"$summary"
python3 - "$summary" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print("steps:")
for k, v in s["steps"].items():
    print(f"  {k:14} {v}")
print("ratios rexvqa / llama.cpp (> 1: rexvqa faster):", {k: round(v, 3) for k, v in s["ratios"].items()})
print("targets:")
for k, t in s["targets"].items():
    print(f"  {k:46} {t['value']!s:>22}  limit {t['limit']}  met: {t['met']}")
EOF
echo "wrote $dest/ and $summary" >&2
