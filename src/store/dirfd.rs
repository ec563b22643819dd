//! Folder handles that never follow a link: every create, append, rename and remove tern makes
//! under its state folder goes through a [`Dir`], an open folder reached from a trusted anchor
//! without following a symbolic link at any level (issue 17, DESIGN.md §10). A command may swap
//! `spill/`, `archive/` or a session folder for a link while tern runs; the next write then fails
//! with an error naming the link instead of landing in the link's target.
//!
//! How a path is split ([`split`]): the anchor is the folder holding the state folder (the
//! workspace for `<workspace>/.tern`), opened as given (the person's own links above it are
//! theirs); everything beneath it, the state folder included, is resolved without links. The
//! state folder is the last `.tern` on the path, else the folder above the last `sessions`
//! (a `--state-dir` layout); a path in neither is resolved from its own parent folder.
//!
//! Resolution: `openat2(2)` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` where the kernel has
//! it (Linux 5.6+), else one `openat(2)` per level with `O_NOFOLLOW`. Both refuse a link with
//! `ELOOP`; callers turn that into a message naming the link ([`first_link`]).

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// An open folder reached without following links, with the path it was opened as (for
/// messages only: every operation goes through the descriptor).
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

/// What [`Dir::stat`] and [`Dir::entries`] tell of an entry, the entry itself (a link is a link,
/// never its target).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// The kind of entry.
    pub kind: Kind,
    /// Size in bytes.
    pub len: u64,
    /// Last modification time.
    pub modified: SystemTime,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
}

/// The kind of a folder entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A plain file.
    File,
    /// A folder.
    Dir,
    /// A symbolic link.
    Link,
    /// A FIFO, socket or device.
    Other,
}

/// The anchor of `path` (opened following links) and the part beneath it (resolved without),
/// as described in the module docs. The part beneath is never empty for a path with a file
/// name; it holds only normal components.
pub fn split(path: &Path) -> (PathBuf, PathBuf) {
    let comps: Vec<Component> = path.components().collect();
    let is =
        |c: &Component, name: &str| matches!(c, Component::Normal(n) if *n == OsStr::new(name));
    let root = comps
        .iter()
        .rposition(|c| is(c, ".tern"))
        .or_else(|| {
            comps
                .iter()
                .rposition(|c| is(c, "sessions"))
                .and_then(|i| i.checked_sub(1))
        })
        .unwrap_or(comps.len().saturating_sub(1));
    let anchor: PathBuf = comps[..root].iter().collect();
    let rel: PathBuf = comps[root..].iter().collect();
    // Only plain names beneath the anchor: `.` and `..` (never made by tern) stay in the anchor.
    match rel
        .components()
        .position(|c| !matches!(c, Component::Normal(_)))
    {
        None => (anchor, rel),
        Some(_) => match (path.parent(), path.file_name()) {
            (Some(p), Some(n)) => (p.to_path_buf(), PathBuf::from(n)),
            _ => (path.to_path_buf(), PathBuf::new()),
        },
    }
}

impl Dir {
    /// Opens the existing folder `path` (see [`split`]). Errors: `ELOOP` when a level beneath
    /// the anchor is a link, `ENOTDIR` when one is a file, `ENOENT` when one is missing.
    pub fn open(path: &Path) -> io::Result<Dir> {
        let (anchor, rel) = split(path);
        if rel.as_os_str().is_empty() {
            return Ok(Dir {
                fd: open_anchor(&anchor)?,
                path: path.to_path_buf(),
            });
        }
        let base = anchor_fd(&anchor)?;
        let fd = match beneath(&base, &rel) {
            // The kept anchor may be a folder since removed (and made anew at its path).
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                forget_anchor(&anchor);
                let base = anchor_fd(&anchor)?;
                beneath(&base, &rel)?
            }
            other => other?,
        };
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// [`Dir::open`], creating the missing levels beneath the anchor (mode 0777 less the umask,
    /// as `mkdir -p`). A link or a file in the way is an error, never followed or replaced.
    pub fn create(path: &Path) -> io::Result<Dir> {
        match Dir::open(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            other => return other,
        }
        let (anchor, rel) = split(path);
        let mut fd = match open_anchor(&anchor) {
            // The anchor is above tern's folders (a `--state-dir` not made yet): made as given.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::create_dir_all(&anchor)?;
                open_anchor(&anchor)?
            }
            other => other?,
        };
        for c in rel.components() {
            let name = cstr(c.as_os_str())?;
            // SAFETY: `fd` is an open folder and `name` a NUL-terminated single component.
            let r = unsafe { libc::mkdirat(fd.as_raw_fd(), name.as_ptr(), 0o777) };
            if r != 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EEXIST) {
                    return Err(e);
                }
            }
            fd = open_at(&fd, &name, DIR_FLAGS)?;
        }
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Opens the folder `path` a person named (a flag's folder, not tern's), following links
    /// as given, and holds it: later operations go to this folder even if its path is then
    /// swapped for a link. Errors: as `open(2)` with `O_DIRECTORY`.
    pub fn hold(path: &Path) -> io::Result<Dir> {
        Ok(Dir {
            fd: open_anchor(path)?,
            path: path.to_path_buf(),
        })
    }

    /// The path this folder was opened as.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the entry `name` (one component) of this folder with `flags` (`O_CREAT` creates
    /// it with `mode`, less the umask); `O_NOFOLLOW` and `O_CLOEXEC` are always added, so a link
    /// there is `ELOOP`.
    pub fn open_file(&self, name: &OsStr, flags: libc::c_int, mode: u32) -> io::Result<File> {
        let name = single(name)?;
        // SAFETY: `self.fd` is an open folder and `name` a NUL-terminated single component.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                name.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by openat and is owned by nobody else.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// Creates a new file `<prefix><random><suffix>` (mode 0600, `O_EXCL`: an entry already
    /// there, a planted link included, is never opened) open for reading and writing. Returns
    /// it and its name.
    pub fn create_unique(&self, prefix: &str, suffix: &str) -> io::Result<(File, OsString)> {
        self.create_unique_mode(prefix, suffix, 0o600)
    }

    /// [`Dir::create_unique`] with the permission bits `mode` (less the umask).
    pub fn create_unique_mode(
        &self,
        prefix: &str,
        suffix: &str,
        mode: u32,
    ) -> io::Result<(File, OsString)> {
        let mut last = None;
        for _ in 0..64 {
            let name = OsString::from(format!("{prefix}{}{suffix}", random_part()));
            match self.open_file(&name, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, mode) {
                Ok(f) => return Ok((f, name)),
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no free name")))
    }

    /// Renames the entry `from` of this folder to `to` in `dest` (`renameat(2)`: neither name
    /// is followed; a link at `to` is replaced, its target untouched).
    pub fn rename(&self, from: &OsStr, dest: &Dir, to: &OsStr) -> io::Result<()> {
        let (from, to) = (single(from)?, single(to)?);
        // SAFETY: both descriptors are open folders and both names NUL-terminated components.
        let r = unsafe {
            libc::renameat(
                self.fd.as_raw_fd(),
                from.as_ptr(),
                dest.fd.as_raw_fd(),
                to.as_ptr(),
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Makes `to` in `dest` a second name of the entry `name` of this folder (`linkat(2)`
    /// without `AT_SYMLINK_FOLLOW`: a link is linked itself). Errors: `EXDEV` across file
    /// systems, `EEXIST` when `to` is taken.
    pub fn link(&self, name: &OsStr, dest: &Dir, to: &OsStr) -> io::Result<()> {
        let (from, to) = (single(name)?, single(to)?);
        // SAFETY: both descriptors are open folders and both names NUL-terminated components.
        let r = unsafe {
            libc::linkat(
                self.fd.as_raw_fd(),
                from.as_ptr(),
                dest.fd.as_raw_fd(),
                to.as_ptr(),
                0,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Removes the entry `name` (not a folder) of this folder; a link is removed itself, never
    /// its target.
    pub fn remove_file(&self, name: &OsStr) -> io::Result<()> {
        let name = single(name)?;
        // SAFETY: `self.fd` is an open folder and `name` a NUL-terminated single component.
        if unsafe { libc::unlinkat(self.fd.as_raw_fd(), name.as_ptr(), 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// What the entry `name` is, without following it (`fstatat` with `AT_SYMLINK_NOFOLLOW`).
    pub fn stat(&self, name: &OsStr) -> io::Result<Stat> {
        let name = single(name)?;
        // SAFETY: a zeroed `stat` is a valid out-parameter; fstatat fills it on success.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `self.fd` is an open folder, `name` a NUL-terminated component, `st` ours.
        let r = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                name.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stat_of(&st))
    }

    /// The names of this folder's entries (without `.` and `..`), each with its [`Stat`];
    /// an entry removed while listing is left out.
    pub fn entries(&self) -> io::Result<Vec<(OsString, Stat)>> {
        Ok(self
            .entries_raw()?
            .into_iter()
            .filter_map(|n| self.stat(&n).ok().map(|s| (n, s)))
            .collect())
    }

    fn entries_raw(&self) -> io::Result<Vec<OsString>> {
        // fdopendir takes ownership of its descriptor: give it a duplicate.
        let dup = self.fd.try_clone()?;
        let raw = std::os::fd::IntoRawFd::into_raw_fd(dup);
        // SAFETY: `raw` is an open folder descriptor we own; on success the stream owns it.
        let dirp = unsafe { libc::fdopendir(raw) };
        if dirp.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: fdopendir failed, so `raw` is still ours to close.
            unsafe { libc::close(raw) };
            return Err(e);
        }
        let mut names = Vec::new();
        loop {
            // SAFETY: `dirp` is a valid stream until closedir below.
            let ent = unsafe { libc::readdir(dirp) };
            if ent.is_null() {
                break;
            }
            // SAFETY: readdir returned a valid entry whose d_name is NUL-terminated.
            let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) };
            let bytes = name.to_bytes();
            if bytes != b"." && bytes != b".." {
                names.push(OsString::from_vec(bytes.to_vec()));
            }
        }
        // SAFETY: `dirp` came from fdopendir and is closed once.
        unsafe { libc::closedir(dirp) };
        Ok(names)
    }

    /// The existing folder `rel` (plain components) beneath this one, reached without following
    /// a link at any level. Errors: `ELOOP` for a link on the way, `ENOENT`, `ENOTDIR`.
    pub fn beneath(&self, rel: &Path) -> io::Result<Dir> {
        let fd = if rel.as_os_str().is_empty() {
            self.fd.try_clone()?
        } else {
            beneath(&self.fd, rel)?
        };
        Ok(Dir {
            fd,
            path: self.path.join(rel),
        })
    }

    /// Makes the folder `name` (mode `mode` less the umask); one already there is fine, a link
    /// or a file there is `EEXIST`.
    pub fn make_dir(&self, name: &OsStr, mode: u32) -> io::Result<()> {
        let c = single(name)?;
        // SAFETY: `self.fd` is an open folder and `c` a NUL-terminated single component.
        if unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), mode as libc::mode_t) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EEXIST) && self.stat(name)?.kind == Kind::Dir {
            return Ok(());
        }
        Err(e)
    }

    /// Removes the empty folder `name` (`unlinkat` with `AT_REMOVEDIR`; a link is not a folder).
    pub fn remove_dir(&self, name: &OsStr) -> io::Result<()> {
        let c = single(name)?;
        // SAFETY: `self.fd` is an open folder and `c` a NUL-terminated single component.
        if unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Removes the entry `name` whatever it is: a folder with everything in it (never following
    /// a link inside), a file, a link (itself). Absent is fine.
    pub fn remove_all(&self, name: &OsStr) -> io::Result<()> {
        match self.stat(name) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
            Ok(s) if s.kind == Kind::Dir => {
                let sub = self.beneath(Path::new(name))?;
                for (n, _) in sub.entries()? {
                    sub.remove_all(&n)?;
                }
                self.remove_dir(name)
            }
            Ok(_) => self.remove_file(name),
        }
    }

    /// Makes the symbolic link `name` → `target` (`symlinkat`). Errors: `EEXIST` when taken.
    pub fn symlink(&self, target: &Path, name: &OsStr) -> io::Result<()> {
        let (t, c) = (cstr(target.as_os_str())?, single(name)?);
        // SAFETY: valid C strings and an open folder.
        if unsafe { libc::symlinkat(t.as_ptr(), self.fd.as_raw_fd(), c.as_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Sets the permission bits of the folder or plain file `name` (opened without following a
    /// link, then `fchmod`); a link is left alone (`ELOOP`).
    pub fn set_mode(&self, name: &OsStr, mode: u32) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let c = single(name)?;
        let fd = open_at(
            &self.fd,
            &c,
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )?;
        // fchmod refuses an O_PATH descriptor: go through its /proc name, which names that
        // very inode (no path is resolved again).
        let proc = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        if !matches!(self.stat(name)?.kind, Kind::File | Kind::Dir) {
            return Err(io::Error::from_raw_os_error(libc::ELOOP));
        }
        std::fs::set_permissions(&proc, std::fs::Permissions::from_mode(mode & 0o7777))
    }

    /// The whole `stat` of the entry `name`, not following it (`fstatat`, `AT_SYMLINK_NOFOLLOW`):
    /// for callers that need the inode, change time or device number too.
    pub fn lstat(&self, name: &OsStr) -> io::Result<libc::stat> {
        let name = single(name)?;
        // SAFETY: a zeroed `stat` is a valid out-parameter; fstatat fills it on success.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `self.fd` is an open folder, `name` a NUL-terminated component, `st` ours.
        let r = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                name.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st)
    }

    /// The text of the link `name` (`readlinkat`), never followed.
    pub fn read_link(&self, name: &OsStr) -> io::Result<PathBuf> {
        let c = single(name)?;
        let mut buf = vec![0u8; 4096];
        // SAFETY: an open folder, a NUL-terminated component, a buffer and its length.
        let n = unsafe {
            libc::readlinkat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
        buf.truncate(n);
        Ok(PathBuf::from(OsString::from_vec(buf)))
    }

    /// The extended attribute `key` of this folder itself (`fgetxattr`); None when absent or
    /// unreadable.
    pub fn xattr(&self, key: &CStr) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; 256];
        // SAFETY: an open descriptor, a NUL-terminated key, a buffer and its length.
        let n = unsafe {
            libc::fgetxattr(
                self.fd.as_raw_fd(),
                key.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        let n = usize::try_from(n).ok()?;
        buf.truncate(n);
        Some(buf)
    }

    /// The names of this folder's entries (without `.` and `..`), unsorted, nothing followed.
    pub fn names(&self) -> io::Result<Vec<OsString>> {
        self.entries_raw()
    }

    /// fsyncs the folder so a rename or a new entry in it is durable; errors are ignored (some
    /// filesystems refuse it, and the data itself was already synced).
    pub fn sync(&self) {
        // SAFETY: fsync on a descriptor we own.
        let _ = unsafe { libc::fsync(self.fd.as_raw_fd()) };
    }
}

/// The first level of `path` beneath its anchor (see [`split`]) that is a symbolic link, if any:
/// what an `ELOOP` from a [`Dir`] operation was about.
pub fn first_link(path: &Path) -> Option<PathBuf> {
    let (anchor, rel) = split(path);
    let mut at = anchor;
    for c in rel.components() {
        at.push(c);
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return Some(at);
        }
    }
    None
}

const DIR_FLAGS: libc::c_int =
    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

/// Anchors opened so far (at most [`ANCHORS_KEPT`], newest last), so a write resolves only the
/// levels beneath its anchor: the anchor is trusted, and a folder stays the same folder while
/// open (renamed or not). Opened close-on-exec, so no command inherits one.
static ANCHORS: std::sync::Mutex<Vec<(PathBuf, std::sync::Arc<OwnedFd>)>> =
    std::sync::Mutex::new(Vec::new());
const ANCHORS_KEPT: usize = 8;

/// The anchor's folder: a kept descriptor when one is open, else opened (see [`open_anchor`]).
fn anchor_fd(anchor: &Path) -> io::Result<std::sync::Arc<OwnedFd>> {
    let mut kept = ANCHORS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, fd)) = kept.iter().find(|(p, _)| p == anchor) {
        return Ok(fd.clone());
    }
    let fd = std::sync::Arc::new(open_anchor(anchor)?);
    if kept.len() >= ANCHORS_KEPT {
        kept.remove(0);
    }
    kept.push((anchor.to_path_buf(), fd.clone()));
    Ok(fd)
}

/// Drops the kept descriptor of `anchor`, if any.
fn forget_anchor(anchor: &Path) {
    let mut kept = ANCHORS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    kept.retain(|(p, _)| p != anchor);
}

/// Opens the anchor itself, following links (it is the person's, above tern's folders).
fn open_anchor(anchor: &Path) -> io::Result<OwnedFd> {
    let p = if anchor.as_os_str().is_empty() {
        Path::new(".")
    } else {
        anchor
    };
    let c = cstr(p.as_os_str())?;
    // SAFETY: `c` is a NUL-terminated path; the result is checked below.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by open and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens the folder `rel` (plain components) beneath `base` without following a link.
fn beneath(base: &OwnedFd, rel: &Path) -> io::Result<OwnedFd> {
    #[cfg(target_os = "linux")]
    if let Some(r) = openat2::open(base, rel) {
        return r;
    }
    walk(base, rel)
}

/// [`beneath`] one level at a time, each `openat` with `O_NOFOLLOW` (kernels without
/// `openat2`, other systems).
fn walk(base: &OwnedFd, rel: &Path) -> io::Result<OwnedFd> {
    let mut fd = base.try_clone()?;
    for c in rel.components() {
        let Component::Normal(n) = c else {
            return Err(io::Error::from_raw_os_error(libc::EXDEV));
        };
        fd = open_at(&fd, &cstr(n)?, DIR_FLAGS)?;
    }
    Ok(fd)
}

/// Opens `name` in `dir` with `flags`. `O_DIRECTORY | O_NOFOLLOW` on a link fails with
/// `ENOTDIR`; that is reported as `ELOOP`, as openat2 reports it, so callers see one error.
fn open_at(dir: &OwnedFd, name: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: `dir` is an open folder and `name` NUL-terminated; the result is checked.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOTDIR) {
            // SAFETY: a zeroed `stat` is a valid out-parameter for fstatat.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: as above; `st` is ours.
            let r = unsafe {
                libc::fstatat(
                    dir.as_raw_fd(),
                    name.as_ptr(),
                    &mut st,
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            };
            if r == 0 && st.st_mode & libc::S_IFMT == libc::S_IFLNK {
                return Err(io::Error::from_raw_os_error(libc::ELOOP));
            }
        }
        return Err(e);
    }
    // SAFETY: `fd` was just returned by openat and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(target_os = "linux")]
mod openat2 {
    use super::*;
    use std::sync::atomic::{AtomicU8, Ordering};

    /// `struct open_how` of linux/openat2.h (libc's is non-exhaustive).
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }

    /// 0 not tried yet, 1 the kernel has openat2, 2 it has not.
    static HAVE: AtomicU8 = AtomicU8::new(0);

    /// `openat2(base, rel, O_DIRECTORY, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`;
    /// None when the kernel (or a seccomp filter around tern) does not offer the call.
    pub(super) fn open(base: &OwnedFd, rel: &Path) -> Option<io::Result<OwnedFd>> {
        if HAVE.load(Ordering::Relaxed) == 2 {
            return None;
        }
        let c = match cstr(rel.as_os_str()) {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        let how = OpenHow {
            // RESOLVE_NO_SYMLINKS covers the last level too (ELOOP); with O_NOFOLLOW as well
            // a link there would be ENOTDIR instead.
            flags: (libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64,
            mode: 0,
            resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS,
        };
        for _ in 0..8 {
            // SAFETY: openat2 with an open folder, a NUL-terminated path and a struct of the
            // size passed; the result is checked below.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_openat2,
                    base.as_raw_fd(),
                    c.as_ptr(),
                    &how as *const OpenHow,
                    std::mem::size_of::<OpenHow>(),
                )
            };
            if fd >= 0 {
                HAVE.store(1, Ordering::Relaxed);
                // SAFETY: `fd` was just returned by openat2 and is owned by nobody else.
                return Some(Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) }));
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                // A rename raced the lookup: the kernel asks to try again.
                Some(libc::EAGAIN) => continue,
                Some(libc::ENOSYS) | Some(libc::EPERM) if HAVE.load(Ordering::Relaxed) != 1 => {
                    HAVE.store(2, Ordering::Relaxed);
                    return None;
                }
                _ => return Some(Err(e)),
            }
        }
        Some(Err(io::Error::from_raw_os_error(libc::EAGAIN)))
    }
}

fn cstr(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| io::Error::other("a path holds a NUL byte"))
}

/// `name` as one plain path component (no `/`, not `.` or `..`).
fn single(name: &OsStr) -> io::Result<CString> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
        return Err(io::Error::other(format!(
            "{:?} is not a file name",
            name.to_string_lossy()
        )));
    }
    cstr(name)
}

fn stat_of(st: &libc::stat) -> Stat {
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => Kind::File,
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFLNK => Kind::Link,
        _ => Kind::Other,
    };
    let secs = u64::try_from(st.st_mtime).unwrap_or(0);
    let nanos = u32::try_from(st.st_mtime_nsec)
        .unwrap_or(0)
        .min(999_999_999);
    // st_mode is u16 on some Unixes, u32 on Linux.
    #[allow(clippy::useless_conversion)]
    let mode = u32::from(st.st_mode) & 0o7777;
    Stat {
        kind,
        len: u64::try_from(st.st_size).unwrap_or(0),
        modified: UNIX_EPOCH + Duration::new(secs, nanos),
        mode,
    }
}

/// A hard-to-guess name part: process id, time and a per-process counter mixed by std's
/// randomly keyed hasher (`O_EXCL` makes a collision a retry, never a shared file).
fn random_part() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u64(N.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("{:012x}", h.finish() & 0xffff_ffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::fs::symlink;

    #[test]
    fn split_anchors_above_the_state_folder() {
        let s = |p: &str| {
            let (a, r) = split(Path::new(p));
            (a.display().to_string(), r.display().to_string())
        };
        assert_eq!(
            s("/w/.tern/sessions/x/spill"),
            ("/w".into(), ".tern/sessions/x/spill".into())
        );
        assert_eq!(s("/w/.tern/history"), ("/w".into(), ".tern/history".into()));
        assert_eq!(
            s("/srv/state/sessions/x/agents/y/archive/a.md"),
            (
                "/srv".into(),
                "state/sessions/x/agents/y/archive/a.md".into()
            )
        );
        assert_eq!(s("/tmp/a/b"), ("/tmp/a".into(), "b".into()));
        assert_eq!(
            s("/h/.tern/w/.tern/current"),
            ("/h/.tern/w".into(), ".tern/current".into())
        );
    }

    /// Both resolvers refuse a link at any level and open plain folders.
    #[test]
    fn links_refused_at_every_level_by_both_resolvers() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("ws");
        let outside = d.path().join("outside");
        std::fs::create_dir_all(ws.join(".tern/sessions/s1/spill")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        symlink(&outside, ws.join(".tern/sessions/s1/archive")).unwrap();
        let base = open_anchor(&ws).unwrap();
        for open in [walk, beneath] {
            assert!(open(&base, Path::new(".tern/sessions/s1/spill")).is_ok());
            let e = open(&base, Path::new(".tern/sessions/s1/archive")).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
            let e = open(&base, Path::new(".tern/sessions/s1/archive/x")).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
        }
        let e = Dir::create(&ws.join(".tern/sessions/s1/archive/deeper")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        assert_eq!(
            first_link(&ws.join(".tern/sessions/s1/archive/deeper")),
            Some(ws.join(".tern/sessions/s1/archive"))
        );
    }

    /// A kept anchor removed and made anew at its path: the new folder is used.
    #[test]
    fn a_removed_anchor_is_opened_anew() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("ws");
        std::fs::create_dir_all(ws.join(".tern/sessions")).unwrap();
        Dir::open(&ws.join(".tern/sessions")).unwrap();
        std::fs::remove_dir_all(&ws).unwrap();
        std::fs::create_dir_all(ws.join(".tern/sessions")).unwrap();
        let dir = Dir::open(&ws.join(".tern/sessions")).unwrap();
        dir.open_file(OsStr::new("x"), libc::O_CREAT | libc::O_WRONLY, 0o600)
            .unwrap();
        assert!(ws.join(".tern/sessions/x").is_file());
    }

    #[test]
    fn files_made_renamed_and_removed_in_place() {
        let d = tempfile::tempdir().unwrap();
        let dir = Dir::create(&d.path().join(".tern/sessions/s/spill")).unwrap();
        let (mut f, name) = dir.create_unique("out-", ".log").unwrap();
        f.write_all(b"hi").unwrap();
        let outside = d.path().join("target");
        std::fs::write(&outside, b"keep").unwrap();
        symlink(&outside, dir.path().join("l")).unwrap();
        let e = dir
            .open_file(OsStr::new("l"), libc::O_RDWR | libc::O_APPEND, 0)
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
        assert_eq!(dir.stat(OsStr::new("l")).unwrap().kind, Kind::Link);
        // A rename over the link replaces it; the target keeps its bytes.
        dir.rename(&name, &dir, OsStr::new("l")).unwrap();
        let mut s = String::new();
        dir.open_file(OsStr::new("l"), libc::O_RDONLY, 0)
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "hi");
        assert_eq!(std::fs::read(&outside).unwrap(), b"keep");
        let names: Vec<_> = dir.entries().unwrap().into_iter().map(|e| e.0).collect();
        assert_eq!(names, vec![OsString::from("l")]);
        dir.remove_file(OsStr::new("l")).unwrap();
        assert!(dir.entries().unwrap().is_empty());
        assert!(
            dir.open_file(OsStr::new("../x"), libc::O_RDONLY, 0)
                .is_err()
        );
    }
}
