//! Recovery from a lost WebGPU device. The lost device took the weights with it, and the
//! runtime opens one device per wasm instance, so the page replaces the worker: the new one
//! loads the stored model again, opens the same dataset, and then carries on with what was
//! running (an evaluation resumes from its journal, so at most the question in progress is
//! asked again and none is counted twice; an answer in progress is asked again, the user's own
//! images opened again first).

use std::collections::HashSet;

use leptos::prelude::*;

use super::{Drives, Engine};
use crate::protocol::{Request, RequestId};

/// The last lost device, as the page shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceLoss {
    /// The browser's reason and message.
    pub message: String,
    /// Devices lost since the page opened.
    pub count: u32,
    /// Where the recovery stands.
    pub state: RecoveryState,
}

/// Where the recovery from a lost device stands.
#[derive(Debug, Clone, PartialEq)]
pub enum RecoveryState {
    /// The new worker is loading the model and opening the dataset.
    Restoring,
    /// Done: what was running carries on.
    Recovered {
        /// What was taken up again, in words.
        resumed: String,
    },
    /// The model or dataset could not be restored; the user must act.
    Failed(String),
}

/// A new worker on its way back to where the lost one was.
#[derive(Debug, Clone)]
pub(super) struct Recovering {
    /// The restoring requests (load, open) not yet done.
    waiting: HashSet<RequestId>,
    /// What to send once they are.
    then: Vec<Request>,
    /// The first restoring request that failed.
    failed: Option<String>,
}

/// What a request in flight becomes in the new worker: the evaluation resumes its run (the
/// start of a run that already has a journal included), answers, the benchmark and the
/// calibration run again (a question about the user's own images too, after they are opened
/// again); loads are redone by the restore itself, and an import needs its
/// files picked again (the copy resumes where it stopped).
fn replay(drives: Drives, req: &Request, run_id: Option<&str>) -> Option<Request> {
    match (drives, req) {
        (Drives::Eval, _) => run_id.map(|id| Request::EvalResume { run_id: id.into() }),
        (Drives::Ask | Drives::Free | Drives::Own | Drives::Bench | Drives::Calibration, r) => {
            Some(r.clone())
        }
        _ => None,
    }
}

impl Engine {
    /// The WebGPU device is lost: replaces the worker and brings the new one back.
    pub(super) fn device_lost(&self, message: String) {
        let model = self.model.get_untracked();
        let run = self.eval.get_untracked().filter(|p| p.state.is_live());
        let in_flight: Vec<(Drives, Request)> =
            self.in_flight.with_value(|m| m.values().cloned().collect());
        // A device lost again while restoring: what the first recovery was to take up still is.
        let mut then: Vec<Request> = self
            .recovering
            .get_value()
            .map(|r| r.then)
            .unwrap_or_default();
        let mut dropped = Vec::new();
        for (drives, req) in &in_flight {
            match replay(*drives, req, run.as_ref().map(|p| p.run_id.as_str())) {
                Some(r) if !then.contains(&r) => then.push(r),
                Some(_) => {}
                None if matches!(req, Request::ImportModel | Request::DownloadModel { .. }) => {
                    dropped.push(req.name())
                }
                None => {}
            }
        }
        // A live run with no request in flight (its start already answered) still resumes.
        if let Some(p) = &run {
            let resume = Request::EvalResume {
                run_id: p.run_id.clone(),
            };
            if !then.contains(&resume) {
                then.push(resume);
            }
        }

        // The old worker goes; every busy control is put to rest before the new one takes over.
        self.worker.update_value(|w| {
            if let Some(w) = w.take() {
                w.terminate();
            }
        });
        self.queued.set_value(Some(Vec::new()));
        self.spawn_worker();
        self.settle(None);
        self.in_flight.update_value(|m| m.clear());

        let mut waiting = HashSet::new();
        let load = in_flight.iter().find_map(|(_, r)| match r {
            Request::LoadModel { .. } => Some(r.clone()),
            _ => None,
        });
        let load = load.or_else(|| {
            model.map(|card| Request::LoadModel {
                text: card.text,
                mmproj: card.mmproj,
            })
        });
        if let Some(load) = load {
            waiting.insert(self.call_with(&load, &[]));
        }
        // The dataset and the user's own images, opened again from the files they came from.
        for (open, files) in [self.opened.get_value(), self.own_opened.get_value()]
            .into_iter()
            .flatten()
        {
            waiting.insert(self.call_with(&open, &files));
        }
        for name in dropped {
            self.error(format!(
                "{name} was interrupted when the GPU device was lost: start it again (the copy \
                 resumes where it stopped)"
            ));
        }
        let count = self.device_loss.get_untracked().map_or(0, |d| d.count) + 1;
        self.device_loss.set(Some(DeviceLoss {
            message,
            count,
            state: RecoveryState::Restoring,
        }));
        self.recovering.set_value(Some(Recovering {
            waiting,
            then,
            failed: None,
        }));
        self.recovery_step(None, None);
    }

    /// A request ended (`failed`: its error); once the restoring requests have all ended,
    /// sends what was running, or says why it cannot.
    pub(super) fn recovery_step(&self, ended: Option<RequestId>, failed: Option<&str>) {
        let Some(mut r) = self.recovering.get_value() else {
            return;
        };
        if let Some(id) = ended {
            if !r.waiting.contains(&id) {
                return;
            }
            match failed {
                Some(e) => {
                    r.failed.get_or_insert_with(|| e.to_string());
                }
                None => {
                    r.waiting.remove(&id);
                }
            }
        }
        if !r.waiting.is_empty() && r.failed.is_none() {
            self.recovering.set_value(Some(r));
            return;
        }
        self.recovering.set_value(None);
        let state = match r.failed {
            Some(e) => RecoveryState::Failed(e),
            None => {
                let resumed = describe(&r.then);
                for req in &r.then {
                    self.send(req);
                }
                RecoveryState::Recovered { resumed }
            }
        };
        self.device_loss
            .update(|d| d.iter_mut().for_each(|d| d.state = state.clone()));
    }
}

/// What a recovery took up again, in words.
fn describe(then: &[Request]) -> String {
    let parts: Vec<&str> = then
        .iter()
        .map(|r| match r {
            Request::EvalResume { .. } => "the evaluation resumed from its last saved answer",
            Request::Ask { .. } | Request::AskFree { .. } => "the question is being asked again",
            Request::AskOwn { .. } => "the question about your images is being asked again",
            Request::Bench { .. } => "the benchmark restarted",
            Request::Calibrate { .. } => "the calibration restarted",
            _ => "a request was sent again",
        })
        .collect();
    if parts.is_empty() {
        "the model is loaded again".into()
    } else {
        format!("the model is loaded again; {}", parts.join("; "))
    }
}
