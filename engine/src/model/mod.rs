//! MedGemma = `Gemma3ForConditionalGeneration`: SigLIP vision tower → projector → Gemma 3
//! decoder, on any burn device, with weights kept in their GGUF block formats.
//!
//! What llama.cpp's converter baked into the weights (and this code therefore does not redo):
//! - every Gemma `*norm.weight` (decoder norms, q/k norms, `mm.soft_emb_norm`) already holds
//!   `1 + w` (HF multiplies by `1 + w` at run time);
//! - `mm.input_projection` is forced to F16 and kept in HF's `[vision, text]` (in × out) order;
//!   the loader transposes it to `[text, vision]` rows;
//! - the token embedding doubles as the output head (tied), with the image soft token absent
//!   from or unused in the vocabulary (its embeddings are injected).

pub mod attention;
pub mod config;
pub mod decoder;
pub mod footprint;
pub mod kv_cache;
mod layer;
pub mod load;
pub mod names;
pub mod nn;
pub mod projector;
pub mod rope;
pub mod synthetic;
pub mod trace;
pub mod vision;

pub use config::{TextConfig, VisionConfig};
pub use decoder::Decoder;
pub use kv_cache::KvCache;
pub use trace::{NoTrace, Tap, Tracer};
pub use vision::Vision;

/// Everything that can go wrong building or running the model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The GGUF container is malformed or lacks a key.
    #[error(transparent)]
    Gguf(#[from] crate::gguf::GgufError),
    /// A weight's bytes cannot be decoded.
    #[error("{tensor}: {source}")]
    Quant {
        /// Tensor name.
        tensor: String,
        /// The block-format error.
        source: crate::quant::QuantError,
    },
    /// The file is for another architecture.
    #[error("this {what} is a {found:?} file, not {expected:?}; pick the matching GGUF")]
    WrongArchitecture {
        /// Which file.
        what: &'static str,
        /// Architecture needed.
        expected: &'static str,
        /// Architecture found.
        found: String,
    },
    /// A tensor has the wrong shape.
    #[error("tensor {tensor}: shape {found:?} but the configuration implies {expected:?}")]
    Shape {
        /// Tensor name.
        tensor: String,
        /// Expected ggml dims.
        expected: Vec<u64>,
        /// Dims in the file.
        found: Vec<u64>,
    },
    /// A feature this engine does not implement.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The text model and the mmproj do not belong together.
    #[error(
        "the mmproj projects to width {mmproj} but the text model is {text} wide: they are not a pair"
    )]
    Mismatch {
        /// Projector output width.
        mmproj: usize,
        /// Decoder width.
        text: usize,
    },
    /// Reading results back from the device failed.
    #[error("reading results from the device failed: {0}")]
    Readback(String),
    /// The device refused queued work (e.g. it was lost).
    #[error("the device failed: {0}")]
    Device(String),
    /// A prompt problem (too many images, unknown tokens...).
    #[error("{0}")]
    Prompt(String),
}

impl From<crate::device::DeviceError> for ModelError {
    fn from(e: crate::device::DeviceError) -> Self {
        ModelError::Device(e.to_string())
    }
}
