//! The leptos UI: one component per file; components get signals, never own engine state.

pub mod engine;
mod gpu_panel;

use leptos::prelude::*;

use engine::{Engine, GpuState};
use gpu_panel::GpuPanel;

/// The application shell.
#[component]
pub fn App() -> impl IntoView {
    let engine = Engine::start();
    let (gpu, error) = match &engine {
        Ok(e) => (e.gpu, e.error),
        Err(msg) => (
            RwSignal::new(GpuState::Unavailable(format!(
                "The engine worker could not start: {msg}"
            ))),
            RwSignal::new(None),
        ),
    };
    if let Ok(e) = engine {
        provide_context(e);
    }
    view! {
        <header class="top">
            <h1>"rexvqa-web"</h1>
            <p class="tagline">"MedGemma on ReXVQA, entirely in your browser. No image or answer leaves this machine."</p>
        </header>
        <main>
            <GpuPanel state=gpu />
            {move || error.get().map(|e| view! { <p class="error" role="alert" data-testid="app-error">{e}</p> })}
        </main>
    }
}
