//! `rexvqa`: the native command line of the engine.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rexvqa_engine::gguf::{FileSource, Gguf};

#[derive(Parser)]
#[command(name = "rexvqa", version, about = "MedGemma on ReXVQA: GGUF tools, inference and scoring")]
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
}

fn open(path: &PathBuf) -> Result<(Gguf, FileSource), String> {
    let mut src = FileSource::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let g = Gguf::read(&mut src).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((g, src))
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Inspect { file, json: _, tensors } => {
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
            println!("{}", serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?);
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
