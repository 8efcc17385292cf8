//! The CPU's matrix–vector product against packed GGUF rows (decoding: a few activation rows
//! times every weight row), taken block by block without writing the weights out as f32.
//!
//! Every quantised type's weights are `scale · q − min` over groups of 32 with integer `q`
//! (Q6_K's 16-weight scales are folded into `q`, which stays an exact integer), so a group's
//! contribution is `scale · Σ q·x − min · Σ x`: one multiply–add per weight instead of
//! dequantising (two more operations and a store) and then multiplying (a load and a
//! multiply–add), and the `Σ x` of each group is shared by every weight row. ggml evaluates
//! its quantised dot products in the same factored form. The result differs from the
//! dequantise-then-multiply product by summation order and rounding only; the kernel
//! conformance bound (`conformance::check_matmul`) holds it to that.
//!
//! x86-64 CPUs with AVX2 and FMA get a copy of the loops written with their 8-lane
//! instructions (chosen at run time, so one binary serves every x86-64 machine); WebAssembly
//! built with SIMD128 (`.cargo/config.toml`; every current browser has it, and wasm has no run-time
//! choice) runs them on pairs of 4-lane vectors; elsewhere the same loops run on plain arrays of
//! eight lanes, which the compiler vectorises as it can. The lanes are explicit because the
//! compiler left the AVX2 copy's multiply–adds scalar. The SIMD128 lanes multiply and add
//! separately (the base instruction set has no fused form), exactly as the plain arrays do, so
//! in wasm both give the same bits.

// The decoders index several arrays in lockstep, as ggml's reference loops do.
#![allow(clippy::needless_range_loop)]

use super::pack::{dequantize_packed, padded_block_bytes};
use crate::gguf::GgmlType;

#[path = "dot_small.rs"]
mod small;

/// Weights per group sharing one scale and min.
const G: usize = 32;
/// Most groups in one block (a K-quant super-block of 256).
const MAX_GROUPS: usize = 8;
/// Most activation rows one call takes (the matrix–vector path's limit).
pub const MAX_ROWS: usize = 8;

/// The activation rows of a product and the sum of each of their 32-weight groups.
pub struct Activations<'a> {
    xs: &'a [f32],
    m: usize,
    k: usize,
    sums: Vec<f32>,
}

impl<'a> Activations<'a> {
    /// `xs` holds `xs.len() / k` rows of `k` values (at most [`MAX_ROWS`]).
    pub fn new(xs: &'a [f32], k: usize) -> Self {
        let m = xs.len().checked_div(k).unwrap_or(0);
        assert!(m <= MAX_ROWS, "at most {MAX_ROWS} activation rows, got {m}");
        let sums = if k.is_multiple_of(G) {
            xs.chunks_exact(G).map(|c| c.iter().sum()).collect()
        } else {
            Vec::new()
        };
        Activations { xs, m, k, sums }
    }
}

/// `out[i·n + r] = x_i · row_r` for the `n` packed rows of type `ty` in `words` (whole rows of
/// `x.k` weights). Float types take the rows dequantised, one at a time.
pub fn dot_rows(ty: GgmlType, words: &[u32], x: &Activations, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2::available() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        unsafe { dot_rows_avx2(ty, words, x, out) };
        return;
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return by_type::<simd128::Lanes>(ty, words, x, out);
    #[allow(unreachable_code)]
    by_type::<Portable>(ty, words, x, out);
}

/// [`dot_rows`] on the plain 8-lane arrays, whatever the target has: the reference the
/// instruction-set copies are tested against.
#[doc(hidden)]
pub fn dot_rows_portable(ty: GgmlType, words: &[u32], x: &Activations, out: &mut [f32]) {
    by_type::<Portable>(ty, words, x, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn dot_rows_avx2(ty: GgmlType, words: &[u32], x: &Activations, out: &mut [f32]) {
    by_type::<avx2::Lanes>(ty, words, x, out);
}

#[inline(always)]
fn by_type<V: Lanes>(ty: GgmlType, words: &[u32], x: &Activations, out: &mut [f32]) {
    let bytes: &[u8] = bytemuck::cast_slice(words);
    match ty {
        GgmlType::Q4_0 => quant_rows::<Q4_0, V>(bytes, x, out),
        GgmlType::Q5_0 => quant_rows::<Q5_0, V>(bytes, x, out),
        GgmlType::Q8_0 => quant_rows::<Q8_0, V>(bytes, x, out),
        GgmlType::Q4_K => quant_rows::<Q4K, V>(bytes, x, out),
        GgmlType::Q5_K => quant_rows::<Q5K, V>(bytes, x, out),
        GgmlType::Q6_K => quant_rows::<Q6K, V>(bytes, x, out),
        GgmlType::Q4_1 => quant_rows::<small::Q4_1, V>(bytes, x, out),
        GgmlType::Q5_1 => quant_rows::<small::Q5_1, V>(bytes, x, out),
        GgmlType::Q3_K => quant_rows::<small::Q3K, V>(bytes, x, out),
        GgmlType::IQ4_NL => quant_rows::<small::IQ4NL, V>(bytes, x, out),
        GgmlType::IQ4_XS => quant_rows::<small::IQ4XS, V>(bytes, x, out),
        _ => float_rows::<V>(ty, words, x, out),
    }
}

/// Whether [`dot_rows`] takes `ty` block by block in the factored form (otherwise its rows are
/// dequantised, then multiplied).
pub fn factored(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        Q4_0 | Q5_0 | Q8_0 | Q4_K | Q5_K | Q6_K | Q4_1 | Q5_1 | Q3_K | IQ4_NL | IQ4_XS
    )
}

/// Eight f32 lanes and the few operations the products need.
trait Lanes: Copy {
    fn zero() -> Self;
    fn splat(v: f32) -> Self;
    fn load(s: &[f32; 8]) -> Self;
    /// `a · b + c`, fused where the instruction set has it.
    fn mul_add(a: Self, b: Self, c: Self) -> Self;
    fn add(a: Self, b: Self) -> Self;
    /// The sum of the lanes, in a fixed order.
    fn sum(self) -> f32;
}

/// Lanes as a plain array (any target).
#[derive(Clone, Copy)]
struct Portable([f32; 8]);

impl Lanes for Portable {
    #[inline(always)]
    fn zero() -> Self {
        Portable([0.0; 8])
    }
    #[inline(always)]
    fn splat(v: f32) -> Self {
        Portable([v; 8])
    }
    #[inline(always)]
    fn load(s: &[f32; 8]) -> Self {
        Portable(*s)
    }
    #[inline(always)]
    fn mul_add(a: Self, b: Self, c: Self) -> Self {
        // Not `f32::mul_add`: without an FMA instruction it is a slow library call.
        Portable(std::array::from_fn(|l| a.0[l] * b.0[l] + c.0[l]))
    }
    #[inline(always)]
    fn add(a: Self, b: Self) -> Self {
        Portable(std::array::from_fn(|l| a.0[l] + b.0[l]))
    }
    #[inline(always)]
    fn sum(self) -> f32 {
        let a = self.0;
        ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// Whether the CPU has AVX2 and FMA (cached by the standard library).
    pub fn available() -> bool {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }

    /// One AVX register. Only created inside `dot_rows_avx2`, which runs only where
    /// [`available`] holds, so every intrinsic below has the instructions it needs.
    #[derive(Clone, Copy)]
    pub struct Lanes(__m256);

    impl super::Lanes for Lanes {
        #[inline(always)]
        fn zero() -> Self {
            // SAFETY: see the type's documentation.
            Lanes(unsafe { _mm256_setzero_ps() })
        }
        #[inline(always)]
        fn splat(v: f32) -> Self {
            // SAFETY: see the type's documentation.
            Lanes(unsafe { _mm256_set1_ps(v) })
        }
        #[inline(always)]
        fn load(s: &[f32; 8]) -> Self {
            // SAFETY: `s` holds eight values (unaligned load); see the type's documentation.
            Lanes(unsafe { _mm256_loadu_ps(s.as_ptr()) })
        }
        #[inline(always)]
        fn mul_add(a: Self, b: Self, c: Self) -> Self {
            // SAFETY: see the type's documentation.
            Lanes(unsafe { _mm256_fmadd_ps(a.0, b.0, c.0) })
        }
        #[inline(always)]
        fn add(a: Self, b: Self) -> Self {
            // SAFETY: see the type's documentation.
            Lanes(unsafe { _mm256_add_ps(a.0, b.0) })
        }
        #[inline(always)]
        fn sum(self) -> f32 {
            // SAFETY: see the type's documentation.
            unsafe {
                let h = _mm_add_ps(
                    _mm256_castps256_ps128(self.0),
                    _mm256_extractf128_ps(self.0, 1),
                );
                let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
                _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)))
            }
        }
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128 {
    use core::arch::wasm32::*;

    /// Eight lanes as two 128-bit vectors (lanes 0–3, 4–7). The build enables SIMD128 for the
    /// whole module, so there is nothing to detect at run time.
    #[derive(Clone, Copy)]
    pub struct Lanes(v128, v128);

    impl super::Lanes for Lanes {
        #[inline(always)]
        fn zero() -> Self {
            Lanes(f32x4_splat(0.0), f32x4_splat(0.0))
        }
        #[inline(always)]
        fn splat(v: f32) -> Self {
            Lanes(f32x4_splat(v), f32x4_splat(v))
        }
        #[inline(always)]
        fn load(s: &[f32; 8]) -> Self {
            // SAFETY: `s` holds eight f32 (two unaligned 16-byte loads stay inside it).
            unsafe {
                Lanes(
                    v128_load(s.as_ptr().cast()),
                    v128_load(s.as_ptr().add(4).cast()),
                )
            }
        }
        #[inline(always)]
        fn mul_add(a: Self, b: Self, c: Self) -> Self {
            Lanes(
                f32x4_add(f32x4_mul(a.0, b.0), c.0),
                f32x4_add(f32x4_mul(a.1, b.1), c.1),
            )
        }
        #[inline(always)]
        fn add(a: Self, b: Self) -> Self {
            Lanes(f32x4_add(a.0, b.0), f32x4_add(a.1, b.1))
        }
        #[inline(always)]
        fn sum(self) -> f32 {
            // The plain arrays' order: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
            let h = f32x4_add(self.0, self.1);
            (f32x4_extract_lane::<0>(h) + f32x4_extract_lane::<2>(h))
                + (f32x4_extract_lane::<1>(h) + f32x4_extract_lane::<3>(h))
        }
    }
}

/// `Σ a·b` over `a.len()` values, eight lanes at a time.
#[inline(always)]
fn dot<V: Lanes>(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = V::zero();
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        acc = V::mul_add(
            V::load(x.try_into().unwrap()),
            V::load(y.try_into().unwrap()),
            acc,
        );
    }
    acc.sum() + tail
}

/// `Σ q·x` over one group, as lane sums (two independent chains).
#[inline(always)]
fn dot_group<V: Lanes>(q: &[f32; G], x: &[f32; G]) -> V {
    let q: &[[f32; 8]; 4] = bytemuck::cast_ref(q);
    let x: &[[f32; 8]; 4] = bytemuck::cast_ref(x);
    let a = V::mul_add(V::load(&q[0]), V::load(&x[0]), V::zero());
    let b = V::mul_add(V::load(&q[1]), V::load(&x[1]), V::zero());
    let a = V::mul_add(V::load(&q[2]), V::load(&x[2]), a);
    let b = V::mul_add(V::load(&q[3]), V::load(&x[3]), b);
    V::add(a, b)
}

/// One block's groups: integer values (as f32), and per group the scale and min.
struct Decoded {
    q: [[f32; G]; MAX_GROUPS],
    scale: [f32; MAX_GROUPS],
    min: [f32; MAX_GROUPS],
}

/// A quantised block format, decoded group by group.
trait Blocks {
    /// ggml's type, for the padded block size.
    const TY: GgmlType;
    /// Groups of [`G`] weights in one block.
    const GROUPS: usize;
    /// Whether any group has a non-zero min.
    const MINS: bool;
    /// Decodes block `b` (its padded bytes) into `d`.
    fn decode(b: &[u8], d: &mut Decoded);
}

#[inline(always)]
fn f16_at(b: &[u8], i: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[i], b[i + 1]]))
}

/// IEEE half to single precision, exact, in straight-line integer code: `half`'s conversion
/// checks the CPU's features at run time on every call, and the call made the compiler spill
/// every accumulator once per block (Q8_0: ~40% of the time). After F. Giesen's
/// `half_to_float_fast5`; the test compares it with `half` on all 65,536 inputs.
#[inline(always)]
fn f16_to_f32(h: u16) -> f32 {
    const SHIFTED_EXP: u32 = 0x7c00 << 13;
    let h = u32::from(h);
    let mut o = (h & 0x7fff) << 13;
    let exp = o & SHIFTED_EXP;
    o += (127 - 15) << 23;
    if exp == SHIFTED_EXP {
        // Infinity or NaN: all exponent bits set.
        o += (128 - 16) << 23;
    } else if exp == 0 {
        // Zero or subnormal: renormalise through a float subtraction (exact).
        o += 1 << 23;
        o = (f32::from_bits(o) - f32::from_bits(113 << 23)).to_bits();
    }
    f32::from_bits(o | (h & 0x8000) << 16)
}

struct Q4_0;
impl Blocks for Q4_0 {
    const TY: GgmlType = GgmlType::Q4_0;
    const GROUPS: usize = 1;
    const MINS: bool = false;
    #[inline(always)]
    fn decode(b: &[u8], d: &mut Decoded) {
        let qs: &[u8; 16] = b[2..18].try_into().unwrap();
        for j in 0..16 {
            d.q[0][j] = ((qs[j] & 0x0f) as i32 - 8) as f32;
            d.q[0][j + 16] = ((qs[j] >> 4) as i32 - 8) as f32;
        }
        d.scale[0] = f16_at(b, 0);
    }
}

struct Q5_0;
impl Blocks for Q5_0 {
    const TY: GgmlType = GgmlType::Q5_0;
    const GROUPS: usize = 1;
    const MINS: bool = false;
    #[inline(always)]
    fn decode(b: &[u8], d: &mut Decoded) {
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let qs: &[u8; 16] = b[6..22].try_into().unwrap();
        for j in 0..16 {
            let (x0, x1) = super::q5_pair(qh, qs[j], j);
            d.q[0][j] = (x0 as i32 - 16) as f32;
            d.q[0][j + 16] = (x1 as i32 - 16) as f32;
        }
        d.scale[0] = f16_at(b, 0);
    }
}

struct Q8_0;
impl Blocks for Q8_0 {
    const TY: GgmlType = GgmlType::Q8_0;
    const GROUPS: usize = 1;
    const MINS: bool = false;
    #[inline(always)]
    fn decode(b: &[u8], d: &mut Decoded) {
        let qs: &[u8; 32] = b[2..34].try_into().unwrap();
        for j in 0..32 {
            d.q[0][j] = qs[j] as i8 as f32;
        }
        d.scale[0] = f16_at(b, 0);
    }
}

/// Scales and mins of a Q4_K/Q5_K block's eight groups.
#[inline(always)]
fn k4_scales(b: &[u8], d: &mut Decoded) {
    let (dd, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let scales = &b[4..16];
    for g in 0..8 {
        let (sc, m) = super::scale_min_k4(g, scales);
        d.scale[g] = dd * sc as f32;
        d.min[g] = dmin * m as f32;
    }
}

struct Q4K;
impl Blocks for Q4K {
    const TY: GgmlType = GgmlType::Q4_K;
    const GROUPS: usize = 8;
    const MINS: bool = true;
    #[inline(always)]
    fn decode(b: &[u8], d: &mut Decoded) {
        k4_scales(b, d);
        for n in 0..4 {
            let q: &[u8; 32] = b[16 + n * 32..48 + n * 32].try_into().unwrap();
            for l in 0..32 {
                d.q[2 * n][l] = (q[l] & 0x0f) as f32;
                d.q[2 * n + 1][l] = (q[l] >> 4) as f32;
            }
        }
    }
}

struct Q5K;
impl Blocks for Q5K {
    const TY: GgmlType = GgmlType::Q5_K;
    const GROUPS: usize = 8;
    const MINS: bool = true;
    #[inline(always)]
    fn decode(b: &[u8], d: &mut Decoded) {
        k4_scales(b, d);
        let qh: &[u8; 32] = b[16..48].try_into().unwrap();
        for n in 0..4 {
            let ql: &[u8; 32] = b[48 + n * 32..80 + n * 32].try_into().unwrap();
            for l in 0..32 {
                let h1 = ((qh[l] >> (2 * n)) & 1) << 4;
                let h2 = ((qh[l] >> (2 * n + 1)) & 1) << 4;
                d.q[2 * n][l] = ((ql[l] & 0x0f) | h1) as f32;
                d.q[2 * n + 1][l] = ((ql[l] >> 4) | h2) as f32;
            }
        }
    }
}

struct Q6K;
impl Blocks for Q6K {
    const TY: GgmlType = GgmlType::Q6_K;
    const GROUPS: usize = 8;
    const MINS: bool = false;
    #[inline(always)]
    fn decode(b: &[u8], d: &mut Decoded) {
        // Each 16 weights have their own int8 scale: `sc · (q − 32)` is an integer of at most
        // 128 · 32 in magnitude, so the f32 product is exact, and the block's `d` is the group
        // scale. (A float product: the integer one is a slow instruction on x86.)
        for n in 0..2 {
            let ql: &[u8; 64] = b[n * 64..n * 64 + 64].try_into().unwrap();
            let qh: &[u8; 32] = b[128 + n * 32..160 + n * 32].try_into().unwrap();
            let sc = &b[192 + n * 8..200 + n * 8];
            for l in 0..32 {
                let s = |t: usize| (sc[l / 16 + 2 * t] as i8) as f32;
                let q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                d.q[4 * n][l] = s(0) * q1 as f32;
                d.q[4 * n + 1][l] = s(1) * q2 as f32;
                d.q[4 * n + 2][l] = s(2) * q3 as f32;
                d.q[4 * n + 3][l] = s(3) * q4 as f32;
            }
        }
        d.scale = [f16_at(b, 208); MAX_GROUPS];
    }
}

#[inline(always)]
fn quant_rows<B: Blocks, V: Lanes>(bytes: &[u8], x: &Activations, out: &mut [f32]) {
    // One activation row (decoding) gets its own copy, with its accumulator in a register.
    if x.m == 1 {
        quant_rows_m::<B, V, 1>(bytes, x, out)
    } else {
        quant_rows_m::<B, V, MAX_ROWS>(bytes, x, out)
    }
}

/// [`quant_rows`] for at most `M` activation rows.
#[inline(always)]
fn quant_rows_m<B: Blocks, V: Lanes, const M: usize>(
    bytes: &[u8],
    x: &Activations,
    out: &mut [f32],
) {
    let (m, k) = (x.m.min(M), x.k);
    let block_bytes = padded_block_bytes(B::TY);
    let row_bytes = k / (G * B::GROUPS) * block_bytes;
    if row_bytes == 0 {
        return;
    }
    let n = bytes.len() / row_bytes;
    let mut d = Decoded {
        q: [[0.0; G]; MAX_GROUPS],
        scale: [0.0; MAX_GROUPS],
        min: [0.0; MAX_GROUPS],
    };
    for (r, row) in bytes.chunks_exact(row_bytes).enumerate() {
        // Lane sums of `scale · Σ q·x`, reduced once per row, and the `min · Σ x` terms.
        let mut acc = [V::zero(); M];
        let mut mins = [0f32; M];
        for (b, block) in row.chunks_exact(block_bytes).enumerate() {
            B::decode(block, &mut d);
            for g in 0..B::GROUPS {
                let at = (b * B::GROUPS + g) * G;
                for i in 0..m {
                    let xg: &[f32; G] = x.xs[i * k + at..i * k + at + G].try_into().unwrap();
                    let t = dot_group::<V>(&d.q[g], xg);
                    acc[i] = V::mul_add(V::splat(d.scale[g]), t, acc[i]);
                    if B::MINS {
                        mins[i] += d.min[g] * x.sums[(i * k + at) / G];
                    }
                }
            }
        }
        for i in 0..m {
            out[i * n + r] = acc[i].sum() - mins[i];
        }
    }
}

#[inline(always)]
fn float_rows<V: Lanes>(ty: GgmlType, words: &[u32], x: &Activations, out: &mut [f32]) {
    let (m, k) = (x.m, x.k);
    let wpr = super::pack::row_words(ty, k);
    let n = words.len() / wpr.max(1);
    let mut row = vec![0f32; k];
    for (r, w) in words.chunks_exact(wpr).enumerate() {
        dequantize_packed(ty, w, k, &mut row).expect("rows are whole");
        for i in 0..m {
            out[i * n + r] = dot::<V>(&x.xs[i * k..(i + 1) * k], &row);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::pack::pack_rows;
    use crate::quant::{dequantize_vec, random_blocks};
    use crate::rng::SplitMix64;

    /// `factored` says what `by_type` does: a dequantised-rows type gives `float_rows`' bits
    /// exactly, a factored one (another summation order) does not on random blocks.
    #[test]
    fn factored_names_the_types_multiplied_block_by_block() {
        for ty in GgmlType::all().filter(|t| t.is_supported()) {
            let k = if ty.block_size() == 1 { 64 } else { 512 };
            let bytes = random_blocks(ty, 4 * k, 3);
            let words = pack_rows(ty, &bytes, 4, k).unwrap();
            let mut rng = SplitMix64::new(5);
            let xs: Vec<f32> = (0..k).map(|_| rng.unit_f32() * 2.0 - 1.0).collect();
            let x = Activations::new(&xs, k);
            let (mut a, mut b) = (vec![0f32; 4], vec![0f32; 4]);
            by_type::<Portable>(ty, &words, &x, &mut a);
            float_rows::<Portable>(ty, &words, &x, &mut b);
            let same = a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits());
            assert_eq!(same, !factored(ty), "{ty}");
        }
    }

    /// Every type, both compiled forms where the CPU has AVX2/FMA, against f64 products of the
    /// reference dequantisation, within the summation bound the device kernels are held to.
    #[test]
    fn fused_rows_equal_dequantised_products() {
        for ty in GgmlType::all().filter(|t| t.is_supported()) {
            let k = if ty.block_size() == 1 { 75 } else { 512 };
            for (m, n) in [(1usize, 5usize), (3, 4), (8, 2)] {
                let bytes = random_blocks(ty, n * k, 7 + m as u64);
                let w = dequantize_vec(ty, &bytes, n * k).unwrap();
                let words = pack_rows(ty, &bytes, n, k).unwrap();
                let mut rng = SplitMix64::new(m as u64);
                let xs: Vec<f32> = (0..m * k).map(|_| rng.unit_f32() * 2.0 - 1.0).collect();
                let x = Activations::new(&xs, k);
                let mut outs = vec![vec![0f32; m * n]];
                by_type::<Portable>(ty, &words, &x, &mut outs[0]);
                #[cfg(target_arch = "x86_64")]
                if avx2::available() {
                    let mut o = vec![0f32; m * n];
                    // SAFETY: the CPU has AVX2 and FMA (checked just above).
                    unsafe { dot_rows_avx2(ty, &words, &x, &mut o) };
                    outs.push(o);
                }
                for out in &outs {
                    let (ratio, i, r, exact) =
                        crate::quant::conformance::worst_error(&xs, &w, out, m, n, k);
                    assert!(
                        ratio <= 1.0,
                        "{ty} m={m} out[{i},{r}]: {} vs {exact} ({ratio:.2}× the bound)",
                        out[i * n + r]
                    );
                }
            }
        }
    }

    #[test]
    fn half_conversion_is_exact_for_every_input() {
        for h in 0..=u16::MAX {
            let (got, want) = (f16_to_f32(h), half::f16::from_bits(h).to_f32());
            if want.is_nan() {
                assert!(got.is_nan(), "{h:#06x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{h:#06x}");
            }
        }
    }

    #[test]
    fn rows_without_whole_groups_take_the_float_path() {
        let xs = vec![1.0f32; 75];
        let x = Activations::new(&xs, 75);
        assert!(x.sums.is_empty());
        let words = pack_rows(GgmlType::F32, &[0u8; 300], 1, 75).unwrap();
        let mut out = [f32::NAN];
        dot_rows(GgmlType::F32, &words, &x, &mut out);
        assert_eq!(out, [0.0]);
    }
}
