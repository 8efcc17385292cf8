//! Device memory the pool reserves through the phases of a study, under a CubeCL dry run: every
//! allocation is made and freed as in a real run and no kernel executes, so a 4B pair's memory
//! can be followed on a software adapter in seconds. With `REXVQA_EXCLUSIVE_POOL=1` the native
//! device takes the pool the browser's CubeCL is built with (`crate::device::wgpu`), so the
//! browser's memory is measured natively (`examples/pool_memory.rs`, `tests/pool_memory.rs`).

use burn_cubecl::cubecl::dry_run::DryRun;
use std::ops::ControlFlow;

use crate::model::ModelError;
use crate::session::{Model, Session};

/// Bytes reserved after each phase.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PoolPhases {
    /// The device runs the browser's pool (`REXVQA_EXCLUSIVE_POOL=1`).
    pub exclusive_pool: bool,
    /// `(phase, bytes reserved after it)`, from the model's load on.
    pub phases: Vec<(String, u64)>,
    /// The most reserved after any phase.
    pub peak_bytes: u64,
    /// Each phase's non-empty pools, when asked for: what each holds (to see where an excess
    /// sits).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<(String, Vec<String>)>,
}

/// Follows `model` through an image encode (with a vision tower), one prefill of each of
/// `lengths`, and a study as scoring a split runs it: `questions` official questions one by one
/// on the cached image prefix, the same questions batched in one pass, and 8 generated tokens.
/// GPU devices only: the CPU keeps no pool (every figure reads 0).
///
/// The dry run is process-wide (see [`super::count_passes`]): nothing else may compute on a GPU
/// meanwhile.
pub async fn pool_phases(
    model: &Model,
    lengths: &[usize],
    questions: usize,
    with_pools: bool,
) -> Result<PoolPhases, ModelError> {
    let device = model.device().clone();
    let reserved = || device.memory_pool_usage().map_or(0, |u| u.bytes_reserved);
    let mut out = PoolPhases {
        exclusive_pool: crate::device::exclusive_pool_requested(),
        phases: vec![("load".into(), reserved())],
        peak_bytes: 0,
        pools: Vec::new(),
    };
    let after = |name: String, out: &mut PoolPhases| {
        if with_pools {
            out.pools
                .push((name.clone(), crate::device::pool_lines(&device)));
        }
        out.phases.push((name, reserved()));
    };
    let _dry = DryRun::new();
    let features = match &model.vision {
        Some(v) => {
            let size = v.cfg.image_size;
            let f = model.encode_image(&vec![0.0f32; 3 * size * size])?;
            after("image".into(), &mut out);
            Some(f)
        }
        None => None,
    };
    for &n in lengths {
        let mut cache = model.decoder.new_cache();
        drop(model.prefill(&super::filler_ids(model, n), &[], &mut cache)?);
        after(format!("prefill {n}"), &mut out);
    }
    if let Some(f) = &features {
        let images = std::slice::from_ref(f);
        let prompts = super::study_prompts(model, 0..questions)?;
        let mut session = Session::new(model);
        for (ids, letters) in &prompts {
            session.score_options(ids, images, letters).await?;
        }
        after(format!("study: {questions} questions"), &mut out);
        Session::new(model).score_many(&prompts, images).await?;
        after(format!("study: {questions} questions batched"), &mut out);
        if let Some((ids, _)) = prompts.first() {
            session
                .generate(ids, images, 8, &mut |_, _| ControlFlow::Continue(()))
                .await?;
            after("study: 8 tokens generated".into(), &mut out);
        }
    }
    out.peak_bytes = out.phases.iter().map(|p| p.1).max().unwrap_or(0);
    Ok(out)
}

/// Device memory while scoring studies in a row ([`study_flow`]).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct StudyFlow {
    /// Bytes reserved after the model's load.
    pub after_load: u64,
    /// Bytes reserved after each study.
    pub after_each: Vec<u64>,
    /// The most bytes the wrapped device's buffers held at once over the studies, which sees
    /// inside a study where `after_each` does not (the browser's device, natively
    /// `REXVQA_DESTROYING_DEVICE=1`); None on a plain device.
    pub peak_buffer_bytes: Option<u64>,
}

/// Follows `model` through `studies` studies as scoring a split runs them on a GPU
/// ([`crate::eval::run`]): one session, moved on with [`Session::next_study`] at each study, its
/// image encoded, then `questions` official questions scored in one batched pass. Under a dry
/// run as [`pool_phases`] (needs a vision tower; the same process-wide caveat).
pub async fn study_flow(
    model: &Model,
    studies: usize,
    questions: usize,
) -> Result<StudyFlow, ModelError> {
    let size = model
        .vision
        .as_ref()
        .ok_or_else(|| ModelError::Unsupported("a study needs a vision tower (mmproj)".into()))?
        .cfg
        .image_size;
    let pixels = vec![0.0f32; 3 * size * size];
    let reserved = || super::device_bytes(model).unwrap_or(0);
    let after_load = reserved();
    crate::destroying_device::reset_peak();
    let _dry = DryRun::new();
    let mut session = Session::new(model);
    let mut after_each = Vec::with_capacity(studies);
    for study in 0..studies {
        session.next_study();
        let f = session.add_image("study", &pixels)?;
        let first = study * questions;
        let prompts = super::study_prompts(model, first..first + questions)?;
        session.score_many(&prompts, &[f]).await?;
        after_each.push(reserved());
    }
    let wrapped = crate::destroying_device::counts();
    Ok(StudyFlow {
        after_load,
        after_each,
        peak_buffer_bytes: (wrapped.created > 0).then_some(wrapped.peak_live_bytes),
    })
}
