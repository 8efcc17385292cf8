"""Per-layer intermediates of transformers' Gemma 3 decoder and SigLIP tower, under the names the
engine's trace hook uses (engine/src/model/trace.rs, llama.cpp's graph names):

  decoder, per layer i: attn_norm (input_layernorm output), attn_out (self_attn output, after
  o_proj), ffn_out (mlp output, after down_proj), l_out (the layer's output); outside the
  layers: inp_scaled (the first layer's input: scaled token embeddings with the image features
  scattered in) and result_norm (the final norm's output).
  vision: v.inp_embd (embeddings), v.l_out per layer, v.post_ln (post_layernorm output).

Captured with forward hooks, and checked against `output_hidden_states`, whose mapping is:
  decoder: hidden_states[0] = inp_scaled, hidden_states[i] = l_out of layer i-1 for
  1 <= i < L, hidden_states[L] = result_norm (transformers ties the last entry to the normed
  last_hidden_state, so the last layer's l_out is only reachable by a hook);
  vision: hidden_states[0] = v.inp_embd, hidden_states[i] = v.l_out of layer i-1 for all
  1 <= i <= L, last_hidden_state = v.post_ln.

A golden record of one tensor [t, width] keeps full rows at chosen positions and the RMS of
every row, so every position is checked without storing whole tensors.
"""
from contextlib import contextmanager

import numpy as np
import torch


def _first(o):
    return o[0] if isinstance(o, tuple) else o


@contextmanager
def text_taps(lm):
    """Hooks on a Gemma3TextModel; yields a dict (name, layer or None) -> [t, width] tensor."""
    taps, handles = {}, []

    def keep(name, i, pick=_first):
        def hook(_mod, _inp, out):
            taps[(name, i)] = pick(out)[0].detach().float().clone()
        return hook

    def first_input(_mod, args, kwargs):
        x = args[0] if args else kwargs["hidden_states"]
        taps[("inp_scaled", None)] = x[0].detach().float().clone()

    handles.append(lm.layers[0].register_forward_pre_hook(first_input, with_kwargs=True))
    for i, layer in enumerate(lm.layers):
        handles += [layer.input_layernorm.register_forward_hook(keep("attn_norm", i)),
                    layer.self_attn.register_forward_hook(keep("attn_out", i)),
                    layer.mlp.register_forward_hook(keep("ffn_out", i)),
                    layer.register_forward_hook(keep("l_out", i))]
    handles.append(lm.norm.register_forward_hook(keep("result_norm", None)))
    try:
        yield taps
    finally:
        for h in handles:
            h.remove()


def check_text_hidden_states(taps, hidden_states, layers):
    """Asserts the output_hidden_states mapping documented above, bit for bit."""
    hs = [h[0].float() for h in hidden_states]
    assert len(hs) == layers + 1, len(hs)
    assert torch.equal(hs[0], taps[("inp_scaled", None)])
    for i in range(1, layers):
        assert torch.equal(hs[i], taps[("l_out", i - 1)]), i
    assert torch.equal(hs[layers], taps[("result_norm", None)])


@contextmanager
def vision_taps(tower):
    """Hooks on a SiglipVisionModel / SiglipVisionTransformer; yields (name, layer) -> tensors
    [images, patches, width]."""
    vt = getattr(tower, "vision_model", tower)
    taps, handles = {}, []

    def keep(name, i):
        def hook(_mod, _inp, out):
            taps[(name, i)] = _first(out).detach().float().clone()
        return hook

    handles.append(vt.embeddings.register_forward_hook(keep("v.inp_embd", None)))
    for i, layer in enumerate(vt.encoder.layers):
        handles.append(layer.register_forward_hook(keep("v.l_out", i)))
    handles.append(vt.post_layernorm.register_forward_hook(keep("v.post_ln", None)))
    try:
        yield taps
    finally:
        for h in handles:
            h.remove()


def check_vision_hidden_states(taps, out, layers):
    hs = [h.float() for h in out.hidden_states]
    assert len(hs) == layers + 1, len(hs)
    assert torch.equal(hs[0], taps[("v.inp_embd", None)])
    for i in range(1, layers + 1):
        assert torch.equal(hs[i], taps[("v.l_out", i - 1)]), i
    assert torch.equal(out.last_hidden_state.float(), taps[("v.post_ln", None)])


def _g(x):
    """8 significant digits: far below the errors compared, a third of the JSON."""
    return [float(f"{v:.8g}") for v in np.asarray(x, dtype=np.float64).reshape(-1)]


def record(t, positions):
    """Rows at `positions` and the RMS of every row of a [t, width] tensor."""
    a = t.numpy()
    return {"rows": {str(p): _g(a[p]) for p in positions},
            "rms": _g(np.sqrt((a.astype(np.float64) ** 2).mean(-1)))}


def records(taps, positions):
    """{name: [record per layer]} for per-layer taps, {name: record} for the others."""
    out = {}
    for (name, i), t in sorted(taps.items(), key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1])):
        if i is None:
            out[name] = record(t, positions)
        else:
            out.setdefault(name, []).append(record(t, positions))
    return out
