//! Benchmark card: runs the engine's harness (the one `rexvqa bench` runs) on the loaded model
//! in this browser and shows the figures, with the JSON to save.

use leptos::prelude::*;

use super::engine::Engine;
use super::signals::BenchState;
use crate::protocol::Request;

/// Rows (label, value) of the harness JSON worth a glance.
fn rows(json: &str) -> Vec<(String, String)> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else {
        return Vec::new();
    };
    let r = &v["results"];
    let num = |x: &serde_json::Value| x.as_f64().unwrap_or(f64::NAN);
    let mut out = vec![("runs on".into(), runs_on(&v["backend"], &r["adapter"]))];
    if let Some(t) = tuning(&r["tuning"]) {
        out.push(("tuning".into(), t));
    }
    out.extend([
        (
            "image encode, first (ms)".into(),
            format!("{:.0}", num(&r["image_encode_first_ms"])),
        ),
        (
            "image encode (ms)".into(),
            format!("{:.0}", num(&r["image_encode_ms"])),
        ),
    ]);
    let first = r["prefill_first"].as_array();
    for (i, p) in r["prefill"].as_array().into_iter().flatten().enumerate() {
        // The first pass at a length also pays for first use: shown beside the steady figure.
        let first = first
            .and_then(|f| f.get(i))
            .map(|f| format!(" (first pass {:.1})", num(&f[1])))
            .unwrap_or_default();
        out.push((
            format!("prefill {} tokens (tokens/s)", p[0]),
            format!("{:.1}{first}", num(&p[1])),
        ));
    }
    out.extend([
        (
            "decode (tokens/s)".into(),
            format!("{:.2}", num(&r["decode_tokens_per_s"])),
        ),
        (
            "fast questions/s, study cached".into(),
            format!("{:.3}", num(&r["fast_questions_per_s"])),
        ),
        (
            "fast questions/s, study batched".into(),
            format!("{:.3}", num(&r["fast_questions_per_s_batched"])),
        ),
        (
            "fast questions/s, nothing cached".into(),
            format!("{:.3}", num(&r["fast_questions_per_s_cold"])),
        ),
        (
            "official questions/s".into(),
            format!("{:.3}", num(&r["official_questions_per_s"])),
        ),
        (
            "official questions/s, study batched, 2-token replies".into(),
            format!("{:.3}", num(&r["official_questions_per_s_batched"])),
        ),
        (
            "wasm heap (MB)".into(),
            format!("{:.0}", num(&v["wasm_heap_bytes"]) / 1e6),
        ),
    ]);
    // GPU backends only: the CPU path has no device memory to report, and no dispatches. What
    // the pool reserved; the buffers it gave back are destroyed once no unsubmitted command can
    // name them (`BenchReport::peak_device_bytes`, `buffers_destroyed`).
    if let Some(b) = r["peak_device_bytes"].as_f64() {
        out.push((
            "GPU memory reserved, peak (MB)".into(),
            format!("{:.0}", b / 1e6),
        ));
    }
    let destroyed = &r["buffers_destroyed"];
    if let (Some(n), Some(b)) = (destroyed[0].as_u64(), destroyed[1].as_f64()) {
        out.push((
            "GPU buffers given back and destroyed (MB)".into(),
            format!("{n} ({:.0})", b / 1e6),
        ));
    }
    out.extend(dispatch_rows(r));
    // The kernel profile was asked for but this adapter cannot give it: say why.
    if let Some(why) = r["profile"]["unavailable"].as_str() {
        out.push(("kernel profile".into(), why.to_string()));
    }
    out
}

/// Dispatch counts (GPU backends): per decoded token with its submissions and reads, per fast
/// question, per image, and the weight bytes a token must read (the physical minimum).
fn dispatch_rows(r: &serde_json::Value) -> Vec<(String, String)> {
    let Some(token) = r["dispatches_per_token"].as_u64() else {
        return Vec::new();
    };
    let int = |x: &serde_json::Value| x.as_u64().map_or("–".into(), |n| n.to_string());
    vec![
        (
            "GPU dispatches per token (submits, reads)".into(),
            format!(
                "{token} ({}, {})",
                int(&r["submits_per_token"]),
                int(&r["reads_per_token"])
            ),
        ),
        (
            "host time issuing a token (ms; µs per dispatch)".into(),
            format!(
                "{:.2} ({})",
                r["decode_issue_ms_per_token"].as_f64().unwrap_or(f64::NAN),
                r["host_us_per_dispatch"]
                    .as_f64()
                    .map_or("–".into(), |n| format!("{n:.0}"))
            ),
        ),
        (
            "dependent chain of tiny dispatches (µs each; issuing)".into(),
            format!(
                "{} ({})",
                r["chain_us_per_dispatch"]
                    .as_f64()
                    .map_or("–".into(), |n| format!("{n:.1}")),
                r["chain_issue_us_per_dispatch"]
                    .as_f64()
                    .map_or("–".into(), |n| format!("{n:.1}"))
            ),
        ),
        (
            "GPU dispatches per fast question (batched)".into(),
            format!(
                "{} ({})",
                int(&r["dispatches_per_question"]),
                r["dispatches_per_question_batched"]
                    .as_f64()
                    .map_or("–".into(), |n| format!("{n:.0}"))
            ),
        ),
        (
            "GPU dispatches per image".into(),
            int(&r["dispatches_per_image"]),
        ),
        (
            "weight bytes per token (MB)".into(),
            r["weight_bytes_per_token"]
                .as_f64()
                .map_or("–".into(), |b| format!("{:.1}", b / 1e6)),
        ),
        (
            "kernel bytes per token (MB, ×weights)".into(),
            match (
                r["bytes_per_token"].as_f64(),
                r["weight_bytes_per_token"].as_f64(),
            ) {
                (Some(b), Some(w)) if w > 0.0 => format!("{:.1} ({:.2}×)", b / 1e6, b / w),
                (Some(b), _) => format!("{:.1}", b / 1e6),
                _ => "–".into(),
            },
        ),
    ]
}

/// The kernel forms and pools a run was tuned to (`REXVQA_*` natively; the browser always runs
/// the automatic choice); None for reports saved before the tuning was recorded.
fn tuning(t: &serde_json::Value) -> Option<String> {
    let t: rexvqa_engine::tuning::Tuning = serde_json::from_value(t.clone()).ok()?;
    let set = t.describe();
    Some(if set.is_empty() {
        "automatic".into()
    } else {
        set
    })
}

/// The backend, and on a GPU the adapter and the features its kernels could use.
fn runs_on(backend: &serde_json::Value, adapter: &serde_json::Value) -> String {
    let backend = backend.as_str().unwrap_or("").to_string();
    let Some(name) = adapter["name"].as_str() else {
        return backend;
    };
    let yes = |k: &str| {
        if adapter[k].as_bool() == Some(true) {
            "yes"
        } else {
            "no"
        }
    };
    // Reports saved before the f16 probe existed have no `native_half`.
    let f16_use = match (
        adapter["shader_f16"].as_bool(),
        adapter["native_half"].as_bool(),
    ) {
        (Some(true), Some(true)) => ", used",
        (Some(true), Some(false)) => ", unused (inexact on this adapter)",
        _ => "",
    };
    format!(
        "{backend} · {name}{} · subgroups {} · shader-f16 {}{f16_use}",
        if adapter["software"].as_bool() == Some(true) {
            " (software)"
        } else {
            ""
        },
        yes("subgroups"),
        yes("shader_f16")
    )
}

/// The per-matrix kernel timings: matrix, type, input rows, kernel, ms, GB/s, GFLOP/s.
fn kernel_rows(json: &str) -> Vec<[String; 7]> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else {
        return Vec::new();
    };
    let num = |x: &serde_json::Value| x.as_f64().unwrap_or(f64::NAN);
    let text = |x: &serde_json::Value| x.as_str().unwrap_or("").to_string();
    v["results"]["kernels"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|k| {
            [
                text(&k["matrix"]),
                format!("{} {}×{}", text(&k["ty"]), k["rows"], k["cols"]),
                k["m"].to_string(),
                match k["half"].as_str() {
                    Some(h @ ("integer" | "native")) => format!("{} · {h} f16", text(&k["kernel"])),
                    _ => text(&k["kernel"]),
                },
                format!("{:.2}", num(&k["ms"])),
                format!("{:.2}", num(&k["weight_gb_per_s"])),
                format!("{:.2}", num(&k["gflop_per_s"])),
            ]
        })
        .collect()
}

/// Rows (pass, kernel, launches, device µs, GB/s, GFLOP/s) of the profiled passes, each pass's
/// kernels by device time as the JSON lists them; rates not counted for a kernel show "–".
fn profile_rows(json: &str) -> Vec<[String; 6]> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else {
        return Vec::new();
    };
    let rate = |x: &serde_json::Value| x.as_f64().map_or("–".to_string(), |r| format!("{r:.2}"));
    let mut out = Vec::new();
    for pass in v["results"]["profile"]["passes"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for k in pass["kernels"].as_array().into_iter().flatten() {
            out.push([
                pass["pass"].as_str().unwrap_or("").to_string(),
                k["kernel"].as_str().unwrap_or("").to_string(),
                k["dispatches"].to_string(),
                format!("{:.1}", k["gpu_us"].as_f64().unwrap_or(f64::NAN)),
                rate(&k["gb_per_s"]),
                rate(&k["gflop_per_s"]),
            ]);
        }
    }
    out
}

/// Positive counts separated by commas ("" is none); None when one is not a positive number.
fn counts(text: &str) -> Option<Vec<usize>> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().ok().filter(|&n| n > 0))
        .collect()
}

/// The benchmark card (shown with a loaded model).
#[component]
pub fn BenchPanel() -> impl IntoView {
    let engine = expect_context::<Engine>();
    let prefill = RwSignal::new("300,1000".to_string());
    let decode = RwSignal::new(32usize);
    let official = RwSignal::new(16usize);
    let rows_text = RwSignal::new("1,256".to_string());
    let profile = RwSignal::new(false);
    let run = move |_| {
        let lengths = counts(&prefill.get_untracked());
        let rows = counts(&rows_text.get_untracked());
        match (lengths, rows) {
            (Some(l), Some(rows)) if !l.is_empty() => {
                engine.bench.set(BenchState::Running);
                engine.send(&Request::Bench {
                    prefill: l,
                    decode: decode.get_untracked().max(1),
                    official_max_tokens: official.get_untracked().max(1),
                    kernel_rows: rows,
                    profile: profile.get_untracked(),
                });
            }
            (None, _) | (Some(_), Some(_)) => engine.error(
                "Benchmark: prompt lengths are positive numbers separated by commas, e.g. 300,1000"
                    .into(),
            ),
            (_, None) => engine.error(
                "Benchmark: kernel rows are positive numbers separated by commas, e.g. 1,256 (empty: no kernel timings)"
                    .into(),
            ),
        }
    };
    let running = move || engine.bench.get() == BenchState::Running;
    move || {
        engine.model.get().map(|_| view! {
        <section class="card" data-testid="bench-panel" aria-labelledby="bench-title">
            <h2 id="bench-title">"Benchmark"</h2>
            <p class="hint">"Times this model on this browser and device: image encode, prefill, decode, and fast/official questions on a synthetic study. The same harness as the native "<code>"rexvqa bench"</code>", so the JSON can be compared with bench/compare.py's."</p>
            <div class="row">
                <label>"prompt lengths " <input class="narrow" data-testid="bench-prefill" prop:value=move || prefill.get() on:input=move |ev| prefill.set(event_target_value(&ev)) /></label>
                <label>"decode tokens " <input type="number" min="1" class="narrow" data-testid="bench-decode" prop:value=move || decode.get() on:input=move |ev| decode.set(event_target_value(&ev).parse().unwrap_or(1)) /></label>
                <label>"official cap " <input type="number" min="1" class="narrow" data-testid="bench-official" prop:value=move || official.get() on:input=move |ev| official.set(event_target_value(&ev).parse().unwrap_or(1)) /></label>
                <label title="input rows of the per-matrix kernel timings; empty for none">"kernel rows " <input class="narrow" data-testid="bench-kernel-rows" prop:value=move || rows_text.get() on:input=move |ev| rows_text.set(event_target_value(&ev)) /></label>
                <label title="time every launch of a token, a prefill pass and an image encode on its own"><input type="checkbox" data-testid="bench-profile" prop:checked=move || profile.get() on:change=move |ev| profile.set(event_target_checked(&ev)) />" kernel profile"</label>
                <button data-testid="bench-run" disabled=running on:click=run>"Run benchmark"</button>
            </div>
            {move || running().then(|| view! { <p role="status">"Running the benchmark…"</p> })}
            {move || match engine.bench.get() { BenchState::Done(json) => Some(json), _ => None }.map(|json| {
                let save = json.clone();
                view! {
                    <table class="grid" data-testid="bench-results"><tbody>
                        {rows(&json).into_iter().map(|(k, v)| view! { <tr><td>{k}</td><td class="mono">{v}</td></tr> }).collect_view()}
                    </tbody></table>
                    <details>
                        <summary>"Kernel timings (each weight shape on its own)"</summary>
                        <table class="grid" data-testid="bench-kernels">
                            <thead><tr><th>"matrix"</th><th>"weights"</th><th>"input rows"</th><th>"kernel"</th><th>"ms"</th><th>"GB/s"</th><th>"GFLOP/s"</th></tr></thead>
                            <tbody>
                                {kernel_rows(&json).into_iter().map(|cells| view! { <tr>{cells.into_iter().map(|c| view! { <td class="mono">{c}</td> }).collect_view()}</tr> }).collect_view()}
                            </tbody>
                        </table>
                    </details>
                    {(!profile_rows(&json).is_empty()).then(|| view! {
                        <details>
                            <summary>"Device time by kernel (profiled passes)"</summary>
                            <table class="grid" data-testid="bench-profile-table">
                                <thead><tr><th>"pass"</th><th>"kernel"</th><th>"launches"</th><th>"µs"</th><th>"GB/s"</th><th>"GFLOP/s"</th></tr></thead>
                                <tbody>
                                    {profile_rows(&json).into_iter().map(|cells| view! { <tr>{cells.into_iter().map(|c| view! { <td class="mono">{c}</td> }).collect_view()}</tr> }).collect_view()}
                                </tbody>
                            </table>
                        </details>
                    })}
                    <button class="secondary" data-testid="bench-save" on:click=move |_| engine.download("rexvqa-web-bench.json", "application/json", &save)>"Save JSON"</button>
                }
            })}
        </section>
    })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_on_names_the_adapter_and_its_features() {
        let gpu = serde_json::json!({"name": "llvmpipe", "software": true, "subgroups": false, "shader_f16": true});
        assert_eq!(
            runs_on(&"wgpu".into(), &gpu),
            "wgpu · llvmpipe (software) · subgroups no · shader-f16 yes"
        );
        let probed = serde_json::json!({"name": "llvmpipe", "software": true, "subgroups": false, "shader_f16": true, "native_half": true});
        assert_eq!(
            runs_on(&"wgpu".into(), &probed),
            "wgpu · llvmpipe (software) · subgroups no · shader-f16 yes, used"
        );
        let inexact = serde_json::json!({"name": "gpu", "software": false, "subgroups": true, "shader_f16": true, "native_half": false});
        assert_eq!(
            runs_on(&"wgpu".into(), &inexact),
            "wgpu · gpu · subgroups yes · shader-f16 yes, unused (inexact on this adapter)"
        );
        // The CPU, and reports saved before the adapter was recorded.
        assert_eq!(runs_on(&"cpu".into(), &serde_json::Value::Null), "cpu");
    }

    #[test]
    fn the_tuning_shows_as_its_variables_or_automatic() {
        let row = |results: serde_json::Value| {
            rows(&serde_json::json!({ "results": results }).to_string())
                .into_iter()
                .find(|(label, _)| label == "tuning")
                .map(|(_, value)| value)
        };
        let default = serde_json::to_value(rexvqa_engine::tuning::Tuning::default()).unwrap();
        assert_eq!(
            row(serde_json::json!({ "tuning": default })).as_deref(),
            Some("automatic")
        );
        let team = rexvqa_engine::tuning::Tuning {
            gemv_team: Some(8),
            ..Default::default()
        };
        let team = serde_json::to_value(team).unwrap();
        assert_eq!(
            row(serde_json::json!({ "tuning": team })).as_deref(),
            Some("REXVQA_GEMV_TEAM=8")
        );
        // Reports saved before the tuning was recorded: no row.
        assert_eq!(row(serde_json::json!({})), None);
    }

    #[test]
    fn destroyed_buffers_show_where_the_device_is_wrapped() {
        let row = |results: serde_json::Value| {
            rows(&serde_json::json!({ "results": results }).to_string())
                .into_iter()
                .find(|(label, _)| label.starts_with("GPU buffers given back"))
                .map(|(_, value)| value)
        };
        assert_eq!(
            row(serde_json::json!({"buffers_destroyed": [630, 348_000_000u64]})).as_deref(),
            Some("630 (348)")
        );
        // Natively, on the CPU, and in reports saved before the figure existed: no row.
        assert_eq!(row(serde_json::json!({"buffers_destroyed": null})), None);
        assert_eq!(row(serde_json::json!({})), None);
    }

    #[test]
    fn profile_rows_list_each_pass_kernel_by_kernel() {
        let json = serde_json::json!({"results": {"profile": {"passes": [
            {"pass": "token", "kernels": [
                {"kernel": "QgemvKernel", "dispatches": 29, "gpu_us": 75.04, "gb_per_s": 120.5, "gflop_per_s": 0.5},
                {"kernel": "CopyKernel", "dispatches": 2, "gpu_us": 3.0, "gb_per_s": null, "gflop_per_s": null}]},
            {"pass": "image", "kernels": [
                {"kernel": "AttentionKernel", "dispatches": 2, "gpu_us": 10.0, "gb_per_s": 1.0, "gflop_per_s": 2.0}]}]}}})
        .to_string();
        let rows = profile_rows(&json);
        assert_eq!(rows.len(), 3);
        assert_eq!(
            rows[0],
            ["token", "QgemvKernel", "29", "75.0", "120.50", "0.50"].map(String::from)
        );
        assert_eq!(rows[1][4..], ["–", "–"].map(String::from));
        assert_eq!(rows[2][0], "image");
        // A run without the profile has no rows (and no table).
        assert!(profile_rows(r#"{"results": {}}"#).is_empty());
    }

    #[test]
    fn prefill_rows_show_the_first_pass_beside_the_steady_figure() {
        let row = |json: &str, label: &str| {
            rows(json)
                .into_iter()
                .find(|(l, _)| l == label)
                .map(|(_, v)| v)
        };
        let both = r#"{"backend": "cpu", "results": {"prefill": [[64, 85.1], [200, 62.9]], "prefill_first": [[64, 24.0], [200, 75.2]]}}"#;
        assert_eq!(
            row(both, "prefill 64 tokens (tokens/s)").as_deref(),
            Some("85.1 (first pass 24.0)")
        );
        assert_eq!(
            row(both, "prefill 200 tokens (tokens/s)").as_deref(),
            Some("62.9 (first pass 75.2)")
        );
        // A report saved before the first pass was recorded.
        let old = r#"{"backend": "cpu", "results": {"prefill": [[64, 85.1]]}}"#;
        assert_eq!(
            row(old, "prefill 64 tokens (tokens/s)").as_deref(),
            Some("85.1")
        );
    }

    #[test]
    fn counts_read_comma_lists_and_refuse_what_is_not_a_positive_count() {
        assert_eq!(counts("1, 256"), Some(vec![1, 256]));
        assert_eq!(counts(""), Some(vec![]));
        assert_eq!(counts("64,"), Some(vec![64]));
        assert_eq!(counts("0"), None);
        assert_eq!(counts("1,x"), None);
    }
}
