//! Questions about the user's own images (PNG, JPEG, DICOM; several views make one study).
//! A typed multiple-choice question becomes a ReXVQA record and goes through [`eval::answer`]
//! (fast or official mode, the paper's prompt and extraction); a free question is the same
//! chat as the Study tab's. The CLI (`rexvqa ask`) and the browser worker both call these, so
//! their answers are the same numbers.

use crate::eval::{self, Answer, Clock, ImageStore, Settings};
use crate::image::Policy;
use crate::model::ModelError;
use crate::rexvqa::{Letter, Record, prompt};
use crate::session::{Mode, Session};
use std::ops::ControlFlow;

/// Tokens a free question may generate.
pub const FREE_MAX_TOKENS: usize = 512;

/// Errors in the user's question.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OwnError {
    /// An empty question.
    #[error("type a question")]
    NoQuestion,
    /// Options given, but not 2 to 4 non-empty ones.
    #[error("give 2 to 4 non-empty options (got {0}), or none for a free question")]
    Options(usize),
    /// No image.
    #[error("open at least one image")]
    NoImage,
}

/// The user's images, in view order, as an [`ImageStore`] whose paths are [`OwnStudy::path`].
pub struct OwnStudy {
    files: Vec<Vec<u8>>,
}

impl OwnStudy {
    /// A study of these files' bytes (PNG, JPEG or DICOM each).
    pub fn new(files: Vec<Vec<u8>>) -> OwnStudy {
        OwnStudy { files }
    }

    /// The path image `i` has in the question's record.
    pub fn path(i: usize) -> String {
        format!("own/{i}")
    }

    /// Images in the study.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether the study has no image.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

impl ImageStore for OwnStudy {
    async fn read(&self, path: &str) -> Result<Vec<u8>, String> {
        path.strip_prefix("own/")
            .and_then(|i| i.parse::<usize>().ok())
            .and_then(|i| self.files.get(i).cloned())
            .ok_or_else(|| format!("{path} is not one of the opened images"))
    }
}

/// The settings a question about the user's images is answered with: every view, and the
/// chosen mode and policy.
pub fn settings(mode: Mode, policy: Policy) -> Settings {
    Settings {
        mode,
        policy,
        all_images: true,
        ..Settings::default()
    }
}

/// The record of a typed multiple-choice question over `n_images` images: options get the
/// `A. ` prefixes ReXVQA options have (unless typed with them).
pub fn question_record(
    question: &str,
    options: &[String],
    n_images: usize,
) -> Result<Record, OwnError> {
    if question.trim().is_empty() {
        return Err(OwnError::NoQuestion);
    }
    if n_images == 0 {
        return Err(OwnError::NoImage);
    }
    if !(2..=4).contains(&options.len()) || options.iter().any(|o| o.trim().is_empty()) {
        return Err(OwnError::Options(options.len()));
    }
    let options: Vec<String> = options
        .iter()
        .zip(Letter::ALL)
        .map(|(o, l)| {
            let o = o.trim();
            if o.starts_with(&format!("{l}. ")) {
                o.to_string()
            } else {
                format!("{l}. {o}")
            }
        })
        .collect();
    let raw = serde_json::json!({
        "question": question.trim(),
        "options": options,
        "study_id": "own",
        "ImagePath": (0..n_images).map(OwnStudy::path).collect::<Vec<_>>(),
    });
    let raw = serde_json::value::to_raw_value(&raw).map_err(|_| OwnError::NoQuestion)?;
    Record::from_raw("own".into(), raw).map_err(|_| OwnError::Options(options.len()))
}

/// Answers a typed multiple-choice question about `study` as a ReXVQA question is answered.
pub async fn ask_choice(
    session: &mut Session<'_>,
    study: &OwnStudy,
    question: &str,
    options: &[String],
    settings: &Settings,
    clock: &impl Clock,
    on_text: &mut dyn FnMut(&str),
) -> Result<(Record, Answer), ModelError> {
    let r = question_record(question, options, study.len())
        .map_err(|e| ModelError::Prompt(e.to_string()))?;
    let a = eval::answer(session, &r, settings, study, clock, on_text).await?;
    if let Some(reason) = &a.unanswerable {
        return Err(ModelError::Prompt(reason.clone()));
    }
    Ok((r, a))
}

/// Answers a free question about `study` (the Study tab's chat), streaming the text so far to
/// `on_text`; returns the reply.
pub async fn ask_free(
    session: &mut Session<'_>,
    study: &OwnStudy,
    text: &str,
    policy: Policy,
    on_text: &mut dyn FnMut(&str),
) -> Result<String, ModelError> {
    if text.trim().is_empty() {
        return Err(ModelError::Prompt(OwnError::NoQuestion.to_string()));
    }
    // Any record naming the study's images: `features` reads only its paths.
    let r = question_record(text, &["-".into(), "-".into()], study.len())
        .map_err(|e| ModelError::Prompt(e.to_string()))?;
    let (feats, missing) =
        eval::features(session, &r, &settings(Mode::Fast, policy), study).await?;
    if !missing.is_empty() {
        return Err(ModelError::Prompt(format!(
            "cannot use the images: {}",
            missing.join("; ")
        )));
    }
    let model = session.model();
    let ids = model.tokenize_rendered(
        &prompt::chat(Some(prompt::SYSTEM), text, feats.len()),
        feats.len(),
    )?;
    let out = session
        .generate(&ids, &feats, FREE_MAX_TOKENS, &mut |_, so_far| {
            on_text(so_far);
            ControlFlow::Continue(())
        })
        .await?;
    Ok(model.tokenizer.decode(&out, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typed_question_becomes_a_record_with_lettered_options() {
        let r = question_record(
            " Is there a pneumothorax? ",
            &["Yes".into(), "B. No".into()],
            2,
        )
        .unwrap();
        assert_eq!(r.question, "Is there a pneumothorax?");
        assert_eq!(r.options, ["A. Yes", "B. No"]);
        assert_eq!(r.image_paths, ["own/0", "own/1"]);
        let five: Vec<String> = (0..5).map(|i| i.to_string()).collect();
        assert_eq!(
            question_record("q", &five, 1).unwrap_err(),
            OwnError::Options(5)
        );
        assert_eq!(
            question_record("q", &["a".into(), " ".into()], 1).unwrap_err(),
            OwnError::Options(2)
        );
        assert_eq!(
            question_record(" ", &[], 1).unwrap_err(),
            OwnError::NoQuestion
        );
        assert_eq!(
            question_record("q", &["a".into(), "b".into()], 0).unwrap_err(),
            OwnError::NoImage
        );
    }
}
