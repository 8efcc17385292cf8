//! The integration tests that need no GPU, in one binary. Every test binary links the whole
//! engine (burn, CubeCL, wgpu), so each one more costs a compile and a link; these share none of
//! the process-wide state the GPU tests set (the device, the self-test's forms, the launch
//! counter), so they can share a process.

#[path = "../common/mod.rs"]
mod common;

mod accounting;
mod compare;
mod dequant_gguf_py;
mod fixture_cache;
mod fuzz_corpus;
mod gemma270m;
mod gguf_corpus;
mod image_transformers;
mod merge;
mod prompt_transformers;
mod quant_files;
mod tokenizer_hf;
