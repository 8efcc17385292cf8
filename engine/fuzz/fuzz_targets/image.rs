//! Any bytes as an image of one's own: see `checks::picture`.
#![no_main]

#[allow(dead_code)]
#[path = "../checks.rs"]
mod checks;

#[global_allocator]
static HEAP: checks::alloc::Counting = checks::alloc::Counting;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::picture(data));
