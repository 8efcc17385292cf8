//! The GGUF-built tokenizer against the Hugging Face Gemma 3 tokenizer on 10,000 strings
//! (golden ids from tests/reference/tokenizer_golden.py).

mod common;

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
