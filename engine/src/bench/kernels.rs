//! Each weight matrix multiplied on its own with every kernel and f16 form a device has: the
//! per-matrix rows of [`super::run`] and the model-free [`kernel_survey`].

use serde::{Deserialize, Serialize};

use crate::eval::Clock;
use crate::model::ModelError;
use crate::quant::{GEMV_MAX_M, Half, Kernel, QMatrix};
use crate::rng::SplitMix64;

/// One weight matrix multiplied by `m` input rows with one kernel.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KernelTiming {
    /// GGUF tensor name (without `.weight`).
    pub matrix: String,
    /// Its block type.
    pub ty: String,
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    /// Input rows.
    pub m: usize,
    /// The kernel ([`Kernel::Auto`] on the CPU, which has one path).
    pub kernel: Kernel,
    /// How it widened f16 numbers ([`Half::Auto`] on the CPU).
    #[serde(default)]
    pub half: Half,
    /// Mean time of one multiplication.
    pub ms: f64,
    /// Multiplications timed together (see [`next_reps`]).
    #[serde(default)]
    pub reps: usize,
    /// Packed weight bytes read per second, in GB/s (what bounds decoding).
    pub weight_gb_per_s: f64,
    /// Arithmetic rate, 2·m·rows·cols per second, in GFLOP/s (what bounds prefill).
    pub gflop_per_s: f64,
}

/// Whether the timings include `kernel` at `m` input rows: each kernel where it is the
/// automatic choice, and the naive baseline (and the CPU's one path) at every size.
pub(super) fn timed_at(kernel: Kernel, m: usize) -> bool {
    let gemv = matches!(kernel, Kernel::Gemv | Kernel::GemvSubgroup);
    gemv == (m <= GEMV_MAX_M) || kernel == Kernel::Naive || kernel == Kernel::Auto
}

/// Shortest span a kernel timing rests on. Browsers round `performance.now()` to 100 µs
/// without cross-origin isolation, and at a host cost of ~0.1 ms a dispatch (#33) three
/// multiplications of a tiny matrix can read as 0 ms; 10 ms keeps that rounding under 1 %.
pub const MIN_TIMED_MS: f64 = 10.0;

/// Most multiplications one kernel timing issues, so a kernel faster than the clock's
/// resolution still ends (4,096 of SwiftShader's ~30 µs tiny matmuls: ~0.1 s).
pub const MAX_REPS: usize = 4096;

/// How many multiplications to time next after `reps` of them took `span_ms`, or None when
/// that span is long enough to keep (or the cap is reached). Grows by the ratio the span falls
/// short, with 50 % to spare, at most 16× a round (a zero span, below the clock's resolution,
/// grows 16×).
pub fn next_reps(reps: usize, span_ms: f64) -> Option<usize> {
    if span_ms >= MIN_TIMED_MS || reps >= MAX_REPS {
        return None;
    }
    let factor = if span_ms > 0.0 {
        (1.5 * MIN_TIMED_MS / span_ms).clamp(2.0, 16.0)
    } else {
        16.0
    };
    Some(((reps as f64 * factor).ceil() as usize).min(MAX_REPS))
}

/// Times `q · x` for `m` random rows with `kernel` and `half`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn time_kernel(
    device: &burn::tensor::Device,
    name: &str,
    q: &QMatrix,
    m: usize,
    kernel: Kernel,
    half: Half,
    reps: usize,
    clock: &impl Clock,
) -> Result<KernelTiming, ModelError> {
    let mut rng = SplitMix64::new(m as u64);
    let x: Vec<f32> = (0..m * q.cols).map(|_| rng.unit_f32() - 0.5).collect();
    let x =
        burn::tensor::Tensor::<2>::from_data(burn::tensor::TensorData::new(x, [m, q.cols]), device);
    // The warm-up compiles the kernel for this type.
    drop(q.matmul_variant(x.clone(), kernel, half));
    crate::device::sync(device).await?;
    let mut reps = reps.max(1);
    let ms = loop {
        let t = clock.now_ms();
        for _ in 0..reps {
            drop(q.matmul_variant(x.clone(), kernel, half));
        }
        crate::device::sync(device).await?;
        let span = clock.now_ms() - t;
        match next_reps(reps, span) {
            Some(more) => reps = more,
            None => break span / reps as f64,
        }
    };
    let bytes = q.ty.bytes_for((q.rows * q.cols) as u64).unwrap_or(0) as f64;
    Ok(KernelTiming {
        matrix: name.to_string(),
        ty: q.ty.to_string(),
        rows: q.rows,
        cols: q.cols,
        m,
        kernel,
        half,
        ms,
        reps,
        weight_gb_per_s: bytes / (ms * 1e6),
        gflop_per_s: 2.0 * (m * q.rows * q.cols) as f64 / (ms * 1e6),
    })
}

/// Every weight type the engine reads at one `[rows, cols]` shape (random blocks), multiplied
/// by `m` input rows for each `m` in `ms`, with every kernel and f16 form `device` has: a
/// survey of the kernels on a new device that needs no model file.
pub async fn kernel_survey(
    device: &burn::tensor::Device,
    rows: usize,
    cols: usize,
    ms: &[usize],
    reps: usize,
    clock: &impl Clock,
) -> Result<Vec<KernelTiming>, ModelError> {
    let mut out = Vec::new();
    for ty in crate::gguf::GgmlType::all().filter(|t| t.is_supported()) {
        let bytes = crate::quant::random_blocks(ty, rows * cols, ty.id() as u64);
        let q = QMatrix::upload(
            ty,
            &bytes,
            rows,
            cols,
            device,
            crate::quant::MAX_CHUNK_BYTES,
        )
        .map_err(|source| ModelError::Quant {
            tensor: format!("survey {ty} {rows}×{cols}"),
            source,
        })?;
        for &m in ms {
            for kernel in Kernel::available(device) {
                if !timed_at(kernel, m) {
                    continue;
                }
                for half in Half::available(device) {
                    out.push(
                        time_kernel(device, "survey", &q, m, kernel, half, reps.max(1), clock)
                            .await?,
                    );
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reps_grow_until_the_span_outlasts_the_clock() {
        // Long enough at once: keep it.
        assert_eq!(next_reps(3, 12.0), None);
        assert_eq!(next_reps(3, MIN_TIMED_MS), None);
        // Below the clock's resolution: 16× a round, capped.
        assert_eq!(next_reps(3, 0.0), Some(48));
        assert_eq!(next_reps(3000, 0.0), Some(MAX_REPS));
        assert_eq!(next_reps(MAX_REPS, 0.0), None);
        // Measurable but short: by the shortfall with 50 % to spare (1 ms -> 15×).
        assert_eq!(next_reps(4, 1.0), Some(60));
        // Nearly there: at least doubles, so a round count stays logarithmic.
        assert_eq!(next_reps(5, 9.0), Some(10));
        // A kernel that always reads 0 ms ends within a few rounds.
        let (mut reps, mut rounds) = (3, 0);
        while let Some(r) = next_reps(reps, 0.0) {
            reps = r;
            rounds += 1;
        }
        assert_eq!((reps, rounds), (MAX_REPS, 3));
    }
}
