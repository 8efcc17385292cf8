//! Hyper-parameters, read from GGUF metadata only (text `gemma3.*`, mmproj `clip.*`).
//! Keys a file may lack default the way llama.cpp defaults them; each default says where from.

use super::ModelError;
use crate::gguf::{Array, Gguf};

/// ref: llama.cpp src/llama-model.cpp, LLM_ARCH_GEMMA3: `hparams.set_swa_pattern(6)`.
pub const DEFAULT_SWA_PATTERN: usize = 6;
/// ref: llama.cpp src/llama-hparams.h `rope_freq_base_train_swa` default for Gemma 3.
pub const DEFAULT_ROPE_BASE_SWA: f32 = 10_000.0;
/// ref: llama.cpp tools/mtmd/clip.cpp, PROJECTOR_TYPE_GEMMA3: 4×4 average pooling by default.
pub const DEFAULT_PROJ_SCALE_FACTOR: usize = 4;

/// The Gemma 3 decoder.
#[derive(Debug, Clone, PartialEq)]
pub struct TextConfig {
    /// Residual width (`embedding_length`).
    pub hidden: usize,
    /// Decoder layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (GQA).
    pub kv_heads: usize,
    /// Width of one head (`key_length`, equal to `value_length`).
    pub head_dim: usize,
    /// MLP width.
    pub ffn: usize,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// RoPE base of global layers.
    pub rope_base: f32,
    /// RoPE base of sliding-window layers.
    pub rope_base_swa: f32,
    /// Linear RoPE scaling factor of global layers (positions ÷ factor); 1 when unscaled.
    pub rope_scale: f32,
    /// Sliding window of local layers (keys with `q − k ≥ window` are masked); 0 = none.
    pub sliding_window: usize,
    /// Every `swa_pattern`-th layer is global.
    pub swa_pattern: usize,
    /// Attention scale (1/√head_dim for every Gemma 3 but 27B).
    pub attn_scale: f32,
    /// Final logit soft-capping, if the file sets it.
    pub final_softcap: Option<f32>,
    /// Rows of the token embedding (= tied output head).
    pub vocab: usize,
}

fn gguf_err(e: crate::gguf::GgufError) -> ModelError {
    ModelError::Gguf(e)
}

impl TextConfig {
    /// Reads the decoder configuration of a `gemma3` text GGUF.
    pub fn from_gguf(g: &Gguf) -> Result<TextConfig, ModelError> {
        let arch = g.architecture().map_err(gguf_err)?;
        if arch != "gemma3" {
            return Err(ModelError::WrongArchitecture {
                what: "text model",
                expected: "gemma3",
                found: arch.to_string(),
            });
        }
        let k = |s: &str| format!("gemma3.{s}");
        let u = |s: &str| g.u64(&k(s)).map(|v| v as usize).map_err(gguf_err);
        let hidden = u("embedding_length")?;
        let heads = u("attention.head_count")?;
        let head_dim = match g.u64_opt(&k("attention.key_length")).map_err(gguf_err)? {
            Some(v) => v as usize,
            None => hidden / heads.max(1),
        };
        let rope_scale = match g.str_opt(&k("rope.scaling.type")).map_err(gguf_err)? {
            Some("linear") => g.f64(&k("rope.scaling.factor")).map_err(gguf_err)? as f32,
            Some("none") | None => 1.0,
            Some(other) => {
                return Err(ModelError::Unsupported(format!(
                    "RoPE scaling {other:?} (only linear is used by Gemma 3)"
                )));
            }
        };
        let swa_pattern = match g.get(&k("attention.sliding_window_pattern")) {
            None => DEFAULT_SWA_PATTERN,
            // Newer llama.cpp writes one bool per layer (true = sliding).
            Some(crate::gguf::Value::Array(Array::Bool(v))) => v
                .iter()
                .position(|s| !s)
                .map_or(DEFAULT_SWA_PATTERN, |i| i + 1),
            Some(_) => u("attention.sliding_window_pattern")?,
        };
        let vocab = g
            .require_tensor("token_embd.weight")
            .map_err(gguf_err)?
            .n_rows() as usize;
        let cfg = TextConfig {
            hidden,
            layers: u("block_count")?,
            heads,
            kv_heads: match g.u64_opt(&k("attention.head_count_kv")).map_err(gguf_err)? {
                Some(v) => v as usize,
                None => heads,
            },
            head_dim,
            ffn: u("feed_forward_length")?,
            eps: g
                .f64_opt(&k("attention.layer_norm_rms_epsilon"))
                .map_err(gguf_err)?
                .unwrap_or(1e-6) as f32,
            rope_base: g
                .f64_opt(&k("rope.freq_base"))
                .map_err(gguf_err)?
                .unwrap_or(10_000.0) as f32,
            rope_base_swa: g
                .f64_opt(&k("rope.freq_base_swa"))
                .map_err(gguf_err)?
                .map_or(DEFAULT_ROPE_BASE_SWA, |v| v as f32),
            rope_scale,
            sliding_window: g
                .u64_opt(&k("attention.sliding_window"))
                .map_err(gguf_err)?
                .unwrap_or(0) as usize,
            swa_pattern,
            // ref: llama.cpp gemma3 graph: f_attention_scale = 1/sqrt(n_embd_head_k) (27B aside).
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
            final_softcap: g
                .f64_opt(&k("final_logit_softcapping"))
                .map_err(gguf_err)?
                .map(|v| v as f32),
            vocab,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), ModelError> {
        let bad = |why: String| Err(ModelError::Unsupported(why));
        if self.heads == 0 || self.kv_heads == 0 || !self.heads.is_multiple_of(self.kv_heads) {
            return bad(format!(
                "{} query heads cannot share {} KV heads",
                self.heads, self.kv_heads
            ));
        }
        if !self.head_dim.is_multiple_of(2) || self.head_dim == 0 {
            return bad(format!(
                "head width {} must be even for RoPE",
                self.head_dim
            ));
        }
        if self.swa_pattern == 0 || self.layers == 0 || self.hidden == 0 {
            return bad("empty model dimensions".into());
        }
        Ok(())
    }

    /// Whether layer `i` attends globally (every `swa_pattern`-th layer; the rest slide).
    pub fn is_global(&self, i: usize) -> bool {
        self.sliding_window == 0 || (i + 1).is_multiple_of(self.swa_pattern)
    }
}

/// The SigLIP vision tower and the Gemma 3 projector of an mmproj GGUF.
#[derive(Debug, Clone, PartialEq)]
pub struct VisionConfig {
    /// Input side in pixels (896).
    pub image_size: usize,
    /// Patch side in pixels (14).
    pub patch_size: usize,
    /// Tower width (1152).
    pub hidden: usize,
    /// Tower MLP width (4304).
    pub ffn: usize,
    /// Tower layers (27).
    pub layers: usize,
    /// Tower heads (16).
    pub heads: usize,
    /// LayerNorm epsilon (also the projector RMSNorm's).
    pub eps: f32,
    /// Pooling kernel (4): 64×64 patches become 16×16 tokens.
    pub pool: usize,
    /// Normalisation mean per channel.
    pub mean: [f32; 3],
    /// Normalisation std per channel.
    pub std: [f32; 3],
}

impl VisionConfig {
    /// Reads the vision configuration of a `clip` mmproj GGUF with the `gemma3` projector.
    pub fn from_gguf(g: &Gguf) -> Result<VisionConfig, ModelError> {
        let arch = g.architecture().map_err(gguf_err)?;
        if arch != "clip" {
            return Err(ModelError::WrongArchitecture {
                what: "mmproj (vision) file",
                expected: "clip",
                found: arch.to_string(),
            });
        }
        let proj = g
            .str_opt("clip.projector_type")
            .map_err(gguf_err)?
            .unwrap_or("");
        if proj != "gemma3" {
            return Err(ModelError::WrongArchitecture {
                what: "mmproj projector",
                expected: "gemma3",
                found: proj.to_string(),
            });
        }
        let u = |s: &str| {
            g.u64(&format!("clip.vision.{s}"))
                .map(|v| v as usize)
                .map_err(gguf_err)
        };
        let triple = |key: &str| -> Result<[f32; 3], ModelError> {
            match g.get(key) {
                None => Ok([0.5; 3]),
                Some(crate::gguf::Value::Array(Array::F32(v))) if v.len() == 3 => {
                    Ok([v[0], v[1], v[2]])
                }
                Some(v) => Err(ModelError::Unsupported(format!("{key} = {v:?}"))),
            }
        };
        let cfg = VisionConfig {
            image_size: u("image_size")?,
            patch_size: u("patch_size")?,
            hidden: u("embedding_length")?,
            ffn: u("feed_forward_length")?,
            layers: u("block_count")?,
            heads: u("attention.head_count")?,
            eps: g
                .f64_opt("clip.vision.attention.layer_norm_epsilon")
                .map_err(gguf_err)?
                .unwrap_or(1e-6) as f32,
            pool: g
                .u64_opt("clip.vision.projector.scale_factor")
                .map_err(gguf_err)?
                .map_or(DEFAULT_PROJ_SCALE_FACTOR, |v| v as usize),
            mean: triple("clip.vision.image_mean")?,
            std: triple("clip.vision.image_std")?,
        };
        let side = cfg.patches_per_side();
        if cfg.patch_size == 0
            || !cfg.image_size.is_multiple_of(cfg.patch_size)
            || cfg.pool == 0
            || !side.is_multiple_of(cfg.pool)
        {
            return Err(ModelError::Unsupported(format!(
                "image {} / patch {} / pooling {} do not tile",
                cfg.image_size, cfg.patch_size, cfg.pool
            )));
        }
        if cfg.heads == 0 || !cfg.hidden.is_multiple_of(cfg.heads) {
            return Err(ModelError::Unsupported(format!(
                "{} heads do not divide width {}",
                cfg.heads, cfg.hidden
            )));
        }
        Ok(cfg)
    }

    /// Patches per image side (64).
    pub fn patches_per_side(&self) -> usize {
        self.image_size / self.patch_size.max(1)
    }

    /// Image tokens per image after pooling (256).
    pub fn tokens_per_image(&self) -> usize {
        let s = self.patches_per_side() / self.pool.max(1);
        s * s
    }
}
