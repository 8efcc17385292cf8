#!/usr/bin/env bash
# The GPU evidence kit, run side (issue #15): every number in one call of at most 10 minutes.
#
# Runs on the GPU machine, in the repository root, with the kit that bench/device/pack.sh built
# carried in bench/device/kit/, and $OUT an empty folder whose contents come back. It needs bash
# and coreutils only: the binaries, the Vulkan loader and a static busybox (tar, unxz, dpkg-deb,
# awk) are in the kit; python3 is never needed.
#
#   bench/device/run.sh                  full size: the synthetic MedGemma 4B pair, prompts 300/1000
#   KIT_SCALE=small bench/device/run.sh  the check on a machine without a GPU (lavapipe): the tiny
#                                        test pair, short prompts; the synthetic 4B pair is still
#                                        written (it checks the tokenizer-only GGUF) but not timed
#   bench/device/run.sh --dry-run        prints the plan and writes nothing (bench/device/check.sh)
#
# One JSON per step (NN-step.json): the command, exit code, timed_out, wall seconds, the tool's
# own JSON under "result", and the end of its stderr; with the full logs (logs/) they go into
# $OUT/steps.tar, because the run tool brings back at most 8 files. $OUT also gets summary.json
# (each step's status) and run.log (this script's progress); both files are replaced after every
# step, so a run stopped from outside still returns what it finished. Steps run in the order of
# their value, each under `timeout`, and the whole run keeps to KIT_DEADLINE_S (default 560 s).
# bench/device/collect.sh files the returned folder under bench/results/.
#
# Environment: OUT (required), KIT_DIR (default: bench/device/kit), KIT_WORK (scratch folder,
# default a new one under TMPDIR; the synthetic pair needs ~3.5 GB there), KIT_SCALE (full|small),
# KIT_DEADLINE_S, KIT_STEP_LIMIT_S (caps every step; bench/device/check.sh uses it), KIT_KEEP_WORK=1
# (keep the scratch folder), KIT_STEPS (the steps to run, comma-separated, e.g. synth,bench-wgpu;
# default all), KIT_DECODE (tokens decoded by the bench steps). A kit packed without llama.cpp
# (KIT_LLAMA=0 bench/device/pack.sh) skips the two llama.cpp steps. $KIT_WORK/env.sh keeps the
# Vulkan set-up and the paths for the browser kit's run in a later call (bench/device/run-browser.sh).
set -euo pipefail

START_US=0
now_us() {
  # bash 5's EPOCHREALTIME costs no process; date is the fallback (coreutils).
  if [ -n "${EPOCHREALTIME:-}" ]; then
    local t=${EPOCHREALTIME/[.,]/}
    echo "$t"
  else
    date +%s%6N
  fi
}
START_US=$(now_us)
elapsed_s() { echo $((($(now_us) - START_US) / 1000000)); }
# Seconds with three decimals from microseconds (bash has integers only).
fmt_s() { printf '%d.%03d' $(($1 / 1000000)) $((($1 % 1000000) / 1000)); }
say() {
  printf '[run.sh %4ss] %s\n' "$(elapsed_s)" "$*" >&2
  if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then printf '[run.sh %4ss] %s\n' "$(elapsed_s)" "$*" >>"$OUT/run.log"; fi
}
die() { say "error: $*"; exit 1; }

DRY_RUN=0
[ "${1:-}" = --dry-run ] && DRY_RUN=1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
KIT_DIR=${KIT_DIR:-$ROOT/bench/device/kit}
SCALE=${KIT_SCALE:-full}
# The run tool stops a command at 600 s; 40 s of it are kept for the unpacking and the last ship.
# The check on a CPU machine has no such limit.
if [ "$SCALE" = small ]; then DEADLINE_S=${KIT_DEADLINE_S:-3600}; else DEADLINE_S=${KIT_DEADLINE_S:-560}; fi
case "$SCALE" in full | small) ;; *) die "KIT_SCALE must be full or small, not '$SCALE'" ;; esac

if [ "$DRY_RUN" = 0 ]; then
  [ -n "${OUT:-}" ] || die "set OUT to the folder that receives the JSON files"
  [ -f "$KIT_DIR/manifest.txt" ] || die "no kit at $KIT_DIR: run bench/device/pack.sh on the CPU machine and carry bench/device/kit"
  mkdir -p "$OUT"
  WORK=${KIT_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/rexvqa-kit.XXXXXX")}
  # The step files are made here and shipped to $OUT as one tar after every step: the run tool
  # brings back at most 8 files from $OUT.
  RES=$WORK/results
  mkdir -p "$WORK" "$RES/logs"
  [ "${KIT_KEEP_WORK:-0}" = 1 ] || trap 'rm -rf "$WORK"' EXIT
else
  OUT=${OUT:-/nonexistent-dry-run}
  WORK=/nonexistent-dry-run RES=/nonexistent-dry-run/results
fi

# ---------------------------------------------------------------------------------------------
# JSON helpers (no python, no jq).

# A JSON string of $1: printable ASCII only, so a cut multi-byte character or a terminal escape in
# a tool's stderr can never make the file unreadable.
json_str() {
  local s
  s=$(printf '%s' "$1" | tr -cd '\11\12\15\40-\176')
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\t'/\\t}
  s=${s//$'\r'/\\r}
  s=${s//$'\n'/\\n}
  printf '"%s"' "$s"
}
# A file's contents as JSON when it looks like a JSON document, else null (collect.sh parses
# every file; a truncated result is kept in the log, not here).
json_doc_or_null() {
  local f=$1 first last
  if [ -s "$f" ]; then
    # (|| true: head's early exit is a SIGPIPE for tr, a failure under pipefail.)
    first=$(tr -d ' \t\r\n' <"$f" | head -c 1 || true)
    last=$(tr -d ' \t\r\n' <"$f" | tail -c 1 || true)
    if { [ "$first" = "{" ] && [ "$last" = "}" ]; } || { [ "$first" = "[" ] && [ "$last" = "]" ]; }; then
      cat "$f"
      return
    fi
  fi
  printf 'null'
}
cmd_str() {
  local out="" a
  for a in "$@"; do out+="${out:+ }$a"; done
  printf '%s' "$out"
}

# ---------------------------------------------------------------------------------------------
# The kit: busybox first (it unpacks everything else), then the payload and the packages.

BB=() TAR=(tar)
LAUNCH_REX=() LAUNCH_LLAMA=()
unpack_kit() {
  # A copy of its own: the carried file may have lost its executable bit or sit on a read-only mount.
  local bb="$WORK/busybox"
  cp "$KIT_DIR/busybox" "$bb" && chmod +x "$bb"
  BB=("$bb")
  TAR=(tar)
  tar --version >/dev/null 2>&1 || TAR=("$bb" tar)
  mkdir -p "$WORK/kit"
  say "unpacking the payload"
  if command -v xz >/dev/null 2>&1 && tar --version >/dev/null 2>&1; then
    xz -dc "$KIT_DIR/payload.tar.xz" | tar -x -C "$WORK/kit"
  else
    "${BB[@]}" unxz -c "$KIT_DIR/payload.tar.xz" | "${BB[@]}" tar -x -C "$WORK/kit"
  fi
  # The Vulkan loader and what NVIDIA's Vulkan driver links against (glvnd, X11 client libraries:
  # containers built for CUDA usually lack them), and vulkaninfo; the C++ runtime and glibc
  # fallbacks go to folders of their own, used only when a binary cannot start without them.
  local d
  for d in debs cxx glibc; do
    mkdir -p "$WORK/$d"
    local deb
    for deb in "$KIT_DIR/$d"/*.deb; do
      [ -e "$deb" ] || continue
      if command -v dpkg-deb >/dev/null 2>&1; then
        dpkg-deb -x "$deb" "$WORK/$d"
      else
        "${BB[@]}" dpkg-deb -x "$deb" "$WORK/$d"
      fi
    done
  done
  SYSLIB="$WORK/debs/usr/lib/x86_64-linux-gnu:$WORK/debs/lib/x86_64-linux-gnu"
  CXXLIB="$WORK/cxx/usr/lib/x86_64-linux-gnu:$WORK/cxx/lib/x86_64-linux-gnu"
  GLIBC_DIR="$WORK/glibc/lib/x86_64-linux-gnu"
  [ -d "$WORK/glibc/usr/lib/x86_64-linux-gnu" ] && GLIBC_DIR="$WORK/glibc/usr/lib/x86_64-linux-gnu:$GLIBC_DIR"
  # The driver's own folder last (the ICD names its library without a path).
  local nvlib=""
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do [ -d "$d" ] && nvlib+=":$d"; done
  export LD_LIBRARY_PATH="$SYSLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}$nvlib"
  export PATH="$WORK/debs/usr/bin:$PATH"
}

# How to start a binary on this machine: as is; with the kit's libstdc++/libgomp (an older
# distribution); or through the kit's own glibc 2.36 loader (the binaries are built on Debian 12
# and need GLIBC_2.35 at least). Decided by starting it once with --help.
launcher_for() {
  local bin=$1 probe=$WORK/probe.txt
  local ldso
  if "$bin" --help >"$probe" 2>&1 || ! grep -qE 'error while loading shared libraries|version .* not found' "$probe"; then
    echo native
    return
  fi
  if LD_LIBRARY_PATH="$CXXLIB:$LD_LIBRARY_PATH" "$bin" --help >"$probe" 2>&1 ||
    ! grep -qE 'error while loading shared libraries|version .* not found' "$probe"; then
    echo cxx
    return
  fi
  for ldso in "$WORK"/glibc/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$WORK"/glibc/lib64/ld-linux-x86-64.so.2 "$WORK"/glibc/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2; do
    if [ -e "$ldso" ]; then
      echo "glibc:$ldso"
      return
    fi
  done
  echo "broken: $(head -c 300 "$probe")"
}
# Sets the named array to the command prefix for that launcher.
set_launcher() {
  local -n arr=$1
  local how=$2
  case "$how" in
    native) arr=() ;;
    cxx) arr=(env "LD_LIBRARY_PATH=$CXXLIB:$LD_LIBRARY_PATH") ;;
    glibc:*) arr=("${how#glibc:}" --library-path "$GLIBC_DIR:$CXXLIB:$LD_LIBRARY_PATH") ;;
    *) arr=() ;;
  esac
}

# ---------------------------------------------------------------------------------------------
# Vulkan: use the machine's NVIDIA ICD file when it has one, else write one for the driver's
# library (the container may carry the driver's libraries without the JSON that names them).

VULKAN_NOTE=""
ICD_JSON=""
find_driver_lib() {
  local name=$1 d
  for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /lib/x86_64-linux-gnu /lib64 /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu/nvidia/current; do
    [ -e "$d/$name" ] && { echo "$d/$name"; return; }
  done
  if command -v ldconfig >/dev/null 2>&1; then
    ldconfig -p 2>/dev/null | sed -n "s/^[[:space:]]*$name .*=> //p" | head -n 1 || true
  fi
}
vulkan_devices() {
  # vulkaninfo's summary names each device; empty when the loader finds none.
  timeout -k 5 30 vulkaninfo --summary 2>/dev/null | sed -n 's/^[[:space:]]*deviceName[[:space:]]*=[[:space:]]*//p' || true
}
setup_vulkan() {
  local f existing=""
  # /usr/local/nvidia is where this workplace's GPU machines mount the driver (read-only).
  for f in /etc/vulkan/icd.d/nvidia*.json /usr/share/vulkan/icd.d/nvidia*.json /usr/local/share/vulkan/icd.d/nvidia*.json \
    /usr/local/etc/vulkan/icd.d/nvidia*.json /usr/local/nvidia/share/vulkan/icd.d/nvidia*.json; do
    [ -e "$f" ] && { existing=$f; break; }
  done
  # glvnd's EGL (libEGL_nvidia) finds the driver through its vendor file.
  for f in /usr/share/glvnd/egl_vendor.d/10_nvidia.json /usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json; do
    if [ -e "$f" ] && [ -z "${__EGL_VENDOR_LIBRARY_FILENAMES:-}" ]; then export __EGL_VENDOR_LIBRARY_FILENAMES=$f; fi
  done
  if [ -n "$existing" ]; then
    VULKAN_NOTE="the machine's ICD file $existing"
    ICD_JSON=$existing
    # A file outside the loader's search path (the /usr/local/nvidia mount) is named explicitly.
    case "$existing" in
      /usr/local/nvidia/*) export VK_ICD_FILENAMES=$existing VK_DRIVER_FILES=$existing ;;
    esac
  else
    local lib
    for lib in libGLX_nvidia.so.0 libEGL_nvidia.so.0; do
      local path
      path=$(find_driver_lib "$lib")
      [ -n "$path" ] || continue
      mkdir -p "$WORK/icd"
      ICD_JSON="$WORK/icd/nvidia_icd_${lib%%.*}.json"
      printf '{"file_format_version": "1.0.0", "ICD": {"library_path": "%s", "api_version": "1.3.0"}}\n' "$path" >"$ICD_JSON"
      # VK_DRIVER_FILES is the loader's current name, VK_ICD_FILENAMES the one older loaders read.
      export VK_ICD_FILENAMES=$ICD_JSON VK_DRIVER_FILES=$ICD_JSON
      if [ -n "$(vulkan_devices)" ]; then
        VULKAN_NOTE="no NVIDIA ICD file on the machine: wrote $ICD_JSON for $path"
        break
      fi
      VULKAN_NOTE="wrote $ICD_JSON for $path but the loader found no device through it"
      unset VK_ICD_FILENAMES VK_DRIVER_FILES
      ICD_JSON=""
    done
    if [ -z "$VULKAN_NOTE" ]; then
      VULKAN_NOTE="no NVIDIA ICD file and no libGLX_nvidia.so.0 / libEGL_nvidia.so.0 found (a container without the driver's 'graphics' capability has CUDA only)"
    fi
  fi
  local devs
  devs=$(vulkan_devices | tr '\n' ';')
  VULKAN_NOTE+="; Vulkan devices: ${devs:-none}"
  say "Vulkan: $VULKAN_NOTE"
}

# ---------------------------------------------------------------------------------------------
# Steps.

STEP_NO=0
STEPS_SUMMARY=""
# run_step NAME BUDGET_S RESULT -- CMD...: RESULT is "stdout" (the tool prints its JSON) or
# "none". Writes NN-NAME.json (into steps.tar). EXTRA (a JSON fragment starting with a comma) is appended.
run_step() {
  local name=$1 budget=$2 result=$3
  shift 4
  STEP_NO=$((STEP_NO + 1))
  local id
  id=$(printf '%02d-%s' "$STEP_NO" "$name")
  local file=$RES/$id.json
  local left=$((DEADLINE_S - $(elapsed_s) - 5))
  local limit=$budget
  [ "$left" -lt "$limit" ] && limit=$left
  [ -n "${KIT_STEP_LIMIT_S:-}" ] && [ "$KIT_STEP_LIMIT_S" -lt "$limit" ] && limit=$KIT_STEP_LIMIT_S
  if [ "$DRY_RUN" = 1 ]; then
    printf '%s  budget %4ss  %s\n' "$id" "$budget" "$(cmd_str "$@")"
    return 0
  fi
  local why=""
  if [ -n "${KIT_STEPS:-}" ] && [[ ",$KIT_STEPS," != *",$name,"* ]]; then why="not in KIT_STEPS ($KIT_STEPS)"; fi
  if [[ $name == llama-* ]] && [ "$LLAMA_HOW" = "not in kit" ]; then why="no llama.cpp in this kit (packed with KIT_LLAMA=0)"; fi
  if [ -n "$why" ]; then
    say "$id: skipped: $why"
    printf '{"step": "%s", "skipped": true, "timed_out": false, "reason": %s, "command": %s}\n' \
      "$name" "$(json_str "$why")" "$(json_str "$(cmd_str "$@")")" >"$file"
    STEPS_SUMMARY+="${STEPS_SUMMARY:+,$'\n'  }{\"step\": \"$name\", \"skipped\": true}"
    LAST_RC=0
    write_summary
    ship
    return 0
  fi
  if [ "$left" -lt 10 ]; then
    say "$id: skipped, ${left}s left of the ${DEADLINE_S}s deadline"
    printf '{"step": "%s", "skipped": true, "timed_out": true, "reason": "no time left of the %ss deadline", "command": %s}\n' \
      "$name" "$DEADLINE_S" "$(json_str "$(cmd_str "$@")")" >"$file"
    STEPS_SUMMARY+="${STEPS_SUMMARY:+,$'\n'  }{\"step\": \"$name\", \"skipped\": true}"
    write_summary
    ship
    return 0
  fi
  say "$id: up to ${limit}s: $(cmd_str "$@")"
  # Written first, so a run killed by the caller's limit still says which step was running.
  printf '{"step": "%s", "timed_out": true, "reason": "still running when run.sh was stopped", "command": %s}\n' \
    "$name" "$(json_str "$(cmd_str "$@")")" >"$file"
  local t0 t1 rc=0
  t0=$(now_us)
  ship
  timeout -k 10 "$limit" "$@" >"$RES/logs/$id.stdout" 2>"$RES/logs/$id.log" || rc=$?
  t1=$(now_us)
  # timeout exits 124 when it stopped the command, 137 when it had to kill it.
  local timed_out=false
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then timed_out=true; fi
  local res=null
  # Kept whatever the exit code: selftest prints its checks and exits 1 when one fails.
  if [ "$result" = stdout ]; then
    res=$(json_doc_or_null "$RES/logs/$id.stdout")
    # The JSON is in the step's file now; anything else on stdout stays in the log.
    [ "$res" = null ] || rm -f "$RES/logs/$id.stdout"
  fi
  {
    printf '{"step": "%s",\n "command": %s,\n "exit_code": %s, "timed_out": %s, "limit_s": %s, "wall_s": %s' \
      "$name" "$(json_str "$(cmd_str "$@")")" "$rc" "$timed_out" "$limit" "$(fmt_s $((t1 - t0)))"
    printf '%s' "${EXTRA:-}"
    printf ',\n "stderr_tail": %s,\n "result": ' "$(json_str "$(tail -c 3000 "$RES/logs/$id.log")")"
    printf '%s' "$res"
    printf '}\n'
  } >"$file.tmp"
  mv -f "$file.tmp" "$file"
  EXTRA=""
  STEPS_SUMMARY+="${STEPS_SUMMARY:+,$'\n'  }{\"step\": \"$name\", \"exit_code\": $rc, \"timed_out\": $timed_out, \"wall_s\": $(fmt_s $((t1 - t0)))}"
  write_summary
  ship
  say "$id: exit $rc in $(fmt_s $((t1 - t0)))s$([ "$timed_out" = true ] && echo ' (timed out)')"
  LAST_RC=$rc
  return 0
}
EXTRA=""
LAST_RC=0

# $OUT/steps.tar (every step's JSON and log; logs cut to their last MiB) and $OUT/summary.json,
# replaced whole after each step, so a run stopped from outside still returns what it finished.
ship() {
  local f
  for f in "$RES"/logs/*; do
    [ -f "$f" ] && [ "$(wc -c <"$f")" -gt 1048576 ] && { tail -c 1048576 "$f" >"$f.cut" && mv -f "$f.cut" "$f"; }
  done
  "${TAR[@]}" -C "$RES" -cf "$OUT/.steps.tar.tmp" . && mv -f "$OUT/.steps.tar.tmp" "$OUT/steps.tar"
  if [ -f "$RES/99-summary.json" ]; then cp "$RES/99-summary.json" "$OUT/summary.json"; fi
}

write_summary() {
  printf '{"step": "summary", "scale": "%s", "total_s": %s, "deadline_s": %s,\n "vulkan": %s,\n "steps": [%s]}\n' \
    "$SCALE" "$(fmt_s $(($(now_us) - START_US)))" "$DEADLINE_S" "$(json_str "$VULKAN_NOTE")" \
    "$STEPS_SUMMARY" >"$RES/99-summary.json"
}

machine_json() {
  local nv="" vk="" cpu mem
  cpu=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo 2>/dev/null | head -n 1 || true)
  mem=$(sed -n 's/^MemTotal:[[:space:]]*//p' /proc/meminfo 2>/dev/null)
  if command -v nvidia-smi >/dev/null 2>&1; then
    nv=$(timeout -k 5 30 nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,pstate,clocks.max.sm --format=csv 2>&1 || true)
    nv+=$'\n'$(timeout -k 5 30 nvidia-smi 2>&1 || true)
  fi
  vk=$(timeout -k 5 30 vulkaninfo --summary 2>&1 | tail -c 6000 || true)
  local d libs=""
  for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64; do
    libs+=$(ls "$d" 2>/dev/null | grep -E '^lib(cuda|nvidia|GLX_nvidia|EGL_nvidia|vulkan)' | sed "s|^|$d/|" || true)$'\n'
  done
  printf '{"step": "machine",\n "date_utc": "%s", "scale": "%s", "deadline_s": %s,\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$SCALE" "$DEADLINE_S"
  printf ' "uname": %s, "cpu": %s, "cpus": %s, "memory": %s,\n' "$(json_str "$(uname -a)")" "$(json_str "$cpu")" "$(nproc 2>/dev/null || echo null)" "$(json_str "$mem")"
  printf ' "os_release": %s,\n' "$(json_str "$(head -n 4 /etc/os-release 2>/dev/null || true)")"
  printf ' "glibc": %s,\n' "$(json_str "$(getconf GNU_LIBC_VERSION 2>/dev/null || true)")"
  printf ' "launchers": {"rexvqa": %s, "llama.cpp": %s},\n' "$(json_str "$REX_HOW")" "$(json_str "$LLAMA_HOW")"
  printf ' "vulkan_setup": %s, "icd_json": %s,\n' "$(json_str "$VULKAN_NOTE")" "$(json_str "$ICD_JSON")"
  printf ' "vulkan_devices": %s,\n' "$(json_str "$(vulkan_devices)")"
  printf ' "vulkaninfo_summary": %s,\n' "$(json_str "$vk")"
  printf ' "nvidia_smi": %s,\n' "$(json_str "$nv")"
  printf ' "driver_libraries": %s,\n' "$(json_str "$libs")"
  printf ' "disk_free_work": %s,\n' "$(json_str "$(df -h "$WORK" 2>/dev/null | tail -n 1)")"
  printf ' "kit_manifest": %s}\n' "$(json_str "$(cat "$KIT_DIR/manifest.txt")")"
}

# ---------------------------------------------------------------------------------------------

if [ "$DRY_RUN" = 0 ]; then
  say "kit $KIT_DIR, scratch $WORK, scale $SCALE, deadline ${DEADLINE_S}s"
  unpack_kit
  REX="$WORK/kit/bin/rexvqa"
  LB="$WORK/kit/bin/llama-bench"
  MTMD="$WORK/kit/bin/llama-mtmd-cli"
  REX_HOW=$(launcher_for "$REX")
  LLAMA_HOW="not in kit"
  [ -e "$LB" ] && LLAMA_HOW=$(launcher_for "$LB")
  set_launcher LAUNCH_REX "$REX_HOW"
  set_launcher LAUNCH_LLAMA "$LLAMA_HOW"
  say "rexvqa starts: $REX_HOW; llama.cpp starts: $LLAMA_HOW"
  setup_vulkan
  # Mesa (lavapipe, on the CPU check) wants a private runtime folder.
  export XDG_RUNTIME_DIR=$WORK/xdg
  mkdir -p -m 0700 "$XDG_RUNTIME_DIR"
  if [ "$SCALE" = small ]; then
    # llama.cpp skips CPU-type Vulkan devices (lavapipe) unless one is named.
    export GGML_VK_VISIBLE_DEVICES=${GGML_VK_VISIBLE_DEVICES:-0}
  fi
  machine_json >"$RES/00-machine.json"
  ship
  # For the browser kit's run in a later call (run-browser.sh): the same loader, driver and binary.
  {
    printf 'export LD_LIBRARY_PATH=%q PATH=%q XDG_RUNTIME_DIR=%q\n' "$LD_LIBRARY_PATH" "$PATH" "$XDG_RUNTIME_DIR"
    for v in VK_ICD_FILENAMES VK_DRIVER_FILES __EGL_VENDOR_LIBRARY_FILENAMES; do
      [ -n "${!v:-}" ] && printf 'export %s=%q\n' "$v" "${!v}"
    done
    printf 'KIT_ICD_JSON=%q\nKIT_REX=(%s)\nKIT_WORK=%q\n' "$ICD_JSON" "$(printf '%q ' "${LAUNCH_REX[@]}" "$REX")" "$WORK"
  } >"$WORK/env.sh"
else
  REX=rexvqa LB=llama-bench MTMD=llama-mtmd-cli
fi

TOK=$WORK/kit/data/gemma3-tokenizer.gguf
SYN=$WORK/synthetic
SPLIT_DIR=$WORK/split
SPLIT=$SPLIT_DIR/metadata/test_vqa_data.json
if [ "$SCALE" = full ]; then
  MODEL=$SYN/medgemma-4b-synthetic-Q4_K_M.gguf
  MMPROJ=$SYN/mmproj-medgemma-4b-synthetic-F16.gguf
  PREFILL=300,1000 DECODE=${KIT_DECODE:-32} REPS=3 OFFICIAL=64 KREPS=5 KM=1,64,256 KSHAPE=(--rows 2048 --cols 2048) QUESTIONS=20
  STUDIES=8 MIN_SIZE=1024 MAX_SIZE=2048
  B_SELF=60 B_KERN=60 B_BENCH=200 B_LB=90 B_MTMD=90 B_CAL=150 B_FIRST=60 B_ONE=90 B_TILE4=120 B_VARIANTS=260
else
  MODEL=$WORK/tiny/tiny-q8_0.gguf
  MMPROJ=$WORK/tiny/tiny-q8_0-mmproj.gguf
  PREFILL=64,256 DECODE=${KIT_DECODE:-16} REPS=2 OFFICIAL=8 KREPS=2 KM=1,64 KSHAPE=(--rows 512 --cols 1024) QUESTIONS=4
  STUDIES=3 MIN_SIZE=480 MAX_SIZE=800
  B_SELF=300 B_KERN=300 B_BENCH=900 B_LB=600 B_MTMD=600 B_CAL=600 B_FIRST=300 B_ONE=600 B_TILE4=900 B_VARIANTS=900
fi
# llama.cpp offloads every layer (-ngl 99); on lavapipe too, like the records of bench/README.md.
NGL=99
# Whole public test (40,826 questions) projected twice: every question paying for its own image
# (the bound), and ReXVQA's mean of 4.35 questions per study (696,000 questions / 160,000 studies;
# the test split's own study count is not published) — 9,385 studies.
PROJECT=(--project 40826:40826 --project 40826:9385)

# `bench --profile` (steps 4 and 10): every launch of a token, a prefill pass and an image encode
# timed on its own, against the roofline of KIT_ROOFLINE="GB_S,GFLOP_S" or else the datasheet
# figures of the GPUs lent here (memory bandwidth; f32 arithmetic without tensor cores).
ROOF=(--profile)
if [ -n "${KIT_ROOFLINE:-}" ]; then
  ROOF+=(--roofline-gb-s "${KIT_ROOFLINE%%,*}" --roofline-gflop-s "${KIT_ROOFLINE##*,}")
elif [ "$DRY_RUN" = 0 ]; then
  case "$(vulkan_devices | head -n 1)" in
    *H200*) ROOF+=(--roofline-gb-s 4800 --roofline-gflop-s 67000) ;;
    *H100*PCIe*) ROOF+=(--roofline-gb-s 2000 --roofline-gflop-s 51000) ;;
    *H100*) ROOF+=(--roofline-gb-s 3350 --roofline-gflop-s 67000) ;;
  esac
fi

# 1. The inputs: the full-size synthetic pair (random weights, MedGemma 4B's shapes and type
# mix) and a synthetic split of radiograph-sized 16-bit PNGs.
synth_inputs() {
  "${LAUNCH_REX[@]}" "$REX" synth-model --out "$SYN" --tokenizer-from "$TOK" &&
    "${LAUNCH_REX[@]}" "$REX" synth --out "$SPLIT_DIR" --studies "$STUDIES" --min-size "$MIN_SIZE" --max-size "$MAX_SIZE" &&
    ls -l "$SYN" "$SPLIT"
}
if [ "$DRY_RUN" = 0 ]; then
  if [ "$SCALE" = small ]; then
    mkdir -p "$WORK/tiny"
    for f in tiny-q8_0.gguf tiny-q8_0-mmproj.gguf; do
      "${BB[@]}" gunzip -c "$ROOT/tests/fixtures/models/$f.gz" >"$WORK/tiny/$f"
    done
  fi
  export -f synth_inputs
  export REX TOK SYN SPLIT_DIR SPLIT STUDIES MIN_SIZE MAX_SIZE
  export LAUNCH_REX_STR="${LAUNCH_REX[*]}"
fi
# timeout cannot run a shell function: the step runs it in a child bash (LAUNCH_REX goes over as a
# string; its parts hold no spaces: kit paths under mktemp's folder).
run_step synth 120 none -- bash -c 'LAUNCH_REX=($LAUNCH_REX_STR); synth_inputs'
if [ "$DRY_RUN" = 0 ]; then
  [ -f "$MODEL" ] && [ -f "$SPLIT" ] || { write_summary; ship; die "the inputs could not be made (see 01-synth.json in $OUT/steps.tar); nothing else can run"; }
  # The first question of the split (its keys are the question ids, two spaces deep).
  FIRST_ID=$(sed -n 's/^  "\([^"]*\)": {$/\1/p' "$SPLIT" | head -n 1 || true)
else
  FIRST_ID=ID
fi

# 2. The engine's self-test on this adapter (another branch adds it; an older build says so).
run_step selftest "$B_SELF" stdout -- "${LAUNCH_REX[@]}" "$REX" selftest --backend wgpu --json
if [ "$DRY_RUN" = 0 ] && [ "$LAST_RC" = 2 ] && grep -q "unrecognized subcommand" "$RES/logs/02-selftest.log"; then
  printf '{"step": "selftest", "status": "not in this build", "exit_code": 2, "timed_out": false}\n' >"$RES/02-selftest.json"
  ship
fi

# 3. Every kernel and f16 form on this adapter (no model).
run_step bench-kernels "$B_KERN" stdout -- "${LAUNCH_REX[@]}" "$REX" bench-kernels --backend wgpu "${KSHAPE[@]}" --m "$KM" --reps "$KREPS"

# 4. The harness on the pair: image encode, prefill, decode, questions, device memory, kernels,
# and each kernel's device time in a token, a prefill pass and an image encode (--profile).
run_step bench-wgpu "$B_BENCH" stdout -- "${LAUNCH_REX[@]}" "$REX" bench --model "$MODEL" --mmproj "$MMPROJ" --backend wgpu \
  --prefill "$PREFILL" --decode "$DECODE" --official-max-tokens "$OFFICIAL" "${ROOF[@]}"

# 5. llama.cpp (Vulkan) on the same files and prompt lengths.
run_step llama-bench "$B_LB" stdout -- "${LAUNCH_LLAMA[@]}" "$LB" -m "$MODEL" -p "$PREFILL" -n "$DECODE" -r "$REPS" -ngl "$NGL" -o json

# 6. llama.cpp's image encode: its "mtmd batch encoding done in N ms" line, one warm-up run (the
# first process compiles the driver's pipelines; later ones find them in its disk cache, as
# `rexvqa bench`'s warm image_encode_ms does in-process) and REPS timed runs, printed as JSON by the
# child shell.
mtmd_runs() {
  local i png ms list="" warm=""
  png=$(find "$SPLIT_DIR/deid_png" -name '*.png' | head -n 1)
  for i in $(seq 0 "$REPS"); do
    # shellcheck disable=SC2086
    ms=$($LAUNCH_LLAMA_STR "$MTMD" -m "$MODEL" --mmproj "$MMPROJ" --image "$png" -p "Describe the image." -n 1 --temp 0 -ngl "$NGL" --chat-template gemma 2>&1 |
      tee -a /dev/stderr | sed -n 's/.*mtmd batch encoding done in \([0-9.]*\) ms.*/\1/p' | head -n 1)
    [ -n "$ms" ] || { echo "run $i: llama-mtmd-cli printed no 'mtmd batch encoding done in N ms' line" >&2; return 1; }
    if [ "$i" = 0 ]; then warm=$ms; else list+="${list:+, }$ms"; fi
  done
  printf '{"image": "%s", "warmup_ms": %s, "image_encode_ms_runs": [%s]}\n' "${png##*/}" "$warm" "$list"
}
if [ "$DRY_RUN" = 0 ]; then
  export -f mtmd_runs
  export MTMD MODEL MMPROJ REPS NGL LAUNCH_LLAMA_STR="${LAUNCH_LLAMA[*]}"
fi
run_step llama-mtmd "$B_MTMD" stdout -- bash -c mtmd_runs

# 7. Calibration on the synthetic split (fast mode, whole studies after a warm-up), projected onto
# the whole public test.
run_step calibrate "$B_CAL" stdout -- "${LAUNCH_REX[@]}" "$REX" calibrate --model "$MODEL" --mmproj "$MMPROJ" --backend wgpu \
  --split "$SPLIT" --questions "$QUESTIONS" "${PROJECT[@]}"

# 8. Load → first answer in a fresh process, as a user meets it (shader compilation included).
run_step first-answer "$B_FIRST" stdout -- "${LAUNCH_REX[@]}" "$REX" answer --model "$MODEL" --mmproj "$MMPROJ" --backend wgpu \
  --split "$SPLIT" --id "$FIRST_ID"

# 9. The text decoder again with one queue submission a token (CubeCL batches 32 launches a
# submission by default; a 4B token is 286 launches): the decode figure against step 4's.
# Last: it only settles a setting (issue #19).
run_step bench-one-submit "$B_ONE" stdout -- env CUBECL_WGPU_MAX_TASKS=512 "${LAUNCH_REX[@]}" "$REX" bench --model "$MODEL" \
  --backend wgpu --prefill "${PREFILL%%,*}" --decode "$DECODE"

# 10. Prefill and the image encode with the tiled kernel's scalar form, 4 x 4 blocks of outputs an
# invocation (REXVQA_TILE_PER=s4; the default reads workgroup memory as vectors, 8 x 8 blocks): the
# prefill, image and per-matrix m = 256 figures against step 4's say whether the default still
# holds on this GPU.
run_step bench-tile4 "$B_TILE4" stdout -- env REXVQA_TILE_PER=s4 "${LAUNCH_REX[@]}" "$REX" bench --model "$MODEL" \
  --mmproj "$MMPROJ" --backend wgpu --prefill "$PREFILL" --decode 8 --official-max-tokens 8 --kernel-rows 256 "${ROOF[@]}"

# 11. Kernel forms chosen by environment variables (KIT_VARIANTS: `;`-separated runs, each a
# space-separated list of VAR=VALUE; by default the tiled product never split over its rows'
# weights, the wide-head attention unsplit (one dispatch, no chunks of keys), the fused attention's
# scalar form, and the tiled product in 3 and in 8 chunks), each against the
# defaults run first and last (the spread of those two says how far one run can be trusted): the
# pair, with the image prompt's context for decoding, and the kernel profile of each; each form's
# self-test before its bench.
KIT_VARIANTS=${KIT_VARIANTS-REXVQA_TILE_SPLIT=1;REXVQA_WIDE_CHUNKS=1;REXVQA_ATTENTION=scalar;REXVQA_TILE_SPLIT=3;REXVQA_TILE_SPLIT=8}
# A child bash runs it (timeout cannot run a function): the arrays go over as strings.
bench_variants() {
  local variant sep="" out checks
  local -a launch roof vars runs
  read -r -a launch <<<"$LAUNCH_REX_STR"
  read -r -a roof <<<"$ROOF_STR"
  IFS=';' read -r -a runs <<<"$KIT_VARIANTS"
  runs=("" "${runs[@]}" "")
  printf '{"runs": ['
  for variant in "${runs[@]}"; do
    read -r -a vars <<<"$variant"
    # A form's figures count only if it computes right on this GPU: its self-test first (its checks
    # are printed whatever the exit code).
    checks=null
    if [ -n "$variant" ]; then
      checks=$(env "${vars[@]}" "${launch[@]}" "$REX" selftest --backend wgpu --json 2>/dev/null)
      [[ $checks == \[* ]] || checks=null
    fi
    out=$(env "${vars[@]}" "${launch[@]}" "$REX" bench --model "$MODEL" --mmproj "$MMPROJ" --backend wgpu \
      --prefill "${PREFILL%%,*}" --decode "$DECODE" --official-max-tokens 8 --kernel-rows "" "${roof[@]}") || out=null
    [ -n "$out" ] || out=null
    printf '%s{"env": "%s", "selftest": %s, "result": %s}' "$sep" "$variant" "$checks" "$out"
    sep=", "
  done
  printf ']}\n'
}
if [ "$DRY_RUN" = 0 ]; then
  export -f bench_variants
  export REX MODEL MMPROJ PREFILL DECODE KIT_VARIANTS LAUNCH_REX_STR="${LAUNCH_REX[*]}" ROOF_STR="${ROOF[*]}"
fi
run_step bench-variants "$B_VARIANTS" stdout -- bash -c bench_variants

if [ "$DRY_RUN" = 0 ]; then
  write_summary
  ship
  say "done in $(elapsed_s)s; in \$OUT: $(ls "$OUT" | tr '\n' ' ')"
  cat "$OUT/summary.json"
fi
