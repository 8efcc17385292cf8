//! Device memory the pool reserves through the phases of a study, under a CubeCL dry run
//! ([`rexvqa_engine::bench::pool_phases`]), so the 4B pair's memory can be followed on a
//! software adapter in seconds. With `REXVQA_EXCLUSIVE_POOL=1` the native device takes the pool
//! the browser's CubeCL is built with: after loading the 4B text GGUF each pool reserves what
//! its side reserved on a GPU, in a browser and natively, to within a few MB
//! (`bench/JOURNAL.md`).
//!
//!     REXVQA_EXCLUSIVE_POOL=1 cargo run -p rexvqa-engine --example pool_memory -- TEXT.gguf
//!         [MMPROJ.gguf] [--prefill 64,1000] [--questions 4] [--pools]
//!         [--bench [--decode 32] [--official 0] [--profile]] [--studies N]
//!
//! Prints one JSON line: the bytes reserved after load and after each phase, the peak, and with
//! `--pools` what each pool holds after each phase.
//!
//! With `--bench` it runs the whole Benchmark instead, under a dry run, as
//! bench/browser-vs-native.mjs asks for it (no kernel timings; `--profile` adds the profile
//! passes, as bench/device's bvn-4b step does), and prints its `peak_device_bytes`: the figure
//! #33 compares, which the harness samples at its own points, and which the phases above miss
//! (its decode, profile passes and cold studies).
//!
//! With `--studies N` it follows a split's scoring instead, as the evaluation runs it on a GPU
//! (`bench::study_flow`: one session moved on with `Session::next_study`; per study the image
//! encoded, then `--questions` questions scored in one batched pass), and prints what is
//! reserved after each study, and the most; with the browser's device
//! (`REXVQA_DESTROYING_DEVICE=1`) the most its buffers held at once, inside a study too; with
//! `--pools` what each pool holds after the last study.

use rexvqa_engine::device;
use rexvqa_engine::gguf::FileSource;
use rexvqa_engine::session::{LoadOptions, Model};

/// The bench's clock: wall time (its figures mean nothing under a dry run; only memory is read).
struct Wall(std::time::Instant);

impl rexvqa_engine::eval::Clock for Wall {
    fn now_ms(&self) -> f64 {
        self.0.elapsed().as_secs_f64() * 1000.0
    }
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut files = args.iter().filter(|a| a.ends_with(".gguf"));
    let text = files.next().ok_or(
        "usage: pool_memory TEXT.gguf [MMPROJ.gguf] [--prefill N,M] [--questions N] [--pools]",
    )?;
    let mmproj = files.next();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
    };
    let lengths: Vec<usize> = value("--prefill")
        .map(|s| s.split(',').filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_else(|| vec![64, 1000]);
    let questions = value("--questions")
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);

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
    // The wrapped device's buffers (REXVQA_DESTROYING_DEVICE=1): what the weights leave to
    // Dawn's suballocation in a browser.
    let after_load = rexvqa_engine::destroying_device::counts();
    if args.iter().any(|a| a == "--bench") {
        let opts = rexvqa_engine::bench::BenchOptions {
            prefill_lengths: lengths,
            questions,
            decode_tokens: value("--decode").and_then(|s| s.parse().ok()).unwrap_or(32),
            official_max_tokens: value("--official")
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
            kernel_rows: Vec::new(),
            profile: args
                .iter()
                .any(|a| a == "--profile")
                .then(rexvqa_engine::bench::Roofline::default),
            ..Default::default()
        };
        let _dry = burn_cubecl::cubecl::dry_run::DryRun::new();
        let start = std::time::Instant::now();
        let r = pollster::block_on(rexvqa_engine::bench::run(&model, &opts, &Wall(start)))
            .map_err(|e| e.to_string())?;
        println!(
            "{}",
            serde_json::json!({
                "exclusive_pool": device::exclusive_pool_requested(),
                "device_bytes_after_load": r.device_bytes_after_load,
                "peak_device_bytes": r.peak_device_bytes,
                "peak_buffer_bytes": r.peak_buffer_bytes,
                "memory_by_stage": r.memory_by_stage,
                "buffers_after_load": after_load,
            })
        );
        return Ok(());
    }
    if let Some(n) = value("--studies").and_then(|s| s.parse::<usize>().ok()) {
        let flow = pollster::block_on(rexvqa_engine::bench::study_flow(&model, n, questions))
            .map_err(|e| e.to_string())?;
        let pools = if args.iter().any(|a| a == "--pools") {
            device::pool_lines(&dev)
        } else {
            Vec::new()
        };
        println!(
            "{}",
            serde_json::json!({
                "exclusive_pool": device::exclusive_pool_requested(),
                "device_bytes_after_load": flow.after_load,
                "after_each_study": flow.after_each,
                "peak_device_bytes": flow.after_each.iter().max(),
                "peak_buffer_bytes": flow.peak_buffer_bytes,
                "pools_after_last_study": pools,
            })
        );
        return Ok(());
    }
    let with_pools = args.iter().any(|a| a == "--pools");
    let phases = pollster::block_on(rexvqa_engine::bench::pool_phases(
        &model, &lengths, questions, with_pools,
    ))
    .map_err(|e| e.to_string())?;
    println!(
        "{}",
        serde_json::to_string(&phases).map_err(|e| e.to_string())?
    );
    Ok(())
}
