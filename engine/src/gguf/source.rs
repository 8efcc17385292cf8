//! Byte sources: where GGUF bytes come from (a native file, memory, or a browser file read in
//! ranges). The engine only ever asks for byte ranges, so a multi-GB file is never loaded whole.

use std::future::Future;

/// A failure to read bytes from a source.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The range asked for lies past the end of the source.
    #[error("range {offset}..{end} is beyond the end of the source ({size} bytes)")]
    OutOfRange {
        /// First byte asked for.
        offset: u64,
        /// One past the last byte asked for.
        end: u64,
        /// Size of the source.
        size: u64,
    },
    /// An operating-system I/O error.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Any other failure, e.g. a browser `Blob` read that was rejected.
    #[error("{0}")]
    Other(String),
}

/// A byte source read synchronously at arbitrary offsets.
pub trait SyncSource {
    /// Total size in bytes.
    fn size(&self) -> u64;
    /// Fills `buf` with the bytes starting at `offset`.
    fn read_exact_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError>;
}

/// A byte source read asynchronously in ranges (browser `Blob`, OPFS file, HTTP ranges).
pub trait RangeSource {
    /// Total size in bytes.
    fn size(&self) -> u64;
    /// Reads `len` bytes starting at `offset`.
    fn read_range(
        &self,
        offset: u64,
        len: usize,
    ) -> impl Future<Output = Result<Vec<u8>, SourceError>>;
}

/// `OutOfRange` unless `offset..offset + len` lies inside a source of `size` bytes.
pub fn check_range(offset: u64, len: usize, size: u64) -> Result<(), SourceError> {
    let end = offset.saturating_add(len as u64);
    if end > size {
        return Err(SourceError::OutOfRange { offset, end, size });
    }
    Ok(())
}

/// Bytes held in memory.
#[derive(Debug, Clone)]
pub struct SliceSource<T: AsRef<[u8]>>(pub T);

impl<T: AsRef<[u8]>> SyncSource for SliceSource<T> {
    fn size(&self) -> u64 {
        self.0.as_ref().len() as u64
    }

    fn read_exact_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        check_range(offset, buf.len(), self.0.as_ref().len() as u64)?;
        let start = offset as usize;
        buf.copy_from_slice(&self.0.as_ref()[start..start + buf.len()]);
        Ok(())
    }
}

impl<T: AsRef<[u8]>> RangeSource for SliceSource<T> {
    fn size(&self) -> u64 {
        self.0.as_ref().len() as u64
    }

    async fn read_range(&self, offset: u64, len: usize) -> Result<Vec<u8>, SourceError> {
        check_range(offset, len, self.0.as_ref().len() as u64)?;
        let start = offset as usize;
        Ok(self.0.as_ref()[start..start + len].to_vec())
    }
}

/// A file on the native file system.
#[derive(Debug)]
pub struct FileSource {
    file: std::fs::File,
    size: u64,
}

impl FileSource {
    /// Opens a file for reading.
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Self, SourceError> {
        let file = std::fs::File::open(path)?;
        let size = file.metadata()?.len();
        Ok(FileSource { file, size })
    }
}

impl SyncSource for FileSource {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_exact_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        use std::io::{Read, Seek, SeekFrom};
        check_range(offset, buf.len(), self.size)?;
        self.file.seek(SeekFrom::Start(offset))?;
        self.file.read_exact(buf)?;
        Ok(())
    }
}

#[cfg(unix)]
impl RangeSource for FileSource {
    fn size(&self) -> u64 {
        self.size
    }

    async fn read_range(&self, offset: u64, len: usize) -> Result<Vec<u8>, SourceError> {
        use std::os::unix::fs::FileExt;
        check_range(offset, len, self.size)?;
        let mut buf = vec![0; len];
        self.file.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }
}
