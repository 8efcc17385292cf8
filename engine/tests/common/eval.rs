//! The evaluation loop's test doubles (images, clock, journal and observer in memory), a
//! synthetic split, and the check that official replies stopped at their letter score as full
//! ones, shared by the tiny pair's tests and Gemma 3 270M's.

use rexvqa_engine::compare;
use rexvqa_engine::eval::{self, Answer, Clock, EvalReport, ImageStore, Settings};
use rexvqa_engine::image::Policy;
use rexvqa_engine::rexvqa::Split;
use rexvqa_engine::rexvqa::synth::{SynthOptions, generate};
use rexvqa_engine::session::{Mode, Model, Session};

/// Synthetic split files held in memory.
pub struct Mem(pub std::collections::HashMap<String, Vec<u8>>);

impl ImageStore for Mem {
    async fn read(&self, path: &str) -> Result<Vec<u8>, String> {
        self.0
            .get(path)
            .cloned()
            .ok_or_else(|| format!("{path}: not in the split"))
    }
}

/// A clock that never moves.
pub struct NoClock;

impl Clock for NoClock {
    fn now_ms(&self) -> f64 {
        0.0
    }
}

/// A synthetic split of one study with two questions, its images in memory, fast-mode settings.
pub fn one_study() -> (Split, Mem, Settings) {
    synthetic(1)
}

/// A synthetic split of `studies` studies of two questions each, images in memory, fast mode.
pub fn synthetic(studies: usize) -> (Split, Mem, Settings) {
    let opts = SynthOptions {
        studies,
        questions_per_study: 2,
        seed: 3,
        size_range: (64, 96),
        split: "test".into(),
    };
    let mut files = std::collections::HashMap::new();
    generate(&opts, |f| {
        files.insert(f.path.clone(), f.bytes.clone());
    });
    let split =
        Split::from_json(std::str::from_utf8(&files["metadata/test_vqa_data.json"]).unwrap())
            .unwrap();
    let settings = Settings {
        mode: Mode::Fast,
        policy: Policy::Scale,
        all_images: false,
        max_new_tokens: 8,
        answer_without_image: false,
        stop_at_letter: false,
    };
    (split, Mem(files), settings)
}

/// Answers kept in memory as a journal would keep them.
pub struct MemJournal(pub Vec<String>);

impl eval::run::Journal for MemJournal {
    async fn append(&mut self, answers: &[Answer]) -> Result<(), String> {
        self.0.extend(answers.iter().map(eval::journal_line));
        Ok(())
    }
}

/// Stops the run at the checkpoint after `after` answers.
pub struct StopAfter(pub usize);

impl eval::run::Observer for StopAfter {
    fn progress(&mut self, _: &eval::run::RunProgress<'_>) {}
    async fn checkpoint(&mut self, p: &eval::run::RunProgress<'_>) -> eval::run::Control {
        if p.done.len() >= self.0 {
            eval::run::Control::Stop
        } else {
            eval::run::Control::Go
        }
    }
}

/// Every question of `split` answered by [`eval::run::run`] under `settings`.
pub fn run_all(model: &Model, split: &Split, store: &Mem, settings: &Settings) -> Vec<Answer> {
    let mut done = Vec::new();
    let outcome = pollster::block_on(eval::run::run(
        &mut Session::new(model),
        split,
        &rexvqa_engine::rexvqa::Scope::All,
        settings,
        &mut done,
        store,
        &NoClock,
        &mut MemJournal(Vec::new()),
        &mut StopAfter(usize::MAX),
    ))
    .unwrap();
    assert_eq!(outcome, eval::run::Outcome::Finished);
    assert_eq!(done.len(), split.records.len());
    done
}

/// Official mode over every question of `split`, replies stopped at their settled letter and in
/// full, up to `base.max_new_tokens` (`base` gives the rest of the settings too): the same
/// predictions and failed extractions,
/// each stopped reply the start of the full one (the same tokens). Returns both reports (full,
/// stopped) for the caller's figures.
pub fn official_stopping_agrees(
    model: &Model,
    split: &Split,
    store: &Mem,
    base: &Settings,
) -> (EvalReport, EvalReport) {
    let settings = |stop_at_letter: bool| Settings {
        mode: Mode::Official,
        stop_at_letter,
        ..base.clone()
    };
    let full = run_all(model, split, store, &settings(false));
    let stopped = run_all(model, split, store, &settings(true));
    for (f, s) in full.iter().zip(&stopped) {
        assert_eq!(f.id, s.id);
        assert_eq!(
            f.prediction, s.prediction,
            "{}: {:?} vs {:?}",
            f.id, f.response, s.response
        );
        assert!(!f.stopped_at_letter && f.tokens > 0, "{f:?}");
        assert!(
            f.response.starts_with(&s.response),
            "{}: {:?} is not the start of {:?}",
            f.id,
            s.response,
            f.response
        );
        assert_eq!(s.stopped_at_letter, s.tokens < f.tokens, "{s:?}");
        let robust = if s.stopped_at_letter { None } else { f.robust };
        assert_eq!(s.robust, robust, "{}", s.id);
    }
    let n = split.records.len();
    let (rf, rs) = (
        eval::report(split, &full, &settings(false), n),
        eval::report(split, &stopped, &settings(true), n),
    );
    assert_eq!(rf.official, rs.official);
    assert_eq!(rf.stopped_at_letter, 0);
    // What `rexvqa compare` reads: the two runs' leaderboard files.
    let file = |name: &str, answers: &[Answer]| {
        let text = serde_json::to_string(&eval::leaderboard(split, answers)).unwrap();
        compare::read_predictions(name, &text, Some(split)).unwrap()
    };
    let c = compare::compare(&file("full.json", &full), &file("stopped.json", &stopped)).unwrap();
    assert_eq!(c.shared, n);
    assert!(c.disagreements.is_empty(), "{:?}", c.disagreements);
    println!(
        "official, {n} questions: {:.1} tokens a question in full, {:.1} stopped at the letter ({} of {n} replies stopped: {:?} tokens; {} failed extractions)",
        rf.mean_tokens,
        rs.mean_tokens,
        rs.stopped_at_letter,
        stopped.iter().map(|a| a.tokens).collect::<Vec<_>>(),
        rs.official.failed_extractions
    );
    (rf, rs)
}

/// Official mode over every question of `split` (replies stopped at their letter), each study's
/// questions answered together ([`eval::answer_together`]: one batched prefill, then each
/// reply from its own cache) and one by one: the same replies, token for token, so the same
/// predictions. Returns how many questions were answered together.
pub fn batched_official_agrees(
    model: &Model,
    split: &Split,
    store: &Mem,
    base: &Settings,
) -> usize {
    let s = Settings {
        mode: Mode::Official,
        stop_at_letter: true,
        ..base.clone()
    };
    let records: Vec<_> = split.records.iter().collect();
    let mut session = Session::new(model);
    let alone: Vec<Answer> = records
        .iter()
        .map(|r| {
            pollster::block_on(eval::answer(
                &mut session,
                r,
                &s,
                store,
                &NoClock,
                &mut |_| {},
            ))
            .unwrap()
        })
        .collect();
    let mut session = Session::new(model);
    let order: Vec<usize> = (0..records.len()).collect();
    let mut together = Vec::new();
    let mut batched = 0;
    for group in eval::study_groups(split, &order, eval::STUDY_BATCH) {
        let rs: Vec<_> = group.iter().map(|&i| records[i]).collect();
        if rs.len() > 1 {
            batched += rs.len();
        }
        together.extend(
            pollster::block_on(eval::answer_together(
                &mut session,
                &rs,
                &s,
                store,
                &NoClock,
            ))
            .unwrap(),
        );
    }
    assert_eq!(alone.len(), together.len());
    for (a, t) in alone.iter().zip(&together) {
        assert_eq!(a.id, t.id);
        assert_eq!(
            (&a.response, a.tokens, a.stopped_at_letter, a.prediction),
            (&t.response, t.tokens, t.stopped_at_letter, t.prediction),
            "{}: alone vs together",
            a.id
        );
    }
    println!(
        "official, {} questions: {batched} answered together, replies of {:?} tokens, the same alone",
        records.len(),
        together.iter().map(|a| a.tokens).collect::<Vec<_>>()
    );
    batched
}
