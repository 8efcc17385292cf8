//! The leptos UI: one component per file; components get the engine handle from context and
//! read its signals, never owning engine state.

mod about_panel;
mod bench_panel;
mod compare_panel;
mod dataset_panel;
pub mod engine;
mod eval_panel;
mod gpu_panel;
mod model_panel;
mod own_images;
mod progress;
mod quiz;
mod report_panel;
pub mod signals;
mod study_panel;
mod update;
mod xray_view;

use leptos::prelude::*;
use web_sys::KeyboardEvent;

use about_panel::AboutPanel;
use bench_panel::BenchPanel;
use compare_panel::ComparePanel;
use dataset_panel::DatasetPanel;
use engine::Engine;
use eval_panel::EvalPanel;
use gpu_panel::GpuPanel;
use model_panel::ModelPanel;
use quiz::QuizPanel;
use report_panel::ReportPanel;
use signals::Tab;
use study_panel::StudyPanel;
use update::UpdateNotice;

const TABS: [(&str, &str); 7] = [
    ("model", "Model"),
    ("data", "Dataset"),
    ("study", "Studies"),
    ("eval", "Evaluate"),
    ("report", "Report"),
    ("quiz", "Quiz"),
    ("about", "About"),
];

/// The application shell: header, tabs (arrow keys move between them), panels, errors.
#[component]
pub fn App() -> impl IntoView {
    let engine = Engine::start();
    provide_context(engine);
    let tab = RwSignal::new("model");
    provide_context(Tab(tab));
    // Finishing a run or opening one shows its report.
    Effect::new(move |_| {
        if engine.report.get().is_some() {
            tab.set("report");
        }
    });
    let on_key = move |ev: KeyboardEvent| {
        let i = TABS
            .iter()
            .position(|t| t.0 == tab.get_untracked())
            .unwrap_or(0);
        let j = match ev.key().as_str() {
            "ArrowRight" => (i + 1) % TABS.len(),
            "ArrowLeft" => (i + TABS.len() - 1) % TABS.len(),
            _ => return,
        };
        tab.set(TABS[j].0);
    };
    view! {
        <header class="top">
            <h1>"rexvqa-web"</h1>
            <p class="tagline">"MedGemma on ReXVQA, entirely in your browser. No image or answer leaves this machine."</p>
            <nav role="tablist" aria-label="sections" on:keydown=on_key>
                {TABS.iter().map(|(id, label)| view! {
                    <button role="tab" class="tab" data-testid=format!("tab-{id}")
                        aria-selected=move || (tab.get() == *id).to_string()
                        class:active=move || tab.get() == *id
                        tabindex=move || if tab.get() == *id { "0" } else { "-1" }
                        on:click=move |_| tab.set(id)>{*label}</button>
                }).collect_view()}
            </nav>
        </header>
        <main>
            <UpdateNotice />
            {move || engine.fatal.get().map(|message| view! {
                <div class="errors" role="alert" data-testid="engine-fatal">
                    <p><strong>"The engine stopped after an internal error."</strong>" Your stored models, evaluation runs and quiz are kept in this browser's storage; reload the page to start the engine again (a run resumes from its last saved answer)."</p>
                    <p class="hint" data-testid="engine-fatal-message">{message}</p>
                    <button data-testid="engine-reload" on:click=move |_| { if let Some(w) = web_sys::window() { let _ = w.location().reload(); } }>"Reload"</button>
                </div>
            })}
            {move || engine.device_loss.get().map(|d| view! { <DeviceLossNotice loss=d /> })}
            {move || (!engine.errors.get().is_empty()).then(|| view! {
                <div class="errors" role="alert" data-testid="app-error">
                    {engine.errors.get().into_iter().rev().take(3).map(|e| view! { <p>{e}</p> }).collect_view()}
                    <button class="secondary" on:click=move |_| engine.errors.set(Vec::new())>"Dismiss"</button>
                </div>
            })}
            <div hidden=move || tab.get() != "model"><GpuPanel state=engine.gpu /><ModelPanel /><BenchPanel /></div>
            <div hidden=move || tab.get() != "data"><DatasetPanel /></div>
            <div hidden=move || tab.get() != "study"><StudyPanel /></div>
            <div hidden=move || tab.get() != "eval"><EvalPanel /></div>
            <div hidden=move || tab.get() != "report"><ReportPanel /><ComparePanel /></div>
            <div hidden=move || tab.get() != "quiz"><QuizPanel /></div>
            <div hidden=move || tab.get() != "about"><AboutPanel /></div>
        </main>
    }
}

/// The lost GPU device and the recovery from it.
#[component]
fn DeviceLossNotice(loss: engine::DeviceLoss) -> impl IntoView {
    use engine::RecoveryState;
    let engine = expect_context::<engine::Engine>();
    let times = if loss.count > 1 {
        format!(" ({} times since the page opened)", loss.count)
    } else {
        String::new()
    };
    let (class, status) = match loss.state {
        RecoveryState::Restoring => (
            "notice",
            view! { <p data-testid="device-recovering">"Starting the engine again: loading the model from browser storage and reopening the dataset…"</p> }.into_any(),
        ),
        RecoveryState::Recovered { resumed } => (
            "notice",
            view! { <p data-testid="device-recovered">"Recovered: "{resumed}"."</p> }.into_any(),
        ),
        RecoveryState::Failed(e) => (
            "errors",
            view! { <p data-testid="device-recovery-failed">"Could not recover: "{e}". Reload the page (stored models and runs are kept; a run resumes from its last saved answer)."</p> }.into_any(),
        ),
    };
    view! {
        <div class=class role="status" data-testid="device-lost">
            <p><strong>"The GPU device was lost"</strong>{times}" — the browser said: "<span class="mono" data-testid="device-lost-message">{loss.message}</span></p>
            {status}
            <button class="secondary" on:click=move |_| engine.device_loss.set(None)>"Dismiss"</button>
        </div>
    }
}
