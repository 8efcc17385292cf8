//! The wrapped device: every object it creates is the real one inside a thin wrapper; buffers
//! carry a ticket that destroys them by the release policy.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};

use wgpu::custom::{
    BoxDeviceLostCallback, DeviceInterface, DispatchBindGroup, DispatchBindGroupLayout,
    DispatchBlas, DispatchBuffer, DispatchCommandEncoder, DispatchComputePipeline,
    DispatchExternalTexture, DispatchPipelineCache, DispatchPipelineLayout, DispatchQuerySet,
    DispatchRenderBundleEncoder, DispatchRenderPipeline, DispatchSampler, DispatchShaderModule,
    DispatchTexture, DispatchTlas,
};

use super::*;

#[track_caller]
pub(super) fn unsupported(what: &str) -> ! {
    panic!("the destroying WebGPU device serves compute only: {what} is not supported")
}

pub(super) const FOREIGN: &str =
    "an object from another device was passed to the destroying device";

pub(super) fn buffer(b: &wgpu::Buffer) -> &wgpu::Buffer {
    &b.as_custom::<Buffer>().expect(FOREIGN).inner
}

pub(super) fn dispatch_buffer(b: &DispatchBuffer) -> &wgpu::Buffer {
    &b.as_custom::<Buffer>().expect(FOREIGN).inner
}

pub(super) fn query_set(q: &wgpu::QuerySet) -> &wgpu::QuerySet {
    &q.as_custom::<QuerySet>().expect(FOREIGN).0
}

pub(super) fn dispatch_query_set(q: &DispatchQuerySet) -> &wgpu::QuerySet {
    &q.as_custom::<QuerySet>().expect(FOREIGN).0
}

pub(super) fn bind_group_layout(l: &wgpu::BindGroupLayout) -> &wgpu::BindGroupLayout {
    &l.as_custom::<BindGroupLayout>().expect(FOREIGN).0
}

pub(super) fn buffer_binding<'a>(b: &wgpu::BufferBinding<'a>) -> wgpu::BufferBinding<'a> {
    wgpu::BufferBinding {
        buffer: buffer(b.buffer),
        offset: b.offset,
        size: b.size,
    }
}

/// The real buffers of `buffers`' transitions; texture transitions are refused.
pub(super) fn buffer_transitions_only<'a, T>(
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
pub(super) struct Device {
    pub(super) inner: wgpu::Device,
    pub(super) shared: Arc<Mutex<Shared>>,
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
