//! Conformance of the fused row kernels ([`crate::kernels::rows`]) and of their composed
//! forms ([`crate::model::nn`]) on a device against an f64 evaluation of the same random
//! inputs. Shared by the self-test and the native and browser tests.

use burn::tensor::{Tensor, TensorData};

use crate::kernels::forms::Form;
use crate::kernels::rows as fused_rows;
use crate::model::ModelError;
use crate::model::nn::{self, read_f32};

/// A fused operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `rms_norm(x, w)`.
    RmsNorm,
    /// `residual + rms_norm(x, w)`.
    AddRmsNorm,
    /// `h = residual + rms_norm(x, w)` and `rms_norm(h, w2)` (both outputs, rows of `h` first).
    AddRmsNormThenNorm,
    /// `rope(rms_norm(x, w))` per head.
    RmsNormRope,
    /// `layer_norm(x, w, b)`.
    LayerNorm,
    /// `gelu_tanh(gate)`.
    Gelu,
    /// `gelu_tanh(gate) · up`.
    GeluMul,
    /// `gelu_tanh(gate) · up` read from the halves of one `[t, 2d]` product.
    GeluMulHalves,
}

impl Op {
    /// Every operation.
    pub const ALL: [Op; 8] = [
        Op::RmsNorm,
        Op::AddRmsNorm,
        Op::AddRmsNormThenNorm,
        Op::RmsNormRope,
        Op::LayerNorm,
        Op::Gelu,
        Op::GeluMul,
        Op::GeluMulHalves,
    ];

    /// The form whose kernel computes it.
    pub fn form(self) -> Form {
        match self {
            Op::RmsNorm | Op::AddRmsNorm | Op::AddRmsNormThenNorm => Form::FusedNorm,
            Op::RmsNormRope => Form::FusedRope,
            Op::LayerNorm => Form::FusedLayerNorm,
            Op::Gelu | Op::GeluMul | Op::GeluMulHalves => Form::FusedGelu,
        }
    }

    /// Snake-case name (`add_rms_norm`).
    pub fn name(self) -> &'static str {
        match self {
            Op::RmsNorm => "rms_norm",
            Op::AddRmsNorm => "add_rms_norm",
            Op::AddRmsNormThenNorm => "add_rms_norm_then_norm",
            Op::RmsNormRope => "rms_norm_rope",
            Op::LayerNorm => "layer_norm",
            Op::Gelu => "gelu",
            Op::GeluMul => "gelu_mul",
            Op::GeluMulHalves => "gelu_mul_halves",
        }
    }
}

/// Which implementation to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// The fused kernel (GPU only).
    Fused,
    /// Composed burn ops (every device).
    Composed,
}

/// `(t, heads, d)`: rows `t · heads` of `d` (RoPE takes `heads` rows per position).
pub type Shape = (usize, usize, usize);

/// Conformance cases: MedGemma 4B's widths (hidden 2560, q heads 8 × 256, SigLIP 1152, FFN
/// 10240), odd widths that leave invocations idle or loop more than once, one element per row,
/// more rows than one dispatch dimension holds (the 2-D grid), and rows past the RMSNorms'
/// register form (4,096 wide: their streaming form).
pub const CASES: [(Op, Shape); 24] = [
    (Op::RmsNorm, (3, 1, 2560)),
    (Op::RmsNorm, (2, 1, 5000)),
    (Op::AddRmsNorm, (2, 1, 4097)),
    (Op::AddRmsNormThenNorm, (2, 1, 6000)),
    (Op::RmsNorm, (5, 7, 97)),
    (Op::RmsNorm, (70_000, 1, 3)),
    (Op::RmsNorm, (2, 1, 1)),
    (Op::AddRmsNorm, (3, 1, 2560)),
    (Op::AddRmsNorm, (11, 1, 300)),
    (Op::AddRmsNormThenNorm, (3, 1, 2560)),
    (Op::AddRmsNormThenNorm, (11, 1, 300)),
    (Op::AddRmsNormThenNorm, (2, 1, 1)),
    (Op::RmsNormRope, (3, 8, 256)),
    (Op::RmsNormRope, (7, 3, 18)),
    (Op::RmsNormRope, (1, 4, 640)),
    (Op::LayerNorm, (4, 1, 1152)),
    (Op::LayerNorm, (9, 1, 33)),
    (Op::LayerNorm, (300, 1, 72)),
    (Op::Gelu, (3, 1, 4304)),
    (Op::Gelu, (70_000, 1, 1)),
    (Op::GeluMul, (3, 1, 10240)),
    (Op::GeluMul, (2, 1, 97)),
    (Op::GeluMulHalves, (3, 1, 10240)),
    (Op::GeluMulHalves, (70_000, 1, 1)),
];

/// The self-test's cases: one per operation, at MedGemma's widths.
pub const SELFTEST_CASES: [(Op, Shape); 8] = [
    (Op::RmsNorm, (3, 1, 2560)),
    (Op::AddRmsNorm, (3, 1, 2560)),
    (Op::AddRmsNormThenNorm, (3, 1, 2560)),
    (Op::RmsNormRope, (3, 8, 256)),
    (Op::LayerNorm, (4, 1, 1152)),
    (Op::Gelu, (3, 1, 4304)),
    (Op::GeluMul, (3, 1, 10240)),
    (Op::GeluMulHalves, (3, 1, 10240)),
];

/// Largest accepted difference from the f64 evaluation, relative to `max(1, |expected|)`:
/// a handful of f32 roundings per element after a sum of at most 10240 squares.
pub const TOLERANCE: f64 = 2e-6;

/// Magnitude of GELU inputs: past the ±10 clamp of the tanh argument (gates reach ~10 in real
/// FFNs, and SwiftShader's tanh breaks past ~44).
const GATE_RANGE: f32 = 12.0;

/// `op` with `path` on `device` for random inputs of `shape` against an f64 evaluation of the
/// same inputs. Returns the largest error relative to `max(1, |expected|)` (infinite for a NaN).
pub async fn max_error_vs_f64(
    device: &burn::tensor::Device,
    op: Op,
    (t, heads, d): Shape,
    seed: u64,
    path: Path,
) -> Result<f64, ModelError> {
    let rows = t * heads;
    let n = rows * d;
    let mut rng = crate::rng::SplitMix64::new(seed);
    let mut fill = |n: usize, scale: f32, offset: f32| -> Vec<f32> {
        (0..n)
            .map(|_| offset + scale * (2.0 * rng.unit_f32() - 1.0))
            .collect()
    };
    let x_scale = match op {
        Op::Gelu | Op::GeluMul | Op::GeluMulHalves => GATE_RANGE,
        _ => 1.0,
    };
    // A LayerNorm input off zero, as SigLIP's residual stream is: the mean matters.
    let x_offset = if op == Op::LayerNorm { 0.5 } else { 0.0 };
    let x = fill(n, x_scale, x_offset);
    let other = fill(n, 1.0, 0.0);
    // Gemma norm weights hold 1 + w; LayerNorm weights are arbitrary.
    let w = fill(d, 0.05, 1.0);
    let b = fill(d, 0.5, 0.0);
    let w2 = fill(d, 0.05, 1.0);
    let eps = 1e-6;
    let t1 = |v: &[f32]| Tensor::<1>::from_data(TensorData::new(v.to_vec(), [v.len()]), device);
    let t2 = |v: &[f32]| Tensor::<2>::from_data(TensorData::new(v.to_vec(), [rows, d]), device);
    let fused = path == Path::Fused;
    let (wt, bt, w2t) = (t1(&w), t1(&b), t1(&w2));
    let (out, tables) = match op {
        Op::RmsNorm if fused => (fused_rows::rms_norm(t2(&x), &wt, None, eps), None),
        Op::RmsNorm => (nn::rms_norm_composed(t2(&x), &wt, eps), None),
        Op::AddRmsNorm if fused => (
            fused_rows::rms_norm(t2(&x), &wt, Some(t2(&other)), eps),
            None,
        ),
        Op::AddRmsNorm => (t2(&other) + nn::rms_norm_composed(t2(&x), &wt, eps), None),
        Op::AddRmsNormThenNorm => {
            let (h, hn) = if fused {
                fused_rows::add_rms_norm_then_norm(t2(&other), t2(&x), &wt, &w2t, eps)
            } else {
                let h = t2(&other) + nn::rms_norm_composed(t2(&x), &wt, eps);
                (h.clone(), nn::rms_norm_composed(h, &w2t, eps))
            };
            (Tensor::cat(vec![h, hn], 0), None)
        }
        Op::RmsNormRope => {
            // Positions far into a long context: large angles.
            let positions: Vec<usize> = (0..t).map(|i| 1000 + 37 * i).collect();
            let (cos, sin) = nn::rope_tables(&positions, d, 1e4, 1.0, device);
            let x3 = Tensor::<3>::from_data(TensorData::new(x.clone(), [t, heads, d]), device);
            let y = if fused {
                fused_rows::rms_norm_rope(x3, &wt, &cos, &sin, eps)
            } else {
                nn::apply_rope(nn::rms_norm_composed(x3, &wt, eps), &cos, &sin)
            };
            let tables = (read_f32(cos).await?, read_f32(sin).await?);
            (y.reshape([rows, d]), Some(tables))
        }
        Op::LayerNorm if fused => (fused_rows::layer_norm(t2(&x), &wt, &bt, eps), None),
        Op::LayerNorm => (nn::layer_norm_composed(t2(&x), &wt, &bt, eps), None),
        Op::Gelu if fused => (fused_rows::gelu(t2(&x), None), None),
        Op::Gelu => (nn::gelu_tanh_composed(t2(&x)), None),
        Op::GeluMul if fused => (fused_rows::gelu(t2(&x), Some(t2(&other))), None),
        Op::GeluMul => (nn::gelu_tanh_composed(t2(&x)) * t2(&other), None),
        Op::GeluMulHalves => {
            let both = Tensor::cat(vec![t2(&x), t2(&other)], 1);
            let y = if fused {
                fused_rows::gelu_halves(both)
            } else {
                nn::gelu_mul_halves_composed(both)
            };
            (y, None)
        }
    };
    let got = read_f32(out).await?;
    let mut want = reference(op, &x, &other, &w, &b, eps, (t, heads, d), tables.as_ref());
    if op == Op::AddRmsNormThenNorm {
        want.extend(rms_norm_f64(&want, &w2, eps, d));
    }
    let mut worst = 0f64;
    for (g, w) in got.iter().zip(&want) {
        let err = (f64::from(*g) - w).abs() / w.abs().max(1.0);
        worst = if err.is_nan() {
            f64::INFINITY
        } else {
            worst.max(err)
        };
    }
    if got.len() != want.len() {
        worst = f64::INFINITY;
    }
    Ok(worst)
}

/// Shapes `(t, heads, kv_heads, d)` of the cache-writing q/k kernel's checks: MedGemma 4B's
/// (8 query heads over 4 key heads of 256), and odd widths with one key head.
pub const QK_STORE_CASES: [(usize, usize, usize, usize); 2] = [(3, 8, 4, 256), (5, 3, 1, 18)];

/// The fused q/k RMSNorm + RoPE with its KV-cache write ([`fused_rows::qk_norm_rope_store`])
/// on `device`, reading one joined q/k/v product and writing `t` positions at `pos` of buffers
/// that already hold other values: the largest error of q and the written keys against an f64
/// evaluation, relative to `max(1, |expected|)`. Infinite when the values are not copied
/// exactly or a position outside `pos..pos + t` changes. (A clone's shared buffers are the KV
/// cache's to copy before the kernel writes in place: `model::kv_cache` tests that.)
pub async fn qk_store_max_error(
    device: &burn::tensor::Device,
    (t, heads, kv_heads, d): (usize, usize, usize, usize),
    pos: usize,
    seed: u64,
) -> Result<f64, ModelError> {
    let mut rng = crate::rng::SplitMix64::new(seed);
    let mut fill = |n: usize, scale: f32, offset: f32| -> Vec<f32> {
        (0..n)
            .map(|_| offset + scale * (2.0 * rng.unit_f32() - 1.0))
            .collect()
    };
    let cap = pos + t + 3;
    let (qd, kd) = (heads * d, kv_heads * d);
    let (q, k, v) = (
        fill(t * qd, 1.0, 0.0),
        fill(t * kd, 1.0, 0.0),
        fill(t * kd, 1.0, 0.0),
    );
    let (qw, kw) = (fill(d, 0.05, 1.0), fill(d, 0.05, 1.0));
    let (k_old, v_old) = (
        fill(kv_heads * cap * d, 1.0, 0.0),
        fill(kv_heads * cap * d, 1.0, 0.0),
    );
    let eps = 1e-6;
    let mut qkv = Vec::with_capacity(t * (qd + 2 * kd));
    for i in 0..t {
        qkv.extend_from_slice(&q[i * qd..(i + 1) * qd]);
        qkv.extend_from_slice(&k[i * kd..(i + 1) * kd]);
        qkv.extend_from_slice(&v[i * kd..(i + 1) * kd]);
    }
    let norms: Vec<f32> = qw.iter().chain(&kw).copied().collect();
    let t1 = |v: &[f32]| Tensor::<1>::from_data(TensorData::new(v.to_vec(), [v.len()]), device);
    let t2 = |v: Vec<f32>, s: [usize; 2]| Tensor::<2>::from_data(TensorData::new(v, s), device);
    let t3 =
        |v: &[f32], s: [usize; 3]| Tensor::<3>::from_data(TensorData::new(v.to_vec(), s), device);
    let positions: Vec<usize> = (0..t).map(|i| 1000 + 37 * i).collect();
    let table = nn::rope_table(&positions, d, 1e4, 1.0, device);
    let (kb, vb) = (
        t3(&k_old, [kv_heads, cap, d]),
        t3(&v_old, [kv_heads, cap, d]),
    );
    let (q_out, kb_new, vb_new) = fused_rows::qk_norm_rope_store(
        t2(qkv, [t, qd + 2 * kd]),
        [heads, kv_heads, d],
        &t1(&norms),
        &table,
        (kb, vb),
        pos,
        eps,
    );
    // The reference rotates by the table's own f32 values, as the RoPE row check does.
    let both = read_f32(table).await?;
    let half = d / 2;
    let tables: (Vec<f32>, Vec<f32>) = (
        both.chunks(d).flat_map(|r| r[..half].to_vec()).collect(),
        both.chunks(d).flat_map(|r| r[half..].to_vec()).collect(),
    );
    let (got_q, got_k, got_v) = (
        read_f32(q_out).await?,
        read_f32(kb_new).await?,
        read_f32(vb_new).await?,
    );
    let want_q = reference(
        Op::RmsNormRope,
        &q,
        &[],
        &qw,
        &[],
        eps,
        (t, heads, d),
        Some(&tables),
    );
    let want_k = reference(
        Op::RmsNormRope,
        &k,
        &[],
        &kw,
        &[],
        eps,
        (t, kv_heads, d),
        Some(&tables),
    );
    let rel = |g: f32, w: f64| {
        let e = (f64::from(g) - w).abs() / w.abs().max(1.0);
        if e.is_nan() { f64::INFINITY } else { e }
    };
    if got_q.len() != want_q.len() {
        return Ok(f64::INFINITY);
    }
    let mut worst = got_q
        .iter()
        .zip(&want_q)
        .map(|(&g, &w)| rel(g, w))
        .fold(0f64, f64::max);
    for h in 0..kv_heads {
        for p in 0..cap {
            let at = (h * cap + p) * d;
            let new = p
                .checked_sub(pos)
                .filter(|&i| i < t)
                .map(|i| (i * kv_heads + h) * d);
            for j in 0..d {
                match new {
                    Some(src) => {
                        worst = worst.max(rel(got_k[at + j], want_k[src + j]));
                        if got_v[at + j] != v[src + j] {
                            return Ok(f64::INFINITY);
                        }
                    }
                    None if got_k[at + j] != k_old[at + j] || got_v[at + j] != v_old[at + j] => {
                        return Ok(f64::INFINITY);
                    }
                    None => {}
                }
            }
        }
    }
    Ok(worst)
}

/// `rms_norm(x, w)` in f64 over rows of `d`.
fn rms_norm_f64(x: &[f64], w: &[f32], eps: f32, d: usize) -> Vec<f64> {
    x.chunks_exact(d)
        .flat_map(|row| {
            let ms = row.iter().map(|v| v * v).sum::<f64>() / d as f64;
            let inv = 1.0 / (ms + f64::from(eps)).sqrt();
            row.iter()
                .zip(w)
                .map(move |(v, &wj)| v * inv * f64::from(wj))
        })
        .collect()
}

/// `op` in f64 on the host (the first output of [`Op::AddRmsNormThenNorm`]); RoPE rotates by the device's own f32 tables (their rounding is the
/// same on every path).
#[allow(clippy::too_many_arguments)]
fn reference(
    op: Op,
    x: &[f32],
    other: &[f32],
    w: &[f32],
    b: &[f32],
    eps: f32,
    (t, heads, d): Shape,
    tables: Option<&(Vec<f32>, Vec<f32>)>,
) -> Vec<f64> {
    let eps = f64::from(eps);
    let mut out = vec![0f64; x.len()];
    let gelu = crate::quant::conformance::gelu_tanh_f64;
    for r in 0..t * heads {
        let row = &x[r * d..(r + 1) * d];
        let o = &mut out[r * d..(r + 1) * d];
        let ms = row.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / d as f64;
        let inv = 1.0 / (ms + eps).sqrt();
        match op {
            Op::RmsNorm | Op::AddRmsNorm | Op::AddRmsNormThenNorm => {
                for j in 0..d {
                    o[j] = f64::from(row[j]) * inv * f64::from(w[j]);
                    if op != Op::RmsNorm {
                        o[j] += f64::from(other[r * d + j]);
                    }
                }
            }
            Op::RmsNormRope => {
                let (cos, sin) = tables.expect("RoPE tables");
                let (half, p) = (d / 2, r / heads);
                for i in 0..half {
                    let a = f64::from(row[i]) * inv * f64::from(w[i]);
                    let bb = f64::from(row[half + i]) * inv * f64::from(w[half + i]);
                    let (c, s) = (f64::from(cos[p * half + i]), f64::from(sin[p * half + i]));
                    o[i] = a * c - bb * s;
                    o[half + i] = bb * c + a * s;
                }
            }
            Op::LayerNorm => {
                let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / d as f64;
                let var = row
                    .iter()
                    .map(|&v| (f64::from(v) - mean).powi(2))
                    .sum::<f64>()
                    / d as f64;
                let inv = 1.0 / (var + eps).sqrt();
                for j in 0..d {
                    o[j] = (f64::from(row[j]) - mean) * inv * f64::from(w[j]) + f64::from(b[j]);
                }
            }
            Op::Gelu | Op::GeluMul | Op::GeluMulHalves => {
                for j in 0..d {
                    o[j] = gelu(f64::from(row[j]));
                    if op != Op::Gelu {
                        o[j] *= f64::from(other[r * d + j]);
                    }
                }
            }
        }
    }
    out
}
