//! The UI's handle on the engine worker: starts it, sends requests (each with a fresh id), and
//! turns its events into signals the panels read. Components get this handle from context; none
//! owns engine state. Events are applied in [`events`].

mod events;
mod recovery;

pub use recovery::{DeviceLoss, RecoveryState};

use std::collections::HashMap;

use gloo_events::EventListener;
use gloo_file::ObjectUrl;
use js_sys::{Array, Object, Reflect};
use leptos::prelude::*;
use rexvqa_engine::quiz::{Quiz, QuizReport, ReaderStudy, SavedQuiz};
use rexvqa_engine::rexvqa::{QuestionDetail, QuestionPage};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use web_sys::{ErrorEvent, File, MessageEvent, Worker};

use super::signals::{AskState, BenchState, GpuState, Pixels, Progress};
use crate::protocol::{
    CacheListing, CalibrationProgress, Call, Compute, DatasetSummary, EvalProgress, MemoryUse,
    ModelCard, OwnImage, Reply, Request, RequestId, RunReport, UnpackProgress,
};

/// localStorage key of the compute choice.
const COMPUTE_KEY: &str = "rexvqa.compute";

fn local_storage() -> Option<web_sys::Storage> {
    web_sys::window()?.local_storage().ok().flatten()
}

/// The signal a request in flight drives, put back to rest if the request fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drives {
    /// Copy / download / load progress.
    Progress,
    /// Opening a dataset (the busy line, the unpacking).
    Dataset,
    /// The benchmark.
    Bench,
    /// The calibration.
    Calibration,
    /// The answer to a split question.
    Ask,
    /// The answer to the free question.
    Free,
    /// The answer about the user's own images.
    Own,
    /// An evaluation run's progress.
    Eval,
}

impl Drives {
    fn of(req: &Request) -> Option<Drives> {
        Some(match req {
            Request::ImportModel | Request::DownloadModel { .. } | Request::LoadModel { .. } => {
                Drives::Progress
            }
            Request::OpenDataset { .. } => Drives::Dataset,
            Request::Bench { .. } => Drives::Bench,
            Request::Calibrate { .. } => Drives::Calibration,
            Request::Ask { .. } => Drives::Ask,
            Request::AskFree { .. } => Drives::Free,
            Request::AskOwn { .. } => Drives::Own,
            Request::EvalStart { .. } | Request::EvalResume { .. } => Drives::Eval,
            _ => return None,
        })
    }
}

/// The engine worker and the signals it feeds.
#[derive(Clone, Copy)]
pub struct Engine {
    worker: StoredValue<Option<Worker>, LocalStorage>,
    /// Messages sent before the worker said it is ready: a worker drops what arrives while its
    /// wasm is still loading, so they wait here and go out in order on `Ready`.
    queued: StoredValue<Option<Vec<Object>>, LocalStorage>,
    /// The id of the next request.
    next_id: StoredValue<u64>,
    /// Requests in flight that drive a signal, until their `Done` (with the request, which a
    /// new worker runs again after a lost GPU device).
    in_flight: StoredValue<HashMap<RequestId, (Drives, Request)>>,
    /// The dataset last opened, with its files, to open again in a new worker.
    opened: StoredValue<Option<(Request, Vec<File>)>, LocalStorage>,
    /// The user's own images last opened, with their files, to open again in a new worker
    /// (they live only in the worker's memory: nothing identifying is written to storage).
    own_opened: StoredValue<Option<(Request, Vec<File>)>, LocalStorage>,
    /// Counts the workers started: a replaced worker's late messages are dropped.
    generation: StoredValue<u64>,
    /// A new worker being brought back to where the lost one was.
    recovering: StoredValue<Option<recovery::Recovering>>,
    /// The last lost GPU device and the recovery from it, for the page to show.
    pub device_loss: RwSignal<Option<DeviceLoss>>,
    /// GPU state.
    pub gpu: RwSignal<GpuState>,
    /// The worker's memory after its last request.
    pub memory: RwSignal<Option<MemoryUse>>,
    /// Stored models, runs, and storage usage.
    pub cache: RwSignal<CacheListing>,
    /// Where models run (kept in localStorage).
    pub compute: RwSignal<Compute>,
    /// Copy/download/load progress.
    pub progress: RwSignal<Option<Progress>>,
    /// The loaded model.
    pub model: RwSignal<Option<ModelCard>>,
    /// The opened dataset.
    pub dataset: RwSignal<Option<DatasetSummary>>,
    /// The benchmark.
    pub bench: RwSignal<BenchState>,
    /// The calibration: progress, then the projections.
    pub calibration: RwSignal<Option<CalibrationProgress>>,
    /// Unpacking of an image archive (running or last result).
    pub unpack: RwSignal<Option<UnpackProgress>>,
    /// The current page of questions.
    pub questions: RwSignal<QuestionPage>,
    /// The question on screen.
    pub question: RwSignal<Option<QuestionDetail>>,
    /// Decoded images by path.
    pub images: RwSignal<HashMap<String, Pixels>, LocalStorage>,
    /// The answer in progress.
    pub ask: RwSignal<AskState>,
    /// The free-form answer in progress.
    pub free: RwSignal<AskState>,
    /// The answer about the user's own images in progress.
    pub own: RwSignal<AskState>,
    /// The user's own images as decoded.
    pub own_images: RwSignal<Vec<OwnImage>>,
    /// How each own image became the model's input (view order), and the inputs' side in pixels.
    pub own_inputs: RwSignal<(Vec<String>, u32)>,
    /// The running evaluation.
    pub eval: RwSignal<Option<EvalProgress>>,
    /// The last report.
    pub report: RwSignal<Option<RunReport>>,
    /// A quiz just drawn or opened, to start.
    pub quiz: RwSignal<Option<Quiz>>,
    /// The quiz in progress found in storage.
    pub saved_quiz: RwSignal<Option<SavedQuiz>>,
    /// The scored results of the quiz taken.
    pub quiz_report: RwSignal<Option<QuizReport>>,
    /// A reader-study table from merged result files.
    pub reader_study: RwSignal<Option<ReaderStudy>>,
    /// The last comparison of two runs, with its downloads.
    pub comparison: RwSignal<
        Option<(
            rexvqa_engine::compare::Comparison,
            Vec<rexvqa_engine::eval::export::ExportFile>,
        )>,
    >,
    /// Errors to show, newest last.
    pub errors: RwSignal<Vec<String>>,
    /// Whether a request that blocks a panel is in flight (e.g. opening a dataset).
    pub busy: RwSignal<Option<String>>,
    /// The worker's panic message, once it has stopped for good.
    pub fatal: RwSignal<Option<String>>,
}

fn save(name: &str, mime: &str, text: &str) -> Result<(), JsValue> {
    // Revoked when dropped, after the click has started the download.
    let url = ObjectUrl::from(gloo_file::Blob::new_with_options(text, Some(mime)));
    let doc = web_sys::window()
        .and_then(|w| w.document())
        .ok_or("no document")?;
    let a: web_sys::HtmlAnchorElement = doc.create_element("a")?.dyn_into()?;
    a.set_href(&url);
    a.set_download(name);
    a.click();
    Ok(())
}

impl Engine {
    /// Starts the worker (trunk builds it as `worker_loader.js`).
    pub fn start() -> Engine {
        let engine = Engine {
            worker: StoredValue::new_local(None),
            queued: StoredValue::new_local(Some(Vec::new())),
            next_id: StoredValue::new(1),
            in_flight: StoredValue::new(HashMap::new()),
            opened: StoredValue::new_local(None),
            own_opened: StoredValue::new_local(None),
            generation: StoredValue::new(0),
            recovering: StoredValue::new(None),
            device_loss: RwSignal::new(None),
            gpu: RwSignal::new(GpuState::Probing),
            compute: RwSignal::new(
                local_storage()
                    .and_then(|s| s.get_item(COMPUTE_KEY).ok().flatten())
                    .and_then(|k| Compute::from_key(&k))
                    .unwrap_or_default(),
            ),
            cache: RwSignal::new(CacheListing::default()),
            progress: RwSignal::new(None),
            model: RwSignal::new(None),
            memory: RwSignal::new(None),
            dataset: RwSignal::new(None),
            unpack: RwSignal::new(None),
            calibration: RwSignal::new(None),
            bench: RwSignal::new(BenchState::Idle),
            questions: RwSignal::new(QuestionPage::default()),
            question: RwSignal::new(None),
            images: RwSignal::new_local(HashMap::new()),
            ask: RwSignal::new(AskState::default()),
            free: RwSignal::new(AskState::default()),
            own: RwSignal::new(AskState::default()),
            own_images: RwSignal::new(Vec::new()),
            own_inputs: RwSignal::new((Vec::new(), 0)),
            eval: RwSignal::new(None),
            report: RwSignal::new(None),
            quiz: RwSignal::new(None),
            saved_quiz: RwSignal::new(None),
            quiz_report: RwSignal::new(None),
            reader_study: RwSignal::new(None),
            comparison: RwSignal::new(None),
            errors: RwSignal::new(Vec::new()),
            busy: RwSignal::new(None),
            fatal: RwSignal::new(None),
        };
        engine.spawn_worker();
        #[cfg(debug_assertions)]
        engine.install_test_hooks();
        engine
    }

    /// Starts a worker (trunk builds it as `worker_loader.js`); requests wait in `queued` until
    /// it is ready.
    fn spawn_worker(&self) {
        let engine = *self;
        let generation = self.generation.get_value() + 1;
        self.generation.set_value(generation);
        let worker = match Worker::new("./worker_loader.js") {
            Ok(w) => w,
            Err(e) => {
                engine.gpu.set(GpuState::Unavailable(format!(
                    "The engine worker could not start: {}",
                    crate::gpu::describe(&e)
                )));
                return;
            }
        };
        let current = move || engine.generation.get_value() == generation;
        // The listeners live as long as the page (a terminated worker sends nothing more, and
        // what a replaced one sent late is dropped).
        EventListener::new(&worker, "message", move |m| {
            let Some(m) = m.dyn_ref::<MessageEvent>().filter(|_| current()) else {
                return;
            };
            let data = m.data();
            let Some(text) = Reflect::get(&data, &"json".into())
                .ok()
                .and_then(|v| v.as_string())
            else {
                return;
            };
            match serde_json::from_str::<Reply>(&text) {
                Ok(r) => engine.on_reply(r, &data),
                Err(err) => engine.error(format!("unreadable worker message: {err}")),
            }
        })
        .forget();
        EventListener::new(&worker, "error", move |e| {
            if !current() {
                return;
            }
            let message = e.dyn_ref::<ErrorEvent>().map(ErrorEvent::message);
            engine.error(format!(
                "the engine worker failed: {}",
                message.unwrap_or_default()
            ));
        })
        .forget();
        self.worker.set_value(Some(worker));
    }

    /// Debug builds: `window.rexvqaTestPanic()` makes the worker panic,
    /// `window.rexvqaTestJournalCap(bytes | null)` caps run journals,
    /// `window.rexvqaTestLoseDevice()` destroys the WebGPU device, and
    /// `window.rexvqaInjectFault(form)` breaks one kernel form (the next WebGPU load's self-test
    /// must catch it), so the end-to-end tests can check what the page does then.
    #[cfg(debug_assertions)]
    fn install_test_hooks(&self) {
        let engine = *self;
        let panic = Closure::<dyn Fn()>::new(move || engine.send(&Request::TestPanic));
        if let Some(w) = web_sys::window() {
            let _ = Reflect::set(&w, &"rexvqaTestPanic".into(), panic.as_ref());
        }
        panic.forget();
        let cap = Closure::<dyn Fn(JsValue)>::new(move |bytes: JsValue| {
            engine.send(&Request::TestJournalCap {
                bytes: bytes.as_f64().map(|b| b as u64),
            })
        });
        if let Some(w) = web_sys::window() {
            let _ = Reflect::set(&w, &"rexvqaTestJournalCap".into(), cap.as_ref());
        }
        cap.forget();
        let lose = Closure::<dyn Fn()>::new(move || engine.send(&Request::TestLoseDevice));
        if let Some(w) = web_sys::window() {
            let _ = Reflect::set(&w, &"rexvqaTestLoseDevice".into(), lose.as_ref());
        }
        lose.forget();
        let fault = Closure::<dyn Fn(JsValue)>::new(move |form: JsValue| {
            engine.send(&Request::TestInjectFault {
                form: form.as_string().unwrap_or_default(),
            })
        });
        if let Some(w) = web_sys::window() {
            let _ = Reflect::set(&w, &"rexvqaInjectFault".into(), fault.as_ref());
        }
        fault.forget();
    }

    /// The worker panicked: it is stopped, every busy control is put back to rest, and the page
    /// says so and offers a reload (stored models, runs and quizzes are kept in browser storage).
    pub(super) fn stopped(&self, message: String) {
        self.worker.update_value(|w| {
            if let Some(w) = w.take() {
                w.terminate();
            }
        });
        self.in_flight.update_value(HashMap::clear);
        self.fatal.set(Some(message));
    }

    /// Shows an error.
    pub fn error(&self, msg: String) {
        self.errors.update(|e| e.push(msg));
    }

    /// Sends a request with attached files.
    pub fn send_with(&self, req: &Request, files: &[File]) {
        self.call_with(req, files);
    }

    /// Sends a request with attached files; returns its id.
    fn call_with(&self, req: &Request, files: &[File]) -> RequestId {
        let id = RequestId(self.next_id.get_value());
        self.next_id.set_value(id.0 + 1);
        if let Some(d) = Drives::of(req) {
            self.in_flight.update_value(|m| {
                m.insert(id, (d, req.clone()));
            });
        }
        match req {
            Request::OpenDataset { .. } => {
                self.opened.set_value(Some((req.clone(), files.to_vec())))
            }
            Request::OpenOwnImages { .. } => self
                .own_opened
                .set_value(Some((req.clone(), files.to_vec()))),
            _ => {}
        }
        let call = Call {
            id,
            request: req.clone(),
        };
        let o = Object::new();
        let _ = Reflect::set(&o, &"json".into(), &JsValue::from_str(&call.to_json()));
        if !files.is_empty() {
            let arr = Array::new();
            for f in files {
                arr.push(f);
            }
            let _ = Reflect::set(&o, &"files".into(), &arr);
        }
        let mut o = Some(o);
        self.queued.update_value(|q| {
            if let Some(q) = q {
                q.extend(o.take());
            }
        });
        if let Some(o) = o {
            self.post(&o);
        }
        id
    }

    fn post(&self, o: &Object) {
        let sent = self
            .worker
            .with_value(|w| w.as_ref().map(|w| w.post_message(o)));
        match sent {
            Some(Ok(())) => {}
            Some(Err(e)) => self.error(crate::gpu::describe(&e)),
            None if self.fatal.get_untracked().is_some() => {
                self.error("the engine has stopped after an internal error: reload the page".into())
            }
            None => self.error("the engine worker is not running".into()),
        }
    }

    /// `chosen`, or the first split of the opened dataset when nothing was chosen.
    pub fn split_or_first(&self, chosen: String) -> String {
        if !chosen.is_empty() {
            return chosen;
        }
        self.dataset
            .get_untracked()
            .and_then(|d| d.splits.keys().next().cloned())
            .unwrap_or_default()
    }

    /// Sends a request.
    pub fn send(&self, req: &Request) {
        self.send_with(req, &[]);
    }

    /// Offers `text` to the user as a file download.
    pub fn download(&self, name: &str, mime: &str, text: &str) {
        if let Err(e) = save(name, mime, text) {
            self.error(format!(
                "saving {name} failed: {}",
                crate::gpu::describe(&e)
            ));
        }
    }

    /// Changes where the next model load runs, and remembers it across reloads.
    pub fn set_compute(&self, key: &str) {
        let Some(c) = Compute::from_key(key) else {
            return;
        };
        self.compute.set(c);
        if let Some(s) = local_storage() {
            let _ = s.set_item(COMPUTE_KEY, key);
        }
        self.send(&Request::SetCompute { compute: c });
    }
}

/// Human-readable bytes.
pub fn bytes(n: f64) -> String {
    rexvqa_engine::storage::human_bytes(n)
}

/// Human-readable duration.
pub fn duration(secs: f64) -> String {
    if !secs.is_finite() {
        return "—".into();
    }
    let s = secs.round() as u64;
    if s >= 3600 {
        format!("{}h {:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}
