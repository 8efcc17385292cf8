//! The device self-test: on the opened device, every kernel form an automatic choice may take,
//! against the CPU reference with the conformance bounds, then one forward of a tiny built-in
//! model against the CPU. A form that fails is turned off ([`crate::kernels::forms`]) with the
//! reason, so the automatic choices take the next form; if what remains cannot run the model
//! the report says so ([`Report::usable`]) and the caller runs the model on the CPU.
//!
//! Why: kernels are checked in CI on lavapipe and SwiftShader only; a driver elsewhere can
//! miscompile one form (subgroup sums and native f16 are the usual suspects) and would
//! otherwise give wrong answers without a sign.
//!
//! Each [`Check`] reports the element whose error is the largest fraction of its own bound:
//! `max_error` is that element's absolute error and `bound` the error allowed there (the
//! Higham bound of its dot product, 0 for exact operations), so `passed` is
//! `max_error <= bound`.
//!
//! Its time is nearly all shader compilation, over the 3 s budget wherever shaders compile
//! cold, so the app runs it beside the weights' hash and load, once per adapter and browser
//! (the verdict is kept), where most of it hides behind them
//! (`bench/results/ci-vm-2core-selftest-beside-load.json`). Part of its time comes back later:
//! the kernels are the model's, at other shapes, so the model's first use compiles less.
//! Each attention width is checked with the variants the model compiles (the decoder
//! masked, the vision tower unmasked) and the tiny forward runs at the decoder's head width,
//! so no check compiles a kernel the model never runs; that changed no time measurably
//! (`bench/results/ci-vm-2core-selftest-model-variants.json`).

pub mod attention;
mod forward;
pub mod rows;

pub use forward::FORWARD_TOLERANCE;

use burn::tensor::Device;

use crate::device::Adapter;
use crate::eval::Clock;
use crate::gguf::GgmlType;
use crate::kernels::forms::{self, Disabled, Form};
use crate::kernels::{decode_attention, fused_attention as fused, wide_attention};
use crate::model::ModelError;
use crate::model::config::TextConfig;
use crate::pair::PairHeaders;
use crate::quant::conformance::{self, Measured, gather_error, matmul_error};
use crate::quant::{GEMV_MAX_M, Half, Kernel};

/// What to check: the weight types and attention head widths of the model to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Weight types of the model's matrices (each gets every kernel form).
    pub types: Vec<GgmlType>,
    /// Head widths of the text decoder, whose attention is masked (causal, sliding window)
    /// with grouped query heads, and runs one or a few rows when decoding.
    pub text_head_dims: Vec<usize>,
    /// Head widths of the vision tower, whose attention has no mask (every patch sees every
    /// patch) and always many rows.
    pub vision_head_dims: Vec<usize>,
    /// The types of a layer's joined q+k and of its v where they differ (Q4_K_M: Q4_K and
    /// Q6_K), which the decoder multiplies as one stacked product; `None` where every layer's
    /// q, k and v share a type and join into one matrix, so no stacked product runs.
    pub stacked: Option<[GgmlType; 2]>,
}

/// MedGemma 4B's decoder head width (`key_length`).
pub const MEDGEMMA_4B_TEXT_HEAD_DIM: usize = 256;
/// MedGemma 4B's vision head width: SigLIP's 1152 / 16 heads.
pub const MEDGEMMA_4B_VISION_HEAD_DIM: usize = 72;

impl Default for Plan {
    /// Every supported weight type and MedGemma 4B's head widths (the CLI without a model).
    fn default() -> Plan {
        Plan::medgemma_4b(GgmlType::all().filter(|t| t.is_supported()).collect())
    }
}

impl Plan {
    /// MedGemma 4B's head widths with weights of `types`.
    pub fn medgemma_4b(types: Vec<GgmlType>) -> Plan {
        let (qk, v) = (GgmlType::Q4_K, GgmlType::Q6_K);
        Plan {
            stacked: (types.contains(&qk) && types.contains(&v)).then_some([qk, v]),
            types,
            text_head_dims: vec![MEDGEMMA_4B_TEXT_HEAD_DIM],
            vision_head_dims: vec![MEDGEMMA_4B_VISION_HEAD_DIM],
        }
    }

    /// The weight types of a model pair's matrices and its head widths, from its headers.
    pub fn from_headers(h: &PairHeaders) -> Result<Plan, ModelError> {
        let mut types: Vec<GgmlType> = std::iter::once(&h.text)
            .chain(h.mmproj.as_ref())
            .flat_map(|g| &g.tensors)
            .filter(|t| t.dims.len() >= 2 && t.ty.is_supported())
            .map(|t| t.ty)
            .collect();
        types.sort_by_key(|t| t.id());
        types.dedup();
        let text_head_dims = vec![TextConfig::from_gguf(&h.text)?.head_dim];
        let mut vision_head_dims = Vec::new();
        if let Some(m) = &h.mmproj {
            let v = crate::model::config::VisionConfig::from_gguf(m)?;
            vision_head_dims.push(v.hidden / v.heads.max(1));
        }
        let ty = |layer: usize, m: &str| {
            h.text
                .tensor(&format!("blk.{layer}.{m}.weight"))
                .map(|t| t.ty)
        };
        let stacked = (0..TextConfig::from_gguf(&h.text)?.layers).find_map(|i| {
            match (ty(i, "attn_q")?, ty(i, "attn_k")?, ty(i, "attn_v")?) {
                (q, k, v) if q == k && v != q => Some([q, v]),
                _ => None,
            }
        });
        Ok(Plan {
            types,
            text_head_dims,
            vision_head_dims,
            stacked,
        })
    }
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Check {
    /// What was checked (`matmul.gemv_subgroup.q4_k`, `attention.fused.d72.unmasked`,
    /// `fused.rms_norm`, `forward.tiny`).
    pub name: String,
    /// The form it decides on; none for operations every model needs (gathers, blocked
    /// attention, the forward), whose failure makes the device unusable.
    pub form: Option<Form>,
    /// Absolute error at the worst element (see the module doc); `f64::MAX` for a NaN or a
    /// check that could not run (JSON has no infinity).
    pub max_error: f64,
    /// The error allowed at that element.
    pub bound: f64,
    /// `max_error <= bound`.
    pub passed: bool,
    /// The worst element, or why the check could not run.
    pub detail: String,
    /// Wall time of the check, shader compilation included.
    #[serde(default)]
    pub ms: f64,
}

/// The self-test's result.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Report {
    /// The adapter tested (none on the CPU).
    pub adapter: Option<Adapter>,
    /// Every check, in the order run.
    pub checks: Vec<Check>,
    /// Wall time of the whole self-test.
    pub elapsed_ms: f64,
    /// Forms turned off, with the check that failed.
    pub disabled: Vec<Disabled>,
    /// Whether the model can run on this device with the forms left on.
    pub usable: bool,
    /// Why not, when not usable.
    pub unusable_reason: Option<String>,
    /// The matmul kernels the automatic choice takes after the verdict.
    pub using: String,
}

impl Report {
    /// Whether every check passed.
    pub fn all_passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }

    /// One line for a person: all passed and how fast, or what was turned off and what is used
    /// instead, or why the device cannot be used.
    pub fn verdict(&self) -> String {
        let on = match &self.adapter {
            None => "the CPU".to_string(),
            // SwiftShader in Chromium reports no name.
            Some(a) if a.name.is_empty() => "an unnamed WebGPU adapter".to_string(),
            Some(a) => a.name.clone(),
        };
        let secs = self.elapsed_ms / 1000.0;
        if let Some(why) = &self.unusable_reason {
            return format!("Self-test failed on {on}: {why}");
        }
        if self.disabled.is_empty() {
            return format!(
                "Self-test: {} checks passed in {secs:.1} s on {on}",
                self.checks.len()
            );
        }
        let off: Vec<String> = self
            .disabled
            .iter()
            .map(|d| format!("{} turned off ({})", d.form.label(), d.reason))
            .collect();
        format!(
            "Self-test on {on}: {}; using {} ({} of {} checks passed, {secs:.1} s)",
            off.join("; "),
            self.using,
            self.checks.iter().filter(|c| c.passed).count(),
            self.checks.len()
        )
    }
}

/// The matmul kernels the automatic choice takes now on `device` ("naive for decoding, tiled
/// for prefill").
fn in_use(device: &Device) -> String {
    use crate::quant::resolve;
    if !crate::device::queues_work(device) {
        return "the CPU path".into();
    }
    let label = |m| {
        resolve(device, Kernel::Auto, [m, N, K])
            .form()
            .map_or("?", Form::label)
    };
    format!(
        "{} for decoding, {} for prefill",
        label(1),
        label(GEMV_MAX_M + 1)
    )
}

/// Row length of the matmul checks: a multiple of every block size (256 for K-quants).
const K: usize = 256;
/// Output rows of the matmul checks (prime, so no kernel's tiling divides it).
const N: usize = 13;

/// Input rows per kernel: the matrix–vector forms at decode-like counts, the tiled form past
/// one matrix–vector group (the sizes [`Kernel::Auto`] gives each).
fn rows_for(kernel: Kernel) -> usize {
    match kernel {
        Kernel::Tiled | Kernel::TiledSplit => GEMV_MAX_M + 1,
        _ => 3,
    }
}

fn check(name: String, form: Option<Form>, m: Result<Measured, String>) -> Check {
    match m {
        Ok(m) => Check {
            name,
            form,
            passed: m.passed(),
            max_error: m.max_error.min(f64::MAX),
            bound: m.bound,
            detail: m.detail,
            ms: 0.0,
        },
        Err(e) => Check {
            name,
            form,
            max_error: f64::MAX,
            bound: 0.0,
            passed: false,
            detail: e,
            ms: 0.0,
        },
    }
}

/// `matmul.gemv.q4_k: error 3.1e-2 > bound 4.0e-6` for a failed check (its detail when it
/// could not run or gave NaN).
fn reason(c: &Check) -> String {
    if c.max_error < f64::MAX {
        format!(
            "{}: error {:.1e} > bound {:.1e}",
            c.name, c.max_error, c.bound
        )
    } else {
        format!("{}: {}", c.name, c.detail)
    }
}

/// Runs the self-test on `device` and turns off every form that failed (after turning every
/// form back on: the verdict is this run's alone). The kernel checks come first and their
/// verdicts are applied before the tiny forward, so the forward runs the automatic choices as
/// the model will.
pub async fn run(device: &Device, plan: &Plan, clock: &dyn Clock) -> Report {
    let t0 = clock.now_ms();
    forms::reset();
    let mut checks: Vec<Check> = Vec::new();
    let mut last = t0;
    // Each check's time is the time since the previous one ended.
    let mut timed = |checks: &mut Vec<Check>, mut c: Check| {
        let now = clock.now_ms();
        c.ms = now - last;
        last = now;
        checks.push(c);
    };
    let gpu = crate::device::queues_work(device);
    let kernels = Kernel::available(device);
    // Every kernel with the integer f16 form (every adapter has it); on the CPU, its one path.
    let integer = if gpu { Half::Integer } else { Half::Auto };
    for (i, &ty) in plan.types.iter().enumerate() {
        let seed = i as u64;
        for &kernel in &kernels {
            let m = rows_for(kernel);
            let name = format!("matmul.{}.{}", snake(kernel), snake_ty(ty));
            let r = matmul_error(device, kernel, integer, ty, m, N, K, seed).await;
            timed(&mut checks, check(name, kernel.form(), r));
        }
        let r = gather_error(device, Half::Auto, ty, N, K, seed).await;
        timed(
            &mut checks,
            check(format!("gather.{}", snake_ty(ty)), None, r),
        );
    }
    turn_off_failed(&checks);
    // The native f16 form through the decoding kernel the automatic choice now takes, so a
    // broken kernel is not blamed on the f16 form.
    if Half::available(device).contains(&Half::Native) {
        let kernel = crate::quant::resolve(device, Kernel::Auto, [3, N, K]);
        for (i, &ty) in plan.types.iter().enumerate().filter(|(_, t)| has_half(**t)) {
            let r = matmul_error(device, kernel, Half::Native, ty, 3, N, K, i as u64).await;
            let name = format!("f16_native.{}", snake_ty(ty));
            timed(&mut checks, check(name, Some(Form::NativeHalf), r));
        }
    }
    // Each width with the kernel variants its attention compiles in the model (the fused
    // kernel's mask is a compile-time switch), so the shaders compiled here are the model's.
    let text = plan.text_head_dims.iter().enumerate();
    let vision = plan.vision_head_dims.iter().enumerate();
    let widths = text
        .map(|(i, &d)| (d, true, 100 + i as u64))
        .chain(vision.map(|(i, &d)| (d, false, 150 + i as u64)));
    for (d, decoder, seed) in widths {
        // The decoder: grouped query heads, a sliding window, queries after cached keys, keys
        // past one workgroup tile and, at 256 wide on a GPU, split in two chunks that each see
        // some (the question's form). The vision tower: every query sees every key, no
        // grouping, keys past one tile (72 wide: 26 keys per tile).
        let (case, suffix) = if decoder {
            (((4, 2, 5, 140, d), Some(100)), "")
        } else {
            (((2, 1, 40, 40, d), None), ".unmasked")
        };
        let mut paths = vec![(attention::Path::Blocked, None)];
        if gpu && d <= fused::MAX_HEAD_DIM {
            paths.push((attention::Path::Fused, Some(Form::FusedAttention)));
        }
        // The decoder's decoding steps, also where the fused kernel takes the width (it
        // replaces that one when turned off); the vision tower never decodes.
        if decoder && gpu && d <= decode_attention::MAX_HEAD_DIM {
            paths.push((attention::Path::Decode, Some(Form::DecodeAttention)));
        }
        // Its prefill and question batches, where the width is too wide for the fused kernel.
        if decoder && gpu && d > fused::MAX_HEAD_DIM && wide_attention::fits(d) {
            paths.push((attention::Path::Wide, Some(Form::WideAttention)));
        }
        for (path, form) in paths {
            let name = format!("attention.{}.d{d}{suffix}", snake_path(path));
            let c = attention_check(device, name, form, case, seed, path).await;
            timed(&mut checks, c);
        }
    }
    // The fused row kernels (norms, RoPE, GELU); the CPU composes burn ops instead.
    if gpu {
        for (i, (op, shape)) in rows::SELFTEST_CASES.into_iter().enumerate() {
            let r = rows::max_error_vs_f64(device, op, shape, 200 + i as u64, rows::Path::Fused)
                .await
                .map(|e| Measured {
                    max_error: e,
                    bound: rows::TOLERANCE,
                    detail: format!("{shape:?}"),
                })
                .map_err(|e| e.to_string());
            let name = format!("fused.{}", op.name());
            timed(&mut checks, check(name, Some(op.form()), r));
        }
        // The decoder's q/k norm + RoPE with its cache write (the RoPE form's other kernel).
        let shape = rows::QK_STORE_CASES[0];
        let r = rows::qk_store_max_error(device, shape, 5, 300)
            .await
            .map(|e| Measured {
                max_error: e,
                bound: rows::TOLERANCE,
                detail: format!("{shape:?} at position 5"),
            })
            .map_err(|e| e.to_string());
        timed(
            &mut checks,
            check("fused.qk_norm_rope_store".into(), Some(Form::FusedRope), r),
        );
        // The products' own fusions, through the kernels the automatic choice now takes:
        // Q4_K_M's q+k (Q4_K) and v (Q6_K) as one product, at decode and prefill sizes (the
        // prefill's split over the weights too, which the model's long rows take on a GPU),
        // and a joined gate and up with the GELU in the decode product.
        // Only a model whose v differs in type from its q+k runs the stacked product, and its
        // pair is the one checked (on SwiftShader these are the slowest checks to compile).
        if let Some(pair) = plan.stacked {
            let mut stacked: Vec<Kernel> = [3, GEMV_MAX_M + 1]
                .map(|m| crate::quant::resolve(device, Kernel::Auto, [m, N + 5, K]))
                .into();
            if kernels.contains(&Kernel::TiledSplit) && !stacked.contains(&Kernel::TiledSplit) {
                stacked.push(Kernel::TiledSplit);
            }
            for kernel in stacked {
                let m = rows_for(kernel);
                let r =
                    conformance::stacked_error(device, kernel, Half::Auto, pair, m, [N, 5], K, 400)
                        .await;
                let name = format!("stacked.{}", snake(kernel));
                timed(&mut checks, check(name, Some(Form::StackedProduct), r));
            }
        }
        let kernel = crate::quant::resolve(device, Kernel::Auto, [1, N, K]);
        let r = conformance::gelu_product_error(
            device,
            kernel,
            Half::Auto,
            GgmlType::Q4_K,
            1,
            N,
            K,
            401,
        )
        .await;
        let name = format!("gelu_product.{}", snake(kernel));
        timed(&mut checks, check(name, Some(Form::GeluProduct), r));
    }
    turn_off_failed(&checks);
    let width = plan
        .text_head_dims
        .first()
        .copied()
        .unwrap_or(MEDGEMMA_4B_TEXT_HEAD_DIM);
    let tiny = match forward::tiny_forward(device, width).await {
        Ok((logits, argmax)) => vec![
            check("forward.tiny".into(), None, Ok(logits)),
            check("argmax".into(), Some(Form::DeviceArgmax), Ok(argmax)),
        ],
        Err(e) => vec![check("forward.tiny".into(), None, Err(e))],
    };
    for c in tiny {
        timed(&mut checks, c);
    }
    // The argmax is checked with the forward: a failure there is turned off now.
    turn_off_failed(&checks);
    // No matmul kernel left is the root cause of everything else failing: said first. The split
    // tiled form only runs where the whole one would (the same kernel, a chunk of each row), so
    // it alone does not keep a device usable.
    let base = |f: Form| f != Form::TiledSplit && forms::enabled(f);
    let unusable = if gpu && !kernels.iter().any(|k| k.form().is_some_and(base)) {
        Some("every matmul kernel failed".to_string())
    } else {
        checks
            .iter()
            .find(|c| !c.passed && c.form.is_none())
            .map(reason)
    };
    Report {
        adapter: crate::device::adapter(device),
        checks,
        elapsed_ms: clock.now_ms() - t0,
        disabled: forms::disabled(),
        usable: unusable.is_none(),
        unusable_reason: unusable,
        using: in_use(device),
    }
}

/// Turns off the form of every failed check that has one.
fn turn_off_failed(checks: &[Check]) {
    for c in checks.iter().filter(|c| !c.passed) {
        if let Some(form) = c.form {
            forms::disable(form, reason(c));
        }
    }
}

/// One attention path at `case` (shape, window) against the f64 evaluation.
async fn attention_check(
    device: &Device,
    name: String,
    form: Option<Form>,
    (shape, window): (attention::Shape, Option<usize>),
    seed: u64,
    path: attention::Path,
) -> Check {
    let r = attention::max_error_vs_f64(device, shape, window, seed, path)
        .await
        .map(|e| Measured {
            max_error: e,
            bound: attention::TOLERANCE,
            detail: match window {
                Some(w) => format!("{shape:?} window {w}"),
                None => format!("{shape:?} no mask"),
            },
        })
        .map_err(|e| e.to_string());
    check(name, form, r)
}

fn snake_path(path: attention::Path) -> String {
    format!("{path:?}").to_lowercase()
}

/// Whether blocks of `ty` hold f16 numbers (F16 weights, block scales).
fn has_half(ty: GgmlType) -> bool {
    !matches!(ty, GgmlType::F32 | GgmlType::BF16)
}

fn snake(kernel: Kernel) -> String {
    serde_json::to_value(kernel)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_else(|| format!("{kernel:?}"))
}

fn snake_ty(ty: GgmlType) -> String {
    ty.to_string().to_lowercase()
}

/// A check as the CLI prints it: `name`, `max_error`, `bound`, `passed`, `detail`, `ms`.
pub fn check_json(c: &Check) -> serde_json::Value {
    serde_json::json!({
        "name": c.name,
        "max_error": c.max_error,
        "bound": c.bound,
        "passed": c.passed,
        "detail": c.detail,
        "ms": c.ms,
    })
}
