//! Asking the model about one question: a split question (fast or official mode, as an
//! evaluation would) or the user's own question about its study (streamed). Consecutive
//! questions on one study share its image features and prompt prefix.

use rexvqa_engine::eval::{self, Answer, Settings};
use rexvqa_engine::rexvqa::{Letter, Record, prompt};
use rexvqa_engine::session::{Model, Session};
use std::ops::ControlFlow;
use std::rc::Rc;

use super::error::WorkerError;
use super::reply::Replies;
use super::state::{self, FileStore, PerfClock};
use crate::io::now_ms;
use crate::protocol::{AskTarget, Event};

/// Tokens the free question may generate.
const FREE_MAX_TOKENS: usize = 512;
/// Milliseconds between streamed-text events.
const STREAM_EVERY_MS: f64 = 80.0;

fn study_key(split_name: &str, r: &Record) -> String {
    format!("{split_name}\u{0}{}", r.study_key())
}

/// A session on the study `key`: with its cache if it was the last one asked about, else moved
/// on from the last one ([`Session::next_study`]: on a GPU its features and KV are released once
/// this study's image is encoded, which keeps the browser's pool from making new pages for the
/// next few studies, as scoring a split showed at 4B).
fn study_session<'m>(model: &'m Model, key: &str) -> Session<'m> {
    match state::with(|s| s.study.take()) {
        Some((k, c)) if k == key => Session::with_cache(model, c),
        Some((_, c)) => {
            let mut session = Session::with_cache(model, c);
            session.next_study();
            session
        }
        None => Session::new(model),
    }
}

/// Keeps `session`'s cache as the study `key`'s for the next question.
fn keep_study(key: String, session: Session<'_>) {
    let cache = session.into_cache();
    state::with(|s| s.study = Some((key, cache)));
}

/// Question `id` of the open split `split_name`, the loaded model, and its study's key.
struct Asked {
    model: Rc<Model>,
    record: Record,
    study: String,
}

impl Asked {
    fn find(split_name: &str, id: &str) -> Result<Asked, WorkerError> {
        let (model, s) = (state::model()?, state::split(split_name)?);
        let record = s
            .get(id)
            .ok_or_else(|| format!("question {id} is not in split {split_name}"))?
            .clone();
        let study = study_key(split_name, &record);
        Ok(Asked {
            model,
            record,
            study,
        })
    }
}

/// Streams generated text to the page, at most once per [`STREAM_EVERY_MS`].
struct Stream {
    out: Replies,
    target: AskTarget,
    last: f64,
}

impl Stream {
    fn new(out: Replies, target: AskTarget) -> Stream {
        Stream {
            out,
            target,
            last: 0.0,
        }
    }

    fn text(&mut self, text: &str) {
        let now = now_ms();
        if now - self.last > STREAM_EVERY_MS {
            self.last = now;
            self.out.post(Event::AskText {
                target: self.target.clone(),
                text: text.into(),
            });
        }
    }
}

/// Answers question `id` of `split_name` as an evaluation would, streaming official-mode text.
pub async fn question(
    out: Replies,
    split_name: &str,
    id: &str,
    settings: Settings,
) -> Result<(), WorkerError> {
    let Asked {
        model,
        record,
        study,
    } = Asked::find(split_name, id)?;
    let target = AskTarget::Question { id: id.into() };
    let mut session = study_session(&model, &study);
    let mut stream = Stream::new(out, target.clone());
    let a = eval::answer(
        &mut session,
        &record,
        &settings,
        &FileStore::current(),
        &PerfClock,
        &mut |text| stream.text(text),
    )
    .await
    .map_err(|e| e.to_string())?;
    keep_study(study, session);
    if let Some(p) = &a.probs {
        out.post(Event::AskScores {
            target: target.clone(),
            letters: Letter::ALL[..p.len()].to_vec(),
            probs: p.clone(),
        });
    }
    out.post(Event::AskText {
        target: target.clone(),
        text: a.response.clone(),
    });
    out.post(Event::AskDone { target, answer: a });
    Ok(())
}

/// Answers the user's own question `text` about the study of question `id`, streaming.
pub async fn free(
    out: Replies,
    split_name: &str,
    id: &str,
    text: &str,
    settings: Settings,
) -> Result<(), WorkerError> {
    let Asked {
        model,
        record,
        study,
    } = Asked::find(split_name, id)?;
    let mut session = study_session(&model, &study);
    let (feats, missing) = eval::features(&mut session, &record, &settings, &FileStore::current())
        .await
        .map_err(|e| e.to_string())?;
    if !missing.is_empty() {
        return Err(format!("cannot read the study's images: {}", missing.join("; ")).into());
    }
    let ids = model
        .tokenize_rendered(
            &prompt::chat(Some(prompt::SYSTEM), text, feats.len()),
            feats.len(),
        )
        .map_err(|e| e.to_string())?;
    let t0 = now_ms();
    let mut stream = Stream::new(out, AskTarget::Free);
    let generated = session
        .generate(&ids, &feats, FREE_MAX_TOKENS, &mut |_, so_far| {
            stream.text(so_far);
            ControlFlow::Continue(())
        })
        .await
        .map_err(|e| e.to_string())?;
    keep_study(study, session);
    let text = model.tokenizer.decode(&generated, true);
    out.post(Event::AskText {
        target: AskTarget::Free,
        text: text.clone(),
    });
    out.post(Event::AskDone {
        target: AskTarget::Free,
        answer: Answer {
            // The free question is about this question's study.
            id: id.into(),
            prediction: None,
            robust: None,
            response: text,
            probs: None,
            missing_images: Vec::new(),
            unanswerable: None,
            ms: now_ms() - t0,
            ..Answer::default()
        },
    });
    Ok(())
}
