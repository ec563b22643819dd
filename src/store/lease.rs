//! The process lease of a session: which process runs a turn of it (or holds it for a verb that
//! rewrites the conversation). An exclusive `flock` (std's `File::try_lock`) on `<session>/lease`, held for as long as the
//! [`Lease`] lives: the kernel releases it when the process dies, however it dies, so a crashed
//! holder never keeps a session and no pid bookkeeping in `meta.json` is needed. A refused verb
//! only fails to take the lock: it changes no file.
//!
//! While held, the file names the holder (`{"pid": 123}`) so others can say who; that text is for
//! display only, the lock alone decides.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// File name of the lease inside a session folder.
pub const LEASE: &str = "lease";

/// A held lease; released (and its holder line cleared) when dropped.
#[derive(Debug)]
pub struct Lease {
    file: File,
    path: PathBuf,
}

/// Who holds a session's lease, as far as its file says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder {
    /// The holder's pid (None when the file names none yet: it is being taken right now).
    pub pid: Option<u32>,
}

fn open(path: &Path) -> io::Result<File> {
    // Never through a link, at the lease or at a folder above it (a swapped session folder).
    super::fsutil::open_file(path, libc::O_CREAT | libc::O_RDWR, 0o666)
}

impl Lease {
    /// Takes the lease of the session folder `dir`. Ok(Err(holder)) when another open of it
    /// holds it (another process, or another runtime of this one). A probe by [`Lease::holder`]
    /// holds the lock for a moment, so a refusal is confirmed over a few tries (about 50 ms)
    /// before it is believed.
    pub fn try_take(dir: &Path) -> io::Result<Result<Lease, Holder>> {
        let path = dir.join(LEASE);
        let mut file = open(&path)?;
        let mut tries = 0;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    tries += 1;
                    if tries >= 5 {
                        return Ok(Err(read_holder(&mut file)));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            }
        }
        let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        file.set_len(0).map_err(named)?;
        file.seek(SeekFrom::Start(0)).map_err(named)?;
        // One write of the whole line (writeln! may split it into several).
        let line = format!("{{\"pid\": {}}}\n", std::process::id());
        file.write_all(line.as_bytes()).map_err(named)?;
        Ok(Ok(Lease { file, path }))
    }

    /// Who holds the lease of `dir` now; None when nobody does. Writes nothing: it probes with a
    /// shared lock, taken and dropped at once.
    pub fn holder(dir: &Path) -> io::Result<Option<Holder>> {
        let path = dir.join(LEASE);
        if !path.exists() {
            return Ok(None);
        }
        let mut file = open(&path)?;
        match file.try_lock_shared() {
            Ok(()) => {
                let _ = file.unlock();
                Ok(None)
            }
            Err(std::fs::TryLockError::WouldBlock) => Ok(Some(read_holder(&mut file))),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }

    /// The lease file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file at [`Lease::path`] is still the one this lease locks (same device and
    /// inode). A command that removed or replaced it leaves a lock nobody else can see: another
    /// process would take a new file's lock and run a second turn.
    pub fn intact(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        match (self.file.metadata(), std::fs::symlink_metadata(&self.path)) {
            (Ok(held), Ok(now)) => held.dev() == now.dev() && held.ino() == now.ino(),
            _ => false,
        }
    }
}

fn read_holder(file: &mut File) -> Holder {
    let mut text = String::new();
    let _ = file.seek(SeekFrom::Start(0));
    let _ = file.take(256).read_to_string(&mut text);
    let pid = serde_json::from_str::<serde_json::Value>(text.trim())
        .ok()
        .and_then(|v| v["pid"].as_u64())
        .and_then(|p| u32::try_from(p).ok());
    Holder { pid }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
        let _ = self.file.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_released_on_drop() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(Lease::holder(d.path()).unwrap(), None);
        let held = Lease::try_take(d.path()).unwrap().unwrap();
        let h = Lease::try_take(d.path()).unwrap().unwrap_err();
        assert_eq!(h.pid, Some(std::process::id()));
        assert!(Lease::holder(d.path()).unwrap().is_some());
        drop(held);
        assert_eq!(Lease::holder(d.path()).unwrap(), None);
    }
}
