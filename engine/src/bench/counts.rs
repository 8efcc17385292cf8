//! Dispatch counts of each pass (a CubeCL dry run where the device allows it): a decoded token, a
//! question, a study's batched questions, an image.

use serde::{Deserialize, Serialize};

use super::prompts::{question_ids, study_prompts};
use crate::launches::{self, Counts};
use crate::model::ModelError;
use crate::rexvqa::Letter;
use crate::session::{Model, Session};

/// What each pass asks of the device, counted by [`count_passes`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PassCounts {
    /// One decoded token (forward of one id with the KV cache, then greedy choice).
    pub token: Counts,
    /// The first fast-mode question of a study (its image already encoded).
    pub first_question: Option<Counts>,
    /// A later fast-mode question of the same study (the shared prefix cached).
    pub question: Option<Counts>,
    /// `questions` questions of a study scored in one batched pass.
    pub batched: Option<Counts>,
    /// The same questions in official mode ([`Session::generate_many`]): their batched
    /// prefill, then each reply decoded to [`OFFICIAL_TOKENS`] tokens.
    #[serde(default)]
    pub official_batched: Option<Counts>,
    /// Questions in the batched passes.
    pub questions: usize,
    /// One image encode.
    pub image: Option<Counts>,
}

/// Tokens a reply is counted to in [`PassCounts::official_batched`]: where Gemma 3 270M's real
/// replies settle their official letter (`engine/tests/cpu/gemma270m.rs`).
pub const OFFICIAL_TOKENS: usize = 2;

/// Counts the dispatches, reads and uploads of one decoded token, fast-mode questions and one
/// image encode (the last two need a vision tower), under a CubeCL dry run: every launch is
/// issued, counted and compiled as in a real run, then dropped, so a model too large to run on
/// a software adapter is counted in seconds. Nothing here branches on a computed value (a dry
/// run reads back whatever the buffers held), so the counts are those of a real run; the
/// `dry_runs_count_what_real_runs_do` test checks it. Empty counts on the CPU backend, which
/// launches nothing and is not run.
///
/// The dry run is process-wide (CubeCL keeps one count of open dry runs): while it lives, the
/// launches of every thread are dropped, so nothing else may compute on a GPU meanwhile.
pub async fn count_passes(model: &Model, questions: usize) -> Result<PassCounts, ModelError> {
    if !crate::device::queues_work(model.device()) {
        return Ok(PassCounts {
            questions,
            ..Default::default()
        });
    }
    let _dry = burn_cubecl::cubecl::dry_run::DryRun::new();
    count_passes_now(model, questions).await
}

/// [`count_passes`] with the launches executed (for checking the dry run against).
#[doc(hidden)]
pub async fn count_passes_now(model: &Model, questions: usize) -> Result<PassCounts, ModelError> {
    let mut pc = PassCounts {
        questions,
        ..Default::default()
    };
    let ids: Vec<u32> = std::iter::once(model.tokenizer.bos())
        .chain(
            model
                .tokenizer
                .encode(" The heart size is normal.", false, false),
        )
        .collect();
    let mut cache = model.decoder.new_cache();
    let hidden = model.prefill(&ids, &[], &mut cache)?;
    // The first decoded token also moves the prompt's keys into cache buffers with spare
    // positions (once per prompt); the one counted is the next, as every later token is.
    let next = model.decoder.greedy(
        model
            .decoder
            .forward_token(model.decoder.greedy(hidden), &mut cache),
    );
    // One token, read back as generation does at its end, so a read that the greedy choice
    // needs (the host argmax when the device one is off) is counted too.
    let c = launches::count();
    let next = model
        .decoder
        .next_token(model.decoder.forward_token(next, &mut cache))
        .await?;
    drop(next.into_data_async().await);
    launches::note_read();
    pc.token = c.finish();
    drop(cache);

    if let Some(vision) = model.vision.as_ref() {
        let size = vision.cfg.image_size;
        let pixels = vec![0.0f32; 3 * size * size];
        let c = launches::count();
        drop(model.encode_image(&pixels)?);
        pc.image = Some(c.finish());
        let mut session = Session::new(model);
        let f = session.add_image("count", &pixels)?;
        for q in 0..2 {
            let c = launches::count();
            session
                .score_options(
                    &question_ids(model, q)?,
                    std::slice::from_ref(&f),
                    &Letter::ALL,
                )
                .await?;
            let counts = Some(c.finish());
            if q == 0 {
                pc.first_question = counts;
            } else {
                pc.question = counts;
            }
        }
        // The batched study moves the same session on, as the evaluation does
        // (`Session::next_study`): a second session beside the first would hold both studies'
        // pages.
        session.next_study();
        let f = session.add_image("count", &pixels)?;
        let prompts = study_prompts(model, 0..questions)?;
        let c = launches::count();
        session
            .score_many(&prompts, std::slice::from_ref(&f))
            .await?;
        pc.batched = Some(c.finish());
        let prompts: Vec<Vec<u32>> = prompts.into_iter().map(|(p, _)| p).collect();
        let c = launches::count();
        let go_on = &mut |_, _, _: &str| std::ops::ControlFlow::Continue(());
        session
            .generate_many(&prompts, std::slice::from_ref(&f), OFFICIAL_TOKENS, go_on)
            .await?;
        pc.official_batched = Some(c.finish());
    }
    Ok(pc)
}
