//! The fused attention kernel's conformance check, shared by the native wgpu test
//! (qkernels.rs) and the WebGPU test (web.rs); it lives in the engine (the self-test uses it).

pub use rexvqa_engine::selftest::attention::{CASES, TOLERANCE};
use rexvqa_engine::selftest::attention::{Path, Shape};

/// The fused kernel on `device` against an f64 evaluation (see
/// [`rexvqa_engine::selftest::attention::max_error_vs_f64`]).
pub async fn max_error_vs_f64(
    device: &burn::tensor::Device,
    shape: Shape,
    window: Option<usize>,
    seed: u64,
) -> Result<f64, rexvqa_engine::model::ModelError> {
    rexvqa_engine::selftest::attention::max_error_vs_f64(device, shape, window, seed, Path::Fused)
        .await
}
