//! The UI's handle on the engine worker: starts it, sends requests, and turns its events into
//! signals the panels read. Components get this handle from context; none owns engine state.

use std::collections::HashMap;
use std::rc::Rc;

use js_sys::{Array, Object, Reflect};
use leptos::prelude::*;
use rexvqa_engine::calibrate::Projection;
use rexvqa_engine::eval::{Answer, EvalReport};
use rexvqa_engine::quiz::{Quiz, QuizReport, QuizResults, ReaderStudy};
use rexvqa_engine::rexvqa::Letter;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use web_sys::{ErrorEvent, File, MessageEvent, Worker};

use crate::protocol::*;

/// What the UI knows about the GPU.
#[derive(Debug, Clone, PartialEq)]
pub enum GpuState {
    /// Not known yet.
    Probing,
    /// Usable adapter.
    Ready(AdapterReport),
    /// Unusable, with the reason.
    Unavailable(String),
}

/// Decoded pixels of one image, for the viewer.
#[derive(Clone)]
pub struct Pixels {
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
    /// 8 or 16.
    pub bits: u8,
    /// 1 or 3.
    pub channels: u8,
    /// Samples.
    pub data: Rc<Vec<u16>>,
}

/// The answer being produced for the question on screen.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AskState {
    /// Question id (or "free").
    pub id: String,
    /// Whether the worker is still answering.
    pub busy: bool,
    /// Letters and probabilities (fast mode).
    pub scores: Option<(Vec<Letter>, Vec<f32>)>,
    /// Streamed text.
    pub text: String,
    /// The final answer.
    pub answer: Option<Answer>,
}

/// Progress of a long operation (copy, download, load).
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// What is happening.
    pub label: String,
    /// Bytes done.
    pub done: u64,
    /// Bytes in all.
    pub total: u64,
    /// Bytes per second (0 when unknown).
    pub rate: f64,
}

/// localStorage key of the compute choice.
const COMPUTE_KEY: &str = "rexvqa.compute";

fn local_storage() -> Option<web_sys::Storage> {
    web_sys::window()?.local_storage().ok().flatten()
}

/// Stored model files, evaluation runs, and (used, quota) bytes of browser storage.
pub type CacheState = (Vec<StoredFile>, Vec<RunInfo>, Option<(f64, f64)>);

/// A calibration: (questions timed, to time, projections for the scope and the split).
pub type Calibration = (usize, usize, Option<(Projection, Projection)>);

/// A page of questions: (total matching, rows, all tasks, all categories).
pub type QuestionPage = (usize, Vec<QuestionRow>, Vec<String>, Vec<String>);

/// The engine worker and the signals it feeds.
#[derive(Clone, Copy)]
pub struct Engine {
    worker: StoredValue<Option<Worker>, LocalStorage>,
    /// Messages sent before the worker said it is ready: a worker drops what arrives while its
    /// wasm is still loading, so they wait here and go out in order on `Ready`.
    queued: StoredValue<Option<Vec<Object>>, LocalStorage>,
    /// GPU state.
    pub gpu: RwSignal<GpuState>,
    /// The worker's wasm memory in bytes (its peak: it never shrinks) and the device memory the
    /// model's pool holds.
    pub memory: RwSignal<Option<(f64, Option<f64>)>>,
    /// Stored models, runs, and storage usage.
    pub cache: RwSignal<CacheState>,
    /// Where models run (kept in localStorage).
    pub compute: RwSignal<Compute>,
    /// Copy/download/load progress.
    pub progress: RwSignal<Option<Progress>>,
    /// The loaded model.
    pub model: RwSignal<Option<ModelCard>>,
    /// The opened dataset.
    pub dataset: RwSignal<Option<DatasetSummary>>,
    /// Benchmark: None idle, Some(None) running, Some(Some(json)) done.
    pub bench: RwSignal<Option<Option<String>>>,
    /// Calibration: (done, total, projections for the scope and the split when finished).
    pub calibration: RwSignal<Option<Calibration>>,
    /// Unpacking of an image archive (running or last result).
    pub unpack: RwSignal<Option<UnpackProgress>>,
    /// The current page of questions: (total, rows, tasks, categories).
    pub questions: RwSignal<QuestionPage>,
    /// The question on screen.
    pub question: RwSignal<Option<QuestionDetail>>,
    /// Decoded images by path.
    pub images: RwSignal<HashMap<String, Pixels>, LocalStorage>,
    /// The answer in progress.
    pub ask: RwSignal<AskState>,
    /// The free-form answer in progress.
    pub free: RwSignal<AskState>,
    /// The running evaluation.
    pub eval: RwSignal<Option<EvalProgress>>,
    /// The last report: (run id, report, questions missing from merged shards).
    pub report: RwSignal<Option<(String, EvalReport, usize)>>,
    /// A quiz just drawn or opened, to start.
    pub quiz: RwSignal<Option<Quiz>>,
    /// The quiz in progress found in storage: (results, current case).
    pub saved_quiz: RwSignal<Option<(QuizResults, usize)>>,
    /// The scored results of the quiz taken.
    pub quiz_report: RwSignal<Option<QuizReport>>,
    /// A reader-study table from merged result files.
    pub reader_study: RwSignal<Option<ReaderStudy>>,
    /// Errors to show, newest last.
    pub errors: RwSignal<Vec<String>>,
    /// Whether a request that blocks a panel is in flight (e.g. opening a dataset).
    pub busy: RwSignal<Option<String>>,
}

fn save(name: &str, mime: &str, text: &str) -> Result<(), JsValue> {
    let parts = Array::of1(&JsValue::from_str(text));
    let opts = web_sys::BlobPropertyBag::new();
    opts.set_type(mime);
    let blob = web_sys::Blob::new_with_str_sequence_and_options(&parts, &opts)?;
    let url = web_sys::Url::create_object_url_with_blob(&blob)?;
    let doc = web_sys::window()
        .and_then(|w| w.document())
        .ok_or("no document")?;
    let a: web_sys::HtmlAnchorElement = doc.create_element("a")?.dyn_into()?;
    a.set_href(&url);
    a.set_download(name);
    a.click();
    web_sys::Url::revoke_object_url(&url)?;
    Ok(())
}

impl Engine {
    /// Starts the worker (trunk builds it as `worker_loader.js`).
    pub fn start() -> Engine {
        let engine = Engine {
            worker: StoredValue::new_local(None),
            queued: StoredValue::new_local(Some(Vec::new())),
            gpu: RwSignal::new(GpuState::Probing),
            compute: RwSignal::new(
                local_storage()
                    .and_then(|s| s.get_item(COMPUTE_KEY).ok().flatten())
                    .and_then(|k| Compute::from_key(&k))
                    .unwrap_or_default(),
            ),
            cache: RwSignal::new((Vec::new(), Vec::new(), None)),
            progress: RwSignal::new(None),
            model: RwSignal::new(None),
            memory: RwSignal::new(None),
            dataset: RwSignal::new(None),
            unpack: RwSignal::new(None),
            calibration: RwSignal::new(None),
            bench: RwSignal::new(None),
            questions: RwSignal::new((0, Vec::new(), Vec::new(), Vec::new())),
            question: RwSignal::new(None),
            images: RwSignal::new_local(HashMap::new()),
            ask: RwSignal::new(AskState::default()),
            free: RwSignal::new(AskState::default()),
            eval: RwSignal::new(None),
            report: RwSignal::new(None),
            quiz: RwSignal::new(None),
            saved_quiz: RwSignal::new(None),
            quiz_report: RwSignal::new(None),
            reader_study: RwSignal::new(None),
            errors: RwSignal::new(Vec::new()),
            busy: RwSignal::new(None),
        };
        let worker = match Worker::new("./worker_loader.js") {
            Ok(w) => w,
            Err(e) => {
                engine.gpu.set(GpuState::Unavailable(format!(
                    "The engine worker could not start: {}",
                    crate::gpu::describe(&e)
                )));
                return engine;
            }
        };
        let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |m: MessageEvent| {
            let data = m.data();
            let Some(text) = Reflect::get(&data, &"json".into())
                .ok()
                .and_then(|v| v.as_string())
            else {
                return;
            };
            match serde_json::from_str::<Event>(&text) {
                Ok(ev) => engine.on_event(ev, &data),
                Err(err) => engine.error(format!("unreadable worker message: {err}")),
            }
        });
        worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        on_message.forget();
        let on_error = Closure::<dyn FnMut(ErrorEvent)>::new(move |e: ErrorEvent| {
            engine.error(format!("the engine worker failed: {}", e.message()));
        });
        worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        on_error.forget();
        engine.worker.set_value(Some(worker));
        engine
    }

    /// Shows an error.
    pub fn error(&self, msg: String) {
        self.errors.update(|e| e.push(msg));
    }

    /// Sends a request with attached files.
    pub fn send_with(&self, req: &Request, files: &[File]) {
        let o = Object::new();
        let _ = Reflect::set(&o, &"json".into(), &JsValue::from_str(&req.to_json()));
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
        let Some(o) = o else { return };
        self.post(&o);
    }

    fn post(&self, o: &Object) {
        let sent = self
            .worker
            .with_value(|w| w.as_ref().map(|w| w.post_message(o)));
        match sent {
            Some(Ok(())) => {}
            Some(Err(e)) => self.error(crate::gpu::describe(&e)),
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

    fn on_event(&self, ev: Event, data: &JsValue) {
        match ev {
            Event::Ready => {
                // From now on requests go straight out; the ones made while the worker started
                // follow the start-up requests (the compute choice first, so a queued import
                // loads where the user asked).
                let queued = self.queued.try_update_value(Option::take).flatten();
                self.send(&Request::SetCompute {
                    compute: self.compute.get_untracked(),
                });
                self.send(&Request::ProbeGpu);
                self.send(&Request::ListCache);
                self.send(&Request::LoadQuiz);
                for o in queued.unwrap_or_default() {
                    self.post(&o);
                }
            }
            Event::Gpu(r) => self.gpu.set(GpuState::Ready(r)),
            Event::GpuUnavailable { reason } => self.gpu.set(GpuState::Unavailable(reason)),
            Event::Cache {
                models,
                runs,
                usage,
            } => self.cache.set((models, runs, usage)),
            Event::Copy {
                name,
                done,
                total,
                rate,
            } => self.progress.set(Some(Progress {
                label: format!("Copying {name} into browser storage"),
                done,
                total,
                rate,
            })),
            Event::Loading {
                done,
                total,
                tensor,
            } => self.progress.set(Some(Progress {
                label: format!("Loading weights ({tensor})"),
                done,
                total,
                rate: 0.0,
            })),
            Event::Memory {
                wasm_bytes,
                device_bytes,
            } => self.memory.set(Some((wasm_bytes, device_bytes))),
            Event::ModelLoaded(card) => {
                self.progress.set(None);
                self.model.set(Some(card));
            }
            Event::Dataset(d) => {
                self.busy.set(None);
                self.dataset.set(Some(d));
            }
            Event::Bench { json } => self.bench.set(Some(Some(json))),
            Event::Calibration {
                done,
                total,
                projections,
            } => self.calibration.set(Some((done, total, projections))),
            Event::Unpack(p) => {
                self.busy.set(None);
                self.unpack.set(Some(p));
            }
            Event::Questions {
                total,
                items,
                tasks,
                categories,
            } => self.questions.set((total, items, tasks, categories)),
            Event::Question(q) => self.question.set(Some(q)),
            Event::Image {
                path,
                width,
                height,
                bits,
                channels,
            } => {
                let buf = Reflect::get(data, &"buffer".into()).unwrap_or_default();
                let samples = js_sys::Uint16Array::new(&buf).to_vec();
                self.images.update(|m| {
                    m.insert(
                        path,
                        Pixels {
                            width,
                            height,
                            bits,
                            channels,
                            data: Rc::new(samples),
                        },
                    );
                });
            }
            Event::AskScores { id, letters, probs } => {
                let target = if id == "free" { self.free } else { self.ask };
                target.update(|a| a.scores = Some((letters, probs)));
            }
            Event::AskText { id, text } => {
                let target = if id == "free" { self.free } else { self.ask };
                target.update(|a| a.text = text);
            }
            Event::AskDone { id, answer } => {
                let target = if id == "free" { self.free } else { self.ask };
                target.update(|a| {
                    a.busy = false;
                    a.text = answer.response.clone();
                    a.answer = Some(answer);
                });
            }
            Event::Quiz(q) => self.quiz.set(Some(q)),
            Event::SavedQuiz { saved } => self.saved_quiz.set(saved),
            Event::QuizReport(r) => self.quiz_report.set(Some(*r)),
            Event::ReaderStudy(r) => self.reader_study.set(Some(r)),
            Event::EvalProgress(p) => {
                let finished = p.state != "running" && p.state != "paused";
                self.eval.set(Some(p));
                if finished {
                    self.send(&Request::ListCache);
                }
            }
            Event::Report {
                run_id,
                report,
                missing,
            } => self.report.set(Some((run_id, report, missing))),
            Event::Export { name, mime, text } => {
                if let Err(e) = save(&name, &mime, &text) {
                    self.error(format!(
                        "saving {name} failed: {}",
                        crate::gpu::describe(&e)
                    ));
                }
            }
            Event::Error { context, message } => {
                self.busy.set(None);
                self.progress.set(None);
                if self.bench.get_untracked() == Some(None) {
                    self.bench.set(None);
                }
                self.calibration.update(|c| {
                    if c.as_ref().is_some_and(|c| c.2.is_none()) {
                        *c = None;
                    }
                });
                self.unpack.update(|u| {
                    if let Some(u) = u.as_mut().filter(|u| u.state == "running") {
                        u.state = "stopped".into();
                    }
                });
                self.ask.update(|a| a.busy = false);
                self.free.update(|a| a.busy = false);
                self.error(format!("{context}: {message}"));
            }
        }
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
