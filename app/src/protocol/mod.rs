//! Messages between the UI thread and the engine worker. Each message is a JS object
//! `{ json: "<JSON>", files?: [File], buffer?: ArrayBuffer }`; files and pixel buffers travel
//! beside the JSON because they cannot be serialised into it. The UI sends a [`Call`] (a
//! [`Request`] with a fresh [`RequestId`]); the worker answers with [`Reply`]s carrying that id,
//! errors included, and a final [`Event::Done`], so the UI knows which request an event ends.
//! Just over 500 lines: the two message enums are the whole contract, kept in one file to read
//! side by side; what they carry is in [`payloads`].

mod payloads;

use rexvqa_engine::compare::Comparison;
use rexvqa_engine::eval::export::{ExportFile, RunExport};
use rexvqa_engine::eval::{Answer, Settings};
use rexvqa_engine::image::Policy;
use rexvqa_engine::quiz::{
    Quiz, QuizExport, QuizReport, QuizResults, QuizSettings, ReaderStudy, SavedQuiz,
};
use rexvqa_engine::rexvqa::{Letter, QuestionDetail, QuestionFilter, QuestionPage, Scope};
use rexvqa_engine::session::Mode;
use serde::{Deserialize, Serialize};

pub use payloads::*;

/// Public MedGemma 4B GGUF locations, prefilled in the download form (used only on request).
pub const DEFAULT_TEXT_URL: &str =
    "https://huggingface.co/unsloth/medgemma-4b-it-GGUF/resolve/main/medgemma-4b-it-Q4_K_M.gguf";
/// The matching mmproj.
pub const DEFAULT_MMPROJ_URL: &str =
    "https://huggingface.co/unsloth/medgemma-4b-it-GGUF/resolve/main/mmproj-F16.gguf";

/// Names one request; every event answering it carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestId(pub u64);

/// UI → worker: a request and its id.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Call {
    /// Fresh for each call.
    pub id: RequestId,
    /// What to do.
    pub request: Request,
}

/// Worker → UI: an event and the request it answers (none for [`Event::Ready`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Reply {
    /// The request answered.
    pub id: Option<RequestId>,
    /// What happened.
    pub event: Event,
}

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

impl Call {
    /// JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("requests always serialise")
    }
}

impl Reply {
    /// JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("events always serialise")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_replies_round_trip_as_json_with_their_request_id() {
        let e = Reply {
            id: Some(RequestId(4)),
            event: Event::GpuUnavailable {
                reason: "no".into(),
            },
        };
        assert_eq!(
            e.to_json(),
            r#"{"id":4,"event":{"type":"gpu_unavailable","reason":"no"}}"#
        );
        assert_eq!(serde_json::from_str::<Reply>(&e.to_json()).unwrap(), e);
        assert_eq!(
            serde_json::from_str::<Call>(r#"{"id":1,"request":{"type":"probe_gpu"}}"#).unwrap(),
            Call {
                id: RequestId(1),
                request: Request::ProbeGpu
            }
        );
        let r = Call {
            id: RequestId(2),
            request: Request::EvalStart {
                split: "test".into(),
                scope: Scope::Stratified {
                    per_task: 2,
                    seed: 7,
                },
                settings: Settings::default(),
            },
        };
        assert_eq!(serde_json::from_str::<Call>(&r.to_json()).unwrap(), r);
        let ready = Reply {
            id: None,
            event: Event::Ready,
        };
        assert_eq!(ready.to_json(), r#"{"id":null,"event":{"type":"ready"}}"#);
        // The own-images events hold lists: they must still serialise and come back.
        for event in [
            Event::OwnImages {
                images: vec![OwnImage {
                    name: "a.dcm".into(),
                    path: None,
                    info: None,
                    view_window: None,
                    inverted: true,
                    identifying: Vec::new(),
                    error: Some("the file is empty (0 bytes)".into()),
                }],
            },
            Event::OwnInputs {
                how: vec!["window (center 2048, width 3000)".into()],
                side: 896,
            },
        ] {
            let r = Reply { id: None, event };
            assert_eq!(serde_json::from_str::<Reply>(&r.to_json()).unwrap(), r);
        }
    }

    #[test]
    fn typed_fields_travel_as_the_names_the_page_shows() {
        let ask = Event::AskText {
            target: AskTarget::Free,
            text: "x".into(),
        };
        assert_eq!(
            serde_json::to_string(&ask).unwrap(),
            r#"{"type":"ask_text","target":{"kind":"free"},"text":"x"}"#
        );
        let export = Request::Export {
            run_id: "run-1".into(),
            format: RunExport::Csv,
        };
        assert!(
            serde_json::to_string(&export)
                .unwrap()
                .contains(r#""format":"csv""#)
        );
        for s in [
            RunState::Running,
            RunState::Paused,
            RunState::Cancelled,
            RunState::Finished,
        ] {
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.as_str())
            );
        }
        for s in [
            UnpackState::Running,
            UnpackState::Cancelled,
            UnpackState::Finished,
            UnpackState::Stopped,
        ] {
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.as_str())
            );
        }
        assert!(RunState::Paused.is_live() && !RunState::Finished.is_live());
    }

    #[test]
    fn errors_name_the_request_by_its_variant() {
        assert_eq!(Request::ImportModel.name(), "ImportModel");
        let open = Request::OpenDataset { paths: vec![] };
        assert_eq!(open.name(), "OpenDataset");
        assert_eq!(Request::EvalPause.name(), "EvalPause");
    }
}
