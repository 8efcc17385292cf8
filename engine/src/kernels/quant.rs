//! CubeCL kernels that read GGUF blocks (in the padded layout of [`crate::quant::pack`]) directly:
//! a dequantising matrix multiply and a dequantising row gather. Each weight is decoded with
//! the same integer and float operations as [`crate::quant::dequantize`], so a kernel differs from
//! "dequantise on the CPU, then multiply in f32" only by summation order. Every kernel comes in
//! two forms that widen the f16 numbers of the blocks (F16 weights, block scales) differently:
//! in integer arithmetic, which any adapter runs, or by reading the same buffer as f16 values
//! and converting them (`native`, WebGPU's `shader-f16`): one load and one conversion instead
//! of a dozen integer operations and a branch. Both are exact, so the two forms give identical
//! results. (Not a `bitcast<vec2<f16>>` of a word: naga, which compiles WGSL natively, keeps a
//! bitcast's vector width and rejects it.)

// CubeCL needs a variable declared before runtime branches assign it; rustc cannot see that
// the expansion reads the initial value.
#![allow(unused_assignments)]

use burn_cubecl::cubecl;
use burn_cubecl::cubecl::prelude::*;

/// ggml type ids the kernels decode (the `ty` comptime parameter).
pub mod ty {
    /// F32.
    pub const F32: u32 = 0;
    /// F16.
    pub const F16: u32 = 1;
    /// Q4_0.
    pub const Q4_0: u32 = 2;
    /// Q5_0.
    pub const Q5_0: u32 = 6;
    /// Q8_0.
    pub const Q8_0: u32 = 8;
    /// Q4_K.
    pub const Q4_K: u32 = 12;
    /// Q5_K.
    pub const Q5_K: u32 = 13;
    /// Q6_K.
    pub const Q6_K: u32 = 14;
    /// BF16.
    pub const BF16: u32 = 30;
}

/// Byte `off` of the block starting at word `base`.
#[cube]
fn byte_at(w: &Tensor<u32>, base: usize, off: usize) -> u32 {
    let shift = ((off % 4) * 8) as u32;
    (w[base + off / 4] >> shift) & 0xFFu32
}

/// IEEE half bits to f32, exact for every value (subnormals included), without shader-f16.
#[cube]
fn half_to_f32(h: u32) -> f32 {
    let sign = (h & 0x8000u32) << 16u32;
    let exp = (h >> 10u32) & 0x1Fu32;
    let mant = h & 0x3FFu32;
    let mut bits = 0u32;
    if exp == 0u32 {
        // Zero or subnormal: mant * 2^-24 is exact in f32.
        let mag = f32::cast_from(mant) * 5.960_464_5e-8f32;
        bits = u32::reinterpret(mag) | sign;
    } else if exp == 31u32 {
        bits = sign | 0x7F80_0000u32 | (mant << 13u32);
    } else {
        bits = sign | ((exp + 112u32) << 23u32) | (mant << 13u32);
    }
    f32::reinterpret(bits)
}

/// The f16 in half `hi` (0 low, 1 high) of word `i` of the packed rows, as an f32. `wh` is the
/// same buffer bound as f16 values; with `native` (shader-f16) the adapter converts one of
/// those, otherwise integer arithmetic widens the bits of `w` (`wh` is then unused). Both are
/// exact, so the two forms agree bit for bit.
#[cube]
fn half_at<H: CubePrimitive>(
    w: &Tensor<u32>,
    wh: &Tensor<H>,
    i: usize,
    hi: usize,
    #[comptime] native: bool,
) -> f32 {
    let mut v = 0.0f32;
    if comptime!(native) {
        v = f32::cast_from(wh[2 * i + hi]);
    } else {
        v = half_to_f32((w[i] >> ((hi * 16) as u32)) & 0xFFFFu32);
    }
    v
}

/// A byte read as i8, as f32.
#[cube]
fn signed_byte(b: u32) -> f32 {
    let mut v = f32::cast_from(b);
    if b >= 128u32 {
        v -= 256.0f32;
    }
    v
}

/// The 6-bit scale and min of K-quant sub-block `j`; `sbase` is the byte offset of the
/// 12 packed scale bytes within the block. ref: ggml-quants.c `get_scale_min_k4`.
#[cube]
fn scale_min_k4(w: &Tensor<u32>, base: usize, sbase: usize, j: usize) -> (f32, f32) {
    let mut sc = 0u32;
    let mut m = 0u32;
    if j < 4 {
        sc = byte_at(w, base, sbase + j) & 63u32;
        m = byte_at(w, base, sbase + j + 4) & 63u32;
    } else {
        let hi = byte_at(w, base, sbase + j + 4);
        sc = (hi & 0xFu32) | ((byte_at(w, base, sbase + j - 4) >> 6u32) << 4u32);
        m = (hi >> 4u32) | ((byte_at(w, base, sbase + j) >> 6u32) << 4u32);
    }
    (f32::cast_from(sc), f32::cast_from(m))
}

/// Weight `j` of the packed row starting at word `row`; `native` widens f16 numbers with the
/// adapter's f16 type (see [`half_lo`]).
#[cube]
pub fn dequant_one<H: CubePrimitive>(
    w: &Tensor<u32>,
    wh: &Tensor<H>,
    row: usize,
    j: usize,
    #[comptime] ty: u32,
    #[comptime] native: bool,
) -> f32 {
    let mut v = 0.0f32;
    if comptime!(ty == ty::F32) {
        v = f32::reinterpret(w[row + j]);
    } else if comptime!(ty == ty::F16) {
        v = half_at(w, wh, row + j / 2, j % 2, native);
    } else if comptime!(ty == ty::BF16) {
        let shift = ((j % 2) * 16) as u32;
        v = f32::reinterpret(((w[row + j / 2] >> shift) & 0xFFFFu32) << 16u32);
    } else if comptime!(ty == ty::Q8_0) {
        // {f16 d; i8 qs[32]} padded to 9 words.
        let base = row + (j / 32) * 9;
        let d = half_at(w, wh, base, 0, native);
        v = signed_byte(byte_at(w, base, 2 + j % 32)) * d;
    } else if comptime!(ty == ty::Q4_0) {
        // {f16 d; u8 qs[16]} padded to 5 words.
        let base = row + (j / 32) * 5;
        let i = j % 32;
        let d = half_at(w, wh, base, 0, native);
        let b = byte_at(w, base, 2 + i % 16);
        let mut q = b & 0xFu32;
        if i >= 16 {
            q = b >> 4u32;
        }
        v = (f32::cast_from(q) - 8.0f32) * d;
    } else if comptime!(ty == ty::Q5_0) {
        // {f16 d; u8 qh[4]; u8 qs[16]} padded to 6 words.
        let base = row + (j / 32) * 6;
        let i = j % 32;
        let d = half_at(w, wh, base, 0, native);
        let qh = straddle(w[base], w[base + 1]);
        let b = byte_at(w, base, 6 + i % 16);
        let mut q = 0u32;
        if i < 16 {
            q = (b & 0xFu32) | (((qh >> (i as u32)) << 4u32) & 0x10u32);
        } else {
            q = (b >> 4u32) | ((qh >> ((i - 16) as u32 + 12u32)) & 0x10u32);
        }
        v = (f32::cast_from(q) - 16.0f32) * d;
    } else if comptime!(ty == ty::Q4_K) {
        // {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]} = 36 words.
        let base = row + (j / 256) * 36;
        let i = j % 256;
        let d = half_at(w, wh, base, 0, native);
        let dmin = half_at(w, wh, base, 1, native);
        let n = i / 64;
        let within = i % 64;
        let (sc, m) = scale_min_k4(w, base, 4, 2 * n + within / 32);
        let b = byte_at(w, base, 16 + n * 32 + within % 32);
        let mut q = b & 0xFu32;
        if within >= 32 {
            q = b >> 4u32;
        }
        v = d * sc * f32::cast_from(q) - dmin * m;
    } else if comptime!(ty == ty::Q5_K) {
        // {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]} = 44 words.
        let base = row + (j / 256) * 44;
        let i = j % 256;
        let d = half_at(w, wh, base, 0, native);
        let dmin = half_at(w, wh, base, 1, native);
        let n = i / 64;
        let within = i % 64;
        let l = within % 32;
        let (sc, m) = scale_min_k4(w, base, 4, 2 * n + within / 32);
        let ql = byte_at(w, base, 48 + n * 32 + l);
        let qh = byte_at(w, base, 16 + l);
        let mut q = ql & 0xFu32;
        let mut bit = 1u32 << ((2 * n) as u32);
        if within >= 32 {
            q = ql >> 4u32;
            bit = 2u32 << ((2 * n) as u32);
        }
        if (qh & bit) != 0u32 {
            q += 16u32;
        }
        v = d * sc * f32::cast_from(q) - dmin * m;
    } else if comptime!(ty == ty::Q6_K) {
        // {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d} padded to 53 words.
        let base = row + (j / 256) * 53;
        let i = j % 256;
        let d = half_at(w, wh, base + 52, 0, native);
        let n = i / 128;
        let w128 = i % 128;
        let l = w128 % 32;
        let quarter = w128 / 32;
        let qh = byte_at(w, base, 128 + n * 32 + l);
        // Quarters 0/2 read ql[l], 1/3 read ql[l+32]; 0/1 take low nibbles, 2/3 high ones.
        let ql = byte_at(w, base, n * 64 + l + (quarter % 2) * 32);
        let mut lo = ql & 0xFu32;
        if quarter >= 2 {
            lo = ql >> 4u32;
        }
        let hi = (qh >> ((2 * quarter) as u32)) & 3u32;
        let q = f32::cast_from(lo | (hi << 4u32)) - 32.0f32;
        let sc = signed_byte(byte_at(w, base, 192 + n * 8 + l / 16 + 2 * quarter));
        v = d * sc * q;
    }
    v
}

/// `√(2/π)` and the cubic coefficient of GELU's tanh approximation (as in
/// [`crate::model::nn::gelu_tanh`]).
pub const SQRT_2_OVER_PI: f32 = 0.797_884_6;
/// See [`SQRT_2_OVER_PI`].
pub const GELU_CUBIC: f32 = 0.044_715;
/// tanh is ±1 in f32 beyond |9.02|; SwiftShader's tanh returns NaN past ~44 (see
/// [`crate::model::nn::gelu_tanh`]), so the argument is clamped first, as there.
pub const TANH_SATURATED: f32 = 10.0;

/// GELU with the tanh approximation, the formula of [`crate::model::nn::gelu_tanh`] term by
/// term: shared by the fused GELU kernels and the products that apply it to their outputs, so
/// both give the same bits.
#[cube]
pub fn gelu_tanh(x: f32) -> f32 {
    let inner = (x + x * x * x * GELU_CUBIC) * SQRT_2_OVER_PI;
    let inner = clamp(inner, -TANH_SATURATED, TANH_SATURATED);
    x * 0.5f32 * (inner.tanh() + 1.0f32)
}

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
fn gemv_reduce(
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
fn team_sum(v: f32, #[comptime] team: u32) -> f32 {
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
fn row_live(m0: usize, r: usize, m: usize, #[comptime] rows_x: usize) -> bool {
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
fn chunk_q4k<H: CubePrimitive>(
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
fn chunk_q6k<H: CubePrimitive>(
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
fn gemv_chunk<H: CubePrimitive>(
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
fn gemv_row<H: CubePrimitive>(
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
    #[comptime] unroll: u32,
    #[comptime] ty: u32,
    #[comptime] native: bool,
) {
    if comptime!(gemv_chunked(ty)) {
        let chunks = k / GEMV_CHUNK;
        let mut c = lane;
        // Two chunks a step with `unroll` 2: both chunks' loads in one stretch of code, in the
        // order of the one-chunk loop (so the same sums).
        if comptime!(unroll == 2) {
            while c + (team as usize) < chunks {
                gemv_chunk(x, w, wh, row, c, acc, m0, m, k, rows_x, ty, native);
                gemv_chunk(
                    x,
                    w,
                    wh,
                    row,
                    c + team as usize,
                    acc,
                    m0,
                    m,
                    k,
                    rows_x,
                    ty,
                    native,
                );
                c += 2 * team as usize;
            }
        }
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
fn gemv_matrix_row<H: CubePrimitive>(
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
    #[comptime] unroll: u32,
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
                unroll,
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
                unroll,
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
            unroll,
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
    #[comptime] unroll: u32,
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
            x, w, wh, w2, wh2, r, &mut acc, m0, m, k, n1, rw, rw2, lane, team, rows_x, unroll, ty,
            ty2, stacked, native,
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
                unroll,
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

/// The weights `k_begin .. k_end` of a row that the workgroup at `CUBE_POS_Z` multiplies, and
/// where its outputs start: the whole row at 0 where `k_chunk ≥ k` (one chunk), otherwise
/// chunk `z` of `k_chunk` weights, whose sums go to the `z`-th `m × ld` block of partial sums
/// that [`split_sum_kernel`] adds up. `k_chunk` is a multiple of the kernel's step, so the
/// chunks' steps are the unsplit kernel's steps, each in one chunk.
#[cube]
fn split_range(k: usize, k_chunk: usize, m: usize, ld: usize) -> (usize, usize, usize) {
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
/// invocations a workgroup. (8 × 8 blocks, 8 × 8 invocations, ran at 0.65–0.82× on an H200.) The
/// default form is [`qmatmul_tiled_vec_kernel`]; this one is `REXVQA_TILE_PER=s4`, natively.
pub const TILE_PER: u32 = 4;
/// Row stride of the staged rows in workgroup memory: one more than [`TILE_K`] because the
/// invocations of a subgroup read different rows at the same `kk`; at a stride of 16 words the
/// 16 weight rows a half-subgroup reads fall in 2 of the 32 memory banks (8-way conflicts on
/// every read of the inner loop), at 17 in 16 different banks.
const STRIDE: usize = TILE_K + 1;

/// Weights `j0 .. j0 + 4` of the row at word `row` (type `ty`, `k` weights) into
/// `ws[at ..]` (workgroup memory, or an invocation's registers), 0 past the row's end. A run of
/// a block type lies in one block or sub-block (`j0` is a multiple of 4, and the row a whole
/// number of blocks of 32 or 256 weights, which every step of 16 or 32 divides, so `j0 < k`),
/// so its four quants share one or two words and one scale: one load of each and one widening
/// of the scale where [`dequant_one`] makes them per weight (a Q8_0 prefill's products on
/// SwiftShader: see `bench/README.md`). The values are [`dequant_one`]'s, bit for bit.
#[cube]
#[allow(clippy::too_many_arguments)]
fn stage_run<H: CubePrimitive, L: List<f32>>(
    w: &Tensor<u32>,
    wh: &Tensor<H>,
    row: usize,
    j0: usize,
    k: usize,
    ws: &mut L,
    at: usize,
    #[comptime] ty: u32,
    #[comptime] native: bool,
) {
    if comptime!(ty == ty::Q4_K) {
        let base = row + (j0 / 256) * 36;
        let i = j0 % 256;
        let n = i / 64;
        let within = i % 64;
        let d = half_at(w, wh, base, 0, native);
        let dmin = half_at(w, wh, base, 1, native);
        let (sc, mn) = scale_min_k4(w, base, 4, 2 * n + within / 32);
        let mut word = w[base + 4 + (n * 32 + within % 32) / 4];
        if within >= 32 {
            word >>= 4u32;
        }
        #[unroll]
        for t in 0..4u32 {
            let q = (word >> (8 * t)) & 0xFu32;
            ws[at + t as usize] = d * sc * f32::cast_from(q) - dmin * mn;
        }
    } else if comptime!(ty == ty::Q6_K) {
        let base = row + (j0 / 256) * 53;
        let i = j0 % 256;
        let n = i / 128;
        let w128 = i % 128;
        let l = w128 % 32;
        let quarter = w128 / 32;
        let d = half_at(w, wh, base + 52, 0, native);
        let sc = signed_byte(byte_at(w, base, 192 + n * 8 + l / 16 + 2 * quarter));
        let mut ql = w[base + (n * 64 + l + (quarter % 2) * 32) / 4];
        if quarter >= 2 {
            ql >>= 4u32;
        }
        let qh = w[base + (128 + n * 32 + l) / 4] >> ((2 * quarter) as u32);
        #[unroll]
        for t in 0..4u32 {
            let lo = (ql >> (8 * t)) & 0xFu32;
            let hi = (qh >> (8 * t)) & 3u32;
            ws[at + t as usize] = d * sc * (f32::cast_from(lo | (hi << 4u32)) - 32.0f32);
        }
    } else if comptime!(ty == ty::Q8_0) {
        // {f16 d; i8 qs[32]} padded to 9 words: the run's quants are bytes 2 + i .. 6 + i, the
        // high half of word i / 4 and the low half of the next.
        let base = row + (j0 / 32) * 9;
        let i = j0 % 32;
        let d = half_at(w, wh, base, 0, native);
        let qs = straddle(w[base + i / 4], w[base + i / 4 + 1]);
        #[unroll]
        for t in 0..4u32 {
            ws[at + t as usize] = signed_byte((qs >> (8 * t)) & 0xFFu32) * d;
        }
    } else if comptime!(ty == ty::Q4_0) {
        // {f16 d; u8 qs[16]} padded to 5 words: weights i and i + 16 share byte 2 + i.
        let base = row + (j0 / 32) * 5;
        let i = j0 % 32;
        let l = i % 16;
        let d = half_at(w, wh, base, 0, native);
        let mut qs = straddle(w[base + l / 4], w[base + l / 4 + 1]);
        if i >= 16 {
            qs >>= 4u32;
        }
        #[unroll]
        for t in 0..4u32 {
            ws[at + t as usize] = (f32::cast_from((qs >> (8 * t)) & 0xFu32) - 8.0f32) * d;
        }
    } else if comptime!(ty == ty::Q5_0) {
        // {f16 d; u8 qh[4]; u8 qs[16]} padded to 6 words: qh is bytes 2 .. 6, qs from byte 6.
        let base = row + (j0 / 32) * 6;
        let i = j0 % 32;
        let l = i % 16;
        let d = half_at(w, wh, base, 0, native);
        let qh = straddle(w[base], w[base + 1]);
        let qs = straddle(w[base + 1 + l / 4], w[base + 2 + l / 4]);
        #[unroll]
        for t in 0..4u32 {
            let mut q = 0u32;
            if i < 16 {
                q = ((qs >> (8 * t)) & 0xFu32) | (((qh >> (i as u32 + t)) << 4u32) & 0x10u32);
            } else {
                q = ((qs >> (8 * t + 4)) & 0xFu32) | ((qh >> (i as u32 + t - 4u32)) & 0x10u32);
            }
            ws[at + t as usize] = (f32::cast_from(q) - 16.0f32) * d;
        }
    } else if comptime!(ty == ty::Q5_K) {
        // {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]} = 44 words.
        let base = row + (j0 / 256) * 44;
        let i = j0 % 256;
        let n = i / 64;
        let within = i % 64;
        let l = within % 32;
        let d = half_at(w, wh, base, 0, native);
        let dmin = half_at(w, wh, base, 1, native);
        let (sc, mn) = scale_min_k4(w, base, 4, 2 * n + within / 32);
        let mut ql = w[base + (48 + n * 32 + l) / 4];
        let mut bit = 1u32 << ((2 * n) as u32);
        if within >= 32 {
            ql >>= 4u32;
            bit = 2u32 << ((2 * n) as u32);
        }
        let qh = w[base + (16 + l) / 4];
        #[unroll]
        for t in 0..4u32 {
            let mut q = (ql >> (8 * t)) & 0xFu32;
            if ((qh >> (8 * t)) & bit) != 0u32 {
                q += 16u32;
            }
            ws[at + t as usize] = d * sc * f32::cast_from(q) - dmin * mn;
        }
    } else {
        #[unroll]
        for t in 0..4usize {
            let mut v = 0.0f32;
            if j0 + t < k {
                v = dequant_one(w, wh, row, j0 + t, ty, native);
            }
            ws[at + t] = v;
        }
    }
}

/// The 4 bytes that start at the high half of word `lo` and end in the low half of `hi`: bytes
/// that begin two bytes into a word, as a block's quants do after its f16 scale (Q8_0, Q4_0) or
/// after its scale and `qh` (Q5_0), and as Q5_0's `qh` does.
#[cube]
fn straddle(lo: u32, hi: u32) -> u32 {
    (lo >> 16u32) | (hi << 16u32)
}

/// Weights `j0 .. j0 + 4` of row `r` of a product's matrix into `ws[at ..]`, 0 past row `n`:
/// [`stage_run`] of the `n1` rows of `w` (type `ty`, `rw` words a row), then, when `stacked`,
/// of the rows of `w2` (type `ty2`, `rw2` words a row). Two buffers of two block types read as
/// one matrix: a layer's Q4_K q and k rows and its Q6_K v rows in one dispatch.
#[cube]
#[allow(clippy::too_many_arguments)]
fn stage_weight_run<H: CubePrimitive, L: List<f32>>(
    w: &Tensor<u32>,
    wh: &Tensor<H>,
    w2: &Tensor<u32>,
    wh2: &Tensor<H>,
    r: usize,
    j0: usize,
    k: usize,
    n: usize,
    n1: usize,
    rw: usize,
    rw2: usize,
    ws: &mut L,
    at: usize,
    #[comptime] ty: u32,
    #[comptime] ty2: u32,
    #[comptime] stacked: bool,
    #[comptime] native: bool,
) {
    if r < n {
        if comptime!(stacked) {
            if r < n1 {
                stage_run::<H, L>(w, wh, r * rw, j0, k, ws, at, ty, native);
            } else {
                stage_run::<H, L>(w2, wh2, (r - n1) * rw2, j0, k, ws, at, ty2, native);
            }
        } else {
            stage_run::<H, L>(w, wh, r * rw, j0, k, ws, at, ty, native);
        }
    } else {
        #[unroll]
        for t in 0..4usize {
            ws[at + t] = 0.0f32;
        }
    }
}

/// Inputs `j0 .. j0 + 4` of the row of `x` at `xb` (`k` long; `j0` a multiple of 4) into
/// `xs[at ..]`, 0 past `k`: one 16-byte read when `x` is bound as fours (`V` = 4, which the
/// launch picks when 4 divides `k`, so a run never crosses the row's end), four reads otherwise.
/// A browser clamps every storage read to its buffer (WebGPU's robustness; cubecl-wgpu turns
/// naga's bounds checks off natively), and on a software adapter the clamps cost about what the
/// products do: a token's products in Chromium on SwiftShader took 260 and 279 ms, 140 ms with
/// Dawn's `disable_robustness`; the 262k-row output's product, median of 3, 265 ms with four
/// reads a run and 153 with one (`bench/README.md`).
#[cube]
fn input_run<V: Size, L: List<f32>>(
    x: &Tensor<Vector<f32, V>>,
    xb: usize,
    j0: usize,
    k: usize,
    xs: &mut L,
    at: usize,
) {
    let size = V::value().comptime();
    if comptime!(size == 4) {
        // 4 divides `k` and `j0`: the run lies wholly inside the row or wholly past it.
        let mut v = Vector::<f32, V>::zeroed();
        if j0 < k {
            v = x[(xb + j0) / 4];
        }
        #[unroll]
        for t in 0..4usize {
            xs[at + t] = v.extract(t);
        }
    } else {
        #[unroll]
        for t in 0..4usize {
            let mut xv = 0.0f32;
            if j0 + t < k {
                xv = x[xb + j0 + t].extract(0usize);
            }
            xs[at + t] = xv;
        }
    }
}

/// Inputs `j0 .. j0 + 4` of row `r` of `x` (`m` rows of `k`) into `xs[at ..]`, 0 past either
/// end ([`input_run`]).
#[cube]
fn stage_input_run<V: Size, L: List<f32>>(
    x: &Tensor<Vector<f32, V>>,
    r: usize,
    j0: usize,
    m: usize,
    k: usize,
    xs: &mut L,
    at: usize,
) {
    if r < m {
        input_run::<V, L>(x, r * k, j0, k, xs, at);
    } else {
        #[unroll]
        for t in 0..4usize {
            xs[at + t] = 0.0f32;
        }
    }
}

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
type V4 = Vector<f32, Const<4>>;

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
