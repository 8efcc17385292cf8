//! `rexvqa`: the native command line of the engine (the same session and scoring code as the
//! browser app, so its numbers are the app's numbers).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use rexvqa_engine::eval::Clock;
use rexvqa_engine::gguf::{FileSource, Gguf};
use rexvqa_engine::image::Policy;
use rexvqa_engine::session::{Mode, Session};
use rexvqa_engine::tokenizer::Tokenizer;
use rexvqa_engine::{own, picture, quant};

use crate::common::{ModelArgs, Wall, err, load_model, parse_mode, parse_policy, print_json};

mod bench;
mod common;
mod compare;
mod data;
mod evaluate;
mod merge;
mod quiz;

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
    Answer(evaluate::AnswerArgs),
    /// Evaluate a split (or part of it) and write predictions and the report; resumes from its
    /// journal (OUT.journal.jsonl) when interrupted.
    Eval(evaluate::EvalArgs),
    /// Merge the shards of one run (`eval --shard`) into the four files an unsharded `eval`
    /// writes; refuses questions answered twice, missing or not in the split.
    Merge(merge::MergeArgs),
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
    SynthModel(data::SynthModelArgs),
    /// Write a synthetic ReXVQA split (16-bit PNGs + metadata JSON) in the real layout.
    Synth(data::SynthArgs),
    /// Time a few questions on this device (whole studies, one warm-up first) and project how
    /// long the whole split takes: per-study and per-question costs, and the total (JSON).
    Calibrate(evaluate::CalibrateArgs),
    /// Unpack the PNGs of the image archive (`deid_png.part*`, a split zstd tar) into a folder;
    /// files already there with the right size are kept, so an interrupted unpack resumes.
    Unpack(data::UnpackArgs),
    /// Draw a teaching quiz (the app's Quiz tab draws the same one from the same seed); prints
    /// the quiz JSON.
    Quiz(quiz::QuizArgs),
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
    QuizReport(quiz::QuizReportArgs),
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
            // Per type in the file: how each backend multiplies it, or that it is refused.
            let mut types: Vec<_> = g.tensors.iter().map(|t| t.ty).collect();
            types.sort();
            types.dedup();
            out["decoding"] = types
                .iter()
                .map(|&ty| {
                    let d = match (quant::decoding(ty, true), quant::decoding(ty, false)) {
                        (Some(gpu), Some(cpu)) => serde_json::json!({"gpu": gpu, "cpu": cpu}),
                        _ => serde_json::json!("not supported"),
                    };
                    (ty.to_string(), d)
                })
                .collect::<serde_json::Map<_, _>>()
                .into();
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
        Command::Bench(args) => bench::bench(args)?,
        Command::BenchKernels(args) => bench::bench_kernels(args)?,
        Command::Selftest(args) => bench::selftest_command(args)?,
        Command::Compare(args) => compare::run(args)?,
        Command::Answer(args) => evaluate::answer(args)?,
        Command::Eval(args) => evaluate::eval(args)?,
        Command::Merge(args) => merge::merge(args)?,
        Command::Calibrate(args) => evaluate::calibrate(args)?,
        Command::SynthModel(args) => data::synth_model(args)?,
        Command::Synth(args) => data::synth(args)?,
        Command::Unpack(args) => data::unpack(args)?,
        Command::Quiz(args) => quiz::quiz(args)?,
        Command::QuizReport(args) => quiz::quiz_report(args)?,
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
    use crate::common::parse_counts;

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
        let Command::Calibrate(evaluate::CalibrateArgs { project, .. }) = cli.command else {
            panic!("not calibrate")
        };
        assert_eq!(project, vec![(4, 1), (8, 2)]);
    }
}
