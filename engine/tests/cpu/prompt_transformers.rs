//! The official prompt against transformers' chat template and Gemma3Processor
//! (golden data from tests/reference/prompt_golden.py).

use crate::common;

use rexvqa_engine::gguf::{FileSource, Gguf};
use rexvqa_engine::rexvqa::{Split, prompt};
use rexvqa_engine::tokenizer::Tokenizer;

#[test]
fn rendered_strings_and_ids_equal_transformers() {
    let root = common::repo_root();
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("tests/reference/golden/prompts.json")).unwrap(),
    )
    .unwrap();
    let split = Split::from_json(
        &std::fs::read_to_string(root.join("tests/fixtures/prompt_records.json")).unwrap(),
    )
    .unwrap();
    let mut src = FileSource::open(common::gemma270m()).unwrap();
    let tok = Tokenizer::from_gguf(&Gguf::read(&mut src).unwrap()).unwrap();

    let records = golden["records"].as_object().unwrap();
    assert_eq!(records.len(), split.records.len());
    for (qid, want) in records {
        let r = split.get(qid).unwrap();
        let rendered = prompt::official_chat(r, 1);
        assert_eq!(rendered, want["rendered"].as_str().unwrap(), "{qid}");
        assert_eq!(
            prompt::tokenize_prompt(&tok, &rendered, 1).unwrap(),
            common::token_ids(&want["input_ids"]),
            "{qid}"
        );
    }
    let t = &golden["text_only"];
    let rendered = prompt::chat(None, "Describe the heart size.", 0);
    assert_eq!(rendered, t["rendered"].as_str().unwrap());
    assert_eq!(
        prompt::tokenize_prompt(&tok, &rendered, 0).unwrap(),
        common::token_ids(&t["input_ids"])
    );
    let t = &golden["two_images"];
    let rendered = prompt::chat(None, "Compare the two views.", 2);
    assert_eq!(rendered, t["rendered"].as_str().unwrap());
    assert_eq!(
        prompt::tokenize_prompt(&tok, &rendered, 2).unwrap(),
        common::token_ids(&t["input_ids"])
    );
    assert!(prompt::tokenize_prompt(&tok, &rendered, 1).is_err());
}
