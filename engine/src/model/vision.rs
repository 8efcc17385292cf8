//! The SigLIP vision tower (HF `SiglipVisionTransformer` without the head): patch and position
//! embeddings, pre-norm transformer layers with biased projections, a final LayerNorm; then the
//! Gemma 3 [`Projector`] to the decoder width.

use burn::tensor::{Device, Tensor, TensorData};

use super::ModelError;
use super::attention::attention;
use super::config::VisionConfig;
use super::load::Loader;
use super::names::{self, Block, v_blk};
use super::nn::{gelu_tanh, layer_norm};
use super::projector::Projector;
use super::trace::{self, NoTrace, Tap, Tracer};
use crate::gguf::RangeSource;
use crate::quant::QMatrix;

/// LayerNorm with weight and bias (`<name>.weight`, `<name>.bias`).
#[derive(Debug, Clone)]
struct LayerNorm {
    weight: Tensor<1>,
    bias: Tensor<1>,
    eps: f32,
}

impl LayerNorm {
    async fn load<S: RangeSource>(
        l: &mut Loader<'_, S>,
        name: &str,
        width: usize,
        eps: f32,
    ) -> Result<LayerNorm, ModelError> {
        Ok(LayerNorm {
            weight: l.vector(&names::weight(name), width).await?,
            bias: l.vector(&names::bias(name), width).await?,
            eps,
        })
    }

    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        layer_norm(x, &self.weight, &self.bias, self.eps)
    }
}

/// A biased linear map `x·Wᵀ + b` (`<name>.weight` `[rows, cols]`, `<name>.bias` `[rows]`).
#[derive(Debug, Clone)]
struct Linear {
    weight: QMatrix,
    bias: Tensor<1>,
}

impl Linear {
    /// `weight` with the bias `<name>.bias` of its `rows`.
    async fn with_bias<S: RangeSource>(
        l: &mut Loader<'_, S>,
        name: &str,
        weight: QMatrix,
    ) -> Result<Linear, ModelError> {
        let bias = l.vector(&names::bias(name), weight.rows).await?;
        Ok(Linear { weight, bias })
    }

    async fn load<S: RangeSource>(
        l: &mut Loader<'_, S>,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Linear, ModelError> {
        let weight = l.qmatrix(&names::weight(name), rows, cols).await?;
        Linear::with_bias(l, name, weight).await
    }

    /// `[n, cols]` → `[n, rows]`.
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.weight.matmul(x) + self.bias.clone().unsqueeze::<2>()
    }
}

/// Patches the tower's MLP multiplies at once: a quarter of an 896-px image's 4,096. Whole, the
/// up product of MedGemma 4B's tower (70.5 MB) and its GELU would take two browser pool pages
/// of a size nothing after the image fits; a quarter (17.6 MB) takes pages of the attention's
/// size.
const MLP_BLOCK_ROWS: usize = 1024;

/// One tower layer; fields follow the GGUF names `v.blk.N.*`, in forward order.
#[derive(Debug, Clone)]
struct Layer {
    ln1: LayerNorm,
    attn_q: Linear,
    attn_k: Linear,
    attn_v: Linear,
    attn_out: Linear,
    ln2: LayerNorm,
    ffn_up: Linear,
    ffn_down: Linear,
}

/// The vision tower and projector.
#[derive(Debug, Clone)]
pub struct Vision {
    /// Hyper-parameters.
    pub cfg: VisionConfig,
    patch_embd: Linear,
    position_embd: Tensor<2>,
    layers: Vec<Layer>,
    post_ln: LayerNorm,
    projector: Projector,
    device: Device,
}

impl Layer {
    async fn load<S: RangeSource>(
        l: &mut Loader<'_, S>,
        i: usize,
        c: &VisionConfig,
    ) -> Result<Layer, ModelError> {
        let b = Block::vision(i);
        let (h, f) = (c.hidden, c.ffn);
        let lin = |name: &str| b.name(name);
        let ln1 = LayerNorm::load(l, &lin(v_blk::LN1), h, c.eps).await?;
        // The four h×h projections (2.65 MB each in MedGemma 4B's F16) share one buffer where
        // they can (`Loader::qmatrices_shared`). They stay four products: one joined q, k, v
        // product makes a page three activations wide that outlives the encode in the browser's
        // pool, for no time saved (bench/results/ci-vm-2core-shared-attention-weights.json).
        let attn = [v_blk::ATTN_Q, v_blk::ATTN_K, v_blk::ATTN_V, v_blk::ATTN_OUT].map(lin);
        let w = attn.clone().map(|n| names::weight(&n));
        let one = |i: usize| [(w[i].as_str(), h)];
        let (pq, pk, pv, po) = (one(0), one(1), one(2), one(3));
        let parts: [(&[(&str, usize)], usize); 4] = [(&pq, h), (&pk, h), (&pv, h), (&po, h)];
        let mut linears = Vec::with_capacity(4);
        match l.qmatrices_shared(&parts).await? {
            Some(shared) => {
                for (name, w) in attn.iter().zip(shared) {
                    linears.push(Linear::with_bias(l, name, w).await?);
                }
            }
            None => {
                for name in &attn {
                    linears.push(Linear::load(l, name, h, h).await?);
                }
            }
        }
        let [attn_q, attn_k, attn_v, attn_out]: [Linear; 4] = linears
            .try_into()
            .unwrap_or_else(|_| unreachable!("four projections"));
        Ok(Layer {
            ln1,
            attn_q,
            attn_k,
            attn_v,
            attn_out,
            ln2: LayerNorm::load(l, &lin(v_blk::LN2), h, c.eps).await?,
            ffn_up: Linear::load(l, &lin(v_blk::FFN_UP), f, h).await?,
            ffn_down: Linear::load(l, &lin(v_blk::FFN_DOWN), h, f).await?,
        })
    }

    /// Pre-norm attention (all patches see all patches), then the gelu-tanh MLP.
    ///
    /// # Shapes
    /// `x`: `[patches, hidden]` → `[patches, hidden]`.
    fn forward(&self, x: Tensor<2>, heads: usize) -> Tensor<2> {
        let [n, h] = x.dims();
        let hd = h / heads;
        let xn = self.ln1.forward(x.clone());
        let split = |m: &Linear| {
            m.forward(xn.clone())
                .reshape([n, heads, hd])
                .swap_dims(0, 1)
        };
        let scale = 1.0 / (hd as f32).sqrt();
        let a = attention(
            split(&self.attn_q),
            split(&self.attn_k),
            split(&self.attn_v),
            None,
            1,
            scale,
        );
        let x = x + self.attn_out.forward(a.swap_dims(0, 1).reshape([n, h]));
        let xn = self.ln2.forward(x.clone());
        x + crate::kernels::buffers::map_row_blocks(xn, MLP_BLOCK_ROWS, |xn| {
            self.ffn_down.forward(gelu_tanh(self.ffn_up.forward(xn)))
        })
    }

    /// The layer's weight matrices by name, in forward order.
    fn matrices(&self) -> [(&'static str, &QMatrix); 6] {
        [
            (v_blk::ATTN_Q, &self.attn_q.weight),
            (v_blk::ATTN_K, &self.attn_k.weight),
            (v_blk::ATTN_V, &self.attn_v.weight),
            (v_blk::ATTN_OUT, &self.attn_out.weight),
            (v_blk::FFN_UP, &self.ffn_up.weight),
            (v_blk::FFN_DOWN, &self.ffn_down.weight),
        ]
    }
}

impl Vision {
    /// The weight matrices of the patch embedding, one layer and the projector, by GGUF name.
    pub fn matrices(&self) -> Vec<(String, &QMatrix)> {
        let mut v = vec![
            (names::V_PATCH_EMBD.to_string(), &self.patch_embd.weight),
            (
                names::MM_INPUT_PROJECTION.to_string(),
                self.projector.input_projection(),
            ),
        ];
        if let Some(l) = self.layers.first() {
            let b = Block::vision(0);
            v.extend(l.matrices().map(|(n, m)| (b.name(n), m)));
        }
        v
    }

    /// Loads the mmproj weights; `text_hidden` is the decoder width the projector must reach.
    pub async fn load<S: RangeSource>(
        l: &mut Loader<'_, S>,
        cfg: VisionConfig,
        text_hidden: usize,
    ) -> Result<Vision, ModelError> {
        Projector::check_width(l, text_hidden)?;
        let h = cfg.hidden;
        let patch_len = 3 * cfg.patch_size * cfg.patch_size;
        let n_patches = cfg.patches_per_side() * cfg.patches_per_side();
        let p = cfg.patch_size as u64;
        // The conv kernel [kw, kh, c_in, c_out] read as c_out rows of kw·kh·c_in.
        let patch_embd = Linear {
            weight: l
                .qmatrix_with_dims(
                    &names::weight(names::V_PATCH_EMBD),
                    &[p, p, 3, h as u64],
                    h,
                    patch_len,
                )
                .await?,
            bias: l.vector(&names::bias(names::V_PATCH_EMBD), h).await?,
        };
        let position_embd = l
            .dense(&names::weight(names::V_POSITION_EMBD), [n_patches, h])
            .await?;
        let mut layers = Vec::with_capacity(cfg.layers);
        for i in 0..cfg.layers {
            layers.push(Layer::load(l, i, &cfg).await?);
        }
        Ok(Vision {
            post_ln: LayerNorm::load(l, names::V_POST_LN, h, cfg.eps).await?,
            projector: Projector::load(l, &cfg, text_hidden).await?,
            device: l.device().clone(),
            cfg,
            patch_embd,
            position_embd,
            layers,
        })
    }

    /// Cuts a CHW image into patch rows ordered (channel, y, x), the order of the flattened
    /// patch-embedding kernel, patches row-major.
    fn patches(&self, pixels: &[f32]) -> Vec<f32> {
        let (size, p) = (self.cfg.image_size, self.cfg.patch_size);
        let side = size / p;
        let mut out = Vec::with_capacity(pixels.len());
        for py in 0..side {
            for px in 0..side {
                for c in 0..3 {
                    for y in 0..p {
                        let row = c * size * size + (py * p + y) * size + px * p;
                        out.extend_from_slice(&pixels[row..row + p]);
                    }
                }
            }
        }
        out
    }

    /// Encodes one preprocessed image (`[3, size, size]` CHW in [-1, 1]) to projected features
    /// `[tokens_per_image, text_hidden]`.
    pub fn encode(&self, pixels: &[f32]) -> Result<Tensor<2>, ModelError> {
        self.encode_traced(pixels, &mut NoTrace)
    }

    /// [`Vision::encode`], handing `tracer` every stage named in [`super::trace`]
    /// (`v.inp_embd`; per layer `v.l_out`; `v.post_ln`; `mm.out`).
    pub fn encode_traced(
        &self,
        pixels: &[f32],
        tracer: &mut dyn Tracer,
    ) -> Result<Tensor<2>, ModelError> {
        let c = &self.cfg;
        let size = c.image_size;
        if pixels.len() != 3 * size * size {
            return Err(ModelError::Prompt(format!(
                "image has {} values, the vision tower takes 3×{size}×{size}",
                pixels.len()
            )));
        }
        let side = c.patches_per_side();
        let patch_len = 3 * c.patch_size * c.patch_size;
        crate::launches::note_upload();
        let patches = Tensor::<2>::from_data(
            TensorData::new(self.patches(pixels), [side * side, patch_len]),
            &self.device,
        );
        let mut x = self.patch_embd.forward(patches) + self.position_embd.clone();
        tracer.tap(Tap::at(trace::V_INP_EMBD), &x);
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(x, c.heads);
            tracer.tap(Tap::layer(trace::V_L_OUT, i), &x);
        }
        let x = self.post_ln.forward(x);
        tracer.tap(Tap::at(trace::V_POST_LN), &x);
        let out = self.projector.forward(x, side);
        tracer.tap(Tap::at(trace::MM_OUT), &out);
        Ok(out)
    }
}
