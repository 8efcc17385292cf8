//! What a benchmark run reports: [`BenchReport`], the JSON of `rexvqa bench` and of the app's
//! Benchmark card.

use serde::{Deserialize, Serialize};

use super::counts::PassCounts;
use super::kernels::KernelTiming;
use super::profile::ProfileReport;
use crate::launches;

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
    /// compile still pending, which can leave it several times below the steady figure at the
    /// first length of a process (`bench/results/h200-browser-vs-native.json`).
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
    /// Official-mode questions per second with a study's questions batched and each reply
    /// decoded to [`super::counts::OFFICIAL_TOKENS`] tokens (where real replies settle their
    /// letter): against `fast_questions_per_s_batched`, what official mode costs over fast.
    #[serde(default)]
    pub official_questions_per_s_batched: f64,
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
    /// to a garbage collection seconds later (at 4B the Benchmark gives back hundreds of MB
    /// during its run: `bench/results/ci-vm-2core-browser-pool-releases-dry-run.json`).
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
    /// The kernel forms and pools the run was tuned to ([`crate::tuning`]; the default: the
    /// automatic choice).
    #[serde(default)]
    pub tuning: crate::tuning::Tuning,
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
    /// Kernel dispatches per question of a study's official questions batched: the prefill
    /// pass shared out, then each reply's own tokens (to [`super::counts::OFFICIAL_TOKENS`]).
    #[serde(default)]
    pub dispatches_per_official_question_batched: Option<f64>,
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
        self.dispatches_per_official_question_batched = pc
            .official_batched
            .as_ref()
            .map(|c| c.dispatches as f64 / pc.questions.max(1) as f64);
        self.dispatches_per_image = pc.image.as_ref().map(|c| c.dispatches);
        self.weight_bytes_per_token = Some(weight_bytes_per_token);
        self.bytes_per_token = Some(pc.token.kernel_bytes);
        self.counts = Some(pc);
    }
}
