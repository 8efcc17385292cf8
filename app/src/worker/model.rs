//! The model: where it runs (WebGPU probe, compute choice), importing or downloading a pair into
//! storage, loading a stored pair (each header read once, shared by the pair check, the CPU
//! footprint check, the load and the model card), and the benchmark on the loaded model.

use std::cell::Cell;
use std::rc::Rc;

use js_sys::Reflect;
use rexvqa_engine::device::{self, Device};
use rexvqa_engine::eval::export::{model_sha256, pair_name};
use rexvqa_engine::gguf::RangeSource;
use rexvqa_engine::model::footprint::{Footprint, WASM32_MAX_BYTES};
use rexvqa_engine::pair::{MMPROJ_ARCH, PairHeaders, TEXT_ARCH};
use rexvqa_engine::selftest::Plan;
use rexvqa_engine::session::{LoadOptions, Model};
use web_sys::File;

use super::error::WorkerError;
use super::reply::Replies;
use super::selftest::Verdict;
use super::state::{self, Adapter, Loaded, PerfClock, Probe};
use super::storage::{self, models_dir};
use crate::io::{self, BlobSource, Dir, now_ms};
use crate::protocol::{Compute, Event, ModelCard};

/// Probes WebGPU, remembers the adapter for [`choose_device`], and returns the event.
pub async fn probe_gpu() -> Event {
    let ev = crate::gpu::probe().await;
    let probe = match &ev {
        Event::Gpu(r) => {
            let name = r.name.to_lowercase();
            let software = r.fallback
                || ["swiftshader", "llvmpipe", "lavapipe"]
                    .iter()
                    .any(|s| name.contains(s));
            Probe::Found(Adapter {
                name: r.name.clone(),
                software,
            })
        }
        _ => Probe::NoAdapter,
    };
    state::with(|s| s.probe = probe);
    ev
}

/// Chooses where the next model loads.
pub fn set_compute(compute: Compute) {
    state::with(|s| s.compute = compute);
}

/// The device the next model loads on, with a sentence saying which and why.
async fn choose_device() -> Result<(Device, String), WorkerError> {
    let (pref, mut probe) = state::with(|s| (s.compute, s.probe.clone()));
    if probe == Probe::NotYet {
        probe_gpu().await;
        probe = state::with(|s| s.probe.clone());
    }
    let adapter = match probe {
        Probe::Found(a) => Some(a),
        _ => None,
    };
    let cpu = |why: &str| Ok((device::cpu(), format!("CPU (WebAssembly): {why}")));
    match (pref, adapter) {
        (Compute::Cpu, _) => cpu("chosen in the model panel"),
        (Compute::Auto, None) => cpu("this browser offers no usable WebGPU adapter"),
        (
            Compute::Auto,
            Some(Adapter {
                name,
                software: true,
            }),
        ) => cpu(&format!(
            "the only WebGPU adapter, {name}, is a software rasteriser and slower than the CPU"
        )),
        (_, adapter) => {
            let d = device::wgpu_async().await.map_err(|e| e.to_string())?;
            watch_device_loss();
            let name = adapter.map_or_else(|| "adapter unknown".to_string(), |a| a.name);
            Ok((d, format!("WebGPU ({name})")))
        }
    }
}

thread_local! {
    /// Whether this worker opened a WebGPU device and is watching it.
    static WATCHING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Whether that device has been lost.
    static LOST: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Tells the page when the WebGPU device is lost (once per worker: the device is opened once).
fn watch_device_loss() {
    if !WATCHING.with(|w| w.replace(true)) {
        device::on_device_lost(|message| {
            LOST.with(|l| l.set(true));
            Replies::unsolicited().post(Event::DeviceLost { message });
        });
    }
}

/// Whether a request's failure is explained by a lost device, waiting up to a second for the
/// browser to say so: a read from a destroyed device fails before (or after) its `lost` promise
/// settles, and a request that failed that way is the page's to run again in a new worker,
/// not an error to show.
pub async fn failed_from_device_loss() -> bool {
    if !WATCHING.with(std::cell::Cell::get) {
        return false;
    }
    for _ in 0..40 {
        if LOST.with(std::cell::Cell::get) {
            return true;
        }
        io::sleep(25).await;
    }
    LOST.with(std::cell::Cell::get)
}

/// Debug builds: destroys the WebGPU device, for the end-to-end test of the page's recovery; a
/// release build refuses.
pub fn test_lose_device() -> Result<(), WorkerError> {
    if !cfg!(debug_assertions) {
        return Err(WorkerError::TestHooksOff);
    }
    if device::destroy_for_test() {
        Ok(())
    } else {
        Err(WorkerError::TestHook("no WebGPU device is open"))
    }
}

/// Copies the picked pair (text first, then the optional mmproj) into storage after checking
/// its headers, then loads it.
pub async fn import(out: Replies, attached: &[File]) -> Result<(), WorkerError> {
    let text = attached.first().ok_or("choose the text GGUF file")?;
    let mmproj = attached.get(1);
    let headers = PairHeaders::read(
        &BlobSource::new(text.clone().into()),
        mmproj.map(|m| BlobSource::new(m.clone().into())).as_ref(),
    )
    .await
    .map_err(|e| e.to_string())?;
    headers.check().map_err(|e| e.to_string())?;
    let dir = models_dir().await?;
    let tname = storage::model_file_name(&text.name());
    let mname = mmproj.map(|m| storage::model_file_name(&m.name()));
    let copies: Vec<(String, &File)> = std::iter::once((tname.clone(), text))
        .chain(mname.clone().zip(mmproj))
        .collect();
    storage::check_room(&dir, &copies).await?;
    let copied = async {
        storage::store_file(out, &dir, &tname, text, TEXT_ARCH).await?;
        if let (Some(n), Some(m)) = (&mname, mmproj) {
            storage::store_file(out, &dir, n, m, MMPROJ_ARCH).await?;
        }
        Ok::<(), WorkerError>(())
    }
    .await;
    // The list shows a stopped copy as partial, whatever happened.
    out.post(storage::list_cache().await?);
    copied?;
    // The stored copies are the picked files byte for byte: their headers are the ones read.
    let card = load_stored(out, &tname, mname.as_deref(), Some(headers)).await?;
    out.post(Event::ModelLoaded(card));
    Ok(())
}

/// Downloads a pair into storage (resumable), then loads it.
pub async fn download(out: Replies, text_url: &str, mmproj_url: &str) -> Result<(), WorkerError> {
    let dir = models_dir().await?;
    let (t, m) = (
        storage::url_file_name(text_url),
        storage::url_file_name(mmproj_url),
    );
    storage::download(out, &dir, &t, text_url, TEXT_ARCH).await?;
    storage::download(out, &dir, &m, mmproj_url, MMPROJ_ARCH).await?;
    out.post(storage::list_cache().await?);
    let card = load_stored(out, &t, Some(&m), None).await?;
    out.post(Event::ModelLoaded(card));
    Ok(())
}

/// Loads a stored pair and describes it; `headers` are the pair's when already read.
pub async fn load_stored(
    out: Replies,
    text: &str,
    mmproj: Option<&str>,
    headers: Option<PairHeaders>,
) -> Result<ModelCard, WorkerError> {
    let dir = models_dir().await?;
    // One source per file for headers, hash and weights: synchronous handles read straight into
    // wasm memory (no JS copy per read); they lock the files until the load is over.
    let text_src = io::OpfsSource::open(&dir, text).await?;
    let mm_src = match mmproj {
        Some(m) => Some(io::OpfsSource::open(&dir, m).await?),
        None => None,
    };
    // Each header is read once per load (the tokenizer's 262k-token vocabulary is in it) and
    // used by the pair check, the footprint check, the load and the card.
    let headers = match headers {
        Some(h) => h,
        None => {
            let h = PairHeaders::read(&text_src, mm_src.as_ref())
                .await
                .map_err(|e| e.to_string())?;
            h.check().map_err(|e| e.to_string())?;
            h
        }
    };
    let (mut device, mut compute) = choose_device().await?;
    // On WebGPU, the device self-test's verdict first: forms that failed are turned off, and a
    // device that cannot run the model at all sends it to the CPU, saying why. A verdict kept
    // from an earlier run applies at once; otherwise the test runs while the weights are
    // hashed and loaded, where its time (mostly shader compilation, in the GPU process) hides
    // behind theirs, most of it (`bench/results/ci-vm-2core-selftest-beside-load.json`).
    let mut verdict = None;
    let mut fresh = None;
    if device::queues_work(&device) {
        let plan = Plan::from_headers(&headers).map_err(|e| e.to_string())?;
        match super::selftest::kept_verdict(&device, &plan).await {
            Some(v) => verdict = Some(v),
            None => fresh = Some(plan),
        }
    }
    let failed = |v: &Option<Verdict>| v.as_ref().and_then(|v| v.report.unusable_reason.clone());
    if let Some(why) = failed(&verdict) {
        compute = on_cpu_after_selftest(&why);
        device = device::cpu();
    }
    let busy = Rc::new(Cell::new(fresh.is_some()));
    let text_y = io::Yielding::new(&text_src, busy.clone());
    let mm_y = mm_src.as_ref().map(|m| io::Yielding::new(m, busy.clone()));
    let pair = Pair {
        dir: &dir,
        text,
        mmproj,
        headers: &headers,
        text_src: &text_y,
        mm_src: mm_y.as_ref(),
    };
    let first = match &fresh {
        Some(plan) => {
            let work = async {
                let r = hash_and_load(out, &pair, &device, &busy).await;
                if busy.get() {
                    out.post(Event::Loading {
                        done: 1,
                        total: 1,
                        tensor: "device self-test, still running".into(),
                    });
                }
                r
            };
            let test = async {
                let v = super::selftest::run(&device, plan).await;
                busy.set(false);
                v
            };
            let (r, v) = futures_util::future::join(work, test).await;
            verdict = Some(v);
            r
        }
        None => hash_and_load(out, &pair, &device, &busy).await,
    };
    let first = match failed(&verdict) {
        Some(why) if fresh.is_some() => {
            // The weights went to a device that failed: freed, then loaded again on the CPU
            // (their hashes are kept, so only the load is repeated).
            drop(first);
            compute = on_cpu_after_selftest(&why);
            device = device::cpu();
            hash_and_load(out, &pair, &device, &busy).await
        }
        _ => first,
    };
    let LoadedPair {
        sha256,
        model,
        started,
    } = first?;
    let summary = headers.summary();
    let gpu = device::queues_work(model.decoder.device());
    let decoding = summary
        .types
        .keys()
        .filter_map(|name| {
            let ty = rexvqa_engine::gguf::GgmlType::all().find(|t| t.to_string() == *name)?;
            Some((
                name.clone(),
                rexvqa_engine::quant::decoding(ty, gpu)?.to_string(),
            ))
        })
        .collect();
    let card = ModelCard {
        text: text.into(),
        mmproj: mmproj.map(String::from),
        name: summary.name.unwrap_or_else(|| text.to_string()),
        parameters: summary.parameters,
        bytes: summary.bytes,
        types: summary.types,
        decoding,
        layers: model.decoder.cfg.layers,
        hidden: model.decoder.cfg.hidden,
        vocab: model.decoder.cfg.vocab,
        vision: model.vision.is_some(),
        // From the start of the weight load to a model ready to answer (a self-test that
        // outlasts the load included).
        load_s: (now_ms() - started) / 1000.0,
        compute,
        sha256: sha256.clone(),
        selftest: verdict.as_ref().map(Verdict::text),
    };
    state::with(|s| {
        s.loaded = Some(Loaded {
            model: Rc::new(model),
            name: pair_name(text, mmproj),
            compute: card.compute.clone(),
            sha256,
        })
    });
    Ok(card)
}

/// A stored pair being loaded: its names, headers and sources.
struct Pair<'a, S> {
    dir: &'a Dir,
    text: &'a str,
    mmproj: Option<&'a str>,
    headers: &'a PairHeaders,
    text_src: &'a S,
    mm_src: Option<&'a S>,
}

/// A pair hashed and loaded.
struct LoadedPair {
    /// The card's SHA-256 lines.
    sha256: Vec<(String, String)>,
    model: Model,
    /// When the weight load began (`now_ms`).
    started: f64,
}

/// Hashes the pair's files (kept hashes are reused) and loads it onto `device`; its progress
/// says so while the self-test runs beside it (`busy`).
async fn hash_and_load<S: RangeSource>(
    out: Replies,
    pair: &Pair<'_, S>,
    device: &Device,
    busy: &Cell<bool>,
) -> Result<LoadedPair, WorkerError> {
    if !device::queues_work(device) {
        // wasm32 ends at 4 GiB: refuse a pair that cannot fit before allocating any of it.
        Footprint::cpu(&pair.headers.text, pair.headers.mmproj.as_ref())
            .check(WASM32_MAX_BYTES)
            .map_err(|e| e.to_string())?;
    }
    let text_sha = storage::stored_sha256(out, pair.dir, pair.text, pair.text_src).await?;
    let mm_sha = match (pair.mmproj, pair.mm_src) {
        (Some(m), Some(src)) => Some(storage::stored_sha256(out, pair.dir, m, src).await?),
        _ => None,
    };
    let sha256 = model_sha256(text_sha, mm_sha);
    // Drop a previous model first so its GPU memory is freed before the new one loads.
    state::with(|s| {
        s.loaded = None;
        s.study = None;
        // A cache belongs to the model that made it.
        s.own_cache = None;
    });
    let started = now_ms();
    let mut last = 0.0;
    let mut progress = |p: &rexvqa_engine::model::load::Progress| {
        let now = now_ms();
        if now - last > 100.0 || p.done == p.total {
            last = now;
            let tensor = if busy.get() {
                format!("{}; device self-test running", p.tensor)
            } else {
                p.tensor.clone()
            };
            out.post(Event::Loading {
                done: p.done,
                total: p.total,
                tensor,
            });
        }
    };
    let model = Model::load_with_headers(
        pair.headers,
        pair.text_src,
        pair.mm_src,
        device,
        &LoadOptions::default(),
        &mut progress,
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok(LoadedPair {
        sha256,
        model,
        started,
    })
}

/// Runs the benchmark harness on the loaded model; the JSON matches `rexvqa bench`'s.
pub async fn bench(
    out: Replies,
    prefill: Vec<usize>,
    decode: usize,
    official_max_tokens: usize,
    kernel_rows: Vec<usize>,
    profile: bool,
) -> Result<(), WorkerError> {
    let model = state::model()?;
    state::no_eval_running("benchmark")?;
    let opts = rexvqa_engine::bench::BenchOptions {
        prefill_lengths: prefill,
        decode_tokens: decode,
        questions: 4,
        official_max_tokens,
        kernel_rows,
        kernel_reps: 3,
        // No roofline in the browser: the rates are in the JSON, the machine's peaks are not.
        profile: profile.then(rexvqa_engine::bench::Roofline::default),
    };
    let r = rexvqa_engine::bench::run(&model, &opts, &PerfClock)
        .await
        .map_err(|e| e.to_string())?;
    let heap = state::wasm_heap_bytes();
    let (name, sha256, adapter, compute, backend) = state::with(|s| {
        let l = s.loaded.as_ref();
        (
            l.map(|l| l.name.clone()).unwrap_or_default(),
            l.map(|l| l.sha256.clone()).unwrap_or_default(),
            match &s.probe {
                Probe::Found(a) => Some(a.name.clone()),
                _ => None,
            },
            s.compute,
            l.map(|l| l.compute.clone()).unwrap_or_default(),
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
    out.post(Event::Bench {
        json: serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?,
    });
    Ok(())
}

/// Device memory the loaded model's pool holds, if a model is loaded and the device tells.
pub fn device_bytes() -> Option<f64> {
    let model = state::with(|s| s.loaded.as_ref().map(|l| l.model.clone()))?;
    rexvqa_engine::bench::device_bytes(&model).map(|b| b as f64)
}

/// The model card's compute line when the self-test found WebGPU unusable.
fn on_cpu_after_selftest(why: &str) -> String {
    format!("CPU (WebAssembly): WebGPU failed its self-test ({why})")
}
