//! Messages between the UI thread and the engine worker. Each message is a JS object
//! `{ json: "<JSON>", files?: [File], buffer?: ArrayBuffer }`; files and pixel buffers travel
//! beside the JSON because they cannot be serialised into it. The UI sends a [`Call`] (a
//! [`Request`] with a fresh [`RequestId`]); the worker answers with [`Reply`]s carrying that id,
//! errors included, and a final [`Event::Done`], so the UI knows which request an event ends.
//! The two message enums are the whole contract: [`Request`] (`request.rs`) and [`Event`]
//! (`event.rs`); what they carry is in [`payloads`].

mod event;
mod payloads;
mod request;

use serde::{Deserialize, Serialize};

pub use event::Event;
pub use payloads::*;
pub use request::Request;

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
    use rexvqa_engine::eval::Settings;
    use rexvqa_engine::eval::export::RunExport;
    use rexvqa_engine::rexvqa::Scope;

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
