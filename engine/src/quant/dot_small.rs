//! [`super::Blocks`] for the types of [`crate::quant::small`]. Q2_K is not here: its 16-weight
//! groups each carry a min of their own, which the 32-weight groups of the factored form cannot
//! hold, so its rows are dequantised and multiplied (`float_rows`).

use super::{Blocks, Decoded, f16_at};
use crate::gguf::GgmlType;
use crate::quant::q5_pair;
use crate::quant::small::{iq4_pair, iq4_xs_scale, q3_k_scale};

pub(super) struct Q4_1;
impl Blocks for Q4_1 {
    const TY: GgmlType = GgmlType::Q4_1;
    const GROUPS: usize = 1;
    const MINS: bool = true;
    #[inline(always)]
    fn decode(b: &[u8], d: &mut Decoded) {
        let qs: &[u8; 16] = b[4..20].try_into().unwrap();
        for j in 0..16 {
            d.q[0][j] = (qs[j] & 0x0f) as f32;
            d.q[0][j + 16] = (qs[j] >> 4) as f32;
        }
        // `d·q + m`: the factored form subtracts its min.
        d.scale[0] = f16_at(b, 0);
        d.min[0] = -f16_at(b, 2);
    }
}

pub(super) struct Q5_1;
impl Blocks for Q5_1 {
    const TY: GgmlType = GgmlType::Q5_1;
    const GROUPS: usize = 1;
    const MINS: bool = true;
    #[inline(always)]
    fn decode(b: &[u8], d: &mut Decoded) {
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let qs: &[u8; 16] = b[8..24].try_into().unwrap();
        for j in 0..16 {
            let (x0, x1) = q5_pair(qh, qs[j], j);
            (d.q[0][j], d.q[0][j + 16]) = (x0 as f32, x1 as f32);
        }
        d.scale[0] = f16_at(b, 0);
        d.min[0] = -f16_at(b, 2);
    }
}

/// Q3_K: each 16-weight scale (−32..31) is folded into `q` (−4..3), which stays an exact
/// integer, as Q6_K's are.
pub(super) struct Q3K;
impl Blocks for Q3K {
    const TY: GgmlType = GgmlType::Q3_K;
    const GROUPS: usize = 8;
    const MINS: bool = false;
    #[inline(always)]
    fn decode(b: &[u8], d: &mut Decoded) {
        let hm: &[u8; 32] = b[0..32].try_into().unwrap();
        let scales = &b[96..108];
        for n in 0..2 {
            let q: &[u8; 32] = b[32 + n * 32..64 + n * 32].try_into().unwrap();
            for g in 0..8 {
                let (shift, lo) = (2 * (g / 2), 16 * (g % 2));
                let m = 1u8 << (n * 4 + g / 2);
                let sc = q3_k_scale(scales, n * 8 + g) - 32;
                let out = &mut d.q[(n * 8 + g) / 2][16 * (g % 2)..16 * (g % 2) + 16];
                for l in 0..16 {
                    let low = i32::from((q[lo + l] >> shift) & 3);
                    let high = if hm[lo + l] & m != 0 { 0 } else { 4 };
                    out[l] = (sc * (low - high)) as f32;
                }
            }
        }
        d.scale = [f16_at(b, 108); 8];
    }
}

pub(super) struct IQ4NL;
impl Blocks for IQ4NL {
    const TY: GgmlType = GgmlType::IQ4_NL;
    const GROUPS: usize = 1;
    const MINS: bool = false;
    #[inline(always)]
    fn decode(b: &[u8], d: &mut Decoded) {
        let qs: &[u8; 16] = b[2..18].try_into().unwrap();
        for j in 0..16 {
            (d.q[0][j], d.q[0][j + 16]) = iq4_pair(qs[j]);
        }
        d.scale[0] = f16_at(b, 0);
    }
}

pub(super) struct IQ4XS;
impl Blocks for IQ4XS {
    const TY: GgmlType = GgmlType::IQ4_XS;
    const GROUPS: usize = 8;
    const MINS: bool = false;
    #[inline(always)]
    fn decode(b: &[u8], d: &mut Decoded) {
        let dd = f16_at(b, 0);
        for g in 0..8 {
            let qs: &[u8; 16] = b[8 + g * 16..24 + g * 16].try_into().unwrap();
            for j in 0..16 {
                (d.q[g][j], d.q[g][j + 16]) = iq4_pair(qs[j]);
            }
            d.scale[g] = dd * (iq4_xs_scale(b, g) - 32) as f32;
        }
    }
}
