//! Dataset panel: open the user's local ReXVQA download (a folder with metadata/ and
//! deid_png/), and show counts per split, task and category, and missing images.

use js_sys::{Array, Reflect};
use leptos::prelude::*;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{File, HtmlInputElement};

use super::engine::{Engine, bytes, duration};
use crate::protocol::{Request, UnpackState};
use crate::unpack::is_archive;

/// Walks a directory handle (showDirectoryPicker) into (relative path, File) pairs.
async fn walk(dir: JsValue, prefix: String, out: &mut Vec<(String, File)>) -> Result<(), JsValue> {
    let it = js_sys::Function::from(Reflect::get(&dir, &"values".into())?).call0(&dir)?;
    let next = js_sys::Function::from(Reflect::get(&it, &"next".into())?);
    loop {
        let step = JsFuture::from(js_sys::Promise::from(next.call0(&it)?)).await?;
        if Reflect::get(&step, &"done".into())?
            .as_bool()
            .unwrap_or(true)
        {
            break;
        }
        let handle = Reflect::get(&step, &"value".into())?;
        let name = Reflect::get(&handle, &"name".into())?
            .as_string()
            .unwrap_or_default();
        let kind = Reflect::get(&handle, &"kind".into())?
            .as_string()
            .unwrap_or_default();
        let path = format!("{prefix}{name}");
        if kind == "directory" {
            // Only the two folders the dataset uses are walked, so a big parent folder is cheap.
            if prefix.is_empty() && !(name == "metadata" || name == "deid_png") {
                continue;
            }
            Box::pin(walk(handle, format!("{path}/"), out)).await?;
        } else if name.ends_with(".json")
            || name.ends_with(".png")
            || (prefix.is_empty() && is_archive(&name))
        {
            let f = JsFuture::from(js_sys::Promise::from(
                js_sys::Function::from(Reflect::get(&handle, &"getFile".into())?).call0(&handle)?,
            ))
            .await?;
            out.push((path, f.unchecked_into()));
        }
    }
    Ok(())
}

fn send_files(engine: Engine, pairs: Vec<(String, File)>) {
    if pairs.is_empty() {
        engine.error(
            "Dataset: the chosen folder holds no .json, .png or deid_png.part* files".into(),
        );
        return;
    }
    let parts = pairs.iter().filter(|(p, _)| is_archive(p)).count();
    engine.busy.set(Some(if parts == pairs.len() {
        format!("Opening the image archive ({parts} parts)…")
    } else {
        format!("Reading {} files…", pairs.len() - parts)
    }));
    let (paths, files): (Vec<String>, Vec<File>) = pairs.into_iter().unzip();
    engine.send_with(&Request::OpenDataset { paths }, &files);
}

/// The dataset panel.
#[component]
pub fn DatasetPanel() -> impl IntoView {
    let engine = expect_context::<Engine>();
    let folder_input = NodeRef::<leptos::html::Input>::new();
    Effect::new(move |_| {
        if let Some(i) = folder_input.get() {
            // Not in leptos' attribute list; set directly.
            let _ = i.set_attribute("webkitdirectory", "");
        }
    });
    let on_folder = move |ev: leptos::ev::Event| {
        let input = event_target::<HtmlInputElement>(&ev);
        let Some(list) = input.files() else { return };
        let mut pairs = Vec::new();
        for i in 0..list.length() {
            if let Some(f) = list.get(i) {
                let rel = Reflect::get(&f, &"webkitRelativePath".into())
                    .ok()
                    .and_then(|v| v.as_string())
                    .unwrap_or_default();
                // Drop the chosen folder's own name.
                let rel = rel
                    .split_once('/')
                    .map(|(_, r)| r.to_string())
                    .unwrap_or(rel);
                let top = !rel.contains('/');
                if rel.ends_with(".json") || rel.ends_with(".png") || (top && is_archive(&rel)) {
                    pairs.push((rel, f));
                }
            }
        }
        input.set_value("");
        send_files(engine, pairs);
    };
    let on_files = move |ev: leptos::ev::Event| {
        let input = event_target::<HtmlInputElement>(&ev);
        let Some(list) = input.files() else {
            return;
        };
        let pairs = (0..list.length())
            .filter_map(|i| list.get(i))
            .map(|f| {
                let n = f.name();
                let p = if n.ends_with(".json") {
                    format!("metadata/{n}")
                } else {
                    n
                };
                (p, f)
            })
            .collect();
        input.set_value("");
        send_files(engine, pairs);
    };
    let on_archive = move |ev: leptos::ev::Event| {
        let input = event_target::<HtmlInputElement>(&ev);
        let Some(list) = input.files() else {
            return;
        };
        let pairs: Vec<(String, File)> = (0..list.length())
            .filter_map(|i| list.get(i))
            .map(|f| (f.name(), f))
            .collect();
        // Cleared, so that picking the same files again (after freeing space) is a change.
        input.set_value("");
        if let Some((n, _)) = pairs.iter().find(|(n, _)| !is_archive(n)) {
            engine.error(format!(
                "Dataset: {n} is not an image archive part (deid_png.part00, deid_png.part01, … or a .tar.zst)"
            ));
            return;
        }
        send_files(engine, pairs);
    };
    let has_picker =
        Reflect::has(&js_sys::global(), &"showDirectoryPicker".into()).unwrap_or(false);
    let pick = move |_| {
        leptos::task::spawn_local(async move {
            let picker =
                Reflect::get(&js_sys::global(), &"showDirectoryPicker".into()).unwrap_or_default();
            let r = async {
                let dir = JsFuture::from(js_sys::Promise::from(
                    js_sys::Function::from(picker).call0(&JsValue::NULL)?,
                ))
                .await?;
                let mut out = Vec::new();
                walk(dir, String::new(), &mut out).await?;
                Ok::<_, JsValue>(out)
            }
            .await;
            match r {
                Ok(pairs) => send_files(engine, pairs),
                Err(e) => engine.error(format!("Dataset: {}", crate::gpu::describe(&e))),
            }
        });
    };
    let _ = Array::new;
    view! {
        <section class="card" data-testid="dataset-panel" aria-labelledby="data-title">
            <h2 id="data-title">"Dataset"</h2>
            <p class="hint">"Your local ReXVQA download: the folder that holds metadata/test_vqa_data.json (or valid_…) and deid_png/. Nothing is uploaded; files are read where they are."</p>
            <div class="row">
                {has_picker.then(|| view! { <button on:click=pick data-testid="dataset-pick">"Choose folder…"</button> })}
                <label>"Folder " <input type="file" multiple node_ref=folder_input data-testid="dataset-folder-input" on:change=on_folder /></label>
                <label>"or files " <input type="file" multiple accept=".json,.png" data-testid="dataset-files-input" on:change=on_files /></label>
                <label>"Image archive " <input type="file" multiple data-testid="dataset-archive-input" on:change=on_archive /></label>
            </div>
            <p class="hint">"The image archive is ReXGradient-160K's deid_png.part00, deid_png.part01, … (all parts, any order) or one .tar.zst. It is read here, in this tab, and the images the open split uses are unpacked into browser storage once; pick the split's JSON first so only those are kept. If unpacking stops, pick the parts again: what was unpacked is kept."</p>
            {move || engine.unpack.get().map(|u| {
                let frac = if u.total_bytes > 0 { u.done_bytes as f64 / u.total_bytes as f64 } else { 0.0 };
                let running = u.state == UnpackState::Running;
                let line = match u.state {
                    UnpackState::Running => format!(
                        "{:.0}% of {} read at {}/s, {} left — {} images unpacked, {} already there",
                        100.0 * frac, bytes(u.total_bytes as f64), bytes(u.rate), duration(u.eta_s), u.written, u.kept
                    ),
                    UnpackState::Finished => format!("Archive read: {} images unpacked, {} already there.", u.written, u.kept),
                    _ => format!(
                        "Unpacking stopped at {:.0}% ({} images unpacked). Pick the parts again to go on; unpacked images are kept.",
                        100.0 * frac, u.written
                    ),
                };
                view! {
                    <div class="progress" data-testid="unpack" data-state=u.state.as_str() role="status">
                        <div>"Unpacking images from the archive"</div>
                        <progress max="1" value=frac></progress>
                        <div class="hint" data-testid="unpack-line">{line}</div>
                        {running.then(|| view! { <button data-testid="unpack-stop" on:click=move |_| engine.send(&Request::UnpackCancel)>"Stop"</button> })}
                    </div>
                }
            })}
            {move || engine.busy.get().map(|b| view! { <p role="status">{b}</p> })}
            {move || engine.dataset.get().map(|d| view! {
                <div data-testid="dataset-summary">
                    <p>{format!("{} PNG files found.", d.png_files)}</p>
                    {(d.unpacked_images > 0).then(|| view! {
                        <p data-testid="unpacked-count">
                            {format!("{} images unpacked in browser storage. ", d.unpacked_images)}
                            <button class="secondary" data-testid="unpacked-delete" on:click=move |_| engine.send(&Request::DeleteUnpacked)>"Delete unpacked images"</button>
                        </p>
                    })}
                    {d.warnings.iter().map(|w| view! { <p class="warn">{w.clone()}</p> }).collect_view()}
                    {d.splits.iter().map(|(name, s)| {
                        let missing = d.missing_images.get(name).copied().unwrap_or(0);
                        view! {
                            <h3>{format!("Split: {name}")}</h3>
                            <p data-testid=format!("split-{name}-counts")>
                                {format!("{} questions, {} studies, {} images", s.questions, s.studies, s.images)}
                                {(s.rejected > 0).then(|| format!(", {} unusable records", s.rejected))}
                            </p>
                            <p class={if missing > 0 { "warn" } else { "ok" }} data-testid=format!("split-{name}-missing")>
                                {format!("{missing} referenced images missing")}
                            </p>
                            <div class="two">
                                <table class="grid"><thead><tr><th>"task"</th><th>"questions"</th></tr></thead><tbody>
                                    {s.per_task.iter().map(|(t, n)| view! { <tr><td>{t.clone()}</td><td>{*n}</td></tr> }).collect_view()}
                                </tbody></table>
                                <table class="grid"><thead><tr><th>"category"</th><th>"questions"</th></tr></thead><tbody>
                                    {s.per_category.iter().map(|(t, n)| view! { <tr><td>{if t.is_empty() { "(none)".to_string() } else { t.clone() }}</td><td>{*n}</td></tr> }).collect_view()}
                                </tbody></table>
                            </div>
                        }
                    }).collect_view()}
                </div>
            })}
        </section>
    }
}
