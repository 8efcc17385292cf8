//! Decoding one weight of the types of [`crate::quant::small`] (Q4_1, Q5_1, Q2_K, Q3_K,
//! IQ4_NL, IQ4_XS), with the integer and float operations of the CPU reference in the same
//! order: [`super::dequant_one`]'s branch for them.

// CubeCL needs a variable declared before runtime branches assign it; rustc cannot see that
// the expansion reads the initial value.
#![allow(unused_assignments)]

use burn_cubecl::cubecl;
use burn_cubecl::cubecl::prelude::*;

use super::ty;
use super::words::{byte_at, half_at, signed_byte};

/// IQ4_NL's level for the four-bit index `q`, as f32: `kvalues_iq4nl` (the CPU's
/// `quant::small::KVALUES_IQ4NL`) as i8 bytes, four to a word.
#[cube]
fn iq4_level(q: u32) -> f32 {
    let mut word = 0xBFAD_9881u32;
    if q >= 12u32 {
        word = 0x7159_4535u32;
    } else if q >= 8u32 {
        word = 0x2619_0D01u32;
    } else if q >= 4u32 {
        word = 0xF6EA_DDCFu32;
    }
    signed_byte((word >> ((q % 4u32) * 8u32)) & 0xFFu32)
}

/// The nibble of weight `i` (of 32) in a Q4_0-style run of 16 bytes at byte `off`: weight
/// `i` in the low nibble of byte `i`, weight `i + 16` in the high one.
#[cube]
fn nibble(w: &Tensor<u32>, base: usize, off: usize, i: usize) -> u32 {
    let b = byte_at(w, base, off + i % 16);
    let mut q = b & 0xFu32;
    if i >= 16 {
        q = b >> 4u32;
    }
    q
}

/// Weight `j` of the packed row at word `row` of type `ty`, one of [`crate::quant::small`]'s.
#[cube]
pub(super) fn dequant_small<H: CubePrimitive>(
    w: &Tensor<u32>,
    wh: &Tensor<H>,
    row: usize,
    j: usize,
    #[comptime] ty: u32,
    #[comptime] native: bool,
) -> f32 {
    let mut v = 0.0f32;
    if comptime!(ty == ty::Q4_1) {
        // {f16 d; f16 m; u8 qs[16]} = 5 words.
        let base = row + (j / 32) * 5;
        let d = half_at(w, wh, base, 0, native);
        let m = half_at(w, wh, base, 1, native);
        v = f32::cast_from(nibble(w, base, 4, j % 32)) * d + m;
    } else if comptime!(ty == ty::Q5_1) {
        // {f16 d; f16 m; u8 qh[4]; u8 qs[16]} = 6 words.
        let base = row + (j / 32) * 6;
        let i = j % 32;
        let d = half_at(w, wh, base, 0, native);
        let m = half_at(w, wh, base, 1, native);
        let qh = w[base + 1];
        let mut q = nibble(w, base, 8, i);
        if i < 16 {
            q |= ((qh >> (i as u32)) << 4u32) & 0x10u32;
        } else {
            q |= (qh >> ((i - 16) as u32 + 12u32)) & 0x10u32;
        }
        v = f32::cast_from(q) * d + m;
    } else if comptime!(ty == ty::Q2_K) {
        // {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin} = 21 words.
        let base = row + (j / 256) * 21;
        let i = j % 256;
        let n = i / 128;
        let g = (i % 128) / 16;
        let l = i % 16;
        let d = half_at(w, wh, base + 20, 0, native);
        let dmin = half_at(w, wh, base + 20, 1, native);
        let sc = byte_at(w, base, n * 8 + g);
        let q = (byte_at(w, base, 16 + n * 32 + 16 * (g % 2) + l) >> ((2 * (g / 2)) as u32)) & 3u32;
        let dl = d * f32::cast_from(sc & 0xFu32);
        let ml = dmin * f32::cast_from(sc >> 4u32);
        v = dl * f32::cast_from(q) - ml;
    } else if comptime!(ty == ty::Q3_K) {
        // {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d} padded to 28 words.
        let base = row + (j / 256) * 28;
        let i = j % 256;
        let n = i / 128;
        let g = (i % 128) / 16;
        let l = i % 16;
        let s = n * 8 + g;
        let mut lo = 0u32;
        if s < 8 {
            lo = byte_at(w, base, 96 + s) & 0xFu32;
        } else {
            lo = byte_at(w, base, 96 + s - 8) >> 4u32;
        }
        let hi = (byte_at(w, base, 104 + s % 4) >> ((2 * (s / 4)) as u32)) & 3u32;
        let d = half_at(w, wh, base + 27, 0, native);
        let dl = d * (f32::cast_from(lo | (hi << 4u32)) - 32.0f32);
        let at = 16 * (g % 2) + l;
        let low = (byte_at(w, base, 32 + n * 32 + at) >> ((2 * (g / 2)) as u32)) & 3u32;
        let mut q = f32::cast_from(low);
        if (byte_at(w, base, at) & (1u32 << ((n * 4 + g / 2) as u32))) == 0u32 {
            q -= 4.0f32;
        }
        v = dl * q;
    } else if comptime!(ty == ty::IQ4_NL) {
        // {f16 d; u8 qs[16]} padded to 5 words.
        let base = row + (j / 32) * 5;
        let d = half_at(w, wh, base, 0, native);
        v = d * iq4_level(nibble(w, base, 2, j % 32));
    } else if comptime!(ty == ty::IQ4_XS) {
        // {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]} = 34 words.
        let base = row + (j / 256) * 34;
        let i = j % 256;
        let ib = i / 32;
        let d = half_at(w, wh, base, 0, native);
        let lo = (byte_at(w, base, 4 + ib / 2) >> ((4 * (ib % 2)) as u32)) & 0xFu32;
        let hi = (w[base] >> ((16 + 2 * ib) as u32)) & 3u32;
        let dl = d * (f32::cast_from(lo | (hi << 4u32)) - 32.0f32);
        v = dl * iq4_level(nibble(w, base, 8 + ib * 16, i % 32));
    }
    v
}
