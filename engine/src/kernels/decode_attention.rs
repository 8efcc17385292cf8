//! Attention for a few query rows at head widths up to 256 (Gemma 3's decoder decoding), one
//! dispatch: one workgroup per query row and head.
//!
//! Why: [`super::fused_attention`] keeps a query row and its accumulator in one invocation's
//! registers, which caps the head width at 128, so MedGemma 4B's decoder (256) took the blocked path:
//! about 13 dispatches per layer and token (a KV-head expansion copy, two matmuls, mask, a
//! three-pass softmax). Here the workgroup's invocations split the work instead: each scores
//! one key of a chunk of 256 against the query (staged in workgroup memory), the chunk's
//! maximum and sum come from workgroup reductions, and each invocation then owns one output
//! channel, accumulating the chunk's weighted values (online softmax across chunks).
//!
//! Each invocation loops about `2 · s` times in all (a 256-term dot per key chunk, 256 weighted
//! values per chunk): under llvmpipe's 65535 loop iterations (see [`super::fused_attention`]) up to
//! ~30 000 keys. Prefill (many rows) keeps the blocked path, whose matmuls reuse each key across
//! queries.

use burn::backend::Flex;
use burn::backend::backend_extension;
use burn::backend::tensor::FloatTensor;
use burn::tensor::DType;
use burn_cubecl::cubecl::prelude::*;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{CubeBackend, cubecl, kernel::into_contiguous, ops::numeric::empty_device_dtype};

use super::row_kernels::{ROW_THREADS, workgroup_max, workgroup_sum};

/// Widest head the kernel takes: one invocation per output channel.
pub const MAX_HEAD_DIM: usize = ROW_THREADS as usize;

/// Most query rows the kernel takes: decoding (one) and a few branches; beyond, the blocked
/// path's matmuls share each key among the rows.
pub const MAX_ROWS: usize = 8;

/// Additive mask values at or below this are "masked" (the masks hold 0 or −∞).
const MASKED: f32 = -1.0e30;

/// A score that takes no part: a finite stand-in for −∞ (WGSL has no −∞ literal).
const SKIP: f32 = -3.0e38;

/// `out[h, i] = Σ_j softmax_j(scale · q[h,i]·k[g,j] + mask[i,j]) · v[g,j]` with `g = h / groups`,
/// workgroup `(i, h)`, `d ≤ CUBE_DIM_X`.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn decode_attention_kernel(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
    mask: &Tensor<f32>,
    out: &mut Tensor<f32>,
    t: u32,
    s: u32,
    d: u32,
    kv_stride: u32,
    groups: u32,
    scale: f32,
    #[comptime] has_mask: bool,
) {
    let i = CUBE_POS_X as usize;
    let h = CUBE_POS_Y as usize;
    let lane = UNIT_POS_X as usize;
    let threads = CUBE_DIM_X as usize;
    let (t, s, d) = (t as usize, s as usize, d as usize);
    let kv_base = (h / groups as usize) * kv_stride as usize;
    let mut qs = Shared::<[f32]>::new_slice(ROW_THREADS as usize);
    let mut ps = Shared::<[f32]>::new_slice(ROW_THREADS as usize);
    if lane < d {
        qs[lane] = q[(h * t + i) * d + lane];
    }
    sync_cube();
    let mut m = f32::new(SKIP);
    let mut l = 0.0f32;
    let mut acc = 0.0f32;
    let mut j0 = 0usize;
    while j0 < s {
        let j = j0 + lane;
        let mut score = f32::new(SKIP);
        let mut keep = false;
        if j < s {
            let mut dot = 0.0f32;
            let row = kv_base + j * d;
            for c in 0..d {
                dot += qs[c] * k[row + c];
            }
            score = dot * scale;
            keep = true;
            if comptime!(has_mask) {
                let mv = mask[i * s + j];
                keep = mv > MASKED;
                score += mv;
            }
            if !keep {
                score = f32::new(SKIP);
            }
        }
        let mn = max(m, workgroup_max(score));
        let mut p = 0.0f32;
        if keep {
            p = (score - mn).exp();
        }
        ps[lane] = p;
        let chunk = workgroup_sum(p);
        let corr = (m - mn).exp();
        l = l * corr + chunk;
        if lane < d {
            let mut a = acc * corr;
            let n = min(threads, s - j0);
            for jj in 0..n {
                a += ps[jj] * v[kv_base + (j0 + jj) * d + lane];
            }
            acc = a;
        }
        m = mn;
        // Every invocation has read this chunk's weights and reductions before the next
        // chunk overwrites them.
        sync_cube();
        j0 += threads;
    }
    if lane < d {
        out[(h * t + i) * d + lane] = acc / l;
    }
}

/// Decode attention as one kernel (GPU backends only; see [`super::attention::Kernel::supports`]).
#[backend_extension(Cube, Flex)]
pub trait DecodeAttentionOps: burn::backend::Backend {
    /// `q [heads, t, d]`, `k`/`v` `[heads / groups, s, d]`, `mask` `[t, s]` (0 or −∞) →
    /// `[heads, t, d]`.
    fn decode_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        mask: FloatTensor<Self>,
        has_mask: bool,
        groups: usize,
        scale: f32,
    ) -> FloatTensor<Self>;
}

impl DecodeAttentionOps for Flex {
    fn decode_attention(
        _q: FloatTensor<Self>,
        _k: FloatTensor<Self>,
        _v: FloatTensor<Self>,
        _mask: FloatTensor<Self>,
        _has_mask: bool,
        _groups: usize,
        _scale: f32,
    ) -> FloatTensor<Self> {
        unreachable!(
            "the CPU uses the blocked GEMM attention (attention::attention checks the device)"
        )
    }
}

impl DecodeAttentionOps for CubeBackend {
    fn decode_attention(
        q: CubeTensor,
        k: CubeTensor,
        v: CubeTensor,
        mask: CubeTensor,
        has_mask: bool,
        groups: usize,
        scale: f32,
    ) -> CubeTensor {
        let q = into_contiguous(q);
        let (k, v, kv_stride) = super::fused_attention::kv_rows(k, v);
        let mask = into_contiguous(mask);
        let [heads, t, d] = q.meta.shape().dims::<3>();
        let s = k.meta.shape().dims::<3>()[1];
        // q, the valid keys and values of every KV head, the mask, the output.
        let kv_heads = k.meta.shape().dims::<3>()[0];
        let mask_bytes = if has_mask { t * s * 4 } else { 0 };
        crate::launches::note_bytes(2 * heads * t * d * 4 + 2 * kv_heads * s * d * 4 + mask_bytes);
        crate::launches::note_flop(4 * (heads * t) as u64 * (s * d) as u64);
        let client = q.client.clone();
        let out = empty_device_dtype(
            client.clone(),
            q.device.clone(),
            [heads, t, d].into(),
            DType::F32,
        );
        decode_attention_kernel::launch(
            &client,
            cubecl::CubeCount::Static(t as u32, heads as u32, 1),
            cubecl::CubeDim::new_1d(ROW_THREADS),
            q.into_tensor_arg(),
            k.into_tensor_arg(),
            v.into_tensor_arg(),
            mask.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            t as u32,
            s as u32,
            d as u32,
            kv_stride as u32,
            groups as u32,
            scale,
            has_mask,
        );
        out
    }
}
