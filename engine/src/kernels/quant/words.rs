//! Reading a packed row's words: a byte, an f16 number (in integer arithmetic or natively), a
//! signed byte, four bytes across two words. The block decoders ([`super::blocks`],
//! [`super::small`]) and the products' staged runs build on these.

use burn_cubecl::cubecl;
use burn_cubecl::cubecl::prelude::*;

/// Byte `off` of the block starting at word `base`.
#[cube]
pub(super) fn byte_at(w: &Tensor<u32>, base: usize, off: usize) -> u32 {
    let shift = ((off % 4) * 8) as u32;
    (w[base + off / 4] >> shift) & 0xFFu32
}

/// IEEE half bits to f32, exact for every value (subnormals included), without shader-f16.
#[cube]
pub(super) fn half_to_f32(h: u32) -> f32 {
    let sign = (h & 0x8000u32) << 16u32;
    let exp = (h >> 10u32) & 0x1Fu32;
    let mant = h & 0x3FFu32;
    let mut bits = 0u32;
    if exp == 0u32 {
        // Zero or subnormal: mant * 2^-24 is exact in f32.
        let mag = f32::cast_from(mant) * 5.960_464_5e-8f32;
        bits = u32::reinterpret(mag) | sign;
    } else if exp == 31u32 {
        bits = sign | 0x7F80_0000u32 | (mant << 13u32);
    } else {
        bits = sign | ((exp + 112u32) << 23u32) | (mant << 13u32);
    }
    f32::reinterpret(bits)
}

/// The f16 in half `hi` (0 low, 1 high) of word `i` of the packed rows, as an f32. `wh` is the
/// same buffer bound as f16 values; with `native` (shader-f16) the adapter converts one of
/// those, otherwise integer arithmetic widens the bits of `w` (`wh` is then unused). Both are
/// exact, so the two forms agree bit for bit.
#[cube]
pub(super) fn half_at<H: CubePrimitive>(
    w: &Tensor<u32>,
    wh: &Tensor<H>,
    i: usize,
    hi: usize,
    #[comptime] native: bool,
) -> f32 {
    let mut v = 0.0f32;
    if comptime!(native) {
        v = f32::cast_from(wh[2 * i + hi]);
    } else {
        v = half_to_f32((w[i] >> ((hi * 16) as u32)) & 0xFFFFu32);
    }
    v
}

/// A byte read as i8, as f32.
#[cube]
pub(super) fn signed_byte(b: u32) -> f32 {
    let mut v = f32::cast_from(b);
    if b >= 128u32 {
        v -= 256.0f32;
    }
    v
}

/// The 4 bytes that start at the high half of word `lo` and end in the low half of `hi`: bytes
/// that begin two bytes into a word, as a block's quants do after its f16 scale (Q8_0, Q4_0) or
/// after its scale and `qh` (Q5_0), and as Q5_0's `qh` does.
#[cube]
pub(super) fn straddle(lo: u32, hi: u32) -> u32 {
    (lo >> 16u32) | (hi << 16u32)
}
