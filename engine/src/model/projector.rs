//! The Gemma 3 multimodal projector: average pooling of the patch grid, RMSNorm, and a linear
//! projection to the decoder width (HF `Gemma3MultiModalProjector`).

use burn::tensor::Tensor;

use super::ModelError;
use super::config::VisionConfig;
use super::load::Loader;
use super::names;
use super::nn::rms_norm;
use crate::gguf::RangeSource;
use crate::quant::QMatrix;

/// The projector's weights (`mm.*`).
#[derive(Debug, Clone)]
pub struct Projector {
    soft_emb_norm: Tensor<1>,
    input_projection: QMatrix,
    /// Pooling kernel side (4).
    pool: usize,
    eps: f32,
}

impl Projector {
    /// Whether the projector reaches the decoder width `text_hidden`: checked from the index
    /// before any weight is read, so a wrong pair fails at once.
    pub fn check_width<S: RangeSource>(
        l: &Loader<'_, S>,
        text_hidden: usize,
    ) -> Result<(), ModelError> {
        let dims = l.dims(&names::weight(names::MM_INPUT_PROJECTION))?;
        if dims.first().copied() != Some(text_hidden as u64) {
            return Err(ModelError::Mismatch {
                mmproj: dims.first().copied().unwrap_or(0) as usize,
                text: text_hidden,
            });
        }
        Ok(())
    }

    /// Loads the projector (`text_hidden` as [`Projector::check_width`] checked it).
    pub async fn load<S: RangeSource>(
        l: &mut Loader<'_, S>,
        cfg: &VisionConfig,
        text_hidden: usize,
    ) -> Result<Projector, ModelError> {
        let proj = names::weight(names::MM_INPUT_PROJECTION);
        Ok(Projector {
            soft_emb_norm: l
                .vector(&names::weight(names::MM_SOFT_EMB_NORM), cfg.hidden)
                .await?,
            input_projection: l.qmatrix_transposed(&proj, text_hidden, cfg.hidden).await?,
            pool: cfg.pool,
            eps: cfg.eps,
        })
    }

    /// The projection matrix (for the benchmark's kernel list).
    pub fn input_projection(&self) -> &QMatrix {
        &self.input_projection
    }

    /// Pools, norms and projects the tower's output.
    ///
    /// # Shapes
    /// `x`: `[side², vision hidden]` (patches row-major) → `[(side/pool)², text hidden]`.
    pub fn forward(&self, x: Tensor<2>, side: usize) -> Tensor<2> {
        let h = x.dims()[1];
        // pool×pool average pooling of the patch grid: [side, side, h] → [side/pool, side/pool, h].
        // ref: transformers Gemma3MultiModalProjector (AvgPool2d, kernel = stride = 4).
        let (k, t) = (self.pool, side / self.pool);
        let pooled = x
            .reshape([t, k, t, k, h])
            .mean_dim(3)
            .mean_dim(1)
            .reshape([t * t, h]);
        let normed = rms_norm(pooled, &self.soft_emb_norm, self.eps);
        self.input_projection.matmul(normed)
    }
}
