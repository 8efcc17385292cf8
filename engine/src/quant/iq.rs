//! The IQ2 and IQ3 block types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S): codebook types, whose
//! weights come in groups of 8 (IQ2) or 4 (IQ3) looked up in a grid ([`super::iq_grids`]), each
//! with a sign bit and a 4-bit scale per 16 or 32 weights.
//!
//! On a device the blocks are kept *expanded*: each weight's grid code, its sign and its group's
//! scale stored in place, so a kernel decodes a weight with shifts and no table (WGSL in CubeCL
//! 0.11 has no constant arrays, and a codebook buffer would be one binding more in kernels that
//! already use six of WebGPU's eight). It costs memory: 108 bytes a block of 256 for the IQ2
//! types (66–82 in the file), 136 for the IQ3 ones (98–110). Expanding is lossless, and
//! [`dequantize_block`] is expand-then-decode, so the CPU reference and the kernels read the
//! same expanded codes; the values are ggml's `dequantize_row_iq*` bit for bit (checked against
//! gguf-py), `db · level · ±1` with ggml's order of float operations.

use super::f16_at;
use super::iq_grids::{IQ2S, IQ2XS, IQ2XXS, IQ3S, IQ3XXS};
use crate::gguf::GgmlType;

/// Bytes of an expanded IQ2 block: f16 `d` (word 0), 16 scale nibbles (words 1–2), 256 sign
/// bits (words 3–10), 256 two-bit codes (words 11–26).
pub const IQ2_EXPANDED: usize = 108;
/// Bytes of an expanded IQ3 block: f16 `d` (word 0), 8 scale nibbles (word 1), 256 nibbles of
/// a three-bit code under a sign bit (words 2–33).
pub const IQ3_EXPANDED: usize = 136;

/// The IQ2 types' levels by code (code 3 never occurs in a grid).
pub const IQ2_LEVELS: [f32; 4] = [8.0, 25.0, 43.0, 43.0];

/// Whether `ty` is one of this module's types.
pub fn is_iq(ty: GgmlType) -> bool {
    is_iq2(ty) || matches!(ty, GgmlType::IQ3_XXS | GgmlType::IQ3_S)
}

fn is_iq2(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::IQ2_XXS | GgmlType::IQ2_XS | GgmlType::IQ2_S)
}

/// Bytes of one expanded block of `ty` (an IQ type).
pub fn expanded_bytes(ty: GgmlType) -> usize {
    if is_iq2(ty) {
        IQ2_EXPANDED
    } else {
        IQ3_EXPANDED
    }
}

/// ggml's `ksigns_iq2xs`: seven stored sign bits and an eighth that makes their count even.
fn ksigns(i: u32) -> u32 {
    let i = i & 0x7f;
    i | ((i.count_ones() & 1) << 7)
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// One block's weights as codes, signs and scale nibbles, before they are laid out.
struct Codes {
    code: [u8; 256],
    sign: [bool; 256],
    /// Scale nibbles: per 16 weights for IQ2, per 32 for IQ3.
    scale: [u8; 16],
}

impl Codes {
    fn new() -> Codes {
        Codes {
            code: [0; 256],
            sign: [false; 256],
            scale: [0; 16],
        }
    }

    /// Sets the 8 weights from `at` from an IQ2 grid entry and a sign byte.
    fn iq2(&mut self, at: usize, entry: u16, signs: u32) {
        for j in 0..8 {
            self.code[at + j] = ((entry >> (2 * j)) & 3) as u8;
            self.sign[at + j] = (signs >> j) & 1 == 1;
        }
    }

    /// Sets the 4 weights from `at` from an IQ3 grid entry and four sign bits from `bit`.
    fn iq3(&mut self, at: usize, entry: u16, signs: u32, bit: usize) {
        for j in 0..4 {
            self.code[at + j] = ((entry >> (4 * j)) & 7) as u8;
            self.sign[at + j] = (signs >> (bit + j)) & 1 == 1;
        }
    }
}

/// Reads the codes of one GGUF block of `ty` (ggml's `dequantize_row_*` loops, without the floats).
fn codes(ty: GgmlType, b: &[u8]) -> Codes {
    let mut c = Codes::new();
    for ib in 0..8 {
        let at = 32 * ib;
        match ty {
            GgmlType::IQ2_XXS => {
                let (grid, aux) = (u32_at(b, 2 + 8 * ib), u32_at(b, 6 + 8 * ib));
                for l in 0..4 {
                    let entry = IQ2XXS[((grid >> (8 * l)) & 0xff) as usize];
                    c.iq2(at + 8 * l, entry, ksigns(aux >> (7 * l)));
                }
                c.scale[2 * ib] = (aux >> 28) as u8;
                c.scale[2 * ib + 1] = (aux >> 28) as u8;
            }
            GgmlType::IQ2_XS => {
                for l in 0..4 {
                    let q = u32::from(u16::from_le_bytes([
                        b[2 + 8 * ib + 2 * l],
                        b[3 + 8 * ib + 2 * l],
                    ]));
                    c.iq2(at + 8 * l, IQ2XS[(q & 511) as usize], ksigns(q >> 9));
                }
                c.scale[2 * ib] = b[66 + ib] & 0x0f;
                c.scale[2 * ib + 1] = b[66 + ib] >> 4;
            }
            GgmlType::IQ2_S => {
                let qh = u32::from(b[66 + ib]);
                for l in 0..4 {
                    let idx = u32::from(b[2 + 4 * ib + l]) | ((qh << (8 - 2 * l)) & 0x300);
                    c.iq2(
                        at + 8 * l,
                        IQ2S[idx as usize],
                        u32::from(b[34 + 4 * ib + l]),
                    );
                }
                c.scale[2 * ib] = b[74 + ib] & 0x0f;
                c.scale[2 * ib + 1] = b[74 + ib] >> 4;
            }
            GgmlType::IQ3_XXS => {
                let aux = u32_at(b, 66 + 4 * ib);
                for l in 0..4 {
                    let signs = ksigns(aux >> (7 * l));
                    let q = &b[2 + 8 * ib + 2 * l..];
                    c.iq3(at + 8 * l, IQ3XXS[q[0] as usize], signs, 0);
                    c.iq3(at + 8 * l + 4, IQ3XXS[q[1] as usize], signs, 4);
                }
                c.scale[ib] = (aux >> 28) as u8;
            }
            GgmlType::IQ3_S => {
                let qh = u32::from(b[66 + ib]);
                for l in 0..4 {
                    let q = &b[2 + 8 * ib + 2 * l..];
                    let i1 = u32::from(q[0]) | ((qh << (8 - 2 * l)) & 256);
                    let i2 = u32::from(q[1]) | ((qh << (7 - 2 * l)) & 256);
                    let signs = u32::from(b[74 + 4 * ib + l]);
                    c.iq3(at + 8 * l, IQ3S[i1 as usize], signs, 0);
                    c.iq3(at + 8 * l + 4, IQ3S[i2 as usize], signs, 4);
                }
                c.scale[ib] = (b[106 + ib / 2] >> (4 * (ib % 2))) & 0x0f;
            }
            _ => unreachable!("{ty} is not an IQ2/IQ3 type"),
        }
    }
    c
}

/// Expands one GGUF block of `ty` (`b`, its `type_size` bytes) into `out` (its
/// [`expanded_bytes`], zeroed).
pub fn expand(ty: GgmlType, b: &[u8], out: &mut [u8]) {
    let c = codes(ty, b);
    out[..2].copy_from_slice(&b[..2]);
    if is_iq2(ty) {
        for g in 0..16 {
            out[4 + g / 2] |= c.scale[g] << (4 * (g % 2));
        }
        for w in 0..256 {
            out[12 + w / 8] |= u8::from(c.sign[w]) << (w % 8);
            out[44 + w / 4] |= c.code[w] << (2 * (w % 4));
        }
    } else {
        for g in 0..8 {
            out[4 + g / 2] |= c.scale[g] << (4 * (g % 2));
        }
        for w in 0..256 {
            let nibble = c.code[w] | (u8::from(c.sign[w]) << 3);
            out[8 + w / 2] |= nibble << (4 * (w % 2));
        }
    }
}

/// The level of IQ3 code `q` (three bits) of `ty`, as ggml's grids hold it.
pub fn iq3_level(ty: GgmlType, q: u8) -> f32 {
    match (ty, q) {
        (GgmlType::IQ3_XXS, 7) => 62.0,
        (GgmlType::IQ3_XXS, q) => f32::from(8 * q + 4),
        (_, q) => f32::from(2 * q + 1),
    }
}

/// Decodes one expanded block of `ty` (see [`expand`]) into its 256 weights.
pub fn dequant_expanded(ty: GgmlType, e: &[u8], y: &mut [f32]) {
    let d = f16_at(e, 0);
    let nibble = |at: usize, i: usize| (e[at + i / 2] >> (4 * (i % 2))) & 0x0f;
    if is_iq2(ty) {
        for (w, out) in y.iter_mut().enumerate().take(256) {
            let db = d * (0.5 + f32::from(nibble(4, w / 16))) * 0.25;
            let code = (e[44 + w / 4] >> (2 * (w % 4))) & 3;
            let v = db * IQ2_LEVELS[code as usize];
            *out = if (e[12 + w / 8] >> (w % 8)) & 1 == 1 {
                -v
            } else {
                v
            };
        }
    } else {
        for (w, out) in y.iter_mut().enumerate().take(256) {
            let s = nibble(4, w / 32);
            let db = if ty == GgmlType::IQ3_XXS {
                d * (0.5 + f32::from(s)) * 0.5
            } else {
                d * f32::from(1 + 2 * s)
            };
            let q = nibble(8, w);
            let v = db * iq3_level(ty, q & 7);
            *out = if q & 8 != 0 { -v } else { v };
        }
    }
}

/// Dequantises one GGUF block of `ty`: [`expand`], then [`dequant_expanded`].
pub(super) fn dequantize_block(ty: GgmlType, b: &[u8], y: &mut [f32]) {
    let mut e = [0u8; IQ3_EXPANDED];
    expand(ty, b, &mut e);
    dequant_expanded(ty, &e, y);
}
