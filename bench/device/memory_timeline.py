#!/usr/bin/env python3
"""The browser's GPU memory stage by stage (issue #33): CubeCL's count and the buffers the page's
WebGPU device holds (results.memory_by_stage of the Benchmark's JSON) beside what the driver says
the browser's processes hold (nvidia-smi samples that bench/device/run-browser.sh took during the
step), aligned on the run's wall-clock window (bench_window_unix_ms).

    memory_timeline.py STEP.json STEP.gpu-memory.csv [--json out.json]

STEP.json is a bvn step's JSON (browser-vs-native.mjs: its browser_runs[0]) or browser-bench.mjs's.
For each stage: when it ended (seconds into the run), CubeCL's reserved bytes, the live buffer
bytes, and the driver's figure for the browser: the most seen during the stage and the last
sample before its end. The gap between the driver's figure and the live bytes is what the browser
(Dawn, the driver) holds beyond the buffers our stack has asked for and not destroyed.
"""
import argparse
import json

MIB = 1 << 20


def load_samples(path):
    """(unix time, MiB) of the browser's processes summed per sampling instant."""
    per_instant = {}
    with open(path) as f:
        for line in f:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) < 4 or not parts[-1].isdigit():
                continue
            try:
                t = float(parts[0])
            except ValueError:
                continue
            if "chrom" not in ",".join(parts[2:-1]):
                continue
            per_instant[t] = per_instant.get(t, 0) + int(parts[-1])
    return sorted(per_instant.items())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench_json")
    ap.add_argument("samples_csv")
    ap.add_argument("--json", help="write the table here too")
    a = ap.parse_args()
    j = json.load(open(a.bench_json))
    run = j["browser_runs"][0] if "browser_runs" in j else j
    window = run.get("bench_window_unix_ms")
    stages = run["results"].get("memory_by_stage") or []
    if not window or not stages:
        raise SystemExit("no bench_window_unix_ms or memory_by_stage in the JSON: a build before them")
    t0 = window[0] / 1000.0
    samples = load_samples(a.samples_csv)
    before = [m for t, m in samples if t < t0]
    rows = []
    prev = t0
    for s in stages:
        end = t0 + s["t_ms"] / 1000.0
        during = [m for t, m in samples if prev <= t <= end]
        last = [m for t, m in samples if t <= end]
        rows.append({
            "stage": s["stage"],
            "end_s": round(s["t_ms"] / 1000.0, 2),
            "cubecl_reserved_mib": None if s.get("reserved") is None else round(s["reserved"] / MIB),
            "live_buffers_mib": None if s.get("live") is None else round(s["live"] / MIB),
            "driver_max_during_mib": max(during) if during else None,
            "driver_last_mib": last[-1] if last else None,
        })
        prev = end
    after = [m for t, m in samples if t > window[1] / 1000.0]
    out = {
        "driver_before_run_mib": before[-1] if before else None,
        "driver_max_during_run_mib": max((m for t, m in samples if t0 <= t <= window[1] / 1000.0), default=None),
        "driver_after_run_mib": max(after) if after else None,
        "peak_device_bytes": run["results"].get("peak_device_bytes"),
        "peak_buffer_bytes": run["results"].get("peak_buffer_bytes"),
        # (buffers under 4 MiB at the run's start, Dawn's modelled power-of-two slack on them)
        "small_buffers_at_start": run["results"].get("small_buffers_at_start"),
        "stages": rows,
    }
    print(f"{'stage':36} {'end s':>7} {'CubeCL':>8} {'live':>8} {'driver max':>11} {'driver last':>12}  (MiB)")
    for r in rows:
        f = lambda v: "–" if v is None else str(v)
        print(f"{r['stage']:36} {r['end_s']:7.1f} {f(r['cubecl_reserved_mib']):>8} {f(r['live_buffers_mib']):>8} "
              f"{f(r['driver_max_during_mib']):>11} {f(r['driver_last_mib']):>12}")
    print(f"driver: {out['driver_before_run_mib']} MiB before the run, {out['driver_max_during_run_mib']} at most during it, "
          f"{out['driver_after_run_mib']} at most after it")
    small = out["small_buffers_at_start"]
    if small:
        print(f"at the start: {small[0]} buffers under 4 MiB; Dawn's power-of-two suballocation would add "
              f"{small[1] / MIB:.0f} MiB to them (the wrapper's model)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
