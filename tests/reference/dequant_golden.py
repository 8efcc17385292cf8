#!/usr/bin/env python3
"""Golden dequantisation results from the PyPI `gguf` package (gguf-py, ggml's own Python port).

1. Writes tests/fixtures/quant_types.gguf: random, well-formed blocks of every type the engine
   supports (TYPES), so types absent from the real 270M file are covered too.
2. For that file and for the real Gemma 3 270M Q4_K_M file, records per tensor the SHA-256 of the
   dequantised float32 values (little-endian, row-major) and the first values.

The engine's CPU dequantisation must reproduce every hash bit for bit.
Usage: python tests/reference/dequant_golden.py [--gemma PATH]
"""
import argparse
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

ROOT = Path(__file__).resolve().parents[2]
# New types go at the end: the tensors before them keep their random bytes.
TYPES = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q5_0, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K,
         T.Q4_1, T.Q5_1, T.Q2_K, T.Q3_K, T.IQ4_NL, T.IQ4_XS,
         T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S]
# Byte offsets of f16 scale fields inside one block, which must be finite.
F16_FIELDS = {T.Q4_0: [0], T.Q5_0: [0], T.Q8_0: [0], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
              T.Q4_1: [0, 2], T.Q5_1: [0, 2], T.Q2_K: [80, 82], T.Q3_K: [108], T.IQ4_NL: [0],
              T.IQ4_XS: [0], T.IQ2_XXS: [0], T.IQ2_XS: [0], T.IQ2_S: [0], T.IQ3_XXS: [0], T.IQ3_S: [0]}
# Fields that are mins (subtracted), kept positive as real files keep them.
MIN_FIELDS = {T.Q4_K: 2, T.Q5_K: 2, T.Q2_K: 82}


def random_blocks(rng, qtype, rows, cols):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    if qtype == T.F32:
        return rng.uniform(-1, 1, (rows, cols)).astype(np.float32)
    if qtype == T.F16:
        return rng.uniform(-1, 1, (rows, cols)).astype(np.float16)
    if qtype == T.BF16:
        f = rng.uniform(-1, 1, (rows, cols)).astype(np.float32)
        return (f.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(rows, cols * 2)
    nb = cols // block
    b = rng.integers(0, 256, (rows, nb, size), dtype=np.uint8)
    for at in F16_FIELDS[qtype]:
        mag = 2.0 ** rng.uniform(-4, -1, (rows, nb))
        sign = 1 if MIN_FIELDS.get(qtype) == at else rng.choice([-1, 1], (rows, nb))
        b[:, :, at:at + 2] = (mag * sign).astype(np.float16).view(np.uint8).reshape(rows, nb, 2)
    return b.reshape(rows, nb * size)


def digest(values):
    v = np.ascontiguousarray(values, dtype="<f4")
    return {"sha256": hashlib.sha256(v.tobytes()).hexdigest(), "head": [float(x) for x in v.reshape(-1)[:4]],
            "n": int(v.size)}


def hashes(path):
    r = gguf.GGUFReader(str(path))
    out = {}
    for t in r.tensors:
        out[t.name] = {"type": t.tensor_type.name, **digest(dequantize(t.data, t.tensor_type))}
    return out


def main():
    ap = argparse.ArgumentParser()
    default = Path(os.environ.get("REXVQA_CACHE", Path.home() / ".cache/rexvqa-web")) / "gemma-3-270m-q4_k_m.gguf"
    ap.add_argument("--gemma", default=str(default))
    args = ap.parse_args()

    fixture = ROOT / "tests/fixtures/quant_types.gguf"
    fixture.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20261121)
    w = gguf.GGUFWriter(str(fixture), "quant-test")
    for qtype in TYPES:
        for rows, cols in [(3, 256), (2, 512)]:
            data = random_blocks(rng, qtype, rows, cols)
            raw = None if qtype in (T.F32, T.F16) else qtype
            w.add_tensor(f"{qtype.name}.{rows}x{cols}", data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    golden = {"generator": "tests/reference/dequant_golden.py", "gguf_py": gguf.__version__ if hasattr(gguf, "__version__") else "0.19.0",
              "quant_types": hashes(fixture)}
    if Path(args.gemma).exists():
        golden["gemma3_270m"] = hashes(args.gemma)
    else:
        raise SystemExit(f"{args.gemma} missing: run scripts/setup.sh")
    out = ROOT / "tests/reference/golden/dequant.json"
    out.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
    print(f"wrote {fixture} ({fixture.stat().st_size} bytes) and {out}: "
          f"{len(golden['quant_types'])} + {len(golden['gemma3_270m'])} tensors")


if __name__ == "__main__":
    main()
