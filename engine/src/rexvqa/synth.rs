//! Synthetic ReXVQA splits in the real on-disk format, for tests and demos: 16-bit grayscale
//! PNGs under `deid_png/<patient>/<accession>/studies/<uid>/series/<uid>/instances/<uid>.png`
//! and `metadata/<split>_vqa_data.json` keyed by question id.

use serde_json::{Map, Value, json};

use crate::rng::SplitMix64;

/// What to generate.
#[derive(Debug, Clone)]
pub struct SynthOptions {
    /// Number of studies.
    pub studies: usize,
    /// Questions per study (each of a different task where possible).
    pub questions_per_study: usize,
    /// Seed; the same seed gives byte-identical output.
    pub seed: u64,
    /// Image width and height range in pixels (inclusive).
    pub size_range: (u32, u32),
    /// Split name used in the metadata file name (`test`, `valid`).
    pub split: String,
}

impl Default for SynthOptions {
    fn default() -> Self {
        SynthOptions {
            studies: 8,
            questions_per_study: 4,
            seed: 1,
            size_range: (480, 800),
            split: "test".into(),
        }
    }
}

const FINDINGS: [&str; 12] = [
    "pleural effusion",
    "pneumothorax",
    "cardiomegaly",
    "atelectasis",
    "consolidation",
    "pulmonary edema",
    "rib fracture",
    "emphysema",
    "pulmonary nodule",
    "hiatal hernia",
    "central venous catheter",
    "mediastinal widening",
];
const PLACES: [&str; 6] = [
    "left lower lobe",
    "right upper lobe",
    "bilateral lung bases",
    "right hemithorax",
    "left hemithorax",
    "retrocardiac region",
];
const TASKS: [(&str, &str); 5] = [
    ("Presence Assessment", "Lung"),
    ("Negation Assessment", "Pleura"),
    ("Differential Diagnosis", "Cardiac"),
    ("Location and Distribution Assessment", "Lung"),
    ("Geometric Information Assessment", "Mediastinum"),
];

fn uid(rng: &mut SplitMix64) -> String {
    format!(
        "1.2.826.0.1.{}.{}.{}",
        rng.below(1_000_000),
        rng.below(1_000_000),
        rng.below(1_000_000)
    )
}

/// Encodes a 16-bit grayscale image as PNG.
pub fn encode_png16(width: u32, height: u32, pixels: &[u16]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, width, height);
        enc.set_color(png::ColorType::Grayscale);
        enc.set_depth(png::BitDepth::Sixteen);
        let mut w = enc.write_header().expect("writing to a Vec cannot fail");
        let bytes: Vec<u8> = pixels.iter().flat_map(|p| p.to_be_bytes()).collect();
        w.write_image_data(&bytes)
            .expect("pixel count matches width*height");
    }
    out
}

/// A chest-radiograph-like 16-bit image: dark lung fields in a bright body, a mediastinum,
/// ribs, and noise, spanning the full 0..=65535 range like ReXVQA's PNGs.
pub fn synthetic_xray(width: u32, height: u32, rng: &mut SplitMix64) -> Vec<u16> {
    let (w, h) = (width as f32, height as f32);
    let tilt = rng.unit_f32() * 0.2 - 0.1;
    let heart = 0.12 + rng.unit_f32() * 0.08;
    let mut px = Vec::with_capacity((width * height) as usize);
    for y in 0..height {
        for x in 0..width {
            let (u, v) = (x as f32 / w - 0.5, y as f32 / h - 0.5);
            let body = (1.0 - (u * 1.6).powi(2) - (v * 1.3).powi(2)).clamp(0.0, 1.0);
            let lung = |cx: f32| {
                let d = ((u - cx) / 0.17).powi(2) + ((v + 0.02 + tilt * u) / 0.33).powi(2);
                (1.0 - d).clamp(0.0, 1.0)
            };
            let lungs = lung(-0.2).max(lung(0.2));
            let medi = (1.0 - (u / heart).powi(2)).clamp(0.0, 1.0) * (v + 0.5).clamp(0.0, 1.0);
            let ribs = ((v * 40.0 + u.abs() * 12.0).sin() * 0.5 + 0.5) * lungs * 0.15;
            let noise = rng.unit_f32() * 0.04;
            let val = 0.15 + 0.6 * body - 0.45 * lungs + 0.3 * medi + ribs + noise;
            px.push((val.clamp(0.0, 1.0) * 65535.0) as u16);
        }
    }
    // Stretch to the full 16-bit range, as the real exports are.
    let (lo, hi) = px
        .iter()
        .fold((u16::MAX, 0u16), |(lo, hi), &p| (lo.min(p), hi.max(p)));
    let span = (hi - lo).max(1) as u32;
    for p in &mut px {
        *p = ((*p - lo) as u32 * 65535 / span) as u16;
    }
    px
}

/// A generated file: path relative to the dataset root, and its bytes.
pub struct SynthFile {
    /// `metadata/test_vqa_data.json` or `deid_png/.../x.png`.
    pub path: String,
    /// File contents.
    pub bytes: Vec<u8>,
}

/// Generates a split, handing each file to `sink` as it is made (images first, metadata last).
pub fn generate(opts: &SynthOptions, mut sink: impl FnMut(SynthFile)) {
    let mut rng = SplitMix64::new(opts.seed);
    let mut records = Map::new();
    for s in 0..opts.studies {
        let patient = format!("pGRDN{:08X}", rng.next_u64() as u32);
        let accession = format!("GRDN{:08X}", rng.next_u64() as u32);
        let study_uid = uid(&mut rng);
        let series_uid = uid(&mut rng);
        let n_images = 1 + rng.below(3) as usize;
        let mut paths = Vec::new();
        let mut views = Vec::new();
        for i in 0..n_images {
            let inst = uid(&mut rng);
            let span = (opts.size_range.1 - opts.size_range.0) as u64 + 1;
            let wd = opts.size_range.0 + rng.below(span) as u32;
            let ht = opts.size_range.0 + rng.below(span) as u32;
            let pixels = synthetic_xray(wd, ht, &mut rng);
            let rel = format!(
                "deid_png/{patient}/{accession}/studies/{study_uid}/series/{series_uid}/instances/{inst}.png"
            );
            sink(SynthFile {
                path: rel.clone(),
                bytes: encode_png16(wd, ht, &pixels),
            });
            paths.push(Value::String(format!("../{rel}")));
            views.push(Value::String(
                [["PA", "AP"][rng.below(2) as usize], "LATERAL", "AP"][i.min(2)].into(),
            ));
        }
        let study_id = format!("{patient}_{accession}");
        let age = format!("{:03}Y", 20 + rng.below(70));
        let sex = ["M", "F"][rng.below(2) as usize];
        let finding = FINDINGS[rng.below(FINDINGS.len() as u64) as usize];
        let place = PLACES[rng.below(PLACES.len() as u64) as usize];
        for q in 0..opts.questions_per_study {
            let (task, category) = TASKS[(s + q) % TASKS.len()];
            let mut opts4: Vec<&str> = FINDINGS.to_vec();
            rng.shuffle(&mut opts4);
            let mut options: Vec<String> = opts4
                .into_iter()
                .filter(|f| *f != finding)
                .take(3)
                .map(String::from)
                .collect();
            let correct = rng.below(4) as usize;
            let (question, right) = match task {
                "Presence Assessment" => (
                    format!("Is there evidence of {finding} in this study?"),
                    format!("Yes, {finding} is present"),
                ),
                "Negation Assessment" => (
                    format!("Which of the following is NOT seen in the {place}?"),
                    finding.to_string(),
                ),
                "Location and Distribution Assessment" => (
                    format!("Where is the {finding} located?"),
                    place.to_string(),
                ),
                "Geometric Information Assessment" => (
                    format!("What is the approximate size of the {finding}?"),
                    format!("{}.{} cm", 1 + rng.below(9), rng.below(10)),
                ),
                _ => (
                    format!("What is the most likely diagnosis given the findings in the {place}?"),
                    finding.to_string(),
                ),
            };
            options.insert(correct, right.clone());
            let options: Vec<Value> = options
                .iter()
                .enumerate()
                .map(|(i, o)| Value::String(format!("{}. {o}", (b'A' + i as u8) as char)))
                .collect();
            let letter = ((b'A' + correct as u8) as char).to_string();
            let qid = format!("{study_id}_{q:02}_{:06x}", rng.below(1 << 24));
            records.insert(
                qid,
                json!({
                    "study_id": study_id,
                    "task_name": task,
                    "category": category,
                    "subcategory": finding,
                    "question": question,
                    "options": options,
                    "correct_answer": letter,
                    "correct_answer_explanation": format!("The images show {right} ({finding} in the {place})."),
                    "ImagePath": paths,
                    "ImageViewPosition": views,
                    "PatientID": patient,
                    "PatientAge": age,
                    "PatientSex": sex,
                    "StudyDate": format!("20{:02}{:02}{:02}", 10 + rng.below(15), 1 + rng.below(12), 1 + rng.below(28)),
                    "Indication": format!("Evaluate for {}.", FINDINGS[rng.below(FINDINGS.len() as u64) as usize]),
                    "Comparison": "None.",
                    "Findings": format!("There is {finding} in the {place}. No other acute abnormality."),
                    "Impression": format!("{finding} in the {place}."),
                }),
            );
        }
    }
    sink(SynthFile {
        path: format!("metadata/{}_vqa_data.json", opts.split),
        bytes: serde_json::to_vec_pretty(&Value::Object(records))
            .expect("serialising a JSON value cannot fail"),
    });
}
