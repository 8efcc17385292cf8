//! What requests and events carry besides plain values: stored files and runs, the model card,
//! the dataset's counts, progress of unpacking and of runs (with their states as enums), ask
//! targets, calibration and report payloads.

use std::collections::BTreeMap;

use rexvqa_engine::calibrate::Projection;
use rexvqa_engine::eval::tally::TaskTally;
use rexvqa_engine::eval::{EvalReport, Settings};
use rexvqa_engine::rexvqa::{Scope, SplitSummary};
use serde::{Deserialize, Serialize};

/// What the worker found about WebGPU.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct AdapterReport {
    /// What the page calls it ([`adapter_name`]).
    pub name: String,
    /// GPUAdapterInfo.vendor.
    pub vendor: String,
    /// GPUAdapterInfo.architecture.
    pub architecture: String,
    /// Whether the browser gave a software (fallback) adapter.
    pub fallback: bool,
    /// Whether `shader-f16` is available.
    pub shader_f16: bool,
    /// Whether `subgroups` is available.
    pub subgroups: bool,
    /// maxBufferSize in bytes.
    pub max_buffer_size: f64,
    /// maxStorageBufferBindingSize in bytes.
    pub max_storage_binding: f64,
    /// maxComputeWorkgroupStorageSize in bytes.
    pub max_workgroup_storage: f64,
    /// maxComputeInvocationsPerWorkgroup.
    pub max_invocations: f64,
    /// Every feature name the adapter lists.
    pub features: Vec<String>,
    /// Whether a device with the adapter's limits was created.
    pub device_ok: bool,
}

/// How the page names an adapter: its maker as the maker writes it, the architecture, the
/// browser's description where it gives one, and "(WebGPU)". Chrome gives only a vendor for
/// most GPUs, and a bare "nvidia" read like a missing value.
pub fn adapter_name(vendor: &str, architecture: &str, description: &str, fallback: bool) -> String {
    let maker = match vendor.trim().to_ascii_lowercase().as_str() {
        "nvidia" => "NVIDIA".to_string(),
        "amd" | "ati" => "AMD".to_string(),
        "arm" => "Arm".to_string(),
        "" => String::new(),
        v => capitalise(v),
    };
    let arch = match architecture.trim() {
        a if a.eq_ignore_ascii_case("swiftshader") => "SwiftShader".to_string(),
        a => capitalise(a),
    };
    let mut name = [maker, arch]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let description = description.trim();
    if !description.is_empty() && !name.to_lowercase().contains(&description.to_lowercase()) {
        name = if name.is_empty() {
            description.to_string()
        } else {
            format!("{name} — {description}")
        };
    }
    if name.is_empty() {
        name = "unnamed adapter".into();
    }
    let kind = if fallback {
        "WebGPU, software"
    } else {
        "WebGPU"
    };
    format!("{name} ({kind})")
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// A file kept in browser storage.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StoredFile {
    /// Name in storage.
    pub name: String,
    /// Bytes stored.
    pub size: u64,
    /// Expected size (complete when equal).
    pub expected: u64,
    /// `gemma3`, `clip` or what the header says (empty when unreadable).
    pub architecture: String,
}

/// An evaluation run kept in browser storage.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunInfo {
    /// Run id.
    pub run_id: String,
    /// Split name.
    pub split: String,
    /// Scope.
    pub scope: Scope,
    /// Settings.
    pub settings: Settings,
    /// Questions answered.
    pub answered: usize,
    /// Questions in scope (0 when unknown).
    pub total: usize,
    /// Whether every question was answered.
    pub finished: bool,
    /// Models used.
    pub model: String,
    /// Creation time (ms since epoch).
    pub created_ms: f64,
}

/// What a loaded model is.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct ModelCard {
    /// Text file name.
    pub text: String,
    /// mmproj file name.
    pub mmproj: Option<String>,
    /// `general.name` of the text file.
    pub name: String,
    /// Parameters (weights) in both files.
    pub parameters: u64,
    /// Bytes of both files.
    pub bytes: u64,
    /// Tensor count per type.
    pub types: BTreeMap<String, u64>,
    /// Per type, how the chosen backend multiplies it (`quant::decoding`).
    #[serde(default)]
    pub decoding: BTreeMap<String, String>,
    /// Decoder layers, width, heads.
    pub layers: usize,
    /// Decoder width.
    pub hidden: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Vision tower present.
    pub vision: bool,
    /// Seconds the load took.
    pub load_s: f64,
    /// Where the model runs, and why, in words.
    pub compute: String,
    /// (label, SHA-256 hex) of each file.
    pub sha256: Vec<(String, String)>,
    /// The WebGPU self-test's verdict in words (none on the CPU).
    #[serde(default)]
    pub selftest: Option<String>,
}

/// Where the model runs.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Compute {
    /// WebGPU on a hardware adapter; the CPU when the browser offers none or only a software
    /// rasteriser (SwiftShader, llvmpipe), which is many times slower than the CPU path.
    #[default]
    Auto,
    /// WebGPU, whatever the adapter.
    Webgpu,
    /// The CPU (WebAssembly).
    Cpu,
}

impl Compute {
    /// Every choice with its label, for a select.
    pub const ALL: [(Compute, &'static str, &'static str); 3] = [
        (Compute::Auto, "auto", "Automatic (GPU if it is a real one)"),
        (Compute::Webgpu, "webgpu", "WebGPU"),
        (Compute::Cpu, "cpu", "CPU (WebAssembly)"),
    ];

    /// The short key (`auto`, `webgpu`, `cpu`).
    pub fn key(self) -> &'static str {
        Compute::ALL
            .iter()
            .find(|(c, _, _)| *c == self)
            .map_or("auto", |(_, k, _)| k)
    }

    /// The choice with this key.
    pub fn from_key(key: &str) -> Option<Compute> {
        Compute::ALL
            .iter()
            .find(|(_, k, _)| *k == key)
            .map(|(c, _, _)| *c)
    }
}

/// What the opened folder holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct DatasetSummary {
    /// Per split file: its counts.
    pub splits: BTreeMap<String, SplitSummary>,
    /// Per split: referenced images absent from the folder.
    pub missing_images: BTreeMap<String, usize>,
    /// PNG files found.
    pub png_files: usize,
    /// Problems found while reading (unreadable split files...).
    pub warnings: Vec<String>,
    /// Images unpacked from archives into browser storage.
    #[serde(default)]
    pub unpacked_images: usize,
}

/// Progress of unpacking an image archive into browser storage.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct UnpackProgress {
    /// Compressed bytes read.
    pub done_bytes: u64,
    /// Compressed bytes in all parts.
    pub total_bytes: u64,
    /// Images written this time.
    pub written: usize,
    /// Wanted images already unpacked before (kept).
    pub kept: usize,
    /// Compressed bytes per second.
    pub rate: f64,
    /// Seconds left at that rate.
    pub eta_s: f64,
    /// Where it stands.
    pub state: UnpackState,
}

/// Where an unpacking stands.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum UnpackState {
    /// Reading the archive.
    #[default]
    Running,
    /// Stopped on request.
    Cancelled,
    /// Every part read.
    Finished,
    /// Stopped by an error.
    Stopped,
}

impl UnpackState {
    /// The state's name, as the page shows it (`data-state`).
    pub fn as_str(self) -> &'static str {
        match self {
            UnpackState::Running => "running",
            UnpackState::Cancelled => "cancelled",
            UnpackState::Finished => "finished",
            UnpackState::Stopped => "stopped",
        }
    }
}

/// Where an evaluation run stands.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Answering.
    Running,
    /// Waiting to continue.
    Paused,
    /// Stopped on request (the answers so far are kept).
    Cancelled,
    /// Every question answered.
    Finished,
    /// Stopped by an error (storage full, a lost device…); the answers so far are kept and the
    /// run resumes once the cause is fixed.
    Interrupted,
}

impl RunState {
    /// The state's name, as the page shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Paused => "paused",
            RunState::Cancelled => "cancelled",
            RunState::Finished => "finished",
            RunState::Interrupted => "interrupted",
        }
    }

    /// Whether the run can still be paused, continued or cancelled.
    pub fn is_live(self) -> bool {
        matches!(self, RunState::Running | RunState::Paused)
    }
}

/// Live progress of a run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EvalProgress {
    /// Run id.
    pub run_id: String,
    /// Answered (including before a resume).
    pub done: usize,
    /// In scope.
    pub total: usize,
    /// Questions per second in this session.
    pub rate: f64,
    /// Seconds left at that rate.
    pub eta_s: f64,
    /// Per task: the running accuracy.
    pub per_task: BTreeMap<String, TaskTally>,
    /// Where it stands.
    pub state: RunState,
}

/// Which answer an ask event belongs to.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AskTarget {
    /// A question of the split.
    Question {
        /// Question id.
        id: String,
    },
    /// The user's own question about a study.
    Free,
    /// A question about the user's own images.
    Own,
}

/// One of the user's own image files, decoded in the worker. The identifying attributes live
/// only in memory, for the page's collapsible panel: nothing writes them anywhere.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OwnImage {
    /// The file name.
    pub name: String,
    /// The viewer path of its pixels (`own/<i>`), when it decoded.
    pub path: Option<String>,
    /// What the file is.
    pub info: Option<rexvqa_engine::picture::ImageInfo>,
    /// The window the viewer opens at, in sample units (the DICOM file's Window Center and
    /// Width; min–max when `None`).
    pub view_window: Option<rexvqa_engine::picture::Window>,
    /// Whether the viewer shows it inverted (DICOM MONOCHROME1: low values are white).
    pub inverted: bool,
    /// Identifying attributes (DICOM), shown on this machine only.
    pub identifying: Vec<rexvqa_engine::picture::Identifying>,
    /// Why it could not be opened.
    pub error: Option<String>,
}

/// Browser storage used and allowed, in bytes.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct StorageUsage {
    /// Bytes this origin uses.
    pub used: f64,
    /// Bytes it may use.
    pub quota: f64,
}

/// What browser storage holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CacheListing {
    /// Stored model files.
    pub models: Vec<StoredFile>,
    /// Stored runs.
    pub runs: Vec<RunInfo>,
    /// Bytes used and allowed, when the browser tells.
    pub usage: Option<StorageUsage>,
}

/// The worker's memory after a request.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct MemoryUse {
    /// `WebAssembly.Memory` buffer size in bytes; it never shrinks, so this is its peak.
    pub wasm_bytes: f64,
    /// Device memory the loaded model's pool holds (weights, caches, activations), if any.
    pub device_bytes: Option<f64>,
}

/// Run-time projections of a calibration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Projections {
    /// For the chosen scope.
    pub scope: Projection,
    /// For the whole split.
    pub split: Projection,
}

/// Progress and result of a calibration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CalibrationProgress {
    /// Questions timed so far.
    pub done: usize,
    /// Questions to time.
    pub total: usize,
    /// The projections, once finished.
    pub projections: Option<Projections>,
}

/// What a report is of.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ReportSource {
    /// A stored run (finished or not).
    Run {
        /// Run id.
        run_id: String,
    },
    /// Merged shard files.
    Merged {
        /// Questions of the split no file answered.
        missing: usize,
    },
}

impl ReportSource {
    /// How the report panel names what the report is of.
    pub fn label(&self) -> &str {
        match self {
            ReportSource::Run { run_id } => run_id,
            ReportSource::Merged { .. } => "merged",
        }
    }
}

/// A report and what it is of.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunReport {
    /// What it reports on.
    pub source: ReportSource,
    /// The report.
    pub report: EvalReport,
}

/// One side of a comparison of two runs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CompareSide {
    /// A run stored in this browser (its split must be open).
    Run {
        /// Run id.
        run_id: String,
    },
    /// An attached leaderboard predictions file.
    File {
        /// File name.
        name: String,
    },
}

#[cfg(test)]
mod tests {
    use super::adapter_name;

    #[test]
    fn adapters_are_named_as_their_makers_write_them() {
        assert_eq!(adapter_name("nvidia", "", "", false), "NVIDIA (WebGPU)");
        assert_eq!(
            adapter_name("nvidia", "hopper", "", false),
            "NVIDIA Hopper (WebGPU)"
        );
        assert_eq!(
            adapter_name("google", "swiftshader", "", true),
            "Google SwiftShader (WebGPU, software)"
        );
        assert_eq!(
            adapter_name("apple", "metal-3", "Apple M2", false),
            "Apple Metal-3 — Apple M2 (WebGPU)"
        );
        assert_eq!(
            adapter_name("intel", "gen-12lp", "Intel", false),
            "Intel Gen-12lp (WebGPU)"
        );
        assert_eq!(adapter_name("", "", "", false), "unnamed adapter (WebGPU)");
    }
}
