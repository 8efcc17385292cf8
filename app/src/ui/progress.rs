//! A progress bar with bytes, rate and time left, for copies, downloads and loads.

use leptos::prelude::*;

use super::engine::{Engine, bytes, duration};

/// The engine's current long operation, if any.
#[component]
pub fn ProgressBar() -> impl IntoView {
    let engine = expect_context::<Engine>();
    move || {
        engine.progress.get().map(|p| {
            let frac = if p.total > 0 { p.done as f64 / p.total as f64 } else { 0.0 };
            let eta = if p.rate > 0.0 { format!(", {} left", duration((p.total - p.done) as f64 / p.rate)) } else { String::new() };
            let rate = if p.rate > 0.0 { format!(" at {}/s", bytes(p.rate)) } else { String::new() };
            view! {
                <div class="progress" data-testid="progress" role="status">
                    <div>{p.label.clone()}</div>
                    <progress max="1" value=frac></progress>
                    <div class="hint">{format!("{:.0}% — {} of {}{rate}{eta}", 100.0 * frac, bytes(p.done as f64), bytes(p.total as f64))}</div>
                </div>
            }
        })
    }
}
