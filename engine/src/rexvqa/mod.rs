//! ReXVQA: split files, the split index, the official prompt and synthetic splits.

pub mod archive;
pub mod prompt;
pub mod schema;
pub mod split;
pub mod synth;

pub use schema::{Letter, Record, Rejected, SplitError, Task, parse_split};
pub use split::{Scope, ScopeError, Split, SplitSummary, resolve_image_path};

#[cfg(test)]
mod tests;
