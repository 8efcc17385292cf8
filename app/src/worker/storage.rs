//! The model files in browser storage: the listing, resumable copies of picked files and
//! resumable downloads (each with a meta file saying where it came from), room checks before a
//! copy, and each file's SHA-256, computed once and kept.

use js_sys::{Object, Reflect};
use rexvqa_engine::digest::Sha256Stream;
use rexvqa_engine::gguf::RangeSource;
use rexvqa_engine::storage::{WriteRefused, safe_name};
use web_sys::File;

use super::error::WorkerError;
use super::reply::Replies;
use super::runs;
use crate::io::{self, Dir, now_ms, opfs_root};
use crate::protocol::{CacheListing, Event, StorageUsage, StoredFile};

/// The folder of model files.
pub async fn models_dir() -> Result<Dir, WorkerError> {
    Ok(opfs_root().await?.dir("models", true).await?)
}

/// The storage name of a picked or downloaded model file.
pub fn model_file_name(name: &str) -> String {
    safe_name(name, "model.gguf")
}

/// The storage name of a file downloaded from `url` (its last path segment, without a query).
pub fn url_file_name(url: &str) -> String {
    let last = url.rsplit('/').next().unwrap_or(url);
    model_file_name(last.split('?').next().unwrap_or(last))
}

#[derive(serde::Serialize, serde::Deserialize)]
struct FileMeta {
    expected: u64,
    architecture: String,
    source: String,
    /// SHA-256 of the complete file, computed at its first load.
    #[serde(default)]
    sha256: Option<String>,
}

fn meta_name(name: &str) -> String {
    format!("{name}.meta.json")
}

async fn read_meta(dir: &Dir, name: &str) -> Option<FileMeta> {
    let t = dir.read_text(&meta_name(name)).await.ok()?;
    serde_json::from_str(&t).ok()
}

async fn write_meta(dir: &Dir, name: &str, meta: &FileMeta) -> Result<(), WorkerError> {
    let text = serde_json::to_string(meta).map_err(|e| e.to_string())?;
    Ok(dir.write_text(&meta_name(name), &text).await?)
}

/// The stored file's SHA-256: from its meta file, or computed now (with progress) and kept.
pub async fn stored_sha256(
    out: Replies,
    dir: &Dir,
    name: &str,
    src: &impl RangeSource,
) -> Result<String, WorkerError> {
    let mut meta = match dir.read_text(&meta_name(name)).await {
        Ok(t) => serde_json::from_str(&t).map_err(|e| format!("{}: {e}", meta_name(name)))?,
        Err(_) => FileMeta {
            expected: src.size(),
            architecture: String::new(),
            source: String::new(),
            sha256: None,
        },
    };
    if let Some(h) = meta.sha256.as_ref().filter(|_| meta.expected == src.size()) {
        return Ok(h.clone());
    }
    let t0 = now_ms();
    let mut last = 0.0;
    let hash = rexvqa_engine::digest::sha256(src, |done, total| {
        let now = now_ms();
        if now - last > 200.0 || done == total {
            last = now;
            out.post(Event::Copy {
                name: format!("{name} (SHA-256)"),
                done,
                total,
                rate: done as f64 / ((now - t0) / 1000.0).max(1e-3),
            });
        }
    })
    .await
    .map_err(|e| format!("{name}: {e}"))?;
    meta.sha256 = Some(hash.clone());
    write_meta(dir, name, &meta).await?;
    Ok(hash)
}

/// The stored models and runs, and how much storage they take.
pub async fn list_cache() -> Result<Event, WorkerError> {
    let dir = models_dir().await?;
    let mut models = Vec::new();
    for name in dir.names().await? {
        if name.ends_with(".meta.json") {
            continue;
        }
        let size = dir.blob(&name).await.map(|b| b.size() as u64).unwrap_or(0);
        let meta = read_meta(&dir, &name).await;
        models.push(StoredFile {
            name,
            size,
            expected: meta.as_ref().map_or(size, |m| m.expected),
            architecture: meta.map(|m| m.architecture).unwrap_or_default(),
        });
    }
    Ok(Event::Cache(CacheListing {
        models,
        runs: runs::list_runs().await.unwrap_or_default(),
        usage: storage_estimate().await,
    }))
}

/// Deletes a stored model file and its meta file.
pub async fn delete_model(name: &str) -> Result<(), WorkerError> {
    let dir = models_dir().await?;
    dir.remove(name).await?;
    // An interrupted copy may have left no meta file.
    let _ = dir.remove(&meta_name(name)).await;
    Ok(())
}

/// The origin's storage usage and quota in bytes (`navigator.storage.estimate()`), if given.
async fn storage_estimate() -> Option<StorageUsage> {
    let (used, quota) = io::storage_estimate().await?;
    Some(StorageUsage { used, quota })
}

/// How a stored copy names the file it came from (name and modification time).
fn file_source(file: &File) -> String {
    format!("{}|{}", file.name(), file.last_modified())
}

/// Bytes of `file` already stored as `name` by an earlier, interrupted copy of the same file.
async fn copied_before(dir: &Dir, name: &str, file: &File) -> u64 {
    let same = read_meta(dir, name)
        .await
        .is_some_and(|p| p.source == file_source(file) && p.expected == file.size() as u64);
    match dir.blob(name).await {
        Ok(b) if same => (b.size() as u64).min(file.size() as u64),
        _ => 0,
    }
}

/// Refuses, before any byte is written, a copy of `files` (as the names they get) that does not
/// fit in the origin's quota.
pub async fn check_room(dir: &Dir, files: &[(String, &File)]) -> Result<(), WorkerError> {
    let mut need = 0;
    for (name, f) in files {
        need += (f.size() as u64).saturating_sub(copied_before(dir, name, f).await);
    }
    let Some(usage) = storage_estimate().await else {
        return Ok(());
    };
    rexvqa_engine::storage::check_room(
        "the model files",
        need,
        usage.used as u64,
        usage.quota as u64,
    )
    .map_err(WorkerError::from)
}

/// Copies `file` into storage as `name`, continuing a partial copy of the same file, and keeps
/// its SHA-256, computed in the same pass: the load then finds it and reads nothing again (a
/// separate hash would read the multi-GB file a second time). The next piece is read while this
/// one is written and hashed.
pub async fn store_file(
    out: Replies,
    dir: &Dir,
    name: &str,
    file: &File,
    arch: &str,
) -> Result<(), WorkerError> {
    let total = file.size() as u64;
    let mut meta = FileMeta {
        expected: total,
        architecture: arch.into(),
        source: file_source(file),
        sha256: None,
    };
    let mut done = copied_before(dir, name, file).await;
    // The same file picked again after a complete copy: its kept digest stands.
    let kept = read_meta(dir, name)
        .await
        .filter(|m| m.source == meta.source && m.expected == total)
        .and_then(|m| m.sha256);
    write_meta(dir, name, &meta).await?;
    let sink = dir.open_sync(name, true).await?;
    done = done.min(sink.size()?);
    sink.truncate(done)?;
    if let Some(h) = kept.filter(|_| done == total) {
        meta.sha256 = Some(h);
        return write_meta(dir, name, &meta).await;
    }
    let mut hash = hash_stored(&sink, done)?;
    let t0 = now_ms();
    let start = done;
    const PIECE: u64 = 8 << 20;
    let read = |from: u64| -> Result<_, String> {
        let part = file
            .slice_with_f64_and_f64(from as f64, (from + PIECE).min(total) as f64)
            .map_err(|e| crate::gpu::describe(&e))?;
        Ok(io::start_read(&part))
    };
    let mut next = if done < total {
        Some(read(done)?)
    } else {
        None
    };
    while let Some(pending) = next.take() {
        let end = (done + PIECE).min(total);
        let bytes = js_sys::Uint8Array::new(&pending.await.map_err(|e| crate::gpu::describe(&e))?);
        if end < total {
            next = Some(read(end)?);
        }
        if let Err(e) = sink.write_js_at(&bytes, done) {
            sink.flush()?;
            return Err(match e {
                io::WriteError::NoSpace => {
                    let usage = storage_estimate().await;
                    WriteRefused {
                        what: name.into(),
                        done,
                        total,
                        usage: usage.map_or(0, |u| u.used as u64),
                        quota: usage.map_or(0, |u| u.quota as u64),
                    }
                    .into()
                }
                other => WorkerError::Other(other.into()),
            });
        }
        hash.update(&bytes.to_vec());
        done = end;
        let secs = (now_ms() - t0) / 1000.0;
        out.post(Event::Copy {
            name: name.into(),
            done,
            total,
            rate: (done - start) as f64 / secs.max(1e-3),
        });
    }
    sink.flush()?;
    meta.sha256 = Some(hash.finish());
    write_meta(dir, name, &meta).await
}

/// A digest of the first `len` bytes already stored through `sink` (a resumed copy or download
/// hashes what the interrupted one wrote, since a digest's state is not kept across reloads).
fn hash_stored(sink: &io::SyncFile, len: u64) -> Result<Sha256Stream, WorkerError> {
    let mut hash = Sha256Stream::new();
    let mut at = 0;
    while at < len {
        let n = (len - at).min(8 << 20);
        hash.update(&sink.read_at(at, n as usize)?);
        at += n;
    }
    Ok(hash)
}

/// Downloads `url` into storage as `name`, continuing an earlier download of the same URL.
pub async fn download(
    out: Replies,
    dir: &Dir,
    name: &str,
    url: &str,
    arch: &str,
) -> Result<(), WorkerError> {
    let prev = read_meta(dir, name).await;
    let sink = dir.open_sync(name, true).await?;
    let mut done = match &prev {
        Some(p) if p.source == url => sink.size()?,
        _ => 0,
    };
    sink.truncate(done)?;
    let init = Object::new();
    let headers = Object::new();
    if done > 0 {
        let _ = Reflect::set(&headers, &"Range".into(), &format!("bytes={done}-").into());
    }
    let _ = Reflect::set(&init, &"headers".into(), &headers);
    let resp = io::call_async(&js_sys::global(), "fetch", &[url.into(), init.into()]).await?;
    let status = Reflect::get(&resp, &"status".into())
        .ok()
        .and_then(|v| v.as_f64())
        .unwrap_or(0.0);
    if status == 200.0 && done > 0 {
        // The server ignored the range: start over.
        done = 0;
        sink.truncate(0)?;
    } else if status != 200.0 && status != 206.0 {
        return Err(WorkerError::Http {
            url: url.to_string(),
            status,
        });
    }
    let len = Reflect::get(&resp, &"headers".into())
        .ok()
        .and_then(|h| io::call(&h, "get", &["content-length".into()]).ok())
        .and_then(|v| v.as_string())
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0);
    let total = done + len;
    let mut meta = FileMeta {
        expected: total,
        architecture: arch.into(),
        source: url.into(),
        sha256: None,
    };
    write_meta(dir, name, &meta).await?;
    let mut hash = hash_stored(&sink, done)?;
    let body = Reflect::get(&resp, &"body".into()).map_err(|e| crate::gpu::describe(&e))?;
    let reader = io::call(&body, "getReader", &[])?;
    let (t0, start) = (now_ms(), done);
    loop {
        let chunk = io::call_async(&reader, "read", &[]).await?;
        if Reflect::get(&chunk, &"done".into())
            .ok()
            .and_then(|v| v.as_bool())
            .unwrap_or(true)
        {
            break;
        }
        let bytes =
            js_sys::Uint8Array::new(&Reflect::get(&chunk, &"value".into()).unwrap_or_default());
        sink.write_js_at(&bytes, done)?;
        hash.update(&bytes.to_vec());
        done += bytes.length() as u64;
        out.post(Event::Copy {
            name: name.into(),
            done,
            total,
            rate: (done - start) as f64 / ((now_ms() - t0) / 1000.0).max(1e-3),
        });
    }
    sink.flush()?;
    // A server that sent fewer bytes than it announced leaves a short file, whose digest the
    // load computes again once the size matches.
    if done == total {
        meta.sha256 = Some(hash.finish());
        write_meta(dir, name, &meta).await?;
    }
    Ok(())
}
