//! The release policy: a clock shared by the device and its queue, the encoders holding commands
//! not submitted yet, and the buffers released since, destroyed once no unsubmitted command can
//! name them.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use super::*;

/// What the device and its queue share: a clock, the encoders holding commands not submitted
/// yet, and the buffers released since.
#[derive(Debug, Default)]
pub(super) struct Shared {
    /// Ticks at every encoder's first command and every buffer released.
    pub(super) clock: u64,
    /// First-command tick -> encoders or command buffers of that tick not yet submitted or
    /// dropped.
    pub(super) live: BTreeMap<u64, usize>,
    /// Released buffers with their release tick, waiting for every encoder that recorded
    /// before it to go.
    pub(super) graveyard: Vec<(u64, wgpu::Buffer)>,
    /// The wrapped queue's submission numbers -> the real queue's indices, for `poll`.
    pub(super) submissions: VecDeque<(u64, wgpu::SubmissionIndex)>,
    pub(super) next_submission: u64,
}

pub(super) fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // A panic elsewhere must not turn every later GPU call into another one.
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub(super) fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Destroys the released buffers that no unsubmitted command can name: those released
    /// before the oldest live encoder recorded its first command. Work already submitted keeps
    /// them alive in the browser (and in wgpu) until it completes.
    pub(super) fn sweep(&mut self) {
        let oldest_live = self.live.keys().next().copied().unwrap_or(u64::MAX);
        let (free, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.graveyard)
            .into_iter()
            .partition(|(t, _)| *t < oldest_live);
        self.graveyard = keep;
        if free.is_empty() {
            return;
        }
        for (_, b) in free {
            destroy(&b);
        }
    }

    /// Takes a buffer CubeCL let go of: destroyed now if no encoder holds commands (none can
    /// name it then: a command names a buffer through a handle, and the handle is gone), else
    /// kept until those encoders are submitted.
    pub(super) fn release(&mut self, b: wgpu::Buffer) {
        if self.live.is_empty() {
            destroy(&b);
        } else {
            let t = self.tick();
            self.graveyard.push((t, b));
        }
    }
}

pub(super) fn destroy(b: &wgpu::Buffer) {
    let mut c = COUNTS.lock().unwrap_or_else(|e| e.into_inner());
    c.destroyed += 1;
    c.destroyed_bytes += b.size();
    if let Some(slack) = small_slack(b.size()) {
        c.live_small = c.live_small.saturating_sub(1);
        c.live_small_slack_bytes = c.live_small_slack_bytes.saturating_sub(slack);
    }
    drop(c);
    b.destroy();
}

/// Keeps the tick of an encoder's first command live until its commands are submitted or
/// dropped. An encoder that has recorded nothing holds no ticket: nothing it records later can
/// name a buffer released before, so such an encoder (CubeCL keeps one open between submits)
/// must not hold releases back.
#[derive(Debug)]
pub(super) struct Ticket {
    pub(super) shared: Arc<Mutex<Shared>>,
    pub(super) tick: u64,
}

impl Ticket {
    pub(super) fn new(shared: &Arc<Mutex<Shared>>) -> Ticket {
        let mut s = lock(shared);
        let tick = s.tick();
        *s.live.entry(tick).or_default() += 1;
        Ticket {
            shared: shared.clone(),
            tick,
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut s = lock(&self.shared);
        if let Some(n) = s.live.get_mut(&self.tick) {
            *n -= 1;
            if *n == 0 {
                s.live.remove(&self.tick);
            }
        }
    }
}
