#!/usr/bin/env python3
"""The "Current figures" table of bench/README.md, generated from the files under bench/results/.

    python3 bench/figures.py            # print the table (Markdown)
    python3 bench/figures.py --write    # replace the block between the README's figures markers
    python3 bench/figures.py --check    # exit 1 when the README's block is not what --write writes

Rows, each from the newest results of its kind (by the timestamp in the folder's name, or the
file's own `date`), each citing the file it was read from:
- the H200's native kit: the newest `device/h200-full-<stamp>/` whose `04-bench-wgpu.json` has
  results (prefill, decode, image, questions, peak device memory), its `07-calibrate.json`, and
  llama.cpp on the same GPU where that folder's `05-llama-bench.json` has results;
- the H200's browser / native ratios: per model, the newest `device/h200-browser-<stamp>/`
  (variant folders with a suffix after the stamp left out) holding its `bvn-*.json`, else the newest
  `h200-browser-vs-native-<YYYYMMDD>T<HHMM>.json`;
- the CI VM's SwiftShader browser / native ratios: every model of the
  `ci-vm-2core-swiftshader-*-browser-vs-native.json` files of the newest `date`.
A file whose fields are missing is skipped and its row says n/a. Standard library only.
"""

import argparse
import json
import os
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN = "<!-- figures:begin -->"
END = "<!-- figures:end -->"
STAMP = re.compile(r"(\d{4}-\d{2}-\d{2})(?:T(\d{4}))?$")
BVN_MODELS = [("bvn-4b.json", "synthetic 4B pair"), ("bvn-tiny.json", "tiny pair")]


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def dig(obj, *keys):
    for k in keys:
        if isinstance(obj, dict):
            obj = obj.get(k)
        elif isinstance(obj, list) and isinstance(k, int) and -len(obj) <= k < len(obj):
            obj = obj[k]
        else:
            return None
    return obj


def is_num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x


def num(x):
    """A figure at the precision it is worth: 2,782 / 73.3 / 5.08."""
    if not is_num(x):
        return "n/a"
    a = abs(x)
    if a >= 100:
        return f"{x:,.0f}"
    if a >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def ratio(x):
    return f"{x:.2f}×" if is_num(x) else "n/a"


def gib(b):
    return f"{b / 1e9:.2f} GB ({b / 2**20:,.0f} MiB)" if is_num(b) else "n/a"


def cell(s):
    return str(s).replace("|", "/").replace("\n", " ")


def rel(path):
    try:
        return Path(os.path.relpath(path, ROOT)).as_posix()
    except ValueError:
        return Path(path).as_posix()


def stamp_key(name, prefix):
    """(date, time) of a folder named PREFIX<YYYY-MM-DD>[T<HHMM>], None for any other name."""
    if not name.startswith(prefix):
        return None
    m = STAMP.fullmatch(name[len(prefix):])
    return (m.group(1), m.group(2) or "") if m else None


def stamped_dirs(base, prefix):
    """Folders of `base` named PREFIX<stamp>, newest first."""
    try:
        names = os.listdir(base)
    except OSError:
        return []
    found = [(stamp_key(n, prefix), n) for n in names if (Path(base) / n).is_dir()]
    return [Path(base) / n for k, n in sorted((f for f in found if f[0]), reverse=True)]


# --- the H200's native kit ---------------------------------------------------------------------

def native_kit_rows(results):
    rows = []
    kit = None
    for d in stamped_dirs(results / "device", "h200-full-"):
        r = dig(load(d / "04-bench-wgpu.json"), "result", "results")
        if isinstance(r, dict) and (r.get("prefill") or is_num(r.get("decode_tokens_per_s"))):
            kit, res = d, r
            break
    if kit is None:
        return [("H200 native kit (synthetic 4B pair)", "n/a: no `h200-full-*` folder with bench results",
                 "bench/results/device/")]
    src = f"`{rel(kit / '04-bench-wgpu.json')}`"
    who = "H200 native kit, 4B pair"

    prefill = {}
    for p in res.get("prefill") or []:
        if isinstance(p, list) and len(p) == 2 and is_num(p[0]) and is_num(p[1]):
            prefill[int(p[0])] = p[1]
    lengths = sorted(prefill) or [300, 1000]
    rows.append((f"{who}: prefill {' / '.join(map(str, lengths))}",
                 " / ".join(num(prefill.get(n)) for n in lengths) + " tok/s", src))
    rows.append((f"{who}: decode", f"{num(res.get('decode_tokens_per_s'))} tok/s", src))
    img = res.get("image_encode_ms")
    rows.append((f"{who}: image encode", f"{num(img)} ms" if is_num(img) and img > 0 else "n/a", src))
    fast, batched = res.get("fast_questions_per_s"), res.get("fast_questions_per_s_batched")
    fq = f"{num(fast)} /s" if is_num(fast) and fast > 0 else "n/a"
    if is_num(batched) and batched > 0:
        fq += f" ({num(batched)} /s batched)"
    rows.append((f"{who}: fast questions", fq, src))
    off = res.get("official_questions_per_s")
    if is_num(off) and off > 0:
        cap = res.get("official_max_tokens")
        rows.append((f"{who}: official questions", f"{num(off)} /s" + (f" (≤ {cap} tokens)" if is_num(cap) else ""), src))
    offb = res.get("official_questions_per_s_batched")
    if is_num(offb) and offb > 0:
        rows.append((f"{who}: official questions, study batched", f"{num(offb)} /s (2-token replies)", src))
    rows.append((f"{who}: peak device memory (CubeCL's count)", gib(res.get("peak_device_bytes")), src))

    cal = dig(load(kit / "07-calibrate.json"), "result")
    projections = [p for p in (dig(cal, "projections") or []) if isinstance(p, dict)]
    if is_num(dig(cal, "per_question_ms")) and projections and is_num(projections[0].get("total_s")):
        p = projections[0]
        rows.append((f"{who}: public test projected (`calibrate`)",
                     f"{num(cal['per_question_ms'])} ms a question; {num(p.get('questions'))} questions in "
                     f"{num(p['total_s'])} s ({p['total_s'] / 3600:.2f} h)",
                     f"`{rel(kit / '07-calibrate.json')}`"))

    llama = load(kit / "05-llama-bench.json")
    runs = dig(llama, "result")
    if isinstance(runs, list) and runs:
        pre, dec = {}, None
        for r in runs:
            if not isinstance(r, dict) or not is_num(r.get("avg_ts")):
                continue
            if r.get("n_gen", 0) == 0 and is_num(r.get("n_prompt")):
                pre[int(r["n_prompt"])] = r["avg_ts"]
            elif r.get("n_prompt", 0) == 0:
                dec = r["avg_ts"]
        lengths = sorted(pre) or [300, 1000]
        value = (f"prefill {' / '.join(map(str, lengths))}: " + " / ".join(num(pre.get(n)) for n in lengths)
                 + f" tok/s, decode {num(dec)} tok/s")
        mt = dig(load(kit / "06-llama-mtmd.json"), "result", "image_encode_ms_runs")
        if isinstance(mt, list) and mt and all(is_num(x) for x in mt):
            value += f", image encode {num(statistics.median(mt))} ms"
    else:
        why = dig(llama, "reason") or ("skipped" if dig(llama, "skipped") else "no results")
        value = f"n/a: {why}"
    rows.append(("llama.cpp (Vulkan), same GPU and files as the kit above", value, f"`{rel(kit / '05-llama-bench.json')}`"))
    return rows


# --- browser / native ------------------------------------------------------------------------

def prefill_ratios(ratios):
    out = []
    for k, v in ratios.items():
        m = re.fullmatch(r"prefill_(\d+)_tokens_per_s", k)
        if m and is_num(v):
            out.append((int(m.group(1)), v))
    return ", ".join(f"prefill {n} {ratio(v)}" for n, v in sorted(out)) or "prefill n/a"


def ratio_text(section):
    """decode, prefill and image browser / native ratios of a browser-vs-native section."""
    r = section.get("ratios") or {}
    return f"decode {ratio(r.get('decode_tokens_per_s'))}, {prefill_ratios(r)}, image {ratio(r.get('image_encode_ms'))}"


def side_peak(section, side):
    """A side's peak device bytes: its figures, its medians, or its one run."""
    for path in ((side,), ("medians", side)):
        v = dig(section, *path, "peak_device_bytes")
        if is_num(v):
            return v
    runs = dig(section, f"{side}_runs")
    if isinstance(runs, list) and len(runs) == 1:
        v = dig(runs, 0, "peak_device_bytes")
        if is_num(v):
            return v
    return None


def memory_text(section):
    b, n = side_peak(section, "browser"), side_peak(section, "native")
    if not (is_num(b) and is_num(n) and n > 0):
        return None
    scale, unit = (1e9, "GB") if max(b, n) >= 1e9 else (1e6, "MB")
    return f"{b / scale:.2f} / {n / scale:.2f} {unit} ({b / n:.2f}×)" if unit == "GB" else \
        f"{b / scale:.1f} / {n / scale:.1f} {unit} ({b / n:.2f}×)"


def has_ratios(section):
    return isinstance(section, dict) and is_num(dig(section, "ratios", "decode_tokens_per_s"))


def h200_browser_rows(results):
    rows = []
    dirs = stamped_dirs(results / "device", "h200-browser-")
    tops = []
    for p in results.glob("h200-browser-vs-native-*.json"):
        m = re.fullmatch(r"h200-browser-vs-native-(\d{8})T(\d{4})\.json", p.name)
        if m:
            tops.append(((m.group(1), m.group(2)), p))
    tops = [p for _, p in sorted(tops, reverse=True)]
    for fname, label in BVN_MODELS:
        found = None
        for d in dirs:
            sec = load(d / fname)
            if has_ratios(sec):
                found = (sec, d / fname, d)
                break
        if found is None:
            for p in tops:
                for sec in dig(load(p), "runs") or []:
                    if isinstance(sec, dict) and sec.get("file") == fname and has_ratios(sec):
                        found = (sec, p, None)
                        break
                if found:
                    break
        who = f"H200, browser / native, {label}"
        if found is None:
            rows.append((who, "n/a: no results with ratios", "bench/results/device/h200-browser-*/"))
            continue
        sec, path, d = found
        src = f"`{rel(path)}`"
        rows.append((f"{who}: speed", ratio_text(sec), src))
        mem = memory_text(sec)
        rows.append((f"{who}: peak device memory (CubeCL's count)", mem or "n/a", src))
        if d is not None:
            steps = dig(load(d / "browser-summary.json"), "steps") or []
            step = next((s for s in steps if isinstance(s, dict) and s.get("step") == fname[:-5]), None)
            smi = dig(step, "gpu_memory_max_mib")
            if is_num(dig(smi, "browser")) and is_num(dig(smi, "native")):
                rows.append((f"{who}: GPU memory, most seen by `nvidia-smi`",
                             f"{num(smi['browser'])} / {num(smi['native'])} MiB",
                             f"`{rel(d / 'browser-summary.json')}`"))
    return rows


def sections_with_ratios(obj, path=()):
    """(key path, section) of every dict under `obj` that holds browser / native ratios."""
    if has_ratios(obj):
        yield path, obj
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from sections_with_ratios(v, path + (str(k),))


def section_label(path, sec):
    cmd = sec.get("command") if isinstance(sec.get("command"), str) else ""
    m = re.search(r"--model\s+(\S+)", cmd)
    label = os.path.basename(m.group(1)) if m else (path[-1] if path else "?")
    if cmd:
        r = re.search(r"--runs\s+(\d+)", cmd)
        runs = int(r.group(1)) if r else 1
        label += f" ({runs} runs, medians)" if runs > 1 else " (1 run)"
    return label


def swiftshader_rows(results):
    dated = []
    for p in results.glob("ci-vm-2core-swiftshader-*-browser-vs-native.json"):
        j = load(p)
        date = dig(j, "date")
        if isinstance(date, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", date) and any(sections_with_ratios(j)):
            dated.append((date, p, j))
    if not dated:
        return [("CI VM (2 cores), SwiftShader, browser / native", "n/a: no file with ratios",
                 "bench/results/ci-vm-2core-swiftshader-*-browser-vs-native.json")]
    newest = max(d for d, _, _ in dated)
    rows = []
    for date, p, j in sorted((x for x in dated if x[0] == newest), key=lambda x: x[1].name):
        for path, sec in sections_with_ratios(j):
            who = f"CI VM (2 cores), SwiftShader, browser / native, {date}: {section_label(path, sec)}"
            value = ratio_text(sec)
            mem = memory_text(sec)
            if mem:
                value += f"; peak device memory {mem}"
            rows.append((who, value, f"`{rel(p)}`"))
    return rows


# --- the table ------------------------------------------------------------------------------

def table(results):
    rows = []
    for build in (native_kit_rows, h200_browser_rows, swiftshader_rows):
        try:
            rows += build(results)
        except Exception as e:  # a file of an unforeseen shape: say so, never crash the check
            rows.append((build.__name__, f"n/a: {type(e).__name__}", "bench/results/"))
    out = [
        "Generated by `python3 bench/figures.py --write` from `bench/results/`; do not edit by hand.",
        "Ratios are browser / native speed (1 is parity, above 1 the browser is faster); memory is",
        "browser / native bytes (above 1 the browser holds more).",
        "",
        "| figure | value | source |",
        "|---|---|---|",
    ]
    out += [f"| {cell(a)} | {cell(b)} | {cell(c)} |" for a, b, c in rows]
    return "\n".join(out) + "\n"


def split_readme(text):
    b, e = text.find(BEGIN), text.find(END)
    if b < 0 or e < b:
        return None
    return text[: b + len(BEGIN)], text[b + len(BEGIN): e], text[e:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--write", action="store_true", help="replace the README's figures block")
    g.add_argument("--check", action="store_true", help="exit 1 when the README's block is stale")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--readme", type=Path, default=ROOT / "bench" / "README.md")
    a = ap.parse_args()
    block = "\n" + table(a.results)
    if not (a.write or a.check):
        sys.stdout.write(block.lstrip("\n"))
        return 0
    text = a.readme.read_text(encoding="utf-8")
    parts = split_readme(text)
    if parts is None:
        print(f"{rel(a.readme)}: no {BEGIN} ... {END} block", file=sys.stderr)
        return 2
    head, old, tail = parts
    if a.check:
        if old != block:
            print(f"{rel(a.readme)}: the current-figures table is not what bench/results/ gives; "
                  "run `python3 bench/figures.py --write`", file=sys.stderr)
            return 1
        return 0
    if old != block:
        a.readme.write_text(head + block + tail, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
