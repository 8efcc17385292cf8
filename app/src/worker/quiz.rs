//! Quizzes: drawing or opening one against an open split, keeping the quiz in progress in
//! browser storage, scoring a student's results (and saving them as a file), and merging
//! several students' results into a reader-study table.

use rexvqa_engine::quiz::{self, Quiz, QuizExport, QuizResults, QuizSettings, SavedQuiz};

use super::error::WorkerError;
use super::reply::Replies;
use super::state;
use crate::io::{Dir, opfs_root};
use crate::protocol::Event;

/// The quiz in progress: `[results, current case]` as JSON.
const QUIZ_FILE: &str = "current.json";

async fn quiz_dir() -> Result<Dir, WorkerError> {
    Ok(opfs_root().await?.dir("quizzes", true).await?)
}

/// Draws a quiz from an open split.
pub fn make(split: &str, settings: &QuizSettings) -> Result<Event, WorkerError> {
    let quiz = quiz::make_quiz(&*state::split(split)?, settings).map_err(|e| e.to_string())?;
    Ok(Event::Quiz(quiz))
}

/// Opens a shared quiz file against an open split.
pub fn open(split: &str, json: &str) -> Result<Event, WorkerError> {
    let quiz = Quiz::open(json, &*state::split(split)?).map_err(|e| e.to_string())?;
    Ok(Event::Quiz(quiz))
}

/// Keeps the quiz in progress.
pub async fn save(saved: &SavedQuiz) -> Result<(), WorkerError> {
    // A pair, as quizzes in progress were always stored.
    let text =
        serde_json::to_string(&(&saved.results, saved.position)).map_err(|e| e.to_string())?;
    Ok(quiz_dir().await?.write_text(QUIZ_FILE, &text).await?)
}

/// The quiz in progress, if any.
pub async fn load() -> Result<Event, WorkerError> {
    let dir = quiz_dir().await?;
    let saved = if dir.has_file(QUIZ_FILE).await {
        // A damaged file is dropped rather than blocking the panel.
        serde_json::from_str::<(QuizResults, usize)>(&dir.read_text(QUIZ_FILE).await?)
            .ok()
            .map(|(results, position)| SavedQuiz { results, position })
    } else {
        None
    };
    Ok(Event::SavedQuiz { saved })
}

/// Forgets the quiz in progress.
pub async fn clear() -> Result<(), WorkerError> {
    let dir = quiz_dir().await?;
    if dir.has_file(QUIZ_FILE).await {
        dir.remove(QUIZ_FILE).await?;
    }
    Ok(())
}

/// Scores a student's results; with `export`, also posts them as a file to save.
pub fn report(
    out: Replies,
    split: &str,
    results: &QuizResults,
    export: Option<QuizExport>,
) -> Result<(), WorkerError> {
    let s = state::split(split)?;
    let report = quiz::report(&s, results).map_err(|e| e.to_string())?;
    if let Some(format) = export {
        let file = format
            .export(&s, &report, results)
            .map_err(|e| e.to_string())?;
        out.post(Event::Export(file));
    }
    out.post(Event::QuizReport(Box::new(report)));
    Ok(())
}

/// Merges students' result files `(name, JSON)` into a reader-study table.
pub fn reader_study(split: &str, files: &[(String, String)]) -> Result<Event, WorkerError> {
    let study = quiz::reader_study(&*state::split(split)?, files).map_err(|e| e.to_string())?;
    Ok(Event::ReaderStudy(study))
}
