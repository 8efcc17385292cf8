//! The benchmark harness shared by `rexvqa bench` and the app: image encoding, prefill at chosen
//! lengths, decoding, and fast/official questions on a synthetic study, each timed after a
//! device sync so the figures are completed GPU work, not queued work.

use serde::{Deserialize, Serialize};

use crate::eval::Clock;
use crate::launches::{self, Counts};
use crate::model::ModelError;
use crate::quant::{Half, Kernel};
use crate::rexvqa::synth::synthetic_xray;
use crate::rexvqa::{Letter, prompt};
use crate::rng::SplitMix64;
use crate::session::{Model, Session};

mod kernels;
mod memory;

pub use kernels::{KernelTiming, MAX_REPS, MIN_TIMED_MS, kernel_survey, next_reps};
use kernels::{time_kernel, timed_at};
pub use memory::{PoolPhases, StudyFlow, pool_phases, study_flow};

/// Device memory at the end of one stage of the harness.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryPoint {
    /// The stage just finished.
    pub stage: String,
    /// Milliseconds since the run started.
    pub t_ms: f64,
    /// CubeCL's reserved bytes (None on the CPU).
    pub reserved: Option<u64>,
    /// Bytes of buffers the wrapped device holds, released ones not yet destroyed included
    /// (None where the device is not wrapped).
    pub live: Option<u64>,
}

/// Measured figures (times in milliseconds, rates per second).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BenchReport {
    /// The first image encoding (includes shader compilation on GPUs). This and the image and
    /// question figures below are 0 for a model loaded without its mmproj.
    pub image_encode_first_ms: f64,
    /// Mean of the following encodings.
    pub image_encode_ms: f64,
    /// Prefill throughput by prompt length: (tokens, tokens per second), after a first pass at
    /// the same length.
    pub prefill: Vec<(usize, f64)>,
    /// The first pass at each length of [`Self::prefill`] (tokens per second): it also pays for
    /// first use, the pool's growth to this length's buffers and any pipeline creation or driver
    /// compile still pending (H200, 4B pair, 1000 tokens: 308 tok/s in the first native process
    /// on the machine, 1,080-1,100 in later ones; SwiftShader, tiny pair: 24 against 85 at the
    /// first length, equal to the steady figure at later ones).
    #[serde(default)]
    pub prefill_first: Vec<(usize, f64)>,
    /// Decoding throughput (tokens per second, one token per step with the KV cache), after
    /// [`DECODE_WARMUP`] tokens that pay for the decode kernels' first use.
    pub decode_tokens_per_s: f64,
    /// Host milliseconds spent issuing one decoded token: encoding its launches and uploads.
    /// In the browser there is no wait for the device in it, and where it approaches the token's
    /// time the host (our code, CubeCL, wgpu, the browser's WebGPU) bounds decoding. Natively it
    /// also holds device waits: cubecl-wgpu keeps at most ~512 launches in flight and drains the
    /// queue every 64 uploads, so a device-bound loop reports its device time here (the host's
    /// own share: `engine/examples/issue_time.rs`).
    #[serde(default)]
    pub decode_issue_ms_per_token: f64,
    /// Milliseconds the decode loop then waited for the device to finish: its one read, then a sync.
    #[serde(default)]
    pub decode_wait_ms: f64,
    /// Host microseconds a dispatch costs when issuing a decoded token (the issue time over
    /// [`Self::dispatches_per_token`]; GPU backends only).
    #[serde(default)]
    pub host_us_per_dispatch: Option<f64>,
    /// Wall microseconds a dispatch costs in a dependent chain of [`CHAIN`] tiny launches (the
    /// fused RMSNorm of one hidden-sized row, each reading the last one's output), issue to
    /// finish: the floor under decoding's 286 launches a token, whoever sets it (the host, the
    /// queue, the device's gaps between dispatches). GPU backends only.
    #[serde(default)]
    pub chain_us_per_dispatch: Option<f64>,
    /// The host's share of [`Self::chain_us_per_dispatch`]: microseconds a dispatch took to
    /// issue (natively with cubecl-wgpu's waits for the device in it).
    #[serde(default)]
    pub chain_issue_us_per_dispatch: Option<f64>,
    /// Host milliseconds spent issuing each prefill of [`Self::prefill`] (same lengths).
    #[serde(default)]
    pub prefill_issue_ms: Vec<(usize, f64)>,
    /// Host milliseconds spent issuing one image encoding (of [`Self::image_encode_ms`]).
    #[serde(default)]
    pub image_issue_ms: f64,
    /// Fast-mode questions per second on a 4-question study, image encoded once.
    pub fast_questions_per_s: f64,
    /// Fast-mode questions per second when every question recomputes everything (no study cache).
    pub fast_questions_per_s_cold: f64,
    /// Fast-mode questions per second with the study's questions scored in one batched pass
    /// after the shared prefix (what evaluation does).
    pub fast_questions_per_s_batched: f64,
    /// Official-mode questions per second (greedy decoding, up to `official_max_tokens`).
    pub official_questions_per_s: f64,
    /// Tokens generated per official question.
    pub official_tokens: f64,
    /// Host reads (each an await of the device) per token the official question generated:
    /// greedy decoding reads every id to check for a stop token.
    #[serde(default)]
    pub official_reads_per_token: Option<f64>,
    /// The generation cap used for official questions.
    pub official_max_tokens: usize,
    /// Device memory the weights take right after loading (GPU backends; None on the CPU).
    pub device_bytes_after_load: Option<u64>,
    /// The most device memory reserved at any stage of the run (GPU backends; None on the CPU):
    /// CubeCL's count. A buffer CubeCL gives back leaves it at once; the browser's device
    /// destroys it once every encoder that recorded commands before the release has been
    /// submitted ([`crate::destroying_device`]), where wgpu alone left it
    /// to a garbage collection seconds later (at 4B the Benchmark gives back ~350 MB during its
    /// run, by a dry run's count: `bench/results/ci-vm-2core-browser-pool-releases-dry-run.json`).
    /// The GPU kit's `nvidia-smi` figure counts what the device really holds.
    pub peak_device_bytes: Option<u64>,
    /// Buffers the browser's device destroyed during the run, after CubeCL gave them back, and
    /// their bytes (None where the device is not wrapped: natively, and on the CPU).
    #[serde(default)]
    pub buffers_destroyed: Option<(u64, u64)>,
    /// The most bytes of buffers the browser's device held at once during the run, the
    /// released ones not yet destroyed included (None where the device is not wrapped): what
    /// our stack asks of the browser, against which the GPU process's own figure shows what
    /// the browser adds.
    #[serde(default)]
    pub peak_buffer_bytes: Option<u64>,
    /// The browser's device's live buffers under 4 MiB when the run starts (the weights'), and
    /// what Dawn's power-of-two suballocation would add to them by the wrapper's model
    /// ([`crate::destroying_device::Counts::live_small_slack_bytes`]); None where the device is
    /// not wrapped.
    #[serde(default)]
    pub small_buffers_at_start: Option<(u64, u64)>,
    /// CubeCL's count, and the wrapped device's live buffer bytes, at the end of each stage of
    /// the run, with the time from the run's start: to set against a memory trace taken
    /// outside (`nvidia-smi` in the GPU kit).
    #[serde(default)]
    pub memory_by_stage: Vec<MemoryPoint>,
    /// Each weight shape of the model multiplied on its own, with every kernel the device has.
    pub kernels: Vec<KernelTiming>,
    /// The GPU adapter the run used and the features its kernels could use (None on the CPU).
    #[serde(default)]
    pub adapter: Option<crate::device::Adapter>,
    /// Kernel dispatches of one decoded token (GPU backends; None on the CPU).
    #[serde(default)]
    pub dispatches_per_token: Option<u64>,
    /// Queue submissions one decoded token implies ([`Counts::submits`]).
    #[serde(default)]
    pub submits_per_token: Option<u64>,
    /// Launches per queue submission those submissions assume
    /// ([`launches::tasks_per_submit`]).
    #[serde(default)]
    pub tasks_per_submit: Option<u64>,
    /// Host reads of one decoded token.
    #[serde(default)]
    pub reads_per_token: Option<u64>,
    /// Kernel dispatches of one fast-mode question of a study whose image and prompt prefix
    /// are already on the device.
    #[serde(default)]
    pub dispatches_per_question: Option<u64>,
    /// Kernel dispatches per question when a study's questions are scored in one batched pass
    /// (what evaluation does).
    #[serde(default)]
    pub dispatches_per_question_batched: Option<f64>,
    /// Kernel dispatches of one image encode (vision tower and projector).
    #[serde(default)]
    pub dispatches_per_image: Option<u64>,
    /// Packed weight bytes one decoded token must read: the physical minimum of its traffic.
    #[serde(default)]
    pub weight_bytes_per_token: Option<u64>,
    /// Bytes the engine's kernels read and write for one decoded token (from their launch
    /// shapes; burn's own few kernels on that path, the argmax above all, are not counted).
    #[serde(default)]
    pub bytes_per_token: Option<u64>,
    /// The passes counted, by kernel.
    #[serde(default)]
    pub counts: Option<PassCounts>,
    /// Each kernel's device time in one decoded token, one prefill pass and one image encode
    /// ([`BenchOptions::profile`]; GPU backends).
    #[serde(default)]
    pub profile: Option<ProfileReport>,
}

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

/// What each pass asks of the device, counted by [`count_passes`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PassCounts {
    /// One decoded token (forward of one id with the KV cache, then greedy choice).
    pub token: Counts,
    /// The first fast-mode question of a study (its image already encoded).
    pub first_question: Option<Counts>,
    /// A later fast-mode question of the same study (the shared prefix cached).
    pub question: Option<Counts>,
    /// `questions` questions of a study scored in one batched pass.
    pub batched: Option<Counts>,
    /// Questions in the batched pass.
    pub questions: usize,
    /// One image encode.
    pub image: Option<Counts>,
}

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

async fn sync(model: &Model) -> Result<(), ModelError> {
    Ok(crate::device::sync(model.device()).await?)
}

/// Device memory reserved now (None on the CPU backend).
pub fn device_bytes(model: &Model) -> Option<u64> {
    model.device().memory_pool_usage().map(|u| u.bytes_reserved)
}

/// `n` token ids of a report-like filler sentence repeated after `<bos>`: a prompt of a chosen
/// length for the prefill figures.
pub fn filler_ids(model: &Model, n: usize) -> Vec<u32> {
    let filler = model.tokenizer.encode(
        " The heart size is normal and the lungs are clear.",
        false,
        false,
    );
    std::iter::once(model.tokenizer.bos())
        .chain(filler.iter().copied().cycle())
        .take(n)
        .collect()
}

/// The token ids of the bench's question `q` (an official prompt with four options, one image).
pub fn question_ids(model: &Model, q: usize) -> Result<Vec<u32>, ModelError> {
    let opts = [
        "A. Yes, there is a small effusion",
        "B. No, the pleura is normal",
        "C. There is a pneumothorax",
        "D. Cannot be determined",
    ]
    .map(String::from);
    let text = prompt::user_text(
        &format!("Question {q}: is there a pleural effusion on this radiograph?"),
        &opts,
        None,
    );
    model.tokenize_rendered(&prompt::chat(Some(prompt::SYSTEM), &text, 1), 1)
}

/// A prompt's token ids and the option letters it is scored on, as [`Session::score_many`]
/// takes them.
pub type Prompt = (Vec<u32>, Vec<Letter>);

/// Questions `qs` of [`question_ids`], each with every option letter: a study's prompts.
pub fn study_prompts(model: &Model, qs: std::ops::Range<usize>) -> Result<Vec<Prompt>, ModelError> {
    qs.map(|q| Ok((question_ids(model, q)?, Letter::ALL.to_vec())))
        .collect()
}

/// Counts the dispatches, reads and uploads of one decoded token, fast-mode questions and one
/// image encode (the last two need a vision tower), under a CubeCL dry run: every launch is
/// issued, counted and compiled as in a real run, then dropped, so a model too large to run on
/// a software adapter is counted in seconds. Nothing here branches on a computed value (a dry
/// run reads back whatever the buffers held), so the counts are those of a real run; the
/// `dry_runs_count_what_real_runs_do` test checks it. Empty counts on the CPU backend, which
/// launches nothing and is not run.
///
/// The dry run is process-wide (CubeCL keeps one count of open dry runs): while it lives, the
/// launches of every thread are dropped, so nothing else may compute on a GPU meanwhile.
pub async fn count_passes(model: &Model, questions: usize) -> Result<PassCounts, ModelError> {
    if !crate::device::queues_work(model.device()) {
        return Ok(PassCounts {
            questions,
            ..Default::default()
        });
    }
    let _dry = burn_cubecl::cubecl::dry_run::DryRun::new();
    count_passes_now(model, questions).await
}

/// [`count_passes`] with the launches executed (for checking the dry run against).
#[doc(hidden)]
pub async fn count_passes_now(model: &Model, questions: usize) -> Result<PassCounts, ModelError> {
    let mut pc = PassCounts {
        questions,
        ..Default::default()
    };
    let ids: Vec<u32> = std::iter::once(model.tokenizer.bos())
        .chain(
            model
                .tokenizer
                .encode(" The heart size is normal.", false, false),
        )
        .collect();
    let mut cache = model.decoder.new_cache();
    let hidden = model.prefill(&ids, &[], &mut cache)?;
    // The first decoded token also moves the prompt's keys into cache buffers with spare
    // positions (once per prompt); the one counted is the next, as every later token is.
    let next = model.decoder.greedy(
        model
            .decoder
            .forward_token(model.decoder.greedy(hidden), &mut cache),
    );
    // One token, read back as generation does at its end, so a read that the greedy choice
    // needs (the host argmax when the device one is off) is counted too.
    let c = launches::count();
    let next = model
        .decoder
        .next_token(model.decoder.forward_token(next, &mut cache))
        .await?;
    drop(next.into_data_async().await);
    launches::note_read();
    pc.token = c.finish();
    drop(cache);

    if let Some(vision) = model.vision.as_ref() {
        let size = vision.cfg.image_size;
        let pixels = vec![0.0f32; 3 * size * size];
        let c = launches::count();
        drop(model.encode_image(&pixels)?);
        pc.image = Some(c.finish());
        let mut session = Session::new(model);
        let f = session.add_image("count", &pixels)?;
        for q in 0..2 {
            let c = launches::count();
            session
                .score_options(
                    &question_ids(model, q)?,
                    std::slice::from_ref(&f),
                    &Letter::ALL,
                )
                .await?;
            let counts = Some(c.finish());
            if q == 0 {
                pc.first_question = counts;
            } else {
                pc.question = counts;
            }
        }
        // The batched study moves the same session on, as the evaluation does
        // (`Session::next_study`): a second session beside the first held both studies' pages.
        session.next_study();
        let f = session.add_image("count", &pixels)?;
        let prompts = study_prompts(model, 0..questions)?;
        let c = launches::count();
        session
            .score_many(&prompts, std::slice::from_ref(&f))
            .await?;
        pc.batched = Some(c.finish());
    }
    Ok(pc)
}

impl BenchReport {
    /// Fills the flat count figures from `pc` (GPU backends only: the CPU issues no launches).
    pub fn set_counts(&mut self, pc: PassCounts, weight_bytes_per_token: u64) {
        if pc.token.dispatches == 0 {
            return;
        }
        self.dispatches_per_token = Some(pc.token.dispatches);
        // Only a run that decoded has an issue time to share out (not `--counts-only`).
        self.host_us_per_dispatch = (self.decode_issue_ms_per_token > 0.0)
            .then(|| 1000.0 * self.decode_issue_ms_per_token / pc.token.dispatches as f64);
        self.submits_per_token = Some(pc.token.submits());
        self.tasks_per_submit = Some(launches::tasks_per_submit());
        self.reads_per_token = Some(pc.token.reads);
        self.dispatches_per_question = pc.question.as_ref().map(|c| c.dispatches);
        self.dispatches_per_question_batched = pc
            .batched
            .as_ref()
            .map(|c| c.dispatches as f64 / pc.questions.max(1) as f64);
        self.dispatches_per_image = pc.image.as_ref().map(|c| c.dispatches);
        self.weight_bytes_per_token = Some(weight_bytes_per_token);
        self.bytes_per_token = Some(pc.token.kernel_bytes);
        self.counts = Some(pc);
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
        // first held both studies' pages.
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
    // first launch, which timed decoding paid for (an H200's driver compiling them put 7.5 ms
    // of device time a token at 27-71 tok/s from run to run, 2026-11-27).
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
    // SwiftShader the read of the last id came back before the queued tokens had run (tiny
    // pair, 8 tokens: read at 60 ms, device idle at 1,827 ms; Gemma 3 270M, 6 tokens: 966 ms
    // and 17,261 ms; 2026-11-29, cause not found), which made short native decodes look up to
    // 10x faster than long ones and than the browser's, whose read does wait.
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
    // made pages of their own on top of those the timed stages left free (~700 MiB more at 4B
    // on an H200), so the free pages are given back before them, and theirs after.
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
            &mut |_, _| {},
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
    // scratch. A fresh session per study, with the first one's still alive, held pages no user
    // flow holds (the browser's pool +590 MiB over four cold studies at 4B on an H200).
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
    Ok(())
}
