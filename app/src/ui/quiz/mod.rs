//! Teaching and reader-study mode: draw a seeded quiz, take it case by case with the keyboard
//! (A–D, Enter, arrows), see the truth and the model after each case or at the end, score it,
//! export it, and merge several students' result files into a reader-study table. The quiz in
//! progress is saved in browser storage after every step, so a reload resumes it.
//!
//! The panel holds the quiz being taken ([`Taking`]) and renders its three stages, each a
//! component of its own: the setup form ([`setup`]), the case ([`case`]) and the results with
//! the reader study ([`results`]).

mod case;
mod results;
mod setup;

use leptos::prelude::*;
use rexvqa_engine::image::Policy;
use rexvqa_engine::quiz::{QuizExport, QuizResults, QuizTaking, Step};
use rexvqa_engine::rexvqa::Letter;
use rexvqa_engine::session::Mode;
use wasm_bindgen_futures::JsFuture;
use web_sys::{File, HtmlInputElement};

use super::engine::Engine;
use crate::io::now_ms;
use crate::protocol::Request;
use case::QuizCase;
use results::{QuizResultsView, ReaderStudyView};
use setup::{Form, QuizSetup};

/// The quiz being taken, shared by the panel's components. The rules of taking it (what a key
/// does, when time is up, where the model's answer goes) live in the engine's [`QuizTaking`];
/// this renders it and sends the requests its steps call for.
#[derive(Clone, Copy)]
struct Taking {
    engine: Engine,
    quiz: RwSignal<QuizTaking>,
    /// The clock the countdown reads.
    now: RwSignal<f64>,
    /// The reader's name, from the setup form, given to the quiz when it starts.
    reader: RwSignal<String>,
    // Narrow views of the quiz: choosing a letter must not rebuild the case (that would drop
    // the keyboard focus), only the options.
    results: Memo<Option<QuizResults>>,
    position: Memo<usize>,
    selected: Memo<Option<Letter>>,
}

impl Taking {
    fn new(engine: Engine) -> Taking {
        let quiz = RwSignal::new(QuizTaking::default());
        Taking {
            engine,
            quiz,
            now: RwSignal::new(0.0),
            reader: RwSignal::new(String::new()),
            results: Memo::new(move |_| quiz.with(|t| t.results().cloned())),
            position: Memo::new(move |_| quiz.with(|t| t.position())),
            selected: Memo::new(move |_| quiz.with(|t| t.selected())),
        }
    }

    fn save(self) {
        if let Some(saved) = self.quiz.with_untracked(QuizTaking::saved) {
            self.engine.send(&Request::SaveQuiz { saved });
        }
    }

    /// Asks the worker to score the quiz taken so far (and to export the results as `export`).
    fn score(self, export: Option<QuizExport>) {
        if let Some(r) = self.quiz.with_untracked(|t| t.results().cloned()) {
            self.engine.send(&Request::QuizReport {
                split: r.quiz.settings.split.clone(),
                results: r,
                export,
            });
        }
    }

    /// What the page does after each move; every step but `Stay` changed the saved progress.
    fn follow(self, step: Step) {
        let engine = self.engine;
        if step != Step::Stay {
            self.save();
        }
        match step {
            Step::Stay => {}
            Step::Show { split, id } => {
                engine.ask.set(Default::default());
                engine.send(&Request::GetQuestion { split, id });
            }
            Step::Score => self.score(None),
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
    }

    /// Applies a move to the quiz at the present time and follows the step it gives.
    fn act(self, f: &dyn Fn(&mut QuizTaking, f64) -> Step) {
        let t = now_ms();
        if let Some(step) = self.quiz.try_update(|q| f(q, t)) {
            self.follow(step);
        }
    }
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

/// The quiz panel: the setup form, then the quiz taken case by case, then its results.
#[component]
pub fn QuizPanel() -> impl IntoView {
    let engine = expect_context::<Engine>();
    let taking = Taking::new(engine);
    let form = Form::new();
    // A drawn or opened quiz starts at once.
    Effect::new(move |_| {
        if let Some(q) = engine.quiz.get() {
            engine.quiz_report.set(None);
            engine.quiz.set(None);
            let reader = taking.reader.get_untracked();
            taking.act(&move |t, now| t.start(q.clone(), reader.clone(), now));
        }
    });
    // The model's answer lands in the case it was asked for.
    Effect::new(move |_| {
        let Some(a) = engine.ask.get().answer else {
            return;
        };
        let landed = taking
            .quiz
            .try_update(|t| t.model_answered(&a.id, a.prediction, a.probs.clone()));
        if landed == Some(true) {
            taking.save();
        }
    });
    // The clock: a countdown when the quiz has a time limit; out of time submits the selection.
    let tick = leptos::prelude::set_interval_with_handle(
        move || {
            let t = now_ms();
            taking.now.set(t);
            if taking
                .quiz
                .with_untracked(|q| q.time_left_s(t))
                .is_some_and(|left| left <= 0.0)
            {
                taking.act(&|q, t| q.tick(t));
            }
        },
        std::time::Duration::from_millis(250),
    );
    on_cleanup(move || {
        if let Ok(h) = tick {
            h.clear();
        }
    });
    let (results, position) = (taking.results, taking.position);

    view! {
        <section class="card" data-testid="quiz-panel" aria-labelledby="quiz-title">
            <h2 id="quiz-title">"Quiz"</h2>
            <p class="hint">"Teaching and reader studies: the same seed gives the same cases on every machine. Answers stay in this browser."</p>
            {move || results.with(|r| r.is_none()).then(|| view! { <QuizSetup taking=taking form=form /> })}
            <QuizCase taking=taking />
            {move || {
                let done = results.with(|r| r.as_ref().is_some_and(|r| position.get() >= r.quiz.ids.len()));
                (done && engine.quiz_report.with(|r| r.is_none())).then(|| view! { <p role="status">"Scoring…"</p> })
            }}
            <QuizResultsView taking=taking />
            <ReaderStudyView form=form />
        </section>
    }
}
