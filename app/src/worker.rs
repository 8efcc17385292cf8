//! The engine worker: owns the model, the opened dataset and the evaluation runs; receives
//! requests from the UI thread and posts events back. The UI never runs model code, so the page
//! never freezes.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::rc::Rc;

use js_sys::{Array, Object, Reflect};
use rexvqa_engine::eval::{self, Answer, Clock, ImageStore, Settings};
use rexvqa_engine::gguf::{Gguf, RangeSource};
use rexvqa_engine::image;
use rexvqa_engine::rexvqa::{Scope, Split, prompt, resolve_image_path};
use rexvqa_engine::score;
use rexvqa_engine::session::{LoadOptions, Model, Session, StudyCache};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use web_sys::{DedicatedWorkerGlobalScope, File, MessageEvent};

use crate::io::{self, BlobSource, Dir, now_ms, opfs_root, read_blob, sleep};
use crate::protocol::*;
use crate::unpack::{self, ImageIndex};

fn scope() -> DedicatedWorkerGlobalScope {
    js_sys::global().unchecked_into()
}

fn envelope(event: &Event) -> Object {
    let o = Object::new();
    let _ = Reflect::set(&o, &"json".into(), &JsValue::from_str(&event.to_json()));
    o
}

/// Posts an event to the UI thread.
pub fn post(event: &Event) {
    // A failed postMessage means the page is gone; there is nobody left to tell.
    let _ = scope().post_message(&envelope(event));
}

fn post_with_buffer(event: &Event, buffer: &js_sys::ArrayBuffer) {
    let o = envelope(event);
    let _ = Reflect::set(&o, &"buffer".into(), buffer);
    let transfer = Array::of1(buffer);
    let _ = scope().post_message_with_transfer(&o, &transfer);
}

fn fail(context: &str, message: impl ToString) {
    post(&Event::Error {
        context: context.to_string(),
        message: message.to_string(),
    });
}

/// Controls of the running evaluation.
struct EvalCtl {
    paused: Cell<bool>,
    cancelled: Cell<bool>,
}

#[derive(Default)]
struct State {
    model: Option<Rc<Model>>,
    model_name: String,
    /// Where the loaded model runs, in words.
    model_compute: String,
    /// ("text model SHA-256", hex) and the mmproj's, for reports.
    model_sha256: Vec<(String, String)>,
    files: Rc<HashMap<String, File>>,
    /// Images unpacked from archives into browser storage.
    unpacked: Rc<ImageIndex>,
    /// Set to stop the unpacking in progress.
    unpack_cancel: Option<Rc<Cell<bool>>>,
    /// The opened folder's counts (missing images are recomputed from it).
    summary: DatasetSummary,
    splits: BTreeMap<String, Rc<Split>>,
    eval: Option<Rc<EvalCtl>>,
    compute: Compute,
    /// The last probe: adapter name and whether it is a software rasteriser; None if WebGPU
    /// is unusable.
    adapter: Option<Option<(String, bool)>>,
    /// The last asked study (split and study key) and what its questions share: a second
    /// question reuses the first's image features and prompt prefix instead of encoding again.
    study: Option<(String, StudyCache)>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

/// The opened folder's files, then the images unpacked from archives.
struct FileStore(Rc<HashMap<String, File>>, Rc<ImageIndex>);

impl FileStore {
    fn current() -> Self {
        STATE.with(|s| {
            let s = s.borrow();
            FileStore(s.files.clone(), s.unpacked.clone())
        })
    }

    fn has(&self, path: &str) -> bool {
        self.0.contains_key(path) || self.1.contains(path)
    }
}

impl ImageStore for FileStore {
    async fn read(&self, path: &str) -> Result<Vec<u8>, String> {
        match self.0.get(path) {
            Some(f) => read_blob(f).await,
            None if self.1.contains(path) => unpack::read_image(&self.1, path).await,
            None => Err(format!(
                "{path} is not in the opened folder nor among the unpacked images"
            )),
        }
    }
}

struct PerfClock;

impl Clock for PerfClock {
    fn now_ms(&self) -> f64 {
        now_ms()
    }
}

/// The cache of the study `key` if it was the last one asked about, else an empty one.
fn take_study(key: &str) -> StudyCache {
    STATE.with(|s| match s.borrow_mut().study.take() {
        Some((k, c)) if k == key => c,
        _ => StudyCache::default(),
    })
}

/// Keeps `session`'s cache as the study `key`'s for the next question.
fn keep_study(key: String, session: Session<'_>) {
    let cache = session.into_cache();
    STATE.with(|s| s.borrow_mut().study = Some((key, cache)));
}

fn study_key(split_name: &str, r: &rexvqa_engine::rexvqa::Record) -> String {
    format!("{split_name}\u{0}{}", r.study_key())
}

/// The worker's WebAssembly memory in bytes; it never shrinks, so this is also its peak.
fn wasm_heap_bytes() -> Option<f64> {
    wasm_bindgen::memory()
        .dyn_into::<js_sys::WebAssembly::Memory>()
        .ok()
        .and_then(|m| m.buffer().dyn_into::<js_sys::ArrayBuffer>().ok())
        .map(|b| f64::from(b.byte_length()))
}

fn model() -> Result<Rc<Model>, String> {
    STATE
        .with(|s| s.borrow().model.clone())
        .ok_or_else(|| "load a model first (Model panel)".to_string())
}

fn split(name: &str) -> Result<Rc<Split>, String> {
    STATE
        .with(|s| s.borrow().splits.get(name).cloned())
        .ok_or_else(|| format!("split {name:?} is not open: open the dataset folder first"))
}

async fn models_dir() -> Result<Dir, String> {
    opfs_root().await?.dir("models", true).await
}

async fn runs_dir() -> Result<Dir, String> {
    opfs_root().await?.dir("runs", true).await
}

/// The quiz in progress: `(results, current case)` as JSON.
const QUIZ_FILE: &str = "current.json";

async fn quiz_dir() -> Result<Dir, String> {
    opfs_root().await?.dir("quizzes", true).await
}

/// A storage-safe file name.
fn safe_name(name: &str) -> String {
    let n: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if n.is_empty() { "model.gguf".into() } else { n }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct FileMeta {
    expected: u64,
    architecture: String,
    source: String,
    /// SHA-256 of the complete file, computed at its first load.
    #[serde(default)]
    sha256: Option<String>,
}

/// The stored file's SHA-256: from its meta file, or computed now (with progress) and kept.
async fn stored_sha256(dir: &Dir, name: &str, src: &impl RangeSource) -> Result<String, String> {
    let meta_name = format!("{name}.meta.json");
    let mut meta: FileMeta = match dir.read_text(&meta_name).await {
        Ok(t) => serde_json::from_str(&t).map_err(|e| format!("{meta_name}: {e}"))?,
        Err(_) => FileMeta {
            expected: src.size(),
            architecture: String::new(),
            source: String::new(),
            sha256: None,
        },
    };
    if let Some(h) = meta.sha256.as_ref().filter(|_| meta.expected == src.size()) {
        return Ok(h.clone());
    }
    let t0 = now_ms();
    let mut last = 0.0;
    let hash = rexvqa_engine::digest::sha256(src, |done, total| {
        let now = now_ms();
        if now - last > 200.0 || done == total {
            last = now;
            post(&Event::Copy {
                name: format!("{name} (SHA-256)"),
                done,
                total,
                rate: done as f64 / ((now - t0) / 1000.0).max(1e-3),
            });
        }
    })
    .await
    .map_err(|e| format!("{name}: {e}"))?;
    meta.sha256 = Some(hash.clone());
    dir.write_text(
        &meta_name,
        &serde_json::to_string(&meta).map_err(|e| e.to_string())?,
    )
    .await?;
    Ok(hash)
}

async fn list_cache() -> Result<Event, String> {
    let dir = models_dir().await?;
    let mut models = Vec::new();
    for name in dir.names().await? {
        if name.ends_with(".meta.json") {
            continue;
        }
        let size = dir.blob(&name).await.map(|b| b.size() as u64).unwrap_or(0);
        let meta: Option<FileMeta> = match dir.read_text(&format!("{name}.meta.json")).await {
            Ok(t) => serde_json::from_str(&t).ok(),
            Err(_) => None,
        };
        models.push(StoredFile {
            name,
            size,
            expected: meta.as_ref().map_or(size, |m| m.expected),
            architecture: meta.map(|m| m.architecture).unwrap_or_default(),
        });
    }
    let runs = list_runs().await.unwrap_or_default();
    let usage = storage_estimate().await;
    Ok(Event::Cache {
        models,
        runs,
        usage,
    })
}

/// The origin's storage usage and quota in bytes (`navigator.storage.estimate()`), if given.
async fn storage_estimate() -> Option<(f64, f64)> {
    let storage = Reflect::get(
        &Reflect::get(&js_sys::global(), &"navigator".into()).unwrap_or_default(),
        &"storage".into(),
    )
    .unwrap_or_default();
    let est = io::call_async(&storage, "estimate", &[]).await.ok()?;
    let g = |k: &str| Reflect::get(&est, &k.into()).ok().and_then(|v| v.as_f64());
    g("usage").zip(g("quota"))
}

/// How a stored copy names the file it came from (name and modification time).
fn file_source(file: &File) -> String {
    format!("{}|{}", file.name(), file.last_modified())
}

/// Bytes of `file` already stored as `name` by an earlier, interrupted copy of the same file.
async fn copied_before(dir: &Dir, name: &str, file: &File) -> u64 {
    let prev: Option<FileMeta> = match dir.read_text(&format!("{name}.meta.json")).await {
        Ok(t) => serde_json::from_str(&t).ok(),
        Err(_) => None,
    };
    let same =
        prev.is_some_and(|p| p.source == file_source(file) && p.expected == file.size() as u64);
    match dir.blob(name).await {
        Ok(b) if same => (b.size() as u64).min(file.size() as u64),
        _ => 0,
    }
}

/// Refuses, before any byte is written, a copy of `files` (as the names they get) that does not
/// fit in the origin's quota.
async fn check_room(dir: &Dir, files: &[(String, &File)]) -> Result<(), String> {
    let mut need = 0;
    for (name, f) in files {
        need += (f.size() as u64).saturating_sub(copied_before(dir, name, f).await);
    }
    let Some((usage, quota)) = storage_estimate().await else {
        return Ok(());
    };
    rexvqa_engine::storage::check_room("the model files", need, usage as u64, quota as u64)
        .map_err(|e| e.to_string())
}

/// The headers of a text GGUF and its optional mmproj.
async fn read_headers(
    text: &impl RangeSource,
    mmproj: Option<&impl RangeSource>,
) -> Result<(Gguf, Option<Gguf>), String> {
    let g = Gguf::read_async(text)
        .await
        .map_err(|e| format!("text model: {e}"))?;
    let vg = match mmproj {
        Some(m) => Some(
            Gguf::read_async(m)
                .await
                .map_err(|e| format!("mmproj: {e}"))?,
        ),
        None => None,
    };
    Ok((g, vg))
}

/// Checks a header before anything is copied: the right architecture and a matching pair.
async fn check_pair(
    text: &impl RangeSource,
    mmproj: Option<&impl RangeSource>,
) -> Result<(String, String), String> {
    let (g, vg) = read_headers(text, mmproj).await?;
    check_headers(&g, vg.as_ref())
}

/// [`check_pair`] on headers already read.
fn check_headers(g: &Gguf, vg: Option<&Gguf>) -> Result<(String, String), String> {
    let cfg =
        rexvqa_engine::model::TextConfig::from_gguf(g).map_err(|e| format!("text model: {e}"))?;
    let mut mm_arch = String::new();
    if let Some(vg) = vg {
        rexvqa_engine::model::VisionConfig::from_gguf(vg).map_err(|e| format!("mmproj: {e}"))?;
        let out = vg
            .tensor("mm.input_projection.weight")
            .map(|t| t.dims[0] as usize)
            .unwrap_or(0);
        if out != cfg.hidden {
            return Err(format!(
                "the mmproj projects to width {out} but the text model is {} wide: they are not a pair",
                cfg.hidden
            ));
        }
        mm_arch = "clip".into();
    }
    Ok(("gemma3".into(), mm_arch))
}

/// Copies `file` into storage as `name`, continuing a partial copy of the same file.
async fn store_file(dir: &Dir, name: &str, file: &File, arch: &str) -> Result<(), String> {
    let total = file.size() as u64;
    let meta = FileMeta {
        expected: total,
        architecture: arch.into(),
        source: file_source(file),
        sha256: None,
    };
    let mut done = copied_before(dir, name, file).await;
    dir.write_text(
        &format!("{name}.meta.json"),
        &serde_json::to_string(&meta).map_err(|e| e.to_string())?,
    )
    .await?;
    let out = dir.open_sync(name, true).await?;
    done = done.min(out.size()?);
    out.truncate(done)?;
    let t0 = now_ms();
    let start = done;
    const PIECE: u64 = 8 << 20;
    while done < total {
        let end = (done + PIECE).min(total);
        let part = file
            .slice_with_f64_and_f64(done as f64, end as f64)
            .map_err(|e| crate::gpu::describe(&e))?;
        if let Err(e) = out.write_at(&read_blob(&part).await?, done) {
            out.flush()?;
            return Err(match e {
                io::WriteError::NoSpace => {
                    let (usage, quota) = storage_estimate().await.unwrap_or_default();
                    rexvqa_engine::storage::WriteRefused {
                        what: name.into(),
                        done,
                        total,
                        usage: usage as u64,
                        quota: quota as u64,
                    }
                    .to_string()
                }
                other => other.into(),
            });
        }
        done = end;
        let secs = (now_ms() - t0) / 1000.0;
        post(&Event::Copy {
            name: name.into(),
            done,
            total,
            rate: (done - start) as f64 / secs.max(1e-3),
        });
    }
    out.flush()?;
    Ok(())
}

async fn download(dir: &Dir, name: &str, url: &str, arch: &str) -> Result<(), String> {
    let prev: Option<FileMeta> = match dir.read_text(&format!("{name}.meta.json")).await {
        Ok(t) => serde_json::from_str(&t).ok(),
        Err(_) => None,
    };
    let out = dir.open_sync(name, true).await?;
    let mut done = match &prev {
        Some(p) if p.source == url => out.size()?,
        _ => 0,
    };
    out.truncate(done)?;
    let init = Object::new();
    let headers = Object::new();
    if done > 0 {
        let _ = Reflect::set(&headers, &"Range".into(), &format!("bytes={done}-").into());
    }
    let _ = Reflect::set(&init, &"headers".into(), &headers);
    let resp = io::call_async(&js_sys::global(), "fetch", &[url.into(), init.into()]).await?;
    let status = Reflect::get(&resp, &"status".into())
        .ok()
        .and_then(|v| v.as_f64())
        .unwrap_or(0.0);
    if status == 200.0 && done > 0 {
        // The server ignored the range: start over.
        done = 0;
        out.truncate(0)?;
    } else if status != 200.0 && status != 206.0 {
        return Err(format!("{url}: HTTP {status}"));
    }
    let len = Reflect::get(&resp, &"headers".into())
        .ok()
        .and_then(|h| io::call(&h, "get", &["content-length".into()]).ok())
        .and_then(|v| v.as_string())
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0);
    let total = done + len;
    let meta = FileMeta {
        expected: total,
        architecture: arch.into(),
        source: url.into(),
        sha256: None,
    };
    dir.write_text(
        &format!("{name}.meta.json"),
        &serde_json::to_string(&meta).map_err(|e| e.to_string())?,
    )
    .await?;
    let body = Reflect::get(&resp, &"body".into()).map_err(|e| crate::gpu::describe(&e))?;
    let reader = io::call(&body, "getReader", &[])?;
    let (t0, start) = (now_ms(), done);
    loop {
        let chunk = io::call_async(&reader, "read", &[]).await?;
        if Reflect::get(&chunk, &"done".into())
            .ok()
            .and_then(|v| v.as_bool())
            .unwrap_or(true)
        {
            break;
        }
        let bytes =
            js_sys::Uint8Array::new(&Reflect::get(&chunk, &"value".into()).unwrap_or_default())
                .to_vec();
        out.write_at(&bytes, done)?;
        done += bytes.len() as u64;
        post(&Event::Copy {
            name: name.into(),
            done,
            total,
            rate: (done - start) as f64 / ((now_ms() - t0) / 1000.0).max(1e-3),
        });
    }
    out.flush()?;
    Ok(())
}

/// Probes WebGPU, remembers the adapter for [`choose_device`], and returns the event.
async fn probe_gpu() -> Event {
    let ev = crate::gpu::probe().await;
    let adapter = match &ev {
        Event::Gpu(r) => {
            let name = r.name.to_lowercase();
            let software = r.fallback
                || ["swiftshader", "llvmpipe", "lavapipe"]
                    .iter()
                    .any(|s| name.contains(s));
            Some((r.name.clone(), software))
        }
        _ => None,
    };
    STATE.with(|s| s.borrow_mut().adapter = Some(adapter));
    ev
}

/// The device the next model loads on, with a sentence saying which and why.
async fn choose_device() -> Result<(rexvqa_engine::device::Device, String), String> {
    use rexvqa_engine::device;
    let (pref, known) = STATE.with(|s| (s.borrow().compute, s.borrow().adapter.clone()));
    let adapter = match known {
        Some(a) => a,
        None => {
            probe_gpu().await;
            STATE.with(|s| s.borrow().adapter.clone().flatten())
        }
    };
    let cpu = |why: &str| Ok((device::cpu(), format!("CPU (WebAssembly): {why}")));
    match (pref, adapter) {
        (Compute::Cpu, _) => cpu("chosen in the model panel"),
        (Compute::Auto, None) => cpu("this browser offers no usable WebGPU adapter"),
        (Compute::Auto, Some((name, true))) => cpu(&format!(
            "the only WebGPU adapter, {name}, is a software rasteriser and slower than the CPU"
        )),
        (_, adapter) => {
            let d = device::wgpu_async().await.map_err(|e| e.to_string())?;
            let name = adapter.map_or_else(|| "adapter unknown".to_string(), |a| a.0);
            Ok((d, format!("WebGPU ({name})")))
        }
    }
}

async fn load_stored(text: &str, mmproj: Option<&str>) -> Result<ModelCard, String> {
    let dir = models_dir().await?;
    // One source per file for headers, hash and weights: synchronous handles read straight into
    // wasm memory (no JS copy per read); they lock the files until the load is over.
    let text_src = io::OpfsSource::open(&dir, text).await?;
    let mm_src = match mmproj {
        Some(m) => Some(io::OpfsSource::open(&dir, m).await?),
        None => None,
    };
    // Each header is read once here (the tokenizer's 262k-token vocabulary is in it).
    let (text_hdr, mm_hdr) = read_headers(&text_src, mm_src.as_ref()).await?;
    check_headers(&text_hdr, mm_hdr.as_ref())?;
    let mut sha256 = vec![(
        "text model SHA-256".to_string(),
        stored_sha256(&dir, text, &text_src).await?,
    )];
    if let (Some(m), Some(src)) = (mmproj, mm_src.as_ref()) {
        sha256.push((
            "mmproj SHA-256".to_string(),
            stored_sha256(&dir, m, src).await?,
        ));
    }
    let (device, compute) = choose_device().await?;
    if !rexvqa_engine::device::queues_work(&device) {
        // wasm32 ends at 4 GiB: refuse a pair that cannot fit before allocating any of it.
        use rexvqa_engine::model::footprint::{Footprint, WASM32_MAX_BYTES};
        Footprint::cpu(&text_hdr, mm_hdr.as_ref())
            .check(WASM32_MAX_BYTES)
            .map_err(|e| e.to_string())?;
    }
    // Drop a previous model first so its GPU memory is freed before the new one loads.
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        s.model = None;
        s.study = None;
    });
    let t0 = now_ms();
    let mut last = 0.0;
    let mut progress = |p: &rexvqa_engine::model::load::Progress| {
        let now = now_ms();
        if now - last > 100.0 || p.done == p.total {
            last = now;
            post(&Event::Loading {
                done: p.done,
                total: p.total,
                tensor: p.tensor.clone(),
            });
        }
    };
    let model = Model::load(
        &text_src,
        mm_src.as_ref(),
        &device,
        &LoadOptions::default(),
        &mut progress,
    )
    .await
    .map_err(|e| e.to_string())?;
    let mut card = ModelCard {
        text: text.into(),
        mmproj: mmproj.map(String::from),
        layers: model.decoder.cfg.layers,
        hidden: model.decoder.cfg.hidden,
        vocab: model.decoder.cfg.vocab,
        vision: model.vision.is_some(),
        load_s: (now_ms() - t0) / 1000.0,
        compute,
        sha256: sha256.clone(),
        ..Default::default()
    };
    for g in std::iter::once(&text_hdr).chain(mm_hdr.as_ref()) {
        if card.name.is_empty() {
            card.name = g
                .str_opt("general.name")
                .ok()
                .flatten()
                .unwrap_or(text)
                .to_string();
        }
        card.parameters += g.tensors.iter().map(|t| t.n_elements()).sum::<u64>();
        card.bytes += g.file_size;
        for (k, v) in g.type_counts() {
            *card.types.entry(k).or_default() += v;
        }
    }
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        s.model = Some(Rc::new(model));
        s.model_sha256 = sha256;
        s.model_compute = card.compute.clone();
        s.model_name = format!(
            "{}{}",
            text,
            mmproj.map(|m| format!(" + {m}")).unwrap_or_default()
        );
    });
    Ok(card)
}

/// Runs the benchmark harness on the loaded model; the JSON matches `rexvqa bench`'s.
async fn bench(
    prefill: Vec<usize>,
    decode: usize,
    official_max_tokens: usize,
) -> Result<(), String> {
    let model = model()?;
    if STATE.with(|st| st.borrow().eval.is_some()) {
        return Err("an evaluation is running: benchmark before or after it".into());
    }
    let opts = rexvqa_engine::bench::BenchOptions {
        prefill_lengths: prefill,
        decode_tokens: decode,
        questions: 4,
        official_max_tokens,
        kernel_rows: vec![1, 256],
        kernel_reps: 3,
    };
    let r = rexvqa_engine::bench::run(&model, &opts, &PerfClock)
        .await
        .map_err(|e| e.to_string())?;
    let heap = wasm_heap_bytes();
    let (name, sha256, adapter, compute, backend) = STATE.with(|st| {
        let st = st.borrow();
        (
            st.model_name.clone(),
            st.model_sha256.clone(),
            st.adapter.clone().flatten().map(|a| a.0),
            st.compute,
            st.model_compute.clone(),
        )
    });
    let user_agent = Reflect::get(&js_sys::global(), &"navigator".into())
        .and_then(|n| Reflect::get(&n, &"userAgent".into()))
        .ok()
        .and_then(|v| v.as_string());
    let json = serde_json::json!({
        "engine": format!("rexvqa-web {}", env!("CARGO_PKG_VERSION")),
        "backend": backend,
        "compute_choice": compute.key(),
        "adapter": adapter,
        "user_agent": user_agent,
        "model": name,
        "sha256": sha256,
        "wasm_heap_bytes": heap,
        "results": r,
    });
    post(&Event::Bench {
        json: serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?,
    });
    Ok(())
}

/// Times 20 questions (whole studies) and projects the scope and the split.
async fn calibrate(split_name: &str, scope: &Scope, settings: &Settings) -> Result<(), String> {
    let (model, s) = (model()?, split(split_name)?);
    if STATE.with(|st| st.borrow().eval.is_some()) {
        return Err("an evaluation is running: calibrate before or after it".into());
    }
    let indices = s.select(scope).map_err(|e| e.to_string())?;
    let p = rexvqa_engine::calibrate::run(
        &model,
        &s,
        &indices,
        settings,
        &FileStore::current(),
        &PerfClock,
        20,
        0,
        &mut |done, total| {
            post(&Event::Calibration {
                done,
                total,
                projections: None,
            })
        },
    )
    .await
    .map_err(|e| e.to_string())?
    .ok_or("the scope holds no questions")?;
    let all = s.eval_order();
    let whole = p.for_counts(all.len(), rexvqa_engine::calibrate::count_studies(&s, &all));
    post(&Event::Calibration {
        done: p.timed,
        total: p.timed,
        projections: Some((p, whole)),
    });
    Ok(())
}

/// An attached file and its path.
type Named = (String, File);

async fn open_dataset(paths: Vec<String>, list: Vec<File>) -> Result<(), String> {
    if paths.len() != list.len() {
        return Err(format!("{} paths for {} files", paths.len(), list.len()));
    }
    let (archives, rest): (Vec<Named>, Vec<Named>) = paths
        .into_iter()
        .zip(list)
        .partition(|(p, _)| unpack::is_archive(p));
    let unpacked = Rc::new(unpack::load_index().await.unwrap_or_default());
    STATE.with(|s| s.borrow_mut().unpacked = unpacked);
    // Parts picked on their own add images to the open splits (or to none yet).
    if !rest.is_empty() || archives.is_empty() {
        let summary = index_folder(rest).await?;
        post(&Event::Dataset(summary));
    }
    if !archives.is_empty() {
        unpack_archives(archives).await?;
    }
    Ok(())
}

/// Unpacks archive parts into browser storage, then reports the dataset again.
async fn unpack_archives(parts: Vec<(String, File)>) -> Result<(), String> {
    if STATE.with(|s| s.borrow().unpack_cancel.is_some()) {
        return Err("an archive is already being unpacked: wait for it or stop it".into());
    }
    // Only what the open splits reference; every image when no split is open yet.
    let want: Option<HashSet<String>> = STATE.with(|s| {
        let s = s.borrow();
        (!s.splits.is_empty()).then(|| s.splits.values().flat_map(|sp| sp.image_paths()).collect())
    });
    let cancel = Rc::new(Cell::new(false));
    STATE.with(|s| s.borrow_mut().unpack_cancel = Some(cancel.clone()));
    let result = unpack::unpack(parts, want, cancel, |p| post(&Event::Unpack(p.clone()))).await;
    let index = unpack::load_index().await;
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        s.unpack_cancel = None;
        if let Ok(i) = &index {
            s.unpacked = Rc::new(i.clone());
        }
    });
    // Counts change whether it finished or not.
    if STATE.with(|s| !s.borrow().splits.is_empty()) {
        post(&Event::Dataset(dataset_summary()));
    }
    let done = result?;
    post(&Event::Unpack(done));
    Ok(())
}

/// The open dataset's counts as they stand.
fn dataset_summary() -> DatasetSummary {
    STATE.with(|s| {
        let s = s.borrow();
        let store = FileStore(s.files.clone(), s.unpacked.clone());
        let mut d = s.summary.clone();
        d.missing_images = s
            .splits
            .iter()
            .map(|(name, sp)| {
                let missing = sp.image_paths().iter().filter(|p| !store.has(p)).count();
                (name.clone(), missing)
            })
            .collect();
        d.unpacked_images = s.unpacked.len();
        d
    })
}

/// Indexes a picked folder (or picked JSON/PNG files) and reads its split files.
async fn index_folder(pairs: Vec<(String, File)>) -> Result<DatasetSummary, String> {
    let mut map = HashMap::new();
    for (p, f) in pairs {
        let p = p.trim_start_matches("./").to_string();
        // Paths from a folder pick start with the chosen folder's name: index both forms.
        if let Some(i) = p.find("deid_png/") {
            map.insert(p[i..].to_string(), f.clone());
        }
        map.insert(p, f);
    }
    let mut summary = DatasetSummary {
        png_files: map
            .keys()
            .filter(|k| k.ends_with(".png") && k.starts_with("deid_png/"))
            .count(),
        ..Default::default()
    };
    let mut splits = BTreeMap::new();
    let jsons: Vec<(String, File)> = map
        .iter()
        .filter(|(k, _)| k.ends_with(".json"))
        .map(|(k, f)| (k.clone(), f.clone()))
        .collect();
    for (path, f) in jsons {
        let file_name = path.rsplit('/').next().unwrap_or(&path).to_string();
        let name = file_name
            .trim_end_matches(".json")
            .trim_end_matches("_vqa_data")
            .to_string();
        let text = match read_blob(&f).await.map(String::from_utf8) {
            Ok(Ok(t)) => t,
            _ => {
                summary
                    .warnings
                    .push(format!("{path}: not readable as UTF-8 text"));
                continue;
            }
        };
        match Split::from_json(&text) {
            Ok(s) if !s.records.is_empty() => {
                summary.splits.insert(name.clone(), s.summary());
                splits.insert(name, Rc::new(s));
            }
            Ok(_) => summary
                .warnings
                .push(format!("{path}: no usable question records")),
            Err(e) => summary.warnings.push(format!("{path}: {e}")),
        }
    }
    if splits.is_empty() {
        return Err("no ReXVQA split file found: pick the folder that holds metadata/test_vqa_data.json (or valid_vqa_data.json) and deid_png/".into());
    }
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        s.files = Rc::new(map);
        s.splits = splits;
        s.study = None;
        s.summary = summary;
    });
    Ok(dataset_summary())
}

fn list_questions(
    name: &str,
    query: &str,
    task: Option<&str>,
    category: Option<&str>,
    offset: usize,
    limit: usize,
) -> Result<Event, String> {
    let s = split(name)?;
    let q = query.to_lowercase();
    let mut tasks = BTreeSet::new();
    let mut categories = BTreeSet::new();
    let mut rows = Vec::new();
    for i in s.eval_order() {
        let r = &s.records[i];
        tasks.insert(r.task.name().to_string());
        categories.insert(r.category.clone());
        if task.is_some_and(|t| t != r.task.name()) || category.is_some_and(|c| c != r.category) {
            continue;
        }
        let matches = |text: &str| text.to_lowercase().contains(&q);
        let found = q.is_empty()
            || matches(&r.id)
            || matches(&r.question)
            || matches(r.study_key())
            || r.options.iter().any(|o| matches(o));
        if !found {
            continue;
        }
        rows.push(i);
    }
    let items = rows
        .iter()
        .skip(offset)
        .take(limit)
        .map(|&i| {
            let r = &s.records[i];
            QuestionRow {
                id: r.id.clone(),
                study: r.study_key().to_string(),
                task: r.task.name().to_string(),
                category: r.category.clone(),
                question: r.question.clone(),
            }
        })
        .collect();
    Ok(Event::Questions {
        total: rows.len(),
        items,
        tasks: tasks.into_iter().collect(),
        categories: categories.into_iter().collect(),
    })
}

fn question(name: &str, id: &str) -> Result<QuestionDetail, String> {
    let s = split(name)?;
    let r = s
        .get(id)
        .ok_or_else(|| format!("question {id} is not in split {name}"))?;
    let files = FileStore::current();
    let images = r
        .image_paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let path = resolve_image_path(p).unwrap_or_default();
            ImageRef {
                present: files.has(&path),
                path,
                view: r.view_positions.get(i).cloned().unwrap_or_default(),
            }
        })
        .collect();
    Ok(QuestionDetail {
        split: name.into(),
        id: r.id.clone(),
        study: r.study_key().into(),
        task: r.task.name().into(),
        category: r.category.clone(),
        question: r.question.clone(),
        options: r.options.clone(),
        correct: r.correct,
        explanation: r.explanation.clone(),
        images,
    })
}

async fn get_image(path: &str) -> Result<(), String> {
    let bytes = FileStore::current().read(path).await?;
    let d = image::decode_png(&bytes).map_err(|e| format!("{path}: {e}"))?;
    let arr = js_sys::Uint16Array::from(&d.samples[..]);
    post_with_buffer(
        &Event::Image {
            path: path.into(),
            width: d.width,
            height: d.height,
            bits: d.bits,
            channels: d.channels,
        },
        &arr.buffer(),
    );
    Ok(())
}

async fn ask(split_name: &str, id: &str, settings: Settings) -> Result<(), String> {
    let (model, s) = (model()?, split(split_name)?);
    let r = s
        .get(id)
        .ok_or_else(|| format!("question {id} is not in split {split_name}"))?;
    let study = study_key(split_name, r);
    let mut session = Session::with_cache(&model, take_study(&study));
    let mut last = 0.0;
    let key = id.to_string();
    let a = eval::answer(
        &mut session,
        r,
        &settings,
        &FileStore::current(),
        &PerfClock,
        &mut |text| {
            let now = now_ms();
            if now - last > 80.0 {
                last = now;
                post(&Event::AskText {
                    id: key.clone(),
                    text: text.into(),
                });
            }
        },
    )
    .await
    .map_err(|e| e.to_string())?;
    keep_study(study, session);
    if let Some(p) = &a.probs {
        post(&Event::AskScores {
            id: id.into(),
            letters: rexvqa_engine::rexvqa::Letter::ALL[..p.len()].to_vec(),
            probs: p.clone(),
        });
    }
    post(&Event::AskText {
        id: id.into(),
        text: a.response.clone(),
    });
    post(&Event::AskDone {
        id: id.into(),
        answer: a,
    });
    Ok(())
}

async fn ask_free(
    split_name: &str,
    id: &str,
    text: &str,
    settings: Settings,
) -> Result<(), String> {
    let (model, s) = (model()?, split(split_name)?);
    let r = s
        .get(id)
        .ok_or_else(|| format!("question {id} is not in split {split_name}"))?;
    let study = study_key(split_name, r);
    let mut session = Session::with_cache(&model, take_study(&study));
    let (feats, missing) = eval::features(&mut session, r, &settings, &FileStore::current())
        .await
        .map_err(|e| e.to_string())?;
    if !missing.is_empty() {
        return Err(format!(
            "cannot read the study's images: {}",
            missing.join("; ")
        ));
    }
    let ids = model
        .tokenize_rendered(
            &prompt::chat(Some(prompt::SYSTEM), text, feats.len()),
            feats.len(),
        )
        .map_err(|e| e.to_string())?;
    let t0 = now_ms();
    let mut last = 0.0;
    let out = session
        .generate(&ids, &feats, 512, &mut |_, so_far| {
            let now = now_ms();
            if now - last > 80.0 {
                last = now;
                post(&Event::AskText {
                    id: "free".into(),
                    text: so_far.into(),
                });
            }
        })
        .await
        .map_err(|e| e.to_string())?;
    keep_study(study, session);
    let text = model.tokenizer.decode(&out, true);
    post(&Event::AskText {
        id: "free".into(),
        text: text.clone(),
    });
    post(&Event::AskDone {
        id: "free".into(),
        answer: Answer {
            id: "free".into(),
            prediction: None,
            robust: None,
            response: text,
            probs: None,
            missing_images: Vec::new(),
            unanswerable: None,
            ms: now_ms() - t0,
        },
    });
    Ok(())
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

async fn read_run(run_id: &str) -> Result<(RunMeta, Vec<Answer>), String> {
    let dir = runs_dir().await?;
    let meta: RunMeta = serde_json::from_str(&dir.read_text(&format!("{run_id}.json")).await?)
        .map_err(|e| format!("run {run_id}: {e}"))?;
    let journal = dir
        .read_text(&format!("{run_id}.jsonl"))
        .await
        .unwrap_or_default();
    Ok((meta, eval::read_journal(&journal)))
}

async fn list_runs() -> Result<Vec<RunInfo>, String> {
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

fn per_task(s: &Split, answers: &[Answer]) -> BTreeMap<String, (usize, usize)> {
    let mut m: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for a in answers {
        if let Some(r) = s.get(&a.id)
            && let Some(c) = r.correct
        {
            let e = m.entry(r.task.name().to_string()).or_default();
            e.0 += usize::from(a.prediction == Some(c));
            e.1 += 1;
        }
    }
    m
}

/// The browser's run journal: the run's OPFS file, flushed after each group.
struct OpfsJournal(io::SyncFile);

impl eval::run::Journal for OpfsJournal {
    async fn append(&mut self, answers: &[Answer]) -> Result<(), String> {
        let lines: String = answers.iter().map(eval::journal_line).collect();
        self.0.append(lines.as_bytes())?;
        self.0.flush()
    }
}

/// Posts a run's progress to the page, and pauses or stops it between groups on request.
struct PageObserver<'a> {
    run_id: &'a str,
    split: &'a Split,
    ctl: Rc<EvalCtl>,
    /// The last (rate, ETA) seen, for the final event.
    last: (f64, f64),
}

impl PageObserver<'_> {
    fn event(&self, done: &[Answer], total: usize, state: &str) -> Event {
        Event::EvalProgress(EvalProgress {
            run_id: self.run_id.into(),
            done: done.len(),
            total,
            rate: self.last.0,
            eta_s: self.last.1,
            per_task: per_task(self.split, done),
            state: state.into(),
        })
    }
}

impl eval::run::Observer for PageObserver<'_> {
    fn progress(&mut self, p: &eval::run::RunProgress<'_>) {
        self.last = (p.rate(), p.eta_s());
        post(&self.event(p.done, p.total, "running"));
    }

    async fn checkpoint(&mut self, p: &eval::run::RunProgress<'_>) -> eval::run::Control {
        // Let pause/cancel messages in.
        sleep(0).await;
        if self.ctl.paused.get() {
            post(&self.event(p.done, p.total, "paused"));
            while self.ctl.paused.get() && !self.ctl.cancelled.get() {
                sleep(100).await;
            }
        }
        if self.ctl.cancelled.get() {
            eval::run::Control::Stop
        } else {
            eval::run::Control::Go
        }
    }
}

async fn run_eval(run_id: String) -> Result<(), String> {
    let (meta, mut done) = read_run(&run_id).await?;
    let (model, s) = (model()?, split(&meta.split)?);
    let total = s.select(&meta.scope).map_err(|e| e.to_string())?.len();
    let dir = runs_dir().await?;
    // Rewrite the journal from its complete lines, so a line torn by a crash cannot corrupt
    // the appends that follow.
    let file = dir.open_sync(&format!("{run_id}.jsonl"), true).await?;
    file.truncate(0)?;
    let text: String = done.iter().map(eval::journal_line).collect();
    file.write_at(text.as_bytes(), 0)?;
    file.flush()?;
    let ctl = Rc::new(EvalCtl {
        paused: Cell::new(false),
        cancelled: Cell::new(false),
    });
    STATE.with(|st| st.borrow_mut().eval = Some(ctl.clone()));
    let mut journal = OpfsJournal(file);
    let mut observer = PageObserver {
        run_id: &run_id,
        split: &s,
        ctl,
        last: (0.0, 0.0),
    };
    let outcome = eval::run::run(
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
    journal.0.close();
    STATE.with(|st| st.borrow_mut().eval = None);
    let state = match outcome.map_err(|e| e.to_string())? {
        eval::run::Outcome::Finished => "finished",
        eval::run::Outcome::Stopped => "cancelled",
    };
    post(&observer.event(&done, total, state));
    post(&Event::Report {
        run_id: run_id.clone(),
        report: eval::report(&s, &done, &meta.settings, total),
        missing: 0,
    });
    Ok(())
}

async fn start_eval(split_name: String, scope: Scope, settings: Settings) -> Result<(), String> {
    let s = split(&split_name)?;
    model()?;
    if STATE.with(|st| st.borrow().eval.is_some()) {
        return Err("an evaluation is already running: pause or cancel it first".into());
    }
    let total = s.select(&scope).map_err(|e| e.to_string())?.len();
    let run_id = format!("run-{}", js_sys::Date::now() as u64);
    let meta = RunMeta {
        split: split_name,
        scope,
        settings,
        model: STATE.with(|st| st.borrow().model_name.clone()),
        model_sha256: STATE.with(|st| st.borrow().model_sha256.clone()),
        created_ms: js_sys::Date::now(),
        total,
    };
    runs_dir()
        .await?
        .write_text(
            &format!("{run_id}.json"),
            &serde_json::to_string(&meta).map_err(|e| e.to_string())?,
        )
        .await?;
    run_eval(run_id).await
}

async fn export(run_id: &str, format: &str) -> Result<Event, String> {
    let (meta, answers) = read_run(run_id).await?;
    let s = split(&meta.split)?;
    let report = eval::report(&s, &answers, &meta.settings, meta.total);
    let (ext, mime, text) = match format {
        "leaderboard" => (
            "predictions.json",
            "application/json",
            serde_json::to_string_pretty(&eval::leaderboard(&s, &answers))
                .map_err(|e| e.to_string())?,
        ),
        "csv" => ("answers.csv", "text/csv", eval::csv(&s, &answers)),
        "markdown" => (
            "report.md",
            "text/markdown",
            eval::markdown(&report, &{
                let mut info = vec![("model", meta.model.clone())];
                info.extend(
                    meta.model_sha256
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.clone())),
                );
                info.push(("split", meta.split.clone()));
                info.push(("app", format!("rexvqa-web {}", env!("CARGO_PKG_VERSION"))));
                info
            }),
        ),
        "report" => (
            "report.json",
            "application/json",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?,
        ),
        other => return Err(format!("unknown export format {other:?}")),
    };
    Ok(Event::Export {
        name: format!("{}_{run_id}_{ext}", meta.split),
        mime: mime.into(),
        text,
    })
}

async fn merge(split_name: &str, names: Vec<String>, list: Vec<File>) -> Result<Event, String> {
    let s = split(split_name)?;
    let mut texts = Vec::new();
    for (n, f) in names.into_iter().zip(list) {
        let t =
            String::from_utf8(read_blob(&f).await?).map_err(|_| format!("{n}: not UTF-8 text"))?;
        texts.push((n, t));
    }
    let merged = score::merge_shards(&s, &texts).map_err(|e| e.to_string())?;
    let preds = score::predictions_from_leaderboard(&s, &merged.predictions);
    let rep = score::report(&preds);
    Ok(Event::Report {
        run_id: "merged".into(),
        report: eval::EvalReport {
            settings: Settings::default(),
            answered: preds.len(),
            in_scope: s.records.len(),
            rejected_records: s.rejected.clone(),
            unanswerable: merged.unanswerable,
            official: rep.clone(),
            robust: rep,
            missing_images: 0,
            mean_ms: 0.0,
        },
        missing: merged.missing.len(),
    })
}

fn settings(
    mode: rexvqa_engine::session::Mode,
    policy: image::Policy,
    all_images: bool,
) -> Settings {
    Settings {
        mode,
        policy,
        all_images,
        ..Settings::default()
    }
}

async fn handle(req: Request, attached: Vec<File>) {
    let context = format!("{req:?}")
        .split([' ', '{', '('])
        .next()
        .unwrap_or("")
        .to_string();
    let result: Result<(), String> = async {
        match req {
            Request::ProbeGpu => post(&probe_gpu().await),
            Request::SetCompute { compute } => STATE.with(|s| s.borrow_mut().compute = compute),
            Request::ListCache => post(&list_cache().await?),
            Request::ImportModel => {
                let text = attached.first().ok_or("choose the text GGUF file")?;
                let mmproj = attached.get(1);
                let (t_arch, m_arch) = check_pair(
                    &BlobSource::new(text.clone().into()),
                    mmproj.map(|m| BlobSource::new(m.clone().into())).as_ref(),
                )
                .await?;
                let dir = models_dir().await?;
                let tname = safe_name(&text.name());
                let mname = mmproj.map(|m| safe_name(&m.name()));
                let copies: Vec<(String, &File)> = std::iter::once((tname.clone(), text))
                    .chain(mname.clone().zip(mmproj))
                    .collect();
                check_room(&dir, &copies).await?;
                let copied = async {
                    store_file(&dir, &tname, text, &t_arch).await?;
                    if let (Some(n), Some(m)) = (&mname, mmproj) {
                        store_file(&dir, n, m, &m_arch).await?;
                    }
                    Ok::<(), String>(())
                }
                .await;
                // The list shows a stopped copy as partial, whatever happened.
                post(&list_cache().await?);
                copied?;
                post(&Event::ModelLoaded(
                    load_stored(&tname, mname.as_deref()).await?,
                ));
            }
            Request::DownloadModel {
                text_url,
                mmproj_url,
            } => {
                let dir = models_dir().await?;
                let name = |u: &str| {
                    safe_name(
                        u.rsplit('/')
                            .next()
                            .unwrap_or(u)
                            .split('?')
                            .next()
                            .unwrap_or(u),
                    )
                };
                let (t, m) = (name(&text_url), name(&mmproj_url));
                download(&dir, &t, &text_url, "gemma3").await?;
                download(&dir, &m, &mmproj_url, "clip").await?;
                post(&list_cache().await?);
                post(&Event::ModelLoaded(load_stored(&t, Some(&m)).await?));
            }
            Request::LoadModel { text, mmproj } => post(&Event::ModelLoaded(
                load_stored(&text, mmproj.as_deref()).await?,
            )),
            Request::DeleteModel { name } => {
                let dir = models_dir().await?;
                dir.remove(&name).await?;
                let _ = dir.remove(&format!("{name}.meta.json")).await;
                post(&list_cache().await?);
            }
            Request::OpenDataset { paths } => open_dataset(paths, attached).await?,
            Request::Calibrate {
                split,
                scope,
                settings,
            } => calibrate(&split, &scope, &settings).await?,
            Request::Bench {
                prefill,
                decode,
                official_max_tokens,
            } => bench(prefill, decode, official_max_tokens).await?,
            Request::UnpackCancel => {
                if let Some(c) = STATE.with(|s| s.borrow().unpack_cancel.clone()) {
                    c.set(true);
                }
            }
            Request::DeleteUnpacked => {
                if STATE.with(|s| s.borrow().unpack_cancel.is_some()) {
                    return Err("stop the unpacking first".into());
                }
                unpack::delete().await?;
                STATE.with(|s| s.borrow_mut().unpacked = Rc::default());
                post(&Event::Dataset(dataset_summary()));
            }
            Request::ListQuestions {
                split,
                query,
                task,
                category,
                offset,
                limit,
            } => post(&list_questions(
                &split,
                &query,
                task.as_deref(),
                category.as_deref(),
                offset,
                limit,
            )?),
            Request::GetQuestion { split, id } => post(&Event::Question(question(&split, &id)?)),
            Request::GetImage { path } => get_image(&path).await?,
            Request::Ask {
                split,
                id,
                mode,
                policy,
                all_images,
            } => ask(&split, &id, settings(mode, policy, all_images)).await?,
            Request::AskFree {
                split,
                id,
                text,
                policy,
                all_images,
            } => {
                ask_free(
                    &split,
                    &id,
                    &text,
                    settings(rexvqa_engine::session::Mode::Official, policy, all_images),
                )
                .await?
            }
            Request::EvalStart {
                split,
                scope,
                settings,
            } => start_eval(split, scope, settings).await?,
            Request::EvalResume { run_id } => {
                if STATE.with(|st| st.borrow().eval.is_some()) {
                    return Err("an evaluation is already running".into());
                }
                run_eval(run_id).await?
            }
            Request::EvalPause | Request::EvalContinue | Request::EvalCancel => STATE.with(|st| {
                if let Some(c) = &st.borrow().eval {
                    match req {
                        Request::EvalPause => c.paused.set(true),
                        Request::EvalContinue => c.paused.set(false),
                        _ => c.cancelled.set(true),
                    }
                }
            }),
            Request::RunReport { run_id } => {
                let (meta, answers) = read_run(&run_id).await?;
                let s = split(&meta.split)?;
                post(&Event::Report {
                    report: eval::report(&s, &answers, &meta.settings, meta.total),
                    run_id,
                    missing: 0,
                });
            }
            Request::Export { run_id, format } => post(&export(&run_id, &format).await?),
            Request::MakeQuiz {
                split: name,
                settings,
            } => {
                let quiz = rexvqa_engine::quiz::make_quiz(&*split(&name)?, &settings)
                    .map_err(|e| e.to_string())?;
                post(&Event::Quiz(quiz));
            }
            Request::OpenQuiz { split: name, json } => {
                let quiz = rexvqa_engine::quiz::Quiz::open(&json, &*split(&name)?)
                    .map_err(|e| e.to_string())?;
                post(&Event::Quiz(quiz));
            }
            Request::SaveQuiz { results, position } => {
                let text =
                    serde_json::to_string(&(results, position)).map_err(|e| e.to_string())?;
                quiz_dir().await?.write_text(QUIZ_FILE, &text).await?;
            }
            Request::LoadQuiz => {
                let dir = quiz_dir().await?;
                let saved = if dir.has_file(QUIZ_FILE).await {
                    // A damaged file is dropped rather than blocking the panel.
                    serde_json::from_str(&dir.read_text(QUIZ_FILE).await?).ok()
                } else {
                    None
                };
                post(&Event::SavedQuiz { saved });
            }
            Request::ClearQuiz => {
                let dir = quiz_dir().await?;
                if dir.has_file(QUIZ_FILE).await {
                    dir.remove(QUIZ_FILE).await?;
                }
            }
            Request::QuizReport {
                split: name,
                results,
                export,
            } => {
                use rexvqa_engine::quiz;
                let s = split(&name)?;
                let report = quiz::report(&s, &results).map_err(|e| e.to_string())?;
                let stem = format!(
                    "quiz-{}-{}",
                    safe_name(if results.reader.is_empty() {
                        "reader"
                    } else {
                        &results.reader
                    }),
                    results.quiz.settings.seed
                );
                let file = match export.as_deref() {
                    Some("csv") => {
                        Some((format!("{stem}.csv"), "text/csv", quiz::csv(&s, &results)))
                    }
                    Some("markdown") => Some((
                        format!("{stem}.md"),
                        "text/markdown",
                        quiz::markdown(&report, &results),
                    )),
                    Some("json") => Some((
                        format!("{stem}.json"),
                        "application/json",
                        serde_json::to_string_pretty(&results).map_err(|e| e.to_string())?,
                    )),
                    _ => None,
                };
                if let Some((name, mime, text)) = file {
                    post(&Event::Export {
                        name,
                        mime: mime.into(),
                        text,
                    });
                }
                post(&Event::QuizReport(Box::new(report)));
            }
            Request::ReaderStudy { split: name, files } => {
                let study = rexvqa_engine::quiz::reader_study(&*split(&name)?, &files)
                    .map_err(|e| e.to_string())?;
                post(&Event::ReaderStudy(study));
            }
            Request::MergeShards { split, names } => post(&merge(&split, names, attached).await?),
            Request::DeleteRun { run_id } => {
                let dir = runs_dir().await?;
                let _ = dir.remove(&format!("{run_id}.jsonl")).await;
                dir.remove(&format!("{run_id}.json")).await?;
                post(&list_cache().await?);
            }
        }
        Ok(())
    }
    .await;
    if let Err(e) = result {
        fail(&context, e);
    }
    if let Some(wasm_bytes) = wasm_heap_bytes() {
        let model = STATE.with(|s| s.borrow().model.clone());
        let device_bytes = model
            .and_then(|m| rexvqa_engine::bench::device_bytes(&m))
            .map(|b| b as f64);
        post(&Event::Memory {
            wasm_bytes,
            device_bytes,
        });
    }
}

/// Installs the message handler and announces readiness.
pub fn run() {
    console_error_panic_hook::set_once();
    let on_message = Closure::<dyn FnMut(MessageEvent)>::new(|e: MessageEvent| {
        let data = e.data();
        let Some(text) = Reflect::get(&data, &"json".into())
            .ok()
            .and_then(|v| v.as_string())
        else {
            fail("message", "the worker received a message without a request");
            return;
        };
        let files: Vec<File> = Reflect::get(&data, &"files".into())
            .ok()
            .filter(|v| v.is_object())
            .map(|v| {
                Array::from(&v)
                    .iter()
                    .filter_map(|f| f.dyn_into::<File>().ok())
                    .collect()
            })
            .unwrap_or_default();
        match serde_json::from_str::<Request>(&text) {
            Ok(req) => wasm_bindgen_futures::spawn_local(handle(req, files)),
            Err(err) => fail("message", format!("unreadable request {text:?}: {err}")),
        }
    });
    scope().set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    // The handler lives as long as the worker.
    on_message.forget();
    post(&Event::Ready);
}
