//! The kernel forms the automatic choices pick from, and the process-wide set of forms the
//! device self-test ([`crate::selftest`]) turned off. A form that gave a wrong result on this
//! adapter is skipped by every automatic choice ([`crate::quant::Kernel::Auto`],
//! [`crate::quant::Half::Auto`], fused attention, the fused row kernels, device argmax), which
//! then takes the next form in its order of preference; explicitly requested forms still run
//! (tests and benchmarks name them on purpose).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// A device code path an automatic choice may take.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Form {
    /// The naive quantised matmul ([`crate::quant::Kernel::Naive`]).
    Naive,
    /// The workgroup matrix–vector kernel ([`crate::quant::Kernel::Gemv`]).
    Gemv,
    /// The subgroup matrix–vector kernel ([`crate::quant::Kernel::GemvSubgroup`]).
    GemvSubgroup,
    /// The tiled matmul ([`crate::quant::Kernel::Tiled`]).
    Tiled,
    /// f16 widened with the adapter's f16 type ([`crate::quant::Half::Native`]).
    NativeHalf,
    /// The fused attention kernel ([`super::fused_attention`]); the blocked path replaces it.
    FusedAttention,
    /// burn's argmax on the device in greedy decoding; the host argmax replaces it.
    DeviceArgmax,
    /// The fused RMSNorm kernel, alone or added to a residual ([`crate::kernels::rows`]);
    /// composed burn ops replace it.
    FusedNorm,
    /// The fused q/k RMSNorm + RoPE kernel; composed burn ops replace it.
    FusedRope,
    /// The fused GELU-tanh(gate)·up kernel; composed burn ops replace it.
    FusedGelu,
    /// The fused LayerNorm kernel (vision tower); composed burn ops replace it.
    FusedLayerNorm,
    /// The decode attention kernel ([`crate::kernels::decode_attention`]); the blocked path
    /// replaces it.
    DecodeAttention,
    /// One product over two matrices of different block types
    /// ([`crate::quant::QMatrix::matmul_stacked`]); a product per matrix replaces it.
    StackedProduct,
    /// GELU(gate)·up applied by the decode product of a joined gate and up
    /// ([`crate::quant::QMatrix::matmul_gelu_halves`]); the product and the GELU kernel replace it.
    GeluProduct,
    /// The wide-head attention kernel ([`crate::kernels::wide_attention`]); the blocked path
    /// replaces it.
    WideAttention,
    /// The tiled matmul split over its rows' weights ([`crate::quant::Kernel::TiledSplit`]);
    /// the whole tiled product replaces it.
    TiledSplit,
}

impl Form {
    /// Every form.
    pub const ALL: [Form; 16] = [
        Form::Naive,
        Form::Gemv,
        Form::GemvSubgroup,
        Form::Tiled,
        Form::NativeHalf,
        Form::FusedAttention,
        Form::DeviceArgmax,
        Form::FusedNorm,
        Form::FusedRope,
        Form::FusedGelu,
        Form::FusedLayerNorm,
        Form::DecodeAttention,
        Form::StackedProduct,
        Form::GeluProduct,
        Form::WideAttention,
        Form::TiledSplit,
    ];

    fn bit(self) -> u32 {
        1 << self as u32
    }

    /// A short human name ("subgroup gemv").
    pub fn label(self) -> &'static str {
        match self {
            Form::Naive => "naive matmul",
            Form::Gemv => "gemv",
            Form::GemvSubgroup => "subgroup gemv",
            Form::Tiled => "tiled matmul",
            Form::NativeHalf => "native f16",
            Form::FusedAttention => "fused attention",
            Form::DeviceArgmax => "device argmax",
            Form::FusedNorm => "fused RMSNorm",
            Form::FusedRope => "fused q/k norm + RoPE",
            Form::FusedGelu => "fused GELU",
            Form::FusedLayerNorm => "fused LayerNorm",
            Form::DecodeAttention => "decode attention",
            Form::StackedProduct => "two-type product",
            Form::GeluProduct => "GELU in the product",
            Form::WideAttention => "wide attention",
            Form::TiledSplit => "split tiled matmul",
        }
    }
}

/// A form turned off, with why.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Disabled {
    /// The form.
    pub form: Form,
    /// What the self-test saw ("matmul.gemv.q4_k: error 3.1e-2 > bound 4.0e-6").
    pub reason: String,
}

/// Bits of the forms turned off (read on every matmul: an atomic, not the lock).
static OFF: AtomicU32 = AtomicU32::new(0);
/// Why each form in [`OFF`] was turned off.
static REASONS: Mutex<Vec<Disabled>> = Mutex::new(Vec::new());
/// Bits of the forms given a test fault ([`inject_fault`]).
static FAULTS: AtomicU32 = AtomicU32::new(0);

/// Whether the automatic choices may use `form`.
pub fn enabled(form: Form) -> bool {
    OFF.load(Ordering::Relaxed) & form.bit() == 0
}

/// Turns `form` off for the automatic choices (the first reason given is kept).
pub fn disable(form: Form, reason: impl Into<String>) {
    let mut reasons = REASONS.lock().unwrap_or_else(|p| p.into_inner());
    if !reasons.iter().any(|d| d.form == form) {
        reasons.push(Disabled {
            form,
            reason: reason.into(),
        });
    }
    OFF.fetch_or(form.bit(), Ordering::Relaxed);
}

/// Turns off every form in `list` (a verdict cached from an earlier run).
pub fn apply(list: &[Disabled]) {
    for d in list {
        disable(d.form, d.reason.clone());
    }
}

/// The forms turned off, with their reasons, in the order they were turned off.
pub fn disabled() -> Vec<Disabled> {
    REASONS.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Turns every form back on (a new device, or a self-test run from scratch).
pub fn reset() {
    REASONS.lock().unwrap_or_else(|p| p.into_inner()).clear();
    OFF.store(0, Ordering::Relaxed);
}

/// Makes `form` give a wrong result from now on (tests only: proves the self-test catches a
/// broken form and that the automatic choice then avoids it).
#[doc(hidden)]
pub fn inject_fault(form: Form) {
    FAULTS.fetch_or(form.bit(), Ordering::Relaxed);
}

/// Removes every injected fault.
#[doc(hidden)]
pub fn clear_faults() {
    FAULTS.store(0, Ordering::Relaxed);
}

/// Whether `form` has an injected fault.
pub(crate) fn faulty(form: Form) -> bool {
    FAULTS.load(Ordering::Relaxed) & form.bit() != 0
}

/// `x` with 1.0 added to its first element when `form` has an injected fault, else `x`.
pub(crate) fn perturb<const D: usize>(
    form: Form,
    x: burn::tensor::Tensor<D>,
) -> burn::tensor::Tensor<D> {
    if !faulty(form) {
        return x;
    }
    let ranges: [std::ops::Range<usize>; D] = std::array::from_fn(|_| 0..1);
    let corner = x.clone().slice(ranges.clone()).add_scalar(1.0);
    x.slice_assign(ranges, corner)
}
