//! Quantised matmul/gather kernels on every native backend against the CPU dequantisation.

#[path = "common/fused_attention.rs"]
mod fused_attention;

use rexvqa_engine::device;
use rexvqa_engine::gguf::GgmlType;
use rexvqa_engine::quant::conformance::{
    GELU_PRODUCT_TOLERANCE, cases, check_half_forms_agree, check_matmul, gelu_product_error,
    stacked_error,
};
use rexvqa_engine::quant::random_blocks;
use rexvqa_engine::quant::{Half, Kernel, QMatrix, allow_software_subgroups, native_half_exact};
use rexvqa_engine::selftest::attention::{self, DECODE_CASES, WIDE_CASES};
use rexvqa_engine::selftest::rows;
use rexvqa_engine::tuning::{Scoped, TileChoice, Tuning};

/// The wgpu device, with the subgroup kernel allowed on a software adapter (lavapipe has
/// subgroups; cubecl does not advertise them there), so that it is tested off a GPU too. Every
/// test here calls this first, so all see the same kernel list.
fn gpu() -> burn::tensor::Device {
    allow_software_subgroups();
    device::wgpu().expect("a wgpu adapter (lavapipe: apt mesa-vulkan-drivers)")
}

/// Every case with every kernel and f16 form the device offers, then with the automatic choice
/// of both. The automatic choices only pick among the offered forms, so crossing each with the
/// other forms would run the same kernels twice.
fn run_all(dev: &burn::tensor::Device, label: &str) {
    let kernels = Kernel::available(dev);
    let halves = Half::available(dev);
    eprintln!("{label}: kernels {kernels:?}, f16 forms {halves:?}, then both automatic");
    run_cases(dev, label, &kernels, &halves);
    run_cases(dev, label, &[Kernel::Auto], &[Half::Auto]);
}

/// Every case of the conformance table through each of `kernels` with each of `halves`.
fn run_cases(dev: &burn::tensor::Device, label: &str, kernels: &[Kernel], halves: &[Half]) {
    for &kernel in kernels {
        for &half in halves {
            for (i, (ty, m, n, k)) in cases().into_iter().enumerate() {
                // Small chunks force the multi-buffer path on the larger cases.
                let chunk = if n > 20 { 4096 } else { usize::MAX / 2 };
                let o = pollster::block_on(check_matmul(
                    dev, kernel, half, ty, m, n, k, chunk, i as u64,
                ))
                .unwrap();
                assert!(
                    o.worst_ratio <= 1.0,
                    "{label}: {} (error {:.2}× the bound)",
                    o.worst,
                    o.worst_ratio
                );
            }
        }
    }
}

/// The tiled kernel in the form this adapter does not take itself: a GPU's 16 × 16 invocations
/// on lavapipe, under a tuning of this thread alone.
#[test]
fn wgpu_tiled_kernel_in_its_other_form() {
    let dev = gpu();
    let software = device::adapter(&dev).is_some_and(|a| a.software);
    let _other = Scoped::new(Tuning {
        tile: Some(if software {
            TileChoice::Wide
        } else {
            TileChoice::Narrow
        }),
        ..Tuning::default()
    });
    let tiled: Vec<Kernel> = Kernel::available(&dev)
        .into_iter()
        .filter(|k| k.tiled())
        .collect();
    run_cases(&dev, "wgpu, other tile form", &tiled, &[Half::Auto]);
}

/// The forms the automatic choice does not take on this adapter, as the tuning names them (a
/// GPU machine times the same variables: `bench/device/run.sh`): the tiled products split in 3
/// chunks (software adapters never split), teams of 8 invocations a row summed by subgroup
/// shuffles (lavapipe's subgroups are 8 wide; 16 and 32 are summed the same way), decode
/// attention split over the keys and the row kernels' GPU workgroups; then the scalar forms of
/// the tiled product and the fused attention.
fn other_forms() -> [Tuning; 2] {
    [
        Tuning {
            tile_splits: Some(3),
            gemv_team: Some(8),
            decode_split: true,
            row_lanes_gpu: true,
            ..Tuning::default()
        },
        Tuning {
            tile: Some(TileChoice::Scalar),
            scalar_attention: true,
            ..Tuning::default()
        },
    ]
}

/// Every product check in each of [`other_forms`].
#[test]
fn wgpu_products_in_their_other_forms() {
    let dev = gpu();
    for (i, form) in other_forms().into_iter().enumerate() {
        let _form = Scoped::new(form);
        let label = format!("wgpu, {}", form.describe());
        run_all(&dev, &label);
        check_stacked_products(&dev);
        if i == 0 {
            check_gelu_products(&dev);
        }
    }
}

/// Every attention and row-kernel check that an [`other_forms`] form changes.
#[test]
fn wgpu_attention_and_rows_in_their_other_forms() {
    let dev = gpu();
    let [split, scalar] = other_forms();
    {
        let _form = Scoped::new(split);
        check_decode_attention(&dev);
        check_fused_row_kernels(&dev);
        check_qk_norm_rope(&dev);
    }
    let _form = Scoped::new(scalar);
    check_fused_attention(&dev);
}

#[test]
fn wgpu_kernels_match_the_reference() {
    let dev = gpu();
    // CI's adapter: make sure the subgroup kernel did not silently drop out of the list.
    if device::adapter(&dev).is_some_and(|a| a.name.starts_with("llvmpipe")) {
        assert!(Kernel::available(&dev).contains(&Kernel::GemvSubgroup));
    }
    run_all(&dev, "wgpu");
}

/// The native f16 form changes how numbers are widened, never the result: every kernel gives
/// the same bits both ways, and the probe that lets [`Half::Auto`] use it finds every finite
/// f16 (subnormals included) widened exactly. Runs where the adapter has shader-f16 (lavapipe
/// does) and says so where not.
#[test]
fn wgpu_native_f16_kernels_equal_the_integer_ones_bit_for_bit() {
    let dev = gpu();
    if !Half::available(&dev).contains(&Half::Native) {
        eprintln!("this adapter has no shader-f16: only the integer form exists");
        return;
    }
    assert!(pollster::block_on(native_half_exact(&dev)).unwrap());
    assert_eq!(
        device::adapter(&dev).map(|a| a.native_half),
        Some(true),
        "an exact native f16 is what the automatic choice uses"
    );
    for kernel in Kernel::available(&dev) {
        for (i, (ty, m, n, k)) in cases().into_iter().enumerate() {
            pollster::block_on(check_half_forms_agree(&dev, kernel, ty, m, n, k, i as u64))
                .unwrap();
        }
    }
}

#[test]
fn wgpu_fused_attention_matches_an_f64_evaluation() {
    check_fused_attention(&gpu());
}

fn check_fused_attention(dev: &burn::tensor::Device) {
    for (i, (shape, window)) in fused_attention::CASES.into_iter().enumerate() {
        let t0 = std::time::Instant::now();
        let err = pollster::block_on(fused_attention::max_error_vs_f64(
            dev, shape, window, i as u64,
        ))
        .unwrap();
        eprintln!(
            "fused attention {shape:?} window {window:?}: max |Δ| {err:.2e} ({:.2} s)",
            t0.elapsed().as_secs_f64()
        );
        assert!(
            err < fused_attention::TOLERANCE,
            "{shape:?} window {window:?}: max |Δ| {err:e}"
        );
    }
}

#[test]
fn wgpu_decode_attention_matches_an_f64_evaluation() {
    check_decode_attention(&gpu());
}

fn check_decode_attention(dev: &burn::tensor::Device) {
    for (i, (shape, window)) in DECODE_CASES.into_iter().enumerate() {
        let err = pollster::block_on(attention::max_error_vs_f64(
            dev,
            shape,
            window,
            i as u64,
            attention::Path::Decode,
        ))
        .unwrap();
        eprintln!("decode attention {shape:?} window {window:?}: max |Δ| {err:.2e}");
        assert!(
            err < fused_attention::TOLERANCE,
            "{shape:?} window {window:?}: max |Δ| {err:e}"
        );
    }
}

#[test]
fn wgpu_wide_attention_matches_an_f64_evaluation() {
    let dev = gpu();
    // The keys as the kernel splits them (whole on a software adapter such as lavapipe; on a GPU
    // in 4 and 20 chunks for two cases), in one dispatch, and in 3 chunks joined by a second.
    let paths = [
        attention::Path::Wide,
        attention::Path::WideChunks(1),
        attention::Path::WideChunks(3),
    ];
    for (i, (shape, window)) in WIDE_CASES.into_iter().enumerate() {
        for path in paths {
            let t0 = std::time::Instant::now();
            let err = pollster::block_on(attention::max_error_vs_f64(
                &dev, shape, window, i as u64, path,
            ))
            .unwrap();
            eprintln!(
                "wide attention {path:?} {shape:?} window {window:?}: max |Δ| {err:.2e} ({:.2} s)",
                t0.elapsed().as_secs_f64()
            );
            assert!(
                err < fused_attention::TOLERANCE,
                "{path:?} {shape:?} window {window:?}: max |Δ| {err:e}"
            );
        }
    }
}

/// Every fused row kernel, the composed burn ops it replaces on the same device, and the
/// composed ops on the CPU, each against an f64 evaluation of the same inputs.
#[test]
fn wgpu_fused_row_kernels_and_their_composed_forms_match_an_f64_evaluation() {
    check_fused_row_kernels(&gpu());
}

fn check_fused_row_kernels(dev: &burn::tensor::Device) {
    let cpu = device::cpu();
    for (i, (op, shape)) in rows::CASES.into_iter().enumerate() {
        let seed = i as u64;
        let err = |d, path| pollster::block_on(rows::max_error_vs_f64(d, op, shape, seed, path));
        let fused = err(dev, rows::Path::Fused).unwrap();
        let composed = err(dev, rows::Path::Composed).unwrap();
        let on_cpu = err(&cpu, rows::Path::Composed).unwrap();
        eprintln!(
            "{} {shape:?}: fused {fused:.2e}, composed {composed:.2e}, CPU {on_cpu:.2e}",
            op.name()
        );
        for (path, e) in [("fused", fused), ("composed", composed), ("CPU", on_cpu)] {
            assert!(
                e < rows::TOLERANCE,
                "{} {shape:?} {path}: error {e:e}",
                op.name()
            );
        }
    }
}

/// The decoder's q/k norm + RoPE kernel that also writes the KV cache: q and the written keys
/// against an f64 evaluation, values copied exactly, other positions untouched; at the start of
/// a buffer and after earlier positions.
#[test]
fn wgpu_qk_norm_rope_writes_the_cache_in_place() {
    check_qk_norm_rope(&gpu());
}

fn check_qk_norm_rope(dev: &burn::tensor::Device) {
    for (i, shape) in rows::QK_STORE_CASES.into_iter().enumerate() {
        for pos in [0, 7] {
            let err =
                pollster::block_on(rows::qk_store_max_error(dev, shape, pos, i as u64)).unwrap();
            eprintln!("{shape:?} at {pos}: {err:.2e}");
            // Measured on lavapipe: ≤ 2.3e-7; the bound is the row kernels' own.
            assert!(err < rows::TOLERANCE, "{shape:?} at {pos}: error {err:e}");
        }
    }
}

/// Two matrices of different block types read as one by a product (Q4_K_M's q+k and Q6_K v):
/// with every kernel and f16 form, bit-equal to each matrix's own product and within the f64
/// bound, across types of every block layout, row counts that cut gemv groups and tiles, and
/// one or two tiles of input rows.
#[test]
fn wgpu_stacked_products_equal_each_matrix_alone() {
    check_stacked_products(&gpu());
}

fn check_stacked_products(dev: &burn::tensor::Device) {
    let pairs = [
        [GgmlType::Q4_K, GgmlType::Q6_K],
        [GgmlType::Q6_K, GgmlType::Q4_K],
        [GgmlType::Q8_0, GgmlType::F16],
        [GgmlType::Q5_K, GgmlType::Q4_0],
    ];
    for kernel in Kernel::available(dev) {
        for half in Half::available(dev) {
            for (i, &pair) in pairs.iter().enumerate() {
                for (m, n) in [(1, [13, 5]), (5, [40, 31]), (70, [67, 3])] {
                    let r = pollster::block_on(stacked_error(
                        dev, kernel, half, pair, m, n, 256, i as u64,
                    ))
                    .unwrap_or_else(|e| panic!("{kernel:?} {half:?}: {e}"));
                    assert!(r.passed(), "{kernel:?} {half:?}: {r:?}");
                }
            }
        }
    }
}

/// A joined gate and up matrix whose decode product applies GELU·up: within
/// [`GELU_PRODUCT_TOLERANCE`] of the f64 GELU of the same kernel's two sums, for every kernel
/// with that form and both f16 forms, at 1, 4 and 5 input rows (one gemv group and past it),
/// and bit-equal to the unfused path (the product, then the GELU kernel).
/// Measured worst: 1.6e-7 relative (lavapipe). The tiled kernel has no such form.
#[test]
fn wgpu_gelu_products_match_the_gelu_of_their_sums() {
    check_gelu_products(&gpu());
}

fn check_gelu_products(dev: &burn::tensor::Device) {
    let mut worst: f64 = 0.0;
    for kernel in Kernel::available(dev) {
        for half in Half::available(dev) {
            for ty in [GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::F16] {
                for m in [1, 4, 5] {
                    let r = pollster::block_on(gelu_product_error(
                        dev, kernel, half, ty, m, 67, 256, m as u64,
                    ));
                    if kernel.tiled() {
                        assert!(r.is_err(), "the tiled kernel has no GELU form");
                        continue;
                    }
                    let r = r.unwrap_or_else(|e| panic!("{kernel:?} {half:?} {ty}: {e}"));
                    assert!(r.passed(), "{kernel:?} {half:?}: {r:?}");
                    worst = worst.max(r.max_error / r.bound * GELU_PRODUCT_TOLERANCE);
                    let (fused, unfused) = gelu_both_ways(dev, kernel, half, ty, m);
                    assert_eq!(fused, unfused, "{kernel:?} {half:?} {ty} m={m}");
                }
            }
        }
    }
    eprintln!("worst relative error of a GELU product: {worst:.2e}");
}

/// GELU·up of a random joined gate and up matrix (`2 × 67` rows) by the fused product and by
/// the product then the GELU kernel, as bits.
fn gelu_both_ways(
    dev: &burn::tensor::Device,
    kernel: Kernel,
    half: Half,
    ty: GgmlType,
    m: usize,
) -> (Vec<u32>, Vec<u32>) {
    use burn::tensor::{Tensor, TensorData};
    use rexvqa_engine::model::nn::gelu_mul_halves;
    let (f, k) = (67, 256);
    let q = QMatrix::upload(
        ty,
        &random_blocks(ty, 2 * f * k, 5),
        2 * f,
        k,
        dev,
        usize::MAX / 2,
    )
    .unwrap();
    let x: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7919) % 29) as f32 / 3.0 - 4.5)
        .collect();
    let x = Tensor::<2>::from_data(TensorData::new(x, [m, k]), dev);
    let bits = |t: Tensor<2>| {
        t.into_data()
            .try_into_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    };
    let fused = q.matmul_gelu_variant(x.clone(), kernel, half).unwrap();
    let unfused = gelu_mul_halves(q.matmul_variant(x, kernel, half));
    (bits(fused), bits(unfused))
}

/// Streaming chunks written into grouped device buffers (every matrix a GPU loader streams in
/// more than one chunk: the head) give the same products and looked-up rows, bit for bit, as
/// one buffer per chunk: 67 rows in chunks of 28, grouped into 56 and 11.
#[test]
fn wgpu_grouped_buffers_give_the_same_products_and_rows() {
    use burn::tensor::{Int, Tensor, TensorData};
    let dev = gpu();
    let (ty, n, k) = (GgmlType::Q4_K, 67, 256);
    let bytes = random_blocks(ty, n * k, 9);
    let row_bytes = bytes.len() / n;
    let per = QMatrix::rows_per_chunk(ty, n, k, 4096);
    assert_eq!(per, 28);
    let group = QMatrix::rows_per_group(ty, k, per, 2 * 4096);
    assert_eq!(group, 56);
    let (mut split, mut grouped) = (QMatrix::streaming(ty, n, k), QMatrix::streaming(ty, n, k));
    for (i, rows) in bytes.chunks(per * row_bytes).enumerate() {
        let r = rows.len() / row_bytes;
        split.push_chunk(rows, r, &dev).unwrap();
        grouped.push_chunk_grouped(rows, r, &dev, group).unwrap();
        assert_eq!(grouped.n_chunks(), i / 2 + 1);
    }
    assert!(split.is_complete() && grouped.is_complete());
    assert_eq!((split.n_chunks(), grouped.n_chunks()), (3, 2));
    let values = |t: Tensor<2>| t.into_data().try_into_vec::<f32>().unwrap();
    for m in [1, 5] {
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7919) % 13) as f32 / 6.0 - 1.0)
            .collect();
        let x = Tensor::<2>::from_data(TensorData::new(x, [m, k]), &dev);
        assert_eq!(
            values(split.matmul(x.clone())),
            values(grouped.matmul(x)),
            "m={m}"
        );
    }
    let ids = [0u32, 30, 66, 27, 28, 55, 56];
    let ids = || {
        Tensor::<1, Int>::from_data(
            TensorData::new(ids.to_vec(), [ids.len()]),
            (&dev, burn::tensor::DType::U32),
        )
    };
    assert_eq!(
        values(split.gather_device(ids())),
        values(grouped.gather_device(ids()))
    );
}

#[test]
fn the_wgpu_adapter_is_described_as_the_kernels_see_it() {
    let dev = gpu();
    let a = device::adapter(&dev).expect("a GPU device has an adapter");
    assert!(!a.name.is_empty());
    assert_eq!(
        a.subgroups,
        Kernel::available(&dev).contains(&Kernel::GemvSubgroup)
    );
    assert_eq!(device::adapter(&device::cpu()), None);
    eprintln!("adapter: {a:?}");
}

/// The KV cache keeps spare positions and hands attention a view of the valid ones (heads
/// `capacity · d` apart); the attention kernels read such a view in place, and must give the
/// same bits as for a contiguous copy of it. Cases: the fused kernel (d 64, 5 rows, grouped
/// heads), the decode kernel (d 256, one row) and the wide-head kernel (d 256, 12 rows), masked
/// and not.
#[test]
fn wgpu_attention_reads_kv_cache_views_as_contiguous_keys() {
    use burn::tensor::{Distribution, Tensor, TensorData};
    use rexvqa_engine::model::attention::{Kernel, Mask, attention};
    let dev = gpu();
    for (heads, kv, t, s, cap, d) in [
        (4, 2, 5, 37, 256, 64),
        (8, 4, 1, 300, 512, 256),
        (8, 4, 12, 300, 512, 256),
    ] {
        assert!(
            [Kernel::Fused, Kernel::Decode, Kernel::Wide]
                .iter()
                .any(|k| k.supports(&dev, t, d)),
            "({t} rows, d {d}) must take a fused kernel here"
        );
        let q = Tensor::<3>::random([heads, t, d], Distribution::Normal(0.0, 1.0), &dev);
        let kb = Tensor::<3>::random([kv, cap, d], Distribution::Normal(0.0, 1.0), &dev);
        let vb = Tensor::<3>::random([kv, cap, d], Distribution::Normal(0.0, 1.0), &dev);
        let view = |b: &Tensor<3>| b.clone().slice([0..kv, 0..s, 0..d]);
        let copy = |b: &Tensor<3>| Tensor::<3>::from_data(view(b).into_data(), &dev);
        let mut m = vec![0f32; t * s];
        for (i, x) in m.iter_mut().enumerate() {
            if i % 7 == 3 {
                *x = f32::NEG_INFINITY;
            }
        }
        let values = Tensor::<2>::from_data(TensorData::new(m, [t, s]), &dev);
        for mask in [
            None,
            Some(Mask {
                values,
                lookahead: None,
            }),
        ] {
            let got = attention(
                q.clone(),
                view(&kb),
                view(&vb),
                mask.clone(),
                heads / kv,
                0.1,
            );
            let want = attention(
                q.clone(),
                copy(&kb),
                copy(&vb),
                mask.clone(),
                heads / kv,
                0.1,
            );
            let (got, want) = (got.into_data(), want.into_data());
            assert_eq!(
                got.as_slice::<f32>().unwrap(),
                want.as_slice::<f32>().unwrap(),
                "heads {heads}/{kv}, {t} rows over {s} of {cap} positions, d {d}, mask {}",
                mask.is_some()
            );
        }
    }
}

/// A causal mask's promise lets the wide-head kernel stop each workgroup at its last row's
/// horizon: the same bits as scoring every key (the skipped ones are all masked), whole or with
/// the keys split in chunks, for prefills after cached keys and from the start, the latter with
/// a bidirectional span as an image's. A false promise (every key visible) gives other numbers:
/// the skip does happen.
#[test]
#[allow(clippy::single_range_in_vec_init)] // spans: one image's token range
fn wgpu_wide_attention_skips_only_keys_its_mask_hides() {
    use burn::tensor::{Distribution, Tensor, TensorData};
    use rexvqa_engine::model::attention::{Kernel, Mask, lookahead, mask_values};
    let dev = gpu();
    for (q0, t, spans) in [
        (30, 70, vec![]),
        (0, 90, vec![10..40]),
        (5, 40, vec![20..28]),
    ] {
        let (heads, kv, d, s) = (4, 2, 256, q0 + t);
        let q = Tensor::<3>::random([heads, t, d], Distribution::Normal(0.0, 1.0), &dev);
        let k = Tensor::<3>::random([kv, s, d], Distribution::Normal(0.0, 1.0), &dev);
        let v = Tensor::<3>::random([kv, s, d], Distribution::Normal(0.0, 1.0), &dev);
        let values = Tensor::<2>::from_data(
            TensorData::new(mask_values(q0, t, &spans, None), [t, s]),
            &dev,
        );
        let run = |lookahead, chunks| {
            let mask = Mask {
                values: values.clone(),
                lookahead,
            };
            let (q, k, v) = (q.clone(), k.clone(), v.clone());
            Kernel::Wide
                .run_chunked(q, k, v, Some(mask), heads / kv, 0.1, chunks)
                .into_data()
        };
        // Whole, and split in 3 chunks: a chunk past a workgroup's horizon adds nothing.
        for chunks in [Some(1), Some(3)] {
            let (skipping, every) = (run(Some(lookahead(&spans)), chunks), run(None, chunks));
            assert_eq!(
                skipping.as_slice::<f32>().unwrap(),
                every.as_slice::<f32>().unwrap(),
                "{t} rows after {q0} cached, spans {spans:?}, {chunks:?} chunks"
            );
        }
        let all = run(None, None);
        if spans.is_empty() {
            let open = Mask {
                values: Tensor::<2>::zeros([t, s], &dev),
                lookahead: Some(0),
            };
            let (q, k, v) = (q.clone(), k.clone(), v.clone());
            let broken = Kernel::Wide.run(q, k, v, Some(open), heads / kv, 0.1);
            assert_ne!(
                broken.into_data().as_slice::<f32>().unwrap(),
                all.as_slice::<f32>().unwrap()
            );
        }
    }
}

/// The fused argmax against the host's on rows that cut its workgroups unevenly, with the
/// largest value tied across lanes and workgroups (the first column wins), a row of equal
/// values, a row of -∞ and the vocabulary's length.
#[test]
fn wgpu_fused_argmax_takes_the_first_largest_column_of_each_row() {
    use burn::tensor::{Tensor, TensorData};
    let dev = gpu();
    for n in [1usize, 7, 256, 1000, 1025, 4097, 262_144, 262_147] {
        let rows = 4;
        // A fixed pseudo-random row (xorshift), then the ties and special rows.
        let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ n as u64;
        let mut x: Vec<f32> = (0..rows * n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 24) as f32 * 8.0 - 4.0
            })
            .collect();
        // Row 1: the largest value at three columns in different lanes and workgroups.
        for &j in &[n - 1, n / 2, n / 3 + 1] {
            x[n + j] = 9.0;
        }
        x[2 * n..3 * n].fill(0.5);
        x[3 * n..].fill(f32::NEG_INFINITY);
        let t = Tensor::<2>::from_data(TensorData::new(x.clone(), [rows, n]), &dev);
        let got = pollster::block_on(rexvqa_engine::kernels::rows::argmax(t).into_data_async())
            .unwrap()
            .try_into_vec::<u32>()
            .unwrap();
        let want: Vec<u32> = x
            .chunks(n)
            .map(|r| rexvqa_engine::model::nn::argmax(r) as u32)
            .collect();
        assert_eq!(got, want, "n = {n}");
        assert_eq!(want[2], 0, "a row of equal values gives its first column");
    }
}

/// The in-place row writes of `kernels::buffers`.
mod buffers {
    use burn::tensor::{Distribution, Tensor};

    fn values(t: Tensor<2>) -> Vec<f32> {
        t.into_data().try_into_vec::<f32>().unwrap()
    }

    /// [`rexvqa_engine::kernels::buffers::map_row_blocks`] hands `f` blocks of at most the rows asked, as even as can be
    /// (10 rows in at most 3: 3, 3, 3 and 1), and stacks what it returns in order, on the GPU
    /// and the CPU; a block of all rows is `f` itself.
    #[test]
    fn row_blocks_are_mapped_and_stacked_in_order() {
        let gpu = rexvqa_engine::device::wgpu().expect("a wgpu adapter (lavapipe)");
        for dev in [gpu, rexvqa_engine::device::cpu()] {
            let x = Tensor::<2>::random([10, 4], Distribution::Default, &dev);
            // Each block's rows, widened to 6 columns and offset by the block's length, so a
            // block out of place or of the wrong length shows.
            let f = |b: Tensor<2>| {
                let n = b.dims()[0];
                let head = b.clone().slice([0..n, 0..2]);
                Tensor::cat(vec![b, head], 1).add_scalar(n as f32)
            };
            let lens = std::cell::RefCell::new(Vec::new());
            let mapped = rexvqa_engine::kernels::buffers::map_row_blocks(x.clone(), 3, |b| {
                lens.borrow_mut().push(b.dims()[0]);
                f(b)
            });
            assert_eq!(*lens.borrow(), [3, 3, 3, 1]);
            let want: Vec<Tensor<2>> = [0..3, 3..6, 6..9, 9..10]
                .into_iter()
                .map(|r| f(x.clone().slice([r, 0..4])))
                .collect();
            assert_eq!(values(mapped), values(Tensor::cat(want, 0)));
            assert_eq!(
                values(rexvqa_engine::kernels::buffers::map_row_blocks(
                    x.clone(),
                    10,
                    f
                )),
                values(f(x))
            );
        }
    }

    /// Rows stacked by [`rexvqa_engine::kernels::buffers::cat_rows`] (one part a transposed view, read through its
    /// strides) and written over a buffer's rows by [`rexvqa_engine::kernels::buffers::write_rows`] hold exactly burn's
    /// `cat` and `slice_assign` of the same values, on the GPU (the kernel) and the CPU; and
    /// positions moved by [`rexvqa_engine::kernels::buffers::copy_positions`] (GPU only) are the source's, each head at
    /// its own place in the larger buffer.
    #[test]
    fn written_stacked_and_moved_rows_hold_their_sources() {
        let gpu = rexvqa_engine::device::wgpu().expect("a wgpu adapter (lavapipe)");
        let x = Tensor::<3>::random([7, 2, 3], Distribution::Default, &gpu).swap_dims(0, 1);
        let moved = rexvqa_engine::kernels::buffers::copy_positions(x.clone(), 4, 9);
        assert_eq!(moved.dims(), [2, 9, 3]);
        let valid = |t: Tensor<3>| values(t.slice([0..2, 0..4, 0..3]).reshape([8, 3]));
        assert_eq!(valid(moved), valid(x));
        for dev in [gpu, rexvqa_engine::device::cpu()] {
            let rand = |s: [usize; 2]| Tensor::<2>::random(s, Distribution::Default, &dev);
            let parts = vec![rand([3, 5]), rand([5, 4]).swap_dims(0, 1), rand([2, 5])];
            let want = values(Tensor::cat(parts.clone(), 0));
            assert_eq!(
                values(rexvqa_engine::kernels::buffers::cat_rows(parts.clone())),
                want
            );
            let base = rand([12, 5]);
            let expected = values(base.clone().slice_assign([6..10, 0..5], parts[1].clone()));
            let fresh = Tensor::<2>::zeros([12, 5], &dev) + base;
            assert_eq!(
                values(rexvqa_engine::kernels::buffers::write_rows(
                    fresh,
                    6,
                    parts[1].clone()
                )),
                expected
            );
        }
    }
}
