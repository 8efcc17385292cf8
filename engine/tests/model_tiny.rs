//! The whole model (vision tower, projector, decoder) on tiny MedGemma-shaped GGUFs against
//! transformers running the exactly dequantised weights (tests/reference/tiny_models.py).

mod common;
#[path = "model_tiny/quant_files.rs"]
mod quant_files;

use burn::tensor::{Device, Tensor};
use common::eval::{
    MemJournal, NoClock, StopAfter, batched_official_agrees, official_stopping_agrees, one_study,
    synthetic,
};
use common::layers::{self, Recorder, StageError};
use rexvqa_engine::device;
use rexvqa_engine::eval::Answer;
use rexvqa_engine::eval::{self, Settings};
use rexvqa_engine::gguf::FileSource;
use rexvqa_engine::image::Policy;
use rexvqa_engine::model::nn::read_f32;
use rexvqa_engine::rexvqa::Record;
use rexvqa_engine::rexvqa::{Letter, prompt};
use rexvqa_engine::session::{LoadOptions, Model, Session, record_prompt};
use std::ops::ControlFlow;

struct Case {
    golden: serde_json::Value,
    model: Model,
}

fn load(tag: &str, dev: &Device) -> Case {
    let golden = common::golden_json_gz(&format!("tiny_{tag}.json.gz"));
    let (text, mmproj) = common::tiny_pair(&golden);
    let (t, v) = (
        FileSource::open(text).unwrap(),
        FileSource::open(mmproj).unwrap(),
    );
    let model = pollster::block_on(Model::load(
        &t,
        Some(&v),
        dev,
        &LoadOptions::default(),
        &mut |_| {},
    ))
    .unwrap();
    Case { golden, model }
}

fn rendered(name: &str) -> (String, usize) {
    let opts = [
        "A. Yes, small left effusion",
        "B. No effusion",
        "C. Right-sided effusion",
        "D. Cannot be determined",
    ]
    .map(String::from);
    match name {
        "official_one_image" => (
            prompt::chat(
                Some(prompt::SYSTEM),
                &prompt::user_text(
                    "Is there evidence of pleural effusion in the left lower lobe?",
                    &opts,
                    None,
                ),
                1,
            ),
            1,
        ),
        "two_images" => (
            prompt::chat(None, "Compare the PA and lateral views.", 2),
            2,
        ),
        "text_only" => (
            prompt::chat(None, "Describe normal heart size on a chest X-ray.", 0),
            0,
        ),
        other => panic!("unknown prompt {other}"),
    }
}

/// Max |Δ| of logits and image features against the golden file, within `tol` and `feat_tol`.
/// `image0` is [`reference_image`]'s features (encoded once per model: an 896-px encode takes
/// seconds on lavapipe).
fn compare(case: &Case, image0: &Tensor<2>, tol: f32, feat_tol: f32) -> (f32, f32) {
    let m = &case.model;
    let root = common::repo_root();
    let pngs: Vec<Vec<u8>> = (0..2)
        .map(|i| {
            std::fs::read(root.join(format!("tests/fixtures/images/tiny_ref_{i}.png"))).unwrap()
        })
        .collect();
    let pixels: Vec<Vec<f32>> = pngs
        .iter()
        .map(|p| m.preprocess_file(p, Policy::Scale).unwrap())
        .collect();
    let feats = [image0.clone(), m.encode_image(&pixels[1]).unwrap()];
    let subset = common::token_ids(&case.golden["subset_ids"]);
    let (mut max_logit, mut max_feat) = (0f32, 0f32);
    for (name, g) in case.golden["prompts"].as_object().unwrap() {
        let (text, n_img) = rendered(name);
        let input = m.tokenize_rendered(&text, n_img).unwrap();
        assert_eq!(
            input,
            common::token_ids(&g["input_ids"]),
            "{name}: token ids differ from transformers"
        );
        if let Some(shas) = g.get("pixel_values_sha256") {
            for (i, want) in shas.as_array().unwrap().iter().enumerate() {
                use sha2::{Digest, Sha256};
                let mut h = Sha256::new();
                pixels[i].iter().for_each(|x| h.update(x.to_le_bytes()));
                assert_eq!(
                    format!("{:x}", h.finalize()),
                    want.as_str().unwrap(),
                    "{name}: pixel values of image {i}"
                );
            }
        }
        if let Some(f) = g.get("image_features") {
            let got = pollster::block_on(read_f32(feats[0].clone())).unwrap();
            let hidden = m.decoder.cfg.hidden;
            for (row, want) in f["rows"].as_object().unwrap() {
                let r: usize = row.parse().unwrap();
                for (j, w) in want.as_array().unwrap().iter().enumerate() {
                    max_feat =
                        max_feat.max((got[r * hidden + j] - w.as_f64().unwrap() as f32).abs());
                }
            }
            let mut abs_sum = 0f64;
            for feat in &feats[..n_img] {
                let all = pollster::block_on(read_f32(feat.clone())).unwrap();
                abs_sum += all.iter().map(|x| f64::from(x.abs())).sum::<f64>();
            }
            let want = f["abs_sum"].as_f64().unwrap();
            let rel = (abs_sum - want).abs() / want;
            println!("{name}: feature abs-sum relative error {rel:.2e}");
            // Measured at most 7.3e-8 (CPU and wgpu on lavapipe).
            assert!(rel < 1e-6, "{name}: feature magnitude {abs_sum} vs {want}");
        }
        let mut cache = m.decoder.new_cache();
        let h = m.prefill(&input, &feats[..n_img], &mut cache).unwrap();
        let hidden = m.decoder.cfg.hidden;
        for (pos, want) in g["positions"].as_object().unwrap() {
            let p: usize = pos.parse().unwrap();
            let logits = pollster::block_on(read_f32(
                m.decoder.logits(h.clone().slice([p..p + 1, 0..hidden])),
            ))
            .unwrap();
            for pair in want["top"].as_array().unwrap() {
                let (id, l) = (
                    pair[0].as_u64().unwrap() as usize,
                    pair[1].as_f64().unwrap() as f32,
                );
                max_logit = max_logit.max((logits[id] - l).abs());
            }
            for (id, l) in subset.iter().zip(want["subset"].as_array().unwrap()) {
                max_logit =
                    max_logit.max((logits[*id as usize] - l.as_f64().unwrap() as f32).abs());
            }
            // The chosen-ids head that fast mode scores the letters with, against the same values.
            let row = h.clone().slice([p..p + 1, 0..hidden]);
            let chosen = pollster::block_on(read_f32(m.decoder.logits_for(row, &subset))).unwrap();
            assert_eq!(chosen.len(), subset.len());
            for (got, l) in chosen.iter().zip(want["subset"].as_array().unwrap()) {
                max_logit = max_logit.max((got - l.as_f64().unwrap() as f32).abs());
            }
            let top0 = want["top"][0][0].as_u64().unwrap() as usize;
            assert_eq!(
                rexvqa_engine::session::argmax(&logits),
                top0,
                "{name} position {p}: argmax differs"
            );
        }
    }
    assert!(max_logit <= tol, "max |Δlogit| {max_logit} > {tol}");
    assert!(
        max_feat <= feat_tol,
        "max |Δ image feature| {max_feat} > {feat_tol}"
    );
    println!("max |Δlogit| = {max_logit:.2e}, max |Δfeature| = {max_feat:.2e}");
    (max_logit, max_feat)
}

/// Every stage of every layer against transformers' intermediates on the same weights
/// (`tests/reference/tiny_models.py --hidden-states`): the tower and projector on both reference
/// images, then the decoder on every reference prompt.
fn per_layer(case: &Case, tag: &str) -> Vec<StageError> {
    let m = &case.model;
    let hidden = common::golden_json_gz(&format!("tiny_{tag}_hidden.json.gz"));
    assert_eq!(
        hidden["text_sha256"], case.golden["text_sha256"],
        "the per-layer golden is for another fixture"
    );
    let vision = m.vision.as_ref().expect("the tiny pair has an mmproj");
    let mut errors = Vec::new();
    let mut feats = Vec::new();
    for (k, want) in hidden["images"].as_array().unwrap().iter().enumerate() {
        let png = std::fs::read(
            common::repo_root().join(format!("tests/fixtures/images/tiny_ref_{k}.png")),
        )
        .unwrap();
        let pixels = m.preprocess_file(&png, Policy::Scale).unwrap();
        let mut rec = Recorder::default();
        feats.push(vision.encode_traced(&pixels, &mut rec.tracer()).unwrap());
        errors.extend(prefixed(
            &format!("image {k}"),
            layers::compare(&rec.read(), &want["taps"]),
        ));
    }
    for (name, g) in hidden["prompts"].as_object().unwrap() {
        let (text, n_img) = rendered(name);
        let input = m.tokenize_rendered(&text, n_img).unwrap();
        assert_eq!(
            input,
            common::token_ids(&g["input_ids"]),
            "{name}: token ids"
        );
        let mut rec = Recorder::default();
        let mut cache = m.decoder.new_cache();
        m.decoder
            .forward_traced(&input, &feats[..n_img], &mut cache, &mut rec.tracer())
            .unwrap();
        errors.extend(prefixed(name, layers::compare(&rec.read(), &g["taps"])));
    }
    errors
}

fn prefixed(label: &str, errors: Vec<StageError>) -> impl Iterator<Item = StageError> {
    errors.into_iter().map(move |mut e| {
        e.stage = format!("{label}: {}", e.stage);
        e
    })
}

/// The features of the reference X-ray the golden files use (`tiny_ref_0.png`): encoded once per
/// model and shared by compare, greedy and batched.
fn reference_image(m: &Model) -> Tensor<2> {
    let png =
        std::fs::read(common::repo_root().join("tests/fixtures/images/tiny_ref_0.png")).unwrap();
    m.encode_image(&m.preprocess_file(&png, Policy::Scale).unwrap())
        .unwrap()
}

/// Greedy decoding through the KV cache: the same tokens as transformers' `generate`, and at
/// every step the same top-5 logits.
fn greedy(case: &Case, f: &Tensor<2>, tol: f32) {
    let m = &case.model;
    let (text, _) = rendered("official_one_image");
    let input = m.tokenize_rendered(&text, 1).unwrap();
    let g = &case.golden["greedy_official"];
    let want = common::token_ids(&g["ids"]);
    let mut s = Session::new(m);
    let got = pollster::block_on(s.generate(
        &input,
        std::slice::from_ref(f),
        want.len(),
        &mut |_, _| ControlFlow::Continue(()),
    ))
    .unwrap();
    assert_eq!(got, want, "greedy continuation differs");
    let hidden = m.decoder.cfg.hidden;
    let mut cache = m.decoder.new_cache();
    let mut h = m
        .prefill(&input, std::slice::from_ref(f), &mut cache)
        .unwrap();
    let mut worst = 0f32;
    for (step, top) in g["top5_per_step"].as_array().unwrap().iter().enumerate() {
        let t = h.dims()[0];
        let logits =
            pollster::block_on(read_f32(m.decoder.logits(h.slice([t - 1..t, 0..hidden])))).unwrap();
        for pair in top.as_array().unwrap() {
            let (id, l) = (
                pair[0].as_u64().unwrap() as usize,
                pair[1].as_f64().unwrap() as f32,
            );
            worst = worst.max((logits[id] - l).abs());
        }
        h = m.prefill(&[want[step]], &[], &mut cache).unwrap();
    }
    println!("greedy steps: max |Δlogit| = {worst:.2e}");
    assert!(worst <= tol, "greedy steps: max |Δlogit| {worst} > {tol}");
}

/// Four official prompts about one study: their shared prefix is the system prompt and the
/// question's opening words; the image follows each question.
fn study_prompts(m: &Model) -> Vec<(Vec<u32>, Vec<Letter>)> {
    let opts = [
        "A. Yes",
        "B. No",
        "C. Only on the right",
        "D. Cannot be determined",
    ]
    .map(String::from);
    [
        ("Is there a pleural effusion?", 4),
        (
            "Is the cardiac silhouette enlarged on this frontal radiograph?",
            2,
        ),
        ("Is there a pneumothorax?", 4),
        (
            "Are the visible ribs intact, without a displaced fracture?",
            3,
        ),
    ]
    .iter()
    .map(|&(q, n)| {
        let text = prompt::chat(
            Some(prompt::SYSTEM),
            &prompt::user_text(q, &opts[..n], None),
            1,
        );
        (
            m.tokenize_rendered(&text, 1).unwrap(),
            Letter::ALL[..n].to_vec(),
        )
    })
    .collect()
}

/// A study's questions scored together (shared prefix once, the rest as branches of one pass)
/// get the scores each gets alone: the batching changes only the order of summation.
fn batched(case: &Case, f: &Tensor<2>, tol: f32) {
    let m = &case.model;
    let prompts = study_prompts(m);
    let images = std::slice::from_ref(f);
    let mut s = Session::new(m);
    let got = pollster::block_on(s.score_many(&prompts, images)).unwrap();
    // The branched path ran: the shared prefix computed once, then every remainder (each with
    // its copy of the image, which the official prompt puts after the question).
    let full: usize = prompts.iter().map(|p| p.0.len()).sum();
    let lcp = prompts[1..].iter().fold(prompts[0].0.len(), |n, p| {
        prompts[0]
            .0
            .iter()
            .zip(&p.0)
            .take(n)
            .take_while(|(a, b)| a == b)
            .count()
    });
    assert!(lcp > 0);
    assert_eq!(s.last_computed, full - (prompts.len() - 1) * lcp);
    let mut worst = 0f32;
    for ((p, letters), g) in prompts.iter().zip(&got) {
        let want = pollster::block_on(Session::new(m).score_options(p, images, letters)).unwrap();
        assert_eq!(g.letters, want.letters);
        for (a, b) in g.logits.iter().zip(&want.logits) {
            worst = worst.max((a - b).abs());
        }
    }
    // The session's cache after a batch still continues correctly.
    let again = pollster::block_on(s.score_options(&prompts[1].0, images, &prompts[1].1)).unwrap();
    for (a, b) in again.logits.iter().zip(&got[1].logits) {
        worst = worst.max((a - b).abs());
    }
    assert!(
        worst <= tol,
        "batched vs one by one: max |Δlogit| {worst} > {tol}"
    );
    println!("batched vs one by one: max |Δlogit| = {worst:.2e}");
}

/// A session whose prompt fails (an image run without its features) keeps the study prefix it
/// had: the next prompt computes only what follows it. Each prompt writes over the positions
/// the one before wrote past the prefix (the session's cache is cut back in place, not copied),
/// and scores as a fresh session does.
fn cache_survives_a_failed_prompt(case: &Case, f: &Tensor<2>, tol: f32) {
    let m = &case.model;
    let prompts = study_prompts(m);
    let images = std::slice::from_ref(f);
    let (p1, p2) = (&prompts[0], &prompts[1]);
    let shared = p1.0.iter().zip(&p2.0).take_while(|(a, b)| a == b).count();
    assert!(shared > 0 && shared < p1.0.len().min(p2.0.len()));
    let mut s = Session::new(m);
    let score = |s: &mut Session<'_>, (ids, letters): &(Vec<u32>, Vec<Letter>)| {
        pollster::block_on(s.score_options(ids, images, letters)).unwrap()
    };
    let fresh = |p| score(&mut Session::new(m), p);
    let mut worst = max_abs_diff(&score(&mut s, p1).logits, &fresh(p1).logits);
    let failed = pollster::block_on(s.score_options(&p2.0, &[], &p2.1));
    assert!(failed.is_err(), "an image run without features must fail");
    let second = score(&mut s, p2);
    assert_eq!(s.last_computed, p2.0.len() - shared, "the prefix was kept");
    worst = worst.max(max_abs_diff(&second.logits, &fresh(p2).logits));
    // Back to the first prompt, over the second's positions.
    let again = score(&mut s, p1);
    assert_eq!(s.last_computed, p1.0.len() - shared);
    worst = worst.max(max_abs_diff(&again.logits, &fresh(p1).logits));
    assert!(
        worst <= tol,
        "cached vs fresh: max |Δlogit| {worst} > {tol}"
    );
    println!("cached vs fresh after a failed prompt: max |Δlogit| = {worst:.2e}");
}

fn max_abs_diff(p: &[f32], q: &[f32]) -> f32 {
    p.iter()
        .zip(q)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

/// A study's cache handed from one session to the next (the browser worker answers one question
/// per request): the second question encodes no image, computes only the tokens after the prefix
/// it shares with the first, and answers as a fresh session does.
fn study_cache_carries_over(case: &Case) {
    let (split, store, settings) = one_study();
    let (q1, q2) = (&split.records[0], &split.records[1]);
    assert_eq!(q1.study_key(), q2.study_key());
    let ask = |session: &mut Session<'_>, r: &Record| -> Answer {
        pollster::block_on(eval::answer(
            session,
            r,
            &settings,
            &store,
            &NoClock,
            &mut |_| {},
        ))
        .unwrap()
    };
    let mut first = Session::new(&case.model);
    ask(&mut first, q1);
    let cache = first.into_cache();
    assert_eq!(cache.images_encoded(), 1);
    let mut second = Session::with_cache(&case.model, cache);
    let a = ask(&mut second, q2);
    // The official prompt puts the images after the question, so only the system prompt and the
    // text both questions start with are reused: the second computes exactly the rest (its image
    // tokens included, from the cached features).
    let (p1, p2) = (
        record_prompt(&case.model, q1, 1).unwrap(),
        record_prompt(&case.model, q2, 1).unwrap(),
    );
    let shared = p1.iter().zip(&p2).take_while(|(a, b)| a == b).count();
    assert!(shared > 0);
    assert_eq!(second.last_computed, p2.len() - shared);
    assert_eq!(
        second.into_cache().images_encoded(),
        1,
        "no second image encode"
    );
    let alone = ask(&mut Session::new(&case.model), q2);
    assert_eq!(a.prediction, alone.prediction);
    let worst = max_abs_diff(&a.probs.unwrap(), &alone.probs.unwrap());
    // Measured 0 on the CPU (the same arithmetic per position); 1e-5 as for study batches.
    assert!(worst <= 1e-5, "cached vs fresh: max |Δprob| {worst}");
}

/// The shared evaluation loop stopped between studies (a reload, a cancel) and resumed from its
/// journal gives exactly the answers of an uninterrupted run, none twice.
fn run_stops_and_resumes(case: &Case) {
    let (split, store, settings) = synthetic(3);
    let scope = rexvqa_engine::rexvqa::Scope::All;
    let run = |done: &mut Vec<Answer>, journal: &mut MemJournal, stop: usize| {
        pollster::block_on(eval::run::run(
            &mut Session::new(&case.model),
            &split,
            &scope,
            &settings,
            done,
            &store,
            &NoClock,
            journal,
            &mut StopAfter(stop),
        ))
        .unwrap()
    };
    let mut whole = Vec::new();
    let outcome = run(&mut whole, &mut MemJournal(Vec::new()), usize::MAX);
    assert_eq!(outcome, eval::run::Outcome::Finished);
    assert_eq!(whole.len(), 6);

    let mut journal = MemJournal(Vec::new());
    let mut done = Vec::new();
    assert_eq!(run(&mut done, &mut journal, 2), eval::run::Outcome::Stopped);
    assert_eq!(done.len(), 2, "stopped after the first study");
    let mut resumed = eval::read_journal(&journal.0.concat());
    assert_eq!(resumed, done);
    assert_eq!(
        run(&mut resumed, &mut journal, usize::MAX),
        eval::run::Outcome::Finished
    );
    assert_eq!(eval::read_journal(&journal.0.concat()), resumed);
    let ids = |v: &[Answer]| {
        let mut ids: Vec<String> = v.iter().map(|a| a.id.clone()).collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&resumed), ids(&whole));
    for a in &resumed {
        let b = whole.iter().find(|b| b.id == a.id).unwrap();
        assert_eq!(
            (a.prediction, &a.probs),
            (b.prediction, &b.probs),
            "{}",
            a.id
        );
    }
}

/// Evaluation's study batches (as a GPU backend runs them) give each question the answer and
/// probabilities it gets alone.
fn study_answers(case: &Case) {
    let (split, store, settings) = one_study();
    let groups = eval::study_groups(&split, &split.eval_order(), eval::STUDY_BATCH);
    assert_eq!(groups.iter().map(Vec::len).collect::<Vec<_>>(), [2]);
    let mut session = Session::new(&case.model);
    for g in groups {
        let records: Vec<_> = g.iter().map(|&i| &split.records[i]).collect();
        session.clear();
        let batch = pollster::block_on(eval::answer_study(
            &mut session,
            &records,
            &settings,
            &store,
            &NoClock,
        ))
        .unwrap();
        assert_eq!(batch.len(), records.len());
        for (r, a) in records.iter().zip(&batch) {
            let alone = pollster::block_on(eval::answer(
                &mut Session::new(&case.model),
                r,
                &settings,
                &store,
                &NoClock,
                &mut |_| {},
            ))
            .unwrap();
            assert_eq!(a.id, alone.id);
            assert_eq!(a.prediction, alone.prediction);
            let worst = max_abs_diff(&a.probs.clone().unwrap(), &alone.probs.unwrap());
            assert!(worst <= 1e-5, "{}: max |Δprob| {worst}", a.id);
        }
    }
}

// Tolerances are about 10× the largest error measured (CPU and wgpu on lavapipe;
// transformers runs the exactly dequantised weights in f32, so only summation order differs):
// logits and greedy steps 4.3e-6 (f32), 4.2e-6 (Q8_0), 1.05e-5 (Q4_K_M); image features 1.7e-6;
// every stage of every layer, relative to its scale, 2.8e-6.
const LOGIT_TOL: f32 = 5e-5;
const LOGIT_TOL_K: f32 = 1e-4;
const FEATURE_TOL: f32 = 2e-5;
const LAYER_TOL: f32 = 3e-5;
/// Batched and one-by-one scores differ only in summation order: measured 0 on the CPU and on
/// lavapipe; the bound leaves room for a GPU that tiles the two shapes differently.
const BATCH_TOL: f32 = 1e-5;

#[test]
fn tiny_f32_on_cpu_matches_transformers() {
    let c = load("tiny-f32", &device::cpu());
    let f = reference_image(&c.model);
    compare(&c, &f, LOGIT_TOL, FEATURE_TOL);
    greedy(&c, &f, LOGIT_TOL);
    layers::assert_within("tiny-f32 per layer", &per_layer(&c, "tiny-f32"), LAYER_TOL);
}

#[test]
fn tiny_q8_0_on_cpu_matches_transformers_on_the_dequantised_weights() {
    let c = load("tiny-q8_0", &device::cpu());
    let f = reference_image(&c.model);
    compare(&c, &f, LOGIT_TOL, FEATURE_TOL);
    greedy(&c, &f, LOGIT_TOL);
    layers::assert_within(
        "tiny-q8_0 per layer",
        &per_layer(&c, "tiny-q8_0"),
        LAYER_TOL,
    );
    batched(&c, &f, BATCH_TOL);
    cache_survives_a_failed_prompt(&c, &f, BATCH_TOL);
    study_cache_carries_over(&c);
    run_stops_and_resumes(&c);
    // The random weights reach a letter after 53 or 54 tokens whatever the question: within 64
    // every reply stops early; within 53 some settle on the last token allowed (full replies)
    // and the others fail their extraction.
    let (split, store, base) = synthetic(3);
    for (max_new_tokens, stops, fails) in [(64, 6, 0), (53, 0, 3)] {
        let base = Settings {
            max_new_tokens,
            ..base.clone()
        };
        let (full, stopped) = official_stopping_agrees(&c.model, &split, &store, &base);
        assert_eq!(
            (stopped.stopped_at_letter, full.official.failed_extractions),
            (stops, fails),
            "within {max_new_tokens} tokens"
        );
    }
    // 8 tokens: the random weights settle no letter so soon, so every reply runs 8 steps from
    // its branch's cache (the stopping rule is the checks' above).
    let base = Settings {
        max_new_tokens: 8,
        ..base
    };
    assert_eq!(batched_official_agrees(&c.model, &split, &store, &base), 6);
}

#[test]
fn tinyk_q4_k_m_on_cpu_matches_transformers_on_the_dequantised_weights() {
    let c = load("tinyk-q4_k_m", &device::cpu());
    let f = reference_image(&c.model);
    compare(&c, &f, LOGIT_TOL_K, FEATURE_TOL);
    greedy(&c, &f, LOGIT_TOL_K);
    layers::assert_within(
        "tinyk-q4_k_m per layer",
        &per_layer(&c, "tinyk-q4_k_m"),
        LAYER_TOL,
    );
    batched(&c, &f, BATCH_TOL);
}

/// A model on lavapipe against transformers; the evaluation path over `score_many` and the GPU
/// kernels stage by stage on `tiny-q8_0` alone (slow on lavapipe). One test a model, so the
/// test threads share them out.
fn on_wgpu_matches_transformers(tag: &str, tol: f32) {
    let dev = device::wgpu().expect("a wgpu adapter (lavapipe: apt mesa-vulkan-drivers)");
    let c = load(tag, &dev);
    let f = reference_image(&c.model);
    compare(&c, &f, tol, FEATURE_TOL);
    greedy(&c, &f, tol);
    batched(&c, &f, BATCH_TOL);
    if tag == "tiny-q8_0" {
        cache_survives_a_failed_prompt(&c, &f, BATCH_TOL);
        study_answers(&c);
        // 64 tokens: past the 53 or 54 the random weights take to a letter.
        let (split, store, base) = one_study();
        let base = Settings {
            max_new_tokens: 64,
            ..base
        };
        let (_, stopped) = official_stopping_agrees(&c.model, &split, &store, &base);
        assert_eq!(stopped.stopped_at_letter, 2);
        let base = Settings {
            max_new_tokens: 8,
            ..base
        };
        assert_eq!(batched_official_agrees(&c.model, &split, &store, &base), 2);
        layers::assert_within(
            &format!("{tag} per layer on wgpu"),
            &per_layer(&c, tag),
            LAYER_TOL,
        );
    }
}

#[test]
fn tiny_f32_on_wgpu_matches_transformers() {
    on_wgpu_matches_transformers("tiny-f32", LOGIT_TOL);
}

#[test]
fn tiny_q8_0_on_wgpu_matches_transformers() {
    on_wgpu_matches_transformers("tiny-q8_0", LOGIT_TOL);
}

#[test]
fn tinyk_q4_k_m_on_wgpu_matches_transformers() {
    on_wgpu_matches_transformers("tinyk-q4_k_m", LOGIT_TOL_K);
}
