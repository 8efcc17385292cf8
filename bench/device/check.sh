#!/usr/bin/env bash
# Keeps the GPU kit's scripts from rotting between the rare GPU runs, in a few seconds and without
# building anything: syntax of every script, run.sh's plan (--dry-run), and a whole run.sh on a
# stub kit (shell scripts standing in for rexvqa, llama-bench and llama-mtmd-cli) whose JSON files
# must all parse, with a step that is absent from the build, one that times out and one that is
# skipped for lack of time, summarised by summarize.py. scripts/test.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
fail() { echo "check.sh: $*" >&2; exit 1; }

for f in bench/device/run.sh bench/device/pack.sh bench/device/collect.sh bench/device/check.sh bench/build_llamacpp.sh \
  bench/device/pack-browser.sh bench/device/run-browser.sh; do
  bash -n "$f" || fail "$f: syntax"
done
# (ast.parse, not py_compile: nothing written into the tree.)
python3 -c 'import ast, sys; [ast.parse(open(f).read(), f) for f in sys.argv[1:]]' bench/device/summarize.py bench/device/tokenizer_gguf.py bench/device/summarize_browser.py bench/device/memory_timeline.py

plan=$(OUT=/nonexistent bench/device/run.sh --dry-run)
for step in synth selftest bench-kernels bench-wgpu llama-bench llama-mtmd calibrate first-answer bench-one-submit bench-tile4 bench-variants; do
  grep -q -- "-$step " <<<"$plan" || fail "run.sh --dry-run lists no $step step"
done
grep -q 'selftest --backend wgpu --json' <<<"$plan" || fail "run.sh must call 'rexvqa selftest --backend wgpu --json'"

tmp=$(mktemp -d)
# run-browser.sh links playwright-core into a checkout that has none; the link would outlive the
# stub kit it points into (and make pack-browser.sh believe node_modules is there).
had_pw=0; [ -e node_modules/playwright-core ] && had_pw=1
cleanup() {
  rm -rf "$tmp"
  if [ "$had_pw" = 0 ] && [ -L node_modules/playwright-core ]; then rm -f node_modules/playwright-core; fi
}
[ -n "${CHECK_KEEP:-}" ] || trap cleanup EXIT
kit=$tmp/kit
mkdir -p "$kit/debs" "$kit/cxx" "$kit/glibc" "$tmp/payload/bin" "$tmp/payload/data"
echo "stub kit (bench/device/check.sh)" >"$kit/manifest.txt"
# busybox: only what run.sh asks of it when xz is missing (python's lzma stands in for xz, which
# a minimal Debian lacks).
cat >"$kit/busybox" <<'EOF'
#!/usr/bin/env bash
case "$1" in
  unxz) exec python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$3" ;;
  tar) shift; exec tar "$@" ;;
  gunzip) shift; exec gzip -d "$@" ;;
  *) echo "stub busybox: $1 not stubbed" >&2; exit 1 ;;
esac
EOF
cat >"$tmp/payload/bin/rexvqa" <<'EOF'
#!/usr/bin/env bash
# Stub rexvqa: the subcommands and outputs run.sh relies on.
arg() { local k=$1; shift; while [ $# -gt 0 ]; do [ "$1" = "$k" ] && { echo "$2"; return; }; shift; done; }
case "$1" in
  --help) echo "usage" ;;
  synth-model) out=$(arg --out "$@"); [ -s "$(arg --tokenizer-from "$@")" ] || exit 1; mkdir -p "$out"
    : >"$out/medgemma-4b-synthetic-Q4_K_M.gguf"; : >"$out/mmproj-medgemma-4b-synthetic-F16.gguf" ;;
  synth) out=$(arg --out "$@"); mkdir -p "$out/metadata" "$out/deid_png/p"; : >"$out/deid_png/p/1.png"
    printf '{\n  "q1": {\n    "study_id": "s"\n  }\n}\n' >"$out/metadata/test_vqa_data.json" ;;
  selftest) [ -n "${STUB_SELFTEST:-}" ] || { echo "error: unrecognized subcommand 'selftest'" >&2; exit 2; }
    echo '[{"name": "gemv q4_k", "passed": true}, {"name": "naive q6_k", "passed": false}]'; exit 1 ;;
  bench-kernels) echo '{"adapter": {"name": "stub"}, "kernels": []}' ;;
  bench) [ -n "${STUB_SLOW_BENCH:-}" ] && sleep 30
    if [ "${REXVQA_TILE_PER:-}" = s4 ]; then
      echo '{"load_s": 1.5, "results": {"prefill": [[300, 2500.0], [1000, 3000.0]], "image_encode_ms": 40.0,
      "kernels": [{"matrix": "blk.0.ffn_down", "half": "native", "kernel": "tiled", "m": 256, "ms": 1.0}]}}'
    elif [ -n "${REXVQA_GEMV_TEAM:-}${REXVQA_DECODE_SPLIT:-}" ]; then
      echo '{"load_s": 1.5, "results": {"prefill": [[300, 2000.0]], "decode_tokens_per_s": '"$((${REXVQA_GEMV_TEAM:-0} + 10))"',
      "profile": {"passes": [{"pass": "token", "gpu_ms": 9.0, "kernels": [{"kernel": "QgemvKernel", "gpu_us": 5000.0,
        "gb_per_s": 500.0}]}]}}}'
    elif [ -n "${CUBECL_WGPU_MAX_TASKS:-}" ]; then
      echo '{"load_s": 1.5, "results": {"prefill": [[300, 2000.0]], "decode_tokens_per_s": 99.0,
      "submits_per_token": 1, "tasks_per_submit": '"$CUBECL_WGPU_MAX_TASKS"', "adapter": {"name": "stub"}}}'
    else
      echo '{"load_s": 1.5, "results": {"prefill": [[300, 2000.0], [1000, 1500.0]], "decode_tokens_per_s": 90.0,
      "submits_per_token": 9, "tasks_per_submit": 32,
      "image_encode_ms": 50.0, "peak_device_bytes": 3400000000, "adapter": {"name": "stub"},
      "kernels": [{"matrix": "blk.0.ffn_down", "half": "native", "kernel": "tiled", "m": 256, "ms": 2.0}],
      "profile": {"roofline": {"gb_per_s": 3350.0, "gflop_per_s": 67000.0}, "passes": [{"pass": "token",
        "timing": "device", "wall_ms": 40.0, "gpu_ms": 30.0, "dispatches": 286, "timed": 286,
        "kernels": [{"kernel": "QgemvKernel", "dispatches": 100, "gpu_us": 20000.0, "bytes": 2400000000,
        "flop": 8000000000, "gb_per_s": 120.0, "gflop_per_s": 400.0, "roofline_pct": 3.6}]}]}}}'
    fi ;;
  calibrate) echo '{"per_study_ms": 60.0, "per_question_ms": 20.0, "total_s": 1.0,
    "projections": [{"questions": 40826, "studies": 40826, "total_s": 3265.0},
                    {"questions": 40826, "studies": 9385, "total_s": 1379.0}]}' ;;
  answer) [ "$(arg --id "$@")" = q1 ] || exit 3; sleep 30 ;;
  *) exit 9 ;;
esac
EOF
cat >"$tmp/payload/bin/llama-bench" <<'EOF'
#!/usr/bin/env bash
[ "$1" = --help ] && exit 0
echo '[{"n_prompt": 300, "n_gen": 0, "avg_ts": 2500.0, "build_commit": "stub"},
 {"n_prompt": 1000, "n_gen": 0, "avg_ts": 1500.0}, {"n_prompt": 0, "n_gen": 32, "avg_ts": 100.0}]'
EOF
cat >"$tmp/payload/bin/llama-mtmd-cli" <<'EOF'
#!/usr/bin/env bash
echo "main: loading model"; echo "image/slice encoded in 40 ms"; echo "mtmd batch encoding done in 60 ms" >&2
EOF
chmod +x "$tmp/payload/bin/"* "$kit/busybox"
echo tok >"$tmp/payload/data/gemma3-tokenizer.gguf"
python3 -c 'import sys, tarfile; t = tarfile.open(sys.argv[1], "w:xz"); t.add(sys.argv[2] + "/bin", "bin"); t.add(sys.argv[2] + "/data", "data"); t.close()' \
  "$kit/payload.tar.xz" "$tmp/payload"

# No Vulkan driver for the stub run: vulkaninfo then answers at once (on lavapipe it takes seconds,
# which the short deadline below cannot spare).
export VK_ICD_FILENAMES=/nonexistent/icd.json VK_DRIVER_FILES=/nonexistent/icd.json

# The first-answer step sleeps past the 3 s step cap (timed out); a deadline that leaves no room
# after it would skip a later step, so the deadline is generous and the cap does the timing out.
out=$tmp/out
mkdir -p "$out"
# The variants the stub answers in kind (its decode figure follows the variables it is given).
KIT_VARIANTS='REXVQA_WIDE_CHUNKS=1;REXVQA_TILE_PER=s4;REXVQA_ATTENTION=scalar;REXVQA_DECODE_SPLIT=1;REXVQA_GEMV_TEAM=32' \
OUT=$out KIT_DIR=$kit KIT_STEP_LIMIT_S=3 KIT_DEADLINE_S=120 bench/device/run.sh 2>"$tmp/run.log" ||
  { cat "$tmp/run.log" >&2; fail "run.sh failed on the stub kit"; }
mkdir -p "$out/x" && tar -C "$out/x" -xf "$out/steps.tar"
[ "$(find "$out" -maxdepth 1 -type f | wc -l)" -le 8 ] || fail "run.sh leaves more than 8 files in \$OUT"
python3 - "$out/x" <<'EOF' || { cat "$tmp/run.log" >&2; fail "run.sh's JSON on the stub kit is wrong"; }
import json, subprocess, sys
from pathlib import Path
d = Path(sys.argv[1])
files = sorted(p.name for p in d.glob("*.json"))
want = ["00-machine.json", "01-synth.json", "02-selftest.json", "03-bench-kernels.json", "04-bench-wgpu.json",
        "05-llama-bench.json", "06-llama-mtmd.json", "07-calibrate.json", "08-first-answer.json", "09-bench-one-submit.json",
        "10-bench-tile4.json", "11-bench-variants.json", "99-summary.json"]
assert files == want, files
for f in files:
    json.loads((d / f).read_text())
s = json.loads(subprocess.run([sys.executable, "bench/device/summarize.py", str(d)], check=True,
                              capture_output=True, text=True).stdout)
st = s["steps"]
assert st["selftest"] == "not in this build", st
assert st["first-answer"].startswith("timed out"), st
assert all(st[k].startswith("ok") for k in ("synth", "bench-kernels", "bench-wgpu", "llama-bench", "llama-mtmd",
                                            "calibrate", "bench-one-submit")), st
assert abs(s["ratios"]["prefill_300"] - 0.8) < 1e-9 and abs(s["ratios"]["image_encode"] - 1.2) < 1e-9, s["ratios"]
assert s["targets"]["public_test_s_every_question_its_own_study"]["met"] is True, s["targets"]
assert s["targets"]["load_to_first_answer_s"]["met"] is None, s["targets"]
one = s["one_submission_per_token"]
assert one["submits_per_token"] == 1 and one["tasks_per_submit"] == 512 and abs(one["speedup"] - 1.1) < 1e-9, one
t8 = s["tile_per_4"]
assert st["bench-tile4"].startswith("ok"), st
assert t8["image_speedup"] == 1.25 and t8["prefill_speedup"] == {"300": 1.25, "1000": 2.0}, t8
assert t8["tiled_m256_speedup"] == {"blk.0.ffn_down native": 2.0}, t8
vr = s["variants"]
assert st["bench-variants"].startswith("ok"), st
assert [r["env"] for r in vr] == ["", "REXVQA_WIDE_CHUNKS=1", "REXVQA_TILE_PER=s4", "REXVQA_ATTENTION=scalar",
                                 "REXVQA_DECODE_SPLIT=1", "REXVQA_GEMV_TEAM=32", ""], vr
assert [r["decode_tokens_per_s"] for r in vr] == [90.0, 90.0, None, 90.0, 10, 42, 90.0], vr
assert vr[4]["token_kernels_us"] == {"QgemvKernel": 5000.0} and vr[4]["gpu_ms"] == {"token": 9.0}, vr
# This build's stub has no self-test (step 2 says so): no variant claims one.
assert [r["selftest"] for r in vr] == [None] * 7, vr
pr = s["profile"]
assert pr["roofline"]["gb_per_s"] == 3350.0 and pr["tile_per_4"] == [], pr
assert pr["default"][0]["pass"] == "token" and pr["default"][0]["top"][0]["roofline_pct"] == 3.6, pr
EOF

# A self-test with a failing check (its JSON kept), and a slow step that eats the deadline: it times
# out, and every step after it is skipped and says so.
out2=$tmp/out2
mkdir -p "$out2"
# (bench is stopped at 8 s, leaving less than the 10 s a step needs of the 20 s deadline; the
# steps before it have 5 s of room on a busy machine.)
STUB_SELFTEST=1 STUB_SLOW_BENCH=1 OUT=$out2 KIT_DIR=$kit KIT_STEP_LIMIT_S=8 KIT_DEADLINE_S=20 bench/device/run.sh 2>"$tmp/run2.log" ||
  { cat "$tmp/run2.log" >&2; fail "run.sh failed on the stub kit with a short deadline"; }
mkdir -p "$out2/x" && tar -C "$out2/x" -xf "$out2/steps.tar"
grep -q '"timed_out": true' "$out2/x/04-bench-wgpu.json" || { cat "$tmp/run2.log" >&2; fail "a step past its limit is not marked timed out"; }
python3 bench/device/summarize.py "$out2/x" >"$tmp/sum2.json"
grep -q '"selftest": "failed (exit 1); 1 of 2 checks passed, failed: naive q6_k"' "$tmp/sum2.json" ||
  { cat "$tmp/run2.log" "$tmp/sum2.json" >&2; fail "a failing self-test's checks are not summarised"; }
grep -q '"skipped": true' "$out2/x/09-bench-one-submit.json" || { cat "$tmp/run2.log" >&2; fail "a step past the deadline is not marked skipped"; }
# A kit without llama.cpp (KIT_LLAMA=0) and a step list: the llama.cpp steps and the steps not
# listed are skipped and say why; env.sh keeps the set-up for the browser kit's later call.
kit3=$tmp/kit3
cp -r "$kit" "$kit3"
python3 -c 'import sys, tarfile; t = tarfile.open(sys.argv[1], "w:xz"); t.add(sys.argv[2] + "/bin/rexvqa", "bin/rexvqa"); t.add(sys.argv[2] + "/data", "data"); t.close()' \
  "$kit3/payload.tar.xz" "$tmp/payload"
out3=$tmp/out3 work3=$tmp/work3
mkdir -p "$out3"
STUB_SELFTEST=1 KIT_VARIANTS='REXVQA_ATTENTION=scalar' OUT=$out3 KIT_DIR=$kit3 KIT_WORK=$work3 KIT_KEEP_WORK=1 \
  KIT_STEPS=synth,bench-wgpu,llama-bench,bench-variants KIT_STEP_LIMIT_S=3 KIT_DEADLINE_S=60 \
  bench/device/run.sh 2>"$tmp/run3.log" || { cat "$tmp/run3.log" >&2; fail "run.sh failed on a kit without llama.cpp"; }
mkdir -p "$out3/x" && tar -C "$out3/x" -xf "$out3/steps.tar"
grep -q '"exit_code": 0' "$out3/x/04-bench-wgpu.json" || fail "KIT_STEPS did not run bench-wgpu"
grep -q 'no llama.cpp in this kit' "$out3/x/05-llama-bench.json" || fail "a kit without llama.cpp does not skip llama-bench"
grep -q 'not in KIT_STEPS' "$out3/x/07-calibrate.json" || fail "a step not in KIT_STEPS is not skipped"
# A variant's own self-test (here with a failing check) is kept beside its figures.
python3 bench/device/summarize.py "$out3/x" | python3 -c '
import json, sys
vr = json.load(sys.stdin)["variants"]
assert [(r["env"], r["selftest"]) for r in vr] == [("", None), ("REXVQA_ATTENTION=scalar", "1 of 2"), ("", None)], vr
' || fail "a variant's self-test is not summarised"
( . "$work3/env.sh" && [ "${KIT_REX[-1]}" = "$work3/kit/bin/rexvqa" ] && [ "$KIT_WORK" = "$work3" ] ) || fail "run.sh's env.sh does not name the kit's rexvqa"

# The browser kit's call sequence on a stub stream of three parts: each call stores its part, a
# call with parts missing says so, the last unpacks and runs (no steps here), and a sequence whose
# earlier part is gone (the machine went back between calls) stops with exit 3.
bs=$tmp/bstream
mkdir -p "$bs/p/lib" "$bs/p/fonts" "$bs/p/node" "$bs/p/dist" "$bs/p/chromium" "$bs/p/node_modules/playwright-core"
printf '<fontconfig><dir>@ROOT@/fonts</dir></fontconfig>\n' >"$bs/p/fonts/fonts.conf"
printf '#!/bin/sh\necho v0-stub\n' >"$bs/p/node/node" && chmod +x "$bs/p/node/node"
head -c 300000 /dev/urandom >"$bs/p/chromium/chromium-headless-shell"
echo '<html></html>' >"$bs/p/dist/index.html"
(cd "$bs/p" && tar -cf - .) | xz -0 >"$bs/all.tar.xz"
total=$(stat -c %s "$bs/all.tar.xz")
third=$((total / 3 + 1))
{
  echo "stub browser kit (bench/device/check.sh)"
  echo "stream: $total bytes, sha256 $(sha256sum "$bs/all.tar.xz" | cut -d' ' -f1)"
  echo "parts: 3"
  for i in 1 2 3; do
    mkdir -p "$bs/kit$i/$i"
    dd if="$bs/all.tar.xz" of="$bs/kit$i/$i/part.$i" bs=64K iflag=skip_bytes,count_bytes skip=$(((i - 1) * third)) count="$third" status=none
    echo "part.$i $(stat -c %s "$bs/kit$i/$i/part.$i") $(sha256sum "$bs/kit$i/$i/part.$i" | cut -d' ' -f1)"
  done
} >"$bs/manifest.txt"
for i in 1 2 3; do cp "$bs/manifest.txt" "$bs/kit$i/$i/"; done
icd=$tmp/icd.json && echo '{}' >"$icd"
bw=$tmp/bwork bout=$tmp/bout
brun() { OUT=$bout BKIT_DIR=$bs/kit$1 BKIT_WORK=$bw BROWSER_STEPS=none BROWSER_REX=/bin/true BROWSER_ICD=$icd XDG_RUNTIME_DIR=$tmp/xdg \
  bench/device/run-browser.sh 2>>"$tmp/brun.log"; }
brun 1 || fail "run-browser.sh: the first part's call failed"
grep -q 'have parts 1 of 3; the next call carries bench/device/bkit/2' "$tmp/brun.log" || { cat "$tmp/brun.log" >&2; fail "run-browser.sh does not name the next part"; }
brun 2 && brun 3 || { cat "$tmp/brun.log" >&2; fail "run-browser.sh: the later calls failed"; }
[ -f "$bw/root/chromium/chromium-headless-shell" ] && [ -f "$bout/browser-summary.json" ] || { cat "$tmp/brun.log" >&2; fail "run-browser.sh did not unpack and report"; }
python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); assert j["steps"] == [], j' "$bout/browser-summary.json" ||
  fail "run-browser.sh's summary is not JSON"
# A step with nvidia-smi there: the step's summary holds the most GPU memory the browser's processes
# and the others held (a stub nvidia-smi; the stub node ends the step at once).
mkdir -p "$tmp/fakebin"
printf '#!/bin/sh\necho "101, /opt/r/chromium/chromium-headless-shell, 5120"\necho "102, /opt/kw/rexvqa, 4096"\necho "103, /opt/r/chromium/chromium-headless-shell, 700"\n' >"$tmp/fakebin/nvidia-smi"
chmod +x "$tmp/fakebin/nvidia-smi"
PATH="$tmp/fakebin:$PATH" BROWSER_STEPS=bvn-tiny OUT=$bout BKIT_DIR=$bs/kit3 BKIT_WORK=$bw BROWSER_REX=/bin/true BROWSER_ICD=$icd \
  XDG_RUNTIME_DIR=$tmp/xdg bench/device/run-browser.sh 2>>"$tmp/brun.log" || { cat "$tmp/brun.log" >&2; fail "run-browser.sh: a step under a stub nvidia-smi failed"; }
python3 -c 'import json, sys; s = json.load(open(sys.argv[1]))["steps"]; assert s[0]["gpu_memory_max_mib"] == {"browser": 5120, "native": 4096}, s' "$bout/browser-summary.json" ||
  { cat "$bout/browser-summary.json" >&2; fail "run-browser.sh does not report the GPU memory nvidia-smi saw"; }
rm -rf "$bw"
brun 1 && { rc=0; brun 3 || rc=$?; [ "$rc" = 3 ]; } || { cat "$tmp/brun.log" >&2; fail "run-browser.sh goes on with a part missing (exit ${rc:-?})"; }

echo "bench/device: scripts check out (stub run in $SECONDS s)${CHECK_KEEP:+; files in $tmp}"
