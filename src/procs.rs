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

/// Makes this process the child subreaper of its descendants (Linux `prctl(2)`
/// `PR_SET_CHILD_SUBREAPER`): a command's process that loses its parent (the shell was killed)
/// is reparented to tern rather than to PID 1, so tern can reap it ([`reap_group`]) instead of
/// leaving a zombie to an init that may never reap. Call once from `main`, before any command
/// runs. Returns false where it is not available (not Linux, or refused).
pub fn become_subreaper() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl(2) with PR_SET_CHILD_SUBREAPER only sets a flag of this process.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Reaps every member of process group `pgid` that is a dead child of this process (the
/// orphans a subreaper inherited), without blocking. Call only after the group's leader (the
/// shell, whose status `std::process::Child` collects) has been reaped, so its status is never
/// taken from under it. Returns how many were reaped.
pub fn reap_group(pgid: libc::pid_t) -> usize {
    let mut n = 0;
    if pgid <= 0 {
        return 0;
    }
    loop {
        let mut status = 0;
        // SAFETY: waitpid(2) on the group `-pgid` with WNOHANG; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(-pgid, &mut status, libc::WNOHANG) };
        if r <= 0 {
            return n;
        }
        n += 1;
    }
}

/// True while a live process is in group `pgid`: a zombie does not count (it has exited; only
/// its parent's `wait` is missing, and under an init that never reaps, that never comes).
/// Linux does not reuse a pid while it still names a group, so the number cannot point to
/// someone else's group meanwhile.
pub fn group_alive(pgid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks existence and permission.
    let r = unsafe { libc::kill(-pgid, 0) };
    let exists = r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    if !exists {
        return false;
    }
    #[cfg(target_os = "linux")]
    {
        // Members exist: alive unless every one is a zombie (`Z`) or dead (`X`). A /proc that
        // cannot be read counts as alive (the old, cautious answer).
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return true;
        };
        for entry in dir.flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            if let Some((state, pgrp)) = state_and_group(&stat)
                && pgrp == pgid
                && state != 'Z'
                && state != 'X'
            {
                return true;
            }
        }
        false
    }
    #[cfg(not(target_os = "linux"))]
    {
        true
    }
}

/// The state letter and process group of a `/proc/PID/stat` line (proc(5): fields 3 and 5,
/// counted after the command name's closing parenthesis, which may itself hold spaces).
fn state_and_group(stat: &str) -> Option<(char, libc::pid_t)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let _ppid = f.next()?;
    let pgrp = f.next()?.parse().ok()?;
    Some((state, pgrp))
}

#[cfg(test)]
mod reap_tests {
    use super::*;

    #[test]
    fn stat_lines_give_state_and_group() {
        assert_eq!(
            state_and_group("42 (sle ep) (x) Z 1 40 40 0 -1"),
            Some(('Z', 40))
        );
        assert_eq!(state_and_group("7 (bash) S 6 7 7"), Some(('S', 7)));
        assert_eq!(state_and_group("garbage"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_group_of_zombies_is_not_alive_and_is_reaped() {
        use std::os::unix::process::CommandExt;
        // A shell that leaves a child behind in its group and exits: the child, killed, is a
        // zombie of this (subreaper) test process once the shell is gone.
        assert!(become_subreaper());
        let mut c = std::process::Command::new("sh");
        c.args(["-c", "sleep 30.0611 >/dev/null 2>&1 & echo $!"])
            .stdout(std::process::Stdio::piped())
            .process_group(0);
        let out = c.spawn().unwrap().wait_with_output().unwrap();
        let child: libc::pid_t = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        // The group is the shell's pid; find it from the child's stat.
        let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap();
        let (_, group) = state_and_group(&stat).unwrap();
        assert!(group_alive(group));
        // SAFETY: kill(2) of the test's own child process.
        unsafe { libc::kill(child, libc::SIGKILL) };
        let start = std::time::Instant::now();
        while group_alive(group) && start.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!group_alive(group), "a zombie counted as alive");
        assert_eq!(reap_group(group), 1);
        // SAFETY: signal 0 only checks existence.
        assert_eq!(unsafe { libc::kill(-group, 0) }, -1, "the zombie is reaped");
    }
}
