//! What the subcommands share: the model and data arguments, loading, and writing output.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use rexvqa_engine::device::{self, BackendKind};
use rexvqa_engine::eval::{Clock, ImageStore, Settings};
use rexvqa_engine::gguf::FileSource;
use rexvqa_engine::image::Policy;
use rexvqa_engine::rexvqa::{Split, folder};
use rexvqa_engine::session::{LoadOptions, Mode, Model};

/// The model pair and where it runs.
#[derive(Args)]
pub struct ModelArgs {
    /// The text GGUF (gemma3).
    #[arg(long)]
    pub model: PathBuf,
    /// The mmproj GGUF (clip with the gemma3 projector); needed for images.
    #[arg(long)]
    pub mmproj: Option<PathBuf>,
    /// cpu (burn-flex) or wgpu (Vulkan/Metal/DX12).
    #[arg(long, default_value = "cpu", value_parser = parse_backend)]
    pub backend: BackendKind,
}

/// A split file, its images, and how questions are asked.
#[derive(Args)]
pub struct DataArgs {
    /// A split file (metadata/<split>_vqa_data.json).
    #[arg(long)]
    pub split: PathBuf,
    /// The folder holding deid_png/ (default: the split file's grandparent).
    #[arg(long)]
    pub root: Option<PathBuf>,
    /// fast (option logits) or official (greedy decoding + official extraction).
    #[arg(long, default_value = "fast", value_parser = parse_mode)]
    pub mode: Mode,
    /// 16→8-bit mapping: scale, minmax or pillow-clamp.
    #[arg(long, default_value = "scale", value_parser = parse_policy)]
    pub policy: Policy,
    /// Use every view of a study instead of only the first image (the official protocol).
    #[arg(long)]
    pub all_images: bool,
    /// Answer a question none of whose images can be used, text only (by default it is listed
    /// as unanswerable and left out of accuracy).
    #[arg(long)]
    pub answer_without_image: bool,
}

pub fn parse_backend(s: &str) -> Result<BackendKind, String> {
    BackendKind::parse(s).ok_or_else(|| format!("{s:?}: use cpu or wgpu"))
}

pub fn parse_mode(s: &str) -> Result<Mode, String> {
    match s {
        "fast" => Ok(Mode::Fast),
        "official" => Ok(Mode::Official),
        _ => Err(format!("{s:?}: use fast or official")),
    }
}

pub fn parse_counts(s: &str) -> Result<(usize, usize), String> {
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

pub fn parse_policy(s: &str) -> Result<Policy, String> {
    Policy::parse(s).ok_or_else(|| format!("{s:?}: use scale, minmax, pillow-clamp or window"))
}

pub fn err(path: &Path, e: impl std::fmt::Display) -> String {
    format!("{}: {e}", path.display())
}

pub fn load_model(m: &ModelArgs) -> Result<Model, String> {
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

/// Images read from the split's folder.
pub struct Folder(pub PathBuf);

impl ImageStore for Folder {
    async fn read(&self, path: &str) -> Result<Vec<u8>, String> {
        std::fs::read(self.0.join(path)).map_err(|e| format!("{e}"))
    }
}

/// Milliseconds since a start.
pub struct Wall(pub Instant);

impl Clock for Wall {
    fn now_ms(&self) -> f64 {
        self.0.elapsed().as_secs_f64() * 1000.0
    }
}

pub fn open_split(d: &DataArgs) -> Result<(Split, Folder), String> {
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

pub fn settings(d: &DataArgs) -> Settings {
    Settings {
        mode: d.mode,
        policy: d.policy,
        all_images: d.all_images,
        answer_without_image: d.answer_without_image,
        ..Settings::default()
    }
}

pub fn with_ext(out: &Path, ext: &str) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(ext);
    PathBuf::from(s)
}

/// Prints a report and writes it to `out` too when given.
pub fn print_json(json: &serde_json::Value, out: Option<&Path>) -> Result<(), String> {
    let text = serde_json::to_string_pretty(json).map_err(|e| e.to_string())?;
    println!("{text}");
    match out {
        Some(p) => write(p, &text),
        None => Ok(()),
    }
}

pub fn write(path: &Path, text: &str) -> Result<(), String> {
    // Write then rename, so an interrupted write never leaves half a file; the temporary name is
    // the writer's own, so two runs writing the same output never rename each other's file.
    let tmp = with_ext(path, &format!(".tmp{}", std::process::id()));
    std::fs::write(&tmp, text).map_err(|e| err(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| err(path, e))
}

/// Hex SHA-256 of a file.
pub fn file_sha256(path: &Path) -> Result<String, String> {
    let src = FileSource::open(path).map_err(|e| err(path, e))?;
    pollster::block_on(rexvqa_engine::digest::sha256(&src, |_, _| {})).map_err(|e| err(path, e))
}

/// The split's name as the app names it ([`folder::split_name`]): `test` for
/// `metadata/test_vqa_data.json`.
pub fn split_name(split: &Path) -> String {
    folder::split_name(&split.file_name().unwrap_or_default().to_string_lossy())
}
