//! `rexvqa answer`, `eval` and `calibrate`: the evaluation loop of [`rexvqa_engine::eval`] over a
//! split on disk, with its journal beside the output file.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use rexvqa_engine::eval::export::{RunExport, RunFacts, model_sha256, pair_name};
use rexvqa_engine::eval::{self, Answer, EvalReport, Resume};
use rexvqa_engine::rexvqa::{Scope, Split, scheduler};
use rexvqa_engine::session::Session;

use crate::common::{
    DataArgs, ModelArgs, Wall, err, file_sha256, load_model, open_split, parse_counts, settings,
    split_name, with_ext, write,
};

#[derive(Args)]
pub struct AnswerArgs {
    #[command(flatten)]
    pub m: ModelArgs,
    #[command(flatten)]
    pub d: DataArgs,
    /// The question id (a key of the split file).
    #[arg(long)]
    pub id: String,
}

#[derive(Args)]
pub struct EvalArgs {
    #[command(flatten)]
    pub m: ModelArgs,
    #[command(flatten)]
    pub d: DataArgs,
    /// Only the first N questions (in evaluation order).
    #[arg(long, conflicts_with_all = ["stratified", "shard"])]
    pub limit: Option<usize>,
    /// N questions per task, drawn with --seed.
    #[arg(long, conflicts_with = "shard")]
    pub stratified: Option<usize>,
    /// Seed of the stratified draw.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Shard k/n (whole studies per shard); `auto` takes k/n from a Slurm job array, `auto/N`
    /// from a Kubernetes Indexed Job of N completions (JOB_COMPLETION_INDEX).
    #[arg(long)]
    pub shard: Option<String>,
    /// Predictions file (leaderboard JSON); the report goes to OUT.report.json / .md / .csv.
    #[arg(long)]
    pub out: PathBuf,
    /// Official mode: generate every reply in full (≤ 256 tokens or end of turn) instead of
    /// stopping once its official letter is settled. The same predictions, slower; only full
    /// replies give the robust extraction.
    #[arg(long)]
    pub full_replies: bool,
}

#[derive(Args)]
pub struct CalibrateArgs {
    #[command(flatten)]
    pub m: ModelArgs,
    #[command(flatten)]
    pub d: DataArgs,
    /// Questions to time (whole studies until at least this many).
    #[arg(long, default_value_t = 20)]
    pub questions: usize,
    /// Seed of the study draw.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Also project the measured costs onto QUESTIONS:STUDIES (repeatable), e.g. a split
    /// that is not on this machine (the GPU kit projects the whole public test this way).
    #[arg(long, value_parser = parse_counts)]
    pub project: Vec<(usize, usize)>,
    /// Official mode: generate every reply in full (≤ 256 tokens or end of turn) instead of
    /// stopping once its official letter is settled. The same predictions, slower; only full
    /// replies give the robust extraction.
    #[arg(long)]
    pub full_replies: bool,
}

/// `rexvqa answer`: one question, answered and printed as JSON.
pub fn answer(args: AnswerArgs) -> Result<(), String> {
    let AnswerArgs { m, d, id } = args;
    let (split, folder) = open_split(&d)?;
    let r = split
        .get(&id)
        .ok_or_else(|| format!("question {id:?} is not in {}", d.split.display()))?;
    let model = load_model(&m)?;
    let mut session = Session::new(&model);
    let s = settings(&d);
    let a = pollster::block_on(eval::answer(
        &mut session,
        r,
        &s,
        &folder,
        &Wall(Instant::now()),
        &mut |_| {},
    ))
    .map_err(|e| e.to_string())?;
    println!(
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({
            "id": r.id, "task": r.task.name(), "question": r.question, "options": r.options,
            "correct_answer": r.correct, "prediction": a.prediction, "robust_prediction": a.robust,
            "probabilities": a.probs, "response": a.response, "missing_images": a.missing_images, "ms": a.ms,
        }))
        .map_err(|e| e.to_string())?
    );
    Ok(())
}

/// `rexvqa eval`: the scope answered (resumed from its journal), then the four report files.
pub fn eval(args: EvalArgs) -> Result<(), String> {
    let EvalArgs {
        m,
        d,
        limit,
        stratified,
        seed,
        shard,
        out,
        full_replies,
    } = args;
    let scope = match (limit, stratified, shard) {
        (Some(n), _, _) => Scope::First(n),
        (_, Some(n), _) => Scope::Stratified { per_task: n, seed },
        (_, _, Some(s)) if scheduler::is_auto(&s) => {
            let scope = scheduler::shard_from_scheduler(&s, |v| std::env::var(v).ok())
                .map_err(|e| e.to_string())?;
            if let Scope::Shard { k, n } = scope {
                eprintln!("--shard {s}: shard {k}/{n} from the scheduler");
            }
            scope
        }
        (_, _, Some(s)) => Scope::parse_shard(&s).map_err(|e| e.to_string())?,
        _ => Scope::All,
    };
    let (split, folder) = open_split(&d)?;
    let s = scoring_settings(&d, full_replies);
    let journal_path = with_ext(&out, ".journal.jsonl");
    let saved = match std::fs::read(&journal_path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(err(&journal_path, e)),
    };
    let Resume { mut done, keep } = Resume::from_bytes(&saved);
    let in_scope = split.select(&scope).map_err(|e| e.to_string())?.len();
    if !done.is_empty() {
        eprintln!("resuming: {} of {in_scope} answered", done.len());
    }
    let model = load_model(&m)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&journal_path)
        .map_err(|e| err(&journal_path, e))?;
    file.set_len(keep as u64)
        .map_err(|e| err(&journal_path, e))?;
    let mut journal = FileJournal(file, journal_path.clone());
    pollster::block_on(eval::run::run(
        &mut Session::new(&model),
        &split,
        &scope,
        &s,
        &mut done,
        &folder,
        &Wall(Instant::now()),
        &mut journal,
        &mut StderrProgress,
    ))
    .map_err(|e| e.to_string())?;
    let report = eval::report(&split, &done, &s, in_scope);
    eprintln!("{}", report.accounting());
    let model_name = pair_name(
        &file_name(&m.model),
        m.mmproj.as_deref().map(file_name).as_deref(),
    );
    let mm_sha = m.mmproj.as_deref().map(file_sha256).transpose()?;
    let sha256 = model_sha256(file_sha256(&m.model)?, mm_sha);
    let app = format!(
        "rexvqa {} ({} backend)",
        env!("CARGO_PKG_VERSION"),
        format!("{:?}", m.backend).to_lowercase()
    );
    let facts = RunFacts {
        run_id: &file_name(&out),
        split_name: &split_name(&d.split),
        model: &model_name,
        model_sha256: &sha256,
        app: &app,
    };
    write_run(&split, &done, &report, &out, &facts)?;
    let o = &report.official.overall;
    println!(
        "{}",
        serde_json::json!({"answered": report.answered, "in_scope": in_scope,
            "rejected_records": report.rejected_records.len(), "unanswerable": report.unanswerable.len(),
            "accuracy": o.accuracy, "replies": report.settings.replies(),
            "stopped_at_letter": report.stopped_at_letter, "mean_tokens": report.mean_tokens,
            "ci": [o.ci_low, o.ci_high], "failed_extractions": report.official.failed_extractions})
    );
    Ok(())
}

/// A path's last component, as text.
pub fn file_name(p: &Path) -> String {
    p.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

/// The browser's four downloads of a run, under the CLI's names: OUT (predictions),
/// OUT.report.json, OUT.report.md and OUT.csv.
pub fn write_run(
    split: &Split,
    answers: &[Answer],
    report: &EvalReport,
    out: &Path,
    facts: &RunFacts<'_>,
) -> Result<(), String> {
    for (kind, path) in [
        (RunExport::Leaderboard, out.to_path_buf()),
        (RunExport::Report, with_ext(out, ".report.json")),
        (RunExport::Markdown, with_ext(out, ".report.md")),
        (RunExport::Csv, with_ext(out, ".csv")),
    ] {
        let file = kind
            .export(split, answers, report, facts)
            .map_err(|e| e.to_string())?;
        write(&path, &file.text)?;
    }
    Ok(())
}

/// `rexvqa calibrate`: a few whole studies timed, and the split's time projected.
pub fn calibrate(args: CalibrateArgs) -> Result<(), String> {
    let CalibrateArgs {
        m,
        d,
        questions,
        seed,
        project,
        full_replies,
    } = args;
    let (split, folder) = open_split(&d)?;
    let model = load_model(&m)?;
    let all = split.eval_order();
    let p = pollster::block_on(rexvqa_engine::calibrate::run(
        &model,
        &split,
        &all,
        &scoring_settings(&d, full_replies),
        &folder,
        &Wall(Instant::now()),
        questions,
        seed,
        &mut |k, n| eprintln!("{k}/{n} timed"),
    ))
    .map_err(|e| e.to_string())?
    .ok_or("the split has no questions to time")?;
    let mut json = serde_json::to_value(&p).map_err(|e| e.to_string())?;
    if !project.is_empty()
        && let Some(o) = json.as_object_mut()
    {
        let more: Vec<_> = project.iter().map(|&(q, s)| p.for_counts(q, s)).collect();
        o.insert(
            "projections".into(),
            serde_json::to_value(more).map_err(|e| e.to_string())?,
        );
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?
    );
    Ok(())
}

/// How `eval` and `calibrate` ask: replies stop at their settled letter unless `full_replies`.
fn scoring_settings(d: &DataArgs, full_replies: bool) -> eval::Settings {
    eval::Settings {
        stop_at_letter: !full_replies,
        ..settings(d)
    }
}

/// The CLI's journal: a JSON-lines file, flushed after each group.
struct FileJournal(std::fs::File, PathBuf);

impl eval::run::Journal for FileJournal {
    async fn append(&mut self, answers: &[Answer]) -> Result<(), String> {
        let lines = eval::journal_lines(answers);
        self.0
            .write_all(lines.as_bytes())
            .and_then(|()| self.0.flush())
            .map_err(|e| format!("{}: {e}", self.1.display()))
    }
}

/// Progress lines on stderr; the CLI runs to the end (Ctrl-C stops it, the journal resumes it).
struct StderrProgress;

impl eval::run::Observer for StderrProgress {
    fn progress(&mut self, p: &eval::run::RunProgress<'_>) {
        if p.answered_here > 0 {
            eprintln!(
                "{}/{} answered, {:.2} q/s, ETA {:.0} s",
                p.done.len(),
                p.total,
                p.rate(),
                p.eta_s()
            );
        }
    }

    async fn checkpoint(&mut self, _: &eval::run::RunProgress<'_>) -> eval::run::Control {
        eval::run::Control::Go
    }
}
