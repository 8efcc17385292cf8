//! The GGUF-built tokenizer against the Hugging Face Gemma 3 tokenizer on 10,000 strings
//! (golden ids from tests/reference/tokenizer_golden.py) and against llama.cpp's tokeniser
//! (tests/reference/tokenizer_llamacpp.py).

use crate::common;

use rexvqa_engine::gguf::{FileSource, Gguf};
use rexvqa_engine::tokenizer::Tokenizer;

#[test]
fn ids_equal_hugging_face_on_10k_strings() {
    let mut src = FileSource::open(common::gemma270m()).unwrap();
    let g = Gguf::read(&mut src).unwrap();
    let tok = Tokenizer::from_gguf(&g).unwrap();
    let rows = common::golden_jsonl_gz("tokenizer_hf.jsonl.gz");
    assert_eq!(rows.len(), 10_000);
    let mut failures = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let text = row["text"].as_str().unwrap();
        let want: Vec<u32> = row["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let got = tok.encode(text, false, true);
        if got != want {
            failures.push(format!(
                "#{i} ({}) {text:?}\n  want {want:?}\n  got  {got:?}",
                row["kind"]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} strings differ; first ones:\n{}",
        failures.len(),
        rows.len(),
        failures[..failures.len().min(5)].join("\n")
    );
}

#[test]
fn decode_inverts_encode() {
    let mut src = FileSource::open(common::gemma270m()).unwrap();
    let tok = Tokenizer::from_gguf(&Gguf::read(&mut src).unwrap()).unwrap();
    for row in common::golden_jsonl_gz("tokenizer_hf.jsonl.gz")
        .iter()
        .take(3000)
    {
        let text = row["text"].as_str().unwrap();
        assert_eq!(tok.decode(&tok.encode(text, false, true), false), text);
    }
}

/// llama.cpp's own tokenisation (add_special and parse_special on) of 2,000 of those strings
/// (tests/reference/tokenizer_llamacpp.py): the library and `rexvqa tokenize` give the same ids.
#[test]
fn ids_and_cli_equal_llama_cpp_with_special_tokens() {
    let model = common::gemma270m();
    let mut src = FileSource::open(&model).unwrap();
    let tok = Tokenizer::from_gguf(&Gguf::read(&mut src).unwrap()).unwrap();
    let rows = common::golden_jsonl_gz("tokenizer_llamacpp.jsonl.gz");
    assert_eq!(rows.len(), 2_000);
    let want = |row: &serde_json::Value| -> Vec<u32> {
        row["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect()
    };
    let differ: Vec<usize> = (0..rows.len())
        .filter(|&i| tok.encode(rows[i]["text"].as_str().unwrap(), true, true) != want(&rows[i]))
        .collect();
    assert!(
        differ.is_empty(),
        "{} strings differ, first #{:?}",
        differ.len(),
        differ.first()
    );
    // The CLI on one string of each kind.
    let mut kinds = std::collections::BTreeSet::new();
    for row in rows
        .iter()
        .filter(|r| kinds.insert(r["kind"].as_str().unwrap().to_string()))
    {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rexvqa"))
            .args(["tokenize", "--json", "--model"])
            .arg(&model)
            .args(["--text", row["text"].as_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(got["ids"], row["ids"], "{}", row["kind"]);
    }
    assert!(kinds.len() >= 8, "kinds covered: {kinds:?}");
}
