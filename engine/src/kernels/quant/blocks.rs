//! Decoding one weight of a block, as [`crate::quant::dequantize`] does: the piece every product
//! and gather kernel builds on (with the word readers of [`super::words`], re-exported here).

// CubeCL needs a variable declared before runtime branches assign it; rustc cannot see that
// the expansion reads the initial value.
#![allow(unused_assignments)]

use burn_cubecl::cubecl;
use burn_cubecl::cubecl::prelude::*;

use super::iq::{dequant_iq, is_iq};
use super::small::dequant_small;
use super::ty;
pub(super) use super::words::*;

/// The 6-bit scale and min of K-quant sub-block `j`; `sbase` is the byte offset of the
/// 12 packed scale bytes within the block. ref: ggml-quants.c `get_scale_min_k4`.
#[cube]
pub(super) fn scale_min_k4(w: &Tensor<u32>, base: usize, sbase: usize, j: usize) -> (f32, f32) {
    let mut sc = 0u32;
    let mut m = 0u32;
    if j < 4 {
        sc = byte_at(w, base, sbase + j) & 63u32;
        m = byte_at(w, base, sbase + j + 4) & 63u32;
    } else {
        let hi = byte_at(w, base, sbase + j + 4);
        sc = (hi & 0xFu32) | ((byte_at(w, base, sbase + j - 4) >> 6u32) << 4u32);
        m = (hi >> 4u32) | ((byte_at(w, base, sbase + j) >> 6u32) << 4u32);
    }
    (f32::cast_from(sc), f32::cast_from(m))
}

/// Weight `j` of the packed row starting at word `row`; `native` widens f16 numbers with the
/// adapter's f16 type (see [`half_at`]).
#[cube]
pub fn dequant_one<H: CubePrimitive>(
    w: &Tensor<u32>,
    wh: &Tensor<H>,
    row: usize,
    j: usize,
    #[comptime] ty: u32,
    #[comptime] native: bool,
) -> f32 {
    let mut v = 0.0f32;
    if comptime!(ty == ty::F32) {
        v = f32::reinterpret(w[row + j]);
    } else if comptime!(ty == ty::F16) {
        v = half_at(w, wh, row + j / 2, j % 2, native);
    } else if comptime!(ty == ty::BF16) {
        let shift = ((j % 2) * 16) as u32;
        v = f32::reinterpret(((w[row + j / 2] >> shift) & 0xFFFFu32) << 16u32);
    } else if comptime!(ty == ty::Q8_0) {
        // {f16 d; i8 qs[32]} padded to 9 words.
        let base = row + (j / 32) * 9;
        let d = half_at(w, wh, base, 0, native);
        v = signed_byte(byte_at(w, base, 2 + j % 32)) * d;
    } else if comptime!(ty == ty::Q4_0) {
        // {f16 d; u8 qs[16]} padded to 5 words.
        let base = row + (j / 32) * 5;
        let i = j % 32;
        let d = half_at(w, wh, base, 0, native);
        let b = byte_at(w, base, 2 + i % 16);
        let mut q = b & 0xFu32;
        if i >= 16 {
            q = b >> 4u32;
        }
        v = (f32::cast_from(q) - 8.0f32) * d;
    } else if comptime!(ty == ty::Q5_0) {
        // {f16 d; u8 qh[4]; u8 qs[16]} padded to 6 words.
        let base = row + (j / 32) * 6;
        let i = j % 32;
        let d = half_at(w, wh, base, 0, native);
        let qh = straddle(w[base], w[base + 1]);
        let b = byte_at(w, base, 6 + i % 16);
        let mut q = 0u32;
        if i < 16 {
            q = (b & 0xFu32) | (((qh >> (i as u32)) << 4u32) & 0x10u32);
        } else {
            q = (b >> 4u32) | ((qh >> ((i - 16) as u32 + 12u32)) & 0x10u32);
        }
        v = (f32::cast_from(q) - 16.0f32) * d;
    } else if comptime!(ty == ty::Q4_K) {
        // {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]} = 36 words.
        let base = row + (j / 256) * 36;
        let i = j % 256;
        let d = half_at(w, wh, base, 0, native);
        let dmin = half_at(w, wh, base, 1, native);
        let n = i / 64;
        let within = i % 64;
        let (sc, m) = scale_min_k4(w, base, 4, 2 * n + within / 32);
        let b = byte_at(w, base, 16 + n * 32 + within % 32);
        let mut q = b & 0xFu32;
        if within >= 32 {
            q = b >> 4u32;
        }
        v = d * sc * f32::cast_from(q) - dmin * m;
    } else if comptime!(ty == ty::Q5_K) {
        // {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]} = 44 words.
        let base = row + (j / 256) * 44;
        let i = j % 256;
        let d = half_at(w, wh, base, 0, native);
        let dmin = half_at(w, wh, base, 1, native);
        let n = i / 64;
        let within = i % 64;
        let l = within % 32;
        let (sc, m) = scale_min_k4(w, base, 4, 2 * n + within / 32);
        let ql = byte_at(w, base, 48 + n * 32 + l);
        let qh = byte_at(w, base, 16 + l);
        let mut q = ql & 0xFu32;
        let mut bit = 1u32 << ((2 * n) as u32);
        if within >= 32 {
            q = ql >> 4u32;
            bit = 2u32 << ((2 * n) as u32);
        }
        if (qh & bit) != 0u32 {
            q += 16u32;
        }
        v = d * sc * f32::cast_from(q) - dmin * m;
    } else if comptime!(ty == ty::Q6_K) {
        // {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d} padded to 53 words.
        let base = row + (j / 256) * 53;
        let i = j % 256;
        let d = half_at(w, wh, base + 52, 0, native);
        let n = i / 128;
        let w128 = i % 128;
        let l = w128 % 32;
        let quarter = w128 / 32;
        let qh = byte_at(w, base, 128 + n * 32 + l);
        // Quarters 0/2 read ql[l], 1/3 read ql[l+32]; 0/1 take low nibbles, 2/3 high ones.
        let ql = byte_at(w, base, n * 64 + l + (quarter % 2) * 32);
        let mut lo = ql & 0xFu32;
        if quarter >= 2 {
            lo = ql >> 4u32;
        }
        let hi = (qh >> ((2 * quarter) as u32)) & 3u32;
        let q = f32::cast_from(lo | (hi << 4u32)) - 32.0f32;
        let sc = signed_byte(byte_at(w, base, 192 + n * 8 + l / 16 + 2 * quarter));
        v = d * sc * q;
    } else if comptime!(is_iq(ty)) {
        v = dequant_iq(w, wh, row, j, ty, native);
    } else {
        v = dequant_small(w, wh, row, j, ty, native);
    }
    v
}
