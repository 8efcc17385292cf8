//! Device memory the pool reserves through the phases of a question, under a CubeCL dry run
//! (every allocation made and freed as in a real run, no kernel executed), so the 4B pair's
//! memory can be followed on a software adapter in seconds. With `REXVQA_EXCLUSIVE_POOL=1` the
//! native device takes the pool the browser's CubeCL is built with (on the H200 the browser
//! reserved 2.498 GB after loading the 4B text GGUF; this gives 2.493 GB, and 2.579 GB with the
//! native pool, as the native bench measured there).
//!
//!     REXVQA_EXCLUSIVE_POOL=1 cargo run -p rexvqa-engine --example pool_memory -- TEXT.gguf
//!         [MMPROJ.gguf] [--prefill 64,1000]
//!
//! Prints one JSON line: the bytes reserved after load and after each phase, and the peak.

use rexvqa_engine::device;
use rexvqa_engine::gguf::FileSource;
use rexvqa_engine::session::{LoadOptions, Model};

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut files = args.iter().filter(|a| a.ends_with(".gguf"));
    let text = files
        .next()
        .ok_or("usage: pool_memory TEXT.gguf [MMPROJ.gguf] [--prefill N,M]")?;
    let mmproj = files.next();
    let lengths: Vec<usize> = args
        .iter()
        .position(|a| a == "--prefill")
        .and_then(|i| args.get(i + 1))
        .map(|s| s.split(',').filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_else(|| vec![64, 1000]);

    let dev = device::open(device::BackendKind::Wgpu).map_err(|e| e.to_string())?;
    let text = FileSource::open(text).map_err(|e| e.to_string())?;
    let mmproj = mmproj
        .map(|p| FileSource::open(p).map_err(|e| e.to_string()))
        .transpose()?;
    let model = pollster::block_on(Model::load(
        &text,
        mmproj.as_ref(),
        &dev,
        &LoadOptions::default(),
        &mut |_| {},
    ))
    .map_err(|e| e.to_string())?;
    let reserved = || dev.memory_pool_usage().map_or(0, |u| u.bytes_reserved);
    let mut phases = vec![("load".to_string(), reserved())];
    let _dry = burn_cubecl::cubecl::dry_run::DryRun::new();
    let after = |name: String, phases: &mut Vec<(String, u64)>| phases.push((name, reserved()));
    let features = match &model.vision {
        Some(v) => {
            let size = v.cfg.image_size;
            let f = model
                .encode_image(&vec![0.0f32; 3 * size * size])
                .map_err(|e| e.to_string())?;
            after("image".into(), &mut phases);
            Some(f)
        }
        None => None,
    };
    let filler = model
        .tokenizer
        .encode(" The heart size is normal.", false, false);
    for &n in &lengths {
        let ids: Vec<u32> = std::iter::once(model.tokenizer.bos())
            .chain(filler.iter().copied().cycle())
            .take(n)
            .collect();
        let mut cache = model.decoder.new_cache();
        drop(
            model
                .prefill(&ids, &[], &mut cache)
                .map_err(|e| e.to_string())?,
        );
        after(format!("prefill {n}"), &mut phases);
        drop(cache);
    }
    drop(features);
    let peak = phases.iter().map(|p| p.1).max().unwrap_or(0);
    let list: Vec<String> = phases
        .iter()
        .map(|(n, b)| format!("[\"{n}\", {b}]"))
        .collect();
    println!(
        "{{\"exclusive_pool\": {}, \"phases\": [{}], \"peak_bytes\": {peak}}}",
        std::env::var_os("REXVQA_EXCLUSIVE_POOL").is_some_and(|v| v == "1"),
        list.join(", ")
    );
    Ok(())
}
