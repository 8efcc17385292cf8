//! The benchmark harness shared by `rexvqa bench` and the app: image encoding, prefill at chosen
//! lengths, decoding, and fast/official questions on a synthetic study, each timed after a
//! device sync so the figures are completed GPU work, not queued work.

use crate::eval::Clock;
use crate::launches;
use crate::model::ModelError;
use crate::quant::{Half, Kernel};
use crate::rexvqa::Letter;
use crate::rexvqa::synth::synthetic_xray;
use crate::rng::SplitMix64;
use crate::session::{Model, Session};
use std::ops::ControlFlow;

mod counts;
mod kernels;
mod memory;
mod profile;
mod prompts;
mod report;

pub use kernels::{KernelTiming, MAX_REPS, MIN_TIMED_MS, kernel_survey, next_reps};
use kernels::{time_kernel, timed_at};
pub use memory::{PoolPhases, StudyFlow, pool_phases, study_flow};

pub use counts::*;
pub use profile::*;
pub use prompts::*;
pub use report::*;

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Prompt lengths for prefill.
    pub prefill_lengths: Vec<usize>,
    /// Tokens to decode.
    pub decode_tokens: usize,
    /// Questions per study for the fast-mode figure.
    pub questions: usize,
    /// Generation cap for official questions (256 in the protocol; smaller for quick runs).
    pub official_max_tokens: usize,
    /// Input row counts the kernel timings use (empty: no kernel timings).
    pub kernel_rows: Vec<usize>,
    /// Least repetitions per kernel timing (after one warm-up); more while the timed span is
    /// shorter than [`MIN_TIMED_MS`].
    pub kernel_reps: usize,
    /// Profile the passes kernel by kernel against this roofline ([`BenchReport::profile`]);
    /// None: no profile.
    pub profile: Option<Roofline>,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            prefill_lengths: vec![300, 1000],
            decode_tokens: 32,
            questions: 4,
            official_max_tokens: 256,
            kernel_rows: vec![1, 256],
            kernel_reps: 3,
            profile: None,
        }
    }
}

/// Tokens decoded before decoding is timed (see [`run`]).
pub const DECODE_WARMUP: usize = 2;

/// Launches in [`dispatch_chain`]'s timed chain.
pub const CHAIN: usize = 1024;

/// Times [`CHAIN`] dependent launches of the fused RMSNorm on one hidden-sized row (after a
/// warm-up that compiles it): microseconds a dispatch to issue, and issue to finish.
async fn dispatch_chain(model: &Model, clock: &impl Clock) -> Result<(f64, f64), ModelError> {
    use burn::tensor::Tensor;
    let d = model.decoder.cfg.hidden;
    let device = model.device();
    let w = Tensor::<1>::ones([d], device);
    let chain = |x: Tensor<2>, n: usize| {
        (0..n).fold(x, |y, _| crate::kernels::rows::rms_norm(y, &w, None, 1e-6))
    };
    let warm = chain(Tensor::<2>::ones([1, d], device), 16);
    sync(model).await?;
    let t = clock.now_ms();
    let out = chain(warm, CHAIN);
    let issued = clock.now_ms();
    sync(model).await?;
    let done = clock.now_ms();
    drop(out);
    let us = |ms: f64| ms * 1000.0 / CHAIN as f64;
    Ok((us(issued - t), us(done - t)))
}

pub(super) async fn sync(model: &Model) -> Result<(), ModelError> {
    Ok(crate::device::sync(model.device()).await?)
}

/// Device memory reserved now (None on the CPU backend).
pub fn device_bytes(model: &Model) -> Option<u64> {
    model.device().memory_pool_usage().map(|u| u.bytes_reserved)
}

/// Gives the pools' free pages back once the work queued so far has run
/// ([`crate::device::release_after_queued_work`]).
async fn give_back_free_pages(model: &Model) -> Result<(), ModelError> {
    Ok(crate::device::release_after_queued_work(model.device()).await?)
}

/// Runs the harness (needs a vision tower).
pub async fn run(
    model: &Model,
    opts: &BenchOptions,
    clock: &impl Clock,
) -> Result<BenchReport, ModelError> {
    let mut r = BenchReport {
        official_max_tokens: opts.official_max_tokens,
        device_bytes_after_load: device_bytes(model),
        adapter: crate::device::adapter(model.device()),
        tuning: crate::tuning::current(),
        ..Default::default()
    };
    let destroyed_before = crate::destroying_device::counts();
    crate::destroying_device::reset_peak();
    let wrapped = destroyed_before.created > 0;
    r.small_buffers_at_start = wrapped.then_some((
        destroyed_before.live_small,
        destroyed_before.live_small_slack_bytes,
    ));
    let start = clock.now_ms();
    let mut peak = r.device_bytes_after_load;
    let mut stages = Vec::new();
    let mut sample = |model: &Model, stage: &str| {
        let reserved = device_bytes(model);
        peak = match (peak, reserved) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        stages.push(MemoryPoint {
            stage: stage.to_string(),
            t_ms: clock.now_ms() - start,
            reserved,
            live: wrapped.then(|| crate::destroying_device::counts().live_bytes()),
        });
    };
    // Without an mmproj only the text figures are measured (the image and question ones stay 0),
    // which is what a text-only GGUF can be compared with llama-bench on.
    let image = match model.vision.as_ref() {
        Some(vision) => {
            let size = vision.cfg.image_size as u32;
            let mut rng = SplitMix64::new(7);
            let img = crate::image::Image8 {
                width: 640,
                height: 560,
                channels: 1,
                data: synthetic_xray(640, 560, &mut rng)
                    .iter()
                    .map(|v| (v >> 8) as u8)
                    .collect(),
            };
            let pixels = crate::image::preprocess_with(&img, size, vision.cfg.mean, vision.cfg.std);
            let t = clock.now_ms();
            let feats = model.encode_image(&pixels)?;
            sync(model).await?;
            r.image_encode_first_ms = clock.now_ms() - t;
            let t = clock.now_ms();
            for _ in 0..2 {
                model.encode_image(&pixels)?;
            }
            r.image_issue_ms = (clock.now_ms() - t) / 2.0;
            sync(model).await?;
            r.image_encode_ms = (clock.now_ms() - t) / 2.0;
            Some((pixels, feats))
        }
        None => None,
    };
    if image.is_some() {
        sample(model, "image encodes");
    }

    for &n in &opts.prefill_lengths {
        let ids = filler_ids(model, n);
        // A first pass at the full length takes first use's costs out of the timed pass (a
        // 16-token warm-up left the larger buffers' allocation there); its time is kept apart.
        let t = clock.now_ms();
        model.prefill(&ids, &[], &mut model.decoder.new_cache())?;
        sync(model).await?;
        r.prefill_first
            .push((n, n as f64 / ((clock.now_ms() - t) / 1000.0)));
        let t = clock.now_ms();
        let mut cache = model.decoder.new_cache();
        model.prefill(&ids, &[], &mut cache)?;
        r.prefill_issue_ms.push((n, clock.now_ms() - t));
        sync(model).await?;
        r.prefill
            .push((n, n as f64 / ((clock.now_ms() - t) / 1000.0)));
    }
    sample(model, "prefills");

    let mut cache = model.decoder.new_cache();
    let prompt = match &image {
        Some((_, feats)) => {
            let ids = question_ids(model, 0)?;
            model.prefill(&ids, std::slice::from_ref(feats), &mut cache)?
        }
        None => model.prefill(&filler_ids(model, 64), &[], &mut cache)?,
    };
    // Greedy decoding as `Session::generate` does it: the next id stays on the device.
    let mut pending = model.decoder.greedy(prompt);
    // Two tokens first: the prompt's pass used the prefill kernels, so the decode kernels'
    // pipelines (the matrix-vector forms, decode attention) are created and compiled at their
    // first launch, and a GPU driver's compile time, not the tokens', would then set the
    // decode rate (bench/results/device/h200-full-2026-11-27T1003/11-bench-variants.json).
    for _ in 0..DECODE_WARMUP {
        pending = model
            .decoder
            .greedy(model.decoder.forward_token(pending, &mut cache));
    }
    // The prompt's work is finished first, so the wait below is the decoded tokens' alone.
    sync(model).await?;
    let t = clock.now_ms();
    for _ in 0..opts.decode_tokens {
        pending = model
            .decoder
            .greedy(model.decoder.forward_token(pending, &mut cache));
    }
    let issued = clock.now_ms();
    // The id is read as generation reads it, then the device is waited on as well: natively on
    // SwiftShader the read of the last id can come back before the queued tokens have run,
    // which made short native decodes look faster than long ones and than the browser's, whose
    // read does wait (bench/results/ci-vm-2core-swiftshader-decode-sync-browser-vs-native.json).
    drop(pending.into_data_async().await);
    sync(model).await?;
    let done = clock.now_ms();
    r.decode_tokens_per_s = opts.decode_tokens as f64 / ((done - t) / 1000.0);
    r.decode_issue_ms_per_token = (issued - t) / opts.decode_tokens.max(1) as f64;
    r.decode_wait_ms = done - issued;
    sample(model, "decode");
    drop(cache);

    if crate::device::queues_work(model.device()) {
        let (issue, wall) = dispatch_chain(model, clock).await?;
        r.chain_issue_us_per_dispatch = Some(issue);
        r.chain_us_per_dispatch = Some(wall);
    }

    if let Some(roof) = opts
        .profile
        .filter(|_| crate::device::queues_work(model.device()))
    {
        let pixels = image.as_ref().map(|(p, _)| p.as_slice());
        r.profile = Some(
            match profile_passes(model, opts, pixels, roof, clock).await {
                Err(ModelError::Unsupported(why)) => ProfileReport {
                    roofline: roof,
                    unavailable: Some(why),
                    ..Default::default()
                },
                other => other?,
            },
        );
        sample(model, "profile passes");
    }

    let mut matrices = model.decoder.matrices();
    if let Some(v) = &model.vision {
        matrices.extend(v.matrices());
    }
    for &m in &opts.kernel_rows {
        for (name, q) in &matrices {
            // The head only ever sees the last position.
            if *name == "token_embd" && m > 1 {
                continue;
            }
            for kernel in Kernel::available(model.device()) {
                if !timed_at(kernel, m) {
                    continue;
                }
                for half in Half::available(model.device()) {
                    r.kernels.push(
                        time_kernel(
                            model.device(),
                            name,
                            q,
                            m,
                            kernel,
                            half,
                            opts.kernel_reps.max(1),
                            clock,
                        )
                        .await?,
                    );
                }
            }
        }
    }
    sample(model, "kernel timings");

    if let Some((pixels, _)) = image {
        studies(model, opts, &pixels, &mut r, clock, &mut sample).await?;
    }

    // The dispatch counts come from fresh passes under a dry run. In the browser's pool they
    // make pages of their own on top of those the timed stages left free
    // (bench/results/h200-and-ci-vm-browser-memory-by-stage.json), so the free pages are given
    // back before them, and theirs after.
    give_back_free_pages(model).await?;
    let pc = count_passes(model, opts.questions).await?;
    sample(model, "dispatch counts (dry run)");
    give_back_free_pages(model).await?;
    r.peak_device_bytes = peak;
    r.memory_by_stage = stages;
    if wrapped {
        let now = crate::destroying_device::counts();
        r.buffers_destroyed = Some((
            now.destroyed - destroyed_before.destroyed,
            now.destroyed_bytes - destroyed_before.destroyed_bytes,
        ));
        r.peak_buffer_bytes = Some(now.peak_live_bytes);
    }
    r.set_counts(pc, model.decoder.weight_bytes_per_token());
    Ok(r)
}

/// The harness's studies on the encoded test image: one question at a time with the prompt
/// prefix cached, its official question, cold studies and a batched one.
async fn studies(
    model: &Model,
    opts: &BenchOptions,
    pixels: &[f32],
    r: &mut BenchReport,
    clock: &impl Clock,
    sample: &mut impl FnMut(&Model, &str),
) -> Result<(), ModelError> {
    // A study of `questions` questions: encode once, reuse the shared prompt prefix.
    let t = clock.now_ms();
    let mut session = Session::new(model);
    let f = session.add_image("bench", pixels)?;
    for q in 0..opts.questions {
        session
            .score_options(
                &question_ids(model, q)?,
                std::slice::from_ref(&f),
                &Letter::ALL,
            )
            .await?;
    }
    r.fast_questions_per_s = opts.questions as f64 / ((clock.now_ms() - t) / 1000.0);
    sample(model, "a study, one question at a time");

    // The study's official question, on its cached prompt prefix.
    let t = clock.now_ms();
    let c = launches::count();
    let out = session
        .generate(
            &question_ids(model, 0)?,
            std::slice::from_ref(&f),
            opts.official_max_tokens,
            &mut |_, _| ControlFlow::Continue(()),
        )
        .await?;
    r.official_questions_per_s = 1000.0 / (clock.now_ms() - t);
    r.official_tokens = out.len() as f64;
    let reads = c.finish().reads;
    if crate::device::queues_work(model.device()) {
        r.official_reads_per_token = Some(reads as f64 / out.len().max(1) as f64);
    }
    sample(model, "official question");

    // Cold studies and the batched one move the session on as the evaluation does from study
    // to study (`Session::next_study`): the image encoded again and every prompt computed from
    // scratch. A fresh session per study, with the first one's still alive, would hold pages no
    // user flow holds (bench/results/h200-and-ci-vm-browser-memory-by-stage.json).
    let t = clock.now_ms();
    for q in 0..opts.questions {
        session.next_study();
        let f = session.add_image("bench", pixels)?;
        session
            .score_options(&question_ids(model, q)?, &[f], &Letter::ALL)
            .await?;
    }
    r.fast_questions_per_s_cold = opts.questions as f64 / ((clock.now_ms() - t) / 1000.0);
    sample(model, "cold studies");

    let t = clock.now_ms();
    session.next_study();
    let f = session.add_image("bench", pixels)?;
    let prompts = study_prompts(model, 0..opts.questions)?;
    session
        .score_many(&prompts, std::slice::from_ref(&f))
        .await?;
    r.fast_questions_per_s_batched = opts.questions as f64 / ((clock.now_ms() - t) / 1000.0);
    sample(model, "a study batched");

    // The same study's official questions batched, each reply decoded to the tokens where real
    // replies settle their letter (synthetic weights never settle one).
    let t = clock.now_ms();
    session.next_study();
    let f = session.add_image("bench", pixels)?;
    let prompts: Vec<Vec<u32>> = prompts.into_iter().map(|(p, _)| p).collect();
    let go_on = &mut |_, _, _: &str| ControlFlow::Continue(());
    let settled = counts::OFFICIAL_TOKENS;
    session
        .generate_many(&prompts, std::slice::from_ref(&f), settled, go_on)
        .await?;
    r.official_questions_per_s_batched = opts.questions as f64 / ((clock.now_ms() - t) / 1000.0);
    sample(model, "a study's official questions batched");
    Ok(())
}
