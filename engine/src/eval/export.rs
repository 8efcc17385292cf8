//! A run's downloads: the leaderboard predictions, the answers as CSV, the Markdown report and
//! the report as JSON, each with the file name and MIME type it is saved under.

use serde::{Deserialize, Serialize};

use super::{Answer, EvalReport};
use crate::rexvqa::Split;

/// A file to offer for download.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportFile {
    /// Suggested file name.
    pub name: String,
    /// MIME type.
    pub mime: String,
    /// The content.
    pub text: String,
}

/// What a run is exported as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunExport {
    /// Leaderboard-format predictions (JSON), the file `rexvqa eval --out` writes.
    Leaderboard,
    /// One row per answer.
    Csv,
    /// The report's tables.
    Markdown,
    /// The report as JSON.
    Report,
}

/// What the exports say about the run besides its answers.
#[derive(Debug, Clone, Copy)]
pub struct RunFacts<'a> {
    /// Run id.
    pub run_id: &'a str,
    /// Split name.
    pub split_name: &'a str,
    /// The models, as the run names them.
    pub model: &'a str,
    /// (label, SHA-256 hex) of each model file.
    pub model_sha256: &'a [(String, String)],
    /// The program that ran it, with its version.
    pub app: &'a str,
}

/// How a report names a model pair: the text file's name, then ` + ` the mmproj's.
pub fn pair_name(text: &str, mmproj: Option<&str>) -> String {
    match mmproj {
        Some(m) => format!("{text} + {m}"),
        None => text.to_string(),
    }
}

/// The lines a report names the weights with, (label, SHA-256 hex): the text model's, then the
/// mmproj's when there is one. The browser's report and `rexvqa eval`'s write the same lines.
pub fn model_sha256(text: String, mmproj: Option<String>) -> Vec<(String, String)> {
    let mut lines = vec![("text model SHA-256".to_string(), text)];
    lines.extend(mmproj.map(|m| ("mmproj SHA-256".to_string(), m)));
    lines
}

impl RunExport {
    /// The file name ending and the MIME type.
    fn file(self) -> (&'static str, &'static str) {
        match self {
            RunExport::Leaderboard => ("predictions.json", "application/json"),
            RunExport::Csv => ("answers.csv", "text/csv"),
            RunExport::Markdown => ("report.md", "text/markdown"),
            RunExport::Report => ("report.json", "application/json"),
        }
    }

    /// The run exported in this format, named `<split>_<run id>_<kind>`.
    pub fn export(
        self,
        split: &Split,
        answers: &[Answer],
        report: &EvalReport,
        facts: &RunFacts<'_>,
    ) -> Result<ExportFile, serde_json::Error> {
        let text = match self {
            RunExport::Leaderboard => {
                serde_json::to_string_pretty(&super::leaderboard(split, answers))?
            }
            RunExport::Csv => super::csv(split, answers),
            RunExport::Markdown => {
                let mut info = vec![("model", facts.model.to_string())];
                info.extend(
                    facts
                        .model_sha256
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.clone())),
                );
                info.push(("split", facts.split_name.to_string()));
                info.push(("app", facts.app.to_string()));
                super::markdown(report, &info)
            }
            RunExport::Report => serde_json::to_string_pretty(report)?,
        };
        let (ext, mime) = self.file();
        Ok(ExportFile {
            name: format!("{}_{}_{ext}", facts.split_name, facts.run_id),
            mime: mime.into(),
            text,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::{Settings, report};
    use crate::rexvqa::Letter;

    const SPLIT: &str = r#"{
     "q1": {"question": "?", "options": ["A. a", "B. b"], "correct_answer": "A",
            "task_name": "Presence Assessment", "study_id": "s1"}
    }"#;

    #[test]
    fn every_format_gets_its_name_type_and_content() {
        let s = Split::from_json(SPLIT).unwrap();
        let answers = [Answer {
            id: "q1".into(),
            prediction: Some(Letter::A),
            robust: None,
            response: "A".into(),
            probs: Some(vec![0.9, 0.1]),
            missing_images: Vec::new(),
            unanswerable: None,
            ms: 5.0,
        }];
        let settings = Settings::default();
        let r = report(&s, &answers, &settings, 1);
        let sha = [("text model SHA-256".to_string(), "abc123".to_string())];
        let facts = RunFacts {
            run_id: "run-7",
            split_name: "test",
            model: "tiny.gguf",
            model_sha256: &sha,
            app: "rexvqa-web 9.9",
        };
        let get = |f: RunExport| f.export(&s, &answers, &r, &facts).unwrap();

        let lb = get(RunExport::Leaderboard);
        assert_eq!(
            (lb.name.as_str(), lb.mime.as_str()),
            ("test_run-7_predictions.json", "application/json")
        );
        let v: serde_json::Value = serde_json::from_str(&lb.text).unwrap();
        assert_eq!(v["q1"]["model_prediction"], "A");

        let csv = get(RunExport::Csv);
        assert_eq!(
            (csv.name.as_str(), csv.mime.as_str()),
            ("test_run-7_answers.csv", "text/csv")
        );
        assert!(
            csv.text.lines().nth(1).unwrap().starts_with("\"q1\","),
            "{}",
            csv.text
        );

        let md = get(RunExport::Markdown);
        assert_eq!(
            (md.name.as_str(), md.mime.as_str()),
            ("test_run-7_report.md", "text/markdown")
        );
        for fact in [
            "tiny.gguf",
            "abc123",
            "rexvqa-web 9.9",
            "text model SHA-256",
        ] {
            assert!(md.text.contains(fact), "{fact} missing from\n{}", md.text);
        }

        let rep = get(RunExport::Report);
        assert_eq!(rep.name, "test_run-7_report.json");
        let back: EvalReport = serde_json::from_str(&rep.text).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn formats_travel_as_snake_case_names() {
        assert_eq!(
            serde_json::to_string(&RunExport::Leaderboard).unwrap(),
            "\"leaderboard\""
        );
        assert_eq!(
            serde_json::from_str::<RunExport>("\"markdown\"").unwrap(),
            RunExport::Markdown
        );
    }
}
