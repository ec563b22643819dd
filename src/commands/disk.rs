//! The disk floor while a command runs: one watcher thread per runtime (started at the first
//! watched command, idle between commands) looks at the free space of the file systems the
//! command may fill every [`DiskWatch::EVERY`] and cancels the command's own token when one runs
//! below the floor. One thread for the runtime's life, not one per command: a command costs a
//! `statvfs` per watched folder and one wake-up, nothing more.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::cancel::CancelToken;
use crate::policy::DiskFloor;

/// A file system that ran low while a command ran: where, how much was free, the floor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LowDisk {
    /// A folder on it the command could write (the workspace, an `--add-dir`, `TMPDIR`).
    pub path: PathBuf,
    /// Bytes free when tern looked.
    pub free: u64,
    /// The floor in bytes.
    pub floor: u64,
    /// Inodes ran low, not bytes (`free` and `floor` then count files).
    pub inodes: bool,
    /// Found between commands (a background job): the jail's processes were stopped.
    pub between: bool,
}

impl fmt::Display for LowDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.inodes {
            write!(
                f,
                "the disk holding {} has room for only {} more files, below tern's floor of {} (5 % of its files), which keeps room for everyone's files and tern's own records",
                self.path.display(),
                self.free,
                self.floor
            )?;
        } else {
            write!(
                f,
                "the disk holding {} has only {} free, below tern's floor of {} (TERN_DISK_FLOOR), which keeps room for everyone's files and tern's own records",
                self.path.display(),
                crate::checkpoint::size_text(self.free),
                crate::checkpoint::size_text(self.floor)
            )?;
        }
        if self.between {
            f.write_str("; it happened between commands, so tern stopped every process the earlier commands left running in the jail")?;
        }
        Ok(())
    }
}

/// One watched file system: a folder on it, its floor, and the free space at the start.
struct Watched {
    path: PathBuf,
    floor: u64,
    start: u64,
    /// The inode floor (0: the file system has no fixed count) and the free inodes at start.
    inode_floor: u64,
    inode_start: u64,
    /// A layer on another file system than the folder it stands for: what the layer may take
    /// of its own file system before the folder's would fall below its floor once the door
    /// applies it (bytes), and the folder (for the message).
    budget: Option<(u64, PathBuf)>,
}

/// What a command may fill: folders it writes directly (the workspace, `--add-dir`s, `TMPDIR`,
/// the layers' folder) and each layer's (upper folder, the folder it stands for).
#[derive(Debug, Clone, Default)]
pub struct Watch {
    /// Folders whose file systems are watched against their own floors.
    pub folders: Vec<PathBuf>,
    /// (upper folder, the folder the door writes): watched as a budget when the two lie on
    /// different file systems.
    pub layers: Vec<(PathBuf, PathBuf)>,
}

impl Watched {
    /// Room a command may still take on a disk that is below the floor when it starts (so
    /// `rm` and small writes still run there, and a runaway writer is still stopped).
    const SLACK: u64 = 1 << 20;
    /// The inode floor's slack, as [`Watched::SLACK`] for bytes.
    const INODE_SLACK: u64 = 1000;

    /// The folders to watch and their floors (none for a file system that cannot be read).
    fn all(w: &Watch, floor: DiskFloor) -> Vec<Watched> {
        let mut v = Self::folders(&w.folders, floor);
        v.extend(
            w.layers
                .iter()
                .filter_map(|(upper, root)| Self::budget(upper, root, floor)),
        );
        v
    }

    /// A layer's budget: its upper folder's file system may lose what the folder's can take
    /// before its floor (None: same file system, watched already; or no floor).
    fn budget(upper: &PathBuf, root: &PathBuf, floor: DiskFloor) -> Option<Watched> {
        use std::os::unix::fs::MetadataExt;
        let (u, r) = (
            std::fs::metadata(upper).ok()?,
            std::fs::metadata(root).ok()?,
        );
        if u.dev() == r.dev() {
            return None;
        }
        let (us, rs) = (
            crate::store::fsutil::space(upper)?,
            crate::store::fsutil::space(root)?,
        );
        let f = floor.bytes(rs.total);
        (f > 0).then(|| Watched {
            path: upper.clone(),
            floor: f,
            start: us.free,
            inode_floor: 0,
            inode_start: 0,
            budget: Some((rs.free.saturating_sub(f), root.clone())),
        })
    }

    fn folders(folders: &[PathBuf], floor: DiskFloor) -> Vec<Watched> {
        folders
            .iter()
            .filter_map(|p| {
                let s = crate::store::fsutil::space(p)?;
                let floor = floor.bytes(s.total);
                (floor > 0).then(|| Watched {
                    path: p.clone(),
                    floor,
                    start: s.free,
                    inode_floor: s.files_total / 20,
                    inode_start: s.files_free,
                    budget: None,
                })
            })
            .collect()
    }

    /// Low now: below the floor, and (when it started below) lower still by more than the
    /// slack.
    fn low(&self) -> Option<LowDisk> {
        let s = crate::store::fsutil::space(&self.path)?;
        if let Some((budget, root)) = &self.budget {
            let taken = self.start.saturating_sub(s.free);
            return (taken > *budget).then(|| LowDisk {
                path: root.clone(),
                free: (budget + self.floor).saturating_sub(taken),
                floor: self.floor,
                inodes: false,
                between: false,
            });
        }
        let limit = self.floor.min(self.start.saturating_sub(Self::SLACK));
        if s.free < limit {
            return Some(LowDisk {
                path: self.path.clone(),
                free: s.free,
                floor: self.floor,
                inodes: false,
                between: false,
            });
        }
        // Files, not bytes: tiny files by the hundred thousand fill the inode table first.
        let limit = self
            .inode_floor
            .min(self.inode_start.saturating_sub(Self::INODE_SLACK));
        (self.inode_floor > 0 && s.files_free < limit).then(|| LowDisk {
            path: self.path.clone(),
            free: s.files_free,
            floor: self.inode_floor,
            inodes: true,
            between: false,
        })
    }
}

/// What the runtime and its watcher thread share.
/// What the watcher stops when a floor is passed.
enum Stop {
    /// A running command (its own token).
    Command(CancelToken),
    /// Between commands: the jail's process group on the host.
    Jail(i32),
}

#[derive(Default)]
struct Slot {
    /// What is watched and what to stop: a command's token, or (between commands, while its
    /// background jobs run) the jail's process group; None: nothing to watch.
    job: Option<(Vec<Watched>, Stop)>,
    /// What the watcher found for the current command.
    found: Option<LowDisk>,
    /// The runtime ends: the thread returns.
    quit: bool,
}

/// The runtime's disk watcher: [`DiskWatch::begin`] before a command, [`DiskWatch::end`] after
/// it. The thread is started at the first command that has a folder to watch and stopped when
/// the value is dropped.
#[derive(Default)]
pub struct DiskWatch {
    shared: Arc<(Mutex<Slot>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DiskWatch {
    /// How often the free space is looked at (one `statvfs` per watched folder): a writer at
    /// 1 GB/s writes 50 MB between two looks, inside the smallest floor.
    pub const EVERY: Duration = Duration::from_millis(50);

    /// Watches `folders` (their free space now is the start) against `floor` until
    /// [`DiskWatch::end`], cancelling `cancel` with the reason when one runs low. Nothing to
    /// watch (floor off, no readable file system): no thread is woken.
    pub fn begin(
        &mut self,
        folders: &Watch,
        floor: DiskFloor,
        cancel: &CancelToken,
    ) -> Option<LowDisk> {
        let between = self.end();
        self.watch(Watched::all(folders, floor), Stop::Command(cancel.clone()));
        between
    }

    /// Watches `folders` between commands while the jail (process group `pgid` on the host)
    /// still runs something the commands left: below a floor, the whole jail is killed (a new
    /// one starts at the next command) and [`DiskWatch::begin`] returns what was found.
    pub fn between(&mut self, folders: &Watch, floor: DiskFloor, pgid: i32) {
        self.watch(Watched::all(folders, floor), Stop::Jail(pgid));
    }

    fn watch(&mut self, watched: Vec<Watched>, stop: Stop) {
        if watched.is_empty() {
            return;
        }
        if self.thread.is_none() {
            let shared = self.shared.clone();
            self.thread = std::thread::Builder::new()
                .name("disk-floor".into())
                .spawn(move || watch(&shared))
                .ok();
        }
        let (lock, wake) = &*self.shared;
        let mut slot = lock.lock().unwrap_or_else(|p| p.into_inner());
        slot.job = Some((watched, stop));
        slot.found = None;
        wake.notify_one();
    }

    /// Stops watching; what the watcher found for this command, if anything.
    pub fn end(&mut self) -> Option<LowDisk> {
        let mut slot = self.shared.0.lock().unwrap_or_else(|p| p.into_inner());
        slot.job = None;
        slot.found.take()
    }
}

impl fmt::Debug for DiskWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiskWatch")
            .field("started", &self.thread.is_some())
            .finish()
    }
}

impl Drop for DiskWatch {
    fn drop(&mut self) {
        let (lock, wake) = &*self.shared;
        lock.lock().unwrap_or_else(|p| p.into_inner()).quit = true;
        wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The watcher thread: asleep while there is no command; with one, a look every
/// [`DiskWatch::EVERY`] (the first one `EVERY` after the start, whose free space was just
/// read).
fn watch(shared: &(Mutex<Slot>, Condvar)) {
    let (lock, wake) = shared;
    let mut slot = lock.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        if slot.quit {
            return;
        }
        if slot.job.is_none() {
            slot = wake.wait(slot).unwrap_or_else(|p| p.into_inner());
            continue;
        }
        slot = wake
            .wait_timeout(slot, DiskWatch::EVERY)
            .map(|(s, _)| s)
            .unwrap_or_else(|p| p.into_inner().0);
        let Some((watched, stop)) = slot.job.as_ref() else {
            continue;
        };
        if let Some(mut low) = watched.iter().find_map(Watched::low) {
            match stop {
                Stop::Command(token) => token.cancel_for_budget(low.to_string()),
                Stop::Jail(pgid) => {
                    low.between = true;
                    // SAFETY: kill(2) of the jail's own process group: its init dies, and the
                    // kernel ends everything in its PID namespace.
                    unsafe { libc::kill(-*pgid, libc::SIGKILL) };
                }
            }
            slot.found = Some(low);
            slot.job = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_floor_above_the_disk_stops_the_command_and_the_watcher_serves_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let folders = Watch {
            folders: vec![dir.path().to_path_buf()],
            layers: Vec::new(),
        };
        let mut w = DiskWatch::default();
        // Off: nothing watched, no thread.
        let cancel = CancelToken::new();
        assert_eq!(w.begin(&folders, DiskFloor::Off, &cancel), None);
        assert!(w.thread.is_none());
        assert_eq!(w.end(), None);
        // A disk below the floor since the start, and lower by more than the slack since:
        // the token is cancelled with the reason; twice, on the same thread.
        for _ in 0..2 {
            let cancel = CancelToken::new();
            let gone = Watched {
                path: dir.path().to_path_buf(),
                floor: u64::MAX,
                start: u64::MAX,
                inode_floor: 0,
                inode_start: 0,
                budget: None,
            };
            w.watch(vec![gone], Stop::Command(cancel.clone()));
            let low = (0..500)
                .find_map(|_| {
                    std::thread::sleep(Duration::from_millis(10));
                    cancel.is_cancelled().then(|| w.end()).flatten()
                })
                .expect("the watcher stops the command");
            assert_eq!(low.path, dir.path());
            assert!(low.to_string().contains("below tern's floor"));
        }
        // Files, not bytes: an inode floor above what is free is found and said as files.
        let files = Watched {
            path: dir.path().to_path_buf(),
            floor: 1,
            start: u64::MAX,
            inode_floor: u64::MAX,
            inode_start: u64::MAX,
            budget: None,
        };
        if crate::store::fsutil::space(dir.path()).is_some_and(|s| s.files_total > 0) {
            let low = files.low().expect("the inode floor is passed");
            assert!(
                low.inodes && low.to_string().contains("more files"),
                "{low}"
            );
        }
        // A floor every disk meets: nothing found, the token untouched.
        let cancel = CancelToken::new();
        assert_eq!(w.begin(&folders, DiskFloor::Bytes(1), &cancel), None);
        std::thread::sleep(DiskWatch::EVERY * 3);
        assert_eq!(w.end(), None);
        assert!(!cancel.is_cancelled());
        drop(w);
    }
}
