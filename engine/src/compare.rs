//! Two runs on the same questions, side by side: each run's accuracy, the paired difference with
//! its 95 % interval (Agresti–Min) and the exact McNemar test (overall and per task), agreement and Cohen's κ,
//! and the questions where the two differ. Questions in only one file, and questions a file
//! marks unanswerable, are counted and listed, never silently dropped.
//!
//! A failed extraction counts as wrong in accuracy (as in [`crate::score::report`]) and as its
//! own answer in agreement and κ. `tests/reference/compare_golden.py` recomputes every figure
//! with statsmodels from the same files.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::eval::export::ExportFile;
use crate::rexvqa::{Letter, Split, parse_split};
use crate::score::{Prediction, UNANSWERABLE_KEY, Z95, kappa_from_table};

/// Why a predictions file cannot be compared.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CompareError {
    /// Not a leaderboard predictions object.
    #[error("{file}: not a predictions file ({reason})")]
    BadFile {
        /// File name.
        file: String,
        /// What is wrong.
        reason: String,
    },
    /// The two files share no question.
    #[error("{a} and {b} share no question: compare runs on the same split")]
    Disjoint {
        /// First file.
        a: String,
        /// Second file.
        b: String,
    },
}

/// One run read from a leaderboard predictions file.
#[derive(Debug, Clone, PartialEq)]
pub struct RunPredictions {
    /// File name.
    pub name: String,
    /// Answered questions, in file order.
    pub predictions: Vec<Prediction>,
    /// Questions the file marks unanswerable (no usable image).
    pub unanswerable: Vec<String>,
}

/// Reads a leaderboard predictions file (`rexvqa eval --out`, the app's predictions download,
/// merged shards). Task, category and ground truth come from `split` when given, else from the
/// record each entry carries.
pub fn read_predictions(
    name: &str,
    text: &str,
    split: Option<&Split>,
) -> Result<RunPredictions, CompareError> {
    let bad = |reason: String| CompareError::BadFile {
        file: name.to_string(),
        reason,
    };
    let (records, rejected) = parse_split(text).map_err(|e| bad(e.to_string()))?;
    if let Some(r) = rejected.first() {
        return Err(bad(format!(
            "{} entries are not question records (e.g. {}: {})",
            rejected.len(),
            r.id,
            r.reason
        )));
    }
    let mut predictions = Vec::with_capacity(records.len());
    let mut unanswerable = Vec::new();
    for r in &records {
        let v: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(r.raw.get()).map_err(|e| bad(format!("{}: {e}", r.id)))?;
        if v.contains_key(UNANSWERABLE_KEY) {
            unanswerable.push(r.id.clone());
            continue;
        }
        let Some(p) = v.get("model_prediction").and_then(|p| p.as_str()) else {
            return Err(bad(format!("question {} has no model_prediction", r.id)));
        };
        let letter = p.chars().next().and_then(Letter::from_char);
        let record = split.and_then(|s| s.get(&r.id)).unwrap_or(r);
        predictions.push(Prediction::new(record, letter));
    }
    Ok(RunPredictions {
        name: name.to_string(),
        predictions,
        unanswerable,
    })
}

/// The paired comparison of one group of questions with ground truth.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Paired {
    /// Questions in the group.
    pub n: usize,
    /// Right in both runs.
    pub both: usize,
    /// Right in A only.
    pub a_only: usize,
    /// Right in B only.
    pub b_only: usize,
    /// Accuracy of A.
    pub accuracy_a: f64,
    /// Accuracy of B.
    pub accuracy_b: f64,
    /// B − A.
    pub difference: f64,
    /// Lower 95 % bound of B − A ([`agresti_min`]).
    pub ci_low: f64,
    /// Upper 95 % bound of B − A.
    pub ci_high: f64,
    /// Exact two-sided McNemar p-value (binomial on the discordant pairs).
    pub mcnemar_p: f64,
}

impl Paired {
    /// The figures from the four counts (`neither` = wrong in both).
    pub fn from_counts(both: usize, a_only: usize, b_only: usize, neither: usize) -> Paired {
        let n = both + a_only + b_only + neither;
        let nf = n.max(1) as f64;
        let (ka, kb) = (both + a_only, both + b_only);
        let (pa, pb) = (ka as f64 / nf, kb as f64 / nf);
        let (ci_low, ci_high) = agresti_min(both, a_only, b_only, neither);
        Paired {
            n,
            both,
            a_only,
            b_only,
            accuracy_a: pa,
            accuracy_b: pb,
            difference: pb - pa,
            ci_low,
            ci_high,
            mcnemar_p: mcnemar_exact(a_only, b_only),
        }
    }
}

/// Agresti and Min's (2005) interval for the paired difference B − A: Wald's, on the 2×2 table
/// with ½ added to each cell. Its coverage is near 95 % down to small samples, and it keeps a
/// width where the runs never disagree; Wald's collapses to a point there, and Newcombe's
/// method 10 (Wilson intervals joined by the table's φ, which is then 1) to the asymmetry of
/// the Wilson interval: exactly 0 at 50 % accuracy.
pub fn agresti_min(both: usize, a_only: usize, b_only: usize, neither: usize) -> (f64, f64) {
    let n = (both + a_only + b_only + neither) as f64 + 2.0;
    let (b, c) = (a_only as f64 + 0.5, b_only as f64 + 0.5);
    let d = (c - b) / n;
    let se = ((b + c) - (c - b).powi(2) / n).max(0.0).sqrt() / n;
    ((d - Z95 * se).max(-1.0), (d + Z95 * se).min(1.0))
}

impl Paired {
    /// The table's cells after the group's name, as the Markdown export and the page show
    /// them: n, A %, B %, B − A and its interval in points, the discordant counts, p.
    pub fn cells(&self) -> [String; 8] {
        [
            self.n.to_string(),
            pct(self.accuracy_a),
            pct(self.accuracy_b),
            format!("{:+.2}", 100.0 * self.difference),
            format!(
                "{:+.2} to {:+.2}",
                100.0 * self.ci_low,
                100.0 * self.ci_high
            ),
            self.a_only.to_string(),
            self.b_only.to_string(),
            p_value(self.mcnemar_p),
        ]
    }
}

/// The exact two-sided McNemar test: `min(1, 2·P(X ≤ min(b, c)))` for X ~ Binomial(b + c, ½).
/// The terms are summed in logs, so 40,000 discordant pairs neither overflow nor underflow
/// before they matter.
pub fn mcnemar_exact(b: usize, c: usize) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let k = b.min(c);
    let ln2n = n as f64 * std::f64::consts::LN_2;
    let mut ln_choose = 0.0f64;
    let mut tail = 0.0f64;
    for i in 0..=k {
        if i > 0 {
            ln_choose += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        tail += (ln_choose - ln2n).exp();
    }
    (2.0 * tail).min(1.0)
}

/// A question the two runs answer differently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disagreement {
    /// Question id.
    pub id: String,
    /// Its task.
    pub task: String,
    /// Ground truth, when known.
    pub correct: Option<Letter>,
    /// A's letter (`None`: failed extraction).
    pub a: Option<Letter>,
    /// B's letter.
    pub b: Option<Letter>,
}

/// Two runs compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// A's file name.
    pub a: String,
    /// B's file name.
    pub b: String,
    /// Questions answered in both.
    pub shared: usize,
    /// Answered in A only (ids, in A's order).
    pub only_a: Vec<String>,
    /// Answered in B only.
    pub only_b: Vec<String>,
    /// Marked unanswerable in A.
    pub unanswerable_a: Vec<String>,
    /// Marked unanswerable in B.
    pub unanswerable_b: Vec<String>,
    /// Shared questions without ground truth (in agreement and κ, not in accuracy).
    pub unlabelled: usize,
    /// Failed extractions among the shared questions, in A and in B.
    pub failed: (usize, usize),
    /// Every shared question with ground truth.
    pub overall: Paired,
    /// Per `task_name`.
    pub per_task: BTreeMap<String, Paired>,
    /// Shared questions with the same answer (a failed extraction is an answer of its own).
    pub agreement: f64,
    /// Cohen's κ over the five answers A–D and failed.
    pub kappa: Option<f64>,
    /// Shared questions answered differently, in A's order.
    pub disagreements: Vec<Disagreement>,
}

/// Compares two runs over the questions both answered.
pub fn compare(a: &RunPredictions, b: &RunPredictions) -> Result<Comparison, CompareError> {
    let b_by_id: BTreeMap<&str, &Prediction> =
        b.predictions.iter().map(|p| (p.id.as_str(), p)).collect();
    let a_ids: BTreeSet<&str> = a.predictions.iter().map(|p| p.id.as_str()).collect();
    let in_b_not_answered: BTreeSet<&str> = b.unanswerable.iter().map(String::as_str).collect();
    let in_a_not_answered: BTreeSet<&str> = a.unanswerable.iter().map(String::as_str).collect();
    let only_a = a
        .predictions
        .iter()
        .filter(|p| {
            !b_by_id.contains_key(p.id.as_str()) && !in_b_not_answered.contains(p.id.as_str())
        })
        .map(|p| p.id.clone())
        .collect();
    let only_b = b
        .predictions
        .iter()
        .filter(|p| !a_ids.contains(p.id.as_str()) && !in_a_not_answered.contains(p.id.as_str()))
        .map(|p| p.id.clone())
        .collect();

    #[derive(Default, Clone, Copy)]
    struct Counts([usize; 4]);
    let mut overall = Counts::default();
    let mut per_task: BTreeMap<String, Counts> = BTreeMap::new();
    let mut table = [[0usize; 5]; 5];
    let index = |p: Option<Letter>| p.map_or(4, Letter::index);
    let (mut shared, mut unlabelled, mut agree) = (0, 0, 0);
    let mut failed = (0, 0);
    let mut disagreements = Vec::new();
    for pa in &a.predictions {
        let Some(pb) = b_by_id.get(pa.id.as_str()) else {
            continue;
        };
        shared += 1;
        table[index(pa.predicted)][index(pb.predicted)] += 1;
        failed.0 += usize::from(pa.predicted.is_none());
        failed.1 += usize::from(pb.predicted.is_none());
        if pa.predicted == pb.predicted {
            agree += 1;
        } else {
            disagreements.push(Disagreement {
                id: pa.id.clone(),
                task: pa.task.clone(),
                correct: pa.correct,
                a: pa.predicted,
                b: pb.predicted,
            });
        }
        let Some(truth) = pa.correct else {
            unlabelled += 1;
            continue;
        };
        let cell = match (pa.predicted == Some(truth), pb.predicted == Some(truth)) {
            (true, true) => 0,
            (true, false) => 1,
            (false, true) => 2,
            (false, false) => 3,
        };
        overall.0[cell] += 1;
        per_task.entry(pa.task.clone()).or_default().0[cell] += 1;
    }
    if shared == 0 {
        return Err(CompareError::Disjoint {
            a: a.name.clone(),
            b: b.name.clone(),
        });
    }
    let paired = |c: &Counts| Paired::from_counts(c.0[0], c.0[1], c.0[2], c.0[3]);
    Ok(Comparison {
        a: a.name.clone(),
        b: b.name.clone(),
        shared,
        only_a,
        only_b,
        unanswerable_a: a.unanswerable.clone(),
        unanswerable_b: b.unanswerable.clone(),
        unlabelled,
        failed,
        overall: paired(&overall),
        per_task: per_task
            .iter()
            .map(|(k, c)| (k.clone(), paired(c)))
            .collect(),
        agreement: agree as f64 / shared as f64,
        kappa: kappa_from_table(&table, shared),
        disagreements,
    })
}

fn pct(x: f64) -> String {
    format!("{:.2}", 100.0 * x)
}

/// An answer as the tables write it: the letter, or "failed" for a failed extraction.
pub fn answer_text(l: Option<Letter>) -> String {
    l.map_or_else(|| "failed".to_string(), |l| l.to_string())
}

fn p_value(p: f64) -> String {
    if p < 1e-4 {
        format!("{p:.1e}")
    } else {
        format!("{p:.4}")
    }
}

impl Comparison {
    /// The comparison as Markdown: the counts, the overall and per-task tables, agreement and
    /// κ, and the questions answered differently.
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "# {} vs {}\n\n- questions in both: {}; only in A: {}; only in B: {}; unanswerable in A: {}, in B: {}\n\
             - without ground truth (agreement only): {}; failed extractions: A {}, B {}\n\
             - agreement: {} %; Cohen's κ: {}\n\n",
            self.a,
            self.b,
            self.shared,
            self.only_a.len(),
            self.only_b.len(),
            self.unanswerable_a.len(),
            self.unanswerable_b.len(),
            self.unlabelled,
            self.failed.0,
            self.failed.1,
            pct(self.agreement),
            self.kappa.map_or("n/a".into(), |k| format!("{k:.4}")),
        );
        s.push_str(
            "| group | n | A % | B % | B − A (pp) | 95 % CI (pp) | right in A only | right in B only | McNemar p (exact) |\n",
        );
        s.push_str("|---|---:|---:|---:|---:|---|---:|---:|---:|\n");
        for (name, p) in self.rows() {
            s.push_str(&format!("| {name} | {} |\n", p.cells().join(" | ")));
        }
        if !self.disagreements.is_empty() {
            s.push_str(&format!(
                "\n## Answered differently ({})\n\n| id | task | truth | A | B |\n|---|---|---|---|---|\n",
                self.disagreements.len()
            ));
            for d in &self.disagreements {
                s.push_str(&format!(
                    "| {} | {} | {} | {} | {} |\n",
                    d.id,
                    d.task,
                    d.correct.map_or(String::new(), |l| l.to_string()),
                    answer_text(d.a),
                    answer_text(d.b)
                ));
            }
        }
        for (title, ids) in [("Only in A", &self.only_a), ("Only in B", &self.only_b)] {
            if !ids.is_empty() {
                s.push_str(&format!(
                    "\n## {title} ({})\n\n{}\n",
                    ids.len(),
                    ids.join(", ")
                ));
            }
        }
        s
    }

    /// The downloads, named `comparison.<ext>`: Markdown, CSV and JSON, in that order. Written
    /// where the comparison is computed (the CLI, the app's worker), never from a copy that
    /// crossed JSON, whose float parsing may move a last bit: both give the same bytes.
    pub fn exports(&self) -> [ExportFile; 3] {
        let file = |ext: &str, mime: &str, text: String| ExportFile {
            name: format!("comparison.{ext}"),
            mime: mime.to_string(),
            text,
        };
        [
            file("md", "text/markdown", self.markdown()),
            file("csv", "text/csv", self.csv()),
            // Plain numbers, strings and lists: serialising cannot fail.
            file(
                "json",
                "application/json",
                serde_json::to_string_pretty(self).unwrap_or_default(),
            ),
        ]
    }

    /// One CSV row per group (overall first, then each task).
    pub fn csv(&self) -> String {
        let mut s = String::from(
            "group,n,both,a_only,b_only,accuracy_a,accuracy_b,difference,ci_low,ci_high,mcnemar_p\n",
        );
        for (name, p) in self.rows() {
            s.push_str(&format!(
                "\"{}\",{},{},{},{},{},{},{},{},{},{}\n",
                name.replace('"', "\"\""),
                p.n,
                p.both,
                p.a_only,
                p.b_only,
                p.accuracy_a,
                p.accuracy_b,
                p.difference,
                p.ci_low,
                p.ci_high,
                p.mcnemar_p
            ));
        }
        s
    }

    /// Overall, then each task.
    pub fn rows(&self) -> impl Iterator<Item = (&str, &Paired)> {
        std::iter::once(("overall", &self.overall))
            .chain(self.per_task.iter().map(|(k, p)| (k.as_str(), p)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcnemar_matches_the_binomial_tail() {
        // No discordant pairs: nothing to test.
        assert_eq!(mcnemar_exact(0, 0), 1.0);
        // 1 vs 9 of 10: 2·(1 + 10)/1024.
        assert!((mcnemar_exact(1, 9) - 22.0 / 1024.0).abs() < 1e-15);
        assert_eq!(mcnemar_exact(9, 1), mcnemar_exact(1, 9));
        // Equal counts: the tail passes ½, capped at 1.
        assert_eq!(mcnemar_exact(5, 5), 1.0);
        // Large and lopsided: tiny but finite, not 0 or NaN.
        let p = mcnemar_exact(19_000, 21_000);
        assert!(p > 0.0 && p < 1e-20, "{p}");
    }

    #[test]
    fn the_interval_keeps_a_width_when_runs_agree() {
        // Identical runs at 50 %: difference 0 with a real interval around it (Newcombe's
        // method 10 gave 0 to 0 here), narrowing as n grows.
        let small = Paired::from_counts(1, 0, 0, 1);
        assert!(small.ci_low < -0.3 && small.ci_high > 0.3, "{small:?}");
        let (lo, hi) = agresti_min(250, 0, 0, 250);
        assert!(lo < 0.0 && hi > 0.0 && hi < 0.005, "{lo} {hi}");
        // B better by 10 of 100 with no loss: the interval sits above 0.
        let p = Paired::from_counts(50, 0, 10, 40);
        assert!((p.difference - 0.1).abs() < 1e-12);
        assert!(p.ci_low > 0.0 && p.ci_high > p.difference && p.mcnemar_p < 0.01);
    }
}
