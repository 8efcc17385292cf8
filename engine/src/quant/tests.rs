use super::*;

fn h(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

#[test]
fn q8_0_is_scale_times_int8() {
    let mut b = vec![0u8; 34];
    b[..2].copy_from_slice(&h(0.5));
    for j in 0..32 {
        b[2 + j] = (j as i8 - 16) as u8;
    }
    let y = dequantize_vec(GgmlType::Q8_0, &b, 32).unwrap();
    for (j, v) in y.iter().enumerate() {
        assert_eq!(*v, (j as f32 - 16.0) * 0.5);
    }
}

#[test]
fn q4_0_low_nibbles_first_then_high() {
    let mut b = vec![0u8; 18];
    b[..2].copy_from_slice(&h(2.0));
    b[2] = 0xF0; // weight 0 -> 0-8, weight 16 -> 15-8
    let y = dequantize_vec(GgmlType::Q4_0, &b, 32).unwrap();
    assert_eq!((y[0], y[16], y[1]), (-16.0, 14.0, -16.0));
}

#[test]
fn q5_0_takes_fifth_bit_from_qh() {
    let mut b = vec![0u8; 22];
    b[..2].copy_from_slice(&h(1.0));
    // bit 0 of qh -> weight 0, bit 16 -> weight 16.
    b[2..6].copy_from_slice(&(1u32 | (1 << 16)).to_le_bytes());
    b[6] = 0x21; // weight 0 low nibble 1, weight 16 low nibble 2
    let y = dequantize_vec(GgmlType::Q5_0, &b, 32).unwrap();
    assert_eq!(y[0], (1 + 16 - 16) as f32);
    assert_eq!(y[16], (2 + 16 - 16) as f32);
    assert_eq!(y[1], -16.0);
}

#[test]
fn k4_scales_unpack_all_eight_subblocks() {
    // Scales 1..=8 and mins 11..=18 packed as ggml's quantize_row_q4_K does.
    let (ls, lm): (Vec<u8>, Vec<u8>) = (1..=8).map(|i| (i, i + 10)).unzip();
    let mut q = [0u8; 12];
    for j in 0..8 {
        if j < 4 {
            q[j] = ls[j];
            q[j + 4] = lm[j];
        } else {
            q[j + 4] = (ls[j] & 0xF) | ((lm[j] & 0xF) << 4);
            q[j - 4] |= (ls[j] >> 4) << 6;
            q[j] |= (lm[j] >> 4) << 6;
        }
    }
    for j in 0..8 {
        assert_eq!(scale_min_k4(j, &q), (ls[j], lm[j]), "sub-block {j}");
    }
}

#[test]
fn q4_k_uses_per_subblock_scale_and_min() {
    let mut b = vec![0u8; 144];
    b[..2].copy_from_slice(&h(1.0));
    b[2..4].copy_from_slice(&h(0.5));
    b[4] = 3; // scale of sub-block 0
    b[8] = 4; // min of sub-block 0
    b[5] = 7; // scale of sub-block 1
    b[16] = 0x52; // weight 0 nibble 2, weight 32 nibble 5
    let y = dequantize_vec(GgmlType::Q4_K, &b, 256).unwrap();
    assert_eq!(y[0], 3.0 * 2.0 - 0.5 * 4.0);
    assert_eq!(y[32], 7.0 * 5.0);
}

#[test]
fn q6_k_layout_matches_ggml() {
    let mut b = vec![0u8; 210];
    b[208..210].copy_from_slice(&h(0.25));
    for s in 0..16 {
        b[192 + s] = (s as i8 - 8) as u8;
    }
    b[0] = 0x3A; // weight 0 low bits 0xA, weight 64 low bits 0x3
    b[128] = 0b11_01_10_01; // high bits: w0 01, w32 10, w64 01, w96 11
    let y = dequantize_vec(GgmlType::Q6_K, &b, 256).unwrap();
    let sc = |i: usize| i as f32 - 8.0;
    assert_eq!(y[0], 0.25 * sc(0) * ((0xA | (1 << 4)) as f32 - 32.0));
    assert_eq!(y[32], 0.25 * sc(2) * ((2 << 4) as f32 - 32.0));
    assert_eq!(y[64], 0.25 * sc(4) * ((0x3 | (1 << 4)) as f32 - 32.0));
    assert_eq!(y[96], 0.25 * sc(6) * ((3 << 4) as f32 - 32.0));
    // Second half uses the next 64 ql bytes, 32 qh bytes and 8 scales.
    assert_eq!(y[128], 0.25 * sc(8) * -32.0);
}

#[test]
fn float_types_convert_exactly() {
    let b: Vec<u8> = [1.5f32, -2.25]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(
        dequantize_vec(GgmlType::F32, &b, 2).unwrap(),
        vec![1.5, -2.25]
    );
    let b: Vec<u8> = h(0.333).into_iter().chain(h(-7.0)).collect();
    assert_eq!(
        dequantize_vec(GgmlType::F16, &b, 2).unwrap(),
        vec![f16::from_f32(0.333).to_f32(), -7.0]
    );
    let b: Vec<u8> = [0x3f80u16, 0xc040]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(
        dequantize_vec(GgmlType::BF16, &b, 2).unwrap(),
        vec![1.0, -3.0]
    );
}

#[test]
fn size_mismatch_and_unsupported_are_errors() {
    assert!(matches!(
        dequantize_vec(GgmlType::Q8_0, &[0; 33], 32),
        Err(QuantError::SizeMismatch { .. })
    ));
    assert!(matches!(
        dequantize_vec(GgmlType::IQ1_S, &[0; 50], 256),
        Err(QuantError::Unsupported(GgmlType::IQ1_S))
    ));
}

#[test]
fn random_blocks_are_finite_for_every_supported_type() {
    for ty in GgmlType::all().filter(|t| t.is_supported()) {
        let n = 512;
        let b = random_blocks(ty, n, 42);
        let y = dequantize_vec(ty, &b, n).unwrap();
        assert!(y.iter().all(|v| v.is_finite()), "{ty}");
        assert!(y.iter().any(|v| *v != 0.0), "{ty}");
    }
}

#[test]
fn an_unsupported_type_names_every_supported_one() {
    let e = QuantError::Unsupported(GgmlType::IQ1_S).to_string();
    assert_eq!(
        e,
        "tensor type IQ1_S is not supported (supported: F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, \
         Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ2_XS, IQ3_XXS, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, \
         BF16)"
    );
}
