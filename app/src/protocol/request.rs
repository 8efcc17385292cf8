//! UI → worker: every request the page can make of the engine worker.

use rexvqa_engine::eval::Settings;
use rexvqa_engine::eval::export::RunExport;
use rexvqa_engine::image::Policy;
use rexvqa_engine::quiz::{QuizExport, QuizResults, QuizSettings, SavedQuiz};
use rexvqa_engine::rexvqa::{QuestionFilter, Scope};
use rexvqa_engine::session::Mode;
use serde::{Deserialize, Serialize};

use super::payloads::*;

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
        /// Which questions.
        filter: QuestionFilter,
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
    /// Decode the attached image files (PNG, JPEG, DICOM) as one study of the user's own;
    /// `names` are the files' names (a `.dcm` name must hold DICOM).
    OpenOwnImages {
        /// One name per attached file.
        names: Vec<String>,
    },
    /// The model's 8-bit inputs of the user's images under a policy (shown as images
    /// `own-input/<i>`), with how each was made.
    OwnInputs {
        /// 16→8-bit policy.
        policy: Policy,
    },
    /// A question about the user's images: multiple choice (2–4 options, fast or official)
    /// or free (no options; streamed).
    AskOwn {
        /// The question.
        question: String,
        /// The options (empty for a free question).
        options: Vec<String>,
        /// fast or official (multiple choice only).
        mode: Mode,
        /// 16→8-bit policy.
        policy: Policy,
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
        /// The format.
        format: RunExport,
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
        /// The results so far and the case on screen.
        saved: SavedQuiz,
    },
    /// Read the quiz in progress back, if any.
    LoadQuiz,
    /// Forget the quiz in progress.
    ClearQuiz,
    /// Score a student's results, and save them in a format when one is given.
    QuizReport {
        /// Split name.
        split: String,
        /// The results.
        results: QuizResults,
        /// Also save this export.
        export: Option<QuizExport>,
    },
    /// Debug builds only: make the worker panic, to test that the page says so (a release
    /// worker answers with an error instead).
    TestPanic,
    /// Debug builds only: make one kernel form give wrong results and forget the kept self-test
    /// verdicts, to test that the next WebGPU load's self-test catches it and avoids the form.
    TestInjectFault {
        /// The form's snake-case name (`naive`, `gemv`, `fused_attention`, …).
        form: String,
    },
    /// Debug builds only: cap run journals at this many bytes (None: no cap), to test a
    /// journal write refused for lack of space.
    TestJournalCap {
        /// The cap in bytes.
        bytes: Option<u64>,
    },
    /// Debug builds only: destroy the WebGPU device, as a driver reset loses it, to test that
    /// the page recovers.
    TestLoseDevice,
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
    /// Compare two runs; the sides that are files come attached, A's first.
    CompareRuns {
        /// Run A.
        a: CompareSide,
        /// Run B (differences are B − A).
        b: CompareSide,
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
        /// Input row counts of the per-matrix kernel timings (empty: none), as
        /// `rexvqa bench --kernel-rows`.
        #[serde(default = "default_kernel_rows")]
        kernel_rows: Vec<usize>,
        /// Time every launch of a token, a prefill pass and an image encode on its own, as
        /// `rexvqa bench --profile` (the JSON's `profile`).
        #[serde(default)]
        profile: bool,
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

/// The kernel timings' input rows when a request names none: one row (decode) and 256 (prefill).
fn default_kernel_rows() -> Vec<usize> {
    vec![1, 256]
}

impl Request {
    /// The request's name, as errors name what was being done.
    pub fn name(&self) -> &'static str {
        match self {
            Request::ProbeGpu => "ProbeGpu",
            Request::ListCache => "ListCache",
            Request::ImportModel => "ImportModel",
            Request::DownloadModel { .. } => "DownloadModel",
            Request::SetCompute { .. } => "SetCompute",
            Request::LoadModel { .. } => "LoadModel",
            Request::DeleteModel { .. } => "DeleteModel",
            Request::OpenDataset { .. } => "OpenDataset",
            Request::ListQuestions { .. } => "ListQuestions",
            Request::GetQuestion { .. } => "GetQuestion",
            Request::GetImage { .. } => "GetImage",
            Request::OpenOwnImages { .. } => "OpenOwnImages",
            Request::OwnInputs { .. } => "OwnInputs",
            Request::AskOwn { .. } => "AskOwn",
            Request::Ask { .. } => "Ask",
            Request::AskFree { .. } => "AskFree",
            Request::EvalStart { .. } => "EvalStart",
            Request::EvalResume { .. } => "EvalResume",
            Request::EvalPause => "EvalPause",
            Request::EvalContinue => "EvalContinue",
            Request::EvalCancel => "EvalCancel",
            Request::RunReport { .. } => "RunReport",
            Request::Export { .. } => "Export",
            Request::MakeQuiz { .. } => "MakeQuiz",
            Request::OpenQuiz { .. } => "OpenQuiz",
            Request::SaveQuiz { .. } => "SaveQuiz",
            Request::LoadQuiz => "LoadQuiz",
            Request::ClearQuiz => "ClearQuiz",
            Request::QuizReport { .. } => "QuizReport",
            Request::ReaderStudy { .. } => "ReaderStudy",
            Request::TestPanic => "TestPanic",
            Request::TestInjectFault { .. } => "TestInjectFault",
            Request::TestJournalCap { .. } => "TestJournalCap",
            Request::TestLoseDevice => "TestLoseDevice",
            Request::MergeShards { .. } => "MergeShards",
            Request::CompareRuns { .. } => "CompareRuns",
            Request::Calibrate { .. } => "Calibrate",
            Request::Bench { .. } => "Bench",
            Request::UnpackCancel => "UnpackCancel",
            Request::DeleteUnpacked => "DeleteUnpacked",
            Request::DeleteRun { .. } => "DeleteRun",
        }
    }
}
