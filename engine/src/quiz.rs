//! Teaching and reader-study mode: seeded quizzes drawn from a split, a student's answers,
//! their scoring against the truth and the model (accuracy with Wilson intervals, Cohen's κ,
//! a confusion matrix of letters), and several students' results merged into a reader-study
//! table like the paper's.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::rexvqa::{Letter, Split};
use crate::rng::SplitMix64;
use crate::score::{self, Cell, Prediction, Report};

pub mod export;
pub mod taking;

pub use export::QuizExport;
pub use taking::{Key, QuizTaking, SavedQuiz, Step};

/// The format tag of quiz and result files.
pub const FORMAT: &str = "rexvqa-quiz/1";

/// When the student sees the model's answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShowModel {
    /// After each answer, with the truth.
    #[default]
    AfterEach,
    /// Only on the results page.
    AtEnd,
}

/// What a quiz is drawn from and how it is taken.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuizSettings {
    /// Split name (`test`, `valid`), to check a quiz file opens against the right split.
    pub split: String,
    /// Number of cases.
    pub count: usize,
    /// Task names to include (empty: all).
    #[serde(default)]
    pub tasks: Vec<String>,
    /// Categories to include (empty: all).
    #[serde(default)]
    pub categories: Vec<String>,
    /// Seed of the draw: the same seed gives the same quiz on every machine.
    pub seed: u64,
    /// Seconds allowed per question (none: unlimited).
    #[serde(default)]
    pub time_limit_s: Option<u32>,
    /// When the model's answer is shown.
    #[serde(default)]
    pub show_model: ShowModel,
}

/// A quiz: its settings and the drawn question ids (no images), small enough to share.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quiz {
    /// Always [`FORMAT`].
    pub format: String,
    /// How it was drawn.
    pub settings: QuizSettings,
    /// Question ids in the order they are asked.
    pub ids: Vec<String>,
}

/// One answered case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseAnswer {
    /// Question id.
    pub id: String,
    /// The student's letter (none: skipped or out of time).
    pub student: Option<Letter>,
    /// Milliseconds the student took.
    pub ms: u64,
    /// The model's letter, when it was asked.
    #[serde(default)]
    pub model: Option<Letter>,
    /// The model's option probabilities (A–D), when it was asked.
    #[serde(default)]
    pub model_probs: Option<Vec<f32>>,
}

/// One student's results file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuizResults {
    /// Always [`FORMAT`].
    pub format: String,
    /// Reader name as typed by the student.
    pub reader: String,
    /// The quiz taken.
    pub quiz: Quiz,
    /// Answers in quiz order (possibly fewer than the quiz while in progress).
    pub answers: Vec<CaseAnswer>,
}

/// A quiz that cannot be made, opened or scored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuizError {
    /// Nothing matches the filters.
    #[error("no question with a known answer matches the chosen tasks and categories")]
    Empty,
    /// A zero-case quiz.
    #[error("a quiz needs at least one case")]
    ZeroCount,
    /// A quiz file from something else.
    #[error("not a ReXVQA quiz file (format {found:?}, expected {FORMAT:?})")]
    Format {
        /// The format field found.
        found: String,
    },
    /// A quiz or result file naming questions the opened split lacks.
    #[error(
        "{missing} of the quiz's {total} questions are not in this split (first: {first}); open the split the quiz was made from ({split})"
    )]
    Missing {
        /// How many are missing.
        missing: usize,
        /// Quiz size.
        total: usize,
        /// The first missing id.
        first: String,
        /// The split named in the quiz.
        split: String,
    },
    /// Result files that do not parse.
    #[error("{name}: {reason}")]
    BadFile {
        /// File name.
        name: String,
        /// Why.
        reason: String,
    },
}

/// Draws a quiz: questions with ground truth matching the filters, in the split's evaluation
/// order (independent of file order), shuffled with the seed; the first `count` (all of them
/// when fewer match).
pub fn make_quiz(split: &Split, settings: &QuizSettings) -> Result<Quiz, QuizError> {
    if settings.count == 0 {
        return Err(QuizError::ZeroCount);
    }
    let wanted = |list: &[String], v: &str| list.is_empty() || list.iter().any(|x| x == v);
    let mut pool: Vec<usize> = split
        .eval_order()
        .into_iter()
        .filter(|&i| {
            let r = &split.records[i];
            r.correct.is_some()
                && wanted(&settings.tasks, r.task.name())
                && wanted(&settings.categories, &r.category)
        })
        .collect();
    if pool.is_empty() {
        return Err(QuizError::Empty);
    }
    SplitMix64::new(settings.seed).shuffle(&mut pool);
    pool.truncate(settings.count);
    Ok(Quiz {
        format: FORMAT.into(),
        settings: settings.clone(),
        ids: pool.iter().map(|&i| split.records[i].id.clone()).collect(),
    })
}

impl Quiz {
    /// Parses a quiz file and checks every question exists in `split`.
    pub fn open(json: &str, split: &Split) -> Result<Quiz, QuizError> {
        let q: Quiz = serde_json::from_str(json).map_err(|e| QuizError::BadFile {
            name: "quiz".into(),
            reason: e.to_string(),
        })?;
        if q.format != FORMAT {
            return Err(QuizError::Format { found: q.format });
        }
        q.check(split)?;
        Ok(q)
    }

    /// Every question of the quiz exists in `split`.
    pub fn check(&self, split: &Split) -> Result<(), QuizError> {
        let missing: Vec<&String> = self
            .ids
            .iter()
            .filter(|id| split.get(id).is_none())
            .collect();
        match missing.first() {
            None => Ok(()),
            Some(first) => Err(QuizError::Missing {
                missing: missing.len(),
                total: self.ids.len(),
                first: (*first).clone(),
                split: self.settings.split.clone(),
            }),
        }
    }
}

/// A student's results scored against the truth and the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuizReport {
    /// Reader name.
    pub reader: String,
    /// Cases answered (skips included).
    pub answered: usize,
    /// The student's accuracy tables (a skip counts as wrong, like a failed extraction).
    pub student: Report,
    /// The model's tables on the same cases, over the cases it was asked.
    pub model: Option<Report>,
    /// κ between the student's and the model's letters (cases with both).
    pub kappa_student_model: Option<f64>,
    /// κ between the student's letters and the truth.
    pub kappa_student_truth: Option<f64>,
    /// Rows: truth A–D; columns: student A–D, then skipped.
    pub confusion: [[usize; 5]; 4],
    /// Cases where the student and the model chose different letters.
    pub disagreements: Vec<String>,
    /// Mean seconds per case.
    pub mean_s: f64,
}

fn predictions(
    split: &Split,
    answers: &[CaseAnswer],
    pick: impl Fn(&CaseAnswer) -> Option<Option<Letter>>,
) -> Vec<Prediction> {
    answers
        .iter()
        .filter_map(|a| Some(Prediction::new(split.get(&a.id)?, pick(a)?)))
        .collect()
}

/// Scores one student's results.
pub fn report(split: &Split, results: &QuizResults) -> Result<QuizReport, QuizError> {
    results.quiz.check(split)?;
    let answers = &results.answers;
    let student = predictions(split, answers, |a| Some(a.student));
    let model = predictions(split, answers, |a| a.model.map(Some));
    let truth: Vec<Prediction> = student
        .iter()
        .map(|p| Prediction {
            predicted: p.correct,
            ..p.clone()
        })
        .collect();
    let mut confusion = [[0usize; 5]; 4];
    for p in &student {
        if let Some(t) = p.correct {
            confusion[t.index()][p.predicted.map_or(4, Letter::index)] += 1;
        }
    }
    let disagreements = answers
        .iter()
        .filter(|a| a.model.is_some() && a.model != a.student)
        .map(|a| a.id.clone())
        .collect();
    let both: Vec<Prediction> = student
        .iter()
        .filter(|p| model.iter().any(|m| m.id == p.id))
        .cloned()
        .collect();
    Ok(QuizReport {
        reader: results.reader.clone(),
        answered: answers.len(),
        student: score::report(&student),
        model: (!model.is_empty()).then(|| score::report(&model)),
        kappa_student_model: score::cohen_kappa(&both, &model),
        kappa_student_truth: score::cohen_kappa(&student, &truth),
        confusion,
        disagreements,
        mean_s: if answers.is_empty() {
            0.0
        } else {
            answers.iter().map(|a| a.ms as f64).sum::<f64>() / answers.len() as f64 / 1000.0
        },
    })
}

fn letter(l: Option<Letter>) -> String {
    l.map_or_else(|| "-".into(), |l| l.to_string())
}

/// One row per case: id, task, category, truth, student, model, seconds, model probabilities.
pub fn csv(split: &Split, results: &QuizResults) -> String {
    let mut out =
        String::from("id,task,category,truth,student,correct,model,seconds,p_a,p_b,p_c,p_d\n");
    for a in &results.answers {
        let Some(r) = split.get(&a.id) else { continue };
        let probs = a.model_probs.as_deref().unwrap_or(&[]);
        let p = |i: usize| probs.get(i).map_or(String::new(), |v| format!("{v:.4}"));
        out += &format!(
            "{},{},{},{},{},{},{},{:.1},{},{},{},{}\n",
            a.id,
            csv_field(r.task.name()),
            csv_field(&r.category),
            letter(r.correct),
            letter(a.student),
            u8::from(a.student.is_some() && a.student == r.correct),
            letter(a.model),
            a.ms as f64 / 1000.0,
            p(0),
            p(1),
            p(2),
            p(3)
        );
    }
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn pct(c: &Cell) -> String {
    format!(
        "{:.1}% ({}/{}, 95% CI {:.1}–{:.1})",
        100.0 * c.accuracy,
        c.correct,
        c.n,
        100.0 * c.ci_low,
        100.0 * c.ci_high
    )
}

fn kappa(k: Option<f64>) -> String {
    k.map_or_else(|| "n/a".into(), |k| format!("{k:.3}"))
}

/// A Markdown report of one student's results.
pub fn markdown(r: &QuizReport, results: &QuizResults) -> String {
    let s = &results.quiz.settings;
    let mut out = format!(
        "# Quiz results: {}\n\nSplit `{}`, {} cases (seed {}), {} answered, mean {:.1} s per case.\n\n",
        r.reader,
        s.split,
        results.quiz.ids.len(),
        s.seed,
        r.answered,
        r.mean_s
    );
    out += "| | student | model |\n|---|---|---|\n";
    let model_cell = |f: &dyn Fn(&Report) -> Option<Cell>| {
        r.model
            .as_ref()
            .and_then(f)
            .map_or_else(|| "—".into(), |c| pct(&c))
    };
    out += &format!(
        "| overall | {} | {} |\n",
        pct(&r.student.overall),
        model_cell(&|m| Some(m.overall))
    );
    for (task, c) in &r.student.per_task {
        out += &format!(
            "| {task} | {} | {} |\n",
            pct(c),
            model_cell(&|m| m.per_task.get(task).copied())
        );
    }
    for (cat, c) in &r.student.per_category {
        out += &format!(
            "| {cat} | {} | {} |\n",
            pct(c),
            model_cell(&|m| m.per_category.get(cat).copied())
        );
    }
    out += &format!(
        "\nCohen's κ student↔model {}, student↔truth {}.\n\n",
        kappa(r.kappa_student_model),
        kappa(r.kappa_student_truth)
    );
    out += "Confusion (rows: truth; columns: student)\n\n| | A | B | C | D | skipped |\n|---|---|---|---|---|---|\n";
    for (i, row) in r.confusion.iter().enumerate() {
        out += &format!(
            "| {} | {} |\n",
            Letter::ALL[i],
            row.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
    if !r.disagreements.is_empty() {
        out += &format!(
            "\nStudent and model disagreed on: {}\n",
            r.disagreements.join(", ")
        );
    }
    out
}

/// Several readers on (overlapping) quizzes: per-reader accuracy and pairwise κ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReaderStudy {
    /// Per reader (the model last, as "model", when any reader asked it).
    pub readers: Vec<(String, Cell)>,
    /// (reader a, reader b, shared cases, κ).
    pub pairwise: Vec<(String, String, usize, Option<f64>)>,
}

/// Merges result files (`(file name, json)`) into a reader-study table.
pub fn reader_study(split: &Split, files: &[(String, String)]) -> Result<ReaderStudy, QuizError> {
    let mut sets: Vec<(String, Vec<Prediction>)> = Vec::new();
    let mut model: BTreeMap<String, Prediction> = BTreeMap::new();
    let mut names = BTreeSet::new();
    for (name, json) in files {
        let bad = |reason: String| QuizError::BadFile {
            name: name.clone(),
            reason,
        };
        let r: QuizResults = serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
        if r.format != FORMAT {
            return Err(QuizError::Format { found: r.format });
        }
        r.quiz.check(split)?;
        let mut reader = if r.reader.trim().is_empty() {
            name.clone()
        } else {
            r.reader.clone()
        };
        // Two files from readers with the same name stay two rows.
        while !names.insert(reader.clone()) {
            reader.push('′');
        }
        for p in predictions(split, &r.answers, |a| a.model.map(Some)) {
            model.entry(p.id.clone()).or_insert(p);
        }
        sets.push((reader, predictions(split, &r.answers, |a| Some(a.student))));
    }
    if !model.is_empty() {
        sets.push(("model".into(), model.into_values().collect()));
    }
    let readers = sets
        .iter()
        .map(|(n, p)| (n.clone(), score::report(p).overall))
        .collect();
    let mut pairwise = Vec::new();
    for (i, (a, pa)) in sets.iter().enumerate() {
        for (b, pb) in &sets[i + 1..] {
            let shared = pa
                .iter()
                .filter(|p| pb.iter().any(|q| q.id == p.id))
                .count();
            pairwise.push((a.clone(), b.clone(), shared, score::cohen_kappa(pa, pb)));
        }
    }
    Ok(ReaderStudy { readers, pairwise })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rexvqa::synth::{SynthOptions, generate};

    fn split() -> Split {
        let opts = SynthOptions {
            studies: 12,
            questions_per_study: 4,
            seed: 5,
            size_range: (8, 8),
            ..Default::default()
        };
        let mut json = String::new();
        generate(&opts, |f| {
            if f.path.ends_with(".json") {
                json = String::from_utf8(f.bytes).unwrap();
            }
        });
        Split::from_json(&json).unwrap()
    }

    fn settings(seed: u64) -> QuizSettings {
        QuizSettings {
            split: "test".into(),
            count: 10,
            seed,
            ..Default::default()
        }
    }

    #[test]
    fn same_seed_same_quiz_and_filters_hold() {
        let s = split();
        let a = make_quiz(&s, &settings(7)).unwrap();
        assert_eq!(a, make_quiz(&s, &settings(7)).unwrap());
        assert_ne!(a.ids, make_quiz(&s, &settings(8)).unwrap().ids);
        assert_eq!(a.ids.len(), 10);
        assert_eq!(a.ids.iter().collect::<BTreeSet<_>>().len(), 10);
        // File order does not matter: reversing the records gives the same quiz.
        let mut records = s.records.clone();
        records.reverse();
        let reversed = Split::from_records(records, vec![]);
        assert_eq!(make_quiz(&reversed, &settings(7)).unwrap().ids, a.ids);
        let task = s.records[0].task.name().to_string();
        let only = make_quiz(
            &s,
            &QuizSettings {
                tasks: vec![task.clone()],
                count: 1000,
                ..settings(1)
            },
        )
        .unwrap();
        assert!(
            only.ids
                .iter()
                .all(|id| s.get(id).unwrap().task.name() == task)
        );
        assert_eq!(
            only.ids.len(),
            s.records.iter().filter(|r| r.task.name() == task).count()
        );
        let none = QuizSettings {
            categories: vec!["no such category".into()],
            ..settings(1)
        };
        assert_eq!(make_quiz(&s, &none), Err(QuizError::Empty));
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(Quiz::open(&json, &s).unwrap(), a);
        let other = Split::from_records(s.records[..3].to_vec(), vec![]);
        assert!(matches!(
            Quiz::open(&json, &other),
            Err(QuizError::Missing { .. })
        ));
    }

    #[test]
    fn report_counts_confusion_kappa_and_disagreements() {
        let s = split();
        let quiz = make_quiz(&s, &settings(3)).unwrap();
        let truth = |id: &str| s.get(id).unwrap().correct.unwrap();
        let other = |l: Letter| Letter::ALL[(l.index() + 1) % 4];
        // Student: right on even cases, wrong on odd, skips the last; model always right.
        let answers: Vec<CaseAnswer> = quiz
            .ids
            .iter()
            .enumerate()
            .map(|(i, id)| CaseAnswer {
                id: id.clone(),
                student: match i {
                    9 => None,
                    i if i % 2 == 0 => Some(truth(id)),
                    _ => Some(other(truth(id))),
                },
                ms: 1000 * (i as u64 + 1),
                model: Some(truth(id)),
                model_probs: None,
            })
            .collect();
        let results = QuizResults {
            format: FORMAT.into(),
            reader: "ana".into(),
            quiz,
            answers,
        };
        let r = report(&s, &results).unwrap();
        assert_eq!((r.student.overall.correct, r.student.overall.n), (5, 10));
        assert_eq!(r.model.as_ref().unwrap().overall.correct, 10);
        assert_eq!(r.confusion.iter().flatten().sum::<usize>(), 10);
        assert_eq!(r.confusion.iter().map(|row| row[4]).sum::<usize>(), 1);
        assert_eq!((0..4).map(|i| r.confusion[i][i]).sum::<usize>(), 5);
        assert_eq!(r.disagreements.len(), 5);
        assert_eq!(r.kappa_student_model, r.kappa_student_truth);
        assert!((r.mean_s - 5.5).abs() < 1e-12);
        let csv = csv(&s, &results);
        assert_eq!(csv.lines().count(), 11);
        assert!(markdown(&r, &results).contains("| overall | 50.0% (5/10"));

        let json = serde_json::to_string(&results).unwrap();
        let mut perfect = results.clone();
        perfect.reader = "ben".into();
        for a in &mut perfect.answers {
            a.student = a.model;
        }
        let study = reader_study(
            &s,
            &[
                ("a.json".into(), json),
                ("b.json".into(), serde_json::to_string(&perfect).unwrap()),
            ],
        )
        .unwrap();
        let names: Vec<&str> = study.readers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["ana", "ben", "model"]);
        assert_eq!(study.readers[1].1.correct, 10);
        assert_eq!(study.pairwise.len(), 3);
        let ben_model = study.pairwise.iter().find(|p| p.0 == "ben").unwrap();
        assert_eq!((ben_model.2, ben_model.3), (10, Some(1.0)));
    }
}
