#!/usr/bin/env python3
"""Writes a tokenizer-only Gemma 3 GGUF: the source's `general.architecture` and every
`tokenizer.*` key, no tensors. `rexvqa synth-model --tokenizer-from` copies only the tokenizer,
so this few-MB file stands in for the 253 MB Gemma 3 270M GGUF in the GPU kit
(bench/device/pack.sh), whose size is capped.

Usage: tokenizer_gguf.py SOURCE.gguf OUT.gguf   (needs gguf-py: pip install gguf)
"""

import sys

import gguf


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    # GGUFWriter writes general.architecture itself (from arch), so the file still says what
    # model family its tokenizer belongs to.
    w = gguf.GGUFWriter(out, arch)
    kept = 0
    for key, field in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, field.contents(), vtype, sub_type=sub)
        kept += 1
    if kept == 0:
        sys.exit(f"{src}: no tokenizer.* keys")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out}: {kept} tokenizer keys, no tensors", file=sys.stderr)


if __name__ == "__main__":
    main()
