//! Worker → UI: every event the engine worker sends the page.

use rexvqa_engine::compare::Comparison;
use rexvqa_engine::eval::Answer;
use rexvqa_engine::eval::export::ExportFile;
use rexvqa_engine::quiz::{Quiz, QuizReport, ReaderStudy, SavedQuiz};
use rexvqa_engine::rexvqa::{Letter, QuestionDetail, QuestionPage};
use serde::{Deserialize, Serialize};

use super::payloads::*;

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
    Cache(CacheListing),
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
    /// The worker's memory after a request.
    Memory(MemoryUse),
    /// The dataset was opened.
    Dataset(DatasetSummary),
    /// A page of questions.
    Questions(QuestionPage),
    /// One question.
    Question(QuestionDetail),
    /// The user's own images, decoded (pixels follow as images `own/<i>`). A struct variant:
    /// the internally tagged encoding cannot carry a bare sequence.
    OwnImages {
        /// One per opened file, in view order.
        images: Vec<OwnImage>,
    },
    /// How each of the user's images became the model's input, in view order (the inputs
    /// follow as images `own-input/<i>`).
    OwnInputs {
        /// The mapping in words, per image.
        how: Vec<String>,
        /// The inputs' side in pixels (the mmproj's image size: 896 for MedGemma).
        side: u32,
    },
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
        /// Whose answer.
        target: AskTarget,
        /// Letters.
        letters: Vec<Letter>,
        /// Probabilities.
        probs: Vec<f32>,
    },
    /// Text generated so far.
    AskText {
        /// Whose answer.
        target: AskTarget,
        /// The text so far.
        text: String,
    },
    /// An answer is complete.
    AskDone {
        /// Whose answer.
        target: AskTarget,
        /// The answer.
        answer: Answer,
    },
    /// A quiz ready to take.
    Quiz(Quiz),
    /// The quiz in progress read back from storage (none if there is none).
    SavedQuiz {
        /// Results so far and the current case.
        saved: Option<SavedQuiz>,
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
    Calibration(CalibrationProgress),
    /// A report (of a finished run, a partial run, or merged shards).
    Report(Box<RunReport>),
    /// Two runs compared.
    Comparison {
        /// The figures.
        comparison: Box<Comparison>,
        /// Its Markdown, CSV and JSON downloads, written in the worker (the CLI's bytes).
        exports: Vec<ExportFile>,
    },
    /// An export is ready to save.
    Export(ExportFile),
    /// A request failed.
    Error {
        /// What was being done.
        context: String,
        /// What went wrong, in words a user can act on.
        message: String,
    },
    /// The request is over: everything it had to say was posted before.
    Done,
    /// The WebGPU device was lost (driver reset, GPU process crash, GPU switch): the worker's
    /// model is gone and it cannot open another device, so the page starts a new worker.
    DeviceLost {
        /// The browser's reason and message.
        message: String,
    },
    /// The worker hit a bug (a Rust panic) and cannot go on: the page must be reloaded.
    Fatal {
        /// The panic's message and place.
        message: String,
    },
}
