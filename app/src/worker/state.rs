//! What the worker holds between requests: the loaded model, the opened dataset, the running
//! evaluation and unpacking, and the compute choice. Each job module reads and changes it
//! through [`with`]; no borrow is held across an `await`.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use rexvqa_engine::eval::{Clock, ImageStore};
use rexvqa_engine::picture::Picture;
use rexvqa_engine::rexvqa::Split;
use rexvqa_engine::session::{Model, StudyCache};
use wasm_bindgen::JsCast;
use web_sys::File;

use super::error::WorkerError;
use crate::io::{now_ms, read_blob};
use crate::protocol::{Compute, DatasetSummary};
use crate::unpack::{self, ImageIndex};

/// One of the user's own files that decoded (kept in memory only).
pub struct Opened {
    /// The file's bytes.
    pub bytes: Vec<u8>,
    /// What it decoded to.
    pub picture: Picture,
}

/// Controls of the running evaluation, read between groups of questions.
pub struct EvalCtl {
    /// Wait after the current group.
    pub paused: Cell<bool>,
    /// Stop after the current group.
    pub cancelled: Cell<bool>,
}

/// A WebGPU adapter the worker found.
#[derive(Debug, Clone, PartialEq)]
pub struct Adapter {
    /// Its name, for the page.
    pub name: String,
    /// Whether it is a software rasteriser (slower than the CPU path).
    pub software: bool,
}

/// What the last WebGPU probe found.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Probe {
    /// Not probed yet.
    #[default]
    NotYet,
    /// WebGPU is unusable.
    NoAdapter,
    /// This adapter.
    Found(Adapter),
}

/// The loaded model and how it was loaded.
pub struct Loaded {
    /// The model.
    pub model: Rc<Model>,
    /// Its files, as runs name them (`text + mmproj`).
    pub name: String,
    /// Where it runs, in words.
    pub compute: String,
    /// ("text model SHA-256", hex) and the mmproj's, for reports.
    pub sha256: Vec<(String, String)>,
}

/// The worker's state.
#[derive(Default)]
pub struct State {
    /// The loaded model.
    pub loaded: Option<Loaded>,
    /// The opened folder's files by path.
    pub files: Rc<HashMap<String, File>>,
    /// Images unpacked from archives into browser storage.
    pub unpacked: Rc<ImageIndex>,
    /// Set to stop the unpacking in progress.
    pub unpack_cancel: Option<Rc<Cell<bool>>>,
    /// The opened folder's counts (missing images are recomputed from it).
    pub summary: DatasetSummary,
    /// Open splits by name.
    pub splits: BTreeMap<String, Rc<Split>>,
    /// The running evaluation.
    pub eval: Option<Rc<EvalCtl>>,
    /// Where the next model loads.
    pub compute: Compute,
    /// The last WebGPU probe.
    pub probe: Probe,
    /// The last asked study (split and study key) and what its questions share: a second
    /// question reuses the first's image features and prompt prefix instead of encoding again.
    pub study: Option<(String, StudyCache)>,
    /// The user's own images (bytes and decoded pictures; memory only, never stored).
    pub own: Vec<Opened>,
    /// What questions about the user's images share (image features, prompt prefix), under
    /// the policy that made it: the prompt prefix's KV state holds that policy's image
    /// features, and the same question under another policy has the same tokens.
    pub own_cache: Option<(rexvqa_engine::image::Policy, StudyCache)>,
    /// Debug builds' test hook: journals refuse to grow past this many bytes, as a full disk
    /// would (a short write, then a refusal).
    pub journal_cap: Option<u64>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

/// Runs `f` on the state.
pub fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
    STATE.with(|s| f(&mut s.borrow_mut()))
}

/// The loaded model.
pub fn model() -> Result<Rc<Model>, WorkerError> {
    with(|s| s.loaded.as_ref().map(|l| l.model.clone())).ok_or(WorkerError::NoModel)
}

/// An open split.
pub fn split(name: &str) -> Result<Rc<Split>, WorkerError> {
    with(|s| s.splits.get(name).cloned()).ok_or_else(|| WorkerError::SplitNotOpen(name.to_string()))
}

/// Refuses work that must not run beside an evaluation.
pub fn no_eval_running(what: &str) -> Result<(), WorkerError> {
    if with(|s| s.eval.is_some()) {
        return Err(WorkerError::Busy(format!(
            "an evaluation is running: {what} before or after it"
        )));
    }
    Ok(())
}

/// The opened folder's files, then the images unpacked from archives.
pub struct FileStore(Rc<HashMap<String, File>>, Rc<ImageIndex>);

impl FileStore {
    /// The files as they are now.
    pub fn current() -> Self {
        with(|s| FileStore(s.files.clone(), s.unpacked.clone()))
    }

    /// Whether an image (path relative to the dataset root) is at hand.
    pub fn has(&self, path: &str) -> bool {
        self.0.contains_key(path) || self.1.contains(path)
    }
}

impl ImageStore for FileStore {
    async fn read(&self, path: &str) -> Result<Vec<u8>, String> {
        match self.0.get(path) {
            Some(f) => read_blob(f).await,
            None if self.1.contains(path) => unpack::read_image(&self.1, path).await,
            None => Err(format!(
                "{path} is not in the opened folder nor among the unpacked images"
            )),
        }
    }
}

/// `performance.now()`.
pub struct PerfClock;

impl Clock for PerfClock {
    fn now_ms(&self) -> f64 {
        now_ms()
    }
}

/// The worker's WebAssembly memory in bytes; it never shrinks, so this is also its peak.
pub fn wasm_heap_bytes() -> Option<f64> {
    wasm_bindgen::memory()
        .dyn_into::<js_sys::WebAssembly::Memory>()
        .ok()
        .and_then(|m| m.buffer().dyn_into::<js_sys::ArrayBuffer>().ok())
        .map(|b| f64::from(b.byte_length()))
}
