//! rexvqa engine: MedGemma (Gemma 3 + SigLIP) inference on burn, GGUF loading, the Gemma 3
//! tokenizer, ReXVQA data and the benchmark's scoring. No UI code lives here.

pub mod bench;
pub mod calibrate;
pub mod compare;
pub mod destroying_device;
pub mod device;
pub mod digest;
pub mod eval;
pub mod gguf;
pub mod image;
pub mod kernels;
pub mod launches;
pub mod model;
pub mod own;
pub mod pair;
pub mod picture;
pub mod quant;
pub mod quiz;
pub mod rexvqa;
pub mod rng;
pub mod score;
pub mod selftest;
pub mod session;
pub mod storage;
pub mod tokenizer;
pub mod tuning;
