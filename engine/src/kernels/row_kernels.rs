//! The `#[cube]` bodies of the fused row kernels ([`super::rows`] launches them) and the
//! workgroup reductions they share with [`super::decode_attention`]. Each norm kernel gives one
//! workgroup to one row: the invocations stride over the row summing squares, reduce through
//! workgroup memory, then write the row. Every formula is the one of its composed counterpart in
//! [`crate::model::nn`], in the same order, in f32; only the summation order of the reductions
//! differs.

use burn_cubecl::cubecl;
use burn_cubecl::cubecl::prelude::*;

use super::quant::gelu_tanh;

/// Invocations per row (WebGPU guarantees 256 per workgroup); a power of two for the tree.
pub(crate) const ROW_THREADS: u32 = 256;

/// Invocations per workgroup of the elementwise GELU kernel.
pub(super) const ELEMENT_THREADS: u32 = 256;

/// The sum of `partial` over the workgroup, returned to every invocation: a tree in workgroup
/// memory of `threads` floats, `threads` = `CUBE_DIM_X`, a power of two of at most
/// [`ROW_THREADS`]. The slots are sized to the workgroup because WebGPU zero-initialises
/// workgroup memory and SwiftShader does it in every subgroup over the whole variable (its
/// `EmitVariable`), so a 256-float tree in a 32-lane workgroup cost 8x its stores. A caller that
/// calls it again from the same call site (in a loop) must pass a barrier in between: the next
/// call overwrites the slot the last one read.
#[cube]
pub(crate) fn workgroup_sum(partial: f32, #[comptime] threads: usize) -> f32 {
    let lane = UNIT_POS_X as usize;
    let mut sums = Shared::<[f32]>::new_slice(threads);
    sums[lane] = partial;
    sync_cube();
    // From the runtime CUBE_DIM_X: a constant initialiser would be folded into a comptime value
    // that a runtime loop cannot mutate (see kernels::quant::qgemv_kernel).
    let mut stride = (CUBE_DIM_X / 2) as usize;
    while stride > 0 {
        if lane < stride {
            let v = sums[lane] + sums[lane + stride];
            sums[lane] = v;
        }
        sync_cube();
        stride /= 2;
    }
    sums[0]
}

/// The maximum of `partial` over the workgroup, as [`workgroup_sum`].
#[cube]
pub(crate) fn workgroup_max(partial: f32, #[comptime] threads: usize) -> f32 {
    let lane = UNIT_POS_X as usize;
    let mut maxes = Shared::<[f32]>::new_slice(threads);
    maxes[lane] = partial;
    sync_cube();
    let mut stride = (CUBE_DIM_X / 2) as usize;
    while stride > 0 {
        if lane < stride {
            let v = max(maxes[lane], maxes[lane + stride]);
            maxes[lane] = v;
        }
        sync_cube();
        stride /= 2;
    }
    maxes[0]
}

/// `Σ x²` over row `base..base + d`, summed by the whole workgroup.
#[cube]
fn row_sum_squares(x: &Tensor<f32>, base: usize, d: usize, #[comptime] threads: usize) -> f32 {
    let mut partial = 0.0f32;
    let mut j = UNIT_POS_X as usize;
    while j < d {
        let v = x[base + j];
        partial += v * v;
        j += CUBE_DIM_X as usize;
    }
    workgroup_sum(partial, threads)
}

/// Most values of a row each invocation holds in registers in the norms' register form
/// (`per`): rows up to 16 · [`ROW_THREADS`] = 4,096 wide.
pub(crate) const MAX_PER: usize = 16;

/// Invocations of a row kernel's workgroup for rows of `d`: on a GPU the power of two at or
/// above `d`, from 32 (a GPU's narrowest subgroup) to [`ROW_THREADS`]; on a `software` adapter
/// [`SOFTWARE_ROW_THREADS`] whatever the row. Every barrier of the reduction waits on the whole
/// workgroup, so idle lanes are not free: software adapters run a barrier by switching between
/// the workgroup's invocations, and a 32-wide head given 256 lanes paid 8x
/// (bench/results/ci-vm-2core-swiftshader-row-threads-browser-vs-native.json). The tuning
/// (`REXVQA_ROW_LANES=gpu`) takes the GPU rule on a software adapter too, so that lavapipe
/// tests both.
pub(crate) fn row_threads(d: usize, software: bool) -> u32 {
    lanes_for(d, software && !gpu_rule_forced())
}

/// [`row_threads`]'s rule, without the override.
fn lanes_for(d: usize, software: bool) -> u32 {
    if software {
        SOFTWARE_ROW_THREADS
    } else {
        d.next_power_of_two().clamp(32, ROW_THREADS as usize) as u32
    }
}

/// Invocations of a row kernel's workgroup on a software adapter: one SwiftShader subgroup.
/// There a workgroup's invocations are SIMD lanes of one CPU thread in groups of 4, switched
/// between at every barrier, and SwiftShader zero-initialises the reduction slots in every group
/// (its `EmitVariable`), so a row's fixed cost grows with its lanes, not its width. Of 4, 8 and
/// 16 lanes, 4 measured fastest on SwiftShader and all alike on lavapipe
/// (bench/results/ci-vm-2core-swiftshader-row-lanes-browser-vs-native.json).
pub(crate) const SOFTWARE_ROW_THREADS: u32 = 4;

/// `REXVQA_ROW_LANES=gpu`: the GPU rule on a software adapter too, so that lavapipe tests both.
fn gpu_rule_forced() -> bool {
    crate::tuning::current().row_lanes_gpu
}

/// The `per` (values an invocation holds) of the norm kernels for rows of `d` in workgroups of
/// `threads` ([`row_threads`]): 0, the streaming form, past [`MAX_PER`] values a lane.
pub(crate) fn per_lane(d: usize, threads: u32) -> usize {
    let per = d.div_ceil(threads as usize);
    if per <= MAX_PER { per } else { 0 }
}

/// Loads this invocation's `per` values of row `base..base + d` of `x` (0 past the row), all
/// issued before any is used: a single row's norm is one workgroup, so a loop that waited for
/// each load in turn paid the memory latency ten times for a 2,560-wide row.
#[cube]
fn load_lane(
    x: &Tensor<f32>,
    base: usize,
    d: usize,
    #[comptime] per: usize,
    #[comptime] threads: usize,
) -> Array<f32> {
    let lane = UNIT_POS_X as usize;
    let mut vs = Array::<f32>::new(per);
    #[unroll]
    for u in 0..per {
        let j = lane + u * threads;
        let mut v = 0.0f32;
        if j < d {
            v = x[base + j];
        }
        vs[u] = v;
    }
    vs
}

/// `1 / sqrt(mean(x²) + eps)` of the row whose values the workgroup's invocations hold in
/// `xs` ([`load_lane`]): the register form of [`row_sum_squares`], in its order.
#[cube]
fn lane_inv_rms(
    xs: &Array<f32>,
    d: usize,
    eps: f32,
    #[comptime] per: usize,
    #[comptime] threads: usize,
) -> f32 {
    let mut partial = 0.0f32;
    #[unroll]
    for u in 0..per {
        partial += xs[u] * xs[u];
    }
    let ms = workgroup_sum(partial, threads) / d as f32;
    1.0f32 / (ms + eps).sqrt()
}

/// `out[r] = x[r] / sqrt(mean(x[r]²) + eps) · w` (+ `residual[r]` when `has_residual`), one
/// workgroup per row of `d`. The workgroup index is linear over a 2-D dispatch (rows can pass
/// 65535); workgroups past the last row leave as a whole, so no barrier waits on them. With
/// `per` > 0 each invocation holds its `per` values of the row in registers ([`load_lane`]);
/// the sums and products are the streaming form's (`per` = 0) in its order, bit for bit (the
/// padding adds +0 to a sum of squares).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub(super) fn rms_norm_kernel(
    x: &Tensor<f32>,
    w: &Tensor<f32>,
    residual: &Tensor<f32>,
    out: &mut Tensor<f32>,
    rows: u32,
    d: u32,
    eps: f32,
    #[comptime] has_residual: bool,
    #[comptime] per: usize,
    #[comptime] threads: usize,
) {
    let row = CUBE_POS;
    if row >= rows as usize {
        terminate!();
    }
    let d = d as usize;
    let base = row * d;
    if comptime!(per > 0) {
        let lane = UNIT_POS_X as usize;
        let xs = load_lane(x, base, d, per, threads);
        let ws = load_lane(w, 0, d, per, threads);
        let mut rs = Array::<f32>::new(per);
        if comptime!(has_residual) {
            rs = load_lane(residual, base, d, per, threads);
        }
        let inv = lane_inv_rms(&xs, d, eps, per, threads);
        #[unroll]
        for u in 0..per {
            let j = lane + u * threads;
            if j < d {
                let y = xs[u] * inv * ws[u];
                if comptime!(has_residual) {
                    out[base + j] = rs[u] + y;
                } else {
                    out[base + j] = y;
                }
            }
        }
    } else {
        let ms = row_sum_squares(x, base, d, threads) / d as f32;
        let inv = 1.0f32 / (ms + eps).sqrt();
        let mut j = UNIT_POS_X as usize;
        while j < d {
            let y = x[base + j] * inv * w[j];
            if comptime!(has_residual) {
                out[base + j] = residual[base + j] + y;
            } else {
                out[base + j] = y;
            }
            j += CUBE_DIM_X as usize;
        }
    }
}

/// `h[r] = residual[r] + x[r] / sqrt(mean(x[r]²) + eps) · w`, then `hn[r] = h[r] /
/// sqrt(mean(h[r]²) + eps) · w2`: a sandwich norm and the next norm in one dispatch. Each lane
/// sums the squares of the `h` values it wrote, in the order [`row_sum_squares`] would read
/// them back, so both outputs equal two [`rms_norm_kernel`] launches bit for bit; `per` as
/// there (the register form keeps `h` in registers too).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub(super) fn add_rms_norm_then_norm_kernel(
    x: &Tensor<f32>,
    w: &Tensor<f32>,
    residual: &Tensor<f32>,
    w2: &Tensor<f32>,
    h: &mut Tensor<f32>,
    hn: &mut Tensor<f32>,
    rows: u32,
    d: u32,
    eps: f32,
    #[comptime] per: usize,
    #[comptime] threads: usize,
) {
    let row = CUBE_POS;
    if row >= rows as usize {
        terminate!();
    }
    let d = d as usize;
    let base = row * d;
    if comptime!(per > 0) {
        let lane = UNIT_POS_X as usize;
        let xs = load_lane(x, base, d, per, threads);
        let rs = load_lane(residual, base, d, per, threads);
        let ws = load_lane(w, 0, d, per, threads);
        let w2s = load_lane(w2, 0, d, per, threads);
        let inv = lane_inv_rms(&xs, d, eps, per, threads);
        let mut hs = Array::<f32>::new(per);
        let mut partial2 = 0.0f32;
        #[unroll]
        for u in 0..per {
            let v = rs[u] + xs[u] * inv * ws[u];
            hs[u] = v;
            let j = lane + u * threads;
            if j < d {
                h[base + j] = v;
                partial2 += v * v;
            }
        }
        let ms2 = workgroup_sum(partial2, threads) / d as f32;
        let inv2 = 1.0f32 / (ms2 + eps).sqrt();
        #[unroll]
        for u in 0..per {
            let j = lane + u * threads;
            if j < d {
                hn[base + j] = hs[u] * inv2 * w2s[u];
            }
        }
    } else {
        let ms = row_sum_squares(x, base, d, threads) / d as f32;
        let inv = 1.0f32 / (ms + eps).sqrt();
        let mut partial = 0.0f32;
        let mut j = UNIT_POS_X as usize;
        while j < d {
            let v = residual[base + j] + x[base + j] * inv * w[j];
            h[base + j] = v;
            partial += v * v;
            j += CUBE_DIM_X as usize;
        }
        let ms2 = workgroup_sum(partial, threads) / d as f32;
        let inv2 = 1.0f32 / (ms2 + eps).sqrt();
        j = UNIT_POS_X as usize;
        while j < d {
            hn[base + j] = h[base + j] * inv2 * w2[j];
            j += CUBE_DIM_X as usize;
        }
    }
}

/// RMSNorm of each head row of `x [t, heads, d]`, then NEOX RoPE (halves `i`, `i + d/2`) with
/// the tables `cos`, `sin` `[t, 1, d/2]` of [`crate::model::nn::rope_tables`].
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub(super) fn rms_norm_rope_kernel(
    x: &Tensor<f32>,
    w: &Tensor<f32>,
    cos: &Tensor<f32>,
    sin: &Tensor<f32>,
    out: &mut Tensor<f32>,
    rows: u32,
    heads: u32,
    d: u32,
    eps: f32,
    #[comptime] threads: usize,
) {
    let row = CUBE_POS;
    if row >= rows as usize {
        terminate!();
    }
    let d = d as usize;
    let half = d / 2;
    let base = row * d;
    let table = (row / heads as usize) * half;
    let ms = row_sum_squares(x, base, d, threads) / d as f32;
    let inv = 1.0f32 / (ms + eps).sqrt();
    let mut i = UNIT_POS_X as usize;
    while i < half {
        let a = x[base + i] * inv * w[i];
        let b = x[base + half + i] * inv * w[half + i];
        let c = cos[table + i];
        let s = sin[table + i];
        out[base + i] = a * c - b * s;
        out[base + half + i] = b * c + a * s;
        i += CUBE_DIM_X as usize;
    }
}

/// One layer's q/k RMSNorm + NEOX RoPE and its KV-cache write in one dispatch, reading the
/// joined product `qkv [t, (heads + 2·kv_heads)·d]` (each position's queries, keys, values):
/// rows `0..t·heads` normalise and rotate the queries into `q_out [t, heads, d]`; rows past
/// them normalise and rotate the keys into the key buffer at positions `pos..pos + t` and copy
/// the values into the value buffer there (buffers `[kv_heads, cap, d]`, contiguous). `norms`
/// holds the q norm's `d` weights then the k norm's; `table [t, d]` each position's cos then
/// sin halves. Each row is [`rms_norm_rope_kernel`]'s formula in its order, so the results
/// equal that kernel followed by a copy into the cache bit for bit. Six buffers: WebGPU
/// guarantees eight per stage, and CubeCL binds one more for the shapes.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub(super) fn qk_norm_rope_store_kernel(
    qkv: &Tensor<f32>,
    norms: &Tensor<f32>,
    table: &Tensor<f32>,
    q_out: &mut Tensor<f32>,
    k_buf: &mut Tensor<f32>,
    v_buf: &mut Tensor<f32>,
    t: u32,
    heads: u32,
    kv_heads: u32,
    d: u32,
    cap: u32,
    pos: u32,
    eps: f32,
    #[comptime] threads: usize,
) {
    let row = CUBE_POS;
    let q_rows = (t * heads) as usize;
    if row >= q_rows + (t * kv_heads) as usize {
        terminate!();
    }
    let d = d as usize;
    let half = d / 2;
    let ld = (heads + 2 * kv_heads) as usize * d;
    let kv_width = kv_heads as usize * d;
    let is_q = row < q_rows;
    let mut ti = row / heads as usize;
    let mut src = ti * ld + (row % heads as usize) * d;
    let mut dst = row * d;
    let mut w0 = 0usize;
    if !is_q {
        let r = row - q_rows;
        ti = r / kv_heads as usize;
        let h = r % kv_heads as usize;
        src = ti * ld + heads as usize * d + h * d;
        dst = (h * cap as usize + pos as usize + ti) * d;
        w0 = d;
    }
    let cs = ti * d;
    let mut partial = 0.0f32;
    let mut j = UNIT_POS_X as usize;
    while j < d {
        let x = qkv[src + j];
        partial += x * x;
        j += CUBE_DIM_X as usize;
    }
    let ms = workgroup_sum(partial, threads) / d as f32;
    let inv = 1.0f32 / (ms + eps).sqrt();
    let mut i = UNIT_POS_X as usize;
    while i < half {
        let c = table[cs + i];
        let s = table[cs + half + i];
        let a = qkv[src + i] * inv * norms[w0 + i];
        let b = qkv[src + half + i] * inv * norms[w0 + half + i];
        if is_q {
            q_out[dst + i] = a * c - b * s;
            q_out[dst + half + i] = b * c + a * s;
        } else {
            k_buf[dst + i] = a * c - b * s;
            k_buf[dst + half + i] = b * c + a * s;
        }
        i += CUBE_DIM_X as usize;
    }
    if !is_q {
        j = UNIT_POS_X as usize;
        while j < d {
            v_buf[dst + j] = qkv[src + kv_width + j];
            j += CUBE_DIM_X as usize;
        }
    }
}

/// `out[r] = (x[r] − mean) / sqrt(var + eps) · w + b` over rows of `d` (biased variance of the
/// centred values, as [`crate::model::nn::layer_norm`]).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub(super) fn layer_norm_kernel(
    x: &Tensor<f32>,
    w: &Tensor<f32>,
    b: &Tensor<f32>,
    out: &mut Tensor<f32>,
    rows: u32,
    d: u32,
    eps: f32,
    #[comptime] threads: usize,
) {
    let row = CUBE_POS;
    if row >= rows as usize {
        terminate!();
    }
    let d = d as usize;
    let base = row * d;
    let mut partial = 0.0f32;
    let mut j = UNIT_POS_X as usize;
    while j < d {
        partial += x[base + j];
        j += CUBE_DIM_X as usize;
    }
    let mean = workgroup_sum(partial, threads) / d as f32;
    let mut squares = 0.0f32;
    j = UNIT_POS_X as usize;
    while j < d {
        let c = x[base + j] - mean;
        squares += c * c;
        j += CUBE_DIM_X as usize;
    }
    let var = workgroup_sum(squares, threads) / d as f32;
    let inv = 1.0f32 / (var + eps).sqrt();
    j = UNIT_POS_X as usize;
    while j < d {
        out[base + j] = (x[base + j] - mean) * inv * w[j] + b[j];
        j += CUBE_DIM_X as usize;
    }
}

/// `out[i] = gelu_tanh(gate[i]) · up[i]` (`gelu_tanh(gate[i])` without `has_up`), the formula
/// of [`crate::model::nn::gelu_tanh`] term by term ([`gelu_tanh`], shared with the products).
#[cube(launch)]
pub(super) fn gelu_kernel(
    gate: &Tensor<f32>,
    up: &Tensor<f32>,
    out: &mut Tensor<f32>,
    n: u32,
    #[comptime] has_up: bool,
) {
    let i = ABSOLUTE_POS;
    if i < n as usize {
        let g = gelu_tanh(gate[i]);
        if comptime!(has_up) {
            out[i] = g * up[i];
        } else {
            out[i] = g;
        }
    }
}

/// `out[r, j] = gelu_tanh(x[r, j]) · x[r, f + j]` for rows of `2f`: the product of a gate and
/// up projection computed as one matrix (gate rows then up rows), in [`gelu_kernel`]'s formula.
#[cube(launch)]
pub(super) fn gelu_halves_kernel(x: &Tensor<f32>, out: &mut Tensor<f32>, n: u32, f: u32) {
    let i = ABSOLUTE_POS;
    if i < n as usize {
        let f = f as usize;
        let base = (i / f) * 2 * f + i % f;
        out[i] = gelu_tanh(x[base]) * x[base + f];
    }
}

/// `out[h, start + p, j] = src[h, p, j]` for the first `len` positions of `src [heads, ≥ len,
/// d]` (any strides), into `out [heads, cap, d]` (contiguous), in place: one dispatch over
/// `n = heads · len · d` values. A KV buffer's valid positions moved into a larger or unshared
/// one (`start` 0), a pass's rows stacked, an image's features written over its span
/// (`heads` 1).
#[cube(launch)]
pub(super) fn write_positions_kernel(
    src: &Tensor<f32>,
    out: &mut Tensor<f32>,
    n: u32,
    len: u32,
    d: u32,
    cap: u32,
    start: u32,
) {
    let i = ABSOLUTE_POS;
    if i < n as usize {
        let (len, d) = (len as usize, d as usize);
        let per_head = len * d;
        let (h, r) = (i / per_head, i % per_head);
        let (p, j) = (r / d, r % d);
        out[(h * cap as usize + start as usize + p) * d + j] =
            src[h * src.stride(0) + p * src.stride(1) + j * src.stride(2)];
    }
}

/// Whether candidate `(b, bi)` beats `(a, ai)` for an argmax that keeps the first index on
/// ties; `none` marks an empty slot (an index past the row), which any real candidate beats.
#[cube]
fn argmax_beats(a: f32, ai: u32, b: f32, bi: u32, none: u32) -> bool {
    let mut wins = false;
    if bi != none {
        wins = ai == none || b > a || (b == a && bi < ai);
    }
    wins
}

/// The column of the best `(value, column)` pair over the workgroup ([`argmax_beats`]),
/// returned to every invocation: a tree in workgroup memory of `threads` slots, as
/// [`workgroup_sum`].
#[cube]
fn workgroup_argmax(best: f32, best_i: u32, none: u32, #[comptime] threads: usize) -> u32 {
    let lane = UNIT_POS_X as usize;
    let mut vals = Shared::<[f32]>::new_slice(threads);
    let mut ids = Shared::<[u32]>::new_slice(threads);
    vals[lane] = best;
    ids[lane] = best_i;
    sync_cube();
    let mut stride = (CUBE_DIM_X / 2) as usize;
    while stride > 0 {
        if lane < stride {
            let (a, ai) = (vals[lane], ids[lane]);
            let (b, bi) = (vals[lane + stride], ids[lane + stride]);
            if argmax_beats(a, ai, b, bi, none) {
                vals[lane] = b;
                ids[lane] = bi;
            }
        }
        sync_cube();
        stride /= 2;
    }
    ids[0]
}

/// First pass of the row argmax: workgroup `(g, r)` finds the largest value of row `r` of `x
/// [rows, n]` among columns `g·chunk .. (g + 1)·chunk` and writes it with its column to slot
/// `r·groups + g` of `vals`/`ids` (`n` when the range is empty). Many workgroups read the row
/// in parallel: a 262,144-column vocabulary row is 1 MiB, which one workgroup reads at a small
/// fraction of the memory bandwidth.
#[cube(launch)]
pub(super) fn argmax_partial_kernel(
    x: &Tensor<f32>,
    vals: &mut Tensor<f32>,
    ids: &mut Tensor<u32>,
    n: u32,
    chunk: u32,
    #[comptime] threads: usize,
) {
    let (g, r) = (CUBE_POS_X as usize, CUBE_POS_Y as usize);
    let lane = UNIT_POS_X as usize;
    let n_us = n as usize;
    let start = g * chunk as usize;
    let end = min(start + chunk as usize, n_us);
    let base = r * n_us;
    let mut best = 0.0f32;
    let mut best_i = n;
    // Each lane's columns rise, so a strict `>` keeps its first of equal values.
    let mut j = start + lane;
    while j < end {
        let v = x[base + j];
        if best_i == n || v > best {
            best = v;
            best_i = j as u32;
        }
        j += CUBE_DIM_X as usize;
    }
    let won = workgroup_argmax(best, best_i, n, threads);
    if lane == 0 {
        let slot = r * CUBE_COUNT_X as usize + g;
        ids[slot] = won;
        // The winner's value, read again rather than passed through workgroup memory.
        if won != n {
            vals[slot] = x[base + won as usize];
        }
    }
}

/// Second pass of the row argmax: workgroup `r` reduces row `r`'s `groups` partial results
/// of [`argmax_partial_kernel`] to its column, written to `out[r]` (u32).
#[cube(launch)]
pub(super) fn argmax_final_kernel(
    vals: &Tensor<f32>,
    ids: &Tensor<u32>,
    out: &mut Tensor<u32>,
    n: u32,
    groups: u32,
    #[comptime] threads: usize,
) {
    let r = CUBE_POS_Y as usize;
    let lane = UNIT_POS_X as usize;
    let groups = groups as usize;
    let mut best = 0.0f32;
    let mut best_i = n;
    let mut g = lane;
    while g < groups {
        let (v, i) = (vals[r * groups + g], ids[r * groups + g]);
        if argmax_beats(best, best_i, v, i, n) {
            best = v;
            best_i = i;
        }
        g += CUBE_DIM_X as usize;
    }
    let won = workgroup_argmax(best, best_i, n, threads);
    if lane == 0 {
        out[r] = won;
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_PER, ROW_THREADS, SOFTWARE_ROW_THREADS, lanes_for, per_lane};

    /// On a GPU narrow rows get narrow workgroups, MedGemma's widths keep 256 lanes, and the
    /// register form ends exactly at 16 values a lane of 256; a software adapter gives every
    /// row 4 lanes, in registers up to 64 values.
    #[test]
    fn row_workgroups_fit_their_rows() {
        let cases = [
            (1, 32, 1),
            (18, 32, 1),
            (32, 32, 1),
            (33, 64, 1),
            (72, 128, 1),
            (97, 128, 1),
            (256, 256, 1),
            (300, 256, 2),
            (1152, 256, 5),
            (2560, 256, 10),
            (4096, 256, 16),
            (4097, 256, 0),
        ];
        for (d, threads, per) in cases {
            let t = lanes_for(d, false);
            assert_eq!((t, per_lane(d, t)), (threads, per), "row of {d}");
        }
        assert_eq!(MAX_PER * ROW_THREADS as usize, 4096);
        let software = [
            (1, 1),
            (4, 1),
            (5, 2),
            (64, 16),
            (65, 0),
            (96, 0),
            (2560, 0),
        ];
        for (d, per) in software {
            let t = lanes_for(d, true);
            assert_eq!(
                (t, per_lane(d, t)),
                (SOFTWARE_ROW_THREADS, per),
                "row of {d}"
            );
        }
    }
}
