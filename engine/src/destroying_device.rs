//! A wgpu device whose buffers are destroyed as soon as CubeCL lets go of them.
//!
//! CubeCL gives a buffer back by dropping its `wgpu::Buffer`. Natively wgpu frees the memory
//! then; in a browser wgpu's WebGPU backend only drops its JavaScript handle, and the
//! `GPUBuffer` holds its memory until a garbage collection finds the handle, 9-10 s later with
//! GPU work going on (`bench/gpubuffer-gc.mjs`; up to 348 MB during the 4B Benchmark). This
//! module wraps a device through wgpu's `custom` backend. Every object is the real one inside a
//! thin wrapper, and a dropped buffer is `destroy()`ed once no unsubmitted command can name it:
//! at once when no encoder holds commands, else after the submit that hands over the last
//! commands recorded before the drop.
//!
//! The wrapper serves compute, which is all CubeCL asks of a device. Rendering, textures and ray
//! tracing are refused with a panic naming the call: nothing in this program renders.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Range;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use wgpu::custom::{
    BindGroupInterface, BindGroupLayoutInterface, BoxDeviceLostCallback,
    BoxSubmittedWorkDoneCallback, BufferInterface, BufferMapCallback, BufferMappedRangeInterface,
    CommandBufferInterface, CommandEncoderInterface, ComputePassInterface,
    ComputePipelineInterface, DeviceInterface, DispatchBindGroup, DispatchBindGroupLayout,
    DispatchBlas, DispatchBuffer, DispatchBufferMappedRange, DispatchCommandBuffer,
    DispatchCommandEncoder, DispatchComputePass, DispatchComputePipeline, DispatchExternalTexture,
    DispatchPipelineCache, DispatchPipelineLayout, DispatchQuerySet, DispatchQueueWriteBuffer,
    DispatchRenderBundleEncoder, DispatchRenderPass, DispatchRenderPipeline, DispatchSampler,
    DispatchShaderModule, DispatchSurfaceOutputDetail, DispatchTexture, DispatchTextureView,
    DispatchTlas, PipelineCacheInterface, PipelineLayoutInterface, QuerySetInterface,
    QueueInterface, QueueWriteBufferInterface, ShaderCompilationInfoFuture, ShaderModuleInterface,
};

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
    /// (blocks of a power of two inside shared heaps). On the 4B pair's weights loaded a
    /// matrix a buffer it gave 235 MiB, where an H200 measured 214 MiB between Chromium with
    /// and without suballocation (`bench/results/ci-vm-2core-shared-attention-weights.json`).
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

/// What the device and its queue share: a clock, the encoders holding commands not submitted
/// yet, and the buffers released since.
#[derive(Debug, Default)]
struct Shared {
    /// Ticks at every encoder's first command and every buffer released.
    clock: u64,
    /// First-command tick -> encoders or command buffers of that tick not yet submitted or
    /// dropped.
    live: BTreeMap<u64, usize>,
    /// Released buffers with their release tick, waiting for every encoder that recorded
    /// before it to go.
    graveyard: Vec<(u64, wgpu::Buffer)>,
    /// The wrapped queue's submission numbers -> the real queue's indices, for `poll`.
    submissions: VecDeque<(u64, wgpu::SubmissionIndex)>,
    next_submission: u64,
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // A panic elsewhere must not turn every later GPU call into another one.
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Destroys the released buffers that no unsubmitted command can name: those released
    /// before the oldest live encoder recorded its first command. Work already submitted keeps
    /// them alive in the browser (and in wgpu) until it completes.
    fn sweep(&mut self) {
        let oldest_live = self.live.keys().next().copied().unwrap_or(u64::MAX);
        let (free, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.graveyard)
            .into_iter()
            .partition(|(t, _)| *t < oldest_live);
        self.graveyard = keep;
        if free.is_empty() {
            return;
        }
        for (_, b) in free {
            destroy(&b);
        }
    }

    /// Takes a buffer CubeCL let go of: destroyed now if no encoder holds commands (none can
    /// name it then: a command names a buffer through a handle, and the handle is gone), else
    /// kept until those encoders are submitted.
    fn release(&mut self, b: wgpu::Buffer) {
        if self.live.is_empty() {
            destroy(&b);
        } else {
            let t = self.tick();
            self.graveyard.push((t, b));
        }
    }
}

fn destroy(b: &wgpu::Buffer) {
    let mut c = COUNTS.lock().unwrap_or_else(|e| e.into_inner());
    c.destroyed += 1;
    c.destroyed_bytes += b.size();
    if let Some(slack) = small_slack(b.size()) {
        c.live_small = c.live_small.saturating_sub(1);
        c.live_small_slack_bytes = c.live_small_slack_bytes.saturating_sub(slack);
    }
    drop(c);
    b.destroy();
}

/// Keeps the tick of an encoder's first command live until its commands are submitted or
/// dropped. An encoder that has recorded nothing holds no ticket: nothing it records later can
/// name a buffer released before, so such an encoder (CubeCL keeps one open between submits)
/// must not hold releases back.
#[derive(Debug)]
struct Ticket {
    shared: Arc<Mutex<Shared>>,
    tick: u64,
}

impl Ticket {
    fn new(shared: &Arc<Mutex<Shared>>) -> Ticket {
        let mut s = lock(shared);
        let tick = s.tick();
        *s.live.entry(tick).or_default() += 1;
        Ticket {
            shared: shared.clone(),
            tick,
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut s = lock(&self.shared);
        if let Some(n) = s.live.get_mut(&self.tick) {
            *n -= 1;
            if *n == 0 {
                s.live.remove(&self.tick);
            }
        }
    }
}

#[track_caller]
fn unsupported(what: &str) -> ! {
    panic!("the destroying WebGPU device serves compute only: {what} is not supported")
}

const FOREIGN: &str = "an object from another device was passed to the destroying device";

fn buffer(b: &wgpu::Buffer) -> &wgpu::Buffer {
    &b.as_custom::<Buffer>().expect(FOREIGN).inner
}

fn dispatch_buffer(b: &DispatchBuffer) -> &wgpu::Buffer {
    &b.as_custom::<Buffer>().expect(FOREIGN).inner
}

fn query_set(q: &wgpu::QuerySet) -> &wgpu::QuerySet {
    &q.as_custom::<QuerySet>().expect(FOREIGN).0
}

fn dispatch_query_set(q: &DispatchQuerySet) -> &wgpu::QuerySet {
    &q.as_custom::<QuerySet>().expect(FOREIGN).0
}

fn bind_group_layout(l: &wgpu::BindGroupLayout) -> &wgpu::BindGroupLayout {
    &l.as_custom::<BindGroupLayout>().expect(FOREIGN).0
}

fn buffer_binding<'a>(b: &wgpu::BufferBinding<'a>) -> wgpu::BufferBinding<'a> {
    wgpu::BufferBinding {
        buffer: buffer(b.buffer),
        offset: b.offset,
        size: b.size,
    }
}

/// The real buffers of `buffers`' transitions; texture transitions are refused.
fn buffer_transitions_only<'a, T>(
    buffers: &mut dyn Iterator<Item = wgpu::wgt::BufferTransition<&'a DispatchBuffer>>,
    textures: &mut dyn Iterator<Item = T>,
) -> Vec<wgpu::wgt::BufferTransition<&'a wgpu::Buffer>> {
    if textures.next().is_some() {
        unsupported("texture transitions");
    }
    buffers
        .map(|t| wgpu::wgt::BufferTransition {
            buffer: dispatch_buffer(t.buffer),
            state: t.state,
        })
        .collect()
}

#[derive(Debug)]
struct Device {
    inner: wgpu::Device,
    shared: Arc<Mutex<Shared>>,
}

thread_local! {
    /// Open error scopes by the index handed out. wgpu's guards are not `Send`, and its error
    /// scopes are per thread anyway.
    static SCOPES: std::cell::RefCell<HashMap<u32, wgpu::ErrorScopeGuard>> =
        std::cell::RefCell::new(HashMap::new());
    static NEXT_SCOPE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

impl DeviceInterface for Device {
    fn features(&self) -> wgpu::Features {
        self.inner.features()
    }

    fn limits(&self) -> wgpu::Limits {
        self.inner.limits()
    }

    fn adapter_info(&self) -> wgpu::AdapterInfo {
        self.inner.adapter_info()
    }

    fn create_shader_module(
        &self,
        desc: wgpu::ShaderModuleDescriptor<'_>,
        shader_bound_checks: wgpu::ShaderRuntimeChecks,
    ) -> DispatchShaderModule {
        // SAFETY: the checks are the ones the caller asked wgpu for; passing them on unchanged
        // gives the module exactly the guarantees the caller's own call promised.
        let m = unsafe {
            self.inner
                .create_shader_module_trusted(desc, shader_bound_checks)
        };
        DispatchShaderModule::custom(ShaderModule(m))
    }

    unsafe fn create_shader_module_passthrough(
        &self,
        desc: &wgpu::ShaderModuleDescriptorPassthrough<'_>,
    ) -> DispatchShaderModule {
        // SAFETY: the caller upholds create_shader_module_passthrough's contract.
        let m = unsafe { self.inner.create_shader_module_passthrough(desc.clone()) };
        DispatchShaderModule::custom(ShaderModule(m))
    }

    fn create_bind_group_layout(
        &self,
        desc: &wgpu::BindGroupLayoutDescriptor<'_>,
    ) -> DispatchBindGroupLayout {
        DispatchBindGroupLayout::custom(BindGroupLayout(self.inner.create_bind_group_layout(desc)))
    }

    fn create_bind_group(&self, desc: &wgpu::BindGroupDescriptor<'_>) -> DispatchBindGroup {
        // Arrays of bindings need their unwrapped copies to live as long as the descriptor.
        let arrays: Vec<Vec<wgpu::BufferBinding<'_>>> = desc
            .entries
            .iter()
            .map(|e| match &e.resource {
                wgpu::BindingResource::BufferArray(a) => a.iter().map(buffer_binding).collect(),
                _ => Vec::new(),
            })
            .collect();
        let entries: Vec<wgpu::BindGroupEntry<'_>> = desc
            .entries
            .iter()
            .zip(&arrays)
            .map(|(e, array)| wgpu::BindGroupEntry {
                binding: e.binding,
                resource: match &e.resource {
                    wgpu::BindingResource::Buffer(b) => {
                        wgpu::BindingResource::Buffer(buffer_binding(b))
                    }
                    wgpu::BindingResource::BufferArray(_) => {
                        wgpu::BindingResource::BufferArray(array)
                    }
                    _ => unsupported("binding a texture, sampler or acceleration structure"),
                },
            })
            .collect();
        DispatchBindGroup::custom(BindGroup(self.inner.create_bind_group(
            &wgpu::BindGroupDescriptor {
                label: desc.label,
                layout: bind_group_layout(desc.layout),
                entries: &entries,
            },
        )))
    }

    fn create_pipeline_layout(
        &self,
        desc: &wgpu::PipelineLayoutDescriptor<'_>,
    ) -> DispatchPipelineLayout {
        let layouts: Vec<Option<&wgpu::BindGroupLayout>> = desc
            .bind_group_layouts
            .iter()
            .map(|l| l.map(bind_group_layout))
            .collect();
        DispatchPipelineLayout::custom(PipelineLayout(self.inner.create_pipeline_layout(
            &wgpu::PipelineLayoutDescriptor {
                label: desc.label,
                bind_group_layouts: &layouts,
                immediate_size: desc.immediate_size,
            },
        )))
    }

    fn create_render_pipeline(
        &self,
        _desc: &wgpu::RenderPipelineDescriptor<'_>,
    ) -> DispatchRenderPipeline {
        unsupported("create_render_pipeline")
    }

    fn create_mesh_pipeline(
        &self,
        _desc: &wgpu::MeshPipelineDescriptor<'_>,
    ) -> DispatchRenderPipeline {
        unsupported("create_mesh_pipeline")
    }

    fn create_compute_pipeline(
        &self,
        desc: &wgpu::ComputePipelineDescriptor<'_>,
    ) -> DispatchComputePipeline {
        let p = self
            .inner
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: desc.label,
                layout: desc
                    .layout
                    .map(|l| &l.as_custom::<PipelineLayout>().expect(FOREIGN).0),
                module: &desc.module.as_custom::<ShaderModule>().expect(FOREIGN).0,
                entry_point: desc.entry_point,
                compilation_options: desc.compilation_options.clone(),
                cache: desc
                    .cache
                    .map(|c| &c.as_custom::<PipelineCache>().expect(FOREIGN).0),
            });
        DispatchComputePipeline::custom(ComputePipeline(p))
    }

    unsafe fn create_pipeline_cache(
        &self,
        desc: &wgpu::PipelineCacheDescriptor<'_>,
    ) -> DispatchPipelineCache {
        // SAFETY: the caller upholds create_pipeline_cache's contract on the data.
        DispatchPipelineCache::custom(PipelineCache(unsafe {
            self.inner.create_pipeline_cache(desc)
        }))
    }

    fn create_buffer(&self, desc: &wgpu::BufferDescriptor<'_>) -> DispatchBuffer {
        let mut c = COUNTS.lock().unwrap_or_else(|e| e.into_inner());
        c.created += 1;
        c.created_bytes += desc.size;
        c.peak_live_bytes = c.peak_live_bytes.max(c.live_bytes());
        if let Some(slack) = small_slack(desc.size) {
            c.live_small += 1;
            c.live_small_slack_bytes += slack;
        }
        drop(c);
        DispatchBuffer::custom(Buffer {
            inner: self.inner.create_buffer(desc),
            shared: self.shared.clone(),
            mapped_for_write: Mutex::new(desc.mapped_at_creation),
        })
    }

    fn create_texture(&self, _desc: &wgpu::TextureDescriptor<'_>) -> DispatchTexture {
        unsupported("create_texture")
    }

    fn create_external_texture(
        &self,
        _desc: &wgpu::ExternalTextureDescriptor<'_>,
        _planes: &[&wgpu::TextureView],
    ) -> DispatchExternalTexture {
        unsupported("create_external_texture")
    }

    fn create_blas(
        &self,
        _desc: &wgpu::CreateBlasDescriptor<'_>,
        _sizes: wgpu::BlasGeometrySizeDescriptors,
    ) -> (Option<u64>, DispatchBlas) {
        unsupported("create_blas")
    }

    fn create_tlas(&self, _desc: &wgpu::CreateTlasDescriptor<'_>) -> DispatchTlas {
        unsupported("create_tlas")
    }

    fn create_sampler(&self, _desc: &wgpu::SamplerDescriptor<'_>) -> DispatchSampler {
        unsupported("create_sampler")
    }

    fn create_query_set(&self, desc: &wgpu::QuerySetDescriptor<'_>) -> DispatchQuerySet {
        DispatchQuerySet::custom(QuerySet(self.inner.create_query_set(desc)))
    }

    fn create_command_encoder(
        &self,
        desc: &wgpu::CommandEncoderDescriptor<'_>,
    ) -> DispatchCommandEncoder {
        DispatchCommandEncoder::custom(CommandEncoder {
            inner: Mutex::new(Some(self.inner.create_command_encoder(desc))),
            shared: self.shared.clone(),
            ticket: OnceLock::new(),
        })
    }

    fn create_render_bundle_encoder(
        &self,
        _desc: &wgpu::RenderBundleEncoderDescriptor<'_>,
    ) -> DispatchRenderBundleEncoder {
        unsupported("create_render_bundle_encoder")
    }

    fn set_device_lost_callback(&self, device_lost_callback: BoxDeviceLostCallback) {
        // wgpu's public call takes an `Fn`; the device is lost at most once.
        let once = Mutex::new(Some(device_lost_callback));
        self.inner.set_device_lost_callback(move |reason, message| {
            let f = once.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(f) = f {
                f(reason, message);
            }
        });
    }

    fn on_uncaptured_error(&self, handler: Arc<dyn wgpu::UncapturedErrorHandler>) {
        self.inner.on_uncaptured_error(handler);
    }

    fn push_error_scope(&self, filter: wgpu::ErrorFilter) -> u32 {
        let guard = self.inner.push_error_scope(filter);
        let index = NEXT_SCOPE.with(|n| {
            let i = n.get();
            n.set(i.wrapping_add(1));
            i
        });
        SCOPES.with(|s| s.borrow_mut().insert(index, guard));
        index
    }

    fn pop_error_scope(&self, index: u32) -> Pin<Box<dyn wgpu::custom::PopErrorScopeFuture>> {
        match SCOPES.with(|s| s.borrow_mut().remove(&index)) {
            Some(guard) => Box::pin(guard.pop()),
            None => Box::pin(std::future::ready(None)),
        }
    }

    unsafe fn start_graphics_debugger_capture(&self) {
        // SAFETY: the caller upholds the debugger's contract.
        unsafe { self.inner.start_graphics_debugger_capture() }
    }

    unsafe fn stop_graphics_debugger_capture(&self) {
        // SAFETY: the caller upholds the debugger's contract.
        unsafe { self.inner.stop_graphics_debugger_capture() }
    }

    fn poll(
        &self,
        poll_type: wgpu::wgt::PollType<u64>,
    ) -> Result<wgpu::PollStatus, wgpu::PollError> {
        let poll_type = match poll_type {
            wgpu::wgt::PollType::Poll => wgpu::PollType::Poll,
            wgpu::wgt::PollType::Wait {
                submission_index,
                timeout,
            } => wgpu::PollType::Wait {
                // A submission no longer remembered is older than the newest, so waiting for the
                // newest covers it.
                submission_index: submission_index.and_then(|i| {
                    let s = lock(&self.shared);
                    s.submissions
                        .iter()
                        .find(|(n, _)| *n == i)
                        .map(|(_, idx)| idx.clone())
                }),
                timeout,
            },
        };
        self.inner.poll(poll_type)
    }

    fn get_internal_counters(&self) -> wgpu::InternalCounters {
        self.inner.get_internal_counters()
    }

    fn generate_allocator_report(&self) -> Option<wgpu::AllocatorReport> {
        self.inner.generate_allocator_report()
    }

    fn destroy(&self) {
        self.inner.destroy()
    }
}

#[derive(Debug)]
struct Queue {
    inner: wgpu::Queue,
    shared: Arc<Mutex<Shared>>,
}

/// How many submissions `poll` can still name; CubeCL waits only for recent ones.
const SUBMISSIONS_KEPT: usize = 256;

impl QueueInterface for Queue {
    fn write_buffer(&self, buffer: &DispatchBuffer, offset: wgpu::BufferAddress, data: &[u8]) {
        self.inner
            .write_buffer(dispatch_buffer(buffer), offset, data);
    }

    fn create_staging_buffer(&self, size: wgpu::BufferSize) -> Option<DispatchQueueWriteBuffer> {
        let len = usize::try_from(size.get()).ok()?;
        Some(DispatchQueueWriteBuffer::custom(StagingBuffer(vec![
            0;
            len
        ])))
    }

    fn validate_write_buffer(
        &self,
        _buffer: &DispatchBuffer,
        _offset: wgpu::BufferAddress,
        _size: wgpu::BufferSize,
    ) -> Option<()> {
        // The real queue validates the write when write_staging_buffer hands it over.
        Some(())
    }

    fn write_staging_buffer(
        &self,
        buffer: &DispatchBuffer,
        offset: wgpu::BufferAddress,
        staging_buffer: &DispatchQueueWriteBuffer,
    ) {
        let data = &staging_buffer
            .as_custom::<StagingBuffer>()
            .expect(FOREIGN)
            .0;
        self.inner
            .write_buffer(dispatch_buffer(buffer), offset, data);
    }

    fn write_texture(
        &self,
        _texture: wgpu::TexelCopyTextureInfo<'_>,
        _data: &[u8],
        _data_layout: wgpu::TexelCopyBufferLayout,
        _size: wgpu::Extent3d,
    ) {
        unsupported("write_texture")
    }

    #[cfg(target_arch = "wasm32")]
    fn copy_external_image_to_texture(
        &self,
        _source: &wgpu::CopyExternalImageSourceInfo,
        _dest: wgpu::CopyExternalImageDestInfo<&wgpu::Texture>,
        _size: wgpu::Extent3d,
    ) {
        unsupported("copy_external_image_to_texture")
    }

    fn submit(&self, command_buffers: &mut dyn Iterator<Item = DispatchCommandBuffer>) -> u64 {
        // The wrappers (and their tickets) outlive the real submit, so that the encoders they
        // stand for count as live until their commands are handed over.
        let wrappers: Vec<DispatchCommandBuffer> = command_buffers.collect();
        let real: Vec<wgpu::CommandBuffer> = wrappers
            .iter()
            .filter_map(|c| {
                c.as_custom::<CommandBuffer>()
                    .expect(FOREIGN)
                    .inner
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
            })
            .collect();
        let index = self.inner.submit(real);
        drop(wrappers);
        let mut s = lock(&self.shared);
        let n = s.next_submission;
        s.next_submission += 1;
        s.submissions.push_back((n, index));
        if s.submissions.len() > SUBMISSIONS_KEPT {
            s.submissions.pop_front();
        }
        s.sweep();
        n
    }

    fn get_timestamp_period(&self) -> f32 {
        self.inner.get_timestamp_period()
    }

    fn on_submitted_work_done(&self, callback: BoxSubmittedWorkDoneCallback) {
        self.inner.on_submitted_work_done(callback);
    }

    fn compact_blas(&self, _blas: &DispatchBlas) -> (Option<u64>, DispatchBlas) {
        unsupported("compact_blas")
    }

    fn present(&self, _detail: &DispatchSurfaceOutputDetail) {
        unsupported("present")
    }
}

#[derive(Debug)]
struct StagingBuffer(Vec<u8>);

impl QueueWriteBufferInterface for StagingBuffer {
    fn len(&self) -> usize {
        self.0.len()
    }

    unsafe fn write_slice(&mut self) -> wgpu::WriteOnly<'_, [u8]> {
        wgpu::WriteOnly::from(&mut self.0[..])
    }
}

#[derive(Debug)]
struct Buffer {
    inner: wgpu::Buffer,
    shared: Arc<Mutex<Shared>>,
    /// Whether the current mapping is for writing (at creation, or `MapMode::Write`).
    mapped_for_write: Mutex<bool>,
}

impl Drop for Buffer {
    fn drop(&mut self) {
        lock(&self.shared).release(self.inner.clone());
    }
}

impl BufferInterface for Buffer {
    fn map_async(
        &self,
        mode: wgpu::MapMode,
        range: Range<wgpu::BufferAddress>,
        callback: BufferMapCallback,
    ) {
        *self
            .mapped_for_write
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = mode == wgpu::MapMode::Write;
        self.inner.map_async(mode, range, callback);
    }

    fn get_mapped_range(
        &self,
        sub_range: Range<wgpu::BufferAddress>,
    ) -> Result<DispatchBufferMappedRange, wgpu::MapRangeError> {
        let write = *self
            .mapped_for_write
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let view = if write {
            MappedRange::Write(self.inner.get_mapped_range_mut(sub_range)?)
        } else {
            MappedRange::Read(self.inner.get_mapped_range(sub_range)?)
        };
        Ok(DispatchBufferMappedRange::custom(view))
    }

    fn unmap(&self) {
        self.inner.unmap();
    }

    fn destroy(&self) {
        self.inner.destroy();
    }
}

#[derive(Debug)]
enum MappedRange {
    Read(wgpu::BufferView),
    Write(wgpu::BufferViewMut),
}

impl BufferMappedRangeInterface for MappedRange {
    fn len(&self) -> usize {
        match self {
            MappedRange::Read(v) => v.len(),
            MappedRange::Write(v) => v.len(),
        }
    }

    unsafe fn read_slice(&self) -> &[u8] {
        match self {
            MappedRange::Read(v) => v,
            MappedRange::Write(_) => unsupported("reading a buffer mapped for writing"),
        }
    }

    unsafe fn write_slice(&mut self) -> wgpu::WriteOnly<'_, [u8]> {
        match self {
            MappedRange::Write(v) => v.slice(..),
            MappedRange::Read(_) => unsupported("writing a buffer mapped for reading"),
        }
    }

    #[cfg(target_arch = "wasm32")]
    fn as_uint8array(&self) -> &wgpu::web_sys::js_sys::Uint8Array {
        match self {
            MappedRange::Read(v) => v.as_uint8array(),
            MappedRange::Write(_) => unsupported("reading a buffer mapped for writing"),
        }
    }
}

#[derive(Debug)]
struct CommandEncoder {
    inner: Mutex<Option<wgpu::CommandEncoder>>,
    shared: Arc<Mutex<Shared>>,
    /// Taken at the first command that can name a buffer.
    ticket: OnceLock<Ticket>,
}

impl CommandEncoder {
    /// Records a command that may name buffers.
    fn with<R>(&self, f: impl FnOnce(&mut wgpu::CommandEncoder) -> R) -> R {
        self.ticket.get_or_init(|| Ticket::new(&self.shared));
        self.marker(f)
    }

    /// Records a command that names no buffer (a debug marker).
    fn marker<R>(&self, f: impl FnOnce(&mut wgpu::CommandEncoder) -> R) -> R {
        let mut e = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f(e.as_mut().expect("command encoder used after finish"))
    }
}

impl CommandEncoderInterface for CommandEncoder {
    fn copy_buffer_to_buffer(
        &self,
        source: &DispatchBuffer,
        source_offset: wgpu::BufferAddress,
        destination: &DispatchBuffer,
        destination_offset: wgpu::BufferAddress,
        copy_size: Option<wgpu::BufferAddress>,
    ) {
        self.with(|e| {
            e.copy_buffer_to_buffer(
                dispatch_buffer(source),
                source_offset,
                dispatch_buffer(destination),
                destination_offset,
                copy_size,
            )
        });
    }

    fn copy_buffer_to_texture(
        &self,
        _source: wgpu::TexelCopyBufferInfo<'_>,
        _destination: wgpu::TexelCopyTextureInfo<'_>,
        _copy_size: wgpu::Extent3d,
    ) {
        unsupported("copy_buffer_to_texture")
    }

    fn copy_texture_to_buffer(
        &self,
        _source: wgpu::TexelCopyTextureInfo<'_>,
        _destination: wgpu::TexelCopyBufferInfo<'_>,
        _copy_size: wgpu::Extent3d,
    ) {
        unsupported("copy_texture_to_buffer")
    }

    fn copy_texture_to_texture(
        &self,
        _source: wgpu::TexelCopyTextureInfo<'_>,
        _destination: wgpu::TexelCopyTextureInfo<'_>,
        _copy_size: wgpu::Extent3d,
    ) {
        unsupported("copy_texture_to_texture")
    }

    fn begin_compute_pass(&self, desc: &wgpu::ComputePassDescriptor<'_>) -> DispatchComputePass {
        let timestamp_writes =
            desc.timestamp_writes
                .as_ref()
                .map(|t| wgpu::ComputePassTimestampWrites {
                    query_set: query_set(t.query_set),
                    beginning_of_pass_write_index: t.beginning_of_pass_write_index,
                    end_of_pass_write_index: t.end_of_pass_write_index,
                });
        let pass = self.with(|e| {
            e.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: desc.label,
                timestamp_writes,
            })
            .forget_lifetime()
        });
        DispatchComputePass::custom(ComputePass(pass))
    }

    fn begin_render_pass(&self, _desc: &wgpu::RenderPassDescriptor<'_>) -> DispatchRenderPass {
        unsupported("begin_render_pass")
    }

    fn finish(&mut self) -> DispatchCommandBuffer {
        let encoder = self
            .inner
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .expect("command encoder finished twice");
        DispatchCommandBuffer::custom(CommandBuffer {
            inner: Mutex::new(Some(encoder.finish())),
            _ticket: self.ticket.take(),
        })
    }

    fn clear_texture(
        &self,
        _texture: &DispatchTexture,
        _subresource_range: &wgpu::ImageSubresourceRange,
    ) {
        unsupported("clear_texture")
    }

    fn clear_buffer(
        &self,
        buffer: &DispatchBuffer,
        offset: wgpu::BufferAddress,
        size: Option<wgpu::BufferAddress>,
    ) {
        self.with(|e| e.clear_buffer(dispatch_buffer(buffer), offset, size));
    }

    fn insert_debug_marker(&self, label: &str) {
        self.marker(|e| e.insert_debug_marker(label));
    }

    fn push_debug_group(&self, label: &str) {
        self.marker(|e| e.push_debug_group(label));
    }

    fn pop_debug_group(&self) {
        self.marker(|e| e.pop_debug_group());
    }

    fn write_timestamp(&self, query_set: &DispatchQuerySet, query_index: u32) {
        self.with(|e| e.write_timestamp(dispatch_query_set(query_set), query_index));
    }

    fn resolve_query_set(
        &self,
        query_set: &DispatchQuerySet,
        first_query: u32,
        query_count: u32,
        destination: &DispatchBuffer,
        destination_offset: wgpu::BufferAddress,
    ) {
        self.with(|e| {
            e.resolve_query_set(
                dispatch_query_set(query_set),
                first_query..first_query + query_count,
                dispatch_buffer(destination),
                destination_offset,
            )
        });
    }

    fn mark_acceleration_structures_built<'a>(
        &self,
        _blas: &mut dyn Iterator<Item = &'a wgpu::Blas>,
        _tlas: &mut dyn Iterator<Item = &'a wgpu::Tlas>,
    ) {
        unsupported("mark_acceleration_structures_built")
    }

    fn build_acceleration_structures<'a>(
        &self,
        _blas: &mut dyn Iterator<Item = &'a wgpu::BlasBuildEntry<'a>>,
        _tlas: &mut dyn Iterator<Item = &'a wgpu::Tlas>,
    ) {
        unsupported("build_acceleration_structures")
    }

    fn transition_resources<'a>(
        &mut self,
        buffer_transitions: &mut dyn Iterator<
            Item = wgpu::wgt::BufferTransition<&'a DispatchBuffer>,
        >,
        texture_transitions: &mut dyn Iterator<
            Item = wgpu::wgt::TextureTransition<&'a DispatchTexture>,
        >,
    ) {
        let buffers = buffer_transitions_only(buffer_transitions, texture_transitions);
        self.with(|e| e.transition_resources(buffers.into_iter(), std::iter::empty()));
    }
}

#[derive(Debug)]
struct CommandBuffer {
    inner: Mutex<Option<wgpu::CommandBuffer>>,
    _ticket: Option<Ticket>,
}

impl CommandBufferInterface for CommandBuffer {}

#[derive(Debug)]
struct ComputePass(wgpu::ComputePass<'static>);

impl Drop for ComputePass {
    fn drop(&mut self) {}
}

impl ComputePassInterface for ComputePass {
    fn set_pipeline(&mut self, pipeline: &DispatchComputePipeline) {
        self.0
            .set_pipeline(&pipeline.as_custom::<ComputePipeline>().expect(FOREIGN).0);
    }

    fn set_bind_group(
        &mut self,
        index: u32,
        bind_group: Option<&DispatchBindGroup>,
        offsets: &[wgpu::DynamicOffset],
    ) {
        let bg = bind_group.map(|b| &b.as_custom::<BindGroup>().expect(FOREIGN).0);
        self.0.set_bind_group(index, bg, offsets);
    }

    fn set_immediates(&mut self, offset: u32, data: &[u8]) {
        self.0.set_immediates(offset, data);
    }

    fn insert_debug_marker(&mut self, label: &str) {
        self.0.insert_debug_marker(label);
    }

    fn push_debug_group(&mut self, group_label: &str) {
        self.0.push_debug_group(group_label);
    }

    fn pop_debug_group(&mut self) {
        self.0.pop_debug_group();
    }

    fn write_timestamp(&mut self, query_set: &DispatchQuerySet, query_index: u32) {
        self.0
            .write_timestamp(dispatch_query_set(query_set), query_index);
    }

    fn begin_pipeline_statistics_query(&mut self, query_set: &DispatchQuerySet, query_index: u32) {
        self.0
            .begin_pipeline_statistics_query(dispatch_query_set(query_set), query_index);
    }

    fn end_pipeline_statistics_query(&mut self) {
        self.0.end_pipeline_statistics_query();
    }

    fn dispatch_workgroups(&mut self, x: u32, y: u32, z: u32) {
        self.0.dispatch_workgroups(x, y, z);
    }

    fn dispatch_workgroups_indirect(
        &mut self,
        indirect_buffer: &DispatchBuffer,
        indirect_offset: wgpu::BufferAddress,
    ) {
        self.0
            .dispatch_workgroups_indirect(dispatch_buffer(indirect_buffer), indirect_offset);
    }

    fn transition_resources<'a>(
        &mut self,
        buffer_transitions: &mut dyn Iterator<
            Item = wgpu::wgt::BufferTransition<&'a DispatchBuffer>,
        >,
        texture_transitions: &mut dyn Iterator<
            Item = wgpu::wgt::TextureTransition<&'a DispatchTextureView>,
        >,
    ) {
        let buffers = buffer_transitions_only(buffer_transitions, texture_transitions);
        self.0
            .transition_resources(buffers.into_iter(), std::iter::empty());
    }
}

#[derive(Debug)]
struct ShaderModule(wgpu::ShaderModule);

impl ShaderModuleInterface for ShaderModule {
    fn get_compilation_info(&self) -> Pin<Box<dyn ShaderCompilationInfoFuture>> {
        Box::pin(self.0.get_compilation_info())
    }
}

#[derive(Debug)]
struct BindGroupLayout(wgpu::BindGroupLayout);
impl BindGroupLayoutInterface for BindGroupLayout {}

#[derive(Debug)]
struct BindGroup(wgpu::BindGroup);
impl BindGroupInterface for BindGroup {}

#[derive(Debug)]
struct PipelineLayout(wgpu::PipelineLayout);
impl PipelineLayoutInterface for PipelineLayout {}

#[derive(Debug)]
struct ComputePipeline(wgpu::ComputePipeline);

impl ComputePipelineInterface for ComputePipeline {
    fn get_bind_group_layout(&self, index: u32) -> DispatchBindGroupLayout {
        DispatchBindGroupLayout::custom(BindGroupLayout(self.0.get_bind_group_layout(index)))
    }
}

#[derive(Debug)]
struct PipelineCache(wgpu::PipelineCache);

impl PipelineCacheInterface for PipelineCache {
    fn get_data(&self) -> Option<Vec<u8>> {
        self.0.get_data()
    }
}

#[derive(Debug)]
struct QuerySet(wgpu::QuerySet);

impl QuerySetInterface for QuerySet {
    fn destroy(&self) {
        self.0.destroy();
    }
}
