//! Gemma 3's q/k path after the joined projection: per-head RMSNorm of q and k, NEOX RoPE, and
//! the append of k and v to the layer's cache, in one of two forms chosen once per pass: the
//! fused q/k kernel ([`crate::kernels::rows::qk_norm_rope_store`], a GPU whose self-test kept the
//! RoPE form) or the composed ops ([`super::nn::rms_norm_rope`], the CPU and the rest).

use burn::tensor::{Device, Tensor};

use super::config::TextConfig;
use super::kv_cache::LayerKv;
use super::nn::{rms_norm_rope, rope_table, rope_tables};
use crate::kernels::forms::Form;
use crate::kernels::{self, rows};

/// A layer's q and k RMSNorm weights (`attn_q_norm`, `attn_k_norm`), apart for the composed path
/// and joined for the fused kernel.
#[derive(Debug, Clone)]
pub struct QkNorms {
    q: Tensor<1>,
    k: Tensor<1>,
    /// `q` then `k`, as the fused q/k kernel reads them.
    joined: Tensor<1>,
}

impl QkNorms {
    /// Keeps both weights, and their concatenation for the fused kernel.
    pub fn new(q: Tensor<1>, k: Tensor<1>) -> QkNorms {
        let joined = Tensor::cat(vec![q.clone(), k.clone()], 0);
        QkNorms { q, k, joined }
    }
}

/// RoPE tables for the positions of one pass, in the form the q/k path reads.
// Two per pass, built once and borrowed: the variants' size difference costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Rope {
    /// `(cos, sin)`, each `[t, 1, head_dim/2]`: the composed path.
    Tables(Tensor<3>, Tensor<3>),
    /// One `[t, head_dim]` table, cos then sin halves: the fused q/k kernel (a GPU whose
    /// self-test kept the RoPE form).
    Joined(Tensor<2>),
}

impl Rope {
    /// The tables for `positions`, in the form `device` runs.
    pub fn new(
        device: &Device,
        positions: &[usize],
        head_dim: usize,
        base: f32,
        scale: f32,
    ) -> Rope {
        if kernels::runs(device, Form::FusedRope) {
            Rope::Joined(rope_table(positions, head_dim, base, scale, device))
        } else {
            let (cos, sin) = rope_tables(positions, head_dim, base, scale, device);
            Rope::Tables(cos, sin)
        }
    }

    /// Splits the joined projection `qkv` (`[t, (heads + 2·kv_heads)·head_dim]`) into q, k and
    /// v, norms and rotates q and k, and appends k and v to `cache`. Returns `(q, k, v, q0)`:
    /// q `[heads, t, d]`, the cache's keys and values so far `[kv_heads, q0 + t, d]`, and the
    /// position of the first new row.
    pub(super) fn norm_rotate_append(
        &self,
        qkv: Tensor<2>,
        norms: &QkNorms,
        cache: &mut Option<LayerKv>,
        c: &TextConfig,
    ) -> (Tensor<3>, Tensor<3>, Tensor<3>, usize) {
        let [t, _] = qkv.dims();
        let d = c.head_dim;
        match self {
            // q and k normed and rotated, and k and v written into the cache, read in place
            // from the joined product: one dispatch where two norm + RoPE kernels and two
            // cache writes took four.
            Rope::Joined(table) => {
                let (dims, shape) = ([c.heads, c.kv_heads, d], [c.kv_heads, t, d]);
                let device = qkv.device();
                let (k, v, q0, q) = LayerKv::append_with(cache, shape, &device, |kb, vb, pos| {
                    let (q, kb, vb) = rows::qk_norm_rope_store(
                        qkv,
                        dims,
                        &norms.joined,
                        table,
                        (kb, vb),
                        pos,
                        c.eps,
                    );
                    (kb, vb, q)
                });
                (q.swap_dims(0, 1), k, v, q0)
            }
            Rope::Tables(cos, sin) => {
                let heads = |off: usize, n: usize| {
                    qkv.clone()
                        .slice([0..t, off..off + n * d])
                        .reshape([t, n, d])
                };
                let rope = |x, w| rms_norm_rope(x, w, cos, sin, c.eps).swap_dims(0, 1);
                let q_dim = c.heads * d;
                let q = rope(heads(0, c.heads), &norms.q);
                let k = rope(heads(q_dim, c.kv_heads), &norms.k);
                let v = heads(q_dim + c.kv_heads * d, c.kv_heads).swap_dims(0, 1);
                let (k, v, q0) = LayerKv::append(cache, k, v);
                (q, k, v, q0)
            }
        }
    }
}
