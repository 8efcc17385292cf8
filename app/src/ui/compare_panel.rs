//! Compare runs: two runs on the same questions (each a run stored here or a predictions file),
//! each one's accuracy with the paired difference, its 95 % interval and McNemar's exact test,
//! overall and per task; agreement and Cohen's κ; the questions answered differently, each
//! opening in the study viewer; exports as Markdown, CSV and JSON.

use leptos::prelude::*;
use rexvqa_engine::compare::{Comparison, Paired, answer_text};
use rexvqa_engine::eval::export::ExportFile;
use web_sys::{File, HtmlInputElement};

use super::engine::Engine;
use super::signals::Tab;
use crate::protocol::{CompareSide, Request};

/// Disagreements listed on the page; the exports carry all of them.
const LISTED: usize = 200;

fn pct(x: f64) -> String {
    format!("{:.2}", 100.0 * x)
}

/// One side's picker: a stored run, or a file.
#[component]
fn SidePicker(
    label: &'static str,
    id: &'static str,
    run: RwSignal<String>,
    file: StoredValue<Option<File>, LocalStorage>,
    file_name: RwSignal<String>,
) -> impl IntoView {
    let engine = expect_context::<Engine>();
    let on_file = move |ev: leptos::ev::Event| {
        let f = event_target::<HtmlInputElement>(&ev)
            .files()
            .and_then(|l| l.get(0));
        file_name.set(f.as_ref().map(File::name).unwrap_or_default());
        file.set_value(f);
        run.set(String::new());
    };
    view! {
        <fieldset class="row">
            <legend>{label}</legend>
            <label>"stored run "
                <select data-testid=format!("compare-{id}-run") prop:value=move || run.get()
                    on:change=move |ev| run.set(event_target_value(&ev))>
                    <option value="">"(none: the file)"</option>
                    {move || engine.cache.get().runs.into_iter().map(|r| {
                        let text = format!("{} · {} · {} answered", r.run_id, r.model, r.answered);
                        view! { <option value=r.run_id.clone()>{text}</option> }
                    }).collect_view()}
                </select>
            </label>
            <label>"or a predictions file "
                <input type="file" accept=".json,application/json" data-testid=format!("compare-{id}-file") on:change=on_file />
            </label>
        </fieldset>
    }
}

/// The compare section of the Report tab.
#[component]
pub fn ComparePanel() -> impl IntoView {
    let engine = expect_context::<Engine>();
    let (run_a, run_b) = (RwSignal::new(String::new()), RwSignal::new(String::new()));
    let file_a = StoredValue::new_local(None::<File>);
    let file_b = StoredValue::new_local(None::<File>);
    let (name_a, name_b) = (RwSignal::new(String::new()), RwSignal::new(String::new()));
    let side = move |run: RwSignal<String>,
                     file: StoredValue<Option<File>, LocalStorage>,
                     files: &mut Vec<File>|
          -> Option<CompareSide> {
        let run_id = run.get_untracked();
        if !run_id.is_empty() {
            return Some(CompareSide::Run { run_id });
        }
        let f = file.get_value()?;
        let name = f.name();
        files.push(f);
        Some(CompareSide::File { name })
    };
    let ready = move || {
        (!run_a.get().is_empty() || !name_a.get().is_empty())
            && (!run_b.get().is_empty() || !name_b.get().is_empty())
    };
    let go = move |_| {
        let mut files = Vec::new();
        let (Some(a), Some(b)) = (
            side(run_a, file_a, &mut files),
            side(run_b, file_b, &mut files),
        ) else {
            return;
        };
        engine.comparison.set(None);
        engine.send_with(&Request::CompareRuns { a, b }, &files);
    };
    view! {
        <section class="card" data-testid="compare-panel" aria-labelledby="compare-title">
            <h2 id="compare-title">"Compare runs"</h2>
            <p class="hint">"Two runs on the same questions, each a run stored here or a predictions file (leaderboard JSON: the Predictions download above, or "<code>"rexvqa eval --out"</code>"). Differences are B − A; a failed extraction counts as wrong, and as an answer of its own in agreement and κ."</p>
            <SidePicker label="Run A" id="a" run=run_a file=file_a file_name=name_a />
            <SidePicker label="Run B" id="b" run=run_b file=file_b file_name=name_b />
            <button data-testid="compare-go" prop:disabled=move || !ready() on:click=go>"Compare"</button>
            {move || engine.comparison.get().map(|(c, exports)| view! { <ComparisonView cv=c exports=exports /> })}
        </section>
    }
}

/// One row of the paired table.
fn paired_row(name: String, p: &Paired) -> impl IntoView + use<> {
    let cells = p.cells().map(|c| view! { <td>{c}</td> });
    view! { <tr><td>{name}</td>{cells}</tr> }
}

/// A comparison's tables, lists and downloads.
#[component]
fn ComparisonView(cv: Comparison, exports: Vec<ExportFile>) -> impl IntoView {
    let engine = expect_context::<Engine>();
    let tab = expect_context::<Tab>();
    let buttons = exports
        .into_iter()
        .map(|f| {
            let ext = f.name.rsplit('.').next().unwrap_or_default().to_string();
            let label = match ext.as_str() {
                "md" => "Markdown",
                "csv" => "CSV",
                _ => "JSON",
            };
            view! {
                <button class="secondary" data-testid=format!("compare-export-{ext}")
                    on:click=move |_| engine.download(&f.name, &f.mime, &f.text)>{label}</button>
            }
        })
        .collect_view();
    let open = move |id: String| {
        let split = engine.split_or_first(String::new());
        engine.send(&Request::GetQuestion { split, id });
        tab.0.set("study");
    };
    let summary = format!(
        "A: {} · B: {} — {} questions in both; only in A: {}; only in B: {}; unanswerable in A: {}, in B: {}; without ground truth: {}; failed extractions: A {}, B {}",
        cv.a,
        cv.b,
        cv.shared,
        cv.only_a.len(),
        cv.only_b.len(),
        cv.unanswerable_a.len(),
        cv.unanswerable_b.len(),
        cv.unlabelled,
        cv.failed.0,
        cv.failed.1
    );
    let agreement = format!(
        "Agreement {} % · Cohen's κ {}",
        pct(cv.agreement),
        cv.kappa.map_or("n/a".into(), |k| format!("{k:.4}"))
    );
    let n_diff = cv.disagreements.len();
    let can_open = move || engine.dataset.get().is_some();
    view! {
        <div data-testid="comparison">
            <p class="hint" data-testid="compare-summary">{summary}</p>
            <p data-testid="compare-agreement">{agreement}</p>
            <div class="row">{buttons}</div>
            <table class="grid" data-testid="compare-table">
                <thead><tr><th>"group"</th><th>"n"</th><th>"A %"</th><th>"B %"</th><th>"B − A (pp)"</th><th>"95% CI (pp)"</th><th>"right in A only"</th><th>"right in B only"</th><th>"McNemar p (exact)"</th></tr></thead>
                <tbody>{cv.rows().map(|(name, p)| paired_row(name.to_string(), p)).collect_view()}</tbody>
            </table>
            <details data-testid="compare-disagreements" open={n_diff > 0 && n_diff <= 20}>
                <summary>{format!("Answered differently ({n_diff}{})", if n_diff > LISTED { format!("; the first {LISTED} here, all in the exports") } else { String::new() })}</summary>
                {move || (!can_open()).then(|| view! { <p class="hint">"Open the dataset (Dataset tab) to view these questions."</p> })}
                <table class="grid">
                    <thead><tr><th>"question"</th><th>"task"</th><th>"truth"</th><th>"A"</th><th>"B"</th></tr></thead>
                    <tbody>{cv.disagreements.iter().take(LISTED).map(|d| {
                        let id = d.id.clone();
                        view! {
                            <tr>
                                <td><button class="link mono" prop:disabled=move || !can_open() on:click=move |_| open(id.clone())>{d.id.clone()}</button></td>
                                <td>{d.task.clone()}</td>
                                <td>{d.correct.map(|l| l.to_string()).unwrap_or_default()}</td>
                                <td>{answer_text(d.a)}</td><td>{answer_text(d.b)}</td>
                            </tr>
                        }
                    }).collect_view()}</tbody>
                </table>
            </details>
            {[("Only in A", cv.only_a.clone(), "compare-only-a"), ("Only in B", cv.only_b.clone(), "compare-only-b")]
                .into_iter().filter(|(_, ids, _)| !ids.is_empty()).map(|(title, ids, tid)| view! {
                    <details data-testid=tid>
                        <summary>{format!("{title} ({})", ids.len())}</summary>
                        <p class="mono">{ids.join(", ")}</p>
                    </details>
                }).collect_view()}
        </div>
    }
}
