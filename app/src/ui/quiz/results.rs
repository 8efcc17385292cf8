//! The scored quiz: the student's accuracy beside the model's, overall, by task and by
//! category, agreement (Cohen's κ), the letter confusion table and the exports; and the reader
//! study that merges several students' result files.

use std::collections::BTreeMap;

use leptos::prelude::*;
use rexvqa_engine::quiz::{QuizExport, QuizTaking};
use rexvqa_engine::rexvqa::Letter;
use rexvqa_engine::score::Cell;

use super::super::engine::Engine;
use super::setup::Form;
use super::{Taking, picked, read_files};
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

/// The scored quiz, once the worker has scored it.
#[component]
pub(super) fn QuizResultsView(taking: Taking) -> impl IntoView {
    let engine = taking.engine;
    let results = taking.results;
    let new_quiz = move |_| {
        engine.send(&Request::ClearQuiz);
        taking.quiz.update(QuizTaking::reset);
        engine.quiz_report.set(None);
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

    move || {
        let rep = engine.quiz_report.get()?;
        let cells = |t: &BTreeMap<String, Cell>, m: Option<&BTreeMap<String, Cell>>| {
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
                    <button class="secondary" data-testid="quiz-export-json" on:click=move |_| taking.score(Some(QuizExport::Json))>"Save results (JSON)"</button>
                    <button class="secondary" on:click=move |_| taking.score(Some(QuizExport::Csv))>"CSV"</button>
                    <button class="secondary" on:click=move |_| taking.score(Some(QuizExport::Markdown))>"Markdown"</button>
                    <button class="secondary" on:click=export_quiz>"Share this quiz (JSON, no images)"</button>
                    <button data-testid="quiz-new" on:click=new_quiz>"New quiz"</button>
                </div>
            </div>
        })
    }
}

/// The reader study: several students' result files merged into one table with their pairwise
/// agreement.
#[component]
pub(super) fn ReaderStudyView(form: Form) -> impl IntoView {
    let engine = expect_context::<Engine>();
    let on_merge = move |ev: leptos::ev::Event| {
        let files = picked(&ev);
        let split = form.split_name(engine);
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
    view! {
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
    }
}
