//! Which kernel and which f16 form a quantised product uses on a device, and the adapter probes
//! behind that choice (subgroups, shader-f16, exact native f16). Below [`crate::device`], which
//! reads these probes and [`super::probe`]'s: nothing here imports the device module.

use burn::tensor::Device;
use burn_cubecl::cubecl;

use crate::kernels::forms::{self, Form};
use crate::kernels::quant;
use crate::tuning::TileChoice;

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
    /// Output tiles staged through workgroup memory (prefill and vision; 128 × 128, see
    /// [`tile_form`]).
    Tiled,
    /// [`Kernel::Tiled`] with each row's weights split in chunks, a workgroup per tile and
    /// chunk, and a second dispatch adding the chunks' sums ([`tile_splits`] chunks, at least
    /// 2): where a product has too few tiles to fill a GPU (a question's 330 rows by 2,560).
    TiledSplit,
}

/// Up to this many input rows [`Kernel::Auto`] uses the matrix–vector kernel.
pub const GEMV_MAX_M: usize = 8;
const _: () = assert!(GEMV_MAX_M <= super::dot::MAX_ROWS);

impl Kernel {
    pub(super) fn id(self) -> u32 {
        self as u32
    }

    pub(super) fn from_id(id: u32) -> Kernel {
        [
            Kernel::Auto,
            Kernel::Naive,
            Kernel::Gemv,
            Kernel::GemvSubgroup,
            Kernel::Tiled,
            Kernel::TiledSplit,
        ][id as usize]
    }

    /// Whether this is a form of the tiled kernel (which has no GELU epilogue).
    pub fn tiled(self) -> bool {
        matches!(self, Kernel::Tiled | Kernel::TiledSplit)
    }

    /// The self-test form this kernel is ([`Kernel::Auto`] is none).
    pub fn form(self) -> Option<Form> {
        match self {
            Kernel::Auto => None,
            Kernel::Naive => Some(Form::Naive),
            Kernel::Gemv => Some(Form::Gemv),
            Kernel::GemvSubgroup => Some(Form::GemvSubgroup),
            Kernel::Tiled => Some(Form::Tiled),
            Kernel::TiledSplit => Some(Form::TiledSplit),
        }
    }

    /// The explicit kernels `device` can run (the subgroup form only where the adapter has
    /// subgroups); the CPU has one path and lists [`Kernel::Auto`] only.
    pub fn available(device: &Device) -> Vec<Kernel> {
        match subgroups(device) {
            None => vec![Kernel::Auto],
            Some(false) => vec![
                Kernel::Naive,
                Kernel::Gemv,
                Kernel::Tiled,
                Kernel::TiledSplit,
            ],
            Some(true) => vec![
                Kernel::Naive,
                Kernel::Gemv,
                Kernel::GemvSubgroup,
                Kernel::Tiled,
                Kernel::TiledSplit,
            ],
        }
    }
}

/// The kernel [`Kernel::Auto`] runs for `m` input rows of `k` weights and `n` outputs on a
/// device with `props`: the first in its order of preference the adapter offers and the self-test has not
/// turned off ([`forms`]). A software adapter (lavapipe, SwiftShader) runs invocations as SIMD
/// lanes of CPU threads, where the naive loop beats a workgroup reduction 2–3.5× (bench,
/// Gemma 3 270M on lavapipe); on a GPU one workgroup per row reads the weights coalesced
/// instead. The tiled kernel splits its rows where [`tile_splits`] says so. Every kernel takes
/// every shape, so each list ends with all the others; if all are turned off the first is used
/// (the self-test then reports the device unusable and the model runs on the CPU).
pub(super) fn auto_kernel(props: &cubecl::ir::DeviceProperties, [m, n, k]: [usize; 3]) -> Kernel {
    use Kernel::*;
    let software = crate::kernels::software(props);
    let split = m > GEMV_MAX_M && tile_splits(props, [m, n, k]) > 1;
    let order: &[Kernel] = match (m <= GEMV_MAX_M, software) {
        (true, true) => &[Naive, Gemv, GemvSubgroup, Tiled],
        (true, false) => &[GemvSubgroup, Gemv, Naive, Tiled],
        (false, _) if split => &[TiledSplit, Tiled, Naive, Gemv, GemvSubgroup],
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

/// The concrete kernel `kernel` stands for on `device` for a product of `[m, n, k]` (input
/// rows, outputs, weights a row; [`Kernel::Auto`] resolved; the CPU keeps [`Kernel::Auto`], its
/// one path).
pub fn resolve(device: &Device, kernel: Kernel, mnk: [usize; 3]) -> Kernel {
    match (kernel, device.as_dispatch()) {
        (Kernel::Auto, burn::backend::DispatchDevice::Cube(d)) => {
            auto_kernel(d.client().properties(), mnk)
        }
        _ => kernel,
    }
}

/// Fewest weights in one chunk of a split tiled product: 32 steps of the 8 × 8 form's 16 weights.
pub const MIN_SPLIT_K: usize = 512;

/// Workgroups × chunks a split tiled product aims for: a few waves of a large GPU's
/// multiprocessors (132 on an H100 or H200; two 256-invocation workgroups each at the 8 × 8
/// form's registers). Counting workgroups, not row tiles, splits the image's narrow products
/// (few columns of tiles) and leaves a long prefill's wide ones whole, whose partial sums would
/// raise the peak memory; measured against a rule of row tiles alone and fixed counts on a
/// GPU (bench/results/device/h200-full-2026-11-28T0539/11-bench-variants.json).
const SPLIT_TARGET_WORKGROUPS: usize = 768;

/// How many chunks the automatic choice splits a tiled product of `[m, n, k]` (input rows,
/// outputs, weights a row) into on a device with `props` (1: not split). On a GPU, enough that
/// the product's workgroups × chunks reach [`SPLIT_TARGET_WORKGROUPS`], each chunk at least
/// [`MIN_SPLIT_K`] weights; on software adapters 1, where the workgroups already outnumber the
/// CPU's threads and a split only adds the partial sums' traffic. A stacked product (q+k beside
/// v) may split differently from its matrices alone: the same sums in another order (the
/// stacked-product checks run at a row length where every count is the explicit form's 2).
/// The tuning's count (`REXVQA_TILE_SPLIT`) comes first.
pub fn tile_splits(props: &cubecl::ir::DeviceProperties, mnk: [usize; 3]) -> usize {
    if let Some(n) = crate::tuning::current().tile_splits {
        return n;
    }
    let software = crate::kernels::software(props);
    splits_for(software, tile_rows(software), mnk)
}

/// [`tile_splits`]'s rule for a tile of `tile` rows (and as many columns).
fn splits_for(software: bool, tile: usize, [m, n, k]: [usize; 3]) -> usize {
    if software {
        return 1;
    }
    let workgroups = m.div_ceil(tile).max(1) * n.div_ceil(tile).max(1);
    SPLIT_TARGET_WORKGROUPS
        .div_ceil(workgroups)
        .min(k / MIN_SPLIT_K)
        .max(1)
}

/// Weights per chunk of a tiled product split in (about) `splits` chunks: at least 2 where the
/// row has 2 steps of `step` weights, whole steps each, so every step lies in one chunk.
pub(super) fn split_chunk(k: usize, step: usize, splits: usize) -> usize {
    let steps = k.div_ceil(step).max(1);
    let splits = splits.clamp(2, steps.max(2));
    steps.div_ceil(splits) * step
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
pub(super) fn plane_ops(props: &cubecl::ir::DeviceProperties) -> bool {
    props
        .features
        .plane
        .contains(cubecl::ir::features::Plane::Ops)
        || (crate::kernels::software(props)
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
    pub(super) fn id(self) -> u32 {
        self as u32
    }

    pub(super) fn from_id(id: u32) -> Half {
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
pub(super) fn f16_type(props: &cubecl::ir::DeviceProperties) -> bool {
    props.supports_type(cubecl::ir::ElemType::Float(cubecl::ir::FloatKind::F16))
}

/// Set once [`probe_native_half`] has checked the (one per process) GPU device: whether
/// [`Half::Auto`] uses the native form there.
pub(super) static NATIVE_HALF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Whether [`Half::Auto`] widens f16 natively on GPU devices (false until probed, and false
/// once the self-test turned the native form off).
pub fn native_half_in_use() -> bool {
    NATIVE_HALF.get().copied().unwrap_or(false) && forms::enabled(Form::NativeHalf)
}

/// Input rows a tile of the tiled kernel's form covers (64, or 128 for `v8`).
fn tile_rows(software: bool) -> usize {
    match tile_form(software) {
        TileForm::Scalar => quant::TILE,
        TileForm::Vector { per, side } => (side * per) as usize,
    }
}

/// The form of the tiled kernel: [`quant::qmatmul_tiled_vec_kernel`] (16-byte reads of
/// workgroup memory) or [`quant::qmatmul_tiled_kernel`] (scalar reads, [`quant::TILE_PER`] ×
/// [`quant::TILE_PER`] blocks of outputs an invocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TileForm {
    /// Scalar reads (named natively or forced only: the kit's comparison with the vector form).
    Scalar,
    /// Vector reads: `per` × `per` blocks an invocation (8 or 4), `side` × `side` invocations
    /// a workgroup ([`quant::VEC_SIDE`] or [`quant::SOFTWARE_SIDE`]).
    Vector {
        /// Outputs a side of an invocation's block.
        per: u32,
        /// Invocations a side of a workgroup.
        side: u32,
    },
}

/// The tiled kernel's form: vector reads with 8 × 8 blocks, in 128 × 128 tiles of 16 × 16
/// invocations on a GPU (`v8`), in 64 × 64 tiles of 8 × 8 invocations on a software adapter
/// (`n8`, [`quant::SOFTWARE_SIDE`]), unless the tuning names one (`REXVQA_TILE_PER`: `v8`, `n8`
/// or `s4`, the scalar form). 8 × 8 blocks read workgroup memory half as often for the same
/// multiply–adds as 4 × 4 (4 16-byte loads feed 64, where 4 × 4's 2 feed 16); their tiles are
/// 4 times as large, too few at a question's 330 rows to fill a GPU, which the split over the
/// rows' weights ([`tile_splits`]) makes up for. The 4 × 4 vector form was slower on a GPU
/// (bench/results/device/h200-full-2026-11-28T0539/11-bench-variants.json) and is gone.
pub fn tile_form(software: bool) -> TileForm {
    match crate::tuning::current().tile {
        Some(TileChoice::Wide) => WIDE,
        Some(TileChoice::Narrow) => NARROW,
        Some(TileChoice::Scalar) => TileForm::Scalar,
        None if software => NARROW,
        None => WIDE,
    }
}

/// The GPU's form of the tiled kernel (`v8`).
pub const WIDE: TileForm = TileForm::Vector {
    per: 8,
    side: quant::VEC_SIDE,
};

/// A software adapter's form of the tiled kernel (`n8`).
pub const NARROW: TileForm = TileForm::Vector {
    per: 8,
    side: quant::SOFTWARE_SIDE,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_vector_tile_form_stages_its_slices_whole_within_16_kib() {
        for form in [WIDE, NARROW] {
            let TileForm::Vector { per, side } = form else {
                unreachable!()
            };
            let (tile, tk) = ((side * per) as usize, quant::vec_tile_k(per));
            // Every invocation stages the same number of 4 × 4 blocks, and they cover both
            // slices of a step (x and the weights) exactly.
            let blocks = 2 * (tile / 4) * (tk / 4);
            assert_eq!(
                blocks,
                quant::vec_stages(per, side) * (side * side) as usize,
                "{form:?}"
            );
            assert!(2 * tile * tk * 4 <= 16 * 1024, "{form:?}");
        }
    }

    #[test]
    fn narrow_products_split_and_wide_ones_do_not() {
        let rule = |m, n, k| splits_for(false, 128, [m, n, k]);
        // A question's ~330 rows (3 row tiles of 128): q+k+v (4,096 wide: 96 workgroups) in
        // 5 chunks of its 2,560 weights (512 each, the fewest), gate and up (20,480: 480) in
        // 2, the output and down products (2,560: 60) in 4 of 2,048 and 13 of 10,240.
        assert_eq!(rule(330, 4096, 2560), 5);
        assert_eq!(rule(330, 20480, 2560), 2);
        assert_eq!(rule(330, 2560, 2048), 4);
        assert_eq!(rule(330, 2560, 10240), 13);
        // The image's 4,096 rows: its 1,152-wide products (288 workgroups) in 2 of 1,152 weights
        // and 3 of 4,304; the 4,304-wide one (1,088) whole.
        assert_eq!(rule(4096, 1152, 1152), 2);
        assert_eq!(rule(4096, 1152, 4304), 3);
        assert_eq!(rule(4096, 4304, 1152), 1);
        // The self-test's 256 weights: no chunk reaches 512.
        assert_eq!(rule(9, 13, 256), 1);
        // Software adapters never split.
        assert_eq!(splits_for(true, 128, [330, 2560, 10240]), 1);
    }

    #[test]
    fn chunks_are_whole_steps_and_at_least_two_where_the_row_has_two() {
        let chunks =
            |k: usize, step: usize, splits: usize| k.div_ceil(split_chunk(k, step, splits));
        assert_eq!(split_chunk(2560, 32, 3), 864);
        assert_eq!(chunks(2560, 32, 3), 3);
        // The explicit form at the self-test's 256 weights (8 steps of 32): 2 chunks at least.
        assert_eq!(chunks(256, 32, 1), 2);
        assert_eq!(split_chunk(256, 32, 3), 96);
        // One step: one chunk, whatever was asked.
        assert_eq!(chunks(32, 32, 4), 1);
        assert_eq!(chunks(75, 32, 8), 3);
        // Never more chunks than steps.
        assert_eq!(chunks(10240, 16, 64), 64);
        assert_eq!(chunks(128, 16, 64), 8);
    }
}
