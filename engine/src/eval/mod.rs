//! Evaluating ReXVQA questions: one answer per question (fast or official mode), an append-only
//! journal of answers, and the final report. Shared by the browser worker and `rexvqa eval`, so
//! both produce the same numbers from the same code.

use std::future::Future;

use serde::{Deserialize, Serialize};

use crate::image::Policy;
use crate::model::ModelError;
use crate::rexvqa::{Letter, Record, Rejected, Scope, Split, resolve_image_path};
use crate::score::{self, Extraction, Prediction, Report};
use crate::session::{Mode, OptionScores, Session, record_prompt};
use burn::tensor::Tensor;

pub mod export;
pub mod journal;
pub mod run;
pub mod tally;

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
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            mode: Mode::Fast,
            policy: Policy::Scale,
            all_images: false,
            max_new_tokens: OFFICIAL_MAX_NEW_TOKENS,
            answer_without_image: false,
        }
    }
}

/// One answered question, as written to the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// Question id.
    pub id: String,
    /// The letter used for scoring (official extraction in official mode; best logit in fast).
    pub prediction: Option<Letter>,
    /// The letter the robust extraction reads (official mode only).
    pub robust: Option<Letter>,
    /// The model's reply (official mode) or the chosen letter (fast mode).
    pub response: String,
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
            let out = session
                .generate(&ids, &feats, s.max_new_tokens, &mut |_, text| on_text(text))
                .await?;
            let text = session.model().tokenizer.decode(&out, true);
            a.prediction = score::extract(&text, Extraction::Official);
            a.robust = score::extract(&text, Extraction::Robust);
            a.response = text;
        }
    }
    a.ms = clock.now_ms() - t0;
    Ok(a)
}

/// Questions of one study answered in one batch at most: a ReXVQA study has ~4, and each one more
/// adds a question's activations (~360 rows) to the peak device memory.
pub const STUDY_BATCH: usize = 4;

/// Answers questions of one study together. In fast mode on a GPU backend, questions over the
/// same images are scored in one batched pass ([`Session::score_many`]) and share its time
/// equally in `ms`; otherwise they are answered one by one. Why only there: batching measured
/// faster on wgpu (lavapipe) but slower on the CPU, where a bigger matrix gains nothing
/// (`bench/JOURNAL.md`, study batching).
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
    if s.mode != Mode::Fast || !same_images || records.len() < 2 || !gains {
        let mut out = Vec::with_capacity(records.len());
        for r in records {
            out.push(answer(session, r, s, images, clock, &mut |_| {}).await?);
        }
        return Ok(out);
    }
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
        prediction: None,
        robust: None,
        response: String::new(),
        probs: None,
        missing_images,
        unanswerable: None,
        ms: 0.0,
    }
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
    /// Scores with the robust extraction.
    pub robust: Report,
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
        missing_images: asked
            .iter()
            .filter(|a| !a.missing_images.is_empty())
            .count(),
        mean_ms: if asked.is_empty() {
            0.0
        } else {
            asked.iter().map(|a| a.ms).sum::<f64>() / asked.len() as f64
        },
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
}

/// Leaderboard-format predictions (`{qid: record + model_prediction + model_response}`).
pub fn leaderboard(
    split: &Split,
    answers: &[Answer],
) -> serde_json::Map<String, serde_json::Value> {
    let rows: Vec<(String, Option<Letter>, String)> = answers
        .iter()
        .map(|a| (a.id.clone(), a.prediction, a.response.clone()))
        .collect();
    let mut out = score::leaderboard(split, &rows);
    // Kept in the file (so that merged shards still name them), marked so no score counts them.
    for a in answers {
        if let (Some(reason), Some(serde_json::Value::Object(o))) =
            (&a.unanswerable, out.get_mut(&a.id))
        {
            o.insert(score::UNANSWERABLE_KEY.into(), reason.clone().into());
        }
    }
    out
}

/// Published figures to compare with (public/reference_figures.json).
pub const REFERENCE_FIGURES: &str = include_str!("../../../public/reference_figures.json");

fn pct(x: f64) -> String {
    format!("{:.2}", 100.0 * x)
}

/// The report as Markdown: settings, overall / per task / per category tables with 95% Wilson
/// intervals, side by side with the paper's and the leaderboard's MedGemma figures.
pub fn markdown(r: &EvalReport, run_info: &[(&str, String)]) -> String {
    let refs: serde_json::Value = serde_json::from_str(REFERENCE_FIGURES).unwrap_or_default();
    let mut md = String::from(
        "# ReXVQA evaluation (rexvqa-web)\n\n## Run\n\n| setting | value |\n|---|---|\n",
    );
    let s = &r.settings;
    for (k, v) in [
        ("mode", format!("{:?}", s.mode).to_lowercase()),
        ("16-bit policy", s.policy.name().to_string()),
        (
            "images",
            if s.all_images {
                "all views".into()
            } else {
                "first image (official)".into()
            },
        ),
        ("answered", format!("{} of {}", r.answered, r.in_scope)),
        (
            "records rejected by the split parser",
            r.rejected_records.len().to_string(),
        ),
        (
            "questions unanswerable (no usable image)",
            format!("{} ({})", r.unanswerable.len(), s.without_image_policy()),
        ),
        (
            "questions with a missing image",
            r.missing_images.to_string(),
        ),
        ("mean time per question", format!("{:.0} ms", r.mean_ms)),
    ] {
        md.push_str(&format!("| {k} | {v} |\n"));
    }
    for (k, v) in run_info {
        md.push_str(&format!("| {k} | {v} |\n"));
    }
    let o = &r.official.overall;
    md.push_str(&format!(
        "\n## Overall\n\n| | accuracy % | 95% CI | n | failed extractions |\n|---|---|---|---|---|\n| this run (official extraction) | {} | {}–{} | {} | {} |\n",
        pct(o.accuracy), pct(o.ci_low), pct(o.ci_high), o.n, r.official.failed_extractions
    ));
    let rb = &r.robust.overall;
    md.push_str(&format!(
        "| this run (robust extraction) | {} | {}–{} | {} | {} |\n",
        pct(rb.accuracy),
        pct(rb.ci_low),
        pct(rb.ci_high),
        rb.n,
        r.robust.failed_extractions
    ));
    for key in ["paper", "leaderboard"] {
        if let Some(x) = refs[key]["overall"].as_f64() {
            md.push_str(&format!(
                "| {} | {} | | | |\n",
                refs[key]["label"].as_str().unwrap_or(key),
                pct(x)
            ));
        }
    }
    md.push_str("\n## Per task\n\n| task | accuracy % | 95% CI | n | paper % | leaderboard % |\n|---|---|---|---|---|---|\n");
    for (task, c) in &r.official.per_task {
        let fig = |k: &str| refs[k]["tasks"][task].as_f64().map(pct).unwrap_or_default();
        md.push_str(&format!(
            "| {task} | {} | {}–{} | {} | {} | {} |\n",
            pct(c.accuracy),
            pct(c.ci_low),
            pct(c.ci_high),
            c.n,
            fig("paper"),
            fig("leaderboard")
        ));
    }
    for (title, rows) in [
        ("Records rejected by the split parser", &r.rejected_records),
        ("Unanswerable questions", &r.unanswerable),
    ] {
        if !rows.is_empty() {
            md.push_str(&format!("\n## {title}\n\n| id | reason |\n|---|---|\n"));
            for x in rows {
                md.push_str(&format!(
                    "| {} | {} |\n",
                    x.id,
                    x.reason.replace('|', "\\|")
                ));
            }
        }
    }
    md.push_str("\n## Per category\n\n| category | accuracy % | 95% CI | n |\n|---|---|---|---|\n");
    for (cat, c) in &r.official.per_category {
        md.push_str(&format!(
            "| {} | {} | {}–{} | {} |\n",
            if cat.is_empty() { "(none)" } else { cat },
            pct(c.accuracy),
            pct(c.ci_low),
            pct(c.ci_high),
            c.n
        ));
    }
    md
}

/// CSV of answers: id, task, category, truth, prediction, robust, correct, probabilities, ms.
pub fn csv(split: &Split, answers: &[Answer]) -> String {
    let mut out = String::from(
        "id,task,category,correct_answer,prediction,robust_prediction,is_correct,p_a,p_b,p_c,p_d,ms\n",
    );
    let q = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let l = |x: Option<Letter>| x.map(|l| l.to_string()).unwrap_or_default();
    for a in answers {
        let Some(r) = split.get(&a.id) else { continue };
        let p = a.probs.clone().unwrap_or_default();
        let pf = |i: usize| p.get(i).map(|v| format!("{v:.6}")).unwrap_or_default();
        out.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{:.1}\n",
            q(&a.id),
            q(r.task.name()),
            q(&r.category),
            l(r.correct),
            l(a.prediction),
            l(a.robust),
            r.correct
                .map(|c| (Some(c) == a.prediction).to_string())
                .unwrap_or_default(),
            pf(0),
            pf(1),
            pf(2),
            pf(3),
            a.ms
        ));
    }
    out
}
