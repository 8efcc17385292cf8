#!/usr/bin/env python3
"""Small DICOM, PNG and JPEG fixtures for the engine's `picture` decoder, and what pydicom and
Pillow decode from them (tests/reference/golden/pictures.json).

Each DICOM transfer syntax the engine supports gets a file: explicit and implicit VR little
endian, deflated explicit VR, RLE lossless (pydicom's encoder), JPEG baseline (Pillow's encoder,
encapsulated) and JPEG lossless SV1 (the small encoder below; pydicom decodes it through
pylibjpeg-libjpeg). Between them they cover MONOCHROME1/2, a modality rescale with negative
values, 8/12/16 bits stored, signed pixels and several frames. Malformed files (truncated, wrong
marker, a PNG renamed .dcm, 0 bytes) and a JPEG 2000 file (refused by name) complete the set.

For every decodable file the golden holds the facts `rexvqa image-info` prints, the min/max/mean
of the grey values after the modality rescale, and the SHA-256 of those values (first frame,
int32 little endian, row-major; all are integers here) plus the first row, to show where a
mismatch starts; lossy JPEG files keep all their pixels instead (decoders differ by a level). The identifying attributes are made up.

Usage: python tests/reference/picture_golden.py  (pydicom, Pillow, numpy, pylibjpeg,
pylibjpeg-libjpeg; the fixtures and golden are committed, tests only read them)
"""
import hashlib
import io
import json
from pathlib import Path

import numpy as np
import pydicom
from PIL import Image
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.encaps import encapsulate
from pydicom.pixels import apply_modality_lut
from pydicom.uid import (
    DeflatedExplicitVRLittleEndian,
    ExplicitVRLittleEndian,
    ImplicitVRLittleEndian,
    JPEG2000Lossless,
    JPEGBaseline8Bit,
    JPEGLosslessSV1,
    RLELossless,
    generate_uid,
)

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/fixtures/pictures"
GOLD = ROOT / "tests/reference/golden/pictures.json"
W, H = 48, 40


def anatomy(bits, seed, frames=1):
    """A smooth synthetic radiograph using the whole `bits` range, plus a little noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:H, 0:W].astype(np.float64)
    u, v = x / W - 0.5, y / H - 0.5
    body = np.clip(1 - (u * 1.7) ** 2 - (v * 1.4) ** 2, 0, 1)
    out = []
    for f in range(frames):
        img = 0.1 + 0.8 * body * (0.6 + 0.4 * np.sin(v * 20 + f))
        img += rng.normal(0, 0.01, img.shape)
        out.append(np.clip(img, 0, 1) * (2**bits - 1))
    return np.rint(np.array(out) if frames > 1 else out[0])


def dataset(ts, arr, bits_stored, photometric="MONOCHROME2", signed=False, **extra):
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.1.1"  # Digital X-Ray Presentation
    meta.MediaStorageSOPInstanceUID = generate_uid(entropy_srcs=[str(ts), str(bits_stored)])
    meta.TransferSyntaxUID = ts
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = meta.MediaStorageSOPClassUID
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.Modality = "DX"
    ds.PatientName = "DOE^JANE"
    ds.PatientID = "FAKE-0001"
    ds.PatientBirthDate = "19700101"
    ds.AccessionNumber = "ACC-42"
    ds.InstitutionName = "Nowhere General"
    ds.Rows, ds.Columns = arr.shape[-2], arr.shape[-1]
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = photometric
    ds.BitsAllocated = 8 if bits_stored <= 8 else 16
    ds.BitsStored = bits_stored
    ds.HighBit = bits_stored - 1
    ds.PixelRepresentation = 1 if signed else 0
    if arr.ndim == 3:
        ds.NumberOfFrames = arr.shape[0]
    for k, v in extra.items():
        setattr(ds, k, v)
    dtype = {(8, False): np.uint8, (16, False): np.uint16, (16, True): np.int16}[
        (ds.BitsAllocated, signed)
    ]
    ds.PixelData = arr.astype(dtype).tobytes()
    return ds


def jpeg_lossless(img, precision):
    """JPEG lossless, process 14, first-order prediction (SV1), one component, one Huffman table
    with every difference category at 5 bits (simple, not small)."""
    out = bytearray(b"\xff\xd8")
    h, w = img.shape
    out += b"\xff\xc3" + (11).to_bytes(2, "big") + bytes([precision])
    out += h.to_bytes(2, "big") + w.to_bytes(2, "big") + bytes([1, 1, 0x11, 0])
    bits = [0] * 16
    bits[4] = 17  # 17 codes of length 5: categories 0..16
    out += b"\xff\xc4" + (3 + 16 + 17).to_bytes(2, "big") + bytes([0x00] + bits + list(range(17)))
    out += b"\xff\xda" + (8).to_bytes(2, "big") + bytes([1, 1, 0x00, 1, 0, 0])
    acc, n, data = 0, 0, bytearray()

    def put(value, length):
        nonlocal acc, n
        for i in range(length - 1, -1, -1):
            acc = (acc << 1) | ((value >> i) & 1)
            n += 1
            if n == 8:
                data.append(acc)
                if acc == 0xFF:
                    data.append(0)
                acc, n = 0, 0

    px = img.astype(np.int64)
    for y in range(h):
        for x in range(w):
            if x == 0 and y == 0:
                pred = 1 << (precision - 1)
            elif y == 0:
                pred = px[y, x - 1]
            elif x == 0:
                pred = px[y - 1, x]
            else:
                pred = px[y, x - 1]
            d = int(px[y, x] - pred)
            cat = abs(d).bit_length()
            put(cat, 5)
            if cat:
                put(d if d > 0 else d - 1 + (1 << cat), cat)
    if n:
        put((1 << (8 - n)) - 1, 8 - n)
    out += data + b"\xff\xd9"
    return bytes(out)


def encapsulated(ds, ts, frames):
    ds.file_meta.TransferSyntaxUID = ts
    ds.PixelData = encapsulate(frames)
    ds["PixelData"].VR = "OB"
    return ds


def write(ds, name):
    path = FIX / name
    ds.save_as(path, enforce_file_format=True)
    return path


def golden(path, ds):
    arr = ds.pixel_array
    first = arr[0] if int(ds.get("NumberOfFrames", 1)) > 1 else arr
    values = apply_modality_lut(first, ds)
    as_int = np.rint(values).astype("<i4")
    assert np.array_equal(as_int, values), f"{path.name}: non-integer rescaled values"
    info = {
        "format": "dicom",
        "width": int(ds.Columns),
        "height": int(ds.Rows),
        "channels": int(ds.SamplesPerPixel),
        "bits_stored": int(ds.BitsStored),
        "photometric": str(ds.PhotometricInterpretation),
        "frames": int(ds.get("NumberOfFrames", 1)),
        "transfer_syntax": str(ds.file_meta.TransferSyntaxUID),
    }
    return info | stats(as_int)


def stats(values):
    v = np.asarray(values)
    return {
        "min": float(v.min()),
        "max": float(v.max()),
        "mean": float(v.astype(np.float64).mean()),
        "sha256": hashlib.sha256(v.astype("<i4").tobytes()).hexdigest(),
        "first_row": [int(x) for x in v.reshape(-1, v.shape[1] * (v.shape[2] if v.ndim == 3 else 1))[0]],
    }


def main():
    FIX.mkdir(parents=True, exist_ok=True)
    gold = {}
    made = []

    img12 = anatomy(12, 1)
    made.append(("explicit_le_12bit.dcm", write(dataset(ExplicitVRLittleEndian, img12, 12,
                 WindowCenter=2048, WindowWidth=3000), "explicit_le_12bit.dcm")))
    img16 = anatomy(16, 2)
    made.append(("implicit_le_16bit_mono1.dcm", write(dataset(ImplicitVRLittleEndian, img16, 16,
                 photometric="MONOCHROME1"), "implicit_le_16bit_mono1.dcm")))
    img8 = anatomy(8, 3)
    made.append(("deflated_8bit.dcm", write(dataset(DeflatedExplicitVRLittleEndian, img8, 8),
                 "deflated_8bit.dcm")))
    # Signed 16-bit with a rescale to negative values (CT-like), RLE compressed.
    signed = anatomy(11, 4) - 1024
    ds = dataset(ExplicitVRLittleEndian, signed, 16, signed=True, RescaleSlope=2,
                 RescaleIntercept=-100, WindowCenter=-100, WindowWidth=4000)
    ds.compress(RLELossless, encoding_plugin="pydicom", generate_instance_uid=False)
    made.append(("rle_signed_rescale.dcm", write(ds, "rle_signed_rescale.dcm")))
    # JPEG baseline: Pillow's encoder at quality 90, encapsulated.
    buf = io.BytesIO()
    Image.fromarray(img8.astype(np.uint8)).save(buf, "JPEG", quality=90)
    ds = encapsulated(dataset(ExplicitVRLittleEndian, img8, 8), JPEGBaseline8Bit, [buf.getvalue()])
    made.append(("jpeg_baseline_8bit.dcm", write(ds, "jpeg_baseline_8bit.dcm")))
    ds = encapsulated(dataset(ExplicitVRLittleEndian, img12, 12, WindowCenter=2048,
                              WindowWidth=4096), JPEGLosslessSV1, [jpeg_lossless(img12, 12)])
    made.append(("jpeg_lossless_12bit.dcm", write(ds, "jpeg_lossless_12bit.dcm")))
    frames = anatomy(16, 5, frames=3)
    made.append(("multiframe_16bit.dcm", write(dataset(ExplicitVRLittleEndian, frames, 16),
                 "multiframe_16bit.dcm")))
    # A DICOM file without an extension (opened by its DICM marker); a second view of a study.
    ds = dataset(ExplicitVRLittleEndian, anatomy(12, 6), 12, WindowCenter=1800, WindowWidth=2500)
    made.append(("lateral_noext", write(ds, "lateral_noext")))
    for name, path in made:
        gold[name] = golden(path, pydicom.dcmread(path))
    # Lossy JPEG: decoders may round their IDCTs differently, so the whole image is kept and
    # compared with a tolerance.
    ds = pydicom.dcmread(FIX / "jpeg_baseline_8bit.dcm")
    gold["jpeg_baseline_8bit.dcm"]["lossy_pixels"] = ds.pixel_array.astype(int).ravel().tolist()

    # JPEG 2000 is refused by name (no pure-Rust decoder); its pixel data is never read.
    ds = encapsulated(dataset(ExplicitVRLittleEndian, img8, 8), JPEG2000Lossless, [b"\xff\x4f\xff\xd9"])
    write(ds, "jpeg2000.dcm")

    # PNG and JPEG, decoded by Pillow.
    Image.fromarray(img16.astype(np.uint16)).save(FIX / "gray16.png")
    rgb = np.stack([img8, img8[::-1], 255 - img8], axis=-1).astype(np.uint8)
    Image.fromarray(rgb).save(FIX / "rgb8.png")
    Image.fromarray(img8.astype(np.uint8)).save(FIX / "gray8.jpg", quality=90)
    for name in ["gray16.png", "rgb8.png", "gray8.jpg"]:
        im = Image.open(FIX / name)
        arr = np.asarray(im)
        gold[name] = {
            "format": "jpeg" if name.endswith(".jpg") else "png",
            "width": im.width,
            "height": im.height,
            "channels": 3 if arr.ndim == 3 else 1,
            "bits_stored": 16 if arr.dtype == np.uint16 or im.mode.startswith("I") else 8,
            "photometric": "RGB" if arr.ndim == 3 else "MONOCHROME2",
            "frames": 1,
            "transfer_syntax": None,
        } | stats(arr if arr.ndim == 2 else arr.reshape(arr.shape[0], -1))
        if name.endswith(".jpg"):
            gold[name]["lossy_pixels"] = arr.astype(int).ravel().tolist()

    # Malformed files.
    good = (FIX / "explicit_le_12bit.dcm").read_bytes()
    (FIX / "bad_truncated.dcm").write_bytes(good[: len(good) // 2])
    (FIX / "bad_marker.dcm").write_bytes(good[:128] + b"DICX" + good[132:])
    (FIX / "bad_png_renamed.dcm").write_bytes((FIX / "gray16.png").read_bytes())
    (FIX / "bad_empty.dcm").write_bytes(b"")

    GOLD.write_text(json.dumps({
        "written_by": "tests/reference/picture_golden.py",
        "versions": {"pydicom": pydicom.__version__, "numpy": np.__version__,
                     "pillow": Image.__version__},
        "files": gold,
    }, indent=1) + "\n")


if __name__ == "__main__":
    main()
