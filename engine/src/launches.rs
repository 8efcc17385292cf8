//! Counting what a pass asks of the GPU: kernel dispatches (by kernel), host reads and
//! uploads, and the queue submissions they imply.
//!
//! Why: in a browser on a real GPU, decoding and fast-mode scoring are bound by per-dispatch
//! overhead as much as by memory bandwidth, and the dispatch count is a property of our code
//! that a CPU-emulated adapter measures exactly as a GPU would. Dispatches come from CubeCL's
//! launch observer (called on the issuing thread for every launch, so the count is exact and
//! includes burn's own elementwise kernels). Reads and uploads are counted where the engine
//! makes them ([`note_read`], [`note_upload`]): every host read of the model's paths goes
//! through `nn::read_f32` or the session's id read, and every per-forward upload through the
//! rope tables, masks and id tensors. Nothing here runs on the CPU backend, whose counts stay 0.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use burn_cubecl::cubecl::logging::{
    LaunchObservation, LaunchObserver, ProfileDuration, TimingMethod, TimingRequest,
};
use serde::{Deserialize, Serialize};

thread_local! {
    // Per thread, as the launches are: a pass runs on one thread.
    static READS: Cell<u64> = const { Cell::new(0) };
    static UPLOADS: Cell<u64> = const { Cell::new(0) };
    static BYTES: Cell<u64> = const { Cell::new(0) };
    /// Launches by kernel on this thread while a [`Counting`] of it lives.
    static TALLY: RefCell<Option<BTreeMap<&'static str, u64>>> = const { RefCell::new(None) };
    /// Bytes and FLOP an engine launcher noted for the launch it is about to make.
    static NEXT: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    /// Bytes and FLOP of the last launch observed on this thread (its [`NEXT`], taken).
    static LAST: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    /// Each launch's measurement, with its bytes and FLOP, while a [`Profiling`] lives.
    static TIMED: RefCell<Option<Vec<Timed>>> = const { RefCell::new(None) };
}

/// One profiled launch, its measurement not yet read.
struct Timed {
    kernel: &'static str,
    profile: ProfileDuration,
    bytes: u64,
    flop: u64,
}

/// Whether a [`Profiling`] lives (on any thread): the observer then asks CubeCL to time every
/// launch, which costs a timestamp pair each, so never outside one.
static PROFILING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// cubecl-wgpu submits its queued tasks every this many launches by default (and before every
/// read).
pub const TASKS_PER_SUBMIT: u64 = 32;

/// The launches per submission of this process's wgpu device: `CUBECL_WGPU_MAX_TASKS` where
/// set natively (CubeCL reads it when it opens the device), else [`TASKS_PER_SUBMIT`].
pub fn tasks_per_submit() -> u64 {
    #[cfg(not(target_arch = "wasm32"))]
    if let Some(n) = std::env::var("CUBECL_WGPU_MAX_TASKS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&n| n > 0)
    {
        return n;
    }
    TASKS_PER_SUBMIT
}

/// Notes one host read of device data (a queue flush and a round trip).
pub fn note_read() {
    READS.set(READS.get() + 1);
}

/// Notes one host-to-device upload made while running the model (not weight loading).
pub fn note_upload() {
    UPLOADS.set(UPLOADS.get() + 1);
}

/// Notes the bytes one of the engine's kernels reads and writes, from its launch shapes (each
/// element once: a lower bound of its traffic where caches miss, the figure to set against the
/// weight bytes a token must read).
pub fn note_bytes(bytes: usize) {
    BYTES.set(BYTES.get() + bytes as u64);
    let (b, f) = NEXT.get();
    NEXT.set((b + bytes as u64, f));
}

/// Notes the floating-point operations (a multiply–add is two) of the engine kernel launched
/// next on this thread, for [`Profiling`]'s roofline figures. Call it, like [`note_bytes`],
/// right before the launch. In u64: a vision layer's attention is ~77 GFLOP, past wasm32's usize.
pub fn note_flop(flop: u64) {
    let (b, f) = NEXT.get();
    NEXT.set((b, f + flop));
}

/// The one observer, process-wide as CubeCL's slot is: each launch goes to the tally of the
/// thread that issued it, if that thread is counting (natively other threads, parallel tests
/// or another model, launch too).
struct ThreadTally;

impl LaunchObserver for ThreadTally {
    fn launched(&self, kernel: &'static str) {
        TALLY.with_borrow_mut(|t| {
            if let Some(m) = t {
                *m.entry(kernel).or_default() += 1;
            }
        });
        // What a launcher noted belongs to the launch it made next: this one.
        LAST.set(NEXT.replace((0, 0)));
    }

    fn timing(&self) -> TimingRequest {
        if PROFILING.load(std::sync::atomic::Ordering::Relaxed) {
            TimingRequest::Deferred
        } else {
            TimingRequest::None
        }
    }

    fn profiled(&self, kernel: &'static str, profile: ProfileDuration) {
        TIMED.with_borrow_mut(|t| {
            if let Some(list) = t {
                let (bytes, flop) = LAST.get();
                list.push(Timed {
                    kernel,
                    profile,
                    bytes,
                    flop,
                });
            }
        });
    }
}

/// Counts alive on any thread, and the observer installed while there are any. CubeCL's guard
/// restores the observer it replaced when it drops, so one guard per count, with counts on
/// two threads ending out of order, uninstalled the other's observer mid-pass (a test saw 35
/// of a question's 139 dispatches).
static ACTIVE: Mutex<(usize, Option<LaunchObservation>)> = Mutex::new((0, None));

fn active() -> std::sync::MutexGuard<'static, (usize, Option<LaunchObservation>)> {
    // A poisoned lock only means a count panicked; the state is still whole.
    ACTIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counts what this thread issues until [`Counting::finish`] (one count per thread at a time).
#[must_use = "counting stops when dropped"]
pub struct Counting {
    reads: u64,
    uploads: u64,
    bytes: u64,
}

/// Starts counting.
pub fn count() -> Counting {
    TALLY.set(Some(BTreeMap::new()));
    // Launches made while nothing observed them never took what their launchers noted.
    NEXT.set((0, 0));
    let mut a = active();
    a.0 += 1;
    if a.1.is_none() {
        a.1 = Some(LaunchObservation::new(Arc::new(ThreadTally)));
    }
    Counting {
        reads: READS.get(),
        uploads: UPLOADS.get(),
        bytes: BYTES.get(),
    }
}

impl Drop for Counting {
    fn drop(&mut self) {
        TALLY.set(None);
        let mut a = active();
        a.0 = a.0.saturating_sub(1);
        if a.0 == 0 {
            a.1 = None;
        }
    }
}

impl Counting {
    /// Stops counting and returns the counts.
    pub fn finish(self) -> Counts {
        let by_kernel = TALLY.with_borrow_mut(|t| t.take()).unwrap_or_default();
        let mut by_kernel: Vec<KernelCount> = by_kernel
            .into_iter()
            .map(|(name, n)| KernelCount {
                kernel: short_name(name),
                dispatches: n,
            })
            .collect();
        by_kernel.sort_by(|a, b| {
            b.dispatches
                .cmp(&a.dispatches)
                .then(a.kernel.cmp(&b.kernel))
        });
        Counts {
            dispatches: by_kernel.iter().map(|k| k.dispatches).sum(),
            reads: READS.get() - self.reads,
            uploads: UPLOADS.get() - self.uploads,
            kernel_bytes: BYTES.get() - self.bytes,
            by_kernel,
        }
    }
}

/// What one pass asked of the device.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    /// Kernel dispatches.
    pub dispatches: u64,
    /// Host reads of device data.
    pub reads: u64,
    /// Host-to-device uploads (inputs, tables, masks; not weights).
    pub uploads: u64,
    /// Bytes the engine's own kernels read and write (see [`note_bytes`]); burn's kernels
    /// (copies, casts, the argmax, composed ops) are not counted.
    #[serde(default)]
    pub kernel_bytes: u64,
    /// Dispatches by kernel, most frequent first.
    pub by_kernel: Vec<KernelCount>,
}

impl Counts {
    /// Queue submissions the pass implies on cubecl-wgpu: one per [`tasks_per_submit`]
    /// launches, and one at each read (which flushes whatever is queued). Derived, not
    /// observed: neither CubeCL nor wgpu reports submissions.
    pub fn submits(&self) -> u64 {
        self.dispatches / tasks_per_submit() + self.reads.max(1)
    }
}

/// Times every launch this thread makes until [`Profiling::finish`], each on its own (CubeCL
/// wraps each in a timestamp pair where the adapter has timestamp queries, host clock reads
/// around a wait otherwise), with the bytes and FLOP the engine's launchers note. One at a time
/// in the process.
#[must_use = "profiling stops when dropped"]
pub struct Profiling {
    counting: Option<Counting>,
}

/// Starts profiling this thread's launches.
pub fn profile() -> Profiling {
    TIMED.set(Some(Vec::new()));
    PROFILING.store(true, std::sync::atomic::Ordering::Relaxed);
    Profiling {
        counting: Some(count()),
    }
}

impl Drop for Profiling {
    fn drop(&mut self) {
        PROFILING.store(false, std::sync::atomic::Ordering::Relaxed);
        TIMED.set(None);
    }
}

/// One kernel's launches in a profiled pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelTime {
    /// The kernel's name (as in [`KernelCount`]).
    pub kernel: String,
    /// Launches.
    pub dispatches: u64,
    /// Their summed time on the device, in µs.
    pub gpu_us: f64,
    /// Bytes the engine's launcher noted for them (0 for burn's own kernels: not counted).
    pub bytes: u64,
    /// Floating-point operations noted for them (0 where not counted).
    pub flop: u64,
}

/// A profiled pass, kernel by kernel.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PassProfile {
    /// How the launches were timed: `device` (timestamp queries) or `system` (host clock).
    pub timing: String,
    /// The launches that carried a measurement (the others were not timed).
    pub timed: u64,
    /// Every launch of the pass, timed or not.
    pub dispatches: u64,
    /// Every byte the pass's launchers noted (each also in its kernel's row).
    pub bytes: u64,
    /// By kernel, most device time first.
    pub kernels: Vec<KernelTime>,
}

impl Profiling {
    /// Stops profiling and reads every measurement (after the device has run the pass: each
    /// read waits for its own launch).
    pub async fn finish(mut self) -> PassProfile {
        PROFILING.store(false, std::sync::atomic::Ordering::Relaxed);
        let timed = TIMED.take().unwrap_or_default();
        let (dispatches, bytes) = self.counting.take().map_or((0, 0), |c| {
            let c = c.finish();
            (c.dispatches, c.kernel_bytes)
        });
        let mut method = None;
        let mut by: BTreeMap<&'static str, KernelTime> = BTreeMap::new();
        let mut n = 0;
        for t in timed {
            method.get_or_insert(t.profile.timing_method());
            let entry = by.entry(t.kernel).or_insert_with(|| KernelTime {
                kernel: short_name(t.kernel),
                dispatches: 0,
                gpu_us: 0.0,
                bytes: 0,
                flop: 0,
            });
            entry.dispatches += 1;
            entry.bytes += t.bytes;
            entry.flop += t.flop;
            if let Some(ticks) = t.profile.resolve().await {
                entry.gpu_us += ticks.duration().as_secs_f64() * 1e6;
                n += 1;
            }
        }
        let mut kernels: Vec<KernelTime> = by.into_values().collect();
        kernels.sort_by(|a, b| b.gpu_us.total_cmp(&a.gpu_us));
        PassProfile {
            timing: match method {
                Some(TimingMethod::Device) => "device",
                Some(TimingMethod::System) => "system",
                None => "none",
            }
            .to_string(),
            timed: n,
            dispatches,
            bytes,
            kernels,
        }
    }
}

/// Dispatches of one kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelCount {
    /// The kernel's name, module path and generic arguments removed.
    pub kernel: String,
    /// How many times it was dispatched.
    pub dispatches: u64,
}

/// `burn_cubecl::kernel::unary_float::unary_float::<Foo, f32>` → `unary_float<Foo>`: the
/// last path segment, with generic arguments shortened the same way and element types kept.
fn short_name(full: &str) -> String {
    let mut out = String::with_capacity(full.len());
    let mut segment = String::new();
    for ch in full.replace("::<", "<").chars() {
        match ch {
            ':' => segment.clear(),
            '<' | '>' | ',' | ' ' => {
                out.push_str(&segment);
                segment.clear();
                out.push(ch);
            }
            _ => segment.push(ch),
        }
    }
    out.push_str(&segment);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_lose_their_paths() {
        assert_eq!(
            short_name("burn_cubecl::kernel::unary_float::unary_float::<burn_cubecl::A, f32>"),
            "unary_float<A, f32>"
        );
        assert_eq!(short_name("attention_kernel"), "attention_kernel");
    }

    #[test]
    fn submissions_follow_the_task_limit_and_reads() {
        let c = |dispatches, reads| Counts {
            dispatches,
            reads,
            ..Counts::default()
        };
        assert_eq!(c(10, 0).submits(), 1);
        assert_eq!(c(64, 1).submits(), 3);
        assert_eq!(c(3400, 0).submits(), 107);
    }
}
