//! The case being answered: its images, question and options, the countdown, and after the
//! answer the truth, the model's answer and the explanation. Keyboard first: A–D choose, Enter
//! answers and moves on, ← → move between answered cases.

use leptos::prelude::*;
use rexvqa_engine::quiz::{Key, ShowModel};
use rexvqa_engine::rexvqa::Letter;
use web_sys::KeyboardEvent;

use super::super::xray_view::XrayView;
use super::Taking;
use crate::io::now_ms;

fn letter(l: Option<Letter>) -> String {
    l.map_or_else(|| "—".into(), |l| l.to_string())
}

/// The case at the quiz's position (nothing before a quiz starts or once it is over).
#[component]
pub(super) fn QuizCase(taking: Taking) -> impl IntoView {
    let engine = taking.engine;
    let (results, position, selected, now) =
        (taking.results, taking.position, taking.selected, taking.now);
    let case_ref = NodeRef::<leptos::html::Div>::new();
    // Keyboard answers need the case focused whenever a case (re)appears.
    Effect::new(move |_| {
        position.track();
        engine.question.track();
        if let Some(el) = case_ref.get() {
            let _ = el.focus();
        }
    });
    let on_key = move |ev: KeyboardEvent| {
        let Some(key) = Key::from_dom(&ev.key()) else {
            return;
        };
        let t = now_ms();
        if let Some(step) = taking.quiz.try_update(|q| q.key(key, t)).flatten() {
            ev.prevent_default();
            taking.follow(step);
        }
    };
    let next = move || taking.act(&|t, now| t.next(now));

    move || {
        let r = results.get()?;
        let i = position.get();
        let n = r.quiz.ids.len();
        if i >= n {
            return None;
        }
        let q = engine.question.get().filter(|q| q.id == r.quiz.ids[i]);
        let revealed = r.answers.len() > i;
        let show_model = r.quiz.settings.show_model == ShowModel::AfterEach;
        let answer = r.answers.get(i).cloned();
        let limit_s = r.quiz.settings.time_limit_s;
        Some(view! {
            <div class="quiz-case" tabindex="0" node_ref=case_ref on:keydown=on_key data-testid="quiz-case" data-id=r.quiz.ids[i].clone()>
                <p class="row">
                    <strong data-testid="quiz-position">{format!("{} / {n}", i + 1)}</strong>
                    {limit_s.filter(|_| !revealed).map(|l| view! {
                        <span data-testid="quiz-timer">{move || format!(" — {:.0} s left", taking.quiz.with(|t| t.time_left_s(now.get())).unwrap_or(f64::from(l)).max(0.0))}</span>
                    })}
                    <span class="hint">" Keys: A–D choose, Enter answers and then moves on, ← → move between answered cases."</span>
                </p>
                {match q {
                    None => view! { <p role="status">"Loading the case…"</p> }.into_any(),
                    Some(q) => view! {
                        <div class="images">
                            {q.images.iter().filter(|im| im.present).map(|im| view! { <XrayView path=im.path.clone() view_name=im.view.clone() /> }).collect_view()}
                        </div>
                        <h3 data-testid="quiz-question">{q.question.clone()}</h3>
                        <ol class="quiz-options">
                            {q.options.iter().enumerate().map(|(k, o)| {
                                let l = Letter::ALL[k.min(3)];
                                let truth = revealed && q.correct == Some(l);
                                view! {
                                    <li data-testid=format!("quiz-option-{l}")
                                        class:chosen=move || selected.get() == Some(l)
                                        class:truth=truth
                                        on:click=move |_| taking.quiz.update(|t| t.choose(l))>
                                        {o.clone()}
                                    </li>
                                }
                            }).collect_view()}
                        </ol>
                        {(!revealed).then(|| view! {
                            <button data-testid="quiz-submit" disabled=move || selected.get().is_none() on:click=move |_| taking.act(&|t, now| t.submit(now))>"Answer (Enter)"</button>
                        })}
                        {revealed.then(|| {
                            let a = answer.clone();
                            view! {
                                <div class="quiz-reveal" data-testid="quiz-reveal">
                                    <p>"You: " <strong data-testid="quiz-student">{letter(a.as_ref().and_then(|a| a.student))}</strong>
                                       " · correct: " <strong data-testid="quiz-truth">{letter(q.correct)}</strong></p>
                                    {show_model.then(|| view! {
                                        <p>"MedGemma: "
                                            {match a.as_ref().and_then(|a| a.model) {
                                                Some(m) => view! {
                                                    <strong data-testid="quiz-model">{m.to_string()}</strong>
                                                    {a.as_ref().and_then(|a| a.model_probs.clone()).map(|p| format!(" ({})", p.iter().enumerate().map(|(k, v)| format!("{} {:.1}%", Letter::ALL[k.min(3)], 100.0 * v)).collect::<Vec<_>>().join(", ")))}
                                                }.into_any(),
                                                None if engine.model.get().is_some() => view! { <span role="status">"thinking…"</span> }.into_any(),
                                                None => view! { <span class="hint">"no model loaded"</span> }.into_any(),
                                            }}
                                        </p>
                                    })}
                                    {q.explanation.clone().map(|e| view! { <p class="explanation">{e}</p> })}
                                    <button data-testid="quiz-next" on:click=move |_| next()>
                                        {if i + 1 < n { "Next case (Enter)" } else { "See the results (Enter)" }}
                                    </button>
                                </div>
                            }
                        })}
                    }.into_any(),
                }}
            </div>
        })
    }
}
