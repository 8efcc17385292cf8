//! Any bytes as a GGUF file: see `checks::gguf`.
#![no_main]

#[allow(dead_code)]
#[path = "../checks.rs"]
mod checks;

#[global_allocator]
static HEAP: checks::alloc::Counting = checks::alloc::Counting;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::gguf(data));
