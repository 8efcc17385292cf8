//! The quiz's setup form: which split, how many cases, the seed, the filters, the time limit,
//! when the model's answer shows, the reader's name; or resume the saved quiz, or open a quiz
//! file.

use leptos::prelude::*;
use rexvqa_engine::quiz::{QuizSettings, ShowModel};

use super::super::engine::Engine;
use super::{Taking, picked, read_files};
use crate::protocol::Request;

/// The form's fields, kept by the panel so that a new quiz starts from the last one's settings.
#[derive(Clone, Copy)]
pub(super) struct Form {
    split: RwSignal<String>,
    count: RwSignal<usize>,
    seed: RwSignal<u64>,
    task: RwSignal<String>,
    category: RwSignal<String>,
    /// Seconds per case; 0: no limit.
    limit: RwSignal<u32>,
    show: RwSignal<ShowModel>,
}

impl Form {
    /// The defaults: 20 cases, seed 1, every task and category, no time limit, the model's
    /// answer after each case.
    pub(super) fn new() -> Form {
        Form {
            split: RwSignal::new(String::new()),
            count: RwSignal::new(20),
            seed: RwSignal::new(1),
            task: RwSignal::new(String::new()),
            category: RwSignal::new(String::new()),
            limit: RwSignal::new(0),
            show: RwSignal::new(ShowModel::AfterEach),
        }
    }

    /// The split chosen, or the dataset's first.
    pub(super) fn split_name(self, engine: Engine) -> String {
        engine.split_or_first(self.split.get_untracked())
    }
}

/// The setup form, shown while no quiz is being taken.
#[component]
pub(super) fn QuizSetup(taking: Taking, form: Form) -> impl IntoView {
    let engine = taking.engine;
    let reader = taking.reader;
    let Form {
        split,
        count,
        seed,
        task,
        category,
        limit,
        show,
    } = form;
    let split_name = move || form.split_name(engine);

    let start = move |_| {
        let opt = |v: String| if v.is_empty() { vec![] } else { vec![v] };
        engine.send(&Request::MakeQuiz {
            split: split_name(),
            settings: QuizSettings {
                split: split_name(),
                count: count.get_untracked(),
                tasks: opt(task.get_untracked()),
                categories: opt(category.get_untracked()),
                seed: seed.get_untracked(),
                time_limit_s: (limit.get_untracked() > 0).then(|| limit.get_untracked()),
                show_model: show.get_untracked(),
            },
        });
    };
    let resume = move |_| {
        if let Some(saved) = engine.saved_quiz.get_untracked() {
            engine.saved_quiz.set(None);
            engine.quiz_report.set(None);
            taking.act(&move |t, now| t.resume(saved.clone(), now));
        }
    };
    let on_import = move |ev: leptos::ev::Event| {
        let files = picked(&ev);
        let split = split_name();
        leptos::task::spawn_local(async move {
            match read_files(files).await {
                Ok(mut f) if !f.is_empty() => engine.send(&Request::OpenQuiz {
                    split,
                    json: f.remove(0).1,
                }),
                Ok(_) => {}
                Err(e) => engine.error(format!("Quiz: {e}")),
            }
        });
    };

    view! {
        <div class="quiz-setup" data-testid="quiz-setup">
            {move || engine.saved_quiz.get().map(|saved| (saved.results, saved.position)).map(|(r, i)| view! {
                <p>
                    <button data-testid="quiz-resume" on:click=resume>
                        {format!("Resume the quiz of {} (case {} of {})", if r.reader.is_empty() { "an unnamed reader".to_string() } else { r.reader.clone() }, (i + 1).min(r.quiz.ids.len()), r.quiz.ids.len())}
                    </button>
                </p>
            })}
            <div class="row">
                <label>"Split " <select data-testid="quiz-split" on:change=move |ev| split.set(event_target_value(&ev))>
                    {move || engine.dataset.get().map(|d| d.splits.keys().map(|k| view! { <option value=k.clone()>{k.clone()}</option> }).collect_view())}
                </select></label>
                <label>"Cases " <input type="number" min="1" data-testid="quiz-count" prop:value=move || count.get().to_string() on:input=move |ev| count.set(event_target_value(&ev).parse().unwrap_or(1)) /></label>
                <label>"Seed " <input type="number" min="0" data-testid="quiz-seed" prop:value=move || seed.get().to_string() on:input=move |ev| seed.set(event_target_value(&ev).parse().unwrap_or(0)) /></label>
                <label>"Seconds per case (0: no limit) " <input type="number" min="0" data-testid="quiz-limit" prop:value=move || limit.get().to_string() on:input=move |ev| limit.set(event_target_value(&ev).parse().unwrap_or(0)) /></label>
            </div>
            <div class="row">
                <label>"Task " <select data-testid="quiz-task" on:change=move |ev| task.set(event_target_value(&ev))>
                    <option value="">"all"</option>
                    {move || engine.dataset.get().and_then(|d| d.splits.values().next().cloned()).map(|s| s.per_task.keys().map(|k| view! { <option value=k.clone()>{k.clone()}</option> }).collect_view())}
                </select></label>
                <label>"Category " <select data-testid="quiz-category" on:change=move |ev| category.set(event_target_value(&ev))>
                    <option value="">"all"</option>
                    {move || engine.dataset.get().and_then(|d| d.splits.values().next().cloned()).map(|s| s.per_category.keys().map(|k| view! { <option value=k.clone()>{k.clone()}</option> }).collect_view())}
                </select></label>
                <label>"Model's answer " <select data-testid="quiz-show" on:change=move |ev| show.set(if event_target_value(&ev) == "at_end" { ShowModel::AtEnd } else { ShowModel::AfterEach })>
                    <option value="after_each">"after each case"</option>
                    <option value="at_end">"only at the end"</option>
                </select></label>
                <label>"Your name " <input data-testid="quiz-reader" prop:value=move || reader.get() on:input=move |ev| reader.set(event_target_value(&ev)) /></label>
            </div>
            <div class="row">
                <button data-testid="quiz-start" disabled=move || engine.dataset.get().is_none() on:click=start>"Start the quiz"</button>
                <label class="secondary">"Open a quiz file " <input type="file" accept=".json" data-testid="quiz-import" on:change=on_import /></label>
            </div>
            {move || engine.dataset.get().is_none().then(|| view! { <p class="hint">"Open the dataset folder first (Dataset tab)."</p> })}
            {move || engine.model.get().is_none().then(|| view! { <p class="hint">"Without a loaded model the quiz compares you with the truth only."</p> })}
        </div>
    }
}
