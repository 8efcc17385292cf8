//! Runs of 4 weights and 4 inputs, decoded or read into workgroup memory or registers: what the
//! naive and tiled products stage a step.

// CubeCL needs a variable declared before runtime branches assign it; rustc cannot see that
// the expansion reads the initial value.
#![allow(unused_assignments)]

use burn_cubecl::cubecl;
use burn_cubecl::cubecl::prelude::*;

use super::blocks::*;
use super::ty;

/// Weights `j0 .. j0 + 4` of the row at word `row` (type `ty`, `k` weights) into
/// `ws[at ..]` (workgroup memory, or an invocation's registers), 0 past the row's end. A run of
/// a block type lies in one block or sub-block (`j0` is a multiple of 4, and the row a whole
/// number of blocks of 32 or 256 weights, which every step of 16 or 32 divides, so `j0 < k`),
/// so its four quants share one or two words and one scale: one load of each and one widening
/// of the scale where [`dequant_one`] makes them per weight (a Q8_0 pair's products on
/// SwiftShader: see `bench/JOURNAL.md` and
/// bench/results/ci-vm-2core-swiftshader-quant-runs-browser-vs-native.json). The values are
/// [`dequant_one`]'s, bit for bit.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn stage_run<H: CubePrimitive, L: List<f32>>(
    w: &Tensor<u32>,
    wh: &Tensor<H>,
    row: usize,
    j0: usize,
    k: usize,
    ws: &mut L,
    at: usize,
    #[comptime] ty: u32,
    #[comptime] native: bool,
) {
    if comptime!(ty == ty::Q4_K) {
        let base = row + (j0 / 256) * 36;
        let i = j0 % 256;
        let n = i / 64;
        let within = i % 64;
        let d = half_at(w, wh, base, 0, native);
        let dmin = half_at(w, wh, base, 1, native);
        let (sc, mn) = scale_min_k4(w, base, 4, 2 * n + within / 32);
        let mut word = w[base + 4 + (n * 32 + within % 32) / 4];
        if within >= 32 {
            word >>= 4u32;
        }
        #[unroll]
        for t in 0..4u32 {
            let q = (word >> (8 * t)) & 0xFu32;
            ws[at + t as usize] = d * sc * f32::cast_from(q) - dmin * mn;
        }
    } else if comptime!(ty == ty::Q6_K) {
        let base = row + (j0 / 256) * 53;
        let i = j0 % 256;
        let n = i / 128;
        let w128 = i % 128;
        let l = w128 % 32;
        let quarter = w128 / 32;
        let d = half_at(w, wh, base + 52, 0, native);
        let sc = signed_byte(byte_at(w, base, 192 + n * 8 + l / 16 + 2 * quarter));
        let mut ql = w[base + (n * 64 + l + (quarter % 2) * 32) / 4];
        if quarter >= 2 {
            ql >>= 4u32;
        }
        let qh = w[base + (128 + n * 32 + l) / 4] >> ((2 * quarter) as u32);
        #[unroll]
        for t in 0..4u32 {
            let lo = (ql >> (8 * t)) & 0xFu32;
            let hi = (qh >> (8 * t)) & 3u32;
            ws[at + t as usize] = d * sc * (f32::cast_from(lo | (hi << 4u32)) - 32.0f32);
        }
    } else if comptime!(ty == ty::Q8_0) {
        // {f16 d; i8 qs[32]} padded to 9 words: the run's quants are bytes 2 + i .. 6 + i, the
        // high half of word i / 4 and the low half of the next.
        let base = row + (j0 / 32) * 9;
        let i = j0 % 32;
        let d = half_at(w, wh, base, 0, native);
        let qs = straddle(w[base + i / 4], w[base + i / 4 + 1]);
        #[unroll]
        for t in 0..4u32 {
            ws[at + t as usize] = signed_byte((qs >> (8 * t)) & 0xFFu32) * d;
        }
    } else if comptime!(ty == ty::Q4_0) {
        // {f16 d; u8 qs[16]} padded to 5 words: weights i and i + 16 share byte 2 + i.
        let base = row + (j0 / 32) * 5;
        let i = j0 % 32;
        let l = i % 16;
        let d = half_at(w, wh, base, 0, native);
        let mut qs = straddle(w[base + l / 4], w[base + l / 4 + 1]);
        if i >= 16 {
            qs >>= 4u32;
        }
        #[unroll]
        for t in 0..4u32 {
            ws[at + t as usize] = (f32::cast_from((qs >> (8 * t)) & 0xFu32) - 8.0f32) * d;
        }
    } else if comptime!(ty == ty::Q5_0) {
        // {f16 d; u8 qh[4]; u8 qs[16]} padded to 6 words: qh is bytes 2 .. 6, qs from byte 6.
        let base = row + (j0 / 32) * 6;
        let i = j0 % 32;
        let l = i % 16;
        let d = half_at(w, wh, base, 0, native);
        let qh = straddle(w[base], w[base + 1]);
        let qs = straddle(w[base + 1 + l / 4], w[base + 2 + l / 4]);
        #[unroll]
        for t in 0..4u32 {
            let mut q = 0u32;
            if i < 16 {
                q = ((qs >> (8 * t)) & 0xFu32) | (((qh >> (i as u32 + t)) << 4u32) & 0x10u32);
            } else {
                q = ((qs >> (8 * t + 4)) & 0xFu32) | ((qh >> (i as u32 + t - 4u32)) & 0x10u32);
            }
            ws[at + t as usize] = (f32::cast_from(q) - 16.0f32) * d;
        }
    } else if comptime!(ty == ty::Q5_K) {
        // {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]} = 44 words.
        let base = row + (j0 / 256) * 44;
        let i = j0 % 256;
        let n = i / 64;
        let within = i % 64;
        let l = within % 32;
        let d = half_at(w, wh, base, 0, native);
        let dmin = half_at(w, wh, base, 1, native);
        let (sc, mn) = scale_min_k4(w, base, 4, 2 * n + within / 32);
        let mut ql = w[base + (48 + n * 32 + l) / 4];
        let mut bit = 1u32 << ((2 * n) as u32);
        if within >= 32 {
            ql >>= 4u32;
            bit = 2u32 << ((2 * n) as u32);
        }
        let qh = w[base + (16 + l) / 4];
        #[unroll]
        for t in 0..4u32 {
            let mut q = (ql >> (8 * t)) & 0xFu32;
            if ((qh >> (8 * t)) & bit) != 0u32 {
                q += 16u32;
            }
            ws[at + t as usize] = d * sc * f32::cast_from(q) - dmin * mn;
        }
    } else {
        #[unroll]
        for t in 0..4usize {
            let mut v = 0.0f32;
            if j0 + t < k {
                v = dequant_one(w, wh, row, j0 + t, ty, native);
            }
            ws[at + t] = v;
        }
    }
}

/// Weights `j0 .. j0 + 4` of row `r` of a product's matrix into `ws[at ..]`, 0 past row `n`:
/// [`stage_run`] of the `n1` rows of `w` (type `ty`, `rw` words a row), then, when `stacked`,
/// of the rows of `w2` (type `ty2`, `rw2` words a row). Two buffers of two block types read as
/// one matrix: a layer's Q4_K q and k rows and its Q6_K v rows in one dispatch.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn stage_weight_run<H: CubePrimitive, L: List<f32>>(
    w: &Tensor<u32>,
    wh: &Tensor<H>,
    w2: &Tensor<u32>,
    wh2: &Tensor<H>,
    r: usize,
    j0: usize,
    k: usize,
    n: usize,
    n1: usize,
    rw: usize,
    rw2: usize,
    ws: &mut L,
    at: usize,
    #[comptime] ty: u32,
    #[comptime] ty2: u32,
    #[comptime] stacked: bool,
    #[comptime] native: bool,
) {
    if r < n {
        if comptime!(stacked) {
            if r < n1 {
                stage_run::<H, L>(w, wh, r * rw, j0, k, ws, at, ty, native);
            } else {
                stage_run::<H, L>(w2, wh2, (r - n1) * rw2, j0, k, ws, at, ty2, native);
            }
        } else {
            stage_run::<H, L>(w, wh, r * rw, j0, k, ws, at, ty, native);
        }
    } else {
        #[unroll]
        for t in 0..4usize {
            ws[at + t] = 0.0f32;
        }
    }
}

/// Inputs `j0 .. j0 + 4` of the row of `x` at `xb` (`k` long; `j0` a multiple of 4) into
/// `xs[at ..]`, 0 past `k`: one 16-byte read when `x` is bound as fours (`V` = 4, which the
/// launch picks when 4 divides `k`, so a run never crosses the row's end), four reads otherwise.
/// A browser clamps every storage read to its buffer (WebGPU's robustness; cubecl-wgpu turns
/// naga's bounds checks off natively), and on a software adapter the clamps cost about what the
/// products do, so one clamped read a run pays where four did
/// (bench/results/ci-vm-2core-swiftshader-robustness-x-runs.json; `bench/JOURNAL.md`).
#[cube]
pub(super) fn input_run<V: Size, L: List<f32>>(
    x: &Tensor<Vector<f32, V>>,
    xb: usize,
    j0: usize,
    k: usize,
    xs: &mut L,
    at: usize,
) {
    let size = V::value().comptime();
    if comptime!(size == 4) {
        // 4 divides `k` and `j0`: the run lies wholly inside the row or wholly past it.
        let mut v = Vector::<f32, V>::zeroed();
        if j0 < k {
            v = x[(xb + j0) / 4];
        }
        #[unroll]
        for t in 0..4usize {
            xs[at + t] = v.extract(t);
        }
    } else {
        #[unroll]
        for t in 0..4usize {
            let mut xv = 0.0f32;
            if j0 + t < k {
                xv = x[xb + j0 + t].extract(0usize);
            }
            xs[at + t] = xv;
        }
    }
}

/// Inputs `j0 .. j0 + 4` of row `r` of `x` (`m` rows of `k`) into `xs[at ..]`, 0 past either
/// end ([`input_run`]).
#[cube]
pub(super) fn stage_input_run<V: Size, L: List<f32>>(
    x: &Tensor<Vector<f32, V>>,
    r: usize,
    j0: usize,
    m: usize,
    k: usize,
    xs: &mut L,
    at: usize,
) {
    if r < m {
        input_run::<V, L>(x, r * k, j0, k, xs, at);
    } else {
        #[unroll]
        for t in 0..4usize {
            xs[at + t] = 0.0f32;
        }
    }
}
