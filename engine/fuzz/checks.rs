//! What must hold for any bytes a user hands the app, one function per input: the parser returns
//! a value or a typed error, never panics, allocates at most the stated bound, and, where the
//! parse succeeds, the next step a user would trigger runs too. The cargo-fuzz targets call these
//! (nightly, libFuzzer) and `engine/tests/cpu/fuzz_corpus.rs` replays every committed corpus file
//! through them on stable; both install [`alloc::Counting`] as the global allocator.
//!
//! The bounds count the Rust heap at its peak during one call, over what was live before it
//! (every parser here is Rust, ruzstd for zstd included); libFuzzer's `-malloc_limit_mb` in
//! `scripts/fuzz.sh` is a second, coarser limit.

#[path = "alloc.rs"]
pub mod alloc;

use std::io::Cursor;

use rexvqa_engine::compare;
use rexvqa_engine::eval::merge::{ShardFiles, merge_runs};
use rexvqa_engine::gguf::{Gguf, SliceSource};
use rexvqa_engine::image::{self, Policy};
use rexvqa_engine::picture;
use rexvqa_engine::quant::dequantize;
use rexvqa_engine::quiz::{self, QuizResults};
use rexvqa_engine::rexvqa::archive::ImageArchive;
use rexvqa_engine::rexvqa::prompt;
use rexvqa_engine::rexvqa::{QuestionFilter, Scope, Split};
use rexvqa_engine::score;

const MIB: usize = 1 << 20;

/// A small split the predictions and quiz inputs are read against (its ids seed their corpora).
pub const SPLIT: &str = include_str!("split.json");

/// [`SPLIT`] parsed, once per process: not on each execution's path.
fn fuzz_split() -> &'static Split {
    static PARSED: std::sync::OnceLock<Split> = std::sync::OnceLock::new();
    PARSED.get_or_init(|| Split::from_json(SPLIT).expect("the fuzz split parses"))
}

/// A check of one input's bytes.
pub type Check = fn(&[u8]);

/// The inputs, by target name, for the corpus replay.
pub const TARGETS: [(&str, Check); 6] = [
    ("gguf", gguf),
    ("split", split),
    ("archive", archive),
    ("image", picture),
    ("predictions", predictions),
    ("quiz", quiz_results),
];

/// Committed fixtures that also seed a target (beside `tests/fixtures/fuzz/seeds/TARGET/`),
/// relative to the repository root.
pub const MORE_SEEDS: [(&str, &str); 3] = [
    ("gguf", "tests/fixtures/gguf-malformed"),
    ("gguf", "tests/fixtures/quant_types.gguf"),
    ("archive", "tests/fixtures/archive"),
];

/// Runs `f` and panics if its peak heap exceeds `bound` bytes.
fn bounded<R>(what: &str, bound: usize, f: impl FnOnce() -> R) -> R {
    let (r, peak) = alloc::measure(f);
    assert!(
        peak <= bound,
        "{what}: peak heap {peak} B over the bound {bound} B"
    );
    r
}

/// The pieces of an input that holds several files, split at 0xFF bytes (never in UTF-8 text).
fn pieces(data: &[u8], n: usize) -> Vec<&[u8]> {
    data.splitn(n, |&b| b == 0xFF).collect()
}

fn text(b: &[u8]) -> Option<&str> {
    std::str::from_utf8(b).ok()
}

/// GGUF: parse, summarise, read and dequantise every tensor (bounded by the file: each tensor's
/// bytes lie inside the input, and dequantised floats are at most 8× their blocks).
pub fn gguf(data: &[u8]) {
    bounded("gguf", 48 * data.len() + MIB, || {
        let Ok(g) = Gguf::parse_prefix(data, data.len() as u64) else {
            return;
        };
        let _ = g.summary_json();
        let mut src = SliceSource(data);
        for t in &g.tensors {
            let Ok(bytes) = g.read_tensor(&mut src, t) else {
                continue;
            };
            let mut out = vec![0f32; t.n_elements() as usize];
            let _ = dequantize(t.ty, &bytes, &mut out);
        }
    });
}

/// A split file: parse, index, the Studies tab's list and details, the scopes of a run, and the
/// official prompt of every question.
pub fn split(data: &[u8]) {
    bounded("split", 64 * data.len() + MIB, || {
        let Some(t) = text(data) else { return };
        let Ok(s) = Split::from_json(t) else { return };
        let _ = s.summary();
        let _ = s.image_paths();
        for scope in [
            Scope::All,
            Scope::First(3),
            Scope::Stratified {
                per_task: 2,
                seed: 1,
            },
            Scope::Shard { k: 2, n: 3 },
        ] {
            let _ = s.select(&scope);
        }
        let page = s.list_questions(&QuestionFilter::default(), 0, 50);
        for row in page.items.iter().take(8) {
            let _ = s.question_detail("test", &row.id, |_| true);
        }
        for r in s.records.iter().take(64) {
            let _ = prompt::official_chat(r, r.image_paths.len().min(4));
        }
    });
}

/// The image archive (`deid_png.part*`: zstd frames of a tar): every PNG member read and made
/// the model's input (at a small size, the same code as 896 px).
pub fn archive(data: &[u8]) {
    // ruzstd's window grows with the data up to the 128 MiB the archive's `--long` mode needs
    // (zstd's RLE blocks expand far beyond deflate's ratio); the rest is bounded by the input.
    bounded("archive", 1100 * data.len() + 132 * MIB, || {
        let mut a = ImageArchive::new(Cursor::new(data));
        let _ = a.for_each_png(
            |_| true,
            |m| {
                let _ = image::load_for_model(&m.bytes, Policy::Scale, 32);
                true
            },
        );
    });
}

/// An image of one's own (PNG, JPEG, DICOM; the first byte picks the name's extension, the
/// policy and the model input's size): decode, describe, map to 8 bits, preprocess. Decoded
/// pixels are bounded by the compressed data (deflate expands at most ~1032×) and the decoder's
/// size limit.
pub fn picture(data: &[u8]) {
    let Some((&pick, bytes)) = data.split_first() else {
        return;
    };
    let name = ["x.png", "x.jpg", "x.dcm", "x"][usize::from(pick & 3)];
    let policy = [
        Policy::Scale,
        Policy::Minmax,
        Policy::PillowClamp,
        Policy::Window,
    ][usize::from((pick >> 2) & 3)];
    let size = 8 + u32::from(pick >> 4) * 4;
    let out = (size * size * 3 * 4) as usize;
    bounded("image", 2200 * data.len() + 4 * out + 4 * MIB, || {
        let Ok(p) = picture::decode_named(name, bytes) else {
            return;
        };
        let _ = p.info();
        let _ = p.describe_policy(policy);
        let img = p.to_8bit(policy);
        let _ = image::preprocess(&img, size);
    });
}

/// Predictions files: the compare of two (and its exports) and the merge of shards, read against
/// [`SPLIT`]. Pieces at 0xFF: predictions A, predictions B, a report, a journal.
pub fn predictions(data: &[u8]) {
    let split = fuzz_split();
    bounded("predictions", 64 * data.len() + MIB, || {
        let p = pieces(data, 4);
        let Some(a) = p.first().copied().and_then(text) else {
            return;
        };
        let b = p.get(1).copied().and_then(text).unwrap_or(a);
        for s in [Some(split), None] {
            if let (Ok(ra), Ok(rb)) = (
                compare::read_predictions("a", a, s),
                compare::read_predictions("b", b, s),
            ) && let Ok(c) = compare::compare(&ra, &rb)
            {
                let _ = c.exports();
            }
        }
        if let Ok(m) = score::merge_shards(split, &[("a".into(), a.into()), ("b".into(), b.into())])
        {
            let preds = score::predictions_from_leaderboard(split, &m.predictions);
            let _ = score::report(&preds);
        }
        let report = p.get(2).copied().and_then(text).unwrap_or("{}");
        let journal = p.get(3).copied().and_then(text).map(str::to_string);
        let shard = ShardFiles {
            name: "a".into(),
            predictions: a.into(),
            report: report.into(),
            journal,
        };
        if let Ok(m) = merge_runs(split, &[shard]) {
            let _ =
                rexvqa_engine::eval::report(split, &m.answers, &m.settings, split.records.len());
        }
    });
}

/// Quiz results files: one student's report (with its CSV and Markdown), and a reader study of
/// the pieces at 0xFF, read against [`SPLIT`].
pub fn quiz_results(data: &[u8]) {
    let split = fuzz_split();
    bounded("quiz", 64 * data.len() + MIB, || {
        let files: Vec<(String, String)> = pieces(data, 4)
            .into_iter()
            .filter_map(text)
            .enumerate()
            .map(|(i, t)| (format!("r{i}.json"), t.to_string()))
            .collect();
        if let Some((_, first)) = files.first()
            && let Ok(r) = serde_json::from_str::<QuizResults>(first)
            && let Ok(rep) = quiz::report(split, &r)
        {
            let _ = quiz::csv(split, &r);
            let _ = quiz::markdown(&rep, &r);
        }
        let _ = quiz::reader_study(split, &files);
    });
}
