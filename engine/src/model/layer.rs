//! One Gemma 3 decoder layer (`blk.N.*`): the attention with its joined q/k/v projections, the
//! gated MLP, and the sandwich norms around both, in forward order.

use std::ops::Range;

use burn::tensor::{Int, Tensor};

use super::ModelError;
use super::attention::{Mask, segmented_attention};
use super::config::TextConfig;
use super::kv_cache::LayerKv;
use super::load::Loader;
use super::names::{Block, blk};
use super::nn::{add_rms_norm_then_norm, gelu_mul, gelu_mul_halves};
use super::rope::{QkNorms, Rope};
use super::trace::{self, Tap, Tracer};
use crate::gguf::RangeSource;
use crate::quant::QMatrix;

/// A layer's query, key and value projections, joined at load where their types allow, so one
/// product (or two) computes all three.
#[derive(Debug, Clone)]
pub(super) enum Projections {
    /// q, k and v rows in one buffer.
    Qkv(QMatrix),
    /// q and k rows in one buffer; v of another type (Q4_K_M gives some layers' v Q6_K).
    Qk(QMatrix, QMatrix),
    /// Three buffers (a matrix split into several).
    Apart(QMatrix, QMatrix, QMatrix),
}

impl Projections {
    pub(super) fn new(q: QMatrix, k: QMatrix, v: QMatrix) -> Projections {
        match QMatrix::join(q, k) {
            Err((q, k)) => Projections::Apart(q, k, v),
            Ok(qk) => match QMatrix::join(qk, v) {
                Ok(qkv) => Projections::Qkv(qkv),
                Err((qk, v)) => Projections::Qk(qk, v),
            },
        }
    }

    /// `xn [t, hidden]` projected to each position's queries, keys and values side by side:
    /// `[t, q_dim + 2·kv_dim]`. One product where the three are joined, or where q+k and v are
    /// one buffer each (a product that switches block type by row); otherwise each writes its
    /// columns of one output on a GPU (concatenated on the CPU).
    pub(super) fn project(&self, xn: Tensor<2>) -> Tensor<2> {
        let parts: Vec<&QMatrix> = match self {
            Projections::Qkv(m) => return m.matmul(xn),
            Projections::Qk(qk, v) => match QMatrix::matmul_stacked(qk, v, xn.clone()) {
                Some(qkv) => return qkv,
                None => vec![qk, v],
            },
            Projections::Apart(q, k, v) => vec![q, k, v],
        };
        let device = xn.device();
        if !crate::device::queues_work(&device) {
            return Tensor::cat(parts.iter().map(|m| m.matmul(xn.clone())).collect(), 1);
        }
        let width = parts.iter().map(|m| m.rows).sum();
        let out = Tensor::<2>::empty([xn.dims()[0], width], &device);
        let mut col0 = 0;
        parts.iter().fold(out, |out, m| {
            let out = m.matmul_into(xn.clone(), out, col0);
            col0 += m.rows;
            out
        })
    }

    /// The matrices by name, in forward order.
    pub(super) fn matrices(&self) -> Vec<(&'static str, &QMatrix)> {
        match self {
            Projections::Qkv(m) => vec![(blk::ATTN_QKV, m)],
            Projections::Qk(qk, v) => vec![(blk::ATTN_QK, qk), (blk::ATTN_V, v)],
            Projections::Apart(q, k, v) => {
                vec![(blk::ATTN_Q, q), (blk::ATTN_K, k), (blk::ATTN_V, v)]
            }
        }
    }
}

/// Self-attention of one layer (`blk.N.attn_*`): GQA with per-head q/k RMSNorm and RoPE.
#[derive(Debug, Clone)]
pub(super) struct Attention {
    pub(super) qkv: Projections,
    /// `attn_q_norm`, `attn_k_norm`.
    pub(super) norms: QkNorms,
    pub(super) attn_output: QMatrix,
}

/// A layer's FFN gate and up projections.
#[derive(Debug, Clone)]
pub(super) enum GateUp {
    /// Gate rows then up rows in one buffer: one product, which applies GELU·up itself when
    /// decoding; prefill's product is read by the GELU·up kernel.
    Joined(QMatrix),
    /// Stored apart (different types, or split into several buffers): two products.
    Apart { gate: QMatrix, up: QMatrix },
}

/// Rows the MLP multiplies at once. A study's four questions scored in one pass (1,272 rows at
/// MedGemma 4B) made a 104 MB gate·up product and a 52 MB GELU·up product, and the browser's
/// pool (a page per allocation, in size classes) kept pages of those sizes that no later
/// allocation fits. Blocks of at most 384 rows make them a quarter of that, on pages the other
/// passes use. One question's prompt (~340 rows at 4B) stays one block: its prefill is unchanged.
pub(super) const MLP_BLOCK_ROWS: usize = 384;

/// The gated MLP of one layer (`blk.N.ffn_*`): `down(gelu_tanh(gate(x)) · up(x))`.
#[derive(Debug, Clone)]
pub(super) struct Mlp {
    pub(super) gate_up: GateUp,
    pub(super) ffn_down: QMatrix,
}

/// One decoder layer; fields follow the GGUF names `blk.N.*`, in forward order.
#[derive(Debug, Clone)]
pub(super) struct Layer {
    pub(super) attn_norm: Tensor<1>,
    pub(super) attn: Attention,
    pub(super) post_attention_norm: Tensor<1>,
    pub(super) ffn_norm: Tensor<1>,
    pub(super) ffn: Mlp,
    pub(super) post_ffw_norm: Tensor<1>,
}

/// What the layers of one kind (global or sliding) share in one pass.
pub(super) struct LayerInputs<'a> {
    pub(super) cfg: &'a TextConfig,
    /// RoPE tables for the rows' positions.
    pub(super) rope: &'a Rope,
    /// Rows of `x` that continue the cache independently, each with its mask
    /// `[rows, cached + rows]` (one segment: an ordinary continuation).
    pub(super) segments: &'a [(Range<usize>, Mask)],
    /// Where the segments' keys sit, for one gather a layer ([`segment_key_positions`]).
    pub(super) gather: Option<&'a Tensor<1, Int>>,
}

impl Attention {
    pub(super) async fn load<S: RangeSource>(
        l: &mut Loader<'_, S>,
        b: &Block,
        c: &TextConfig,
    ) -> Result<Attention, ModelError> {
        let (h, q_dim, kv_dim) = (c.hidden, c.heads * c.head_dim, c.kv_heads * c.head_dim);
        let (q, k, v) = (
            b.weight(blk::ATTN_Q),
            b.weight(blk::ATTN_K),
            b.weight(blk::ATTN_V),
        );
        let o = b.weight(blk::ATTN_OUTPUT);
        // The output projection shares the projections' buffer where it can: alone, MedGemma
        // 4B's (2.95 MB) and a Q6_K v (2.15 MB) would each take a 4 MiB block in a browser
        // (`Loader::qmatrices_shared`).
        let shared_qkv = l
            .qmatrices_shared(&[
                (&[(&q, q_dim), (&k, kv_dim), (&v, kv_dim)], h),
                (&[(&o, h)], q_dim),
            ])
            .await?;
        let shared = match shared_qkv {
            Some(m) => Some(m),
            None => {
                l.qmatrices_shared(&[
                    (&[(&q, q_dim), (&k, kv_dim)], h),
                    (&[(&v, kv_dim)], h),
                    (&[(&o, h)], q_dim),
                ])
                .await?
            }
        };
        let (qkv, attn_output) = match shared {
            Some(mut m) => {
                let out = m.pop().expect("qmatrices_shared gives one matrix a part");
                let qkv = match (m.pop(), m.pop()) {
                    (Some(qkv), None) => Projections::Qkv(qkv),
                    (Some(v), Some(qk)) => Projections::Qk(qk, v),
                    _ => unreachable!("qmatrices_shared gives one matrix a part"),
                };
                (qkv, out)
            }
            None => {
                let qkv = match l
                    .qmatrix_joined(&[(&q, q_dim), (&k, kv_dim), (&v, kv_dim)], h)
                    .await?
                {
                    Some(qkv) => Projections::Qkv(qkv),
                    None => match l.qmatrix_joined(&[(&q, q_dim), (&k, kv_dim)], h).await? {
                        Some(qk) => Projections::Qk(qk, l.qmatrix(&v, kv_dim, h).await?),
                        // The CPU, or types or sizes that do not join on a GPU either.
                        None => Projections::new(
                            l.qmatrix(&q, q_dim, h).await?,
                            l.qmatrix(&k, kv_dim, h).await?,
                            l.qmatrix(&v, kv_dim, h).await?,
                        ),
                    },
                };
                (qkv, l.qmatrix(&o, h, q_dim).await?)
            }
        };
        let attn_q_norm = l.vector(&b.weight(blk::ATTN_Q_NORM), c.head_dim).await?;
        let attn_k_norm = l.vector(&b.weight(blk::ATTN_K_NORM), c.head_dim).await?;
        Ok(Attention {
            qkv,
            norms: QkNorms::new(attn_q_norm, attn_k_norm),
            attn_output,
        })
    }

    /// Attends the normed rows `xn` to the cached keys and their own; appends their keys and
    /// values to `cache`.
    ///
    /// # Shapes
    /// `xn`: `[t, hidden]` → `[t, hidden]` (after the output projection).
    pub(super) fn forward(
        &self,
        xn: Tensor<2>,
        p: &LayerInputs<'_>,
        cache: &mut Option<LayerKv>,
    ) -> Tensor<2> {
        let c = p.cfg;
        let [t, _] = xn.dims();
        let qkv = self.qkv.project(xn);
        let (q, k, v, q0) = p.rope.norm_rotate_append(qkv, &self.norms, cache, c);
        let groups = c.heads / c.kv_heads;
        let a = segmented_attention(q, k, v, q0, p.segments, p.gather, groups, c.attn_scale);
        self.attn_output
            .matmul(a.swap_dims(0, 1).reshape([t, c.heads * c.head_dim]))
    }
}

impl Mlp {
    pub(super) async fn load<S: RangeSource>(
        l: &mut Loader<'_, S>,
        b: &Block,
        c: &TextConfig,
    ) -> Result<Mlp, ModelError> {
        let (gate, up) = (b.weight(blk::FFN_GATE), b.weight(blk::FFN_UP));
        let joined = l
            .qmatrix_joined(&[(&gate, c.ffn), (&up, c.ffn)], c.hidden)
            .await?;
        let gate_up = match joined {
            Some(joined) => GateUp::Joined(joined),
            None => {
                let gate = l.qmatrix(&gate, c.ffn, c.hidden).await?;
                let up = l.qmatrix(&up, c.ffn, c.hidden).await?;
                match QMatrix::join(gate, up) {
                    Ok(joined) => GateUp::Joined(joined),
                    Err((gate, up)) => GateUp::Apart { gate, up },
                }
            }
        };
        Ok(Mlp {
            gate_up,
            ffn_down: l.qmatrix(&b.weight(blk::FFN_DOWN), c.hidden, c.ffn).await?,
        })
    }

    /// `[t, hidden]` → `[t, hidden]`, [`MLP_BLOCK_ROWS`] rows at a time.
    pub(super) fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.forward_blocks(x, MLP_BLOCK_ROWS)
    }

    /// [`Mlp::forward`] `rows` rows at a time.
    pub(super) fn forward_blocks(&self, x: Tensor<2>, rows: usize) -> Tensor<2> {
        crate::kernels::buffers::map_row_blocks(x, rows, |x| self.block(x))
    }

    /// The MLP on all rows of `x` at once.
    pub(super) fn block(&self, x: Tensor<2>) -> Tensor<2> {
        let gated = match &self.gate_up {
            // The decode product applies the GELU itself; prefill's tiled product cannot.
            GateUp::Joined(m) => match m.matmul_gelu_halves(x.clone()) {
                Some(gated) => gated,
                None => gelu_mul_halves(m.matmul(x)),
            },
            GateUp::Apart { gate, up } => gelu_mul(gate.matmul(x.clone()), up.matmul(x)),
        };
        self.ffn_down.matmul(gated)
    }
}

impl Layer {
    pub(super) async fn load<S: RangeSource>(
        l: &mut Loader<'_, S>,
        i: usize,
        c: &TextConfig,
    ) -> Result<Layer, ModelError> {
        let b = Block::text(i);
        let h = c.hidden;
        Ok(Layer {
            attn_norm: l.vector(&b.weight(blk::ATTN_NORM), h).await?,
            attn: Attention::load(l, &b, c).await?,
            post_attention_norm: l.vector(&b.weight(blk::POST_ATTENTION_NORM), h).await?,
            ffn_norm: l.vector(&b.weight(blk::FFN_NORM), h).await?,
            ffn: Mlp::load(l, &b, c).await?,
            post_ffw_norm: l.vector(&b.weight(blk::POST_FFW_NORM), h).await?,
        })
    }

    /// Layer `i` on the residual stream `x`, whose input norm `xn` the previous step computed:
    /// sandwich-normed attention, then MLP. Returns the new stream and its norm by `next_norm`
    /// (the next layer's input norm, or the final norm), computed with the post-FFW norm in one
    /// dispatch on a GPU.
    ///
    /// # Shapes
    /// `x`, `xn`: `[t, hidden]` → `[t, hidden]` twice.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn forward(
        &self,
        i: usize,
        x: Tensor<2>,
        xn: Tensor<2>,
        next_norm: &Tensor<1>,
        p: &LayerInputs<'_>,
        cache: &mut Option<LayerKv>,
        tr: &mut dyn Tracer,
    ) -> (Tensor<2>, Tensor<2>) {
        let eps = p.cfg.eps;
        tr.tap(Tap::layer(trace::ATTN_NORM, i), &xn);
        let a = self.attn.forward(xn, p, cache);
        tr.tap(Tap::layer(trace::ATTN_OUT, i), &a);
        let (h, hn) = add_rms_norm_then_norm(x, a, &self.post_attention_norm, &self.ffn_norm, eps);
        let f = self.ffn.forward(hn);
        tr.tap(Tap::layer(trace::FFN_OUT, i), &f);
        let (out, out_n) = add_rms_norm_then_norm(h, f, &self.post_ffw_norm, next_norm, eps);
        tr.tap(Tap::layer(trace::L_OUT, i), &out);
        (out, out_n)
    }

    /// The layer's weight matrices by name, in forward order.
    pub(super) fn matrices(&self) -> Vec<(&'static str, &QMatrix)> {
        let mut v = self.attn.qkv.matrices();
        v.push((blk::ATTN_OUTPUT, &self.attn.attn_output));
        match &self.ffn.gate_up {
            GateUp::Joined(m) => v.push((blk::FFN_GATE_UP, m)),
            GateUp::Apart { gate, up } => v.extend([(blk::FFN_GATE, gate), (blk::FFN_UP, up)]),
        }
        v.push((blk::FFN_DOWN, &self.ffn.ffn_down));
        v
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Distribution, Tensor};

    use super::{GateUp, Mlp};
    use crate::gguf::GgmlType;
    use crate::quant::{QMatrix, random_blocks};

    /// The MLP in row blocks gives what it gives on all rows at once: every product treats rows
    /// apart. On the GPU both run the prefill kernels (blocks of 10 rows, the whole 40, both
    /// over the decode products' 8), on the CPU burn's.
    #[test]
    fn mlp_in_row_blocks_computes_the_whole() {
        let (hidden, ffn, t) = (64, 96, 40);
        let gpu = crate::device::wgpu().expect("a wgpu adapter (lavapipe)");
        for dev in [gpu, crate::device::cpu()] {
            let q = |rows: usize, cols: usize, seed| {
                let ty = GgmlType::Q8_0;
                let bytes = random_blocks(ty, rows * cols, seed);
                QMatrix::upload(ty, &bytes, rows, cols, &dev, usize::MAX).unwrap()
            };
            let mlp = Mlp {
                gate_up: GateUp::Joined(q(2 * ffn, hidden, 1)),
                ffn_down: q(hidden, ffn, 2),
            };
            let x = Tensor::<2>::random([t, hidden], Distribution::Default, &dev);
            let values = |y: Tensor<2>| y.into_data().try_into_vec::<f32>().unwrap();
            let whole = values(mlp.forward_blocks(x.clone(), t));
            let blocks = values(mlp.forward_blocks(x, 12));
            let worst = whole
                .iter()
                .zip(&blocks)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert_eq!(whole.len(), t * hidden);
            assert!(worst == 0.0, "max |blocks - whole| = {worst:e}");
        }
    }
}
