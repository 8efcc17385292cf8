//! The benchmark harness (`rexvqa bench`, the app's Benchmark card) on the tiny Q8_0 pair on
//! the CPU: every figure is measured, and a model without its mmproj gets the text figures only.

mod common;

use rexvqa_engine::bench::{BenchOptions, run};
use rexvqa_engine::device;
use rexvqa_engine::eval::Clock;
use rexvqa_engine::gguf::FileSource;
use rexvqa_engine::session::{LoadOptions, Model};

struct Wall(std::time::Instant);

impl Clock for Wall {
    fn now_ms(&self) -> f64 {
        self.0.elapsed().as_secs_f64() * 1000.0
    }
}

fn model(with_mmproj: bool) -> Model {
    let golden = common::golden_json_gz("tiny_tiny-q8_0.json.gz");
    let text = common::model_fixture(
        golden["text_gguf"].as_str().unwrap(),
        golden["text_sha256"].as_str().unwrap(),
    );
    let mmproj = common::model_fixture(
        golden["mmproj_gguf"].as_str().unwrap(),
        golden["mmproj_sha256"].as_str().unwrap(),
    );
    let t = FileSource::open(text).unwrap();
    let v = FileSource::open(mmproj).unwrap();
    pollster::block_on(Model::load(
        &t,
        with_mmproj.then_some(&v),
        &device::cpu(),
        &LoadOptions::default(),
        &mut |_| {},
    ))
    .unwrap()
}

fn opts() -> BenchOptions {
    BenchOptions {
        prefill_lengths: vec![40, 80],
        decode_tokens: 4,
        questions: 2,
        official_max_tokens: 3,
    }
}

#[test]
fn every_figure_is_measured_with_the_mmproj() {
    let m = model(true);
    let r = pollster::block_on(run(&m, &opts(), &Wall(std::time::Instant::now()))).unwrap();
    assert_eq!(
        r.prefill.iter().map(|p| p.0).collect::<Vec<_>>(),
        vec![40, 80]
    );
    assert!(r.prefill.iter().all(|p| p.1.is_finite() && p.1 > 0.0));
    for (name, v) in [
        ("image_encode_first_ms", r.image_encode_first_ms),
        ("image_encode_ms", r.image_encode_ms),
        ("decode", r.decode_tokens_per_s),
        ("fast", r.fast_questions_per_s),
        ("fast cold", r.fast_questions_per_s_cold),
        ("official", r.official_questions_per_s),
    ] {
        assert!(v.is_finite() && v > 0.0, "{name} = {v}");
    }
    assert!(r.official_tokens >= 1.0 && r.official_tokens <= 3.0);
}

#[test]
fn a_text_only_model_gets_the_text_figures() {
    let m = model(false);
    let r = pollster::block_on(run(&m, &opts(), &Wall(std::time::Instant::now()))).unwrap();
    assert!(r.prefill.iter().all(|p| p.1 > 0.0));
    assert!(r.decode_tokens_per_s > 0.0);
    assert_eq!(r.image_encode_ms, 0.0);
    assert_eq!(r.fast_questions_per_s, 0.0);
    assert_eq!(r.official_questions_per_s, 0.0);
}
