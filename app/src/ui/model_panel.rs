//! Model panel: pick the text GGUF and mmproj (file picker, drag and drop, or download), keep
//! them in browser storage, load them onto the GPU, and show the model card.

use leptos::prelude::*;
use web_sys::{DragEvent, File, HtmlInputElement};

use super::engine::{Engine, bytes};
use super::progress::ProgressBar;
use super::signals::Progress;
use crate::protocol::{Compute, DEFAULT_MMPROJ_URL, DEFAULT_TEXT_URL, Request};

fn first_file(ev: &leptos::ev::Event) -> Option<File> {
    event_target::<HtmlInputElement>(ev)
        .files()
        .and_then(|l| l.get(0))
}

/// The model panel.
#[component]
pub fn ModelPanel() -> impl IntoView {
    let engine = expect_context::<Engine>();
    let text = RwSignal::new_local(None::<File>);
    let mmproj = RwSignal::new_local(None::<File>);
    let text_url = RwSignal::new(DEFAULT_TEXT_URL.to_string());
    let mmproj_url = RwSignal::new(DEFAULT_MMPROJ_URL.to_string());
    let pick_text = RwSignal::new(String::new());
    let pick_mmproj = RwSignal::new(String::new());

    let on_drop = move |ev: DragEvent| {
        ev.prevent_default();
        let Some(list) = ev.data_transfer().and_then(|d| d.files()) else {
            return;
        };
        for i in 0..list.length() {
            if let Some(f) = list.get(i) {
                // mmproj files carry the word in their name in every public release.
                if f.name().to_lowercase().contains("mmproj") {
                    mmproj.set(Some(f));
                } else {
                    text.set(Some(f));
                }
            }
        }
    };
    let import = move |_| {
        let Some(t) = text.get_untracked() else {
            engine.error("Model: choose the text GGUF file first".into());
            return;
        };
        let mut files = vec![t];
        files.extend(mmproj.get_untracked());
        crate::io::request_persistent_storage();
        // Seen at once, while the worker (perhaps still starting) reads the files' headers.
        engine.progress.set(Some(Progress {
            label: "Checking the model files".into(),
            done: 0,
            total: files.iter().map(|f| f.size() as u64).sum(),
            rate: 0.0,
        }));
        engine.send_with(&Request::ImportModel, &files);
    };
    let stored = move || engine.cache.get().models;
    let load_stored = move |_| {
        let t = pick_text.get_untracked();
        if t.is_empty() {
            engine.error("Model: choose a stored text model".into());
            return;
        }
        let m = pick_mmproj.get_untracked();
        engine.send(&Request::LoadModel {
            text: t,
            mmproj: (!m.is_empty()).then_some(m),
        });
    };

    view! {
        <section class="card" data-testid="model-panel" aria-labelledby="model-title">
            <h2 id="model-title">"Model"</h2>
            <p class="hint">"MedGemma 4B as GGUF: the text model (e.g. medgemma-4b-it-Q4_K_M.gguf) and its vision file (mmproj-F16.gguf). Files are copied into this browser's private storage, so a reload does not lose them."</p>
            <label>"Run the model on "
                <select data-testid="compute" prop:value=move || engine.compute.get().key() on:change=move |ev| engine.set_compute(&event_target_value(&ev))>
                    {Compute::ALL.iter().map(|(_, key, label)| view! { <option value=*key>{*label}</option> }).collect_view()}
                </select>
            </label>
            <div class="drop" on:dragover=|ev: DragEvent| ev.prevent_default() on:drop=on_drop data-testid="model-drop">
                <label>"Text GGUF "
                    <input type="file" accept=".gguf" data-testid="model-text-input" on:change=move |ev| text.set(first_file(&ev)) />
                </label>
                <label>"mmproj GGUF "
                    <input type="file" accept=".gguf" data-testid="model-mmproj-input" on:change=move |ev| mmproj.set(first_file(&ev)) />
                </label>
                <span class="hint">"or drop both files here"</span>
            </div>
            <p>
                {move || text.with(|t| t.as_ref().map(|f| format!("text: {} ({})", f.name(), bytes(f.size())))).unwrap_or_default()}
                " "
                {move || mmproj.with(|t| t.as_ref().map(|f| format!("mmproj: {} ({})", f.name(), bytes(f.size())))).unwrap_or_default()}
            </p>
            <button data-testid="model-import" on:click=import>"Copy into storage and load"</button>
            <details>
                <summary>"Download from a URL (the only network use of this app)"</summary>
                <label>"Text GGUF URL " <input class="wide" prop:value=move || text_url.get() on:input=move |ev| text_url.set(event_target_value(&ev)) /></label>
                <label>"mmproj URL " <input class="wide" prop:value=move || mmproj_url.get() on:input=move |ev| mmproj_url.set(event_target_value(&ev)) /></label>
                <button class="secondary" on:click=move |_| engine.send(&Request::DownloadModel { text_url: text_url.get_untracked(), mmproj_url: mmproj_url.get_untracked() })>
                    "Download (resumable) and load"
                </button>
            </details>
            <ProgressBar />
            <h3>"In browser storage"</h3>
            {move || {
                let files = stored();
                if files.is_empty() {
                    return view! { <p class="hint">"Nothing stored yet."</p> }.into_any();
                }
                view! {
                    <table class="grid" data-testid="stored-models">
                        <thead><tr><th>"file"</th><th>"kind"</th><th>"size"</th><th>"state"</th><th></th></tr></thead>
                        <tbody>
                            {files.into_iter().map(|f| {
                                let name = f.name.clone();
                                let complete = f.size == f.expected;
                                view! {
                                    <tr>
                                        <td>{f.name.clone()}</td>
                                        <td>{f.architecture.clone()}</td>
                                        <td>{bytes(f.size as f64)}</td>
                                        <td>{if complete { "complete".to_string() } else { format!("partial ({} of {})", bytes(f.size as f64), bytes(f.expected as f64)) }}</td>
                                        <td><button class="secondary" on:click=move |_| engine.send(&Request::DeleteModel { name: name.clone() })>"Delete"</button></td>
                                    </tr>
                                }
                            }).collect_view()}
                        </tbody>
                    </table>
                    <div class="row">
                        <label>"Text " <select data-testid="stored-text" on:change=move |ev| pick_text.set(event_target_value(&ev))>
                            <option value="">"—"</option>
                            {move || stored().into_iter().filter(|f| f.architecture != "clip").map(|f| view! { <option value=f.name.clone()>{f.name.clone()}</option> }).collect_view()}
                        </select></label>
                        <label>"mmproj " <select data-testid="stored-mmproj" on:change=move |ev| pick_mmproj.set(event_target_value(&ev))>
                            <option value="">"none"</option>
                            {move || stored().into_iter().filter(|f| f.architecture != "gemma3").map(|f| view! { <option value=f.name.clone()>{f.name.clone()}</option> }).collect_view()}
                        </select></label>
                        <button data-testid="load-stored" on:click=load_stored>"Load"</button>
                    </div>
                }.into_any()
            }}
            {move || engine.cache.get().usage.map(|u| view! { <p class="hint">{format!("Browser storage: {} used of {}", bytes(u.used), bytes(u.quota))}</p> })}
            {move || engine.model.get().map(|c| view! {
                <div class="model-card" data-testid="model-card">
                    <h3>"Loaded: " {c.name.clone()}</h3>
                    <dl class="facts">
                        <dt>"Files"</dt><dd>{format!("{}{}", c.text, c.mmproj.as_ref().map(|m| format!(" + {m}")).unwrap_or_default())}</dd>
                        <dt>"Parameters"</dt><dd data-testid="model-params">{format!("{:.2} M", c.parameters as f64 / 1e6)}</dd>
                        <dt>"Size"</dt><dd>{bytes(c.bytes as f64)}</dd>
                        <dt>"Tensor types"</dt><dd>{c.types.iter().map(|(k, v)| format!("{k}×{v}")).collect::<Vec<_>>().join(", ")}</dd>
                        <dt>"Decoding"</dt><dd data-testid="model-decoding">{c.decoding.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join("; ")}</dd>
                        <dt>"Decoder"</dt><dd>{format!("{} layers, width {}, vocabulary {}", c.layers, c.hidden, c.vocab)}</dd>
                        <dt>"Vision"</dt><dd>{if c.vision { "yes" } else { "no (text only)" }}</dd>
                        <dt>"Runs on"</dt><dd data-testid="model-compute">{c.compute.clone()}</dd>
                        {c.selftest.clone().map(|v| view! { <dt>"Self-test"</dt><dd data-testid="model-selftest">{v}</dd> })}
                        <dt>"Load time"</dt><dd>{format!("{:.1} s", c.load_s)}</dd>
                        <dt>"Memory"</dt><dd data-testid="memory"
                            data-wasm-bytes=move || engine.memory.get().map(|m| m.wasm_bytes.to_string())
                            data-device-bytes=move || engine.memory.get().and_then(|m| m.device_bytes).map(|d| d.to_string())>{move || engine.memory.get().map_or_else(String::new, |m| format!(
                            "worker {} (WebAssembly peak, at most 4.3 GB){}",
                            bytes(m.wasm_bytes),
                            m.device_bytes.map(|d| format!("; device pool {}", bytes(d))).unwrap_or_default()
                        ))}</dd>
                        {c.sha256.iter().map(|(k, v)| view! { <dt>{k.clone()}</dt><dd class="hash" data-testid="model-sha256">{v.clone()}</dd> }).collect_view()}
                    </dl>
                </div>
            })}
        </section>
    }
}
