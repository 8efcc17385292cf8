//! Every committed fuzz input (seeds, the campaigns' minimised corpora, the fixtures that seed
//! them) through the fuzz targets' own checks (`engine/fuzz/checks.rs`), on stable: no panic, the
//! heap within each target's bound, and the next step run where a parse succeeds.

use std::path::{Path, PathBuf};

#[allow(dead_code)]
#[path = "../../fuzz/checks.rs"]
mod checks;

#[global_allocator]
static HEAP: checks::alloc::Counting = checks::alloc::Counting;

fn files(p: &Path) -> Vec<PathBuf> {
    if p.is_file() {
        return vec![p.to_path_buf()];
    }
    let Ok(dir) = std::fs::read_dir(p) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = dir
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

#[test]
fn every_committed_fuzz_input_holds_its_targets_checks() {
    let root = crate::common::repo_root();
    let fuzz = root.join("tests/fixtures/fuzz");
    for (target, check) in checks::TARGETS {
        let mut inputs = files(&fuzz.join("seeds").join(target));
        inputs.extend(files(&fuzz.join("corpus").join(target)));
        for (t, p) in checks::MORE_SEEDS {
            if t == target {
                inputs.extend(files(&root.join(p)));
            }
        }
        assert!(!inputs.is_empty(), "{target}: no committed inputs");
        for p in &inputs {
            let data = std::fs::read(p).unwrap();
            let r = std::panic::catch_unwind(|| check(&data));
            assert!(r.is_ok(), "{target}: {} fails its check", p.display());
        }
        eprintln!("{target}: {} inputs hold", inputs.len());
    }
}
