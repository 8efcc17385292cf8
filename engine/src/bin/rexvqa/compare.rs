//! `rexvqa compare`: two prediction files on the same questions, side by side.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use rexvqa_engine::compare::{compare, read_predictions};
use rexvqa_engine::rexvqa::Split;

use crate::common::{err, write};

/// What `compare` prints.
#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    /// Tables and the questions answered differently.
    Md,
    /// One row per group: overall, then each task.
    Csv,
    /// Everything, for scripts.
    Json,
}

#[derive(Args)]
pub struct CompareArgs {
    /// Run A: a leaderboard predictions file (`rexvqa eval --out`, the app's predictions download).
    a: PathBuf,
    /// Run B, on the same questions; differences are B − A.
    b: PathBuf,
    /// The split file: task, category and ground truth from it rather than from the files.
    #[arg(long)]
    split: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "md")]
    format: Format,
    /// Also write the output to this file.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Runs `rexvqa compare`.
pub fn run(args: CompareArgs) -> Result<(), String> {
    let split = match &args.split {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| err(p, e))?;
            Some(Split::from_json(&text).map_err(|e| err(p, e))?)
        }
        None => None,
    };
    let read = |p: &PathBuf| -> Result<_, String> {
        let text = std::fs::read_to_string(p).map_err(|e| err(p, e))?;
        // The file's name, not its path: the app names a picked file so, and the two exports
        // of one comparison are then the same bytes.
        let name = p.file_name().map_or_else(
            || p.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        read_predictions(&name, &text, split.as_ref()).map_err(|e| e.to_string())
    };
    let c = compare(&read(&args.a)?, &read(&args.b)?).map_err(|e| e.to_string())?;
    let [md, csv, json] = c.exports();
    let text = match args.format {
        Format::Md => md.text,
        Format::Csv => csv.text,
        Format::Json => json.text,
    };
    print!("{text}");
    match &args.out {
        Some(p) => write(p, &text),
        None => Ok(()),
    }
}
