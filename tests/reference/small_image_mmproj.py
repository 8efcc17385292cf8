#!/usr/bin/env python3
"""The tiny Q8_0 mmproj at 224 px for the end-to-end tests.

The end-to-end tests check the app's flows (import, load, answer, evaluate, reload, recover)
against the native CLI on the same files, not the vision tower's numbers: transformers and
llama.cpp check those at the real geometry (896 px, 4,096 patches) in the native and browser
tests. At 896 px the tiny tower's attention over 4,096 patches is ~13 GFLOP an image, ~20 s on
SwiftShader, and it was most of the end-to-end stage's time. This copy sees 224 px: 16×16
patches, pooled 1×1 to the same 256 image tokens (clip.vision.projector.scale_factor = 1), so
prompts, the study cache and the image path are unchanged and an encode costs ~1/200 of it.

The position embedding keeps every 4th row and column of the 64×64 grid. Every other tensor
and key is copied unchanged.

Usage: python tests/reference/small_image_mmproj.py [NAME]
  reads  tests/fixtures/models/NAME.gguf.gz (default tiny-q8_0-mmproj)
  writes tests/fixtures/models/NAME-224.gguf.gz
(tinyq-mmproj, the smaller downloads' BF16 mmproj, is the other one the end-to-end tests use.)
Needs gguf-py and numpy (requirements-ci.txt).
"""
import gzip
import shutil
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
NAME = sys.argv[1] if len(sys.argv) > 1 else "tiny-q8_0-mmproj"
SRC = ROOT / f"tests/fixtures/models/{NAME}.gguf.gz"
DST = ROOT / f"tests/fixtures/models/{NAME}-224.gguf.gz"
SIZE, PATCH, OLD_SIDE = 224, 14, 64
SIDE = SIZE // PATCH  # 16 patches a side, 256 patches: the 256 image tokens with no pooling


def main():
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "src.gguf", Path(tmp) / "dst.gguf"
        with gzip.open(SRC, "rb") as f, open(src, "wb") as g:
            shutil.copyfileobj(f, g)
        r = gguf.GGUFReader(str(src))
        w = gguf.GGUFWriter(str(dst), arch="clip")
        for field in r.fields.values():
            if field.name.startswith("GGUF.") or field.name == "general.architecture":
                continue
            if field.name == "clip.vision.image_size":
                w.add_uint32(field.name, SIZE)
                continue
            w.add_key_value(field.name, field.contents(), field.types[0],
                            field.types[-1] if len(field.types) > 1 else None)
        w.add_uint32("clip.vision.projector.scale_factor", 1)
        for t in r.tensors:
            shape = [int(d) for d in reversed(t.shape)]
            data = np.asarray(t.data)
            if t.name == "v.position_embd.weight":
                assert shape[0] == OLD_SIDE * OLD_SIDE, shape
                step = OLD_SIDE // SIDE
                # Rows of any type: BF16 rows come as their bytes.
                grid = data.reshape(OLD_SIDE, OLD_SIDE, -1)[::step, ::step]
                grid = np.ascontiguousarray(grid.reshape(SIDE * SIDE, -1))
                if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
                    w.add_tensor(t.name, grid)
                else:
                    w.add_tensor(t.name, grid, raw_shape=[SIDE * SIDE, shape[1]], raw_dtype=t.tensor_type)
            elif t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
                w.add_tensor(t.name, data.reshape(shape))
            else:
                w.add_tensor(t.name, data, raw_dtype=t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        # mtime 0: the same input gives the same bytes.
        with open(dst, "rb") as f, gzip.GzipFile(DST, "wb", mtime=0) as g:
            shutil.copyfileobj(f, g)
    print(f"wrote {DST.relative_to(ROOT)} ({DST.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
