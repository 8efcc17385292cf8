//! Applying the worker's replies to the engine handle's signals. An error puts back to rest
//! only what its own request drives, found by the request id it carries.

use std::rc::Rc;

use js_sys::Reflect;
use leptos::prelude::*;
use wasm_bindgen::prelude::*;

use super::{Drives, Engine, save};
use crate::protocol::{AskTarget, Event, Reply, Request, RunState, UnpackState};
use crate::ui::signals::{AskState, BenchState, GpuState, OptionProbs, Pixels, Progress};

impl Engine {
    fn ask_signal(&self, target: &AskTarget) -> RwSignal<AskState> {
        match target {
            AskTarget::Question { .. } => self.ask,
            AskTarget::Free => self.free,
            AskTarget::Own => self.own,
        }
    }

    /// Puts back to rest what a failed request drove (everything, when the failure names no
    /// request).
    pub(super) fn settle(&self, drives: Option<Drives>) {
        let all = drives.is_none();
        let is = |d| all || drives == Some(d);
        if is(Drives::Dataset) {
            self.busy.set(None);
            self.unpack.update(|u| {
                if let Some(u) = u.as_mut().filter(|u| u.state == UnpackState::Running) {
                    u.state = UnpackState::Stopped;
                }
            });
        }
        if is(Drives::Progress) {
            self.progress.set(None);
        }
        if is(Drives::Bench) && self.bench.get_untracked() == BenchState::Running {
            self.bench.set(BenchState::Idle);
        }
        if is(Drives::Calibration) {
            self.calibration.update(|c| {
                if c.as_ref().is_some_and(|c| c.projections.is_none()) {
                    *c = None;
                }
            });
        }
        if is(Drives::Ask) {
            self.ask.update(|a| a.busy = false);
        }
        if is(Drives::Free) {
            self.free.update(|a| a.busy = false);
        }
        if is(Drives::Own) {
            self.own.update(|a| a.busy = false);
        }
        if is(Drives::Eval) {
            let mut stopped = false;
            self.eval.update(|p| {
                if let Some(p) = p.as_mut().filter(|p| p.state.is_live()) {
                    p.state = RunState::Interrupted;
                    stopped = true;
                }
            });
            // The runs table offers to resume the stopped run.
            if stopped && self.fatal.get_untracked().is_none() {
                self.send(&Request::ListCache);
            }
        }
    }

    pub(super) fn on_reply(&self, reply: Reply, data: &JsValue) {
        let Reply { id, event } = reply;
        match event {
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
            Event::Done => {
                if let Some(id) = id {
                    self.in_flight.update_value(|m| {
                        m.remove(&id);
                    });
                    self.recovery_step(Some(id), None);
                }
            }
            Event::DeviceLost { message } => self.device_lost(message),
            Event::Gpu(r) => self.gpu.set(GpuState::Ready(r)),
            Event::GpuUnavailable { reason } => self.gpu.set(GpuState::Unavailable(reason)),
            Event::Cache(c) => self.cache.set(c),
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
            Event::Memory(m) => self.memory.set(Some(m)),
            Event::ModelLoaded(card) => {
                self.progress.set(None);
                self.model.set(Some(card));
            }
            Event::Dataset(d) => {
                self.busy.set(None);
                self.dataset.set(Some(d));
            }
            Event::Bench { json } => self.bench.set(BenchState::Done(json)),
            Event::Calibration(c) => self.calibration.set(Some(c)),
            Event::Unpack(p) => {
                self.busy.set(None);
                self.unpack.set(Some(p));
            }
            Event::Questions(page) => self.questions.set(page),
            Event::OwnImages { images } => self.own_images.set(images),
            Event::OwnInputs { how, side } => self.own_inputs.set((how, side)),
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
            Event::AskScores {
                target,
                letters,
                probs,
            } => self
                .ask_signal(&target)
                .update(|a| a.scores = Some(OptionProbs { letters, probs })),
            Event::AskText { target, text } => {
                self.ask_signal(&target).update(|a| a.text = text);
            }
            Event::AskDone { target, answer } => self.ask_signal(&target).update(|a| {
                a.busy = false;
                a.text = answer.response.clone();
                a.answer = Some(answer);
            }),
            Event::Quiz(q) => self.quiz.set(Some(q)),
            Event::SavedQuiz { saved } => self.saved_quiz.set(saved),
            Event::QuizReport(r) => self.quiz_report.set(Some(*r)),
            Event::ReaderStudy(r) => self.reader_study.set(Some(r)),
            Event::EvalProgress(p) => {
                let over = !p.state.is_live();
                self.eval.set(Some(p));
                if over {
                    self.send(&Request::ListCache);
                }
            }
            Event::Report(r) => self.report.set(Some(*r)),
            Event::Comparison {
                comparison,
                exports,
            } => self.comparison.set(Some((*comparison, exports))),
            Event::Export(f) => {
                if let Err(e) = save(&f.name, &f.mime, &f.text) {
                    self.error(format!(
                        "saving {} failed: {}",
                        f.name,
                        crate::gpu::describe(&e)
                    ));
                }
            }
            Event::Fatal { message } => {
                self.settle(None);
                self.stopped(message);
            }
            Event::Error { context, message } => {
                let drives = match id {
                    Some(id) => self.in_flight.with_value(|m| m.get(&id).map(|(d, _)| *d)),
                    None => None,
                };
                // A failed request that drives nothing leaves every signal as it is.
                if drives.is_some() || id.is_none() {
                    self.settle(drives);
                }
                if let Some(id) = id {
                    self.recovery_step(Some(id), Some(&format!("{context}: {message}")));
                }
                self.error(format!("{context}: {message}"));
            }
        }
    }
}
