//! Whether the adapter's native f16 widens every finite f16 exactly: the one probe that runs a
//! kernel (through [`QMatrix`]), apart from the choice it informs ([`super::choice`]).

use burn::tensor::Device;

use super::choice::{Half, NATIVE_HALF, shader_f16};
use super::qmatrix::{QMatrix, u32_tensor};
use crate::gguf::GgmlType;

/// Widens every finite f16 value with the native kernels and compares the bits with the CPU's
/// conversion; [`Half::Auto`] uses the native form only if all 63,488 agree. A shader's f16 may
/// flush subnormals (Vulkan and WebGPU allow it), and a block scale or an F16 weight below
/// 6.1e-5 is subnormal, so exactness is checked on the adapter rather than assumed. Returns
/// the verdict; runs once per process (the GPU device is opened once).
pub async fn probe_native_half(device: &Device) -> bool {
    if let Some(v) = NATIVE_HALF.get() {
        return *v;
    }
    // A native form that fails to compile or run is as unusable as an inexact one.
    let ok = match shader_f16(device) {
        Some(true) => native_half_exact(device).await.unwrap_or(false),
        _ => false,
    };
    *NATIVE_HALF.get_or_init(|| ok)
}

/// The finite f16 bit patterns, as the bytes of an F16 matrix of `[HALF_ROWS, 1024]`.
const HALF_ROWS: usize = 62;

/// Whether the native form widens every finite f16 (63,488 values, 62 rows of 1024) exactly.
pub async fn native_half_exact(device: &Device) -> Result<bool, String> {
    let (rows, cols) = (HALF_ROWS, 1024);
    let bits: Vec<u16> = (0..=u16::MAX)
        .filter(|b| b & 0x7C00 != 0x7C00)
        .chain(std::iter::repeat(0))
        .take(rows * cols)
        .collect();
    let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
    let q = QMatrix::upload(GgmlType::F16, &bytes, rows, cols, device, usize::MAX / 2)
        .map_err(|e| e.to_string())?;
    let ids: Vec<u32> = (0..rows as u32).collect();
    let got = q
        .gather_with(u32_tensor(ids, device), Half::Native)
        .into_data_async()
        .await
        .map_err(|e| format!("readback failed: {e:?}"))?
        .try_into_vec::<f32>()
        .map_err(|e| format!("{e:?}"))?;
    Ok(got.len() == bits.len()
        && got
            .iter()
            .zip(&bits)
            .all(|(g, &b)| g.to_bits() == half::f16::from_bits(b).to_f32().to_bits()))
}
