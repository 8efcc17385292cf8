//! GPU dispatches per decoded token, counted with CubeCL's launch observer: with the fused
//! row kernels ([`rexvqa_engine::kernels::rows`]) and the decode attention kernel, and with
//! their forms turned off (composed burn ops, blocked attention), for the tiny MedGemma-shaped
//! model (head width 32: the fused attention kernel either way) and Gemma 3 270M (head width
//! 256, as MedGemma 4B's decoder) on lavapipe.
//! The same test checks what loading Gemma 3 270M launches and adds to the device pool. One
//! test in this binary: the observer and the pool are process-wide.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use burn::tensor::{Device, Tensor};
use burn_cubecl::cubecl::logging::{LaunchObservation, LaunchObserver};
use rexvqa_engine::device;
use rexvqa_engine::kernels::forms::{self, Form};
use rexvqa_engine::model::trace::{self, Tap, Tracer};
use rexvqa_engine::session::Model;

/// Every kernel launch, in order, by short name.
#[derive(Default)]
struct Launches(Mutex<Vec<&'static str>>);

impl Launches {
    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

impl LaunchObserver for Launches {
    fn launched(&self, kernel: &'static str) {
        self.0.lock().unwrap().push(kernel);
    }
}

/// The launch count at the end of each decoder layer (`l_out`) and at the start (`inp_scaled`).
struct Marks<'a> {
    launches: &'a Launches,
    start: usize,
    layer_ends: Vec<usize>,
}

impl Tracer for Marks<'_> {
    fn tap(&mut self, at: Tap, _: &Tensor<2>) {
        match (at.name, at.layer) {
            (trace::INP_SCALED, None) => self.start = self.launches.count(),
            (trace::L_OUT, Some(_)) => self.layer_ends.push(self.launches.count()),
            _ => {}
        }
    }
}

/// Dispatches of one decoded token: the whole step, each layer, and the kernels of layer 1
/// by name (a sliding-window layer in both models).
struct Counted {
    token: usize,
    per_layer: Vec<usize>,
    kernels: BTreeMap<String, usize>,
}

/// The kernel's own name: the last path segment before any generic arguments.
fn short(kernel: &str) -> String {
    let base = kernel.split('<').next().unwrap_or(kernel);
    base.rsplit("::").next().unwrap_or(base).to_string()
}

/// Counts the launches of one decoded token after a short prompt and one warm-up token (so no
/// first-use work, such as autotuning, is counted).
fn count_token(model: &Model, ids: &[u32]) -> Counted {
    let d = &model.decoder;
    let mut cache = d.new_cache();
    d.forward(ids, &[], &mut cache).unwrap();
    d.forward(&[ids[1]], &[], &mut cache).unwrap();
    let launches = Arc::new(Launches::default());
    let watching = LaunchObservation::new(launches.clone());
    let mut marks = Marks {
        launches: &launches,
        start: 0,
        layer_ends: Vec::new(),
    };
    let h = d
        .forward_traced(&[ids[2]], &[], &mut cache, &mut marks)
        .unwrap();
    let id = d.greedy(h);
    drop(watching);
    drop(id);
    let all = launches.0.lock().unwrap().clone();
    let mut per_layer = Vec::new();
    let mut prev = marks.start;
    for &end in &marks.layer_ends {
        per_layer.push(end - prev);
        prev = end;
    }
    let mut kernels = BTreeMap::new();
    for k in &all[marks.layer_ends[0]..marks.layer_ends[1]] {
        *kernels.entry(short(k)).or_default() += 1;
    }
    Counted {
        token: all.len(),
        per_layer,
        kernels,
    }
}

/// The forms of the kernels that replace composed burn ops: turned off, the decoder runs as it
/// did before them.
const NEW_FORMS: [Form; 8] = [
    Form::FusedNorm,
    Form::FusedRope,
    Form::FusedGelu,
    Form::FusedLayerNorm,
    Form::DecodeAttention,
    Form::WideAttention,
    Form::StackedProduct,
    Form::GeluProduct,
];

/// Counts a token with the fused kernels and with them turned off; prints both and returns
/// `(fused, composed)`.
fn both(label: &str, model: &Model) -> (Counted, Counted) {
    forms::reset();
    let fused = count_token(model, &[2, 17, 5, 9]);
    for f in NEW_FORMS {
        forms::disable(f, "counting the composed path");
    }
    let composed = count_token(model, &[2, 17, 5, 9]);
    forms::reset();
    for (name, c) in [("fused", &fused), ("composed", &composed)] {
        eprintln!(
            "{label} {name}: {} dispatches per token, per layer {:?}; layer 1: {:?}",
            c.token, c.per_layer, c.kernels
        );
    }
    (fused, composed)
}

fn load(text: std::path::PathBuf, dev: &Device) -> Model {
    common::load_model(&text, None, dev)
}

/// The new kernels take a decoder layer from 82 dispatches to 8 (tiny model) and from 94 to
/// 8 (Gemma 3 270M; lavapipe). What they are: the product of q, k and v (one
/// matrix joined at load, or where v has another type, as in Q4_K_M's layer 1, one product
/// reading both buffers), the output projection, gate and up as one joined matrix with the
/// GELU·up applied in the product, and down; the q/k norm + RoPE that also writes the token's
/// keys and values into the KV cache's spare positions; attention; and two sandwich norms that
/// each also compute the next norm (the FFN's input norm; the next layer's, or the final one).
/// The first layer counts one more: the first input norm.
#[test]
fn fused_kernels_cut_the_dispatches_of_a_decoded_token() {
    let dev = device::wgpu().expect("a wgpu adapter (lavapipe: apt mesa-vulkan-drivers)");
    let golden = common::golden_json_gz("tiny_tiny-q8_0.json.gz");
    let tiny = load(common::tiny_pair(&golden).0, &dev);
    let reserved = || dev.memory_pool_usage().unwrap().bytes_reserved;
    let before = reserved();
    let loading = Arc::new(Launches::default());
    let watching = LaunchObservation::new(loading.clone());
    let g270m = load(common::gemma270m(), &dev);
    drop(watching);
    // Chunks are queue writes into their buffers: the load launches no kernel but the join of
    // each layer's q and k norms (two copies). Copying each chunk in from an upload buffer would
    // launch a kernel a chunk, and in the browser the freed upload buffers' pages would keep the
    // pool above its weights.
    let mut kernels: BTreeMap<String, usize> = BTreeMap::new();
    for k in loading.0.lock().unwrap().iter() {
        *kernels.entry(short(k)).or_default() += 1;
    }
    assert_eq!(
        kernels,
        BTreeMap::from([(
            "SliceAssignKernel".to_string(),
            2 * g270m.decoder.cfg.layers
        )]),
        "kernels launched while loading Gemma 3 270M"
    );
    // The device pool grows by about the weights: the 262k-row head streams in 32 MiB chunks
    // into 128 MiB buffers written in place. Measured 1.09× the weight bytes after the tiny pair's
    // load (lavapipe); 1.64× where each chunk's write copied its buffer.
    let (grew, weights) = (reserved() - before, g270m.decoder.weight_bytes_per_token());
    assert!(
        grew as f64 <= 1.2 * weights as f64,
        "Gemma 3 270M reserves {grew} device bytes for {weights} of weights"
    );
    for (label, model, saved) in [("tiny-q8_0", &tiny, 60), ("gemma-3-270m", &g270m, 70)] {
        let (fused, composed) = both(label, model);
        for (i, (f, c)) in fused.per_layer.iter().zip(&composed.per_layer).enumerate() {
            let most = if i == 0 { 9 } else { 8 };
            assert!(
                *f <= most && c - f >= saved,
                "{label}: layer {i}: fused {f} vs composed {c}"
            );
        }
        let k = &fused.kernels;
        assert_eq!(
            k.get("AddRmsNormThenNormKernel"),
            Some(&2),
            "{label}: {k:?}"
        );
        assert_eq!(k.get("QkNormRopeStoreKernel"), Some(&1), "{label}: {k:?}");
        let products: usize = ["QmatmulKernel", "QgemvKernel"]
            .iter()
            .filter_map(|name| k.get(*name))
            .sum();
        assert_eq!(products, 4, "{label}: {k:?}");
        for gone in [
            "RmsNormKernel",
            "RmsNormRopeKernel",
            "SliceAssignKernel",
            "GeluHalvesKernel",
        ] {
            assert_eq!(k.get(gone), None, "{label}: {k:?}");
        }
    }
}
