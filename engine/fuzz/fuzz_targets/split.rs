//! Any bytes as a split file: see `checks::split`.
#![no_main]

#[allow(dead_code)]
#[path = "../checks.rs"]
mod checks;

#[global_allocator]
static HEAP: checks::alloc::Counting = checks::alloc::Counting;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::split(data));
