//! The device self-test of a model load on WebGPU: run once per adapter, browser and model
//! plan (while the weights are hashed and loaded), its verdict kept in browser storage (OPFS)
//! and re-applied on later loads without running again. A form that failed is turned off for
//! the automatic choices; a device that cannot run the model at all sends the load to the CPU,
//! with the reason on the model card.

use std::collections::BTreeMap;

use js_sys::Reflect;
use rexvqa_engine::device::{self, Device};
use rexvqa_engine::kernels::forms;
use rexvqa_engine::selftest::{self, Plan, Report};

use super::error::WorkerError;
use super::state::PerfClock;
use crate::io;

/// OPFS folder and file of the kept verdicts.
const DIR: &str = "selftest";
const FILE: &str = "verdicts.json";

/// A self-test verdict for one load.
pub struct Verdict {
    /// The report (run now or kept from an earlier run).
    pub report: Report,
    /// Whether it was kept from an earlier run.
    pub cached: bool,
}

impl Verdict {
    /// The model card's line.
    pub fn text(&self) -> String {
        let v = self.report.verdict();
        if self.cached {
            format!("{v} (verdict kept from an earlier run on this adapter and browser)")
        } else {
            // A new run goes on while the weights are hashed and loaded: its time includes
            // theirs.
            format!("{v} (run while the weights loaded)")
        }
    }
}

/// The browser's user agent (its version is part of the cache key: a browser update can
/// change the shader compiler).
fn user_agent() -> String {
    Reflect::get(&js_sys::global(), &"navigator".into())
        .and_then(|n| Reflect::get(&n, &"userAgent".into()))
        .ok()
        .and_then(|v| v.as_string())
        .unwrap_or_default()
}

/// The adapter's name: the device's, or where the browser gives the device none (WebGPU in
/// Chromium), the vendor and architecture the page's probe read.
fn adapter_name(device: &Device) -> String {
    match device::adapter(device).map(|a| a.name) {
        Some(n) if !n.is_empty() => n,
        _ => super::state::with(|s| match &s.probe {
            super::state::Probe::Found(a) => a.name.clone(),
            _ => "an unnamed WebGPU adapter".into(),
        }),
    }
}

/// What a verdict holds for: adapter, browser, and the weight types and head widths checked.
fn key(adapter: &str, plan: &Plan) -> String {
    format!(
        "{adapter} | {} | {:?} | {:?} | {:?}",
        user_agent(),
        plan.types,
        plan.text_head_dims,
        plan.vision_head_dims
    )
}

async fn kept() -> BTreeMap<String, Report> {
    let text = async {
        io::opfs_root()
            .await?
            .dir(DIR, true)
            .await?
            .read_text(FILE)
            .await
    };
    // A missing or unreadable file means no verdict is kept: the test runs again.
    text.await
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

async fn keep(all: &BTreeMap<String, Report>) -> Result<(), WorkerError> {
    let text = serde_json::to_string(all).map_err(|e| e.to_string())?;
    let dir = io::opfs_root().await?.dir(DIR, true).await?;
    dir.write_text(FILE, &text)
        .await
        .map_err(|e| format!("keeping the self-test verdict: {}", String::from(e)).into())
}

/// The verdict kept for `device` and the model's `plan`, its turned-off forms applied again;
/// `None` where this adapter, browser and plan have none yet.
pub async fn kept_verdict(device: &Device, plan: &Plan) -> Option<Verdict> {
    let report = kept().await.remove(&key(&adapter_name(device), plan))?;
    forms::reset();
    forms::apply(&report.disabled);
    Some(Verdict {
        report,
        cached: true,
    })
}

/// Runs the self-test on `device` for the model's `plan` (while the weights are hashed and
/// loaded) and keeps its verdict for next time.
pub async fn run(device: &Device, plan: &Plan) -> Verdict {
    let adapter = adapter_name(device);
    let key = key(&adapter, plan);
    let mut report = selftest::run(device, plan, &PerfClock).await;
    if let Some(a) = report.adapter.as_mut() {
        a.name = adapter;
    }
    let mut all = kept().await;
    all.insert(key, report.clone());
    // Not kept is not fatal: the test runs again next time.
    let _ = keep(&all).await;
    Verdict {
        report,
        cached: false,
    }
}

/// Debug builds: makes `form` (its snake-case name, e.g. `naive`) give wrong results and forgets
/// the kept verdicts, so the next load runs the self-test again and must catch it.
pub async fn inject_fault(form: &str) -> Result<(), WorkerError> {
    if !cfg!(debug_assertions) {
        return Err(WorkerError::TestHooksOff);
    }
    let f: forms::Form = serde_json::from_value(serde_json::Value::String(form.into()))
        .map_err(|_| format!("{form:?} is not a kernel form"))?;
    forms::inject_fault(f);
    if let Ok(dir) = io::opfs_root().await?.dir(DIR, true).await {
        let _ = dir.remove(FILE).await;
    }
    Ok(())
}
