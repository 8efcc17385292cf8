//! Taking a quiz, case by case: the state a quiz page holds (results so far, the case on screen,
//! the letter chosen, when the case was opened) and every move a student can make, as a plain
//! type the page drives. Each move returns the [`Step`] the page must take next (fetch a case,
//! ask the model, score), so the rules live here, testable without a browser.

use serde::{Deserialize, Serialize};

use super::{CaseAnswer, FORMAT, Quiz, QuizResults};
use crate::rexvqa::Letter;

/// What the page does after a move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing more.
    Stay,
    /// Show this case: fetch its question. The progress is worth saving.
    Show {
        /// Split name.
        split: String,
        /// Question id.
        id: String,
    },
    /// The student answered this case: ask the model (when one is loaded), save the progress.
    Answered {
        /// Split name.
        split: String,
        /// Question id.
        id: String,
    },
    /// Past the last case: score the results, save the progress.
    Score,
}

/// A key the student pressed on a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// A character key (case ignored).
    Char(char),
    /// Enter: answer, or go on once answered.
    Enter,
    /// Next case (once answered).
    Right,
    /// Previous case.
    Left,
}

impl Key {
    /// The key of a `KeyboardEvent.key` value, if the quiz uses it.
    pub fn from_dom(key: &str) -> Option<Key> {
        let mut chars = key.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => Some(Key::Char(c)),
            _ => match key {
                "Enter" => Some(Key::Enter),
                "ArrowRight" => Some(Key::Right),
                "ArrowLeft" => Some(Key::Left),
                _ => None,
            },
        }
    }
}

/// The quiz in progress, kept in browser storage after every step so a reload resumes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedQuiz {
    /// The results so far.
    pub results: QuizResults,
    /// The case on screen.
    pub position: usize,
}

/// A quiz being taken; the default is no quiz (the setup form).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuizTaking {
    results: Option<QuizResults>,
    position: usize,
    selected: Option<Letter>,
    started_ms: f64,
}

impl QuizTaking {
    /// Starts `quiz` for `reader` at its first case.
    pub fn start(&mut self, quiz: Quiz, reader: String, now_ms: f64) -> Step {
        self.results = Some(QuizResults {
            format: FORMAT.into(),
            reader,
            quiz,
            answers: Vec::new(),
        });
        self.open(0, now_ms)
    }

    /// Resumes a saved quiz at its saved case.
    pub fn resume(&mut self, saved: SavedQuiz, now_ms: f64) -> Step {
        self.results = Some(saved.results);
        self.open(saved.position, now_ms)
    }

    /// Back to no quiz.
    pub fn reset(&mut self) {
        *self = QuizTaking::default();
    }

    /// Opens case `i` (one past the last: the results), with its earlier answer selected.
    pub fn open(&mut self, i: usize, now_ms: f64) -> Step {
        self.position = i;
        self.started_ms = now_ms;
        let Some(r) = &self.results else {
            self.selected = None;
            return Step::Stay;
        };
        self.selected = r.answers.get(i).and_then(|a| a.student);
        match r.quiz.ids.get(i) {
            Some(id) => Step::Show {
                split: r.quiz.settings.split.clone(),
                id: id.clone(),
            },
            None if !r.quiz.ids.is_empty() => Step::Score,
            None => Step::Stay,
        }
    }

    /// Chooses a letter for the case on screen, until it is answered.
    pub fn choose(&mut self, letter: Letter) {
        if !self.revealed() {
            self.selected = Some(letter);
        }
    }

    /// Answers the case on screen with the chosen letter (none: skipped), timed from its opening.
    pub fn submit(&mut self, now_ms: f64) -> Step {
        let Some(id) = self.current_id().map(String::from) else {
            return Step::Stay;
        };
        if self.revealed() {
            return Step::Stay;
        }
        let ms = (now_ms - self.started_ms).max(0.0) as u64;
        let student = self.selected;
        let Some(r) = self.results.as_mut() else {
            return Step::Stay;
        };
        r.answers.push(CaseAnswer {
            id: id.clone(),
            student,
            ms,
            model: None,
            model_probs: None,
        });
        Step::Answered {
            split: r.quiz.settings.split.clone(),
            id,
        }
    }

    /// Goes to the next case, or to the results after the last.
    pub fn next(&mut self, now_ms: f64) -> Step {
        self.open(self.position + 1, now_ms)
    }

    /// A key pressed on a case; `None` when the quiz does not use it (the browser keeps it).
    pub fn key(&mut self, key: Key, now_ms: f64) -> Option<Step> {
        let revealed = self.revealed();
        match key {
            Key::Char(c) if !revealed => {
                let l = Letter::from_char(c.to_ascii_uppercase())?;
                self.selected = Some(l);
                Some(Step::Stay)
            }
            Key::Enter if !revealed => Some(if self.selected.is_some() {
                self.submit(now_ms)
            } else {
                Step::Stay
            }),
            Key::Enter | Key::Right if revealed => Some(self.next(now_ms)),
            Key::Left if self.position > 0 => Some(self.open(self.position - 1, now_ms)),
            _ => None,
        }
    }

    /// Submits the chosen letter when the case's time is up; [`Step::Stay`] otherwise.
    pub fn tick(&mut self, now_ms: f64) -> Step {
        match self.time_left_s(now_ms) {
            Some(left) if left <= 0.0 => self.submit(now_ms),
            _ => Step::Stay,
        }
    }

    /// Records the model's answer to case `id`, once; whether it changed anything.
    pub fn model_answered(
        &mut self,
        id: &str,
        letter: Option<Letter>,
        probs: Option<Vec<f32>>,
    ) -> bool {
        let Some(case) = self
            .results
            .as_mut()
            .and_then(|r| r.answers.iter_mut().find(|c| c.id == id))
            .filter(|c| c.model.is_none())
        else {
            return false;
        };
        case.model = letter;
        case.model_probs = probs;
        true
    }

    /// The results so far, when a quiz is being taken.
    pub fn results(&self) -> Option<&QuizResults> {
        self.results.as_ref()
    }

    /// What to save to resume later.
    pub fn saved(&self) -> Option<SavedQuiz> {
        self.results.clone().map(|results| SavedQuiz {
            results,
            position: self.position,
        })
    }

    /// The case on screen (one past the last on the results).
    pub fn position(&self) -> usize {
        self.position
    }

    /// The letter chosen on the case on screen.
    pub fn selected(&self) -> Option<Letter> {
        self.selected
    }

    /// The question id of the case on screen.
    pub fn current_id(&self) -> Option<&str> {
        self.results
            .as_ref()?
            .quiz
            .ids
            .get(self.position)
            .map(String::as_str)
    }

    /// Whether the case on screen is answered (its truth is shown).
    pub fn revealed(&self) -> bool {
        self.results
            .as_ref()
            .is_some_and(|r| r.answers.len() > self.position)
    }

    /// Whether every case is behind the student (the results page).
    pub fn finished(&self) -> bool {
        self.results
            .as_ref()
            .is_some_and(|r| self.position >= r.quiz.ids.len())
    }

    /// Seconds left on the case on screen, when the quiz has a time limit and the case is open.
    pub fn time_left_s(&self, now_ms: f64) -> Option<f64> {
        let limit = self.results.as_ref()?.quiz.settings.time_limit_s?;
        (self.current_id().is_some() && !self.revealed())
            .then(|| f64::from(limit) - (now_ms - self.started_ms) / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quiz::QuizSettings;

    fn quiz(n: usize, time_limit_s: Option<u32>) -> Quiz {
        Quiz {
            format: FORMAT.into(),
            settings: QuizSettings {
                split: "test".into(),
                count: n,
                seed: 3,
                time_limit_s,
                ..Default::default()
            },
            ids: (0..n).map(|i| format!("q{i}")).collect(),
        }
    }

    fn show(id: &str) -> Step {
        Step::Show {
            split: "test".into(),
            id: id.into(),
        }
    }

    fn answered(id: &str) -> Step {
        Step::Answered {
            split: "test".into(),
            id: id.into(),
        }
    }

    #[test]
    fn a_quiz_starts_at_its_first_case_with_nothing_chosen() {
        let mut t = QuizTaking::default();
        assert_eq!(t.results(), None);
        assert_eq!(t.start(quiz(2, None), "Ada".into(), 100.0), show("q0"));
        assert_eq!(t.results().unwrap().reader, "Ada");
        assert_eq!((t.position(), t.selected(), t.revealed()), (0, None, false));
        assert_eq!(t.current_id(), Some("q0"));
    }

    #[test]
    fn keys_choose_answer_and_move_on_through_to_the_score() {
        let mut t = QuizTaking::default();
        t.start(quiz(2, None), String::new(), 0.0);
        // Enter with nothing chosen is taken but does nothing.
        assert_eq!(t.key(Key::Enter, 10.0), Some(Step::Stay));
        assert!(!t.revealed());
        // Letters are case-blind; a non-letter is left to the browser.
        assert_eq!(t.key(Key::Char('c'), 20.0), Some(Step::Stay));
        assert_eq!(t.selected(), Some(Letter::C));
        assert_eq!(t.key(Key::Char('x'), 20.0), None);
        assert_eq!(t.key(Key::Right, 20.0), None, "not answered yet");
        assert_eq!(t.key(Key::Enter, 1500.0), Some(answered("q0")));
        let a = &t.results().unwrap().answers[0];
        assert_eq!(
            (a.id.as_str(), a.student, a.ms),
            ("q0", Some(Letter::C), 1500)
        );
        // Answered: letters no longer change the answer, Enter moves on.
        assert_eq!(t.key(Key::Char('a'), 1600.0), None);
        assert_eq!(t.selected(), Some(Letter::C));
        assert_eq!(t.key(Key::Enter, 1700.0), Some(show("q1")));
        assert_eq!(t.selected(), None);
        t.choose(Letter::B);
        assert_eq!(t.submit(2700.0), answered("q1"));
        assert_eq!(t.results().unwrap().answers[1].ms, 1000);
        assert_eq!(t.key(Key::Right, 2800.0), Some(Step::Score));
        assert!(t.finished());
        assert_eq!(t.current_id(), None);
    }

    #[test]
    fn going_back_shows_the_earlier_answer_which_cannot_change() {
        let mut t = QuizTaking::default();
        t.start(quiz(3, None), String::new(), 0.0);
        t.choose(Letter::D);
        t.submit(5.0);
        t.next(6.0);
        assert_eq!(t.key(Key::Left, 7.0), Some(show("q0")));
        assert_eq!((t.selected(), t.revealed()), (Some(Letter::D), true));
        t.choose(Letter::A);
        assert_eq!(t.selected(), Some(Letter::D));
        assert_eq!(t.submit(8.0), Step::Stay, "a case is answered once");
        assert_eq!(t.results().unwrap().answers.len(), 1);
        // Nothing before the first case.
        assert_eq!(t.key(Key::Left, 9.0), None);
    }

    #[test]
    fn out_of_time_submits_the_choice_or_a_skip() {
        let mut t = QuizTaking::default();
        t.start(quiz(2, Some(2)), String::new(), 1000.0);
        assert_eq!(t.time_left_s(1500.0), Some(1.5));
        assert_eq!(t.tick(2999.0), Step::Stay);
        assert_eq!(t.tick(3000.0), answered("q0"));
        let a = &t.results().unwrap().answers[0];
        assert_eq!((a.student, a.ms), (None, 2000));
        // An answered case has no clock and does not time out again.
        assert_eq!(t.time_left_s(9000.0), None);
        assert_eq!(t.tick(9000.0), Step::Stay);
        // No limit, no clock.
        let mut u = QuizTaking::default();
        u.start(quiz(1, None), String::new(), 0.0);
        assert_eq!((u.time_left_s(1e9), u.tick(1e9)), (None, Step::Stay));
    }

    #[test]
    fn the_model_answer_lands_once_in_the_case_it_was_asked_for() {
        let mut t = QuizTaking::default();
        t.start(quiz(2, None), String::new(), 0.0);
        t.choose(Letter::A);
        t.submit(1.0);
        assert!(
            !t.model_answered("q1", Some(Letter::B), None),
            "q1 is not answered"
        );
        assert!(t.model_answered("q0", Some(Letter::B), Some(vec![0.2, 0.8])));
        assert!(!t.model_answered("q0", Some(Letter::C), None));
        let a = &t.results().unwrap().answers[0];
        assert_eq!(
            (a.model, a.model_probs.clone()),
            (Some(Letter::B), Some(vec![0.2, 0.8]))
        );
    }

    #[test]
    fn a_saved_quiz_resumes_where_it_was_left() {
        let mut t = QuizTaking::default();
        t.start(quiz(3, None), "Bo".into(), 0.0);
        t.choose(Letter::A);
        t.submit(1.0);
        t.next(2.0);
        let saved = t.saved().unwrap();
        assert_eq!(saved.position, 1);
        let mut u = QuizTaking::default();
        assert_eq!(u.resume(saved, 50.0), show("q1"));
        assert_eq!(u.results(), t.results());
        assert_eq!((u.position(), u.selected(), u.revealed()), (1, None, false));
        u.reset();
        assert_eq!(
            (u, QuizTaking::default().saved()),
            (QuizTaking::default(), None)
        );
    }

    #[test]
    fn dom_key_names_map_to_quiz_keys() {
        assert_eq!(Key::from_dom("b"), Some(Key::Char('b')));
        assert_eq!(Key::from_dom("Enter"), Some(Key::Enter));
        assert_eq!(Key::from_dom("ArrowLeft"), Some(Key::Left));
        assert_eq!(Key::from_dom("ArrowRight"), Some(Key::Right));
        assert_eq!(Key::from_dom("Shift"), None);
    }
}
