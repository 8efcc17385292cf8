//! About: what the app does and what stays on this machine.

use leptos::prelude::*;

/// The about/privacy panel.
#[component]
pub fn AboutPanel() -> impl IntoView {
    view! {
        <section class="card" data-testid="about-panel" aria-labelledby="about-title">
            <h2 id="about-title">"About and privacy"</h2>
            <p>"rexvqa-web runs Google's MedGemma 4B on your own GPU through WebGPU, inside this page. It answers ReXVQA chest X-ray questions and scores whole splits with the benchmark's official protocol."</p>
            <h3>"What stays local"</h3>
            <ul>
                <li>"Images and questions are read from the folder you choose; they are never uploaded."</li>
                <li>"Answers, evaluation journals and models are kept in this browser's private storage (origin-private file system) on this machine."</li>
                <li>"The only network request the app can make is the model download you start yourself in the Model panel. A Content-Security-Policy blocks every other connection."</li>
                <li>"There is no server-side component, analytics or telemetry."</li>
            </ul>
            <h3>"Not for clinical use"</h3>
            <p>"MedGemma's answers are research output, not medical advice."</p>
        </section>
    }
}
