//! Shows the WebGPU adapter the engine runs on, or why there is none.

use leptos::prelude::*;

use super::signals::GpuState;

fn mib(bytes: f64) -> String {
    format!("{:.0} MiB", bytes / (1u64 << 20) as f64)
}

/// The GPU status card.
#[component]
pub fn GpuPanel(state: RwSignal<GpuState>) -> impl IntoView {
    view! {
        <section class="card" data-testid="gpu-panel" aria-labelledby="gpu-title">
            <h2 id="gpu-title">"WebGPU"</h2>
            {move || match state.get() {
                GpuState::Probing => view! { <p data-testid="gpu-probing">"Looking for a WebGPU adapter…"</p> }.into_any(),
                GpuState::Unavailable(reason) => view! {
                    <p class="error" role="alert" data-testid="gpu-unavailable">{reason}</p>
                }.into_any(),
                GpuState::Ready(r) => view! {
                    <dl class="facts" data-testid="gpu-ready">
                        <dt>"Adapter"</dt><dd data-testid="gpu-name">{r.name.clone()}</dd>
                        <dt>"Software fallback"</dt><dd data-testid="gpu-fallback">{if r.fallback { "yes" } else { "no" }}</dd>
                        <dt>"shader-f16"</dt><dd data-testid="gpu-f16">{if r.shader_f16 { "yes" } else { "no" }}</dd>
                        <dt>"subgroups"</dt><dd data-testid="gpu-subgroups">{if r.subgroups { "yes" } else { "no" }}</dd>
                        <dt>"subgroup matrix"</dt><dd data-testid="gpu-subgroup-matrix">{if r.features.iter().any(|f| f.ends_with("subgroup-matrix")) { "yes" } else { "no" }}</dd>
                        <dt>"Max buffer"</dt><dd data-testid="gpu-max-buffer">{mib(r.max_buffer_size)}</dd>
                        <dt>"Max storage binding"</dt><dd data-testid="gpu-max-binding">{mib(r.max_storage_binding)}</dd>
                        <dt>"Workgroup storage"</dt><dd>{format!("{} KiB", r.max_workgroup_storage / 1024.0)}</dd>
                        <dt>"Device"</dt><dd data-testid="gpu-device">{if r.device_ok { "created" } else { "failed" }}</dd>
                    </dl>
                }.into_any(),
            }}
        </section>
    }
}
