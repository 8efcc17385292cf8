//! The engine worker: owns the model, the opened dataset and the evaluation runs; receives
//! requests from the UI thread and posts events back. The UI never runs model code, so the page
//! never freezes.
//!
//! This module only routes: each request goes to the module of its job ([`storage`], [`model`],
//! [`dataset`], [`ask`], [`runs`], [`compare`], [`quiz`]); every event it causes, its error included, carries
//! its id, and [`Event::Done`] closes it.

mod ask;
mod compare;
mod dataset;
mod error;
mod model;
mod own;
mod quiz;
mod reply;
mod runs;
mod selftest;
mod state;
mod storage;

use gloo_events::EventListener;
use js_sys::{Array, Reflect};
use rexvqa_engine::eval::Settings;
use rexvqa_engine::image::Policy;
use rexvqa_engine::session::Mode;
use wasm_bindgen::JsCast;
use web_sys::{DedicatedWorkerGlobalScope, File, MessageEvent};

use crate::protocol::{Call, Event, MemoryUse, Request};
use error::WorkerError;
use reply::Replies;
use runs::Control;

fn ask_settings(mode: Mode, policy: Policy, all_images: bool) -> Settings {
    Settings {
        mode,
        policy,
        all_images,
        ..Settings::default()
    }
}

/// Runs one request; its events go to `out`.
async fn route(out: Replies, req: Request, attached: Vec<File>) -> Result<(), WorkerError> {
    match req {
        Request::ProbeGpu => out.post(model::probe_gpu().await),
        Request::SetCompute { compute } => model::set_compute(compute),
        Request::ListCache => out.post(storage::list_cache().await?),
        Request::ImportModel => model::import(out, &attached).await?,
        Request::DownloadModel {
            text_url,
            mmproj_url,
        } => model::download(out, &text_url, &mmproj_url).await?,
        Request::LoadModel { text, mmproj } => {
            let card = model::load_stored(out, &text, mmproj.as_deref(), None).await?;
            out.post(Event::ModelLoaded(card));
        }
        Request::DeleteModel { name } => {
            storage::delete_model(&name).await?;
            out.post(storage::list_cache().await?);
        }
        Request::Bench {
            prefill,
            decode,
            official_max_tokens,
            kernel_rows,
            profile,
        } => {
            model::bench(
                out,
                prefill,
                decode,
                official_max_tokens,
                kernel_rows,
                profile,
            )
            .await?
        }
        Request::OpenDataset { paths } => dataset::open(out, paths, attached).await?,
        Request::UnpackCancel => dataset::cancel_unpack(),
        Request::DeleteUnpacked => dataset::delete_unpacked(out).await?,
        Request::ListQuestions {
            split,
            filter,
            offset,
            limit,
        } => out.post(dataset::list_questions(&split, &filter, offset, limit)?),
        Request::GetQuestion { split, id } => out.post(dataset::question(&split, &id)?),
        Request::GetImage { path } => dataset::image(out, &path).await?,
        Request::OpenOwnImages { names } => own::open(out, names, attached).await?,
        Request::OwnInputs { policy } => own::inputs(out, policy)?,
        Request::AskOwn {
            question,
            options,
            mode,
            policy,
        } => own::ask(out, &question, &options, mode, policy).await?,
        Request::Ask {
            split,
            id,
            mode,
            policy,
            all_images,
        } => ask::question(out, &split, &id, ask_settings(mode, policy, all_images)).await?,
        Request::AskFree {
            split,
            id,
            text,
            policy,
            all_images,
        } => {
            let settings = ask_settings(Mode::Official, policy, all_images);
            ask::free(out, &split, &id, &text, settings).await?
        }
        Request::EvalStart {
            split,
            scope,
            settings,
        } => runs::start(out, split, scope, settings).await?,
        Request::EvalResume { run_id } => runs::resume(out, run_id).await?,
        Request::EvalPause => runs::control(Control::Pause),
        Request::EvalContinue => runs::control(Control::Continue),
        Request::EvalCancel => runs::control(Control::Cancel),
        Request::RunReport { run_id } => out.post(runs::report(run_id).await?),
        Request::Export { run_id, format } => out.post(runs::export(&run_id, format).await?),
        Request::MergeShards { split, names } => {
            out.post(runs::merge(&split, names, attached).await?)
        }
        Request::CompareRuns { a, b } => out.post(compare::compare(a, b, attached).await?),
        Request::Calibrate {
            split,
            scope,
            settings,
        } => runs::calibrate(out, &split, &scope, &settings).await?,
        Request::DeleteRun { run_id } => {
            runs::delete(&run_id).await?;
            out.post(storage::list_cache().await?);
        }
        Request::MakeQuiz { split, settings } => out.post(quiz::make(&split, &settings)?),
        Request::OpenQuiz { split, json } => out.post(quiz::open(&split, &json)?),
        Request::SaveQuiz { saved } => quiz::save(&saved).await?,
        Request::LoadQuiz => out.post(quiz::load().await?),
        Request::ClearQuiz => quiz::clear().await?,
        Request::QuizReport {
            split,
            results,
            export,
        } => quiz::report(out, &split, &results, export)?,
        Request::ReaderStudy { split, files } => out.post(quiz::reader_study(&split, &files)?),
        Request::TestPanic => test_panic()?,
        Request::TestInjectFault { form } => selftest::inject_fault(&form).await?,
        Request::TestJournalCap { bytes } => {
            if !cfg!(debug_assertions) {
                return Err(WorkerError::TestHooksOff);
            }
            state::with(|st| st.journal_cap = bytes);
        }
        Request::TestLoseDevice => model::test_lose_device()?,
    }
    Ok(())
}

/// Panics in a debug build, for the end-to-end test of the page's fatal-error path; a release
/// build refuses.
fn test_panic() -> Result<(), WorkerError> {
    if cfg!(debug_assertions) {
        panic!("test-only panic requested by the page");
    }
    Err(WorkerError::TestHook(
        "test panics exist only in debug builds",
    ))
}

/// Runs a call; reports its error, the worker's memory after it, and its end.
async fn handle(call: Call, attached: Vec<File>) {
    let out = Replies::to(call.id);
    let name = call.request.name();
    if let Err(e) = route(out, call.request, attached).await {
        // Neither error nor end: the page replaces this worker and runs the request again.
        if model::failed_from_device_loss().await {
            return;
        }
        out.fail(name, e);
    }
    if let Some(wasm_bytes) = state::wasm_heap_bytes() {
        out.post(Event::Memory(MemoryUse {
            wasm_bytes,
            device_bytes: model::device_bytes(),
        }));
    }
    out.post(Event::Done);
}

fn scope() -> DedicatedWorkerGlobalScope {
    js_sys::global().unchecked_into()
}

/// Installs the message handler and announces readiness.
pub fn run() {
    std::panic::set_hook(Box::new(|info| {
        console_error_panic_hook::hook(info);
        // A panicked wasm instance cannot be trusted with another request (a lock or borrow it
        // held may stay taken: the Benchmark card's condvar panic was followed by "cannot
        // recursively acquire mutex"), and the request that panicked never ends: tell the page,
        // which stops sending, settles every busy control and offers a reload.
        Replies::unsolicited().post(Event::Fatal {
            message: info.to_string(),
        });
    }));
    // The listener lives as long as the worker.
    EventListener::new(&scope(), "message", |e| {
        let Some(e) = e.dyn_ref::<MessageEvent>() else {
            return;
        };
        let data = e.data();
        let unsolicited = Replies::unsolicited();
        let Some(text) = Reflect::get(&data, &"json".into())
            .ok()
            .and_then(|v| v.as_string())
        else {
            unsolicited.fail("message", "the worker received a message without a request");
            return;
        };
        let files: Vec<File> = Reflect::get(&data, &"files".into())
            .ok()
            .filter(|v| v.is_object())
            .map(|v| {
                Array::from(&v)
                    .iter()
                    .filter_map(|f| f.dyn_into::<File>().ok())
                    .collect()
            })
            .unwrap_or_default();
        match serde_json::from_str::<Call>(&text) {
            Ok(call) => wasm_bindgen_futures::spawn_local(handle(call, files)),
            Err(err) => unsolicited.fail("message", format!("unreadable request {text:?}: {err}")),
        }
    })
    .forget();
    Replies::unsolicited().post(Event::Ready);
}
