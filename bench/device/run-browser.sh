#!/usr/bin/env bash
# The browser GPU kit, run side (issue #33): the app's Benchmark card in headless Chromium on the GPU
# machine against `rexvqa bench` natively on the same Vulkan driver and files.
#
# The kit (bench/device/pack-browser.sh) is one xz stream cut into parts, one per run-tool call,
# because a call carries at most 64 MiB beside the working tree. Every call of the sequence runs
# this script with the part it carries (bench/device/bkit/N); the files of earlier calls survive in
# $BKIT_WORK while the machine stays warm (30 s after a call). Each call checks what is there:
#   - it stores the parts it carries (sha256 checked against the manifest);
#   - with parts still missing it says which and stops (exit 0; exit 3 when a part it should have
#     found is gone: the machine went back between calls, and the sequence must start again);
#   - with every part there it unpacks them once and runs the steps, writing $OUT.
#
#   bench/device/run-browser.sh            store the carried parts; run once all are there
#   bench/device/run-browser.sh --dry-run  print the plan
#
# The steps (BROWSER_STEPS, comma-separated; default all), each under a limit, the whole within
# BROWSER_DEADLINE_S (default 540 s):
#   bvn-tiny   bench/browser-vs-native.mjs on the tiny test pair (prefill 64, decode 64, each
#              matrix's kernels timed alone at m = 1)
#   trace-tiny a Chrome trace of the tiny pair's Benchmark run, summarised by bench/trace_summary.py
#   bvn-4b     bench/browser-vs-native.mjs on the synthetic 4B pair that bench/device/run.sh wrote
#              in an earlier call (KIT_WORK=/opt/kw KIT_KEEP_WORK=1), prefill 300, decode 32, the
#              matrices at m = 1, and both sides' kernel profiles (its `kernels`: the browser's
#              prefill gap, 0.40x on an H200, named by kernel)
# $OUT gets browser-summary.json (each step's status and the ratios), browser.tar (every step's
# JSON and log) and trace-summary.json; all are rewritten after each step. Where nvidia-smi is
# there, each step also samples every process's GPU memory four times a second, each line led by
# its Unix time (logs/STEP.gpu-memory.csv: time, pid, process, MiB): the step's summary gets the
# most the browser's processes and the others (rexvqa) held, and the browser's JSON its run's
# wall-clock window (bench_window_unix_ms) and CubeCL's count by stage (results.memory_by_stage),
# to set side by side (bench/device/memory_timeline.py).
#
# Environment: OUT (required), BKIT_DIR (where the carried parts are; default bench/device/bkit), BKIT_WORK (default /opt/rexvqa-browser), KIT_WORK (the native kit's
# scratch folder; its env.sh gives the Vulkan set-up, rexvqa and the 4B pair), BROWSER_GPU=0 (no GPU
# flags: the check on a CPU machine, SwiftShader), BROWSER_ICD and BROWSER_REX (without a native
# kit: the ICD file and rexvqa binary the native side uses), BROWSER_FLAGS (more Chromium flags for
# the bvn steps' browser side, e.g. --enable-dawn-features=disable_resource_suballocation),
# BROWSER_PROFILE=0 (bvn-4b without the kernel profile passes).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BW=${BKIT_WORK:-/opt/rexvqa-browser}
DEADLINE_S=${BROWSER_DEADLINE_S:-540}
START=$SECONDS
say() { printf '[run-browser.sh %4ss] %s\n' "$((SECONDS - START))" "$*" >&2; }
die() { say "error: $*"; exit 1; }

if [ "${1:-}" = --dry-run ]; then
  echo "store: bench/device/bkit/*/part.N into $BW/parts (sha256 from manifest.txt)"
  echo "when every part is there: unpack into $BW/root, then the steps ${BROWSER_STEPS:-bvn-tiny,trace-tiny,bvn-4b}"
  echo "bvn-tiny: node bench/browser-vs-native.mjs --model tiny-q8_0.gguf --mmproj tiny-q8_0-mmproj.gguf --prefill 64 --decode 64 --official 0"
  echo "trace-tiny: node bench/browser-bench.mjs --trace ... ; python3 bench/trace_summary.py --json"
  echo "bvn-4b: node bench/browser-vs-native.mjs --model medgemma-4b-synthetic-Q4_K_M.gguf --prefill 300 --decode 32 --official 0 --profile"
  exit 0
fi
[ -n "${OUT:-}" ] || die "set OUT to the folder that receives the results"
mkdir -p "$OUT" "$BW/parts"

# --- the parts --------------------------------------------------------------------------------
manifest=""
for d in "${BKIT_DIR:-$ROOT/bench/device/bkit}"/*/; do
  [ -f "$d/manifest.txt" ] || continue
  manifest=$d/manifest.txt
  for f in "$d"/part.*; do
    [ -f "$f" ] || continue
    name=$(basename "$f")
    want=$(awk -v n="$name" '$1 == n { print $3 }' "$manifest")
    got=$(sha256sum "$f" | cut -d' ' -f1)
    [ "$want" = "$got" ] || die "$name: sha256 $got, the manifest says $want"
    cp "$f" "$BW/parts/$name"
    say "stored $name ($(stat -c %s "$f") bytes)"
  done
done
if [ -n "$manifest" ]; then
  # A part left by another kit is of no use: start the sequence again.
  if [ -f "$BW/manifest.txt" ] && ! cmp -s "$manifest" "$BW/manifest.txt"; then
    say "the parts in $BW are from another kit: removed"
    rm -rf "$BW/root" "$BW/parts"
    mkdir -p "$BW/parts"
    for f in "$(dirname "$manifest")"/part.*; do cp "$f" "$BW/parts/"; done
  fi
  cp "$manifest" "$BW/manifest.txt"
fi
[ -f "$BW/manifest.txt" ] || die "no browser kit here and none carried: carry bench/device/bkit/1 first"
n=$(sed -n 's/^parts: //p' "$BW/manifest.txt")
have="" missing=""
for i in $(seq 1 "$n"); do
  if [ -f "$BW/parts/part.$i" ]; then have+="${have:+,}$i"; else missing+="${missing:+,}$i"; fi
done
if [ -n "$missing" ]; then
  say "have parts ${have:-none} of $n; the next call carries bench/device/bkit/${missing%%,*}"
  # A later call that finds an earlier part gone: the machine went back in between.
  first_missing=${missing%%,*}
  [ -n "$have" ] && [ "${have##*,}" -gt "$first_missing" ] && { say "part $first_missing is gone: start again with bench/device/bkit/1"; exit 3; }
  exit 0
fi

R=$BW/root
if [ ! -f "$R/.unpacked" ]; then
  stream=$(sed -n 's/^stream: [0-9]* bytes, sha256 //p' "$BW/manifest.txt")
  got=$(for i in $(seq 1 "$n"); do cat "$BW/parts/part.$i"; done | sha256sum | cut -d' ' -f1)
  [ "$got" = "$stream" ] || die "the joined parts' sha256 is $got, the manifest says $stream"
  rm -rf "$R" && mkdir -p "$R"
  for i in $(seq 1 "$n"); do cat "$BW/parts/part.$i"; done | xz -dc | tar -x -C "$R"
  touch "$R/.unpacked"
  say "unpacked $n parts into $R"
fi

# --- the browser and the native side ----------------------------------------------------------
KIT_REX=() KIT_ICD_JSON=""
if [ -n "${KIT_WORK:-}" ] && [ -f "$KIT_WORK/env.sh" ]; then
  # shellcheck disable=SC1091
  . "$KIT_WORK/env.sh"
fi
REX=${BROWSER_REX:-${KIT_REX[*]:-}}
ICD=${BROWSER_ICD:-$KIT_ICD_JSON}
[ -n "$REX" ] || die "no rexvqa: run bench/device/run.sh first with KIT_WORK and KIT_KEEP_WORK=1, or set BROWSER_REX"
[ -n "$ICD" ] && [ -f "$ICD" ] || die "no Vulkan ICD file for the native side (${ICD:-none}): set BROWSER_ICD"
# browser-vs-native.mjs runs the binary itself: a launcher prefix goes into a wrapper.
cat >"$R/rexvqa.sh" <<EOF
#!/usr/bin/env bash
exec $REX "\$@"
EOF
chmod +x "$R/rexvqa.sh"
sed "s|@ROOT@|$R|g" "$R/fonts/fonts.conf" >"$R/fonts/fonts.run.conf"
export FONTCONFIG_FILE=$R/fonts/fonts.run.conf
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$BW/xdg}
mkdir -p -m 0700 "$XDG_RUNTIME_DIR"
# Playwright adds its own --enable-features and Chromium keeps the last one: the GPU flags go after
# its arguments (../shared/GPU-BROWSER.md: without --use-angle=vulkan the adapter is null).
GPU_FLAGS="--enable-unsafe-webgpu --ignore-gpu-blocklist --enable-features=Vulkan --use-angle=vulkan --disable-vulkan-surface"
[ "${BROWSER_GPU:-1}" = 0 ] && GPU_FLAGS=""
# The kit's libraries for the browser alone: Debian 12's builds must not shadow the machine's for
# the native side.
cat >"$R/chrome.sh" <<EOF
#!/usr/bin/env bash
export LD_LIBRARY_PATH="$R/lib:$R/chromium${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$R/chromium/chromium-headless-shell" "\$@" $GPU_FLAGS
EOF
chmod +x "$R/chrome.sh"
export REXVQA_CHROMIUM=$R/chrome.sh
export PATH="$R/node:$PATH"
# The bench scripts import playwright-core: node looks for it beside them, up the folders.
[ -e "$ROOT/node_modules/playwright-core" ] || { mkdir -p "$ROOT/node_modules" && ln -sfn "$R/node_modules/playwright-core" "$ROOT/node_modules/playwright-core"; }
DIST=$R/dist
say "node $(node --version); rexvqa: $REX; ICD: $ICD; GPU flags: ${GPU_FLAGS:-none}"

# --- steps ------------------------------------------------------------------------------------
RES=$BW/results
rm -rf "$RES" && mkdir -p "$RES/logs"
SUMMARY=""
ship() {
  tar -C "$RES" -cf "$OUT/.browser.tar.tmp" . && mv -f "$OUT/.browser.tar.tmp" "$OUT/browser.tar"
  printf '{"what": "bench/device/run-browser.sh", "gpu_flags": "%s", "browser_flags": "%s", "profile": %s, "icd": "%s", "kit": %s,\n "steps": [%s]}\n' \
    "$GPU_FLAGS" "${BROWSER_FLAGS:-}" "$([ "${BROWSER_PROFILE:-1}" = 0 ] && echo false || echo true)" "$ICD" "$(python3 -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read()))' "$BW/manifest.txt" 2>/dev/null || echo null)" \
    "$SUMMARY" >"$OUT/browser-summary.json"
}
gpu_memory() {
  local now
  now=$(date +%s.%N)
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits 2>/dev/null | sed "s/^/${now:0:14}, /" || true
}
step() {
  local name=$1 budget=$2
  shift 2
  if [ -n "${BROWSER_STEPS:-}" ] && [[ ",$BROWSER_STEPS," != *",$name,"* ]]; then return 0; fi
  local left=$((DEADLINE_S - (SECONDS - START) - 5))
  [ "$left" -lt "$budget" ] && budget=$left
  if [ "$budget" -lt 10 ]; then
    say "$name: skipped, no time left"
    SUMMARY+="${SUMMARY:+, }{\"step\": \"$name\", \"skipped\": true}"
    ship
    return 0
  fi
  say "$name: up to ${budget}s"
  local t0=$SECONDS rc=0 sampler="" mem=""
  if command -v nvidia-smi >/dev/null 2>&1; then
    while :; do gpu_memory; sleep 0.25; done >"$RES/logs/$name.gpu-memory.csv" &
    sampler=$!
  fi
  timeout -k 10 "$budget" "$@" >"$RES/logs/$name.log" 2>&1 || rc=$?
  if [ -n "$sampler" ]; then
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    # One sample after the step, so a step shorter than the period has one too.
    gpu_memory >>"$RES/logs/$name.gpu-memory.csv"
    mem=$(awk -F', *' '$NF ~ /^[0-9]+$/ { side = ($3 ~ /chrom/) ? "browser" : "native"; if ($NF > m[side]) m[side] = $NF }
      END { printf ", \"gpu_memory_max_mib\": {\"browser\": %d, \"native\": %d}", m["browser"], m["native"] }' \
      "$RES/logs/$name.gpu-memory.csv")
  fi
  say "$name: exit $rc in $((SECONDS - t0))s${mem:+; GPU memory at most (MiB)$mem}"
  tail -n 25 "$RES/logs/$name.log" >&2
  SUMMARY+="${SUMMARY:+, }{\"step\": \"$name\", \"exit_code\": $rc, \"wall_s\": $((SECONDS - t0))$mem}"
  ship
}

tiny=$BW/tiny
mkdir -p "$tiny"
for f in tiny-q8_0.gguf tiny-q8_0-mmproj.gguf; do gzip -dc "$ROOT/tests/fixtures/models/$f.gz" >"$tiny/$f"; done
cd "$ROOT"
step bvn-tiny 150 node bench/browser-vs-native.mjs --dist "$DIST" --bin "$R/rexvqa.sh" --icd "$ICD" \
  --flags="${BROWSER_FLAGS:-}" --model "$tiny/tiny-q8_0.gguf" --mmproj "$tiny/tiny-q8_0-mmproj.gguf" --prefill 64 --decode 64 --official 0 \
  --kernel-rows 1 --out "$RES/bvn-tiny.json"

trace_tiny() {
  node bench/browser-bench.mjs --dist "$DIST" --compute webgpu --model "$tiny/tiny-q8_0.gguf" \
    --prefill 64 --decode 16 --official 0 --kernel-rows '' --trace "$BW/trace.json" --out "$BW/unused.json" &&
    python3 bench/trace_summary.py "$BW/trace.json" --top 40 --json "$OUT/trace-summary.json" &&
    xz -6 -T0 -c "$BW/trace.json" >"$BW/trace.json.xz" &&
    { [ "$(stat -c %s "$BW/trace.json.xz")" -gt 15000000 ] || cp "$BW/trace.json.xz" "$OUT/trace.json.xz"; }
}
export -f trace_tiny
export DIST tiny BW OUT
step trace-tiny 120 bash -c trace_tiny

model=$(ls "${KIT_WORK:-/nonexistent}"/synthetic/medgemma-4b-synthetic-Q4_K_M.gguf 2>/dev/null || true)
if [ -n "$model" ]; then
  profile=--profile
  [ "${BROWSER_PROFILE:-1}" = 0 ] && profile=""
  step bvn-4b 330 node bench/browser-vs-native.mjs --dist "$DIST" --bin "$R/rexvqa.sh" --icd "$ICD" \
    --flags="${BROWSER_FLAGS:-}" --model "$model" --mmproj "$(dirname "$model")/mmproj-medgemma-4b-synthetic-F16.gguf" \
    --prefill 300 --decode 32 --official 0 --kernel-rows 1 $profile --out "$RES/bvn-4b.json"
else
  say "bvn-4b: skipped, no synthetic 4B pair under KIT_WORK"
fi
ship
say "done in $((SECONDS - START))s; in \$OUT: $(ls "$OUT" | tr '\n' ' ')"
cat "$OUT/browser-summary.json"
