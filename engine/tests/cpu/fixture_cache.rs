//! The shared fixture cache on a cold start: many writers at once, and a damaged file left by an
//! earlier run. A fresh machine runs exactly this path; a warm cache never does.

use crate::common;

fn fresh_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("rexvqa-fixture-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn tiny_q8_0() -> (String, String) {
    let g = common::golden_json_gz("tiny_tiny-q8_0.json.gz");
    (
        g["mmproj_gguf"].as_str().unwrap().to_owned(),
        g["mmproj_sha256"].as_str().unwrap().to_owned(),
    )
}

/// Eight threads of one process (as the tests of one binary are) ask for the same fixture on an
/// empty cache: every one gets the complete, checked file and no temporary file is left behind.
#[test]
fn concurrent_writers_on_a_cold_cache_all_succeed() {
    let dir = fresh_dir("race");
    let (name, sha) = tiny_q8_0();
    let paths: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|_| s.spawn(|| common::model_fixture_in(&dir, &name, &sha)))
            .collect();
        hs.into_iter().map(|h| h.join().expect("writer")).collect()
    });
    for p in &paths {
        assert_eq!(p, &dir.join(&name));
    }
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left, vec![name.clone()], "only the fixture itself remains");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A truncated file from an interrupted earlier run is replaced, not trusted.
#[test]
fn a_damaged_cached_fixture_is_replaced() {
    let dir = fresh_dir("damaged");
    let (name, sha) = tiny_q8_0();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(&name), b"GGUF truncated").unwrap();
    let p = common::model_fixture_in(&dir, &name, &sha);
    assert!(std::fs::metadata(&p).unwrap().len() > 1_000_000);
    std::fs::remove_dir_all(&dir).unwrap();
}
