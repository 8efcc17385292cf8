//! Fused attention for the GPU backends: one pass over the keys with an online softmax
//! (flash-attention style), so the `[heads, t, s]` score matrix never exists in memory.
//!
//! Why: the vision tower attends 4096 patches to 4096 patches; materialised scores take
//! 1 GiB for MedGemma's 16 heads (beyond a WebGPU binding) and, blocked, cost a matmul, a
//! mask add, a three-pass softmax and a second matmul per block. Here each invocation owns one
//! query row of one head, keys and values are staged through workgroup memory in tiles, and
//! grouped-query heads read their KV head directly (no `repeat_kv` copy). The CPU keeps the
//! blocked GEMM path (attention.rs), which is faster there.

// CubeCL needs a variable declared before runtime branches assign it.
#![allow(unused_assignments)]

use burn::backend::Flex;
use burn::backend::backend_extension;
use burn::backend::tensor::FloatTensor;
use burn::tensor::DType;
use burn_cubecl::cubecl::prelude::*;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{CubeBackend, cubecl, kernel::into_contiguous, ops::numeric::empty_device_dtype};

/// Query rows per workgroup, at most.
const WORKGROUP: u32 = 64;

/// Query rows per workgroup for `t` rows: [`WORKGROUP`], or the power of two at or above `t`
/// (4 at least) for fewer. The whole workgroup stages the key and value tiles, so lanes
/// without a row only share that work, while each waits at every barrier; and SwiftShader
/// zero-initialises the tiles in every subgroup of 4 lanes, which made a decoded token's one
/// row on 64 lanes cost several times native's in a browser
/// (bench/results/ci-vm-2core-swiftshader-row-threads-browser-vs-native.json).
fn workgroup_for(t: usize) -> u32 {
    t.next_power_of_two().clamp(4, WORKGROUP as usize) as u32
}

/// Workgroup memory for one K tile and one V tile stays under WebGPU's default 16 KiB limit.
const TILE_FLOATS: usize = 1920;

/// Additive mask values at or below this are "masked" (the masks hold 0 or −∞).
const MASKED: f32 = -1.0e30;

/// The running maximum before any key: a finite stand-in for −∞.
const SKIP: f32 = -3.0e38;

/// Loops over the head size are unrolled: besides keeping `q` and the accumulator in
/// registers, this keeps an invocation under llvmpipe's budget of 65535 loop iterations per
/// shader invocation (lavapipe silently stops a loop there; gallivm LP_MAX_TGSI_LOOP_ITERATIONS),
/// which a loop over 4096 keys × 48 channels would exceed.
///
/// `out[h, i] = Σ_j softmax_j(scale · q[h,i]·k[g,j] + mask[i,j]) · v[g,j]` with `g = h / groups`.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn attention_kernel(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
    mask: &Tensor<f32>,
    out: &mut Tensor<f32>,
    t: u32,
    s: u32,
    kv_stride: u32,
    groups: u32,
    scale: f32,
    #[comptime] d: usize,
    #[comptime] tile: usize,
    #[comptime] has_mask: bool,
) {
    let h = CUBE_POS_Y as usize;
    let lane = UNIT_POS_X as usize;
    let threads = CUBE_DIM_X as usize;
    let i = CUBE_POS_X as usize * threads + lane;
    let t = t as usize;
    let s = s as usize;
    // Rows past the end still help stage tiles, so every invocation reaches every barrier.
    let active = i < t;
    let mut row = 0usize;
    if active {
        row = i;
    }
    let kv_base = (h / groups as usize) * kv_stride as usize;
    let q_base = (h * t + row) * d;
    let mut qv = Array::<f32>::new(d);
    let mut acc = Array::<f32>::new(d);
    #[unroll]
    for c in 0..d {
        qv[c] = q[q_base + c];
        acc[c] = 0.0f32;
    }
    // K tile then V tile in one workgroup array.
    let mut kvs = Shared::<[f32]>::new_slice(2 * tile * d);
    // Running maximum (a finite sentinel: WGSL has no −∞ literal) and softmax denominator.
    let mut m = f32::new(SKIP);
    let mut l = 0.0f32;
    let mut j0 = 0usize;
    while j0 < s {
        // The tile is rows j0.. of K and V, contiguous in memory.
        let tile_base = kv_base + j0 * d;
        let tile_end = kv_base + s * d;
        let mut e = lane;
        while e < tile * d {
            if tile_base + e < tile_end {
                kvs[e] = k[tile_base + e];
                kvs[tile * d + e] = v[tile_base + e];
            }
            e += threads;
        }
        sync_cube();
        if active {
            for jj in 0..tile {
                let j = j0 + jj;
                if j < s {
                    let mut dot = 0.0f32;
                    #[unroll]
                    for c in 0..d {
                        dot += qv[c] * kvs[jj * d + c];
                    }
                    let mut score = dot * scale;
                    let mut keep = true;
                    if comptime!(has_mask) {
                        let mv = mask[row * s + j];
                        keep = mv > MASKED;
                        score += mv;
                    }
                    if keep {
                        let mn = max(m, score);
                        let corr = (m - mn).exp();
                        let p = (score - mn).exp();
                        l = l * corr + p;
                        #[unroll]
                        for c in 0..d {
                            acc[c] = acc[c] * corr + p * kvs[tile * d + jj * d + c];
                        }
                        m = mn;
                    }
                }
            }
        }
        sync_cube();
        j0 += tile;
    }
    if active {
        let o_base = (h * t + i) * d;
        #[unroll]
        for c in 0..d {
            out[o_base + c] = acc[c] / l;
        }
    }
}

/// Four floats: one 16-byte read of workgroup memory in [`attention_vec_kernel`].
type V4 = Vector<f32, Const<4>>;

/// [`attention_kernel`] with the staged keys and values, the query and the accumulator held as
/// runs of 4 floats (`d` a multiple of 4), so that one 16-byte read of workgroup memory feeds 4
/// multiply–adds where the scalar form reads one float for each: the scalar form reads 2 · `d`
/// floats a key against 3 · `d` arithmetic operations, and GPUs serve workgroup memory at about a
/// quarter of their arithmetic rate. The accumulator is rescaled only when the running maximum
/// moves. The dot product sums 4 partial sums at the end (a different order from the scalar
/// form's, within the same bound of an f64 evaluation).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn attention_vec_kernel(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
    mask: &Tensor<f32>,
    out: &mut Tensor<f32>,
    t: u32,
    s: u32,
    kv_stride: u32,
    groups: u32,
    scale: f32,
    #[comptime] d: usize,
    #[comptime] tile: usize,
    #[comptime] has_mask: bool,
) {
    let d4 = comptime!(d / 4);
    let h = CUBE_POS_Y as usize;
    let lane = UNIT_POS_X as usize;
    let threads = CUBE_DIM_X as usize;
    let i = CUBE_POS_X as usize * threads + lane;
    let t = t as usize;
    let s = s as usize;
    let active = i < t;
    let mut row = 0usize;
    if active {
        row = i;
    }
    let kv_base = (h / groups as usize) * kv_stride as usize;
    let q_base = (h * t + row) * d;
    let mut qv = Array::<V4>::new(d4);
    let mut acc = Array::<V4>::new(d4);
    #[unroll]
    for c in 0..d4 {
        let mut x = V4::empty();
        x.insert(0usize, q[q_base + 4 * c]);
        x.insert(1usize, q[q_base + 4 * c + 1]);
        x.insert(2usize, q[q_base + 4 * c + 2]);
        x.insert(3usize, q[q_base + 4 * c + 3]);
        qv[c] = x;
        acc[c] = V4::zeroed();
    }
    let mut ks = Shared::<[V4]>::new_slice(comptime!(tile * d4));
    let mut vs = Shared::<[V4]>::new_slice(comptime!(tile * d4));
    let mut m = f32::new(SKIP);
    let mut l = 0.0f32;
    let mut j0 = 0usize;
    while j0 < s {
        // Runs of 4 of rows j0.. of K and V (rows are d floats, d a multiple of 4).
        let tile_base = kv_base + j0 * d;
        let tile_end = kv_base + s * d;
        let mut e = lane;
        while e < comptime!(tile * d4) {
            let at = tile_base + 4 * e;
            if at < tile_end {
                let mut kx = V4::empty();
                let mut vx = V4::empty();
                kx.insert(0usize, k[at]);
                kx.insert(1usize, k[at + 1]);
                kx.insert(2usize, k[at + 2]);
                kx.insert(3usize, k[at + 3]);
                vx.insert(0usize, v[at]);
                vx.insert(1usize, v[at + 1]);
                vx.insert(2usize, v[at + 2]);
                vx.insert(3usize, v[at + 3]);
                ks[e] = kx;
                vs[e] = vx;
            }
            e += threads;
        }
        sync_cube();
        if active {
            for jj in 0..tile {
                let j = j0 + jj;
                if j < s {
                    let mut dots = V4::zeroed();
                    #[unroll]
                    for c in 0..d4 {
                        dots += qv[c] * ks[jj * d4 + c];
                    }
                    let dot = (dots.extract(0usize) + dots.extract(1usize))
                        + (dots.extract(2usize) + dots.extract(3usize));
                    let mut score = dot * scale;
                    let mut keep = true;
                    if comptime!(has_mask) {
                        let mv = mask[row * s + j];
                        keep = mv > MASKED;
                        score += mv;
                    }
                    if keep {
                        // Rescaled only when the maximum moves (the scalar form multiplies by
                        // exp(0) = 1 otherwise: the same values), which after the first keys is
                        // rare: about 32 · ln(s) of s keys for a 32-lane subgroup.
                        if score > m {
                            let corr = (m - score).exp();
                            let corr4 = V4::broadcast(corr);
                            l *= corr;
                            #[unroll]
                            for c in 0..d4 {
                                acc[c] *= corr4;
                            }
                            m = score;
                        }
                        let p = (score - m).exp();
                        let p4 = V4::broadcast(p);
                        l += p;
                        #[unroll]
                        for c in 0..d4 {
                            acc[c] += p4 * vs[jj * d4 + c];
                        }
                    }
                }
            }
        }
        sync_cube();
        j0 += tile;
    }
    if active {
        let o_base = (h * t + i) * d;
        #[unroll]
        for c in 0..d4 {
            let o = acc[c];
            out[o_base + 4 * c] = o.extract(0usize) / l;
            out[o_base + 4 * c + 1] = o.extract(1usize) / l;
            out[o_base + 4 * c + 2] = o.extract(2usize) / l;
            out[o_base + 4 * c + 3] = o.extract(3usize) / l;
        }
    }
}

/// Attention as one fused kernel (GPU backends only; see [`super::attention::Kernel::supports`]).
#[backend_extension(Cube, Flex)]
pub trait AttentionOps: burn::backend::Backend {
    /// `q [heads, t, d]`, `k`/`v` `[heads / groups, s, d]`, `mask` `[t, s]` (0 or −∞) →
    /// `[heads, t, d]`.
    fn fused_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        mask: FloatTensor<Self>,
        has_mask: bool,
        groups: usize,
        scale: f32,
    ) -> FloatTensor<Self>;
}

impl AttentionOps for Flex {
    fn fused_attention(
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

impl AttentionOps for CubeBackend {
    fn fused_attention(
        q: CubeTensor,
        k: CubeTensor,
        v: CubeTensor,
        mask: CubeTensor,
        has_mask: bool,
        groups: usize,
        scale: f32,
    ) -> CubeTensor {
        let q = into_contiguous(q);
        let (k, v, kv_stride) = kv_rows(k, v);
        let [heads, t, d] = q.meta.shape().dims::<3>();
        let s = k.meta.shape().dims::<3>()[1];
        // q, the valid keys and values of every KV head, the mask, the output.
        let kv_heads = k.meta.shape().dims::<3>()[0];
        let mask_bytes = if has_mask { t * s * 4 } else { 0 };
        let client = q.client.clone();
        let out = empty_device_dtype(
            client.clone(),
            q.device.clone(),
            [heads, t, d].into(),
            DType::F32,
        );
        let mask = into_contiguous(mask);
        // Noted after the copy above may have launched, so they go with this kernel's launch.
        crate::launches::note_bytes(2 * heads * t * d * 4 + 2 * kv_heads * s * d * 4 + mask_bytes);
        // q·k and p·v: a multiply-add each per head, query, key and dimension.
        crate::launches::note_flop(4 * (heads * t) as u64 * (s * d) as u64);
        let workgroup = workgroup_for(t);
        let cube_count =
            cubecl::CubeCount::Static(t.div_ceil(workgroup as usize) as u32, heads as u32, 1);
        let launch = if vector_form() && d % 4 == 0 {
            attention_vec_kernel::launch
        } else {
            attention_kernel::launch
        };
        launch(
            &client,
            cube_count,
            cubecl::CubeDim::new_1d(workgroup),
            q.into_tensor_arg(),
            k.into_tensor_arg(),
            v.into_tensor_arg(),
            mask.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            t as u32,
            s as u32,
            kv_stride as u32,
            groups as u32,
            scale,
            d,
            (TILE_FLOATS / d).clamp(1, 32),
            has_mask,
        );
        out
    }
}

/// `k` and `v` (`[kv_heads, s, d]`) as the attention kernels read them: rows of `d` contiguous
/// floats, heads the returned stride apart. The KV cache's views (the first `s` positions of
/// buffers with spare capacity) already are, and are read in place; anything else is made
/// contiguous (stride `s · d`).
pub(super) fn kv_rows(k: CubeTensor, v: CubeTensor) -> (CubeTensor, CubeTensor, usize) {
    let rows = |x: &CubeTensor| {
        let (st, d) = (x.meta.strides(), x.meta.shape().dims::<3>()[2]);
        st[2] == 1 && st[1] == d
    };
    if rows(&k) && rows(&v) && k.meta.strides()[0] == v.meta.strides()[0] {
        let stride = k.meta.strides()[0];
        return (k, v, stride);
    }
    let (k, v) = (into_contiguous(k), into_contiguous(v));
    let [_, s, d] = k.meta.shape().dims::<3>();
    (k, v, s * d)
}

/// Largest head size the kernel takes: each invocation keeps `q` and its accumulator in
/// unrolled registers, which spill on GPUs beyond this, and llvmpipe's compile time grows
/// steeply with it. Gemma 3 4B's decoder (256) takes [`super::wide_attention`] and
/// [`super::decode_attention`]; SigLIP's 72 takes this one.
pub const MAX_HEAD_DIM: usize = 128;

/// Whether the fused attention takes [`attention_vec_kernel`] (heads a multiple of 4 wide): yes,
/// unless the tuning asks for the scalar form (`REXVQA_ATTENTION=scalar`).
fn vector_form() -> bool {
    !crate::tuning::current().scalar_attention
}
