//! Calibration: time a few real questions on this device and project how long a whole split
//! takes. A study's first question pays for its image encode; the others reuse it, so the
//! projection is `studies × per-study cost + questions × per-question cost`, both measured.

use serde::{Deserialize, Serialize};

use crate::eval::{self, Clock, ImageStore, Settings};
use crate::model::ModelError;
use crate::rexvqa::Split;
use crate::rng::SplitMix64;
use crate::session::{Model, Session};

/// The projection from a calibration run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Projection {
    /// Questions timed (after one warm-up question that is not counted).
    pub timed: usize,
    /// Studies they came from.
    pub timed_studies: usize,
    /// Milliseconds a study costs once (image encode and shared prefix).
    pub per_study_ms: f64,
    /// Milliseconds each question costs on top.
    pub per_question_ms: f64,
    /// Questions in the projected scope.
    pub questions: usize,
    /// Studies in the projected scope.
    pub studies: usize,
    /// Projected seconds for the scope.
    pub total_s: f64,
    /// Official mode: mean tokens generated per timed question, as the settings stop replies
    /// (at the settled letter, or in full); 0 in fast mode.
    #[serde(default)]
    pub mean_tokens: f64,
}

impl Projection {
    /// The same measured costs projected onto other counts.
    pub fn for_counts(&self, questions: usize, studies: usize) -> Projection {
        Projection {
            questions,
            studies,
            total_s: (studies as f64 * self.per_study_ms + questions as f64 * self.per_question_ms)
                / 1000.0,
            ..self.clone()
        }
    }
}

/// One timed answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// Whether it was its study's first question (it paid for the image).
    pub first_in_study: bool,
    /// Wall milliseconds.
    pub ms: f64,
    /// Tokens generated (official mode).
    pub tokens: usize,
}

/// Whole studies of `indices` (in evaluation order) drawn with `seed` until they hold at least
/// `n` questions; returned in evaluation order.
pub fn sample(split: &Split, indices: &[usize], n: usize, seed: u64) -> Vec<usize> {
    let mut studies: Vec<Vec<usize>> = Vec::new();
    for &i in indices {
        let key = split.records[i].study_key();
        match studies.last_mut() {
            Some(s) if split.records[s[0]].study_key() == key => s.push(i),
            _ => studies.push(vec![i]),
        }
    }
    let mut rng = SplitMix64::new(seed);
    rng.shuffle(&mut studies);
    let mut out = Vec::new();
    for s in studies {
        if out.len() >= n {
            break;
        }
        out.extend(s);
    }
    let pos: std::collections::HashMap<usize, usize> =
        indices.iter().enumerate().map(|(k, &i)| (i, k)).collect();
    out.sort_by_key(|i| pos[i]);
    out
}

/// Studies among `indices`.
pub fn count_studies(split: &Split, indices: &[usize]) -> usize {
    let mut keys: Vec<&str> = indices
        .iter()
        .map(|&i| split.records[i].study_key())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys.len()
}

/// Fits the two costs to the timings and projects `questions` in `studies`; `None` without
/// timings.
pub fn project(timings: &[Timing], questions: usize, studies: usize) -> Option<Projection> {
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let firsts: Vec<f64> = timings
        .iter()
        .filter(|t| t.first_in_study)
        .map(|t| t.ms)
        .collect();
    let others: Vec<f64> = timings
        .iter()
        .filter(|t| !t.first_in_study)
        .map(|t| t.ms)
        .collect();
    let first = mean(&firsts)?;
    // With one question per study the two costs cannot be told apart: all goes to the study.
    let per_question_ms = mean(&others).unwrap_or(0.0).min(first);
    let per_study_ms = first - per_question_ms;
    Some(Projection {
        timed: timings.len(),
        timed_studies: firsts.len(),
        per_study_ms,
        per_question_ms,
        questions,
        studies,
        total_s: (studies as f64 * per_study_ms + questions as f64 * per_question_ms) / 1000.0,
        mean_tokens: timings.iter().map(|t| t.tokens as f64).sum::<f64>() / timings.len() as f64,
    })
}

/// Answers the sampled questions of `indices` (one extra warm-up answer first, so shader
/// compilation is not counted) and projects the whole of `indices`. `progress(done, total)`
/// after each answer.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    model: &Model,
    split: &Split,
    indices: &[usize],
    settings: &Settings,
    images: &impl ImageStore,
    clock: &impl Clock,
    n: usize,
    seed: u64,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Option<Projection>, ModelError> {
    let chosen = sample(split, indices, n, seed);
    let mut session = Session::new(model);
    if let Some(&i) = chosen.first() {
        eval::answer(
            &mut session,
            &split.records[i],
            settings,
            images,
            clock,
            &mut |_| {},
        )
        .await?;
    }
    // Timed as evaluation runs: a study's questions together (batched in fast mode, where each
    // answer carries an equal share of the study's time).
    let mut timings = Vec::new();
    let mut study = String::new();
    for group in eval::study_groups(split, &chosen, eval::STUDY_BATCH) {
        let records: Vec<_> = group.iter().map(|&i| &split.records[i]).collect();
        let mut first_in_study = records[0].study_key() != study;
        if first_in_study {
            session.next_study();
            study = records[0].study_key().to_string();
        }
        for a in eval::answer_study(&mut session, &records, settings, images, clock).await? {
            timings.push(Timing {
                first_in_study,
                ms: a.ms,
                tokens: a.tokens,
            });
            first_in_study = false;
        }
        progress(timings.len(), chosen.len());
    }
    Ok(project(
        &timings,
        indices.len(),
        count_studies(split, indices),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rexvqa::synth::{SynthOptions, generate};

    fn split() -> Split {
        let opts = SynthOptions {
            studies: 12,
            questions_per_study: 3,
            seed: 5,
            size_range: (64, 80),
            split: "test".into(),
        };
        let mut json = None;
        generate(&opts, |f| {
            if f.path.ends_with(".json") {
                json = Some(String::from_utf8(f.bytes.clone()).unwrap());
            }
        });
        Split::from_json(&json.unwrap()).unwrap()
    }

    #[test]
    fn samples_whole_studies_in_order_and_by_seed() {
        let s = split();
        let all = s.eval_order();
        let a = sample(&s, &all, 7, 1);
        assert_eq!(a.len(), 9, "three whole studies of three");
        assert_eq!(count_studies(&s, &a), 3);
        let pos: Vec<usize> = a
            .iter()
            .map(|i| all.iter().position(|j| j == i).unwrap())
            .collect();
        assert!(pos.windows(2).all(|w| w[0] < w[1]), "evaluation order");
        assert_eq!(a, sample(&s, &all, 7, 1));
        assert_ne!(a, sample(&s, &all, 7, 2));
        assert_eq!(sample(&s, &all, 1000, 1).len(), all.len());
        assert_eq!(count_studies(&s, &all), 12);
    }

    #[test]
    fn projection_separates_study_and_question_costs() {
        // Study cost 300 ms, question cost 50 ms, measured exactly.
        let t = |first, ms| Timing {
            first_in_study: first,
            ms,
            tokens: if first { 4 } else { 1 },
        };
        let timings = [
            t(true, 350.0),
            t(false, 50.0),
            t(false, 50.0),
            t(true, 350.0),
            t(false, 50.0),
        ];
        let p = project(&timings, 40_000, 10_000).unwrap();
        assert_eq!((p.per_study_ms, p.per_question_ms), (300.0, 50.0));
        assert_eq!(p.total_s, (10_000.0 * 300.0 + 40_000.0 * 50.0) / 1000.0);
        assert_eq!((p.timed, p.timed_studies), (5, 2));
        assert_eq!(p.mean_tokens, 11.0 / 5.0);
        let q = p.for_counts(4, 1);
        assert_eq!((q.questions, q.studies, q.total_s), (4, 1, 0.5));
        // One question per study: the whole cost is the study's.
        let p = project(&[t(true, 200.0), t(true, 100.0)], 10, 10).unwrap();
        assert_eq!(
            (p.per_study_ms, p.per_question_ms, p.total_s),
            (150.0, 0.0, 1.5)
        );
        assert!(project(&[], 1, 1).is_none());
    }
}
