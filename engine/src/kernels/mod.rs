//! Every CubeCL kernel of the engine, with its host launcher: the quantised products and gathers
//! that decode GGUF blocks ([`quant`], launched by `crate::quant`'s GPU ops), the fused row
//! kernels ([`rows`] launching [`row_kernels`]; [`argmax`] and the in-place writes of [`buffers`] beside them) and the fused attention kernels ([`attention`]'s
//! one wrapper over [`fused_attention`], [`decode_attention`] and [`wide_attention`]). The model calls them through
//! [`crate::model::nn`] and [`crate::model::attention`], which keep the composed burn path for the
//! CPU; [`runs`] is the one question of whether a fused form runs on a device.

pub mod argmax;
pub mod attention;
pub mod buffers;
pub mod decode_attention;
pub mod forms;
pub mod fused_attention;
pub mod quant;
pub mod row_kernels;
pub mod rows;
pub mod wide_attention;

use burn::tensor::Device;
use burn_cubecl::cubecl;

use forms::Form;

/// Whether `form` runs as its fused kernel on `device`: a GPU device, and the device self-test
/// has not turned the form off.
pub fn runs(device: &Device, form: Form) -> bool {
    queues_work(device) && forms::enabled(form)
}

/// Whether `device` queues work for a GPU (wgpu/WebGPU) rather than running each operation on
/// the CPU as it is called (flex). Here, at the bottom, so that the kernel choice
/// ([`crate::quant::choice`]) and the device module ([`crate::device`], which re-exports it) can
/// both ask.
pub fn queues_work(device: &Device) -> bool {
    !matches!(device.as_dispatch(), burn::backend::DispatchDevice::Flex(_))
}

/// Whether an adapter with `props` is a software one (lavapipe, SwiftShader: workgroups run as
/// SIMD lanes of a few CPU threads), which every kernel choice sizes for apart from a GPU:
/// cubecl-wgpu reports no physical device for CPU-type adapters.
pub fn software(props: &cubecl::ir::DeviceProperties) -> bool {
    props.identity.physical.is_none()
}
