//! Scoring: answer extraction, accuracy tables with Wilson intervals, Cohen's kappa,
//! leaderboard predictions and shard merging. Pure functions, no model.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::rexvqa::{Letter, Record, Split};

/// How a letter is read out of a model reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Extraction {
    /// The official rule: the first A–D character of `reply.strip().upper()`, so `ANSWER: C`
    /// scores as A (ref: ReXrank MedGemma evaluation script).
    Official,
    /// Explicit answer patterns (`Answer: C`, `(C)`, `**C**`, a line starting `C.`); the last
    /// match wins.
    Robust,
}

/// Reads a letter from a reply with the given rule; `None` is a failed extraction.
pub fn extract(reply: &str, rule: Extraction) -> Option<Letter> {
    match rule {
        Extraction::Official => extract_official(reply),
        Extraction::Robust => extract_robust(reply),
    }
}

/// The official rule.
pub fn extract_official(reply: &str) -> Option<Letter> {
    first_a_to_d(reply.trim().chars())
}

/// The official rule's scan: the first of `chars`, uppercased, that is A–D.
fn first_a_to_d(chars: impl Iterator<Item = char>) -> Option<Letter> {
    chars.flat_map(char::to_uppercase).find_map(|c| {
        matches!(c, 'A'..='D')
            .then(|| Letter::from_char(c))
            .flatten()
    })
}

/// The official letter of a reply still being generated, once no later token can change it.
///
/// Text decoded from a reply's first tokens is the start of the whole reply's text except where
/// the tokens end inside a multi-byte character, which decodes as U+FFFD until its last byte
/// comes. A–D are single bytes, so a letter the rule finds before any U+FFFD is the letter it
/// finds in every longer reply. A U+FFFD before it might still become a character whose
/// uppercase starts with A–D (`ẚ` is `Aʾ`), so then the reply is not settled.
pub fn official_letter_settled(reply_so_far: &str) -> Option<Letter> {
    first_a_to_d(
        reply_so_far
            .chars()
            .take_while(|&c| c != char::REPLACEMENT_CHARACTER),
    )
}

static ROBUST: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        // "Answer: C", "the answer is (C)", "Option B", "choice: **D**"
        r"(?i:\b(?:answer|option|choice)(?:\s+is)?\s*[:\-]?\s*)[\(\[]?\**([A-D])\b",
        // "(C)" or "[C]"
        r"[\(\[]([A-D])[\)\]]",
        // "**C**", "**C.**", "**C)"
        r"\*\*([A-D])(?:\*\*|[.):])",
        // a line that starts with the letter: "C. Pleural effusion", "C)", "C" alone
        r"(?m)^\s*([A-D])(?:[.):]|\s*$)",
    ]
    .iter()
    .map(|p| Regex::new(p).expect("patterns are valid"))
    .collect()
});

/// The robust rule.
pub fn extract_robust(reply: &str) -> Option<Letter> {
    ROBUST
        .iter()
        .flat_map(|re| re.captures_iter(reply))
        .filter_map(|c| c.get(1))
        .max_by_key(|m| m.start())
        .and_then(|m| m.as_str().chars().next())
        .and_then(Letter::from_char)
}

/// One scored question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prediction {
    /// Question id.
    pub id: String,
    /// `task_name`.
    pub task: String,
    /// `category`.
    pub category: String,
    /// Ground truth, when known.
    pub correct: Option<Letter>,
    /// The model's letter; `None` is a failed extraction.
    pub predicted: Option<Letter>,
}

impl Prediction {
    /// Builds a prediction for a record.
    pub fn new(r: &Record, predicted: Option<Letter>) -> Self {
        Prediction {
            id: r.id.clone(),
            task: r.task.name().to_string(),
            category: r.category.clone(),
            correct: r.correct,
            predicted,
        }
    }
}

/// Accuracy of a group with its 95% Wilson interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// Questions with ground truth.
    pub n: usize,
    /// Correct answers.
    pub correct: usize,
    /// Failed extractions (counted as wrong).
    pub failed: usize,
    /// correct / n (0 when n = 0).
    pub accuracy: f64,
    /// Lower 95% Wilson bound.
    pub ci_low: f64,
    /// Upper 95% Wilson bound.
    pub ci_high: f64,
}

/// z for a two-sided 95% interval.
pub const Z95: f64 = 1.959_963_984_540_054;

/// The Wilson score interval for `k` successes in `n` trials (ref: Wilson 1927).
pub fn wilson(k: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (k, n) = (k as f64, n as f64);
    let p = k / n;
    let z2 = Z95 * Z95;
    let denom = 1.0 + z2 / n;
    let center = (p + z2 / (2.0 * n)) / denom;
    let half = Z95 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denom;
    ((center - half).max(0.0), (center + half).min(1.0))
}

impl Cell {
    fn from_counts(n: usize, correct: usize, failed: usize) -> Cell {
        let (ci_low, ci_high) = wilson(correct, n);
        Cell {
            n,
            correct,
            failed,
            accuracy: if n == 0 {
                0.0
            } else {
                correct as f64 / n as f64
            },
            ci_low,
            ci_high,
        }
    }
}

/// The paper's tables: overall, per task, per category, failed extractions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// All questions with ground truth.
    pub overall: Cell,
    /// Per `task_name`.
    pub per_task: BTreeMap<String, Cell>,
    /// Per `category`.
    pub per_category: BTreeMap<String, Cell>,
    /// Questions answered but without ground truth (not in any accuracy).
    pub unlabelled: usize,
    /// Failed extractions over all answered questions.
    pub failed_extractions: usize,
}

/// Builds the accuracy tables.
pub fn report(preds: &[Prediction]) -> Report {
    #[derive(Default)]
    struct Acc(usize, usize, usize);
    let mut overall = Acc::default();
    let mut per_task: BTreeMap<String, Acc> = BTreeMap::new();
    let mut per_cat: BTreeMap<String, Acc> = BTreeMap::new();
    let mut unlabelled = 0;
    let mut failed_all = 0;
    for p in preds {
        let failed = p.predicted.is_none();
        failed_all += usize::from(failed);
        let Some(truth) = p.correct else {
            unlabelled += 1;
            continue;
        };
        let ok = p.predicted == Some(truth);
        for acc in [
            &mut overall,
            per_task.entry(p.task.clone()).or_default(),
            per_cat.entry(p.category.clone()).or_default(),
        ] {
            acc.0 += 1;
            acc.1 += usize::from(ok);
            acc.2 += usize::from(failed);
        }
    }
    let cell = |a: &Acc| Cell::from_counts(a.0, a.1, a.2);
    Report {
        overall: cell(&overall),
        per_task: per_task.iter().map(|(k, a)| (k.clone(), cell(a))).collect(),
        per_category: per_cat.iter().map(|(k, a)| (k.clone(), cell(a))).collect(),
        unlabelled,
        failed_extractions: failed_all,
    }
}

/// Cohen's kappa between two prediction sets over the questions both answered; a failed
/// extraction is its own category. `None` when no question is shared.
pub fn cohen_kappa(a: &[Prediction], b: &[Prediction]) -> Option<f64> {
    let index = |p: &Option<Letter>| p.map_or(4, Letter::index);
    let b_by_id: BTreeMap<&str, &Prediction> = b.iter().map(|p| (p.id.as_str(), p)).collect();
    let mut table = [[0usize; 5]; 5];
    let mut n = 0usize;
    for pa in a {
        if let Some(pb) = b_by_id.get(pa.id.as_str()) {
            table[index(&pa.predicted)][index(&pb.predicted)] += 1;
            n += 1;
        }
    }
    kappa_from_table(&table, n)
}

/// Cohen's kappa from a square confusion table of `n` paired ratings.
pub fn kappa_from_table<const K: usize>(table: &[[usize; K]; K], n: usize) -> Option<f64> {
    if n == 0 {
        return None;
    }
    let nf = n as f64;
    let po = (0..K).map(|i| table[i][i]).sum::<usize>() as f64 / nf;
    let pe = (0..K)
        .map(|i| {
            let row: usize = table[i].iter().sum();
            let col: usize = (0..K).map(|j| table[j][i]).sum();
            row as f64 * col as f64
        })
        .sum::<f64>()
        / (nf * nf);
    if (1.0 - pe).abs() < f64::EPSILON {
        // Both raters used a single category: agreement is total, chance agreement too.
        return Some(if po == 1.0 { 1.0 } else { 0.0 });
    }
    Some((po - pe) / (1.0 - pe))
}

/// Predictions in the ReXrank leaderboard format: `{qid: record + model_prediction +
/// model_response}` in the given order.
pub fn leaderboard(
    split: &Split,
    answers: &[(String, Option<Letter>, String)],
) -> serde_json::Map<String, serde_json::Value> {
    answers
        .iter()
        .filter_map(|(id, letter, response)| {
            let r = split.get(id)?;
            Some((
                id.clone(),
                serde_json::Value::Object(r.leaderboard_json(*letter, response)),
            ))
        })
        .collect()
}

/// Errors merging shard files.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MergeError {
    /// The same question in two files.
    #[error(
        "{count} questions appear in more than one shard file (e.g. {example} in {first} and {second}); merge refused"
    )]
    Overlap {
        /// How many ids overlap.
        count: usize,
        /// One overlapping id.
        example: String,
        /// The first file holding it.
        first: String,
        /// The second file holding it.
        second: String,
    },
    /// A file that is not a leaderboard predictions object.
    #[error("{file}: not a predictions file ({reason})")]
    BadFile {
        /// File name.
        file: String,
        /// What is wrong.
        reason: String,
    },
}

/// The leaderboard-file field that marks a question not asked (no usable image), with the reason.
pub const UNANSWERABLE_KEY: &str = "unanswerable";

/// The leaderboard-file field (`true`) that marks a `model_response` cut where its official
/// letter was settled: the reply's start, with the prediction of the whole reply.
pub const STOPPED_AT_LETTER_KEY: &str = "model_response_stopped_at_letter";

/// The merge of several shard files.
#[derive(Debug, Clone, PartialEq)]
pub struct Merged {
    /// All predictions, keyed by question id.
    pub predictions: serde_json::Map<String, serde_json::Value>,
    /// Split questions that no file answered, in split order.
    pub missing: Vec<String>,
    /// Answered ids the split does not know.
    pub unknown: Vec<String>,
    /// Questions the shards marked unanswerable, with the reason, in split order.
    pub unanswerable: Vec<crate::rexvqa::Rejected>,
}

/// Merges leaderboard prediction files `(name, json)`; overlaps are an error, gaps are reported.
pub fn merge_shards(split: &Split, files: &[(String, String)]) -> Result<Merged, MergeError> {
    let mut predictions = serde_json::Map::new();
    let mut owner: BTreeMap<String, String> = BTreeMap::new();
    let mut overlaps = Vec::new();
    for (name, text) in files {
        let obj: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(text).map_err(|e| MergeError::BadFile {
                file: name.clone(),
                reason: e.to_string(),
            })?;
        for (id, v) in obj {
            if !v.get("model_prediction").is_some_and(|p| p.is_string()) {
                return Err(MergeError::BadFile {
                    file: name.clone(),
                    reason: format!("question {id} has no model_prediction"),
                });
            }
            if let Some(prev) = owner.get(&id) {
                overlaps.push((id.clone(), prev.clone(), name.clone()));
                continue;
            }
            owner.insert(id.clone(), name.clone());
            predictions.insert(id, v);
        }
    }
    if let Some((example, first, second)) = overlaps.first().cloned() {
        return Err(MergeError::Overlap {
            count: overlaps.len(),
            example,
            first,
            second,
        });
    }
    let known: BTreeSet<&str> = split.records.iter().map(|r| r.id.as_str()).collect();
    let missing = split
        .records
        .iter()
        .filter(|r| !predictions.contains_key(&r.id))
        .map(|r| r.id.clone())
        .collect();
    let unknown = predictions
        .keys()
        .filter(|k| !known.contains(k.as_str()))
        .cloned()
        .collect();
    let unanswerable = split
        .records
        .iter()
        .filter_map(|r| {
            let reason = predictions.get(&r.id)?.get(UNANSWERABLE_KEY)?;
            Some(crate::rexvqa::Rejected {
                id: r.id.clone(),
                reason: reason.as_str().unwrap_or_default().to_string(),
            })
        })
        .collect();
    Ok(Merged {
        predictions,
        missing,
        unknown,
        unanswerable,
    })
}

/// Reads predictions back from a merged leaderboard object (for the report of merged shards).
pub fn predictions_from_leaderboard(
    split: &Split,
    merged: &serde_json::Map<String, serde_json::Value>,
) -> Vec<Prediction> {
    split
        .records
        .iter()
        .filter_map(|r| {
            let v = merged
                .get(&r.id)
                .filter(|v| v.get(UNANSWERABLE_KEY).is_none())?;
            let letter = v["model_prediction"]
                .as_str()
                .and_then(|s| s.chars().next())
                .and_then(Letter::from_char);
            Some(Prediction::new(r, letter))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn official_rule_reproduces_the_script_including_its_quirks() {
        assert_eq!(extract_official("  c. Pleural effusion"), Some(Letter::C));
        assert_eq!(extract_official("ANSWER: C"), Some(Letter::A));
        assert_eq!(extract_official("The answer is B"), Some(Letter::A));
        assert_eq!(extract_official("**D**"), Some(Letter::D));
        assert_eq!(extract_official("xyz 123"), None);
        assert_eq!(extract_official(""), None);
        assert_eq!(extract_official("éèb"), Some(Letter::B));
    }

    #[test]
    fn a_settled_letter_is_the_whole_replys_letter() {
        // Replies built from pieces a tokenizer emits: ASCII, multi-byte characters (`ẚ`
        // uppercases to `Aʾ`), stray continuation bytes; decoded at every byte boundary as the
        // decoder does (lossy UTF-8).
        let pieces: [&[u8]; 10] = [
            b" ",
            b"x",
            b"b",
            b"Q",
            "é".as_bytes(),
            "ẚ".as_bytes(),
            "ß".as_bytes(),
            b"\x80",
            b"\xE1\xBA",
            b"\n",
        ];
        let mut rng = crate::rng::SplitMix64::new(3);
        let (mut settled, mut checked) = (0, 0);
        for _ in 0..2000 {
            let mut bytes = Vec::new();
            for _ in 0..rng.below(12) {
                bytes.extend_from_slice(pieces[rng.below(pieces.len() as u64) as usize]);
            }
            let whole = extract_official(&String::from_utf8_lossy(&bytes));
            for cut in 0..=bytes.len() {
                let so_far = String::from_utf8_lossy(&bytes[..cut]);
                if let Some(l) = official_letter_settled(&so_far) {
                    assert_eq!(Some(l), whole, "{bytes:?} cut at {cut}");
                    settled += 1;
                }
                checked += 1;
            }
            // Without a torn character the rule settles on the whole reply's letter.
            let text = String::from_utf8_lossy(&bytes);
            if !text.contains(char::REPLACEMENT_CHARACTER) {
                assert_eq!(official_letter_settled(&text), whole, "{text:?}");
            }
        }
        assert!(
            settled > checked / 10,
            "{settled} of {checked} prefixes settled"
        );
        // A torn `ẚ` before a `b` does not settle on B: the whole reply reads A.
        let torn = String::from_utf8_lossy(b"\xE1\xBAb");
        assert_eq!(official_letter_settled(&torn), None);
        assert_eq!(extract_official("ẚb"), Some(Letter::A));
        assert_eq!(official_letter_settled("ẚb"), Some(Letter::A));
        assert_eq!(official_letter_settled("  c. Pleural"), Some(Letter::C));
        assert_eq!(official_letter_settled("xyz"), None);
    }

    #[test]
    fn robust_rule_reads_explicit_patterns_last_match_wins() {
        assert_eq!(extract_robust("ANSWER: C"), Some(Letter::C));
        assert_eq!(extract_robust("The answer is (B)."), Some(Letter::B));
        assert_eq!(extract_robust("**D** because..."), Some(Letter::D));
        assert_eq!(extract_robust("C. Pleural effusion"), Some(Letter::C));
        assert_eq!(extract_robust("A is wrong; Answer: B"), Some(Letter::B));
        assert_eq!(
            extract_robust("Option A looks likely, but answer: D"),
            Some(Letter::D)
        );
        assert_eq!(extract_robust("a small effusion"), None);
        assert_eq!(extract_robust("I cannot tell"), None);
    }

    #[test]
    fn wilson_matches_published_values() {
        // Wilson 95% for 8/10: (0.4902, 0.9433) — e.g. Newcombe (1998) Table I.
        let (lo, hi) = wilson(8, 10);
        assert!(
            (lo - 0.4902).abs() < 1e-4 && (hi - 0.9433).abs() < 1e-4,
            "{lo} {hi}"
        );
        let (lo, hi) = wilson(0, 10);
        assert!(lo == 0.0 && (hi - 0.2775).abs() < 1e-4);
        assert_eq!(wilson(0, 0), (0.0, 1.0));
    }

    fn p(id: &str, task: &str, c: Option<char>, pred: Option<char>) -> Prediction {
        Prediction {
            id: id.into(),
            task: task.into(),
            category: format!("cat-{task}"),
            correct: c.and_then(Letter::from_char),
            predicted: pred.and_then(Letter::from_char),
        }
    }

    #[test]
    fn report_counts_failures_as_wrong_and_skips_unlabelled() {
        let preds = vec![
            p("1", "T1", Some('A'), Some('A')),
            p("2", "T1", Some('B'), None),
            p("3", "T2", Some('C'), Some('C')),
            p("4", "T2", Some('D'), Some('A')),
            p("5", "T2", None, Some('A')),
        ];
        let r = report(&preds);
        assert_eq!(
            (r.overall.n, r.overall.correct, r.overall.failed),
            (4, 2, 1)
        );
        assert_eq!(r.overall.accuracy, 0.5);
        assert_eq!(r.per_task["T1"].correct, 1);
        assert_eq!(r.per_task["T2"].n, 2);
        assert_eq!(r.per_category["cat-T2"].n, 2);
        assert_eq!((r.unlabelled, r.failed_extractions), (1, 1));
    }

    #[test]
    fn kappa_agrees_with_a_hand_computed_table() {
        // Classic example: 50 items, 20 both A, 15 both B, 5 A/B, 10 B/A.
        let mut t = [[0usize; 2]; 2];
        t[0][0] = 20;
        t[1][1] = 15;
        t[0][1] = 5;
        t[1][0] = 10;
        let k = kappa_from_table(&t, 50).unwrap();
        // po = 0.7, pe = 0.5*0.6 + 0.5*0.4 = 0.5 -> 0.4
        assert!((k - 0.4).abs() < 1e-12, "{k}");
        let a = vec![p("1", "T", None, Some('A')), p("2", "T", None, Some('B'))];
        assert_eq!(cohen_kappa(&a, &a), Some(1.0));
        assert_eq!(cohen_kappa(&a, &[]), None);
    }
}
