//! The wrapped buffer, destroyed through its ticket when CubeCL drops it.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use wgpu::custom::{
    BufferInterface, BufferMapCallback, BufferMappedRangeInterface, DispatchBufferMappedRange,
};

use super::*;

#[derive(Debug)]
pub(super) struct Buffer {
    pub(super) inner: wgpu::Buffer,
    pub(super) shared: Arc<Mutex<Shared>>,
    /// Whether the current mapping is for writing (at creation, or `MapMode::Write`).
    pub(super) mapped_for_write: Mutex<bool>,
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
pub(super) enum MappedRange {
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
