//! The smaller downloads' fixtures (tests/reference/tiny_models.py, "tinyq") through the CLI:
//! `inspect` names their types and how each is multiplied, `ask` answers with each, and a file
//! whose type is still refused (IQ1_S) is refused naming the tensor, the type and the supported
//! types.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn rexvqa(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rexvqa"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn pair(variant: &str) -> (PathBuf, PathBuf) {
    let golden = common::golden_json_gz(&format!("tiny_tinyq-{variant}.json.gz"));
    common::tiny_pair(&golden)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn inspect_names_each_type_and_how_it_is_multiplied() {
    let (text, _) = pair("q4_0");
    let (ok, out, err) = rexvqa(&["inspect", s(&text)]);
    assert!(ok, "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["types"]["Q4_1"], 1, "{}", j["types"]);
    assert_eq!(
        j["decoding"]["Q4_1"],
        serde_json::json!({"gpu": "weight by weight", "cpu": "factored block products"})
    );
    assert_eq!(
        j["decoding"]["Q6_K"],
        serde_json::json!({"gpu": "runs of 4, chunked matrix–vector", "cpu": "factored block products"})
    );
    let (text, _) = pair("q2_k");
    let (_, out, _) = rexvqa(&["inspect", s(&text)]);
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["decoding"]["Q2_K"]["cpu"], "dequantised rows");
    let (text, _) = pair("iq2_m");
    let (_, out, _) = rexvqa(&["inspect", s(&text)]);
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        j["decoding"]["IQ2_S"],
        serde_json::json!({"gpu": "weight by weight, codebook expanded", "cpu": "dequantised rows"})
    );
}

#[test]
fn ask_answers_with_each_smaller_download() {
    let image = common::repo_root().join("tests/fixtures/images/tiny_ref_0.png");
    for variant in [
        "q4_0", "q2_k", "q3_k_m", "iq4_xs", "q5_k_m", "iq3_m", "iq2_m",
    ] {
        let (text, mmproj) = pair(variant);
        let (ok, out, err) = rexvqa(&[
            "ask",
            "--model",
            s(&text),
            "--mmproj",
            s(&mmproj),
            "--image",
            s(&image),
            "--question",
            "Is there evidence of pleural effusion?",
            "--option",
            "Yes",
            "--option",
            "No",
        ]);
        assert!(ok, "{variant}: {err}");
        let j: serde_json::Value = serde_json::from_str(&out).unwrap();
        let probs: Vec<f64> = j["probabilities"]
            .as_array()
            .unwrap_or_else(|| panic!("{variant}: {j}"))
            .iter()
            .map(|p| p.as_f64().unwrap())
            .collect();
        assert_eq!(probs.len(), 2, "{variant}: {j}");
        assert!(
            (probs.iter().sum::<f64>() - 1.0).abs() < 1e-5,
            "{variant}: {j}"
        );
        assert!(
            matches!(j["prediction"].as_str(), Some("A" | "B")),
            "{variant}: {j}"
        );
    }
}

/// The tensor info of `name` in a GGUF header: its type field's byte offset.
fn type_field(bytes: &[u8], name: &str) -> usize {
    let key = [&(name.len() as u64).to_le_bytes()[..], name.as_bytes()].concat();
    let at = bytes
        .windows(key.len())
        .position(|w| w == key)
        .unwrap_or_else(|| panic!("{name} not in the header"))
        + key.len();
    let dims = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    at + 4 + 8 * dims
}

#[test]
fn a_refused_type_names_the_tensor_the_type_and_the_supported_ones() {
    let (text, mmproj) = pair("q4_0");
    let mut bytes = std::fs::read(&text).unwrap();
    // blk.1.attn_q.weight as IQ1_S (id 19): its 256 × 256 weights take 12.5 kB as IQ1_S, less
    // than the Q4_0 bytes they replace, so the header stays valid and only the type is refused.
    let at = type_field(&bytes, "blk.1.attn_q.weight");
    assert_eq!(u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()), 2);
    bytes[at..at + 4].copy_from_slice(&19u32.to_le_bytes());
    let patched = std::env::temp_dir().join(format!("rexvqa-iq1_s-{}.gguf", std::process::id()));
    std::fs::write(&patched, &bytes).unwrap();
    let image = common::repo_root().join("tests/fixtures/images/tiny_ref_0.png");
    let (ok, _, err) = rexvqa(&[
        "ask",
        "--model",
        s(&patched),
        "--mmproj",
        s(&mmproj),
        "--image",
        s(&image),
        "--question",
        "Describe it.",
    ]);
    std::fs::remove_file(&patched).unwrap();
    assert!(!ok);
    assert!(
        err.contains(
            "blk.1.attn_q.weight: tensor type IQ1_S is not supported (supported: F32, F16, Q4_0, \
             Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ2_XS, IQ3_XXS, \
             IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, BF16)"
        ),
        "{err}"
    );
}
