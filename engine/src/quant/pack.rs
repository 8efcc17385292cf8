//! The device layout of GGUF weights: rows of blocks, each block padded to whole 32-bit words.
//!
//! GPU kernels read storage buffers as `u32` words; Q6_K (210 B), Q8_0 (34 B), Q5_0 (22 B) and
//! Q4_0 (18 B) blocks are not word-aligned, so each block is padded with zero bytes to a
//! multiple of 4. The padding is the only change: block bytes are kept verbatim, so the
//! repacking is lossless and the kernels decode exactly ggml's bits. F16/BF16 rows hold two
//! values per word (a row of odd length gets one zero half); F32 holds one. The IQ2/IQ3
//! codebook types are the exception: their blocks are expanded ([`super::iq::expand`], also
//! lossless) so that kernels need no codebook.

#[cfg(not(target_endian = "little"))]
compile_error!("packed GGUF rows are read as little-endian words (see dequantize_packed)");

use super::{QuantError, dequantize, iq};
use crate::gguf::GgmlType;

/// Bytes of one padded block (or 4 for F32, 2 for F16/BF16 element pairs handled per row).
pub fn padded_block_bytes(ty: GgmlType) -> usize {
    if iq::is_iq(ty) {
        return iq::expanded_bytes(ty);
    }
    (ty.type_size() as usize).next_multiple_of(4)
}

/// 32-bit words in one packed row of `k` weights.
pub fn row_words(ty: GgmlType, k: usize) -> usize {
    match ty {
        GgmlType::F32 => k,
        GgmlType::F16 | GgmlType::BF16 => k.div_ceil(2),
        _ => k / ty.block_size() as usize * padded_block_bytes(ty) / 4,
    }
}

/// Packs `n_rows` rows of `k` weights from GGUF bytes into device words.
pub fn pack_rows(
    ty: GgmlType,
    bytes: &[u8],
    n_rows: usize,
    k: usize,
) -> Result<Vec<u32>, QuantError> {
    if !ty.is_supported() {
        return Err(QuantError::Unsupported(ty));
    }
    let row_bytes = ty.bytes_for(k as u64).map(|b| b as usize);
    if row_bytes.map(|b| b * n_rows) != Some(bytes.len()) {
        return Err(QuantError::SizeMismatch {
            ty,
            bytes: bytes.len(),
            weights: n_rows * k,
        });
    }
    let row_bytes = row_bytes.unwrap_or(0);
    let words_per_row = row_words(ty, k);
    let mut out = Vec::with_capacity(n_rows * words_per_row);
    let mut buf = vec![0u8; words_per_row * 4];
    for row in bytes.chunks_exact(row_bytes.max(1)).take(n_rows) {
        buf.fill(0);
        match ty {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => buf[..row.len()].copy_from_slice(row),
            _ => {
                let (ts, pb) = (ty.type_size() as usize, padded_block_bytes(ty));
                for (i, block) in row.chunks_exact(ts).enumerate() {
                    if iq::is_iq(ty) {
                        iq::expand(ty, block, &mut buf[i * pb..(i + 1) * pb]);
                    } else {
                        buf[i * pb..i * pb + ts].copy_from_slice(block);
                    }
                }
            }
        }
        out.extend(
            buf.chunks_exact(4)
                .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])),
        );
    }
    Ok(out)
}

/// Dequantises packed rows back to f32 on the CPU (the flex backend's path and the kernels'
/// reference). `words` holds whole packed rows of `k` weights.
pub fn dequantize_packed(
    ty: GgmlType,
    words: &[u32],
    k: usize,
    out: &mut [f32],
) -> Result<(), QuantError> {
    let wpr = row_words(ty, k);
    let n_rows = out.len() / k.max(1);
    if words.len() != wpr * n_rows || out.len() != n_rows * k {
        return Err(QuantError::SizeMismatch {
            ty,
            bytes: words.len() * 4,
            weights: out.len(),
        });
    }
    let ts = ty.type_size() as usize;
    let pb = padded_block_bytes(ty);
    // The words were packed from little-endian bytes, and every target this runs on (x86-64,
    // aarch64, wasm32) is little-endian, so their memory is those bytes: no copy per row (which
    // cost decoding a third of its speed).
    let bytes: &[u8] = bytemuck::cast_slice(words);
    for (r, y) in out.chunks_exact_mut(k).enumerate() {
        let row_bytes = &bytes[r * wpr * 4..(r + 1) * wpr * 4];
        match ty {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
                let n = ty.bytes_for(k as u64).unwrap_or(0) as usize;
                dequantize(ty, &row_bytes[..n], y)?;
            }
            _ => {
                let bs = ty.block_size() as usize;
                for (b, yb) in y.chunks_exact_mut(bs).enumerate() {
                    if iq::is_iq(ty) {
                        iq::dequant_expanded(ty, &row_bytes[b * pb..(b + 1) * pb], yb);
                    } else {
                        dequantize(ty, &row_bytes[b * pb..b * pb + ts], yb)?;
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{dequantize_vec, random_blocks};

    #[test]
    fn packing_is_lossless_for_every_type() {
        for ty in GgmlType::all().filter(|t| t.is_supported()) {
            for (rows, k) in [(3usize, 256usize), (5, 512), (2, 768)] {
                let bytes = random_blocks(ty, rows * k, 11);
                let words = pack_rows(ty, &bytes, rows, k).unwrap();
                assert_eq!(words.len(), rows * row_words(ty, k), "{ty}");
                let mut back = vec![0f32; rows * k];
                dequantize_packed(ty, &words, k, &mut back).unwrap();
                assert_eq!(
                    back,
                    dequantize_vec(ty, &bytes, rows * k).unwrap(),
                    "{ty} {rows}x{k}"
                );
            }
        }
    }

    #[test]
    fn odd_f16_rows_get_one_padding_half() {
        let bytes = random_blocks(GgmlType::F16, 2 * 3, 1);
        let words = pack_rows(GgmlType::F16, &bytes, 2, 3).unwrap();
        assert_eq!(words.len(), 4);
        let mut back = vec![0f32; 6];
        dequantize_packed(GgmlType::F16, &words, 3, &mut back).unwrap();
        assert_eq!(back, dequantize_vec(GgmlType::F16, &bytes, 6).unwrap());
        assert!(pack_rows(GgmlType::F16, &bytes[..10], 2, 3).is_err());
    }
}
