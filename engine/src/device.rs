//! Compute devices: flex on the CPU, wgpu natively (Vulkan/Metal/DX12), WebGPU in the browser.

pub use burn::tensor::Device;

/// Which backend runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// burn-flex, pure Rust on the CPU.
    Cpu,
    /// burn-wgpu (WebGPU in the browser).
    Wgpu,
}

impl BackendKind {
    /// Parses `cpu` or `wgpu`.
    pub fn parse(s: &str) -> Option<BackendKind> {
        match s {
            "cpu" => Some(BackendKind::Cpu),
            "wgpu" | "gpu" | "webgpu" => Some(BackendKind::Wgpu),
            _ => None,
        }
    }
}

/// A GPU could not be opened, or an open one failed a request.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DeviceError {
    /// No adapter or device could be opened.
    #[error("no usable GPU adapter: {0}")]
    NoAdapter(String),
    /// The open device failed while doing something for us.
    #[error("{doing}: {detail}")]
    Failed {
        /// What was asked of the device, as a user reads it.
        doing: &'static str,
        /// What the runtime said.
        detail: String,
    },
    /// A `REXVQA_*` variable asks for a kernel form or pool that does not exist.
    #[error("the GPU's tuning: {0}")]
    Tuning(#[from] crate::tuning::TuningError),
}

pub use crate::kernels::queues_work;

/// The adapter behind a GPU device, as the kernels see it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Adapter {
    /// The adapter's name as its driver reports it.
    pub name: String,
    /// A software rasteriser (lavapipe, SwiftShader) rather than a GPU.
    pub software: bool,
    /// Subgroup ("plane") operations offered to kernels (the subgroup matrix–vector kernel).
    pub subgroups: bool,
    /// 16-bit float arithmetic in shaders (WebGPU's `shader-f16`).
    pub shader_f16: bool,
    /// The kernels widen f16 numbers with the adapter's f16 type: it has shader-f16 and widens
    /// every finite f16 exactly ([`crate::quant::probe::probe_native_half`]).
    #[serde(default)]
    pub native_half: bool,
}

/// The adapter behind `device`; None for the CPU.
pub fn adapter(device: &Device) -> Option<Adapter> {
    match device.as_dispatch() {
        burn::backend::DispatchDevice::Cube(d) => {
            let client = d.client();
            let props = client.properties();
            Some(Adapter {
                name: props.identity.name.clone(),
                software: crate::kernels::software(props),
                subgroups: crate::quant::choice::subgroups(device) == Some(true),
                shader_f16: crate::quant::choice::shader_f16(device) == Some(true),
                native_half: crate::quant::choice::native_half_in_use(),
            })
        }
        _ => None,
    }
}

/// Whether `device`'s adapter times work with timestamp queries (the kernel profile needs them
/// in a browser, where the host-clock fallback would block); None for the CPU.
pub fn timestamps(device: &Device) -> Option<bool> {
    match device.as_dispatch() {
        burn::backend::DispatchDevice::Cube(d) => Some(
            d.client().properties().timing_method
                == burn_cubecl::cubecl::logging::TimingMethod::Device,
        ),
        _ => None,
    }
}

/// The largest buffer a kernel may bind on `device` (the adapter's storage binding and
/// buffer limits); None for the CPU.
pub fn max_binding_bytes(device: &Device) -> Option<u64> {
    match device.as_dispatch() {
        burn::backend::DispatchDevice::Cube(d) => {
            Some(d.client().properties().memory.max_page_size)
        }
        _ => None,
    }
}

/// The alignment, in bytes, a view's offset into a device buffer must have to share the buffer
/// (GPU devices; None on the CPU). A slice at another offset is a copy.
pub fn offset_alignment(device: &Device) -> Option<u64> {
    match device.as_dispatch() {
        burn::backend::DispatchDevice::Cube(d) => Some(d.client().properties().memory.alignment),
        _ => None,
    }
}

/// The CPU device.
pub fn cpu() -> Device {
    Device::flex()
}

/// The native wgpu device (opened once per process; wgpu's runtime cannot be registered twice).
#[cfg(not(target_arch = "wasm32"))]
pub fn wgpu() -> Result<Device, DeviceError> {
    use std::sync::OnceLock;
    static DEVICE: OnceLock<Result<Device, DeviceError>> = OnceLock::new();
    DEVICE
        .get_or_init(|| {
            let tuning = crate::tuning::init()?;
            let mut options = Device::wgpu_options();
            // The browser's pool (one page per allocation in size buckets, as CubeCL builds it
            // with `exclusive_memory_only` on wasm), to measure the browser's device memory
            // natively.
            if tuning.exclusive_pool {
                options =
                    options.memory_config(burn::tensor::wgpu::MemoryConfiguration::ExclusivePages);
            }
            // The browser's destroying device, where wgpu's own validation watches every call.
            let (d, queue) = if tuning.destroying_device {
                let setup = pollster::block_on(destroying_setup())?;
                let queue = setup.queue.clone();
                // `setup` keeps the memory configuration chosen above.
                let d = options
                    .setup(setup)
                    .init()
                    .map_err(|e| DeviceError::NoAdapter(format!("{e:?}")))?;
                (d, queue)
            } else {
                let (d, setup) = options
                    .init_with_setup()
                    .map_err(|e| DeviceError::NoAdapter(format!("{e:?}")))?;
                (d, setup.queue)
            };
            let _ = QUEUE.set(queue);
            pollster::block_on(crate::quant::probe::probe_native_half(&d));
            Ok(d)
        })
        .clone()
}

/// The WebGPU device in the browser (must be awaited; sync initialisation panics there).
/// Opened once per wasm instance, like the native device.
#[cfg(target_arch = "wasm32")]
pub async fn wgpu_async() -> Result<Device, DeviceError> {
    use std::sync::OnceLock;
    static DEVICE: OnceLock<Device> = OnceLock::new();
    if let Some(d) = DEVICE.get() {
        return Ok(d.clone());
    }
    crate::tuning::init()?;
    let setup = destroying_setup().await?;
    // Another caller may have finished first while this one awaited.
    if let Some(d) = DEVICE.get() {
        return Ok(d.clone());
    }
    let (device, queue) = (setup.device.clone(), setup.queue.clone());
    let d = Device::wgpu_options()
        .setup(setup)
        .init()
        .map_err(|e| DeviceError::NoAdapter(format!("{e:?}")))?;
    WGPU_DEVICE.with(|w| *w.borrow_mut() = Some(device));
    WGPU_QUEUE.with(|w| *w.borrow_mut() = Some(queue));
    crate::quant::probe::probe_native_half(&d).await;
    Ok(DEVICE.get_or_init(|| d).clone())
}

/// Opens an adapter and a device the way CubeCL's WGSL path does (every adapter feature but
/// mappable primary buffers, the adapter's limits, memory hints for usage), and wraps them so
/// that the buffers CubeCL releases are destroyed rather than left to a garbage collection.
async fn destroying_setup() -> Result<burn::tensor::wgpu::WgpuSetup, DeviceError> {
    use burn::tensor::wgpu::wgpu;
    let backends = if cfg!(target_arch = "wasm32") {
        wgpu::Backends::BROWSER_WEBGPU
    } else {
        wgpu::Backends::PRIMARY
    };
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapter = instance
        .request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            ..Default::default()
        })
        .await
        .map_err(|e| DeviceError::NoAdapter(e.to_string()))?;
    let (device, queue) = adapter
        .request_device(&wgpu::DeviceDescriptor {
            label: None,
            required_features: adapter
                .features()
                .difference(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS),
            required_limits: adapter.limits(),
            memory_hints: wgpu::MemoryHints::MemoryUsage,
            ..Default::default()
        })
        .await
        .map_err(|e| DeviceError::NoAdapter(e.to_string()))?;
    let (device, queue) = crate::destroying_device::wrap(device, queue);
    let backend = adapter.get_info().backend;
    Ok(burn::tensor::wgpu::WgpuSetup {
        instance,
        adapter,
        device,
        queue,
        backend,
    })
}

#[cfg(target_arch = "wasm32")]
thread_local! {
    /// The browser's device behind [`wgpu_async`]'s, for [`on_device_lost`] (wgpu handles are
    /// not `Sync` in the browser, hence thread-local; a wasm instance has one thread).
    static WGPU_DEVICE: std::cell::RefCell<Option<burn::tensor::wgpu::wgpu::Device>> =
        const { std::cell::RefCell::new(None) };
    /// Its queue, for [`submit_writes`].
    static WGPU_QUEUE: std::cell::RefCell<Option<burn::tensor::wgpu::wgpu::Queue>> =
        const { std::cell::RefCell::new(None) };
}

/// The native device's queue, for [`submit_writes`].
#[cfg(not(target_arch = "wasm32"))]
static QUEUE: std::sync::OnceLock<burn::tensor::wgpu::wgpu::Queue> = std::sync::OnceLock::new();

/// Hands the buffer writes queued on a GPU to it now, with an empty submission. CubeCL submits
/// only where kernels are queued, and a load's chunk writes have none between them: natively
/// wgpu then holds up to 64 of them in staging buffers (2 GB at 32 MiB a chunk), and a
/// browser holds them in the renderer too. Nothing on the CPU. The caller flushes the device
/// first, so that the writes have reached the queue.
pub fn submit_writes(device: &Device) {
    if !queues_work(device) {
        return;
    }
    #[cfg(not(target_arch = "wasm32"))]
    if let Some(q) = QUEUE.get() {
        q.submit([]);
    }
    #[cfg(target_arch = "wasm32")]
    WGPU_QUEUE.with(|q| {
        if let Some(q) = q.borrow().as_ref() {
            q.submit([]);
        }
    });
}

/// Calls `f` with the browser's message when the WebGPU device opened by [`wgpu_async`] is
/// lost (driver reset, GPU process crash, GPU switch): every buffer on it, the weights
/// included, is gone, and the runtime cannot open another in this wasm instance, so the caller
/// must start a new one. Returns false when no WebGPU device is open.
#[cfg(target_arch = "wasm32")]
pub fn on_device_lost(f: impl Fn(String) + Send + 'static) -> bool {
    WGPU_DEVICE.with(|w| match w.borrow().as_ref() {
        Some(d) => {
            d.set_device_lost_callback(move |reason, message| f(format!("{reason:?}: {message}")));
            true
        }
        None => false,
    })
}

/// Destroys the open WebGPU device, as a driver reset would lose it, for the tests of device
/// loss. Returns false when none is open.
#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub fn destroy_for_test() -> bool {
    WGPU_DEVICE.with(|w| w.borrow().as_ref().map(|d| d.destroy()).is_some())
}

/// Natively nothing watches the device: a CLI run whose device is lost fails, and run again it
/// resumes from its journal. Returns false.
#[cfg(not(target_arch = "wasm32"))]
pub fn on_device_lost(_f: impl Fn(String) + Send + 'static) -> bool {
    false
}

/// Natively there is no browser device to destroy. Returns false.
#[cfg(not(target_arch = "wasm32"))]
#[doc(hidden)]
pub fn destroy_for_test() -> bool {
    false
}

/// The native wgpu device, with the browser's async signature (one API for both targets).
#[cfg(not(target_arch = "wasm32"))]
pub async fn wgpu_async() -> Result<Device, DeviceError> {
    wgpu()
}

/// A device of the given kind (native).
#[cfg(not(target_arch = "wasm32"))]
pub fn open(kind: BackendKind) -> Result<Device, DeviceError> {
    match kind {
        BackendKind::Cpu => Ok(cpu()),
        BackendKind::Wgpu => wgpu(),
    }
}

/// Whether the GPU device runs the browser's memory pool: always on wasm (cubecl-runtime builds
/// it with `exclusive_memory_only`), natively when the tuning asks (`REXVQA_EXCLUSIVE_POOL=1`).
pub fn exclusive_pool_requested() -> bool {
    cfg!(target_arch = "wasm32") || crate::tuning::current().exclusive_pool
}

/// Waits until the device has run everything queued so far: the CubeCL client's barrier
/// (`queue.on_submitted_work_done`), awaited, never `Device::sync`, which blocks the thread on
/// a condition variable and panics in a browser ("condvar wait not supported"). Reading back a
/// fresh one-element tensor does not wait for work queued before it, so a timing that synced
/// that way would measure launches, not work. The CPU backend runs its ops as they are called.
pub async fn sync(device: &Device) -> Result<(), DeviceError> {
    match device.as_dispatch() {
        burn::backend::DispatchDevice::Cube(d) => {
            d.client().sync().await.map_err(|e| DeviceError::Failed {
                doing: "waiting for the GPU's queued work",
                detail: format!("{e:?}"),
            })
        }
        _ => Ok(()),
    }
}

/// Gives the free pages of `device`'s memory pools back (CubeCL's `memory_cleanup`): with the
/// browser's device they are destroyed once every encoder that recorded commands before the
/// release has been submitted (at once when the work queued so far is submitted). Nothing on
/// the CPU.
pub fn release_free_memory(device: &Device) -> Result<(), DeviceError> {
    match device.as_dispatch() {
        burn::backend::DispatchDevice::Cube(d) => {
            d.client()
                .memory_cleanup()
                .map_err(|e| DeviceError::Failed {
                    doing: "releasing free GPU memory",
                    detail: format!("{e:?}"),
                })
        }
        _ => Ok(()),
    }
}

/// Waits for the work queued so far ([`sync`]), then gives the free pages back
/// ([`release_free_memory`]): a wrapped device then destroys them at once, since no encoder
/// holds commands that could name them and no queued work still uses them. Natively wgpu frees
/// them when they are dropped.
pub async fn release_after_queued_work(device: &Device) -> Result<(), DeviceError> {
    sync(device).await?;
    release_free_memory(device)
}

/// One line per non-empty pool of `device`: its kind, pages now and at most, bytes reserved and
/// in use, and the largest allocation it served. Empty for the CPU.
pub fn pool_lines(device: &Device) -> Vec<String> {
    let burn::backend::DispatchDevice::Cube(d) = device.as_dispatch() else {
        return Vec::new();
    };
    let report = d
        .client()
        .memory_report(burn_cubecl::cubecl::MemoryScope::Device);
    let mut lines = Vec::new();
    for s in &report.streams {
        let p = &s.pools;
        for pool in p.dynamic.iter().chain([&p.persistent, &p.dedicated]) {
            if pool.pages > 0 {
                lines.push(format!(
                    "{:?}: {} pages (at most {}), {} B reserved, {} B in use, largest {} B",
                    pool.kind,
                    pool.pages,
                    pool.pages_peak,
                    pool.usage.bytes_reserved,
                    pool.usage.bytes_in_use,
                    pool.largest_alloc
                ));
            }
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::DeviceError;

    /// A request the open device fails (a wait, a release) once read "no usable GPU adapter",
    /// which is not what went wrong.
    #[test]
    fn a_failed_request_does_not_read_as_a_missing_adapter() {
        let e = DeviceError::Failed {
            doing: "waiting for the GPU's queued work",
            detail: "Lost".into(),
        };
        assert_eq!(
            crate::model::ModelError::from(e).to_string(),
            "the device failed: waiting for the GPU's queued work: Lost"
        );
        let e = DeviceError::NoAdapter("none found".into());
        assert_eq!(e.to_string(), "no usable GPU adapter: none found");
    }
}
