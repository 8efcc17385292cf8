//! The values the engine handle's signals hold, beside the protocol's own types.

use std::rc::Rc;

use leptos::prelude::RwSignal;
use rexvqa_engine::eval::Answer;
use rexvqa_engine::rexvqa::Letter;

use crate::protocol::AdapterReport;

/// What the UI knows about the GPU.
#[derive(Debug, Clone, PartialEq)]
pub enum GpuState {
    /// Not known yet.
    Probing,
    /// Usable adapter.
    Ready(AdapterReport),
    /// Unusable, with the reason.
    Unavailable(String),
}

/// Decoded pixels of one image, for the viewer.
#[derive(Clone)]
pub struct Pixels {
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
    /// 8 or 16.
    pub bits: u8,
    /// 1 or 3.
    pub channels: u8,
    /// Samples.
    pub data: Rc<Vec<u16>>,
}

/// Option letters and their probabilities (fast mode).
#[derive(Debug, Clone, PartialEq)]
pub struct OptionProbs {
    /// Letters, in order.
    pub letters: Vec<Letter>,
    /// Their probabilities.
    pub probs: Vec<f32>,
}

/// The answer being produced for the question on screen (or the free question).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AskState {
    /// Whether the worker is still answering.
    pub busy: bool,
    /// Letters and probabilities (fast mode).
    pub scores: Option<OptionProbs>,
    /// Streamed text.
    pub text: String,
    /// The final answer.
    pub answer: Option<Answer>,
}

/// Progress of a long operation (copy, download, load).
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// What is happening.
    pub label: String,
    /// Bytes done.
    pub done: u64,
    /// Bytes in all.
    pub total: u64,
    /// Bytes per second (0 when unknown).
    pub rate: f64,
}

/// The benchmark.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum BenchState {
    /// Not run (or failed).
    #[default]
    Idle,
    /// Running.
    Running,
    /// Its JSON.
    Done(String),
}

/// The tab on screen, for components that send the user to another tab.
#[derive(Clone, Copy)]
pub struct Tab(pub RwSignal<&'static str>);
