#!/usr/bin/env python3
"""Reads the step JSONs that bench/device/run.sh wrote and prints one summary: the machine, each
step's status, the ratios rexvqa / llama.cpp on the same GPU and files (> 1: rexvqa faster; the
same definitions as bench/compare.py), and every speed target of issue #15 with the measured value.

Usage: summarize.py DIR [--machine NAME] [--note TEXT]   (standard library only)
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

# Issue #15's targets.
MIN_RATIO = 0.8
MAX_PUBLIC_TEST_S = 3600.0
MAX_DEVICE_BYTES = 3.6e9
MAX_FIRST_ANSWER_S = 15.0


def load(d, name):
    hits = sorted(d.glob(f"[0-9][0-9]-{name}.json"))
    if not hits:
        return None
    try:
        return json.loads(hits[0].read_text())
    except json.JSONDecodeError as e:
        return {"step": name, "unreadable": str(e)}


def target(value, limit, below=True):
    if value is None:
        return {"value": None, "limit": limit, "met": None}
    return {"value": value, "limit": limit, "met": value <= limit if below else value >= limit}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path)
    ap.add_argument("--machine", default="")
    ap.add_argument("--note", default="")
    a = ap.parse_args()
    d = a.dir
    machine = load(d, "machine") or {}
    names = ["synth", "selftest", "bench-kernels", "bench-wgpu", "llama-bench", "llama-mtmd", "calibrate",
             "first-answer", "bench-one-submit", "bench-tile4", "bench-variants"]
    steps = {n: load(d, n) for n in names}
    status = {}
    for n, s in steps.items():
        if s is None:
            status[n] = "missing"
        elif s.get("skipped"):
            status[n] = "skipped (no time left)"
        elif s.get("status"):
            status[n] = s["status"]
        elif s.get("timed_out"):
            status[n] = f"timed out after {s.get('limit_s')} s" if "limit_s" in s else s.get("reason", "timed out")
        elif s.get("exit_code") != 0:
            status[n] = f"failed (exit {s.get('exit_code')})"
        else:
            status[n] = f"ok, {s.get('wall_s')} s"

    def result(n):
        s = steps.get(n) or {}
        return s.get("result") if s.get("exit_code") == 0 else None

    selftest = (steps.get("selftest") or {}).get("result")
    if isinstance(selftest, list):
        failed = [c.get("name") for c in selftest if not c.get("passed")]
        status["selftest"] += f"; {len(selftest) - len(failed)} of {len(selftest)} checks passed" + (
            f", failed: {', '.join(map(str, failed))}" if failed else "")

    bench = result("bench-wgpu") or {}
    rr = bench.get("results") or {}
    lb = result("llama-bench") or []
    mt = result("llama-mtmd") or {}
    ratios = {}
    llama = {"prefill": {}, "decode_tokens_per_s": None, "image_encode_ms": None}
    for r in lb:
        if r.get("n_gen", 0) == 0:
            llama["prefill"][int(r["n_prompt"])] = r["avg_ts"]
        elif r.get("n_prompt", 0) == 0:
            llama["decode_tokens_per_s"] = r["avg_ts"]
        llama.setdefault("build", r.get("build_commit"))
        llama.setdefault("backends", r.get("backends"))
        llama.setdefault("gpu_info", r.get("gpu_info"))
    if mt.get("image_encode_ms_runs"):
        llama["image_encode_ms"] = statistics.median(mt["image_encode_ms_runs"])
    for n, tps in rr.get("prefill", []):
        ref = llama["prefill"].get(int(n))
        if ref:
            ratios[f"prefill_{n}"] = tps / ref
    if llama["decode_tokens_per_s"] and rr.get("decode_tokens_per_s"):
        ratios["decode"] = rr["decode_tokens_per_s"] / llama["decode_tokens_per_s"]
    if llama["image_encode_ms"] and rr.get("image_encode_ms"):
        ratios["image_encode"] = llama["image_encode_ms"] / rr["image_encode_ms"]

    # Step 9: the same decode with every launch of a token in one submission (issue #19).
    one = (result("bench-one-submit") or {}).get("results") or {}
    one_submit = {
        "tasks_per_submit": one.get("tasks_per_submit"),
        "submits_per_token": one.get("submits_per_token"),
        "decode_tokens_per_s": one.get("decode_tokens_per_s"),
        "default_decode_tokens_per_s": rr.get("decode_tokens_per_s"),
        "default_submits_per_token": rr.get("submits_per_token"),
        "speedup": one["decode_tokens_per_s"] / rr["decode_tokens_per_s"]
        if one.get("decode_tokens_per_s") and rr.get("decode_tokens_per_s") else None,
    }

    # Step 10: prefill and image with the tiled kernel's scalar form, 4 x 4 blocks (REXVQA_TILE_PER=s4).
    t8 = (result("bench-tile4") or {}).get("results") or {}

    def tiled_ms(res):
        return {f"{k['matrix']} {k['half']}": k["ms"] for k in res.get("kernels") or []
                if k.get("kernel") == "tiled" and k.get("m") == 256}

    default_tiled, t8_tiled = tiled_ms(rr), tiled_ms(t8)
    tile8 = {
        "prefill": t8.get("prefill"),
        "default_prefill": rr.get("prefill"),
        "image_encode_ms": t8.get("image_encode_ms"),
        "default_image_encode_ms": rr.get("image_encode_ms"),
        # > 1: the 4 x 4 form is faster.
        "image_speedup": rr["image_encode_ms"] / t8["image_encode_ms"]
        if t8.get("image_encode_ms") and rr.get("image_encode_ms") else None,
        "prefill_speedup": {str(n): v / dict(rr.get("prefill") or []).get(n)
                            for n, v in t8.get("prefill") or [] if dict(rr.get("prefill") or []).get(n)},
        "tiled_m256_speedup": {k: default_tiled[k] / v for k, v in t8_tiled.items() if default_tiled.get(k) and v},
    }

    # Steps 4 and 10 with --profile: each pass's device time and its costliest kernels.
    def profile_summary(res):
        out = []
        for ps in (res.get("profile") or {}).get("passes") or []:
            out.append({
                "pass": ps.get("pass"), "timing": ps.get("timing"), "wall_ms": ps.get("wall_ms"),
                "gpu_ms": ps.get("gpu_ms"), "dispatches": ps.get("dispatches"),
                "top": [{k: kt.get(k) for k in ("kernel", "dispatches", "gpu_us", "gb_per_s", "gflop_per_s",
                                                 "roofline_pct")} for kt in (ps.get("kernels") or [])[:8]],
            })
        return out

    # Step 11: kernel forms chosen by environment variables, the defaults ("") first and last.
    def variant_run(run):
        res = (run.get("result") or {}).get("results") or {}
        passes = (res.get("profile") or {}).get("passes") or []
        checks = run.get("selftest")
        return {
            "env": run.get("env"),
            # "passed of checks" for a form's own self-test; None for the defaults (step 2).
            "selftest": f"{sum(1 for c in checks if c.get('passed'))} of {len(checks)}"
            if isinstance(checks, list) else None,
            "decode_tokens_per_s": res.get("decode_tokens_per_s"),
            "prefill": res.get("prefill"),
            "image_encode_ms": res.get("image_encode_ms"),
            "chain_us_per_dispatch": res.get("chain_us_per_dispatch"),
            "gpu_ms": {ps.get("pass"): ps.get("gpu_ms") for ps in passes},
            "token_kernels_us": {kt.get("kernel"): kt.get("gpu_us")
                                 for ps in passes if ps.get("pass") == "token" for kt in ps.get("kernels") or []},
        }

    variants = [variant_run(r) for r in (result("bench-variants") or {}).get("runs") or []]

    cal = result("calibrate") or {}
    projections = cal.get("projections") or []
    first = steps.get("first-answer") or {}
    first_s = float(first["wall_s"]) if first.get("exit_code") == 0 else None
    targets = {
        "ratio_vs_llama_cpp_min": target(min(ratios.values()) if ratios else None, MIN_RATIO, below=False),
        "public_test_s_every_question_its_own_study":
            target(projections[0]["total_s"] if len(projections) > 0 else None, MAX_PUBLIC_TEST_S),
        "public_test_s_4_35_questions_per_study":
            target(projections[1]["total_s"] if len(projections) > 1 else None, MAX_PUBLIC_TEST_S),
        "peak_device_bytes": target(rr.get("peak_device_bytes"), MAX_DEVICE_BYTES),
        "load_to_first_answer_s": target(first_s, MAX_FIRST_ANSWER_S),
    }
    out = {
        "what": "GPU evidence kit (bench/device/run.sh): rexvqa (wgpu) vs llama.cpp (Vulkan) on the same "
                "GPU and files; ratios > 1: rexvqa faster",
        "machine_name": a.machine,
        "note": a.note,
        "scale": machine.get("scale"),
        "date_utc": machine.get("date_utc"),
        "machine": {k: machine.get(k) for k in ("cpu", "cpus", "memory", "os_release", "glibc", "vulkan_setup",
                                                 "vulkan_devices", "launchers", "nvidia_smi")},
        "adapter": bench.get("results", {}).get("adapter") or (result("bench-kernels") or {}).get("adapter"),
        "steps": status,
        "ratios": ratios,
        "targets": targets,
        "rexvqa": {"load_s": bench.get("load_s"), **{k: v for k, v in rr.items() if k not in ("kernels", "adapter")}},
        "llama_cpp": llama,
        "calibrate": cal,
        "first_answer_wall_s": first_s,
        "one_submission_per_token": one_submit,
        "tile_per_4": tile8,
        "variants": variants,
        "profile": {"default": profile_summary(rr), "tile_per_4": profile_summary(t8),
                    "roofline": (rr.get("profile") or {}).get("roofline")},
    }
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
