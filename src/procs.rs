//! The registry of running process groups: every bash command's group is registered while it
//! runs, so the emergency exit (a third Ctrl-C, in `main`) can kill them all, parent and
//! sub-agents alike, without any process-wide slot in the library.
//!
//! The slots are atomics so a signal handler may read them (async-signal-safe: no lock, no
//! allocation).

use std::sync::atomic::{AtomicI32, Ordering};

/// Most process groups tracked at once (one per concurrently running command).
pub const SLOTS: usize = 64;

/// A fixed set of slots holding process group ids (0 = free).
#[derive(Debug)]
pub struct ProcessGroups {
    slots: [AtomicI32; SLOTS],
}

impl Default for ProcessGroups {
    fn default() -> Self {
        ProcessGroups {
            slots: std::array::from_fn(|_| AtomicI32::new(0)),
        }
    }
}

/// Removes its group from the registry when dropped (the command ended).
#[derive(Debug)]
pub struct Registered<'a> {
    groups: &'a ProcessGroups,
    slot: Option<usize>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            self.groups.slots[i].store(0, Ordering::SeqCst);
        }
    }
}

/// A registration that owns its registry (for a group that lives as long as a value does, such
/// as a jail's): removed when dropped.
#[derive(Debug)]
pub struct OwnedRegistration {
    groups: std::sync::Arc<ProcessGroups>,
    slot: Option<usize>,
}

impl Drop for OwnedRegistration {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            self.groups.slots[i].store(0, Ordering::SeqCst);
        }
    }
}

impl ProcessGroups {
    /// As [`ProcessGroups::register`], for a registration kept beside the registry's `Arc`.
    pub fn register_owned(groups: &std::sync::Arc<ProcessGroups>, pgid: i32) -> OwnedRegistration {
        let slot = groups.slots.iter().position(|s| {
            s.compare_exchange(0, pgid, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        });
        OwnedRegistration {
            groups: groups.clone(),
            slot,
        }
    }

    /// An empty registry.
    pub fn new() -> ProcessGroups {
        ProcessGroups::default()
    }

    /// Records `pgid` until the returned guard drops. With every slot taken the group is not
    /// recorded (it still runs; only the emergency exit would miss it).
    pub fn register(&self, pgid: i32) -> Registered<'_> {
        let slot = self.slots.iter().position(|s| {
            s.compare_exchange(0, pgid, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        });
        Registered { groups: self, slot }
    }

    /// The groups running now.
    pub fn running(&self) -> Vec<i32> {
        self.slots
            .iter()
            .map(|s| s.load(Ordering::SeqCst))
            .filter(|g| *g > 0)
            .collect()
    }

    /// Sends `signal` to every registered group. Async-signal-safe: atomics and kill(2) only.
    pub fn kill_all(&self, signal: i32) {
        for s in &self.slots {
            let g = s.load(Ordering::SeqCst);
            if g > 0 {
                // SAFETY: kill(2) with a negative pid signals that process group; no memory is
                // involved, and it is async-signal-safe.
                unsafe {
                    libc::kill(-g, signal);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ProcessGroups;

    #[test]
    fn groups_are_listed_while_registered() {
        let g = ProcessGroups::new();
        let a = g.register(100);
        {
            let _b = g.register(200);
            assert_eq!(g.running(), vec![100, 200]);
        }
        assert_eq!(g.running(), vec![100]);
        drop(a);
        assert!(g.running().is_empty());
    }
}
