//! The committed corpus of malformed GGUF files (tests/fixtures/gguf-malformed, written by its
//! make_corpus.py independently of the engine's writer): each one is an error whose message
//! names what is wrong, never a panic, both whole and through the prefix parser the browser uses.

use std::collections::BTreeMap;
use std::path::Path;

use rexvqa_engine::gguf::{FileSource, Gguf};

#[test]
fn every_malformed_file_is_a_named_error() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/gguf-malformed");
    let manifest: BTreeMap<String, String> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert!(manifest.len() >= 20, "corpus has {} files", manifest.len());
    for (name, fragment) in &manifest {
        let path = dir.join(name);
        let err = match FileSource::open(&path) {
            Ok(mut src) => Gguf::read(&mut src).map(|_| ()).unwrap_err().to_string(),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains(fragment.as_str()),
            "{name}: {err:?} lacks {fragment:?}"
        );
        // The browser path sees growing prefixes; none may panic or succeed.
        let bytes = std::fs::read(&path).unwrap();
        for cut in 0..=bytes.len() {
            assert!(
                Gguf::parse_prefix(&bytes[..cut], bytes.len() as u64).is_err(),
                "{name}: prefix {cut} parsed"
            );
        }
    }
}
