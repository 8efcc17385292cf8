//! Fused attention for many query rows at head widths over 128 (Gemma 3's decoder in a prefill
//! or a batch of questions, 256 wide): one pass over the keys with an online softmax, a query
//! row shared by [`SPLIT`] invocations that each own a quarter of its channels.
//!
//! Why: [`super::fused_attention`] keeps a whole query row and its accumulator in one
//! invocation's registers, which caps the head width at 128, and [`super::decode_attention`]
//! spends a workgroup on each row; so the decoder's prefill took the blocked path, whose
//! score matmul is burn's. Without cooperative matrices (WebGPU has none) burn's matmul falls
//! back to a form that took over half of a prefill's device time in a browser on a GPU
//! (bench/results/h200-browser-vs-native-2240.json). Here, per tile of keys staged in
//! workgroup memory, each invocation sums its channels' share of every key's dot product into
//! workgroup memory, then each adds the row's [`SPLIT`] shares in the same order (so every
//! invocation of a row holds the same score, maximum and sum) and accumulates the weighted
//! values of its own channels. Keys a row's mask hides are neither scored nor accumulated, and
//! where the caller promises a causal mask (a lookahead), a workgroup stops at the last key any of
//! its rows can see: about half the tiles of a prefill. A launch of few workgroups is one wave
//! on a GPU, though, timed by the last rows' (which see every key). So where a launch
//! makes few workgroups, the keys are split in chunks of whole tiles ([`chunks_for`]), a
//! workgroup per chunk, and a second dispatch joins the chunks' online softmaxes
//! (`decode_attention::join_splits`, as split decoding does).

// CubeCL needs a variable declared before runtime branches assign it.
#![allow(unused_assignments)]

use burn::backend::Flex;
use burn::backend::backend_extension;
use burn::backend::tensor::FloatTensor;
use burn::tensor::DType;
use burn_cubecl::cubecl::prelude::*;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{CubeBackend, cubecl, kernel::into_contiguous, ops::numeric::empty_device_dtype};

/// Invocations that share one query row, each owning `d / SPLIT` of its channels.
pub const SPLIT: usize = 4;

/// Invocations per workgroup: `WORKGROUP / SPLIT` query rows of one head. Workgroups of 32,
/// 128 and 256 were no faster on a GPU
/// (bench/results/device/h200-full-2026-11-27T2347/11-bench-variants.json).
const WORKGROUP: usize = 64;

/// Workgroup memory for a tile of keys, of values and of the dot products' shares: WebGPU's
/// default `maxComputeWorkgroupStorageSize`.
const SHARED_BYTES: usize = 16384;

/// Widest head the kernel takes: an invocation keeps `d / SPLIT` channels of the query and of
/// the accumulator in registers, as many as [`super::fused_attention`] at 64.
pub const MAX_HEAD_DIM: usize = 256;

/// Additive mask values at or below this are "masked" (the masks hold 0 or −∞).
const MASKED: f32 = -1.0e30;

/// The running maximum before any key: a finite stand-in for −∞.
const SKIP: f32 = -3.0e38;

/// Whether the kernel takes heads `d` wide: up to [`MAX_HEAD_DIM`], each invocation's share a
/// whole number of 4-float runs.
pub fn fits(d: usize) -> bool {
    d <= MAX_HEAD_DIM && d.is_multiple_of(4 * SPLIT)
}

/// Keys per tile for heads `d` wide in workgroups of `lanes`: keys and values (`8 · d` bytes a
/// key) and one share per invocation and key (`4 · lanes`) within [`SHARED_BYTES`] (7 at 256
/// and 64 lanes).
fn tile_for(d: usize, lanes: usize) -> usize {
    (SHARED_BYTES / (8 * d + 4 * lanes)).clamp(1, 32)
}

/// Four floats of workgroup memory or registers, read and multiplied as one.
type V4 = Vector<f32, Const<4>>;

/// `out[h, i] = Σ_j softmax_j(scale · q[h,i]·k[g,j] + mask[i,j]) · v[g,j]` with `g = h / groups`;
/// workgroup `(block of rows, h, chunk of keys)`, invocation `lane` on row `lane / SPLIT`,
/// channels of part `lane % SPLIT`. Whole (one chunk), `out` is `[h, t, d]`; `split`, it is
/// `[h · t, chunks, d]` of unnormalised sums and `ml` `[h · t, chunks, 2]` of maxima and weight
/// sums, for the join. The loops over an invocation's channels are unrolled (see
/// [`super::fused_attention`] on llvmpipe's loop budget).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn attention_wide_kernel(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
    mask: &Tensor<f32>,
    out: &mut Tensor<f32>,
    ml: &mut Tensor<f32>,
    t: u32,
    s: u32,
    kv_stride: u32,
    groups: u32,
    scale: f32,
    reach: u32,
    chunk_keys: u32,
    #[comptime] d: usize,
    #[comptime] tile: usize,
    #[comptime] lanes: usize,
    #[comptime] has_mask: bool,
    #[comptime] split: bool,
) {
    let d4 = comptime!(d / 4);
    let c4 = comptime!(d / 4 / SPLIT);
    let h = CUBE_POS_Y as usize;
    let lane = UNIT_POS_X as usize;
    let threads = CUBE_DIM_X as usize;
    let slot = lane / SPLIT;
    let part = lane % SPLIT;
    let i = CUBE_POS_X as usize * (threads / SPLIT) + slot;
    let t = t as usize;
    let s = s as usize;
    let active = i < t;
    let mut row = 0usize;
    if active {
        row = i;
    }
    // Queries sit at the last t of s positions, and row i sees no key past s − t + i + reach:
    // nothing past the workgroup's last row's horizon (from uniform values only, as the loop
    // holds barriers).
    let rows = threads / SPLIT;
    let mut s_end = s;
    let reach = reach as usize;
    if reach < s {
        let last = min(t, (CUBE_POS_X as usize + 1) * rows) - 1;
        s_end = min(s, s - t + last + 1 + reach);
    }
    let kv_base = (h / groups as usize) * kv_stride as usize;
    // This invocation's channels: runs part · c4 .. (part + 1) · c4 of the row's d / 4.
    let first = part * c4;
    let q_base = (h * t + row) * d + 4 * first;
    let mut qv = Array::<V4>::new(c4);
    let mut acc = Array::<V4>::new(c4);
    #[unroll]
    for c in 0..c4 {
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
    let mut shares = Shared::<[f32]>::new_slice(comptime!(lanes * tile));
    let mut m = f32::new(SKIP);
    let mut l = 0.0f32;
    // This workgroup's chunk of the keys (all of them unsplit). A chunk is whole tiles, so no
    // tile straddles two chunks and `j < s` is the only bound a key needs.
    let chunk = CUBE_POS_Z as usize;
    let chunks = CUBE_COUNT_Z as usize;
    let mut j0 = chunk * chunk_keys as usize;
    let j_end = min(s_end, j0 + chunk_keys as usize);
    while j0 < j_end {
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
        // This invocation's share of each key's dot product with its row.
        if active {
            for jj in 0..tile {
                let j = j0 + jj;
                let mut visible = j < s;
                if comptime!(has_mask) && visible {
                    visible = mask[row * s + j] > MASKED;
                }
                if visible {
                    let mut dots = V4::zeroed();
                    #[unroll]
                    for c in 0..c4 {
                        dots += qv[c] * ks[jj * d4 + first + c];
                    }
                    shares[lane * tile + jj] = (dots.extract(0usize) + dots.extract(1usize))
                        + (dots.extract(2usize) + dots.extract(3usize));
                }
            }
        }
        sync_cube();
        if active {
            for jj in 0..tile {
                let j = j0 + jj;
                let mut visible = j < s;
                let mut mv = 0.0f32;
                if comptime!(has_mask) && visible {
                    mv = mask[row * s + j];
                    visible = mv > MASKED;
                }
                if visible {
                    let mut dot = 0.0f32;
                    #[unroll]
                    for p in 0..SPLIT {
                        dot += shares[(slot * SPLIT + p) * tile + jj];
                    }
                    let score = dot * scale + mv;
                    if score > m {
                        let corr = (m - score).exp();
                        let corr4 = V4::broadcast(corr);
                        l *= corr;
                        #[unroll]
                        for c in 0..c4 {
                            acc[c] *= corr4;
                        }
                        m = score;
                    }
                    let p = (score - m).exp();
                    let p4 = V4::broadcast(p);
                    l += p;
                    #[unroll]
                    for c in 0..c4 {
                        acc[c] += p4 * vs[jj * d4 + first + c];
                    }
                }
            }
        }
        // The next tile overwrites the keys, values and shares this one read.
        sync_cube();
        j0 += tile;
    }
    if active {
        // Split, the chunk's unnormalised sums and its maximum and weight sum for the join (a
        // chunk past the row's horizon leaves 0, the stand-in for −∞ and 0: it adds nothing).
        let part_row = (h * t + i) * chunks + chunk;
        let o_base = part_row * d + 4 * first;
        let mut norm = 1.0f32;
        if comptime!(!split) {
            norm = l;
        }
        #[unroll]
        for c in 0..c4 {
            let o = acc[c];
            out[o_base + 4 * c] = o.extract(0usize) / norm;
            out[o_base + 4 * c + 1] = o.extract(1usize) / norm;
            out[o_base + 4 * c + 2] = o.extract(2usize) / norm;
            out[o_base + 4 * c + 3] = o.extract(3usize) / norm;
        }
        if comptime!(split) {
            // A row's invocations hold the same maximum and sum: its first writes them.
            let writes = part == 0;
            if writes {
                ml[part_row * 2] = m;
                ml[part_row * 2 + 1] = l;
            }
        }
    }
}

/// Wide-head attention as one kernel (GPU backends only; see
/// [`super::attention::Kernel::supports`]).
#[backend_extension(Cube, Flex)]
pub trait WideAttentionOps: burn::backend::Backend {
    /// `q [heads, t, d]`, `k`/`v` `[heads / groups, s, d]`, `mask` `[t, s]` (0 or −∞) →
    /// `[heads, t, d]`; `lookahead` as [`super::attention::Mask::lookahead`]; the keys
    /// split into `chunks` (at most one a tile of keys), or as [`chunks_for`] chooses.
    #[allow(clippy::too_many_arguments)]
    fn wide_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        mask: FloatTensor<Self>,
        has_mask: bool,
        lookahead: Option<usize>,
        groups: usize,
        scale: f32,
        chunks: Option<usize>,
    ) -> FloatTensor<Self>;
}

impl WideAttentionOps for Flex {
    fn wide_attention(
        _q: FloatTensor<Self>,
        _k: FloatTensor<Self>,
        _v: FloatTensor<Self>,
        _mask: FloatTensor<Self>,
        _has_mask: bool,
        _lookahead: Option<usize>,
        _groups: usize,
        _scale: f32,
        _chunks: Option<usize>,
    ) -> FloatTensor<Self> {
        unreachable!(
            "the CPU uses the blocked GEMM attention (attention::attention checks the device)"
        )
    }
}

impl WideAttentionOps for CubeBackend {
    fn wide_attention(
        q: CubeTensor,
        k: CubeTensor,
        v: CubeTensor,
        mask: CubeTensor,
        has_mask: bool,
        lookahead: Option<usize>,
        groups: usize,
        scale: f32,
        chunks: Option<usize>,
    ) -> CubeTensor {
        let q = into_contiguous(q);
        let (k, v, kv_stride) = super::fused_attention::kv_rows(k, v);
        let mask = into_contiguous(mask);
        let [heads, t, d] = q.meta.shape().dims::<3>();
        let s = k.meta.shape().dims::<3>()[1];
        let lanes = WORKGROUP;
        let tile = tile_for(d, lanes);
        let blocks = t.div_ceil(lanes / SPLIT);
        // Whole tiles a chunk, and no chunk left empty by the rounding.
        let wanted = if heads * t > MAX_JOIN_ROWS {
            1
        } else {
            let software = super::software(q.client.properties());
            let n = chunks.unwrap_or_else(|| chunks_for(blocks * heads, s, software));
            n.clamp(1, s.div_ceil(tile))
        };
        let chunk_keys = tile * s.div_ceil(wanted).div_ceil(tile);
        let chunks = s.div_ceil(chunk_keys);
        // q, the valid keys and values of every KV head, the mask, the output; split, the
        // chunks' sums written and read again.
        let kv_heads = k.meta.shape().dims::<3>()[0];
        let mask_bytes = if has_mask { t * s * 4 } else { 0 };
        let part_bytes = if chunks > 1 {
            2 * heads * t * chunks * (d + 2) * 4
        } else {
            0
        };
        crate::launches::note_bytes(
            2 * heads * t * d * 4 + 2 * kv_heads * s * d * 4 + mask_bytes + part_bytes,
        );
        crate::launches::note_flop(4 * (heads * t) as u64 * (s * d) as u64);
        let client = q.client.clone();
        let tensor = |shape: Vec<usize>| {
            empty_device_dtype(client.clone(), q.device.clone(), shape.into(), DType::F32)
        };
        let out = tensor(vec![heads, t, d]);
        let split = chunks > 1;
        // Unsplit, the kernel writes the output and no maximum or sum: a float stands in for
        // them (a binding of its own: WebGPU refuses two writable bindings of one buffer).
        let (sums, ml) = if split {
            (
                tensor(vec![heads * t, chunks, d]),
                tensor(vec![heads * t, chunks, 2]),
            )
        } else {
            (out.clone(), tensor(vec![1]))
        };
        attention_wide_kernel::launch(
            &client,
            cubecl::CubeCount::Static(blocks as u32, heads as u32, chunks as u32),
            cubecl::CubeDim::new_1d(lanes as u32),
            q.into_tensor_arg(),
            k.into_tensor_arg(),
            v.into_tensor_arg(),
            mask.into_tensor_arg(),
            sums.clone().into_tensor_arg(),
            ml.clone().into_tensor_arg(),
            t as u32,
            s as u32,
            kv_stride as u32,
            groups as u32,
            scale,
            // No promise: a reach past every key.
            lookahead
                .filter(|_| has_mask)
                .map_or(u32::MAX, |n| n.min(s) as u32),
            chunk_keys as u32,
            d,
            tile,
            lanes,
            has_mask,
            split,
        );
        if split {
            super::decode_attention::join_splits(&client, sums, ml, out.clone(), d, chunks);
        }
        out
    }
}

/// Workgroups a split aims for: a large GPU's multiprocessors several times over (132 on an
/// H100), each workgroup two warps of [`WORKGROUP`] invocations.
const TARGET_WORKGROUPS: usize = 1024;

/// Fewest keys a chunk takes (9 tiles of 7 at d = 256): fewer, and the join's reads and the
/// chunks' staging outweigh the shorter loop.
pub const MIN_CHUNK_KEYS: usize = 64;

/// Most chunks a row's keys are split into.
const MAX_CHUNKS: usize = 32;

/// Query rows and heads past which nothing splits: the join takes a workgroup a row and head,
/// and a dispatch at most 65,535 a dimension.
const MAX_JOIN_ROWS: usize = 65_535;

/// Chunks of the keys for `workgroups` unsplit workgroups over `s` keys: enough for
/// [`TARGET_WORKGROUPS`] on a GPU, one on a `software` adapter; the tuning's count first
/// (`REXVQA_WIDE_CHUNKS`; 1 keeps every launch whole).
///
/// Why: a question's 330-token prefill is 21 workgroups of 16 rows for each of 8 heads, one
/// wave on a large GPU, whose time is the last rows' (they see every key); split, each
/// workgroup walks a chunk of them and a second dispatch joins the chunks' online softmaxes
/// (measured faster on a GPU:
/// bench/results/device/h200-full-2026-11-28T0514/11-bench-variants.json). A software adapter
/// runs workgroups on a few CPU threads, where the split only adds work (measured slower on
/// lavapipe; `bench/JOURNAL.md`).
pub fn chunks_for(workgroups: usize, s: usize, software: bool) -> usize {
    if let Some(n) = crate::tuning::current().wide_chunks {
        return n;
    }
    if software {
        return 1;
    }
    TARGET_WORKGROUPS
        .div_ceil(workgroups.max(1))
        .min(s / MIN_CHUNK_KEYS)
        .clamp(1, MAX_CHUNKS)
}
