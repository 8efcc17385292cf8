//! [`QuantOps`] on the CubeCL backends (wgpu natively, WebGPU in the browser): the launchers that
//! pick a kernel of [`crate::kernels::quant`] for the weight type, the kernel and the f16 form.

use burn::tensor::DType;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{CubeBackend, cubecl, kernel::into_contiguous, ops::numeric::empty_device_dtype};

use super::choice::{
    Half, Kernel, TileForm, auto_kernel, f16_type, native_half_in_use, plane_ops, split_chunk,
    tile_form, tile_splits,
};
use super::ops::{QuantOps, ggml};
use super::pack::row_words;
use crate::kernels::quant::{
    GEMV_ROWS, GEMV_TEAM, GEMV_THREADS, TILE, TILE_K, TILE_PER, qgather_kernel, qgemv_kernel,
    qmatmul_kernel, qmatmul_tiled_kernel, qmatmul_tiled_vec_kernel, split_sum_kernel, ty,
    vec_tile_k,
};

/// Launches a kernel specialised for the weight type (the type is a compile-time parameter).
macro_rules! by_type {
    ($ty_id:expr, $launch:ident) => {
        match $ty_id {
            ty::F32 => $launch(ty::F32),
            ty::F16 => $launch(ty::F16),
            ty::BF16 => $launch(ty::BF16),
            ty::Q4_0 => $launch(ty::Q4_0),
            ty::Q5_0 => $launch(ty::Q5_0),
            ty::Q8_0 => $launch(ty::Q8_0),
            ty::Q4_K => $launch(ty::Q4_K),
            ty::Q5_K => $launch(ty::Q5_K),
            ty::Q6_K => $launch(ty::Q6_K),
            ty::Q4_1 => $launch(ty::Q4_1),
            ty::Q5_1 => $launch(ty::Q5_1),
            ty::Q2_K => $launch(ty::Q2_K),
            ty::Q3_K => $launch(ty::Q3_K),
            ty::IQ4_NL => $launch(ty::IQ4_NL),
            ty::IQ4_XS => $launch(ty::IQ4_XS),
            ty::IQ2_XXS => $launch(ty::IQ2_XXS),
            ty::IQ2_XS => $launch(ty::IQ2_XS),
            ty::IQ2_S => $launch(ty::IQ2_S),
            ty::IQ3_XXS => $launch(ty::IQ3_XXS),
            ty::IQ3_S => $launch(ty::IQ3_S),
            other => unreachable!("QMatrix never stores ggml type {other}"),
        }
    };
}

/// Whether a kernel on a device with `props` widens f16 natively for the [`Half`] with id `half`.
fn native_half(props: &cubecl::ir::DeviceProperties, half: u32) -> bool {
    let f16 = f16_type(props);
    match Half::from_id(half) {
        Half::Auto => f16 && native_half_in_use(),
        Half::Integer => false,
        Half::Native if !f16 => {
            panic!("the native f16 form needs an adapter with shader-f16 (Half::available)")
        }
        Half::Native => true,
    }
}

/// The packed rows `w` as the kernels' `wh` argument and its element type: the same buffer read
/// as f16 values when `native`, otherwise `w` itself, which the integer form never reads.
fn half_view(w: &CubeTensor, native: bool) -> (CubeTensor, cubecl::ir::ElemType) {
    use cubecl::ir::{ElemType, FloatKind, UIntKind};
    if native {
        let words = w.meta.shape().num_elements();
        let view = CubeTensor::new_contiguous(
            w.client.clone(),
            w.device.clone(),
            [2 * words].into(),
            w.handle.clone(),
            DType::F16,
        );
        (view, ElemType::Float(FloatKind::F16))
    } else {
        (w.clone(), ElemType::UInt(UIntKind::U32))
    }
}

impl QuantOps for CubeBackend {
    fn qmatmul(
        x: CubeTensor,
        w: CubeTensor,
        ty_id: u32,
        n: usize,
        k: usize,
        kernel: u32,
        half: u32,
    ) -> CubeTensor {
        let m = x.meta.shape().num_elements() / k;
        let out = empty_device_dtype(
            x.client.clone(),
            x.device.clone(),
            [m, n].into(),
            DType::F32,
        );
        let p = Params::plain(ty_id, n, k, kernel, half, 0);
        launch_qmatmul(x, w, None, out, p)
    }

    fn qmatmul_into(
        x: CubeTensor,
        w: CubeTensor,
        out: CubeTensor,
        ty_id: u32,
        n: usize,
        k: usize,
        kernel: u32,
        half: u32,
        col0: usize,
    ) -> CubeTensor {
        let p = Params::plain(ty_id, n, k, kernel, half, col0);
        launch_qmatmul(x, w, None, out, p)
    }

    fn qmatmul_fused(
        x: CubeTensor,
        w: CubeTensor,
        w2: CubeTensor,
        ty_id: u32,
        ty2_id: u32,
        n1: usize,
        n2: usize,
        k: usize,
        kernel: u32,
        half: u32,
        gelu: bool,
    ) -> CubeTensor {
        let m = x.meta.shape().num_elements() / k;
        let n = if gelu { (n1 + n2) / 2 } else { n1 + n2 };
        let out = empty_device_dtype(
            x.client.clone(),
            x.device.clone(),
            [m, n].into(),
            DType::F32,
        );
        let p = Params {
            ty2: ty2_id,
            n2,
            gelu,
            ..Params::plain(ty_id, n1, k, kernel, half, 0)
        };
        let w2 = (n2 > 0).then_some(w2);
        launch_qmatmul(x, w, w2, out, p)
    }

    fn qgather(
        ids: CubeTensor,
        w: CubeTensor,
        ty_id: u32,
        k: usize,
        row0: usize,
        rows: usize,
        half: u32,
    ) -> CubeTensor {
        let t = ids.meta.shape().num_elements();
        let out = empty_device_dtype(
            w.client.clone(),
            w.device.clone(),
            [t, k].into(),
            DType::F32,
        );
        launch_qgather(ids, w, out, ty_id, k, row0, rows, half, false)
    }

    fn qgather_into(
        ids: CubeTensor,
        w: CubeTensor,
        out: CubeTensor,
        ty_id: u32,
        k: usize,
        row0: usize,
        rows: usize,
        half: u32,
    ) -> CubeTensor {
        launch_qgather(ids, w, out, ty_id, k, row0, rows, half, true)
    }

    fn write_words(w: CubeTensor, at: usize, words: Vec<u32>) -> CubeTensor {
        let (start, len) = (at as u64 * 4, words.len() as u64 * 4);
        let rest = w.handle.size_in_used().checked_sub(start + len);
        let rest = rest.expect("the words fit the buffer (QMatrix::push_chunk_grouped sizes it)");
        let at = w.handle.clone().offset_start(start).offset_end(rest);
        w.client.write(&at, cubecl::bytes::Bytes::from_elems(words));
        w
    }
}

/// What [`launch_qmatmul`] multiplies and how.
#[derive(Debug, Clone, Copy)]
struct Params {
    /// ggml type id of the first buffer's rows.
    ty: u32,
    /// ggml type id of the second buffer's rows (`n2 > 0`).
    ty2: u32,
    /// Rows of the first buffer.
    n1: usize,
    /// Rows of the second buffer (0: none).
    n2: usize,
    /// Weights per row.
    k: usize,
    /// [`Kernel`]'s id.
    kernel: u32,
    /// [`Half`]'s id.
    half: u32,
    /// First output column written.
    col0: usize,
    /// GELU(gate)·up of the joined rows' halves.
    gelu: bool,
}

impl Params {
    /// `n` rows of one buffer, no epilogue.
    fn plain(ty: u32, n: usize, k: usize, kernel: u32, half: u32, col0: usize) -> Params {
        Params {
            ty,
            ty2: ty,
            n1: n,
            n2: 0,
            k,
            kernel,
            half,
            col0,
            gelu: false,
        }
    }
}

/// The quantised matmul of [`QuantOps::qmatmul`] (of `w`, then `w2`'s rows when given) into
/// columns `col0..` of `out` (`[m, ld]`, contiguous, written in place).
fn launch_qmatmul(
    x: CubeTensor,
    w: CubeTensor,
    w2: Option<CubeTensor>,
    out: CubeTensor,
    p: Params,
) -> CubeTensor {
    let k = p.k;
    let (x, w) = (into_contiguous(x), into_contiguous(w));
    let w2 = w2.map(into_contiguous);
    let m = x.meta.shape().num_elements() / k;
    let ld = out.meta.shape().num_elements() / m.max(1);
    let rows = p.n1 + p.n2;
    let n = if p.gelu { rows / 2 } else { rows };
    // The packed weights, x, and the outputs written.
    let w_bytes = |w: &CubeTensor| w.meta.shape().num_elements() * 4;
    crate::launches::note_bytes(w_bytes(&w) + w2.as_ref().map_or(0, w_bytes) + (m * k + m * n) * 4);
    crate::launches::note_flop(2 * m as u64 * rows as u64 * k as u64);
    let client = x.client.clone();
    let wpr = row_words(ggml(p.ty), k) as u32;
    let wpr2 = row_words(ggml(p.ty2), k) as u32;
    let plane = plane_ops(client.properties());
    let native = native_half(client.properties(), p.half);
    let (wh, h_elem) = half_view(&w, native);
    let stacked = w2.is_some();
    // Without a second buffer the kernels never read `w2`; `w` fills its binding.
    let w2 = w2.unwrap_or_else(|| w.clone());
    let (wh2, _) = half_view(&w2, native);
    let kernel = match Kernel::from_id(p.kernel) {
        Kernel::Auto => auto_kernel(client.properties(), [m, n, k]),
        Kernel::GemvSubgroup if !plane => {
            panic!("the subgroup kernel needs an adapter with subgroups (Kernel::available)")
        }
        other => other,
    };
    let (ty, ty2) = (p.ty, p.ty2);
    let args = || {
        (
            x.clone().into_tensor_arg(),
            w.clone().into_tensor_arg(),
            wh.clone().into_tensor_arg(),
            w2.clone().into_tensor_arg(),
            wh2.clone().into_tensor_arg(),
            out.clone().into_tensor_arg(),
        )
    };
    let (m32, k32, n32, n1, ld, col0) = (
        m as u32,
        k as u32,
        n as u32,
        p.n1 as u32,
        ld as u32,
        p.col0 as u32,
    );
    // The vector width of `x` in the naive and tiled products (the matrix–vector kernels read it
    // by floats).
    let lanes = input_lanes(k);
    match kernel {
        Kernel::Gemv | Kernel::GemvSubgroup => {
            let subgroups = kernel == Kernel::GemvSubgroup;
            let rows_x = if m == 1 { 1 } else { GEMV_ROWS };
            let team = gemv_team();
            let shuffle = subgroups
                && team < GEMV_THREADS
                && team <= client.properties().hardware.plane_size_min;
            let cubes = n.div_ceil((GEMV_THREADS / team) as usize) * m.div_ceil(rows_x);
            let cube_dim = cubecl::CubeDim::new_1d(GEMV_THREADS);
            let cube_count = cubecl::calculate_cube_count_elemwise(
                &client,
                cubes * GEMV_THREADS as usize,
                cube_dim,
            );
            let (xa, wa, wha, w2a, wh2a, oa) = args();
            qgemv_kernel::launch(
                &client, cube_count, cube_dim, xa, wa, wha, w2a, wh2a, oa, m32, k32, n32, n1, wpr,
                wpr2, ld, col0, ty, ty2, stacked, p.gelu, subgroups, native, rows_x, team, shuffle,
                h_elem,
            );
        }
        Kernel::Tiled | Kernel::TiledSplit => {
            assert!(
                !p.gelu,
                "the tiled kernel has no GELU form (QMatrix checks)"
            );
            // Scalar: TILE-wide tiles, TILE / TILE_PER invocations a side (the kernel's own
            // constants); vector: `side` a side (the GPU's or a software adapter's), each
            // `per` outputs wide.
            let software = crate::kernels::software(client.properties());
            let (tile, side, vector, step) = match tile_form(software) {
                TileForm::Scalar => (TILE, TILE as u32 / TILE_PER, None, TILE_K),
                TileForm::Vector { per, side } => {
                    ((side * per) as usize, side, Some(per), vec_tile_k(per))
                }
            };
            let chunk = match kernel {
                Kernel::TiledSplit => {
                    split_chunk(k, step, tile_splits(client.properties(), [m, n, k]))
                }
                _ => k.max(1),
            };
            let splits = k.div_ceil(chunk).max(1);
            // Split: each chunk's sums go to its block of `part` ([splits, m, n]), added up
            // into `out` by a second dispatch.
            let (dest, dest_ld, dest_col0) = if splits > 1 {
                let part = empty_device_dtype(
                    client.clone(),
                    x.device.clone(),
                    [splits, m, n].into(),
                    DType::F32,
                );
                crate::launches::note_bytes(2 * splits * m * n * 4);
                (part, n32, 0)
            } else {
                (out.clone(), ld, col0)
            };
            let cube_dim = cubecl::CubeDim::new_2d(side, side);
            let cube_count = cubecl::CubeCount::Static(
                n.div_ceil(tile) as u32,
                m.div_ceil(tile) as u32,
                splits as u32,
            );
            let (xa, wa, wha, w2a, wh2a, _) = args();
            let oa = dest.clone().into_tensor_arg();
            let chunk32 = chunk as u32;
            match vector {
                None => qmatmul_tiled_kernel::launch(
                    &client, cube_count, cube_dim, lanes, xa, wa, wha, w2a, wh2a, oa, m32, k32,
                    n32, n1, wpr, wpr2, dest_ld, dest_col0, chunk32, ty, ty2, stacked, native,
                    h_elem,
                ),
                Some(per) => qmatmul_tiled_vec_kernel::launch(
                    &client, cube_count, cube_dim, lanes, xa, wa, wha, w2a, wh2a, oa, m32, k32,
                    n32, n1, wpr, wpr2, dest_ld, dest_col0, chunk32, ty, ty2, stacked, native, per,
                    side, h_elem,
                ),
            }
            if splits > 1 {
                let count = m * n;
                let cube_dim = cubecl::CubeDim::new(&client, count);
                let cube_count = cubecl::calculate_cube_count_elemwise(&client, count, cube_dim);
                split_sum_kernel::launch(
                    &client,
                    cube_count,
                    cube_dim,
                    dest.into_tensor_arg(),
                    out.clone().into_tensor_arg(),
                    m32,
                    n32,
                    ld,
                    col0,
                    splits as u32,
                );
            }
        }
        Kernel::Naive | Kernel::Auto => {
            let count = m * n;
            let cube_dim = cubecl::CubeDim::new(&client, count);
            let cube_count = cubecl::calculate_cube_count_elemwise(&client, count, cube_dim);
            let (xa, wa, wha, w2a, wh2a, oa) = args();
            qmatmul_kernel::launch(
                &client, cube_count, cube_dim, lanes, xa, wa, wha, w2a, wh2a, oa, m32, k32, n32,
                n1, wpr, wpr2, ld, col0, ty, ty2, stacked, p.gelu, native, h_elem,
            );
        }
    }
    out
}

/// Floats per read of `x` in the naive and tiled products (`input_run`): 4 where 4 divides a
/// row of `k`, so that no run of 4 crosses a row's end (every matrix of the supported models),
/// else 1.
fn input_lanes(k: usize) -> usize {
    if k.is_multiple_of(4) { 4 } else { 1 }
}

/// Invocations per weight row of the matrix–vector kernel: [`GEMV_TEAM`], or the tuning's
/// (`REXVQA_GEMV_TEAM`; the conformance tests run the other teams).
pub fn gemv_team() -> u32 {
    crate::tuning::current().gemv_team.unwrap_or(GEMV_TEAM)
}

/// [`qgather_kernel`] into `out` (`[ids, k]`, contiguous, written in place).
#[allow(clippy::too_many_arguments)]
fn launch_qgather(
    ids: CubeTensor,
    w: CubeTensor,
    out: CubeTensor,
    ty_id: u32,
    k: usize,
    row0: usize,
    rows: usize,
    half: u32,
    only_hits: bool,
) -> CubeTensor {
    let (ids, w) = (into_contiguous(ids), into_contiguous(w));
    let t = ids.meta.shape().num_elements();
    let client = w.client.clone();
    let native = native_half(client.properties(), half);
    let (wh, h_elem) = half_view(&w, native);
    let count = t * k;
    let cube_dim = cubecl::CubeDim::new(&client, count);
    let cube_count = cubecl::calculate_cube_count_elemwise(&client, count, cube_dim);
    let wpr = row_words(ggml(ty_id), k) as u32;
    // The ids, and at most one packed row and one output row per id.
    crate::launches::note_bytes(t * 4 + t * (wpr as usize + k) * 4);
    let launch = |tyc: u32| {
        qgather_kernel::launch(
            &client,
            cube_count.clone(),
            cube_dim,
            ids.clone().into_tensor_arg(),
            w.clone().into_tensor_arg(),
            wh.clone().into_tensor_arg(),
            out.clone().into_tensor_arg(),
            k as u32,
            wpr,
            row0 as u32,
            rows as u32,
            tyc,
            native,
            only_hits,
            h_elem,
        )
    };
    by_type!(ty_id, launch);
    out
}
