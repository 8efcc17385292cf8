//! Teaching and reader-study mode: draw a seeded quiz, take it case by case with the keyboard
//! (A–D, Enter, arrows), see the truth and the model after each case or at the end, score it,
//! export it, and merge several students' result files into a reader-study table. The quiz in
//! progress is saved in browser storage after every step, so a reload resumes it.

use leptos::prelude::*;
use rexvqa_engine::image::Policy;
use rexvqa_engine::quiz::{Key, QuizExport, QuizSettings, QuizTaking, ShowModel, Step};
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

/// The quiz panel: the setup form, then the quiz taken case by case. The rules of taking it
/// (what a key does, when time is up, where the model's answer goes) live in the engine's
/// [`QuizTaking`]; this component renders it and sends the requests its steps call for.
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
    // The quiz being taken, and the clock its countdown reads.
    let taking = RwSignal::new(QuizTaking::default());
    let now = RwSignal::new(0f64);
    // Narrow views of it: choosing a letter must not rebuild the case (that would drop the
    // keyboard focus), only the options.
    let results = Memo::new(move |_| taking.with(|t| t.results().cloned()));
    let position = Memo::new(move |_| taking.with(|t| t.position()));
    let selected = Memo::new(move |_| taking.with(|t| t.selected()));
    let case_ref = NodeRef::<leptos::html::Div>::new();

    let split_name = move || engine.split_or_first(split.get_untracked());
    let save = move || {
        if let Some(saved) = taking.with_untracked(QuizTaking::saved) {
            engine.send(&Request::SaveQuiz { saved });
        }
    };
    let score = move |export: Option<QuizExport>| {
        if let Some(r) = taking.with_untracked(|t| t.results().cloned()) {
            engine.send(&Request::QuizReport {
                split: r.quiz.settings.split.clone(),
                results: r,
                export,
            });
        }
    };
    // What the page does after each move; every step but `Stay` changed the saved progress.
    let follow = move |step: Step| {
        if step != Step::Stay {
            save();
        }
        match step {
            Step::Stay => {}
            Step::Show { split, id } => {
                engine.ask.set(Default::default());
                engine.send(&Request::GetQuestion { split, id });
            }
            Step::Score => score(None),
            // The model answers every case when one is loaded; the setting only decides when
            // the student sees it.
            Step::Answered { split, id } if engine.model.get_untracked().is_some() => {
                engine.ask.set(Default::default());
                engine.send(&Request::Ask {
                    split,
                    id,
                    mode: Mode::Fast,
                    policy: Policy::default(),
                    all_images: false,
                });
            }
            Step::Answered { .. } => {}
        }
    };
    let act = move |f: &dyn Fn(&mut QuizTaking, f64) -> Step| {
        let t = now_ms();
        if let Some(step) = taking.try_update(|q| f(q, t)) {
            follow(step);
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
            engine.quiz.set(None);
            let reader = reader.get_untracked();
            act(&move |t, now| t.start(q.clone(), reader.clone(), now));
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
        if let Some(saved) = engine.saved_quiz.get_untracked() {
            engine.saved_quiz.set(None);
            engine.quiz_report.set(None);
            act(&move |t, now| t.resume(saved.clone(), now));
        }
    };
    // The model's answer lands in the case it was asked for.
    Effect::new(move |_| {
        let Some(a) = engine.ask.get().answer else {
            return;
        };
        let landed = taking.try_update(|t| t.model_answered(&a.id, a.prediction, a.probs.clone()));
        if landed == Some(true) {
            save();
        }
    });
    // The clock: a countdown when the quiz has a time limit; out of time submits the selection.
    let tick = leptos::prelude::set_interval_with_handle(
        move || {
            let t = now_ms();
            now.set(t);
            if taking
                .with_untracked(|q| q.time_left_s(t))
                .is_some_and(|left| left <= 0.0)
            {
                act(&|q, t| q.tick(t));
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
        let Some(key) = Key::from_dom(&ev.key()) else {
            return;
        };
        let t = now_ms();
        if let Some(step) = taking.try_update(|q| q.key(key, t)).flatten() {
            ev.prevent_default();
            follow(step);
        }
    };
    let next = move || act(&|t, now| t.next(now));
    let new_quiz = move |_| {
        engine.send(&Request::ClearQuiz);
        taking.update(QuizTaking::reset);
        engine.quiz_report.set(None);
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
                        <span data-testid="quiz-timer">{move || format!(" — {:.0} s left", taking.with(|t| t.time_left_s(now.get())).unwrap_or(f64::from(l)).max(0.0))}</span>
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
                                        on:click=move |_| taking.update(|t| t.choose(l))>
                                        {o.clone()}
                                    </li>
                                }
                            }).collect_view()}
                        </ol>
                        {(!revealed).then(|| view! {
                            <button data-testid="quiz-submit" disabled=move || selected.get().is_none() on:click=move |_| act(&|t, now| t.submit(now))>"Answer (Enter)"</button>
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
                    <button class="secondary" data-testid="quiz-export-json" on:click=move |_| score(Some(QuizExport::Json))>"Save results (JSON)"</button>
                    <button class="secondary" on:click=move |_| score(Some(QuizExport::Csv))>"CSV"</button>
                    <button class="secondary" on:click=move |_| score(Some(QuizExport::Markdown))>"Markdown"</button>
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
