//! Quantised matmul/gather kernels on every native backend against the CPU dequantisation.

use rexvqa_engine::device;
use rexvqa_engine::model::fused;
use rexvqa_engine::quant::conformance::{cases, check_matmul};
use rexvqa_engine::quant::ops::Kernel;

/// Every case with every kernel the device offers, and with the automatic choice.
fn run_all(dev: &burn::tensor::Device, label: &str) {
    let mut kernels = Kernel::available(dev);
    if !kernels.contains(&Kernel::Auto) {
        kernels.push(Kernel::Auto);
    }
    eprintln!("{label}: kernels {kernels:?}");
    for kernel in kernels {
        for (i, (ty, m, n, k)) in cases().into_iter().enumerate() {
            // Small chunks force the multi-buffer path on the larger cases.
            let chunk = if n > 20 { 4096 } else { usize::MAX / 2 };
            let o = pollster::block_on(check_matmul(dev, kernel, ty, m, n, k, chunk, i as u64))
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

#[test]
fn flex_cpu_kernels_match_the_reference() {
    run_all(&device::cpu(), "flex");
}

#[test]
fn wgpu_kernels_match_the_reference() {
    let dev = device::wgpu().expect("a wgpu adapter (lavapipe: apt mesa-vulkan-drivers)");
    run_all(&dev, "wgpu");
}

#[test]
fn wgpu_fused_attention_matches_an_f64_evaluation() {
    let dev = device::wgpu().expect("a wgpu adapter (lavapipe: apt mesa-vulkan-drivers)");
    for (i, (shape, window)) in fused::CASES.into_iter().enumerate() {
        let t0 = std::time::Instant::now();
        let err =
            pollster::block_on(fused::max_error_vs_f64(&dev, shape, window, i as u64)).unwrap();
        eprintln!(
            "fused attention {shape:?} window {window:?}: max |Δ| {err:.2e} ({:.2} s)",
            t0.elapsed().as_secs_f64()
        );
        assert!(
            err < fused::TOLERANCE,
            "{shape:?} window {window:?}: max |Δ| {err:e}"
        );
    }
}

#[test]
fn the_wgpu_adapter_is_described_as_the_kernels_see_it() {
    let dev = device::wgpu().expect("a wgpu adapter (lavapipe: apt mesa-vulkan-drivers)");
    let a = device::adapter(&dev).expect("a GPU device has an adapter");
    assert!(!a.name.is_empty());
    assert_eq!(
        a.subgroups,
        Kernel::available(&dev).contains(&Kernel::GemvSubgroup)
    );
    assert_eq!(device::adapter(&device::cpu()), None);
    eprintln!("adapter: {a:?}");
}
