//! Messages between the UI thread and the engine worker. Each message is a JS object
//! `{ json: "<tagged JSON>", files?: [File], buffer?: ArrayBuffer }`; files and pixel buffers
//! travel beside the JSON because they cannot be serialised into it.

use std::collections::BTreeMap;

use rexvqa_engine::calibrate::Projection;
use rexvqa_engine::eval::{Answer, EvalReport, Settings};
use rexvqa_engine::image::Policy;
use rexvqa_engine::quiz::{Quiz, QuizReport, QuizResults, QuizSettings, ReaderStudy};
use rexvqa_engine::rexvqa::{Letter, Scope, SplitSummary};
use rexvqa_engine::session::Mode;
use serde::{Deserialize, Serialize};

/// Public MedGemma 4B GGUF locations, prefilled in the download form (used only on request).
pub const DEFAULT_TEXT_URL: &str =
    "https://huggingface.co/unsloth/medgemma-4b-it-GGUF/resolve/main/medgemma-4b-it-Q4_K_M.gguf";
/// The matching mmproj.
pub const DEFAULT_MMPROJ_URL: &str =
    "https://huggingface.co/unsloth/medgemma-4b-it-GGUF/resolve/main/mmproj-F16.gguf";

/// UI → worker.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    /// Probe WebGPU and report the adapter.
    ProbeGpu,
    /// List models and evaluation runs kept in browser storage.
    ListCache,
    /// Copy the attached files (text GGUF first, then the optional mmproj) into browser storage
    /// and load them.
    ImportModel,
    /// Download both files into browser storage (resumable) and load them.
    DownloadModel {
        /// Text GGUF URL.
        text_url: String,
        /// mmproj GGUF URL.
        mmproj_url: String,
    },
    /// Choose where models run from the next load on.
    SetCompute {
        /// The choice.
        compute: Compute,
    },
    /// Load a stored pair.
    LoadModel {
        /// Stored text GGUF name.
        text: String,
        /// Stored mmproj name.
        mmproj: Option<String>,
    },
    /// Delete a stored file.
    DeleteModel {
        /// Stored file name.
        name: String,
    },
    /// Open a ReXVQA folder: `paths` are the attached files' paths relative to the chosen folder.
    /// Attached image-archive parts (`deid_png.partNN`, `*.tar.zst`) are unpacked into browser
    /// storage afterwards (only the images the open splits reference, when a split is open).
    OpenDataset {
        /// One path per attached file.
        paths: Vec<String>,
    },
    /// A page of questions matching a filter.
    ListQuestions {
        /// Split name.
        split: String,
        /// Text to find in id, question, study or options.
        query: String,
        /// Task name filter.
        task: Option<String>,
        /// Category filter.
        category: Option<String>,
        /// First row.
        offset: usize,
        /// Rows.
        limit: usize,
    },
    /// One question's details.
    GetQuestion {
        /// Split name.
        split: String,
        /// Question id.
        id: String,
    },
    /// Decoded 16-bit pixels of an image (for window/level display).
    GetImage {
        /// Path relative to the dataset root.
        path: String,
    },
    /// Answer a question.
    Ask {
        /// Split name.
        split: String,
        /// Question id.
        id: String,
        /// fast or official.
        mode: Mode,
        /// 16→8-bit policy.
        policy: Policy,
        /// All views instead of the first image.
        all_images: bool,
    },
    /// A free-form question about a question's study (streamed answer).
    AskFree {
        /// Split name.
        split: String,
        /// Question id whose study is shown.
        id: String,
        /// The user's question.
        text: String,
        /// 16→8-bit policy.
        policy: Policy,
        /// All views instead of the first image.
        all_images: bool,
    },
    /// Start an evaluation run.
    EvalStart {
        /// Split name.
        split: String,
        /// Which questions.
        scope: Scope,
        /// How.
        settings: Settings,
    },
    /// Resume a stored run (the dataset and model must be open).
    EvalResume {
        /// Run id.
        run_id: String,
    },
    /// Pause the running evaluation after the current question.
    EvalPause,
    /// Continue a paused evaluation.
    EvalContinue,
    /// Stop the running evaluation (answers so far stay in the journal).
    EvalCancel,
    /// Report of a stored run (finished or not).
    RunReport {
        /// Run id.
        run_id: String,
    },
    /// Export a run.
    Export {
        /// Run id.
        run_id: String,
        /// leaderboard, csv, markdown or report.
        format: String,
    },
    /// Draw a quiz from an open split.
    MakeQuiz {
        /// Split name.
        split: String,
        /// How to draw it.
        settings: QuizSettings,
    },
    /// Open a shared quiz file (its text) against an open split.
    OpenQuiz {
        /// Split name.
        split: String,
        /// The quiz file.
        json: String,
    },
    /// Keep the quiz in progress in browser storage (results JSON and the current case).
    SaveQuiz {
        /// The results so far.
        results: QuizResults,
        /// Index of the case on screen.
        position: usize,
    },
    /// Read the quiz in progress back, if any.
    LoadQuiz,
    /// Forget the quiz in progress.
    ClearQuiz,
    /// Score a student's results; `export` = "csv", "markdown" or "json" also saves that file.
    QuizReport {
        /// Split name.
        split: String,
        /// The results.
        results: QuizResults,
        /// Also save this export.
        export: Option<String>,
    },
    /// Merge several students' result files (name, text) into a reader-study table.
    ReaderStudy {
        /// Split name.
        split: String,
        /// (file name, JSON text).
        files: Vec<(String, String)>,
    },
    /// Merge the attached leaderboard prediction files (shards) against a split.
    MergeShards {
        /// Split name.
        split: String,
        /// File names, one per attached file.
        names: Vec<String>,
    },
    /// Time a few questions (whole studies) and project the scope's and the split's run time.
    Calibrate {
        /// Split name.
        split: String,
        /// The scope to project.
        scope: Scope,
        /// How it would run.
        settings: Settings,
    },
    /// Run the benchmark harness (the one `rexvqa bench` runs) on the loaded model.
    Bench {
        /// Prompt lengths for the prefill figure.
        prefill: Vec<usize>,
        /// Tokens to decode.
        decode: usize,
        /// Generation cap of the official-mode question.
        official_max_tokens: usize,
    },
    /// Stop unpacking the image archive (what is unpacked stays).
    UnpackCancel,
    /// Delete the images unpacked from archives.
    DeleteUnpacked,
    /// Delete a stored run.
    DeleteRun {
        /// Run id.
        run_id: String,
    },
}

/// What the worker found about WebGPU.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct AdapterReport {
    /// `vendor`, `architecture`, `device`, `description` joined for display.
    pub name: String,
    /// GPUAdapterInfo.vendor.
    pub vendor: String,
    /// GPUAdapterInfo.architecture.
    pub architecture: String,
    /// Whether the browser gave a software (fallback) adapter.
    pub fallback: bool,
    /// Whether `shader-f16` is available.
    pub shader_f16: bool,
    /// Whether `subgroups` is available.
    pub subgroups: bool,
    /// maxBufferSize in bytes.
    pub max_buffer_size: f64,
    /// maxStorageBufferBindingSize in bytes.
    pub max_storage_binding: f64,
    /// maxComputeWorkgroupStorageSize in bytes.
    pub max_workgroup_storage: f64,
    /// maxComputeInvocationsPerWorkgroup.
    pub max_invocations: f64,
    /// Every feature name the adapter lists.
    pub features: Vec<String>,
    /// Whether a device with the adapter's limits was created.
    pub device_ok: bool,
}

/// A file kept in browser storage.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StoredFile {
    /// Name in storage.
    pub name: String,
    /// Bytes stored.
    pub size: u64,
    /// Expected size (complete when equal).
    pub expected: u64,
    /// `gemma3`, `clip` or what the header says (empty when unreadable).
    pub architecture: String,
}

/// An evaluation run kept in browser storage.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunInfo {
    /// Run id.
    pub run_id: String,
    /// Split name.
    pub split: String,
    /// Scope.
    pub scope: Scope,
    /// Settings.
    pub settings: Settings,
    /// Questions answered.
    pub answered: usize,
    /// Questions in scope (0 when unknown).
    pub total: usize,
    /// Whether every question was answered.
    pub finished: bool,
    /// Models used.
    pub model: String,
    /// Creation time (ms since epoch).
    pub created_ms: f64,
}

/// What a loaded model is.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct ModelCard {
    /// Text file name.
    pub text: String,
    /// mmproj file name.
    pub mmproj: Option<String>,
    /// `general.name` of the text file.
    pub name: String,
    /// Parameters (weights) in both files.
    pub parameters: u64,
    /// Bytes of both files.
    pub bytes: u64,
    /// Tensor count per type.
    pub types: BTreeMap<String, u64>,
    /// Decoder layers, width, heads.
    pub layers: usize,
    /// Decoder width.
    pub hidden: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Vision tower present.
    pub vision: bool,
    /// Seconds the load took.
    pub load_s: f64,
    /// Where the model runs, and why, in words.
    pub compute: String,
    /// (label, SHA-256 hex) of each file.
    pub sha256: Vec<(String, String)>,
}

/// Where the model runs.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Compute {
    /// WebGPU on a hardware adapter; the CPU when the browser offers none or only a software
    /// rasteriser (SwiftShader, llvmpipe), which is many times slower than the CPU path.
    #[default]
    Auto,
    /// WebGPU, whatever the adapter.
    Webgpu,
    /// The CPU (WebAssembly).
    Cpu,
}

impl Compute {
    /// Every choice with its label, for a select.
    pub const ALL: [(Compute, &'static str, &'static str); 3] = [
        (Compute::Auto, "auto", "Automatic (GPU if it is a real one)"),
        (Compute::Webgpu, "webgpu", "WebGPU"),
        (Compute::Cpu, "cpu", "CPU (WebAssembly)"),
    ];

    /// The short key (`auto`, `webgpu`, `cpu`).
    pub fn key(self) -> &'static str {
        Compute::ALL
            .iter()
            .find(|(c, _, _)| *c == self)
            .map_or("auto", |(_, k, _)| k)
    }

    /// The choice with this key.
    pub fn from_key(key: &str) -> Option<Compute> {
        Compute::ALL
            .iter()
            .find(|(_, k, _)| *k == key)
            .map(|(c, _, _)| *c)
    }
}

/// One question in a list.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QuestionRow {
    /// Question id.
    pub id: String,
    /// Study key.
    pub study: String,
    /// Task name.
    pub task: String,
    /// Category.
    pub category: String,
    /// Question text.
    pub question: String,
}

/// One image of a question.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ImageRef {
    /// Path relative to the dataset root (empty when it cannot be resolved).
    pub path: String,
    /// View position (PA, AP, LATERAL...).
    pub view: String,
    /// Whether the file was found in the opened folder.
    pub present: bool,
}

/// A question with everything the viewer shows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QuestionDetail {
    /// Split.
    pub split: String,
    /// Question id.
    pub id: String,
    /// Study key.
    pub study: String,
    /// Task.
    pub task: String,
    /// Category.
    pub category: String,
    /// Question text.
    pub question: String,
    /// Options as written.
    pub options: Vec<String>,
    /// Ground truth.
    pub correct: Option<Letter>,
    /// Reference explanation.
    pub explanation: Option<String>,
    /// The study's images.
    pub images: Vec<ImageRef>,
}

/// What the opened folder holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct DatasetSummary {
    /// Per split file: its counts.
    pub splits: BTreeMap<String, SplitSummary>,
    /// Per split: referenced images absent from the folder.
    pub missing_images: BTreeMap<String, usize>,
    /// PNG files found.
    pub png_files: usize,
    /// Problems found while reading (unreadable split files...).
    pub warnings: Vec<String>,
    /// Images unpacked from archives into browser storage.
    #[serde(default)]
    pub unpacked_images: usize,
}

/// Progress of unpacking an image archive into browser storage.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct UnpackProgress {
    /// Compressed bytes read.
    pub done_bytes: u64,
    /// Compressed bytes in all parts.
    pub total_bytes: u64,
    /// Images written this time.
    pub written: usize,
    /// Wanted images already unpacked before (kept).
    pub kept: usize,
    /// Compressed bytes per second.
    pub rate: f64,
    /// Seconds left at that rate.
    pub eta_s: f64,
    /// running, cancelled or finished.
    pub state: String,
}

/// Live progress of a run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EvalProgress {
    /// Run id.
    pub run_id: String,
    /// Answered (including before a resume).
    pub done: usize,
    /// In scope.
    pub total: usize,
    /// Questions per second in this session.
    pub rate: f64,
    /// Seconds left at that rate.
    pub eta_s: f64,
    /// Per task: (correct, answered with ground truth).
    pub per_task: BTreeMap<String, (usize, usize)>,
    /// running, paused, cancelled or finished.
    pub state: String,
}

/// Worker → UI.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// The worker has started and can take requests.
    Ready,
    /// WebGPU works; here is the adapter.
    Gpu(AdapterReport),
    /// WebGPU is unusable, with a plain explanation.
    GpuUnavailable {
        /// What the browser lacks, in words a user can act on.
        reason: String,
    },
    /// Stored models and runs.
    Cache {
        /// Stored files.
        models: Vec<StoredFile>,
        /// Stored runs.
        runs: Vec<RunInfo>,
        /// Bytes used / quota, when the browser tells.
        usage: Option<(f64, f64)>,
    },
    /// A file is being copied or downloaded into storage.
    Copy {
        /// File name.
        name: String,
        /// Bytes done.
        done: u64,
        /// Bytes in all.
        total: u64,
        /// Bytes per second.
        rate: f64,
    },
    /// Weights are being loaded onto the GPU.
    Loading {
        /// Bytes done.
        done: u64,
        /// Bytes in all.
        total: u64,
        /// Tensor being loaded.
        tensor: String,
    },
    /// A model is ready.
    ModelLoaded(ModelCard),
    /// The worker's WebAssembly memory after a request: it never shrinks, so this is its peak.
    Memory {
        /// `WebAssembly.Memory` buffer size in bytes.
        wasm_bytes: f64,
        /// Device memory the loaded model's pool holds (weights, caches, activations), if any.
        device_bytes: Option<f64>,
    },
    /// The dataset was opened.
    Dataset(DatasetSummary),
    /// A page of questions.
    Questions {
        /// Rows matching the filter.
        total: usize,
        /// This page.
        items: Vec<QuestionRow>,
        /// Task names present.
        tasks: Vec<String>,
        /// Categories present.
        categories: Vec<String>,
    },
    /// One question.
    Question(QuestionDetail),
    /// Pixels of an image follow in `buffer` (u16 samples, channels interleaved).
    Image {
        /// Path.
        path: String,
        /// Width.
        width: u32,
        /// Height.
        height: u32,
        /// 8 or 16.
        bits: u8,
        /// 1 or 3.
        channels: u8,
    },
    /// Option probabilities of an answer.
    AskScores {
        /// Question id.
        id: String,
        /// Letters.
        letters: Vec<Letter>,
        /// Probabilities.
        probs: Vec<f32>,
    },
    /// Text generated so far.
    AskText {
        /// Question id (or "free").
        id: String,
        /// The text so far.
        text: String,
    },
    /// An answer is complete.
    AskDone {
        /// Question id.
        id: String,
        /// The answer.
        answer: Answer,
    },
    /// A quiz ready to take.
    Quiz(Quiz),
    /// The quiz in progress read back from storage (none if there is none).
    SavedQuiz {
        /// Results so far and the current case.
        saved: Option<(QuizResults, usize)>,
    },
    /// A student's scored results.
    QuizReport(Box<QuizReport>),
    /// A reader-study table.
    ReaderStudy(ReaderStudy),
    /// Progress of the running evaluation.
    EvalProgress(EvalProgress),
    /// Progress of unpacking an image archive.
    Unpack(UnpackProgress),
    /// Benchmark results: the JSON `rexvqa bench` writes, plus browser facts.
    Bench {
        /// The JSON text.
        json: String,
    },
    /// Progress and result of a calibration run.
    Calibration {
        /// Questions timed so far.
        done: usize,
        /// Questions to time.
        total: usize,
        /// Projection for the chosen scope, then for the whole split (when finished).
        projections: Option<(Projection, Projection)>,
    },
    /// A report (of a finished run, a partial run, or merged shards).
    Report {
        /// Run id (or "merged").
        run_id: String,
        /// The report.
        report: EvalReport,
        /// Questions of the split no file answered (merge only).
        missing: usize,
    },
    /// An export is ready to save.
    Export {
        /// Suggested file name.
        name: String,
        /// MIME type.
        mime: String,
        /// The content.
        text: String,
    },
    /// A request failed.
    Error {
        /// What was being done.
        context: String,
        /// What went wrong, in words a user can act on.
        message: String,
    },
}

impl Request {
    /// JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("requests always serialise")
    }
}

impl Event {
    /// JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("events always serialise")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_as_tagged_json() {
        let e = Event::GpuUnavailable {
            reason: "no".into(),
        };
        assert_eq!(e.to_json(), r#"{"type":"gpu_unavailable","reason":"no"}"#);
        assert_eq!(serde_json::from_str::<Event>(&e.to_json()).unwrap(), e);
        assert_eq!(
            serde_json::from_str::<Request>(r#"{"type":"probe_gpu"}"#).unwrap(),
            Request::ProbeGpu
        );
        let r = Request::EvalStart {
            split: "test".into(),
            scope: Scope::Stratified {
                per_task: 2,
                seed: 7,
            },
            settings: Settings::default(),
        };
        assert_eq!(serde_json::from_str::<Request>(&r.to_json()).unwrap(), r);
    }
}
