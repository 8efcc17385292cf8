//! A wgpu device whose buffers are destroyed as soon as CubeCL lets go of them.
//!
//! CubeCL gives a buffer back by dropping its `wgpu::Buffer`. Natively wgpu frees the memory
//! then; in a browser wgpu's WebGPU backend only drops its JavaScript handle, and the
//! `GPUBuffer` holds its memory until a garbage collection finds the handle, seconds later
//! even with GPU work going on (`bench/gpubuffer-gc.mjs`,
//! `bench/results/ci-vm-2core-gpubuffer-gc.json`), and the Benchmark gives back hundreds of
//! megabytes at 4B. This module wraps a device through wgpu's `custom` backend. Every object is
//! the real one inside a thin wrapper, and a dropped buffer is `destroy()`ed once no unsubmitted
//! command can name it: at once when no encoder holds commands, else after the submit that hands
//! over the last commands recorded before the drop.
//!
//! The wrapper serves compute, which is all CubeCL asks of a device. Rendering, textures and ray
//! tracing are refused with a panic naming the call: nothing in this program renders.

mod buffer;
mod device;
mod encoder;
mod objects;
mod queue;
mod release;

use buffer::*;
use device::*;
use encoder::*;
use objects::*;
use queue::*;
use release::*;

use std::sync::{Arc, Mutex};

/// What the wrapped devices of this process have done with buffers so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counts {
    /// Buffers created.
    pub created: u64,
    /// The bytes of those.
    #[serde(default)]
    pub created_bytes: u64,
    /// Buffers destroyed after CubeCL released them.
    pub destroyed: u64,
    /// The bytes of those.
    pub destroyed_bytes: u64,
    /// The most bytes of buffers created and not yet destroyed at once, since the process
    /// started or the last [`reset_peak`]: what the device holds for us, where CubeCL's count
    /// leaves out what it released and the wrapper has not destroyed yet.
    #[serde(default)]
    pub peak_live_bytes: u64,
    /// Live buffers under [`SUBALLOCATED_BELOW`] bytes, which Dawn (Chromium's WebGPU)
    /// suballocates.
    #[serde(default)]
    pub live_small: u64,
    /// What rounding those up to powers of two adds: a model of Dawn's buddy suballocator
    /// (blocks of a power of two inside shared heaps), close to what a GPU's driver measured
    /// between Chromium with and without suballocation
    /// (`bench/results/ci-vm-2core-shared-attention-weights.json`).
    #[serde(default)]
    pub live_small_slack_bytes: u64,
}

/// Dawn places a buffer smaller than this in a block of a shared heap; larger ones get their
/// own allocation.
pub const SUBALLOCATED_BELOW: u64 = 4 << 20;

/// The power-of-two block slack of a buffer of `size` bytes, if Dawn suballocates it.
fn small_slack(size: u64) -> Option<u64> {
    (size < SUBALLOCATED_BELOW).then(|| size.max(1).next_power_of_two() - size)
}

impl Counts {
    /// Bytes of the buffers created and not yet destroyed. Saturating: a buffer destroyed
    /// explicitly and then dropped is counted destroyed twice (CubeCL never does the first).
    pub fn live_bytes(&self) -> u64 {
        self.created_bytes.saturating_sub(self.destroyed_bytes)
    }
}

/// The counts so far, over every wrapped device of this process.
pub fn counts() -> Counts {
    *COUNTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts [`Counts::peak_live_bytes`] again from the bytes live now.
pub fn reset_peak() {
    let mut c = COUNTS.lock().unwrap_or_else(|e| e.into_inner());
    c.peak_live_bytes = c.live_bytes();
}

static COUNTS: Mutex<Counts> = Mutex::new(Counts {
    created: 0,
    created_bytes: 0,
    destroyed: 0,
    destroyed_bytes: 0,
    peak_live_bytes: 0,
    live_small: 0,
    live_small_slack_bytes: 0,
});

/// Wraps `device` and `queue` (one pair from one `request_device`) so that the buffers created
/// on the returned device are destroyed once released.
pub fn wrap(device: wgpu::Device, queue: wgpu::Queue) -> (wgpu::Device, wgpu::Queue) {
    let shared = Arc::new(Mutex::new(Shared::default()));
    (
        wgpu::Device::from_custom(Device {
            inner: device,
            shared: shared.clone(),
        }),
        wgpu::Queue::from_custom(Queue {
            inner: queue,
            shared,
        }),
    )
}
