//! The CPU reference dequantisation of the block types of the smaller files people download:
//! Q4_1 and Q5_1 (the Q4_1 tensors `llama-quantize` puts in a "Q4_0" file), Q2_K and Q3_K
//! (Q2_K, Q3_K_S/M/L), and the non-linear IQ4_NL and IQ4_XS. Each follows ggml's
//! `dequantize_row_*` (ref: ggml/src/ggml-quants.c) operation for operation, as
//! [`super::dequantize`]'s other types do, so the f32 results are gguf-py's bit for bit.

use super::{f16_at, q5_pair};

/// IQ4_NL's and IQ4_XS's 16 levels (ref: ggml-common.h `kvalues_iq4nl`).
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// The levels of the two four-bit indices in byte `q` (weight `j` low, `j + 16` high), as f32.
#[inline(always)]
pub fn iq4_pair(q: u8) -> (f32, f32) {
    (
        KVALUES_IQ4NL[usize::from(q & 0x0f)] as f32,
        KVALUES_IQ4NL[usize::from(q >> 4)] as f32,
    )
}

/// `{f16 d; f16 m; u8 qs[16]}`: nibble j is weight j, high nibble weight j+16; `d·q + m`.
pub(super) fn q4_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let qs = &b[4..20];
    for j in 0..16 {
        y[j] = (qs[j] & 0x0f) as f32 * d + m;
        y[j + 16] = (qs[j] >> 4) as f32 * d + m;
    }
}

/// `{f16 d; f16 m; u8 qh[4]; u8 qs[16]}`: Q4_1 plus a fifth bit per weight from `qh`.
pub(super) fn q5_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    for j in 0..16 {
        let (x0, x1) = q5_pair(qh, qs[j], j);
        y[j] = x0 as f32 * d + m;
        y[j + 16] = x1 as f32 * d + m;
    }
}

/// `{u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}`: 16 groups of 16 two-bit weights, each with a
/// 4-bit scale (low nibble) and min (high nibble); `d·sc·q − dmin·m`.
pub(super) fn q2_k(b: &[u8], y: &mut [f32]) {
    let (d, min) = (f16_at(b, 80), f16_at(b, 82));
    let scales = &b[0..16];
    for (n, half) in y.chunks_exact_mut(128).enumerate() {
        let q = &b[16 + n * 32..48 + n * 32];
        for (g, out) in half.chunks_exact_mut(16).enumerate() {
            // Groups run shift 0 (q[0..16], q[16..32]), shift 2, … as ggml's loop does.
            let (shift, lo) = (2 * (g / 2), 16 * (g % 2));
            let sc = scales[n * 8 + g];
            let (dl, ml) = (d * (sc & 0x0f) as f32, min * (sc >> 4) as f32);
            for l in 0..16 {
                out[l] = dl * ((q[lo + l] >> shift) & 3) as f32 - ml;
            }
        }
    }
}

/// The 16 six-bit scales of a Q3_K block, before their offset of 32 (ggml unpacks them with
/// `kmask1`/`kmask2` over three words; this is the same bits, a scale at a time).
pub fn q3_k_scale(scales: &[u8], j: usize) -> i32 {
    let lo = if j < 8 {
        scales[j] & 0x0f
    } else {
        scales[j - 8] >> 4
    };
    let hi = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    i32::from(lo | (hi << 4))
}

/// `{u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}`: 16 groups of 16 three-bit weights (two
/// low bits in `qs`, the third in `hmask`, where a clear bit means −4) with signed 6-bit scales.
pub(super) fn q3_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 108);
    let hm = &b[0..32];
    let scales = &b[96..108];
    for (n, half) in y.chunks_exact_mut(128).enumerate() {
        let q = &b[32 + n * 32..64 + n * 32];
        for (g, out) in half.chunks_exact_mut(16).enumerate() {
            let (shift, lo) = (2 * (g / 2), 16 * (g % 2));
            let m = 1u8 << (n * 4 + g / 2);
            let dl = d * (q3_k_scale(scales, n * 8 + g) - 32) as f32;
            for l in 0..16 {
                let low = ((q[lo + l] >> shift) & 3) as i8;
                let high = if hm[lo + l] & m != 0 { 0 } else { 4 };
                out[l] = dl * (low - high) as f32;
            }
        }
    }
}

/// `{f16 d; u8 qs[16]}`: four-bit indices into [`KVALUES_IQ4NL`], laid out as Q4_0's nibbles.
pub(super) fn iq4_nl(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        let (l0, l1) = iq4_pair(qs[j]);
        y[j] = d * l0;
        y[j + 16] = d * l1;
    }
}

/// The six-bit scale of group `ib` (of 8) of an IQ4_XS block, before its offset of 32.
pub fn iq4_xs_scale(b: &[u8], ib: usize) -> i32 {
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    let lo = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0x0f;
    let hi = ((scales_h >> (2 * ib)) & 3) as u8;
    i32::from(lo | (hi << 4))
}

/// `{f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}`: 8 groups of 32 IQ4_NL indices, each
/// group with a signed six-bit scale.
pub(super) fn iq4_xs(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (ib, out) in y.chunks_exact_mut(32).enumerate() {
        let dl = d * (iq4_xs_scale(b, ib) - 32) as f32;
        let qs = &b[8 + ib * 16..24 + ib * 16];
        for j in 0..16 {
            let (l0, l1) = iq4_pair(qs[j]);
            out[j] = dl * l0;
            out[j + 16] = dl * l1;
        }
    }
}
