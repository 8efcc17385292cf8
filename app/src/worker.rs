//! The engine worker: receives requests from the UI thread, runs engine work off the UI
//! thread, posts events back. The UI never runs model code.

use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use web_sys::{DedicatedWorkerGlobalScope, MessageEvent};

use crate::protocol::{Event, Request};

fn scope() -> DedicatedWorkerGlobalScope {
    js_sys::global().unchecked_into()
}

/// Posts an event to the UI thread.
pub fn post(event: &Event) {
    // A failed postMessage means the page is gone; there is nobody left to tell.
    let _ = scope().post_message(&JsValue::from_str(&event.to_json()));
}

async fn handle(req: Request) {
    match req {
        Request::ProbeGpu => post(&crate::gpu::probe().await),
    }
}

/// Installs the message handler and announces readiness.
pub fn run() {
    console_error_panic_hook::set_once();
    let on_message = Closure::<dyn FnMut(MessageEvent)>::new(|e: MessageEvent| {
        let Some(text) = e.data().as_string() else {
            post(&Event::Error {
                message: "worker received a non-text message".into(),
            });
            return;
        };
        match serde_json::from_str::<Request>(&text) {
            Ok(req) => wasm_bindgen_futures::spawn_local(handle(req)),
            Err(err) => post(&Event::Error {
                message: format!("worker could not read request {text:?}: {err}"),
            }),
        }
    });
    scope().set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    // The handler lives as long as the worker.
    on_message.forget();
    post(&Event::Ready);
}
