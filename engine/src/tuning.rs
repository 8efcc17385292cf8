//! The knobs that steer kernel forms and memory pools, read once, in one place.
//!
//! Natively each knob is a `REXVQA_*` environment variable, read when the GPU device opens (as
//! llama.cpp reads its `GGML_VK_*` into the device); a value outside the ones listed is an
//! error naming the variable and what it takes, never a silent default. The browser has no
//! environment: it runs [`Tuning::default`], the automatic choice. Every benchmark report records
//! the tuning it ran under ([`crate::bench::BenchReport::tuning`]).
//!
//! A test that needs another form runs under [`Scoped`]: the tuning of the calling thread until
//! the guard drops, which every kernel launched from that thread reads ([`current`]). Launchers
//! compute their comptime arguments on the calling thread, so tests on other threads keep theirs.

use std::cell::Cell;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// The form of the tiled product (`REXVQA_TILE_PER`); `None` in [`Tuning::tile`]: the adapter's
/// own (`v8` on a GPU, `n8` on a software adapter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TileChoice {
    /// Vector reads, 8 × 8 blocks, 16 × 16 invocations: a GPU's form (`v8`).
    Wide,
    /// Vector reads, 8 × 8 blocks, 8 × 8 invocations: a software adapter's form (`n8`).
    Narrow,
    /// Scalar reads, 4 × 4 blocks (`s4`).
    Scalar,
}

/// Everything that steers a kernel's form or the device's pool; the default is the automatic
/// choice everywhere.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tuning {
    /// `REXVQA_TILE_PER` = `v8`, `n8` or `s4`: the tiled product's form.
    pub tile: Option<TileChoice>,
    /// `REXVQA_TILE_SPLIT` = 1..=64: chunks every tiled product is split into over its rows'
    /// weights (1: never split).
    pub tile_splits: Option<usize>,
    /// `REXVQA_GEMV_TEAM` = 8, 16, 32 or 64: invocations per weight row of the matrix–vector
    /// product.
    pub gemv_team: Option<u32>,
    /// `REXVQA_DECODE_SPLIT` = 1: decode attention split over the keys (two dispatches).
    pub decode_split: bool,
    /// `REXVQA_ROW_LANES` = `gpu`: the row kernels take a GPU's workgroups on a software adapter.
    pub row_lanes_gpu: bool,
    /// `REXVQA_WIDE_CHUNKS` = 1..=32: chunks of the keys in wide attention (1: never split).
    pub wide_chunks: Option<usize>,
    /// `REXVQA_ATTENTION` = `scalar`: the fused attention's scalar form.
    pub scalar_attention: bool,
    /// `REXVQA_EXCLUSIVE_POOL` = 1: the browser's memory pool natively (a page per allocation).
    pub exclusive_pool: bool,
    /// `REXVQA_DESTROYING_DEVICE` = 1: the browser's destroying device natively.
    pub destroying_device: bool,
}

/// A `REXVQA_*` variable whose value is not one its knob takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value:?} is not a value it takes: {takes}")]
pub struct TuningError {
    /// The variable.
    pub var: &'static str,
    /// What it was set to.
    pub value: String,
    /// The values it takes.
    pub takes: &'static str,
}

/// Variables that steered forms since removed; set, they are an error rather than ignored, so a
/// script that still names one learns it measures nothing.
const RETIRED: [(&str, &str); 2] = [
    (
        "REXVQA_GEMV_UNROLL",
        "nothing: the two-chunk form was removed (bench/results/device/h200-full-2026-11-27T1003/11-bench-variants.json)",
    ),
    (
        "REXVQA_WIDE_LANES",
        "nothing: the workgroup widths were removed (bench/results/device/h200-full-2026-11-27T2347/11-bench-variants.json)",
    ),
];

impl Tuning {
    /// The tuning that `get` gives each variable's value (`None`: not set).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Tuning, TuningError> {
        for (var, takes) in RETIRED {
            if let Some(value) = get(var) {
                return Err(TuningError { var, value, takes });
            }
        }
        let flag = |var, on: &str, off: &str, takes| {
            let v = knob(&get, var, takes, |v| {
                (v == on).then_some(true).or((v == off).then_some(false))
            })?;
            Ok::<_, TuningError>(v.unwrap_or(false))
        };
        let count = |var, max: usize, takes| {
            knob(&get, var, takes, |v| {
                v.parse().ok().filter(|n| (1..=max).contains(n))
            })
        };
        Ok(Tuning {
            tile: knob(&get, "REXVQA_TILE_PER", "v8, n8 or s4", |v| match v {
                "v8" => Some(TileChoice::Wide),
                "n8" => Some(TileChoice::Narrow),
                "s4" => Some(TileChoice::Scalar),
                _ => None,
            })?,
            tile_splits: count("REXVQA_TILE_SPLIT", 64, "a count from 1 to 64")?,
            gemv_team: knob(&get, "REXVQA_GEMV_TEAM", "8, 16, 32 or 64", |v| {
                v.parse().ok().filter(|n| [8, 16, 32, 64].contains(n))
            })?,
            decode_split: flag("REXVQA_DECODE_SPLIT", "1", "0", "0 or 1")?,
            row_lanes_gpu: flag("REXVQA_ROW_LANES", "gpu", "adapter", "gpu or adapter")?,
            wide_chunks: count("REXVQA_WIDE_CHUNKS", 32, "a count from 1 to 32")?,
            scalar_attention: flag("REXVQA_ATTENTION", "scalar", "vector", "vector or scalar")?,
            exclusive_pool: flag("REXVQA_EXCLUSIVE_POOL", "1", "0", "0 or 1")?,
            destroying_device: flag("REXVQA_DESTROYING_DEVICE", "1", "0", "0 or 1")?,
        })
    }

    /// The tuning this process's environment asks for (the browser's: the default).
    pub fn from_env() -> Result<Tuning, TuningError> {
        if cfg!(target_arch = "wasm32") {
            return Ok(Tuning::default());
        }
        Tuning::from_vars(|var| std::env::var(var).ok())
    }

    /// The knobs set, as `VAR=value` pairs in the order of the fields ("" for the default).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(t) = self.tile {
            let v = match t {
                TileChoice::Wide => "v8",
                TileChoice::Narrow => "n8",
                TileChoice::Scalar => "s4",
            };
            parts.push(format!("REXVQA_TILE_PER={v}"));
        }
        let mut num = |var: &str, n: Option<usize>| {
            if let Some(n) = n {
                parts.push(format!("{var}={n}"));
            }
        };
        num("REXVQA_TILE_SPLIT", self.tile_splits);
        num("REXVQA_GEMV_TEAM", self.gemv_team.map(|n| n as usize));
        let flags = [
            (self.decode_split, "REXVQA_DECODE_SPLIT=1"),
            (self.row_lanes_gpu, "REXVQA_ROW_LANES=gpu"),
        ];
        parts.extend(flags.iter().filter(|f| f.0).map(|f| f.1.to_string()));
        if let Some(n) = self.wide_chunks {
            parts.push(format!("REXVQA_WIDE_CHUNKS={n}"));
        }
        let flags = [
            (self.scalar_attention, "REXVQA_ATTENTION=scalar"),
            (self.exclusive_pool, "REXVQA_EXCLUSIVE_POOL=1"),
            (self.destroying_device, "REXVQA_DESTROYING_DEVICE=1"),
        ];
        parts.extend(flags.iter().filter(|f| f.0).map(|f| f.1.to_string()));
        parts.join(" ")
    }
}

/// `var`'s value through `parse`: `None` when unset, an error naming the values it `takes` when
/// `parse` refuses it.
fn knob<T>(
    get: &impl Fn(&str) -> Option<String>,
    var: &'static str,
    takes: &'static str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<Option<T>, TuningError> {
    get(var)
        .map(|value| parse(&value).ok_or(TuningError { var, value, takes }))
        .transpose()
}

/// The process's tuning, set by [`init`].
static PROCESS: OnceLock<Tuning> = OnceLock::new();

thread_local! {
    /// The calling thread's tuning while a [`Scoped`] guard lives.
    static SCOPED: Cell<Option<Tuning>> = const { Cell::new(None) };
}

/// Reads the environment once for the process (the device calls it as it opens): the tuning,
/// or the error of the first variable whose value is not one it takes.
pub fn init() -> Result<Tuning, TuningError> {
    if let Some(t) = PROCESS.get() {
        return Ok(*t);
    }
    let t = Tuning::from_env()?;
    Ok(*PROCESS.get_or_init(|| t))
}

/// The tuning in force on this thread: a [`Scoped`] one, else the process's ([`init`]; the
/// default where the environment was never read or could not be).
pub fn current() -> Tuning {
    SCOPED
        .with(Cell::get)
        .or_else(|| PROCESS.get().copied())
        .unwrap_or_default()
}

/// Runs this thread under another tuning until dropped (tests: a kernel form as an argument).
#[must_use = "the tuning holds only while the guard lives"]
pub struct Scoped {
    before: Option<Tuning>,
}

impl Scoped {
    /// This thread under `t` until the guard drops.
    pub fn new(t: Tuning) -> Scoped {
        Scoped {
            before: SCOPED.with(|s| s.replace(Some(t))),
        }
    }
}

impl Drop for Scoped {
    fn drop(&mut self) {
        SCOPED.with(|s| s.set(self.before));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |var| {
            pairs
                .iter()
                .find(|(k, _)| *k == var)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn no_variable_is_the_automatic_choice() {
        assert_eq!(Tuning::from_vars(vars(&[])), Ok(Tuning::default()));
        assert_eq!(Tuning::default().describe(), "");
    }

    #[test]
    fn every_knob_reads_its_values_and_describes_them_back() {
        let set = [
            ("REXVQA_TILE_PER", "s4"),
            ("REXVQA_TILE_SPLIT", "3"),
            ("REXVQA_GEMV_TEAM", "8"),
            ("REXVQA_DECODE_SPLIT", "1"),
            ("REXVQA_ROW_LANES", "gpu"),
            ("REXVQA_WIDE_CHUNKS", "1"),
            ("REXVQA_ATTENTION", "scalar"),
            ("REXVQA_EXCLUSIVE_POOL", "1"),
            ("REXVQA_DESTROYING_DEVICE", "1"),
        ];
        let t = Tuning::from_vars(vars(&set)).unwrap();
        let want = Tuning {
            tile: Some(TileChoice::Scalar),
            tile_splits: Some(3),
            gemv_team: Some(8),
            decode_split: true,
            row_lanes_gpu: true,
            wide_chunks: Some(1),
            scalar_attention: true,
            exclusive_pool: true,
            destroying_device: true,
        };
        assert_eq!(t, want);
        let described: Vec<String> = set.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(t.describe(), described.join(" "));
        // The "off" spellings are the default.
        let off = [
            ("REXVQA_DECODE_SPLIT", "0"),
            ("REXVQA_ROW_LANES", "adapter"),
            ("REXVQA_ATTENTION", "vector"),
            ("REXVQA_EXCLUSIVE_POOL", "0"),
        ];
        assert_eq!(Tuning::from_vars(vars(&off)), Ok(Tuning::default()));
        let wide = Tuning::from_vars(vars(&[("REXVQA_TILE_PER", "v8")])).unwrap();
        assert_eq!(wide.tile, Some(TileChoice::Wide));
    }

    /// A value a knob does not take names the variable and its values; before, a team of 12 ran
    /// the default team of 64 without a word.
    #[test]
    fn a_value_a_knob_does_not_take_is_an_error_naming_it() {
        let bad = |var, value| Tuning::from_vars(vars(&[(var, value)])).unwrap_err();
        let e = bad("REXVQA_GEMV_TEAM", "12");
        assert_eq!(
            e.to_string(),
            "REXVQA_GEMV_TEAM=\"12\" is not a value it takes: 8, 16, 32 or 64"
        );
        for (var, value) in [
            ("REXVQA_TILE_PER", "v4"),
            ("REXVQA_TILE_SPLIT", "rows"),
            ("REXVQA_TILE_SPLIT", "0"),
            ("REXVQA_TILE_SPLIT", "65"),
            ("REXVQA_DECODE_SPLIT", "yes"),
            ("REXVQA_WIDE_CHUNKS", "33"),
            ("REXVQA_ATTENTION", "fast"),
            ("REXVQA_DESTROYING_DEVICE", "true"),
        ] {
            assert_eq!(bad(var, value).var, var, "{var}={value}");
        }
        let retired = bad("REXVQA_GEMV_UNROLL", "2");
        assert!(retired.to_string().contains("was removed"), "{retired}");
    }

    #[test]
    fn a_scoped_tuning_holds_on_its_thread_until_dropped() {
        let before = current();
        let team8 = Tuning {
            gemv_team: Some(8),
            ..Tuning::default()
        };
        {
            let _g = Scoped::new(team8);
            assert_eq!(current(), team8);
            let other = std::thread::spawn(current).join().unwrap();
            assert_eq!(other, before, "another thread keeps its own");
            {
                let _inner = Scoped::new(Tuning::default());
                assert_eq!(current(), Tuning::default());
            }
            assert_eq!(current(), team8);
        }
        assert_eq!(current(), before);
    }
}
