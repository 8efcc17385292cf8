//! Decoding one weight of the IQ2/IQ3 codebook types from their expanded blocks
//! ([`crate::quant::iq::expand`]): the code, sign and scale of each weight are stored in place,
//! so no codebook is read. The float operations are [`crate::quant::iq::dequant_expanded`]'s,
//! in its order: [`super::dequant_one`]'s branch for them.

// CubeCL needs a variable declared before runtime branches assign it; rustc cannot see that
// the expansion reads the initial value.
#![allow(unused_assignments)]

use burn_cubecl::cubecl;
use burn_cubecl::cubecl::prelude::*;

use super::ty;
use super::words::half_at;

/// Whether ggml type id `t` is an IQ2/IQ3 codebook type (decoded by [`dequant_iq`]).
pub const fn is_iq(t: u32) -> bool {
    matches!(
        t,
        ty::IQ2_XXS | ty::IQ2_XS | ty::IQ2_S | ty::IQ3_XXS | ty::IQ3_S
    )
}

/// Weight `j` of the expanded row at word `row` of type `ty`, one of [`is_iq`]'s.
#[cube]
pub(super) fn dequant_iq<H: CubePrimitive>(
    w: &Tensor<u32>,
    wh: &Tensor<H>,
    row: usize,
    j: usize,
    #[comptime] ty: u32,
    #[comptime] native: bool,
) -> f32 {
    let i = j % 256;
    let mut v = 0.0f32;
    let mut negative = false;
    if comptime!(ty == ty::IQ3_XXS || ty == ty::IQ3_S) {
        // {f16 d; 8 scale nibbles; 256 nibbles of sign·8 + code} = 34 words.
        let base = row + (j / 256) * 34;
        let d = half_at(w, wh, base, 0, native);
        let s = f32::cast_from((w[base + 1] >> (((i / 32) * 4) as u32)) & 0xFu32);
        let q = (w[base + 2 + i / 8] >> (((i % 8) * 4) as u32)) & 0xFu32;
        let code = q & 7u32;
        let mut db = 0.0f32;
        let mut level = 0.0f32;
        if comptime!(ty == ty::IQ3_XXS) {
            db = d * (0.5f32 + s) * 0.5f32;
            level = f32::cast_from(8u32 * code + 4u32);
            if code == 7u32 {
                level = 62.0f32;
            }
        } else {
            db = d * (1.0f32 + 2.0f32 * s);
            level = f32::cast_from(2u32 * code + 1u32);
        }
        v = db * level;
        negative = q >= 8u32;
    } else {
        // {f16 d; 16 scale nibbles; 256 sign bits; 256 two-bit codes} = 27 words.
        let base = row + (j / 256) * 27;
        let d = half_at(w, wh, base, 0, native);
        let s = f32::cast_from((w[base + 1 + i / 128] >> ((((i / 16) % 8) * 4) as u32)) & 0xFu32);
        let code = (w[base + 11 + i / 16] >> (((i % 16) * 2) as u32)) & 3u32;
        let db = d * (0.5f32 + s) * 0.25f32;
        let mut level = 8.0f32;
        if code == 1u32 {
            level = 25.0f32;
        } else if code >= 2u32 {
            level = 43.0f32;
        }
        v = db * level;
        negative = ((w[base + 3 + i / 32] >> ((i % 32) as u32)) & 1u32) == 1u32;
    }
    if negative {
        v = -v;
    }
    v
}
