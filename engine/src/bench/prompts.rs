//! The prompts the harness times: filler text of a chosen length and synthetic questions.

use crate::model::ModelError;
use crate::rexvqa::{Letter, prompt};
use crate::session::Model;

/// `n` token ids of a report-like filler sentence repeated after `<bos>`: a prompt of a chosen
/// length for the prefill figures.
pub fn filler_ids(model: &Model, n: usize) -> Vec<u32> {
    let filler = model.tokenizer.encode(
        " The heart size is normal and the lungs are clear.",
        false,
        false,
    );
    std::iter::once(model.tokenizer.bos())
        .chain(filler.iter().copied().cycle())
        .take(n)
        .collect()
}

/// The token ids of the bench's question `q` (an official prompt with four options, one image).
pub fn question_ids(model: &Model, q: usize) -> Result<Vec<u32>, ModelError> {
    let opts = [
        "A. Yes, there is a small effusion",
        "B. No, the pleura is normal",
        "C. There is a pneumothorax",
        "D. Cannot be determined",
    ]
    .map(String::from);
    let text = prompt::user_text(
        &format!("Question {q}: is there a pleural effusion on this radiograph?"),
        &opts,
        None,
    );
    model.tokenize_rendered(&prompt::chat(Some(prompt::SYSTEM), &text, 1), 1)
}

/// A prompt's token ids and the option letters it is scored on, as [`Session::score_many`]
/// takes them.
pub type Prompt = (Vec<u32>, Vec<Letter>);

/// Questions `qs` of [`question_ids`], each with every option letter: a study's prompts.
pub fn study_prompts(model: &Model, qs: std::ops::Range<usize>) -> Result<Vec<Prompt>, ModelError> {
    qs.map(|q| Ok((question_ids(model, q)?, Letter::ALL.to_vec())))
        .collect()
}
