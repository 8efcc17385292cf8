//! Evaluation runs kept in browser storage: a meta file and an append-only journal per run;
//! starting, resuming, pausing and cancelling the one running; its reports and exports; merged
//! shard files; and the calibration that projects a run's time.

use std::cell::Cell;
use std::rc::Rc;

use rexvqa_engine::compare::{RunPredictions, read_predictions};
use rexvqa_engine::eval::export::{RunExport, RunFacts};
use rexvqa_engine::eval::{self, Answer, Settings, run as eval_run, tally};
use rexvqa_engine::rexvqa::{Scope, Split};
use rexvqa_engine::session::Session;
use rexvqa_engine::{calibrate, score};
use web_sys::File;

use super::error::WorkerError;
use super::reply::Replies;
use super::state::{self, EvalCtl, FileStore, PerfClock};
use crate::io::{self, Dir, opfs_root, read_blob, sleep};
use crate::protocol::{
    CalibrationProgress, EvalProgress, Event, Projections, ReportSource, RunInfo, RunReport,
    RunState,
};

/// Questions a calibration times.
const CALIBRATION_QUESTIONS: usize = 20;

async fn runs_dir() -> Result<Dir, WorkerError> {
    Ok(opfs_root().await?.dir("runs", true).await?)
}

#[derive(serde::Serialize, serde::Deserialize)]
struct RunMeta {
    split: String,
    scope: Scope,
    settings: Settings,
    model: String,
    /// The loaded files' SHA-256 (runs stored before they were recorded have none).
    #[serde(default)]
    model_sha256: Vec<(String, String)>,
    created_ms: f64,
    total: usize,
}

async fn read_run(run_id: &str) -> Result<(RunMeta, Vec<Answer>), WorkerError> {
    let (meta, journal) = read_run_bytes(run_id).await?;
    Ok((meta, eval::Resume::from_bytes(&journal).done))
}

/// A run's meta and its journal's bytes (none before its first answer). Bytes, not text: a
/// line torn inside a character must not make the whole journal unreadable.
async fn read_run_bytes(run_id: &str) -> Result<(RunMeta, Vec<u8>), WorkerError> {
    let dir = runs_dir().await?;
    let meta: RunMeta = serde_json::from_str(&dir.read_text(&format!("{run_id}.json")).await?)
        .map_err(|e| format!("run {run_id}: {e}"))?;
    let journal = match dir.blob(&format!("{run_id}.jsonl")).await {
        Ok(b) => read_blob(&b).await?,
        Err(_) => Vec::new(),
    };
    Ok((meta, journal))
}

/// The stored runs, newest first.
pub async fn list_runs() -> Result<Vec<RunInfo>, WorkerError> {
    let dir = runs_dir().await?;
    let mut out = Vec::new();
    for name in dir.names().await? {
        let Some(id) = name.strip_suffix(".json") else {
            continue;
        };
        if let Ok((m, answers)) = read_run(id).await {
            out.push(RunInfo {
                run_id: id.into(),
                finished: m.total > 0 && answers.len() >= m.total,
                answered: answers.len(),
                split: m.split,
                scope: m.scope,
                settings: m.settings,
                total: m.total,
                model: m.model,
                created_ms: m.created_ms,
            });
        }
    }
    out.sort_by(|a, b| b.created_ms.total_cmp(&a.created_ms));
    Ok(out)
}

/// Deletes a stored run.
pub async fn delete(run_id: &str) -> Result<(), WorkerError> {
    let dir = runs_dir().await?;
    // A run stopped before its first answer has no journal.
    let _ = dir.remove(&format!("{run_id}.jsonl")).await;
    Ok(dir.remove(&format!("{run_id}.json")).await?)
}

/// The browser's run journal: the run's OPFS file, flushed after each group.
struct OpfsJournal {
    file: io::SyncFile,
    /// Answers journaled so far (for the storage-full message).
    saved: usize,
}

impl eval_run::Journal for OpfsJournal {
    async fn append(&mut self, answers: &[Answer]) -> Result<(), String> {
        let lines = eval::journal_lines(answers);
        let mut bytes = lines.as_bytes();
        let mut refused = false;
        if let Some(cap) = state::with(|st| st.journal_cap) {
            let room = cap.saturating_sub(self.file.size()?) as usize;
            if room < bytes.len() {
                (bytes, refused) = (&bytes[..room], true);
            }
        }
        match self.file.append(bytes) {
            Ok(()) if refused => return Err(journal_full(self.saved).await),
            Ok(()) => {}
            // A refused append may leave part of a line; the resume rewrites the journal from
            // its complete lines, so nothing is torn or counted twice.
            Err(io::WriteError::NoSpace) => return Err(journal_full(self.saved).await),
            Err(e) => return Err(e.into()),
        }
        self.file.flush()?;
        self.saved += answers.len();
        Ok(())
    }
}

/// The storage-full message of a run, with the numbers.
async fn journal_full(saved: usize) -> String {
    format!(
        "{}: the run stopped after saving {saved} answers, which are kept. {}, then \
         resume the run: it goes on from the first answer not saved.",
        io::storage_full().await,
        io::FREE_SPACE,
    )
}

/// Posts a run's progress to the page, and pauses or stops it between groups on request.
struct PageObserver<'a> {
    out: Replies,
    run_id: &'a str,
    split: &'a Split,
    ctl: Rc<EvalCtl>,
    /// The last (rate, ETA) seen, for the final event.
    last: (f64, f64),
}

impl PageObserver<'_> {
    fn event(&self, done: &[Answer], total: usize, state: RunState) -> Event {
        Event::EvalProgress(EvalProgress {
            run_id: self.run_id.into(),
            done: done.len(),
            total,
            rate: self.last.0,
            eta_s: self.last.1,
            per_task: tally::per_task(self.split, done),
            state,
        })
    }
}

impl eval_run::Observer for PageObserver<'_> {
    fn progress(&mut self, p: &eval_run::RunProgress<'_>) {
        self.last = (p.rate(), p.eta_s());
        self.out
            .post(self.event(p.done, p.total, RunState::Running));
    }

    async fn checkpoint(&mut self, p: &eval_run::RunProgress<'_>) -> eval_run::Control {
        // Let pause/cancel messages in.
        sleep(0).await;
        if self.ctl.paused.get() {
            self.out.post(self.event(p.done, p.total, RunState::Paused));
            while self.ctl.paused.get() && !self.ctl.cancelled.get() {
                sleep(100).await;
            }
        }
        if self.ctl.cancelled.get() {
            eval_run::Control::Stop
        } else {
            eval_run::Control::Go
        }
    }
}

async fn run(out: Replies, run_id: String) -> Result<(), WorkerError> {
    let (meta, journal) = read_run_bytes(&run_id).await?;
    let eval::Resume { mut done, keep } = eval::Resume::from_bytes(&journal);
    let (model, s) = (state::model()?, state::split(&meta.split)?);
    let total = s.select(&meta.scope).map_err(|e| e.to_string())?.len();
    let dir = runs_dir().await?;
    let file = dir.open_sync(&format!("{run_id}.jsonl"), true).await?;
    // Cut a line torn by a crash or a refused write; the saved lines are never rewritten. A
    // journal that could not be read whole is left alone rather than cut.
    let stored = file.size()?;
    if stored != journal.len() as u64 {
        file.close();
        return Err(format!(
            "run {run_id}: its journal holds {stored} bytes but {} were read; not resuming",
            journal.len()
        )
        .into());
    }
    file.truncate(keep as u64)?;
    let ctl = Rc::new(EvalCtl {
        paused: Cell::new(false),
        cancelled: Cell::new(false),
    });
    state::with(|st| st.eval = Some(ctl.clone()));
    let mut journal = OpfsJournal {
        file,
        saved: done.len(),
    };
    let mut observer = PageObserver {
        out,
        run_id: &run_id,
        split: &s,
        ctl,
        last: (0.0, 0.0),
    };
    let outcome = eval_run::run(
        &mut Session::new(&model),
        &s,
        &meta.scope,
        &meta.settings,
        &mut done,
        &FileStore::current(),
        &PerfClock,
        &mut journal,
        &mut observer,
    )
    .await;
    journal.file.close();
    state::with(|st| st.eval = None);
    let end = match outcome.map_err(|e| e.to_string())? {
        eval_run::Outcome::Finished => RunState::Finished,
        eval_run::Outcome::Stopped => RunState::Cancelled,
    };
    out.post(observer.event(&done, total, end));
    out.post(report_event(
        ReportSource::Run { run_id },
        eval::report(&s, &done, &meta.settings, total),
    ));
    Ok(())
}

fn report_event(source: ReportSource, report: eval::EvalReport) -> Event {
    Event::Report(Box::new(RunReport { source, report }))
}

/// Starts a run of `scope` of an open split on the loaded model.
pub async fn start(
    out: Replies,
    split_name: String,
    scope: Scope,
    settings: Settings,
) -> Result<(), WorkerError> {
    let s = state::split(&split_name)?;
    state::model()?;
    if state::with(|st| st.eval.is_some()) {
        return Err(WorkerError::Busy(
            "an evaluation is already running: pause or cancel it first".into(),
        ));
    }
    let total = s.select(&scope).map_err(|e| e.to_string())?.len();
    let run_id = format!("run-{}", js_sys::Date::now() as u64);
    let (model, model_sha256) = state::with(|st| {
        st.loaded
            .as_ref()
            .map(|l| (l.name.clone(), l.sha256.clone()))
            .unwrap_or_default()
    });
    let meta = RunMeta {
        split: split_name,
        scope,
        settings,
        model,
        model_sha256,
        created_ms: js_sys::Date::now(),
        total,
    };
    let text = serde_json::to_string(&meta).map_err(|e| e.to_string())?;
    match runs_dir()
        .await?
        .write_text(&format!("{run_id}.json"), &text)
        .await
    {
        Ok(()) => run(out, run_id).await,
        Err(io::WriteError::NoSpace) => Err(WorkerError::StorageFull {
            usage: io::storage_full().await,
            what: "the run could not start",
            advice: io::FREE_SPACE,
            retry: "start it again",
        }),
        Err(e) => Err(e.into()),
    }
}

/// Resumes a stored run where its journal ends.
pub async fn resume(out: Replies, run_id: String) -> Result<(), WorkerError> {
    if state::with(|st| st.eval.is_some()) {
        return Err(WorkerError::Busy("an evaluation is already running".into()));
    }
    run(out, run_id).await
}

/// What the running evaluation should do after its current group.
#[derive(Debug, Clone, Copy)]
pub enum Control {
    /// Wait.
    Pause,
    /// Go on after a pause.
    Continue,
    /// Stop (the answers so far stay in the journal).
    Cancel,
}

/// Pauses, continues or cancels the running evaluation, if there is one.
pub fn control(c: Control) {
    if let Some(ctl) = state::with(|st| st.eval.clone()) {
        match c {
            Control::Pause => ctl.paused.set(true),
            Control::Continue => ctl.paused.set(false),
            Control::Cancel => ctl.cancelled.set(true),
        }
    }
}

/// The report of a stored run, finished or not.
pub async fn report(run_id: String) -> Result<Event, WorkerError> {
    let (meta, answers) = read_run(&run_id).await?;
    let s = state::split(&meta.split)?;
    let report = eval::report(&s, &answers, &meta.settings, meta.total);
    Ok(report_event(ReportSource::Run { run_id }, report))
}

/// A stored run's answers as predictions to compare, read back through its leaderboard file so
/// that the run and its download compare the same.
pub async fn predictions(run_id: &str) -> Result<RunPredictions, WorkerError> {
    let (meta, answers) = read_run(run_id).await?;
    let s = state::split(&meta.split).map_err(|e| format!("run {run_id}: {e}"))?;
    let text =
        serde_json::to_string(&eval::leaderboard(&s, &answers)).map_err(|e| e.to_string())?;
    Ok(read_predictions(
        &format!("{run_id} ({})", meta.model),
        &text,
        Some(&s),
    )?)
}

/// A stored run as a file to save.
pub async fn export(run_id: &str, format: RunExport) -> Result<Event, WorkerError> {
    let (meta, answers) = read_run(run_id).await?;
    let s = state::split(&meta.split)?;
    let report = eval::report(&s, &answers, &meta.settings, meta.total);
    let app = format!("rexvqa-web {}", env!("CARGO_PKG_VERSION"));
    let facts = RunFacts {
        run_id,
        split_name: &meta.split,
        model: &meta.model,
        model_sha256: &meta.model_sha256,
        app: &app,
    };
    let file = format
        .export(&s, &answers, &report, &facts)
        .map_err(|e| e.to_string())?;
    Ok(Event::Export(file))
}

/// The report of leaderboard prediction files (shards, `names[i]` is `list[i]`'s) merged.
pub async fn merge(
    split_name: &str,
    names: Vec<String>,
    list: Vec<File>,
) -> Result<Event, WorkerError> {
    let s = state::split(split_name)?;
    let mut texts = Vec::new();
    for (n, f) in names.into_iter().zip(list) {
        let t =
            String::from_utf8(read_blob(&f).await?).map_err(|_| format!("{n}: not UTF-8 text"))?;
        texts.push((n, t));
    }
    let merged = score::merge_shards(&s, &texts).map_err(|e| e.to_string())?;
    let preds = score::predictions_from_leaderboard(&s, &merged.predictions);
    let rep = score::report(&preds);
    let report = eval::EvalReport {
        settings: Settings::default(),
        answered: preds.len(),
        in_scope: s.records.len(),
        rejected_records: s.rejected.clone(),
        unanswerable: merged.unanswerable,
        official: rep.clone(),
        robust: rep,
        stopped_at_letter: 0,
        mean_tokens: 0.0,
        missing_images: 0,
        mean_ms: 0.0,
    };
    let missing = merged.missing.len();
    Ok(report_event(ReportSource::Merged { missing }, report))
}

/// Times [`CALIBRATION_QUESTIONS`] questions (whole studies) and projects the scope and the split.
pub async fn calibrate(
    out: Replies,
    split_name: &str,
    scope: &Scope,
    settings: &Settings,
) -> Result<(), WorkerError> {
    let (model, s) = (state::model()?, state::split(split_name)?);
    state::no_eval_running("calibrate")?;
    let indices = s.select(scope).map_err(|e| e.to_string())?;
    let p = calibrate::run(
        &model,
        &s,
        &indices,
        settings,
        &FileStore::current(),
        &PerfClock,
        CALIBRATION_QUESTIONS,
        0,
        &mut |done, total| {
            out.post(Event::Calibration(CalibrationProgress {
                done,
                total,
                projections: None,
            }))
        },
    )
    .await
    .map_err(|e| e.to_string())?
    .ok_or("the scope holds no questions")?;
    let all = s.eval_order();
    let whole = p.for_counts(all.len(), calibrate::count_studies(&s, &all));
    out.post(Event::Calibration(CalibrationProgress {
        done: p.timed,
        total: p.timed,
        projections: Some(Projections {
            scope: p,
            split: whole,
        }),
    }));
    Ok(())
}
