//! The wrapped command encoder and compute pass: an encoder's first command starts its tick, which
//! holds back the destruction of every buffer released after it until it is submitted.

use std::sync::{Arc, Mutex, OnceLock};

use wgpu::custom::{
    CommandBufferInterface, CommandEncoderInterface, ComputePassInterface, DispatchBindGroup,
    DispatchBuffer, DispatchCommandBuffer, DispatchComputePass, DispatchComputePipeline,
    DispatchQuerySet, DispatchRenderPass, DispatchTexture, DispatchTextureView,
};

use super::*;

#[derive(Debug)]
pub(super) struct CommandEncoder {
    pub(super) inner: Mutex<Option<wgpu::CommandEncoder>>,
    pub(super) shared: Arc<Mutex<Shared>>,
    /// Taken at the first command that can name a buffer.
    pub(super) ticket: OnceLock<Ticket>,
}

impl CommandEncoder {
    /// Records a command that may name buffers.
    pub(super) fn with<R>(&self, f: impl FnOnce(&mut wgpu::CommandEncoder) -> R) -> R {
        self.ticket.get_or_init(|| Ticket::new(&self.shared));
        self.marker(f)
    }

    /// Records a command that names no buffer (a debug marker).
    pub(super) fn marker<R>(&self, f: impl FnOnce(&mut wgpu::CommandEncoder) -> R) -> R {
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
pub(super) struct CommandBuffer {
    pub(super) inner: Mutex<Option<wgpu::CommandBuffer>>,
    pub(super) _ticket: Option<Ticket>,
}

impl CommandBufferInterface for CommandBuffer {}

#[derive(Debug)]
pub(super) struct ComputePass(pub(super) wgpu::ComputePass<'static>);

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
