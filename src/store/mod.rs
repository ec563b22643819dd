//! The state folder `.tern/` and its session folders (DESIGN.md §3).
//!
//! Every whole-file write is atomic (tempfile in the same folder, fsync, rename), every
//! read-modify-write holds the session's fs2 lock, JSONL is appended in whole lines and a torn last
//! line is skipped on read. Nothing is written through a symlink planted inside `.tern/`.

pub mod dirfd;
pub mod fsutil;
pub mod lease;
pub mod lock;
pub mod redact;
pub mod session;

use std::io;
use std::path::{Path, PathBuf};

pub use session::{Meta, Session, Status, WorktreeLink, files};

/// The `.tern/` folder of a workspace.
#[derive(Debug, Clone)]
pub struct StateDir {
    /// The `.tern` folder (or the `--state-dir` override).
    pub root: PathBuf,
    /// The workspace root: where the bash tool runs and `AGENTS.md` is read.
    pub workspace: PathBuf,
}

impl StateDir {
    /// Finds the workspace from `cwd`: the nearest ancestor holding `.tern/`, else the git root,
    /// else `cwd` itself. `override_dir` (`--state-dir` / `TERN_STATE_DIR`) replaces the state
    /// folder but not the workspace.
    pub fn locate(cwd: &Path, override_dir: Option<&Path>) -> StateDir {
        let workspace = cwd
            .ancestors()
            .find(|a| a.join(".tern").is_dir())
            .or_else(|| cwd.ancestors().find(|a| a.join(".git").exists()))
            .unwrap_or(cwd);
        StateDir::at(workspace, cwd, override_dir)
    }

    /// The state folder of the workspace `workspace` (an editor names it: ACP's `cwd`):
    /// `<workspace>/.tern`, or `override_dir` (relative to `cwd`). The one rule of where a
    /// workspace keeps its state.
    pub fn at(workspace: &Path, cwd: &Path, override_dir: Option<&Path>) -> StateDir {
        let root = match override_dir {
            Some(d) if d.is_absolute() => d.to_path_buf(),
            Some(d) => cwd.join(d),
            None => workspace.join(".tern"),
        };
        StateDir {
            root,
            workspace: workspace.to_path_buf(),
        }
    }

    /// Creates `.tern/`, its `.gitignore` (`*`) and `sessions/` when absent.
    ///
    /// Errors: a state folder that cannot be written (a read-only workspace) says so and names
    /// `--state-dir`.
    pub fn init(&self) -> io::Result<()> {
        self.init_here().map_err(|e| match e.kind() {
            io::ErrorKind::ReadOnlyFilesystem | io::ErrorKind::PermissionDenied => io::Error::new(
                e.kind(),
                format!(
                    "{e}: tern cannot write its state in {}; pass --state-dir DIR (or set TERN_STATE_DIR) to keep it in a writable folder",
                    self.root.display()
                ),
            ),
            _ => e,
        })
    }

    fn init_here(&self) -> io::Result<()> {
        fsutil::ensure_dir(&self.root)?;
        let gi = self.root.join(".gitignore");
        if fsutil::read_text(&gi)?.is_none() {
            let _lock = root_lock(&self.root)?;
            fsutil::atomic_write(&gi, b"*\n")?;
        }
        fsutil::ensure_dir(&self.root.join("sessions"))
    }

    /// Errors when the state folder or its `sessions/` is a symbolic link: every writer refuses
    /// one (see [`fsutil::ensure_dir`]), so a reader refuses it with the same words instead of
    /// showing what no session can be written into.
    ///
    /// A file in the state folder's place fails with the words every writer uses, so every
    /// verb exits 1 on it as `tern exec` does.
    pub fn check_links(&self) -> io::Result<()> {
        fsutil::refuse_symlink(&self.root)?;
        if std::fs::symlink_metadata(&self.root).is_ok_and(|m| !m.is_dir()) {
            return Err(fsutil::not_a_folder(
                &self.root,
                io::ErrorKind::AlreadyExists,
            ));
        }
        fsutil::refuse_symlink(&self.root.join("sessions"))
    }

    /// Removes what a crash left in `.tern/` itself: tempfiles (a write of `current` or
    /// `.gitignore` cut short) and half-built session folders (`sessions/.tmp-*`, a creation cut
    /// short), under the state folder's lock that those writes and every creation take.
    /// Returns how many were removed.
    pub fn remove_stray_temps(&self) -> io::Result<usize> {
        if !self.root.is_dir() {
            return Ok(0);
        }
        let _lock = root_lock(&self.root)?;
        Ok(fsutil::remove_stray_temps(&self.root)?
            + fsutil::remove_stray_folders(&self.root.join("sessions"))?)
    }

    /// Folder of session `id` (not checked).
    fn session_dir(&self, id: &str) -> PathBuf {
        self.root.join("sessions").join(id)
    }

    /// The one session writer: a new session folder holding `new` (its id and `created_at` are
    /// filled in, its title cut by the one title rule), at the top level (under the state
    /// folder's lock, after sweeping what a killed creation left) or under a parent's `agents/`.
    /// The folder is built under a temporary name and renamed into place: it appears complete or
    /// not at all (DESIGN.md §12). Pointing `current` at it is the caller's policy.
    ///
    /// Errors: any write (the half-built folder is removed; one a kill left is swept by the
    /// next start).
    pub fn write_session(&self, place: Place<'_>, new: &NewSession) -> io::Result<Session> {
        let mut meta = new.meta.clone();
        meta.title = crate::text::title(&meta.title);
        let fill = |s: &Session, lock: &lock::SessionLock| new.fill(s, lock);
        match place {
            Place::TopLevel => {
                // Start-up: what a killed creation or write left in the state folder goes first.
                self.remove_stray_temps()?;
                self.init()?;
                // Held while the folder is built, so a start-up sweep in another process never
                // removes a creation in flight (the sweep takes it too).
                let _lock = root_lock(&self.root)?;
                create_in(&self.root.join("sessions"), meta, fill)
            }
            // A sub-agent's leftovers are swept when its parent is reopened
            // ([`Session::remove_stray_temps`]), which no process does while the parent runs.
            Place::ChildOf(parent) => create_in(&parent.path(files::AGENTS), meta, fill),
        }
    }

    /// Opens an existing session by exact id, unique id prefix, or unique part of an id.
    ///
    /// Errors: no such session, an ambiguous prefix, an id with characters outside
    /// `[A-Za-z0-9._-]` (never a path), or a session folder that is a symlink.
    pub fn open_session(&self, id: &str) -> io::Result<Session> {
        if id.is_empty()
            || id.starts_with('.')
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(io::Error::other(format!("not a session id: {id:?}")));
        }
        let exact = self.session_dir(id);
        if exact.join(files::META).is_file() {
            fsutil::refuse_symlink(&exact)?;
            return Ok(Session::at(id, exact));
        }
        // A unique prefix, else a unique part (ids share their date, so the random end is handy).
        let ids = self.session_ids()?;
        let mut matches: Vec<String> = ids.iter().filter(|s| s.starts_with(id)).cloned().collect();
        if matches.is_empty() {
            matches = ids.into_iter().filter(|s| s.contains(id)).collect();
        }
        match matches.as_slice() {
            [one] => {
                let dir = self.session_dir(one);
                fsutil::refuse_symlink(&dir)?;
                Ok(Session::at(one, dir))
            }
            [] => Err(io::Error::other(match self.find_children(id).as_slice() {
                [(child, parent, dir)] => format!(
                    "{child} is a sub-agent of session {parent}, not a session of its own: `tern sessions` lists it under its parent, `tern status --session {parent}` shows it while it runs, and its files are in {}",
                    dir.parent().unwrap_or(dir).display()
                ),
                [] => format!(
                    "no session {id:?} in {} (see `tern sessions`)",
                    self.root.display()
                ),
                many => format!(
                    "{id:?} names no session, and is ambiguous among sub-agents: {}",
                    many.iter()
                        .map(|(c, p, _)| format!("{c} (of session {p})"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })),
            many => Err(io::Error::other(format!(
                "session id {id:?} is ambiguous: {}",
                many.join(", ")
            ))),
        }
    }

    /// The sub-agents (at any depth) that `id` names as [`StateDir::open_session`] names a
    /// session: those whose id starts with `id`, else those whose id holds it (the short unique
    /// part `tern sessions` suggests). Each as (its id, its top-level session's id, its folder).
    fn find_children(&self, id: &str) -> Vec<(String, String, PathBuf)> {
        type Found = Vec<(String, String, PathBuf)>;
        fn walk(dir: &Path, top: &str, depth: usize, out: &mut Found) {
            if depth > 16 {
                return;
            }
            for (n, child) in session::child_dirs(&dir.join(files::AGENTS)) {
                out.push((n, top.to_string(), child.clone()));
                walk(&child, top, depth + 1, out);
            }
        }
        let mut all = Vec::new();
        for p in self.session_ids().unwrap_or_default() {
            walk(&self.session_dir(&p), &p, 0, &mut all);
        }
        let prefixed: Found = all
            .iter()
            .filter(|(c, ..)| c.starts_with(id))
            .cloned()
            .collect();
        if !prefixed.is_empty() {
            return prefixed;
        }
        all.into_iter().filter(|(c, ..)| c.contains(id)).collect()
    }

    /// The session named by `.tern/current`, if any. Errors name the file: a `current` that
    /// names no session (edited, or its session removed) says so.
    pub fn current(&self) -> io::Result<Option<Session>> {
        let path = self.root.join("current");
        match fsutil::read_text(&path)? {
            Some(t) if !t.trim().is_empty() => self.open_session(t.trim()).map(Some).map_err(|e| {
                io::Error::other(format!("{} names {:?}: {e}", path.display(), t.trim()))
            }),
            _ => Ok(None),
        }
    }

    /// Points `.tern/current` at `id` (atomic write under the state folder's lock).
    pub fn set_current(&self, id: &str) -> io::Result<()> {
        let _lock = root_lock(&self.root)?;
        fsutil::atomic_write(&self.root.join("current"), format!("{id}\n").as_bytes())
    }

    /// Every session id, sorted oldest first (ids sort by creation time).
    pub fn session_ids(&self) -> io::Result<Vec<String>> {
        let dir = self.root.join("sessions");
        let mut ids = Vec::new();
        match std::fs::read_dir(&dir) {
            Ok(rd) => {
                for e in rd {
                    let e = e?;
                    let name = e.file_name().to_string_lossy().into_owned();
                    // A dot-name is a half-built session (`.tmp-*`: see `create_in`), never one
                    // to open.
                    if e.file_type()?.is_dir() && !name.starts_with('.') {
                        ids.push(name);
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(fsutil::with_path(e, &dir)),
        }
        ids.sort();
        Ok(ids)
    }
}

/// Where [`StateDir::write_session`] puts a new session.
#[derive(Debug, Clone, Copy)]
pub enum Place<'a> {
    /// `sessions/<id>/`: a session of its own (a person's, a fork, a relay).
    TopLevel,
    /// `<parent>/agents/<id>/`: a sub-agent's, not listed among the top-level sessions, never
    /// `current`.
    ChildOf(&'a Session),
}

/// Everything a new session folder starts with: every creation (a new session, a sub-agent, a
/// fork, a relay) writes this one shape.
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    /// `meta.json` (id and creation time are filled in).
    pub meta: Meta,
    /// The exact bytes of `system.txt`.
    pub system: String,
    /// `conversation.jsonl`.
    pub history: Vec<crate::message::Message>,
    /// A carried plan: the locked text (`plan.md`) and `plan.json`.
    pub plan: Option<(Option<String>, serde_json::Value)>,
    /// A carried `ledger.json`.
    pub ledger: Option<serde_json::Value>,
    /// More files, by name: a fork's turn record.
    pub extra: Vec<(&'static str, Vec<u8>)>,
}

impl NewSession {
    /// Writes the files into the half-built folder `s` (an empty draft always).
    fn fill(&self, s: &Session, lock: &lock::SessionLock) -> io::Result<()> {
        s.write_text_locked(lock, files::SYSTEM, &self.system)?;
        s.write_text_locked(lock, files::DRAFT, "")?;
        if let Some((locked, state)) = &self.plan {
            if let Some(text) = locked {
                s.write_text_locked(lock, files::PLAN, text)?;
            }
            s.write_json_locked(lock, files::PLAN_STATE, state)?;
        }
        if let Some(l) = &self.ledger {
            s.write_json_locked(lock, files::LEDGER, l)?;
        }
        if !self.history.is_empty() {
            s.append_messages_locked(lock, &self.history)?;
        }
        for (name, bytes) in &self.extra {
            fsutil::atomic_write(&s.path(name), bytes)?;
        }
        Ok(())
    }
}

/// A new session folder with a fresh id inside `dir`: built as `dir/.tmp-<id>/` (meta.json,
/// `spill/`, `archive/`, then `fill`), fsynced, then renamed to `dir/<id>/`: the rename is the
/// commit point.
fn create_in(
    dir: &Path,
    mut meta: Meta,
    fill: impl FnOnce(&Session, &lock::SessionLock) -> io::Result<()>,
) -> io::Result<Session> {
    fsutil::ensure_dir(dir)?;
    let mut id = crate::clock::new_session_id();
    while dir.join(&id).exists() || dir.join(format!("{}{id}", fsutil::TEMP_PREFIX)).exists() {
        id = crate::clock::new_session_id();
    }
    let building = dir.join(format!("{}{id}", fsutil::TEMP_PREFIX));
    let done = dir.join(&id);
    fsutil::fault::point("mkdir", &building);
    std::fs::create_dir(&building).map_err(|e| fsutil::with_path(e, &building))?;
    let built = (|| {
        fsutil::ensure_dir(&building.join(files::SPILL))?;
        fsutil::ensure_dir(&building.join(files::ARCHIVE))?;
        meta.id = id.clone();
        meta.created_at = crate::clock::now_rfc3339();
        meta.updated_at = meta.created_at.clone();
        {
            let half = Session::at(&id, building.clone());
            let lock = half.lock()?;
            half.write_meta_locked(&lock, &meta)?;
            fill(&half, &lock)?;
        }
        fsutil::rename_folder(&building, &done)
    })();
    if let Err(e) = built {
        // A failed creation (a full disk, a refused write) leaves nothing behind: the staged
        // folder was never visible under its name, so removing it loses nothing.
        if std::fs::symlink_metadata(&done).is_err() {
            let _ = std::fs::remove_dir_all(&building);
        }
        return Err(e);
    }
    Ok(Session::at(&id, done))
}

/// The lock of the state folder itself (`.tern/lock`), held by every write of `.tern/current` and
/// `.tern/.gitignore` and by the removal of stray tempfiles there.
pub fn root_lock(root: &Path) -> io::Result<lock::SessionLock> {
    lock::SessionLock::acquire(&root.join(files::LOCK))
}

/// The pid of another process holding `session` (running a turn or a rewriting verb), if any.
pub fn held_elsewhere(session: &Session) -> Option<u32> {
    match lease::Lease::holder(&session.dir) {
        Ok(Some(h)) => Some(h.pid.unwrap_or(0)),
        _ => None,
    }
}

/// Whether a turn of `meta`'s session is really running: `meta.json` says running and someone
/// holds the lease. A running status with a free lease is a turn whose process died.
pub fn really_running(session: &Session, meta: &Meta) -> bool {
    meta.status == Status::Running && held_elsewhere(session).is_some()
}
