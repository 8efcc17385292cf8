//! A loaded split: records indexed by study, task and category; image path resolution;
//! seeded stratified subsets and deterministic shards.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::schema::{Record, Rejected, SplitError, Task, parse_split};
use crate::rng::SplitMix64;

/// A split file, parsed and indexed.
#[derive(Debug, Clone)]
pub struct Split {
    /// Usable records in file order.
    pub records: Vec<Record>,
    /// Records that could not be used, with reasons.
    pub rejected: Vec<Rejected>,
    by_id: HashMap<String, usize>,
}

/// Counts shown when a split is opened.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SplitSummary {
    /// Usable questions.
    pub questions: usize,
    /// Rejected records.
    pub rejected: usize,
    /// Distinct studies.
    pub studies: usize,
    /// Distinct image paths referenced.
    pub images: usize,
    /// Questions per task name.
    pub per_task: BTreeMap<String, usize>,
    /// Questions per category.
    pub per_category: BTreeMap<String, usize>,
    /// Images per view position.
    pub per_view: BTreeMap<String, usize>,
}

/// Which questions to run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Scope {
    /// Every question.
    All,
    /// The first N questions in evaluation order.
    First(usize),
    /// N questions per task, drawn with a seed.
    Stratified {
        /// Questions per task.
        per_task: usize,
        /// Seed of the draw.
        seed: u64,
    },
    /// Shard `k` of `n` (1-based `k`), whole studies per shard.
    Shard {
        /// This shard, 1..=n.
        k: usize,
        /// Number of shards.
        n: usize,
    },
}

/// A scope that makes no sense.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScopeError {
    /// k outside 1..=n or n = 0.
    #[error("shard {k}/{n} does not exist: use k/n with 1 <= k <= n")]
    BadShard {
        /// Shard asked for.
        k: usize,
        /// Shard count.
        n: usize,
    },
    /// Unparseable scope text.
    #[error("cannot read {0:?} as a shard (expected k/n, e.g. 2/8)")]
    Parse(String),
}

impl Scope {
    /// Parses `k/n` into a shard scope.
    pub fn parse_shard(s: &str) -> Result<Scope, ScopeError> {
        let (k, n) = s
            .split_once('/')
            .and_then(|(k, n)| Some((k.trim().parse().ok()?, n.trim().parse().ok()?)))
            .ok_or_else(|| ScopeError::Parse(s.to_string()))?;
        if n == 0 || k == 0 || k > n {
            return Err(ScopeError::BadShard { k, n });
        }
        Ok(Scope::Shard { k, n })
    }
}

/// Resolves an `ImagePath` entry (`../deid_png/...png`) to a path relative to the folder that
/// holds `deid_png/`. Leading `./`, `../` and `/` are stripped; `..` inside the path is refused
/// so a crafted split cannot point outside the chosen root.
pub fn resolve_image_path(path: &str) -> Option<String> {
    let p = path.trim().replace('\\', "/");
    let mut rest = p.as_str();
    loop {
        if let Some(r) = rest.strip_prefix("../") {
            rest = r;
        } else if let Some(r) = rest.strip_prefix("./") {
            rest = r;
        } else if let Some(r) = rest.strip_prefix('/') {
            rest = r;
        } else {
            break;
        }
    }
    // Absolute paths from the authors' machines: keep what follows the last `deid_png/`.
    if let Some(i) = rest.rfind("deid_png/") {
        rest = &rest[i..];
    }
    if rest.is_empty() || rest.split('/').any(|c| c == ".." || c.is_empty()) {
        return None;
    }
    Some(rest.to_string())
}

impl Split {
    /// Parses and indexes a split file.
    pub fn from_json(json: &str) -> Result<Split, SplitError> {
        let (records, rejected) = parse_split(json)?;
        Ok(Split::from_records(records, rejected))
    }

    /// Indexes records.
    pub fn from_records(records: Vec<Record>, rejected: Vec<Rejected>) -> Split {
        let by_id = records
            .iter()
            .enumerate()
            .map(|(i, r)| (r.id.clone(), i))
            .collect();
        Split {
            records,
            rejected,
            by_id,
        }
    }

    /// A record by question id.
    pub fn get(&self, id: &str) -> Option<&Record> {
        self.by_id.get(id).map(|&i| &self.records[i])
    }

    /// Counts per task, category and view.
    pub fn summary(&self) -> SplitSummary {
        let mut s = SplitSummary {
            questions: self.records.len(),
            rejected: self.rejected.len(),
            ..Default::default()
        };
        let mut studies = BTreeSet::new();
        let mut images = BTreeSet::new();
        for r in &self.records {
            studies.insert(r.study_key());
            *s.per_task.entry(r.task.name().to_string()).or_default() += 1;
            *s.per_category.entry(r.category.clone()).or_default() += 1;
            for (i, p) in r.image_paths.iter().enumerate() {
                if images.insert(p.as_str()) {
                    let view = r.view_positions.get(i).map_or("unknown", String::as_str);
                    *s.per_view.entry(view.to_string()).or_default() += 1;
                }
            }
        }
        s.studies = studies.len();
        s.images = images.len();
        s
    }

    /// Every distinct image path, resolved, in first-seen order; unresolvable paths are skipped.
    pub fn image_paths(&self) -> Vec<String> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for r in &self.records {
            for p in r.image_paths.iter().filter_map(|p| resolve_image_path(p)) {
                if seen.insert(p.clone()) {
                    out.push(p);
                }
            }
        }
        out
    }

    /// Record indices in evaluation order: grouped by study (so each study's images are encoded
    /// once), studies and questions ordered by id.
    pub fn eval_order(&self) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..self.records.len()).collect();
        idx.sort_by(|&a, &b| {
            let (ra, rb) = (&self.records[a], &self.records[b]);
            ra.study_key()
                .cmp(rb.study_key())
                .then_with(|| ra.id.cmp(&rb.id))
        });
        idx
    }

    /// Record indices selected by `scope`, in evaluation order.
    pub fn select(&self, scope: &Scope) -> Result<Vec<usize>, ScopeError> {
        let order = self.eval_order();
        Ok(match *scope {
            Scope::All => order,
            Scope::First(n) => order.into_iter().take(n).collect(),
            Scope::Stratified { per_task, seed } => {
                let mut by_task: BTreeMap<&Task, Vec<usize>> = BTreeMap::new();
                for &i in &order {
                    by_task.entry(&self.records[i].task).or_default().push(i);
                }
                let mut rng = SplitMix64::new(seed);
                let mut chosen = BTreeSet::new();
                for group in by_task.values_mut() {
                    rng.shuffle(group);
                    chosen.extend(group.iter().take(per_task).copied());
                }
                order.into_iter().filter(|i| chosen.contains(i)).collect()
            }
            Scope::Shard { k, n } => {
                if n == 0 || k == 0 || k > n {
                    return Err(ScopeError::BadShard { k, n });
                }
                // Whole studies, cut into n contiguous runs of near-equal question counts.
                let total = order.len();
                let mut out = Vec::new();
                let mut i = 0;
                let mut shard = 1;
                while i < order.len() {
                    let key = self.records[order[i]].study_key();
                    let mut j = i;
                    while j < order.len() && self.records[order[j]].study_key() == key {
                        j += 1;
                    }
                    // The study belongs to the shard its midpoint falls in.
                    let mid = (i + j) as f64 / 2.0;
                    while shard < n && mid >= (shard * total) as f64 / n as f64 {
                        shard += 1;
                    }
                    if shard == k {
                        out.extend_from_slice(&order[i..j]);
                    }
                    i = j;
                }
                out
            }
        })
    }
}
