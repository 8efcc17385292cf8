#!/usr/bin/env python3
"""Golden preprocessing results from transformers' Gemma 3 image processors and Pillow.

Writes real-sized 16-bit grayscale test radiographs (tests/fixtures/images/*.png, smooth
synthetic anatomy so the PNGs stay small), then for each image and each 16->8-bit policy:
- `pillow-clamp`: the 8-bit image Pillow's convert("RGB") makes of the 16-bit PNG (the official
  script's path), as a SHA-256;
- the 896x896 image after resizing by Gemma3ImageProcessorPil (Pillow BILINEAR) as a SHA-256
  and the SHA-256 of its pixel_values (float32, CHW), which the engine must match exactly;
- the 896x896 image after Gemma3ImageProcessor (torchvision backend, the transformers 5 default)
  recovered from pixel_values and saved as an 8-bit PNG in golden/images/, which the engine must
  match within 1/255.

Usage: python tests/reference/image_golden.py
"""
import hashlib
import json
from pathlib import Path

import numpy as np
from PIL import Image
from transformers import Gemma3ImageProcessor
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/fixtures/images"
GOLD = ROOT / "tests/reference/golden"
# Up-scaling (611x502, 761x614) and down-scaling (1210x1000, 2048x1700) cases, width x height.
SIZES = [(611, 502), (761, 614), (1210, 1000), (2048, 1700)]


def radiograph(w, h, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    u, v = x / w - 0.5, y / h - 0.5
    body = np.clip(1 - (u * 1.6) ** 2 - (v * 1.3) ** 2, 0, 1)
    lung = lambda cx: np.clip(1 - ((u - cx) / 0.17) ** 2 - ((v + 0.02) / 0.33) ** 2, 0, 1)
    lungs = np.maximum(lung(-0.2), lung(0.2))
    ribs = (np.sin(v * 40 + np.abs(u) * 12) * 0.5 + 0.5) * lungs * 0.15
    tilt = rng.uniform(-0.1, 0.1)
    img = 0.15 + 0.6 * body - 0.45 * lungs + ribs + tilt * u
    img = (img - img.min()) / (img.max() - img.min())
    out = (img * 65535).astype(np.uint16)
    # A dark collimation border (values 0..299) like real exports, so pillow-clamp sees
    # unsaturated values too; smooth content keeps the PNGs small.
    b = 24
    ramp = ((x + y) % 300).astype(np.uint16)
    edge = (x < b) | (y < b) | (x >= w - b) | (y >= h - b)
    out[edge] = ramp[edge]
    return out


def to8(a16, policy):
    if policy == "scale":
        return (a16 >> 8).astype(np.uint8)
    if policy == "pillow-clamp":
        return np.minimum(a16, 255).astype(np.uint8)
    lo, hi = int(a16.min()), int(a16.max())
    rng = max(hi - lo, 1)
    return (((a16.astype(np.int64) - lo) * 255 + rng // 2) // rng).astype(np.uint8)


def sha(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def main():
    FIX.mkdir(parents=True, exist_ok=True)
    (GOLD / "images").mkdir(parents=True, exist_ok=True)
    pil_proc = Gemma3ImageProcessorPil(size={"height": 896, "width": 896})
    tv_proc = Gemma3ImageProcessor(size={"height": 896, "width": 896})
    golden = {"generator": "tests/reference/image_golden.py", "images": {}}
    for i, (w, h) in enumerate(SIZES):
        name = f"xray16_{w}x{h}.png"
        a16 = radiograph(w, h, seed=i)
        Image.fromarray(a16).save(FIX / name, optimize=True)
        # The official script: Image.open(path).convert("RGB").
        official = np.asarray(Image.open(FIX / name).convert("RGB"))
        assert (official[..., 0] == to8(a16, "pillow-clamp")).all()
        entry = {"width": w, "height": h, "pillow_convert_rgb_sha256": sha(official[..., 0]), "policies": {}}
        for policy in ["scale", "minmax", "pillow-clamp"]:
            rgb = Image.fromarray(to8(a16, policy)).convert("RGB")
            resized = np.asarray(rgb.resize((896, 896), Image.BILINEAR))[..., 0]
            pv = pil_proc(images=rgb, return_tensors="np")["pixel_values"][0].astype(np.float32)
            tv = tv_proc(images=rgb, return_tensors="pt")["pixel_values"][0].numpy()
            tv8 = np.rint((tv[0] * 0.5 + 0.5) * 255).astype(np.uint8)
            tv_name = f"tv_{w}x{h}_{policy}.png"
            Image.fromarray(tv8).save(GOLD / "images" / tv_name, optimize=True)
            entry["policies"][policy] = {
                "pil_resized_sha256": sha(resized),
                "pil_pixel_values_sha256": sha(pv),
                "pil_pixel_values_head": [float(x) for x in pv.reshape(-1)[:4]],
                "torchvision_png": tv_name,
                "torchvision_vs_pil_max_abs_u8": int(np.abs(tv8.astype(int) - resized.astype(int)).max()),
            }
        golden["images"][name] = entry
        print(name, {p: e["torchvision_vs_pil_max_abs_u8"] for p, e in entry["policies"].items()})
    (GOLD / "image_preprocess.json").write_text(json.dumps(golden, indent=1) + "\n")


if __name__ == "__main__":
    main()
