//! The image archive as ReXGradient-160K ships it: `deid_png.part00`, `deid_png.part01`, … which
//! concatenated form one zstd-compressed tar whose members start with `deid_png/`.
//!
//! Streamed, never held whole (the test split's archive is many GB): the parts are read in order
//! through any `Read`, zstd frames are decoded one after another (pure Rust, so the same code
//! runs in the browser worker), and the tar is walked member by member.

use std::io::{self, BufRead, Read};

use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};
use thiserror::Error;

/// Why the archive could not be read.
#[derive(Debug, Error)]
pub enum ArchiveError {
    /// The chosen parts do not form a complete series.
    #[error("archive parts: {0}")]
    Parts(String),
    /// The bytes are not zstd, or a frame is damaged.
    #[error(
        "{at}: not a valid zstd stream ({detail}); pick the deid_png.part* files of the image archive, all of them"
    )]
    Zstd {
        /// Where in the compressed stream.
        at: String,
        /// The decoder's message.
        detail: String,
    },
    /// The stream ends in the middle of a frame or a member.
    #[error(
        "the archive ends early at compressed byte {at}: a part is missing or was not fully downloaded"
    )]
    Truncated {
        /// Compressed bytes read when it ended.
        at: u64,
    },
    /// The decompressed bytes are not a tar archive.
    #[error("after decompression the data is not a tar archive: {0}")]
    Tar(String),
    /// Reading the parts failed.
    #[error("reading the archive: {0}")]
    Io(String),
}

/// Orders archive part names (`deid_png.part00`, `….part1`, `x.tar.zst`) and checks the series
/// has no gap; returns indices into `names` in reading order.
pub fn order_parts(names: &[String]) -> Result<Vec<usize>, ArchiveError> {
    if names.is_empty() {
        return Err(ArchiveError::Parts("no archive file chosen".into()));
    }
    let mut numbered = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let base = n.rsplit('/').next().unwrap_or(n);
        match base.rfind(".part") {
            Some(p) => {
                let digits = &base[p + 5..];
                let k: u64 = digits.parse().map_err(|_| {
                    ArchiveError::Parts(format!("{base}: expected a number after \".part\""))
                })?;
                numbered.push((base[..p].to_string(), k, i));
            }
            None if names.len() == 1 => return Ok(vec![0]),
            None => {
                return Err(ArchiveError::Parts(format!(
                    "{base} is not an archive part (deid_png.partNN); pick a single .tar.zst or all the parts"
                )));
            }
        }
    }
    numbered.sort();
    if numbered.windows(2).any(|w| w[0].0 != w[1].0) {
        return Err(ArchiveError::Parts(
            "parts of different archives were chosen together".into(),
        ));
    }
    // Numbering starts at 0 (split -d) or 1; anything later means the first part was left out.
    if numbered[0].1 > 1 {
        return Err(ArchiveError::Parts(format!(
            "parts before part {} are missing; pick every {}.part* file",
            numbered[0].1, numbered[0].0
        )));
    }
    for w in numbered.windows(2) {
        if w[1].1 == w[0].1 {
            return Err(ArchiveError::Parts(format!(
                "part {} was chosen twice",
                w[0].1
            )));
        }
        if w[1].1 != w[0].1 + 1 {
            return Err(ArchiveError::Parts(format!(
                "part {} is missing (after part {}); pick every {}.part* file",
                w[0].1 + 1,
                w[0].1,
                w[0].0
            )));
        }
    }
    Ok(numbered.into_iter().map(|(_, _, i)| i).collect())
}

/// Decodes a stream of concatenated zstd frames (skippable frames skipped, checksums verified).
pub struct ZstdFrames<R: BufRead> {
    src: Counted<R>,
    dec: FrameDecoder,
    in_frame: bool,
    frames: u64,
}

/// Counts bytes taken from the inner reader (the position in the compressed stream).
struct Counted<R> {
    inner: R,
    n: u64,
}

impl<R: BufRead> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let k = self.inner.read(buf)?;
        self.n += k as u64;
        Ok(k)
    }
}

impl<R: BufRead> ZstdFrames<R> {
    /// Wraps the compressed stream.
    pub fn new(src: R) -> Self {
        let mut dec = FrameDecoder::new();
        // The zstd CLI's --long mode uses up to 128 MB windows (2^27); allow that much.
        dec.set_max_window_size(1 << 27);
        ZstdFrames {
            src: Counted { inner: src, n: 0 },
            dec,
            in_frame: false,
            frames: 0,
        }
    }

    /// Compressed bytes consumed so far.
    pub fn compressed_pos(&self) -> u64 {
        self.src.n
    }

    /// Frames begun so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    fn error(&self, e: FrameDecoderError) -> io::Error {
        let err = if is_eof_chain(&e) {
            ArchiveError::Truncated { at: self.src.n }
        } else {
            ArchiveError::Zstd {
                at: format!("frame {} at compressed byte {}", self.frames, self.src.n),
                detail: e.to_string(),
            }
        };
        io::Error::new(io::ErrorKind::InvalidData, err)
    }
}

/// Whether an error was caused by the input running out.
fn is_eof_chain(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(io) = c.downcast_ref::<io::Error>()
            && io.kind() == io::ErrorKind::UnexpectedEof
        {
            return true;
        }
        cur = c.source();
    }
    false
}

impl<R: BufRead> Read for ZstdFrames<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if !self.in_frame {
                if self.src.inner.fill_buf()?.is_empty() {
                    return Ok(0);
                }
                match self.dec.reset(&mut self.src) {
                    Ok(()) => {
                        self.in_frame = true;
                        self.frames += 1;
                    }
                    Err(FrameDecoderError::ReadFrameHeaderError(
                        ReadFrameHeaderError::SkipFrame { length, .. },
                    )) => {
                        let skipped = io::copy(
                            &mut (&mut self.src).take(u64::from(length)),
                            &mut io::sink(),
                        )?;
                        if skipped < u64::from(length) {
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                ArchiveError::Truncated { at: self.src.n },
                            ));
                        }
                        continue;
                    }
                    Err(e) => return Err(self.error(e)),
                }
            }
            let n = self.dec.read(buf)?;
            if n > 0 {
                return Ok(n);
            }
            if self.dec.is_finished() {
                if let (Some(want), Some(got)) = (
                    self.dec.get_checksum_from_data(),
                    self.dec.get_calculated_checksum(),
                ) && want != got
                {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        ArchiveError::Zstd {
                            at: format!(
                                "frame {} ending at compressed byte {}",
                                self.frames, self.src.n
                            ),
                            detail: format!("checksum {got:08x} but the frame says {want:08x}"),
                        },
                    ));
                }
                self.in_frame = false;
                continue;
            }
            if let Err(e) = self
                .dec
                .decode_blocks(&mut self.src, BlockDecodingStrategy::UptoBlocks(1))
            {
                return Err(self.error(e));
            }
        }
    }
}

/// One PNG member of the archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PngMember {
    /// Path as the split files reference it (`deid_png/…/….png`).
    pub path: String,
    /// The file's bytes.
    pub bytes: Vec<u8>,
}

/// A PNG member as the walk meets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Path as the split files reference it.
    pub path: String,
    /// The bytes, when they were wanted.
    pub bytes: Option<Vec<u8>>,
}

/// A streamed `deid_png` archive, walked one member at a time so callers can pause between
/// members (the browser worker awaits its storage writes there).
///
/// The tar layer is walked here rather than through `tar::Archive`, whose entry iterator borrows
/// the archive and so cannot be kept across those pauses; `tar::Header` still parses the blocks.
pub struct ImageArchive<R: BufRead> {
    src: ZstdFrames<R>,
    /// Bytes of tar consumed.
    tar_pos: u64,
    /// Path from a preceding GNU long-name or PAX record.
    next_path: Option<Vec<u8>>,
    done: bool,
}

const BLOCK: usize = 512;

impl<R: BufRead> ImageArchive<R> {
    /// Opens the concatenated parts (a `BufRead` over them in order).
    pub fn new(src: R) -> Self {
        ImageArchive {
            src: ZstdFrames::new(src),
            tar_pos: 0,
            next_path: None,
            done: false,
        }
    }

    /// Compressed bytes consumed so far (progress against the parts' total size).
    pub fn compressed_pos(&self) -> u64 {
        self.src.compressed_pos()
    }

    /// Reads exactly `buf.len()` bytes; `Ok(false)` if the stream ended before the first byte.
    fn fill(&mut self, buf: &mut [u8]) -> Result<bool, ArchiveError> {
        let mut got = 0;
        while got < buf.len() {
            match self.src.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(map_io(e)),
            }
        }
        self.tar_pos += got as u64;
        match got {
            0 => Ok(false),
            n if n == buf.len() => Ok(true),
            _ => Err(ArchiveError::Truncated {
                at: self.src.compressed_pos(),
            }),
        }
    }

    /// A member's data (`size` bytes and the padding to the next block).
    fn data(&mut self, size: u64, keep: bool) -> Result<Vec<u8>, ArchiveError> {
        let padded = size.div_ceil(BLOCK as u64) * BLOCK as u64;
        let mut out = Vec::new();
        let mut left = padded;
        let mut chunk = vec![0u8; 1 << 16];
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            if !self.fill(&mut chunk[..n])? {
                return Err(ArchiveError::Truncated {
                    at: self.src.compressed_pos(),
                });
            }
            if keep {
                out.extend_from_slice(&chunk[..n]);
            }
            left -= n as u64;
        }
        out.truncate(size as usize);
        Ok(out)
    }

    /// The next PNG member under `deid_png/`: its path, and its bytes if `want(path)` holds
    /// (else they are decompressed and dropped); `None` at the end of the archive. Returning
    /// at every PNG lets a caller pause even while it skips thousands of members.
    pub fn next_member(
        &mut self,
        mut want: impl FnMut(&str) -> bool,
    ) -> Result<Option<Member>, ArchiveError> {
        let mut block = [0u8; BLOCK];
        while !self.done {
            let at = self.tar_pos;
            if !self.fill(&mut block)? {
                // A tar ends with zero blocks; running out before them means a lost part.
                return Err(if at == 0 {
                    ArchiveError::Parts("the archive is empty".into())
                } else {
                    ArchiveError::Truncated {
                        at: self.src.compressed_pos(),
                    }
                });
            }
            if block.iter().all(|&b| b == 0) {
                self.done = true;
                break;
            }
            let h = tar::Header::from_byte_slice(&block);
            let stored = h.cksum().ok();
            let sum: u32 = block
                .iter()
                .enumerate()
                .map(|(i, &b)| {
                    if (148..156).contains(&i) {
                        32
                    } else {
                        u32::from(b)
                    }
                })
                .sum();
            if stored != Some(sum) {
                return Err(ArchiveError::Tar(format!(
                    "no valid tar header at byte {at} of the decompressed stream"
                )));
            }
            let size = h
                .entry_size()
                .map_err(|e| ArchiveError::Tar(format!("header at byte {at}: {e}")))?;
            let kind = h.entry_type();
            if kind.is_gnu_longname() {
                let mut name = self.data(size, true)?;
                while name.last() == Some(&0) {
                    name.pop();
                }
                self.next_path = Some(name);
                continue;
            }
            if kind.is_pax_local_extensions() {
                let ext = self.data(size, true)?;
                for e in tar::PaxExtensions::new(&ext).flatten() {
                    if e.key() == Ok("path") {
                        self.next_path = Some(e.value_bytes().to_vec());
                    }
                }
                continue;
            }
            let raw = self.next_path.take();
            let path = raw.unwrap_or_else(|| h.path_bytes().into_owned());
            let path = String::from_utf8_lossy(&path).into_owned();
            let path = path.trim_start_matches("./").to_string();
            let png = kind.is_file() && path.starts_with("deid_png/") && path.ends_with(".png");
            let keep = png && want(&path);
            let bytes = self.data(size, keep)?;
            if png {
                return Ok(Some(Member {
                    path,
                    bytes: keep.then_some(bytes),
                }));
            }
        }
        Ok(None)
    }

    /// The next PNG member for which `want(path)` holds; `None` at the end of the archive.
    pub fn next_png(
        &mut self,
        mut want: impl FnMut(&str) -> bool,
    ) -> Result<Option<PngMember>, ArchiveError> {
        while let Some(Member { path, bytes }) = self.next_member(&mut want)? {
            if let Some(bytes) = bytes {
                return Ok(Some(PngMember { path, bytes }));
            }
        }
        Ok(None)
    }

    /// Visits each wanted PNG member (see [`ImageArchive::next_png`]); `visit` returns false to
    /// stop.
    pub fn for_each_png(
        &mut self,
        mut want: impl FnMut(&str) -> bool,
        mut visit: impl FnMut(PngMember) -> bool,
    ) -> Result<(), ArchiveError> {
        while let Some(m) = self.next_png(&mut want)? {
            if !visit(m) {
                break;
            }
        }
        Ok(())
    }
}

/// Unwraps our own errors from the `io::Error`s the frame reader returns.
fn map_io(e: io::Error) -> ArchiveError {
    let kind = e.kind();
    match e.into_inner() {
        Some(inner) => match inner.downcast::<ArchiveError>() {
            Ok(a) => *a,
            Err(other) => ArchiveError::Io(other.to_string()),
        },
        None => ArchiveError::Io(kind.to_string()),
    }
}

#[cfg(test)]
mod tests;
