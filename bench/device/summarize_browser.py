#!/usr/bin/env python3
"""One summary of the browser kit's runs on a GPU machine: every browser-vs-native JSON in a
folder (bench/device/run-browser.sh's and any run by hand), its figures and ratios, and, where
both sides timed each matrix alone, the per-matrix browser/native speed of each kernel form.

    python3 bench/device/summarize_browser.py DIR --machine NAME [--note TEXT] > out.json

Ratios read "browser / native speed": 1 is parity, below 1 the browser is slower. Standard
library only.
"""
import argparse
import json
import statistics
import sys
from pathlib import Path


def kernel_ratios(report):
    """Per (matrix, m, kernel, half) present on both sides: browser ms, native ms, speed ratio."""
    b = report["browser_runs"][0]["results"].get("kernels") or []
    n = report["native_runs"][0]["results"].get("kernels") or []
    key = lambda k: (k["matrix"], k["m"], k["kernel"], k["half"])
    native = {key(k): k for k in n}
    rows = []
    for k in b:
        m = native.get(key(k))
        if m and k["ms"] > 0:
            rows.append({"matrix": k["matrix"], "ty": k["ty"], "m": k["m"], "kernel": k["kernel"],
                         "half": k["half"], "browser_ms": round(k["ms"], 4), "native_ms": round(m["ms"], 4),
                         "ratio": round(m["ms"] / k["ms"], 3)})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--machine", required=True)
    ap.add_argument("--note", default="")
    a = ap.parse_args()
    runs = []
    for f in sorted(Path(a.dir).rglob("*.json")):
        try:
            j = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(j, dict) or "browser_runs" not in j:
            continue
        b0 = j["browser_runs"][0]
        kr = kernel_ratios(j)
        by_form = {}
        for r in kr:
            by_form.setdefault(f'{r["kernel"]}/{r["half"]} m={r["m"]}', []).append(r["ratio"])
        runs.append({
            "file": str(f.relative_to(a.dir)),
            "model": Path(j["model"]).name,
            "mmproj": Path(j["mmproj"]).name if j.get("mmproj") else None,
            "prefill": j["prefill"], "decode": j["decode"], "official_max_tokens": j["official_max_tokens"],
            "browser_adapter": b0.get("adapter"),
            "browser_adapter_features": b0["results"].get("adapter"),
            "native_adapter_features": j["native_runs"][0]["results"].get("adapter"),
            "browser": j["browser"], "native": j["native"],
            "ratios": {k: round(v, 3) for k, v in j["ratios"].items()},
            "kernel_ratio_median_by_form": {k: statistics.median(v) for k, v in sorted(by_form.items())},
            "kernels": kr,
        })
    json.dump({"what": "browser (Chromium WebGPU) / native (rexvqa bench --backend wgpu) on one GPU machine, "
                       "the same Vulkan driver and files (bench/device/run-browser.sh)",
               "machine": a.machine, "note": a.note, "runs": runs}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
