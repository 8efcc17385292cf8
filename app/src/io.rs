//! Browser I/O for the worker: range reads of `Blob`/`File` objects and the origin-private file
//! system (OPFS) through its synchronous access handles (worker-only, fast, flushable).
//! Reached through `Reflect` where web-sys has no stable binding. gloo (used for timers, event
//! listeners and downloads) has no OPFS or synchronous-access-handle bindings, and its file
//! readers read whole blobs, where the model loads need ranges: hence the glue here.

use std::cell::Cell;
use std::rc::Rc;

use js_sys::{Object, Promise, Reflect, Uint8Array};
use rexvqa_engine::gguf::{RangeSource, SourceError, check_range};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::Blob;

use crate::gpu::describe;

fn get(obj: &JsValue, key: &str) -> JsValue {
    Reflect::get(obj, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

/// Calls `obj.method(args...)`.
pub fn call(obj: &JsValue, method: &str, args: &[JsValue]) -> Result<JsValue, String> {
    call_raw(obj, method, args).map_err(|e| describe(&e))
}

/// [`call`] with the thrown value itself as the error.
fn call_raw(obj: &JsValue, method: &str, args: &[JsValue]) -> Result<JsValue, JsValue> {
    let f: js_sys::Function = get(obj, method)
        .dyn_into()
        .map_err(|_| JsValue::from_str(&format!("{method} is not available in this browser")))?;
    let arr = js_sys::Array::new();
    for a in args {
        arr.push(a);
    }
    f.apply(obj, &arr)
}

/// A failed write to browser storage.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteError {
    /// The origin's quota (or the disk) is full: `QuotaExceededError`, or a short write.
    NoSpace,
    /// Anything else, described.
    Other(String),
}

impl From<String> for WriteError {
    fn from(s: String) -> WriteError {
        WriteError::Other(s)
    }
}

impl From<WriteError> for String {
    fn from(e: WriteError) -> String {
        match e {
            WriteError::NoSpace => "browser storage is full (the write was refused)".into(),
            WriteError::Other(s) => s,
        }
    }
}

/// Awaits `obj.method(args...)` when it returns a promise.
pub async fn call_async(obj: &JsValue, method: &str, args: &[JsValue]) -> Result<JsValue, String> {
    let p: Promise = call(obj, method, args)?
        .dyn_into()
        .map_err(|_| format!("{method} did not return a promise"))?;
    JsFuture::from(p).await.map_err(|e| describe(&e))
}

/// Starts reading a whole blob now (the browser reads it on another thread), to be awaited
/// later: a copy reads its next piece while it writes and hashes this one.
pub fn start_read(blob: &Blob) -> JsFuture {
    JsFuture::from(blob.array_buffer())
}

/// Reads a whole blob.
pub async fn read_blob(blob: &Blob) -> Result<Vec<u8>, String> {
    let buf = start_read(blob).await.map_err(|e| describe(&e))?;
    Ok(Uint8Array::new(&buf).to_vec())
}

/// A `File`/`Blob` read in ranges, so a multi-GB GGUF is never copied whole into wasm memory.
#[derive(Debug, Clone)]
pub struct BlobSource {
    blob: Blob,
    size: u64,
}

impl BlobSource {
    /// Wraps a blob.
    pub fn new(blob: Blob) -> Self {
        let size = blob.size() as u64;
        BlobSource { blob, size }
    }
}

impl RangeSource for BlobSource {
    fn size(&self) -> u64 {
        self.size
    }

    async fn read_range(&self, offset: u64, len: usize) -> Result<Vec<u8>, SourceError> {
        check_range(offset, len, self.size)?;
        let part = self
            .blob
            .slice_with_f64_and_f64(offset as f64, (offset + len as u64) as f64)
            .map_err(|e| SourceError::Other(describe(&e)))?;
        read_blob(&part).await.map_err(SourceError::Other)
    }
}

/// A stored (OPFS) file read through its synchronous access handle, for model loads: the bytes
/// go from the file into wasm memory without a JS copy. The handle locks the file until dropped.
pub struct OpfsSource {
    file: SyncFile,
    size: u64,
}

impl OpfsSource {
    /// Opens `name` in `dir` for reading.
    pub async fn open(dir: &Dir, name: &str) -> Result<Self, String> {
        let file = dir.open_sync(name, false).await?;
        let size = file.size()?;
        Ok(OpfsSource { file, size })
    }
}

impl RangeSource for OpfsSource {
    fn size(&self) -> u64 {
        self.size
    }

    async fn read_range(&self, offset: u64, len: usize) -> Result<Vec<u8>, SourceError> {
        check_range(offset, len, self.size)?;
        self.file.read_at(offset, len).map_err(SourceError::Other)
    }
}

/// A source that lets the worker's event loop run before each read while `busy` is set. OPFS
/// reads are synchronous, so a load or hash never yields on its own; the device self-test that
/// runs beside it needs the event loop to receive its readbacks (WebGPU `mapAsync` resolves in
/// a task, not a microtask, hence [`next_task`] and not a woken future).
pub struct Yielding<'a, S> {
    inner: &'a S,
    busy: Rc<Cell<bool>>,
}

impl<'a, S> Yielding<'a, S> {
    /// `inner`, yielding while `busy` holds true.
    pub fn new(inner: &'a S, busy: Rc<Cell<bool>>) -> Self {
        Yielding { inner, busy }
    }
}

impl<S: RangeSource> RangeSource for Yielding<'_, S> {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    async fn read_range(&self, offset: u64, len: usize) -> Result<Vec<u8>, SourceError> {
        if self.busy.get() {
            next_task().await;
        }
        self.inner.read_range(offset, len).await
    }
}

/// A directory of the origin-private file system.
#[derive(Clone)]
pub struct Dir(JsValue);

/// The OPFS root, or why it is unavailable.
pub async fn opfs_root() -> Result<Dir, String> {
    let storage = get(&get(&js_sys::global(), "navigator"), "storage");
    if storage.is_undefined() {
        return Err("this browser offers no storage API (navigator.storage)".into());
    }
    Ok(Dir(call_async(&storage, "getDirectory", &[]).await?))
}

fn create_opts(create: bool) -> JsValue {
    let o = Object::new();
    let _ = Reflect::set(&o, &"create".into(), &JsValue::from_bool(create));
    o.into()
}

impl Dir {
    /// A subdirectory, created when asked.
    pub async fn dir(&self, name: &str, create: bool) -> Result<Dir, String> {
        Ok(Dir(call_async(
            &self.0,
            "getDirectoryHandle",
            &[name.into(), create_opts(create)],
        )
        .await?))
    }

    /// A file handle, created when asked.
    pub async fn file(&self, name: &str, create: bool) -> Result<JsValue, String> {
        call_async(
            &self.0,
            "getFileHandle",
            &[name.into(), create_opts(create)],
        )
        .await
    }

    /// Whether `name` exists here as a file.
    pub async fn has_file(&self, name: &str) -> bool {
        self.file(name, false).await.is_ok()
    }

    /// The `File` snapshot of a stored file (for range reads).
    pub async fn blob(&self, name: &str) -> Result<Blob, String> {
        let h = self.file(name, false).await?;
        call_async(&h, "getFile", &[])
            .await?
            .dyn_into::<Blob>()
            .map_err(|_| "getFile did not return a File".to_string())
    }

    /// Opens a file for synchronous reads and writes (worker only).
    pub async fn open_sync(&self, name: &str, create: bool) -> Result<SyncFile, String> {
        let h = self.file(name, create).await?;
        Ok(SyncFile(
            call_async(&h, "createSyncAccessHandle", &[]).await?,
        ))
    }

    /// Removes an entry.
    pub async fn remove(&self, name: &str) -> Result<(), String> {
        call_async(&self.0, "removeEntry", &[name.into()])
            .await
            .map(|_| ())
    }

    /// Names of the entries.
    pub async fn names(&self) -> Result<Vec<String>, String> {
        let it = call(&self.0, "keys", &[])?;
        let mut out = Vec::new();
        loop {
            let step = call_async(&it, "next", &[]).await?;
            if get(&step, "done").as_bool().unwrap_or(true) {
                break;
            }
            if let Some(n) = get(&step, "value").as_string() {
                out.push(n);
            }
        }
        Ok(out)
    }

    /// Writes a small file whole.
    pub async fn write_text(&self, name: &str, text: &str) -> Result<(), WriteError> {
        let f = self.open_sync(name, true).await?;
        let written = f
            .truncate(0)
            .map_err(WriteError::Other)
            .and_then(|()| f.write_at(text.as_bytes(), 0))
            .and_then(|()| f.flush().map_err(WriteError::Other));
        // Closed on failure too: an open handle would lock the file until the worker ends.
        f.close();
        written
    }

    /// Reads a small file whole as text.
    pub async fn read_text(&self, name: &str) -> Result<String, String> {
        let b = self.blob(name).await?;
        String::from_utf8(read_blob(&b).await?).map_err(|e| e.to_string())
    }
}

/// A `FileSystemSyncAccessHandle`.
pub struct SyncFile(JsValue);

impl SyncFile {
    fn at(offset: u64) -> JsValue {
        let o = Object::new();
        let _ = Reflect::set(&o, &"at".into(), &JsValue::from_f64(offset as f64));
        o.into()
    }

    /// Size in bytes.
    pub fn size(&self) -> Result<u64, String> {
        Ok(call(&self.0, "getSize", &[])?.as_f64().unwrap_or(0.0) as u64)
    }

    /// Writes `bytes` at `offset`.
    pub fn write_at(&self, bytes: &[u8], offset: u64) -> Result<(), WriteError> {
        self.write_js_at(&Uint8Array::from(bytes), offset)
    }

    /// Writes bytes that are already in JavaScript at `offset` (no copy through wasm memory).
    pub fn write_js_at(&self, bytes: &Uint8Array, offset: u64) -> Result<(), WriteError> {
        let n = call_raw(&self.0, "write", &[bytes.clone().into(), Self::at(offset)])
            .map_err(|e| {
                if get(&e, "name").as_string().as_deref() == Some("QuotaExceededError") {
                    WriteError::NoSpace
                } else {
                    WriteError::Other(describe(&e))
                }
            })?
            .as_f64()
            .unwrap_or(0.0) as usize;
        // A short write is the other way a full origin shows.
        if n != bytes.length() as usize {
            return Err(WriteError::NoSpace);
        }
        Ok(())
    }

    /// Reads `len` bytes at `offset` straight into wasm memory (no JS `ArrayBuffer` made per
    /// read, so a multi-GB load leaves no garbage in the JS heap waiting to be collected).
    pub fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        let at = Self::at(offset);
        let read = get(&self.0, "read");
        let f: &js_sys::Function = read
            .dyn_ref()
            .ok_or("FileSystemSyncAccessHandle.read is not available")?;
        let mut buf = vec![0u8; len];
        // SAFETY: the view is used only by the synchronous call below, during which this
        // thread allocates nothing in wasm memory (which could grow it and detach the view).
        let view = unsafe { Uint8Array::view_mut_raw(buf.as_mut_ptr(), len) };
        let n = f
            .call2(&self.0, &view, &at)
            .map_err(|e| describe(&e))?
            .as_f64()
            .unwrap_or(0.0) as usize;
        if n != len {
            return Err(format!("read {n} of {len} bytes at offset {offset}"));
        }
        Ok(buf)
    }

    /// Appends `bytes` at the end.
    pub fn append(&self, bytes: &[u8]) -> Result<(), WriteError> {
        self.write_at(bytes, self.size()?)
    }

    /// Cuts the file to `len` bytes.
    pub fn truncate(&self, len: u64) -> Result<(), String> {
        call(&self.0, "truncate", &[JsValue::from_f64(len as f64)]).map(|_| ())
    }

    /// Persists writes.
    pub fn flush(&self) -> Result<(), String> {
        call(&self.0, "flush", &[]).map(|_| ())
    }

    /// Releases the handle (others can open the file again).
    pub fn close(&self) {
        let _ = call(&self.0, "close", &[]);
    }
}

impl Drop for SyncFile {
    fn drop(&mut self) {
        self.close();
    }
}

/// `performance.now()` of the current global.
pub fn now_ms() -> f64 {
    let perf = get(&js_sys::global(), "performance");
    call(&perf, "now", &[])
        .ok()
        .and_then(|v| v.as_f64())
        .unwrap_or_else(js_sys::Date::now)
}

/// Resolves after `ms` milliseconds (lets the worker's event loop run).
pub async fn sleep(ms: u32) {
    gloo_timers::future::TimeoutFuture::new(ms).await;
}

/// Resolves in a later task of the worker's event loop, after the tasks already queued (WebGPU
/// readbacks among them). A message the worker sends itself: a 0 ms timer would do the same but
/// is clamped to 4 ms once timers nest, ~5 s over the 4B pair's ~1,300 reads.
pub async fn next_task() {
    let Ok(ch) = web_sys::MessageChannel::new() else {
        return sleep(0).await;
    };
    let done = Promise::new(&mut |resolve, _| ch.port1().set_onmessage(Some(&resolve)));
    if ch.port2().post_message(&JsValue::NULL).is_err() {
        return sleep(0).await;
    }
    // `ch` lives until the message arrives.
    let _ = JsFuture::from(done).await;
}

/// Several blobs read one after another as one synchronous stream (`FileReaderSync`, worker
/// only), so the engine's streaming readers can take the archive parts without copying them.
pub struct BlobChain {
    blobs: Vec<Blob>,
    index: usize,
    offset: u64,
    reader: web_sys::FileReaderSync,
}

impl BlobChain {
    /// The blobs, in reading order.
    pub fn new(blobs: Vec<Blob>) -> Result<Self, String> {
        Ok(BlobChain {
            blobs,
            index: 0,
            offset: 0,
            reader: web_sys::FileReaderSync::new().map_err(|e| describe(&e))?,
        })
    }

    /// Bytes in all.
    pub fn total(&self) -> u64 {
        self.blobs.iter().map(|b| b.size() as u64).sum()
    }
}

impl std::io::Read for BlobChain {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while let Some(blob) = self.blobs.get(self.index) {
            let size = blob.size() as u64;
            if self.offset >= size {
                self.index += 1;
                self.offset = 0;
                continue;
            }
            let end = size.min(self.offset + buf.len() as u64);
            let part = blob
                .slice_with_f64_and_f64(self.offset as f64, end as f64)
                .map_err(|e| std::io::Error::other(describe(&e)))?;
            let data = self
                .reader
                .read_as_array_buffer(&part)
                .map_err(|e| std::io::Error::other(describe(&e)))?;
            let arr = Uint8Array::new(&data);
            let n = arr.length() as usize;
            if n == 0 {
                return Err(std::io::Error::other(
                    "a part could not be read (was the file moved or changed?)",
                ));
            }
            arr.copy_to(&mut buf[..n]);
            self.offset += n as u64;
            return Ok(n);
        }
        Ok(0)
    }
}

/// Asks the browser to keep this origin's storage under disk pressure
/// (`navigator.storage.persist()`, a window-only call) so that copied models are not evicted;
/// a refusal changes nothing else, so the answer is not awaited.
pub fn request_persistent_storage() {
    let storage = get(&get(&js_sys::global(), "navigator"), "storage");
    wasm_bindgen_futures::spawn_local(async move {
        let _ = call_async(&storage, "persist", &[]).await;
    });
}

/// `navigator.storage.estimate()`: the origin's (usage, quota) in bytes, where the browser says.
pub async fn storage_estimate() -> Option<(f64, f64)> {
    let storage = Reflect::get(
        &Reflect::get(&js_sys::global(), &"navigator".into()).unwrap_or_default(),
        &"storage".into(),
    )
    .unwrap_or_default();
    let est = call_async(&storage, "estimate", &[]).await.ok()?;
    let g = |k: &str| Reflect::get(&est, &k.into()).ok().and_then(|v| v.as_f64());
    g("usage").zip(g("quota"))
}

/// "browser storage is full (X used of the Y this site may use)".
pub async fn storage_full() -> String {
    use rexvqa_engine::storage::human_bytes;
    match storage_estimate().await {
        Some((used, quota)) => format!(
            "browser storage is full ({} used of the {} this site may use)",
            human_bytes(used),
            human_bytes(quota)
        ),
        None => "browser storage is full".into(),
    }
}

/// What to do when storage is full.
pub const FREE_SPACE: &str =
    "Free some space (delete a stored model, unpacked images or an old run)";
