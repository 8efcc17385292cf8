//! A student's results saved as a file: CSV, Markdown or the results JSON (which reopens, and
//! merges into a reader study).

use serde::{Deserialize, Serialize};

use super::{QuizReport, QuizResults};
use crate::eval::export::ExportFile;
use crate::rexvqa::Split;
use crate::storage::safe_name;

/// What quiz results are saved as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuizExport {
    /// One row per case.
    Csv,
    /// The report's tables.
    Markdown,
    /// The results file itself.
    Json,
}

impl QuizExport {
    /// The results in this format, named `quiz-<reader>-<seed>.<ext>`.
    pub fn export(
        self,
        split: &Split,
        report: &QuizReport,
        results: &QuizResults,
    ) -> Result<ExportFile, serde_json::Error> {
        let reader = if results.reader.is_empty() {
            "reader"
        } else {
            &results.reader
        };
        let stem = format!(
            "quiz-{}-{}",
            safe_name(reader, "reader"),
            results.quiz.settings.seed
        );
        let (ext, mime, text) = match self {
            QuizExport::Csv => ("csv", "text/csv", super::csv(split, results)),
            QuizExport::Markdown => ("md", "text/markdown", super::markdown(report, results)),
            QuizExport::Json => (
                "json",
                "application/json",
                serde_json::to_string_pretty(results)?,
            ),
        };
        Ok(ExportFile {
            name: format!("{stem}.{ext}"),
            mime: mime.into(),
            text,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quiz::{CaseAnswer, FORMAT, Quiz, QuizSettings, report};
    use crate::rexvqa::Letter;

    const SPLIT: &str = r#"{
     "q1": {"question": "?", "options": ["A. a", "B. b"], "correct_answer": "A",
            "task_name": "Presence Assessment", "study_id": "s1"}
    }"#;

    fn results(reader: &str) -> QuizResults {
        QuizResults {
            format: FORMAT.into(),
            reader: reader.into(),
            quiz: Quiz {
                format: FORMAT.into(),
                settings: QuizSettings {
                    split: "test".into(),
                    count: 1,
                    seed: 42,
                    ..Default::default()
                },
                ids: vec!["q1".into()],
            },
            answers: vec![CaseAnswer {
                id: "q1".into(),
                student: Some(Letter::A),
                ms: 2000,
                model: None,
                model_probs: None,
            }],
        }
    }

    #[test]
    fn results_are_saved_under_the_reader_and_seed_in_each_format() {
        let s = Split::from_json(SPLIT).unwrap();
        let r = results("Dr Ada/Lovelace");
        let rep = report(&s, &r).unwrap();
        let csv = QuizExport::Csv.export(&s, &rep, &r).unwrap();
        assert_eq!(
            (csv.name.as_str(), csv.mime.as_str()),
            ("quiz-Dr_Ada_Lovelace-42.csv", "text/csv")
        );
        assert!(
            csv.text.lines().nth(1).unwrap().starts_with("q1,"),
            "{}",
            csv.text
        );
        let md = QuizExport::Markdown.export(&s, &rep, &r).unwrap();
        assert_eq!(
            (md.name.as_str(), md.mime.as_str()),
            ("quiz-Dr_Ada_Lovelace-42.md", "text/markdown")
        );
        assert!(
            md.text.starts_with("# Quiz results: Dr Ada/Lovelace"),
            "{}",
            md.text
        );
        let json = QuizExport::Json.export(&s, &rep, &r).unwrap();
        assert_eq!(json.mime, "application/json");
        assert_eq!(serde_json::from_str::<QuizResults>(&json.text).unwrap(), r);
    }

    #[test]
    fn an_unnamed_reader_is_called_reader() {
        let s = Split::from_json(SPLIT).unwrap();
        let r = results("");
        let rep = report(&s, &r).unwrap();
        let f = QuizExport::Json.export(&s, &rep, &r).unwrap();
        assert_eq!(f.name, "quiz-reader-42.json");
    }
}
