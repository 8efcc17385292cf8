//! Images unpacked from the `deid_png.part*` archive into browser storage (worker only).
//!
//! One pack file holds every unpacked PNG back to back and an index lists `offset, length,
//! path` per image. One file instead of ~17k: a single synchronous handle takes every write,
//! and a crash loses at most the images after the last flush (the index is written after the
//! pack bytes it points to, so it never names bytes that are not there).

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::io::BufReader;
use std::rc::Rc;

use rexvqa_engine::rexvqa::archive::{ImageArchive, Member, order_parts};
use web_sys::File;

use crate::io::{self, BlobChain, Dir, WriteError, now_ms, opfs_root, read_blob, sleep};
use crate::protocol::{UnpackProgress, UnpackState};

const PACK: &str = "pack.bin";
const INDEX: &str = "index.tsv";

/// Where each unpacked image lies in the pack.
#[derive(Debug, Default, Clone)]
pub struct ImageIndex(HashMap<String, (u64, u64)>);

impl ImageIndex {
    /// Parses the index; a torn last line (no newline) is ignored. Returns the index and the
    /// length of its complete lines.
    fn parse(text: &str) -> (Self, usize) {
        let mut map = HashMap::new();
        let complete = text.rfind('\n').map_or(0, |i| i + 1);
        for line in text[..complete].lines() {
            let mut f = line.splitn(3, '\t');
            if let (Some(o), Some(l), Some(p)) = (f.next(), f.next(), f.next())
                && let (Ok(o), Ok(l)) = (o.parse(), l.parse())
            {
                map.insert(p.to_string(), (o, l));
            }
        }
        (ImageIndex(map), complete)
    }

    /// Whether `path` was unpacked.
    pub fn contains(&self, path: &str) -> bool {
        self.0.contains_key(path)
    }

    /// Images unpacked.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// End of the last image in the pack.
    fn end(&self) -> u64 {
        self.0.values().map(|(o, l)| o + l).max().unwrap_or(0)
    }
}

async fn images_dir() -> Result<Dir, String> {
    opfs_root().await?.dir("images", true).await
}

/// The stored index (empty when nothing was unpacked).
pub async fn load_index() -> Result<ImageIndex, String> {
    let dir = images_dir().await?;
    if !dir.has_file(INDEX).await {
        return Ok(ImageIndex::default());
    }
    Ok(ImageIndex::parse(&dir.read_text(INDEX).await?).0)
}

/// An unpacked image's bytes.
pub async fn read_image(index: &ImageIndex, path: &str) -> Result<Vec<u8>, String> {
    let &(offset, len) = index
        .0
        .get(path)
        .ok_or_else(|| format!("{path} was not unpacked"))?;
    let pack = images_dir().await?.blob(PACK).await?;
    let part = pack
        .slice_with_f64_and_f64(offset as f64, (offset + len) as f64)
        .map_err(|e| crate::gpu::describe(&e))?;
    let bytes = read_blob(&part).await?;
    if bytes.len() as u64 != len {
        return Err(format!(
            "{path}: stored image is cut short ({} of {len} bytes); delete the unpacked images and unpack again",
            bytes.len()
        ));
    }
    Ok(bytes)
}

/// Deletes every unpacked image.
pub async fn delete() -> Result<(), String> {
    let dir = images_dir().await?;
    for name in [INDEX, PACK] {
        if dir.has_file(name).await {
            dir.remove(name).await?;
        }
    }
    Ok(())
}

/// The message of an unpack stopped by a full storage, with the numbers.
async fn no_space(written: usize, kept: bool) -> String {
    let kept = if kept {
        match written {
            1 => "the 1 image unpacked in this pass is kept".to_string(),
            n => format!("the {n} images unpacked in this pass are kept"),
        }
    } else {
        "the images unpacked before the last progress line are kept".into()
    };
    format!(
        "{}: the unpack stopped; {kept}. {}, then pick the parts again: the unpack goes on from \
         the first image not saved.",
        io::storage_full().await,
        io::FREE_SPACE
    )
}

/// Whether a file name is an archive part or a whole archive.
pub fn is_archive(name: &str) -> bool {
    let base = name.rsplit('/').next().unwrap_or(name);
    base.ends_with(".tar.zst")
        || base.ends_with(".tzst")
        || base.rfind(".part").is_some_and(|i| {
            base[i + 5..].chars().all(|c| c.is_ascii_digit()) && base.len() > i + 5
        })
}

/// Unpacks the PNG members of the archive made of `parts` (any order) into the pack: those in
/// `want` when given, else all. Images already unpacked are kept, so a second run resumes.
/// `report` receives progress about twice a second; `cancel` stops it between members.
pub async fn unpack(
    parts: Vec<(String, File)>,
    want: Option<HashSet<String>>,
    cancel: Rc<Cell<bool>>,
    report: impl Fn(&UnpackProgress),
) -> Result<UnpackProgress, String> {
    let names: Vec<String> = parts.iter().map(|(n, _)| n.clone()).collect();
    let order = order_parts(&names).map_err(|e| e.to_string())?;
    let blobs = order.iter().map(|&i| parts[i].1.clone().into()).collect();
    let chain = BlobChain::new(blobs)?;
    let mut p = UnpackProgress {
        total_bytes: chain.total(),
        state: UnpackState::Running,
        ..Default::default()
    };
    let dir = images_dir().await?;
    // Drop what a crash left after the last complete index line.
    let (mut index, complete) = if dir.has_file(INDEX).await {
        ImageIndex::parse(&dir.read_text(INDEX).await?)
    } else {
        (ImageIndex::default(), 0)
    };
    let idx = dir.open_sync(INDEX, true).await?;
    idx.truncate(complete as u64)?;
    let pack = dir.open_sync(PACK, true).await?;
    let mut end = index.end();
    pack.truncate(end)?;

    let mut ar = ImageArchive::new(BufReader::with_capacity(4 << 20, chain));
    let t0 = now_ms();
    let mut last = t0;
    let mut lines = String::new();
    let flush = |lines: &mut String| -> Result<(), String> {
        pack.flush()?;
        idx.append(lines.as_bytes())?;
        idx.flush()?;
        lines.clear();
        Ok(())
    };
    loop {
        let step = ar.next_member(|path| {
            want.as_ref().is_none_or(|w| w.contains(path)) && !index.contains(path)
        });
        let Member { path, bytes } = match step {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(e) => {
                flush(&mut lines)?;
                return Err(e.to_string());
            }
        };
        match bytes {
            Some(bytes) => {
                if let Err(e) = pack.write_at(&bytes, end) {
                    // What is indexed stays; the image refused is unpacked again next time.
                    let kept = flush(&mut lines).is_ok();
                    return Err(match e {
                        WriteError::NoSpace => no_space(p.written, kept).await,
                        WriteError::Other(e) => e,
                    });
                }
                let len = bytes.len() as u64;
                lines.push_str(&format!("{end}\t{len}\t{path}\n"));
                index.0.insert(path, (end, len));
                end += len;
                p.written += 1;
            }
            None if index.contains(&path) && want.as_ref().is_none_or(|w| w.contains(&path)) => {
                p.kept += 1
            }
            None => {}
        }
        let now = now_ms();
        if now - last > 500.0 {
            last = now;
            flush(&mut lines)?;
            p.done_bytes = ar.compressed_pos();
            p.rate = p.done_bytes as f64 / ((now - t0) / 1000.0).max(1e-3);
            p.eta_s = (p.total_bytes - p.done_bytes.min(p.total_bytes)) as f64 / p.rate.max(1.0);
            report(&p);
            // Let the worker take messages (a cancel) between members.
            sleep(0).await;
            if cancel.get() {
                p.state = UnpackState::Cancelled;
                return Ok(p);
            }
        }
    }
    flush(&mut lines)?;
    p.done_bytes = p.total_bytes;
    p.eta_s = 0.0;
    p.state = UnpackState::Finished;
    Ok(p)
}
