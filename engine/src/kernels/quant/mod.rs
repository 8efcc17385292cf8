//! CubeCL kernels that read GGUF blocks (in the padded layout of [`crate::quant::pack`]) directly:
//! a dequantising matrix multiply and a dequantising row gather. Each weight is decoded with
//! the same integer and float operations as [`crate::quant::dequantize`], so a kernel differs from
//! "dequantise on the CPU, then multiply in f32" only by summation order. Every kernel comes in
//! two forms that widen the f16 numbers of the blocks (F16 weights, block scales) differently:
//! in integer arithmetic, which any adapter runs, or by reading the same buffer as f16 values
//! and converting them (`native`, WebGPU's `shader-f16`): one load and one conversion instead
//! of a dozen integer operations and a branch. Both are exact, so the two forms give identical
//! results. (Not a `bitcast<vec2<f16>>` of a word: naga, which compiles WGSL natively, keeps a
//! bitcast's vector width and rejects it.)

// CubeCL needs a variable declared before runtime branches assign it; rustc cannot see that
// the expansion reads the initial value.
#![allow(unused_assignments)]

use burn_cubecl::cubecl;
use burn_cubecl::cubecl::prelude::*;

/// ggml type ids the kernels decode (the `ty` comptime parameter).
pub mod ty {
    /// F32.
    pub const F32: u32 = 0;
    /// F16.
    pub const F16: u32 = 1;
    /// Q4_0.
    pub const Q4_0: u32 = 2;
    /// Q4_1.
    pub const Q4_1: u32 = 3;
    /// Q5_1.
    pub const Q5_1: u32 = 7;
    /// Q2_K.
    pub const Q2_K: u32 = 10;
    /// Q3_K.
    pub const Q3_K: u32 = 11;
    /// IQ2_XXS.
    pub const IQ2_XXS: u32 = 16;
    /// IQ2_XS.
    pub const IQ2_XS: u32 = 17;
    /// IQ3_XXS.
    pub const IQ3_XXS: u32 = 18;
    /// IQ4_NL.
    pub const IQ4_NL: u32 = 20;
    /// IQ3_S.
    pub const IQ3_S: u32 = 21;
    /// IQ2_S.
    pub const IQ2_S: u32 = 22;
    /// IQ4_XS.
    pub const IQ4_XS: u32 = 23;
    /// Q5_0.
    pub const Q5_0: u32 = 6;
    /// Q8_0.
    pub const Q8_0: u32 = 8;
    /// Q4_K.
    pub const Q4_K: u32 = 12;
    /// Q5_K.
    pub const Q5_K: u32 = 13;
    /// Q6_K.
    pub const Q6_K: u32 = 14;
    /// BF16.
    pub const BF16: u32 = 30;
}

mod blocks;
mod gemv;
mod iq;
mod naive;
mod runs;
mod small;
mod tiled;
mod words;

pub use blocks::dequant_one;
pub use gemv::*;
pub use iq::is_iq;
pub use naive::*;
pub use tiled::*;

/// Whether the naive and tiled products stage weights of type `ty` four at a time from one
/// load and one scale (`runs::stage_run`'s own branches) rather than weight by weight.
pub const fn staged_in_runs(ty: u32) -> bool {
    matches!(
        ty,
        ty::Q4_0 | ty::Q5_0 | ty::Q8_0 | ty::Q4_K | ty::Q5_K | ty::Q6_K
    )
}

/// `√(2/π)` and the cubic coefficient of GELU's tanh approximation (as in
/// [`crate::model::nn::gelu_tanh`]).
pub const SQRT_2_OVER_PI: f32 = 0.797_884_6;
/// See [`SQRT_2_OVER_PI`].
pub const GELU_CUBIC: f32 = 0.044_715;
/// tanh is ±1 in f32 beyond |9.02|; SwiftShader's tanh returns NaN past ~44 (see
/// [`crate::model::nn::gelu_tanh`]), so the argument is clamped first, as there.
pub const TANH_SATURATED: f32 = 10.0;

/// GELU with the tanh approximation, the formula of [`crate::model::nn::gelu_tanh`] term by
/// term: shared by the fused GELU kernels and the products that apply it to their outputs, so
/// both give the same bits.
#[cube]
pub fn gelu_tanh(x: f32) -> f32 {
    let inner = (x + x * x * x * GELU_CUBIC) * SQRT_2_OVER_PI;
    let inner = clamp(inner, -TANH_SATURATED, TANH_SATURATED);
    x * 0.5f32 * (inner.tanh() + 1.0f32)
}
