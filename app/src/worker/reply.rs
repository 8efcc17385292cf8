//! Posting events to the UI thread, each tagged with the request it answers.

use js_sys::{Array, Object, Reflect};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use web_sys::DedicatedWorkerGlobalScope;

use crate::protocol::{Event, Reply, RequestId};

fn scope() -> DedicatedWorkerGlobalScope {
    js_sys::global().unchecked_into()
}

/// Where one request's events go: the UI thread, with the request's id on each.
#[derive(Debug, Clone, Copy)]
pub struct Replies(Option<RequestId>);

impl Replies {
    /// Events answering request `id`.
    pub fn to(id: RequestId) -> Replies {
        Replies(Some(id))
    }

    /// Events that answer no request (the worker announcing itself, unreadable messages).
    pub fn unsolicited() -> Replies {
        Replies(None)
    }

    fn envelope(&self, event: Event) -> Object {
        let o = Object::new();
        let json = Reply { id: self.0, event }.to_json();
        let _ = Reflect::set(&o, &"json".into(), &JsValue::from_str(&json));
        o
    }

    /// Posts an event.
    pub fn post(&self, event: Event) {
        // A failed postMessage means the page is gone; there is nobody left to tell.
        let _ = scope().post_message(&self.envelope(event));
    }

    /// Posts an event with a buffer that moves (is not copied) to the UI thread.
    pub fn post_with_buffer(&self, event: Event, buffer: &js_sys::ArrayBuffer) {
        let o = self.envelope(event);
        let _ = Reflect::set(&o, &"buffer".into(), buffer);
        let _ = scope().post_message_with_transfer(&o, &Array::of1(buffer));
    }

    /// Posts `d`'s samples (u16, channels interleaved) as the viewer's image `path`.
    pub fn post_pixels(&self, path: &str, d: &rexvqa_engine::image::Decoded) {
        let arr = js_sys::Uint16Array::from(&d.samples[..]);
        self.post_with_buffer(
            Event::Image {
                path: path.into(),
                width: d.width,
                height: d.height,
                bits: d.bits,
                channels: d.channels,
            },
            &arr.buffer(),
        );
    }

    /// Posts an error: what was being done and what went wrong.
    pub fn fail(&self, context: &str, message: impl ToString) {
        self.post(Event::Error {
            context: context.to_string(),
            message: message.to_string(),
        });
    }
}
