//! The running accuracy per task that a run shows while it goes (the report's tables come from
//! [`super::report`] at the end).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Answer;
use crate::rexvqa::Split;

/// Answers of one task so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskTally {
    /// Answers whose letter is the ground truth.
    pub correct: usize,
    /// Answers to questions that have a ground truth.
    pub answered: usize,
}

impl TaskTally {
    /// Percent correct (0 before any answer).
    pub fn percent(&self) -> f64 {
        if self.answered == 0 {
            0.0
        } else {
            100.0 * self.correct as f64 / self.answered as f64
        }
    }
}

/// Per task name: how many answers so far match the ground truth. Answers to questions without
/// a ground truth, or not in `split`, are not counted.
pub fn per_task(split: &Split, answers: &[Answer]) -> BTreeMap<String, TaskTally> {
    let mut m: BTreeMap<String, TaskTally> = BTreeMap::new();
    for a in answers {
        if let Some(r) = split.get(&a.id)
            && let Some(c) = r.correct
        {
            let t = m.entry(r.task.name().to_string()).or_default();
            t.correct += usize::from(a.prediction == Some(c));
            t.answered += 1;
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rexvqa::Letter;

    const SPLIT: &str = r#"{
     "q1": {"question": "?", "options": ["A. a", "B. b"], "correct_answer": "A",
            "task_name": "Presence Assessment", "study_id": "s1"},
     "q2": {"question": "?", "options": ["A. a", "B. b"], "correct_answer": "B",
            "task_name": "Presence Assessment", "study_id": "s1"},
     "q3": {"question": "?", "options": ["A. a", "B. b"], "correct_answer": "A",
            "task_name": "Location Assessment", "study_id": "s2"},
     "q4": {"question": "?", "options": ["A. a", "B. b"], "task_name": "Location Assessment", "study_id": "s2"}
    }"#;

    fn answer(id: &str, prediction: Option<Letter>) -> Answer {
        Answer {
            id: id.into(),
            prediction,
            robust: None,
            response: String::new(),
            probs: None,
            missing_images: Vec::new(),
            unanswerable: None,
            ms: 0.0,
            ..Answer::default()
        }
    }

    #[test]
    fn each_task_counts_its_right_answers_out_of_those_with_a_truth() {
        let s = Split::from_json(SPLIT).unwrap();
        let t = per_task(
            &s,
            &[
                answer("q1", Some(Letter::A)),
                answer("q2", Some(Letter::A)),
                answer("q3", None),
                answer("q4", Some(Letter::A)),
                answer("not-in-split", Some(Letter::A)),
            ],
        );
        assert_eq!(
            t["Presence Assessment"],
            TaskTally {
                correct: 1,
                answered: 2
            }
        );
        // q4 has no ground truth; a missing letter counts as wrong.
        assert_eq!(
            t["Location Assessment"],
            TaskTally {
                correct: 0,
                answered: 1
            }
        );
        assert_eq!(t.len(), 2);
        assert_eq!(t["Presence Assessment"].percent(), 50.0);
        assert_eq!(TaskTally::default().percent(), 0.0);
    }
}
