//! Study panel: search and filter questions, view a study's images with window/level, reveal the
//! ground truth, and ask MedGemma (official question or a free one).

use leptos::prelude::*;
use rexvqa_engine::image::Policy;
use rexvqa_engine::session::Mode;

use rexvqa_engine::rexvqa::QuestionFilter;

use super::engine::Engine;
use super::own_images::OwnImages;
use super::signals::AskState;
use super::xray_view::XrayView;
use crate::protocol::Request;

const PAGE: usize = 25;

/// Bars of option probabilities.
#[component]
fn OptionBars(state: RwSignal<AskState>, options: Vec<String>) -> impl IntoView {
    move || {
        state.get().scores.map(|s| {
            let (letters, probs) = (s.letters, s.probs);
            let best = probs.iter().enumerate().fold(0, |b, (i, p)| if *p > probs[b] { i } else { b });
            view! {
                <ul class="bars" data-testid="option-bars">
                    {letters.iter().zip(&probs).enumerate().map(|(i, (l, p))| view! {
                        <li class:best=i == best data-testid=format!("prob-{l}")>
                            <span class="bar-label">{options.get(i).cloned().unwrap_or_else(|| l.to_string())}</span>
                            <span class="bar" style=format!("width: {:.1}%", 100.0 * p)></span>
                            <span class="bar-value">{format!("{:.1}%", 100.0 * p)}</span>
                        </li>
                    }).collect_view()}
                </ul>
            }
        })
    }
}

/// The study panel.
#[component]
pub fn StudyPanel() -> impl IntoView {
    let engine = expect_context::<Engine>();
    let split = RwSignal::new(String::new());
    let query = RwSignal::new(String::new());
    let task = RwSignal::new(String::new());
    let category = RwSignal::new(String::new());
    let offset = RwSignal::new(0usize);
    let reveal = RwSignal::new(false);
    let policy = RwSignal::new(Policy::Scale);
    let all_images = RwSignal::new(false);
    let free_text = RwSignal::new(String::new());

    // Default to the first split once a dataset is open.
    Effect::new(move |_| {
        if let Some(d) = engine.dataset.get()
            && let Some(first) = d.splits.keys().next()
            && !d.splits.contains_key(&split.get_untracked())
        {
            split.set(first.clone());
        }
    });
    Effect::new(move |_| {
        let s = split.get();
        if s.is_empty() {
            return;
        }
        let opt = |v: String| (!v.is_empty()).then_some(v);
        engine.send(&Request::ListQuestions {
            split: s,
            filter: QuestionFilter {
                query: query.get(),
                task: opt(task.get()),
                category: opt(category.get()),
            },
            offset: offset.get(),
            limit: PAGE,
        });
    });
    let open = move |id: String| {
        reveal.set(false);
        engine.ask.set(AskState::default());
        engine.free.set(AskState::default());
        engine.send(&Request::GetQuestion {
            split: split.get_untracked(),
            id,
        });
    };
    // Request the pixels of each present image of the question on screen.
    Effect::new(move |_| {
        if let Some(q) = engine.question.get() {
            let have = engine
                .images
                .with_untracked(|m| q.images.iter().filter(|i| m.contains_key(&i.path)).count());
            for img in q.images.iter().filter(|i| i.present) {
                if have == 0 || !engine.images.with_untracked(|m| m.contains_key(&img.path)) {
                    engine.send(&Request::GetImage {
                        path: img.path.clone(),
                    });
                }
            }
        }
    });
    let ask = move |mode: Mode| {
        let Some(q) = engine.question.get_untracked() else {
            return;
        };
        engine.ask.set(AskState {
            busy: true,
            ..Default::default()
        });
        engine.send(&Request::Ask {
            split: q.split,
            id: q.id,
            mode,
            policy: policy.get_untracked(),
            all_images: all_images.get_untracked(),
        });
    };
    let ask_free = move || {
        let Some(q) = engine.question.get_untracked() else {
            return;
        };
        let text = free_text.get_untracked();
        if text.trim().is_empty() {
            return;
        }
        engine.free.set(AskState {
            busy: true,
            ..Default::default()
        });
        engine.send(&Request::AskFree {
            split: q.split,
            id: q.id,
            text,
            policy: policy.get_untracked(),
            all_images: all_images.get_untracked(),
        });
    };

    view! {
        <section class="card" data-testid="study-panel" aria-labelledby="study-title">
            <h2 id="study-title">"Studies"</h2>
            {move || engine.dataset.get().is_none().then(|| view! { <p class="hint">"Open a dataset first."</p> })}
            <div class="row">
                <label>"Split " <select prop:value=move || split.get() on:change=move |ev| { split.set(event_target_value(&ev)); offset.set(0); }>
                    {move || engine.dataset.get().map(|d| d.splits.keys().map(|k| view! { <option value=k.clone()>{k.clone()}</option> }).collect_view())}
                </select></label>
                <label>"Search " <input type="search" placeholder="id, words, study" data-testid="study-search" prop:value=move || query.get() on:input=move |ev| { query.set(event_target_value(&ev)); offset.set(0); } /></label>
                <label>"Task " <select on:change=move |ev| { task.set(event_target_value(&ev)); offset.set(0); }>
                    <option value="">"all"</option>
                    {move || engine.questions.get().tasks.into_iter().map(|t| view! { <option value=t.clone()>{t.clone()}</option> }).collect_view()}
                </select></label>
                <label>"Category " <select on:change=move |ev| { category.set(event_target_value(&ev)); offset.set(0); }>
                    <option value="">"all"</option>
                    {move || engine.questions.get().categories.into_iter().map(|t| view! { <option value=t.clone()>{t.clone()}</option> }).collect_view()}
                </select></label>
            </div>
            <table class="grid questions" data-testid="question-list">
                <thead><tr><th>"id"</th><th>"task"</th><th>"question"</th></tr></thead>
                <tbody>
                    {move || engine.questions.get().items.into_iter().map(|r| {
                        let id = r.id.clone();
                        let id2 = r.id.clone();
                        view! {
                            <tr tabindex="0" data-testid="question-row" on:click=move |_| open(id.clone())
                                on:keydown=move |ev| if ev.key() == "Enter" { open(id2.clone()) }>
                                <td class="mono">{r.id.clone()}</td><td>{r.task.clone()}</td><td>{r.question.clone()}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
            <div class="row">
                <button class="secondary" disabled=move || offset.get() == 0 on:click=move |_| offset.update(|o| *o = o.saturating_sub(PAGE))>"◀ Previous"</button>
                <span>{move || { let t = engine.questions.get().total; format!("{}–{} of {t}", (offset.get() + 1).min(t), (offset.get() + PAGE).min(t)) }}</span>
                <button class="secondary" disabled=move || { offset.get() + PAGE >= engine.questions.get().total } on:click=move |_| offset.update(|o| *o += PAGE)>"Next ▶"</button>
            </div>
            {move || engine.question.get().map(|q| {
                let options = q.options.clone();
                let options2 = q.options.clone();
                view! {
                    <article class="question" data-testid="question-detail">
                        <h3>{q.question.clone()}</h3>
                        <p class="hint">{format!("{} · {} · {} · study {}", q.id, q.task, q.category, q.study)}</p>
                        <ol class="options">{q.options.iter().map(|o| view! { <li>{o.clone()}</li> }).collect_view()}</ol>
                        <div class="images">
                            {q.images.iter().map(|i| if i.present {
                                view! { <XrayView path=i.path.clone() view_name=i.view.clone() /> }.into_any()
                            } else {
                                view! { <p class="warn">{format!("{} image missing: {}", i.view, i.path)}</p> }.into_any()
                            }).collect_view()}
                        </div>
                        <button class="secondary" data-testid="reveal" on:click=move |_| reveal.update(|r| *r = !*r)>
                            {move || if reveal.get() { "Hide answer" } else { "Reveal answer" }}
                        </button>
                        {move || reveal.get().then(|| view! {
                            <div class="truth" data-testid="truth">
                                <p><strong>"Correct: "</strong>{q.correct.map(|l| l.to_string()).unwrap_or_else(|| "not given".into())}</p>
                                <p>{q.explanation.clone().unwrap_or_default()}</p>
                            </div>
                        })}
                        <div class="ask">
                            <div class="row">
                                <button data-testid="ask-fast" disabled=move || engine.ask.get().busy || engine.model.get().is_none() on:click=move |_| ask(Mode::Fast)>"Answer (fast: option probabilities)"</button>
                                <button data-testid="ask-official" disabled=move || engine.ask.get().busy || engine.model.get().is_none() on:click=move |_| ask(Mode::Official)>"Answer (official: generated explanation)"</button>
                                <label>"16-bit policy " <select on:change=move |ev| policy.set(Policy::parse(&event_target_value(&ev)).unwrap_or_default())>
                                    <option value="scale">"scale (v>>8)"</option>
                                    <option value="minmax">"min–max"</option>
                                    <option value="pillow-clamp">"pillow-clamp (official script)"</option>
                                </select></label>
                                <label><input type="checkbox" prop:checked=move || all_images.get() on:change=move |ev| all_images.set(event_target_checked(&ev)) />" all views"</label>
                            </div>
                            {move || engine.model.get().is_none().then(|| view! { <p class="hint">"Load a model to ask."</p> })}
                            {move || { let a = engine.ask.get(); (a.busy && a.text.is_empty() && a.scores.is_none()).then(|| view! { <p role="status">"Thinking…"</p> }) }}
                            <OptionBars state=engine.ask options=options />
                            {move || engine.ask.get().answer.map(|a| view! {
                                <p data-testid="ask-answer"><strong>"MedGemma: "</strong>
                                    <span data-testid="ask-letter">{a.prediction.map(|l| l.to_string()).unwrap_or_else(|| if a.unanswerable.is_some() { "not asked".into() } else { "no letter found".into() })}</span>
                                    {a.prediction.and_then(|l| options2.get(l.index()).cloned()).map(|o| format!(" — {o}"))}
                                    <span class="hint">{format!(" ({:.1} s)", a.ms / 1000.0)}</span>
                                </p>
                                {match &a.unanswerable {
                                    Some(reason) => view! { <p class="warn" data-testid="ask-unanswerable">{format!("Not asked: {reason}")}</p> }.into_any(),
                                    None => (!a.missing_images.is_empty()).then(|| view! { <p class="warn">{format!("Answered without: {}", a.missing_images.join("; "))}</p> }).into_any(),
                                }}
                            })}
                            {move || { let a = engine.ask.get(); (!a.text.is_empty() && a.scores.is_none()).then(|| view! { <pre class="reply" data-testid="ask-text">{a.text}</pre> }) }}
                            <label class="free">"Ask your own question about this study"
                                <textarea rows="2" prop:value=move || free_text.get() on:input=move |ev| free_text.set(event_target_value(&ev))
                                    on:keydown=move |ev| if ev.key() == "Enter" && (ev.ctrl_key() || ev.meta_key()) { ask_free() }></textarea>
                            </label>
                            <button class="secondary" disabled=move || engine.free.get().busy || engine.model.get().is_none() on:click=move |_| ask_free()>"Ask (Ctrl+Enter)"</button>
                            {move || { let f = engine.free.get(); (!f.text.is_empty() || f.busy).then(|| view! { <pre class="reply" data-testid="free-text">{if f.text.is_empty() { "…".to_string() } else { f.text }}</pre> }) }}
                        </div>
                    </article>
                }
            })}
        </section>
        <OwnImages />
    }
}
