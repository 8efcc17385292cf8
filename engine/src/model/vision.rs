//! SigLIP vision tower and the Gemma 3 multimodal projector (average pooling, RMSNorm, linear
//! projection to the decoder width).

use burn::tensor::{Device, Tensor, TensorData};

use super::ModelError;
use super::config::VisionConfig;
use super::load::Loader;
use super::nn::{attention, gelu_tanh, layer_norm, rms_norm};
use crate::gguf::RangeSource;
use crate::quant::ops::QMatrix;

/// One tower layer; fields follow the GGUF names `v.blk.N.*`.
#[derive(Debug, Clone)]
struct Layer {
    ln1: (Tensor<1>, Tensor<1>),
    attn_q: (QMatrix, Tensor<1>),
    attn_k: (QMatrix, Tensor<1>),
    attn_v: (QMatrix, Tensor<1>),
    attn_out: (QMatrix, Tensor<1>),
    ln2: (Tensor<1>, Tensor<1>),
    ffn_up: (QMatrix, Tensor<1>),
    ffn_down: (QMatrix, Tensor<1>),
}

/// The vision tower and projector.
#[derive(Debug, Clone)]
pub struct Vision {
    /// Hyper-parameters.
    pub cfg: VisionConfig,
    patch_embd: (QMatrix, Tensor<1>),
    position_embd: Tensor<2>,
    layers: Vec<Layer>,
    post_ln: (Tensor<1>, Tensor<1>),
    soft_emb_norm: Tensor<1>,
    input_projection: QMatrix,
    device: Device,
}

fn linear(x: Tensor<2>, (w, b): &(QMatrix, Tensor<1>)) -> Tensor<2> {
    w.matmul(x) + b.clone().unsqueeze::<2>()
}

impl Vision {
    /// The weight matrices of the patch embedding, one layer and the projector, by GGUF name.
    pub fn matrices(&self) -> Vec<(&'static str, &QMatrix)> {
        let mut v = vec![
            ("v.patch_embd", &self.patch_embd.0),
            ("mm.input_projection", &self.input_projection),
        ];
        if let Some(l) = self.layers.first() {
            v.extend([
                ("v.blk.0.attn_q", &l.attn_q.0),
                ("v.blk.0.attn_k", &l.attn_k.0),
                ("v.blk.0.attn_v", &l.attn_v.0),
                ("v.blk.0.attn_out", &l.attn_out.0),
                ("v.blk.0.ffn_up", &l.ffn_up.0),
                ("v.blk.0.ffn_down", &l.ffn_down.0),
            ]);
        }
        v
    }

    /// Loads the mmproj weights; `text_hidden` is the decoder width the projector must reach.
    pub async fn load<S: RangeSource>(
        l: &mut Loader<'_, S>,
        cfg: VisionConfig,
        text_hidden: usize,
    ) -> Result<Vision, ModelError> {
        let (h, f) = (cfg.hidden, cfg.ffn);
        let proj = l.dims("mm.input_projection.weight")?;
        if proj.first().copied() != Some(text_hidden as u64) {
            return Err(ModelError::Mismatch {
                mmproj: proj.first().copied().unwrap_or(0) as usize,
                text: text_hidden,
            });
        }
        let patch_len = 3 * cfg.patch_size * cfg.patch_size;
        let n_patches = cfg.patches_per_side() * cfg.patches_per_side();
        let p = cfg.patch_size as u64;
        let patch_embd = (
            l.qmatrix_with_dims("v.patch_embd.weight", &[p, p, 3, h as u64], h, patch_len)
                .await?,
            l.vector("v.patch_embd.bias", h).await?,
        );
        let position_embd = l.dense("v.position_embd.weight", [n_patches, h]).await?;
        let mut layers = Vec::with_capacity(cfg.layers);
        for i in 0..cfg.layers {
            let n = |s: &str| format!("v.blk.{i}.{s}");
            let mut lin = async |s: &str,
                                 rows: usize,
                                 cols: usize|
                   -> Result<(QMatrix, Tensor<1>), ModelError> {
                Ok((
                    l.qmatrix(&n(&format!("{s}.weight")), rows, cols).await?,
                    l.vector(&n(&format!("{s}.bias")), rows).await?,
                ))
            };
            let attn_q = lin("attn_q", h, h).await?;
            let attn_k = lin("attn_k", h, h).await?;
            let attn_v = lin("attn_v", h, h).await?;
            let attn_out = lin("attn_out", h, h).await?;
            let ffn_up = lin("ffn_up", f, h).await?;
            let ffn_down = lin("ffn_down", h, f).await?;
            layers.push(Layer {
                ln1: (
                    l.vector(&n("ln1.weight"), h).await?,
                    l.vector(&n("ln1.bias"), h).await?,
                ),
                attn_q,
                attn_k,
                attn_v,
                attn_out,
                ln2: (
                    l.vector(&n("ln2.weight"), h).await?,
                    l.vector(&n("ln2.bias"), h).await?,
                ),
                ffn_up,
                ffn_down,
            });
        }
        Ok(Vision {
            post_ln: (
                l.vector("v.post_ln.weight", h).await?,
                l.vector("v.post_ln.bias", h).await?,
            ),
            soft_emb_norm: l.vector("mm.soft_emb_norm.weight", h).await?,
            input_projection: l
                .qmatrix_transposed("mm.input_projection.weight", text_hidden, h)
                .await?,
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
        let c = &self.cfg;
        let size = c.image_size;
        if pixels.len() != 3 * size * size {
            return Err(ModelError::Prompt(format!(
                "image has {} values, the vision tower takes 3×{size}×{size}",
                pixels.len()
            )));
        }
        let side = c.patches_per_side();
        let n = side * side;
        let patch_len = 3 * c.patch_size * c.patch_size;
        let patches = Tensor::<2>::from_data(
            TensorData::new(self.patches(pixels), [n, patch_len]),
            &self.device,
        );
        let mut x = linear(patches, &self.patch_embd) + self.position_embd.clone();
        let (h, heads) = (c.hidden, c.heads);
        let hd = h / heads;
        for layer in &self.layers {
            let xn = layer_norm(x.clone(), &layer.ln1.0, &layer.ln1.1, c.eps);
            let split = |m: &(QMatrix, Tensor<1>)| {
                linear(xn.clone(), m)
                    .reshape([n, heads, hd])
                    .swap_dims(0, 1)
            };
            let a = attention(
                split(&layer.attn_q),
                split(&layer.attn_k),
                split(&layer.attn_v),
                None,
                1,
                1.0 / (hd as f32).sqrt(),
            );
            x = x + linear(a.swap_dims(0, 1).reshape([n, h]), &layer.attn_out);
            let xn = layer_norm(x.clone(), &layer.ln2.0, &layer.ln2.1, c.eps);
            x = x + linear(gelu_tanh(linear(xn, &layer.ffn_up)), &layer.ffn_down);
        }
        let x = layer_norm(x, &self.post_ln.0, &self.post_ln.1, c.eps);
        // 4×4 average pooling of the patch grid: [side, side, h] → [side/4, side/4, h], row-major.
        let (k, t) = (c.pool, side / c.pool);
        let pooled = x
            .reshape([t, k, t, k, h])
            .mean_dim(3)
            .mean_dim(1)
            .reshape([t * t, h]);
        let normed = rms_norm(pooled, &self.soft_emb_norm, c.eps);
        Ok(self.input_projection.matmul(normed))
    }
}
