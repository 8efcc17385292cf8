//! GGUF block formats: the CPU reference dequantisation, bit-exact with ggml.
//!
//! Each `dequantize_*` follows ggml's `dequantize_row_*` (ref: ggml/src/ggml-quants.c) operation
//! for operation, including the order of float multiplications, so the f32 results are identical
//! bit for bit. The device kernels are tested against these functions.
//!
//! # Adding a block type
//! 1. [`crate::gguf::types`]: its row in `TABLE` (id, block size, bytes) and its name in
//!    `GgmlType::is_supported` (the "supported:" error text is built from that list).
//! 2. Here: its `dequantize_*` in [`dequantize`]'s match, ggml's order of operations kept, and
//!    its f16 fields in `f16_fields` (the kernels' `half` forms widen them).
//! 3. [`dot`]: a `Blocks` impl and its arm in `dot_rows` (the CPU path).
//! 4. [`crate::kernels::quant`]: its id in `ty` and its branch in the block decoder (the GPU
//!    path); `gpu.rs`: its arm in `by_type!`. [`pack`] needs nothing unless its blocks are not
//!    whole `u32` words (then note it where Q6_K, Q8_0 and Q5_0 are).
//! 5. `tests/reference/dequant_golden.py`: the type in `TYPES`; regenerate the golden. The
//!    native tests (`dequant_gguf_py`, `qkernels`) and the device self-test then cover it on
//!    the CPU and on every GPU form with no further code.
//!
//! # Block types
//! | type | weights / bytes a block | CPU product ([`dot`]) | GPU decoding ([`crate::kernels::quant`]) |
//! |---|---|---|---|
//! | F32, F16, BF16 | 1 / 4, 2, 2 | rows dequantised | per weight |
//! | Q4_0, Q5_0, Q8_0 | 32 / 18, 22, 34 | factored | runs of 4 |
//! | Q4_1, Q5_1 | 32 / 20, 24 | factored, with a min | per weight |
//! | IQ4_NL | 32 / 18 | factored (levels as `q`) | per weight |
//! | Q4_K | 256 / 144 | factored, with mins | runs of 4; chunked matrix–vector |
//! | Q5_K | 256 / 176 | factored, with mins | runs of 4 |
//! | Q6_K | 256 / 210 | factored (scales in `q`) | runs of 4; chunked matrix–vector |
//! | Q3_K | 256 / 110 | factored (scales in `q`) | per weight |
//! | IQ4_XS | 256 / 136 | factored (levels as `q`) | per weight |
//! | Q2_K | 256 / 84 | rows dequantised (a min per 16 weights) | per weight |
//!
//! Refused, with the error that names the tensor, its type and this list: Q8_1, Q8_K (never
//! stored), IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, TQ1_0, TQ2_0, MXFP4 and the
//! integer types.
//!
//! # Rooms
//! The CPU reference is this file and [`small`] (the types of the smaller downloads).
//! [`choice`] picks the kernel and f16 form for a device from
//! its probes ([`probe`] runs the one that needs a kernel); [`ops`] is the `QuantOps` backend
//! extension with its CPU implementation, `gpu.rs` the CubeCL one over
//! [`crate::kernels::quant`]; [`qmatrix`] is the weight matrix the model holds. Arrows run one
//! way: qmatrix → ops/choice, probe → qmatrix, gpu → ops/choice/kernels.

use half::{bf16, f16};

use crate::gguf::GgmlType;

pub mod choice;
#[doc(hidden)]
pub mod conformance;
pub mod dot;
mod gpu;
pub mod ops;
pub mod pack;
pub mod probe;
pub mod qmatrix;
pub mod small;

pub use choice::{GEMV_MAX_M, Half, Kernel, allow_software_subgroups, resolve};
pub use probe::native_half_exact;
pub use qmatrix::{MAX_CHUNK_BYTES, QMatrix};

/// Errors from dequantisation.
#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    /// The type has no dequantiser in this engine.
    #[error("tensor type {0} is not supported (supported: {list})", list = supported_names())]
    Unsupported(GgmlType),
    /// Byte and weight counts disagree.
    #[error("{ty}: {bytes} bytes cannot hold exactly {weights} weights")]
    SizeMismatch {
        /// Tensor type.
        ty: GgmlType,
        /// Bytes given.
        bytes: usize,
        /// Weights asked for.
        weights: usize,
    },
}

/// Weights per K-quant super-block.
pub const QK_K: usize = 256;

#[inline]
fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

/// Dequantises `out.len()` weights of type `ty` from `bytes` into `out`.
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    if !ty.is_supported() {
        return Err(QuantError::Unsupported(ty));
    }
    if ty.bytes_for(out.len() as u64) != Some(bytes.len() as u64) {
        return Err(QuantError::SizeMismatch {
            ty,
            bytes: bytes.len(),
            weights: out.len(),
        });
    }
    let bs = ty.block_size() as usize;
    let ts = ty.type_size() as usize;
    let blocks = bytes.chunks_exact(ts).zip(out.chunks_exact_mut(bs));
    match ty {
        GgmlType::F32 => blocks.for_each(|(b, y)| y[0] = f32::from_le_bytes(b.try_into().unwrap())),
        GgmlType::F16 => blocks.for_each(|(b, y)| y[0] = f16_at(b, 0)),
        GgmlType::BF16 => blocks
            .for_each(|(b, y)| y[0] = bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()),
        GgmlType::Q4_0 => blocks.for_each(|(b, y)| q4_0(b, y)),
        GgmlType::Q5_0 => blocks.for_each(|(b, y)| q5_0(b, y)),
        GgmlType::Q8_0 => blocks.for_each(|(b, y)| q8_0(b, y)),
        GgmlType::Q4_K => blocks.for_each(|(b, y)| q4_k(b, y)),
        GgmlType::Q5_K => blocks.for_each(|(b, y)| q5_k(b, y)),
        GgmlType::Q6_K => blocks.for_each(|(b, y)| q6_k(b, y)),
        GgmlType::Q4_1 => blocks.for_each(|(b, y)| small::q4_1(b, y)),
        GgmlType::Q5_1 => blocks.for_each(|(b, y)| small::q5_1(b, y)),
        GgmlType::Q2_K => blocks.for_each(|(b, y)| small::q2_k(b, y)),
        GgmlType::Q3_K => blocks.for_each(|(b, y)| small::q3_k(b, y)),
        GgmlType::IQ4_NL => blocks.for_each(|(b, y)| small::iq4_nl(b, y)),
        GgmlType::IQ4_XS => blocks.for_each(|(b, y)| small::iq4_xs(b, y)),
        _ => unreachable!("is_supported checked above"),
    }
    Ok(())
}

/// Dequantises a whole tensor into a new vector.
pub fn dequantize_vec(ty: GgmlType, bytes: &[u8], n: usize) -> Result<Vec<f32>, QuantError> {
    let mut out = vec![0.0; n];
    dequantize(ty, bytes, &mut out)?;
    Ok(out)
}

/// `{f16 d; u8 qs[16]}`: nibble j is weight j, high nibble weight j+16, both offset by 8.
fn q4_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        let x0 = (qs[j] & 0x0f) as i32 - 8;
        let x1 = (qs[j] >> 4) as i32 - 8;
        y[j] = x0 as f32 * d;
        y[j + 16] = x1 as f32 * d;
    }
}

/// The five-bit values of weights `j` and `j + 16` (`j < 16`) of a Q5_0/Q5_1 block: the nibbles
/// of `q = qs[j]` under bits `j` and `j + 16` of `qh` (ggml's `xh_0`, `xh_1`).
#[inline(always)]
pub(crate) fn q5_pair(qh: u32, q: u8, j: usize) -> (u32, u32) {
    let xh0 = ((qh >> j) << 4) & 0x10;
    let xh1 = (qh >> (j + 12)) & 0x10;
    ((q as u32 & 0x0f) | xh0, (q as u32 >> 4) | xh1)
}

/// `{f16 d; u8 qh[4]; u8 qs[16]}`: Q4_0 plus a fifth bit per weight from `qh`, offset by 16.
fn q5_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    for j in 0..16 {
        let (x0, x1) = q5_pair(qh, qs[j], j);
        y[j] = (x0 as i32 - 16) as f32 * d;
        y[j + 16] = (x1 as i32 - 16) as f32 * d;
    }
}

/// `{f16 d; i8 qs[32]}`.
fn q8_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for j in 0..32 {
        y[j] = (b[2 + j] as i8) as f32 * d;
    }
}

/// The 6-bit scale and min of sub-block `j` from the 12 packed bytes of Q4_K/Q5_K.
/// ref: ggml-quants.c `get_scale_min_k4`.
#[inline]
pub fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// `{f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}`: 8 sub-blocks of 32 with 6-bit scales/mins.
fn q4_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let min = f16_at(b, 2);
    let scales = &b[4..16];
    let qs = &b[16..144];
    for (n, chunk) in y.chunks_exact_mut(64).enumerate() {
        let q = &qs[n * 32..n * 32 + 32];
        let (sc, m) = scale_min_k4(2 * n, scales);
        let (d1, m1) = (d * sc as f32, min * m as f32);
        let (sc, m) = scale_min_k4(2 * n + 1, scales);
        let (d2, m2) = (d * sc as f32, min * m as f32);
        for l in 0..32 {
            chunk[l] = d1 * (q[l] & 0x0f) as f32 - m1;
            chunk[l + 32] = d2 * (q[l] >> 4) as f32 - m2;
        }
    }
}

/// `{f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}`: Q4_K plus a fifth bit from `qh`.
fn q5_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let min = f16_at(b, 2);
    let scales = &b[4..16];
    let qh = &b[16..48];
    let qs = &b[48..176];
    for (n, chunk) in y.chunks_exact_mut(64).enumerate() {
        let ql = &qs[n * 32..n * 32 + 32];
        let (u1, u2) = (1u8 << (2 * n), 2u8 << (2 * n));
        let (sc, m) = scale_min_k4(2 * n, scales);
        let (d1, m1) = (d * sc as f32, min * m as f32);
        let (sc, m) = scale_min_k4(2 * n + 1, scales);
        let (d2, m2) = (d * sc as f32, min * m as f32);
        for l in 0..32 {
            let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
            chunk[l] = d1 * ((ql[l] & 0x0f) + h1) as f32 - m1;
            chunk[l + 32] = d2 * ((ql[l] >> 4) + h2) as f32 - m2;
        }
    }
}

/// `{u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}`: 6-bit weights offset by 32, 16 scales.
fn q6_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 208);
    for (n, chunk) in y.chunks_exact_mut(128).enumerate() {
        let ql = &b[n * 64..n * 64 + 64];
        let qh = &b[128 + n * 32..128 + n * 32 + 32];
        let sc = &b[192 + n * 8..192 + n * 8 + 8];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            let s = |k: usize| sc[is + k] as i8 as f32;
            chunk[l] = d * s(0) * q1 as f32;
            chunk[l + 32] = d * s(2) * q2 as f32;
            chunk[l + 64] = d * s(4) * q3 as f32;
            chunk[l + 96] = d * s(6) * q4 as f32;
        }
    }
}

#[cfg(test)]
mod tests;

/// The types this engine reads, as GGUF names them, comma-separated.
pub fn supported_names() -> String {
    GgmlType::all()
        .filter(|t| t.is_supported())
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// How this engine multiplies weights of `ty`, in words: on a GPU backend (`gpu`) how the
/// kernels decode its blocks, on the CPU the form of its product ([`dot`]); `None` for a type
/// it does not read.
pub fn decoding(ty: GgmlType, gpu: bool) -> Option<&'static str> {
    use crate::kernels::quant::{gemv_chunked, staged_in_runs};
    if !ty.is_supported() {
        return None;
    }
    let id = ty.id();
    Some(match (gpu, dot::factored(ty)) {
        (true, _) if gemv_chunked(id) => "runs of 4, chunked matrix–vector",
        (true, _) if staged_in_runs(id) => "runs of 4",
        (true, _) => "weight by weight",
        (false, true) => "factored block products",
        (false, false) => "dequantised rows",
    })
}

/// Byte offsets of the f16 scale fields inside one block of `ty`.
pub(crate) fn f16_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        GgmlType::IQ4_NL | GgmlType::IQ4_XS => &[0],
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q4_1 | GgmlType::Q5_1 => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        _ => &[],
    }
}

/// Byte offset of a K-quant block's `dmin`, the scale of the mins it subtracts (real files keep
/// it positive); Q4_1/Q5_1 add a signed `m` instead.
fn dmin_field(ty: GgmlType) -> Option<usize> {
    match ty {
        GgmlType::Q4_K | GgmlType::Q5_K => Some(2),
        GgmlType::Q2_K => Some(82),
        _ => None,
    }
}

/// Random but well-formed blocks of `ty` holding `n` weights: every quant bit pattern occurs,
/// while scales are finite f16 values in ±2^-4..2^-1 and float weights lie in ±1, so kernels are
/// tested on all code paths without NaN or overflow.
pub fn random_blocks(ty: GgmlType, n: usize, seed: u64) -> Vec<u8> {
    let mut rng = crate::rng::SplitMix64::new(seed);
    let size = ty
        .bytes_for(n as u64)
        .expect("n must be a whole number of blocks") as usize;
    let mut bytes = vec![0u8; size];
    rng.fill_bytes(&mut bytes);
    let sane = |rng: &mut crate::rng::SplitMix64| {
        let mag = 2f32.powf(-4.0 + 3.0 * rng.unit_f32());
        if rng.next_u64() & 1 == 0 { mag } else { -mag }
    };
    match ty {
        GgmlType::F32 => bytes
            .chunks_exact_mut(4)
            .for_each(|c| c.copy_from_slice(&(2.0 * rng.unit_f32() - 1.0).to_le_bytes())),
        GgmlType::F16 => bytes.chunks_exact_mut(2).for_each(|c| {
            c.copy_from_slice(&f16::from_f32(2.0 * rng.unit_f32() - 1.0).to_le_bytes())
        }),
        GgmlType::BF16 => bytes.chunks_exact_mut(2).for_each(|c| {
            c.copy_from_slice(&bf16::from_f32(2.0 * rng.unit_f32() - 1.0).to_le_bytes())
        }),
        _ => {
            for block in bytes.chunks_exact_mut(ty.type_size() as usize) {
                for &at in f16_fields(ty) {
                    let v = sane(&mut rng);
                    // K-quant mins are subtracted, so keep dmin positive as real files do.
                    let v = if Some(at) == dmin_field(ty) {
                        v.abs()
                    } else {
                        v
                    };
                    block[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
                }
            }
        }
    }
    bytes
}
