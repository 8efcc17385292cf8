//! Shards of one run merged back into the run: the answers an unsharded `rexvqa eval` would have
//! journaled, from each shard's predictions file, its report (for the settings) and, where it is
//! kept, its journal (for the probabilities and timings the predictions file does not carry).

use std::collections::HashMap;

use super::{Answer, EvalReport, Settings, read_journal};
use crate::rexvqa::{Letter, Split};
use crate::score::{self, Extraction, MergeError, STOPPED_AT_LETTER_KEY, UNANSWERABLE_KEY};
use crate::session::Mode;

/// One shard's files, as text.
#[derive(Debug, Clone, Default)]
pub struct ShardFiles {
    /// The predictions file's name (for messages).
    pub name: String,
    /// The leaderboard predictions JSON.
    pub predictions: String,
    /// The shard's `report.json`: its settings.
    pub report: String,
    /// The shard's journal (one answer per line), where kept.
    pub journal: Option<String>,
}

/// Why shards cannot be merged into a run.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MergeRunError {
    /// Overlapping or unreadable predictions files.
    #[error(transparent)]
    Shards(#[from] MergeError),
    /// Questions of the split that no shard answered.
    #[error(
        "{count} questions of the split are in no shard file (e.g. {example}): a shard is missing or unfinished; merge refused"
    )]
    Missing {
        /// How many.
        count: usize,
        /// One of them.
        example: String,
    },
    /// Answers to questions the split does not have.
    #[error(
        "{count} questions in the shard files are not in the split (e.g. {example} in {file}): shards of another split; merge refused"
    )]
    Foreign {
        /// How many.
        count: usize,
        /// One of them.
        example: String,
        /// A file holding it.
        file: String,
    },
    /// A report that cannot be read.
    #[error("{file}: not a run report ({reason})")]
    BadReport {
        /// File name.
        file: String,
        /// What is wrong.
        reason: String,
    },
    /// Shards asked with different settings.
    #[error(
        "{file} was run with other settings than {first} ({what}): shards of different runs; merge refused"
    )]
    Settings {
        /// The first shard's name.
        first: String,
        /// The shard that differs.
        file: String,
        /// The settings that differ.
        what: String,
    },
    /// A journal that does not belong to its predictions file.
    #[error(
        "{file}: its journal answers {id} with {journal:?}, its predictions with {file_says:?}"
    )]
    Journal {
        /// Predictions file name.
        file: String,
        /// The question.
        id: String,
        /// The journal's letter.
        journal: Option<Letter>,
        /// The predictions file's letter.
        file_says: Option<Letter>,
    },
}

/// The merged run.
#[derive(Debug, Clone, PartialEq)]
pub struct MergedRun {
    /// The shards' common settings.
    pub settings: Settings,
    /// Every question's answer, in evaluation order.
    pub answers: Vec<Answer>,
    /// Answers rebuilt from a predictions file alone (no journal): no probabilities, no timing.
    pub without_journal: usize,
}

/// Merges shard runs into the run over the whole split. Refuses overlaps, gaps, foreign
/// questions, differing settings and journals that contradict their predictions.
pub fn merge_runs(split: &Split, shards: &[ShardFiles]) -> Result<MergedRun, MergeRunError> {
    let texts: Vec<(String, String)> = shards
        .iter()
        .map(|s| (s.name.clone(), s.predictions.clone()))
        .collect();
    let merged = score::merge_shards(split, &texts)?;
    if let Some(example) = merged.unknown.first() {
        let file = shards
            .iter()
            .find(|s| {
                serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&s.predictions)
                    .is_ok_and(|rows| rows.contains_key(example))
            })
            .map_or_else(String::new, |s| s.name.clone());
        return Err(MergeRunError::Foreign {
            count: merged.unknown.len(),
            example: example.clone(),
            file,
        });
    }
    if let Some(example) = merged.missing.first() {
        return Err(MergeRunError::Missing {
            count: merged.missing.len(),
            example: example.clone(),
        });
    }
    let settings = common_settings(shards)?;
    let mut by_id: HashMap<String, Answer> = HashMap::new();
    let mut without_journal = 0;
    for s in shards {
        let journal: HashMap<String, Answer> = s
            .journal
            .as_deref()
            .map(read_journal)
            .unwrap_or_default()
            .into_iter()
            .map(|a| (a.id.clone(), a))
            .collect();
        let rows: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&s.predictions)
            .map_err(|e| MergeError::BadFile {
                file: s.name.clone(),
                reason: e.to_string(),
            })?;
        for (id, row) in rows {
            let rebuilt = from_row(&id, &row, &settings);
            let answer = match journal.get(&id) {
                Some(a) if a.prediction != rebuilt.prediction => {
                    return Err(MergeRunError::Journal {
                        file: s.name.clone(),
                        id,
                        journal: a.prediction,
                        file_says: rebuilt.prediction,
                    });
                }
                Some(a) => a.clone(),
                None => {
                    without_journal += 1;
                    rebuilt
                }
            };
            by_id.insert(id, answer);
        }
    }
    let answers = split
        .eval_order()
        .into_iter()
        .filter_map(|i| by_id.remove(&split.records[i].id))
        .collect();
    Ok(MergedRun {
        settings,
        answers,
        without_journal,
    })
}

/// The settings every shard's report names; an error names the first that differs.
fn common_settings(shards: &[ShardFiles]) -> Result<Settings, MergeRunError> {
    let mut first: Option<(&str, Settings)> = None;
    for s in shards {
        let report: EvalReport =
            serde_json::from_str(&s.report).map_err(|e| MergeRunError::BadReport {
                file: s.name.clone(),
                reason: e.to_string(),
            })?;
        match &first {
            None => first = Some((&s.name, report.settings)),
            Some((name, settings)) if *settings != report.settings => {
                return Err(MergeRunError::Settings {
                    first: name.to_string(),
                    file: s.name.clone(),
                    what: format!("{} against {}", json(&report.settings), json(settings)),
                });
            }
            Some(_) => {}
        }
    }
    first.map(|(_, s)| s).ok_or_else(|| {
        MergeRunError::Shards(MergeError::BadFile {
            file: "(none)".into(),
            reason: "no shard files given".into(),
        })
    })
}

fn json(s: &Settings) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// An answer read back from a predictions row: the letter, the reply, the marks; the robust
/// letter re-read from a full official reply (fast mode's is the letter itself).
fn from_row(id: &str, row: &serde_json::Value, settings: &Settings) -> Answer {
    let text = |k: &str| row.get(k).and_then(|v| v.as_str()).unwrap_or_default();
    let prediction = text("model_prediction")
        .chars()
        .next()
        .and_then(Letter::from_char);
    let response = text("model_response").to_string();
    let stopped_at_letter = row.get(STOPPED_AT_LETTER_KEY).and_then(|v| v.as_bool()) == Some(true);
    let unanswerable = row
        .get(UNANSWERABLE_KEY)
        .map(|v| v.as_str().unwrap_or_default().to_string());
    let robust = match settings.mode {
        _ if unanswerable.is_some() => None,
        Mode::Fast => prediction,
        Mode::Official if stopped_at_letter => None,
        Mode::Official => score::extract(&response, Extraction::Robust),
    };
    Answer {
        id: id.to_string(),
        prediction,
        robust,
        response,
        stopped_at_letter,
        unanswerable,
        ..Answer::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::{journal_lines, leaderboard, report};

    const SPLIT: &str = r#"{
     "q1": {"question": "?", "options": ["A. a", "B. b"], "correct_answer": "A",
            "task_name": "Presence Assessment", "study_id": "s1"},
     "q2": {"question": "?", "options": ["A. a", "B. b"], "correct_answer": "B",
            "task_name": "Presence Assessment", "study_id": "s1"},
     "q3": {"question": "?", "options": ["A. a", "B. b"], "correct_answer": "A",
            "task_name": "Location Assessment", "study_id": "s2"},
     "q4": {"question": "?", "options": ["A. a", "B. b"], "correct_answer": "B",
            "task_name": "Location Assessment", "study_id": "s3"}
    }"#;

    fn official() -> Settings {
        Settings {
            mode: Mode::Official,
            stop_at_letter: true,
            ..Settings::default()
        }
    }

    /// Official answers: q1 stopped at its letter, q2 a full reply whose robust letter differs,
    /// q3 no letter, q4 unanswerable.
    fn answers() -> Vec<Answer> {
        let a = |id: &str, response: &str, stopped: bool| Answer {
            id: id.into(),
            prediction: score::extract(response, Extraction::Official),
            robust: (!stopped)
                .then(|| score::extract(response, Extraction::Robust))
                .flatten(),
            response: response.into(),
            stopped_at_letter: stopped,
            tokens: 3,
            ms: 12.5,
            ..Answer::default()
        };
        vec![
            a("q1", "A", true),
            a("q2", "ANSWER: B", false),
            a("q3", "xyz 123", false),
            Answer {
                id: "q4".into(),
                unanswerable: Some("the record lists no image".into()),
                ..Answer::default()
            },
        ]
    }

    /// The files of a shard holding `ids` of a run with `settings`.
    fn shard(name: &str, ids: &[&str], settings: &Settings, journal: bool) -> ShardFiles {
        let split = Split::from_json(SPLIT).unwrap();
        let part: Vec<Answer> = answers()
            .into_iter()
            .filter(|a| ids.contains(&a.id.as_str()))
            .collect();
        ShardFiles {
            name: name.into(),
            predictions: serde_json::to_string(&leaderboard(&split, &part)).unwrap(),
            report: serde_json::to_string(&report(&split, &part, settings, part.len())).unwrap(),
            journal: journal.then(|| journal_lines(&part)),
        }
    }

    #[test]
    fn shards_merge_into_the_unsharded_run() {
        let split = Split::from_json(SPLIT).unwrap();
        let s = official();
        let whole = report(&split, &answers(), &s, 4);
        for journals in [true, false] {
            let m = merge_runs(
                &split,
                &[
                    shard("b", &["q3", "q4"], &s, journals),
                    shard("a", &["q1", "q2"], &s, journals),
                ],
            )
            .unwrap();
            assert_eq!(m.settings, s);
            assert_eq!(m.without_journal, if journals { 0 } else { 4 });
            let ids: Vec<&str> = m.answers.iter().map(|a| a.id.as_str()).collect();
            assert_eq!(ids, ["q1", "q2", "q3", "q4"], "evaluation order");
            assert_eq!(
                leaderboard(&split, &m.answers),
                leaderboard(&split, &answers())
            );
            // Without journals the timings are lost, and with them only the mean time.
            let r = report(&split, &m.answers, &m.settings, 4);
            assert_eq!((&r.official, &r.robust), (&whole.official, &whole.robust));
            assert_eq!(r.stopped_at_letter, 1);
            assert_eq!(r.unanswerable, whole.unanswerable);
            if journals {
                assert_eq!(m.answers, answers());
            }
        }
    }

    #[test]
    fn overlaps_gaps_foreign_questions_and_other_settings_are_refused() {
        let split = Split::from_json(SPLIT).unwrap();
        let s = official();
        let e = merge_runs(
            &split,
            &[
                shard("a", &["q1", "q2", "q3"], &s, true),
                shard("b", &["q3", "q4"], &s, true),
            ],
        )
        .unwrap_err();
        assert!(
            matches!(&e, MergeRunError::Shards(MergeError::Overlap { count: 1, example, .. }) if example == "q3"),
            "{e}"
        );
        let e = merge_runs(&split, &[shard("a", &["q1", "q2"], &s, true)]).unwrap_err();
        assert_eq!(
            e,
            MergeRunError::Missing {
                count: 2,
                example: "q3".into()
            }
        );
        assert!(
            e.to_string()
                .contains("2 questions of the split are in no shard file")
        );
        let mut foreign = shard("c", &["q3", "q4"], &s, true);
        let mut rows: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&foreign.predictions).unwrap();
        rows.insert("q99".into(), rows["q3"].clone());
        foreign.predictions = serde_json::to_string(&rows).unwrap();
        let e = merge_runs(&split, &[shard("a", &["q1", "q2"], &s, true), foreign]).unwrap_err();
        assert_eq!(
            e,
            MergeRunError::Foreign {
                count: 1,
                example: "q99".into(),
                file: "c".into()
            }
        );
        let e = merge_runs(
            &split,
            &[
                shard("a", &["q1", "q2"], &s, true),
                shard("b", &["q3", "q4"], &Settings::default(), true),
            ],
        )
        .unwrap_err();
        assert!(
            matches!(&e, MergeRunError::Settings { first, file, .. } if first == "a" && file == "b"),
            "{e}"
        );
    }

    #[test]
    fn a_journal_that_contradicts_its_predictions_is_refused() {
        let split = Split::from_json(SPLIT).unwrap();
        let s = official();
        let mut b = shard("b", &["q3", "q4"], &s, true);
        let mut wrong = answers();
        wrong[2].prediction = Some(Letter::B);
        b.journal = Some(journal_lines(&wrong[2..]));
        let e = merge_runs(&split, &[shard("a", &["q1", "q2"], &s, true), b]).unwrap_err();
        assert_eq!(
            e,
            MergeRunError::Journal {
                file: "b".into(),
                id: "q3".into(),
                journal: Some(Letter::B),
                file_says: None
            }
        );
        let mut bad = shard("a", &["q1", "q2"], &s, true);
        bad.report = "{}".into();
        assert!(matches!(
            merge_runs(&split, &[bad, shard("b", &["q3", "q4"], &s, true)]),
            Err(MergeRunError::BadReport { .. })
        ));
    }
}
