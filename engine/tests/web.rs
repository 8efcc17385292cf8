//! Engine tests that run inside headless Chromium (wasm32 + WebGPU): the browser path must
//! compute what the native path computes.
#![cfg(target_arch = "wasm32")]

use rexvqa_engine::gguf::write::{TensorData, Writer};
use rexvqa_engine::gguf::{GgmlType, Gguf, SliceSource, Value};
use rexvqa_engine::quant;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[path = "common/fused_attention.rs"]
mod fused_attention;

#[wasm_bindgen_test]
async fn gguf_reads_asynchronously_in_the_browser() {
    let bytes = Writer::new()
        .kv("general.architecture", Value::String("gemma3".into()))
        .tensor(TensorData {
            name: "w".into(),
            dims: vec![256, 2],
            ty: GgmlType::Q4_K,
            bytes: quant::random_blocks(GgmlType::Q4_K, 512, 3),
        })
        .to_bytes();
    let src = SliceSource(bytes.clone());
    let g = Gguf::read_async(&src).await.unwrap();
    assert_eq!(g.architecture().unwrap(), "gemma3");
    let t = g.tensor("w").unwrap();
    let raw = g.read_tensor_async(&src, t).await.unwrap();
    let y = quant::dequantize_vec(t.ty, &raw, 512).unwrap();
    // The same bytes dequantised natively are checked bit-exact against gguf-py; here the wasm
    // build must agree with itself run through the sync path.
    let mut sync = SliceSource(bytes);
    let raw2 = g.read_tensor(&mut sync, t).unwrap();
    assert_eq!(y, quant::dequantize_vec(t.ty, &raw2, 512).unwrap());
}

/// Every weight type dequantises in the browser to gguf-py's bits: each tensor of the
/// block-type fixture against the SHA-256 of gguf-py's values (tests/reference/dequant_golden.py).
#[wasm_bindgen_test]
fn every_type_dequantises_to_gguf_py_in_the_browser() {
    use sha2::{Digest, Sha256};
    const FILE: &[u8] = include_bytes!("../../tests/fixtures/quant_types.gguf");
    const GOLDEN: &str = include_str!("../../tests/reference/golden/dequant.json");
    let golden: serde_json::Value = serde_json::from_str(GOLDEN).unwrap();
    let mut src = SliceSource(FILE.to_vec());
    let g = Gguf::read(&mut src).unwrap();
    let mut types = Vec::new();
    for t in &g.tensors {
        let raw = g.read_tensor(&mut src, t).unwrap();
        let n = t.dims.iter().product::<u64>() as usize;
        let y = quant::dequantize_vec(t.ty, &raw, n).unwrap();
        let mut h = Sha256::new();
        y.iter().for_each(|v| h.update(v.to_le_bytes()));
        assert_eq!(
            format!("{:x}", h.finalize()),
            golden["quant_types"][&t.name]["sha256"].as_str().unwrap(),
            "{}",
            t.name
        );
        types.push(t.ty);
    }
    types.dedup();
    assert_eq!(
        types.len(),
        GgmlType::all().filter(|t| t.is_supported()).count()
    );
}

/// The CPU path's quantised dot products in the SIMD128 build give, for every weight type, the
/// bits of the plain 8-lane loops (same operations in the same order; only the registers differ).
#[wasm_bindgen_test]
fn cpu_dot_products_with_simd128_equal_the_portable_loops() {
    use rexvqa_engine::quant::{dot, pack};
    const {
        assert!(
            cfg!(target_feature = "simd128"),
            "the wasm build enables SIMD128 (.cargo/config.toml)"
        )
    };
    let (n, k, m) = (5, 512, 3);
    let xs: Vec<f32> = (0..m * k)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0)
        .collect();
    let x = dot::Activations::new(&xs, k);
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::F32,
    ] {
        let words = pack::pack_rows(ty, &quant::random_blocks(ty, n * k, 7), n, k).unwrap();
        let (mut simd, mut plain) = (vec![0f32; m * n], vec![0f32; m * n]);
        dot::dot_rows(ty, &words, &x, &mut simd);
        dot::dot_rows_portable(ty, &words, &x, &mut plain);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&simd), bits(&plain), "{ty}");
        assert!(plain.iter().all(|v| v.is_finite() && *v != 0.0), "{ty}");
    }
}

mod model_in_browser {
    use std::io::Read;

    use super::fused_attention;
    use rexvqa_engine::device;
    use rexvqa_engine::gguf::SliceSource;
    use rexvqa_engine::image::Policy;
    use rexvqa_engine::model::nn::read_f32;
    use rexvqa_engine::quant::conformance::{cases, check_matmul};
    use rexvqa_engine::quant::{Half, Kernel};
    use rexvqa_engine::rexvqa::{Letter, prompt};
    use rexvqa_engine::selftest::rows;
    use rexvqa_engine::session::{LoadOptions, Model, Session};
    use rexvqa_engine::tuning::{Scoped, TileChoice, Tuning};
    use wasm_bindgen_test::*;

    fn gunzip(gz: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(gz)
            .read_to_end(&mut out)
            .expect("valid gzip");
        out
    }

    const TEXT: &[u8] = include_bytes!("../../tests/fixtures/models/tiny-q8_0.gguf.gz");
    const MMPROJ: &[u8] = include_bytes!("../../tests/fixtures/models/tiny-q8_0-mmproj.gguf.gz");
    const MMPROJ_224: &[u8] =
        include_bytes!("../../tests/fixtures/models/tiny-q8_0-mmproj-224.gguf.gz");
    const GOLDEN: &[u8] = include_bytes!("../../tests/reference/golden/tiny_tiny-q8_0.json.gz");
    const IMAGE: &[u8] = include_bytes!("../../tests/fixtures/images/tiny_ref_0.png");

    /// Every case of the conformance table through `kernel` with `half`, within its bounds.
    async fn check_cases(dev: &burn::tensor::Device, kernel: Kernel, half: Half) {
        for (i, (ty, m, n, k)) in cases().into_iter().enumerate() {
            let chunk = if n > 20 { 4096 } else { usize::MAX / 2 };
            let o = check_matmul(dev, kernel, half, ty, m, n, k, chunk, i as u64)
                .await
                .unwrap();
            assert!(
                o.worst_ratio <= 1.0,
                "WebGPU, {kernel:?}: {} ({:.2}× the bound)",
                o.worst,
                o.worst_ratio
            );
        }
    }

    #[wasm_bindgen_test]
    async fn every_quant_kernel_matches_the_cpu_reference_on_webgpu() {
        let dev = device::wgpu_async().await.expect("WebGPU adapter");
        let kernels = Kernel::available(&dev);
        // SwiftShader has no shader-f16; a browser on a GPU that has it runs both forms. The
        // automatic choices only pick among these forms: they run once, together, not crossed
        // with each (which ran every kernel twice).
        for &kernel in &kernels {
            for half in Half::available(&dev) {
                check_cases(&dev, kernel, half).await;
            }
        }
        check_cases(&dev, Kernel::Auto, Half::Auto).await;
        // The tiled kernel's other form: a GPU's 16 × 16 invocations where a software adapter
        // takes 8 × 8, or the other way round.
        let other = if device::adapter(&dev).is_some_and(|a| a.software) {
            TileChoice::Wide
        } else {
            TileChoice::Narrow
        };
        let _other = Scoped::new(Tuning {
            tile: Some(other),
            ..Tuning::default()
        });
        for &kernel in kernels.iter().filter(|k| k.tiled()) {
            check_cases(&dev, kernel, Half::Auto).await;
        }
    }

    /// The CPU path in wasm (no AVX2 there: the portable lanes of `quant::dot`).
    #[wasm_bindgen_test]
    async fn every_quant_type_matches_the_cpu_reference_on_the_wasm_cpu() {
        let dev = device::cpu();
        for (i, (ty, m, n, k)) in cases().into_iter().enumerate() {
            let o = check_matmul(
                &dev,
                Kernel::Auto,
                Half::Auto,
                ty,
                m,
                n,
                k,
                usize::MAX / 2,
                i as u64,
            )
            .await
            .unwrap();
            assert!(
                o.worst_ratio <= 1.0,
                "wasm CPU: {} ({:.2}× the bound)",
                o.worst,
                o.worst_ratio
            );
        }
    }

    #[wasm_bindgen_test]
    async fn fused_attention_matches_an_f64_evaluation_on_webgpu() {
        let dev = device::wgpu_async().await.expect("WebGPU adapter");
        for (i, (shape, window)) in fused_attention::CASES.into_iter().enumerate() {
            let err = fused_attention::max_error_vs_f64(&dev, shape, window, i as u64)
                .await
                .unwrap();
            assert!(
                err < fused_attention::TOLERANCE,
                "{shape:?} window {window:?}: max |Δ| {err:e}"
            );
        }
    }

    #[wasm_bindgen_test]
    async fn decode_attention_matches_an_f64_evaluation_on_webgpu() {
        use rexvqa_engine::selftest::attention::{self, DECODE_CASES, Path};
        let dev = device::wgpu_async().await.expect("WebGPU adapter");
        for (i, (shape, window)) in DECODE_CASES.into_iter().enumerate() {
            let err = attention::max_error_vs_f64(&dev, shape, window, i as u64, Path::Decode)
                .await
                .unwrap();
            assert!(
                err < attention::TOLERANCE,
                "{shape:?} window {window:?}: max |Δ| {err:e}"
            );
        }
    }

    #[wasm_bindgen_test]
    async fn wide_attention_matches_an_f64_evaluation_on_webgpu() {
        use rexvqa_engine::selftest::attention::{self, Path, WIDE_CASES};
        let dev = device::wgpu_async().await.expect("WebGPU adapter");
        // As the kernel splits the keys, whole, and in 3 chunks joined by a second dispatch.
        for (i, (shape, window)) in WIDE_CASES.into_iter().enumerate() {
            for path in [Path::Wide, Path::WideChunks(1), Path::WideChunks(3)] {
                let err = attention::max_error_vs_f64(&dev, shape, window, i as u64, path)
                    .await
                    .unwrap();
                assert!(
                    err < attention::TOLERANCE,
                    "{path:?} {shape:?} window {window:?}: max |Δ| {err:e}"
                );
            }
        }
    }

    /// Every fused row kernel and the composed burn ops it replaces, on WebGPU, against an
    /// f64 evaluation (the native test adds the CPU).
    #[wasm_bindgen_test]
    async fn fused_row_kernels_and_their_composed_forms_match_an_f64_evaluation_on_webgpu() {
        let dev = device::wgpu_async().await.expect("WebGPU adapter");
        for (i, (op, shape)) in rows::CASES.into_iter().enumerate() {
            for path in [rows::Path::Fused, rows::Path::Composed] {
                let err = rows::max_error_vs_f64(&dev, op, shape, i as u64, path)
                    .await
                    .unwrap();
                wasm_bindgen_test::console_log!("{} {shape:?} {path:?}: {err:.2e}", op.name());
                assert!(
                    err < rows::TOLERANCE,
                    "{} {shape:?} {path:?}: error {err:e}",
                    op.name()
                );
            }
        }
    }

    /// The decoder's q/k norm + RoPE kernel with its KV-cache write, on WebGPU (as the native
    /// test).
    #[wasm_bindgen_test]
    async fn qk_norm_rope_writes_the_cache_in_place_on_webgpu() {
        let dev = device::wgpu_async().await.expect("WebGPU adapter");
        for (i, shape) in rows::QK_STORE_CASES.into_iter().enumerate() {
            for pos in [0, 7] {
                let err = rows::qk_store_max_error(&dev, shape, pos, i as u64)
                    .await
                    .unwrap();
                wasm_bindgen_test::console_log!("qk store {shape:?} at {pos}: {err:.2e}");
                assert!(err < rows::TOLERANCE, "{shape:?} at {pos}: error {err:e}");
            }
        }
    }

    /// The fused products on WebGPU (as the native tests): two block types read as one matrix,
    /// bit-equal to each matrix alone and within the f64 bound; GELU·up in the decode product.
    #[wasm_bindgen_test]
    async fn stacked_and_gelu_products_match_their_references_on_webgpu() {
        use rexvqa_engine::gguf::GgmlType;
        use rexvqa_engine::quant::conformance::{gelu_product_error, stacked_error};
        let dev = device::wgpu_async().await.expect("WebGPU adapter");
        let pair = [GgmlType::Q4_K, GgmlType::Q6_K];
        for kernel in Kernel::available(&dev) {
            for (m, n) in [(1, [13, 5]), (70, [67, 3])] {
                let r = stacked_error(&dev, kernel, Half::Auto, pair, m, n, 256, m as u64)
                    .await
                    .unwrap();
                assert!(r.passed(), "{kernel:?}: {r:?}");
            }
            if kernel.tiled() {
                continue;
            }
            for m in [1, 5] {
                let r = gelu_product_error(&dev, kernel, Half::Auto, GgmlType::Q4_K, m, 67, 256, 3)
                    .await
                    .unwrap();
                wasm_bindgen_test::console_log!("gelu product {kernel:?} m={m}: {r:?}");
                assert!(r.passed(), "{kernel:?}: {r:?}");
            }
        }
    }

    /// Letter logits of the official prompt and the last-position logits of the top-32 ids.
    async fn run(model: &Model) -> (Vec<f32>, Vec<f32>, Vec<u32>) {
        let opts = [
            "A. Yes, small left effusion",
            "B. No effusion",
            "C. Right-sided effusion",
            "D. Cannot be determined",
        ]
        .map(String::from);
        let text = prompt::chat(
            Some(prompt::SYSTEM),
            &prompt::user_text(
                "Is there evidence of pleural effusion in the left lower lobe?",
                &opts,
                None,
            ),
            1,
        );
        let ids = model.tokenize_rendered(&text, 1).unwrap();
        let t0 = js_sys::Date::now();
        let feats = model
            .encode_image(&model.preprocess_file(IMAGE, Policy::Scale).unwrap())
            .unwrap();
        read_f32(feats.clone()).await.unwrap();
        let t1 = js_sys::Date::now();
        let mut s = Session::new(model);
        let scores = s
            .score_options(&ids, std::slice::from_ref(&feats), &Letter::ALL)
            .await
            .unwrap();
        let t2 = js_sys::Date::now();
        let logits = model.last_logits(&ids, &[feats]).await.unwrap();
        web_sys_log(&format!(
            "timing: image encode {:.0} ms, {} token prefill + option scores {:.0} ms, again {:.0} ms",
            t1 - t0,
            ids.len(),
            t2 - t1,
            js_sys::Date::now() - t2
        ));
        (scores.logits, logits, ids)
    }

    #[wasm_bindgen_test]
    async fn tiny_model_on_webgpu_matches_transformers_and_the_cpu_path() {
        let golden: serde_json::Value = serde_json::from_slice(&gunzip(GOLDEN)).unwrap();
        let (text, mmproj) = (SliceSource(gunzip(TEXT)), SliceSource(gunzip(MMPROJ)));
        let gpu = device::wgpu_async().await.expect("WebGPU adapter");
        let on_gpu = Model::load(
            &text,
            Some(&mmproj),
            &gpu,
            &LoadOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
        let (gpu_letters, gpu_logits, ids) = run(&on_gpu).await;
        // The browser's device destroys what CubeCL gives back (#33): the pools' free pages,
        // released here, are destroyed once the passes below have been submitted, rather than
        // left to a garbage collection.
        let before = rexvqa_engine::destroying_device::counts();
        device::release_free_memory(&gpu).unwrap();
        // Dispatch counting works in the browser (the Benchmark card's figures), and its dry
        // run counts what the same passes issue when they run. The pair with the 224-px mmproj
        // issues the same kinds of passes, its image encode over 1/16 of the 896-px one's
        // patches.
        let small_mmproj = SliceSource(gunzip(MMPROJ_224));
        let small = Model::load(
            &text,
            Some(&small_mmproj),
            &gpu,
            &LoadOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
        let real = rexvqa_engine::bench::count_passes_now(&small, 2)
            .await
            .unwrap();
        let dry = rexvqa_engine::bench::count_passes(&small, 2).await.unwrap();
        assert!(real.image.as_ref().is_some_and(|c| c.dispatches > 0));
        drop(small);
        let after = rexvqa_engine::destroying_device::counts();
        assert!(
            after.created > 0 && after.destroyed > before.destroyed,
            "no buffer destroyed on WebGPU: {before:?} -> {after:?}"
        );
        assert!(real.token.dispatches > 0 && real.token.reads == 1);
        assert_eq!(
            (&dry.token, &dry.question, &dry.image),
            (&real.token, &real.question, &real.image)
        );
        let on_cpu = Model::load(
            &text,
            Some(&mmproj),
            &device::cpu(),
            &LoadOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
        let (cpu_letters, cpu_logits, _) = run(&on_cpu).await;

        let g = &golden["prompts"]["official_one_image"];
        let want_ids: Vec<u32> = g["input_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(ids, want_ids);
        let last = (ids.len() - 1).to_string();
        let mut worst = 0f32;
        for pair in g["positions"][&last]["top"].as_array().unwrap() {
            let (id, l) = (
                pair[0].as_u64().unwrap() as usize,
                pair[1].as_f64().unwrap() as f32,
            );
            worst = worst.max((gpu_logits[id] - l).abs());
        }
        // Measured on SwiftShader: 1.9e-6.
        assert!(
            worst <= 2e-5,
            "WebGPU vs transformers: max |Δlogit| {worst}"
        );
        let rank = |v: &[f32]| {
            let mut o: Vec<usize> = (0..v.len()).collect();
            o.sort_by(|&a, &b| v[b].total_cmp(&v[a]));
            o
        };
        assert_eq!(
            rank(&gpu_letters),
            rank(&cpu_letters),
            "option ranking differs between WebGPU and CPU"
        );
        let d = gpu_logits
            .iter()
            .zip(&cpu_logits)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        // Measured on SwiftShader: 3.2e-6.
        assert!(d <= 3e-5, "WebGPU vs CPU: max |Δlogit| {d}");
        let _ = read_f32::<1>;
        web_sys_log(&format!(
            "WebGPU vs transformers {worst:.2e}, vs CPU {d:.2e}"
        ));
    }

    /// A matrix larger than a chunk (a real model's head, the 4B's FFNs) streams into group
    /// buffers by queue writes at offsets: the tiny decoder loaded in 64 KiB chunks (its 17 MB
    /// embedding and head in 270 writes) gives the same logits, bit for bit, as loaded a matrix
    /// a chunk.
    #[wasm_bindgen_test]
    async fn weights_written_chunk_by_chunk_give_the_same_logits_on_webgpu() {
        let text = SliceSource(gunzip(TEXT));
        let gpu = device::wgpu_async().await.expect("WebGPU adapter");
        let mut loads = Vec::new();
        for chunk_bytes in [LoadOptions::default().chunk_bytes, 64 << 10] {
            let opts = LoadOptions { chunk_bytes };
            let mut reads = 0;
            let m = Model::load(
                &text,
                None::<&SliceSource<Vec<u8>>>,
                &gpu,
                &opts,
                &mut |_| reads += 1,
            )
            .await
            .unwrap();
            let d = &m.decoder;
            let mut cache = d.new_cache();
            let h = d.forward(&[2, 17, 5, 9], &[], &mut cache).unwrap();
            loads.push((reads, read_f32(d.logits(h)).await.unwrap()));
        }
        let (whole, chunked) = (&loads[0], &loads[1]);
        // Each read is a chunk: the embedding alone is 270 chunks of 64 KiB.
        assert!(
            chunked.0 >= whole.0 + 269,
            "reads: {} vs {}",
            chunked.0,
            whole.0
        );
        assert!(whole.1 == chunked.1, "logits differ between the two loads");
    }

    const TEXT_K: &[u8] = include_bytes!("../../tests/fixtures/models/tinyk-q4_k_m.gguf.gz");

    /// A Q4_K_M model's attention weights in one buffer a layer (`Loader::qmatrices_shared`):
    /// its Q6_K v layers multiply q+k and v, two views of that buffer, in one dispatch, which
    /// WebGPU allows because the ranges are disjoint. The logits match the wasm CPU's.
    #[wasm_bindgen_test]
    async fn shared_attention_weights_give_the_cpu_logits_on_webgpu() {
        let text = SliceSource(gunzip(TEXT_K));
        let gpu = device::wgpu_async().await.expect("WebGPU adapter");
        let mut logits = Vec::new();
        for dev in [&gpu, &device::cpu()] {
            let m = Model::load(
                &text,
                None::<&SliceSource<Vec<u8>>>,
                dev,
                &LoadOptions::default(),
                &mut |_| {},
            )
            .await
            .unwrap();
            let shared: Vec<_> = m
                .decoder
                .matrices()
                .into_iter()
                .filter(|(n, _)| n.contains(".attn_"))
                .map(|(n, q)| (n, q.shared_buffer()))
                .collect();
            let one = shared[0].1.is_some() && shared.iter().all(|(_, b)| *b == shared[0].1);
            assert_eq!(one, dev == &gpu, "{shared:?}");
            let d = &m.decoder;
            let mut cache = d.new_cache();
            let h = d.forward(&[2, 17, 5, 9, 300, 41], &[], &mut cache).unwrap();
            logits.push(read_f32(d.logits(h)).await.unwrap());
        }
        let worst = logits[0]
            .iter()
            .zip(&logits[1])
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        // The native tests' bound for this model against transformers (1e-4, 10× the 1.05e-5
        // measured); WebGPU against the wasm CPU measured 1.5e-5 on SwiftShader.
        assert!(worst < 1e-4, "WebGPU vs CPU logits: {worst:e}");
        web_sys_log(&format!("tinyk WebGPU vs CPU logits: {worst:e}"));
    }

    struct Now;

    impl rexvqa_engine::eval::Clock for Now {
        fn now_ms(&self) -> f64 {
            js_sys::Date::now()
        }
    }

    /// The self-test in the browser: every check passes on WebGPU, and a fault injected into
    /// the matmul form the automatic choice takes for decoding is caught, that form turned off
    /// with the reason, and the tiny model's forward through the next form matches the CPU.
    #[wasm_bindgen_test]
    async fn the_selftest_passes_on_webgpu_and_catches_and_avoids_an_injected_fault() {
        use rexvqa_engine::gguf::GgmlType;
        use rexvqa_engine::kernels::forms;
        use rexvqa_engine::quant::resolve;
        use rexvqa_engine::selftest::{self, Plan};
        let dev = device::wgpu_async().await.expect("WebGPU adapter");
        // A Q4_K_M MedGemma's matrix types and head widths: what the app checks.
        let plan = Plan::medgemma_4b(vec![GgmlType::F16, GgmlType::Q4_K, GgmlType::Q6_K]);
        let r = selftest::run(&dev, &plan, &Now).await;
        for c in &r.checks {
            web_sys_log(&format!(
                "{} {} {:.2e} <= {:.2e} {:.0} ms {}",
                c.passed, c.name, c.max_error, c.bound, c.ms, c.detail
            ));
        }
        web_sys_log(&r.verdict());
        let failed: Vec<&str> = r
            .checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.name.as_str())
            .collect();
        assert!(failed.is_empty(), "{failed:?}");
        assert!(r.usable && r.disabled.is_empty());

        let before = resolve(&dev, Kernel::Auto, [1, 13, 256]);
        let form = before.form().expect("a GPU resolves to a concrete kernel");
        forms::inject_fault(form);
        let r = selftest::run(&dev, &plan, &Now).await;
        forms::clear_faults();
        let after = resolve(&dev, Kernel::Auto, [1, 13, 256]);
        forms::reset();
        web_sys_log(&r.verdict());
        let off: Vec<_> = r.disabled.iter().map(|d| d.form).collect();
        assert_eq!(off, [form], "{}", r.verdict());
        assert_ne!(after, before, "decoding moves to the next form");
        let fwd = r.checks.iter().find(|c| c.name == "forward.tiny").unwrap();
        assert!(fwd.passed, "forward after avoiding {form:?}: {fwd:?}");
        assert!(r.usable, "{}", r.verdict());
    }

    fn web_sys_log(s: &str) {
        wasm_bindgen_test::console_log!("{}", s);
    }
}
