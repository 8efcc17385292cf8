//! `rexvqa merge`: the shards of one run (`eval --shard k/n` outputs) merged into the four
//! files an unsharded `eval` writes.

use std::path::PathBuf;

use clap::Args;
use rexvqa_engine::eval::export::{RunFacts, model_sha256, pair_name};
use rexvqa_engine::eval::merge::{ShardFiles, merge_runs};
use rexvqa_engine::eval::{self};
use rexvqa_engine::rexvqa::Split;

use crate::common::{err, file_sha256, split_name, with_ext};
use crate::evaluate::{file_name, write_run};

#[derive(Args)]
pub struct MergeArgs {
    /// The shards' predictions files (each with its SHARD.report.json beside it, and its
    /// SHARD.journal.jsonl where kept: the probabilities and timings).
    #[arg(required = true)]
    pub shards: Vec<PathBuf>,
    /// The split file the shards answered (every question must be answered exactly once).
    #[arg(long)]
    pub split: PathBuf,
    /// Predictions file to write; the report goes to OUT.report.json / .md / .csv.
    #[arg(long)]
    pub out: PathBuf,
    /// The text GGUF the shards ran, to name it and its SHA-256 in the report.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// The mmproj GGUF the shards ran.
    #[arg(long, requires = "model")]
    pub mmproj: Option<PathBuf>,
}

/// `rexvqa merge`: refuses overlapping, missing and foreign questions and shards of other
/// settings; writes the merged run and prints its summary.
pub fn merge(args: MergeArgs) -> Result<(), String> {
    let MergeArgs {
        shards,
        split: split_path,
        out,
        model,
        mmproj,
    } = args;
    let text = std::fs::read_to_string(&split_path).map_err(|e| err(&split_path, e))?;
    let split = Split::from_json(&text).map_err(|e| err(&split_path, e))?;
    let mut files = Vec::new();
    for p in &shards {
        let read = |p: &PathBuf| std::fs::read_to_string(p).map_err(|e| err(p, e));
        let report = with_ext(p, ".report.json");
        if !report.exists() {
            return Err(format!(
                "{}: no report beside it ({}): merge reads each shard's settings there (rexvqa eval writes it)",
                p.display(),
                report.display()
            ));
        }
        let journal = with_ext(p, ".journal.jsonl");
        files.push(ShardFiles {
            name: file_name(p),
            predictions: read(p)?,
            report: read(&report)?,
            journal: journal.exists().then(|| read(&journal)).transpose()?,
        });
    }
    let merged = merge_runs(&split, &files).map_err(|e| e.to_string())?;
    if merged.without_journal > 0 {
        eprintln!(
            "{} answers come from predictions files without their journal: the CSV has no probabilities or times for them",
            merged.without_journal
        );
    }
    let in_scope = split.records.len();
    let report = eval::report(&split, &merged.answers, &merged.settings, in_scope);
    let (model_name, sha256) = match &model {
        Some(m) => {
            let mm_sha = mmproj.as_deref().map(file_sha256).transpose()?;
            (
                pair_name(&file_name(m), mmproj.as_deref().map(file_name).as_deref()),
                model_sha256(file_sha256(m)?, mm_sha),
            )
        }
        None => ("not given (rexvqa merge --model)".to_string(), Vec::new()),
    };
    let app = format!(
        "rexvqa {} (merged from {} shards)",
        env!("CARGO_PKG_VERSION"),
        shards.len()
    );
    let facts = RunFacts {
        run_id: &file_name(&out),
        split_name: &split_name(&split_path),
        model: &model_name,
        model_sha256: &sha256,
        app: &app,
    };
    write_run(&split, &merged.answers, &report, &out, &facts)?;
    eprintln!("{}", report.accounting());
    let o = &report.official.overall;
    println!(
        "{}",
        serde_json::json!({"shards": shards.len(), "answered": report.answered, "in_scope": in_scope,
            "unanswerable": report.unanswerable.len(), "accuracy": o.accuracy,
            "ci": [o.ci_low, o.ci_high], "failed_extractions": report.official.failed_extractions,
            "without_journal": merged.without_journal})
    );
    Ok(())
}
