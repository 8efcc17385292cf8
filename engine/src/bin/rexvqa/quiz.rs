//! `rexvqa quiz` and `quiz-report`: the app's teaching quiz, drawn and scored from the command
//! line.

use std::path::PathBuf;

use clap::Args;
use rexvqa_engine::rexvqa::Split;

use crate::common::{err, split_name};

#[derive(Args)]
pub struct QuizArgs {
    /// The split file (metadata/<split>_vqa_data.json).
    #[arg(long)]
    pub split: PathBuf,
    /// Number of cases.
    #[arg(long, default_value_t = 20)]
    pub count: usize,
    /// Seed of the draw.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Only this task (repeatable).
    #[arg(long)]
    pub task: Vec<String>,
    /// Only this category (repeatable).
    #[arg(long)]
    pub category: Vec<String>,
}

#[derive(Args)]
pub struct QuizReportArgs {
    /// The split file the quizzes were drawn from.
    #[arg(long)]
    pub split: PathBuf,
    /// Results files exported from the app.
    pub files: Vec<PathBuf>,
}

/// `rexvqa quiz`: the seeded quiz, printed as JSON.
pub fn quiz(args: QuizArgs) -> Result<(), String> {
    let QuizArgs {
        split,
        count,
        seed,
        task,
        category,
    } = args;
    let text = std::fs::read_to_string(&split).map_err(|e| err(&split, e))?;
    let s = Split::from_json(&text).map_err(|e| err(&split, e))?;
    let name = split_name(&split);
    let settings = rexvqa_engine::quiz::QuizSettings {
        split: name,
        count,
        seed,
        tasks: task,
        categories: category,
        ..Default::default()
    };
    let quiz = rexvqa_engine::quiz::make_quiz(&s, &settings).map_err(|e| e.to_string())?;
    println!(
        "{}",
        serde_json::to_string_pretty(&quiz).map_err(|e| e.to_string())?
    );
    Ok(())
}

/// `rexvqa quiz-report`: one results file's report, or several files' reader study.
pub fn quiz_report(args: QuizReportArgs) -> Result<(), String> {
    let QuizReportArgs { split, files } = args;
    use rexvqa_engine::quiz;
    let text = std::fs::read_to_string(&split).map_err(|e| err(&split, e))?;
    let s = Split::from_json(&text).map_err(|e| err(&split, e))?;
    let mut loaded = Vec::new();
    for f in &files {
        loaded.push((
            f.display().to_string(),
            std::fs::read_to_string(f).map_err(|e| err(f, e))?,
        ));
    }
    let out = match loaded.as_slice() {
        [] => return Err("give at least one results file".into()),
        [(name, json)] => {
            let results: quiz::QuizResults =
                serde_json::from_str(json).map_err(|e| format!("{name}: {e}"))?;
            serde_json::to_value(quiz::report(&s, &results).map_err(|e| e.to_string())?)
        }
        many => serde_json::to_value(quiz::reader_study(&s, many).map_err(|e| e.to_string())?),
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&out.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?
    );
    Ok(())
}
