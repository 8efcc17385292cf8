//! `rexvqa bench`, `bench-kernels` and `selftest`: the speed harness, the kernel survey and the
//! device self-test.

/// Time image encoding, prefill, decoding and questions; print and write JSON.
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use rexvqa_engine::device::{self, BackendKind};

use rexvqa_engine::gguf::{FileSource, Gguf};

use crate::common::{ModelArgs, Wall, err, load_model, parse_backend, print_json};

#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    m: ModelArgs,
    /// Prompt lengths for the prefill figure.
    #[arg(long, value_delimiter = ',', default_value = "300,1000")]
    prefill: Vec<usize>,
    /// Tokens to decode.
    #[arg(long, default_value_t = 32)]
    decode: usize,
    /// Generation cap of the official-mode question.
    #[arg(long, default_value_t = 256)]
    official_max_tokens: usize,
    /// Input row counts for the per-matrix kernel timings, comma-separated ("": none).
    #[arg(long, default_value = "1,256")]
    kernel_rows: String,
    /// Only load the model and report the load time and memory (device memory after load):
    /// for a model too large to run on a software adapter.
    #[arg(long)]
    load_only: bool,
    /// Only load the model and count the kernel dispatches, reads and uploads of one
    /// decoded token, fast-mode questions and one image encode (a dry run: launches are
    /// compiled and counted, not executed), with the weight bytes a token reads.
    #[arg(long, conflicts_with = "load_only")]
    counts_only: bool,
    /// Also time every launch of one decoded token, one prefill pass (the longest length) and
    /// one image encode on its own (timestamp queries where the adapter has them): `profile`,
    /// kernel by kernel, with bytes, FLOP and their rates.
    #[arg(long)]
    profile: bool,
    /// The machine's memory bandwidth in GB/s (e.g. 3350 for an H100), for `--profile`'s
    /// percentages of the roofline.
    #[arg(long, requires = "profile")]
    roofline_gb_s: Option<f64>,
    /// The machine's f32 arithmetic in GFLOP/s, for `--profile`'s percentages of the roofline.
    #[arg(long, requires = "profile")]
    roofline_gflop_s: Option<f64>,
    /// Run the device self-test for the model's plan before loading it, as the browser app
    /// does on a first load: `selftest_s` is its time, and the figures after it show how
    /// much of the model's first-use shader compilation it already paid for.
    #[arg(long)]
    selftest: bool,
    /// Write the JSON here too.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Time every weight type at one matrix shape with every kernel and f16 form the device has
/// (random blocks, no model needed); print and write JSON.
#[derive(Args)]
pub struct BenchKernelsArgs {
    /// cpu (burn-flex) or wgpu (Vulkan/Metal/DX12).
    #[arg(long, default_value = "wgpu", value_parser = parse_backend)]
    backend: BackendKind,
    /// Matrix rows (output features).
    #[arg(long, default_value_t = 2048)]
    rows: usize,
    /// Matrix columns (input features; a multiple of 256).
    #[arg(long, default_value_t = 2048)]
    cols: usize,
    /// Input row counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,64")]
    m: Vec<usize>,
    /// Least repetitions per timing (after one warm-up; more until they span 10 ms).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Write the JSON here too.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Check every kernel form the automatic choice may use on the device against the CPU
/// reference, and a tiny model's forward against the CPU; exits non-zero when a check fails.
#[derive(Args)]
pub struct SelftestArgs {
    /// cpu (burn-flex) or wgpu (Vulkan/Metal/DX12).
    #[arg(long, default_value = "wgpu", value_parser = parse_backend)]
    backend: BackendKind,
    /// Check the weight types and head widths of this text GGUF (default: every supported
    /// type and MedGemma 4B's head widths).
    #[arg(long)]
    model: Option<PathBuf>,
    /// The model's mmproj GGUF (adds the vision tower's types and head width).
    #[arg(long, requires = "model")]
    mmproj: Option<PathBuf>,
    /// Print a JSON array with one entry per check (`name`, `max_error`, `bound`, `passed`,
    /// `detail`, `ms`); the verdict goes to stderr.
    #[arg(long)]
    json: bool,
    /// Tests only: make one form give wrong results (e.g. gemv_subgroup, naive).
    #[arg(long, hide = true)]
    inject_fault: Option<String>,
}

/// Runs `rexvqa bench`.
pub fn bench(args: BenchArgs) -> Result<(), String> {
    let BenchArgs {
        m,
        prefill,
        decode,
        official_max_tokens,
        kernel_rows,
        load_only,
        counts_only,
        profile,
        roofline_gb_s,
        roofline_gflop_s,
        selftest,
        out,
    } = args;
    let kernel_rows = kernel_rows
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|e| format!("--kernel-rows: {s:?} is not a row count ({e})"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let selftest = if selftest {
        let plan = selftest_plan(Some(&m.model), m.mmproj.as_deref())?;
        let dev = device::open(m.backend).map_err(|e| e.to_string())?;
        let report = pollster::block_on(rexvqa_engine::selftest::run(
            &dev,
            &plan,
            &Wall(Instant::now()),
        ));
        Some(serde_json::json!({
            "selftest_s": report.elapsed_ms / 1000.0,
            "selftest": report.verdict(),
        }))
    } else {
        None
    };
    let t0 = Instant::now();
    let model = load_model(&m)?;
    let load_s = t0.elapsed().as_secs_f64();
    let figures = if load_only {
        serde_json::json!({
            "device_bytes_after_load": rexvqa_engine::bench::device_bytes(&model),
            "adapter": device::adapter(model.device()),
        })
    } else if counts_only {
        let pc = pollster::block_on(rexvqa_engine::bench::count_passes(&model, 4))
            .map_err(|e| e.to_string())?;
        let mut r = rexvqa_engine::bench::BenchReport {
            adapter: device::adapter(model.device()),
            ..Default::default()
        };
        r.set_counts(pc, model.decoder.weight_bytes_per_token());
        serde_json::json!({
            "dispatches_per_token": r.dispatches_per_token,
            "submits_per_token": r.submits_per_token,
            "tasks_per_submit": r.tasks_per_submit,
            "reads_per_token": r.reads_per_token,
            "dispatches_per_question": r.dispatches_per_question,
            "dispatches_per_question_batched": r.dispatches_per_question_batched,
            "dispatches_per_official_question_batched": r.dispatches_per_official_question_batched,
            "dispatches_per_image": r.dispatches_per_image,
            "weight_bytes_per_token": r.weight_bytes_per_token,
            "bytes_per_token": r.bytes_per_token,
            "counts": r.counts,
            "adapter": r.adapter,
        })
    } else {
        let opts = rexvqa_engine::bench::BenchOptions {
            prefill_lengths: prefill,
            decode_tokens: decode,
            questions: 4,
            official_max_tokens,
            kernel_rows,
            kernel_reps: 3,
            profile: profile.then_some(rexvqa_engine::bench::Roofline {
                gb_per_s: roofline_gb_s,
                gflop_per_s: roofline_gflop_s,
            }),
        };
        let r = pollster::block_on(rexvqa_engine::bench::run(
            &model,
            &opts,
            &Wall(Instant::now()),
        ))
        .map_err(|e| e.to_string())?;
        serde_json::json!({ "results": r })
    };
    let mut json = serde_json::json!({
        "engine": format!("rexvqa {}", env!("CARGO_PKG_VERSION")),
        "backend": format!("{:?}", m.backend).to_lowercase(),
        "model": m.model.display().to_string(),
        "mmproj": m.mmproj.as_ref().map(|p| p.display().to_string()),
        "load_s": load_s,
        "peak_rss_bytes": peak_rss(),
        "tuning": rexvqa_engine::tuning::current(),
    });
    for more in [Some(figures), selftest].into_iter().flatten() {
        if let (Some(all), serde_json::Value::Object(more)) = (json.as_object_mut(), more) {
            all.extend(more);
        }
    }
    print_json(&json, out.as_deref())?;
    Ok(())
}

/// Runs `rexvqa bench-kernels`.
pub fn bench_kernels(args: BenchKernelsArgs) -> Result<(), String> {
    let BenchKernelsArgs {
        backend,
        rows,
        cols,
        m,
        reps,
        out,
    } = args;
    if rows == 0 || cols == 0 || cols % 256 != 0 {
        return Err(format!(
            "--rows {rows} --cols {cols}: rows must be positive and cols a positive multiple of 256 (every block size divides it)"
        ));
    }
    let dev = device::open(backend).map_err(|e| e.to_string())?;
    let timings = pollster::block_on(rexvqa_engine::bench::kernel_survey(
        &dev,
        rows,
        cols,
        &m,
        reps,
        &Wall(Instant::now()),
    ))
    .map_err(|e| e.to_string())?;
    for t in &timings {
        eprintln!(
            "{:5} m={:<4} {:14} {:8} {:10.3} ms {:8.2} GB/s {:8.2} GFLOP/s",
            t.ty,
            t.m,
            format!("{:?}", t.kernel),
            format!("{:?}", t.half),
            t.ms,
            t.weight_gb_per_s,
            t.gflop_per_s
        );
    }
    let json = serde_json::json!({
        "engine": format!("rexvqa {}", env!("CARGO_PKG_VERSION")),
        "backend": format!("{backend:?}").to_lowercase(),
        "adapter": device::adapter(&dev),
        "tuning": rexvqa_engine::tuning::current(),
        "rows": rows,
        "cols": cols,
        "kernels": timings,
    });
    print_json(&json, out.as_deref())?;
    Ok(())
}

/// Runs `rexvqa selftest`.
pub fn selftest_command(args: SelftestArgs) -> Result<(), String> {
    selftest(
        args.backend,
        args.model.as_deref(),
        args.mmproj.as_deref(),
        args.json,
        args.inject_fault,
    )
}

/// The self-test's plan for a model pair (its weight types and head widths); without one,
/// every supported type and MedGemma 4B's head widths.
fn selftest_plan(
    model: Option<&Path>,
    mmproj: Option<&Path>,
) -> Result<rexvqa_engine::selftest::Plan, String> {
    use rexvqa_engine::selftest::Plan;
    let header = |p: &Path| -> Result<Gguf, String> {
        let mut src = FileSource::open(p).map_err(|e| err(p, e))?;
        Gguf::read(&mut src).map_err(|e| err(p, e))
    };
    match model {
        Some(m) => Plan::from_headers(&rexvqa_engine::pair::PairHeaders {
            text: header(m)?,
            mmproj: mmproj.map(header).transpose()?,
        })
        .map_err(|e| err(m, e)),
        None => Ok(Plan::default()),
    }
}

/// `rexvqa selftest`: runs the device self-test and prints its checks.
fn selftest(
    backend: BackendKind,
    model: Option<&Path>,
    mmproj: Option<&Path>,
    json: bool,
    inject_fault: Option<String>,
) -> Result<(), String> {
    use rexvqa_engine::kernels::forms::{self, Form};
    use rexvqa_engine::selftest;
    if let Some(name) = inject_fault {
        let form: Form = serde_json::from_value(serde_json::Value::String(name.clone()))
            .map_err(|_| format!("--inject-fault {name:?}: not a form name"))?;
        forms::inject_fault(form);
    }
    let plan = selftest_plan(model, mmproj)?;
    let dev = device::open(backend).map_err(|e| e.to_string())?;
    let report = pollster::block_on(selftest::run(&dev, &plan, &Wall(Instant::now())));
    if json {
        let checks: Vec<serde_json::Value> =
            report.checks.iter().map(selftest::check_json).collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&checks).map_err(|e| e.to_string())?
        );
    } else {
        for c in &report.checks {
            println!(
                "{:4} {:24} max error {:9.2e}  bound {:9.2e} {:7.0} ms  {}",
                if c.passed { "ok" } else { "FAIL" },
                c.name,
                c.max_error,
                c.bound,
                c.ms,
                c.detail
            );
        }
    }
    eprintln!("{} ({:.0} ms)", report.verdict(), report.elapsed_ms);
    let failed = report.checks.iter().filter(|c| !c.passed).count();
    if failed > 0 {
        return Err(format!(
            "{failed} of {} self-test checks failed",
            report.checks.len()
        ));
    }
    Ok(())
}

/// Peak resident memory of this process (Linux), for the memory figures of `bench`.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
