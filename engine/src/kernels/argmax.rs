//! The fused argmax of decoding's greedy choice: a first pass where each workgroup finds the
//! largest of its columns of a row, a second that picks among them (the first column on ties).

use burn::tensor::DType;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{cubecl, kernel::into_contiguous, ops::numeric::empty_device_dtype};

use super::row_kernels::{ROW_THREADS, argmax_final_kernel, argmax_partial_kernel};

/// Invocations of the argmax's workgroups (both passes): 64 lanes reading sixteen columns
/// each, where 256 lanes read four. A vocabulary row of 262,144 still spreads over 256
/// workgroups, but each reduction is 6 barriers over 64 slots, not 8 over 256: on a software
/// adapter the reductions cost more than the reads, and SwiftShader zero-initialises the slots
/// in every subgroup of 4
/// (bench/results/ci-vm-2core-swiftshader-row-threads-browser-vs-native.json).
const ARGMAX_THREADS: u32 = 64;

/// Columns each workgroup of [`argmax_partial_kernel`] scans at least (sixteen a lane).
const ARGMAX_MIN_CHUNK: usize = 16 * ARGMAX_THREADS as usize;

/// Workgroups per row of the argmax's first pass: at most [`ROW_THREADS`], four for each lane
/// of the second.
fn argmax_groups(n: usize) -> usize {
    n.div_ceil(ARGMAX_MIN_CHUNK).clamp(1, ROW_THREADS as usize)
}

/// The two passes of the argmax of each row of `x [rows, n]` (see [`super::rows::argmax`]).
pub(super) fn launch_argmax(x: CubeTensor) -> CubeTensor {
    let x = into_contiguous(x);
    let n = x.meta.shape().as_slice().last().copied().unwrap_or(1);
    let rows = x.meta.shape().num_elements() / n.max(1);
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
