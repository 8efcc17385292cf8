//! Attention for a few query rows at head widths up to 256 (Gemma 3's decoder decoding), by
//! default in one dispatch: one workgroup per query row and head. A form split over the keys
//! ("flash decoding", two dispatches: many workgroups a head, then one joining their parts; see
//! [`decode_attention_split_kernel`]) is there for `REXVQA_DECODE_SPLIT=1` ([`split_form`]).
//!
//! Why: [`super::fused_attention`] keeps a query row and its accumulator in one invocation's
//! registers, which caps the head width at 128, so MedGemma 4B's decoder (256) would take the
//! blocked path: about 13 dispatches per layer and token (a KV-head expansion copy, two matmuls,
//! mask, a three-pass softmax). Here the workgroup's invocations split the work instead: each
//! scores one key of a chunk of 256 against the query (staged in workgroup memory), the chunk's
//! maximum and sum come from workgroup reductions, and each invocation then owns one output
//! channel, accumulating the chunk's weighted values (online softmax across chunks).
//!
//! Each invocation loops about `2 · s` times in all (a 256-term dot per key chunk, 256 weighted
//! values per chunk): under llvmpipe's 65535 loop iterations (see [`super::fused_attention`]) up
//! to ~30 000 keys. Prefill (many rows) takes [`super::wide_attention`], which shares each staged
//! key across query rows.

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
            // UNROLL loads issued before their products, in the loop's order (the same sum).
            let mut c = 0usize;
            while c < d {
                #[unroll]
                for u in 0..UNROLL {
                    if c + u < d {
                        dot += qs[c + u] * k[row + c + u];
                    }
                }
                c += UNROLL;
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
        let mn = max(m, workgroup_max(score, ROW_THREADS as usize));
        let mut p = 0.0f32;
        if keep {
            p = (score - mn).exp();
        }
        ps[lane] = p;
        let chunk = workgroup_sum(p, ROW_THREADS as usize);
        let corr = (m - mn).exp();
        l = l * corr + chunk;
        if lane < d {
            let mut a = acc * corr;
            let n = min(threads, s - j0);
            let mut jj = 0usize;
            while jj < n {
                #[unroll]
                for u in 0..UNROLL {
                    if jj + u < n {
                        a += ps[jj + u] * v[kv_base + (j0 + jj + u) * d + lane];
                    }
                }
                jj += UNROLL;
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

/// Keys a workgroup of [`decode_attention_split_kernel`] scores at a time, [`KEY_LANES`]
/// invocations a key.
const STEP_KEYS: usize = 32;
/// Invocations that share one key's dot product in [`decode_attention_split_kernel`], each
/// over every eighth channel.
const KEY_LANES: usize = ROW_THREADS as usize / STEP_KEYS;
/// Loads an invocation issues before it uses the first (channels of a dot product, keys of a
/// weighted sum of values): a loop that waited for each load in turn paid the memory latency
/// once per channel.
const UNROLL: usize = 8;
/// Most splits of a query row's keys: beyond, each split takes more keys.
pub const MAX_SPLITS: usize = 64;

/// Keys per split and splits for `s` keys: splits of whole [`STEP_KEYS`] steps, at most
/// [`MAX_SPLITS`] of them.
pub fn splits_for(s: usize) -> (usize, usize) {
    let steps = s.div_ceil(STEP_KEYS).max(1);
    let per = STEP_KEYS * steps.div_ceil(MAX_SPLITS);
    (per, s.div_ceil(per).max(1))
}

/// First pass of split decode attention ("flash decoding"): workgroup `(split, h·t + i)`
/// attends query row `i` of head `h` over its split's keys `split·per_split ..` only, keeping
/// the split's unnormalised weighted values in `o_part [h·t + i, split, d]` and its running
/// maximum and weight sum in `ml_part [h·t + i, split, 2]`; [`decode_attention_combine_kernel`]
/// joins the splits. Many workgroups a head instead of one: a single workgroup per head leaves
/// most of a GPU idle. Within a step of [`STEP_KEYS`] keys, [`KEY_LANES`] invocations share a
/// key's dot product, then each invocation owns one output channel and accumulates the step's
/// weighted values.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn decode_attention_split_kernel(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
    mask: &Tensor<f32>,
    o_part: &mut Tensor<f32>,
    ml_part: &mut Tensor<f32>,
    t: u32,
    s: u32,
    d: u32,
    kv_stride: u32,
    groups: u32,
    scale: f32,
    per_split: u32,
    #[comptime] has_mask: bool,
) {
    let split = CUBE_POS_X as usize;
    let row = CUBE_POS_Y as usize;
    let splits = CUBE_COUNT_X as usize;
    let lane = UNIT_POS_X as usize;
    let (t, s, d) = (t as usize, s as usize, d as usize);
    let h = row / t;
    let i = row % t;
    let key = lane / KEY_LANES;
    let part = lane % KEY_LANES;
    let kv_base = (h / groups as usize) * kv_stride as usize;
    let mut qs = Shared::<[f32]>::new_slice(ROW_THREADS as usize);
    let mut parts = Shared::<[f32]>::new_slice(ROW_THREADS as usize);
    let mut scores = Shared::<[f32]>::new_slice(STEP_KEYS);
    if lane < d {
        qs[lane] = q[row * d + lane];
    }
    sync_cube();
    let start = split * per_split as usize;
    let end = min(start + per_split as usize, s);
    let mut m = f32::new(SKIP);
    let mut l = 0.0f32;
    let mut acc = 0.0f32;
    let mut j0 = start;
    while j0 < end {
        let j = j0 + key;
        let mut dot = 0.0f32;
        if j < end {
            let krow = kv_base + j * d;
            let mut c = part;
            while c < d {
                #[unroll]
                for u in 0..UNROLL {
                    let cc = c + u * KEY_LANES;
                    if cc < d {
                        dot += qs[cc] * k[krow + cc];
                    }
                }
                c += UNROLL * KEY_LANES;
            }
        }
        parts[lane] = dot;
        sync_cube();
        if part == 0 {
            let mut score = f32::new(SKIP);
            if j < end {
                let mut total = 0.0f32;
                for p in 0..KEY_LANES {
                    total += parts[key * KEY_LANES + p];
                }
                score = total * scale;
                if comptime!(has_mask) {
                    let mv = mask[i * s + j];
                    score += mv;
                    if mv <= MASKED {
                        score = f32::new(SKIP);
                    }
                }
            }
            scores[key] = score;
        }
        sync_cube();
        let n = min(STEP_KEYS, end - j0);
        let mut mx = m;
        for kk in 0..n {
            mx = max(mx, scores[kk]);
        }
        let corr = (m - mx).exp();
        let mut sum = 0.0f32;
        let mut a = acc * corr;
        let mut kk = 0usize;
        while kk < n {
            #[unroll]
            for u in 0..UNROLL {
                let k2 = kk + u;
                if k2 < n {
                    let score = scores[k2];
                    if score > MASKED {
                        let p = (score - mx).exp();
                        sum += p;
                        if lane < d {
                            a += p * v[kv_base + (j0 + k2) * d + lane];
                        }
                    }
                }
            }
            kk += UNROLL;
        }
        acc = a;
        l = l * corr + sum;
        m = mx;
        // Every invocation has read this step's partial dots and scores before the next step
        // overwrites them.
        sync_cube();
        j0 += STEP_KEYS;
    }
    let slot = row * splits + split;
    if lane < d {
        o_part[slot * d + lane] = acc;
    }
    if lane == 0 {
        ml_part[slot * 2] = m;
        ml_part[slot * 2 + 1] = l;
    }
}

/// Second pass of split decode attention: workgroup `(0, h·t + i)` joins the row's splits of
/// [`decode_attention_split_kernel`], each rescaled to the largest maximum, into
/// `out[h, i]`, one invocation a channel.
#[cube(launch)]
fn decode_attention_combine_kernel(
    o_part: &Tensor<f32>,
    ml_part: &Tensor<f32>,
    out: &mut Tensor<f32>,
    d: u32,
    splits: u32,
) {
    let row = CUBE_POS_Y as usize;
    let lane = UNIT_POS_X as usize;
    let (d, splits) = (d as usize, splits as usize);
    let base = row * splits;
    let mut mx = f32::new(SKIP);
    for sp in 0..splits {
        mx = max(mx, ml_part[(base + sp) * 2]);
    }
    let mut l = 0.0f32;
    let mut acc = 0.0f32;
    let mut sp = 0usize;
    while sp < splits {
        #[unroll]
        for u in 0..UNROLL {
            let s2 = sp + u;
            if s2 < splits {
                let mi = ml_part[(base + s2) * 2];
                // A split whose keys were all masked has weight sum 0 and adds nothing.
                let w = (mi - mx).exp();
                l += w * ml_part[(base + s2) * 2 + 1];
                if lane < d {
                    acc += w * o_part[(base + s2) * d + lane];
                }
            }
        }
        sp += UNROLL;
    }
    if lane < d {
        out[row * d + lane] = acc / l;
    }
}

/// Joins `splits` parts of each of `out`'s rows (`o_part [rows, splits, d]` of unnormalised
/// sums, `ml_part [rows, splits, 2]` of maxima and weight sums; `d` ≤ [`ROW_THREADS`]) with
/// [`decode_attention_combine_kernel`]: the split decode and wide-head attention's second pass.
pub(super) fn join_splits(
    client: &cubecl::client::Client,
    o_part: CubeTensor,
    ml_part: CubeTensor,
    out: CubeTensor,
    d: usize,
    splits: usize,
) {
    let rows = o_part.meta.shape().dims::<3>()[0];
    decode_attention_combine_kernel::launch(
        client,
        cubecl::CubeCount::Static(1, rows as u32, 1),
        cubecl::CubeDim::new_1d(ROW_THREADS),
        o_part.into_tensor_arg(),
        ml_part.into_tensor_arg(),
        out.into_tensor_arg(),
        d as u32,
        splits as u32,
    );
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
        if split_form() {
            let (per, splits) = splits_for(s);
            let part = |shape: [usize; 3]| {
                empty_device_dtype(client.clone(), out.device.clone(), shape.into(), DType::F32)
            };
            let (o_part, ml_part) = (part([heads * t, splits, d]), part([heads * t, splits, 2]));
            decode_attention_split_kernel::launch(
                &client,
                cubecl::CubeCount::Static(splits as u32, (heads * t) as u32, 1),
                cubecl::CubeDim::new_1d(ROW_THREADS),
                q.into_tensor_arg(),
                k.into_tensor_arg(),
                v.into_tensor_arg(),
                mask.into_tensor_arg(),
                o_part.clone().into_tensor_arg(),
                ml_part.clone().into_tensor_arg(),
                t as u32,
                s as u32,
                d as u32,
                kv_stride as u32,
                groups as u32,
                scale,
                per as u32,
                has_mask,
            );
            join_splits(&client, o_part, ml_part, out.clone(), d, splits);
            return out;
        }
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

/// Whether decode attention runs split over many workgroups (two dispatches) rather than as one
/// workgroup a head (one): only when the tuning asks (`REXVQA_DECODE_SPLIT=1`). The split
/// form's second dispatch adds a link to a token's dependent chain, which its shorter device
/// time does not pay for.
pub fn split_form() -> bool {
    crate::tuning::current().decode_split
}
