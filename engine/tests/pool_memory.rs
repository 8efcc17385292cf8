//! The browser's memory pool holds a study near the native pool's memory (#33): a MedGemma-shaped
//! pair (4B widths, fewer layers, random weights) followed through an image, a prefill of 300
//! tokens and a study of four questions under a CubeCL dry run ([`rexvqa_engine::bench::pool_phases`]), once
//! with the pool CubeCL builds for wasm (`REXVQA_EXCLUSIVE_POOL=1`) and once with the native one.
//! The same pair also scores studies in a row as the evaluation does
//! ([`rexvqa_engine::bench::study_flow`]): the browser's pool may grow by at most 3 % over six,
//! and may hold no more than the native pool at any point.
//! The pool is chosen when the process opens its device, so the test runs itself as a child
//! process, one pool and one walk each, on lavapipe.

mod common;

use std::path::Path;

use rexvqa_engine::bench::{PoolPhases, StudyFlow};
use rexvqa_engine::gguf::{FileSource, Gguf};
use rexvqa_engine::model::synthetic as syn;
use rexvqa_engine::session::Model;

/// Set in the children: the directory holding the pair.
const CHILD: &str = "REXVQA_POOL_TEST_PAIR";
/// Set in the children that score studies instead of walking the phases.
const STUDIES: &str = "REXVQA_POOL_TEST_STUDIES";
/// The line a child prints its phases on.
const MARK: &str = "POOL_PHASES ";
/// The most the browser's pool may hold scoring studies, against the native pool's peak: #33's
/// criterion. Measured 0.963x on lavapipe (1.172 vs 1.217 GB) with the free pages given back
/// around each encode (`Session::add_image`), 1.076x (1.309 GB) without
/// (bench/results/ci-vm-2core-shed-pages-around-encodes.json).
const STUDIES_BOUND: f64 = 1.0;
/// The line a child prints the bytes reserved after each study on.
const STUDIES_MARK: &str = "POOL_STUDIES ";

/// MedGemma 4B's widths (the sizes CubeCL's buckets see), with 6 decoder layers and 2 vision
/// layers instead of 34 and 27.
fn shapes() -> syn::Shapes {
    syn::Shapes {
        layers: 6,
        v_layers: 2,
        ..syn::Shapes::medgemma_4b()
    }
}

fn write_pair(dir: &Path) {
    let mut src = FileSource::open(common::gemma270m()).expect("the 270M GGUF");
    let tok = Gguf::read(&mut src).expect("readable GGUF");
    syn::write_pair(dir, &shapes(), &tok, 7, &mut |_, _, _| {}).expect("the pair written");
}

/// The pair `text` + `mmproj` on lavapipe.
fn load(text: &Path, mmproj: &Path) -> Model {
    let device = rexvqa_engine::device::wgpu().expect("a wgpu adapter (lavapipe)");
    common::load_model(text, Some(mmproj), &device)
}

fn child(dir: &Path) {
    let model = load(&dir.join(syn::TEXT_FILE), &dir.join(syn::MMPROJ_FILE));
    if std::env::var_os(STUDIES).is_some() {
        let flow = pollster::block_on(rexvqa_engine::bench::study_flow(&model, 6, 4))
            .expect("the studies run");
        println!("{STUDIES_MARK}{}", serde_json::to_string(&flow).unwrap());
        return;
    }
    let phases = pollster::block_on(rexvqa_engine::bench::pool_phases(&model, &[300], 4, true))
        .expect("the phases run");
    println!("{MARK}{}", serde_json::to_string(&phases).unwrap());
}

/// What a child printed after `mark`, run with one pool (and scoring studies if `studies`).
fn child_line(dir: &Path, exclusive: bool, studies: bool, mark: &str) -> String {
    let on = if exclusive { "1" } else { "0" };
    let mut envs = vec![
        (CHILD, dir.to_str().expect("a UTF-8 temporary path")),
        ("REXVQA_EXCLUSIVE_POOL", on),
        // The browser's pool on the browser's device, which destroys the buffers it releases.
        ("REXVQA_DESTROYING_DEVICE", on),
    ];
    if studies {
        envs.push((STUDIES, "1"));
    }
    common::rerun_self("browser_pool_holds_a_study_near_native_memory", &envs, mark)
}

fn run_child(dir: &Path, exclusive: bool) -> PoolPhases {
    let phases: PoolPhases =
        serde_json::from_str(&child_line(dir, exclusive, false, MARK)).unwrap();
    assert_eq!(phases.exclusive_pool, exclusive);
    phases
}

#[test]
fn browser_pool_holds_a_study_near_native_memory() {
    if let Some(dir) = std::env::var_os(CHILD) {
        return child(Path::new(&dir));
    }
    let dir = std::env::temp_dir().join(format!("rexvqa-pool-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    write_pair(&dir);
    let browser = run_child(&dir, true);
    let native = run_child(&dir, false);
    let studies = |exclusive| -> StudyFlow {
        serde_json::from_str(&child_line(&dir, exclusive, true, STUDIES_MARK)).unwrap()
    };
    let (browser_flow, native_flow) = (studies(true), studies(false));
    let _ = std::fs::remove_dir_all(&dir);
    let (browser_studies, native_studies) = (&browser_flow.after_each, &native_flow.after_each);
    eprintln!(
        "reserved after each study: browser pool {browser_studies:?}, native pool {native_studies:?}"
    );
    // Inside a study too: the browser's device counts its buffers at every allocation, where
    // the native pool (whose pages only grow here) is read after each study.
    let browser_peak = browser_flow
        .peak_buffer_bytes
        .expect("the browser's device counts its buffers");
    let native_peak = *native_studies.iter().max().unwrap();
    let studies_ratio = browser_peak as f64 / native_peak as f64;
    eprintln!(
        "studies' peak: browser pool {browser_peak} B (buffers), native pool {native_peak} B \
         ({studies_ratio:.3}x)"
    );
    assert!(
        studies_ratio <= STUDIES_BOUND,
        "the browser's pool held {studies_ratio:.3}x the native pool's peak scoring studies"
    );
    let (first, most) = (browser_studies[0], *browser_studies.iter().max().unwrap());
    let growth = most as f64 / first as f64;
    // Measured 1.0138x on lavapipe with the free pages given back around each encode, 1.0204x
    // without (bench/results/ci-vm-2core-shed-pages-around-encodes.json). This pair (6 layers)
    // does not show the 4B pair's growth over studies that `Session::next_study` prevents (the
    // test below checks its mechanism), so this bound guards against a study leaving something
    // behind (one study's KV is ~1 % of the pool here, 5 % over six).
    assert!(
        growth <= 1.03,
        "the browser's pool grew {growth:.4}x from the first of six identical studies to the \
         most: {browser_studies:?}"
    );
    let names = |p: &PoolPhases| p.phases.iter().map(|x| x.0.clone()).collect::<Vec<_>>();
    assert_eq!(names(&browser), names(&native));
    let ratio = browser.peak_bytes as f64 / native.peak_bytes as f64;
    eprintln!(
        "peak reserved: browser pool {} B, native pool {} B ({ratio:.3}x)\nbrowser: {:?}\nnative: {:?}",
        browser.peak_bytes, native.peak_bytes, browser.phases, native.phases
    );
    // Measured 1.122x (1.365 vs 1.217 GB) on lavapipe; a dry run allocates the same every run.
    // Undoing the pool's mends one by one (keys gathered, the MLP's row blocks, a question
    // writing over the session's cache, a batched pass's keys kept for their layer only,
    // `KvCache::reserve`) raised it step by step to ~1.46x (`bench/JOURNAL.md`). The whole 4B
    // pair and the whole Benchmark, which these phases leave out, are `examples/pool_memory.rs`'s
    // (bench/results/ci-vm-2core-bench-memory-dry-run.json).
    assert!(
        ratio <= 1.15,
        "the browser's pool reserves {ratio:.3}x the native pool's peak; where it sits:\n{:#?}",
        browser.pools
    );
}

/// [`rexvqa_engine::session::Session::next_study`] on a GPU keeps the last study's image
/// features and KV until the next study's image is encoded, then releases them, so that the
/// browser's pool does not grow study by study at MedGemma 4B (examples/pool_memory.rs
/// `--studies`; bench/results/ci-vm-2core-bench-memory-dry-run.json). The tiny pair on lavapipe,
/// under a dry run; only the pool's bytes in use are read.
#[test]
fn next_study_releases_the_last_study_after_the_next_encode() {
    use rexvqa_engine::session::Session;

    let (text, mmproj) = common::tiny_pair(&common::golden_json_gz("tiny_tiny-q8_0.json.gz"));
    let model = load(&text, &mmproj);
    let device = model.device().clone();
    let size = model.vision.as_ref().unwrap().cfg.image_size;
    let pixels = vec![0.0f32; 3 * size * size];
    let prompts = rexvqa_engine::bench::study_prompts(&model, 0..2).unwrap();
    let _dry = burn_cubecl::cubecl::dry_run::DryRun::new();
    let in_use = || {
        pollster::block_on(rexvqa_engine::device::sync(&device)).unwrap();
        device.memory_pool_usage().unwrap().bytes_in_use
    };
    let mut session = Session::new(&model);
    let f = session.add_image("first", &pixels).unwrap();
    pollster::block_on(session.score_many(&prompts, &[f])).unwrap();
    let held = in_use();
    session.next_study();
    assert!(
        session.cached_image("first").is_none(),
        "the last study's image is not reused"
    );
    assert_eq!(in_use(), held, "nothing is released before the next encode");
    let g = session.add_image("second", &pixels).unwrap();
    let after = in_use();
    // The first study's features (the size of the second's, which are now held) and its prompt's
    // KV are released: what is left is below what was held.
    assert!(
        after < held,
        "the last study is released after the next encode: {after} B in use, {held} B before"
    );
    drop(g);
}
