//! `rexvqa`: the native command line of the engine.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rexvqa_engine::gguf::{FileSource, Gguf};
use rexvqa_engine::rexvqa::synth::{SynthOptions, generate};
use rexvqa_engine::tokenizer::Tokenizer;

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
        /// Print JSON (the default is also JSON; the flag is accepted for scripts).
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
        /// Print JSON (default).
        #[arg(long)]
        json: bool,
        /// Do not prepend BOS even when the file asks for it.
        #[arg(long)]
        no_bos: bool,
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
}

fn open(path: &PathBuf) -> Result<(Gguf, FileSource), String> {
    let mut src = FileSource::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let g = Gguf::read(&mut src).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((g, src))
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Inspect {
            file,
            json: _,
            tensors,
        } => {
            let (g, _) = open(&file)?;
            let mut out = g.summary_json();
            if tensors {
                out["tensors"] = g
                    .tensors
                    .iter()
                    .map(|t| {
                        serde_json::json!({"name": t.name, "type": t.ty.to_string(), "dims": t.dims, "offset": t.offset})
                    })
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
                (None, Some(p)) => {
                    std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?
                }
                (None, None) => return Err("give --text or --text-file".into()),
            };
            let (g, _) = open(&model)?;
            let tok = Tokenizer::from_gguf(&g).map_err(|e| format!("{}: {e}", model.display()))?;
            let ids = tok.encode(&text, !no_bos, true);
            println!("{}", serde_json::json!({ "ids": ids }));
        }
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
            let mut err = None;
            let mut count = 0usize;
            generate(&opts, |f| {
                if err.is_some() {
                    return;
                }
                let path = out.join(&f.path);
                let r = path
                    .parent()
                    .map_or(Ok(()), std::fs::create_dir_all)
                    .and_then(|()| std::fs::write(&path, &f.bytes));
                match r {
                    Ok(()) => count += 1,
                    Err(e) => err = Some(format!("{}: {e}", path.display())),
                }
            });
            if let Some(e) = err {
                return Err(e);
            }
            eprintln!("wrote {count} files under {}", out.display());
        }
    }
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
