//! Rows and positions written into device buffers in place: the KV cache's moves, the image
//! features written over their placeholders, row blocks stacked as they come. One dispatch each
//! on a GPU, whatever the runtime's handle count says; the CPU assigns with burn's ops.

use burn::backend::Dispatch;
use burn::tensor::Tensor as BurnTensor;

use super::rows::RowOps;

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

/// `dst [heads, cap, d]` with the first `len` positions of `src [heads, ≥ len, d]` written at
/// its positions `start..start + len`, in place (one dispatch). The caller's `dst` must be its
/// own, as for [`write_rows`]. GPU devices only.
pub fn write_positions(
    dst: BurnTensor<3>,
    start: usize,
    src: BurnTensor<3>,
    len: usize,
) -> BurnTensor<3> {
    BurnTensor::<3>::from_dispatch(<Dispatch as RowOps>::write_positions(
        dst.into_dispatch(),
        start,
        src.into_dispatch(),
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
    if !super::queues_work(&dst.device()) {
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
    if !super::queues_work(&device) {
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
