//! A run's downloads: the leaderboard predictions, the answers as CSV, the Markdown report and
//! the report as JSON, each with the file name and MIME type it is saved under; and the
//! writers of the first three.

use serde::{Deserialize, Serialize};

use super::{Answer, EvalReport};
use crate::rexvqa::{Letter, Split};
use crate::score;

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
            RunExport::Leaderboard => serde_json::to_string_pretty(&leaderboard(split, answers))?,
            RunExport::Csv => csv(split, answers),
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
                markdown(report, &info)
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

/// Leaderboard-format predictions (`{qid: record + model_prediction + model_response}`).
pub fn leaderboard(
    split: &Split,
    answers: &[Answer],
) -> serde_json::Map<String, serde_json::Value> {
    let rows: Vec<(String, Option<Letter>, String)> = answers
        .iter()
        .map(|a| (a.id.clone(), a.prediction, a.response.clone()))
        .collect();
    let mut out = score::leaderboard(split, &rows);
    for a in answers {
        let Some(serde_json::Value::Object(o)) = out.get_mut(&a.id) else {
            continue;
        };
        // Kept in the file (so that merged shards still name them), marked so no score counts
        // them.
        if let Some(reason) = &a.unanswerable {
            o.insert(score::UNANSWERABLE_KEY.into(), reason.clone().into());
        }
        // A reader of `model_response` must know it is the reply's start only.
        if a.stopped_at_letter {
            o.insert(score::STOPPED_AT_LETTER_KEY.into(), true.into());
        }
    }
    out
}

/// Published figures to compare with (public/reference_figures.json).
pub const REFERENCE_FIGURES: &str = include_str!("../../../public/reference_figures.json");

fn pct(x: f64) -> String {
    format!("{:.2}", 100.0 * x)
}

/// The report as Markdown: settings, overall / per task / per category tables with 95% Wilson
/// intervals, side by side with the paper's and the leaderboard's MedGemma figures.
pub fn markdown(r: &EvalReport, run_info: &[(&str, String)]) -> String {
    let refs: serde_json::Value = serde_json::from_str(REFERENCE_FIGURES).unwrap_or_default();
    let mut md = String::from(
        "# ReXVQA evaluation (rexvqa-web)\n\n## Run\n\n| setting | value |\n|---|---|\n",
    );
    let s = &r.settings;
    for (k, v) in [
        ("mode", format!("{:?}", s.mode).to_lowercase()),
        ("16-bit policy", s.policy.name().to_string()),
        (
            "images",
            if s.all_images {
                "all views".into()
            } else {
                "first image (official)".into()
            },
        ),
        ("answered", format!("{} of {}", r.answered, r.in_scope)),
        (
            "records rejected by the split parser",
            r.rejected_records.len().to_string(),
        ),
        (
            "questions unanswerable (no usable image)",
            format!("{} ({})", r.unanswerable.len(), s.without_image_policy()),
        ),
        (
            "questions with a missing image",
            r.missing_images.to_string(),
        ),
        ("mean time per question", format!("{:.0} ms", r.mean_ms)),
    ]
    .into_iter()
    .chain(r.replies_line().map(|line| ("replies", line)))
    {
        md.push_str(&format!("| {k} | {v} |\n"));
    }
    for (k, v) in run_info {
        md.push_str(&format!("| {k} | {v} |\n"));
    }
    let o = &r.official.overall;
    md.push_str(&format!(
        "\n## Overall\n\n| | accuracy % | 95% CI | n | failed extractions |\n|---|---|---|---|---|\n| this run (official extraction) | {} | {}–{} | {} | {} |\n",
        pct(o.accuracy), pct(o.ci_low), pct(o.ci_high), o.n, r.official.failed_extractions
    ));
    let rb = &r.robust.overall;
    match r.robust_label() {
        Ok(label) => md.push_str(&format!(
            "| {label} | {} | {}–{} | {} | {} |\n",
            pct(rb.accuracy),
            pct(rb.ci_low),
            pct(rb.ci_high),
            rb.n,
            r.robust.failed_extractions
        )),
        Err(why) => md.push_str(&format!("| {why} | | | | |\n")),
    }
    for key in ["paper", "leaderboard"] {
        if let Some(x) = refs[key]["overall"].as_f64() {
            md.push_str(&format!(
                "| {} | {} | | | |\n",
                refs[key]["label"].as_str().unwrap_or(key),
                pct(x)
            ));
        }
    }
    md.push_str("\n## Per task\n\n| task | accuracy % | 95% CI | n | paper % | leaderboard % |\n|---|---|---|---|---|---|\n");
    for (task, c) in &r.official.per_task {
        let fig = |k: &str| refs[k]["tasks"][task].as_f64().map(pct).unwrap_or_default();
        md.push_str(&format!(
            "| {task} | {} | {}–{} | {} | {} | {} |\n",
            pct(c.accuracy),
            pct(c.ci_low),
            pct(c.ci_high),
            c.n,
            fig("paper"),
            fig("leaderboard")
        ));
    }
    for (title, rows) in [
        ("Records rejected by the split parser", &r.rejected_records),
        ("Unanswerable questions", &r.unanswerable),
    ] {
        if !rows.is_empty() {
            md.push_str(&format!("\n## {title}\n\n| id | reason |\n|---|---|\n"));
            for x in rows {
                md.push_str(&format!(
                    "| {} | {} |\n",
                    x.id,
                    x.reason.replace('|', "\\|")
                ));
            }
        }
    }
    md.push_str("\n## Per category\n\n| category | accuracy % | 95% CI | n |\n|---|---|---|---|\n");
    for (cat, c) in &r.official.per_category {
        md.push_str(&format!(
            "| {} | {} | {}–{} | {} |\n",
            if cat.is_empty() { "(none)" } else { cat },
            pct(c.accuracy),
            pct(c.ci_low),
            pct(c.ci_high),
            c.n
        ));
    }
    md
}

/// CSV of answers: id, task, category, truth, prediction, robust, correct, probabilities, ms.
pub fn csv(split: &Split, answers: &[Answer]) -> String {
    let mut out = String::from(
        "id,task,category,correct_answer,prediction,robust_prediction,is_correct,p_a,p_b,p_c,p_d,ms\n",
    );
    let q = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let l = |x: Option<Letter>| x.map(|l| l.to_string()).unwrap_or_default();
    for a in answers {
        let Some(r) = split.get(&a.id) else { continue };
        let p = a.probs.clone().unwrap_or_default();
        let pf = |i: usize| p.get(i).map(|v| format!("{v:.6}")).unwrap_or_default();
        out.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{:.1}\n",
            q(&a.id),
            q(r.task.name()),
            q(&r.category),
            l(r.correct),
            l(a.prediction),
            l(a.robust),
            r.correct
                .map(|c| (Some(c) == a.prediction).to_string())
                .unwrap_or_default(),
            pf(0),
            pf(1),
            pf(2),
            pf(3),
            a.ms
        ));
    }
    out
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
            ..Answer::default()
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

    const TWO: &str = r#"{
     "q1": {"question": "?", "options": ["A. a", "B. b"], "correct_answer": "A",
            "task_name": "Presence Assessment", "study_id": "s1"},
     "q2": {"question": "?", "options": ["A. a", "B. b"], "correct_answer": "B",
            "task_name": "Presence Assessment", "study_id": "s1"}
    }"#;

    #[test]
    fn official_exports_say_how_replies_were_generated() {
        let s = Split::from_json(TWO).unwrap();
        assert_eq!(s.records.len(), 2);
        let answer = |id: &str, response: &str, stopped: bool| Answer {
            id: id.into(),
            prediction: crate::score::extract_official(response),
            robust: (!stopped)
                .then(|| crate::score::extract_robust(response))
                .flatten(),
            response: response.into(),
            stopped_at_letter: stopped,
            tokens: response.len(),
            ms: 5.0,
            ..Answer::default()
        };
        let official = |stop_at_letter| Settings {
            mode: crate::session::Mode::Official,
            stop_at_letter,
            ..Settings::default()
        };
        let sha = [("text model SHA-256".to_string(), "abc".to_string())];
        let facts = RunFacts {
            run_id: "r",
            split_name: "test",
            model: "m",
            model_sha256: &sha,
            app: "a",
        };
        let md = |answers: &[Answer], settings: &Settings| {
            let r = report(&s, answers, settings, 2);
            RunExport::Markdown
                .export(&s, answers, &r, &facts)
                .unwrap()
                .text
        };

        // Every reply stopped: no robust figures, and the run table says why.
        let stopped = [answer("q1", "A", true), answer("q2", "b", true)];
        let r = report(&s, &stopped, &official(true), 2);
        assert_eq!((r.stopped_at_letter, r.mean_tokens), (2, 1.0));
        assert_eq!(r.official.overall.accuracy, 1.0);
        assert_eq!(r.robust.overall.n, 0);
        let text = md(&stopped, &official(true));
        for line in [
            "| replies | stopped at the official letter (then no later token can change it; else ≤ 256 tokens): 2 of 2 stopped, 1.0 tokens per question |",
            "| robust extraction: not computed, every reply stopped at its official letter (full replies compute it) | | | | |",
        ] {
            assert!(text.contains(line), "{line}\nmissing from\n{text}");
        }
        let lb = RunExport::Leaderboard
            .export(&s, &stopped, &r, &facts)
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&lb.text).unwrap();
        assert_eq!(v["q1"][crate::score::STOPPED_AT_LETTER_KEY], true);
        assert_eq!(v["q2"]["model_response"], "b");

        // One reply in full (it ended before its letter settled, say): robust over it alone.
        let mixed = [answer("q1", "A", true), answer("q2", "Answer: (B)", false)];
        let r = report(&s, &mixed, &official(true), 2);
        assert_eq!(r.robust.overall.n, 1);
        assert!(md(&mixed, &official(true)).contains(
            "| this run (robust extraction, the 1 full replies only; 1 stopped at the letter) | 100.00 |"
        ));
        let lb = RunExport::Leaderboard
            .export(&s, &mixed, &r, &facts)
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&lb.text).unwrap();
        assert!(v["q2"].get(crate::score::STOPPED_AT_LETTER_KEY).is_none());

        // Full replies: the robust row as before and the rule named; fast mode names none.
        let full = [answer("q1", "A", false), answer("q2", "Answer: (B)", false)];
        let text = md(&full, &official(false));
        assert!(text.contains("| replies | full (≤ 256 tokens or end of turn): 0 of 2 stopped"));
        assert!(
            text.contains("| this run (robust extraction) | 100.00 |"),
            "{text}"
        );
        assert!(!md(&full, &Settings::default()).contains("| replies |"));
        // A report saved before the field existed reads as full replies.
        let old: Settings = serde_json::from_str(
            r#"{"mode":"official","policy":"scale","all_images":false,"max_new_tokens":256}"#,
        )
        .unwrap();
        assert!(!old.stop_at_letter);
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
