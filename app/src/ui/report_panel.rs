//! Report panel: the paper's tables (overall, per task, per category with 95% intervals and
//! failed extractions) beside the published MedGemma figures, a bar chart per task, and the
//! merge of shard files from several machines.

use leptos::prelude::*;
use rexvqa_engine::eval::REFERENCE_FIGURES;
use rexvqa_engine::score::Cell;
use web_sys::{File, HtmlInputElement};

use super::engine::Engine;
use crate::protocol::{ReportSource, Request};
use rexvqa_engine::eval::export::RunExport;

/// Height of one task's row in the chart (its name above its bar).
const ROW: usize = 38;
/// Width of a 100 % bar.
const BAR: f64 = 340.0;

fn pct(x: f64) -> String {
    format!("{:.2}", 100.0 * x)
}

fn ci(c: &Cell) -> String {
    format!("{}–{}", pct(c.ci_low), pct(c.ci_high))
}

/// The report panel.
#[component]
pub fn ReportPanel() -> impl IntoView {
    let engine = expect_context::<Engine>();
    let refs: serde_json::Value = serde_json::from_str(REFERENCE_FIGURES).unwrap_or_default();
    let refs = StoredValue::new(refs);
    let merge_split = RwSignal::new(String::new());
    let on_merge = move |ev: leptos::ev::Event| {
        let Some(list) = event_target::<HtmlInputElement>(&ev).files() else {
            return;
        };
        let files: Vec<File> = (0..list.length()).filter_map(|i| list.get(i)).collect();
        let names = files.iter().map(|f| f.name()).collect();
        let split = engine.split_or_first(merge_split.get_untracked());
        engine.send_with(&Request::MergeShards { split, names }, &files);
    };
    view! {
        <section class="card" data-testid="report-panel" aria-labelledby="report-title">
            <h2 id="report-title">"Report"</h2>
            {move || engine.report.get().is_none().then(|| view! { <p class="hint">"Finish or open a run (Evaluate → Report), or merge shard files below."</p> })}
            {move || engine.report.get().map(|rr| {
                let (source, r) = (rr.source, rr.report);
                let missing = match source { ReportSource::Merged { missing } => missing, ReportSource::Run { .. } => 0 };
                let o = r.official.overall;
                let rb = r.robust.overall;
                let refs = refs.get_value();
                let fig = |k: &str, t: &str| refs[k]["tasks"][t].as_f64().map(pct).unwrap_or_default();
                view! {
                    <div data-testid="report">
                        <p class="hint">{format!("{}: {} of {} questions answered{}", source.label(), r.answered, r.in_scope, if missing > 0 { format!(", {missing} not in any shard") } else { String::new() })}</p>
                        <p class="hint" data-testid="report-accounting">{format!(
                            "{} record(s) rejected by the split parser; {} question(s) unanswerable (no usable image; {})",
                            r.rejected_records.len(), r.unanswerable.len(), r.settings.without_image_policy()
                        )}</p>
                        {r.replies_line().map(|line| view! { <p class="hint" data-testid="report-replies">{format!("Replies: {line}.")}</p> })}
                        {[("Rejected records", r.rejected_records.clone(), "report-rejected"), ("Unanswerable questions", r.unanswerable.clone(), "report-unanswerable")]
                            .into_iter().filter(|(_, rows, _)| !rows.is_empty()).map(|(title, rows, id)| view! {
                                <details data-testid=id>
                                    <summary>{format!("{title} ({})", rows.len())}</summary>
                                    <table class="grid"><thead><tr><th>"id"</th><th>"reason"</th></tr></thead><tbody>
                                        {rows.into_iter().map(|x| view! { <tr><td class="mono">{x.id}</td><td>{x.reason}</td></tr> }).collect_view()}
                                    </tbody></table>
                                </details>
                            }).collect_view()}
                        {match source { ReportSource::Run { run_id } => Some(run_id), ReportSource::Merged { .. } => None }.map(|run_id| {
                            let export = move |format: RunExport| {
                                let run_id = run_id.clone();
                                move |_| engine.send(&Request::Export { run_id: run_id.clone(), format })
                            };
                            view! {
                                <div class="row">
                                    <button class="secondary" data-testid="report-export-leaderboard" on:click=export(RunExport::Leaderboard)>"Predictions (leaderboard JSON)"</button>
                                    <button class="secondary" data-testid="report-export-csv" on:click=export(RunExport::Csv)>"CSV"</button>
                                    <button class="secondary" data-testid="report-export-markdown" on:click=export(RunExport::Markdown)>"Markdown report"</button>
                                </div>
                            }
                        })}
                        <table class="grid">
                            <thead><tr><th></th><th>"accuracy %"</th><th>"95% CI"</th><th>"n"</th><th>"failed extractions"</th></tr></thead>
                            <tbody>
                                <tr><td>"this run (official extraction)"</td><td data-testid="report-accuracy">{pct(o.accuracy)}</td><td>{ci(&o)}</td><td data-testid="report-n">{o.n}</td><td data-testid="report-failed">{r.official.failed_extractions}</td></tr>
                                {match r.robust_label() {
                                    Ok(label) => view! { <tr data-testid="report-robust"><td>{label}</td><td>{pct(rb.accuracy)}</td><td>{ci(&rb)}</td><td>{rb.n}</td><td>{r.robust.failed_extractions}</td></tr> }.into_any(),
                                    Err(why) => view! { <tr data-testid="report-robust"><td colspan="5">{why}</td></tr> }.into_any(),
                                }}
                                <tr><td>{refs["paper"]["label"].as_str().unwrap_or("paper").to_string()}</td><td>{refs["paper"]["overall"].as_f64().map(pct).unwrap_or_default()}</td><td></td><td></td><td></td></tr>
                                <tr><td>{refs["leaderboard"]["label"].as_str().unwrap_or("leaderboard").to_string()}</td><td>{refs["leaderboard"]["overall"].as_f64().map(pct).unwrap_or_default()}</td><td></td><td></td><td></td></tr>
                            </tbody>
                        </table>
                        <h3>"Per task"</h3>
                        <table class="grid" data-testid="report-tasks">
                            <thead><tr><th>"task"</th><th>"accuracy %"</th><th>"95% CI"</th><th>"n"</th><th>"paper %"</th><th>"leaderboard %"</th></tr></thead>
                            <tbody>{r.official.per_task.iter().map(|(t, c)| view! {
                                <tr><td>{t.clone()}</td><td>{pct(c.accuracy)}</td><td>{ci(c)}</td><td>{c.n}</td><td>{fig("paper", t)}</td><td>{fig("leaderboard", t)}</td></tr>
                            }).collect_view()}</tbody>
                        </table>
                        <svg class="chart" data-testid="report-chart" viewBox=format!("0 0 420 {}", ROW * r.official.per_task.len() + 6) role="img" aria-label="accuracy per task, with 95% intervals">
                            {r.official.per_task.iter().enumerate().map(|(i, (t, c))| {
                                // The task's full name on its own line, the bar under it: the
                                // longest name ("Location and Distribution Assessment") fits.
                                let y = ROW * i + 2;
                                let x = |v: f64| format!("{:.1}", BAR * v);
                                let paper = refs["paper"]["tasks"][t].as_f64();
                                let mid = y + 23;
                                view! {
                                    <g>
                                        <title>{format!("{t}: {}% (95% CI {}), n = {}", pct(c.accuracy), ci(c), c.n)}</title>
                                        <text x="0" y=y + 11 font-size="11">{t.clone()}</text>
                                        <rect x="0" y=y + 16 width=x(c.accuracy) height="14" class="bar-fill"></rect>
                                        <line class="whisker" x1=x(c.ci_low) x2=x(c.ci_high) y1=mid y2=mid></line>
                                        <line class="whisker" x1=x(c.ci_low) x2=x(c.ci_low) y1=mid - 5 y2=mid + 5></line>
                                        <line class="whisker" x1=x(c.ci_high) x2=x(c.ci_high) y1=mid - 5 y2=mid + 5></line>
                                        {paper.map(|p| view! { <line x1=x(p) x2=x(p) y1=y + 13 y2=y + 33 class="ref-line"></line> })}
                                        <text x="350" y=y + 27 font-size="11">{format!("{:.0}%", 100.0 * c.accuracy)}</text>
                                    </g>
                                }
                            }).collect_view()}
                        </svg>
                        <p class="hint">"Bars: this run, with its 95% interval. Ticks: the paper's MedGemma figure (private test)."</p>
                        <h3>"Per category"</h3>
                        <table class="grid">
                            <thead><tr><th>"category"</th><th>"accuracy %"</th><th>"95% CI"</th><th>"n"</th></tr></thead>
                            <tbody>{r.official.per_category.iter().map(|(t, c)| view! {
                                <tr><td>{if t.is_empty() { "(none)".to_string() } else { t.clone() }}</td><td>{pct(c.accuracy)}</td><td>{ci(c)}</td><td>{c.n}</td></tr>
                            }).collect_view()}</tbody>
                        </table>
                    </div>
                }
            })}
            <h3>"Merge shards"</h3>
            <p class="hint">"Prediction files (leaderboard JSON) of shards run on several machines; overlapping questions are refused, gaps are reported."</p>
            <div class="row">
                <label>"Split " <select on:change=move |ev| merge_split.set(event_target_value(&ev))>
                    {move || engine.dataset.get().map(|d| d.splits.keys().map(|k| view! { <option value=k.clone()>{k.clone()}</option> }).collect_view())}
                </select></label>
                <input type="file" multiple accept=".json" data-testid="merge-input" on:change=on_merge />
            </div>
        </section>
    }
}
