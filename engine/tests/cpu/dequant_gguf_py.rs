//! CPU dequantisation against the PyPI `gguf` package, tensor by tensor, bit for bit
//! (golden hashes from tests/reference/dequant_golden.py).

use crate::common;

use std::path::Path;

use rexvqa_engine::gguf::{FileSource, Gguf};
use rexvqa_engine::quant;
use sha2::{Digest, Sha256};

fn check_file(path: &Path, golden: &serde_json::Value) -> usize {
    let mut src = FileSource::open(path).unwrap();
    let g = Gguf::read(&mut src).unwrap();
    let golden = golden.as_object().unwrap();
    assert_eq!(
        g.tensors.len(),
        golden.len(),
        "{}: tensor count",
        path.display()
    );
    for info in &g.tensors {
        let want = &golden[&info.name];
        assert_eq!(want["type"], info.ty.to_string(), "{}", info.name);
        let bytes = g.read_tensor(&mut src, info).unwrap();
        let values = quant::dequantize_vec(info.ty, &bytes, info.n_elements() as usize).unwrap();
        let head: Vec<f64> = want["head"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        for (i, h) in head.iter().enumerate() {
            assert_eq!(values[i], *h as f32, "{} value {i}", info.name);
        }
        let mut hasher = Sha256::new();
        for v in &values {
            hasher.update(v.to_le_bytes());
        }
        let got = format!("{:x}", hasher.finalize());
        assert_eq!(
            got,
            want["sha256"].as_str().unwrap(),
            "{} ({}) differs from gguf-py",
            info.name,
            info.ty
        );
    }
    g.tensors.len()
}

fn golden() -> serde_json::Value {
    let p = common::repo_root().join("tests/reference/golden/dequant.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn every_supported_type_matches_gguf_py() {
    let g = golden();
    let n = check_file(
        &common::repo_root().join("tests/fixtures/quant_types.gguf"),
        &g["quant_types"],
    );
    assert_eq!(n, 40);
}

#[test]
fn gemma3_270m_matches_gguf_py_tensor_by_tensor() {
    let g = golden();
    let n = check_file(&common::gemma270m(), &g["gemma3_270m"]);
    assert_eq!(n, 236);
}
