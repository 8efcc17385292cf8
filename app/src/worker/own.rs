//! The user's own images (PNG, JPEG, DICOM): decoded here, shown through the same viewer as the
//! dataset's (`own/<i>`), and asked about with the engine's [`own`] questions, the code
//! `rexvqa ask` runs. Their bytes and identifying attributes stay in this worker's memory:
//! nothing here writes to browser storage, journals or exports.

use rexvqa_engine::image::{Decoded, Policy};
use rexvqa_engine::own::{self, OwnStudy};
use rexvqa_engine::picture;
use rexvqa_engine::session::{Mode, Session};
use web_sys::File;

use super::error::WorkerError;
use super::reply::Replies;
use super::state::{self, Opened, PerfClock};
use crate::io::{now_ms, read_blob};
use crate::protocol::{AskTarget, Event, OwnImage};
use rexvqa_engine::eval::Answer;
use rexvqa_engine::rexvqa::Letter;

/// Decodes the attached files as the user's study (replacing the previous one).
pub async fn open(out: Replies, names: Vec<String>, files: Vec<File>) -> Result<(), WorkerError> {
    let mut listed = Vec::with_capacity(files.len());
    let mut opened = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let name = names.get(i).cloned().unwrap_or_else(|| f.name());
        let decoded = match read_blob(f).await {
            Ok(bytes) => picture::decode_named(&name, &bytes)
                .map(|p| (bytes, p))
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        match decoded {
            Ok((bytes, picture)) => {
                let path = OwnStudy::path(opened.len());
                out.post_pixels(&path, &picture.pixels);
                listed.push(OwnImage {
                    name,
                    path: Some(path),
                    info: Some(picture.info()),
                    view_window: picture.sample_window(),
                    inverted: picture.inverted(),
                    identifying: picture.identifying.clone(),
                    error: None,
                });
                opened.push(Opened { bytes, picture });
            }
            Err(e) => listed.push(OwnImage {
                name,
                path: None,
                info: None,
                view_window: None,
                inverted: false,
                identifying: Vec::new(),
                error: Some(e),
            }),
        }
    }
    state::with(|s| {
        s.own = opened;
        s.own_cache = None;
    });
    out.post(Event::OwnImages { images: listed });
    Ok(())
}

/// Posts the model's 8-bit input of every opened image under `policy` (`own-input/<i>`), and
/// how each was made.
pub fn inputs(out: Replies, policy: Policy) -> Result<(), WorkerError> {
    let model = state::model()?;
    let made = state::with(|s| -> Result<Vec<(String, Decoded)>, WorkerError> {
        s.own
            .iter()
            .map(|o| {
                let img = model
                    .model_input(&o.picture, policy)
                    .map_err(|e| e.to_string())?;
                let d = Decoded {
                    width: img.width,
                    height: img.height,
                    channels: img.channels,
                    bits: 8,
                    samples: img.data.iter().map(|&v| u16::from(v)).collect(),
                };
                Ok((o.picture.describe_policy(policy), d))
            })
            .collect()
    })?;
    for (i, (_, d)) in made.iter().enumerate() {
        out.post_pixels(&format!("own-input/{i}"), d);
    }
    let side = made.first().map_or(0, |(_, d)| d.width);
    out.post(Event::OwnInputs {
        how: made.into_iter().map(|(s, _)| s).collect(),
        side,
    });
    Ok(())
}

/// Answers a question about the opened images: multiple choice when options are given.
pub async fn ask(
    out: Replies,
    question: &str,
    options: &[String],
    mode: Mode,
    policy: Policy,
) -> Result<(), WorkerError> {
    let model = state::model()?;
    let study = OwnStudy::new(state::with(|s| {
        s.own.iter().map(|o| o.bytes.clone()).collect()
    }));
    if study.is_empty() {
        return Err(WorkerError::NoOwnImages);
    }
    let cache = match state::with(|s| s.own_cache.take()) {
        Some((made_with, cache)) if made_with == policy => cache,
        _ => Default::default(),
    };
    let mut session = Session::with_cache(&model, cache);
    let mut last = 0.0;
    let mut stream = |text: &str| {
        let now = now_ms();
        if now - last > 80.0 {
            last = now;
            out.post(Event::AskText {
                target: AskTarget::Own,
                text: text.into(),
            });
        }
    };
    let answer = if options.is_empty() {
        let t0 = now_ms();
        let text = own::ask_free(&mut session, &study, question, policy, &mut stream).await;
        let text = text.map_err(|e| e.to_string())?;
        Answer {
            id: "own".into(),
            prediction: None,
            robust: None,
            response: text,
            probs: None,
            missing_images: Vec::new(),
            unanswerable: None,
            ms: now_ms() - t0,
            ..Answer::default()
        }
    } else {
        let settings = own::settings(mode, policy);
        let (_, a) = own::ask_choice(
            &mut session,
            &study,
            question,
            options,
            &settings,
            &PerfClock,
            &mut stream,
        )
        .await
        .map_err(|e| e.to_string())?;
        a
    };
    let cache = session.into_cache();
    state::with(|s| s.own_cache = Some((policy, cache)));
    if let Some(p) = &answer.probs {
        out.post(Event::AskScores {
            target: AskTarget::Own,
            letters: Letter::ALL[..p.len()].to_vec(),
            probs: p.clone(),
        });
    }
    out.post(Event::AskText {
        target: AskTarget::Own,
        text: answer.response.clone(),
    });
    out.post(Event::AskDone {
        target: AskTarget::Own,
        answer,
    });
    Ok(())
}
