//! What can go wrong answering a request. The worker's functions return [`WorkerError`]; the
//! router turns it into the page's error event ([`crate::protocol::Event::Error`]) with the
//! request's name. The cases the worker itself decides (nothing loaded, busy, a server's
//! refusal, full storage) are variants of their own, so a caller can tell them apart; text
//! from the layers below (browser I/O, the engine) is carried as written.

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The request needs a loaded model.
    #[error("load a model first (Model panel)")]
    NoModel,
    /// The request names a split that is not open.
    #[error("split {0:?} is not open: open the dataset folder first")]
    SplitNotOpen(String),
    /// The request needs the user's own images, which are not open.
    #[error("open your images first")]
    NoOwnImages,
    /// The request must wait for other work to end (an evaluation, an unpacking); the text
    /// says which and what to do.
    #[error("{0}")]
    Busy(String),
    /// A download's server answered with an error status.
    #[error("{url}: HTTP {status}")]
    Http {
        /// The address asked.
        url: String,
        /// The HTTP status.
        status: f64,
    },
    /// Browser storage refused a write: what could not be done, the storage's usage, and how
    /// to make room.
    #[error("{usage}: {what}. {advice}, then {retry}.")]
    StorageFull {
        /// What the storage holds and allows, as [`crate::io::storage_full`] words it.
        usage: String,
        /// What could not be done.
        what: &'static str,
        /// How to free space ([`crate::io::FREE_SPACE`]).
        advice: &'static str,
        /// What to do once there is room.
        retry: &'static str,
    },
    /// Browser storage refused a model copy part way (the copy resumes from there).
    #[error(transparent)]
    CopyRefused(#[from] rexvqa_engine::storage::WriteRefused),
    /// Browser storage has no room for a copy before it starts.
    #[error(transparent)]
    NoRoom(#[from] rexvqa_engine::storage::NoRoom),
    /// A predictions file that cannot be compared (unreadable, or not of the split).
    #[error(transparent)]
    Compare(#[from] rexvqa_engine::compare::CompareError),
    /// A test hook asked of a release build.
    #[error("test hooks exist only in debug builds")]
    TestHooksOff,
    /// A test hook that cannot run now (no device to lose, a panic refused); the text says why.
    #[error("{0}")]
    TestHook(&'static str),
    /// Text from the layer below (browser I/O, the engine), passed on as written.
    #[error("{0}")]
    Other(String),
}

impl From<String> for WorkerError {
    fn from(text: String) -> WorkerError {
        WorkerError::Other(text)
    }
}

impl From<&str> for WorkerError {
    fn from(text: &str) -> WorkerError {
        WorkerError::Other(text.to_string())
    }
}

impl From<crate::io::WriteError> for WorkerError {
    fn from(e: crate::io::WriteError) -> WorkerError {
        WorkerError::Other(e.into())
    }
}
