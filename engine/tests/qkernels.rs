//! Quantised matmul/gather kernels on every native backend against the CPU dequantisation.

use rexvqa_engine::device;
use rexvqa_engine::quant::conformance::{cases, check_matmul};

fn run_all(dev: &burn::tensor::Device, label: &str) {
    for (i, (ty, m, n, k)) in cases().into_iter().enumerate() {
        // Small chunks force the multi-buffer path on the larger cases.
        let chunk = if n > 20 { 4096 } else { usize::MAX / 2 };
        let o = pollster::block_on(check_matmul(dev, ty, m, n, k, chunk, i as u64)).unwrap();
        assert!(
            o.worst_ratio <= 1.0,
            "{label}: {} (error {:.2}× the bound)",
            o.worst,
            o.worst_ratio
        );
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
