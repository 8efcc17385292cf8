//! The matrix–vector product of decoding (and of a few input rows): a team of invocations a
//! weight row, each decoding its share of the row, then a sum over the team.

// CubeCL needs a variable declared before runtime branches assign it; rustc cannot see that
// the expansion reads the initial value.
#![allow(unused_assignments)]

use burn_cubecl::cubecl;
use burn_cubecl::cubecl::prelude::*;

use super::blocks::*;
use super::gelu_tanh;
use super::ty;

/// Input rows a matrix–vector invocation carries (each decoded weight is used this many times)
/// when a product has more than one; decoding's single row gets a form of its own (the
/// kernel's `rows_x`), without the other three sums' registers and branches.
pub const GEMV_ROWS: usize = 4;

/// Invocations per workgroup of [`qgemv_kernel`]; a power of two for the tree reduction.
pub const GEMV_THREADS: u32 = 64;

/// Invocations that share one weight row in [`qgemv_kernel`] by default (a "team"; the
/// workgroup's [`GEMV_THREADS`] hold `GEMV_THREADS / team` teams, each its own row). The kernel
/// also takes 32 and 16: more chunks per invocation (a 2,560-weight K-quant row has 160
/// chunks, 2.5 per invocation of 64), more rows per workgroup.
pub const GEMV_TEAM: u32 = 64;

/// The sum over each team of each invocation's `acc[i]`, for `i < live` (the input rows this
/// workgroup has, at most `rows_x`), in `sums[slot · GEMV_ROWS · GEMV_THREADS + i ·
/// GEMV_THREADS + team_start]`: subgroup sums when `plane` (teams of the whole workgroup only),
/// a shared-memory tree over each team otherwise. Every invocation must call it (it passes
/// barriers), with the same `live`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn gemv_reduce(
    acc: &Array<f32>,
    sums: &mut Shared<[f32]>,
    slot: usize,
    live: usize,
    #[comptime] rows_x: usize,
    #[comptime] team: u32,
    #[comptime] plane: bool,
) {
    let lane = UNIT_POS as usize;
    let base = slot * GEMV_ROWS * GEMV_THREADS as usize;
    if comptime!(plane && team == GEMV_THREADS) {
        // One partial sum per subgroup, then the first invocation adds the subgroups'.
        let planes = GEMV_THREADS / PLANE_DIM;
        let p = (UNIT_POS / PLANE_DIM) as usize;
        #[unroll]
        for i in 0..rows_x {
            if i < live {
                let s = plane_sum(acc[i]);
                if UNIT_POS_PLANE == 0 {
                    sums[base + i * GEMV_THREADS as usize + p] = s;
                }
            }
        }
        sync_cube();
        if lane == 0 {
            #[unroll]
            for i in 0..rows_x {
                if i < live {
                    let mut t = 0.0f32;
                    for q in 0..planes as usize {
                        t += sums[base + i * GEMV_THREADS as usize + q];
                    }
                    sums[base + i * GEMV_THREADS as usize] = t;
                }
            }
        }
        sync_cube();
    } else {
        #[unroll]
        for i in 0..rows_x {
            if i < live {
                sums[base + i * GEMV_THREADS as usize + lane] = acc[i];
            }
        }
        sync_cube();
        // From the runtime CUBE_DIM_X, not the constant: CubeCL folds a constant initialiser
        // into a comptime value, and mutating it in a runtime loop fails IR verification
        // ("expected operand type cube.ptr, but found cube.index").
        let mut stride = (CUBE_DIM_X / (2 * (GEMV_THREADS / team))) as usize;
        let within = lane % team as usize;
        while stride > 0 {
            if within < stride {
                #[unroll]
                for i in 0..rows_x {
                    if i < live {
                        let b = base + i * GEMV_THREADS as usize;
                        let v = sums[b + lane] + sums[b + lane + stride];
                        sums[b + lane] = v;
                    }
                }
            }
            sync_cube();
            stride /= 2;
        }
    }
}

/// `v` summed over each aligned group of `team` invocations of a subgroup (a butterfly of
/// subgroup shuffles, no workgroup memory or barrier), returned to each of them; `team` at most
/// the subgroup's width.
#[cube]
pub(super) fn team_sum(v: f32, #[comptime] team: u32) -> f32 {
    let mut s = v;
    if comptime!(team >= 32) {
        s += plane_shuffle_xor(s, 16u32);
    }
    if comptime!(team >= 16) {
        s += plane_shuffle_xor(s, 8u32);
    }
    if comptime!(team >= 8) {
        s += plane_shuffle_xor(s, 4u32);
    }
    if comptime!(team >= 4) {
        s += plane_shuffle_xor(s, 2u32);
    }
    if comptime!(team >= 2) {
        s += plane_shuffle_xor(s, 1u32);
    }
    s
}

/// Weights one matrix–vector invocation decodes per step of a chunked type ([`gemv_chunked`]).
pub const GEMV_CHUNK: usize = 16;

/// Whether [`qgemv_kernel`] reads rows of type `ty` by chunks of [`GEMV_CHUNK`] weights (whole
/// words, the block's scales read once per chunk) rather than weight by weight. The two K-quant
/// types of a Q4_K_M model, which carry almost all of a decoded token's bytes.
pub const fn gemv_chunked(ty: u32) -> bool {
    ty == ty::Q4_K || ty == ty::Q6_K
}

/// Whether input row `m0 + r` exists: always for a single-row form (the workgroup check
/// before guarantees it), so its inner loops are straight-line code the driver can schedule
/// loads across.
#[cube]
pub(super) fn row_live(m0: usize, r: usize, m: usize, #[comptime] rows_x: usize) -> bool {
    let mut live = true;
    if comptime!(rows_x > 1) {
        live = m0 + r < m;
    }
    live
}

/// Adds weights `16c .. 16c + 16` of the Q4_K row at word `row`, times `x`'s rows `m0 ..`, to
/// `acc`. Chunk `i` of a block (16 a block) reads two neighbouring words of `qs` (so a block's
/// 16 invocations read its 32 words side by side): their low nibbles are weights `8·(i%4) ..`
/// of sub-block `2·(i/4)`, their high nibbles the same weights of the next sub-block. Each
/// weight is `d·sc·q − dmin·m` as in [`dequant_one`], so only the order of the sums differs.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn chunk_q4k<H: CubePrimitive>(
    x: &Tensor<f32>,
    w: &Tensor<u32>,
    wh: &Tensor<H>,
    row: usize,
    c: usize,
    acc: &mut Array<f32>,
    m0: usize,
    m: usize,
    k: usize,
    #[comptime] rows_x: usize,
    #[comptime] native: bool,
) {
    let base = row + (c / 16) * 36;
    let i = c % 16;
    let n = i / 4;
    let part = i % 4;
    let d = half_at(w, wh, base, 0, native);
    let dmin = half_at(w, wh, base, 1, native);
    let (sc_lo, m_lo) = scale_min_k4(w, base, 4, 2 * n);
    let (sc_hi, m_hi) = scale_min_k4(w, base, 4, 2 * n + 1);
    let j0 = (c / 16) * 256 + n * 64 + part * 8;
    #[unroll]
    for h in 0..2u32 {
        let word = w[base + 4 + n * 8 + part * 2 + h as usize];
        #[unroll]
        for b in 0..4u32 {
            let byte = (word >> (8 * b)) & 0xFFu32;
            let lo = d * sc_lo * f32::cast_from(byte & 0xFu32) - dmin * m_lo;
            let hi = d * sc_hi * f32::cast_from(byte >> 4u32) - dmin * m_hi;
            let j = j0 + (4 * h + b) as usize;
            #[unroll]
            for r in 0..rows_x {
                if row_live(m0, r, m, rows_x) {
                    let xb = (m0 + r) * k;
                    acc[r] += x[xb + j] * lo;
                    acc[r] += x[xb + j + 32] * hi;
                }
            }
        }
    }
}

/// Adds weights of chunk `c` of the Q6_K row at word `row` as [`chunk_q4k`] does. Chunk `i` of
/// a block holds positions `l0 = 4·(i%8) .. l0 + 4` of half `i/8` in each of its four quarters:
/// one word of `ql` for quarters 0 and 2 (low and high nibbles), one for 1 and 3, and one of
/// `qh`, each read whole. Each weight is `d·sc·q` as in [`dequant_one`].
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn chunk_q6k<H: CubePrimitive>(
    x: &Tensor<f32>,
    w: &Tensor<u32>,
    wh: &Tensor<H>,
    row: usize,
    c: usize,
    acc: &mut Array<f32>,
    m0: usize,
    m: usize,
    k: usize,
    #[comptime] rows_x: usize,
    #[comptime] native: bool,
) {
    let base = row + (c / 16) * 53;
    let i = c % 16;
    let n = i / 8;
    let l0 = (i % 8) * 4;
    let d = half_at(w, wh, base + 52, 0, native);
    let ql02 = w[base + n * 16 + l0 / 4];
    let ql13 = w[base + n * 16 + 8 + l0 / 4];
    let qh = w[base + 32 + n * 8 + l0 / 4];
    let j0 = (c / 16) * 256 + n * 128 + l0;
    #[unroll]
    for quarter in 0..4u32 {
        let sc = signed_byte(byte_at(
            w,
            base,
            192 + n * 8 + l0 / 16 + 2 * quarter as usize,
        ));
        let mut ql = ql02;
        if comptime!(quarter % 2 == 1) {
            ql = ql13;
        }
        #[unroll]
        for b in 0..4u32 {
            let qlb = (ql >> (8 * b)) & 0xFFu32;
            let mut lo = qlb & 0xFu32;
            if comptime!(quarter >= 2) {
                lo = qlb >> 4u32;
            }
            let hi = (qh >> (8 * b + 2 * quarter)) & 3u32;
            let v = d * sc * (f32::cast_from(lo | (hi << 4u32)) - 32.0f32);
            let j = j0 + (quarter * 32 + b) as usize;
            #[unroll]
            for r in 0..rows_x {
                if row_live(m0, r, m, rows_x) {
                    acc[r] += x[(m0 + r) * k + j] * v;
                }
            }
        }
    }
}

/// Chunk `c` of a [`gemv_chunked`] row: [`chunk_q4k`] or [`chunk_q6k`].
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn gemv_chunk<H: CubePrimitive>(
    x: &Tensor<f32>,
    w: &Tensor<u32>,
    wh: &Tensor<H>,
    row: usize,
    c: usize,
    acc: &mut Array<f32>,
    m0: usize,
    m: usize,
    k: usize,
    #[comptime] rows_x: usize,
    #[comptime] ty: u32,
    #[comptime] native: bool,
) {
    if comptime!(ty == ty::Q4_K) {
        chunk_q4k(x, w, wh, row, c, acc, m0, m, k, rows_x, native);
    } else {
        chunk_q6k(x, w, wh, row, c, acc, m0, m, k, rows_x, native);
    }
}

/// Adds row `row` (at word `row`, type `ty`) times `x`'s rows `m0 ..` to `acc`, this invocation's
/// share as invocation `lane` of a team of `team`: chunks of [`GEMV_CHUNK`] weights for the
/// [`gemv_chunked`] types, single weights otherwise, the team's invocations side by side so
/// that neighbours read neighbouring words.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn gemv_row<H: CubePrimitive>(
    x: &Tensor<f32>,
    w: &Tensor<u32>,
    wh: &Tensor<H>,
    row: usize,
    acc: &mut Array<f32>,
    m0: usize,
    m: usize,
    k: usize,
    lane: usize,
    #[comptime] team: u32,
    #[comptime] rows_x: usize,
    #[comptime] ty: u32,
    #[comptime] native: bool,
) {
    if comptime!(gemv_chunked(ty)) {
        let chunks = k / GEMV_CHUNK;
        let mut c = lane;
        while c < chunks {
            gemv_chunk(x, w, wh, row, c, acc, m0, m, k, rows_x, ty, native);
            c += team as usize;
        }
    } else {
        let mut j = lane;
        while j < k {
            let wv = dequant_one(w, wh, row, j, ty, native);
            #[unroll]
            for r in 0..rows_x {
                if row_live(m0, r, m, rows_x) {
                    acc[r] += x[(m0 + r) * k + j] * wv;
                }
            }
            j += team as usize;
        }
    }
}

/// [`gemv_row`] for row `r` of a product's matrix, stacked or not (see [`stage_weight_run`]); the
/// branch is uniform across the team, which has one row.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn gemv_matrix_row<H: CubePrimitive>(
    x: &Tensor<f32>,
    w: &Tensor<u32>,
    wh: &Tensor<H>,
    w2: &Tensor<u32>,
    wh2: &Tensor<H>,
    r: usize,
    acc: &mut Array<f32>,
    m0: usize,
    m: usize,
    k: usize,
    n1: usize,
    rw: usize,
    rw2: usize,
    lane: usize,
    #[comptime] team: u32,
    #[comptime] rows_x: usize,
    #[comptime] ty: u32,
    #[comptime] ty2: u32,
    #[comptime] stacked: bool,
    #[comptime] native: bool,
) {
    if comptime!(stacked) {
        if r < n1 {
            gemv_row(
                x,
                w,
                wh,
                r * rw,
                acc,
                m0,
                m,
                k,
                lane,
                team,
                rows_x,
                ty,
                native,
            );
        } else {
            gemv_row(
                x,
                w2,
                wh2,
                (r - n1) * rw2,
                acc,
                m0,
                m,
                k,
                lane,
                team,
                rows_x,
                ty2,
                native,
            );
        }
    } else {
        gemv_row(
            x,
            w,
            wh,
            r * rw,
            acc,
            m0,
            m,
            k,
            lane,
            team,
            rows_x,
            ty,
            native,
        );
    }
}

/// `out[m, r] = Σ_j x[m, j] · W[r, j]` for few input rows (decode): one team of `team`
/// invocations per output column and group of `rows_x` input rows ([`GEMV_ROWS`], or 1 for a
/// single row), side by side along the row ([`gemv_row`]), then a reduction over the team:
/// subgroup shuffles when `shuffle` (a team within every subgroup the adapter makes), subgroup
/// sums when `plane` and the team is the workgroup, a shared-memory tree otherwise. The matrix, `stacked` and `gelu` are as in
/// [`qmatmul_kernel`] (with `gelu` a team reduces its gate and up rows side by side).
///
/// The workgroup index is linear over a 2-D dispatch (`CUBE_POS`), since a vocabulary-sized
/// matrix has more rows than one dispatch dimension allows (65535).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub fn qgemv_kernel<H: CubePrimitive>(
    x: &Tensor<f32>,
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
    #[comptime] ty: u32,
    #[comptime] ty2: u32,
    #[comptime] stacked: bool,
    #[comptime] gelu: bool,
    #[comptime] plane: bool,
    #[comptime] native: bool,
    #[comptime] rows_x: usize,
    #[comptime] team: u32,
    #[comptime] shuffle: bool,
    #[define(H)] _half: ElemType,
) {
    let n = n as usize;
    let m = m as usize;
    let k = k as usize;
    let n1 = n1 as usize;
    let rw = row_words as usize;
    let rw2 = row_words2 as usize;
    let teams = comptime!((GEMV_THREADS / team) as usize);
    // Slot 0 for the row's sums, slot 1 for the up row's with `gelu`.
    let mut sums = Shared::<[f32]>::new_slice(2 * GEMV_ROWS * GEMV_THREADS as usize);
    let cube = CUBE_POS;
    let groups = m.div_ceil(rows_x);
    let row_groups = n.div_ceil(teams);
    // Uniform across the workgroup, so no invocation skips a barrier another one waits at.
    if cube >= row_groups * groups {
        terminate!();
    }
    let all = UNIT_POS as usize;
    let lane = all % team as usize;
    let r = (cube % row_groups) * teams + all / team as usize;
    let m0 = (cube / row_groups) * rows_x;
    let mut acc = Array::<f32>::new(rows_x);
    let mut up = Array::<f32>::new(rows_x);
    #[unroll]
    for i in 0..rows_x {
        acc[i] = 0.0f32;
        up[i] = 0.0f32;
    }
    // A team past the last row adds nothing but still passes the reduction's barriers.
    if r < n {
        gemv_matrix_row(
            x, w, wh, w2, wh2, r, &mut acc, m0, m, k, n1, rw, rw2, lane, team, rows_x, ty, ty2,
            stacked, native,
        );
        if comptime!(gelu) {
            gemv_matrix_row(
                x,
                w,
                wh,
                w2,
                wh2,
                n + r,
                &mut up,
                m0,
                m,
                k,
                n1,
                rw,
                rw2,
                lane,
                team,
                rows_x,
                ty,
                ty2,
                stacked,
                native,
            );
        }
    }
    let live = min(m - m0, rows_x);
    let col = col0 as usize + r;
    if comptime!(shuffle) {
        // The team is within one subgroup: shuffles sum it, every invocation gets the sums.
        #[unroll]
        for i in 0..rows_x {
            let mut v = team_sum(acc[i], team);
            if comptime!(gelu) {
                v = gelu_tanh(v) * team_sum(up[i], team);
            }
            if lane == 0 && i < live && r < n {
                out[(m0 + i) * ld as usize + col] = v;
            }
        }
    } else {
        gemv_reduce(&acc, &mut sums, 0, live, rows_x, team, plane);
        if comptime!(gelu) {
            gemv_reduce(&up, &mut sums, 1, live, rows_x, team, plane);
        }
        let first = all - lane;
        if lane < rows_x && lane < live && r < n {
            let mut v = sums[lane * GEMV_THREADS as usize + first];
            if comptime!(gelu) {
                v = gelu_tanh(v) * sums[(GEMV_ROWS + lane) * GEMV_THREADS as usize + first];
            }
            out[(m0 + lane) * ld as usize + col] = v;
        }
    }
}
