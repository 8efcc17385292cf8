//! The kernel profile: every launch of a decoded token, a prefill and an image encode timed on its
//! own, summed kernel by kernel.

use serde::{Deserialize, Serialize};

use super::BenchOptions;
use super::prompts::{filler_ids, question_ids, study_prompts};
use super::sync;
use crate::eval::Clock;
use crate::launches;
use crate::model::ModelError;
use crate::rexvqa::Letter;
use crate::session::{Model, Session};

/// A machine's roofline: what its memory and arithmetic can do at best, entered by hand (e.g.
/// an H100's 3,350 GB/s), against which [`ProfileReport`] puts each kernel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Roofline {
    /// Memory bandwidth, GB/s.
    pub gb_per_s: Option<f64>,
    /// Arithmetic, GFLOP/s (of the precision the kernels use: f32 here).
    pub gflop_per_s: Option<f64>,
}

/// Per-kernel device time of the passes that matter, each launch timed on its own.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProfileReport {
    /// The roofline the percentages are of.
    pub roofline: Roofline,
    /// One decoded token, one prefill pass (of the longest prefill length) and, with a
    /// vision tower, one image encode.
    pub passes: Vec<ProfiledPass>,
    /// Why there are no passes, where the adapter cannot be profiled (a browser without
    /// timestamp queries); the rest of the benchmark still runs.
    #[serde(default)]
    pub unavailable: Option<String>,
}

/// One profiled pass.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProfiledPass {
    /// `token`, `prefill N` or `image`.
    pub pass: String,
    /// The pass's wall time with every launch timed (longer than an untimed one: each launch
    /// carries a timestamp pair).
    pub wall_ms: f64,
    /// The sum of its launches' device times.
    pub gpu_ms: f64,
    /// How the launches were timed: `device` (timestamp queries) or `system`.
    pub timing: String,
    /// Launches, and how many carried a measurement.
    pub dispatches: u64,
    /// Bytes the pass's launchers noted, all of them (each kernel's row has its share).
    pub bytes: u64,
    /// Launches with a measurement.
    pub timed: u64,
    /// By kernel, most device time first.
    pub kernels: Vec<ProfiledKernel>,
}

/// One kernel's launches in a profiled pass, against the roofline.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfiledKernel {
    /// The kernel.
    pub kernel: String,
    /// Launches.
    pub dispatches: u64,
    /// Their device time, µs.
    pub gpu_us: f64,
    /// Bytes the launcher noted (0: not counted, burn's own kernels).
    pub bytes: u64,
    /// Floating-point operations noted (0: not counted).
    pub flop: u64,
    /// Bytes over device time.
    pub gb_per_s: Option<f64>,
    /// FLOP over device time.
    pub gflop_per_s: Option<f64>,
    /// The larger of the bandwidth and arithmetic fractions of the roofline, in %: how near
    /// the kernel runs to what bounds it.
    pub roofline_pct: Option<f64>,
}

impl ProfiledPass {
    fn new(pass: String, wall_ms: f64, p: launches::PassProfile, roof: Roofline) -> ProfiledPass {
        let kernels: Vec<ProfiledKernel> = p
            .kernels
            .into_iter()
            .map(|k| {
                let s = k.gpu_us / 1e6;
                let rate = |x: u64| (x > 0 && s > 0.0).then(|| x as f64 / s / 1e9);
                let (gb, gf) = (rate(k.bytes), rate(k.flop));
                let pct = |v: Option<f64>, peak: Option<f64>| Some(100.0 * v? / peak?);
                let roofline_pct = match (pct(gb, roof.gb_per_s), pct(gf, roof.gflop_per_s)) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
                ProfiledKernel {
                    kernel: k.kernel,
                    dispatches: k.dispatches,
                    gpu_us: k.gpu_us,
                    bytes: k.bytes,
                    flop: k.flop,
                    gb_per_s: gb,
                    gflop_per_s: gf,
                    roofline_pct,
                }
            })
            .collect();
        ProfiledPass {
            pass,
            wall_ms,
            gpu_ms: kernels.iter().map(|k| k.gpu_us).sum::<f64>() / 1e3,
            timing: p.timing,
            dispatches: p.dispatches,
            bytes: p.bytes,
            timed: p.timed,
            kernels,
        }
    }
}

/// Times each launch of one decoded token (after a 16-token prompt), one prefill pass of the
/// longest prefill length and, given `pixels`, one image encode, a question on a study with its
/// prefix cached and a study's questions batched, each after a sync so that only its own launches
/// are measured.
pub async fn profile_passes(
    model: &Model,
    opts: &BenchOptions,
    pixels: Option<&[f32]>,
    roof: Roofline,
    clock: &impl Clock,
) -> Result<ProfileReport, ModelError> {
    // Without timestamp queries CubeCL times a launch by waiting for the device on the host,
    // which a browser cannot do (cubecl-wgpu panics there rather than block).
    if cfg!(target_arch = "wasm32") && crate::device::timestamps(model.device()) == Some(false) {
        return Err(ModelError::Unsupported(
            "the kernel profile needs timestamp queries, which this browser's WebGPU adapter \
             does not offer (Chrome: --enable-unsafe-webgpu or \
             --enable-dawn-features=allow_unsafe_apis); run the benchmark without it"
                .into(),
        ));
    }
    let mut passes = Vec::new();

    let mut cache = model.decoder.new_cache();
    let pending = model
        .decoder
        .greedy(model.prefill(&filler_ids(model, 16), &[], &mut cache)?);
    sync(model).await?;
    let t = clock.now_ms();
    let p = launches::profile();
    let next = model
        .decoder
        .greedy(model.decoder.forward_token(pending, &mut cache));
    sync(model).await?;
    let wall = clock.now_ms() - t;
    passes.push(ProfiledPass::new(
        "token".into(),
        wall,
        p.finish().await,
        roof,
    ));
    drop((next, cache));

    if let Some(&n) = opts.prefill_lengths.iter().max() {
        let ids = filler_ids(model, n);
        let t = clock.now_ms();
        let p = launches::profile();
        let out = model.prefill(&ids, &[], &mut model.decoder.new_cache())?;
        sync(model).await?;
        let wall = clock.now_ms() - t;
        passes.push(ProfiledPass::new(
            format!("prefill {n}"),
            wall,
            p.finish().await,
            roof,
        ));
        drop(out);
    }

    if let Some(pixels) = pixels {
        let t = clock.now_ms();
        let p = launches::profile();
        let feats = model.encode_image(pixels)?;
        sync(model).await?;
        let wall = clock.now_ms() - t;
        passes.push(ProfiledPass::new(
            "image".into(),
            wall,
            p.finish().await,
            roof,
        ));
        drop(feats);

        // A question on a study whose prefix is cached (the sequential path), then a whole
        // study's questions as evaluation scores them (the shared prefix, then the questions
        // batched), each with the image already encoded: what a question costs beyond the image.
        let mut session = Session::new(model);
        let f = session.add_image("profile", pixels)?;
        let one = std::slice::from_ref(&f);
        session
            .score_options(&question_ids(model, 0)?, one, &Letter::ALL)
            .await?;
        sync(model).await?;
        let t = clock.now_ms();
        let p = launches::profile();
        session
            .score_options(&question_ids(model, 1)?, one, &Letter::ALL)
            .await?;
        sync(model).await?;
        let wall = clock.now_ms() - t;
        passes.push(ProfiledPass::new(
            "question".into(),
            wall,
            p.finish().await,
            roof,
        ));

        // The same session moved on, as the evaluation does: a second session beside the
        // first would hold both studies' pages.
        session.next_study();
        let f = session.add_image("profile", pixels)?;
        let prompts = study_prompts(model, 0..opts.questions.max(2))?;
        sync(model).await?;
        let t = clock.now_ms();
        let p = launches::profile();
        session
            .score_many(&prompts, std::slice::from_ref(&f))
            .await?;
        sync(model).await?;
        let wall = clock.now_ms() - t;
        passes.push(ProfiledPass::new(
            format!("study of {} questions", prompts.len()),
            wall,
            p.finish().await,
            roof,
        ));
    }
    Ok(ProfileReport {
        roofline: roof,
        passes,
        unavailable: None,
    })
}
