#!/usr/bin/env python3
"""rexvqa vs llama.cpp on the same GGUF files, on the same machine, in one run.

Measures, for both engines: prefill tokens/s at the given prompt lengths, decode tokens/s, and
(with --mmproj) the image encode time; writes every raw figure, the ratios rexvqa / llama.cpp
(throughput ratios: > 1 means rexvqa is faster) and a description of the machine to one JSON
file under bench/results/.

llama.cpp side: `llama-bench` (prefill and decode, -o json) and `llama-mtmd-cli` (its "mtmd batch
encoding done in N ms" line for the image), from a build of the llama.cpp that the PyPI
`llama-cpp-python` sdist vendors (bench/build_llamacpp.sh). rexvqa side: `rexvqa bench`.

Usage:
  bench/compare.py --model M.gguf [--mmproj MM.gguf] --backend cpu|wgpu \
      [--llama-bin DIR] [--rexvqa target/release/rexvqa] [--threads N] [--reps 3] [--ngl 99] \
      [--out bench/results/NAME.json]

Standard library only.
"""

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Where bench/build_llamacpp.sh puts the CPU build.
DEFAULT_LLAMA = Path(os.environ.get(
    "LLAMA_CPP_BIN", Path.home() / ".cache" / "rexvqa-web" / "llama.cpp" / "build-cpu" / "bin"))


def run(cmd, env=None, timeout=3600):
    t0 = time.time()
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stderr[-4000:]}")
    return p, time.time() - t0


def machine(backend):
    info = {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()}
    try:
        cpu = Path("/proc/cpuinfo").read_text()
        m = re.search(r"model name\s*:\s*(.+)", cpu)
        info["cpu"] = m.group(1).strip() if m else platform.processor()
        mem = Path("/proc/meminfo").read_text()
        info["memory_gib"] = round(int(re.search(r"MemTotal:\s*(\d+)", mem).group(1)) / 2**20, 1)
    except OSError:
        pass
    if shutil.which("nvidia-smi"):
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True)
        info["gpus"] = [l.strip() for l in q.stdout.splitlines() if l.strip()]
    if backend == "wgpu" and shutil.which("vulkaninfo"):
        q = subprocess.run(["vulkaninfo", "--summary"], capture_output=True, text=True)
        info["vulkan_devices"] = sorted(set(re.findall(r"deviceName\s*=\s*(.+)", q.stdout)))
    return info


def test_png(path, size=512):
    """An 8-bit grayscale PNG (stb_image in llama.cpp reads it; rexvqa bench makes its own)."""
    rows = b"".join(b"\x00" + bytes(((x * 7) ^ (y * 3)) % 256 for x in range(size)) for y in range(size))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    Path(path).write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 0, 0, 0, 0))
                           + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def llama_side(a, env):
    bench_bin = a.llama_bin / "llama-bench"
    cmd = [bench_bin, "-m", a.model, "-p", ",".join(map(str, a.prefill)), "-n", a.decode, "-r", a.reps,
           "-t", a.threads, "-o", "json"]
    if a.ngl is not None:
        cmd += ["-ngl", a.ngl]
    p, _ = run(cmd, env)
    rows = json.loads(p.stdout)
    out = {"llama_bench": rows, "prefill": [], "decode_tokens_per_s": None}
    for r in rows:
        if r.get("n_gen", 0) == 0:
            out["prefill"].append([r["n_prompt"], r["avg_ts"]])
        elif r.get("n_prompt", 0) == 0:
            out["decode_tokens_per_s"] = r["avg_ts"]
        out.setdefault("build", r.get("build_commit"))
        out.setdefault("backends", r.get("backends"))
    if a.mmproj:
        with tempfile.TemporaryDirectory() as d:
            img = Path(d) / "x.png"
            test_png(img)
            times = []
            for _ in range(a.reps):
                cmd = [a.llama_bin / "llama-mtmd-cli", "-m", a.model, "--mmproj", a.mmproj, "--image", img,
                       "-p", "Describe the image.", "-n", 1, "--temp", 0, "-t", a.threads]
                if a.ngl is not None:
                    cmd += ["-ngl", a.ngl]
                p, _ = run(cmd, env)
                m = re.search(r"mtmd batch encoding done in (\d+(?:\.\d+)?) ms", p.stdout + p.stderr)
                if not m:
                    sys.exit("llama-mtmd-cli printed no 'mtmd batch encoding done in N ms' line")
                times.append(float(m.group(1)))
        out["image_encode_ms_runs"] = times
        out["image_encode_ms"] = statistics.median(times)
    return out


def rexvqa_side(a):
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        cmd = [a.rexvqa, "bench", "--model", a.model, "--backend", a.backend, "--prefill",
               ",".join(map(str, a.prefill)), "--decode", a.decode, "--official-max-tokens", a.official_max_tokens,
               "--out", out]
        if a.mmproj:
            cmd += ["--mmproj", a.mmproj]
        _, wall = run(cmd)
        r = json.loads(out.read_text())
    r["wall_s"] = wall
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--mmproj", type=Path)
    ap.add_argument("--backend", choices=["cpu", "wgpu"], default="cpu", help="rexvqa's backend")
    ap.add_argument("--llama-bin", type=Path, default=DEFAULT_LLAMA)
    ap.add_argument("--rexvqa", type=Path, default=ROOT / "target" / "release" / "rexvqa")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ngl", type=int, help="llama.cpp layers on the GPU (GPU builds)")
    ap.add_argument("--prefill", type=int, nargs="+", default=[300, 1000])
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--official-max-tokens", type=int, default=16)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--note", default="", help="free text stored with the results")
    a = ap.parse_args()
    env = dict(os.environ, LD_LIBRARY_PATH=f"{a.llama_bin}:{os.environ.get('LD_LIBRARY_PATH', '')}")

    llama = llama_side(a, env)
    rex = rexvqa_side(a)
    rr = rex["results"]
    ratios = {}
    for (n, tps) in rr["prefill"]:
        ref = dict((int(k), v) for k, v in llama["prefill"]).get(int(n))
        if ref:
            ratios[f"prefill_{n}"] = tps / ref
    if llama["decode_tokens_per_s"]:
        ratios["decode"] = rr["decode_tokens_per_s"] / llama["decode_tokens_per_s"]
    if a.mmproj and rr.get("image_encode_ms"):
        ratios["image_encode"] = llama["image_encode_ms"] / rr["image_encode_ms"]
    result = {
        "what": "throughput ratios rexvqa / llama.cpp on the same files and machine (> 1: rexvqa faster)",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "note": a.note,
        "machine": machine(a.backend),
        "model": {"text": a.model.name, "text_bytes": a.model.stat().st_size,
                  "mmproj": a.mmproj.name if a.mmproj else None,
                  "mmproj_bytes": a.mmproj.stat().st_size if a.mmproj else None},
        "settings": {"threads": a.threads, "reps": a.reps, "ngl": a.ngl, "prefill": a.prefill,
                     "decode": a.decode, "rexvqa_backend": a.backend,
                     # GGML_VK_VISIBLE_DEVICES=0 lets llama.cpp's Vulkan backend use a CPU device (lavapipe).
                     "env": {k: os.environ[k] for k in ("GGML_VK_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
                             if k in os.environ}},
        "ratios": ratios,
        "rexvqa": rex,
        "llama_cpp": llama,
    }
    text = json.dumps(result, indent=1)
    print(json.dumps({"ratios": ratios}, indent=1))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
        print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
