//! The Gemma 3 decoder: scaled token embeddings (image embeddings injected unscaled),
//! 5 sliding-window layers for each global one, GQA with per-head q/k RMSNorm, NEOX RoPE with
//! per-layer bases, and the tied output head.

use std::ops::Range;

use burn::tensor::{Device, Int, Tensor, TensorData};

use super::ModelError;
use super::attention::{Mask, lookahead, mask_values, segment_key_positions};
use super::config::TextConfig;
use super::kv_cache::KvCache;
use super::load::Loader;
use super::names::{self, Block};
use super::nn::{self, rms_norm};
use super::rope::Rope;
use super::trace::{self, NoTrace, Tap, Tracer};
use crate::gguf::RangeSource;
use crate::kernels::forms::{self, Form};
use crate::quant::QMatrix;
use crate::tokenizer::ids;

use super::layer::{Layer, LayerInputs};

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
            x = crate::kernels::buffers::write_rows(x, span.start, feats.clone());
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
        Ok(self.branch_pass(branches, cache, Keys::Discarded)?.0)
    }

    /// [`Decoder::forward_branches`] with each branch's keys kept: also returns each branch's
    /// own cache (the prefix, then its positions), from which it decodes as if it had been
    /// prefilled alone.
    pub fn forward_branches_kept(
        &self,
        branches: &[(&[u32], &[Tensor<2>])],
        cache: &KvCache,
    ) -> Result<(Tensor<2>, Vec<KvCache>), ModelError> {
        self.branch_pass(branches, cache, Keys::Branched)
    }

    /// One pass of several branches after `cache`, which it leaves as it was: their last hidden
    /// states and, when the keys are [`Keys::Branched`], each branch's own cache.
    fn branch_pass(
        &self,
        branches: &[(&[u32], &[Tensor<2>])],
        cache: &KvCache,
        keys: Keys,
    ) -> Result<(Tensor<2>, Vec<KvCache>), ModelError> {
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
        let mut own: Vec<KvCache> = match keys {
            Keys::Branched => segments
                .iter()
                .map(|(r, spans)| KvCache::branch_of(cache, q0 + r.len(), spans.clone()))
                .collect(),
            _ => Vec::new(),
        };
        let h = self.layers(
            crate::kernels::buffers::cat_rows(xs),
            &positions,
            &mut cache.clone(),
            &segments,
            (keys, &mut own),
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
        Ok((crate::kernels::buffers::cat_rows(last), own))
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
        self.layers(
            x,
            &positions,
            cache,
            &segments,
            (Keys::Kept, &mut []),
            tracer,
        )
    }

    /// The decoder layers and final norm on `x [t, hidden]` at RoPE `positions`; appends `x`'s
    /// keys and values to `cache` when they are [`Keys::Kept`], or copies each segment's into its
    /// own cache of `branches` when [`Keys::Branched`]. Each segment (rows of `x`, absolute image
    /// spans it sees) continues the cache on its own, masked as [`mask_values`] masks a lone
    /// continuation.
    fn layers(
        &self,
        mut x: Tensor<2>,
        positions: &[usize],
        cache: &mut KvCache,
        segments: &[(Range<usize>, Vec<Range<usize>>)],
        (keys, branches): (Keys, &mut [KvCache]),
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
            // A pass's keys not kept live for their layer only (each branch's copied out first):
            // the slot gets its prior buffers back, so the next layer's copy can take the page
            // this one frees.
            let prior = (keys != Keys::Kept).then(|| cache.layers[i].clone());
            (x, xn) = layer.forward(i, x, xn, next_norm, inputs, &mut cache.layers[i], tracer);
            for (own, (rows, _)) in branches.iter_mut().zip(segments) {
                let at = rows.start + q0..rows.end + q0;
                own.layers[i] = cache.layers[i].as_ref().map(|l| l.branch(q0, at));
            }
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
        // burn's argmax reduces a single row in one invocation on the GPU, a large share of a
        // token's time at a 262k vocabulary: the fused one reads it with many workgroups.
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
    /// rows and columns falls back, without cooperative matrices (a browser's case), to a form
    /// far slower than native's (`bench/results/device/h200-browser-2026-11-27T2355/bvn-4b.json`);
    /// a sum is one of burn's reduction kernels.
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
    /// 4B: 2 of 68 buffers; `examples/pool_memory.rs` shows the lower peak). Each layer's slot
    /// gets its buffers back.
    Discarded,
    /// As [`Keys::Discarded`], but each layer's keys are first copied into each branch's own
    /// cache (the prefix, then the branch's positions): the branches' caches are all the pass
    /// keeps, never every branch's keys of every layer at once.
    Branched,
}
