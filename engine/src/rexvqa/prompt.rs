//! The official ReXVQA prompt (ReXrank's MedGemma script) rendered exactly as transformers'
//! Gemma 3 chat template and `Gemma3Processor` render it.

use super::schema::Record;
use crate::tokenizer::{Tokenizer, ids};

/// The system text of the official evaluation script.
pub const SYSTEM: &str =
    "You are an expert medical professional specializing in medical image analysis and diagnosis.";

/// Image tokens per image in Gemma 3 (`mm_tokens_per_image`).
pub const TOKENS_PER_IMAGE: usize = 256;

/// The user text: `Question: Q\n[\nContext: C\n]\nOptions:\nA. ..\n...\n\nAnswer:`.
///
/// ref: ReXrank MedGemma script — parts `Question: {q}`, optional `\nContext: {c}`,
/// `\nOptions:`, the options joined by `\n`, `\nAnswer:`, all joined by `\n`.
pub fn user_text(question: &str, options: &[String], context: Option<&str>) -> String {
    let mut parts = vec![format!("Question: {question}")];
    if let Some(c) = context {
        parts.push(format!("\nContext: {c}"));
    }
    parts.push("\nOptions:".to_string());
    parts.push(options.join("\n"));
    parts.push("\nAnswer:".to_string());
    parts.join("\n")
}

/// The official prompt for a record.
pub fn official_user_text(r: &Record) -> String {
    user_text(&r.question, &r.options, r.context.as_deref())
}

/// Renders one user turn through the Gemma 3 chat template with `add_generation_prompt`:
/// `<bos><start_of_turn>user\n{system}\n\n{text}` + one `<start_of_image>` per image (text
/// first, as the official script orders the content) + `<end_of_turn>\n<start_of_turn>model\n`.
///
/// The template trims each text item; the system text is not trimmed.
pub fn chat(system: Option<&str>, text: &str, n_images: usize) -> String {
    let mut s = String::from("<bos><start_of_turn>user\n");
    if let Some(sys) = system {
        s.push_str(sys);
        s.push_str("\n\n");
    }
    s.push_str(trim_jinja(text));
    for _ in 0..n_images {
        s.push_str("<start_of_image>");
    }
    s.push_str("<end_of_turn>\n<start_of_turn>model\n");
    s
}

/// Jinja's `trim` strips Python whitespace (`str.strip()`).
fn trim_jinja(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace())
}

/// The official chat prompt for a record with `n_images` images.
pub fn official_chat(r: &Record, n_images: usize) -> String {
    chat(Some(SYSTEM), &official_user_text(r), n_images)
}

/// Expands each `<start_of_image>` as `Gemma3Processor` does:
/// `\n\n<start_of_image>` + 256 × `<image_soft_token>` + `<end_of_image>\n\n`.
pub fn expand_images(rendered: &str) -> String {
    let soft = "<image_soft_token>".repeat(TOKENS_PER_IMAGE);
    rendered.replace(
        "<start_of_image>",
        &format!("\n\n<start_of_image>{soft}<end_of_image>\n\n"),
    )
}

/// A prompt whose image tokens could not be placed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the prompt has {found} image markers but {expected} images were given")]
pub struct ImageCountMismatch {
    /// Images given.
    pub expected: usize,
    /// `<start_of_image>` markers found.
    pub found: usize,
}

/// Token ids of a rendered prompt whose images are still single `<start_of_image>` markers,
/// equal to tokenising `expand_images(rendered)` as one string with the image soft token as id
/// 262144 (the expansion's `\n\n` may join neighbouring newlines into one token, so the whole
/// string is tokenised, never pieces). Special tokens written in the text are recognised; no
/// BOS is added (the template writes `<bos>`).
pub fn tokenize_prompt(
    tok: &Tokenizer,
    rendered: &str,
    n_images: usize,
) -> Result<Vec<u32>, ImageCountMismatch> {
    let with_markers =
        rendered.replace("<start_of_image>", "\n\n<start_of_image><end_of_image>\n\n");
    let ids0 = tok.encode(&with_markers, false, true);
    let found = ids0.iter().filter(|&&t| t == ids::START_OF_IMAGE).count();
    if found != n_images {
        return Err(ImageCountMismatch {
            expected: n_images,
            found,
        });
    }
    let mut out = Vec::with_capacity(ids0.len() + n_images * TOKENS_PER_IMAGE);
    for t in ids0 {
        out.push(t);
        if t == ids::START_OF_IMAGE {
            out.extend(std::iter::repeat_n(ids::IMAGE_SOFT, TOKENS_PER_IMAGE));
        }
    }
    Ok(out)
}
