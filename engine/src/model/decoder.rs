//! The Gemma 3 decoder: scaled token embeddings (image embeddings injected unscaled),
//! 5 sliding-window layers for each global one, GQA with per-head q/k RMSNorm, NEOX RoPE with
//! per-layer bases, and the tied output head.

use std::ops::Range;

use burn::tensor::{Device, Int, Tensor, TensorData};

use super::ModelError;
use super::config::TextConfig;
use super::load::Loader;
use super::nn::{apply_rope, attention, gelu_tanh, rms_norm, rope_tables};
use crate::gguf::RangeSource;
use crate::quant::ops::QMatrix;
use crate::tokenizer::ids;

/// One decoder layer; fields follow the GGUF names `blk.N.*`.
#[derive(Debug, Clone)]
pub struct Layer {
    attn_norm: Tensor<1>,
    attn_q: QMatrix,
    attn_k: QMatrix,
    attn_v: QMatrix,
    attn_q_norm: Tensor<1>,
    attn_k_norm: Tensor<1>,
    attn_output: QMatrix,
    post_attention_norm: Tensor<1>,
    ffn_norm: Tensor<1>,
    ffn_gate: QMatrix,
    ffn_up: QMatrix,
    ffn_down: QMatrix,
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

/// Keys and values of every layer for the positions seen so far.
#[derive(Debug, Clone)]
pub struct KvCache {
    layers: Vec<Option<(Tensor<3>, Tensor<3>)>>,
    /// Positions already in the cache.
    pub len: usize,
    /// Absolute position ranges of image soft tokens (each attends bidirectionally within).
    image_spans: Vec<Range<usize>>,
}

impl KvCache {
    /// An empty cache for `layers` layers.
    pub fn new(layers: usize) -> KvCache {
        KvCache {
            layers: vec![None; layers],
            len: 0,
            image_spans: Vec::new(),
        }
    }

    /// Keeps the first `len` positions. The cut must not fall inside an image run: those
    /// positions attend to later image tokens, so their keys would be wrong without them.
    pub fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        for l in self.layers.iter_mut() {
            *l = if len == 0 {
                None
            } else {
                l.take().map(|(k, v)| {
                    let [h, _, d] = k.dims();
                    (k.slice([0..h, 0..len, 0..d]), v.slice([0..h, 0..len, 0..d]))
                })
            };
        }
        self.image_spans.retain(|s| s.end <= len);
        self.len = len;
    }
}

/// Additive attention mask for queries at `q0..q0+t` over keys `0..q0+t` (0 = attend, −∞ = not).
///
/// ref: transformers 5 `create_masks_for_vision_model`: global layers allow
/// `causal OR same-image`; sliding layers allow `(causal OR same-image) AND k > q − window`.
pub fn mask_values(q0: usize, t: usize, spans: &[Range<usize>], window: Option<usize>) -> Vec<f32> {
    let s = q0 + t;
    let span_of = |p: usize| spans.iter().position(|r| r.contains(&p));
    let mut m = vec![0f32; t * s];
    for qi in 0..t {
        let q = q0 + qi;
        let qs = span_of(q);
        for k in 0..s {
            let visible = k <= q || (qs.is_some() && qs == span_of(k));
            let in_window = window.is_none_or(|w| k + w > q);
            if !(visible && in_window) {
                m[qi * s + k] = f32::NEG_INFINITY;
            }
        }
    }
    m
}

impl Layer {
    async fn load<S: RangeSource>(
        l: &mut Loader<'_, S>,
        i: usize,
        c: &TextConfig,
    ) -> Result<Layer, ModelError> {
        let n = |s: &str| format!("blk.{i}.{s}");
        let (h, q_dim, kv_dim) = (c.hidden, c.heads * c.head_dim, c.kv_heads * c.head_dim);
        Ok(Layer {
            attn_norm: l.vector(&n("attn_norm.weight"), h).await?,
            attn_q: l.qmatrix(&n("attn_q.weight"), q_dim, h).await?,
            attn_k: l.qmatrix(&n("attn_k.weight"), kv_dim, h).await?,
            attn_v: l.qmatrix(&n("attn_v.weight"), kv_dim, h).await?,
            attn_q_norm: l.vector(&n("attn_q_norm.weight"), c.head_dim).await?,
            attn_k_norm: l.vector(&n("attn_k_norm.weight"), c.head_dim).await?,
            attn_output: l.qmatrix(&n("attn_output.weight"), h, q_dim).await?,
            post_attention_norm: l.vector(&n("post_attention_norm.weight"), h).await?,
            ffn_norm: l.vector(&n("ffn_norm.weight"), h).await?,
            ffn_gate: l.qmatrix(&n("ffn_gate.weight"), c.ffn, h).await?,
            ffn_up: l.qmatrix(&n("ffn_up.weight"), c.ffn, h).await?,
            ffn_down: l.qmatrix(&n("ffn_down.weight"), h, c.ffn).await?,
            post_ffw_norm: l.vector(&n("post_ffw_norm.weight"), h).await?,
        })
    }

    /// `segments` split the rows of `x` into runs that attend to the cached keys and to their
    /// own keys only, each with its mask (one segment: an ordinary continuation).
    ///
    /// # Shapes
    /// `x`: `[t, hidden]` → `[t, hidden]`; `cos`/`sin`: `[t, 1, head_dim/2]`; mask of segment
    /// `r`: `[r.len(), cached + r.len()]`.
    fn forward(
        &self,
        x: Tensor<2>,
        c: &TextConfig,
        rope: &(Tensor<3>, Tensor<3>),
        segments: &[(Range<usize>, Tensor<2>)],
        cache: &mut Option<(Tensor<3>, Tensor<3>)>,
    ) -> Tensor<2> {
        let [t, _] = x.dims();
        let xn = rms_norm(x.clone(), &self.attn_norm, c.eps);
        let heads = |m: &QMatrix, n: usize, norm: Option<&Tensor<1>>| {
            let y = m.matmul(xn.clone()).reshape([t, n, c.head_dim]);
            match norm {
                Some(w) => apply_rope(rms_norm(y, w, c.eps), &rope.0, &rope.1),
                None => y,
            }
        };
        let q = heads(&self.attn_q, c.heads, Some(&self.attn_q_norm)).swap_dims(0, 1);
        let k = heads(&self.attn_k, c.kv_heads, Some(&self.attn_k_norm)).swap_dims(0, 1);
        let v = heads(&self.attn_v, c.kv_heads, None).swap_dims(0, 1);
        let prior = cache.take();
        let q0 = prior.as_ref().map_or(0, |(pk, _)| pk.dims()[1]);
        let (k, v) = match prior {
            Some((pk, pv)) => (Tensor::cat(vec![pk, k], 1), Tensor::cat(vec![pv, v], 1)),
            None => (k, v),
        };
        *cache = Some((k.clone(), v.clone()));
        let g = c.heads / c.kv_heads;
        let a = match segments {
            [(_, mask)] => attention(q, k, v, Some(mask.clone()), g, c.attn_scale),
            _ => {
                // Each segment attends to the cached keys and its own: no score is computed
                // for the pairs the mask would discard anyway.
                let (hq, hk, d) = (c.heads, c.kv_heads, c.head_dim);
                let own = |x: &Tensor<3>, r: &Range<usize>| {
                    let mine = x.clone().slice([0..hk, q0 + r.start..q0 + r.end, 0..d]);
                    match q0 {
                        0 => mine,
                        _ => Tensor::cat(vec![x.clone().slice([0..hk, 0..q0, 0..d]), mine], 1),
                    }
                };
                let parts = segments
                    .iter()
                    .map(|(r, mask)| {
                        let qs = q.clone().slice([0..hq, r.clone(), 0..d]);
                        attention(
                            qs,
                            own(&k, r),
                            own(&v, r),
                            Some(mask.clone()),
                            g,
                            c.attn_scale,
                        )
                    })
                    .collect();
                Tensor::cat(parts, 1)
            }
        };
        let a = a.swap_dims(0, 1).reshape([t, c.heads * c.head_dim]);
        let h = x + rms_norm(self.attn_output.matmul(a), &self.post_attention_norm, c.eps);
        let hn = rms_norm(h.clone(), &self.ffn_norm, c.eps);
        let mlp = gelu_tanh(self.ffn_gate.matmul(hn.clone())) * self.ffn_up.matmul(hn);
        h + rms_norm(self.ffn_down.matmul(mlp), &self.post_ffw_norm, c.eps)
    }
}

impl Decoder {
    /// Loads every decoder weight (streaming, tensor by tensor).
    pub async fn load<S: RangeSource>(
        l: &mut Loader<'_, S>,
        cfg: TextConfig,
    ) -> Result<Decoder, ModelError> {
        let token_embd = l
            .qmatrix("token_embd.weight", cfg.vocab, cfg.hidden)
            .await?;
        if l.info("output.weight", &[cfg.hidden as u64, cfg.vocab as u64])
            .is_ok()
        {
            return Err(ModelError::Unsupported(
                "a separate output.weight (Gemma 3 ties the head to token_embd)".into(),
            ));
        }
        let mut layers = Vec::with_capacity(cfg.layers);
        for i in 0..cfg.layers {
            layers.push(Layer::load(l, i, &cfg).await?);
        }
        let output_norm = l.vector("output_norm.weight", cfg.hidden).await?;
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
        let q0 = cache.len;
        let (x, spans) = self.embed(input, images)?;
        cache
            .image_spans
            .extend(spans.iter().map(|s| s.start + q0..s.end + q0));
        Ok(self.layers_after(x, cache))
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
            x = x.slice_assign([span.clone(), 0..h], feats.clone());
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
        self.layers_after(x, cache)
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
        let mut scratch = cache.clone();
        let h = self.layers(Tensor::cat(xs, 0), &positions, &mut scratch, &segments);
        let mut end = 0;
        let last = lens
            .iter()
            .map(|&n| {
                end += n;
                h.clone().slice([end - 1..end, 0..self.cfg.hidden])
            })
            .collect();
        Ok(Tensor::cat(last, 0))
    }

    /// The decoder layers and final norm on embedded inputs `x [t, hidden]` that follow what
    /// `cache` holds (whose image spans already include `x`'s).
    fn layers_after(&self, x: Tensor<2>, cache: &mut KvCache) -> Tensor<2> {
        let (q0, t) = (cache.len, x.dims()[0]);
        let positions: Vec<usize> = (q0..q0 + t).collect();
        let segments = [(0..t, cache.image_spans.clone())];
        self.layers(x, &positions, cache, &segments)
    }

    /// The decoder layers and final norm on `x [t, hidden]` at RoPE `positions`; appends `x`'s
    /// keys and values. Each segment (rows of `x`, absolute image spans it sees) continues the
    /// cache on its own, masked as [`mask_values`] masks a lone continuation.
    fn layers(
        &self,
        mut x: Tensor<2>,
        positions: &[usize],
        cache: &mut KvCache,
        segments: &[(Range<usize>, Vec<Range<usize>>)],
    ) -> Tensor<2> {
        let c = &self.cfg;
        let (q0, t) = (cache.len, x.dims()[0]);
        let rope_global = rope_tables(
            positions,
            c.head_dim,
            c.rope_base,
            c.rope_scale,
            &self.device,
        );
        let rope_local = rope_tables(positions, c.head_dim, c.rope_base_swa, 1.0, &self.device);
        let masks = |w: Option<usize>| -> Vec<(Range<usize>, Tensor<2>)> {
            segments
                .iter()
                .map(|(r, spans)| {
                    let n = r.len();
                    let m = mask_values(q0, n, spans, w);
                    let m = Tensor::<2>::from_data(TensorData::new(m, [n, q0 + n]), &self.device);
                    (r.clone(), m)
                })
                .collect()
        };
        let mask_global = masks(None);
        let mask_local = (c.sliding_window > 0).then(|| masks(Some(c.sliding_window)));
        for (i, layer) in self.layers.iter().enumerate() {
            let global = c.is_global(i);
            let (rope, m) = if global {
                (&rope_global, &mask_global)
            } else {
                (&rope_local, mask_local.as_ref().unwrap_or(&mask_global))
            };
            x = layer.forward(x, c, rope, m, &mut cache.layers[i]);
        }
        cache.len += t;
        rms_norm(x, &self.output_norm, c.eps)
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
        self.logits(last)
            .argmax(1)
            .reshape([1])
            .cast(burn::tensor::IntDType::U32)
    }

    /// Logits of chosen tokens only, computing just those head rows: `[t, hidden] → [t, ids]`.
    pub fn logits_for(&self, hidden: Tensor<2>, ids: &[u32]) -> Tensor<2> {
        let rows = self.token_embd.gather(ids);
        self.softcap(hidden.matmul(rows.transpose()))
    }

    /// Device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The distinct weight matrices of one layer and the tied head, by GGUF name (layers share
    /// shapes and types, so these are what the benchmark times kernel by kernel).
    pub fn matrices(&self) -> Vec<(&'static str, &QMatrix)> {
        let mut v = vec![("token_embd", &self.token_embd)];
        if let Some(l) = self.layers.first() {
            v.extend([
                ("blk.0.attn_q", &l.attn_q),
                ("blk.0.attn_k", &l.attn_k),
                ("blk.0.attn_v", &l.attn_v),
                ("blk.0.attn_output", &l.attn_output),
                ("blk.0.ffn_gate", &l.ffn_gate),
                ("blk.0.ffn_up", &l.ffn_up),
                ("blk.0.ffn_down", &l.ffn_down),
            ]);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::mask_values;

    fn allowed(m: &[f32], s: usize, q: usize, k: usize) -> bool {
        m[q * s + k] == 0.0
    }

    #[test]
    fn masks_are_causal_windowed_and_bidirectional_within_images() {
        let spans = vec![std::ops::Range { start: 2, end: 5 }];
        let g = mask_values(0, 7, &spans, None);
        assert!(allowed(&g, 7, 1, 0) && !allowed(&g, 7, 1, 2));
        // Image tokens 2..5 see each other both ways, text after sees all before it.
        assert!(allowed(&g, 7, 2, 4) && allowed(&g, 7, 4, 2));
        assert!(!allowed(&g, 7, 1, 3) && allowed(&g, 7, 6, 4));
        let w = mask_values(0, 7, &spans, Some(2));
        // Window 2: q sees k only if k > q - 2.
        assert!(allowed(&w, 7, 6, 5) && !allowed(&w, 7, 6, 4));
        // Within the image the window still applies backwards, not forwards.
        assert!(allowed(&w, 7, 2, 4) && !allowed(&w, 7, 4, 2));
        // A continuation with a cache: queries 5..7 over keys 0..7.
        let c = mask_values(5, 2, &spans, None);
        assert_eq!(c.len(), 14);
        assert!(allowed(&c, 7, 0, 5) && !allowed(&c, 7, 0, 6));
    }
}
