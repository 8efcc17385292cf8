//! The UI's handle on the engine worker: starts it, sends requests, routes events to signals.

use leptos::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use web_sys::{ErrorEvent, MessageEvent, Worker};

use crate::protocol::{AdapterReport, Event, Request};

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

/// The engine worker and the signals it feeds.
#[derive(Clone, Copy)]
pub struct Engine {
    worker: StoredValue<Worker, LocalStorage>,
    /// GPU state.
    pub gpu: RwSignal<GpuState>,
    /// The last error the worker reported.
    pub error: RwSignal<Option<String>>,
}

impl Engine {
    /// Starts the worker (trunk builds it as `worker_loader.js`).
    pub fn start() -> Result<Engine, String> {
        let worker = Worker::new("./worker_loader.js").map_err(|e| crate::gpu::describe(&e))?;
        let on_message_target = worker.clone();
        let engine = Engine {
            worker: StoredValue::new_local(worker),
            gpu: RwSignal::new(GpuState::Probing),
            error: RwSignal::new(None),
        };
        let e2 = engine;
        let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |m: MessageEvent| {
            let Some(text) = m.data().as_string() else {
                return;
            };
            match serde_json::from_str::<Event>(&text) {
                Ok(ev) => e2.on_event(ev),
                Err(err) => e2
                    .error
                    .set(Some(format!("unreadable worker message: {err}"))),
            }
        });
        on_message_target.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        on_message.forget();
        let err_sig = engine.error;
        let on_error = Closure::<dyn FnMut(ErrorEvent)>::new(move |e: ErrorEvent| {
            err_sig.set(Some(format!("the engine worker failed: {}", e.message())));
        });
        on_message_target.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        on_error.forget();
        Ok(engine)
    }

    /// Sends a request to the worker.
    pub fn send(&self, req: &Request) {
        let sent = self
            .worker
            .with_value(|w| w.post_message(&JsValue::from_str(&req.to_json())));
        if let Err(e) = sent {
            self.error.set(Some(crate::gpu::describe(&e)));
        }
    }

    fn on_event(&self, ev: Event) {
        match ev {
            Event::Ready => self.send(&Request::ProbeGpu),
            Event::Gpu(r) => self.gpu.set(GpuState::Ready(r)),
            Event::GpuUnavailable { reason } => self.gpu.set(GpuState::Unavailable(reason)),
            Event::Error { message } => self.error.set(Some(message)),
        }
    }
}
