//! The device self-test natively: every check passes on the CPU and on lavapipe, a fault
//! injected into one kernel form is caught and that form avoided, and the CLI's JSON.

use std::io::Read;
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

use rexvqa_engine::device;
use rexvqa_engine::eval::Clock;
use rexvqa_engine::gguf::{GgmlType, Gguf, SliceSource};
use rexvqa_engine::kernels::forms::{self, Form};
use rexvqa_engine::pair::PairHeaders;
use rexvqa_engine::quant::{Kernel, allow_software_subgroups, resolve};
use rexvqa_engine::selftest::{self, Plan, Report};

/// The disabled forms and injected faults are process-wide: tests that touch them take turns.
static FORMS: Mutex<()> = Mutex::new(());

/// The forms of the fused row kernels (norms, RoPE, GELU).
const ROW_FORMS: [Form; 4] = [
    Form::FusedNorm,
    Form::FusedRope,
    Form::FusedGelu,
    Form::FusedLayerNorm,
];

struct Wall(Instant);

impl Clock for Wall {
    fn now_ms(&self) -> f64 {
        self.0.elapsed().as_secs_f64() * 1000.0
    }
}

/// The types of a Q4_K_M MedGemma (Q4_K, Q6_K, F16 mmproj; F32 norms are not matrices) and
/// MedGemma 4B's head widths: what the app checks after loading one.
fn medgemma_plan() -> Plan {
    Plan::medgemma_4b(vec![GgmlType::F16, GgmlType::Q4_K, GgmlType::Q6_K])
}

fn run(dev: &burn::tensor::Device, plan: &Plan) -> Report {
    let r = pollster::block_on(selftest::run(dev, plan, &Wall(Instant::now())));
    for c in &r.checks {
        eprintln!(
            "{:5} {:24} {:9.2e} ≤ {:9.2e} {:6.0} ms {}",
            c.passed, c.name, c.max_error, c.bound, c.ms, c.detail
        );
    }
    eprintln!("{}", r.verdict());
    r
}

fn gpu() -> burn::tensor::Device {
    allow_software_subgroups();
    device::wgpu().expect("a wgpu adapter (lavapipe: apt mesa-vulkan-drivers)")
}

fn failed(r: &Report) -> Vec<&str> {
    r.checks
        .iter()
        .filter(|c| !c.passed)
        .map(|c| c.name.as_str())
        .collect()
}

/// The weight types the default plan checks: every one the engine reads.
fn supported_types() -> usize {
    rexvqa_engine::gguf::GgmlType::all()
        .filter(|t| t.is_supported())
        .count()
}

#[test]
fn every_check_passes_on_the_cpu() {
    let _g = FORMS.lock().unwrap_or_else(|p| p.into_inner());
    let r = run(&device::cpu(), &Plan::default());
    assert!(r.all_passed(), "failed: {:?}", failed(&r));
    assert!(r.usable && r.disabled.is_empty());
    // One matmul and one gather per supported type, blocked attention per head width, the
    // forward and the argmax.
    assert_eq!(r.checks.len(), supported_types() * 2 + 2 + 2);
}

#[test]
fn every_check_passes_on_lavapipe_and_the_forward_matches_the_cpu() {
    let _g = FORMS.lock().unwrap_or_else(|p| p.into_inner());
    let dev = gpu();
    let r = run(&dev, &medgemma_plan());
    assert!(r.all_passed(), "failed: {:?}", failed(&r));
    assert!(r.usable && r.disabled.is_empty(), "{}", r.verdict());
    let names: Vec<&str> = r.checks.iter().map(|c| c.name.as_str()).collect();
    for want in [
        "matmul.naive.q4_k",
        "matmul.gemv.q6_k",
        "matmul.gemv_subgroup.f16",
        "matmul.tiled.q4_k",
        "f16_native.q4_k",
        "gather.q6_k",
        "attention.fused.d72.unmasked",
        "attention.blocked.d72.unmasked",
        "attention.blocked.d256",
        "attention.decode.d256",
        "fused.add_rms_norm",
        "fused.add_rms_norm_then_norm",
        "fused.rms_norm_rope",
        "fused.qk_norm_rope_store",
        "fused.gelu_mul",
        "fused.gelu_mul_halves",
        "fused.layer_norm",
        "stacked.naive",
        "stacked.tiled",
        "stacked.tiled_split",
        "matmul.tiled_split.q4_k",
        "gelu_product.naive",
        "forward.tiny",
        "argmax",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let fwd = r.checks.iter().find(|c| c.name == "forward.tiny").unwrap();
    // Measured on lavapipe: |Δlogit| 4.9e-6 with logits up to 3.4 (the tiny decoder at
    // MedGemma's head width 256; 1.8e-6 at width 64).
    assert!(fwd.max_error < 5e-5, "forward |Δlogit| {}", fwd.max_error);
}

/// A wrong result from the form the automatic choice takes on lavapipe for decoding (naive),
/// from the split tiled product, from the fused and decode attention kernels, from every fused row kernel, from the two fused
/// products and from the device argmax:
/// each is caught and turned off with the reason, and the tiny model's forward, now through
/// gemv, blocked attention and composed norms, still matches the CPU.
#[test]
fn an_injected_fault_in_one_form_is_detected_and_the_form_avoided() {
    let _g = FORMS.lock().unwrap_or_else(|p| p.into_inner());
    let dev = gpu();
    assert_eq!(resolve(&dev, Kernel::Auto, [1, 13, 256]), Kernel::Naive);
    forms::inject_fault(Form::Naive);
    forms::inject_fault(Form::TiledSplit);
    forms::inject_fault(Form::FusedAttention);
    forms::inject_fault(Form::DecodeAttention);
    forms::inject_fault(Form::WideAttention);
    for f in ROW_FORMS {
        forms::inject_fault(f);
    }
    forms::inject_fault(Form::DeviceArgmax);
    forms::inject_fault(Form::StackedProduct);
    forms::inject_fault(Form::GeluProduct);
    let r = run(&dev, &medgemma_plan());
    forms::clear_faults();
    let now = resolve(&dev, Kernel::Auto, [1, 13, 256]);
    let fused_on = [
        Form::FusedAttention,
        Form::DecodeAttention,
        Form::WideAttention,
    ]
    .into_iter()
    .any(forms::enabled);
    let rows_on = ROW_FORMS.map(forms::enabled);
    let argmax_on = forms::enabled(Form::DeviceArgmax);
    let products_on = forms::enabled(Form::StackedProduct) || forms::enabled(Form::GeluProduct);
    forms::reset();

    let off: Vec<Form> = r.disabled.iter().map(|d| d.form).collect();
    assert_eq!(
        off,
        [
            Form::Naive,
            Form::TiledSplit,
            Form::DecodeAttention,
            Form::WideAttention,
            Form::FusedAttention,
            Form::FusedNorm,
            Form::FusedRope,
            Form::FusedLayerNorm,
            Form::FusedGelu,
            Form::StackedProduct,
            Form::GeluProduct,
            Form::DeviceArgmax
        ],
        "{}",
        r.verdict()
    );
    assert_eq!(
        rows_on, [false; 4],
        "the composed ops replace the fused ones"
    );
    assert!(
        r.disabled[0]
            .reason
            .starts_with("matmul.naive.f16: error 1.0e0 > bound"),
        "{}",
        r.disabled[0].reason
    );
    assert!(
        failed(&r).iter().all(|n| n.starts_with("matmul.naive.")
            || n.starts_with("matmul.tiled_split.")
            || n.starts_with("fused.")
            || n.starts_with("stacked.")
            || n.starts_with("gelu_product.")
            || n.starts_with("attention.decode.")
            || n.starts_with("attention.wide.")
            || *n == "attention.fused.d72.unmasked"
            || *n == "argmax"),
        "{:?}",
        failed(&r)
    );
    assert_eq!(now, Kernel::Gemv, "decoding moves to the next form");
    assert!(
        !fused_on && !argmax_on,
        "greedy decoding takes the host's argmax"
    );
    assert!(
        !products_on,
        "a product per matrix and the GELU kernel replace the fused products"
    );
    assert!(r.usable, "{}", r.verdict());
    let fwd = r.checks.iter().find(|c| c.name == "forward.tiny").unwrap();
    assert!(
        fwd.passed,
        "forward after avoiding the faulty forms: {fwd:?}"
    );
    assert!(
        r.verdict().contains("naive matmul turned off"),
        "{}",
        r.verdict()
    );
}

/// With the device argmax turned off (here: broken on purpose, so it would pick the next id),
/// greedy decoding reads the logits back and takes the host's argmax.
#[test]
fn greedy_decoding_takes_the_host_argmax_when_the_device_argmax_is_off() {
    use rexvqa_engine::session::{LoadOptions, Model, argmax};
    let _g = FORMS.lock().unwrap_or_else(|p| p.into_inner());
    let dev = gpu();
    let text = SliceSource(gunzip("../tests/fixtures/models/tiny-q8_0.gguf.gz"));
    let model = pollster::block_on(Model::load(
        &text,
        None::<&SliceSource<Vec<u8>>>,
        &dev,
        &LoadOptions::default(),
        &mut |_| {},
    ))
    .unwrap();
    let d = &model.decoder;
    let mut cache = d.new_cache();
    let h = d.forward(&[2, 105, 2364, 107], &[], &mut cache).unwrap();
    let id = |t: burn::tensor::Tensor<1, burn::tensor::Int>| {
        pollster::block_on(t.into_data_async())
            .unwrap()
            .try_into_vec::<u32>()
            .unwrap()[0]
    };
    let logits =
        pollster::block_on(rexvqa_engine::model::nn::read_f32(d.logits(h.clone()))).unwrap();
    let vocab = d.cfg.vocab;
    let want = argmax(&logits[logits.len() - vocab..]) as u32;
    forms::inject_fault(Form::DeviceArgmax);
    let broken = id(pollster::block_on(d.next_token(h.clone())).unwrap());
    forms::disable(Form::DeviceArgmax, "test");
    let host = id(pollster::block_on(d.next_token(h)).unwrap());
    forms::clear_faults();
    forms::reset();
    assert_eq!(broken, want + 1, "the fault is on the device path");
    assert_eq!(host, want);
}

fn gunzip(p: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(p);
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap())
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// A model pair's plan is its matrices' types, the decoder's head width and the vision tower's.
#[test]
fn the_plan_of_a_model_pair_lists_its_matrix_types_and_head_widths() {
    let text = gunzip("../tests/fixtures/models/tiny-q8_0.gguf.gz");
    let mmproj = gunzip("../tests/fixtures/models/tiny-q8_0-mmproj.gguf.gz");
    let h = PairHeaders {
        text: Gguf::read(&mut SliceSource(text)).unwrap(),
        mmproj: Some(Gguf::read(&mut SliceSource(mmproj)).unwrap()),
    };
    let plan = Plan::from_headers(&h).unwrap();
    assert!(plan.types.contains(&GgmlType::Q8_0), "{plan:?}");
    assert!(!plan.types.is_empty() && plan.types.iter().all(|t| t.is_supported()));
    assert_eq!(plan.text_head_dims.len(), 1, "{plan:?}");
    assert_eq!(plan.vision_head_dims.len(), 1, "{plan:?}");
}

/// The plan of the text model `tests/fixtures/models/NAME.gguf.gz` alone, from its headers.
fn text_plan(name: &str) -> Plan {
    let text = gunzip(&format!("../tests/fixtures/models/{name}.gguf.gz"));
    let h = PairHeaders {
        text: Gguf::read(&mut SliceSource(text)).unwrap(),
        mmproj: None,
    };
    Plan::from_headers(&h).unwrap()
}

/// The tiny forward takes the model's decoder head width, so it must build at any width a
/// model may have (its attention output rows whole 256-blocks): the tiny pair's, 72 and 160.
#[test]
fn the_selftest_passes_on_the_cpu_at_other_head_widths() {
    let _g = FORMS.lock().unwrap_or_else(|p| p.into_inner());
    let tiny = text_plan("tiny-q8_0");
    assert!(tiny.vision_head_dims.is_empty(), "{tiny:?}");
    // Its q, k and v are all Q8_0, joined into one matrix: no stacked product to check.
    assert_eq!(tiny.stacked, None);
    for d in [tiny.text_head_dims[0], 72, 160] {
        let plan = Plan {
            text_head_dims: vec![d],
            ..tiny.clone()
        };
        let r = run(&device::cpu(), &plan);
        assert!(r.all_passed(), "head width {d}: {:?}", failed(&r));
    }
}

/// A Q4_K_M model gives some layers' v Q6_K beside a Q4_K q+k: its plan checks the stacked
/// product with that pair, which the tiny Q8_0 pair's plan leaves out.
#[test]
fn the_plan_checks_the_stacked_product_a_model_runs() {
    let _g = FORMS.lock().unwrap_or_else(|p| p.into_inner());
    let plan = text_plan("tinyk-q4_k_m");
    assert_eq!(plan.stacked, Some([GgmlType::Q4_K, GgmlType::Q6_K]));
    // The CPU has no kernel forms to check: the products' fusions are checked on lavapipe.
    let dev = gpu();
    let r = run(&dev, &plan);
    assert!(r.all_passed(), "{:?}", failed(&r));
    let names: Vec<&str> = r.checks.iter().map(|c| c.name.as_str()).collect();
    assert!(names.iter().any(|n| n.starts_with("stacked.")), "{names:?}");
    let without = Plan {
        stacked: None,
        ..plan
    };
    let r = run(&dev, &without);
    assert!(r.all_passed(), "{:?}", failed(&r));
    assert!(!r.checks.iter().any(|c| c.name.starts_with("stacked.")));
}

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rexvqa"))
        .args(args)
        .output()
        .expect("rexvqa runs")
}

#[test]
fn the_cli_prints_one_json_entry_per_check_and_exits_zero_when_all_pass() {
    let out = cli(&["selftest", "--backend", "cpu", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = v.as_array().unwrap();
    let n = supported_types() * 2 + 4;
    assert_eq!(checks.len(), n);
    for c in checks {
        assert!(c["name"].is_string(), "{c}");
        assert!(c["max_error"].as_f64().unwrap() <= c["bound"].as_f64().unwrap());
        assert_eq!(c["passed"], true);
        assert!(c["ms"].as_f64().unwrap() >= 0.0, "{c}");
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("{n} checks passed")), "{stderr}");
}

#[test]
fn the_cli_on_wgpu_passes_on_lavapipe_and_fails_with_an_injected_fault() {
    let out = cli(&["selftest", "--backend", "wgpu", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.as_array().unwrap().iter().all(|c| c["passed"] == true));

    let out = cli(&[
        "selftest",
        "--backend",
        "wgpu",
        "--json",
        "--inject-fault",
        "tiled",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let failed: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["passed"] == false)
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    let n = supported_types();
    assert_eq!(failed.len(), n, "one tiled check per type: {failed:?}");
    assert!(failed.iter().all(|n| n.starts_with("matmul.tiled.")));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("tiled matmul turned off"), "{stderr}");
    let total = v.as_array().unwrap().len();
    assert!(
        stderr.contains(&format!("{n} of {total} self-test checks failed")),
        "{stderr}"
    );
}
