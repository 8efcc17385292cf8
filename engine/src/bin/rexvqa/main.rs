//! `rexvqa`: the native command line of the engine (the same session and scoring code as the
//! browser app, so its numbers are the app's numbers).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, Parser, Subcommand};
use rexvqa_engine::device::{self, BackendKind};
use rexvqa_engine::eval::{self, Answer, Clock, ImageStore, Settings};
use rexvqa_engine::gguf::{FileSource, Gguf};
use rexvqa_engine::image::Policy;
use rexvqa_engine::rexvqa::synth::{SynthOptions, generate};
use rexvqa_engine::rexvqa::{Scope, Split};
use rexvqa_engine::session::{LoadOptions, Mode, Model, Session};
use rexvqa_engine::tokenizer::Tokenizer;
use rexvqa_engine::{own, picture};

mod bench;
mod compare;

#[derive(Parser)]
#[command(
    name = "rexvqa",
    version,
    about = "MedGemma on ReXVQA: GGUF tools, inference and scoring"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct ModelArgs {
    /// The text GGUF (gemma3).
    #[arg(long)]
    model: PathBuf,
    /// The mmproj GGUF (clip with the gemma3 projector); needed for images.
    #[arg(long)]
    mmproj: Option<PathBuf>,
    /// cpu (burn-flex) or wgpu (Vulkan/Metal/DX12).
    #[arg(long, default_value = "cpu", value_parser = parse_backend)]
    backend: BackendKind,
}

#[derive(Args)]
struct DataArgs {
    /// A split file (metadata/<split>_vqa_data.json).
    #[arg(long)]
    split: PathBuf,
    /// The folder holding deid_png/ (default: the split file's grandparent).
    #[arg(long)]
    root: Option<PathBuf>,
    /// fast (option logits) or official (greedy decoding + official extraction).
    #[arg(long, default_value = "fast", value_parser = parse_mode)]
    mode: Mode,
    /// 16→8-bit mapping: scale, minmax or pillow-clamp.
    #[arg(long, default_value = "scale", value_parser = parse_policy)]
    policy: Policy,
    /// Use every view of a study instead of only the first image (the official protocol).
    #[arg(long)]
    all_images: bool,
    /// Answer a question none of whose images can be used, text only (by default it is listed
    /// as unanswerable and left out of accuracy).
    #[arg(long)]
    answer_without_image: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Summarise a GGUF file: architecture, tensor types, metadata (arrays summarised).
    Inspect {
        /// The GGUF file.
        file: PathBuf,
        /// Print JSON (always JSON; accepted for scripts).
        #[arg(long)]
        json: bool,
        /// List every tensor with its type, shape and offset.
        #[arg(long)]
        tensors: bool,
    },
    /// Tokenise text as llama.cpp does with add_special and parse_special on.
    Tokenize {
        /// The GGUF file whose tokenizer to use.
        #[arg(long)]
        model: PathBuf,
        /// The text (special tokens such as <start_of_turn> are recognised).
        #[arg(long, conflicts_with = "text_file")]
        text: Option<String>,
        /// Read the text from a file instead.
        #[arg(long)]
        text_file: Option<PathBuf>,
        /// Print JSON (always JSON; accepted for scripts).
        #[arg(long)]
        json: bool,
        /// Do not prepend BOS even when the file asks for it.
        #[arg(long)]
        no_bos: bool,
    },
    /// Top-K logits at the last position of a rendered prompt.
    Logits {
        #[command(flatten)]
        m: ModelArgs,
        /// PNG images, in the order of the <start_of_image> markers.
        #[arg(long)]
        image: Vec<PathBuf>,
        /// Rendered prompt with special tokens written literally (<bos> gives id 2; no other BOS is added).
        #[arg(long, conflicts_with = "prompt_file")]
        prompt: Option<String>,
        /// Read the prompt from a file instead.
        #[arg(long)]
        prompt_file: Option<PathBuf>,
        /// How many logits to print.
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// 16→8-bit mapping for 16-bit PNGs.
        #[arg(long, default_value = "scale", value_parser = parse_policy)]
        policy: Policy,
        /// Print JSON (always JSON; accepted for scripts).
        #[arg(long)]
        json: bool,
    },
    /// Answer one ReXVQA question.
    Answer {
        #[command(flatten)]
        m: ModelArgs,
        #[command(flatten)]
        d: DataArgs,
        /// The question id (a key of the split file).
        #[arg(long)]
        id: String,
    },
    /// Evaluate a split (or part of it) and write predictions and the report; resumes from its
    /// journal (OUT.journal.jsonl) when interrupted.
    Eval {
        #[command(flatten)]
        m: ModelArgs,
        #[command(flatten)]
        d: DataArgs,
        /// Only the first N questions (in evaluation order).
        #[arg(long, conflicts_with_all = ["stratified", "shard"])]
        limit: Option<usize>,
        /// N questions per task, drawn with --seed.
        #[arg(long, conflicts_with = "shard")]
        stratified: Option<usize>,
        /// Seed of the stratified draw.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Shard k/n (whole studies per shard).
        #[arg(long)]
        shard: Option<String>,
        /// Predictions file (leaderboard JSON); the report goes to OUT.report.json / .md / .csv.
        #[arg(long)]
        out: PathBuf,
    },
    /// Time image encoding, prefill, decoding and questions; print and write JSON.
    Bench(bench::BenchArgs),
    /// Time every weight type at one matrix shape with every kernel and f16 form the device has
    /// (random blocks, no model needed); print and write JSON.
    BenchKernels(bench::BenchKernelsArgs),
    /// Check every kernel form the automatic choice may use on the device against the CPU
    /// reference, and a tiny model's forward against the CPU; exits non-zero when a check fails.
    Selftest(bench::SelftestArgs),
    /// Write a synthetic MedGemma-4B-shaped GGUF pair (random weights, real shapes, Q4_K_M mix,
    /// F16 mmproj) for memory and speed measurements; ~3.4 GB.
    SynthModel {
        /// Output folder.
        #[arg(long)]
        out: PathBuf,
        /// A Gemma 3 GGUF whose tokenizer to copy (e.g. the Gemma 3 270M fixture).
        #[arg(long)]
        tokenizer_from: PathBuf,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Write a synthetic ReXVQA split (16-bit PNGs + metadata JSON) in the real layout.
    Synth {
        /// Output folder (receives deid_png/ and metadata/).
        #[arg(long)]
        out: PathBuf,
        /// Number of studies.
        #[arg(long, default_value_t = 8)]
        studies: usize,
        /// Questions per study.
        #[arg(long, default_value_t = 4)]
        questions_per_study: usize,
        /// Seed (same seed, same files).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Smallest image side in pixels.
        #[arg(long, default_value_t = 480)]
        min_size: u32,
        /// Largest image side in pixels.
        #[arg(long, default_value_t = 800)]
        max_size: u32,
        /// Split name for metadata/<split>_vqa_data.json.
        #[arg(long, default_value = "test")]
        split: String,
    },
    /// Time a few questions on this device (whole studies, one warm-up first) and project how
    /// long the whole split takes: per-study and per-question costs, and the total (JSON).
    Calibrate {
        #[command(flatten)]
        m: ModelArgs,
        #[command(flatten)]
        d: DataArgs,
        /// Questions to time (whole studies until at least this many).
        #[arg(long, default_value_t = 20)]
        questions: usize,
        /// Seed of the study draw.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Also project the measured costs onto QUESTIONS:STUDIES (repeatable), e.g. a split
        /// that is not on this machine (the GPU kit projects the whole public test this way).
        #[arg(long, value_parser = parse_counts)]
        project: Vec<(usize, usize)>,
    },
    /// Unpack the PNGs of the image archive (`deid_png.part*`, a split zstd tar) into a folder;
    /// files already there with the right size are kept, so an interrupted unpack resumes.
    Unpack {
        /// Folder that receives deid_png/.
        #[arg(long)]
        out: PathBuf,
        /// Only the images this split file references.
        #[arg(long)]
        split: Option<PathBuf>,
        /// The archive parts (any order) or one .tar.zst.
        #[arg(required = true)]
        parts: Vec<PathBuf>,
    },
    /// Draw a teaching quiz (the app's Quiz tab draws the same one from the same seed); prints
    /// the quiz JSON.
    Quiz {
        /// The split file (metadata/<split>_vqa_data.json).
        #[arg(long)]
        split: PathBuf,
        /// Number of cases.
        #[arg(long, default_value_t = 20)]
        count: usize,
        /// Seed of the draw.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Only this task (repeatable).
        #[arg(long)]
        task: Vec<String>,
        /// Only this category (repeatable).
        #[arg(long)]
        category: Vec<String>,
    },
    /// Ask MedGemma about your own images (PNG, JPEG or DICOM; several views make one study):
    /// a free question, or a multiple-choice one (2 to 4 --option) answered as the app answers
    /// a ReXVQA question.
    Ask {
        #[command(flatten)]
        m: ModelArgs,
        /// The image files, in view order.
        #[arg(long, required = true)]
        image: Vec<PathBuf>,
        /// The question.
        #[arg(long)]
        question: String,
        /// An answer option (give 2 to 4); without options the question is free (generated).
        #[arg(long)]
        option: Vec<String>,
        /// fast (option probabilities) or official (the paper's prompt, generation and
        /// extraction); multiple-choice questions only.
        #[arg(long, default_value = "fast", value_parser = parse_mode)]
        mode: Mode,
        /// 16→8-bit mapping: window (a DICOM file's own window; min–max without one), scale,
        /// minmax or pillow-clamp. 8-bit images pass through unchanged.
        #[arg(long, default_value = "window", value_parser = parse_policy)]
        policy: Policy,
        /// Print JSON (always JSON; accepted for scripts).
        #[arg(long)]
        json: bool,
    },
    /// Describe an image file (PNG, JPEG or DICOM): size, bits stored, photometric
    /// interpretation, frames, transfer syntax, and min/max/mean of the grey values after the
    /// modality rescale. Identifying attributes are never printed.
    ImageInfo {
        /// The image file.
        file: PathBuf,
        /// Print JSON (always JSON; accepted for scripts).
        #[arg(long)]
        json: bool,
    },
    /// Compare two runs' predictions: accuracy of each, paired difference with its 95 % CI and
    /// McNemar's exact test (overall and per task), agreement, Cohen's κ, the questions that
    /// differ.
    Compare(compare::CompareArgs),
    /// Score quiz results files: one file gives the student's report, several a reader study.
    QuizReport {
        /// The split file the quizzes were drawn from.
        #[arg(long)]
        split: PathBuf,
        /// Results files exported from the app.
        files: Vec<PathBuf>,
    },
}

fn parse_backend(s: &str) -> Result<BackendKind, String> {
    BackendKind::parse(s).ok_or_else(|| format!("{s:?}: use cpu or wgpu"))
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    match s {
        "fast" => Ok(Mode::Fast),
        "official" => Ok(Mode::Official),
        _ => Err(format!("{s:?}: use fast or official")),
    }
}

fn parse_counts(s: &str) -> Result<(usize, usize), String> {
    let (q, st) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: use QUESTIONS:STUDIES"))?;
    let n = |v: &str| {
        v.trim()
            .parse::<usize>()
            .map_err(|e| format!("{s:?}: {v:?} is not a count ({e})"))
    };
    Ok((n(q)?, n(st)?))
}

fn parse_policy(s: &str) -> Result<Policy, String> {
    Policy::parse(s).ok_or_else(|| format!("{s:?}: use scale, minmax, pillow-clamp or window"))
}

fn err(path: &Path, e: impl std::fmt::Display) -> String {
    format!("{}: {e}", path.display())
}

fn load_model(m: &ModelArgs) -> Result<Model, String> {
    let dev = device::open(m.backend).map_err(|e| e.to_string())?;
    let text = FileSource::open(&m.model).map_err(|e| err(&m.model, e))?;
    let mmproj = match &m.mmproj {
        Some(p) => Some(FileSource::open(p).map_err(|e| err(p, e))?),
        None => None,
    };
    let mut last = 0u64;
    let mut progress = |p: &rexvqa_engine::model::load::Progress| {
        let pct = p.done * 100 / p.total.max(1);
        if pct >= last + 10 {
            last = pct;
            eprintln!("loading: {pct}%");
        }
    };
    pollster::block_on(Model::load(
        &text,
        mmproj.as_ref(),
        &dev,
        &LoadOptions::default(),
        &mut progress,
    ))
    .map_err(|e| e.to_string())
}

struct Folder(PathBuf);

impl ImageStore for Folder {
    async fn read(&self, path: &str) -> Result<Vec<u8>, String> {
        std::fs::read(self.0.join(path)).map_err(|e| format!("{e}"))
    }
}

/// The CLI's journal: a JSON-lines file, flushed after each group.
struct FileJournal(std::fs::File, PathBuf);

impl eval::run::Journal for FileJournal {
    async fn append(&mut self, answers: &[Answer]) -> Result<(), String> {
        let lines: String = answers.iter().map(eval::journal_line).collect();
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

struct Wall(Instant);

impl Clock for Wall {
    fn now_ms(&self) -> f64 {
        self.0.elapsed().as_secs_f64() * 1000.0
    }
}

fn open_split(d: &DataArgs) -> Result<(Split, Folder), String> {
    let text = std::fs::read_to_string(&d.split).map_err(|e| err(&d.split, e))?;
    let split = Split::from_json(&text).map_err(|e| err(&d.split, e))?;
    let root = match &d.root {
        Some(r) => r.clone(),
        None => d
            .split
            .parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_default(),
    };
    Ok((split, Folder(root)))
}

fn settings(d: &DataArgs) -> Settings {
    Settings {
        mode: d.mode,
        policy: d.policy,
        all_images: d.all_images,
        answer_without_image: d.answer_without_image,
        ..Settings::default()
    }
}

fn with_ext(out: &Path, ext: &str) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(ext);
    PathBuf::from(s)
}

/// Prints a report and writes it to `out` too when given.
fn print_json(json: &serde_json::Value, out: Option<&Path>) -> Result<(), String> {
    let text = serde_json::to_string_pretty(json).map_err(|e| e.to_string())?;
    println!("{text}");
    match out {
        Some(p) => write(p, &text),
        None => Ok(()),
    }
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    // Write then rename, so an interrupted write never leaves half a file; the temporary name is
    // the writer's own, so two runs writing the same output never rename each other's file.
    let tmp = with_ext(path, &format!(".tmp{}", std::process::id()));
    std::fs::write(&tmp, text).map_err(|e| err(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| err(path, e))
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Inspect {
            file,
            json: _,
            tensors,
        } => {
            let mut src = FileSource::open(&file).map_err(|e| err(&file, e))?;
            let g = Gguf::read(&mut src).map_err(|e| err(&file, e))?;
            let mut out = g.summary_json();
            if tensors {
                out["tensors"] = g
                    .tensors
                    .iter()
                    .map(|t| serde_json::json!({"name": t.name, "type": t.ty.to_string(), "dims": t.dims, "offset": t.offset}))
                    .collect();
            }
            println!(
                "{}",
                serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
            );
        }
        Command::Tokenize {
            model,
            text,
            text_file,
            json: _,
            no_bos,
        } => {
            let text = match (text, text_file) {
                (Some(t), _) => t,
                (None, Some(p)) => std::fs::read_to_string(&p).map_err(|e| err(&p, e))?,
                (None, None) => return Err("give --text or --text-file".into()),
            };
            let mut src = FileSource::open(&model).map_err(|e| err(&model, e))?;
            let g = Gguf::read(&mut src).map_err(|e| err(&model, e))?;
            let tok = Tokenizer::from_gguf(&g).map_err(|e| err(&model, e))?;
            println!(
                "{}",
                serde_json::json!({ "ids": tok.encode(&text, !no_bos, true) })
            );
        }
        Command::Logits {
            m,
            image,
            prompt,
            prompt_file,
            top,
            policy,
            json: _,
        } => {
            let prompt = match (prompt, prompt_file) {
                (Some(t), _) => t,
                (None, Some(p)) => std::fs::read_to_string(&p).map_err(|e| err(&p, e))?,
                (None, None) => return Err("give --prompt or --prompt-file".into()),
            };
            let model = load_model(&m)?;
            let mut feats = Vec::new();
            for p in &image {
                let png = std::fs::read(p).map_err(|e| err(p, e))?;
                let px = model.preprocess_file(&png, policy).map_err(|e| err(p, e))?;
                feats.push(model.encode_image(&px).map_err(|e| e.to_string())?);
            }
            let ids = model
                .tokenize_rendered(&prompt, image.len())
                .map_err(|e| e.to_string())?;
            let logits =
                pollster::block_on(model.last_logits(&ids, &feats)).map_err(|e| e.to_string())?;
            let mut order: Vec<usize> = (0..logits.len()).collect();
            order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
            let top: Vec<_> = order
                .iter()
                .take(top)
                .map(|&i| serde_json::json!({"id": i, "logit": logits[i]}))
                .collect();
            println!("{}", serde_json::json!({"input_ids": ids, "top": top}));
        }
        Command::Ask {
            m,
            image,
            question,
            option,
            mode,
            policy,
            json: _,
        } => ask(&m, &image, &question, &option, mode, policy)?,
        Command::ImageInfo { file, json: _ } => {
            let bytes = std::fs::read(&file).map_err(|e| err(&file, e))?;
            let name = file.file_name().unwrap_or_default().to_string_lossy();
            let pic = picture::decode_named(&name, &bytes).map_err(|e| err(&file, e))?;
            print_json(
                &serde_json::to_value(pic.info()).map_err(|e| e.to_string())?,
                None,
            )?;
        }
        Command::Answer { m, d, id } => {
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
        }
        Command::Eval {
            m,
            d,
            limit,
            stratified,
            seed,
            shard,
            out,
        } => {
            let scope = match (limit, stratified, shard) {
                (Some(n), _, _) => Scope::First(n),
                (_, Some(n), _) => Scope::Stratified { per_task: n, seed },
                (_, _, Some(s)) => Scope::parse_shard(&s).map_err(|e| e.to_string())?,
                _ => Scope::All,
            };
            let (split, folder) = open_split(&d)?;
            let s = settings(&d);
            let journal_path = with_ext(&out, ".journal.jsonl");
            // Bytes, not text: a line torn inside a character must not make the whole journal
            // unreadable.
            let saved = match std::fs::read(&journal_path) {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(err(&journal_path, e)),
            };
            let mut done = eval::read_journal(&String::from_utf8_lossy(&saved));
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
            file.set_len(eval::complete_len(&saved) as u64)
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
            let mut info = vec![
                ("text model", m.model.display().to_string()),
                ("text model SHA-256", file_sha256(&m.model)?),
            ];
            match &m.mmproj {
                Some(p) => {
                    info.push(("mmproj", p.display().to_string()));
                    info.push(("mmproj SHA-256", file_sha256(p)?));
                }
                None => info.push(("mmproj", "none".into())),
            }
            info.push(("backend", format!("{:?}", m.backend).to_lowercase()));
            info.push(("engine", format!("rexvqa {}", env!("CARGO_PKG_VERSION"))));
            write(
                &out,
                &serde_json::to_string_pretty(&eval::leaderboard(&split, &done))
                    .map_err(|e| e.to_string())?,
            )?;
            write(
                &with_ext(&out, ".report.json"),
                &serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?,
            )?;
            write(
                &with_ext(&out, ".report.md"),
                &eval::markdown(&report, &info),
            )?;
            write(&with_ext(&out, ".csv"), &eval::csv(&split, &done))?;
            let o = &report.official.overall;
            println!(
                "{}",
                serde_json::json!({"answered": report.answered, "in_scope": in_scope,
                    "rejected_records": report.rejected_records.len(), "unanswerable": report.unanswerable.len(),
                    "accuracy": o.accuracy,
                    "ci": [o.ci_low, o.ci_high], "failed_extractions": report.official.failed_extractions})
            );
        }
        Command::Bench(args) => bench::bench(args)?,
        Command::BenchKernels(args) => bench::bench_kernels(args)?,
        Command::Selftest(args) => bench::selftest_command(args)?,
        Command::SynthModel {
            out,
            tokenizer_from,
            seed,
        } => {
            use rexvqa_engine::model::synthetic as syn;
            let mut src = FileSource::open(&tokenizer_from).map_err(|e| err(&tokenizer_from, e))?;
            let tok = Gguf::read(&mut src).map_err(|e| err(&tokenizer_from, e))?;
            std::fs::create_dir_all(&out).map_err(|e| err(&out, e))?;
            let s = syn::Shapes::medgemma_4b();
            for (name, meta, tensors) in [
                (
                    "medgemma-4b-synthetic-Q4_K_M.gguf",
                    syn::text_metadata(&s, &tok),
                    syn::text_tensors(&s),
                ),
                (
                    "mmproj-medgemma-4b-synthetic-F16.gguf",
                    syn::mmproj_metadata(&s),
                    syn::mmproj_tensors(&s),
                ),
            ] {
                let path = out.join(name);
                let f = std::fs::File::create(&path).map_err(|e| err(&path, e))?;
                let mut w = std::io::BufWriter::new(f);
                syn::write(&mut w, &meta, &tensors, seed, &mut |i, n| {
                    if i % 50 == 0 || i + 1 == n {
                        eprintln!("{name}: {}/{n} tensors", i + 1);
                    }
                })
                .and_then(|()| w.flush())
                .map_err(|e| err(&path, e))?;
                eprintln!("wrote {}", path.display());
            }
        }
        Command::Quiz {
            split,
            count,
            seed,
            task,
            category,
        } => {
            let text = std::fs::read_to_string(&split).map_err(|e| err(&split, e))?;
            let s = Split::from_json(&text).map_err(|e| err(&split, e))?;
            let name = split
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix("_vqa_data.json"))
                .unwrap_or("test")
                .to_string();
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
        }
        Command::Compare(args) => compare::run(args)?,
        Command::QuizReport { split, files } => {
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
                many => {
                    serde_json::to_value(quiz::reader_study(&s, many).map_err(|e| e.to_string())?)
                }
            };
            println!(
                "{}",
                serde_json::to_string_pretty(&out.map_err(|e| e.to_string())?)
                    .map_err(|e| e.to_string())?
            );
        }
        Command::Calibrate {
            m,
            d,
            questions,
            seed,
            project,
        } => {
            let (split, folder) = open_split(&d)?;
            let model = load_model(&m)?;
            let all = split.eval_order();
            let p = pollster::block_on(rexvqa_engine::calibrate::run(
                &model,
                &split,
                &all,
                &settings(&d),
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
        }
        Command::Unpack { out, split, parts } => unpack(&out, split.as_deref(), &parts)?,
        Command::Synth {
            out,
            studies,
            questions_per_study,
            seed,
            min_size,
            max_size,
            split,
        } => {
            if min_size == 0 || min_size > max_size {
                return Err(format!(
                    "--min-size {min_size} must be between 1 and --max-size {max_size}"
                ));
            }
            let opts = SynthOptions {
                studies,
                questions_per_study,
                seed,
                size_range: (min_size, max_size),
                split,
            };
            let mut failure = None;
            let mut count = 0usize;
            generate(&opts, |f| {
                if failure.is_some() {
                    return;
                }
                let path = out.join(&f.path);
                let r = path
                    .parent()
                    .map_or(Ok(()), std::fs::create_dir_all)
                    .and_then(|()| std::fs::write(&path, &f.bytes));
                match r {
                    Ok(()) => count += 1,
                    Err(e) => failure = Some(err(&path, e)),
                }
            });
            if let Some(e) = failure {
                return Err(e);
            }
            eprintln!("wrote {count} files under {}", out.display());
        }
    }
    Ok(())
}

/// `rexvqa ask`: the user's own images and question, through the app's code ([`own`]).
fn ask(
    m: &ModelArgs,
    files: &[PathBuf],
    question: &str,
    options: &[String],
    mode: Mode,
    policy: Policy,
) -> Result<(), String> {
    let mut bytes = Vec::with_capacity(files.len());
    let mut inputs = Vec::with_capacity(files.len());
    for f in files {
        let b = std::fs::read(f).map_err(|e| err(f, e))?;
        let name = f.file_name().unwrap_or_default().to_string_lossy();
        // Decoded here first so that a bad file is named before the model loads.
        let pic = picture::decode_named(&name, &b).map_err(|e| err(f, e))?;
        inputs.push(serde_json::json!({
            "file": f.display().to_string(),
            "model_input": pic.describe_policy(policy),
        }));
        bytes.push(b);
    }
    let study = own::OwnStudy::new(bytes);
    let model = load_model(m)?;
    let mut session = Session::new(&model);
    let clock = Wall(Instant::now());
    let json = if options.is_empty() {
        let t0 = clock.now_ms();
        let text = pollster::block_on(own::ask_free(
            &mut session,
            &study,
            question,
            policy,
            &mut |_| {},
        ))
        .map_err(|e| e.to_string())?;
        serde_json::json!({
            "question": question, "policy": policy, "images": inputs, "response": text,
            "ms": clock.now_ms() - t0,
        })
    } else {
        let (r, a) = pollster::block_on(own::ask_choice(
            &mut session,
            &study,
            question,
            options,
            &own::settings(mode, policy),
            &clock,
            &mut |_| {},
        ))
        .map_err(|e| e.to_string())?;
        serde_json::json!({
            "question": r.question, "options": r.options, "mode": mode, "policy": policy,
            "images": inputs, "prediction": a.prediction, "robust_prediction": a.robust,
            "probabilities": a.probs, "response": a.response, "ms": a.ms,
        })
    };
    print_json(&json, None)
}

fn file_sha256(path: &Path) -> Result<String, String> {
    let src = FileSource::open(path).map_err(|e| err(path, e))?;
    pollster::block_on(rexvqa_engine::digest::sha256(&src, |_, _| {})).map_err(|e| err(path, e))
}

fn unpack(out: &Path, split: Option<&Path>, parts: &[PathBuf]) -> Result<(), String> {
    use rexvqa_engine::rexvqa::archive::{ImageArchive, order_parts};
    let names: Vec<String> = parts.iter().map(|p| p.display().to_string()).collect();
    let order = order_parts(&names).map_err(|e| e.to_string())?;
    let mut reader: Box<dyn std::io::Read> = Box::new(std::io::empty());
    for i in order {
        let f = std::fs::File::open(&parts[i]).map_err(|e| err(&parts[i], e))?;
        reader = Box::new(std::io::Read::chain(reader, f));
    }
    let wanted: Option<std::collections::HashSet<String>> = match split {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| err(p, e))?;
            let s = Split::from_json(&text).map_err(|e| err(p, e))?;
            Some(s.image_paths().into_iter().collect())
        }
        None => None,
    };
    let (mut written, mut kept) = (0usize, 0usize);
    let mut failure = None;
    let mut ar = ImageArchive::new(std::io::BufReader::with_capacity(1 << 20, reader));
    ar.for_each_png(
        |p| wanted.as_ref().is_none_or(|w| w.contains(p)),
        |m| {
            let path = out.join(&m.path);
            if std::fs::metadata(&path).is_ok_and(|md| md.len() == m.bytes.len() as u64) {
                kept += 1;
                return true;
            }
            // Write then rename, so a crash never leaves a short PNG that would be "kept".
            let tmp = path.with_extension(format!("png.part{}", std::process::id()));
            let r = path
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::write(&tmp, &m.bytes))
                .and_then(|()| std::fs::rename(&tmp, &path));
            match r {
                Ok(()) => {
                    written += 1;
                    true
                }
                Err(e) => {
                    failure = Some(err(&path, e));
                    false
                }
            }
        },
    )
    .map_err(|e| e.to_string())?;
    if let Some(e) = failure {
        return Err(e);
    }
    let missing = wanted.map_or(0, |w| w.iter().filter(|p| !out.join(p).is_file()).count());
    eprintln!(
        "unpacked {written} images into {} ({kept} already there){}",
        out.display(),
        if missing > 0 {
            format!("; {missing} images the split references are not in the archive")
        } else {
            String::new()
        }
    );
    Ok(())
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibrate_project_takes_questions_and_studies() {
        assert_eq!(parse_counts("40826:9385"), Ok((40826, 9385)));
        assert_eq!(parse_counts(" 12 : 3 "), Ok((12, 3)));
        assert!(parse_counts("40826").is_err());
        assert!(parse_counts("a:1").is_err());
        assert!(parse_counts("1:-3").is_err());
        let cli = Cli::try_parse_from([
            "rexvqa",
            "calibrate",
            "--model",
            "m.gguf",
            "--split",
            "s.json",
            "--project",
            "4:1",
            "--project",
            "8:2",
        ])
        .unwrap();
        let Command::Calibrate { project, .. } = cli.command else {
            panic!("not calibrate")
        };
        assert_eq!(project, vec![(4, 1), (8, 2)]);
    }
}
