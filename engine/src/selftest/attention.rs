//! Attention conformance: the fused kernel or the blocked path on a device against an f64
//! evaluation of the same random inputs. Shared by the self-test and the native and browser
//! tests.

use burn::tensor::{Tensor, TensorData};

use crate::model::ModelError;
use crate::model::attention::{Kernel, Mask, blocked_attention, expand_kv};
use crate::model::nn::read_f32;

/// `(heads, groups, t, s, d)`: query heads, query heads per KV head, queries, keys, head size.
pub type Shape = (usize, usize, usize, usize, usize);

/// Which attention implementation to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// The fused kernel ([`Kernel::Fused`], GPU only).
    Fused,
    /// The decode kernel ([`Kernel::Decode`], GPU only).
    Decode,
    /// The wide-head kernel ([`Kernel::Wide`], GPU only), its keys split as it chooses.
    Wide,
    /// The wide-head kernel with its keys split into this many chunks (1: one dispatch).
    WideChunks(usize),
    /// Materialised scores ([`blocked_attention`], every device).
    Blocked,
}

/// Conformance cases, with a window: SigLIP's head size (d 72, several workgroups), grouped
/// query heads with a sliding window, one decode row (a workgroup of 4 lanes), five rows in a
/// workgroup of 8, the widest head taken, a key count that is not a multiple of the tile, and
/// the vision tower's 4096 keys (long loops).
pub const CASES: [(Shape, Option<usize>); 7] = [
    ((2, 1, 300, 300, 72), None),
    ((2, 1, 5, 40, 32), Some(3)),
    ((4, 2, 70, 100, 32), Some(40)),
    ((8, 2, 1, 97, 128), Some(1000)),
    ((2, 2, 33, 33, 128), Some(33)),
    ((3, 1, 65, 130, 48), None),
    ((1, 1, 130, 4096, 48), None),
];

/// Decode kernel cases: Gemma 3's decoder width with grouped heads and a window, several
/// rows over keys not a multiple of the 256-key chunk, a width under the workgroup, a row that
/// sees one key, and a long cache (many chunks).
pub const DECODE_CASES: [(Shape, Option<usize>); 5] = [
    ((8, 2, 1, 97, 256), Some(1000)),
    ((4, 4, 3, 300, 256), Some(40)),
    ((2, 1, 8, 600, 160), None),
    ((4, 2, 1, 1, 256), Some(1)),
    ((2, 2, 2, 4096, 256), None),
];

/// Wide-head kernel cases: Gemma 3's decoder width in a prefill (grouped heads, a window,
/// queries after cached keys, rows past one workgroup's 16 and keys past one tile's 7), a
/// question batch's few rows, the narrowest width it takes, 160 wide without a mask (10 keys a
/// tile), and a long prefill over a long cache.
pub const WIDE_CASES: [(Shape, Option<usize>); 5] = [
    ((8, 2, 70, 100, 256), Some(40)),
    ((4, 4, 9, 300, 256), Some(1000)),
    ((2, 1, 20, 20, 16), Some(20)),
    ((2, 2, 33, 65, 160), None),
    ((2, 2, 300, 1300, 256), Some(1024)),
];

/// Largest accepted difference from the f64 evaluation: f32 dot products of ≤128 terms and
/// ≤300-term weighted sums of values in [-1, 1] stay well inside it.
pub const TOLERANCE: f64 = 2e-6;

/// Attention with `path` on `device` against an f64 evaluation of the same random inputs,
/// optionally with a causal sliding-window mask of width `window`. Returns the largest absolute
/// difference (infinite for a NaN).
pub async fn max_error_vs_f64(
    device: &burn::tensor::Device,
    (heads, groups, t, s, d): Shape,
    window: Option<usize>,
    seed: u64,
    path: Path,
) -> Result<f64, ModelError> {
    let mut rng = crate::rng::SplitMix64::new(seed);
    let mut fill = |n: usize| -> Vec<f32> { (0..n).map(|_| 2.0 * rng.unit_f32() - 1.0).collect() };
    let kv = heads / groups;
    let (q, k, v) = (fill(heads * t * d), fill(kv * s * d), fill(kv * s * d));
    // Queries sit at the last t of s positions, as in a prefill after cached tokens.
    let visible = |i: usize, j: usize| match window {
        Some(w) => j <= i + (s - t) && j + w > i + (s - t),
        None => true,
    };
    let mask: Vec<f32> = (0..t * s)
        .map(|x| {
            if visible(x / s, x % s) {
                0.0
            } else {
                f32::NEG_INFINITY
            }
        })
        .collect();
    // Scores of a few units, like real attention after the query/key norms.
    let scale = 3.0 / (d as f32).sqrt();
    let tensor = |x: &[f32], shape: [usize; 3]| {
        Tensor::<3>::from_data(TensorData::new(x.to_vec(), shape), device)
    };
    let mask_t =
        window.map(|_| Tensor::<2>::from_data(TensorData::new(mask.clone(), [t, s]), device));
    // The masks are causal with the queries last: the decoder's promise, which lets the wide-head
    // kernel stop at each workgroup's horizon.
    let promised = mask_t.clone().map(|values| Mask {
        values,
        lookahead: Some(0),
    });
    let (qt, kt, vt) = (
        tensor(&q, [heads, t, d]),
        tensor(&k, [kv, s, d]),
        tensor(&v, [kv, s, d]),
    );
    let out = match path {
        Path::Fused => Kernel::Fused.run(qt, kt, vt, promised, groups, scale),
        Path::Decode => Kernel::Decode.run(qt, kt, vt, promised, groups, scale),
        Path::Wide => Kernel::Wide.run(qt, kt, vt, promised, groups, scale),
        Path::WideChunks(n) => {
            Kernel::Wide.run_chunked(qt, kt, vt, promised, groups, scale, Some(n))
        }
        Path::Blocked => blocked_attention(
            qt,
            expand_kv(kt, groups),
            expand_kv(vt, groups),
            mask_t,
            scale,
        ),
    };
    let got = read_f32(out).await?;
    let mut worst = 0f64;
    for h in 0..heads {
        let g = h / groups;
        for i in 0..t {
            let qi = &q[(h * t + i) * d..(h * t + i + 1) * d];
            let scores: Vec<Option<f64>> = (0..s)
                .map(|j| {
                    visible(i, j).then(|| {
                        let kj = &k[(g * s + j) * d..(g * s + j + 1) * d];
                        qi.iter()
                            .zip(kj)
                            .map(|(&a, &b)| a as f64 * b as f64)
                            .sum::<f64>()
                            * scale as f64
                    })
                })
                .collect();
            let max = scores
                .iter()
                .flatten()
                .fold(f64::NEG_INFINITY, |a, &b| a.max(b));
            let weights: Vec<f64> = scores
                .iter()
                .map(|x| x.map_or(0.0, |x| (x - max).exp()))
                .collect();
            let total: f64 = weights.iter().sum();
            for c in 0..d {
                let want: f64 = (0..s)
                    .map(|j| weights[j] * v[(g * s + j) * d + c] as f64)
                    .sum::<f64>()
                    / total;
                let err = (got[(h * t + i) * d + c] as f64 - want).abs();
                worst = if err.is_nan() {
                    f64::INFINITY
                } else {
                    worst.max(err)
                };
            }
        }
    }
    Ok(worst)
}
