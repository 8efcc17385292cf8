//! Per-layer comparison of a traced forward against the intermediates transformers recorded
//! (tests/reference/hidden_capture.py): every stage of every layer, by its trace name.

use std::collections::BTreeMap;

use burn::tensor::Tensor;
use rexvqa_engine::model::Tap;
use rexvqa_engine::model::nn::read_f32;

/// The tensors a traced forward handed over, read back: stage → (values, width).
pub struct Captured(BTreeMap<String, (Vec<f32>, usize)>);

/// Collects the taps of one traced forward, then reads them back.
#[derive(Default)]
pub struct Recorder(Vec<(Tap, Tensor<2>)>);

impl Recorder {
    /// The tracer to hand to `forward_traced` / `encode_traced`.
    pub fn tracer(&mut self) -> impl FnMut(Tap, &Tensor<2>) + '_ {
        |at, x| self.0.push((at, x.clone()))
    }

    /// Reads every tapped tensor back to the host.
    pub fn read(self) -> Captured {
        Captured(
            self.0
                .into_iter()
                .map(|(at, x)| {
                    let width = x.dims()[1];
                    let v = pollster::block_on(read_f32(x)).expect("readback");
                    (at.to_string(), (v, width))
                })
                .collect(),
        )
    }
}

/// The error of one stage against its golden record, relative to the record's scale.
#[derive(Debug, Clone)]
pub struct StageError {
    /// Trace name (`l_out-3`).
    pub stage: String,
    /// max |Δ| over the stored rows ÷ max |reference| over them.
    pub rows: f32,
    /// max |Δ rms| over every row ÷ the largest reference row rms.
    pub rms: f32,
}

impl StageError {
    /// The larger of the two relative errors.
    pub fn worst(&self) -> f32 {
        self.rows.max(self.rms)
    }
}

fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number") as f32)
        .collect()
}

fn compare_one(stage: String, got: &(Vec<f32>, usize), want: &serde_json::Value) -> StageError {
    let (values, width) = got;
    let rms_want = floats(&want["rms"]);
    assert_eq!(
        values.len(),
        rms_want.len() * width,
        "{stage}: {} rows of {width} but the reference has {} rows",
        values.len() / width,
        rms_want.len()
    );
    let (mut diff, mut scale) = (0f32, 0f32);
    for (pos, row) in want["rows"].as_object().expect("rows") {
        let p: usize = pos.parse().expect("position");
        let got = &values[p * width..(p + 1) * width];
        for (g, w) in got.iter().zip(floats(row)) {
            diff = diff.max((g - w).abs());
            scale = scale.max(w.abs());
        }
    }
    let (mut rms_diff, mut rms_scale) = (0f32, 0f32);
    for (p, w) in rms_want.iter().enumerate() {
        let row = &values[p * width..(p + 1) * width];
        let ms = row.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>() / *width as f64;
        rms_diff = rms_diff.max((ms.sqrt() as f32 - w).abs());
        rms_scale = rms_scale.max(w.abs());
    }
    StageError {
        stage,
        rows: diff / scale.max(f32::MIN_POSITIVE),
        rms: rms_diff / rms_scale.max(f32::MIN_POSITIVE),
    }
}

/// Every stage of a golden `taps` object (name → record, or name → one record per layer)
/// against the captured tensors; each must have been captured.
pub fn compare(got: &Captured, taps: &serde_json::Value) -> Vec<StageError> {
    let mut out = Vec::new();
    for (name, rec) in taps.as_object().expect("taps") {
        let per_layer: Vec<(String, &serde_json::Value)> = match rec.as_array() {
            Some(layers) => layers
                .iter()
                .enumerate()
                .map(|(i, r)| (format!("{name}-{i}"), r))
                .collect(),
            None => vec![(name.clone(), rec)],
        };
        for (stage, want) in per_layer {
            let g = got
                .0
                .get(&stage)
                .unwrap_or_else(|| panic!("the trace has no {stage}"));
            out.push(compare_one(stage, g, want));
        }
    }
    out
}

/// Prints the errors stage by stage and asserts each is within `tol`.
pub fn assert_within(label: &str, errors: &[StageError], tol: f32) {
    let worst = errors.iter().map(StageError::worst).fold(0f32, f32::max);
    println!("{label}: worst relative error per stage {worst:.2e} (tolerance {tol:.0e})");
    for e in errors {
        println!("  {:<16} rows {:.2e}  rms {:.2e}", e.stage, e.rows, e.rms);
    }
    let bad: Vec<&StageError> = errors.iter().filter(|e| e.worst() > tol).collect();
    assert!(bad.is_empty(), "{label}: stages over {tol:e}: {bad:?}");
}
