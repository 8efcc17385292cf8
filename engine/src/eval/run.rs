//! One evaluation run, the loop the CLI's `eval` and the browser worker share: the scope's
//! questions not answered yet, study by study (the session's image and prefix cache reset at each
//! new study, a study's questions batched where that is faster), every group journaled before it
//! counts, progress after each group, and a checkpoint between groups where the caller may stop.

use std::future::Future;

use super::{
    Answer, Clock, ImageStore, STUDY_BATCH, Settings, answer_study, pending, study_groups,
};
use crate::model::ModelError;
use crate::rexvqa::{Record, Scope, ScopeError, Split};
use crate::session::Session;

/// Where a run's answers are kept as they come: a file natively, OPFS in the browser.
pub trait Journal {
    /// Appends `answers` (one JSON line each, [`super::journal_line`]) and makes them durable
    /// before returning: an answer the run counts is never lost to a crash.
    fn append(&mut self, answers: &[Answer]) -> impl Future<Output = Result<(), String>>;
}

/// What the caller sees of a run, and where it may stop it.
pub trait Observer {
    /// After the start and after each journaled group.
    fn progress(&mut self, p: &RunProgress<'_>);
    /// Before each group: go on, or stop here. Async so that a browser worker can yield and let
    /// pause and cancel messages in (and wait while paused).
    fn checkpoint(&mut self, p: &RunProgress<'_>) -> impl Future<Output = Control>;
}

/// A checkpoint's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Answer the next group.
    Go,
    /// Stop before it (the journal holds everything answered so far).
    Stop,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every question of the scope is answered.
    Finished,
    /// A checkpoint stopped it.
    Stopped,
}

/// A run's state as observers see it.
#[derive(Debug, Clone, Copy)]
pub struct RunProgress<'a> {
    /// Every answer of the run so far, those resumed from the journal included.
    pub done: &'a [Answer],
    /// Questions in scope.
    pub total: usize,
    /// Questions answered by this call (the rate's numerator).
    pub answered_here: usize,
    /// Milliseconds since this call started.
    pub elapsed_ms: f64,
}

impl<'a> RunProgress<'a> {
    fn new(done: &'a [Answer], total: usize, answered_here: usize, elapsed_ms: f64) -> Self {
        RunProgress {
            done,
            total,
            answered_here,
            elapsed_ms,
        }
    }

    /// Questions per second in this call.
    pub fn rate(&self) -> f64 {
        self.answered_here as f64 / (self.elapsed_ms / 1000.0).max(1e-3)
    }

    /// Seconds left at this call's rate (0 before the first answer).
    pub fn eta_s(&self) -> f64 {
        let rate = self.rate();
        if rate > 0.0 {
            self.total.saturating_sub(self.done.len()) as f64 / rate
        } else {
            0.0
        }
    }
}

/// Why a run stopped early.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The scope does not fit the split.
    #[error(transparent)]
    Scope(#[from] ScopeError),
    /// The model failed on a question.
    #[error("question {id}: {source}")]
    Model {
        /// The first question of the failing group.
        id: String,
        /// What failed.
        source: ModelError,
    },
    /// The journal could not be written (nothing of that group counts).
    #[error("journal: {0}")]
    Journal(String),
}

/// Answers the questions of `scope` that `done` (read back from the journal) lacks, appending each
/// group's answers to `done` once the journal holds them.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    session: &mut Session<'_>,
    split: &Split,
    scope: &Scope,
    settings: &Settings,
    done: &mut Vec<Answer>,
    images: &impl ImageStore,
    clock: &impl Clock,
    journal: &mut impl Journal,
    observer: &mut impl Observer,
) -> Result<Outcome, RunError> {
    let total = split.select(scope)?.len();
    let todo = pending(split, scope, done)?;
    let t0 = clock.now_ms();
    let mut here = 0;
    let elapsed = || clock.now_ms() - t0;
    observer.progress(&RunProgress::new(done, total, here, elapsed()));
    let mut study = None;
    for group in study_groups(split, &todo, STUDY_BATCH) {
        let p = RunProgress::new(done, total, here, elapsed());
        if observer.checkpoint(&p).await == Control::Stop {
            return Ok(Outcome::Stopped);
        }
        let records: Vec<&Record> = group.iter().map(|&i| &split.records[i]).collect();
        let key = records[0].study_key();
        if study != Some(key) {
            session.next_study();
            study = Some(key);
        }
        let answers = answer_study(session, &records, settings, images, clock)
            .await
            .map_err(|source| RunError::Model {
                id: records[0].id.clone(),
                source,
            })?;
        journal.append(&answers).await.map_err(RunError::Journal)?;
        here += answers.len();
        done.extend(answers);
        observer.progress(&RunProgress::new(done, total, here, elapsed()));
    }
    Ok(Outcome::Finished)
}
