//! Device-kernel conformance checks, shared by the native tests, the browser tests and the
//! in-app self-test: a kernel's result against the CPU dequantisation followed by an f64
//! matrix product, with an error bound that holds for any summation order.

use burn::tensor::{Device, Tensor, TensorData};

use super::qmatrix::u32_tensor;
use super::{Half, Kernel, QMatrix};
use super::{dequantize_vec, random_blocks};
use crate::gguf::GgmlType;
use crate::rng::SplitMix64;

/// One kernel check's outcome.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The worst error as a fraction of the allowed bound (≤ 1 passes).
    pub worst_ratio: f64,
    /// A description of the worst element.
    pub worst: String,
}

/// f32 summation of `k` products is within `k·2^-24·Σ|xᵢwᵢ|` of the exact sum (Higham, Accuracy
/// and Stability of Numerical Algorithms, §3.1), whatever the order; 2× for the products' own
/// rounding and an absolute floor for sums that cancel to ~0.
pub(crate) fn bound(k: usize, abs_sum: f64) -> f64 {
    2.0 * k as f64 * f64::from(f32::EPSILON) / 2.0 * abs_sum + 1e-30
}

/// The worst error of `got [m, n]` against the f64 products of `x [m, k]` and `w [n, k]`, as a
/// fraction of [`bound`] (infinite for a NaN), with its element `(i, r)` and the exact value.
pub(crate) fn worst_error(
    x: &[f32],
    w: &[f32],
    got: &[f32],
    m: usize,
    n: usize,
    k: usize,
) -> (f64, usize, usize, f64) {
    let mut worst = (0.0, 0, 0, 0.0);
    for i in 0..m {
        for r in 0..n {
            let (mut exact, mut abs) = (0f64, 0f64);
            for j in 0..k {
                let p = f64::from(x[i * k + j]) * f64::from(w[r * k + j]);
                exact += p;
                abs += p.abs();
            }
            let ratio = (f64::from(got[i * n + r]) - exact).abs() / bound(k, abs);
            // A NaN result is the worst possible outcome.
            let ratio = if ratio.is_nan() { f64::INFINITY } else { ratio };
            if ratio > worst.0 {
                worst = (ratio, i, r, exact);
            }
        }
    }
    worst
}

/// A check's worst element, for the self-test report: its absolute error and the bound that
/// element is allowed (the element whose error is the largest fraction of its own bound).
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// Absolute error at the worst element (infinite for a NaN).
    pub max_error: f64,
    /// The bound at that element.
    pub bound: f64,
    /// Where, expected and got (empty when exact).
    pub detail: String,
}

impl Measured {
    /// Whether the error is within the bound.
    pub fn passed(&self) -> bool {
        self.max_error <= self.bound
    }
}

/// A product on the device of random inputs and random well-formed blocks, with what it was
/// made from.
struct Product {
    /// The inputs `[m, k]`.
    x: Vec<f32>,
    /// The weights `[n, k]`, dequantised on the CPU.
    w: Vec<f32>,
    /// The device's `x · Wᵀ`, `[m, n]`.
    got: Vec<f32>,
    /// The matrix on the device.
    q: QMatrix,
}

/// `x [m, k] · Wᵀ` with `kernel` and `half` for random blocks of `ty` (`n` rows, in chunks of at
/// most `chunk_bytes`) on `device`.
async fn product(
    device: &Device,
    kernel: Kernel,
    half: Half,
    ty: GgmlType,
    [m, n, k]: [usize; 3],
    chunk_bytes: usize,
    seed: u64,
) -> Result<Product, String> {
    let bytes = random_blocks(ty, n * k, seed);
    let w = dequantize_vec(ty, &bytes, n * k).map_err(|e| e.to_string())?;
    let x = random_x(m, k, seed);
    let q = QMatrix::upload(ty, &bytes, n, k, device, chunk_bytes).map_err(|e| e.to_string())?;
    let xt = Tensor::<2>::from_data(TensorData::new(x.clone(), [m, k]), device);
    let got = read(q.matmul_variant(xt, kernel, half)).await?;
    if got.len() != m * n {
        return Err(format!("got {} outputs, expected {}", got.len(), m * n));
    }
    Ok(Product { x, w, got, q })
}

/// `x [m, k] · Wᵀ` with `kernel` and `half` against the f64 products, for random blocks of
/// `ty` (`n` rows in one chunk) on `device`.
#[allow(clippy::too_many_arguments)]
pub async fn matmul_error(
    device: &Device,
    kernel: Kernel,
    half: Half,
    ty: GgmlType,
    m: usize,
    n: usize,
    k: usize,
    seed: u64,
) -> Result<Measured, String> {
    let Product { x, w, got, .. } =
        product(device, kernel, half, ty, [m, n, k], usize::MAX / 2, seed).await?;
    Ok(worst_measured(
        &x,
        &w,
        &got,
        [m, n, k],
        format!("m={m} n={n} k={k}"),
    ))
}

/// The element of `got [m, n]` worst against the f64 products of `x [m, k]` and `w [n, k]` (see
/// [`worst_error`]) as a [`Measured`]: its absolute error (infinite for a NaN), the bound at that
/// element, and `label` with where (empty when exact).
fn worst_measured(
    x: &[f32],
    w: &[f32],
    got: &[f32],
    [m, n, k]: [usize; 3],
    label: String,
) -> Measured {
    let (ratio, i, r, exact) = worst_error(x, w, got, m, n, k);
    let abs: f64 = (0..k)
        .map(|j| (f64::from(x[i * k + j]) * f64::from(w[r * k + j])).abs())
        .sum();
    let g = got[i * n + r];
    Measured {
        max_error: if ratio.is_finite() {
            (f64::from(g) - exact).abs()
        } else {
            f64::INFINITY
        },
        bound: bound(k, abs),
        detail: if ratio > 0.0 {
            format!("{label}: out[{i},{r}] expected {exact:.7} got {g:.7}")
        } else {
            String::new()
        },
    }
}

/// Rows gathered with ids on the device against the CPU dequantisation (bound 0: a gather
/// must be exact), for random blocks of `ty` (`n` rows of `k`).
pub async fn gather_error(
    device: &Device,
    half: Half,
    ty: GgmlType,
    n: usize,
    k: usize,
    seed: u64,
) -> Result<Measured, String> {
    let bytes = random_blocks(ty, n * k, seed);
    let w = dequantize_vec(ty, &bytes, n * k).map_err(|e| e.to_string())?;
    let q = QMatrix::upload(ty, &bytes, n, k, device, usize::MAX / 2).map_err(|e| e.to_string())?;
    // Out of order and repeated, first and last rows included.
    let ids: Vec<u32> = [n - 1, 0, n / 2, n - 1].iter().map(|&i| i as u32).collect();
    let rows = read(q.gather_with(u32_tensor(ids.clone(), device), half)).await?;
    let mut worst = Measured {
        max_error: 0.0,
        bound: 0.0,
        detail: String::new(),
    };
    for (t, &id) in ids.iter().enumerate() {
        for c in 0..k {
            let (want, got) = (w[id as usize * k + c], rows.get(t * k + c).copied());
            let err = got.map_or(f64::INFINITY, |g| f64::from(g - want).abs());
            let err = if err.is_nan() { f64::INFINITY } else { err };
            if err > worst.max_error {
                worst.max_error = err;
                worst.detail = format!("row {id} [{c}]: expected {want} got {got:?}");
            }
        }
    }
    Ok(worst)
}

async fn read(t: Tensor<2>) -> Result<Vec<f32>, String> {
    t.into_data_async()
        .await
        .map_err(|e| format!("readback failed: {e:?}"))?
        .try_into_vec::<f32>()
        .map_err(|e| format!("{e:?}"))
}

/// GELU with the tanh approximation in f64 (PyTorch's `gelu(approximate="tanh")`).
pub(crate) fn gelu_tanh_f64(v: f64) -> f64 {
    let inner = ((v + 0.044_715 * v * v * v) * (2.0 / std::f64::consts::PI).sqrt()).tanh();
    0.5 * v * (1.0 + inner)
}

/// Largest accepted difference of a product's GELU·up from the f64 GELU of its own sums,
/// relative to `max(1, |gate · up|)`. Measured worst 1.6e-7 on lavapipe; the bound is the fused
/// GELU kernel's (`crate::selftest::rows::TOLERANCE`), 12× that, for GPUs whose tanh is less
/// exact.
pub const GELU_PRODUCT_TOLERANCE: f64 = 2e-6;

/// Random inputs `[m, k]` in [-1, 1) for the checks' products.
fn random_x(m: usize, k: usize, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed ^ 0x5eed);
    (0..m * k).map(|_| rng.unit_f32() * 2.0 - 1.0).collect()
}

/// `x [m, k]` times `na` rows of `ta` stacked on `nb` rows of `tb` in one dispatch
/// ([`QMatrix::matmul_stacked_variant`]) against the f64 products, for random blocks on
/// `device`: the worst element, as [`matmul_error`] reports it. Also fails unless the result is
/// bit-equal to the two matrices' own products with the same kernel: the same sums in the same
/// order.
#[allow(clippy::too_many_arguments)]
pub async fn stacked_error(
    device: &Device,
    kernel: Kernel,
    half: Half,
    [ta, tb]: [GgmlType; 2],
    m: usize,
    [na, nb]: [usize; 2],
    k: usize,
    seed: u64,
) -> Result<Measured, String> {
    let upload = |ty: GgmlType, n: usize, seed: u64| -> Result<(QMatrix, Vec<f32>), String> {
        let bytes = random_blocks(ty, n * k, seed);
        let w = dequantize_vec(ty, &bytes, n * k).map_err(|e| e.to_string())?;
        let q =
            QMatrix::upload(ty, &bytes, n, k, device, usize::MAX / 2).map_err(|e| e.to_string())?;
        Ok((q, w))
    };
    let (a, wa) = upload(ta, na, seed)?;
    let (b, wb) = upload(tb, nb, seed + 1)?;
    let x = random_x(m, k, seed);
    let xt = Tensor::<2>::from_data(TensorData::new(x.clone(), [m, k]), device);
    let got = QMatrix::matmul_stacked_variant(&a, &b, xt.clone(), kernel, half)
        .ok_or("no stacked product on this device")?;
    let got = read(got).await?;
    let n = na + nb;
    if got.len() != m * n {
        return Err(format!("got {} outputs, expected {}", got.len(), m * n));
    }
    let pa = read(a.matmul_variant(xt.clone(), kernel, half)).await?;
    let pb = read(b.matmul_variant(xt, kernel, half)).await?;
    for row in 0..m {
        for col in 0..n {
            let want = if col < na {
                pa[row * na + col]
            } else {
                pb[row * nb + col - na]
            };
            if got[row * n + col].to_bits() != want.to_bits() {
                return Err(format!(
                    "{ta}+{tb} m={m}: out[{row},{col}] is {} stacked, {want} alone",
                    got[row * n + col]
                ));
            }
        }
    }
    let w: Vec<f32> = wa.into_iter().chain(wb).collect();
    let label = format!("{ta}+{tb} m={m} n={na}+{nb} k={k}");
    Ok(worst_measured(&x, &w, &got, [m, n, k], label))
}

/// `gelu_tanh(gate) · up` from one product of a joined gate and up matrix (`2f` random rows of
/// `ty`, [`QMatrix::matmul_gelu_variant`]) against the f64 GELU of the same kernel's plain
/// product's two sums, relative to `max(1, |gate · up|)` with bound
/// [`GELU_PRODUCT_TOLERANCE`]. The sums themselves are what [`matmul_error`] checks.
#[allow(clippy::too_many_arguments)]
pub async fn gelu_product_error(
    device: &Device,
    kernel: Kernel,
    half: Half,
    ty: GgmlType,
    m: usize,
    f: usize,
    k: usize,
    seed: u64,
) -> Result<Measured, String> {
    let bytes = random_blocks(ty, 2 * f * k, seed);
    let q =
        QMatrix::upload(ty, &bytes, 2 * f, k, device, usize::MAX / 2).map_err(|e| e.to_string())?;
    // Inputs scaled so the largest gate is ±12: past GELU's bend and the tanh clamp (random
    // blocks alone give gates in the hundreds, where GELU is the identity or zero).
    let x = random_x(m, k, seed);
    let xt = Tensor::<2>::from_data(TensorData::new(x.clone(), [m, k]), device);
    let first = read(q.matmul_variant(xt, kernel, half)).await?;
    let largest = (0..m)
        .flat_map(|i| first[i * 2 * f..i * 2 * f + f].iter())
        .fold(0f32, |a, g| a.max(g.abs()));
    let s = if largest > 0.0 { 12.0 / largest } else { 1.0 };
    let x: Vec<f32> = x.iter().map(|v| v * s).collect();
    let xt = Tensor::<2>::from_data(TensorData::new(x, [m, k]), device);
    let got = q
        .matmul_gelu_variant(xt.clone(), kernel, half)
        .ok_or_else(|| format!("no GELU product with {kernel:?} on this device"))?;
    let got = read(got).await?;
    let sums = read(q.matmul_variant(xt, kernel, half)).await?;
    if got.len() != m * f {
        return Err(format!("got {} outputs, expected {}", got.len(), m * f));
    }
    let mut worst = Measured {
        max_error: 0.0,
        bound: GELU_PRODUCT_TOLERANCE,
        detail: String::new(),
    };
    let mut worst_ratio = 0.0;
    for i in 0..m {
        for r in 0..f {
            let (gate, up) = (sums[i * 2 * f + r], sums[i * 2 * f + f + r]);
            let want = gelu_tanh_f64(f64::from(gate)) * f64::from(up);
            let g = got[i * f + r];
            let err = (f64::from(g) - want).abs();
            let err = if err.is_nan() { f64::INFINITY } else { err };
            // f32's tanh near ±1 carries an error of a few ulps of 1, which GELU multiplies
            // by |gate|/2 and the product by |up|: the scale the error is measured against.
            let scale = (f64::from(gate) * f64::from(up)).abs().max(1.0);
            let allowed = GELU_PRODUCT_TOLERANCE * scale;
            if err / allowed > worst_ratio || err.is_infinite() {
                worst_ratio = err / allowed;
                worst = Measured {
                    max_error: err,
                    bound: allowed,
                    detail: format!(
                        "{ty} m={m} f={f} k={k}: out[{i},{r}] gate {gate} up {up}: expected {want:.7} got {g:.7}"
                    ),
                };
            }
        }
    }
    Ok(worst)
}

/// Checks `x [m, k] · Wᵀ` with `kernel` and `half` for random well-formed blocks of `ty` (`n`
/// rows, split into chunks of at most `chunk_bytes`) and a row gather, on `device`.
#[allow(clippy::too_many_arguments)]
pub async fn check_matmul(
    device: &Device,
    kernel: Kernel,
    half: Half,
    ty: GgmlType,
    m: usize,
    n: usize,
    k: usize,
    chunk_bytes: usize,
    seed: u64,
) -> Result<Outcome, String> {
    let Product { x, w, got, q } = product(device, kernel, half, ty, [m, n, k], chunk_bytes, seed)
        .await
        .map_err(|e| format!("{ty}: {e}"))?;
    let (ratio, i, r, exact) = worst_error(&x, &w, &got, m, n, k);
    let mut worst = Outcome {
        worst_ratio: ratio,
        worst: String::new(),
    };
    if ratio > 0.0 {
        let g = got[i * n + r];
        worst.worst = format!(
            "{kernel:?} {half:?} {ty} m={m} n={n} k={k}: out[{i},{r}] expected {exact:.7} got {g:.7}"
        );
    }
    // Gather a few rows, out of order and repeated, across chunk boundaries.
    let ids: Vec<u32> = [n - 1, 0, n / 2, n - 1, 1.min(n - 1)]
        .iter()
        .map(|&i| i as u32)
        .collect();
    let rows = read(q.gather_with(u32_tensor(ids.clone(), device), half)).await?;
    for (t, &id) in ids.iter().enumerate() {
        let want = &w[id as usize * k..(id as usize + 1) * k];
        if rows[t * k..(t + 1) * k] != *want {
            return Err(format!(
                "{ty}: gathered row {id} differs from the CPU dequantisation"
            ));
        }
    }
    // The same rows looked up with host ids.
    if read(q.gather(&ids)).await? != rows {
        return Err(format!(
            "{ty}: rows gathered with host ids differ from the device-id gather"
        ));
    }
    Ok(worst)
}

/// Whether `kernel` gives bit-identical products with both f16 forms (each exact, and the
/// summation order is the same) for random blocks of `ty`; an error names the first difference.
#[allow(clippy::too_many_arguments)]
pub async fn check_half_forms_agree(
    device: &Device,
    kernel: Kernel,
    ty: GgmlType,
    m: usize,
    n: usize,
    k: usize,
    seed: u64,
) -> Result<(), String> {
    let bytes = random_blocks(ty, n * k, seed);
    let x = random_x(m, k, seed);
    let q = QMatrix::upload(ty, &bytes, n, k, device, usize::MAX / 2).map_err(|e| e.to_string())?;
    let xt = Tensor::<2>::from_data(TensorData::new(x, [m, k]), device);
    let a = read(q.matmul_variant(xt.clone(), kernel, Half::Integer)).await?;
    let b = read(q.matmul_variant(xt, kernel, Half::Native)).await?;
    match a
        .iter()
        .zip(&b)
        .position(|(a, b)| a.to_bits() != b.to_bits())
    {
        None => Ok(()),
        Some(i) => Err(format!(
            "{kernel:?} {ty} m={m} n={n} k={k}: out[{}] is {} with integer f16 widening, {} native",
            i, a[i], b[i]
        )),
    }
}

/// The shapes every backend and kernel is checked on: tiny, odd (prime row counts), real row
/// lengths, input rows past one matrix–vector group (9) and output tiles cut on both sides
/// (130 × 131: 64-wide tiles and the vector form's 128-wide ones), and for the float types a row
/// length that is no multiple of the tile step.
pub fn cases() -> Vec<(GgmlType, usize, usize, usize)> {
    let mut v = Vec::new();
    for ty in GgmlType::all().filter(|t| t.is_supported()) {
        let bs = ty.block_size() as usize;
        let k_small = if bs == 256 { 256 } else { 64 };
        v.push((ty, 1, 7, k_small));
        v.push((ty, 3, 13, 2 * k_small.max(bs)));
        v.push((ty, 5, 31, 768));
        v.push((ty, 9, 3, k_small));
        v.push((ty, 130, 131, k_small));
        // MedGemma's hidden width: a matrix-vector invocation takes several steps along a row
        // (2.5 chunks of a K-quant row for each of 64).
        v.push((ty, 1, 5, 2560));
        if bs == 1 {
            v.push((ty, 66, 5, 75));
        }
    }
    v
}
