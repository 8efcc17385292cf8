//! The Gemma 3 decoder: scaled token embeddings (image embeddings injected unscaled),
//! 5 sliding-window layers for each global one, GQA with per-head q/k RMSNorm, NEOX RoPE with
//! per-layer bases, and the tied output head.

use std::ops::Range;

use burn::tensor::{Device, Int, Tensor, TensorData};

use super::ModelError;
use super::attention::{Mask, lookahead, mask_values, segment_key_positions, segmented_attention};
use super::config::TextConfig;
use super::kv_cache::{KvCache, LayerKv};
use super::load::Loader;
use super::names::{self, Block, blk};
use super::nn::{self, add_rms_norm_then_norm, gelu_mul, gelu_mul_halves, rms_norm};
use super::rope::{QkNorms, Rope};
use super::trace::{self, NoTrace, Tap, Tracer};
use crate::gguf::RangeSource;
use crate::kernels::forms::{self, Form};
use crate::quant::QMatrix;
use crate::tokenizer::ids;

/// A layer's query, key and value projections, joined at load where their types allow, so one
/// product (or two) computes all three.
#[derive(Debug, Clone)]
enum Projections {
    /// q, k and v rows in one buffer.
    Qkv(QMatrix),
    /// q and k rows in one buffer; v of another type (Q4_K_M gives some layers' v Q6_K).
    Qk(QMatrix, QMatrix),
    /// Three buffers (a matrix split into several).
    Apart(QMatrix, QMatrix, QMatrix),
}

impl Projections {
    fn new(q: QMatrix, k: QMatrix, v: QMatrix) -> Projections {
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
    fn project(&self, xn: Tensor<2>) -> Tensor<2> {
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
    fn matrices(&self) -> Vec<(&'static str, &QMatrix)> {
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
struct Attention {
    qkv: Projections,
    /// `attn_q_norm`, `attn_k_norm`.
    norms: QkNorms,
    attn_output: QMatrix,
}

/// A layer's FFN gate and up projections.
#[derive(Debug, Clone)]
enum GateUp {
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
const MLP_BLOCK_ROWS: usize = 384;

/// The gated MLP of one layer (`blk.N.ffn_*`): `down(gelu_tanh(gate(x)) · up(x))`.
#[derive(Debug, Clone)]
struct Mlp {
    gate_up: GateUp,
    ffn_down: QMatrix,
}

/// One decoder layer; fields follow the GGUF names `blk.N.*`, in forward order.
#[derive(Debug, Clone)]
struct Layer {
    attn_norm: Tensor<1>,
    attn: Attention,
    post_attention_norm: Tensor<1>,
    ffn_norm: Tensor<1>,
    ffn: Mlp,
    post_ffw_norm: Tensor<1>,
}

/// The decoder and its tied embedding/head.
#[derive(Debug, Clone)]
pub struct Decoder {
    /// Hyper-parameters.
    pub cfg: TextConfig,
    token_embd: QMatrix,
    layers: Vec<Layer>,
    output_norm: Tensor<1>,
    device: Device,
}

/// What the layers of one kind (global or sliding) share in one pass.
struct LayerInputs<'a> {
    cfg: &'a TextConfig,
    /// RoPE tables for the rows' positions.
    rope: &'a Rope,
    /// Rows of `x` that continue the cache independently, each with its mask
    /// `[rows, cached + rows]` (one segment: an ordinary continuation).
    segments: &'a [(Range<usize>, Mask)],
    /// Where the segments' keys sit, for one gather a layer ([`segment_key_positions`]).
    gather: Option<&'a Tensor<1, Int>>,
}

impl Attention {
    async fn load<S: RangeSource>(
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
        // 4B's (2.95 MB) and a Q6_K v (2.15 MB) each took a 4 MiB block in a browser
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
    fn forward(
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
    async fn load<S: RangeSource>(
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
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.forward_blocks(x, MLP_BLOCK_ROWS)
    }

    /// [`Mlp::forward`] `rows` rows at a time.
    fn forward_blocks(&self, x: Tensor<2>, rows: usize) -> Tensor<2> {
        crate::kernels::rows::map_row_blocks(x, rows, |x| self.block(x))
    }

    /// The MLP on all rows of `x` at once.
    fn block(&self, x: Tensor<2>) -> Tensor<2> {
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
    async fn load<S: RangeSource>(
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
    fn forward(
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
    fn matrices(&self) -> Vec<(&'static str, &QMatrix)> {
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

impl Decoder {
    /// Loads every decoder weight (streaming, tensor by tensor).
    pub async fn load<S: RangeSource>(
        l: &mut Loader<'_, S>,
        cfg: TextConfig,
    ) -> Result<Decoder, ModelError> {
        let token_embd = l
            .qmatrix(&names::weight(names::TOKEN_EMBD), cfg.vocab, cfg.hidden)
            .await?;
        let output = names::weight(names::OUTPUT);
        if l.info(&output, &[cfg.hidden as u64, cfg.vocab as u64])
            .is_ok()
        {
            return Err(ModelError::Unsupported(format!(
                "a separate {output} (Gemma 3 ties the head to {})",
                names::TOKEN_EMBD
            )));
        }
        let mut layers = Vec::with_capacity(cfg.layers);
        for i in 0..cfg.layers {
            layers.push(Layer::load(l, i, &cfg).await?);
        }
        let output_norm = l
            .vector(&names::weight(names::OUTPUT_NORM), cfg.hidden)
            .await?;
        Ok(Decoder {
            device: l.device().clone(),
            cfg,
            token_embd,
            layers,
            output_norm,
        })
    }

    /// A fresh cache.
    pub fn new_cache(&self) -> KvCache {
        KvCache::new(self.cfg.layers)
    }

    /// Runs `ids` (image soft tokens as [`ids::IMAGE_SOFT`]) through the decoder after what the
    /// cache holds; `images` are the projected features `[tokens, hidden]` of each run of image
    /// tokens, in order. Returns the final-normed hidden states `[t, hidden]`.
    pub fn forward(
        &self,
        input: &[u32],
        images: &[Tensor<2>],
        cache: &mut KvCache,
    ) -> Result<Tensor<2>, ModelError> {
        self.forward_traced(input, images, cache, &mut NoTrace)
    }

    /// [`Decoder::forward`], handing `tracer` every stage named in [`super::trace`]
    /// (`inp_scaled`; per layer `attn_norm`, `attn_out`, `ffn_out`, `l_out`; `result_norm`),
    /// each `[t, width]`.
    pub fn forward_traced(
        &self,
        input: &[u32],
        images: &[Tensor<2>],
        cache: &mut KvCache,
        tracer: &mut dyn Tracer,
    ) -> Result<Tensor<2>, ModelError> {
        let q0 = cache.len;
        let (x, spans) = self.embed(input, images)?;
        cache
            .image_spans
            .extend(spans.iter().map(|s| s.start + q0..s.end + q0));
        Ok(self.layers_after(x, cache, tracer))
    }

    /// Embeds `input` (scaled token embeddings, the `images` features `[tokens, hidden]` at the
    /// runs of image soft tokens, in order): `[t, hidden]` and the runs.
    fn embed(
        &self,
        input: &[u32],
        images: &[Tensor<2>],
    ) -> Result<(Tensor<2>, Vec<Range<usize>>), ModelError> {
        let c = &self.cfg;
        let t = input.len();
        if t == 0 {
            return Err(ModelError::Prompt("empty input".into()));
        }
        // Runs of image soft tokens, in input order.
        let mut spans = Vec::new();
        let mut i = 0;
        while i < t {
            if input[i] == ids::IMAGE_SOFT {
                let s = i;
                while i < t && input[i] == ids::IMAGE_SOFT {
                    i += 1;
                }
                spans.push(s..i);
            } else {
                if input[i] as usize >= c.vocab {
                    return Err(ModelError::Prompt(format!(
                        "token id {} is outside the {}-token vocabulary",
                        input[i], c.vocab
                    )));
                }
                i += 1;
            }
        }
        if spans.len() != images.len() {
            return Err(ModelError::Prompt(format!(
                "{} image token runs but {} images",
                spans.len(),
                images.len()
            )));
        }
        let lookup: Vec<u32> = input
            .iter()
            .map(|&t| if t == ids::IMAGE_SOFT { 0 } else { t })
            .collect();
        // Token embeddings are scaled by sqrt(hidden); image embeddings are not.
        // ref: transformers Gemma3TextScaledWordEmbedding; llama.cpp gemma3 graph ggml_scale(inpL, sqrtf(n_embd)).
        let mut x = self
            .token_embd
            .gather(&lookup)
            .mul_scalar((c.hidden as f32).sqrt());
        for (span, feats) in spans.iter().zip(images) {
            let [n, h] = feats.dims();
            if n != span.len() || h != c.hidden {
                return Err(ModelError::Prompt(format!(
                    "image features are {n}×{h} but the prompt has {} image tokens of width {}",
                    span.len(),
                    c.hidden
                )));
            }
            x = crate::kernels::rows::write_rows(x, span.start, feats.clone());
        }
        Ok((x, spans))
    }

    /// Runs one token whose id is on the device (`[1]` u32, e.g. a device argmax) through the
    /// decoder after `cache`: greedy decoding never has to read the id back to continue.
    pub fn forward_token(&self, id: Tensor<1, Int>, cache: &mut KvCache) -> Tensor<2> {
        let x = self
            .token_embd
            .gather_device(id)
            .mul_scalar((self.cfg.hidden as f32).sqrt());
        self.layers_after(x, cache, &mut NoTrace)
    }

    /// The last hidden state of each of several prompts that continue the prefix in `cache`
    /// independently (the questions of one study after their shared header), computed in one
    /// pass: `[branches, hidden]`. Each branch is its tokens and the features of its image runs.
    /// Equal to running each branch on its own after the prefix, up to summation order; the
    /// cache is left as it was.
    pub fn forward_branches(
        &self,
        branches: &[(&[u32], &[Tensor<2>])],
        cache: &KvCache,
    ) -> Result<Tensor<2>, ModelError> {
        if branches.is_empty() {
            return Err(ModelError::Prompt("no branches".into()));
        }
        let q0 = cache.len;
        let mut xs = Vec::with_capacity(branches.len());
        let mut spans = Vec::with_capacity(branches.len());
        let mut lens = Vec::with_capacity(branches.len());
        for (input, images) in branches {
            let (x, s) = self.embed(input, images)?;
            xs.push(x);
            spans.push(s);
            lens.push(input.len());
        }
        let positions: Vec<usize> = lens.iter().flat_map(|&n| q0..q0 + n).collect();
        let mut segments = Vec::with_capacity(lens.len());
        let mut start = 0;
        for (&n, own) in lens.iter().zip(&spans) {
            let mut all = cache.image_spans.clone();
            all.extend(own.iter().map(|r| r.start + q0..r.end + q0));
            segments.push((start..start + n, all));
            start += n;
        }
        let h = self.layers(
            crate::kernels::rows::cat_rows(xs),
            &positions,
            &mut cache.clone(),
            &segments,
            Keys::Discarded,
            &mut NoTrace,
        );
        let mut end = 0;
        let last = lens
            .iter()
            .map(|&n| {
                end += n;
                h.clone().slice([end - 1..end, 0..self.cfg.hidden])
            })
            .collect();
        Ok(crate::kernels::rows::cat_rows(last))
    }

    /// The decoder layers and final norm on embedded inputs `x [t, hidden]` that follow what
    /// `cache` holds (whose image spans already include `x`'s).
    fn layers_after(
        &self,
        x: Tensor<2>,
        cache: &mut KvCache,
        tracer: &mut dyn Tracer,
    ) -> Tensor<2> {
        let (q0, t) = (cache.len, x.dims()[0]);
        let positions: Vec<usize> = (q0..q0 + t).collect();
        let segments = [(0..t, cache.image_spans.clone())];
        self.layers(x, &positions, cache, &segments, Keys::Kept, tracer)
    }

    /// The decoder layers and final norm on `x [t, hidden]` at RoPE `positions`; appends `x`'s
    /// keys and values to `cache` when they are [`Keys::Kept`]. Each segment (rows of `x`,
    /// absolute image spans it sees) continues the cache on its own, masked as [`mask_values`]
    /// masks a lone continuation.
    fn layers(
        &self,
        mut x: Tensor<2>,
        positions: &[usize],
        cache: &mut KvCache,
        segments: &[(Range<usize>, Vec<Range<usize>>)],
        keys: Keys,
        tracer: &mut dyn Tracer,
    ) -> Tensor<2> {
        let c = &self.cfg;
        let (q0, t) = (cache.len, x.dims()[0]);
        let rope_global = Rope::new(
            &self.device,
            positions,
            c.head_dim,
            c.rope_base,
            c.rope_scale,
        );
        let rope_local = Rope::new(&self.device, positions, c.head_dim, c.rope_base_swa, 1.0);
        let masks = |w: Option<usize>| -> Vec<(Range<usize>, Mask)> {
            segments
                .iter()
                .map(|(r, spans)| {
                    let n = r.len();
                    let m = mask_values(q0, n, spans, w);
                    crate::launches::note_upload();
                    let values =
                        Tensor::<2>::from_data(TensorData::new(m, [n, q0 + n]), &self.device);
                    let lookahead = Some(lookahead(spans));
                    (r.clone(), Mask { values, lookahead })
                })
                .collect()
        };
        let mask_global = masks(None);
        let mask_local = (c.sliding_window > 0).then(|| masks(Some(c.sliding_window)));
        let rows: Vec<Range<usize>> = segments.iter().map(|(r, _)| r.clone()).collect();
        let gather = segment_key_positions(q0, &rows).map(|at| {
            crate::launches::note_upload();
            let n = at.len();
            Tensor::<1, Int>::from_data(TensorData::new(at, [n]), &self.device)
        });
        let global = LayerInputs {
            cfg: c,
            rope: &rope_global,
            segments: &mask_global,
            gather: gather.as_ref(),
        };
        let local = LayerInputs {
            cfg: c,
            rope: &rope_local,
            segments: mask_local.as_ref().unwrap_or(&mask_global),
            gather: gather.as_ref(),
        };
        tracer.tap(Tap::at(trace::INP_SCALED), &x);
        let Some(first) = self.layers.first() else {
            cache.len += t;
            return rms_norm(x, &self.output_norm, c.eps);
        };
        if keys == Keys::Kept {
            cache.reserve(t, [c.kv_heads, c.head_dim], &self.device);
        }
        let mut xn = rms_norm(x.clone(), &first.attn_norm, c.eps);
        for (i, layer) in self.layers.iter().enumerate() {
            let inputs = if c.is_global(i) { &global } else { &local };
            let next_norm = self
                .layers
                .get(i + 1)
                .map_or(&self.output_norm, |l| &l.attn_norm);
            // A discarded pass's keys live for their layer only: the slot gets its prior buffers
            // back, so the next layer's copy can take the page this one frees.
            let prior = (keys == Keys::Discarded).then(|| cache.layers[i].clone());
            (x, xn) = layer.forward(i, x, xn, next_norm, inputs, &mut cache.layers[i], tracer);
            if let Some(prior) = prior {
                cache.layers[i] = prior;
            }
        }
        cache.len += t;
        tracer.tap(Tap::at(trace::RESULT_NORM), &xn);
        xn
    }

    fn softcap(&self, logits: Tensor<2>) -> Tensor<2> {
        match self.cfg.final_softcap {
            Some(cap) => logits.div_scalar(cap).tanh().mul_scalar(cap),
            None => logits,
        }
    }

    /// Logits over the whole vocabulary: `[t, hidden] → [t, vocab]`.
    pub fn logits(&self, hidden: Tensor<2>) -> Tensor<2> {
        self.softcap(self.token_embd.matmul(hidden))
    }

    /// The most likely next token after the last position of `hidden`, left on the device
    /// (`[1]` u32; the first on ties).
    pub fn greedy(&self, hidden: Tensor<2>) -> Tensor<1, Int> {
        let t = hidden.dims()[0];
        let last = hidden.slice([t - 1..t, 0..self.cfg.hidden]);
        let logits = self.logits(last);
        // burn's argmax reduces a single row in one invocation on the GPU (11 ms of a 29 ms
        // token on an H200, 2026-11-27): the fused one reads it with many workgroups.
        let id = if crate::kernels::queues_work(&self.device) {
            crate::kernels::rows::argmax(logits)
        } else {
            logits
                .argmax(1)
                .reshape([1])
                .cast(burn::tensor::IntDType::U32)
        };
        // A test fault makes the device argmax pick the next id.
        match forms::faulty(Form::DeviceArgmax) {
            true => id.add_scalar(1),
            false => id,
        }
    }

    /// The next token after the last position of `hidden`, as [`Decoder::greedy`] but through
    /// the host's argmax (reading the logits back) when the self-test turned the device argmax
    /// off; `[1]` u32 on the device either way.
    pub async fn next_token(&self, hidden: Tensor<2>) -> Result<Tensor<1, Int>, ModelError> {
        if forms::enabled(Form::DeviceArgmax) {
            return Ok(self.greedy(hidden));
        }
        let t = hidden.dims()[0];
        let last = hidden.slice([t - 1..t, 0..self.cfg.hidden]);
        let logits = nn::read_f32(self.logits(last)).await?;
        let id = nn::argmax(&logits) as u32;
        crate::launches::note_upload();
        Ok(Tensor::<1, Int>::from_data(
            TensorData::new(vec![id], [1]),
            (&self.device, burn::tensor::DType::U32),
        ))
    }

    /// Logits of chosen tokens only, computing just those head rows: `[t, hidden] → [t, ids]`.
    /// Products and a sum over the hidden width rather than a matmul: burn's matmul for so few
    /// rows and columns took 22.0 ms of a 4-question study's pass in Chromium on an H200 against
    /// 0.79 ms natively (`bench/results/device/h200-browser-2026-11-27T2355/bvn-4b.json`); a sum
    /// is one of burn's reduction kernels.
    pub fn logits_for(&self, hidden: Tensor<2>, ids: &[u32]) -> Tensor<2> {
        let rows = self.token_embd.gather(ids);
        let t = hidden.dims()[0];
        let products = hidden.unsqueeze_dim::<3>(1) * rows.unsqueeze_dim::<3>(0);
        self.softcap(products.sum_dim(2).reshape([t, ids.len()]))
    }

    /// Device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Packed weight bytes one decoded token reads: every layer's matrices and the whole tied
    /// head (greedy decoding scores every vocabulary row).
    pub fn weight_bytes_per_token(&self) -> u64 {
        let bytes = |m: &QMatrix| m.ty.bytes_for((m.rows * m.cols) as u64).unwrap_or(0);
        bytes(&self.token_embd)
            + self
                .layers
                .iter()
                .flat_map(|l| l.matrices())
                .map(|(_, m)| bytes(m))
                .sum::<u64>()
    }

    /// The distinct weight matrices of one layer and the tied head, by GGUF name (layers share
    /// shapes and types, so these are what the benchmark times kernel by kernel).
    pub fn matrices(&self) -> Vec<(String, &QMatrix)> {
        let mut v = vec![(names::TOKEN_EMBD.to_string(), &self.token_embd)];
        if let Some(l) = self.layers.first() {
            let b = Block::text(0);
            v.extend(l.matrices().into_iter().map(|(n, m)| (b.name(n), m)));
        }
        v
    }
}

/// Whether a pass's keys and values stay in its cache for later passes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keys {
    /// Kept: the cache holds them after the pass.
    Kept,
    /// Thrown away with the pass (a study's questions batched): each layer's live only while it
    /// runs, so the pass holds one layer's copy of the prefix instead of all of them (MedGemma
    /// 4B, four questions: 2 of 68 buffers of 6.3 MB; `examples/pool_memory.rs` peaks 0.41 GB
    /// lower, browser pool and native alike). Each layer's slot gets its buffers back.
    Discarded,
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
