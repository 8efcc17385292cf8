//! The wrapped queue: a submit hands over encoders' commands, which may free released buffers.

use std::sync::{Arc, Mutex};

use wgpu::custom::{
    BoxSubmittedWorkDoneCallback, DispatchBlas, DispatchBuffer, DispatchCommandBuffer,
    DispatchQueueWriteBuffer, DispatchSurfaceOutputDetail, QueueInterface,
    QueueWriteBufferInterface,
};

use super::*;

#[derive(Debug)]
pub(super) struct Queue {
    pub(super) inner: wgpu::Queue,
    pub(super) shared: Arc<Mutex<Shared>>,
}

/// How many submissions `poll` can still name; CubeCL waits only for recent ones.
pub(super) const SUBMISSIONS_KEPT: usize = 256;

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
pub(super) struct StagingBuffer(pub(super) Vec<u8>);

impl QueueWriteBufferInterface for StagingBuffer {
    fn len(&self) -> usize {
        self.0.len()
    }

    unsafe fn write_slice(&mut self) -> wgpu::WriteOnly<'_, [u8]> {
        wgpu::WriteOnly::from(&mut self.0[..])
    }
}
