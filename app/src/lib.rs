//! rexvqa-web front end: leptos UI on the main thread, the engine in a dedicated Web Worker.
//! Browser I/O only; no tensors here.

pub mod constructors;
pub mod gpu;
pub mod io;
pub mod protocol;
pub mod ui;
pub mod unpack;
pub mod worker;
