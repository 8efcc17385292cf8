//! Evaluate panel: choose split, scope, mode and policy; run with live progress (q/s, ETA,
//! running accuracy per task); pause, resume, cancel; resume stored runs after a reload.

use leptos::prelude::*;
use rexvqa_engine::eval::Settings;
use rexvqa_engine::image::Policy;
use rexvqa_engine::rexvqa::Scope;
use rexvqa_engine::session::Mode;

use super::engine::{Engine, duration};
use crate::protocol::{CalibrationProgress, Projections, Request, RunState};
use rexvqa_engine::eval::export::RunExport;

/// The evaluate panel.
#[component]
pub fn EvalPanel() -> impl IntoView {
    let engine = expect_context::<Engine>();
    let split = RwSignal::new(String::new());
    let scope_kind = RwSignal::new("all".to_string());
    let n = RwSignal::new(100usize);
    let seed = RwSignal::new(0u64);
    let shard = RwSignal::new("1/4".to_string());
    let mode = RwSignal::new(Mode::Fast);
    let policy = RwSignal::new(Policy::Scale);
    let all_images = RwSignal::new(false);
    let without_image = RwSignal::new(false);
    let full_replies = RwSignal::new(false);
    Effect::new(move |_| {
        if let Some(d) = engine.dataset.get()
            && let Some(first) = d.splits.keys().next()
            && !d.splits.contains_key(&split.get_untracked())
        {
            split.set(first.clone());
        }
    });
    // The scope and settings on screen, or why the scope is invalid.
    let chosen = move || -> Option<(Scope, Settings)> {
        let scope = match scope_kind.get_untracked().as_str() {
            "first" => Scope::First(n.get_untracked()),
            "stratified" => Scope::Stratified {
                per_task: n.get_untracked(),
                seed: seed.get_untracked(),
            },
            "shard" => match Scope::parse_shard(&shard.get_untracked()) {
                Ok(s) => s,
                Err(e) => {
                    engine.error(format!("Evaluate: {e}"));
                    return None;
                }
            },
            _ => Scope::All,
        };
        let settings = Settings {
            mode: mode.get_untracked(),
            policy: policy.get_untracked(),
            all_images: all_images.get_untracked(),
            answer_without_image: without_image.get_untracked(),
            stop_at_letter: !full_replies.get_untracked(),
            ..Settings::default()
        };
        Some((scope, settings))
    };
    let start = move |_| {
        if let Some((scope, settings)) = chosen() {
            engine.send(&Request::EvalStart {
                split: split.get_untracked(),
                scope,
                settings,
            });
        }
    };
    let calibrate = move |_| {
        if let Some((scope, settings)) = chosen() {
            engine.calibration.set(Some(CalibrationProgress {
                done: 0,
                total: 20,
                projections: None,
            }));
            engine.send(&Request::Calibrate {
                split: split.get_untracked(),
                scope,
                settings,
            });
        }
    };
    let calibrating = move || {
        engine
            .calibration
            .get()
            .is_some_and(|c| c.projections.is_none())
    };
    let running = move || engine.eval.get().is_some_and(|p| p.state.is_live());
    let ready = move || engine.model.get().is_some() && engine.dataset.get().is_some();
    view! {
        <section class="card" data-testid="eval-panel" aria-labelledby="eval-title">
            <h2 id="eval-title">"Evaluate"</h2>
            {move || (!ready()).then(|| view! { <p class="hint">"Load a model and open a dataset to evaluate."</p> })}
            <div class="row">
                <label>"Split " <select prop:value=move || split.get() on:change=move |ev| split.set(event_target_value(&ev))>
                    {move || engine.dataset.get().map(|d| d.splits.keys().map(|k| view! { <option value=k.clone()>{k.clone()}</option> }).collect_view())}
                </select></label>
                <label>"Scope " <select data-testid="eval-scope" on:change=move |ev| scope_kind.set(event_target_value(&ev))>
                    <option value="all">"all questions"</option>
                    <option value="first">"first N"</option>
                    <option value="stratified">"N per task (seeded)"</option>
                    <option value="shard">"shard k/n"</option>
                </select></label>
                {move || matches!(scope_kind.get().as_str(), "first" | "stratified").then(|| view! {
                    <label>"N " <input type="number" min="1" class="narrow" data-testid="eval-n" prop:value=move || n.get() on:input=move |ev| n.set(event_target_value(&ev).parse().unwrap_or(1)) /></label>
                })}
                {move || (scope_kind.get() == "stratified").then(|| view! {
                    <label>"seed " <input type="number" class="narrow" prop:value=move || seed.get() on:input=move |ev| seed.set(event_target_value(&ev).parse().unwrap_or(0)) /></label>
                })}
                {move || (scope_kind.get() == "shard").then(|| view! {
                    <label>"shard " <input class="narrow" prop:value=move || shard.get() on:input=move |ev| shard.set(event_target_value(&ev)) /></label>
                })}
            </div>
            <div class="row">
                <label>"Mode " <select data-testid="eval-mode" on:change=move |ev| mode.set(if event_target_value(&ev) == "official" { Mode::Official } else { Mode::Fast })>
                    <option value="fast">"fast (option-letter logits)"</option>
                    <option value="official">"official (greedy ≤256 tokens + official extraction)"</option>
                </select></label>
                <label>"16-bit policy " <select on:change=move |ev| policy.set(Policy::parse(&event_target_value(&ev)).unwrap_or_default())>
                    <option value="scale">"scale"</option><option value="minmax">"min–max"</option><option value="pillow-clamp">"pillow-clamp"</option>
                </select></label>
                <label><input type="checkbox" prop:checked=move || all_images.get() on:change=move |ev| all_images.set(event_target_checked(&ev)) />" all views (official: first image)"</label>
                {move || (mode.get() == Mode::Official).then(|| view! {
                    <label title="Without it each reply stops once its official letter is settled: the same predictions, far fewer tokens."><input type="checkbox" data-testid="eval-full-replies" prop:checked=move || full_replies.get() on:change=move |ev| full_replies.set(event_target_checked(&ev)) />" full replies (slower; needed for the robust extraction)"</label>
                })}
                <label><input type="checkbox" data-testid="eval-without-image" prop:checked=move || without_image.get() on:change=move |ev| without_image.set(event_target_checked(&ev)) />" answer questions without a usable image, text only (default: listed as unanswerable, left out of accuracy)"</label>
                <button data-testid="eval-start" disabled=move || !ready() || running() || calibrating() on:click=start>"Start"</button>
                <button class="secondary" data-testid="eval-calibrate" title="Time 20 questions on this device and project how long the run takes"
                    disabled=move || !ready() || running() || calibrating() on:click=calibrate>"Estimate time (20 questions)"</button>
            </div>
            {move || engine.calibration.get().map(|c| match c.projections {
                None => view! { <p role="status" data-testid="calibration-progress">{format!("Timing questions on this device… {} / {}", c.done, c.total)}</p> }.into_any(),
                Some(Projections { scope, split }) => view! {
                    <div data-testid="calibration" role="status">
                        <p>{format!(
                            "Measured on this device ({} questions from {} studies, after a warm-up): {:.0} ms per study (its image, once) + {:.0} ms per question.",
                            scope.timed, scope.timed_studies, scope.per_study_ms, scope.per_question_ms
                        )}</p>
                        {(scope.mean_tokens > 0.0).then(|| view! { <p data-testid="calibration-tokens">{format!(
                            "Official mode: {:.1} tokens generated a question, as the run will generate them.", scope.mean_tokens
                        )}</p> })}
                        <p>"Projected: this scope ("<span data-testid="calibration-scope-n">{scope.questions}</span>" questions, "{scope.studies}" studies) "
                            <strong data-testid="calibration-scope-eta">{duration(scope.total_s)}</strong>
                            "; the whole split ("{split.questions}" questions, "{split.studies}" studies) "
                            <strong data-testid="calibration-split-eta">{duration(split.total_s)}</strong>"."</p>
                    </div>
                }.into_any(),
            })}
            {move || engine.eval.get().map(|p| {
                let frac = if p.total > 0 { p.done as f64 / p.total as f64 } else { 0.0 };
                let state = p.state;
                view! {
                    <div class="progress" role="status" data-testid="eval-progress">
                        <progress max="1" value=frac></progress>
                        <p data-testid="eval-count">{format!("{} / {} answered — {:.2} questions/s — ETA {} — {}", p.done, p.total, p.rate, duration(p.eta_s), p.state.as_str())}</p>
                        <table class="grid"><thead><tr><th>"task"</th><th>"running accuracy"</th><th>"n"</th></tr></thead><tbody>
                            {p.per_task.iter().map(|(t, tally)| view! { <tr><td>{t.clone()}</td><td>{format!("{:.1}%", tally.percent())}</td><td>{tally.answered}</td></tr> }).collect_view()}
                        </tbody></table>
                        <div class="row">
                            {(state == RunState::Running).then(|| view! { <button class="secondary" data-testid="eval-pause" on:click=move |_| engine.send(&Request::EvalPause)>"Pause"</button> })}
                            {(state == RunState::Paused).then(|| view! { <button data-testid="eval-continue" on:click=move |_| engine.send(&Request::EvalContinue)>"Resume"</button> })}
                            {state.is_live().then(|| view! { <button class="secondary" data-testid="eval-cancel" on:click=move |_| engine.send(&Request::EvalCancel)>"Cancel"</button> })}
                        </div>
                    </div>
                }
            })}
            <h3>"Runs kept in this browser"</h3>
            {move || {
                let runs = engine.cache.get().runs;
                if runs.is_empty() {
                    return view! { <p class="hint">"No runs yet. Every answered question is saved as it completes, so a reload or crash loses nothing."</p> }.into_any();
                }
                view! {
                    <table class="grid" data-testid="runs">
                        <thead><tr><th>"run"</th><th>"split"</th><th>"mode"</th><th>"answered"</th><th></th></tr></thead>
                        <tbody>{runs.into_iter().map(|r| {
                            let (a, b, c, d, e, f) = (r.run_id.clone(), r.run_id.clone(), r.run_id.clone(), r.run_id.clone(), r.run_id.clone(), r.run_id.clone());
                            view! {
                                <tr data-testid="run-row">
                                    <td class="mono">{r.run_id.clone()}</td>
                                    <td>{r.split.clone()}</td>
                                    <td>{format!("{:?}, {}{}", r.settings.mode, r.settings.policy.name(), match (r.settings.mode, r.settings.stop_at_letter) {
                                        (Mode::Official, true) => ", stopped at letter",
                                        (Mode::Official, false) => ", full replies",
                                        _ => "",
                                    }).to_lowercase()}</td>
                                    <td>{format!("{} / {}{}", r.answered, r.total, if r.finished { " ✓" } else { "" })}</td>
                                    <td class="actions">
                                        {(!r.finished).then(|| view! { <button data-testid="run-resume" disabled=move || !ready() || running() on:click=move |_| engine.send(&Request::EvalResume { run_id: a.clone() })>"Resume"</button> })}
                                        <button class="secondary" data-testid="run-report" on:click=move |_| engine.send(&Request::RunReport { run_id: b.clone() })>"Report"</button>
                                        <button class="secondary" on:click=move |_| engine.send(&Request::Export { run_id: c.clone(), format: RunExport::Leaderboard })>"Predictions JSON"</button>
                                        <button class="secondary" on:click=move |_| engine.send(&Request::Export { run_id: d.clone(), format: RunExport::Csv })>"CSV"</button>
                                        <button class="secondary" on:click=move |_| engine.send(&Request::Export { run_id: e.clone(), format: RunExport::Markdown })>"Markdown"</button>
                                        <button class="secondary" on:click=move |_| engine.send(&Request::DeleteRun { run_id: f.clone() })>"Delete"</button>
                                    </td>
                                </tr>
                            }
                        }).collect_view()}</tbody>
                    </table>
                }.into_any()
            }}
        </section>
    }
}
