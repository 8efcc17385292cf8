//! Fused row-wise kernels for the GPU backends: RMSNorm (alone, added to a residual, added to a
//! residual and followed by the next RMSNorm, or followed by RoPE), LayerNorm and
//! GELU-tanh(gate)·up, each one dispatch.
//!
//! Why: burn runs here without its fusion backend, so every elementwise op is a dispatch of its
//! own; a composed RMSNorm is seven (square, mean, add, sqrt, recip, two products), RoPE after
//! it eight more, GELU·up ten. A decoder layer made ~100 dispatches per decoded token, most of
//! them on a handful of floats, so launch overhead (large in a browser) dominated decoding.
//!
//! Each norm kernel gives one workgroup to one row: the invocations stride over the row summing
//! squares, reduce through workgroup memory, then write the row. Every formula is the one of
//! its composed counterpart in [`crate::model::nn`], in the same order, in f32; only the summation
//! order of the reductions differs. The CPU keeps the composed path.

use burn::backend::backend_extension;
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Dispatch, Flex};
use burn::tensor::{DType, Int, Tensor as BurnTensor};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{CubeBackend, cubecl, kernel::into_contiguous, ops::numeric::empty_device_dtype};

use super::row_kernels::{
    ELEMENT_THREADS, ROW_THREADS, add_rms_norm_then_norm_kernel, argmax_final_kernel,
    argmax_partial_kernel, gelu_halves_kernel, gelu_kernel, layer_norm_kernel, per_lane,
    qk_norm_rope_store_kernel, rms_norm_kernel, rms_norm_rope_kernel, row_threads,
    write_positions_kernel,
};
use crate::kernels::forms::{self, Form};

/// The fused row kernels (GPU backends only; see [`super::runs`]).
#[backend_extension(Cube, Flex)]
pub trait RowOps: burn::backend::Backend {
    /// `x [.., d]`, `w [d]` → `x / sqrt(mean(x²) + eps) · w`, plus `residual` (shaped as `x`)
    /// when `has_residual`.
    fn fused_rms_norm(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        residual: FloatTensor<Self>,
        has_residual: bool,
        eps: f32,
    ) -> FloatTensor<Self>;

    /// `x`, `residual` `[.., d]`, `w`, `w2` `[d]` → `(h, hn)`: `h = residual + RMSNorm(x) · w`
    /// and `hn = RMSNorm(h) · w2`.
    fn fused_add_rms_norm_then_norm(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        residual: FloatTensor<Self>,
        w2: FloatTensor<Self>,
        eps: f32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// `x [t, heads, d]`, `w [d]`, `cos`/`sin` `[t, 1, d/2]` → RoPE(RMSNorm(x)) `[t, heads, d]`.
    fn fused_rms_norm_rope(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        eps: f32,
    ) -> FloatTensor<Self>;

    /// `qkv [t, (heads + 2·kv_heads)·d]` (`dims`: heads, kv_heads, d), `norms [2d]` (q's then
    /// k's), `table [t, d]` (cos then sin halves), cache buffers `[kv_heads, cap, d]` →
    /// `(RoPE(RMSNorm(q)) [t, heads, d], k_buf, v_buf)` with RoPE(RMSNorm(k)) and v written at
    /// positions `pos..pos + t` of the buffers, in place: the caller hands over buffers that
    /// nothing else reads, as `model::kv_cache` does (it copies a clone's shared ones first and
    /// knows they are shared from its own count, not from the runtime's handle count, which
    /// moves while the device thread binds a fresh allocation).
    #[allow(clippy::too_many_arguments)]
    fn fused_qk_norm_rope_store(
        qkv: FloatTensor<Self>,
        dims: [usize; 3],
        norms: FloatTensor<Self>,
        table: FloatTensor<Self>,
        k_buf: FloatTensor<Self>,
        v_buf: FloatTensor<Self>,
        pos: usize,
        eps: f32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);

    /// `x [.., d]`, `w`, `b` `[d]` → LayerNorm(x) · w + b.
    fn fused_layer_norm(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: FloatTensor<Self>,
        eps: f32,
    ) -> FloatTensor<Self>;

    /// `gelu_tanh(gate) · up` (`gelu_tanh(gate)` without `has_up`), shapes equal.
    fn fused_gelu(
        gate: FloatTensor<Self>,
        up: FloatTensor<Self>,
        has_up: bool,
    ) -> FloatTensor<Self>;

    /// `x [.., 2f]` (gate then up) → `gelu_tanh(gate) · up` `[.., f]`.
    fn fused_gelu_halves(x: FloatTensor<Self>) -> FloatTensor<Self>;

    /// `x [rows, n]` → each row's column of its largest value (the first on ties), `[rows]` u32.
    fn fused_argmax(x: FloatTensor<Self>) -> IntTensor<Self>;

    /// `dst [heads, cap, d]` with the first `len` positions of `src [heads, ≥ len, d]` written
    /// over its positions `start..start + len`, in place: the caller's `dst` is its own (fresh,
    /// or nothing else reads it).
    fn write_positions(
        dst: FloatTensor<Self>,
        start: usize,
        src: FloatTensor<Self>,
        len: usize,
    ) -> FloatTensor<Self>;
}

const CPU_COMPOSES: &str = "the CPU composes burn ops (kernels::runs checks the device)";

impl RowOps for Flex {
    fn fused_rms_norm(
        _x: FloatTensor<Self>,
        _w: FloatTensor<Self>,
        _residual: FloatTensor<Self>,
        _has_residual: bool,
        _eps: f32,
    ) -> FloatTensor<Self> {
        unreachable!("{CPU_COMPOSES}")
    }

    fn fused_add_rms_norm_then_norm(
        _x: FloatTensor<Self>,
        _w: FloatTensor<Self>,
        _residual: FloatTensor<Self>,
        _w2: FloatTensor<Self>,
        _eps: f32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        unreachable!("{CPU_COMPOSES}")
    }

    fn fused_rms_norm_rope(
        _x: FloatTensor<Self>,
        _w: FloatTensor<Self>,
        _cos: FloatTensor<Self>,
        _sin: FloatTensor<Self>,
        _eps: f32,
    ) -> FloatTensor<Self> {
        unreachable!("{CPU_COMPOSES}")
    }

    fn fused_qk_norm_rope_store(
        _qkv: FloatTensor<Self>,
        _dims: [usize; 3],
        _norms: FloatTensor<Self>,
        _table: FloatTensor<Self>,
        _k_buf: FloatTensor<Self>,
        _v_buf: FloatTensor<Self>,
        _pos: usize,
        _eps: f32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        unreachable!("{CPU_COMPOSES}")
    }

    fn fused_layer_norm(
        _x: FloatTensor<Self>,
        _w: FloatTensor<Self>,
        _b: FloatTensor<Self>,
        _eps: f32,
    ) -> FloatTensor<Self> {
        unreachable!("{CPU_COMPOSES}")
    }

    fn fused_gelu(
        _gate: FloatTensor<Self>,
        _up: FloatTensor<Self>,
        _has_up: bool,
    ) -> FloatTensor<Self> {
        unreachable!("{CPU_COMPOSES}")
    }

    fn fused_gelu_halves(_x: FloatTensor<Self>) -> FloatTensor<Self> {
        unreachable!("{CPU_COMPOSES}")
    }

    fn fused_argmax(_x: FloatTensor<Self>) -> IntTensor<Self> {
        unreachable!("{CPU_COMPOSES}")
    }

    fn write_positions(
        _dst: FloatTensor<Self>,
        _start: usize,
        _src: FloatTensor<Self>,
        _len: usize,
    ) -> FloatTensor<Self> {
        unreachable!("{CPU_COMPOSES}")
    }
}

/// An uninitialised f32 tensor shaped as `like` (contiguous), on its device.
fn empty_like(like: &CubeTensor) -> CubeTensor {
    empty_device_dtype(
        like.client.clone(),
        like.device.clone(),
        like.meta.shape().clone(),
        DType::F32,
    )
}

/// [`ELEMENT_THREADS`] invocations a workgroup, one an element of `n`, on `x`'s device.
fn element_launch(x: &CubeTensor, n: usize) -> (cubecl::CubeCount, cubecl::CubeDim) {
    let dim = cubecl::CubeDim::new_1d(ELEMENT_THREADS);
    (
        cubecl::calculate_cube_count_elemwise(&x.client, n, dim),
        dim,
    )
}

/// Rows of `x` (all but the last dimension) and the row length.
fn rows_of(x: &CubeTensor) -> (usize, usize) {
    let shape = x.meta.shape();
    let d = shape.as_slice().last().copied().unwrap_or(1);
    (shape.num_elements() / d.max(1), d)
}

/// One workgroup of [`row_threads`] per row of `d`, over a 2-D grid when rows pass one
/// dimension; with that invocation count, which the kernels take as their comptime `threads`
/// (their reduction slots and register stride must match the workgroup), and the norms'
/// register form for it ([`per_lane`]).
fn row_launch(
    x: &CubeTensor,
    rows: usize,
    d: usize,
) -> (cubecl::CubeCount, cubecl::CubeDim, usize, usize) {
    let software = super::software(x.client.properties());
    let threads = row_threads(d, software);
    let dim = cubecl::CubeDim::new_1d(threads);
    let count = cubecl::calculate_cube_count_elemwise(&x.client, rows * threads as usize, dim);
    (count, dim, threads as usize, per_lane(d, threads))
}

impl RowOps for CubeBackend {
    fn fused_rms_norm(
        x: CubeTensor,
        w: CubeTensor,
        residual: CubeTensor,
        has_residual: bool,
        eps: f32,
    ) -> CubeTensor {
        let (x, w, residual) = (
            into_contiguous(x),
            into_contiguous(w),
            into_contiguous(residual),
        );
        let (rows, d) = rows_of(&x);
        let out = empty_like(&x);
        let (count, dim, threads, per) = row_launch(&x, rows, d);
        let passes = if has_residual { 3 } else { 2 };
        crate::launches::note_bytes((passes * rows * d + d) * 4);
        rms_norm_kernel::launch(
            &x.client,
            count,
            dim,
            x.clone().into_tensor_arg(),
            w.into_tensor_arg(),
            residual.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            rows as u32,
            d as u32,
            eps,
            has_residual,
            per,
            threads,
        );
        out
    }

    fn fused_add_rms_norm_then_norm(
        x: CubeTensor,
        w: CubeTensor,
        residual: CubeTensor,
        w2: CubeTensor,
        eps: f32,
    ) -> (CubeTensor, CubeTensor) {
        let (x, w) = (into_contiguous(x), into_contiguous(w));
        let (residual, w2) = (into_contiguous(residual), into_contiguous(w2));
        let (rows, d) = rows_of(&x);
        let (h, hn) = (empty_like(&x), empty_like(&x));
        let (count, dim, threads, per) = row_launch(&x, rows, d);
        // x and the residual read, h and its norm written, two weight vectors.
        crate::launches::note_bytes((4 * rows * d + 2 * d) * 4);
        add_rms_norm_then_norm_kernel::launch(
            &x.client,
            count,
            dim,
            x.clone().into_tensor_arg(),
            w.into_tensor_arg(),
            residual.into_tensor_arg(),
            w2.into_tensor_arg(),
            h.clone().into_tensor_arg(),
            hn.clone().into_tensor_arg(),
            rows as u32,
            d as u32,
            eps,
            per,
            threads,
        );
        (h, hn)
    }

    fn fused_rms_norm_rope(
        x: CubeTensor,
        w: CubeTensor,
        cos: CubeTensor,
        sin: CubeTensor,
        eps: f32,
    ) -> CubeTensor {
        let (x, w) = (into_contiguous(x), into_contiguous(w));
        let (cos, sin) = (into_contiguous(cos), into_contiguous(sin));
        let [t, heads, d] = x.meta.shape().dims::<3>();
        let out = empty_like(&x);
        let (count, dim, threads, _) = row_launch(&x, t * heads, d);
        crate::launches::note_bytes((2 * t * heads * d + d + t * d) * 4);
        rms_norm_rope_kernel::launch(
            &x.client,
            count,
            dim,
            x.clone().into_tensor_arg(),
            w.into_tensor_arg(),
            cos.into_tensor_arg(),
            sin.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            (t * heads) as u32,
            heads as u32,
            d as u32,
            eps,
            threads,
        );
        out
    }

    fn fused_qk_norm_rope_store(
        qkv: CubeTensor,
        [heads, kv_heads, d]: [usize; 3],
        norms: CubeTensor,
        table: CubeTensor,
        k_buf: CubeTensor,
        v_buf: CubeTensor,
        pos: usize,
        eps: f32,
    ) -> (CubeTensor, CubeTensor, CubeTensor) {
        let (qkv, norms, table) = (
            into_contiguous(qkv),
            into_contiguous(norms),
            into_contiguous(table),
        );
        let (k_buf, v_buf) = (into_contiguous(k_buf), into_contiguous(v_buf));
        let t = qkv.meta.shape().dims::<2>()[0];
        let cap = k_buf.meta.shape().dims::<3>()[1];
        let q_out = empty_device_dtype(
            qkv.client.clone(),
            qkv.device.clone(),
            [t, heads, d].into(),
            DType::F32,
        );
        let (count, dim, threads, _) = row_launch(&qkv, t * (heads + kv_heads), d);
        // The product read, q and the new keys and values written, norms, table.
        let width = (heads + 2 * kv_heads) * d;
        crate::launches::note_bytes((2 * t * width + 2 * d + t * d) * 4);
        qk_norm_rope_store_kernel::launch(
            &qkv.client,
            count,
            dim,
            qkv.clone().into_tensor_arg(),
            norms.into_tensor_arg(),
            table.into_tensor_arg(),
            q_out.clone().into_tensor_arg(),
            k_buf.clone().into_tensor_arg(),
            v_buf.clone().into_tensor_arg(),
            t as u32,
            heads as u32,
            kv_heads as u32,
            d as u32,
            cap as u32,
            pos as u32,
            eps,
            threads,
        );
        (q_out, k_buf, v_buf)
    }

    fn fused_layer_norm(x: CubeTensor, w: CubeTensor, b: CubeTensor, eps: f32) -> CubeTensor {
        let (x, w, b) = (into_contiguous(x), into_contiguous(w), into_contiguous(b));
        let (rows, d) = rows_of(&x);
        let out = empty_like(&x);
        let (count, dim, threads, _) = row_launch(&x, rows, d);
        crate::launches::note_bytes((2 * rows * d + 2 * d) * 4);
        layer_norm_kernel::launch(
            &x.client,
            count,
            dim,
            x.clone().into_tensor_arg(),
            w.into_tensor_arg(),
            b.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            rows as u32,
            d as u32,
            eps,
            threads,
        );
        out
    }

    fn fused_gelu(gate: CubeTensor, up: CubeTensor, has_up: bool) -> CubeTensor {
        let (gate, up) = (into_contiguous(gate), into_contiguous(up));
        let n = gate.meta.shape().num_elements();
        let out = empty_like(&gate);
        crate::launches::note_bytes(if has_up { 3 } else { 2 } * n * 4);
        let (count, dim) = element_launch(&gate, n);
        gelu_kernel::launch(
            &gate.client,
            count,
            dim,
            gate.clone().into_tensor_arg(),
            up.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            n as u32,
            has_up,
        );
        out
    }

    fn fused_gelu_halves(x: CubeTensor) -> CubeTensor {
        let x = into_contiguous(x);
        let mut shape = x.meta.shape().clone();
        let last = shape.num_dims() - 1;
        let f = shape[last] / 2;
        shape[last] = f;
        let n = shape.num_elements();
        let out = empty_device_dtype(x.client.clone(), x.device.clone(), shape, DType::F32);
        // Gate and up read, the product written.
        crate::launches::note_bytes(3 * n * 4);
        let (count, dim) = element_launch(&x, n);
        gelu_halves_kernel::launch(
            &x.client,
            count,
            dim,
            x.clone().into_tensor_arg(),
            out.clone().into_tensor_arg(),
            n as u32,
            f as u32,
        );
        out
    }

    fn write_positions(dst: CubeTensor, start: usize, src: CubeTensor, len: usize) -> CubeTensor {
        let dst = into_contiguous(dst);
        let [heads, cap, d] = dst.meta.shape().dims::<3>();
        let n = heads * len * d;
        crate::launches::note_bytes(2 * n * 4);
        let (count, dim) = element_launch(&dst, n);
        write_positions_kernel::launch(
            &dst.client,
            count,
            dim,
            src.into_tensor_arg(),
            dst.clone().into_tensor_arg(),
            n as u32,
            len as u32,
            d as u32,
            cap as u32,
            start as u32,
        );
        dst
    }

    fn fused_argmax(x: CubeTensor) -> CubeTensor {
        let x = into_contiguous(x);
        let (rows, n) = rows_of(&x);
        let groups = argmax_groups(n);
        let chunk = n.div_ceil(groups);
        let client = x.client.clone();
        let part = |dtype| {
            empty_device_dtype(
                client.clone(),
                x.device.clone(),
                [rows * groups].into(),
                dtype,
            )
        };
        let (vals, ids) = (part(DType::F32), part(DType::U32));
        let out = empty_device_dtype(client.clone(), x.device.clone(), [rows].into(), DType::U32);
        crate::launches::note_bytes(rows * n * 4);
        let dim = cubecl::CubeDim::new_1d(ARGMAX_THREADS);
        argmax_partial_kernel::launch(
            &client,
            cubecl::CubeCount::Static(groups as u32, rows as u32, 1),
            dim,
            x.clone().into_tensor_arg(),
            vals.clone().into_tensor_arg(),
            ids.clone().into_tensor_arg(),
            n as u32,
            chunk as u32,
            ARGMAX_THREADS as usize,
        );
        argmax_final_kernel::launch(
            &client,
            cubecl::CubeCount::Static(1, rows as u32, 1),
            dim,
            vals.into_tensor_arg(),
            ids.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            n as u32,
            groups as u32,
            ARGMAX_THREADS as usize,
        );
        out
    }
}

/// Invocations of the argmax's workgroups (both passes): 64 lanes reading sixteen columns
/// each, where 256 lanes read four. A vocabulary row of 262,144 still spreads over 256
/// workgroups, but each reduction is 6 barriers over 64 slots, not 8 over 256: on a software
/// adapter the reductions cost more than the reads, and SwiftShader zero-initialises the slots
/// in every subgroup of 4 (a tiny pair's token: argmax 98 ms of 450 in Chromium, 29-50 ms
/// natively, with 256 lanes).
const ARGMAX_THREADS: u32 = 64;

/// Columns each workgroup of [`argmax_partial_kernel`] scans at least (sixteen a lane).
const ARGMAX_MIN_CHUNK: usize = 16 * ARGMAX_THREADS as usize;

/// Workgroups per row of the argmax's first pass: at most [`ROW_THREADS`], four for each lane
/// of the second.
fn argmax_groups(n: usize) -> usize {
    n.div_ceil(ARGMAX_MIN_CHUNK).clamp(1, ROW_THREADS as usize)
}

/// Fused [`crate::model::nn::rms_norm`] (plus `residual` when given), over the last dimension.
pub fn rms_norm<const D: usize>(
    x: BurnTensor<D>,
    w: &BurnTensor<1>,
    residual: Option<BurnTensor<D>>,
    eps: f32,
) -> BurnTensor<D> {
    let has_residual = residual.is_some();
    // Without a residual the kernel never reads it; any f32 buffer satisfies the binding.
    let residual = residual.map_or_else(|| w.clone().into_dispatch(), |r| r.into_dispatch());
    let out = BurnTensor::<D>::from_dispatch(<Dispatch as RowOps>::fused_rms_norm(
        x.into_dispatch(),
        w.clone().into_dispatch(),
        residual,
        has_residual,
        eps,
    ));
    forms::perturb(Form::FusedNorm, out)
}

/// Fused `h = residual + rms_norm(x, w)` and `rms_norm(h, w2)`, over the last dimension.
pub fn add_rms_norm_then_norm<const D: usize>(
    residual: BurnTensor<D>,
    x: BurnTensor<D>,
    w: &BurnTensor<1>,
    w2: &BurnTensor<1>,
    eps: f32,
) -> (BurnTensor<D>, BurnTensor<D>) {
    let (h, hn) = <Dispatch as RowOps>::fused_add_rms_norm_then_norm(
        x.into_dispatch(),
        w.clone().into_dispatch(),
        residual.into_dispatch(),
        w2.clone().into_dispatch(),
        eps,
    );
    let (h, hn) = (
        BurnTensor::<D>::from_dispatch(h),
        BurnTensor::<D>::from_dispatch(hn),
    );
    (
        forms::perturb(Form::FusedNorm, h),
        forms::perturb(Form::FusedNorm, hn),
    )
}

/// Fused RoPE(RMSNorm(x)): `x [t, heads, d]`, tables `[t, 1, d/2]` → `[t, heads, d]`.
pub fn rms_norm_rope(
    x: BurnTensor<3>,
    w: &BurnTensor<1>,
    cos: &BurnTensor<3>,
    sin: &BurnTensor<3>,
    eps: f32,
) -> BurnTensor<3> {
    let out = BurnTensor::<3>::from_dispatch(<Dispatch as RowOps>::fused_rms_norm_rope(
        x.into_dispatch(),
        w.clone().into_dispatch(),
        cos.clone().into_dispatch(),
        sin.clone().into_dispatch(),
        eps,
    ));
    forms::perturb(Form::FusedRope, out)
}

/// Fused q/k RMSNorm + RoPE with the cache write (see [`RowOps::fused_qk_norm_rope_store`]):
/// `qkv [t, (heads + 2·kv_heads)·d]`, `norms [2d]`, `table [t, d]`
/// ([`crate::model::nn::rope_table`]); returns RoPE(RMSNorm(q)) `[t, heads, d]` and the key and value buffers holding the new rows.
#[allow(clippy::too_many_arguments)]
pub fn qk_norm_rope_store(
    qkv: BurnTensor<2>,
    dims: [usize; 3],
    norms: &BurnTensor<1>,
    table: &BurnTensor<2>,
    (k_buf, v_buf): (BurnTensor<3>, BurnTensor<3>),
    pos: usize,
    eps: f32,
) -> (BurnTensor<3>, BurnTensor<3>, BurnTensor<3>) {
    let (q, k_buf, v_buf) = <Dispatch as RowOps>::fused_qk_norm_rope_store(
        qkv.into_dispatch(),
        dims,
        norms.clone().into_dispatch(),
        table.clone().into_dispatch(),
        k_buf.into_dispatch(),
        v_buf.into_dispatch(),
        pos,
        eps,
    );
    let q = forms::perturb(Form::FusedRope, BurnTensor::<3>::from_dispatch(q));
    (
        q,
        BurnTensor::<3>::from_dispatch(k_buf),
        BurnTensor::<3>::from_dispatch(v_buf),
    )
}

/// Fused [`crate::model::nn::layer_norm`].
pub fn layer_norm(
    x: BurnTensor<2>,
    w: &BurnTensor<1>,
    b: &BurnTensor<1>,
    eps: f32,
) -> BurnTensor<2> {
    let out = BurnTensor::<2>::from_dispatch(<Dispatch as RowOps>::fused_layer_norm(
        x.into_dispatch(),
        w.clone().into_dispatch(),
        b.clone().into_dispatch(),
        eps,
    ));
    forms::perturb(Form::FusedLayerNorm, out)
}

/// Fused `gelu_tanh(gate) · up` (just `gelu_tanh(gate)` without `up`).
pub fn gelu<const D: usize>(gate: BurnTensor<D>, up: Option<BurnTensor<D>>) -> BurnTensor<D> {
    let has_up = up.is_some();
    let up = up.map_or_else(|| gate.clone().into_dispatch(), |u| u.into_dispatch());
    let out = BurnTensor::<D>::from_dispatch(<Dispatch as RowOps>::fused_gelu(
        gate.into_dispatch(),
        up,
        has_up,
    ));
    forms::perturb(Form::FusedGelu, out)
}

/// Fused `gelu_tanh(gate) · up` for `x [.., 2f]` holding gate then up: `[.., f]`.
pub fn gelu_halves<const D: usize>(x: BurnTensor<D>) -> BurnTensor<D> {
    let out =
        BurnTensor::<D>::from_dispatch(<Dispatch as RowOps>::fused_gelu_halves(x.into_dispatch()));
    forms::perturb(Form::FusedGelu, out)
}

/// The first `len` positions of `x [heads, ≥ len, d]` in a new `[heads, cap, d]` buffer, the
/// positions past `len` unwritten (never read: views stop at the valid length). GPU devices
/// only, like the kernels.
pub fn copy_positions(x: BurnTensor<3>, len: usize, cap: usize) -> BurnTensor<3> {
    let [heads, _, d] = x.dims();
    let fresh = BurnTensor::<3>::empty([heads, cap, d], &x.device());
    BurnTensor::<3>::from_dispatch(<Dispatch as RowOps>::write_positions(
        fresh.into_dispatch(),
        0,
        x.into_dispatch(),
        len,
    ))
}

/// `dst` with `src [n, d]` written over its rows `start..start + n`. On a GPU in place, one
/// dispatch whatever the runtime's handle count says: burn's `slice_assign` (and `cat`, made of
/// it) copies a buffer first when the count reads shared, and a fresh one reads shared for the
/// moment CubeCL's device thread binds it, so the dispatches of a pass varied from run to run.
/// The caller's `dst` must be its own (fresh, or read by nothing else). The CPU assigns.
pub fn write_rows(dst: BurnTensor<2>, start: usize, src: BurnTensor<2>) -> BurnTensor<2> {
    let [n, d] = src.dims();
    if !crate::device::queues_work(&dst.device()) {
        return dst.slice_assign([start..start + n, 0..d], src);
    }
    // One head: the leading unit dimension is a stride change, never a copy.
    let written = <Dispatch as RowOps>::write_positions(
        dst.unsqueeze::<3>().into_dispatch(),
        start,
        src.unsqueeze::<3>().into_dispatch(),
        n,
    );
    BurnTensor::<3>::from_dispatch(written).squeeze_dim::<2>(0)
}

/// `parts` (`[n_i, d]` each, at least one) stacked into one `[Σ n_i, d]`: [`write_rows`] into a
/// fresh buffer on a GPU, burn's `cat` on the CPU.
pub fn cat_rows(parts: Vec<BurnTensor<2>>) -> BurnTensor<2> {
    let first = parts
        .first()
        .expect("cat_rows: at least one part, as burn's cat");
    let device = first.device();
    if !crate::device::queues_work(&device) {
        return BurnTensor::cat(parts, 0);
    }
    let d = first.dims()[1];
    let rows = parts.iter().map(|p| p.dims()[0]).sum();
    let mut out = BurnTensor::<2>::empty([rows, d], &device);
    let mut start = 0;
    for p in parts {
        let n = p.dims()[0];
        out = write_rows(out, start, p);
        start += n;
    }
    out
}

/// `f` on `x [t, d]` in blocks of at most `max_rows` rows, as even as can be, stacked in order:
/// `f(x)` for an `f` that treats rows apart, with `f`'s intermediates a block's size. Each
/// block's result is written into the output as it comes ([`write_rows`]), so only one lives.
pub fn map_row_blocks(
    x: BurnTensor<2>,
    max_rows: usize,
    f: impl Fn(BurnTensor<2>) -> BurnTensor<2>,
) -> BurnTensor<2> {
    let [t, d] = x.dims();
    if t <= max_rows {
        return f(x);
    }
    let per = t.div_ceil(t.div_ceil(max_rows.max(1)));
    let device = x.device();
    let mut out: Option<BurnTensor<2>> = None;
    for start in (0..t).step_by(per) {
        let y = f(x.clone().slice([start..(start + per).min(t), 0..d]));
        let dst = out
            .take()
            .unwrap_or_else(|| BurnTensor::<2>::empty([t, y.dims()[1]], &device));
        out = Some(write_rows(dst, start, y));
    }
    out.expect("t > max_rows: at least one block")
}

/// Fused argmax of each row of `x [rows, n]`: `[rows]` u32 on the device, the first column
/// on ties (as [`crate::model::nn::argmax`]).
pub fn argmax(x: BurnTensor<2>) -> BurnTensor<1, Int> {
    BurnTensor::<1, Int>::from_dispatch(<Dispatch as RowOps>::fused_argmax(x.into_dispatch()))
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Distribution, Tensor};

    fn values(t: Tensor<2>) -> Vec<f32> {
        t.into_data().try_into_vec::<f32>().unwrap()
    }

    /// [`super::map_row_blocks`] hands `f` blocks of at most the rows asked, as even as can be
    /// (10 rows in at most 3: 3, 3, 3 and 1), and stacks what it returns in order, on the GPU
    /// and the CPU; a block of all rows is `f` itself.
    #[test]
    fn row_blocks_are_mapped_and_stacked_in_order() {
        let gpu = crate::device::wgpu().expect("a wgpu adapter (lavapipe)");
        for dev in [gpu, crate::device::cpu()] {
            let x = Tensor::<2>::random([10, 4], Distribution::Default, &dev);
            // Each block's rows, widened to 6 columns and offset by the block's length, so a
            // block out of place or of the wrong length shows.
            let f = |b: Tensor<2>| {
                let n = b.dims()[0];
                let head = b.clone().slice([0..n, 0..2]);
                Tensor::cat(vec![b, head], 1).add_scalar(n as f32)
            };
            let lens = std::cell::RefCell::new(Vec::new());
            let mapped = super::map_row_blocks(x.clone(), 3, |b| {
                lens.borrow_mut().push(b.dims()[0]);
                f(b)
            });
            assert_eq!(*lens.borrow(), [3, 3, 3, 1]);
            let want: Vec<Tensor<2>> = [0..3, 3..6, 6..9, 9..10]
                .into_iter()
                .map(|r| f(x.clone().slice([r, 0..4])))
                .collect();
            assert_eq!(values(mapped), values(Tensor::cat(want, 0)));
            assert_eq!(
                values(super::map_row_blocks(x.clone(), 10, f)),
                values(f(x))
            );
        }
    }

    /// Rows stacked by [`super::cat_rows`] (one part a transposed view, read through its
    /// strides) and written over a buffer's rows by [`super::write_rows`] hold exactly burn's
    /// `cat` and `slice_assign` of the same values, on the GPU (the kernel) and the CPU; and
    /// positions moved by [`super::copy_positions`] (GPU only) are the source's, each head at
    /// its own place in the larger buffer.
    #[test]
    fn written_stacked_and_moved_rows_hold_their_sources() {
        let gpu = crate::device::wgpu().expect("a wgpu adapter (lavapipe)");
        let x = Tensor::<3>::random([7, 2, 3], Distribution::Default, &gpu).swap_dims(0, 1);
        let moved = super::copy_positions(x.clone(), 4, 9);
        assert_eq!(moved.dims(), [2, 9, 3]);
        let valid = |t: Tensor<3>| values(t.slice([0..2, 0..4, 0..3]).reshape([8, 3]));
        assert_eq!(valid(moved), valid(x));
        for dev in [gpu, crate::device::cpu()] {
            let rand = |s: [usize; 2]| Tensor::<2>::random(s, Distribution::Default, &dev);
            let parts = vec![rand([3, 5]), rand([5, 4]).swap_dims(0, 1), rand([2, 5])];
            let want = values(Tensor::cat(parts.clone(), 0));
            assert_eq!(values(super::cat_rows(parts.clone())), want);
            let base = rand([12, 5]);
            let expected = values(base.clone().slice_assign([6..10, 0..5], parts[1].clone()));
            let fresh = Tensor::<2>::zeros([12, 5], &dev) + base;
            assert_eq!(
                values(super::write_rows(fresh, 6, parts[1].clone())),
                expected
            );
        }
    }
}
