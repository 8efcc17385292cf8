//! The tiled products of prefill and the vision tower: a workgroup stages a slice of the input
//! and of the decoded weights in workgroup memory and each invocation accumulates a block of
//! outputs; a product split over its rows' weights sums its chunks in [`split_sum_kernel`].

// CubeCL needs a variable declared before runtime branches assign it; rustc cannot see that
// the expansion reads the initial value.
#![allow(unused_assignments)]

use burn_cubecl::cubecl;
use burn_cubecl::cubecl::prelude::*;

use super::runs::*;

/// The weights `k_begin .. k_end` of a row that the workgroup at `CUBE_POS_Z` multiplies, and
/// where its outputs start: the whole row at 0 where `k_chunk ≥ k` (one chunk), otherwise
/// chunk `z` of `k_chunk` weights, whose sums go to the `z`-th `m × ld` block of partial sums
/// that [`split_sum_kernel`] adds up. `k_chunk` is a multiple of the kernel's step, so the
/// chunks' steps are the unsplit kernel's steps, each in one chunk.
#[cube]
pub(super) fn split_range(k: usize, k_chunk: usize, m: usize, ld: usize) -> (usize, usize, usize) {
    let z = CUBE_POS_Z as usize;
    let k_begin = z * k_chunk;
    let mut k_end = k_begin + k_chunk;
    if k_end > k {
        k_end = k;
    }
    (k_begin, k_end, z * m * ld)
}

/// `out[r, col0 + c] = Σ_z part[z, r, c]` over the `splits` blocks of partial sums a tiled
/// product split over its row's weights wrote (`part` is `[splits, m, n]`), in chunk order, so
/// a product's bits depend on its split count and nothing else.
#[cube(launch)]
pub fn split_sum_kernel(
    part: &Tensor<f32>,
    out: &mut Tensor<f32>,
    m: u32,
    n: u32,
    ld: u32,
    col0: u32,
    splits: u32,
) {
    let idx = ABSOLUTE_POS;
    let (m, n) = (m as usize, n as usize);
    if idx >= m * n {
        terminate!();
    }
    let mut s = part[idx];
    for z in 1..splits as usize {
        s += part[z * m * n + idx];
    }
    out[(idx / n) * ld as usize + col0 as usize + idx % n] = s;
}

/// Output tile side of [`qmatmul_tiled_kernel`] (input rows × weight rows per workgroup).
pub const TILE: usize = 64;
/// Weights per row staged per step; 2 · 64 · 17 floats = 8.5 KiB of workgroup memory (within
/// WebGPU's default 16 KiB).
pub const TILE_K: usize = 16;
/// Outputs per side of an invocation's block in [`qmatmul_tiled_kernel`]: 4 × 4, 16 × 16
/// invocations a workgroup (8 × 8 blocks ran slower on a GPU:
/// bench/results/device/h200-full-2026-11-27T0901/10-bench-tile8.json). The default form is
/// [`qmatmul_tiled_vec_kernel`]; this one is `REXVQA_TILE_PER=s4`, natively.
pub const TILE_PER: u32 = 4;
/// Row stride of the staged rows in workgroup memory: one more than [`TILE_K`] because the
/// invocations of a subgroup read different rows at the same `kk`; at a stride of 16 words the
/// 16 weight rows a half-subgroup reads fall in 2 of the 32 memory banks (8-way conflicts on
/// every read of the inner loop), at 17 in 16 different banks.
pub(super) const STRIDE: usize = TILE_K + 1;

/// `out[m, r] = Σ_j x[m, j] · W[r, j]` for many input rows (prefill, vision): a workgroup stages
/// a 64 × 16 slice of `x` and the same slice of 64 weight rows, decoded once, in workgroup
/// memory, and each invocation accumulates a `per` × `per` block of outputs from it (`per` =
/// [`TILE_PER`]; the workgroup is `64/per` invocations a side). Each weight is decoded once per 64 input rows
/// instead of once per output. The matrix and `stacked` are as in [`qmatmul_kernel`] (no `gelu`
/// form: prefill keeps the GELU kernel).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub fn qmatmul_tiled_kernel<H: CubePrimitive, V: Size>(
    x: &Tensor<Vector<f32, V>>,
    w: &Tensor<u32>,
    wh: &Tensor<H>,
    w2: &Tensor<u32>,
    wh2: &Tensor<H>,
    out: &mut Tensor<f32>,
    m: u32,
    k: u32,
    n: u32,
    n1: u32,
    row_words: u32,
    row_words2: u32,
    ld: u32,
    col0: u32,
    k_chunk: u32,
    #[comptime] ty: u32,
    #[comptime] ty2: u32,
    #[comptime] stacked: bool,
    #[comptime] native: bool,
    #[define(H)] _half: ElemType,
) {
    let m = m as usize;
    let k = k as usize;
    let n = n as usize;
    let n1 = n1 as usize;
    let rw = row_words as usize;
    let rw2 = row_words2 as usize;
    let (k_begin, k_end, out_base) = split_range(k, k_chunk as usize, m, ld as usize);
    let per = comptime!(TILE_PER as usize);
    let side = comptime!(TILE / per);
    let threads = comptime!(side * side);
    let loads = comptime!(TILE * TILE_K / threads);
    let tx = UNIT_POS_X as usize;
    let ty_ = UNIT_POS_Y as usize;
    let tid = ty_ * side + tx;
    let bn = CUBE_POS_X as usize * TILE;
    let bm = CUBE_POS_Y as usize * TILE;
    let mut xs = Shared::<[f32]>::new_slice(TILE * STRIDE);
    let mut ws = Shared::<[f32]>::new_slice(TILE * STRIDE);
    let mut acc = Array::<f32>::new(comptime!(per * per));
    #[unroll]
    for e in 0..comptime!(per * per) {
        acc[e] = 0.0f32;
    }
    let mut k0 = k_begin;
    while k0 < k_end {
        // Each invocation stages runs of 4 neighbouring columns of one row, so that a K-quant
        // run is decoded from one word of quants and one set of scales ([`stage_run`]).
        #[unroll]
        for q in 0..comptime!(loads / 4) {
            let e = tid + q * threads;
            let rr = e / (TILE_K / 4);
            let c0 = (e % (TILE_K / 4)) * 4;
            let j0 = k0 + c0;
            let at = rr * STRIDE + c0;
            stage_input_run::<V, Shared<[f32]>>(x, bm + rr, j0, m, k, &mut xs, at);
            stage_weight_run::<H, Shared<[f32]>>(
                w,
                wh,
                w2,
                wh2,
                bn + rr,
                j0,
                k,
                n,
                n1,
                rw,
                rw2,
                &mut ws,
                at,
                ty,
                ty2,
                stacked,
                native,
            );
        }
        sync_cube();
        #[unroll]
        for kk in 0..TILE_K {
            let mut a = Array::<f32>::new(per);
            let mut b = Array::<f32>::new(per);
            #[unroll]
            for i in 0..per {
                a[i] = xs[(ty_ + i * side) * STRIDE + kk];
                b[i] = ws[(tx + i * side) * STRIDE + kk];
            }
            #[unroll]
            for i in 0..per {
                #[unroll]
                for jn in 0..per {
                    acc[i * per + jn] += a[i] * b[jn];
                }
            }
        }
        sync_cube();
        k0 += TILE_K;
    }
    #[unroll]
    for i in 0..per {
        let row = bm + ty_ + i * side;
        #[unroll]
        for jn in 0..per {
            let col = bn + tx + jn * side;
            if row < m && col < n {
                out[out_base + row * ld as usize + col0 as usize + col] = acc[i * per + jn];
            }
        }
    }
}

/// Four floats: one 16-byte read of workgroup memory in [`qmatmul_tiled_vec_kernel`].
pub(super) type V4 = Vector<f32, Const<4>>;

/// Invocations a side of [`qmatmul_tiled_vec_kernel`]'s workgroup on a GPU (16 × 16).
pub const VEC_SIDE: u32 = 16;

/// Invocations a side of [`qmatmul_tiled_vec_kernel`]'s workgroup on a software adapter (8 × 8,
/// with 8 × 8 blocks: 64 × 64 tiles). SwiftShader runs a workgroup as groups of 4 SIMD lanes on
/// one CPU thread and, in Chromium, zero-initialises its workgroup memory once per group of 4:
/// 16 × 16 invocations zero their 16 KiB 64 times over for a 128 × 128 tile, 64 B an output,
/// where 8 × 8 zero 8 KiB 16 times over for 64 × 64, 32 B an output, with as many barriers an
/// output (each invocation stages two 4 × 4 blocks a step where 16 × 16's stage one).
pub const SOFTWARE_SIDE: u32 = 8;

/// Weights per row staged a step by [`qmatmul_tiled_vec_kernel`] with `per` × `per` blocks:
/// 32 at 4 × 4 blocks, 16 at 8 × 8, so that the two staged slices of a 16 × 16 workgroup take
/// WebGPU's default 16 KiB of workgroup memory either way (8 KiB at 8 × 8 invocations).
pub const fn vec_tile_k(per: u32) -> usize {
    if per == 8 { 16 } else { 32 }
}

/// 4 × 4 blocks each invocation of a `side` × `side` workgroup stages a step with `per` × `per`
/// blocks: the step's `2 · (side · per / 4) · (tk / 4)` blocks (a slice of `x` and one of the
/// weights) over `side²` invocations; 1 at 16 × 16 invocations, 2 at 8 × 8.
pub const fn vec_stages(per: u32, side: u32) -> usize {
    (per as usize * vec_tile_k(per)) / (8 * side as usize)
}

/// [`qmatmul_tiled_kernel`]'s product with its staged slices stored transposed (`k` major) as
/// runs of 4 floats, so that an invocation reads four of its rows or four of its columns in one
/// 16-byte load: 2 loads a step feed 16 multiply–adds (`per` = 4; 64 × 64 tiles) or 4 feed 64
/// (`per` = 8; 128 × 128), where the scalar form reads one float for every two. An invocation's
/// block is `per / 4` runs of 4 rows by `per / 4` runs of 4 columns, each run `4 · side` apart, so that
/// neighbouring invocations read neighbouring runs. Each invocation stages one 4 × 4 block a
/// step: 4 rows of `x` (the first 128 invocations) or 4 decoded weight runs (the others),
/// written transposed; with `side` = [`SOFTWARE_SIDE`] each stages one block of each
/// ([`vec_stages`]). Same sums in the same order per output as the scalar form.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub fn qmatmul_tiled_vec_kernel<H: CubePrimitive, V: Size>(
    x: &Tensor<Vector<f32, V>>,
    w: &Tensor<u32>,
    wh: &Tensor<H>,
    w2: &Tensor<u32>,
    wh2: &Tensor<H>,
    out: &mut Tensor<f32>,
    m: u32,
    k: u32,
    n: u32,
    n1: u32,
    row_words: u32,
    row_words2: u32,
    ld: u32,
    col0: u32,
    k_chunk: u32,
    #[comptime] ty: u32,
    #[comptime] ty2: u32,
    #[comptime] stacked: bool,
    #[comptime] native: bool,
    #[comptime] per: u32,
    #[comptime] side: u32,
    #[define(H)] _half: ElemType,
) {
    let m = m as usize;
    let k = k as usize;
    let n = n as usize;
    let n1 = n1 as usize;
    let rw = row_words as usize;
    let rw2 = row_words2 as usize;
    let (k_begin, k_end, out_base) = split_range(k, k_chunk as usize, m, ld as usize);
    let stages = comptime!(vec_stages(per, side));
    let side = comptime!(side as usize);
    let tile = comptime!(side * per as usize);
    let tk = comptime!(vec_tile_k(per));
    // Runs of 4 in a staged column of the tile, and an invocation's runs a side.
    let quads = comptime!(tile / 4);
    let runs = comptime!(per as usize / 4);
    let tx = UNIT_POS_X as usize;
    let ty_ = UNIT_POS_Y as usize;
    let tid = ty_ * side + tx;
    let bn = CUBE_POS_X as usize * tile;
    let bm = CUBE_POS_Y as usize * tile;
    let mut xs = Shared::<[V4]>::new_slice(comptime!(tk * quads));
    let mut ws = Shared::<[V4]>::new_slice(comptime!(tk * quads));
    // acc[i · runs + u]: output row i of the invocation's rows, its column run u.
    let mut acc = Array::<V4>::new(comptime!(per as usize * runs));
    #[unroll]
    for e in 0..comptime!(per as usize * runs) {
        acc[e] = V4::zeroed();
    }
    // The blocks of a step, half of `x` then half of the weights: this invocation stages blocks
    // `tid`, `tid + side²`, … ([`vec_stages`]), each 4 rows from 4 · rg, 4 columns from 4 · kc.
    let half = comptime!(tile / 4 * (tk / 4));
    let mut k0 = k_begin;
    while k0 < k_end {
        #[unroll]
        for s in 0..stages {
            let g = tid + s * comptime!(side * side);
            let stages_w = g >= half;
            let b = g % half;
            let kc = b % comptime!(tk / 4);
            let rg = b / comptime!(tk / 4);
            let j0 = k0 + kc * 4;
            // vals[4 · i + t]: row 4 · rg + i, column j0 + t.
            let mut vals = Array::<f32>::new(16usize);
            #[unroll]
            for i in 0..4usize {
                let rr = rg * 4 + i;
                if stages_w {
                    stage_weight_run::<H, Array<f32>>(
                        w,
                        wh,
                        w2,
                        wh2,
                        bn + rr,
                        j0,
                        k,
                        n,
                        n1,
                        rw,
                        rw2,
                        &mut vals,
                        i * 4,
                        ty,
                        ty2,
                        stacked,
                        native,
                    );
                } else {
                    stage_input_run::<V, Array<f32>>(x, bm + rr, j0, m, k, &mut vals, i * 4);
                }
            }
            #[unroll]
            for t in 0..4usize {
                let mut v = V4::empty();
                v.insert(0usize, vals[t]);
                v.insert(1usize, vals[4 + t]);
                v.insert(2usize, vals[8 + t]);
                v.insert(3usize, vals[12 + t]);
                let at = (kc * 4 + t) * quads + rg;
                if stages_w {
                    ws[at] = v;
                } else {
                    xs[at] = v;
                }
            }
        }
        sync_cube();
        #[unroll]
        for kk in 0..tk {
            let mut a = Array::<V4>::new(runs);
            let mut bv = Array::<V4>::new(runs);
            #[unroll]
            for u in 0..runs {
                a[u] = xs[kk * quads + u * side + ty_];
                bv[u] = ws[kk * quads + u * side + tx];
            }
            #[unroll]
            for v in 0..runs {
                #[unroll]
                for e in 0..4usize {
                    let xv = V4::broadcast(a[v].extract(e));
                    #[unroll]
                    for u in 0..runs {
                        acc[(v * 4 + e) * runs + u] += xv * bv[u];
                    }
                }
            }
        }
        sync_cube();
        k0 += tk;
    }
    #[unroll]
    for v in 0..runs {
        #[unroll]
        for e in 0..4usize {
            let row = bm + (v * side + ty_) * 4 + e;
            #[unroll]
            for u in 0..runs {
                let c = acc[(v * 4 + e) * runs + u];
                let col = bn + (u * side + tx) * 4;
                let base = out_base + row * ld as usize + col0 as usize + col;
                if row < m {
                    #[unroll]
                    for f in 0..4usize {
                        if col + f < n {
                            out[base + f] = c.extract(f);
                        }
                    }
                }
            }
        }
    }
}
