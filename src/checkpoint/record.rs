//! The door's record (issue 42, part 2): where commands run on a layer, the door is the only
//! writer of the workspace on the model's behalf, so what it applies *is* the turn's change
//! set. Each change is recorded as the door applies it, with the entry it replaced kept, and
//! undo, redo, diff, rewind and the checkpoint list read that record: no scan of the workspace
//! before a turn's first command, and an undo that touches only the paths the model's commands
//! changed (a file the person edited between turns is never part of it).
//!
//! Files (the top-level session's folder; DESIGN §3, state/README.md):
//! - [`RECORD`] — one JSON line per event ([`Rec`]), append-only, a torn last line skipped:
//!   the door's changes (`change`), and the groups an undo or a redo writes (`begin`, one
//!   `restore` per path, `end`).
//! - [`OBJECTS`] — the entries replaced, by name: a file the door or a restore replaced is
//!   **hard-linked** there before the rename over it (the workspace's inode leaves the
//!   workspace, so the record costs no copy), a removed file is moved there; on another file
//!   system, a copy up to the size limit.
//!
//! Commit points: a `change` line is written after the replaced entry is kept and before the
//! rename that applies it, so a kill leaves either the old entry in place (its identity is the
//! `before`'s: nothing to undo) or the new one (the line names it). An undo writes `begin`,
//! then per path the kept entry, its `restore` line, the rename, and `end` last; a `begin`
//! without `end` is finished by the next verb, which says so.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::{Change, Restored};
use crate::store::dirfd::{Dir, Kind};
use crate::store::fsutil;

/// The record's log in the top-level session folder.
pub const RECORD: &str = "door-record.jsonl";

/// The record's folder of replaced entries, beside [`RECORD`].
pub const OBJECTS: &str = "door-record";

/// What a path held: nothing, a file (its identity, and where its bytes are kept when they
/// were), a symbolic link, a folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Node {
    /// Nothing there.
    Absent,
    /// A plain file.
    File(FileNode),
    /// A symbolic link to `target` (lossy text; `target_bytes` when not UTF-8).
    Link {
        /// The target as text.
        target: String,
        /// The target's bytes, only when they are not UTF-8.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target_bytes: Option<Vec<u8>>,
    },
    /// A folder with these permission bits.
    Dir {
        /// Permission bits (`0o777` and the sticky bit).
        mode: u32,
    },
}

/// A file's identity as `stat` gives it, and its kept bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileNode {
    /// Permission bits.
    pub mode: u32,
    /// Size in bytes.
    pub len: u64,
    /// Inode number.
    pub ino: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// The name in [`OBJECTS`] holding these bytes (None: not kept — over the size limit on
    /// another file system, or the file a change put, whose bytes the next change keeps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub obj: Option<String>,
}

/// One line of [`RECORD`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Rec {
    /// The door applied a change at `path` (workspace-relative) in turn `turn`.
    Change {
        /// The top-level session's turn.
        turn: u32,
        /// The path as text (`path_bytes` when not UTF-8).
        path: String,
        /// The path's bytes, only when they are not UTF-8.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path_bytes: Option<Vec<u8>>,
        /// What was there.
        before: Node,
        /// What the door put.
        after: Node,
    },
    /// An undo (`turns`) or a redo (`redo_of`: the undo group it reverses) began.
    Begin {
        /// The group's number (1, 2, …).
        group: u32,
        /// The turns an undo takes back.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        turns: Vec<u32>,
        /// The undo group a redo reverses.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        redo_of: Option<u32>,
    },
    /// One path a group changed: `before` what it replaced (kept), `after` what it put.
    Restore {
        /// The group.
        group: u32,
        /// The path as text.
        path: String,
        /// The path's bytes, only when they are not UTF-8.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path_bytes: Option<Vec<u8>>,
        /// What was there.
        before: Node,
        /// What the group put.
        after: Node,
    },
    /// The group finished.
    End {
        /// The group.
        group: u32,
    },
    /// The record went over its budget: the entries kept for turns up to `through` (and for
    /// the undos of those turns) were removed; those turns can no longer be undone.
    Pruned {
        /// The newest turn pruned.
        through: u32,
    },
}

/// A record line's path with its real bytes.
fn real(path: &str, bytes: Option<&Vec<u8>>) -> PathBuf {
    match bytes {
        Some(b) => PathBuf::from(OsString::from_vec(b.clone())),
        None => PathBuf::from(path),
    }
}

/// A path as (text, bytes when not UTF-8).
fn text_of(p: &Path) -> (String, Option<Vec<u8>>) {
    match p.to_str() {
        Some(s) => (s.to_string(), None),
        None => (
            p.to_string_lossy().into_owned(),
            Some(p.as_os_str().as_bytes().to_vec()),
        ),
    }
}

/// The top-level session folder above `session_dir` (`<root>/sessions/<id>`, a sub-agent's
/// folder lies beneath it): the record is the top-level session's, as checkpoints are.
pub fn top_level(session_dir: &Path) -> Option<PathBuf> {
    session_dir
        .ancestors()
        .find(|a| {
            a.parent()
                .and_then(Path::file_name)
                .is_some_and(|n| n == "sessions")
        })
        .map(Path::to_path_buf)
}

/// Unique object names within this process (the pid makes them unique across processes).
static NEXT: AtomicU64 = AtomicU64::new(0);

fn object_name() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A file's node from its `stat`, `obj` where its bytes are kept.
pub fn file_node(st: &libc::stat, obj: Option<String>) -> FileNode {
    FileNode {
        mode: st.st_mode & 0o7777,
        len: u64::try_from(st.st_size).unwrap_or(0),
        ino: st.st_ino,
        mtime_ns: st.st_mtime.saturating_mul(1_000_000_000) + st.st_mtime_nsec,
        obj,
    }
}

fn file_node_of_meta(m: &std::fs::Metadata) -> FileNode {
    FileNode {
        mode: m.mode() & 0o7777,
        len: m.len(),
        ino: m.ino(),
        mtime_ns: m.mtime().saturating_mul(1_000_000_000) + m.mtime_nsec(),
        obj: None,
    }
}

/// The writing side, held by the workspace's door: keeps replaced entries and appends lines.
#[derive(Debug, Clone)]
pub struct Recorder {
    /// The top-level session folder.
    top: PathBuf,
    /// Most bytes copied when a replaced file cannot be linked (another file system).
    max_copy: u64,
}

impl Recorder {
    /// The recorder of the session at `session_dir` (its top-level session's record). None:
    /// not in a state folder's sessions.
    pub fn new(session_dir: &Path, max_copy: u64) -> Option<Recorder> {
        Some(Recorder {
            top: top_level(session_dir)?,
            max_copy,
        })
    }

    /// The top-level session's turn now (the last line of its `turns.jsonl`; 0 before any).
    pub fn turn(&self) -> u32 {
        last_turn(&self.top.join(super::turns::TURNS))
    }

    fn objects(&self) -> io::Result<Dir> {
        Dir::create(&self.top.join(OBJECTS))
    }

    /// What the entry `name` of `ws` holds now, its bytes kept when it is a file (linked into
    /// the record; copied when that crosses file systems), before something is renamed over
    /// it.
    pub fn keep(&self, ws: &Dir, name: &OsStr) -> io::Result<Node> {
        let st = match ws.lstat(name) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Node::Absent),
            other => other?,
        };
        match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => {
                let objects = self.objects()?;
                let obj = object_name();
                let kept = match ws.link(name, &objects, OsStr::new(&obj)) {
                    Ok(()) => Some(obj),
                    Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                        copy_into(ws, name, &objects, &obj, &st, self.max_copy)?
                    }
                    Err(e) => return Err(e),
                };
                Ok(Node::File(file_node(&st, kept)))
            }
            libc::S_IFLNK => {
                let t = ws.read_link(name)?;
                let (target, target_bytes) = text_of(&t);
                Ok(Node::Link {
                    target,
                    target_bytes,
                })
            }
            libc::S_IFDIR => Ok(Node::Dir {
                mode: st.st_mode & 0o7777,
            }),
            _ => Err(io::Error::other("not a file, link or folder")),
        }
    }

    /// What the entry `name` of `ws` (about to be removed) holds, with the object name its
    /// bytes will be moved to by [`Recorder::remove`] (a file's); the line naming it is
    /// written in between, so a kill leaves the file in place or the line naming it.
    pub fn plan_removal(&self, ws: &Dir, name: &OsStr) -> io::Result<(Node, Option<String>)> {
        let st = match ws.lstat(name) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Node::Absent, None)),
            other => other?,
        };
        match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => {
                let obj = object_name();
                Ok((Node::File(file_node(&st, Some(obj.clone()))), Some(obj)))
            }
            _ => Ok((self.keep(ws, name)?, None)),
        }
    }

    /// Removes the entry `name` of `ws` (not a folder): a file moved to `obj` in the record
    /// (copied then removed across file systems; a file too big to copy is removed unkept,
    /// its line then names bytes that are not there and undo says so), anything else removed.
    pub fn remove(&self, ws: &Dir, name: &OsStr, obj: Option<&str>) -> io::Result<()> {
        let Some(obj) = obj else {
            return match ws.remove_file(name) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                other => other,
            };
        };
        let objects = self.objects()?;
        match ws.rename(name, &objects, OsStr::new(obj)) {
            Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                let st = ws.lstat(name)?;
                copy_into(ws, name, &objects, obj, &st, self.max_copy)?;
                ws.remove_file(name)
            }
            other => other,
        }
    }

    /// The record's folder when it is on `ws`'s file system (a restore's new file is made
    /// there, then renamed into place). None: another file system.
    fn staging_for(&self, ws: &Dir) -> Option<Dir> {
        let objects = self.objects().ok()?;
        let dev = |d: &Dir| d.lstat(OsStr::new(".")).ok().map(|s| s.st_dev);
        (dev(&objects)? == dev(ws)?).then_some(objects)
    }

    /// Whether the record keeps the inode `ino` (a file linked into it, still in the
    /// workspace: a door killed between keeping it and its rename).
    pub fn holds(&self, ino: u64) -> bool {
        use std::os::unix::fs::DirEntryExt;
        std::fs::read_dir(self.top.join(OBJECTS))
            .map(|rd| rd.flatten().any(|e| e.ino() == ino))
            .unwrap_or(false)
    }

    /// Appends the door's change at `rel`.
    pub fn change(&self, turn: u32, rel: &Path, before: Node, after: Node) -> io::Result<()> {
        let (path, path_bytes) = text_of(rel);
        self.append(&Rec::Change {
            turn,
            path,
            path_bytes,
            before,
            after,
        })
    }

    fn append(&self, rec: &Rec) -> io::Result<()> {
        fsutil::append_line(&self.top.join(RECORD), &fsutil::to_jsonl(rec)?)
    }
}

/// Copies the file `name` of `ws` (`st`) to `obj` in `objects` when it is at most `max` bytes;
/// `Ok(None)` when larger.
fn copy_into(
    ws: &Dir,
    name: &OsStr,
    objects: &Dir,
    obj: &str,
    st: &libc::stat,
    max: u64,
) -> io::Result<Option<String>> {
    if u64::try_from(st.st_size).unwrap_or(u64::MAX) > max {
        return Ok(None);
    }
    let mut src = ws.open_file(name, libc::O_RDONLY, 0)?;
    let mut dst = objects.open_file(
        OsStr::new(obj),
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        0o600,
    )?;
    io::copy(&mut src, &mut dst)?;
    dst.flush()?;
    Ok(Some(obj.to_string()))
}

/// The number of the last line of a `turns.jsonl` (0: none), read from its tail: each line
/// starts `{"turn":N` (the field comes first).
pub fn last_turn(path: &Path) -> u32 {
    use std::io::{Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return 0;
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut window = 4096u64;
    loop {
        let from = len.saturating_sub(window);
        let mut buf = Vec::new();
        if f.seek(SeekFrom::Start(from)).is_err() || f.read_to_end(&mut buf).is_err() {
            return 0;
        }
        // Whole lines only: a torn last line (no newline) is skipped.
        let end = buf.iter().rposition(|b| *b == b'\n').unwrap_or(0);
        let body = &buf[..end];
        let start = body.iter().rposition(|b| *b == b'\n').map(|i| i + 1);
        match start {
            Some(s) => return turn_of(&body[s..]),
            None if from == 0 => return turn_of(body),
            None => window = window.saturating_mul(8),
        }
    }
}

fn turn_of(line: &[u8]) -> u32 {
    let Some(rest) = line.strip_prefix(b"{\"turn\":") else {
        return 0;
    };
    let digits: Vec<u8> = rest
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .copied()
        .collect();
    std::str::from_utf8(&digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// The reading side: the verbs.

/// The record of a top-level session, read whole, for the verbs.
pub struct Record {
    top: PathBuf,
    workspace: PathBuf,
    recs: Vec<Rec>,
}

/// Why a path cannot simply be put back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// It holds what the record expects: put it back.
    Expected,
    /// It already holds the target (a restore a kill cut short, or the person's own undo).
    Done,
    /// Something else: the person's.
    Other,
}

/// One path of a restore: what it should hold, what it holds if nobody touched it since.
#[derive(Debug, Clone)]
struct Step {
    rel: PathBuf,
    expected: Node,
    target: Node,
    /// Where later records may hold this step's expected bytes (position in the log).
    pos: usize,
}

impl Record {
    /// The record of `session_dir`'s top-level session for the workspace `workspace`.
    /// Errors: the log cannot be read.
    pub fn open(session_dir: &Path, workspace: &Path) -> io::Result<Record> {
        let top = top_level(session_dir).unwrap_or_else(|| session_dir.to_path_buf());
        let recs = fsutil::read_jsonl::<Rec>(&top.join(RECORD))?.items;
        Ok(Record {
            top,
            workspace: workspace.to_path_buf(),
            recs,
        })
    }

    /// Whether the door recorded anything in this session.
    pub fn is_used(&self) -> bool {
        !self.recs.is_empty()
    }

    /// Whether an undo is there for [`Record::redo`] to reverse.
    pub fn can_redo(&self) -> bool {
        self.redoable().is_some()
    }

    /// The newest finished undo group no finished redo reversed.
    fn redoable(&self) -> Option<u32> {
        let groups = self.finished_groups();
        let reversed: BTreeSet<u32> = groups.iter().filter_map(|g| g.2).collect();
        let pruned = self.pruned_through();
        groups
            .iter()
            .rev()
            .find(|g| g.2.is_none() && !reversed.contains(&g.0))
            .filter(|g| g.1.iter().all(|t| *t > pruned))
            .map(|g| g.0)
    }

    /// The turns with a change, ascending.
    pub fn turns(&self) -> Vec<u32> {
        let set: BTreeSet<u32> = self
            .recs
            .iter()
            .filter_map(|r| match r {
                Rec::Change { turn, .. } => Some(*turn),
                _ => None,
            })
            .collect();
        set.into_iter().collect()
    }

    /// The newest turn whose kept entries were pruned (0: none).
    fn pruned_through(&self) -> u32 {
        self.recs
            .iter()
            .filter_map(|r| match r {
                Rec::Pruned { through } => Some(*through),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// Keeps the record's kept entries within `budget` bytes: while over it, the entries of the
    /// oldest turn (never the newest) and of the undos of the turns pruned are removed, and a
    /// `pruned` line says how far. Returns what to say (None: within the budget).
    pub fn prune(&mut self, budget: u64) -> io::Result<Option<String>> {
        let size = self.size();
        if size <= budget {
            return Ok(None);
        }
        let objects = self.top.join(OBJECTS);
        let turns = self.turns();
        let mut through = self.pruned_through();
        let mut left = size;
        for t in turns.iter().take(turns.len().saturating_sub(1)) {
            if *t <= through {
                continue;
            }
            if left <= budget {
                break;
            }
            through = *t;
            let groups: BTreeSet<u32> = self
                .finished_groups()
                .iter()
                .filter(|(_, ts, redo_of)| redo_of.is_some() || ts.iter().any(|x| *x <= through))
                .map(|g| g.0)
                .collect();
            for r in &self.recs {
                let kept = match r {
                    Rec::Change { turn, before, .. } if *turn == *t => before,
                    Rec::Restore { group, before, .. } if groups.contains(group) => before,
                    _ => continue,
                };
                if let Node::File(FileNode { obj: Some(o), .. }) = kept {
                    let p = objects.join(o);
                    if let Ok(m) = std::fs::symlink_metadata(&p)
                        && std::fs::remove_file(&p).is_ok()
                    {
                        left = left.saturating_sub(m.len());
                    }
                }
            }
        }
        if through == self.pruned_through() {
            return Ok(None);
        }
        self.push(Rec::Pruned { through })?;
        Ok(Some(format!(
            "the undo record went over its budget ({}): turns up to {through} can no longer be undone (TERN_CHECKPOINT_BUDGET)",
            super::size_text(budget)
        )))
    }

    /// The turns undone now: those of each finished undo group no finished redo reversed.
    pub fn undone(&self) -> BTreeSet<u32> {
        let groups = self.finished_groups();
        let mut out = BTreeSet::new();
        for (_, turns, redo_of) in &groups {
            match redo_of {
                None => out.extend(turns.iter().copied()),
                // A redo gives back the turns of the undo it reverses.
                Some(of) => {
                    if let Some((_, undone, _)) = groups.iter().find(|x| x.0 == *of) {
                        for t in undone {
                            out.remove(t);
                        }
                    }
                }
            }
        }
        out
    }

    /// (group, turns, redo_of) of each group with an `end`, in order.
    fn finished_groups(&self) -> Vec<(u32, Vec<u32>, Option<u32>)> {
        let ended: BTreeSet<u32> = self
            .recs
            .iter()
            .filter_map(|r| match r {
                Rec::End { group } => Some(*group),
                _ => None,
            })
            .collect();
        self.recs
            .iter()
            .filter_map(|r| match r {
                Rec::Begin {
                    group,
                    turns,
                    redo_of,
                } if ended.contains(group) => Some((*group, turns.clone(), *redo_of)),
                _ => None,
            })
            .collect()
    }

    /// The group a `begin` without `end` started (a restore a kill cut short).
    fn pending(&self) -> Option<(u32, Vec<u32>, Option<u32>)> {
        let ended: BTreeSet<u32> = self
            .recs
            .iter()
            .filter_map(|r| match r {
                Rec::End { group } => Some(*group),
                _ => None,
            })
            .collect();
        self.recs.iter().rev().find_map(|r| match r {
            Rec::Begin {
                group,
                turns,
                redo_of,
            } if !ended.contains(group) => Some((*group, turns.clone(), *redo_of)),
            _ => None,
        })
    }

    fn next_group(&self) -> u32 {
        self.recs
            .iter()
            .filter_map(|r| match r {
                Rec::Begin { group, .. } => Some(*group),
                _ => None,
            })
            .max()
            .unwrap_or(0)
            + 1
    }

    /// The steps that take `turns` back: per path, the `before` of its first change in them
    /// and the `after` of its last, newest last change first (children before their folder).
    /// `follow`: what a later undo or redo put there since is what the path holds if nobody
    /// touched it (for a restore; a diff wants the turn's own `after`).
    fn undo_steps(&self, turns: &BTreeSet<u32>, ignored: Ignored<'_>, follow: bool) -> Vec<Step> {
        let steps = self.steps(
            |r| matches!(r, Rec::Change { turn, .. } if turns.contains(turn)),
            follow,
        );
        let names: Vec<String> = steps
            .iter()
            .map(|s| s.rel.to_string_lossy().into_owned())
            .collect();
        let skip = ignored(&names);
        // git's own folders are the person's repository, never part of a turn's undo.
        steps
            .into_iter()
            .filter(|s| !skip.contains(&*s.rel.to_string_lossy()))
            .filter(|s| !s.rel.components().any(|c| c.as_os_str() == ".git"))
            .collect()
    }

    /// The steps that reverse group `g` (a redo): what each path held before the group
    /// changed it, expected to hold what the group (or a later restore) put.
    fn redo_steps(&self, g: u32) -> Vec<Step> {
        self.steps(
            |r| matches!(r, Rec::Restore { group, .. } if *group == g),
            true,
        )
    }

    /// The steps of the lines `pick` selects, collapsed per path (the first line's `before` is
    /// the target, the last one's `after` is expected), newest last line first. `follow`: a
    /// later `restore` line of the same path (another undo or redo) is what it holds now.
    fn steps(&self, pick: impl Fn(&Rec) -> bool, follow: bool) -> Vec<Step> {
        // Only finished groups are followed: a cut-short one's lines are what its recovery
        // does again, not what the paths hold.
        let finished: BTreeSet<u32> = self.finished_groups().iter().map(|g| g.0).collect();
        let mut by_path: BTreeMap<PathBuf, Step> = BTreeMap::new();
        for (pos, r) in self.recs.iter().enumerate() {
            let (path, path_bytes, before, after) = match r {
                Rec::Change {
                    path,
                    path_bytes,
                    before,
                    after,
                    ..
                }
                | Rec::Restore {
                    path,
                    path_bytes,
                    before,
                    after,
                    ..
                } => (path, path_bytes, before, after),
                _ => continue,
            };
            let rel = real(path, path_bytes.as_ref());
            if pick(r) {
                by_path
                    .entry(rel.clone())
                    .and_modify(|s| {
                        s.expected = after.clone();
                        s.pos = pos;
                    })
                    .or_insert(Step {
                        rel,
                        expected: after.clone(),
                        target: before.clone(),
                        pos,
                    });
            } else if follow
                && matches!(r, Rec::Restore { group, .. } if finished.contains(group))
                && let Some(s) = by_path.get_mut(&rel)
            {
                s.expected = after.clone();
                s.pos = pos;
            }
        }
        let mut steps: Vec<Step> = by_path.into_values().collect();
        steps.sort_by_key(|s| std::cmp::Reverse(s.pos));
        steps
    }

    fn ws(&self) -> io::Result<Dir> {
        Dir::hold(&self.workspace)
    }

    /// Where `step.rel` stands against the step.
    fn standing(&self, ws: &Dir, step: &Step) -> Standing {
        let now = now_node(ws, &step.rel);
        if same(&now, &step.expected) {
            Standing::Expected
        } else if same(&now, &step.target) || self.same_content(ws, &step.rel, &now, &step.target) {
            Standing::Done
        } else {
            Standing::Other
        }
    }

    /// Errors (nothing changed yet) when a file some step puts back has no kept bytes (over
    /// the size limit on another file system, or removed from the record): each named.
    fn all_kept(&self, steps: &[Step]) -> io::Result<()> {
        let missing: Vec<String> = steps
            .iter()
            .filter(|s| matches!(&s.target, Node::File(f) if self.kept_bytes(f).is_none()))
            .map(|s| s.rel.to_string_lossy().into_owned())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(io::Error::other(format!(
            "refused: the bytes of {} to put back were not kept (over the size limit on another file system, or removed from {OBJECTS}/); nothing was changed",
            super::store::names(&missing)
        )))
    }

    /// Where the record keeps `f`'s bytes: its own object, or — when a kill cut its change
    /// short before the file moved there — the object a later line kept the same file in
    /// (same inode, size and time). None: not kept.
    fn kept_bytes(&self, f: &FileNode) -> Option<PathBuf> {
        let objects = self.top.join(OBJECTS);
        if let Some(obj) = &f.obj
            && objects.join(obj).is_file()
        {
            return Some(objects.join(obj));
        }
        self.recs.iter().find_map(|r| {
            let (Rec::Change { before, .. } | Rec::Restore { before, .. }) = r else {
                return None;
            };
            match before {
                Node::File(b) if b.ino == f.ino && b.len == f.len && b.mtime_ns == f.mtime_ns => {
                    let p = objects.join(b.obj.as_ref()?);
                    p.is_file().then_some(p)
                }
                _ => None,
            }
        })
    }

    /// Whether the workspace file at `rel` holds the kept bytes and bits of `target`.
    fn same_content(&self, ws: &Dir, rel: &Path, now: &Node, target: &Node) -> bool {
        let (Node::File(n), Node::File(t)) = (now, target) else {
            return false;
        };
        if n.len != t.len || n.mode != t.mode {
            return false;
        }
        let Some(kept) = self.kept_bytes(t) else {
            return false;
        };
        let (Ok(a), Ok(b)) = (open_rel(ws, rel), std::fs::File::open(kept)) else {
            return false;
        };
        fsutil::same_content(a, b)
    }

    /// Finishes a restore a kill cut short (its plan again: what is done stays done). Returns
    /// what to say.
    pub fn recover(&mut self, ignored: Ignored<'_>) -> io::Result<Vec<String>> {
        let Some((g, turns, redo_of)) = self.pending() else {
            return Ok(Vec::new());
        };
        let steps = match redo_of {
            Some(of) => self.redo_steps(of),
            None => self.undo_steps(&turns.iter().copied().collect(), ignored, true),
        };
        let ws = self.ws()?;
        for s in &steps {
            // A restore's temporary name made beside the path (the record on another file
            // system) is gone first.
            if let Ok(d) = ws.beneath(s.rel.parent().unwrap_or(Path::new("")))
                && let Ok(names) = d.names()
            {
                for n in names
                    .iter()
                    .filter(|n| n.as_bytes().starts_with(TEMP.as_bytes()))
                {
                    let _ = d.remove_file(n);
                }
            }
            if self.standing(&ws, s) == Standing::Expected {
                self.put_back(&ws, g, s)?;
            }
        }
        self.push(Rec::End { group: g })?;
        Ok(vec![format!(
            "an undo, redo or rewind was cut short (tern was stopped while it restored files); tern finished it first (record group {g})"
        )])
    }

    fn push(&mut self, rec: Rec) -> io::Result<()> {
        fsutil::append_line(&self.top.join(RECORD), &fsutil::to_jsonl(&rec)?)?;
        self.recs.push(rec);
        Ok(())
    }

    /// The newest `n` turns with a change that are not undone, newest first; and how many
    /// there are in all.
    pub fn undoable(&self, ignored: Ignored<'_>) -> Vec<u32> {
        let undone = self.undone();
        let pruned = self.pruned_through();
        self.turns()
            .into_iter()
            .rev()
            .filter(|t| !undone.contains(t) && *t > pruned)
            .filter(|t| {
                !self
                    .undo_steps(&BTreeSet::from([*t]), ignored, false)
                    .is_empty()
            })
            .collect()
    }

    /// Takes back `turns` (each a turn of this session): each path the door changed in them
    /// goes back to what it held before the first of those changes. A path that holds
    /// something else now (the person's) is kept when the undo would remove it, and refuses
    /// the undo unless `force` (then it is kept in the record first, for `tern redo`).
    pub fn undo(
        &mut self,
        turns: &[u32],
        force: bool,
        ignored: Ignored<'_>,
    ) -> io::Result<Restored> {
        let set: BTreeSet<u32> = turns.iter().copied().collect();
        let steps = self.undo_steps(&set, ignored, true);
        let ws = self.ws()?;
        let mut kept = Vec::new();
        let mut refused = Vec::new();
        let mut todo = Vec::new();
        let mut overwritten = Vec::new();
        let known: BTreeSet<PathBuf> = steps.iter().map(|s| s.rel.clone()).collect();
        for s in steps {
            match self.standing(&ws, &s) {
                Standing::Expected if !matches!(s.target, Node::Dir { .. }) => {
                    // A folder the turn made that now holds what the turn did not put there
                    // (the person's): it goes only with --force (kept for redo), else it is
                    // kept where the undo would remove the folder, and refuses otherwise.
                    let foreign = foreign_beneath(&ws, &s.rel, &known);
                    match (&s.target, force) {
                        _ if foreign.is_empty() => {}
                        (Node::Absent, _) => kept.extend(foreign),
                        (_, true) => overwritten.extend(foreign),
                        (_, false) => refused.extend(foreign),
                    }
                    todo.push(s);
                }
                Standing::Expected => todo.push(s),
                Standing::Done => {}
                Standing::Other if s.target == Node::Absent => {
                    kept.push(s.rel.to_string_lossy().into_owned());
                }
                Standing::Other => {
                    let shown = s.rel.to_string_lossy().into_owned();
                    if force {
                        overwritten.push(shown);
                        todo.push(s);
                    } else {
                        refused.push(shown);
                    }
                }
            }
        }
        self.all_kept(&todo)?;
        if !refused.is_empty() {
            return Err(io::Error::other(format!(
                "refused: {} file(s) that undo would put back were changed after the turn ended (your edits, not the model's): {}. Nothing was changed. `tern undo --force` undoes anyway; your versions are saved first, and `tern redo` brings them back.",
                refused.len(),
                super::store::names(&refused)
            )));
        }
        let g = self.next_group();
        self.push(Rec::Begin {
            group: g,
            turns: turns.to_vec(),
            redo_of: None,
        })?;
        let mut changes = Vec::new();
        for s in &todo {
            if let Some(c) = self.put_back(&ws, g, s)? {
                changes.push(c);
            }
        }
        self.push(Rec::End { group: g })?;
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(Restored {
            turn: turns.iter().min().copied(),
            changes,
            kept,
            overwritten,
            recovered: Vec::new(),
        })
    }

    /// Reverses the newest undo no redo reversed yet. Errors: nothing to redo; a path changed
    /// since the undo (named; nothing changed).
    pub fn redo(&mut self) -> io::Result<Restored> {
        let Some(of) = self.redoable() else {
            return Err(io::Error::other("nothing to redo"));
        };
        let steps = self.redo_steps(of);
        let ws = self.ws()?;
        let changed: Vec<String> = steps
            .iter()
            .filter(|s| self.standing(&ws, s) == Standing::Other)
            .map(|s| s.rel.to_string_lossy().into_owned())
            .collect();
        if !changed.is_empty() {
            return Err(io::Error::other(format!(
                "refused: the workspace changed since the undo ({}), and redo would overwrite those changes; nothing was changed. Put those files back as the undo left them (move new ones aside), then `tern redo` works",
                super::store::names(&changed)
            )));
        }
        self.all_kept(&steps)?;
        let g = self.next_group();
        self.push(Rec::Begin {
            group: g,
            turns: Vec::new(),
            redo_of: Some(of),
        })?;
        let mut changes = Vec::new();
        for s in &steps {
            if self.standing(&ws, s) == Standing::Expected
                && let Some(c) = self.put_back(&ws, g, s)?
            {
                changes.push(c);
            }
        }
        self.push(Rec::End { group: g })?;
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(Restored {
            turn: None,
            changes,
            kept: Vec::new(),
            overwritten: Vec::new(),
            recovered: Vec::new(),
        })
    }

    /// Puts `step.target` at `step.rel`, the entry there kept first; writes the `restore`
    /// line. Returns the change made (None: nothing to do, or a folder kept for what it holds).
    fn put_back(&mut self, ws: &Dir, g: u32, step: &Step) -> io::Result<Option<Change>> {
        let rel = &step.rel;
        let name = rel.file_name().unwrap_or_default().to_os_string();
        let parent_rel = rel.parent().unwrap_or(Path::new(""));
        if step.target != Node::Absent {
            make_parents(ws, parent_rel)?;
        }
        let parent = match ws.beneath(parent_rel) {
            Ok(p) => p,
            // Its folder is gone: nothing to remove there.
            Err(_) if step.target == Node::Absent => return Ok(None),
            Err(e) => return Err(e),
        };
        let now = now_node(ws, rel);
        let rec = Recorder {
            top: self.top.clone(),
            max_copy: u64::MAX,
        };
        let status = status_of(&now, &step.target, self, ws, rel);
        match &step.target {
            Node::Absent => match &now {
                Node::Dir { .. } => {
                    // A folder goes only when empty: what is left in it is not the turn's.
                    if parent.remove_dir(&name).is_err() {
                        return Ok(None);
                    }
                    self.restore_line(g, rel, now.clone(), Node::Absent)?;
                }
                Node::Absent => return Ok(None),
                _ => {
                    let (kept, obj) = rec.plan_removal(&parent, &name)?;
                    self.restore_line(g, rel, kept, Node::Absent)?;
                    rec.remove(&parent, &name, obj.as_deref())?;
                }
            },
            Node::Dir { mode } => {
                if !matches!(now, Node::Dir { .. } | Node::Absent) {
                    let (kept, obj) = rec.plan_removal(&parent, &name)?;
                    self.restore_line(g, rel, kept, Node::Absent)?;
                    rec.remove(&parent, &name, obj.as_deref())?;
                }
                parent.make_dir(&name, 0o700)?;
                parent.set_mode(&name, *mode)?;
                let before = if matches!(now, Node::Dir { .. }) {
                    now.clone()
                } else {
                    Node::Absent
                };
                self.restore_line(g, rel, before, Node::Dir { mode: *mode })?;
            }
            Node::File(f) => {
                let Some(kept) = self.kept_bytes(f) else {
                    return Err(io::Error::other(format!(
                        "{}: its bytes were not kept (over the size limit on another file system)",
                        rel.display()
                    )));
                };
                if matches!(now, Node::Dir { .. }) {
                    remove_tree_recorded(self, &rec, &parent, &name, rel, g)?;
                }
                let mut src = std::fs::File::open(kept)?;
                // Made in the record's folder (a kill leaves nothing in the workspace), beside
                // the name when that is another file system (a rename cannot cross it).
                let at = rec.staging_for(&parent);
                let at = at.as_ref().unwrap_or(&parent);
                let (mut tmp, tmp_name) = at.create_unique_mode(TEMP, "", 0o600)?;
                let done = (|| {
                    io::copy(&mut src, &mut tmp)?;
                    tmp.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(f.mode))?;
                    tmp.flush()?;
                    let after = Node::File(file_node_of_meta(&tmp.metadata()?));
                    let before = rec.keep(&parent, &name)?;
                    self.restore_line(g, rel, before, after)?;
                    at.rename(&tmp_name, &parent, &name)
                })();
                if done.is_err() {
                    let _ = at.remove_file(&tmp_name);
                }
                done?;
            }
            Node::Link {
                target,
                target_bytes,
            } => {
                if matches!(now, Node::Dir { .. }) {
                    remove_tree_recorded(self, &rec, &parent, &name, rel, g)?;
                }
                let t = real(target, target_bytes.as_ref());
                let tmp = OsString::from(format!("{TEMP}{}", object_name()));
                let at = rec.staging_for(&parent);
                let at = at.as_ref().unwrap_or(&parent);
                at.symlink(&t, &tmp)?;
                let before = rec.keep(&parent, &name)?;
                self.restore_line(g, rel, before, step.target.clone())?;
                at.rename(&tmp, &parent, &name)?;
            }
        }
        Ok(status.map(|status| Change {
            status,
            path: rel.to_string_lossy().into_owned(),
            blob: None,
            old_blob: None,
            bits: bits_of(&now, &step.target).filter(|_| status == 'P'),
        }))
    }

    fn restore_line(&mut self, g: u32, rel: &Path, before: Node, after: Node) -> io::Result<()> {
        let (path, path_bytes) = text_of(rel);
        self.push(Rec::Restore {
            group: g,
            path,
            path_bytes,
            before,
            after,
        })
    }

    /// The bytes a node held, when the record (or the workspace, unchanged since) has them.
    /// `pos`: where the node was written, so later lines can hold its bytes.
    fn bytes_of(&self, ws: &Dir, rel: &Path, node: &Node, pos: usize) -> Option<Vec<u8>> {
        let Node::File(f) = node else {
            return Some(Vec::new());
        };
        let read_obj = |obj: &str| std::fs::read(self.top.join(OBJECTS).join(obj)).ok();
        if f.obj.is_some() {
            return self.kept_bytes(f).and_then(|p| std::fs::read(p).ok());
        }
        // The file a change put: the next line that replaced it kept it.
        for r in &self.recs[pos + 1..] {
            let (p, pb, before) = match r {
                Rec::Change {
                    path,
                    path_bytes,
                    before,
                    ..
                }
                | Rec::Restore {
                    path,
                    path_bytes,
                    before,
                    ..
                } => (path, path_bytes, before),
                _ => continue,
            };
            if real(p, pb.as_ref()) != rel {
                continue;
            }
            if let Node::File(b) = before
                && b.ino == f.ino
                && b.mtime_ns == f.mtime_ns
                && b.len == f.len
            {
                return b.obj.as_deref().and_then(read_obj);
            }
            return None;
        }
        // Still in the workspace, untouched since.
        if same(&now_node(ws, rel), node) {
            let mut v = Vec::new();
            open_rel(ws, rel).ok()?.read_to_end(&mut v).ok()?;
            return Some(v);
        }
        None
    }

    /// `tern diff` of turn `turn`: a git-style patch of each path it changed (first `before`
    /// to last `after` in the turn), then one line per file whose bits alone changed; at most
    /// `max` bytes. Empty when the turn changed nothing recorded.
    pub fn diff(&self, turn: u32, max: usize, ignored: Ignored<'_>) -> io::Result<String> {
        let steps = self.undo_steps(&BTreeSet::from([turn]), ignored, false);
        let ws = self.ws()?;
        let mut steps = steps;
        steps.sort_by(|a, b| a.rel.cmp(&b.rel));
        let mut text = String::new();
        let mut bits = String::new();
        for s in &steps {
            let shown = crate::render::safe(&s.rel.to_string_lossy()).into_owned();
            let (old, new) = (&s.target, &s.expected);
            if let (Node::File(a), Node::File(b)) = (old, new)
                && a.mode != b.mode
            {
                bits.push_str(&format!(
                    "permissions of {shown}: {:04o} -> {:04o}\n",
                    a.mode & 0o7777,
                    b.mode & 0o7777
                ));
            }
            let old_b = self.bytes_of(&ws, &s.rel, old, first_pos(self, s));
            let new_b = self.bytes_of(&ws, &s.rel, new, s.pos);
            let head = match (old, new) {
                (Node::Absent, Node::Dir { .. }) | (Node::Dir { .. }, Node::Absent) => continue,
                (Node::Dir { .. }, Node::Dir { .. }) => continue,
                (Node::Absent, _) => format!("new file {}\n", mode_text(new)),
                (_, Node::Absent) => format!("deleted file {}\n", mode_text(old)),
                _ => String::new(),
            };
            let body = match (&old_b, &new_b) {
                (Some(a), Some(b))
                    if a == b && head.is_empty() && link_text(old) == link_text(new) =>
                {
                    continue;
                }
                (Some(a), Some(b)) => {
                    let (a, b) = (with_link(old, a), with_link(new, b));
                    if a.contains(&0) || b.contains(&0) {
                        "Binary files differ\n".to_string()
                    } else {
                        let from = if matches!(old, Node::Absent) {
                            "/dev/null".to_string()
                        } else {
                            format!("a/{shown}")
                        };
                        let to = if matches!(new, Node::Absent) {
                            "/dev/null".to_string()
                        } else {
                            format!("b/{shown}")
                        };
                        format!(
                            "--- {from}\n+++ {to}\n{}",
                            super::patch::unified(
                                &String::from_utf8_lossy(&a),
                                &String::from_utf8_lossy(&b)
                            )
                        )
                    }
                }
                _ => {
                    "(the bytes on one side were not kept: changed since, or over the size limit)\n"
                        .into()
                }
            };
            text.push_str(&format!("diff --git a/{shown} b/{shown}\n{head}{body}"));
        }
        text.push_str(&bits);
        if text.len() > max {
            let mut cut = max;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push_str(&format!(
                "\n… (cut at {} of the patch)",
                super::size_text(max as u64)
            ));
        }
        Ok(text)
    }

    /// (files, bytes) turn `turn` changed: the size of each file it left, and of each it
    /// removed as it was.
    pub fn size_of(&self, turn: u32, ignored: Ignored<'_>) -> (usize, u64) {
        let steps = self.undo_steps(&BTreeSet::from([turn]), ignored, false);
        let files = steps
            .iter()
            .filter(|s| {
                !matches!(
                    (&s.target, &s.expected),
                    (
                        Node::Dir { .. } | Node::Absent,
                        Node::Dir { .. } | Node::Absent
                    )
                )
            })
            .count();
        let bytes = steps
            .iter()
            .map(|s| match (&s.target, &s.expected) {
                (_, Node::File(f)) => f.len,
                (Node::File(f), Node::Absent) => f.len,
                _ => 0,
            })
            .sum();
        (files, bytes)
    }

    /// Bytes the record's kept entries take.
    pub fn size(&self) -> u64 {
        objects_size(&self.top.join(OBJECTS))
    }
}

/// Bytes the kept entries of `session_dir`'s record take (its top-level session's): what the
/// budget is checked against before the log is read.
pub fn kept_size(session_dir: &Path) -> u64 {
    top_level(session_dir).map_or(0, |t| objects_size(&t.join(OBJECTS)))
}

fn objects_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// The position of the first line of `s`'s path in the turn (its `before`'s line).
fn first_pos(r: &Record, s: &Step) -> usize {
    r.recs
        .iter()
        .position(|x| match x {
            Rec::Change {
                path,
                path_bytes,
                before,
                ..
            } => real(path, path_bytes.as_ref()) == s.rel && *before == s.target,
            _ => false,
        })
        .unwrap_or(s.pos)
}

fn mode_text(n: &Node) -> String {
    match n {
        Node::File(f) => format!("mode 10{:04o}", f.mode & 0o777),
        Node::Link { .. } => "mode 120000".into(),
        _ => String::new(),
    }
}

fn link_text(n: &Node) -> Option<&str> {
    match n {
        Node::Link { target, .. } => Some(target),
        _ => None,
    }
}

/// A link's "content" is its target (as git shows it).
fn with_link(n: &Node, bytes: &[u8]) -> Vec<u8> {
    match n {
        Node::Link {
            target,
            target_bytes,
        } => target_bytes
            .clone()
            .unwrap_or_else(|| target.as_bytes().to_vec()),
        _ => bytes.to_vec(),
    }
}

/// Temporary names a restore writes before its rename.
const TEMP: &str = ".tern-restore-";

/// The letter a restore's change gets: `A` put back, `D` removed, `P` bits only, `M` else.
fn status_of(now: &Node, target: &Node, r: &Record, ws: &Dir, rel: &Path) -> Option<char> {
    match (now, target) {
        (Node::Absent, Node::Absent) => None,
        (Node::Dir { .. }, Node::Absent) | (Node::Absent, Node::Dir { .. }) => None,
        (Node::Dir { .. }, Node::Dir { .. }) => None,
        (Node::Absent, _) => Some('A'),
        (_, Node::Absent) => Some('D'),
        (Node::File(n), Node::File(t)) if n.mode != t.mode && n.len == t.len => {
            let mut same_bits = t.clone();
            same_bits.mode = n.mode;
            if r.same_content(ws, rel, now, &Node::File(same_bits)) {
                Some('P')
            } else {
                Some('M')
            }
        }
        _ => Some('M'),
    }
}

fn bits_of(now: &Node, target: &Node) -> Option<(u32, u32)> {
    match (now, target) {
        (Node::File(n), Node::File(t)) => Some((n.mode & 0o7777, t.mode & 0o7777)),
        _ => None,
    }
}

/// Removes the folder `name` of `parent` (at `rel`) and what it holds, each entry kept in the
/// record and named by a `restore` line of group `g`; a repository inside stays.
fn remove_tree_recorded(
    r: &mut Record,
    rec: &Recorder,
    parent: &Dir,
    name: &OsStr,
    rel: &Path,
    g: u32,
) -> io::Result<()> {
    if name == ".git" {
        return Err(io::Error::other(format!(
            "{}: a repository is in the way",
            rel.display()
        )));
    }
    let st = parent.lstat(name)?;
    if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
        let sub = parent.beneath(Path::new(name))?;
        for n in sub.names()? {
            remove_tree_recorded(r, rec, &sub, &n, &rel.join(&n), g)?;
        }
        r.restore_line(
            g,
            rel,
            Node::Dir {
                mode: st.st_mode & 0o7777,
            },
            Node::Absent,
        )?;
        parent.remove_dir(name)
    } else {
        let (kept, obj) = rec.plan_removal(parent, name)?;
        r.restore_line(g, rel, kept, Node::Absent)?;
        rec.remove(parent, name, obj.as_deref())
    }
}

/// The entries beneath the workspace folder `rel` that no step names (a folder not named is
/// named itself, not walked): what the person put in a folder a turn made. Not a folder: none.
fn foreign_beneath(ws: &Dir, rel: &Path, known: &BTreeSet<PathBuf>) -> Vec<String> {
    fn walk(d: &Dir, rel: &Path, known: &BTreeSet<PathBuf>, out: &mut Vec<String>) {
        let Ok(mut names) = d.names() else { return };
        names.sort();
        for n in names {
            let p = rel.join(&n);
            if !known.contains(&p) {
                out.push(p.to_string_lossy().into_owned());
                continue;
            }
            if let Ok(sub) = d.beneath(Path::new(&n)) {
                walk(&sub, &p, known, out);
            }
        }
    }
    let mut out = Vec::new();
    if let Ok(d) = ws.beneath(rel) {
        walk(&d, rel, known, &mut out);
    }
    out
}

/// Makes the folders of `rel` that are missing (mode 0755 less the umask).
fn make_parents(ws: &Dir, rel: &Path) -> io::Result<()> {
    let mut at = ws.beneath(Path::new(""))?;
    for c in rel.components() {
        let name = c.as_os_str();
        at.make_dir(name, 0o755)?;
        at = at.beneath(Path::new(name))?;
    }
    Ok(())
}

/// What the workspace holds at `rel` now (a link on the way: absent, as the door sees it).
fn now_node(ws: &Dir, rel: &Path) -> Node {
    let parent = rel.parent().unwrap_or(Path::new(""));
    let Some(name) = rel.file_name() else {
        return Node::Absent;
    };
    let Ok(dir) = ws.beneath(parent) else {
        return Node::Absent;
    };
    let Ok(st) = dir.lstat(name) else {
        return Node::Absent;
    };
    match dir.stat(name).map(|s| s.kind) {
        Ok(Kind::File) => Node::File(file_node(&st, None)),
        Ok(Kind::Dir) => Node::Dir {
            mode: st.st_mode & 0o7777,
        },
        Ok(Kind::Link) => match dir.read_link(name) {
            Ok(t) => {
                let (target, target_bytes) = text_of(&t);
                Node::Link {
                    target,
                    target_bytes,
                }
            }
            Err(_) => Node::Absent,
        },
        _ => Node::Absent,
    }
}

/// Whether `now` is the very entry `want` names (a file by inode, size, time and bits).
fn same(now: &Node, want: &Node) -> bool {
    match (now, want) {
        (Node::File(a), Node::File(b)) => {
            a.ino == b.ino && a.len == b.len && a.mtime_ns == b.mtime_ns && a.mode == b.mode
        }
        (Node::Dir { .. }, Node::Dir { .. }) => true,
        (a, b) => a == b,
    }
}

fn open_rel(ws: &Dir, rel: &Path) -> io::Result<std::fs::File> {
    let parent = ws.beneath(rel.parent().unwrap_or(Path::new("")))?;
    parent.open_file(rel.file_name().unwrap_or_default(), libc::O_RDONLY, 0)
}

/// Paths (text) → the set of those ignored; the verbs pass git's answer, tests their own.
pub type Ignored<'a> = &'a dyn Fn(&[String]) -> BTreeSet<String>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A state folder with a session and a workspace beside it.
    struct Place {
        _tmp: tempfile::TempDir,
        session: PathBuf,
        ws: PathBuf,
    }

    fn place() -> Place {
        let tmp = tempfile::tempdir().unwrap();
        let session = tmp.path().join("state/sessions/s1");
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(&session).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        Place {
            _tmp: tmp,
            session,
            ws,
        }
    }

    /// Writes `bytes` at `name` the door's way: a new file, the old one kept, the line, the
    /// rename.
    fn door_write(rec: &Recorder, ws: &Dir, turn: u32, name: &str, bytes: &[u8]) {
        let tmp = OsString::from(format!(".new-{name}"));
        std::fs::write(ws.path().join(&tmp), bytes).unwrap();
        let made = ws.lstat(&tmp).unwrap();
        let before = rec.keep(ws, OsStr::new(name)).unwrap();
        rec.change(
            turn,
            Path::new(name),
            before,
            Node::File(file_node(&made, None)),
        )
        .unwrap();
        ws.rename(&tmp, ws, OsStr::new(name)).unwrap();
    }

    fn door_remove(rec: &Recorder, ws: &Dir, turn: u32, name: &str) {
        let (before, obj) = rec.plan_removal(ws, OsStr::new(name)).unwrap();
        rec.change(turn, Path::new(name), before, Node::Absent)
            .unwrap();
        rec.remove(ws, OsStr::new(name), obj.as_deref()).unwrap();
    }

    fn read(p: &Place, name: &str) -> Option<String> {
        std::fs::read_to_string(p.ws.join(name)).ok()
    }

    const NONE: Ignored<'static> = &|_| BTreeSet::new();

    #[test]
    fn the_turn_of_a_turns_file_is_its_last_whole_line() {
        let p = place();
        let f = p.session.join("turns.jsonl");
        assert_eq!(last_turn(&f), 0);
        let long = "x".repeat(100_000);
        std::fs::write(
            &f,
            format!("{{\"turn\":1,\"system\":\"{long}\"}}\n{{\"turn\":2,\"plan\":\"{long}\"}}\n{{\"turn\":3,\"at"),
        )
        .unwrap();
        assert_eq!(last_turn(&f), 2, "a torn last line is not a turn");
    }

    #[test]
    fn undo_puts_back_what_the_door_replaced_and_redo_returns() {
        let p = place();
        std::fs::write(p.ws.join("a.txt"), "zero\n").unwrap();
        std::fs::write(p.ws.join("c.txt"), "gone\n").unwrap();
        let rec = Recorder::new(&p.session, u64::MAX).unwrap();
        let ws = Dir::hold(&p.ws).unwrap();
        door_write(&rec, &ws, 1, "a.txt", b"one\n");
        door_remove(&rec, &ws, 1, "c.txt");
        door_write(&rec, &ws, 2, "a.txt", b"two\n");
        door_write(&rec, &ws, 2, "n.txt", b"new\n");

        let mut r = Record::open(&p.session, &p.ws).unwrap();
        assert_eq!(r.undoable(NONE), vec![2, 1]);
        let done = r.undo(&[2], false, NONE).unwrap();
        assert_eq!(done.changes.len(), 2, "{:?}", done.changes);
        assert_eq!(read(&p, "a.txt").as_deref(), Some("one\n"));
        assert_eq!(read(&p, "n.txt"), None);
        let mut r = Record::open(&p.session, &p.ws).unwrap();
        assert_eq!(r.undoable(NONE), vec![1], "a chained undo goes on back");
        r.undo(&[1], false, NONE).unwrap();
        assert_eq!(read(&p, "a.txt").as_deref(), Some("zero\n"));
        assert_eq!(read(&p, "c.txt").as_deref(), Some("gone\n"));
        let mut r = Record::open(&p.session, &p.ws).unwrap();
        r.redo().unwrap();
        r.redo().unwrap();
        assert_eq!(read(&p, "a.txt").as_deref(), Some("two\n"));
        assert_eq!(read(&p, "c.txt"), None);
        assert_eq!(read(&p, "n.txt").as_deref(), Some("new\n"));
        assert!(r.redo().is_err(), "nothing more to redo");
        // Undone again after a redo: the restored copies are followed, not the door's inodes.
        let mut r = Record::open(&p.session, &p.ws).unwrap();
        r.undo(&[2, 1], false, NONE).unwrap();
        assert_eq!(read(&p, "a.txt").as_deref(), Some("zero\n"));
    }

    #[test]
    fn a_path_the_person_changed_is_kept_or_refuses_and_ignored_paths_are_left_alone() {
        let p = place();
        std::fs::write(p.ws.join("a.txt"), "zero\n").unwrap();
        let rec = Recorder::new(&p.session, u64::MAX).unwrap();
        let ws = Dir::hold(&p.ws).unwrap();
        door_write(&rec, &ws, 1, "a.txt", b"one\n");
        door_write(&rec, &ws, 1, "m.txt", b"made\n");
        door_write(&rec, &ws, 1, "x.log", b"log\n");
        std::fs::write(p.ws.join("a.txt"), "mine\n").unwrap();
        std::fs::write(p.ws.join("m.txt"), "mine too\n").unwrap();
        let logs: Ignored<'_> = &|paths: &[String]| {
            paths
                .iter()
                .filter(|p| p.ends_with(".log"))
                .cloned()
                .collect()
        };
        let mut r = Record::open(&p.session, &p.ws).unwrap();
        let e = r.undo(&[1], false, logs).unwrap_err().to_string();
        assert!(e.contains("a.txt") && !e.contains("m.txt"), "{e}");
        assert_eq!(
            read(&p, "a.txt").as_deref(),
            Some("mine\n"),
            "nothing changed"
        );
        let done = r.undo(&[1], true, logs).unwrap();
        assert_eq!(done.kept, vec!["m.txt".to_string()]);
        assert_eq!(done.overwritten, vec!["a.txt".to_string()]);
        assert_eq!(read(&p, "a.txt").as_deref(), Some("zero\n"));
        assert_eq!(read(&p, "m.txt").as_deref(), Some("mine too\n"));
        assert_eq!(
            read(&p, "x.log").as_deref(),
            Some("log\n"),
            "ignored: untouched"
        );
        r.redo().unwrap();
        assert_eq!(
            read(&p, "a.txt").as_deref(),
            Some("mine\n"),
            "redo brings it back"
        );
    }

    #[test]
    fn the_budget_prunes_the_oldest_turns_but_never_the_newest() {
        let p = place();
        std::fs::write(p.ws.join("a.txt"), vec![1u8; 1000]).unwrap();
        let rec = Recorder::new(&p.session, u64::MAX).unwrap();
        let ws = Dir::hold(&p.ws).unwrap();
        for t in 1..=4u8 {
            door_write(&rec, &ws, u32::from(t), "a.txt", &vec![t + 1; 1000]);
        }
        let mut r = Record::open(&p.session, &p.ws).unwrap();
        assert_eq!(r.size(), 4000);
        assert!(r.prune(10_000).unwrap().is_none());
        let said = r.prune(1500).unwrap().unwrap();
        assert!(said.contains("turns up to 3"), "{said}");
        assert_eq!(r.size(), 1000);
        assert_eq!(r.undoable(NONE), vec![4]);
        let r = Record::open(&p.session, &p.ws).unwrap();
        assert_eq!(r.undoable(NONE), vec![4], "read back from the log");
    }
}
