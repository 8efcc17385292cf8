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

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use burn_cubecl::cubecl::logging::{LaunchObservation, LaunchObserver};
use serde::{Deserialize, Serialize};

thread_local! {
    // Per thread, as the launches are: a pass runs on one thread.
    static READS: Cell<u64> = const { Cell::new(0) };
    static UPLOADS: Cell<u64> = const { Cell::new(0) };
}

/// cubecl-wgpu submits its queued tasks every this many launches (`CUBECL_WGPU_MAX_TASKS`,
/// default 32) and before every read.
pub const TASKS_PER_SUBMIT: u64 = 32;

/// Notes one host read of device data (a queue flush and a round trip).
pub fn note_read() {
    READS.set(READS.get() + 1);
}

/// Notes one host-to-device upload made while running the model (not weight loading).
pub fn note_upload() {
    UPLOADS.set(UPLOADS.get() + 1);
}

/// Launches by kernel, from the thread that started counting only: the observer is
/// process-wide, and natively other threads (parallel tests, another model) may launch too.
struct Tally {
    counts: Mutex<BTreeMap<&'static str, u64>>,
    #[cfg(not(target_family = "wasm"))]
    thread: std::thread::ThreadId,
}

impl LaunchObserver for Tally {
    fn launched(&self, kernel: &'static str) {
        #[cfg(not(target_family = "wasm"))]
        if std::thread::current().id() != self.thread {
            return;
        }
        // A poisoned lock only means another count panicked; keep counting.
        let mut m = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry(kernel).or_default() += 1;
    }
}

/// Counts what this thread issues until [`Counting::finish`]. One at a time: the launch observer
/// is process-wide, and a second count replaces the first while it lives.
#[must_use = "counting stops when dropped"]
pub struct Counting {
    tally: Arc<Tally>,
    _observation: LaunchObservation,
    reads: u64,
    uploads: u64,
}

/// Starts counting.
pub fn count() -> Counting {
    let tally = Arc::new(Tally {
        counts: Mutex::default(),
        #[cfg(not(target_family = "wasm"))]
        thread: std::thread::current().id(),
    });
    Counting {
        _observation: LaunchObservation::new(tally.clone()),
        tally,
        reads: READS.get(),
        uploads: UPLOADS.get(),
    }
}

impl Counting {
    /// Stops counting and returns the counts.
    pub fn finish(self) -> Counts {
        let by_kernel =
            std::mem::take(&mut *self.tally.counts.lock().unwrap_or_else(|e| e.into_inner()));
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
    /// Dispatches by kernel, most frequent first.
    pub by_kernel: Vec<KernelCount>,
}

impl Counts {
    /// Queue submissions the pass implies on cubecl-wgpu: one per [`TASKS_PER_SUBMIT`]
    /// launches, and one at each read (which flushes whatever is queued). Derived, not
    /// observed: neither CubeCL nor wgpu reports submissions.
    pub fn submits(&self) -> u64 {
        self.dispatches / TASKS_PER_SUBMIT + self.reads.max(1)
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
