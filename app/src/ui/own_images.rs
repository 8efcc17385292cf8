//! "Your images": open or drop PNG, JPEG or DICOM files as one study, view them, see what the
//! model sees, and ask a free or a multiple-choice question. Everything stays in the tab and its
//! worker; identifying attributes are shown in a collapsed panel and never stored.

use leptos::prelude::*;
use rexvqa_engine::image::Policy;
use rexvqa_engine::session::Mode;
use web_sys::{DragEvent, File, FileList, HtmlInputElement};

use super::engine::Engine;
use super::signals::AskState;
use super::xray_view::XrayView;
use crate::protocol::Request;

fn files_of(list: Option<FileList>) -> Vec<File> {
    let Some(list) = list else {
        return Vec::new();
    };
    (0..list.length()).filter_map(|i| list.get(i)).collect()
}

/// The "Your images" part of the Study tab.
#[component]
pub fn OwnImages() -> impl IntoView {
    let engine = expect_context::<Engine>();
    let policy = RwSignal::new(Policy::Window);
    let question = RwSignal::new(String::new());
    let options: [RwSignal<String>; 4] = std::array::from_fn(|_| RwSignal::new(String::new()));
    let open = move |files: Vec<File>| {
        if files.is_empty() {
            return;
        }
        engine.own.set(AskState::default());
        engine.own_inputs.set((Vec::new(), 0));
        let names = files.iter().map(File::name).collect();
        engine.send_with(&Request::OpenOwnImages { names }, &files);
    };
    let on_pick = move |ev: leptos::ev::Event| {
        let input = event_target::<HtmlInputElement>(&ev);
        open(files_of(input.files()));
        input.set_value("");
    };
    let on_drop = move |ev: DragEvent| {
        ev.prevent_default();
        open(files_of(ev.data_transfer().and_then(|d| d.files())));
    };
    let show_inputs = move || {
        engine.send(&Request::OwnInputs {
            policy: policy.get_untracked(),
        })
    };
    let ask = move |mode: Option<Mode>| {
        let opts: Vec<String> = match mode {
            None => Vec::new(),
            Some(_) => options
                .iter()
                .map(|o| o.get_untracked())
                .filter(|o| !o.trim().is_empty())
                .collect(),
        };
        engine.own.set(AskState {
            busy: true,
            ..Default::default()
        });
        engine.send(&Request::AskOwn {
            question: question.get_untracked(),
            options: opts,
            mode: mode.unwrap_or(Mode::Fast),
            policy: policy.get_untracked(),
        });
        show_inputs();
    };
    let none_open = move || {
        engine
            .own_images
            .with(|l| l.iter().all(|i| i.path.is_none()))
    };
    let cannot_ask = move || engine.own.get().busy || engine.model.get().is_none() || none_open();
    view! {
        <section class="card" data-testid="own-images" aria-labelledby="own-title"
            on:dragover=move |ev: DragEvent| ev.prevent_default() on:drop=on_drop>
            <h2 id="own-title">"Your images"</h2>
            <p class="hint">"Open or drop PNG, JPEG or DICOM files (several views make one study). They are read in this tab only: nothing is uploaded or stored."</p>
            <label>"Images " <input type="file" multiple data-testid="own-input" on:change=on_pick /></label>
            <ul class="own-list" data-testid="own-list">
                {move || engine.own_images.get().into_iter().map(|i| {
                    let facts = i.info.as_ref().map(|f| {
                        let ts = f.transfer_syntax_name.clone().map(|t| format!(", {t}")).unwrap_or_default();
                        let frames = if f.frames > 1 { format!(", {} frames (the first is shown and asked about)", f.frames) } else { String::new() };
                        format!("{}×{}, {} bits stored, {}{ts}{frames}", f.width, f.height, f.bits_stored, f.photometric)
                    });
                    view! {
                        <li data-testid="own-item">
                            <strong>{i.name.clone()}</strong>" "
                            {facts.map(|f| view! { <span class="hint">{f}</span> })}
                            {i.error.clone().map(|e| view! { <p class="warn" data-testid="own-error">{e}</p> })}
                        </li>
                    }
                }).collect_view()}
            </ul>
            {move || {
                let ids: Vec<_> = engine.own_images.get().into_iter().filter(|i| !i.identifying.is_empty()).collect();
                (!ids.is_empty()).then(|| view! {
                    <details class="identifying" data-testid="own-identifying">
                        <summary>"Identifying attributes (stay on this machine: never stored, journaled or exported)"</summary>
                        {ids.into_iter().map(|i| view! {
                            <p><strong>{i.name.clone()}</strong></p>
                            <dl>{i.identifying.into_iter().map(|a| view! { <dt>{a.name}</dt><dd>{a.value}</dd> }).collect_view()}</dl>
                        }).collect_view()}
                    </details>
                })
            }}
            <div class="images">
                {move || engine.own_images.get().into_iter().filter_map(|i| {
                    let initial = i.view_window.map(|w| (w.center, w.width));
                    i.path.map(|p| view! { <XrayView path=p view_name=i.name.clone() initial=initial invert=i.inverted /> })
                }).collect_view()}
            </div>
            <div class="ask">
                <label>"Question " <textarea rows="2" data-testid="own-question" prop:value=move || question.get() on:input=move |ev| question.set(event_target_value(&ev))></textarea></label>
                <div class="row">
                    {options.iter().enumerate().map(|(k, o)| {
                        let o = *o;
                        let letter = (b'A' + k as u8) as char;
                        view! { <label>{format!("{letter} ")}<input type="text" data-testid=format!("own-option-{letter}") prop:value=move || o.get() on:input=move |ev| o.set(event_target_value(&ev)) /></label> }
                    }).collect_view()}
                </div>
                <div class="row">
                    <label>"16-bit policy " <select data-testid="own-policy" on:change=move |ev| { policy.set(Policy::parse(&event_target_value(&ev)).unwrap_or(Policy::Window)); if engine.model.get_untracked().is_some() && !none_open() { show_inputs(); } }>
                        <option value="window">"the file's window (DICOM; else min–max)"</option>
                        <option value="scale">"scale (v>>8)"</option>
                        <option value="minmax">"min–max"</option>
                        <option value="pillow-clamp">"pillow-clamp (official script)"</option>
                    </select></label>
                    <button class="secondary" data-testid="own-ask-free" disabled=cannot_ask on:click=move |_| ask(None)>"Ask (free question)"</button>
                    <button data-testid="own-ask-fast" disabled=cannot_ask on:click=move |_| ask(Some(Mode::Fast))>"Answer options (fast)"</button>
                    <button data-testid="own-ask-official" disabled=cannot_ask on:click=move |_| ask(Some(Mode::Official))>"Answer options (official)"</button>
                    <button class="secondary" data-testid="own-show-inputs" disabled=move || engine.model.get().is_none() || none_open() on:click=move |_| show_inputs()>"Show the model's input"</button>
                </div>
                {move || engine.model.get().is_none().then(|| view! { <p class="hint">"Load a model to ask."</p> })}
                {move || { let a = engine.own.get(); (a.busy && a.text.is_empty()).then(|| view! { <p role="status">"Thinking…"</p> }) }}
                {move || engine.own.get().scores.map(|s| view! {
                    <ul class="bars" data-testid="own-bars">
                        {s.letters.iter().zip(&s.probs).map(|(l, p)| view! {
                            <li data-testid=format!("own-prob-{l}")><span class="bar-label">{l.to_string()}</span>
                                <span class="bar" style=format!("width: {:.1}%", 100.0 * p)></span>
                                <span class="bar-value">{format!("{:.1}%", 100.0 * p)}</span></li>
                        }).collect_view()}
                    </ul>
                })}
                {move || engine.own.get().answer.map(|a| view! {
                    <p data-testid="own-answer"><strong>"MedGemma: "</strong>
                        <span data-testid="own-letter">{a.prediction.map(|l| l.to_string()).unwrap_or_default()}</span>
                        <span class="hint">{format!(" ({:.1} s)", a.ms / 1000.0)}</span></p>
                })}
                {move || { let a = engine.own.get(); (!a.text.is_empty()).then(|| view! { <pre class="reply" data-testid="own-text">{a.text}</pre> }) }}
            </div>
            {move || { let (how, side) = engine.own_inputs.get(); (!how.is_empty()).then(|| view! {
                <div class="model-input" data-testid="own-model-input">
                    <h3 data-testid="own-model-input-title">{format!("What the model sees ({side}×{side})")}</h3>
                    <div class="images">
                        {how.into_iter().enumerate().map(|(i, h)| view! {
                            <div><p data-testid="own-input-policy">{format!("Input {}: {h}", i + 1)}</p>
                                <XrayView path=format!("own-input/{i}") view_name=format!("model input {}", i + 1) /></div>
                        }).collect_view()}
                    </div>
                </div>
            }) }}
        </section>
    }
}
