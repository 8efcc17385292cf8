//! Evaluating ReXVQA questions: one answer per question (fast or official mode), an append-only
//! journal of answers, and the final report. Shared by the browser worker and `rexvqa eval`, so
//! both produce the same numbers from the same code.

use std::future::Future;
use std::ops::ControlFlow;

use serde::{Deserialize, Serialize};

use crate::image::Policy;
use crate::model::ModelError;
use crate::rexvqa::{Letter, Record, Rejected, Scope, Split, resolve_image_path};
use crate::score::{self, Extraction, Prediction, Report};
use crate::session::{Mode, OptionScores, Session, record_prompt};
use burn::tensor::Tensor;

pub mod export;
pub mod journal;
pub mod merge;
pub mod run;
pub mod tally;

pub use export::{REFERENCE_FIGURES, csv, leaderboard, markdown};
pub use journal::{Resume, complete_len, journal_line, journal_lines, read_journal};

/// Tokens the official mode may generate (ref: ReXrank MedGemma script, max_new_tokens=256).
pub const OFFICIAL_MAX_NEW_TOKENS: usize = 256;

/// How a split is evaluated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Fast (option logits) or official (greedy decoding + extraction).
    pub mode: Mode,
    /// 16→8-bit mapping.
    pub policy: Policy,
    /// Every view of the study (true) or only the first image, as the official script does.
    pub all_images: bool,
    /// Tokens generated at most in official mode.
    pub max_new_tokens: usize,
    /// Answer a question none of whose images can be used, text only (by default it is listed
    /// as unanswerable and left out of accuracy).
    #[serde(default)]
    pub answer_without_image: bool,
    /// Official mode: stop a reply's generation once its official letter is settled
    /// ([`score::official_letter_settled`]), which no later token can change. The scores are
    /// those of full replies; only the robust extraction, which reads the whole reply, is lost.
    /// Off (full replies) where a reply is shown and in runs saved before it existed.
    #[serde(default)]
    pub stop_at_letter: bool,
}

impl Settings {
    /// What happens to a question without a usable image, in words.
    pub fn without_image_policy(&self) -> &'static str {
        if self.answer_without_image {
            "answered text only by setting"
        } else {
            "left out of accuracy"
        }
    }

    /// How official-mode replies are generated, in words (`None` in fast mode).
    pub fn replies(&self) -> Option<String> {
        (self.mode == Mode::Official).then(|| {
            if self.stop_at_letter {
                format!(
                    "stopped at the official letter (then no later token can change it; else ≤ {} tokens)",
                    self.max_new_tokens
                )
            } else {
                format!("full (≤ {} tokens or end of turn)", self.max_new_tokens)
            }
        })
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            mode: Mode::Fast,
            policy: Policy::Scale,
            all_images: false,
            max_new_tokens: OFFICIAL_MAX_NEW_TOKENS,
            answer_without_image: false,
            stop_at_letter: false,
        }
    }
}

/// One answered question, as written to the journal.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// Question id.
    pub id: String,
    /// The letter used for scoring (official extraction in official mode; best logit in fast).
    pub prediction: Option<Letter>,
    /// The letter the robust extraction reads (official mode only).
    pub robust: Option<Letter>,
    /// The model's reply as generated (official mode) or the chosen letter (fast mode).
    pub response: String,
    /// Official mode: the reply was stopped at its settled letter ([`Settings::stop_at_letter`]),
    /// so `response` is its start and `robust` is not read.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopped_at_letter: bool,
    /// Official mode: tokens generated.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tokens: usize,
    /// Option probabilities A.. (fast mode).
    pub probs: Option<Vec<f32>>,
    /// Images that could not be used (no path, a refused path, a missing or undecodable file).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_images: Vec<String>,
    /// Why the question was not asked: none of its images could be used (and the settings do not
    /// answer such questions text only). Such a question counts in no accuracy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unanswerable: Option<String>,
    /// Wall time for this question in milliseconds.
    pub ms: f64,
}

/// Where a split's images come from (a folder natively, `File` handles in a browser).
pub trait ImageStore {
    /// Reads the PNG at `path` (relative to the folder holding `deid_png/`).
    fn read(&self, path: &str) -> impl Future<Output = Result<Vec<u8>, String>>;
}

/// A monotonic clock in milliseconds (`performance.now()` in a browser, `Instant` natively).
pub trait Clock {
    /// Milliseconds since some fixed start.
    fn now_ms(&self) -> f64;
}

/// Image paths a question uses under the settings (first image only, or all views).
pub fn image_paths(r: &Record, s: &Settings) -> Vec<String> {
    checked_image_paths(r, s).0
}

/// The usable paths of [`image_paths`] and, for each listed path that is refused (empty, or
/// leaving the dataset folder), the problem; a record that lists no image is a problem too.
fn checked_image_paths(r: &Record, s: &Settings) -> (Vec<String>, Vec<String>) {
    if r.image_paths.is_empty() {
        return (Vec::new(), vec!["the record lists no image".into()]);
    }
    let take = if s.all_images { usize::MAX } else { 1 };
    let mut ok = Vec::new();
    let mut problems = Vec::new();
    for p in r.image_paths.iter().take(take) {
        match resolve_image_path(p) {
            Some(path) => ok.push(path),
            None => problems.push(format!(
                "image path {p:?} refused (empty, or outside the dataset folder)"
            )),
        }
    }
    (ok, problems)
}

/// Why `r` cannot be asked: every image it would use is unusable (`feats` is empty while
/// `problems` names them) and the settings do not answer such questions text only.
fn unanswerable_reason(feats: &[Tensor<2>], problems: &[String], s: &Settings) -> Option<String> {
    (feats.is_empty() && !problems.is_empty() && !s.answer_without_image)
        .then(|| format!("no usable image: {}", problems.join("; ")))
}

/// Answers one question. Images are encoded once per study (the session caches them); a
/// missing or unreadable image is reported in the answer, never fatal.
pub async fn answer(
    session: &mut Session<'_>,
    r: &Record,
    s: &Settings,
    images: &impl ImageStore,
    clock: &impl Clock,
    on_text: &mut dyn FnMut(&str),
) -> Result<Answer, ModelError> {
    let t0 = clock.now_ms();
    let (feats, missing) = features(session, r, s, images).await?;
    let mut a = unanswered(r, missing);
    if let Some(reason) = unanswerable_reason(&feats, &a.missing_images, s) {
        a.unanswerable = Some(reason);
        return Ok(a);
    }
    let ids = record_prompt(session.model(), r, feats.len())?;
    let letters = letters_of(r);
    match s.mode {
        Mode::Fast => {
            let sc = session.score_options(&ids, &feats, &letters).await?;
            fill_scores(&mut a, sc);
        }
        Mode::Official => {
            let mut stop = Stopper::default();
            let out = session
                .generate(&ids, &feats, s.max_new_tokens, &mut |_, text| {
                    on_text(text);
                    stop.on_text(s, text)
                })
                .await?;
            fill_reply(&mut a, session, &out, stop.stopped);
        }
    }
    a.ms = clock.now_ms() - t0;
    Ok(a)
}

/// Stops an official reply at its settled letter when the settings ask for it, and only where
/// that cuts the reply short: a letter settled by the last token allowed ends a full reply.
#[derive(Default)]
struct Stopper {
    tokens: usize,
    stopped: bool,
}

impl Stopper {
    /// Sees the reply's text after each token; breaks once its official letter is settled.
    fn on_text(&mut self, s: &Settings, text: &str) -> ControlFlow<()> {
        self.tokens += 1;
        self.stopped = s.stop_at_letter
            && self.tokens < s.max_new_tokens
            && score::official_letter_settled(text).is_some();
        if self.stopped {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

/// An official reply's fields: its text, both extractions (the robust one of full replies
/// only: it reads the whole reply) and how it ended.
fn fill_reply(a: &mut Answer, session: &Session<'_>, out: &[u32], stopped: bool) {
    let text = session.model().tokenizer.decode(out, true);
    a.prediction = score::extract(&text, Extraction::Official);
    a.robust = (!stopped)
        .then(|| score::extract(&text, Extraction::Robust))
        .flatten();
    a.stopped_at_letter = stopped;
    a.tokens = out.len();
    a.response = text;
}

/// Questions of one study answered in one batch at most: a ReXVQA study has ~4, and each one more
/// adds a question's activations (~360 rows) to the peak device memory.
pub const STUDY_BATCH: usize = 4;

/// Answers questions of one study together. On a GPU backend, questions over the same images
/// are prefilled in one batched pass and share its time equally in `ms`: in fast mode that pass
/// scores them ([`Session::score_many`]); in official mode each reply is then decoded from its
/// own cache ([`Session::generate_many`]). Otherwise they are answered one by one. Why only
/// there: batching measured faster on wgpu (lavapipe) but slower on the CPU, where a bigger
/// matrix gains nothing (`bench/JOURNAL.md`, study batching).
pub async fn answer_study(
    session: &mut Session<'_>,
    records: &[&Record],
    s: &Settings,
    images: &impl ImageStore,
    clock: &impl Clock,
) -> Result<Vec<Answer>, ModelError> {
    let same_images = records
        .windows(2)
        .all(|w| image_paths(w[0], s) == image_paths(w[1], s));
    let gains = crate::device::queues_work(session.model().device());
    if !same_images || records.len() < 2 || !gains {
        let mut out = Vec::with_capacity(records.len());
        for r in records {
            out.push(answer(session, r, s, images, clock, &mut |_| {}).await?);
        }
        return Ok(out);
    }
    answer_together(session, records, s, images, clock).await
}

/// [`answer_study`]'s batched form on any backend (it is taken only where it gains; the tests
/// hold it to answering one by one on every backend). The `records` must use the same images.
pub async fn answer_together(
    session: &mut Session<'_>,
    records: &[&Record],
    s: &Settings,
    images: &impl ImageStore,
    clock: &impl Clock,
) -> Result<Vec<Answer>, ModelError> {
    let t0 = clock.now_ms();
    let (feats, missing) = features(session, records[0], s, images).await?;
    if let Some(reason) = unanswerable_reason(&feats, &missing, s) {
        return Ok(records
            .iter()
            .map(|r| Answer {
                unanswerable: Some(reason.clone()),
                ..unanswered(r, missing.clone())
            })
            .collect());
    }
    let mut prompts = Vec::with_capacity(records.len());
    for r in records {
        prompts.push((
            record_prompt(session.model(), r, feats.len())?,
            letters_of(r),
        ));
    }
    if s.mode == Mode::Official {
        let prompts: Vec<Vec<u32>> = prompts.into_iter().map(|(p, _)| p).collect();
        let mut stops: Vec<Stopper> = records.iter().map(|_| Stopper::default()).collect();
        let replies = session
            .generate_many(&prompts, &feats, s.max_new_tokens, &mut |i, _, text| {
                stops[i].on_text(s, text)
            })
            .await?;
        let ms = (clock.now_ms() - t0) / records.len() as f64;
        let mut out = Vec::with_capacity(records.len());
        for ((r, reply), stop) in records.iter().zip(replies).zip(stops) {
            let mut a = unanswered(r, missing.clone());
            a.ms = ms;
            fill_reply(&mut a, session, &reply, stop.stopped);
            out.push(a);
        }
        return Ok(out);
    }
    let scores = session.score_many(&prompts, &feats).await?;
    let ms = (clock.now_ms() - t0) / records.len() as f64;
    Ok(records
        .iter()
        .zip(scores)
        .map(|(r, sc)| {
            let mut a = unanswered(r, missing.clone());
            a.ms = ms;
            fill_scores(&mut a, sc);
            a
        })
        .collect())
}

/// Consecutive runs of `order` (record indices) from the same study, at most `max` long: the
/// groups [`answer_study`] takes.
pub fn study_groups(split: &Split, order: &[usize], max: usize) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for &i in order {
        let key = split.records[i].study_key();
        match groups.last_mut() {
            Some(g) if g.len() < max.max(1) && split.records[g[0]].study_key() == key => g.push(i),
            _ => groups.push(vec![i]),
        }
    }
    groups
}

/// The option letters a question offers (at most four).
fn letters_of(r: &Record) -> Vec<Letter> {
    Letter::ALL
        .iter()
        .copied()
        .take(r.options.len().min(4))
        .collect()
}

/// An answer to `r` with nothing filled in yet but the images that could not be used.
fn unanswered(r: &Record, missing_images: Vec<String>) -> Answer {
    Answer {
        id: r.id.clone(),
        missing_images,
        ..Answer::default()
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn fill_scores(a: &mut Answer, sc: OptionScores) {
    a.prediction = Some(sc.best);
    a.robust = Some(sc.best);
    a.response = sc.best.to_string();
    a.probs = Some(sc.probs);
}

/// The encoded images of `r` (from the session's cache where possible) and the problems with
/// those that could not be read or decoded.
pub async fn features(
    session: &mut Session<'_>,
    r: &Record,
    s: &Settings,
    images: &impl ImageStore,
) -> Result<(Vec<Tensor<2>>, Vec<String>), ModelError> {
    let mut feats = Vec::new();
    let (paths, mut missing) = checked_image_paths(r, s);
    for path in paths {
        let key = format!("{path}|{}", s.policy.name());
        if let Some(f) = session.cached_image(&key) {
            feats.push(f);
            continue;
        }
        match images.read(&path).await {
            Ok(png) => match session.model().preprocess_file(&png, s.policy) {
                Ok(pixels) => feats.push(session.add_image(&key, &pixels)?),
                Err(e) => missing.push(format!("{path}: {e}")),
            },
            Err(e) => missing.push(format!("{path}: {e}")),
        }
    }
    Ok((feats, missing))
}

/// The questions still to answer: `scope` in evaluation order minus those already answered.
pub fn pending(
    split: &Split,
    scope: &Scope,
    done: &[Answer],
) -> Result<Vec<usize>, crate::rexvqa::ScopeError> {
    let done: std::collections::HashSet<&str> = done.iter().map(|a| a.id.as_str()).collect();
    Ok(split
        .select(scope)?
        .into_iter()
        .filter(|&i| !done.contains(split.records[i].id.as_str()))
        .collect())
}

/// Everything a finished (or partial) run reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    /// The run's settings.
    pub settings: Settings,
    /// Questions answered (unanswerable ones not counted).
    pub answered: usize,
    /// Questions in scope.
    pub in_scope: usize,
    /// Records of the split file the parser rejected (never in any scope), with the reason.
    #[serde(default)]
    pub rejected_records: Vec<Rejected>,
    /// Questions not asked because none of their images could be used, with the reason; they
    /// count in no accuracy.
    #[serde(default)]
    pub unanswerable: Vec<Rejected>,
    /// Scores with the official extraction (fast mode: the best option).
    pub official: Report,
    /// Scores with the robust extraction, over the full replies only (those not stopped at their
    /// letter).
    pub robust: Report,
    /// Official mode: replies stopped at their settled letter (`robust` leaves them out).
    #[serde(default)]
    pub stopped_at_letter: usize,
    /// Official mode: mean tokens generated per answered question.
    #[serde(default)]
    pub mean_tokens: f64,
    /// Questions answered with at least one image missing (or, with `answer_without_image`,
    /// with none).
    pub missing_images: usize,
    /// Mean time per question in milliseconds.
    pub mean_ms: f64,
}

/// The report of `answers` over `split`.
pub fn report(
    split: &Split,
    answers: &[Answer],
    settings: &Settings,
    in_scope: usize,
) -> EvalReport {
    let (asked, skipped): (Vec<&Answer>, Vec<&Answer>) =
        answers.iter().partition(|a| a.unanswerable.is_none());
    let preds = |robust: bool| -> Vec<Prediction> {
        asked
            .iter()
            .filter(|a| !(robust && a.stopped_at_letter))
            .filter_map(|a| {
                let r = split.get(&a.id)?;
                Some(Prediction::new(
                    r,
                    if robust { a.robust } else { a.prediction },
                ))
            })
            .collect()
    };
    EvalReport {
        settings: settings.clone(),
        answered: asked.len(),
        in_scope,
        rejected_records: split.rejected.clone(),
        unanswerable: skipped
            .iter()
            .map(|a| Rejected {
                id: a.id.clone(),
                reason: a.unanswerable.clone().unwrap_or_default(),
            })
            .collect(),
        official: score::report(&preds(false)),
        robust: score::report(&preds(true)),
        stopped_at_letter: asked.iter().filter(|a| a.stopped_at_letter).count(),
        mean_tokens: mean(asked.iter().map(|a| a.tokens as f64)),
        missing_images: asked
            .iter()
            .filter(|a| !a.missing_images.is_empty())
            .count(),
        mean_ms: mean(asked.iter().map(|a| a.ms)),
    }
}

/// The mean of `xs`, 0 for none.
fn mean(xs: impl ExactSizeIterator<Item = f64>) -> f64 {
    let n = xs.len();
    if n == 0 {
        0.0
    } else {
        xs.sum::<f64>() / n as f64
    }
}

impl EvalReport {
    /// One line on what the scores leave out: rejected records and unanswerable questions.
    pub fn accounting(&self) -> String {
        format!(
            "answered {} of {}; {} record(s) rejected by the split parser, {} question(s) unanswerable (no usable image; {})",
            self.answered,
            self.in_scope,
            self.rejected_records.len(),
            self.unanswerable.len(),
            self.settings.without_image_policy()
        )
    }

    /// How the official-mode replies were generated and what that gave (`None` in fast mode):
    /// the report's "replies" line.
    pub fn replies_line(&self) -> Option<String> {
        self.settings.replies().map(|v| {
            format!(
                "{v}: {} of {} stopped, {:.1} tokens per question",
                self.stopped_at_letter, self.answered, self.mean_tokens
            )
        })
    }

    /// The robust extraction's row label, or why it has none: it reads whole replies, and
    /// replies stopped at their letter are not whole.
    pub fn robust_label(&self) -> Result<String, String> {
        let full = self.answered.saturating_sub(self.stopped_at_letter);
        if self.stopped_at_letter == 0 {
            Ok("this run (robust extraction)".into())
        } else if full == 0 {
            Err("robust extraction: not computed, every reply stopped at its official letter (full replies compute it)".into())
        } else {
            Ok(format!(
                "this run (robust extraction, the {full} full replies only; {} stopped at the letter)",
                self.stopped_at_letter
            ))
        }
    }
}
