//! The one-output-an-invocation product and the row gather: any shape, any adapter.

// CubeCL needs a variable declared before runtime branches assign it; rustc cannot see that
// the expansion reads the initial value.
#![allow(unused_assignments)]

use burn_cubecl::cubecl;
use burn_cubecl::cubecl::prelude::*;

use super::blocks::*;
use super::gelu_tanh;
use super::runs::*;

/// `out[m, col0 + r] = Σ_j x[m, j] · W[r, j]` for packed rows `W` of `k` weights; `out`'s rows
/// are `ld` apart (`ld = n`, `col0 = 0` for a matrix of its own; a chunk of a split matrix
/// writes its columns of the whole output, see `QuantOps::qmatmul_into`).
///
/// Every product kernel reads its matrix as one: `w`'s `n1` rows then, with `stacked`, `w2`'s
/// (otherwise `w2` is `w` again, never read; see [`stage_weight_run`]). With `gelu` the matrix is a
/// joined gate and up of `2n` rows and output column `r` is `gelu_tanh(gate r) · up r`: the
/// GELU·up of the gated MLP applied to the two sums where they are made, with no dispatch of its
/// own and no write and read of the `2n` products.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub fn qmatmul_kernel<H: CubePrimitive, V: Size>(
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
    #[comptime] ty: u32,
    #[comptime] ty2: u32,
    #[comptime] stacked: bool,
    #[comptime] gelu: bool,
    #[comptime] native: bool,
    #[define(H)] _half: ElemType,
) {
    let idx = ABSOLUTE_POS;
    let n = n as usize;
    if idx >= m as usize * n {
        terminate!();
    }
    let k = k as usize;
    let n1 = n1 as usize;
    let rw = row_words as usize;
    let rw2 = row_words2 as usize;
    let m = idx / n;
    let r = idx % n;
    let xb = m * k;
    // The matrix's rows: `n`, or the gate's and the up's `2n` with `gelu`.
    let rows = comptime!(if gelu { 2usize } else { 1usize }) * n;
    let mut acc = 0.0f32;
    let mut up = 0.0f32;
    // Runs of 4 weights ([`stage_run`]: a block's scale widened once a run, not once a
    // weight), each added in turn, so the sums are the weight-by-weight loop's.
    let mut wv = Array::<f32>::new(4usize);
    let mut uv = Array::<f32>::new(4usize);
    let mut xv = Array::<f32>::new(4usize);
    let mut j0 = 0usize;
    while j0 < k {
        stage_weight_run::<H, Array<f32>>(
            w, wh, w2, wh2, r, j0, k, rows, n1, rw, rw2, &mut wv, 0, ty, ty2, stacked, native,
        );
        if comptime!(gelu) {
            stage_weight_run::<H, Array<f32>>(
                w,
                wh,
                w2,
                wh2,
                n + r,
                j0,
                k,
                rows,
                n1,
                rw,
                rw2,
                &mut uv,
                0,
                ty,
                ty2,
                stacked,
                native,
            );
        }
        input_run::<V, Array<f32>>(x, xb, j0, k, &mut xv, 0);
        #[unroll]
        for t in 0..4usize {
            if j0 + t < k {
                acc += xv[t] * wv[t];
                if comptime!(gelu) {
                    up += xv[t] * uv[t];
                }
            }
        }
        j0 += 4;
    }
    if comptime!(gelu) {
        acc = gelu_tanh(acc) * up;
    }
    out[m * ld as usize + col0 as usize + r] = acc;
}

/// `out[t, j] = W[ids[t] - row0, j]`: an embedding lookup on packed rows. Ids outside
/// `row0..row0 + rows` get 0, or with `only_hits` leave `out` as it is, so ids that stay on the
/// device are looked up in every chunk of a split matrix, each chunk writing its own rows into
/// the first chunk's output: one dispatch per chunk and no sum.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub fn qgather_kernel<H: CubePrimitive>(
    ids: &Tensor<u32>,
    w: &Tensor<u32>,
    wh: &Tensor<H>,
    out: &mut Tensor<f32>,
    k: u32,
    row_words: u32,
    row0: u32,
    rows: u32,
    #[comptime] ty: u32,
    #[comptime] native: bool,
    #[comptime] only_hits: bool,
    #[define(H)] _half: ElemType,
) {
    let idx = ABSOLUTE_POS;
    if idx >= out.len() {
        terminate!();
    }
    let k = k as usize;
    let t = idx / k;
    let j = idx % k;
    let id = ids[t];
    let mut v = 0.0f32;
    let mut hit = false;
    if id >= row0 {
        let r = id - row0;
        if r < rows {
            v = dequant_one(w, wh, r as usize * row_words as usize, j, ty, native);
            hit = true;
        }
    }
    if comptime!(only_hits) {
        if hit {
            out[idx] = v;
        }
    } else {
        out[idx] = v;
    }
}
