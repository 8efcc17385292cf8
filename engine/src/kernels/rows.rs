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
    ELEMENT_THREADS, add_rms_norm_then_norm_kernel, gelu_halves_kernel, gelu_kernel,
    layer_norm_kernel, per_lane, qk_norm_rope_store_kernel, rms_norm_kernel, rms_norm_rope_kernel,
    row_threads, write_positions_kernel,
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
        super::argmax::launch_argmax(x)
    }
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

/// Fused argmax of each row of `x [rows, n]`: `[rows]` u32 on the device, the first column
/// on ties (as [`crate::model::nn::argmax`]).
pub fn argmax(x: BurnTensor<2>) -> BurnTensor<1, Int> {
    BurnTensor::<1, Int>::from_dispatch(<Dispatch as RowOps>::fused_argmax(x.into_dispatch()))
}
