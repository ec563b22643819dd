//! The state-folder guard (issue 10, item 3): tern's own files in `.tern/` must not change by a
//! command's hand.
//!
//! Landlock rules only ever add rights (its docs: a rule grants access beneath a path, nothing
//! can take a right back below it), so with `.tern/` inside a writable workspace its files
//! cannot be made read-only. The guard detects instead: a [`Snapshot`] of the protected files is
//! taken before a command, compared after it, and the small files are put back from the saved
//! bytes. Files kept as [`Keep::Detect`] (the conversation) or over [`SMALL_FILE_BYTES`] are only
//! detected: the runtime holds their content in memory and rewrites them itself; an append-only
//! log ([`Keep::Append`]) counts only when it is removed, replaced or shrunk.
//!
//! A change is any difference of the `lstat` fingerprint: device, inode, mode, size, and
//! modification and status-change times in nanoseconds. The status-change time (ctime) is set by
//! the kernel on every write, rename, link or `chmod`, and user space cannot set it back (`touch
//! -d` sets mtime, and in doing so updates ctime), so an equal fingerprint means an unchanged
//! file. Hence checking after a command is one `lstat` per file, and only a changed file costs
//! more (figures in BENCHMARKS.md, section 6).
//!
//! Use: `take` before the command (or keep one snapshot for the whole session), `changes` after
//! it, `restore` the changes, and answer the call (the runtime's commands room words it: `commands::GuardReport`). tern's own writes
//! to these files change their fingerprints too: call `refresh` after them, or take a new
//! snapshot before the next command. Checking again before each model request also catches a
//! background process of an earlier command that writes later.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Files up to this size (1 MiB) are copied into the snapshot and restored from it; larger ones
/// are only detected.
pub const SMALL_FILE_BYTES: u64 = 1 << 20;

/// What identifies one version of a file, from `lstat` (a symlink is fingerprinted itself, never
/// its target).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// Device id.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// File type and permission bits (`st_mode`).
    pub mode: u32,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, ns since the Unix epoch.
    pub mtime_ns: i128,
    /// Status-change time, ns since the Unix epoch.
    pub ctime_ns: i128,
}

impl Fingerprint {
    fn of(m: &fs::Metadata) -> Fingerprint {
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Fingerprint {
            dev: m.dev(),
            ino: m.ino(),
            mode: m.mode(),
            size: m.size(),
            mtime_ns: ns(m.mtime(), m.mtime_nsec()),
            ctime_ns: ns(m.ctime(), m.ctime_nsec()),
        }
    }

    fn is_regular(&self) -> bool {
        // POSIX S_IFMT / S_IFREG, the same values on every Unix (libc's are u16 on macOS).
        self.mode & 0o170000 == 0o100000
    }
}

/// How a protected file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// It did not exist and now does.
    Created,
    /// It existed and is gone.
    Removed,
    /// It exists and its fingerprint differs (content, mode, inode or times).
    Modified,
}

impl ChangeKind {
    /// The word for it: `created`, `removed`, `modified`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Created => "created",
            ChangeKind::Removed => "removed",
            ChangeKind::Modified => "modified",
        }
    }
}

/// One protected file that changed since the snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// The file, as given to [`Snapshot::take`].
    pub path: PathBuf,
    /// How.
    pub kind: ChangeKind,
    /// [`Snapshot::restore`] can undo it by itself (the file was small or absent); false for a
    /// large file, which the runtime rewrites from memory.
    pub restorable: bool,
}

/// What [`Snapshot::restore`] did with one change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreOutcome {
    /// Back as it was: the saved bytes rewritten (atomically, by rename, with the saved
    /// permission bits), or a file that had not existed removed.
    Restored,
    /// A large file: left as it is, for the runtime to rewrite from memory.
    NeedsRuntime,
    /// Restoring failed (the error text).
    Failed(String),
}

/// What a snapshot keeps of one protected file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Its bytes while it is small (up to [`SMALL_FILE_BYTES`]): restored by the guard.
    Copy,
    /// Only its fingerprint: a change is detected and the runtime rewrites the file from what
    /// it holds in memory (the conversation: copying it at every step would cost O(history)).
    Detect,
    /// An append-only log that tern itself appends to at any moment (`events.jsonl`): growth is
    /// not a change; removal, replacement (another inode) or shrinking is. Never restorable.
    Append,
}

#[derive(Debug, Clone)]
struct Entry {
    path: PathBuf,
    keep: Keep,
    fp: Option<Fingerprint>,
    bytes: Option<Vec<u8>>,
}

impl Entry {
    fn read(path: PathBuf, keep: Keep) -> Entry {
        let (fp, bytes) = read_state(&path, keep == Keep::Copy);
        Entry {
            path,
            keep,
            fp,
            bytes,
        }
    }

    /// Whether `now` differs from the recorded fingerprint in a way that counts.
    fn differs(&self, now: Option<Fingerprint>) -> bool {
        match (self.keep, self.fp, now) {
            (Keep::Append, Some(a), Some(b)) => a.dev != b.dev || a.ino != b.ino || b.size < a.size,
            (_, a, b) => a != b,
        }
    }
}

/// The state of the protected files at one moment (see the module docs).
#[derive(Debug, Clone)]
pub struct Snapshot {
    entries: Vec<Entry>,
}

/// `lstat` fingerprint (None when absent or not statable) and, for a small regular file, its
/// bytes. The bytes are read through a descriptor opened without following links and checked
/// against its `fstat` before and after, so a file changing meanwhile is kept without bytes
/// (detected later, not restorable) rather than with a torn copy.
fn read_state(path: &Path, copy: bool) -> (Option<Fingerprint>, Option<Vec<u8>>) {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return (None, None);
    };
    let fp = Fingerprint::of(&meta);
    if !copy || !fp.is_regular() || fp.size > SMALL_FILE_BYTES {
        return (Some(fp), None);
    }
    let bytes = (|| -> io::Result<Option<Vec<u8>>> {
        let mut f = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)?;
        if Fingerprint::of(&f.metadata()?) != fp {
            return Ok(None);
        }
        // The size is at most SMALL_FILE_BYTES (1 MiB), so it fits in usize.
        let mut buf = Vec::with_capacity(usize::try_from(fp.size).unwrap_or(0));
        f.read_to_end(&mut buf)?;
        Ok((Fingerprint::of(&f.metadata()?) == fp && buf.len() as u64 == fp.size).then_some(buf))
    })();
    (Some(fp), bytes.ok().flatten())
}

impl Snapshot {
    /// Fingerprints each of `paths` (a missing file is recorded as absent) and copies the small
    /// ones. Never fails: a file that cannot be read is kept without bytes (detected, not
    /// restorable). Cost: `lstat`, and open + read for each small file.
    pub fn take<I, P>(paths: I) -> Snapshot
    where
        I: IntoIterator<Item = P>,
        P: Into<PathBuf>,
    {
        Snapshot::take_kept(paths.into_iter().map(|p| (p.into(), Keep::Copy)))
    }

    /// [`Snapshot::take`] with what to keep of each file (see [`Keep`]).
    pub fn take_kept(paths: impl IntoIterator<Item = (PathBuf, Keep)>) -> Snapshot {
        Snapshot {
            entries: paths
                .into_iter()
                .map(|(p, keep)| Entry::read(p, keep))
                .collect(),
        }
    }

    /// The protected paths, in the order given.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.entries.iter().map(|e| e.path.as_path())
    }

    /// The fingerprint recorded for `path` (None: absent, or not protected).
    pub fn fingerprint(&self, path: &Path) -> Option<Fingerprint> {
        self.entries
            .iter()
            .find(|e| e.path == path)
            .and_then(|e| e.fp)
    }

    /// The protected files whose fingerprint differs from the snapshot, in the order given. One
    /// `lstat` per file.
    pub fn changes(&self) -> Vec<Change> {
        self.entries
            .iter()
            .filter_map(|e| {
                let now = fs::symlink_metadata(&e.path)
                    .ok()
                    .map(|m| Fingerprint::of(&m));
                if !e.differs(now) {
                    return None;
                }
                let kind = match (e.fp, now) {
                    (None, None) => return None,
                    (None, Some(_)) => ChangeKind::Created,
                    (Some(_), None) => ChangeKind::Removed,
                    (Some(_), Some(_)) => ChangeKind::Modified,
                };
                Some(Change {
                    path: e.path.clone(),
                    kind,
                    restorable: e.keep != Keep::Append && (e.fp.is_none() || e.bytes.is_some()),
                })
            })
            .collect()
    }

    /// Undoes `changes` (from [`Snapshot::changes`]) where the snapshot can: a created file is
    /// removed, a small file is rewritten from the saved bytes (temp file in the same folder,
    /// saved permission bits, rename over whatever is there, so a planted symlink is replaced,
    /// never followed). The snapshot then records the restored state, so the next
    /// [`Snapshot::changes`] is empty for them. Large files are left to the runtime
    /// ([`RestoreOutcome::NeedsRuntime`]); call [`Snapshot::refresh`] after rewriting them.
    pub fn restore(&mut self, changes: &[Change]) -> Vec<(PathBuf, RestoreOutcome)> {
        let mut done = Vec::with_capacity(changes.len());
        for change in changes {
            let Some(entry) = self.entries.iter_mut().find(|e| e.path == change.path) else {
                continue;
            };
            let outcome = match (entry.fp, &entry.bytes) {
                _ if entry.keep == Keep::Append => RestoreOutcome::NeedsRuntime,
                (None, _) => match remove_any(&entry.path) {
                    Ok(()) => RestoreOutcome::Restored,
                    Err(e) => RestoreOutcome::Failed(e.to_string()),
                },
                (Some(fp), Some(bytes)) => match write_back(&entry.path, bytes, fp.mode) {
                    Ok(()) => RestoreOutcome::Restored,
                    Err(e) => RestoreOutcome::Failed(e.to_string()),
                },
                (Some(_), None) => RestoreOutcome::NeedsRuntime,
            };
            if outcome == RestoreOutcome::Restored {
                let bytes = entry.bytes.take();
                *entry = Entry::read(std::mem::take(&mut entry.path), entry.keep);
                // The rewritten file holds exactly the saved bytes; keep them if the re-read
                // could not (e.g. it raced with another writer, which the next check reports).
                if entry.bytes.is_none() && entry.fp.is_some() {
                    entry.bytes = bytes;
                }
            }
            done.push((change.path.clone(), outcome));
        }
        done
    }

    /// Accepts the current state of `path` alone as its new baseline (after tern's own write to
    /// that one file), so a change a background process made meanwhile to another protected
    /// file is still reported. One `lstat`, and a re-read if it is a small copied file; a path
    /// that is not protected is ignored.
    pub fn accept(&mut self, path: &Path) {
        if let Some(entry) = self.entries.iter_mut().find(|e| e.path == path) {
            *entry = Entry::read(std::mem::take(&mut entry.path), entry.keep);
        }
    }

    /// Accepts the files' current state as the new baseline (after tern's own writes): one
    /// `lstat` per file, and a re-read of each small file whose fingerprint changed.
    pub fn refresh(&mut self) {
        for entry in &mut self.entries {
            let now = fs::symlink_metadata(&entry.path)
                .ok()
                .map(|m| Fingerprint::of(&m));
            if now != entry.fp {
                *entry = Entry::read(std::mem::take(&mut entry.path), entry.keep);
            }
        }
    }
}

/// The names in a folder that tern only ever adds to (`archive/`, `agents/`, `sessions/`), so
/// that a command removing what is in it is noticed and named: such entries cannot be put back
/// (they are neither small files nor held in memory), but neither the model nor the person
/// should learn of the loss only later. Names starting with `skip` (tern's own temp files) are
/// not tracked.
///
/// Cost: one `lstat` per [`Listing::vanished`]; the folder is read again only when its
/// modification time changed (any entry added or removed).
#[derive(Debug, Clone)]
pub struct Listing {
    dir: PathBuf,
    skip: &'static str,
    fp: Option<Fingerprint>,
    names: std::collections::BTreeSet<std::ffi::OsString>,
}

impl Listing {
    /// Lists `dir` now (absent: no names).
    pub fn take(dir: PathBuf, skip: &'static str) -> Listing {
        let mut l = Listing {
            dir,
            skip,
            fp: None,
            names: Default::default(),
        };
        l.vanished();
        l
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The names that were there at the last look and are gone now, sorted; the names now
    /// there become the baseline (new ones are accepted: tern and other panes add entries).
    pub fn vanished(&mut self) -> Vec<String> {
        let now = fs::symlink_metadata(&self.dir)
            .ok()
            .map(|m| Fingerprint::of(&m));
        if now.is_some() && now == self.fp {
            return Vec::new();
        }
        self.fp = now;
        let names: std::collections::BTreeSet<_> = match fs::read_dir(&self.dir) {
            Ok(rd) => rd
                .flatten()
                .map(|e| e.file_name())
                .filter(|n| !n.to_string_lossy().starts_with(self.skip))
                .collect(),
            Err(_) => Default::default(),
        };
        let gone = self
            .names
            .difference(&names)
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        self.names = names;
        gone
    }
}

/// Removes a file, symlink or folder at `path`; absent is fine.
fn remove_any(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
    }
}

/// Writes `bytes` to a temp file beside `path` with permission bits from `mode`, fsyncs and
/// renames it over `path` (a folder planted there is removed first). Recreates a removed parent.
fn write_back(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".tern-restore-")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file()
        .set_permissions(fs::Permissions::from_mode(mode & 0o7777))?;
    tmp.as_file().sync_all()?;
    if fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        fs::remove_dir_all(path)?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_and_restores_each_kind() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("ledger.json");
        let absent = dir.path().join("plan.md");
        let big = dir.path().join("conversation.jsonl");
        fs::write(&small, b"{\"items\":[]}").unwrap();
        fs::write(&big, vec![b'x'; (SMALL_FILE_BYTES + 1) as usize]).unwrap();
        let mut snap = Snapshot::take([&small, &absent, &big]);
        assert!(snap.changes().is_empty());

        fs::write(&small, b"{\"items\":[1]}").unwrap();
        fs::write(&absent, b"mine").unwrap();
        fs::OpenOptions::new()
            .append(true)
            .open(&big)
            .unwrap()
            .write_all(b"y")
            .unwrap();
        let changes = snap.changes();
        let kinds: Vec<_> = changes.iter().map(|c| (c.kind, c.restorable)).collect();
        assert_eq!(
            kinds,
            [
                (ChangeKind::Modified, true),
                (ChangeKind::Created, true),
                (ChangeKind::Modified, false)
            ]
        );

        let outcomes = snap.restore(&changes);
        assert_eq!(outcomes[0].1, RestoreOutcome::Restored);
        assert_eq!(outcomes[1].1, RestoreOutcome::Restored);
        assert_eq!(outcomes[2].1, RestoreOutcome::NeedsRuntime);
        assert_eq!(fs::read(&small).unwrap(), b"{\"items\":[]}");
        assert!(!absent.exists());
        // Only the large file is still reported, until the runtime rewrites it and refreshes.
        let left: Vec<_> = snap.changes().into_iter().map(|c| c.path).collect();
        assert_eq!(left, std::slice::from_ref(&big));
        snap.refresh();
        assert!(snap.changes().is_empty());

        fs::remove_file(&small).unwrap();
        let changes = snap.changes();
        assert_eq!(changes[0].kind, ChangeKind::Removed);
        snap.restore(&changes);
        assert_eq!(fs::read(&small).unwrap(), b"{\"items\":[]}");
    }

    #[test]
    fn detect_and_append_entries() {
        let dir = tempfile::tempdir().unwrap();
        let conv = dir.path().join("conversation.jsonl");
        let events = dir.path().join("events.jsonl");
        fs::write(&conv, b"{}\n").unwrap();
        fs::write(&events, b"{\"seq\":1}\n").unwrap();
        let mut snap =
            Snapshot::take_kept([(conv.clone(), Keep::Detect), (events.clone(), Keep::Append)]);
        // An append to the log is tern's own: not a change.
        let mut f = fs::OpenOptions::new().append(true).open(&events).unwrap();
        f.write_all(b"{\"seq\":2}\n").unwrap();
        assert!(snap.changes().is_empty());
        // A small detected file is still not restorable by the guard (never copied).
        fs::write(&conv, b"{}\n{}\n").unwrap();
        let c = snap.changes();
        assert_eq!((c.len(), c[0].restorable), (1, false));
        assert_eq!(snap.restore(&c)[0].1, RestoreOutcome::NeedsRuntime);
        snap.refresh();
        // Shrunk, replaced or removed: each is a change, none restorable.
        fs::write(&events, b"").unwrap();
        assert_eq!(snap.changes()[0].kind, ChangeKind::Modified);
        fs::remove_file(&events).unwrap();
        let c = snap.changes();
        assert_eq!((c[0].kind, c[0].restorable), (ChangeKind::Removed, false));
        assert_eq!(snap.restore(&c)[0].1, RestoreOutcome::NeedsRuntime);
        assert!(!events.exists());
    }

    #[test]
    fn a_planted_symlink_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plan.json");
        let target = dir.path().join("elsewhere");
        fs::write(&file, b"{}").unwrap();
        fs::write(&target, b"keep").unwrap();
        let mut snap = Snapshot::take([&file]);
        fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink(&target, &file).unwrap();
        let changes = snap.changes();
        assert_eq!(changes[0].kind, ChangeKind::Modified);
        snap.restore(&changes);
        assert!(!fs::symlink_metadata(&file).unwrap().is_symlink());
        assert_eq!(fs::read(&file).unwrap(), b"{}");
        assert_eq!(fs::read(&target).unwrap(), b"keep");
    }

    #[test]
    fn a_touch_that_restores_mtime_is_still_seen() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("system.txt");
        fs::write(&file, b"prompt").unwrap();
        let meta = fs::metadata(&file).unwrap();
        let snap = Snapshot::take([&file]);
        // Same length, same bytes count, mtime put back: ctime still moves.
        std::thread::sleep(std::time::Duration::from_millis(5));
        fs::write(&file, b"PROMPT").unwrap();
        let f = fs::File::options().write(true).open(&file).unwrap();
        f.set_modified(meta.modified().unwrap()).unwrap();
        assert_eq!(snap.changes().len(), 1);
    }
}
