//! Quantised weights on a burn device and the two operations the model needs on them:
//! `x · Wᵀ` and row gathers. Implemented as a burn backend extension: CubeCL kernels for
//! the GPU backends (wgpu natively, WebGPU in the browser) and plain Rust for flex (CPU).

use burn::backend::backend_extension;
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Dispatch, Flex};
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{CubeBackend, cubecl, kernel::into_contiguous, ops::numeric::empty_device_dtype};

use super::QuantError;
use super::dot::{Activations, dot_rows};
use super::forms::{self, Form};
use super::kernels::{
    GEMV_ROWS, GEMV_THREADS, TILE, TILE_THREADS, qgather_kernel, qgemv_kernel, qmatmul_kernel,
    qmatmul_tiled_kernel, ty,
};
use super::pack::{dequantize_packed, pack_rows, row_words};
use crate::gguf::GgmlType;

/// Whether `device` queues work for a GPU (wgpu/WebGPU) rather than running each operation on
/// the CPU as it is called (flex). Here, below [`crate::device`], which re-exports it: the
/// kernel choice needs it, and the device module needs the kernel choice's probes.
pub fn queues_work(device: &Device) -> bool {
    !matches!(device.as_dispatch(), burn::backend::DispatchDevice::Flex(_))
}

/// Which device kernel multiplies by a quantised matrix (the CPU path ignores it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kernel {
    /// Chosen from the shape and the adapter: for up to [`GEMV_MAX_M`] input rows
    /// [`Kernel::Gemv`] (its subgroup form where the adapter has subgroups; [`Kernel::Naive`] on
    /// software adapters), [`Kernel::Tiled`] above; a form the self-test turned off is skipped.
    Auto,
    /// One invocation per output, looping over the whole row: the simplest form, kept as the
    /// baseline the others are measured and checked against.
    Naive,
    /// A workgroup per output row, reduced through workgroup memory (decode).
    Gemv,
    /// [`Kernel::Gemv`] reduced with subgroup sums (adapters with subgroups only).
    GemvSubgroup,
    /// 64 × 64 output tiles staged through workgroup memory (prefill and vision).
    Tiled,
}

/// Up to this many input rows [`Kernel::Auto`] uses the matrix–vector kernel.
pub const GEMV_MAX_M: usize = 8;
const _: () = assert!(GEMV_MAX_M <= super::dot::MAX_ROWS);

impl Kernel {
    fn id(self) -> u32 {
        self as u32
    }

    fn from_id(id: u32) -> Kernel {
        [
            Kernel::Auto,
            Kernel::Naive,
            Kernel::Gemv,
            Kernel::GemvSubgroup,
            Kernel::Tiled,
        ][id as usize]
    }

    /// The self-test form this kernel is ([`Kernel::Auto`] is none).
    pub fn form(self) -> Option<Form> {
        match self {
            Kernel::Auto => None,
            Kernel::Naive => Some(Form::Naive),
            Kernel::Gemv => Some(Form::Gemv),
            Kernel::GemvSubgroup => Some(Form::GemvSubgroup),
            Kernel::Tiled => Some(Form::Tiled),
        }
    }

    /// The explicit kernels `device` can run (the subgroup form only where the adapter has
    /// subgroups); the CPU has one path and lists [`Kernel::Auto`] only.
    pub fn available(device: &Device) -> Vec<Kernel> {
        match subgroups(device) {
            None => vec![Kernel::Auto],
            Some(false) => vec![Kernel::Naive, Kernel::Gemv, Kernel::Tiled],
            Some(true) => vec![
                Kernel::Naive,
                Kernel::Gemv,
                Kernel::GemvSubgroup,
                Kernel::Tiled,
            ],
        }
    }
}

/// The kernel [`Kernel::Auto`] runs for `m` input rows on a device with `props`: the first in
/// its order of preference the adapter offers and the self-test has not turned off
/// ([`forms`]). A software adapter (lavapipe, SwiftShader) runs invocations as SIMD lanes of
/// CPU threads, where the naive loop beats a workgroup reduction 2–3.5× (bench, Gemma 3 270M
/// on lavapipe); on a GPU one workgroup per row reads the weights coalesced instead. Every
/// kernel takes every shape, so each list ends with all the others; if all are turned off the
/// first is used (the self-test then reports the device unusable and the model runs on the CPU).
fn auto_kernel(props: &cubecl::ir::DeviceProperties, m: usize) -> Kernel {
    use Kernel::*;
    let software = props.identity.physical.is_none();
    let order: &[Kernel] = match (m <= GEMV_MAX_M, software) {
        (true, true) => &[Naive, Gemv, GemvSubgroup, Tiled],
        (true, false) => &[GemvSubgroup, Gemv, Naive, Tiled],
        (false, _) => &[Tiled, Naive, Gemv, GemvSubgroup],
    };
    let plane = plane_ops(props);
    let offered = |k: &&Kernel| **k != GemvSubgroup || plane;
    order
        .iter()
        .filter(offered)
        .find(|k| k.form().is_none_or(forms::enabled))
        .or_else(|| order.iter().find(offered))
        .copied()
        .unwrap_or(Naive)
}

/// The concrete kernel `kernel` stands for on `device` for `m` input rows ([`Kernel::Auto`]
/// resolved; the CPU keeps [`Kernel::Auto`], its one path).
pub fn resolve(device: &Device, kernel: Kernel, m: usize) -> Kernel {
    match (kernel, device.as_dispatch()) {
        (Kernel::Auto, burn::backend::DispatchDevice::Cube(d)) => {
            auto_kernel(d.client().properties(), m)
        }
        _ => kernel,
    }
}

/// Whether a GPU device's adapter has subgroup operations; `None` for the CPU.
pub fn subgroups(device: &Device) -> Option<bool> {
    match device.as_dispatch() {
        burn::backend::DispatchDevice::Cube(d) => Some(plane_ops(d.client().properties())),
        _ => None,
    }
}

/// Set by [`allow_software_subgroups`].
static SOFTWARE_SUBGROUPS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Lets the subgroup kernel run on software adapters, for tests: cubecl-wgpu advertises no
/// subgroup operations on CPU-type devices even where the wgpu device has them (lavapipe
/// does: subgroups of 8), so without this the subgroup kernel would never run off a GPU.
#[doc(hidden)]
pub fn allow_software_subgroups() {
    SOFTWARE_SUBGROUPS.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether CubeCL offers subgroup ("plane") operations on a device with these properties.
fn plane_ops(props: &cubecl::ir::DeviceProperties) -> bool {
    props
        .features
        .plane
        .contains(cubecl::ir::features::Plane::Ops)
        || (props.identity.physical.is_none()
            && SOFTWARE_SUBGROUPS.load(std::sync::atomic::Ordering::Relaxed))
}

/// How the device kernels widen the f16 numbers of GGUF blocks (F16 weights, block scales) to
/// f32. Both forms are exact and give identical results; they differ only in speed.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Half {
    /// [`Half::Native`] where the adapter has shader-f16 and passed [`probe_native_half`],
    /// [`Half::Integer`] elsewhere.
    #[default]
    Auto,
    /// Integer arithmetic on the bits (every adapter).
    Integer,
    /// The adapter's f16 type (adapters with shader-f16 only).
    Native,
}

impl Half {
    fn id(self) -> u32 {
        self as u32
    }

    fn from_id(id: u32) -> Half {
        [Half::Auto, Half::Integer, Half::Native][id as usize]
    }

    /// The explicit forms `device` can run (the native one only where the adapter has
    /// shader-f16); the CPU has one path and lists [`Half::Auto`] only.
    pub fn available(device: &Device) -> Vec<Half> {
        match shader_f16(device) {
            None => vec![Half::Auto],
            Some(false) => vec![Half::Integer],
            Some(true) => vec![Half::Integer, Half::Native],
        }
    }
}

/// Whether a GPU device's adapter has 16-bit floats in shaders; `None` for the CPU.
pub fn shader_f16(device: &Device) -> Option<bool> {
    match device.as_dispatch() {
        burn::backend::DispatchDevice::Cube(d) => Some(f16_type(d.client().properties())),
        _ => None,
    }
}

/// Whether CubeCL offers the f16 type on a device with these properties.
fn f16_type(props: &cubecl::ir::DeviceProperties) -> bool {
    props.supports_type(cubecl::ir::ElemType::Float(cubecl::ir::FloatKind::F16))
}

/// Set once [`probe_native_half`] has checked the (one per process) GPU device: whether
/// [`Half::Auto`] uses the native form there.
static NATIVE_HALF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Whether [`Half::Auto`] widens f16 natively on GPU devices (false until probed, and false
/// once the self-test turned the native form off).
pub fn native_half_in_use() -> bool {
    NATIVE_HALF.get().copied().unwrap_or(false) && forms::enabled(Form::NativeHalf)
}

/// Widens every finite f16 value with the native kernels and compares the bits with the CPU's
/// conversion; [`Half::Auto`] uses the native form only if all 63,488 agree. A shader's f16 may
/// flush subnormals (Vulkan and WebGPU allow it), and a block scale or an F16 weight below
/// 6.1e-5 is subnormal, so exactness is checked on the adapter rather than assumed. Returns
/// the verdict; runs once per process (the GPU device is opened once).
pub async fn probe_native_half(device: &Device) -> bool {
    if let Some(v) = NATIVE_HALF.get() {
        return *v;
    }
    // A native form that fails to compile or run is as unusable as an inexact one.
    let ok = match shader_f16(device) {
        Some(true) => native_half_exact(device).await.unwrap_or(false),
        _ => false,
    };
    *NATIVE_HALF.get_or_init(|| ok)
}

/// The finite f16 bit patterns, as the bytes of an F16 matrix of `[HALF_ROWS, 1024]`.
const HALF_ROWS: usize = 62;

/// Whether the native form widens every finite f16 (63,488 values, 62 rows of 1024) exactly.
pub async fn native_half_exact(device: &Device) -> Result<bool, String> {
    let (rows, cols) = (HALF_ROWS, 1024);
    let bits: Vec<u16> = (0..=u16::MAX)
        .filter(|b| b & 0x7C00 != 0x7C00)
        .chain(std::iter::repeat(0))
        .take(rows * cols)
        .collect();
    let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
    let q = QMatrix::upload(GgmlType::F16, &bytes, rows, cols, device, usize::MAX / 2)
        .map_err(|e| e.to_string())?;
    let ids: Vec<u32> = (0..rows as u32).collect();
    let got = q
        .gather_with(u32_tensor(ids, device), Half::Native)
        .into_data_async()
        .await
        .map_err(|e| format!("readback failed: {e:?}"))?
        .try_into_vec::<f32>()
        .map_err(|e| format!("{e:?}"))?;
    Ok(got.len() == bits.len()
        && got
            .iter()
            .zip(&bits)
            .all(|(g, &b)| g.to_bits() == half::f16::from_bits(b).to_f32().to_bits()))
}

/// Operations on packed GGUF rows (see [`super::pack`]).
#[backend_extension(Cube, Flex)]
pub trait QuantOps: burn::backend::Backend {
    /// `x [m, k] · Wᵀ → [m, n]` for `n` packed rows of ggml type `ty_id`, with the kernel
    /// and f16 form given by [`Kernel`]'s and [`Half`]'s ids.
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
    /// zero rows for ids outside `row0..row0 + rows`; `half` is [`Half`]'s id.
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

fn ggml(ty_id: u32) -> GgmlType {
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
        Kernel::Auto => auto_kernel(client.properties(), m),
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
    match kernel {
        Kernel::Gemv | Kernel::GemvSubgroup => {
            let cubes = n * m.div_ceil(GEMV_ROWS);
            let cube_dim = cubecl::CubeDim::new_1d(GEMV_THREADS);
            let cube_count = cubecl::calculate_cube_count_elemwise(
                &client,
                cubes * GEMV_THREADS as usize,
                cube_dim,
            );
            let (xa, wa, wha, w2a, wh2a, oa) = args();
            qgemv_kernel::launch(
                &client,
                cube_count,
                cube_dim,
                xa,
                wa,
                wha,
                w2a,
                wh2a,
                oa,
                m32,
                k32,
                n32,
                n1,
                wpr,
                wpr2,
                ld,
                col0,
                ty,
                ty2,
                stacked,
                p.gelu,
                kernel == Kernel::GemvSubgroup,
                native,
                h_elem,
            );
        }
        Kernel::Tiled => {
            assert!(
                !p.gelu,
                "the tiled kernel has no GELU form (QMatrix checks)"
            );
            let cube_dim = cubecl::CubeDim::new_2d(TILE_THREADS, TILE_THREADS);
            let cube_count =
                cubecl::CubeCount::Static(n.div_ceil(TILE) as u32, m.div_ceil(TILE) as u32, 1);
            let (xa, wa, wha, w2a, wh2a, oa) = args();
            qmatmul_tiled_kernel::launch(
                &client, cube_count, cube_dim, xa, wa, wha, w2a, wh2a, oa, m32, k32, n32, n1, wpr,
                wpr2, ld, col0, ty, ty2, stacked, native, h_elem,
            );
        }
        Kernel::Naive | Kernel::Auto => {
            let count = m * n;
            let cube_dim = cubecl::CubeDim::new(&client, count);
            let cube_count = cubecl::calculate_cube_count_elemwise(&client, count, cube_dim);
            let (xa, wa, wha, w2a, wh2a, oa) = args();
            qmatmul_kernel::launch(
                &client, cube_count, cube_dim, xa, wa, wha, w2a, wh2a, oa, m32, k32, n32, n1, wpr,
                wpr2, ld, col0, ty, ty2, stacked, p.gelu, native, h_elem,
            );
        }
    }
    out
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

/// `out` with the test fault of the forms that computed it, if one is injected (see
/// [`forms::perturb`]).
fn perturbed(out: Tensor<2>, kernel: Kernel, half: Half, device: &Device) -> Tensor<2> {
    let out = match kernel.form() {
        Some(form) => forms::perturb(form, out),
        None => out,
    };
    let native = match half {
        Half::Native => true,
        Half::Auto => shader_f16(device) == Some(true) && native_half_in_use(),
        Half::Integer => false,
    };
    if native {
        forms::perturb(Form::NativeHalf, out)
    } else {
        out
    }
}

/// Largest device buffer a weight chunk may take; rows are split so no chunk exceeds it (the
/// 262k-row embedding of Gemma 3 would otherwise need one 550 MB buffer).
pub const MAX_CHUNK_BYTES: usize = 256 << 20;

/// One device buffer of consecutive packed rows.
#[derive(Debug, Clone)]
struct Chunk {
    row0: usize,
    rows: usize,
    words: Tensor<1, Int>,
}

/// A `[rows, cols]` weight matrix kept in its GGUF block format on a device.
#[derive(Debug, Clone)]
pub struct QMatrix {
    /// Block type.
    pub ty: GgmlType,
    /// Output features (rows).
    pub rows: usize,
    /// Input features (weights per row).
    pub cols: usize,
    chunks: Vec<Chunk>,
}

/// u32 words on a device without a float round trip.
pub(super) fn u32_tensor(words: Vec<u32>, device: &Device) -> Tensor<1, Int> {
    let n = words.len();
    Tensor::<1, Int>::from_data(TensorData::new(words, [n]), (device, DType::U32))
}

impl QMatrix {
    /// Uploads GGUF bytes of a `[rows, cols]` matrix, split into chunks of at most
    /// `max_chunk_bytes` (never fewer than one row per chunk).
    pub fn upload(
        ty: GgmlType,
        bytes: &[u8],
        rows: usize,
        cols: usize,
        device: &Device,
        max_chunk_bytes: usize,
    ) -> Result<QMatrix, QuantError> {
        let row_bytes = ty
            .bytes_for(cols as u64)
            .filter(|b| *b as usize * rows == bytes.len())
            .ok_or(QuantError::SizeMismatch {
                ty,
                bytes: bytes.len(),
                weights: rows * cols,
            })? as usize;
        let per = Self::rows_per_chunk(ty, rows, cols, max_chunk_bytes);
        let mut q = Self::streaming(ty, rows, cols);
        for chunk in bytes.chunks((per * row_bytes).max(1)) {
            q.push_chunk(chunk, chunk.len() / row_bytes.max(1), device)?;
        }
        Ok(q)
    }

    /// Rows per device chunk so that a chunk stays within `max_chunk_bytes` (at least one).
    pub fn rows_per_chunk(ty: GgmlType, rows: usize, cols: usize, max_chunk_bytes: usize) -> usize {
        (max_chunk_bytes / (row_words(ty, cols) * 4).max(1)).clamp(1, rows.max(1))
    }

    /// Starts an empty matrix to be filled chunk by chunk ([`QMatrix::push_chunk`]), so a
    /// loader never holds more than one chunk of a tensor in host memory.
    pub fn streaming(ty: GgmlType, rows: usize, cols: usize) -> QMatrix {
        QMatrix {
            ty,
            rows,
            cols,
            chunks: Vec::new(),
        }
    }

    /// Packs and uploads the GGUF bytes of the next `n_rows` rows.
    pub fn push_chunk(
        &mut self,
        bytes: &[u8],
        n_rows: usize,
        device: &Device,
    ) -> Result<(), QuantError> {
        let row0 = self.chunks.last().map_or(0, |c| c.row0 + c.rows);
        let words = pack_rows(self.ty, bytes, n_rows, self.cols)?;
        self.chunks.push(Chunk {
            row0,
            rows: n_rows,
            words: u32_tensor(words, device),
        });
        Ok(())
    }

    /// [`QMatrix::push_chunk`] into device buffers of `group_rows` rows (the last one shorter),
    /// filled chunk by chunk in place, so that a matrix streamed in small chunks is multiplied
    /// and looked up in few dispatches, and no row is ever held twice on the device.
    /// `group_rows` must be a multiple of every `n_rows` pushed but the last. Each chunk is a
    /// queue write at its offset: an upload buffer per chunk copied by a kernel left its freed
    /// buffers reserved in the browser's pool, and a copy whenever the buffer had a second handle.
    pub fn push_chunk_grouped(
        &mut self,
        bytes: &[u8],
        n_rows: usize,
        device: &Device,
        group_rows: usize,
    ) -> Result<(), QuantError> {
        let wpr = row_words(self.ty, self.cols);
        let open = |c: &Chunk| c.rows < c.words.dims()[0] / wpr.max(1);
        let row0 = self.chunks.last().map_or(0, |c| c.row0 + c.rows);
        let words = pack_rows(self.ty, bytes, n_rows, self.cols)?;
        let write = |w: Tensor<1, Int>, at: usize, words: Vec<u32>| {
            Tensor::<1, Int>::from_dispatch(<Dispatch as QuantOps>::write_words(
                w.into_dispatch(),
                at,
                words,
            ))
        };
        match self.chunks.pop() {
            Some(mut c) if open(&c) => {
                c.words = write(c.words, c.rows * wpr, words);
                c.rows += n_rows;
                self.chunks.push(c);
            }
            last => {
                self.chunks.extend(last);
                let cap = group_rows.min(self.rows - row0).max(n_rows);
                let words = if cap == n_rows {
                    u32_tensor(words, device)
                } else {
                    write(
                        Tensor::<1, Int>::empty([cap * wpr], (device, DType::U32)),
                        0,
                        words,
                    )
                };
                self.chunks.push(Chunk {
                    row0,
                    rows: n_rows,
                    words,
                });
            }
        }
        Ok(())
    }

    /// Rows per device buffer for [`QMatrix::push_chunk_grouped`]: whole streaming chunks of
    /// `per` rows, as many as fit in `max_bytes` (at least one).
    pub fn rows_per_group(ty: GgmlType, cols: usize, per: usize, max_bytes: usize) -> usize {
        per * (max_bytes / (per * row_words(ty, cols) * 4).max(1)).max(1)
    }

    /// Whether every row has been uploaded.
    pub fn is_complete(&self) -> bool {
        self.chunks.iter().map(|c| c.rows).sum::<usize>() == self.rows
    }

    /// `a`'s rows then `b`'s as one matrix in one device buffer, so that one dispatch multiplies
    /// both (a layer's FFN gate and up); both handed back unless each is one buffer of the same
    /// type and width and the two fit in [`MAX_CHUNK_BYTES`]. A copy: the CPU's loader joins
    /// this way; a GPU's streams the parts into one buffer (`Loader::qmatrix_joined`).
    #[allow(clippy::result_large_err)]
    pub fn join(a: QMatrix, b: QMatrix) -> Result<QMatrix, (QMatrix, QMatrix)> {
        let fits = (a.rows + b.rows) * row_words(a.ty, a.cols) * 4 <= MAX_CHUNK_BYTES;
        if a.ty != b.ty || a.cols != b.cols || a.chunks.len() != 1 || b.chunks.len() != 1 || !fits {
            return Err((a, b));
        }
        let rows = a.rows + b.rows;
        let words = Tensor::cat(
            vec![a.chunks[0].words.clone(), b.chunks[0].words.clone()],
            0,
        );
        Ok(QMatrix {
            ty: a.ty,
            rows,
            cols: a.cols,
            chunks: vec![Chunk {
                row0: 0,
                rows,
                words,
            }],
        })
    }

    /// Number of device buffers.
    pub fn n_chunks(&self) -> usize {
        self.chunks.len()
    }

    /// `x [m, cols] → [m, rows]`.
    pub fn matmul(&self, x: Tensor<2>) -> Tensor<2> {
        self.matmul_with(x, Kernel::Auto)
    }

    /// [`QMatrix::matmul`] with a chosen device kernel (tests and the benchmark compare them).
    pub fn matmul_with(&self, x: Tensor<2>, kernel: Kernel) -> Tensor<2> {
        self.matmul_variant(x, kernel, Half::Auto)
    }

    /// [`QMatrix::matmul`] with a chosen device kernel and f16 form.
    pub fn matmul_variant(&self, x: Tensor<2>, kernel: Kernel, half: Half) -> Tensor<2> {
        // Resolved here rather than in the backend so an injected test fault can follow the
        // automatic choice to the form it picked.
        let x_device = x.device();
        let kernel = resolve(&x_device, kernel, x.dims()[0]);
        let product = |c: &Chunk| {
            Tensor::<2>::from_dispatch(<Dispatch as QuantOps>::qmatmul(
                x.clone().into_dispatch(),
                c.words.clone().into_dispatch(),
                self.ty.id(),
                c.rows,
                self.cols,
                kernel.id(),
                half.id(),
            ))
        };
        let out = match self.chunks.as_slice() {
            [one] => product(one),
            chunks if !queues_work(&x_device) => {
                Tensor::cat(chunks.iter().map(product).collect(), 1)
            }
            // Each chunk writes its columns of one output: the 4B's 17-chunk head is 17
            // dispatches, where products and a concatenation took 34.
            _ => {
                let all = Tensor::<2>::empty([x.dims()[0], self.rows], &x_device);
                self.write_columns(x, all, 0, kernel, half)
            }
        };
        perturbed(out, kernel, half, &x_device)
    }

    /// `x [m, cols] · Wᵀ` written into columns `col0..col0 + rows` of `out` (`[m, ·]`,
    /// contiguous, returned): products that one kernel reads as one tensor (a layer's q, k and
    /// v) without a concatenation. GPU devices only (see `QuantOps::qmatmul_into`).
    pub fn matmul_into(&self, x: Tensor<2>, out: Tensor<2>, col0: usize) -> Tensor<2> {
        let device = x.device();
        let kernel = resolve(&device, Kernel::Auto, x.dims()[0]);
        let out = self.write_columns(x, out, col0, kernel, Half::Auto);
        perturbed(out, kernel, Half::Auto, &device)
    }

    /// `x [m, cols] · [a; b]ᵀ → [m, a.rows + b.rows]` in one dispatch, for two matrices of
    /// the same width whose block types differ (Q4_K_M's Q4_K q and k rows beside a Q6_K v),
    /// with the kernel the automatic choice takes. `None` where that cannot be one dispatch
    /// (the CPU, a split matrix, different widths) or the self-test turned the form off.
    pub fn matmul_stacked(a: &QMatrix, b: &QMatrix, x: Tensor<2>) -> Option<Tensor<2>> {
        if !forms::enabled(Form::StackedProduct) {
            return None;
        }
        QMatrix::matmul_stacked_variant(a, b, x, Kernel::Auto, Half::Auto)
    }

    /// [`QMatrix::matmul_stacked`] with a chosen kernel and f16 form, whether or not the
    /// self-test turned the form off (tests and the self-test compare them).
    pub fn matmul_stacked_variant(
        a: &QMatrix,
        b: &QMatrix,
        x: Tensor<2>,
        kernel: Kernel,
        half: Half,
    ) -> Option<Tensor<2>> {
        if a.cols != b.cols {
            return None;
        }
        a.fused_product(Some(b), x, kernel, half)
    }

    /// `gelu_tanh(gate) · up` for this matrix of gate rows then up rows (a joined FFN gate and
    /// up): `x [m, cols] → [m, rows / 2]` in one dispatch, the GELU applied where the sums are
    /// made. `None` where the automatic choice takes a kernel without that form (the tiled
    /// one, past [`GEMV_MAX_M`] rows; the CPU), for a split matrix, or where the self-test
    /// turned the form off: the caller then multiplies and applies the GELU kernel.
    pub fn matmul_gelu_halves(&self, x: Tensor<2>) -> Option<Tensor<2>> {
        if !forms::enabled(Form::GeluProduct) {
            return None;
        }
        self.matmul_gelu_variant(x, Kernel::Auto, Half::Auto)
    }

    /// [`QMatrix::matmul_gelu_halves`] with a chosen kernel and f16 form, whether or not the
    /// self-test turned the form off; `None` also for the tiled kernel.
    pub fn matmul_gelu_variant(
        &self,
        x: Tensor<2>,
        kernel: Kernel,
        half: Half,
    ) -> Option<Tensor<2>> {
        if !self.rows.is_multiple_of(2) {
            return None;
        }
        self.fused_product(None, x, kernel, half)
    }

    /// One [`QuantOps::qmatmul_fused`] dispatch: this matrix's rows then `second`'s, or without
    /// `second` this matrix as a joined gate and up with GELU·up applied; with the test faults
    /// of the forms it ran. `None` off a GPU, for a split matrix, and for GELU·up where
    /// `kernel` resolves to the tiled kernel.
    fn fused_product(
        &self,
        second: Option<&QMatrix>,
        x: Tensor<2>,
        kernel: Kernel,
        half: Half,
    ) -> Option<Tensor<2>> {
        let device = x.device();
        let gelu = second.is_none();
        let b = second.unwrap_or(self);
        let ([ca], [cb]) = (self.chunks.as_slice(), b.chunks.as_slice()) else {
            return None;
        };
        let kernel = resolve(&device, kernel, x.dims()[0]);
        if !queues_work(&device) || (gelu && kernel == Kernel::Tiled) {
            return None;
        }
        let out = Tensor::<2>::from_dispatch(<Dispatch as QuantOps>::qmatmul_fused(
            x.into_dispatch(),
            ca.words.clone().into_dispatch(),
            cb.words.clone().into_dispatch(),
            self.ty.id(),
            b.ty.id(),
            self.rows,
            second.map_or(0, |b| b.rows),
            self.cols,
            kernel.id(),
            half.id(),
            gelu,
        ));
        let form = if gelu {
            Form::GeluProduct
        } else {
            Form::StackedProduct
        };
        Some(forms::perturb(form, perturbed(out, kernel, half, &device)))
    }

    /// Every chunk's product written into its columns of `out`, from `col0`.
    fn write_columns(
        &self,
        x: Tensor<2>,
        out: Tensor<2>,
        col0: usize,
        kernel: Kernel,
        half: Half,
    ) -> Tensor<2> {
        self.chunks.iter().fold(out, |out, c| {
            Tensor::<2>::from_dispatch(<Dispatch as QuantOps>::qmatmul_into(
                x.clone().into_dispatch(),
                c.words.clone().into_dispatch(),
                out.into_dispatch(),
                self.ty.id(),
                c.rows,
                self.cols,
                kernel.id(),
                half.id(),
                col0 + c.row0,
            ))
        })
    }

    /// Rows `ids` dequantised: `[ids.len(), cols]`. Ids must be `< rows`.
    pub fn gather(&self, ids: &[u32]) -> Tensor<2> {
        let device = self.chunks[0].words.device();
        crate::launches::note_upload();
        self.gather_device(u32_tensor(ids.to_vec(), &device))
    }

    /// Rows `ids` dequantised, for ids that stay on the device (`[n]` u32, each `< rows`):
    /// every chunk looks up the ids it holds and the parts are added, so no id is read back.
    pub fn gather_device(&self, ids: Tensor<1, Int>) -> Tensor<2> {
        self.gather_with(ids, Half::Auto)
    }

    /// [`QMatrix::gather_device`] with a chosen f16 form.
    pub fn gather_with(&self, ids: Tensor<1, Int>, half: Half) -> Tensor<2> {
        let gather = |c: &Chunk| {
            Tensor::<2>::from_dispatch(<Dispatch as QuantOps>::qgather(
                ids.clone().into_dispatch(),
                c.words.clone().into_dispatch(),
                self.ty.id(),
                self.cols,
                c.row0,
                c.rows,
                half.id(),
            ))
        };
        let (first, rest) = self
            .chunks
            .split_first()
            .expect("a matrix has at least one chunk");
        if !queues_work(&ids.device()) {
            return rest.iter().fold(gather(first), |a, c| a + gather(c));
        }
        // Each later chunk writes the rows it holds into the first chunk's output: a lookup
        // of the 4B's 17-chunk embedding is 17 dispatches where gathers and sums took 33.
        rest.iter().fold(gather(first), |out, c| {
            Tensor::<2>::from_dispatch(<Dispatch as QuantOps>::qgather_into(
                ids.clone().into_dispatch(),
                c.words.clone().into_dispatch(),
                out.into_dispatch(),
                self.ty.id(),
                self.cols,
                c.row0,
                c.rows,
                half.id(),
            ))
        })
    }
}
