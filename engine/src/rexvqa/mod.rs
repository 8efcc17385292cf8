//! ReXVQA: split files, the split index, the official prompt and synthetic splits.

pub mod archive;
pub mod browse;
pub mod folder;
pub mod prompt;
pub mod scheduler;
pub mod schema;
pub mod split;
pub mod synth;

pub use browse::{ImageRef, QuestionDetail, QuestionFilter, QuestionPage, QuestionRow};
pub use schema::{Letter, Record, Rejected, SplitError, Task, parse_split};
pub use split::{Scope, ScopeError, Split, SplitSummary, resolve_image_path};

#[cfg(test)]
mod tests;
