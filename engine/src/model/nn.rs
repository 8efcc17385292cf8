//! Small numeric building blocks shared by the decoder and the vision tower, each matching
//! its transformers counterpart operation for operation.
//!
//! Each building block has a composed form (burn ops, the CPU's path and the reference) and,
//! on GPU devices, a fused kernel ([`crate::kernels::rows`]) that computes the same formula in
//! one dispatch; the plain names choose between them (the fused one unless the device
//! self-test turned its form off).

use burn::tensor::{Tensor, TensorData};

use crate::kernels::forms::Form;
use crate::kernels::{self, rows as fused_rows};

/// Gemma RMSNorm over the last dimension: `x / sqrt(mean(x²) + eps) · w`, where `w` already
/// holds HF's `1 + weight` (folded in by the GGUF converter).
pub fn rms_norm<const D: usize>(x: Tensor<D>, w: &Tensor<1>, eps: f32) -> Tensor<D> {
    if kernels::runs(&x.device(), Form::FusedNorm) {
        return fused_rows::rms_norm(x, w, None, eps);
    }
    rms_norm_composed(x, w, eps)
}

/// `residual + rms_norm(x, w)`: Gemma's post-attention and post-FFW sandwich norms.
pub fn add_rms_norm<const D: usize>(
    residual: Tensor<D>,
    x: Tensor<D>,
    w: &Tensor<1>,
    eps: f32,
) -> Tensor<D> {
    if kernels::runs(&x.device(), Form::FusedNorm) {
        return fused_rows::rms_norm(x, w, Some(residual), eps);
    }
    residual + rms_norm_composed(x, w, eps)
}

/// `(h, rms_norm(h, w2))` with `h = add_rms_norm(residual, x, w)`: a sandwich norm and the norm
/// that reads its result (the next block's input norm), one dispatch on a GPU.
pub fn add_rms_norm_then_norm<const D: usize>(
    residual: Tensor<D>,
    x: Tensor<D>,
    w: &Tensor<1>,
    w2: &Tensor<1>,
    eps: f32,
) -> (Tensor<D>, Tensor<D>) {
    if kernels::runs(&x.device(), Form::FusedNorm) {
        return fused_rows::add_rms_norm_then_norm(residual, x, w, w2, eps);
    }
    let h = residual + rms_norm_composed(x, w, eps);
    let hn = rms_norm_composed(h.clone(), w2, eps);
    (h, hn)
}

/// [`rms_norm`] as burn ops.
pub fn rms_norm_composed<const D: usize>(x: Tensor<D>, w: &Tensor<1>, eps: f32) -> Tensor<D> {
    let ms = x.clone().powi_scalar(2).mean_dim(D - 1);
    let normed = x * ms.add_scalar(eps).sqrt().recip();
    normed * w.clone().unsqueeze::<D>()
}

/// Per-head q/k RMSNorm then NEOX RoPE: `x [t, heads, d]`, tables of [`rope_tables`].
pub fn rms_norm_rope(
    x: Tensor<3>,
    w: &Tensor<1>,
    cos: &Tensor<3>,
    sin: &Tensor<3>,
    eps: f32,
) -> Tensor<3> {
    if kernels::runs(&x.device(), Form::FusedRope) {
        return fused_rows::rms_norm_rope(x, w, cos, sin, eps);
    }
    apply_rope(rms_norm_composed(x, w, eps), cos, sin)
}

/// LayerNorm over the last dimension with weight and bias (SigLIP).
pub fn layer_norm(x: Tensor<2>, w: &Tensor<1>, b: &Tensor<1>, eps: f32) -> Tensor<2> {
    if kernels::runs(&x.device(), Form::FusedLayerNorm) {
        return fused_rows::layer_norm(x, w, b, eps);
    }
    layer_norm_composed(x, w, b, eps)
}

/// [`layer_norm`] as burn ops.
pub fn layer_norm_composed(x: Tensor<2>, w: &Tensor<1>, b: &Tensor<1>, eps: f32) -> Tensor<2> {
    let mean = x.clone().mean_dim(1);
    let centered = x - mean;
    let var = centered.clone().powi_scalar(2).mean_dim(1);
    centered * var.add_scalar(eps).sqrt().recip() * w.clone().unsqueeze::<2>()
        + b.clone().unsqueeze::<2>()
}

/// GELU with the tanh approximation (PyTorch `gelu(approximate="tanh")`, `gelu_pytorch_tanh`).
pub fn gelu_tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    if kernels::runs(&x.device(), Form::FusedGelu) {
        return fused_rows::gelu(x, None);
    }
    gelu_tanh_composed(x)
}

/// `gelu_tanh(gate) · up`: Gemma's gated MLP.
pub fn gelu_mul<const D: usize>(gate: Tensor<D>, up: Tensor<D>) -> Tensor<D> {
    if kernels::runs(&gate.device(), Form::FusedGelu) {
        return fused_rows::gelu(gate, Some(up));
    }
    gelu_tanh_composed(gate) * up
}

/// `gelu_tanh(gate) · up` for `x [t, 2f]` holding gate then up (one matrix product of both).
pub fn gelu_mul_halves(x: Tensor<2>) -> Tensor<2> {
    if kernels::runs(&x.device(), Form::FusedGelu) {
        return fused_rows::gelu_halves(x);
    }
    gelu_mul_halves_composed(x)
}

/// [`gelu_mul_halves`] as burn ops.
pub fn gelu_mul_halves_composed(x: Tensor<2>) -> Tensor<2> {
    let [t, f2] = x.dims();
    let f = f2 / 2;
    let gate = x.clone().slice([0..t, 0..f]);
    gelu_tanh_composed(gate) * x.slice([0..t, f..f2])
}

/// [`gelu_tanh`] as burn ops.
pub fn gelu_tanh_composed<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    use crate::kernels::quant::{GELU_CUBIC, SQRT_2_OVER_PI, TANH_SATURATED};
    // tanh is ±1 in f32 beyond |9.02|, so clamping first changes no result; SwiftShader's tanh
    // returns NaN past ~44 (exp overflow), which FFN gate values above ~9.5 reach (the device
    // self-test's tiny forward found it: NaN from the first FFN).
    let inner =
        (x.clone() + x.clone().powi_scalar(3).mul_scalar(GELU_CUBIC)).mul_scalar(SQRT_2_OVER_PI);
    let inner = inner.clamp(-TANH_SATURATED, TANH_SATURATED);
    x.clone().mul_scalar(0.5) * (inner.tanh().add_scalar(1.0))
}

/// RoPE angles' `(cos, sin)` for NEOX-style rotation (halves `i` and `i + d/2`), computed as
/// transformers computes them in f32: `inv_freq = 1 / base^(2i/d) / scale`, angle = position ·
/// inv_freq; each `positions.len() · d/2`, position-major.
fn rope_values(
    positions: &[usize],
    head_dim: usize,
    base: f32,
    scale: f32,
) -> (Vec<f32>, Vec<f32>) {
    let half = head_dim / 2;
    let inv: Vec<f32> = (0..half)
        .map(|i| 1.0 / base.powf((2 * i) as f32 / head_dim as f32) / scale)
        .collect();
    let mut cos = Vec::with_capacity(positions.len() * half);
    let mut sin = Vec::with_capacity(positions.len() * half);
    for &p in positions {
        for f in &inv {
            let a = p as f32 * f;
            cos.push(a.cos());
            sin.push(a.sin());
        }
    }
    (cos, sin)
}

/// RoPE tables (see [`rope_values`]): `(cos, sin)`, each `[positions.len(), 1, d/2]`.
pub fn rope_tables(
    positions: &[usize],
    head_dim: usize,
    base: f32,
    scale: f32,
    device: &burn::tensor::Device,
) -> (Tensor<3>, Tensor<3>) {
    let (cos, sin) = rope_values(positions, head_dim, base, scale);
    let shape = [positions.len(), 1, head_dim / 2];
    // cos and sin: two uploads per forward.
    crate::launches::note_upload();
    crate::launches::note_upload();
    (
        Tensor::from_data(TensorData::new(cos, shape), device),
        Tensor::from_data(TensorData::new(sin, shape), device),
    )
}

/// The same tables as one `[positions.len(), d]` upload, each position's cos halves then its
/// sin halves: what the fused q/k kernel reads (one buffer binding where two would be).
pub fn rope_table(
    positions: &[usize],
    head_dim: usize,
    base: f32,
    scale: f32,
    device: &burn::tensor::Device,
) -> Tensor<2> {
    let (cos, sin) = rope_values(positions, head_dim, base, scale);
    let half = head_dim / 2;
    let mut both = Vec::with_capacity(positions.len() * head_dim);
    for (c, s) in cos.chunks(half.max(1)).zip(sin.chunks(half.max(1))) {
        both.extend_from_slice(c);
        both.extend_from_slice(s);
    }
    crate::launches::note_upload();
    Tensor::from_data(TensorData::new(both, [positions.len(), head_dim]), device)
}

/// Rotates `x [t, heads, d]` by the tables of [`rope_tables`].
pub fn apply_rope(x: Tensor<3>, cos: &Tensor<3>, sin: &Tensor<3>) -> Tensor<3> {
    let [t, h, d] = x.dims();
    let half = d / 2;
    let x1 = x.clone().slice([0..t, 0..h, 0..half]);
    let x2 = x.slice([0..t, 0..h, half..d]);
    let out1 = x1.clone() * cos.clone() - x2.clone() * sin.clone();
    let out2 = x2 * cos.clone() + x1 * sin.clone();
    Tensor::cat(vec![out1, out2], 2)
}

/// Reads a tensor back to the host (async: the only way that works in a browser).
pub async fn read_f32<const D: usize>(t: Tensor<D>) -> Result<Vec<f32>, super::ModelError> {
    crate::launches::note_read();
    t.into_data_async()
        .await
        .map_err(|e| super::ModelError::Readback(format!("{e:?}")))?
        .try_into_vec::<f32>()
        .map_err(|e| super::ModelError::Readback(format!("{e:?}")))
}

/// Index of the largest value (first on ties, like `torch.argmax`).
pub fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best
}
