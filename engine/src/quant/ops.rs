//! The two operations the model needs on quantised weights, `x · Wᵀ` and row gathers, as a burn
//! backend extension ([`QuantOps`]) with its CPU implementation (flex, plain Rust). The GPU
//! implementation (CubeCL kernels, wgpu natively and WebGPU in the browser) is in [`super::gpu`];
//! the matrix that calls them is [`super::qmatrix::QMatrix`].

use burn::backend::Flex;
use burn::backend::backend_extension;
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::tensor::TensorData;

use super::choice::GEMV_MAX_M;
use super::dot::{Activations, dot_rows};
use super::pack::{dequantize_packed, row_words};
use crate::gguf::GgmlType;

/// Operations on packed GGUF rows (see [`super::pack`]).
#[backend_extension(Cube, Flex)]
pub trait QuantOps: burn::backend::Backend {
    /// `x [m, k] · Wᵀ → [m, n]` for `n` packed rows of ggml type `ty_id`, with the kernel
    /// and f16 form given by [`super::Kernel`]'s and [`super::Half`]'s ids.
    fn qmatmul(
        x: FloatTensor<Self>,
        w: IntTensor<Self>,
        ty_id: u32,
        n: usize,
        k: usize,
        kernel: u32,
        half: u32,
    ) -> FloatTensor<Self>;

    /// [`QuantOps::qmatmul`] for a chunk of a split matrix: writes its `n` output columns at
    /// `col0..col0 + n` of `out` (`[m, all columns]`) and returns `out` (GPU backends; the
    /// CPU concatenates the chunks' products).
    #[allow(clippy::too_many_arguments)]
    fn qmatmul_into(
        x: FloatTensor<Self>,
        w: IntTensor<Self>,
        out: FloatTensor<Self>,
        ty_id: u32,
        n: usize,
        k: usize,
        kernel: u32,
        half: u32,
        col0: usize,
    ) -> FloatTensor<Self>;

    /// `x [m, k]` times a matrix of `w`'s `n1` rows of type `ty_id` then `w2`'s `n2` rows of
    /// type `ty2_id`, in one dispatch: `[m, n1 + n2]`; with `gelu` the rows are a joined gate
    /// and up and the result is `gelu_tanh(gate) · up`, `[m, (n1 + n2) / 2]`. GPU backends only
    /// (see `QMatrix::matmul_stacked` and `QMatrix::matmul_gelu_halves`, which check).
    #[allow(clippy::too_many_arguments)]
    fn qmatmul_fused(
        x: FloatTensor<Self>,
        w: IntTensor<Self>,
        w2: IntTensor<Self>,
        ty_id: u32,
        ty2_id: u32,
        n1: usize,
        n2: usize,
        k: usize,
        kernel: u32,
        half: u32,
        gelu: bool,
    ) -> FloatTensor<Self>;

    /// Rows `ids - row0` of the packed matrix of `rows` rows, dequantised: `[ids.len(), k]`;
    /// zero rows for ids outside `row0..row0 + rows`; `half` is [`super::Half`]'s id.
    fn qgather(
        ids: IntTensor<Self>,
        w: IntTensor<Self>,
        ty_id: u32,
        k: usize,
        row0: usize,
        rows: usize,
        half: u32,
    ) -> FloatTensor<Self>;

    /// Writes `words` into the u32 buffer `w` from word `at` on, in place, and returns `w` (a
    /// GPU loader filling a group buffer chunk by chunk; the CPU loader keeps a buffer a chunk).
    /// A queue write: no upload buffer, no copy kernel.
    fn write_words(w: IntTensor<Self>, at: usize, words: Vec<u32>) -> IntTensor<Self>;

    /// [`QuantOps::qgather`] for a later chunk of a split matrix: writes the rows of the ids
    /// this chunk holds into `out` (the first chunk's gather, `[ids.len(), k]`) and leaves the
    /// rest (GPU backends; the CPU adds the chunks' gathers).
    #[allow(clippy::too_many_arguments)]
    fn qgather_into(
        ids: IntTensor<Self>,
        w: IntTensor<Self>,
        out: FloatTensor<Self>,
        ty_id: u32,
        k: usize,
        row0: usize,
        rows: usize,
        half: u32,
    ) -> FloatTensor<Self>;
}

pub(super) fn ggml(ty_id: u32) -> GgmlType {
    GgmlType::from_id(ty_id).expect("QMatrix only stores supported types")
}

impl QuantOps for Flex {
    fn qmatmul(
        x: FloatTensor<Self>,
        w: IntTensor<Self>,
        ty_id: u32,
        n: usize,
        k: usize,
        _kernel: u32,
        _half: u32,
    ) -> FloatTensor<Self> {
        let (x, w) = (x.to_contiguous(), w.to_contiguous());
        let xs: &[f32] = x.as_slice().expect("qmatmul input is f32");
        let ws: &[u32] = w.as_slice().expect("packed weights are u32");
        let ty = ggml(ty_id);
        let m = xs.len() / k;
        let wpr = row_words(ty, k);
        // Dequantise ROW_BLOCK rows at a time (a small bounded scratch, never the whole matrix)
        // and multiply them with an optimised GEMM: out[:, block] = x · blockᵀ.
        const ROW_BLOCK: usize = 64;
        let gemm_block = |b: usize| -> Vec<f32> {
            let r0 = b * ROW_BLOCK;
            let nb = ROW_BLOCK.min(n - r0);
            let mut w = vec![0f32; nb * k];
            dequantize_packed(ty, &ws[r0 * wpr..(r0 + nb) * wpr], k, &mut w)
                .expect("rows are whole blocks");
            let mut out = vec![0f32; m * nb];
            // SAFETY: the pointers cover m×nb (dst), m×k (lhs) and nb×k (rhs) f32 values with
            // the strides given; the buffers outlive the call.
            unsafe {
                gemm::gemm(
                    m,
                    nb,
                    k,
                    out.as_mut_ptr(),
                    1,
                    nb as isize,
                    false,
                    xs.as_ptr(),
                    1,
                    k as isize,
                    w.as_ptr(),
                    k as isize,
                    1,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
            out
        };
        // Few input rows (decoding): multiply the quantised blocks directly (see `dot`), rather
        // than writing a block out for a GEMM of one row.
        let acts = (m <= GEMV_MAX_M).then(|| Activations::new(xs, k));
        let dot_block = |b: usize| -> Vec<f32> {
            let r0 = b * ROW_BLOCK;
            let nb = ROW_BLOCK.min(n - r0);
            let mut out = vec![0f32; m * nb];
            let acts = acts
                .as_ref()
                .expect("activations for the matrix-vector path");
            dot_rows(ty, &ws[r0 * wpr..(r0 + nb) * wpr], acts, &mut out);
            out
        };
        let block = |b: usize| {
            if m > GEMV_MAX_M {
                gemm_block(b)
            } else {
                dot_block(b)
            }
        };
        let n_blocks = n.div_ceil(ROW_BLOCK);
        #[cfg(not(target_arch = "wasm32"))]
        let parts: Vec<Vec<f32>> = {
            use rayon::prelude::*;
            (0..n_blocks).into_par_iter().map(block).collect()
        };
        #[cfg(target_arch = "wasm32")]
        let parts: Vec<Vec<f32>> = (0..n_blocks).map(block).collect();
        let mut out = vec![0f32; m * n];
        for (b, part) in parts.iter().enumerate() {
            let (r0, nb) = (b * ROW_BLOCK, ROW_BLOCK.min(n - b * ROW_BLOCK));
            for i in 0..m {
                out[i * n + r0..i * n + r0 + nb].copy_from_slice(&part[i * nb..(i + 1) * nb]);
            }
        }
        burn::backend::flex::FlexTensor::from_data(TensorData::new(out, [m, n]))
    }

    fn qmatmul_into(
        _x: FloatTensor<Self>,
        _w: IntTensor<Self>,
        _out: FloatTensor<Self>,
        _ty_id: u32,
        _n: usize,
        _k: usize,
        _kernel: u32,
        _half: u32,
        _col0: usize,
    ) -> FloatTensor<Self> {
        unreachable!(
            "the CPU concatenates the chunks' products (QMatrix::matmul_variant checks the device)"
        )
    }

    fn qmatmul_fused(
        _x: FloatTensor<Self>,
        _w: IntTensor<Self>,
        _w2: IntTensor<Self>,
        _ty_id: u32,
        _ty2_id: u32,
        _n1: usize,
        _n2: usize,
        _k: usize,
        _kernel: u32,
        _half: u32,
        _gelu: bool,
    ) -> FloatTensor<Self> {
        unreachable!("the CPU multiplies each matrix on its own (QMatrix checks the device)")
    }

    fn qgather(
        ids: IntTensor<Self>,
        w: IntTensor<Self>,
        ty_id: u32,
        k: usize,
        row0: usize,
        rows: usize,
        _half: u32,
    ) -> FloatTensor<Self> {
        let (ids, w) = (ids.to_contiguous(), w.to_contiguous());
        let ids: &[u32] = ids.as_slice().expect("ids are u32");
        let ws: &[u32] = w.as_slice().expect("packed weights are u32");
        let ty = ggml(ty_id);
        let wpr = row_words(ty, k);
        let mut out = vec![0f32; ids.len() * k];
        for (t, y) in out.chunks_exact_mut(k).enumerate() {
            let Some(r) = (ids[t] as usize).checked_sub(row0).filter(|r| *r < rows) else {
                continue;
            };
            dequantize_packed(ty, &ws[r * wpr..(r + 1) * wpr], k, y).expect("row is whole blocks");
        }
        burn::backend::flex::FlexTensor::from_data(TensorData::new(out, [ids.len(), k]))
    }

    fn qgather_into(
        _ids: IntTensor<Self>,
        _w: IntTensor<Self>,
        _out: FloatTensor<Self>,
        _ty_id: u32,
        _k: usize,
        _row0: usize,
        _rows: usize,
        _half: u32,
    ) -> FloatTensor<Self> {
        unreachable!("the CPU adds the chunks' gathers (QMatrix::gather_with checks the device)")
    }

    fn write_words(_w: IntTensor<Self>, _at: usize, _words: Vec<u32>) -> IntTensor<Self> {
        unreachable!("the CPU loader keeps a buffer a chunk (Loader::qmatrix_with_dims)")
    }
}
