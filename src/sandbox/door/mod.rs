//! The door (issue 42, DESIGN §10): the one way the model's commands change the person's
//! workspace when the jail runs on a **layer**.
//!
//! In workspace-write the jail shows the workspace through an overlayfs mount of its own: the
//! workspace is the lower layer (never written from the jail), and what commands write lands in
//! an upper layer tern owns (`layer.rs` places it). After each command, at the end of the turn
//! and before the jail goes, [`Door::pass`] walks the upper layer and brings each change it has
//! not seen yet into the workspace — or holds it back — by [`rules::judge`], a pure function
//! of (the change, what the workspace holds now), tested as data. Everything else follows:
//! a name that did not exist when the jail started, a renamed parent, a nested repository
//! at any depth, a background job writing between commands all meet the same rules, because
//! the rules are applied to each change rather than walls built around the names present at
//! start.
//!
//! What is held back stays in the layer, so the model's view inside the jail keeps it (its own
//! new repository stays usable there); a new repository and a file the person changed meanwhile
//! are also kept aside in the session folder (`held/N/…`, listed in `held.jsonl`), where
//! `tern held` shows them and `tern held take N` applies one after the person has looked.
//!
//! The door never follows a link: the upper layer and the workspace are both walked with
//! folder descriptors ([`crate::store::dirfd::Dir`]), so a link the jail plants in its layer is
//! copied as a link (and judged), never read through.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub mod rules;
mod walk;

pub use crate::event::Held;
pub use rules::{Reason, Verdict};

/// The session folder's record of what the door kept aside, one JSON line each (DESIGN §3).
pub const HELD_LOG: &str = "held.jsonl";

/// The session folder's folder of kept-aside content: `held/N/<path in the workspace>`.
pub const HELD_DIR: &str = "held";

/// A file's identity and state as `stat` gives it: changes when its content, mode or inode do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fp {
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    mode: u32,
}

impl Fp {
    fn of(st: &libc::stat) -> Fp {
        Fp {
            ino: st.st_ino,
            len: u64::try_from(st.st_size).unwrap_or(0),
            mtime_ns: i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec),
            ctime_ns: i128::from(st.st_ctime) * 1_000_000_000 + i128::from(st.st_ctime_nsec),
            mode: st.st_mode,
        }
    }
}

/// What the door knows of a path it handled: the layer's entry as it was then, and the
/// workspace's entry right after (None: nothing there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    upper: Fp,
    ws: Option<Fp>,
    /// Held back whole (a new repository): what lies beneath is not walked.
    whole: bool,
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Entries written, made or removed in the workspace.
    pub applied: usize,
    /// Changes held back.
    pub held: Vec<Held>,
    /// Applied files a person's tool runs on its own (relative), for the end of the turn.
    pub listed: Vec<PathBuf>,
    /// Changes that could not be applied (a full disk, a folder the person removed): one line
    /// each. They stay in the layer and are tried again at the next pass.
    pub failed: Vec<String>,
    /// One-time notices of the layer itself (the kernel refused it, a change of a jail that
    /// ended could not be applied).
    pub said: Vec<String>,
}

impl Report {
    /// Adds another door's pass to this one.
    pub fn merge(&mut self, other: Report) {
        self.applied += other.applied;
        self.held.extend(other.held);
        self.listed.extend(other.listed);
        self.failed.extend(other.failed);
        self.said.extend(other.said);
    }

    /// Nothing the model reads: what was held back, not applied or said (the listed files are
    /// the person's to read, in the `door` event at the turn's end: no tokens for the model).
    pub fn is_quiet_for_model(&self) -> bool {
        self.held.is_empty() && self.failed.is_empty() && self.said.is_empty()
    }
}

impl fmt::Display for Report {
    /// The sentences the model reads after its command's output: what was held back, not
    /// applied, or is said once.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut sep = |f: &mut fmt::Formatter<'_>| {
            if !std::mem::take(&mut first) {
                f.write_str(" ")?;
            }
            Ok(())
        };
        for h in &self.held {
            sep(f)?;
            write!(
                f,
                "Not applied to the workspace: {}: {}",
                h.path.display(),
                h.reason
            )?;
            if let Some(k) = &h.kept {
                write!(f, " (kept at {})", k.display())?;
            }
            f.write_str(".")?;
        }
        for line in &self.failed {
            sep(f)?;
            write!(f, "Not applied yet: {line}.")?;
        }
        for line in &self.said {
            sep(f)?;
            write!(f, "Note: {line}.")?;
        }
        Ok(())
    }
}

/// The person's line for a `door` event: what was held back (and how to take it) and which
/// files their tools run on their own changed.
pub fn describe(held: &[Held], listed: &[String]) -> String {
    let mut parts = Vec::new();
    for h in held {
        let mut p = format!("not applied: {}: {}", h.path.display(), h.reason);
        if h.n > 0 {
            p.push_str(&format!(" (tern held take {})", h.n));
        }
        parts.push(p);
    }
    if !listed.is_empty() {
        parts.push(format!(
            "files your tools run on their own changed: {}",
            listed.join(", ")
        ));
    }
    parts.join("; ")
}

/// The door of one layer: the workspace it writes, the layer it reads, what it has seen.
#[derive(Debug)]
pub struct Door {
    root: PathBuf,
    upper: PathBuf,
    session: PathBuf,
    named: Vec<PathBuf>,
    /// tern's state folder, relative to the workspace (when inside it).
    state: Option<PathBuf>,
    seen: HashMap<PathBuf, Seen>,
    /// When the layer last looked at the workspace (the jail's start, then each pass's start):
    /// a workspace file changed after it, that the door never wrote, is the person's.
    last_look: SystemTime,
    kept: u32,
    /// New repositories kept aside: (path in the workspace, where kept), refreshed at the end.
    repos: Vec<(PathBuf, PathBuf)>,
    /// Listed files applied since the turn began, each once.
    listed: Vec<PathBuf>,
    /// The disk floor: the door never writes the workspace's file system below it.
    floor: crate::policy::DiskFloor,
    /// Paths are said and kept by their full path (an `--add-dir`'s door), not relative.
    absolute: bool,
    /// Where what this door applies is recorded for undo (the workspace's door).
    record: Option<crate::checkpoint::record::Recorder>,
}

impl Door {
    /// The door from the layer `upper` to the workspace `root` (both absolute), keeping aside
    /// into the session folder `session`; `named`: workspace files the person's tools run
    /// (relative: the scripts of trusted hooks and MCP servers, what git config names); `state`:
    /// tern's state folder (nothing at or beneath it is ever applied).
    pub fn new(
        root: &Path,
        upper: &Path,
        session: &Path,
        state: &Path,
        named: Vec<PathBuf>,
        floor: crate::policy::DiskFloor,
    ) -> Door {
        let mut named = named;
        named.extend(walk::named_by_git_config(root));
        Door {
            root: root.to_path_buf(),
            upper: upper.to_path_buf(),
            session: session.to_path_buf(),
            named,
            state: state.strip_prefix(root).ok().map(Path::to_path_buf),
            seen: HashMap::new(),
            last_look: SystemTime::now(),
            kept: walk::last_kept(&session.join(HELD_LOG)),
            repos: Vec::new(),
            listed: Vec::new(),
            floor,
            absolute: false,
            record: None,
        }
    }

    /// Records what this door applies (the workspace's door: its record is the checkpoint).
    pub fn record(&mut self, recorder: Option<crate::checkpoint::record::Recorder>) {
        self.record = recorder;
    }

    /// The layer's upper folder.
    pub fn upper(&self) -> &Path {
        &self.upper
    }

    /// The folder the door writes (the workspace, or an `--add-dir`).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Sets when the layer last looked at the workspace (a recovered layer: its jail's start),
    /// so a change the person made since counts as theirs.
    pub fn looked_at(&mut self, t: SystemTime) {
        self.last_look = t;
    }

    /// Says and keeps paths by their full path (an `--add-dir`'s door, whose root is not the
    /// workspace).
    pub fn name_absolute(&mut self, on: bool) {
        self.absolute = on;
    }

    /// `rel` as this door says it.
    fn shown(&self, rel: &Path) -> PathBuf {
        if self.absolute {
            self.root.join(rel)
        } else {
            rel.to_path_buf()
        }
    }

    /// Brings every change of the layer not seen yet into the workspace, or holds it back (see
    /// the module docs). Never fails as a whole: what could not be done is in
    /// [`Report::failed`] and tried again next time.
    pub fn pass(&mut self) -> Report {
        // One door at a time over a state folder's layers: the doors of two sessions (or of
        // a session and its server's jail) apply to the same workspace, and a door's look at
        // a file and its rename over it must not straddle another door's rename (a parallel
        // job's line was lost so: it looked, the other renamed, it renamed over). Best effort:
        // a lock that cannot be taken leaves the pass as it was.
        let _one = self.upper.ancestors().nth(3).and_then(|layers| {
            crate::store::lock::SessionLock::acquire(&layers.join(DOOR_LOCK)).ok()
        });
        let started = SystemTime::now();
        let mut report = Report::default();
        walk::pass(self, &mut report);
        self.last_look = started;
        if self.absolute {
            for h in &mut report.held {
                *h = Held::new(
                    h.n,
                    self.shown(&h.real_path()),
                    h.reason.clone(),
                    h.kept.clone(),
                );
            }
            for l in &mut report.listed {
                *l = self.shown(l);
            }
        }
        for l in &report.listed {
            if !self.listed.contains(l) {
                self.listed.push(l.clone());
            }
        }
        report
    }

    /// The last pass before the layer goes (the jail ends): [`Door::pass`], then the kept copies
    /// of new repositories brought up to date with what the model did in them since.
    pub fn finish(&mut self) -> Report {
        let report = self.pass();
        for (rel, dest) in &self.repos {
            let _ = walk::refresh_kept(&self.upper, rel, dest);
        }
        report
    }

    /// The listed files applied since the last call (the end of a turn), each once.
    pub fn take_listed(&mut self) -> Vec<PathBuf> {
        std::mem::take(&mut self.listed)
    }

    /// Bytes and entries the layer holds (`tern status`): a walk of the upper folder.
    pub fn size(&self) -> (u64, u64) {
        walk::size(&self.upper)
    }
}

/// The lock every door of a state folder's layers takes for its pass, in the layers' folder
/// (`<state>/layers/.door.lock`): not a layer folder's name, so the sweep leaves it.
const DOOR_LOCK: &str = ".door.lock";

/// The bytes and entries of the layers process `pid` runs under the state folder `state_root`
/// (`layers/<pid>-<n>/`, every layer of each), for `tern status`.
pub fn layers_of(state_root: &Path, pid: u32) -> (u64, u64) {
    let prefix = format!("{pid}-");
    let Ok(rd) = std::fs::read_dir(state_root.join("layers")) else {
        return (0, 0);
    };
    rd.flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .flat_map(|e| std::fs::read_dir(e.path()).into_iter().flatten().flatten())
        .map(|l| walk::size(&l.path().join("upper")))
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
}

/// The kept-aside changes of a session folder (its `held.jsonl`), oldest first; a torn or
/// foreign line is skipped.
pub fn held_in(session_dir: &Path) -> Vec<Held> {
    std::fs::read_to_string(session_dir.join(HELD_LOG))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Applies the kept-aside change `n` of a session folder to the workspace `root` (the person's
/// own choice, after `tern held` showed it): its content is copied to its path, replacing what
/// is there. Returns the path written. Errors: no such change, or its content is gone, or the
/// copy failed (one line).
pub fn take(session_dir: &Path, root: &Path, n: u32) -> Result<PathBuf, String> {
    let h = held_in(session_dir)
        .into_iter()
        .find(|h| h.n == n && n > 0)
        .ok_or_else(|| {
            format!("no kept-aside change {n} in this session (tern held lists them)")
        })?;
    if h.kept.is_none() {
        return Err(format!("change {n} was not kept aside"));
    }
    // Where it is kept and where it goes, from its real bytes (the record's text is lossy).
    let rel = h.real_path();
    let dest = root.join(&rel);
    let kept = session_dir
        .join(HELD_DIR)
        .join(n.to_string())
        .join(rel.strip_prefix("/").unwrap_or(&rel));
    walk::take(&kept, &dest).map_err(|e| {
        format!(
            "could not copy {} to {}: {e}",
            kept.display(),
            dest.display()
        )
    })?;
    Ok(dest)
}
