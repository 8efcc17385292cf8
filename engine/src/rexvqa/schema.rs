//! ReXVQA split files: `{ "<question id>": record, ... }` with tolerant records.
//!
//! Each record keeps its original JSON text, so leaderboard output reproduces every field the
//! file had (including fields this code has never heard of) byte for byte.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// The five ReXVQA tasks (leaderboard columns), plus any other name a file may use.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Task {
    /// "Presence Assessment".
    Presence,
    /// "Negation Assessment".
    Negation,
    /// "Differential Diagnosis".
    DifferentialDiagnosis,
    /// "Location and Distribution Assessment".
    Location,
    /// "Geometric Information Assessment".
    Geometric,
    /// A task name outside the five known ones, kept verbatim.
    Other(String),
}

impl Task {
    /// The five known tasks in leaderboard order.
    pub const KNOWN: [Task; 5] = [
        Task::DifferentialDiagnosis,
        Task::Geometric,
        Task::Location,
        Task::Negation,
        Task::Presence,
    ];

    /// Parses a `task_name`; unknown names are kept, never rejected.
    pub fn from_name(name: &str) -> Task {
        match name.trim() {
            "Presence Assessment" => Task::Presence,
            "Negation Assessment" => Task::Negation,
            "Differential Diagnosis" => Task::DifferentialDiagnosis,
            "Location and Distribution Assessment" => Task::Location,
            "Geometric Information Assessment" => Task::Geometric,
            other => Task::Other(other.to_string()),
        }
    }

    /// The `task_name` string as written in the files.
    pub fn name(&self) -> &str {
        match self {
            Task::Presence => "Presence Assessment",
            Task::Negation => "Negation Assessment",
            Task::DifferentialDiagnosis => "Differential Diagnosis",
            Task::Location => "Location and Distribution Assessment",
            Task::Geometric => "Geometric Information Assessment",
            Task::Other(s) => s,
        }
    }
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An answer letter A–D (serialised as `"A"`..`"D"`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Letter {
    /// A.
    A,
    /// B.
    B,
    /// C.
    C,
    /// D.
    D,
}

impl Letter {
    /// All four letters in order.
    pub const ALL: [Letter; 4] = [Letter::A, Letter::B, Letter::C, Letter::D];

    /// Parses one letter, case-insensitively.
    pub fn from_char(c: char) -> Option<Letter> {
        match c.to_ascii_uppercase() {
            'A' => Some(Letter::A),
            'B' => Some(Letter::B),
            'C' => Some(Letter::C),
            'D' => Some(Letter::D),
            _ => None,
        }
    }

    /// Zero-based index (A = 0).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The letter as a char.
    pub fn as_char(self) -> char {
        (b'A' + self as u8) as char
    }
}

impl fmt::Display for Letter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.as_char())
    }
}

/// The fields this engine reads from a record; everything else stays in [`Record::raw`].
#[derive(Debug, Clone, Default, Deserialize)]
struct Fields {
    #[serde(default)]
    question: Option<String>,
    #[serde(default)]
    options: Option<Vec<serde_json::Value>>,
    #[serde(default)]
    correct_answer: Option<String>,
    #[serde(default)]
    correct_answer_explanation: Option<String>,
    #[serde(default)]
    task_name: Option<String>,
    #[serde(default)]
    category: Option<String>,
    #[serde(default)]
    subcategory: Option<String>,
    #[serde(default)]
    study_id: Option<serde_json::Value>,
    #[serde(default, rename = "ImagePath")]
    image_path: Option<OneOrMany>,
    #[serde(default, rename = "ImageViewPosition")]
    image_view_position: Option<OneOrMany>,
    #[serde(default)]
    context: Option<String>,
}

/// Some files write a single path as a string rather than a one-item list.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    Many(Vec<Option<String>>),
    One(String),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::Many(v) => v.into_iter().map(Option::unwrap_or_default).collect(),
            OneOrMany::One(s) => vec![s],
        }
    }
}

/// One question of a split.
#[derive(Debug, Clone)]
pub struct Record {
    /// The question id (the key in the split file).
    pub id: String,
    /// The question text.
    pub question: String,
    /// The four options as written (`"A. ..."`).
    pub options: Vec<String>,
    /// The correct letter, when the file has one.
    pub correct: Option<Letter>,
    /// The reference explanation.
    pub explanation: Option<String>,
    /// The task.
    pub task: Task,
    /// `category` (empty when absent).
    pub category: String,
    /// `subcategory` (empty when absent).
    pub subcategory: String,
    /// The study this question is about.
    pub study_id: String,
    /// Image paths as written (`../deid_png/...png`).
    pub image_paths: Vec<String>,
    /// View positions parallel to `image_paths` (`PA`, `AP`, `LATERAL`, ...; may be shorter).
    pub view_positions: Vec<String>,
    /// Optional context for the prompt.
    pub context: Option<String>,
    /// The record's original JSON text.
    pub raw: Box<RawValue>,
}

/// A record that could not be used (or a question that could not be asked), and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rejected {
    /// The question id.
    pub id: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Errors reading a split file.
#[derive(Debug, thiserror::Error)]
pub enum SplitError {
    /// Not a JSON object of records.
    #[error(
        "the split file is not a JSON object of question records ({0}); expected {{\"<question id>\": {{\"question\": ..., \"options\": [...]}}, ...}}"
    )]
    Json(String),
}

impl Record {
    /// Builds a record from its id and raw JSON; `Err` says why the record is unusable.
    pub fn from_raw(id: String, raw: Box<RawValue>) -> Result<Record, Rejected> {
        let reject = |reason: String| Rejected {
            id: id.clone(),
            reason,
        };
        let f: Fields = serde_json::from_str(raw.get())
            .map_err(|e| reject(format!("not a record object: {e}")))?;
        let question = f
            .question
            .filter(|q| !q.trim().is_empty())
            .ok_or_else(|| reject("no question text".into()))?;
        let options: Vec<String> = f
            .options
            .unwrap_or_default()
            .into_iter()
            .map(|v| match v {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            })
            .collect();
        if options.len() < 2 {
            return Err(reject(format!(
                "{} options (at least 2 needed)",
                options.len()
            )));
        }
        let correct = match f.correct_answer.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(s) => Some(
                s.chars()
                    .next()
                    .and_then(Letter::from_char)
                    .filter(|_| s.len() == 1 || !s.as_bytes()[1].is_ascii_alphanumeric())
                    .ok_or_else(|| reject(format!("correct_answer {s:?} is not a letter A-D")))?,
            ),
        };
        let study_id = match f.study_id {
            Some(serde_json::Value::String(s)) => s,
            Some(serde_json::Value::Null) | None => String::new(),
            Some(v) => v.to_string(),
        };
        Ok(Record {
            question,
            options,
            correct,
            explanation: f.correct_answer_explanation,
            task: Task::from_name(f.task_name.as_deref().unwrap_or("")),
            category: f.category.unwrap_or_default(),
            subcategory: f.subcategory.unwrap_or_default(),
            study_id,
            image_paths: f.image_path.map(OneOrMany::into_vec).unwrap_or_default(),
            view_positions: f
                .image_view_position
                .map(OneOrMany::into_vec)
                .unwrap_or_default(),
            context: f.context.filter(|c| !c.trim().is_empty()),
            id,
            raw,
        })
    }

    /// The study key used to group questions: `study_id`, or the first image's folder when a
    /// file lacks study ids.
    pub fn study_key(&self) -> &str {
        if !self.study_id.is_empty() {
            return &self.study_id;
        }
        self.image_paths.first().map_or(&self.id, |p| {
            p.rsplit_once('/').map_or(p.as_str(), |(dir, _)| dir)
        })
    }

    /// The record's JSON object with `model_prediction` and `model_response` added, as the
    /// ReXrank leaderboard expects.
    pub fn leaderboard_json(
        &self,
        prediction: Option<Letter>,
        response: &str,
    ) -> serde_json::Map<String, serde_json::Value> {
        let mut obj: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(self.raw.get()).unwrap_or_default();
        obj.insert(
            "model_prediction".into(),
            prediction.map_or(serde_json::Value::String(String::new()), |l| {
                serde_json::Value::String(l.to_string())
            }),
        );
        obj.insert("model_response".into(), response.into());
        obj
    }
}

/// Streams the top-level object into (id, raw record) pairs without building a JSON tree.
struct RawEntries(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for RawEntries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawEntries;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object mapping question ids to records")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawEntries, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some((k, v)) = map.next_entry::<String, Box<RawValue>>()? {
                    out.push((k, v));
                }
                Ok(RawEntries(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Parses a split file's text into usable records and rejected ones, in file order.
pub fn parse_split(json: &str) -> Result<(Vec<Record>, Vec<Rejected>), SplitError> {
    let entries: RawEntries =
        serde_json::from_str(json).map_err(|e| SplitError::Json(e.to_string()))?;
    let mut records = Vec::with_capacity(entries.0.len());
    let mut rejected = Vec::new();
    for (id, raw) in entries.0 {
        match Record::from_raw(id, raw) {
            Ok(r) => records.push(r),
            Err(r) => rejected.push(r),
        }
    }
    Ok((records, rejected))
}
