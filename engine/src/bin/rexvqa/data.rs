//! `rexvqa synth`, `synth-model` and `unpack`: the files the other subcommands read, made or
//! unpacked.

use std::path::PathBuf;

use clap::Args;
use rexvqa_engine::gguf::{FileSource, Gguf};
use rexvqa_engine::rexvqa::Split;
use rexvqa_engine::rexvqa::synth::{SynthOptions, generate};

use crate::common::err;

#[derive(Args)]
pub struct SynthArgs {
    /// Output folder (receives deid_png/ and metadata/).
    #[arg(long)]
    pub out: PathBuf,
    /// Number of studies.
    #[arg(long, default_value_t = 8)]
    pub studies: usize,
    /// Questions per study.
    #[arg(long, default_value_t = 4)]
    pub questions_per_study: usize,
    /// Seed (same seed, same files).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Smallest image side in pixels.
    #[arg(long, default_value_t = 480)]
    pub min_size: u32,
    /// Largest image side in pixels.
    #[arg(long, default_value_t = 800)]
    pub max_size: u32,
    /// Split name for metadata/<split>_vqa_data.json.
    #[arg(long, default_value = "test")]
    pub split: String,
}

#[derive(Args)]
pub struct SynthModelArgs {
    /// Output folder.
    #[arg(long)]
    pub out: PathBuf,
    /// A Gemma 3 GGUF whose tokenizer to copy (e.g. the Gemma 3 270M fixture).
    #[arg(long)]
    pub tokenizer_from: PathBuf,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Decoder layers (MedGemma 4B has 34): fewer keep the 4B's widths, the sizes a memory pool
    /// sees, in a pair that runs in minutes on a software adapter.
    #[arg(long)]
    pub layers: Option<u64>,
    /// Vision-tower layers (MedGemma 4B has 27).
    #[arg(long)]
    pub vision_layers: Option<u64>,
}

#[derive(Args)]
pub struct UnpackArgs {
    /// Folder that receives deid_png/.
    #[arg(long)]
    pub out: PathBuf,
    /// Only the images this split file references.
    #[arg(long)]
    pub split: Option<PathBuf>,
    /// The archive parts (any order) or one .tar.zst.
    #[arg(required = true)]
    pub parts: Vec<PathBuf>,
}

/// `rexvqa synth`: a synthetic split written in the real layout.
pub fn synth(args: SynthArgs) -> Result<(), String> {
    let SynthArgs {
        out,
        studies,
        questions_per_study,
        seed,
        min_size,
        max_size,
        split,
    } = args;
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
    Ok(())
}

/// `rexvqa synth-model`: the synthetic MedGemma-4B-shaped GGUF pair.
pub fn synth_model(args: SynthModelArgs) -> Result<(), String> {
    let SynthModelArgs {
        out,
        tokenizer_from,
        seed,
        layers,
        vision_layers,
    } = args;
    use rexvqa_engine::model::synthetic as syn;
    let full = syn::Shapes::medgemma_4b();
    let shapes = syn::Shapes {
        layers: layers.unwrap_or(full.layers),
        v_layers: vision_layers.unwrap_or(full.v_layers),
        ..full
    };
    if shapes.layers == 0 || shapes.v_layers == 0 {
        return Err("--layers and --vision-layers must be at least 1".into());
    }
    let mut src = FileSource::open(&tokenizer_from).map_err(|e| err(&tokenizer_from, e))?;
    let tok = Gguf::read(&mut src).map_err(|e| err(&tokenizer_from, e))?;
    std::fs::create_dir_all(&out).map_err(|e| err(&out, e))?;
    let on_tensor = &mut |name: &str, i: usize, n: usize| {
        if i.is_multiple_of(50) || i + 1 == n {
            eprintln!("{name}: {}/{n} tensors", i + 1);
        }
    };
    let paths =
        syn::write_pair(&out, &shapes, &tok, seed, on_tensor).map_err(|(path, e)| err(&path, e))?;
    for path in paths {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// `rexvqa unpack`: the archive's PNGs written out, resuming over those already there.
pub fn unpack(args: UnpackArgs) -> Result<(), String> {
    let UnpackArgs { out, split, parts } = args;
    let (out, split) = (out.as_path(), split.as_deref());
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
