//! File primitives every state file goes through: atomic whole-file writes, whole-line JSONL
//! appends, tolerant JSONL reads, and refusal to follow planted symlinks. Every create, append,
//! rename and remove is made through a [`Dir`] handle, so no level of the path is followed when
//! it is a link (see [`super::dirfd`]).

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::dirfd::{Dir, Kind};

use serde::de::DeserializeOwned;

/// Errors unless `path` is absent or a real (non-symlink) file or directory. Used on every folder
/// and file tern writes inside `.tern/`, so a symlink planted there is never written through.
pub fn refuse_symlink(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(io::Error::other(format!(
            "refusing to use {}: it is a symbolic link (tern never writes through links in its state folder)",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// Creates `dir` (and parents) unless present, refusing a symlink or a file in its place (at
/// any level beneath the state folder's anchor, see [`super::dirfd::split`]).
pub fn ensure_dir(dir: &Path) -> io::Result<()> {
    Dir::create(dir).map(drop).map_err(|e| with_path(e, dir))
}

/// The folder holding `path` and `path`'s file name, the folder opened without following links.
fn parent_of(path: &Path) -> io::Result<(Dir, &OsStr)> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::other(format!(
            "{} has no parent folder",
            path.display()
        )));
    };
    Ok((Dir::open(dir).map_err(|e| with_path(e, path))?, name))
}

/// Opens the file `path` with `flags` (`libc::O_*`; `O_CREAT` makes it with `mode` less the
/// umask), never through a link at any level (see [`super::dirfd`]). For lock and lease files.
/// Always opened with `O_NONBLOCK` and refused unless a plain file ([`plain`]): a FIFO planted at
/// a lock would otherwise block `open(2)` itself, beyond the reach of SIGTERM.
pub fn open_file(path: &Path, flags: libc::c_int, mode: u32) -> io::Result<File> {
    let (dir, name) = parent_of(path)?;
    let f = match dir.open_file(name, flags | libc::O_NONBLOCK, mode) {
        Ok(f) => f,
        // A FIFO opened write-only without a reader: ENXIO under O_NONBLOCK.
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => return Err(not_plain(path)),
        Err(e) => return Err(with_path(e, path)),
    };
    plain(&f, path)?;
    Ok(f)
}

/// Creates a new file `<prefix><random><suffix>` in `dir` (made when absent), mode 0600, never
/// through a link; returns it open for writing and its path. The spill files of the bash tool.
pub fn create_unique(dir: &Path, prefix: &str, suffix: &str) -> io::Result<(File, PathBuf)> {
    let d = Dir::create(dir).map_err(|e| with_path(e, dir))?;
    let (f, name) = d
        .create_unique(prefix, suffix)
        .map_err(|e| with_path(e, dir))?;
    Ok((f, dir.join(name)))
}

/// Removes the file `path` (a link is removed itself, never its target); the folders above it
/// are not followed when they are links.
pub fn remove_file(path: &Path) -> io::Result<()> {
    let (dir, name) = parent_of(path)?;
    dir.remove_file(name).map_err(|e| with_path(e, path))
}

/// Renames `from` to `to` (`renameat`: neither the names nor the folders above them are
/// followed when links; a link at `to` is replaced, its target untouched).
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    let (fdir, fname) = parent_of(from)?;
    let (tdir, tname) = parent_of(to)?;
    fdir.rename(fname, &tdir, tname)
        .map_err(|e| with_path(e, from))?;
    tdir.sync();
    Ok(())
}

/// The plain files of `dir` as (name, size, modification time), links and folders left out;
/// empty when `dir` is absent. `dir` is not followed when it is a link (an error).
pub fn list_files(dir: &Path) -> io::Result<Vec<(String, u64, std::time::SystemTime)>> {
    let d = match Dir::open(dir) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(with_path(e, dir)),
    };
    Ok(d.entries()
        .map_err(|e| with_path(e, dir))?
        .into_iter()
        .filter(|(_, st)| st.kind == Kind::File)
        .map(|(n, st)| (n.to_string_lossy().into_owned(), st.len, st.modified))
        .collect())
}

/// The error for `path`, a file (or anything but a folder) where tern needs a folder.
pub(crate) fn not_a_folder(path: &Path, kind: io::ErrorKind) -> io::Error {
    io::Error::new(
        kind,
        format!(
            "{} exists and is not a folder: tern keeps its state in a folder there (move the file, or pass --state-dir)",
            path.display()
        ),
    )
}

/// The prefix of every atomic write's tempfile: a crash between its creation and its rename leaves
/// one, removed by [`remove_stray_temps`] when the session is next held.
pub const TEMP_PREFIX: &str = ".tmp-";

/// Fault injection for the crash-consistency suite, compiled into debug builds only (what
/// `cargo test` runs): every write, fsync, rename and link of the state folder passes a point.
/// With `TERN_FAULT_AT=N` the process kills itself with SIGKILL at the N-th point (1-based; a
/// `torn` point first writes half of its line); with `TERN_FAULT_LOG=FILE` each point appends
/// `kind path` to FILE, so a dry run counts them. Release builds compile this to nothing.
#[cfg(debug_assertions)]
pub mod fault {
    use std::path::Path;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};

    static COUNT: AtomicU64 = AtomicU64::new(0);

    fn at() -> Option<u64> {
        static AT: OnceLock<Option<u64>> = OnceLock::new();
        *AT.get_or_init(|| std::env::var("TERN_FAULT_AT").ok()?.trim().parse().ok())
    }

    /// Passes one point; true when this is the point to die at (the caller may do a partial
    /// write first, then calls [`die`]).
    pub fn hit(kind: &str, path: &Path) -> bool {
        let n = COUNT.fetch_add(1, Ordering::SeqCst) + 1;
        if let Ok(log) = std::env::var("TERN_FAULT_LOG") {
            use std::io::Write;
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
            {
                let _ = writeln!(f, "{n} {kind} {}", path.display());
            }
        }
        at() == Some(n)
    }

    /// Dies now, as a crash would: no destructor, no flush.
    pub fn die() -> ! {
        // SAFETY: kill(2) on our own pid; SIGKILL cannot be caught, so this never returns.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        std::process::abort()
    }

    /// A point where the process may die before the next step.
    pub fn point(kind: &str, path: &Path) {
        if hit(kind, path) {
            die();
        }
    }

    /// [`hit`] for a write to the open file `f`: the log names its path (from /proc, looked up
    /// only when logging), so an append point says which JSONL file it was.
    pub fn hit_in(kind: &str, f: &std::fs::File) -> bool {
        use std::os::fd::AsRawFd;
        let path = match std::env::var_os("TERN_FAULT_LOG") {
            Some(_) => std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd()))
                .unwrap_or_else(|_| "append".into()),
            None => "append".into(),
        };
        hit(kind, &path)
    }

    /// [`point`] for a write to the open file `f` (see [`hit_in`]).
    pub fn point_in(kind: &str, f: &std::fs::File) {
        if hit_in(kind, f) {
            die();
        }
    }

    /// With `TERN_FAULT_FULL=NAME,…`, whether a write to a file named one of NAME must fail as a
    /// full disk would (`ENOSPC`): a disk that refuses only some records (issue 46).
    pub fn full(name: &std::ffi::OsStr) -> bool {
        std::env::var("TERN_FAULT_FULL").is_ok_and(|v| {
            v.split(',')
                .any(|n| !n.is_empty() && std::ffi::OsStr::new(n) == name)
        })
    }

    /// [`full`] for the open file `f` (its name from /proc, looked up only when set).
    pub fn full_in(f: &std::fs::File) -> bool {
        use std::os::fd::AsRawFd;
        std::env::var_os("TERN_FAULT_FULL").is_some()
            && std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd()))
                .ok()
                .and_then(|p| p.file_name().map(full))
                .unwrap_or(false)
    }
}

/// A no-op in release builds (see the debug `fault` module).
#[cfg(not(debug_assertions))]
pub mod fault {
    use std::path::Path;
    /// Never a fault point to die at.
    #[inline(always)]
    pub fn hit(_kind: &str, _path: &Path) -> bool {
        false
    }
    /// Unreachable in release builds.
    pub fn die() -> ! {
        std::process::abort()
    }
    /// Nothing.
    #[inline(always)]
    pub fn point(_kind: &str, _path: &Path) {}
    /// Never a fault point to die at.
    #[inline(always)]
    pub fn hit_in(_kind: &str, _f: &std::fs::File) -> bool {
        false
    }
    /// Nothing.
    #[inline(always)]
    pub fn point_in(_kind: &str, _f: &std::fs::File) {}
    /// Never a full disk of its own making.
    #[inline(always)]
    pub fn full(_name: &std::ffi::OsStr) -> bool {
        false
    }
    /// Never a full disk of its own making.
    #[inline(always)]
    pub fn full_in(_f: &std::fs::File) -> bool {
        false
    }
}

/// Writes `bytes` to `path` atomically: a uniquely named tempfile (mode 0600) in the same
/// folder, fsync, rename over `path`, fsync of the folder (so the rename itself survives a power
/// cut). A symlink at `path` is replaced, never followed, and so is none of the folders above it
/// (see [`super::dirfd`]). Concurrent writers each use their own tempfile, so no write is torn
/// and no stray file is left on success or failure; a crash may leave a tempfile, which
/// [`remove_stray_temps`] removes.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let (dir, name) = parent_of(path)?;
    atomic_write_in(&dir, name, bytes, Perm::Private).map_err(|e| with_path(e, path))
}

/// The permission bits of a file [`atomic_write_in`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Perm {
    /// 0600: tern's own records.
    Private,
    /// As a shell's `>` leaves them: an existing file keeps its own bits, a new one gets 0666
    /// less the umask (a file the person named, such as `--output-last-message`).
    LikeShell,
}

/// The one link-safe writer: `bytes` into the entry `name` of the open folder `dir`, atomically
/// (a new temporary file there, `O_EXCL|O_NOFOLLOW`, write, fsync, `renameat` over the name,
/// then the folder fsynced). A link planted at `name` is replaced, never followed; the folder
/// is the one `dir` holds even if its path was swapped meanwhile. The temporary file is removed
/// on failure. Errors: as the system calls (`ENOENT` when the folder was removed).
pub fn atomic_write_in(dir: &Dir, name: &OsStr, bytes: &[u8], perm: Perm) -> io::Result<()> {
    let path = dir.path().join(name);
    if fault::full(name) {
        return Err(io::Error::from_raw_os_error(libc::ENOSPC));
    }
    fault::point("create", &path);
    let existing = match perm {
        Perm::Private => None,
        Perm::LikeShell => dir
            .stat(name)
            .ok()
            .filter(|s| s.kind == Kind::File)
            .map(|s| s.mode),
    };
    let (mut tmp, tmp_name) = match perm {
        Perm::Private => dir.create_unique(TEMP_PREFIX, "")?,
        Perm::LikeShell => dir.create_unique_mode(TEMP_PREFIX, "", 0o666)?,
    };
    let written = (|| {
        if let Some(mode) = existing {
            use std::os::unix::fs::PermissionsExt;
            tmp.set_permissions(fs::Permissions::from_mode(mode))?;
        }
        fault::point("write", &path);
        tmp.write_all(bytes)?;
        fault::point("fsync", &path);
        tmp.sync_all()?;
        fault::point("rename", &path);
        dir.rename(&tmp_name, dir, name)
    })();
    if let Err(e) = written {
        let _ = dir.remove_file(&tmp_name);
        return Err(e);
    }
    fault::point("renamed", &path);
    dir.sync();
    Ok(())
}

/// [`atomic_write`] without the two fsyncs, for a cache: a file whose loss or staleness costs
/// only time, because its reader checks it against what it describes (the checkpoint store's
/// memory of its index). A reader sees the old file or the new one; after a power cut, either,
/// or none.
pub fn replace_cache(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let (dir, name) = parent_of(path)?;
    let (mut tmp, tmp_name) = dir
        .create_unique(TEMP_PREFIX, "")
        .map_err(|e| with_path(e, path))?;
    let written = (|| {
        fault::point("write", path);
        tmp.write_all(bytes)?;
        fault::point("rename", path);
        dir.rename(&tmp_name, &dir, name)
    })();
    if let Err(e) = written {
        let _ = dir.remove_file(&tmp_name);
        return Err(with_path(e, path));
    }
    fault::point("renamed", path);
    Ok(())
}

/// Copies `src` to `dst` as a file of its own (an atomic write of its bytes), so `dst` never
/// shares an inode with `src`; nothing happens when `src` is absent.
pub fn copy_atomic(src: &Path, dst: &Path) -> io::Result<()> {
    match fs::read(src) {
        Ok(bytes) => atomic_write(dst, &bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(with_path(e, src)),
    }
}

/// fsyncs a folder so a rename or a new file in it is durable; errors are ignored (some
/// filesystems refuse it, and the data itself was already synced).
pub fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Removes the tempfiles a crash left in `dir` (not in its subfolders). The caller holds the
/// lock every atomic write into `dir` is made under, so none of them is in flight. Returns how
/// many were removed.
pub fn remove_stray_temps(dir: &Path) -> io::Result<usize> {
    let mut n = 0;
    let d = match Dir::open(dir) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(with_path(e, dir)),
    };
    for (name, st) in d.entries().map_err(|e| with_path(e, dir))? {
        // A link of that name is not a tempfile of ours: left alone, its target never touched.
        if name.to_string_lossy().starts_with(TEMP_PREFIX) && st.kind == Kind::File {
            let path = dir.join(&name);
            fault::point("remove", &path);
            d.remove_file(&name).map_err(|err| with_path(err, &path))?;
            n += 1;
        }
    }
    Ok(n)
}

/// Removes the half-built folders (`.tmp-*`) a killed creation left in `dir` (not deeper), with
/// everything in them. The caller holds the lock every creation in `dir` is made under, or knows
/// no creation there is in flight. Returns how many were removed.
pub fn remove_stray_folders(dir: &Path) -> io::Result<usize> {
    let mut n = 0;
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(with_path(e, dir)),
    };
    for e in rd.flatten() {
        // `file_type` does not follow a link: a planted link is never followed into.
        if e.file_name().to_string_lossy().starts_with(TEMP_PREFIX)
            && e.file_type().is_ok_and(|t| t.is_dir())
        {
            fault::point("remove", &e.path());
            fs::remove_dir_all(e.path()).map_err(|err| with_path(err, &e.path()))?;
            n += 1;
        }
    }
    Ok(n)
}

/// Renames the folder `from` to `to` (which must not exist) and fsyncs their parent, so the
/// rename survives a power cut: the commit point of a folder built under a temporary name.
pub fn rename_folder(from: &Path, to: &Path) -> io::Result<()> {
    if fs::symlink_metadata(to).is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} already exists", to.display()),
        ));
    }
    if let Ok(d) = File::open(from) {
        let _ = d.sync_all();
    }
    fault::point("rename", to);
    fs::rename(from, to).map_err(|e| with_path(e, to))?;
    fault::point("renamed", to);
    if let Some(parent) = to.parent() {
        sync_dir(parent);
    }
    Ok(())
}

/// Opens `path` for appending, creating it if absent, without following a symlink at it or at
/// any folder above it beneath the state folder's anchor (see [`super::dirfd`]). Anything but a
/// plain file is refused (opened without blocking, so a FIFO cannot hang tern).
pub fn open_append(path: &Path) -> io::Result<File> {
    open_file(path, libc::O_CREAT | libc::O_APPEND | libc::O_RDWR, 0o666)
}

/// Errors unless the open `f` is a plain file: tern's state files are never FIFOs, devices or
/// folders (a FIFO would block every reader and writer).
pub fn plain(f: &File, path: &Path) -> io::Result<()> {
    let meta = f.metadata().map_err(|e| with_path(e, path))?;
    if meta.is_file() {
        return Ok(());
    }
    Err(not_plain(path))
}

/// The refusal of a FIFO, device or folder where tern expects a plain file.
fn not_plain(path: &Path) -> io::Error {
    io::Error::other(format!(
        "{} is not a plain file (a FIFO, a device or a folder): tern keeps its state in plain files only; remove it",
        path.display()
    ))
}

/// Appends one JSON line (`line` must not contain a newline) in a single write. If the file ends
/// in a torn line (no final newline, e.g. after a crash), a newline is written first so the new
/// line stays whole and the torn fragment remains its own skippable line. Callers hold the
/// session lock so lines from several processes never interleave.
pub fn append_line(path: &Path, line: &str) -> io::Result<()> {
    let mut f = open_append(path)?;
    let len = f.metadata().map_err(|e| with_path(e, path))?.len();
    append_to(&mut f, len, line)
        .map(|_| ())
        .map_err(|e| with_path(e, path))
}

/// [`append_line`] on a file already opened with [`open_append`] whose length is `len`; returns
/// the new length. A write that fails part way (a full disk) is cut back to `len`, so the file
/// never keeps half a line; the error is returned.
pub fn append_to(f: &mut File, len: u64, line: &str) -> io::Result<u64> {
    let mut buf = Vec::with_capacity(line.len() + 2);
    if len > 0 {
        let mut last = [0u8; 1];
        f.seek(SeekFrom::Start(len - 1))?;
        f.read_exact(&mut last)?;
        if last[0] != b'\n' {
            buf.push(b'\n');
        }
    }
    buf.extend_from_slice(line.as_bytes());
    buf.push(b'\n');
    if fault::full_in(f) {
        return Err(io::Error::from_raw_os_error(libc::ENOSPC));
    }
    if fault::hit_in("torn", f) {
        // A crash in the middle of the write: half a line reaches the file.
        let _ = f.write_all(&buf[..buf.len() / 2]);
        fault::die();
    }
    if let Err(e) = f.write_all(&buf) {
        let _ = f.set_len(len);
        return Err(e);
    }
    fault::point_in("appended", f);
    Ok(len + buf.len() as u64)
}

/// Serializes `value` as one compact JSON line (no newline). U+2028 and U+2029 are escaped too:
/// they are valid inside JSON strings, but some line splitters treat them as line ends (case C20).
pub fn to_jsonl<T: serde::Serialize + ?Sized>(value: &T) -> io::Result<String> {
    let s = serde_json::to_string(value).map_err(io::Error::other)?;
    if s.contains(['\u{2028}', '\u{2029}']) {
        return Ok(s
            .replace('\u{2028}', "\\u2028")
            .replace('\u{2029}', "\\u2029"));
    }
    Ok(s)
}

/// Reads a whole small file as UTF-8 text (None when absent), refusing symlinks.
pub fn read_text(path: &Path) -> io::Result<Option<String>> {
    match read_prefix(path, usize::MAX)? {
        Some((b, _)) => String::from_utf8(b)
            .map(Some)
            .map_err(|_| io::Error::other(format!("{} is not valid UTF-8", path.display()))),
        None => Ok(None),
    }
}

/// Reads at most `max` bytes from the start of a file (None when absent), refusing symlinks and
/// anything but a plain file (opened without blocking, so a FIFO cannot hang the reader). Returns
/// the bytes and the file's size from its metadata (at least the number of bytes read), so a huge
/// file costs `max` bytes of memory, never its size.
pub fn read_prefix(path: &Path, max: usize) -> io::Result<Option<(Vec<u8>, u64)>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    refuse_symlink(path)?;
    let file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(with_path(e, path)),
    };
    plain(&file, path)?;
    let meta = file.metadata().map_err(|e| with_path(e, path))?;
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(max).min(max));
    file.take(u64::try_from(max).unwrap_or(u64::MAX))
        .read_to_end(&mut bytes)
        .map_err(|e| with_path(e, path))?;
    let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    Ok(Some((bytes, meta.len().max(read))))
}

/// The last `max` bytes of a file (None when absent) and the file's size, refusing symlinks
/// and anything but a plain file: a reader of the newest records pays for them, not for the
/// file.
pub fn read_suffix(path: &Path, max: u64) -> io::Result<Option<(Vec<u8>, u64)>> {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;
    refuse_symlink(path)?;
    let mut file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(with_path(e, path)),
    };
    plain(&file, path)?;
    let len = file.metadata().map_err(|e| with_path(e, path))?.len();
    let mut bytes = Vec::new();
    file.seek(SeekFrom::Start(len.saturating_sub(max)))
        .and_then(|_| file.take(max).read_to_end(&mut bytes))
        .map_err(|e| with_path(e, path))?;
    Ok(Some((bytes, len)))
}

/// The last whole line of a JSONL file (without its newline; a torn last line is skipped, as
/// [`read_jsonl`] skips it), reading only its tail: 64 KiB from the end, the whole file when the
/// line is longer. None when the file is absent or holds no whole line. Refuses symlinks and
/// anything but a plain file.
pub fn last_line(path: &Path) -> io::Result<Option<Vec<u8>>> {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;
    const TAIL: u64 = 64 << 10;
    refuse_symlink(path)?;
    let mut file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(with_path(e, path)),
    };
    plain(&file, path)?;
    let len = file.metadata().map_err(|e| with_path(e, path))?.len();
    let mut from = len.saturating_sub(TAIL);
    loop {
        let mut bytes = Vec::new();
        file.seek(SeekFrom::Start(from))
            .and_then(|_| file.read_to_end(&mut bytes))
            .map_err(|e| with_path(e, path))?;
        // Only what ends in a newline is whole.
        let Some(end) = bytes.iter().rposition(|&b| b == b'\n') else {
            if from == 0 {
                return Ok(None);
            }
            // One long (or torn) line fills the tail: read it all.
            from = 0;
            continue;
        };
        let whole = &bytes[..end];
        match whole.iter().rposition(|&b| b == b'\n') {
            Some(start) => return Ok(Some(whole[start + 1..].to_vec())),
            None if from == 0 => return Ok(Some(whole.to_vec())),
            // The line started before the tail: read it all.
            None => from = 0,
        }
    }
}

/// Reads at most `max` bytes of a file a person or a project controls (a config, a hooks file,
/// an instruction file, an inbox entry); None when absent. Links are followed (a dotfile may be
/// one), but the file is opened with `O_NONBLOCK` and refused unless it is a regular file, so a
/// FIFO or a device answers at once instead of hanging tern. Errors keep the OS error's kind
/// (callers treat `ENOTDIR` as absent) and do not name the path (callers do); a non-regular file
/// is `not a regular file (a FIFO, a device or a folder)`.
pub fn read_regular(path: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !file.metadata()?.is_file() {
        return Err(io::Error::other(
            "not a regular file (a FIFO, a device or a folder)",
        ));
    }
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

/// Reads and parses a JSON state file (None when absent). A file that does not parse is an error
/// naming the file, never a panic.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> io::Result<Option<T>> {
    match read_text(path)? {
        None => Ok(None),
        Some(t) => serde_json::from_str(&t)
            .map(Some)
            .map_err(|e| io::Error::other(format!("{} does not parse: {e}", path.display()))),
    }
}

/// The result of reading a JSONL file: the parsed lines, and the lines that were skipped.
#[derive(Debug)]
pub struct JsonlRead<T> {
    /// Every line that parsed, in file order.
    pub items: Vec<T>,
    /// 1-based numbers of lines that did not parse (a torn last line after a crash, or damage).
    pub skipped: Vec<usize>,
    /// True when the last line had no final newline and did not parse (a torn write).
    pub torn_tail: bool,
}

/// Reads a JSONL file (empty result when absent). Lines that do not parse are skipped and
/// reported, never fatal: a torn last line is what a crash mid-append leaves.
pub fn read_jsonl<T: DeserializeOwned>(path: &Path) -> io::Result<JsonlRead<T>> {
    let bytes = read_prefix(path, usize::MAX)?
        .map(|(b, _)| b)
        .unwrap_or_default();
    let mut out = JsonlRead {
        items: Vec::new(),
        skipped: Vec::new(),
        torn_tail: false,
    };
    let ends_clean = bytes.last().is_none_or(|b| *b == b'\n');
    let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    let n = lines.len();
    for (i, line) in lines.into_iter().enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<T>(line) {
            Ok(v) => out.items.push(v),
            Err(_) => {
                out.skipped.push(i + 1);
                if i + 1 == n && !ends_clean {
                    out.torn_tail = true;
                }
            }
        }
    }
    Ok(out)
}

/// `e` with `path` named in its message (and a clear refusal for a symbolic link, `ELOOP`).
pub fn with_path(e: io::Error, path: &Path) -> io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        // Name the link itself (`spill`, say), not only the path beneath it.
        let link = super::dirfd::first_link(path).unwrap_or_else(|| path.to_path_buf());
        return io::Error::other(format!(
            "refusing to use {}: it is a symbolic link (tern never writes through links in its state folder)",
            link.display()
        ));
    }
    if e.raw_os_error() == Some(libc::ENOTDIR) {
        // Name the file in the way (`.tern` itself, say), not only the path beneath it.
        if let Some(file) = path
            .ancestors()
            .find(|a| fs::symlink_metadata(a).is_ok_and(|m| !m.is_dir()))
        {
            return not_a_folder(file, e.kind());
        }
        return io::Error::new(
            e.kind(),
            format!(
                "{}: a folder on this path is a file (tern keeps its state in a folder; move the file, or pass --state-dir)",
                path.display()
            ),
        );
    }
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// The space of the file system holding a path, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// Free for an unprivileged user (`f_bavail`).
    pub free: u64,
    /// The file system's size.
    pub total: u64,
    /// Free inodes for an unprivileged user (`f_favail`).
    pub files_free: u64,
    /// Inodes in all (`f_files`; 0 on file systems without a fixed count, e.g. btrfs).
    pub files_total: u64,
}

/// The space of the file system holding `path` (`statvfs(3)`); None when it cannot be read.
pub fn space(path: &Path) -> Option<Space> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills the struct we own from a NUL-terminated path; checked for error.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    let frsize = st.f_frsize as u64;
    (r == 0).then(|| Space {
        free: (st.f_bavail as u64).saturating_mul(frsize),
        total: (st.f_blocks as u64).saturating_mul(frsize),
        files_free: st.f_favail as u64,
        files_total: st.f_files as u64,
    })
}

/// A file's length and modification time: a cheap test for "changed since last read".
pub type FileStamp = (u64, std::time::SystemTime);

/// The stamp of `path`, not following a link (None when absent or unreadable).
pub fn stamp(path: &Path) -> Option<FileStamp> {
    let m = std::fs::symlink_metadata(path).ok()?;
    Some((m.len(), m.modified().ok()?))
}

/// Whether two readers give the same bytes to their ends (read in 64 KiB blocks; any read
/// error counts as different).
pub fn same_content(mut a: impl std::io::Read, mut b: impl std::io::Read) -> bool {
    let (mut x, mut y) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let n = match a.read(&mut x) {
            Ok(n) => n,
            Err(_) => return false,
        };
        if b.read_exact(&mut y[..n]).is_err() || x[..n] != y[..n] {
            return false;
        }
        if n == 0 {
            return b.read(&mut y[..1]).is_ok_and(|m| m == 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_whole_line_is_read_from_the_tail() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("c.jsonl");
        assert_eq!(last_line(&f).unwrap(), None, "absent");
        fs::write(&f, "").unwrap();
        assert_eq!(last_line(&f).unwrap(), None, "empty");
        fs::write(&f, "torn").unwrap();
        assert_eq!(last_line(&f).unwrap(), None, "no whole line");
        fs::write(&f, "one\n").unwrap();
        assert_eq!(last_line(&f).unwrap().as_deref(), Some(&b"one"[..]));
        fs::write(&f, "one\ntwo\nhalf").unwrap();
        assert_eq!(
            last_line(&f).unwrap().as_deref(),
            Some(&b"two"[..]),
            "a torn tail is skipped"
        );
        // A line longer than the tail, and a torn one longer than the tail after it.
        let long = "x".repeat(200 << 10);
        fs::write(&f, format!("one\n{long}\n")).unwrap();
        assert_eq!(last_line(&f).unwrap(), Some(long.clone().into_bytes()));
        fs::write(&f, format!("one\n{long}\n{long}")).unwrap();
        assert_eq!(last_line(&f).unwrap(), Some(long.into_bytes()));
    }

    #[test]
    fn the_link_safe_writer_keeps_a_files_mode_and_replaces_a_planted_link() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let dir = Dir::hold(d.path()).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        // An existing private file stays private (a shell's `>` keeps the mode).
        let f = d.path().join("answer.txt");
        fs::write(&f, "old").unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
        atomic_write_in(&dir, OsStr::new("answer.txt"), b"new", Perm::LikeShell).unwrap();
        assert_eq!(fs::read(&f).unwrap(), b"new");
        assert_eq!(mode(&f), 0o600);
        // tern's own records are 0600 whatever was there.
        atomic_write_in(&dir, OsStr::new("meta.json"), b"{}", Perm::Private).unwrap();
        assert_eq!(mode(&d.path().join("meta.json")), 0o600);
        // A link planted at the name is replaced, its target untouched.
        let target = outside.path().join("victim");
        fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, d.path().join("planted")).unwrap();
        atomic_write_in(&dir, OsStr::new("planted"), b"x", Perm::LikeShell).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"keep");
        assert!(
            !fs::symlink_metadata(d.path().join("planted"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        // The held folder, not whatever its path names later.
        let moved = d.path().with_extension("moved");
        fs::rename(d.path(), &moved).unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path()).unwrap();
        atomic_write_in(&dir, OsStr::new("late"), b"y", Perm::LikeShell).unwrap();
        assert!(moved.join("late").exists());
        assert!(!outside.path().join("late").exists());
        fs::remove_file(d.path()).unwrap();
        fs::rename(&moved, d.path()).unwrap();
        // No temporary file is left behind.
        assert!(
            fs::read_dir(d.path())
                .unwrap()
                .flatten()
                .all(|e| !e.file_name().to_string_lossy().starts_with(TEMP_PREFIX))
        );
    }

    #[test]
    fn append_after_torn_line_keeps_new_line_whole() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.jsonl");
        fs::write(&p, b"{\"a\":1}\n{\"a\":").unwrap();
        append_line(&p, "{\"a\":3}").unwrap();
        let r: JsonlRead<serde_json::Value> = read_jsonl(&p).unwrap();
        assert_eq!(r.items.len(), 2);
        assert_eq!(r.skipped, vec![2]);
        assert!(!r.torn_tail);
    }

    #[test]
    fn c20_line_separators_escaped() {
        let line = to_jsonl(&serde_json::json!({"t": "a\u{2028}b\u{2029}c\nd"})).unwrap();
        assert!(!line.contains('\u{2028}') && !line.contains('\n'));
        let back: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back["t"], "a\u{2028}b\u{2029}c\nd");
    }

    #[test]
    fn torn_tail_reported() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.jsonl");
        fs::write(&p, b"{\"a\":1}\n{\"a\":").unwrap();
        let r: JsonlRead<serde_json::Value> = read_jsonl(&p).unwrap();
        assert_eq!(r.items.len(), 1);
        assert!(r.torn_tail);
    }

    #[test]
    fn a_fifo_is_refused_at_once_by_every_open() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("lock");
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) on a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No reader and no writer: each of these would block in open(2) without O_NONBLOCK.
        for flags in [
            libc::O_RDONLY,
            libc::O_CREAT | libc::O_WRONLY,
            libc::O_CREAT | libc::O_RDWR,
        ] {
            let e = open_file(&p, flags, 0o666).unwrap_err().to_string();
            assert!(e.contains("lock is not a plain file"), "{flags}: {e}");
        }
        let e = read_regular(&p, 10).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let e = read_regular(d.path(), 10).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        assert!(
            read_regular(&d.path().join("absent"), 10)
                .unwrap()
                .is_none()
        );
        std::fs::write(d.path().join("f"), b"0123456789abc").unwrap();
        assert_eq!(
            read_regular(&d.path().join("f"), 10).unwrap().unwrap(),
            b"0123456789"
        );
    }

    #[test]
    fn never_writes_through_symlink() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("target");
        fs::write(&target, b"keep").unwrap();
        let link = d.path().join("link.jsonl");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(append_line(&link, "{}").is_err());
        atomic_write(&link, b"new").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"keep");
        assert_eq!(fs::read(&link).unwrap(), b"new");
        assert!(
            !fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
}
