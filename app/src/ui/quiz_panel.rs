//! Teaching and reader-study mode: draw a seeded quiz, take it case by case with the keyboard
//! (A–D, Enter, arrows), see the truth and the model after each case or at the end, score it,
//! export it, and merge several students' result files into a reader-study table. The quiz in
//! progress is saved in browser storage after every step, so a reload resumes it.

use leptos::prelude::*;
use rexvqa_engine::image::Policy;
use rexvqa_engine::quiz::{CaseAnswer, FORMAT, QuizResults, QuizSettings, ShowModel};
use rexvqa_engine::rexvqa::Letter;
use rexvqa_engine::score::Cell;
use rexvqa_engine::session::Mode;
use wasm_bindgen_futures::JsFuture;
use web_sys::{File, HtmlInputElement, KeyboardEvent};

use super::engine::Engine;
use super::xray_view::XrayView;
use crate::io::now_ms;
use crate::protocol::Request;

fn pct(c: &Cell) -> String {
    format!("{:.1}", 100.0 * c.accuracy)
}

fn ci(c: &Cell) -> String {
    format!("{:.1}–{:.1}", 100.0 * c.ci_low, 100.0 * c.ci_high)
}

fn kappa(k: Option<f64>) -> String {
    k.map_or_else(|| "n/a".into(), |k| format!("{k:.3}"))
}

fn letter(l: Option<Letter>) -> String {
    l.map_or_else(|| "—".into(), |l| l.to_string())
}

/// Reads the text of picked files.
async fn read_files(files: Vec<File>) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for f in files {
        let text = JsFuture::from(f.text())
            .await
            .map_err(|e| crate::gpu::describe(&e))?;
        out.push((f.name(), text.as_string().unwrap_or_default()));
    }
    Ok(out)
}

fn picked(ev: &leptos::ev::Event) -> Vec<File> {
    event_target::<HtmlInputElement>(ev)
        .files()
        .map(|l| (0..l.length()).filter_map(|i| l.get(i)).collect())
        .unwrap_or_default()
}

/// The quiz panel.
#[component]
pub fn QuizPanel() -> impl IntoView {
    let engine = expect_context::<Engine>();
    // Setup form.
    let split = RwSignal::new(String::new());
    let count = RwSignal::new(20usize);
    let seed = RwSignal::new(1u64);
    let reader = RwSignal::new(String::new());
    let task = RwSignal::new(String::new());
    let category = RwSignal::new(String::new());
    let limit = RwSignal::new(0u32);
    let show = RwSignal::new(ShowModel::AfterEach);
    // The quiz being taken.
    let results = RwSignal::new(None::<QuizResults>);
    let position = RwSignal::new(0usize);
    let selected = RwSignal::new(None::<Letter>);
    let started = RwSignal::new(0f64);
    let now = RwSignal::new(0f64);
    let case_ref = NodeRef::<leptos::html::Div>::new();

    let split_name = move || engine.split_or_first(split.get_untracked());
    let current_id = move || {
        results.with(|r| {
            r.as_ref()
                .and_then(|r| r.quiz.ids.get(position.get()).cloned())
        })
    };
    let answered =
        move |i: usize| results.with(|r| r.as_ref().is_some_and(|r| r.answers.len() > i));
    let save = move || {
        if let Some(r) = results.get_untracked() {
            engine.send(&Request::SaveQuiz {
                results: r,
                position: position.get_untracked(),
            });
        }
    };
    let score = move |export: Option<&str>| {
        if let Some(r) = results.get_untracked() {
            engine.send(&Request::QuizReport {
                split: r.quiz.settings.split.clone(),
                results: r,
                export: export.map(String::from),
            });
        }
    };
    let open_case = move |i: usize| {
        position.set(i);
        selected.set(results.with_untracked(|r| {
            r.as_ref()
                .and_then(|r| r.answers.get(i))
                .and_then(|a| a.student)
        }));
        started.set(now_ms());
        let Some((split, id, n)) = results.with_untracked(|r| {
            r.as_ref().map(|r| {
                (
                    r.quiz.settings.split.clone(),
                    r.quiz.ids.get(i).cloned(),
                    r.quiz.ids.len(),
                )
            })
        }) else {
            return;
        };
        save();
        match id {
            Some(id) => {
                engine.ask.set(Default::default());
                engine.send(&Request::GetQuestion { split, id });
            }
            None if n > 0 => score(None),
            None => {}
        }
    };
    // Keyboard answers need the case focused whenever a case (re)appears.
    Effect::new(move |_| {
        position.track();
        engine.question.track();
        if let Some(el) = case_ref.get() {
            let _ = el.focus();
        }
    });
    // A drawn or opened quiz starts at once.
    Effect::new(move |_| {
        if let Some(q) = engine.quiz.get() {
            engine.quiz_report.set(None);
            results.set(Some(QuizResults {
                format: FORMAT.into(),
                reader: reader.get_untracked(),
                quiz: q,
                answers: Vec::new(),
            }));
            engine.quiz.set(None);
            open_case(0);
        }
    });
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
        if let Some((r, i)) = engine.saved_quiz.get_untracked() {
            engine.saved_quiz.set(None);
            engine.quiz_report.set(None);
            results.set(Some(r));
            open_case(i);
        }
    };
    let submit = move || {
        let Some(id) = current_id() else { return };
        if answered(position.get_untracked()) {
            return;
        }
        let ms = (now_ms() - started.get_untracked()).max(0.0) as u64;
        let student = selected.get_untracked();
        results.update(|r| {
            if let Some(r) = r {
                r.answers.push(CaseAnswer {
                    id: id.clone(),
                    student,
                    ms,
                    model: None,
                    model_probs: None,
                });
            }
        });
        save();
        // The model answers every case when one is loaded; the setting only decides when the
        // student sees it.
        if engine.model.get_untracked().is_some() {
            let split = results.with_untracked(|r| {
                r.as_ref()
                    .map(|r| r.quiz.settings.split.clone())
                    .unwrap_or_default()
            });
            engine.ask.set(Default::default());
            engine.send(&Request::Ask {
                split,
                id,
                mode: Mode::Fast,
                policy: Policy::default(),
                all_images: false,
            });
        }
    };
    // The model's answer lands in the case it was asked for.
    Effect::new(move |_| {
        let Some(a) = engine.ask.get().answer else {
            return;
        };
        let mut changed = false;
        results.update(|r| {
            if let Some(case) = r
                .as_mut()
                .and_then(|r| r.answers.iter_mut().find(|c| c.id == a.id))
                && case.model.is_none()
            {
                case.model = a.prediction;
                case.model_probs = a.probs.clone();
                changed = true;
            }
        });
        if changed {
            save();
        }
    });
    // The clock: a countdown when the quiz has a time limit; out of time submits the selection.
    let tick = leptos::prelude::set_interval_with_handle(
        move || {
            now.set(now_ms());
            let limit =
                results.with_untracked(|r| r.as_ref().and_then(|r| r.quiz.settings.time_limit_s));
            if let Some(l) = limit
                && current_id().is_some()
                && !answered(position.get_untracked())
                && now_ms() - started.get_untracked() >= f64::from(l) * 1000.0
            {
                submit();
            }
        },
        std::time::Duration::from_millis(250),
    );
    on_cleanup(move || {
        if let Ok(h) = tick {
            h.clear();
        }
    });
    let on_key = move |ev: KeyboardEvent| {
        let key = ev.key();
        let revealed = answered(position.get_untracked());
        match key.as_str() {
            k if k.chars().count() == 1 && !revealed => {
                if let Some(l) = k
                    .chars()
                    .next()
                    .and_then(|c| Letter::from_char(c.to_ascii_uppercase()))
                {
                    selected.set(Some(l));
                    ev.prevent_default();
                }
            }
            "Enter" if !revealed => {
                if selected.get_untracked().is_some() {
                    submit();
                }
                ev.prevent_default();
            }
            "Enter" | "ArrowRight" if revealed => {
                open_case(position.get_untracked() + 1);
                ev.prevent_default();
            }
            "ArrowLeft" if position.get_untracked() > 0 => {
                open_case(position.get_untracked() - 1);
                ev.prevent_default();
            }
            _ => {}
        }
    };
    let new_quiz = move |_| {
        engine.send(&Request::ClearQuiz);
        results.set(None);
        engine.quiz_report.set(None);
        position.set(0);
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
    let on_merge = move |ev: leptos::ev::Event| {
        let files = picked(&ev);
        let split = split_name();
        leptos::task::spawn_local(async move {
            match read_files(files).await {
                Ok(files) if !files.is_empty() => {
                    engine.send(&Request::ReaderStudy { split, files })
                }
                Ok(_) => {}
                Err(e) => engine.error(format!("Reader study: {e}")),
            }
        });
    };
    let export_quiz = move |_| {
        if let Some(r) = results.get_untracked() {
            match serde_json::to_string_pretty(&r.quiz) {
                Ok(text) => engine.download(
                    &format!(
                        "quiz-{}-seed{}.json",
                        r.quiz.settings.split, r.quiz.settings.seed
                    ),
                    "application/json",
                    &text,
                ),
                Err(e) => engine.error(e.to_string()),
            }
        }
    };

    let setup = move || {
        view! {
            <div class="quiz-setup" data-testid="quiz-setup">
                {move || engine.saved_quiz.get().map(|(r, i)| view! {
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
    };

    let case_view = move || {
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
                        <span data-testid="quiz-timer">{move || format!(" — {:.0} s left", (f64::from(l) - (now.get() - started.get()) / 1000.0).max(0.0))}</span>
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
                                        on:click=move |_| if !answered(position.get_untracked()) { selected.set(Some(l)) }>
                                        {o.clone()}
                                    </li>
                                }
                            }).collect_view()}
                        </ol>
                        {(!revealed).then(|| view! {
                            <button data-testid="quiz-submit" disabled=move || selected.get().is_none() on:click=move |_| submit()>"Answer (Enter)"</button>
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
                                    <button data-testid="quiz-next" on:click=move |_| open_case(position.get_untracked() + 1)>
                                        {if i + 1 < n { "Next case (Enter)" } else { "See the results (Enter)" }}
                                    </button>
                                </div>
                            }
                        })}
                    }.into_any(),
                }}
            </div>
        })
    };

    let results_view = move || {
        let rep = engine.quiz_report.get()?;
        let cells = |t: &std::collections::BTreeMap<String, Cell>,
                     m: Option<&std::collections::BTreeMap<String, Cell>>| {
            t.iter().map(|(k, c)| {
                let mc = m.and_then(|m| m.get(k)).copied();
                view! { <tr><td>{k.clone()}</td><td>{pct(c)}</td><td>{ci(c)}</td><td>{c.n}</td><td>{mc.map(|c| pct(&c)).unwrap_or_default()}</td></tr> }
            }).collect_view()
        };
        let model = rep.model.clone();
        Some(view! {
            <div class="quiz-results" data-testid="quiz-results">
                <h3>{format!("Results of {}", if rep.reader.is_empty() { "the reader".to_string() } else { rep.reader.clone() })}</h3>
                <table class="grid">
                    <thead><tr><th></th><th>"student %"</th><th>"95% CI"</th><th>"n"</th><th>"model %"</th></tr></thead>
                    <tbody>
                        <tr><td>"overall"</td>
                            <td data-testid="quiz-student-accuracy">{pct(&rep.student.overall)}</td>
                            <td>{ci(&rep.student.overall)}</td>
                            <td data-testid="quiz-n">{rep.student.overall.n}</td>
                            <td data-testid="quiz-model-accuracy">{model.as_ref().map(|m| pct(&m.overall)).unwrap_or_else(|| "—".into())}</td></tr>
                        <tr class="group"><td colspan="5">"by task"</td></tr>
                        {cells(&rep.student.per_task, model.as_ref().map(|m| &m.per_task))}
                        <tr class="group"><td colspan="5">"by category"</td></tr>
                        {cells(&rep.student.per_category, model.as_ref().map(|m| &m.per_category))}
                    </tbody>
                </table>
                <p>"Cohen's κ — student↔truth: " <strong data-testid="quiz-kappa-truth">{kappa(rep.kappa_student_truth)}</strong>
                   ", student↔model: " <strong data-testid="quiz-kappa-model">{kappa(rep.kappa_student_model)}</strong>
                   {format!("; {:.1} s per case on average.", rep.mean_s)}</p>
                <h4>"Letters (rows: truth, columns: student)"</h4>
                <table class="grid confusion">
                    <thead><tr><th></th><th>"A"</th><th>"B"</th><th>"C"</th><th>"D"</th><th>"none"</th></tr></thead>
                    <tbody>
                        {rep.confusion.iter().enumerate().map(|(t, row)| view! {
                            <tr><th>{Letter::ALL[t].to_string()}</th>
                                {row.iter().enumerate().map(|(c, v)| view! { <td data-testid=format!("quiz-confusion-{t}-{c}")>{*v}</td> }).collect_view()}
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
                {(!rep.disagreements.is_empty()).then(|| view! {
                    <p data-testid="quiz-disagreements">{format!("You and the model disagreed on {} case(s): {}", rep.disagreements.len(), rep.disagreements.join(", "))}</p>
                })}
                <div class="row">
                    <button class="secondary" data-testid="quiz-export-json" on:click=move |_| score(Some("json"))>"Save results (JSON)"</button>
                    <button class="secondary" on:click=move |_| score(Some("csv"))>"CSV"</button>
                    <button class="secondary" on:click=move |_| score(Some("markdown"))>"Markdown"</button>
                    <button class="secondary" on:click=export_quiz>"Share this quiz (JSON, no images)"</button>
                    <button data-testid="quiz-new" on:click=new_quiz>"New quiz"</button>
                </div>
            </div>
        })
    };

    view! {
        <section class="card" data-testid="quiz-panel" aria-labelledby="quiz-title">
            <h2 id="quiz-title">"Quiz"</h2>
            <p class="hint">"Teaching and reader studies: the same seed gives the same cases on every machine. Answers stay in this browser."</p>
            {move || results.with(|r| r.is_none()).then(setup)}
            {case_view}
            {move || {
                let done = results.with(|r| r.as_ref().is_some_and(|r| position.get() >= r.quiz.ids.len()));
                (done && engine.quiz_report.with(|r| r.is_none())).then(|| view! { <p role="status">"Scoring…"</p> })
            }}
            {results_view}
            <details>
                <summary>"Reader study: merge several students' result files"</summary>
                <input type="file" accept=".json" multiple data-testid="quiz-merge" on:change=on_merge />
                {move || engine.reader_study.get().map(|s| view! {
                    <table class="grid" data-testid="reader-study">
                        <thead><tr><th>"reader"</th><th>"accuracy %"</th><th>"95% CI"</th><th>"n"</th></tr></thead>
                        <tbody>{s.readers.iter().map(|(n, c)| view! { <tr><td>{n.clone()}</td><td>{pct(c)}</td><td>{ci(c)}</td><td>{c.n}</td></tr> }).collect_view()}</tbody>
                    </table>
                    <table class="grid">
                        <thead><tr><th>"pair"</th><th>"shared cases"</th><th>"Cohen's κ"</th></tr></thead>
                        <tbody>{s.pairwise.iter().map(|(a, b, n, k)| view! { <tr><td>{format!("{a} ↔ {b}")}</td><td>{*n}</td><td>{kappa(*k)}</td></tr> }).collect_view()}</tbody>
                    </table>
                })}
            </details>
        </section>
    }
}
