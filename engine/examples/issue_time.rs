//! The host's time to issue decoded tokens, with the device's execution taken out: a CubeCL dry
//! run compiles, allocates, looks up pipelines and counts every launch as a real run does, then
//! drops it before its bindings are encoded for the GPU, so no GPU (or software adapter) work
//! runs and nothing waits for one. What remains is our code, burn, CubeCL's client, its device
//! thread and its memory pool. Natively CubeCL also waits for the GPU inside the loop (it keeps at
//! most ~512 launches in flight, `cubecl-wgpu`'s `SubmissionLoad`), so a real run's issue time
//! can hide GPU time; this cannot.
//!
//!     cargo run --release -p rexvqa-engine --example issue_time -- TEXT.gguf [--tokens 64]
//!
//! `REXVQA_EXCLUSIVE_POOL=1` gives the native device the browser's memory pool. Prints one JSON
//! line: dispatches a token and host µs a dispatch, over `--tokens` tokens after 8 untimed ones.

use rexvqa_engine::device;
use rexvqa_engine::gguf::FileSource;
use rexvqa_engine::launches;
use rexvqa_engine::session::{LoadOptions, Model};
use std::time::Instant;

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let text = args
        .iter()
        .find(|a| a.ends_with(".gguf"))
        .ok_or("usage: issue_time TEXT.gguf [--tokens N]")?;
    let tokens: usize = args
        .iter()
        .position(|a| a == "--tokens")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(64);

    let dev = device::open(device::BackendKind::Wgpu).map_err(|e| e.to_string())?;
    let text = FileSource::open(text).map_err(|e| e.to_string())?;
    let model = pollster::block_on(Model::load(
        &text,
        None::<&FileSource>,
        &dev,
        &LoadOptions::default(),
        &mut |_| {},
    ))
    .map_err(|e| e.to_string())?;
    let _dry = burn_cubecl::cubecl::dry_run::DryRun::new();
    let ids: Vec<u32> = std::iter::once(model.tokenizer.bos())
        .chain(
            model
                .tokenizer
                .encode(" The heart size is normal.", false, false),
        )
        .collect();
    let mut cache = model.decoder.new_cache();
    let hidden = model
        .prefill(&ids, &[], &mut cache)
        .map_err(|e| e.to_string())?;
    let mut pending = model.decoder.greedy(hidden);
    // Untimed: the pipelines of the decode path are compiled here.
    for _ in 0..8 {
        pending = model
            .decoder
            .greedy(model.decoder.forward_token(pending, &mut cache));
    }
    let counting = launches::count();
    let t = Instant::now();
    for _ in 0..tokens {
        pending = model
            .decoder
            .greedy(model.decoder.forward_token(pending, &mut cache));
    }
    let s = t.elapsed().as_secs_f64();
    let counts = counting.finish();
    drop(pending);
    let per_token = counts.dispatches as f64 / tokens as f64;
    println!(
        "{{\"exclusive_pool\": {}, \"tokens\": {tokens}, \"dispatches_per_token\": {per_token}, \
         \"issue_ms_per_token\": {:.4}, \"host_us_per_dispatch\": {:.3}}}",
        std::env::var_os("REXVQA_EXCLUSIVE_POOL").is_some_and(|v| v == "1"),
        1e3 * s / tokens as f64,
        1e6 * s / counts.dispatches.max(1) as f64,
    );
    Ok(())
}
