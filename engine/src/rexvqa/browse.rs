//! Browsing a split: a filtered, paged list of questions and one question's details, as the
//! study viewer shows them.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::schema::Letter;
use super::split::{Split, resolve_image_path};

/// One question in a list.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QuestionRow {
    /// Question id.
    pub id: String,
    /// Study key.
    pub study: String,
    /// Task name.
    pub task: String,
    /// Category.
    pub category: String,
    /// Question text.
    pub question: String,
}

/// Which questions a list shows.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct QuestionFilter {
    /// Text to find, ignoring case, in the id, question, study key or an option.
    pub query: String,
    /// Only this task.
    pub task: Option<String>,
    /// Only this category.
    pub category: Option<String>,
}

/// A page of questions matching a filter.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct QuestionPage {
    /// Rows matching the filter, on every page.
    pub total: usize,
    /// This page.
    pub items: Vec<QuestionRow>,
    /// Every task name of the split (whatever the filter), sorted.
    pub tasks: Vec<String>,
    /// Every category of the split (whatever the filter), sorted.
    pub categories: Vec<String>,
}

/// One image of a question.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ImageRef {
    /// Path relative to the dataset root (empty when it cannot be resolved).
    pub path: String,
    /// View position (PA, AP, LATERAL...).
    pub view: String,
    /// Whether the file is at hand (in the opened folder or unpacked).
    pub present: bool,
}

/// A question with everything the viewer shows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QuestionDetail {
    /// Split.
    pub split: String,
    /// Question id.
    pub id: String,
    /// Study key.
    pub study: String,
    /// Task.
    pub task: String,
    /// Category.
    pub category: String,
    /// Question text.
    pub question: String,
    /// Options as written.
    pub options: Vec<String>,
    /// Ground truth.
    pub correct: Option<Letter>,
    /// Reference explanation.
    pub explanation: Option<String>,
    /// The study's images.
    pub images: Vec<ImageRef>,
}

impl Split {
    /// Rows `offset..offset + limit` of the questions matching `filter`, in evaluation order
    /// (grouped by study), with the split's tasks and categories for the filter menus.
    pub fn list_questions(
        &self,
        filter: &QuestionFilter,
        offset: usize,
        limit: usize,
    ) -> QuestionPage {
        let q = filter.query.to_lowercase();
        let matches = |text: &str| text.to_lowercase().contains(&q);
        let mut tasks = BTreeSet::new();
        let mut categories = BTreeSet::new();
        let mut rows = Vec::new();
        for i in self.eval_order() {
            let r = &self.records[i];
            tasks.insert(r.task.name().to_string());
            categories.insert(r.category.clone());
            if filter.task.as_deref().is_some_and(|t| t != r.task.name())
                || filter.category.as_deref().is_some_and(|c| c != r.category)
            {
                continue;
            }
            let found = q.is_empty()
                || matches(&r.id)
                || matches(&r.question)
                || matches(r.study_key())
                || r.options.iter().any(|o| matches(o));
            if found {
                rows.push(i);
            }
        }
        let items = rows
            .iter()
            .skip(offset)
            .take(limit)
            .map(|&i| {
                let r = &self.records[i];
                QuestionRow {
                    id: r.id.clone(),
                    study: r.study_key().to_string(),
                    task: r.task.name().to_string(),
                    category: r.category.clone(),
                    question: r.question.clone(),
                }
            })
            .collect();
        QuestionPage {
            total: rows.len(),
            items,
            tasks: tasks.into_iter().collect(),
            categories: categories.into_iter().collect(),
        }
    }

    /// The question `id` as the viewer shows it; `present` says whether an image path (relative
    /// to the dataset root) is at hand.
    pub fn question_detail(
        &self,
        split_name: &str,
        id: &str,
        present: impl Fn(&str) -> bool,
    ) -> Option<QuestionDetail> {
        let r = self.get(id)?;
        let images = r
            .image_paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let path = resolve_image_path(p).unwrap_or_default();
                ImageRef {
                    present: present(&path),
                    path,
                    view: r.view_positions.get(i).cloned().unwrap_or_default(),
                }
            })
            .collect();
        Some(QuestionDetail {
            split: split_name.into(),
            id: r.id.clone(),
            study: r.study_key().into(),
            task: r.task.name().into(),
            category: r.category.clone(),
            question: r.question.clone(),
            options: r.options.clone(),
            correct: r.correct,
            explanation: r.explanation.clone(),
            images,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPLIT: &str = r#"{
     "b2": {"question": "Is the heart enlarged?", "options": ["A. Yes", "B. No", "C. Maybe", "D. Unclear"],
            "correct_answer": "A", "task_name": "Presence Assessment", "category": "Heart", "study_id": "s2",
            "ImagePath": ["../deid_png/s2/1.png", "../deid_png/s2/2.png"], "ImageViewPosition": ["PA", "LATERAL"],
            "correct_answer_explanation": "Cardiomegaly."},
     "a1": {"question": "Where is the effusion?", "options": ["A. left", "B. right", "C. both", "D. none"],
            "correct_answer": "C", "task_name": "Location Assessment", "category": "Pleura", "study_id": "s1",
            "ImagePath": ["../deid_png/s1/1.png"]},
     "a2": {"question": "Is there a pneumothorax?", "options": ["A. Yes", "B. No", "C. Maybe", "D. Cardiac"],
            "correct_answer": "B", "task_name": "Presence Assessment", "category": "Pleura", "study_id": "s1",
            "ImagePath": ["../deid_png/s1/1.png"]}
    }"#;

    fn ids(p: &QuestionPage) -> Vec<&str> {
        p.items.iter().map(|r| r.id.as_str()).collect()
    }

    #[test]
    fn an_empty_filter_lists_every_question_by_study_then_id() {
        let s = Split::from_json(SPLIT).unwrap();
        let p = s.list_questions(&QuestionFilter::default(), 0, 10);
        assert_eq!((p.total, ids(&p)), (3, vec!["a1", "a2", "b2"]));
        assert_eq!(p.tasks, ["Location Assessment", "Presence Assessment"]);
        assert_eq!(p.categories, ["Heart", "Pleura"]);
        let r = &p.items[2];
        assert_eq!(
            (r.study.as_str(), r.task.as_str(), r.category.as_str()),
            ("s2", "Presence Assessment", "Heart")
        );
    }

    #[test]
    fn the_query_ignores_case_and_searches_options_and_study() {
        let s = Split::from_json(SPLIT).unwrap();
        let find = |q: &str| {
            let f = QuestionFilter {
                query: q.into(),
                ..Default::default()
            };
            ids(&s.list_questions(&f, 0, 10))
                .into_iter()
                .map(String::from)
                .collect::<Vec<_>>()
        };
        assert_eq!(find("PNEUMO"), ["a2"]);
        // "cardiac" is only an option of a2, "heart" only b2's question text.
        assert_eq!(find("cardiac"), ["a2"]);
        assert_eq!(find("s2"), ["b2"]);
        assert_eq!(find("A1"), ["a1"]);
        assert!(find("nothing like this").is_empty());
    }

    #[test]
    fn task_and_category_narrow_the_rows_but_not_the_menus() {
        let s = Split::from_json(SPLIT).unwrap();
        let f = QuestionFilter {
            task: Some("Presence Assessment".into()),
            category: Some("Pleura".into()),
            ..Default::default()
        };
        let p = s.list_questions(&f, 0, 10);
        assert_eq!((p.total, ids(&p)), (1, vec!["a2"]));
        assert_eq!(p.tasks.len(), 2);
        assert_eq!(p.categories.len(), 2);
    }

    #[test]
    fn pages_cut_the_matching_rows_and_keep_their_total() {
        let s = Split::from_json(SPLIT).unwrap();
        let all = QuestionFilter::default();
        let p = s.list_questions(&all, 1, 1);
        assert_eq!((p.total, ids(&p)), (3, vec!["a2"]));
        let past = s.list_questions(&all, 5, 10);
        assert_eq!((past.total, past.items.len()), (3, 0));
    }

    #[test]
    fn a_question_detail_resolves_its_images_and_says_which_are_at_hand() {
        let s = Split::from_json(SPLIT).unwrap();
        let d = s
            .question_detail("test", "b2", |p| p == "deid_png/s2/2.png")
            .unwrap();
        assert_eq!((d.split.as_str(), d.study.as_str()), ("test", "s2"));
        assert_eq!(d.correct, Some(Letter::A));
        assert_eq!(d.explanation.as_deref(), Some("Cardiomegaly."));
        let images: Vec<(&str, &str, bool)> = d
            .images
            .iter()
            .map(|i| (i.path.as_str(), i.view.as_str(), i.present))
            .collect();
        assert_eq!(
            images,
            [
                ("deid_png/s2/1.png", "PA", false),
                ("deid_png/s2/2.png", "LATERAL", true)
            ]
        );
        assert_eq!(s.question_detail("test", "zz", |_| true), None);
    }
}
