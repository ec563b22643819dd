//! The session lock: an fs2 advisory exclusive lock on `<session>/lock`, held for every
//! read-modify-write of the session folder.

use std::fs::File;
use std::io;
use std::path::Path;

use fs2::FileExt;

/// Proof that the session lock is held; released on drop. Locks are per open file, so code that
/// holds one must not take another on the same session (it would wait for itself).
#[derive(Debug)]
pub struct SessionLock {
    file: File,
}

impl SessionLock {
    /// Blocks until the exclusive lock on `path` is held. Refuses a symlink at `path`.
    pub fn acquire(path: &Path) -> io::Result<SessionLock> {
        // Never through a link, at the lock or at a folder above it (a swapped session folder).
        let file = super::fsutil::open_file(path, libc::O_CREAT | libc::O_WRONLY, 0o666)?;
        file.lock_exclusive()?;
        Ok(SessionLock { file })
    }
}

impl Drop for SessionLock {
    fn drop(&mut self) {
        // Closing the file releases the lock too; unlocking explicitly just makes it prompt.
        let _ = FileExt::unlock(&self.file);
    }
}
