//! Checkpoints and forks (DESIGN.md §14): undo any turn's file changes, branch the conversation at
//! any turn.
//!
//! - **Checkpoints**: before the first command of each turn (a bash call, or a sub-agent that may
//!   run some), the workspace's files are recorded in a shadow git repository in the state folder
//!   ([`store`], run hermetically by [`git`]): `.gitignore` and `.ternignore` honoured, files over
//!   [`Limits::max_file_bytes`] left out (said once per session, [`NOTED`]), links stored as
//!   links, the state folder excluded, the files' permission bits recorded beside ([`modes`]);
//!   a size budget prunes the oldest. A turn without a command costs nothing.
//! - **Undo / redo / diff / checkpoints**: the verbs of the op table, on those records.
//! - **Forks**: `turns.jsonl` ([`turns`]) says where each turn began, so [`fork`] makes a new
//!   session whose history, system prompt bytes, plan and ledger are the original's at the end of
//!   any turn; its first request repeats the original's bytes. [`rewind`] = fork + restore.
//!
//! The one door into the runtime is `Runtime::checkpoint` (src/runtime/checkpoints.rs), called
//! at the moments of [`Moment`]; it drives a [`Tracker`]. The store lives under the state folder, which the jail makes read-only
//! to commands.

pub mod git;
pub mod modes;
pub mod patch;
pub mod record;
pub mod store;
pub mod turns;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::store::session::ForkLink;
use crate::store::{Meta, NewSession, Place, Session, StateDir};
pub use store::{Change, Entry, Note, State, Store, size_text};

/// Limits of the checkpoint store (`TERN_CHECKPOINTS=off`, `TERN_CHECKPOINT_MAX_FILE`,
/// `TERN_CHECKPOINT_BUDGET`, both in bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Checkpoints are taken at all.
    pub enabled: bool,
    /// Files larger than this are not recorded (default 10 MB).
    pub max_file_bytes: u64,
    /// The store's size budget in bytes; None: 1 GiB or a tenth of the free space, whichever
    /// is smaller.
    pub budget_bytes: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            enabled: true,
            max_file_bytes: 10_000_000,
            budget_bytes: None,
        }
    }
}

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The turn whose checkpoint the workspace now is (None: the state an undo left).
    pub turn: Option<u32>,
    /// The file changes made, from the state before to the state restored.
    pub changes: Vec<Change>,
    /// Files the undo would have removed but kept: made or changed after the undone turns
    /// ended (the person's own work, not the model's).
    pub kept: Vec<String>,
    /// Files changed after the undone turns ended that a forced undo overwrote (saved first:
    /// `tern redo` brings them back).
    pub overwritten: Vec<String>,
    /// What finishing a restore a kill cut short said (it ran first, under the same lock).
    pub recovered: Vec<String>,
}

impl Restored {
    /// The notes of a finished cut-short restore, each as a line before the receipt.
    fn recovered_lines(&self) -> String {
        self.recovered.iter().map(|n| format!("{n}\n")).collect()
    }
}

impl Restored {
    /// "2 files restored, 1 removed, 1 put back".
    fn summary(&self) -> String {
        let count = |c: char| self.changes.iter().filter(|x| x.status == c).count();
        let (m, d, a, p) = (count('M'), count('D'), count('A'), count('P'));
        if m + d + a + p == 0 {
            return "no file needed to change".into();
        }
        let mut parts = Vec::new();
        if m > 0 {
            parts.push(format!("{m} file(s) restored"));
        }
        if d > 0 {
            parts.push(format!("{d} removed"));
        }
        if a > 0 {
            parts.push(format!("{a} put back"));
        }
        if p > 0 {
            parts.push(format!("{p} with their permission bits put back"));
        }
        let mut names: Vec<String> = self
            .changes
            .iter()
            .take(8)
            .map(|c| format!("{} {}", c.status, crate::render::safe(&c.path)))
            .collect();
        if self.changes.len() > 8 {
            names.push(format!("… and {} more", self.changes.len() - 8));
        }
        format!("{} ({})", parts.join(", "), names.join(", "))
    }
}

/// When the runtime passes through the door.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    /// The session was opened: a restore a kill cut short is finished (and said).
    Open,
    /// A turn began (the session held, its prompt not yet stored): `turns.jsonl` gets its line.
    TurnStart,
    /// A command (bash, or a sub-agent) is about to run: the turn's checkpoint, once.
    BeforeCommand,
    /// Sub-agents are about to run (they run commands of their own, through their own jails
    /// and doors): the turn's checkpoint, once, without starting this runtime's jail.
    BeforeAgents,
}

/// The runtime's checkpoint state.
#[derive(Default)]
pub struct Tracker {
    /// The running turn's number, once its line is written.
    turn: Option<u32>,
    /// This turn's checkpoint was taken (or tried).
    recorded: bool,
    /// The store, once opened.
    store: Option<Store>,
    /// Why checkpoints are off in this runtime (said once).
    off: Option<String>,
    /// Notes already said in this runtime.
    said: BTreeSet<String>,
    /// The files over the size limit already named in this session ([`NOTED`]), once read.
    noted: Option<BTreeSet<String>>,
}

/// The session's file naming the files over the checkpoint size limit it was told of, one JSON
/// line each (`{"over_limit": PATH}`): a big file is named once per session, not every turn
/// nor every process (issue 34). Append-only; a torn last line is skipped.
pub const NOTED: &str = "checkpoint-notes.jsonl";

/// One line of [`NOTED`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
struct Noted {
    over_limit: String,
}

/// The checkpoint store's files the sandbox guard keeps a copy of (where no jail makes the state
/// folder read-only, a command that changes them sees them put back): what steers tern's git
/// (`config`, `HEAD`, `info/attributes`, `info/exclude`), which tern writes only when it makes
/// the store. The refs (the newest snapshot's too) and the objects need the jail: every session
/// of the workspace rewrites them, so the guard of one cannot tell a command's change from
/// another tern's checkpoint (issue 33: it put back a sibling's refs).
pub fn guarded(state_root: &Path) -> Vec<PathBuf> {
    let git = state_root.join("checkpoints").join("git");
    ["config", "HEAD", "info/attributes", "info/exclude"]
        .iter()
        .map(|f| git.join(f))
        .collect()
}

/// The state folder above a top-level session folder (`<root>/sessions/<id>`): checkpoints are
/// a top-level session's.
fn state_root_of(session: &Session) -> Option<PathBuf> {
    session.state_root().filter(|_| session.is_top_level())
}

impl Tracker {
    /// The session was opened: finishes a restore a kill cut short. Returns what to say.
    pub fn opened(&mut self, session: &Session, workspace: &Path, limits: Limits) -> Vec<String> {
        let Some(root) = state_root_of(session) else {
            return Vec::new();
        };
        let mut notes = Vec::new();
        if let Err(e) = Store::sweep(&root) {
            notes.push(format!("checkpoint store: {e}"));
        }
        if !root.join("checkpoints").join("git").is_dir() {
            return self.fresh(notes);
        }
        match self.store(session, workspace, limits) {
            Ok(s) => match s.recover() {
                Ok(n) => notes.extend(n),
                Err(e) => notes.push(format!("checkpoint store: {e}")),
            },
            Err(e) => notes.push(e),
        }
        self.fresh(notes)
    }

    /// A turn began, `history_len` messages stored: its `turns.jsonl` line. Returns what to
    /// say.
    pub fn turn_started(&mut self, session: &Session, history_len: usize) -> Vec<String> {
        self.recorded = false;
        // On a nearly full disk, the turn's own files come first.
        if store::free_space(&session.dir).is_some_and(|f| f < store::MIN_FREE_BYTES) {
            self.turn = None;
            return self.fresh(vec![format!(
                "the disk holding the session has less than {} free: no turns.jsonl line and no checkpoints until there is room (fork and undo cannot go back to these turns)",
                size_text(store::MIN_FREE_BYTES)
            )]);
        }
        match turns::start(session, history_len) {
            Ok(n) => {
                self.turn = Some(n);
                Vec::new()
            }
            Err(e) => {
                self.turn = None;
                self.fresh(vec![format!("could not write turns.jsonl: {e}")])
            }
        }
    }

    /// A command is about to run: the turn's checkpoint, once per turn. `through_door`: the
    /// runtime's commands change the workspace only through the door, whose record
    /// ([`record`]) is the checkpoint: nothing is taken here. Returns what to say and, when
    /// the store was written, the files of it the guard keeps.
    pub fn before_command(
        &mut self,
        session: &Session,
        workspace: &Path,
        limits: Limits,
        through_door: bool,
    ) -> (Vec<String>, Vec<PathBuf>) {
        let Some(turn) = self.turn else {
            return (Vec::new(), Vec::new());
        };
        if self.recorded {
            return (Vec::new(), Vec::new());
        }
        self.recorded = true;
        if through_door {
            // The door's record is this turn's checkpoint: only its budget is kept here.
            let budget = store::budget_of(limits, &session.dir);
            // The log is read only when the kept entries are over the budget.
            let notes = if record::kept_size(&session.dir) <= budget {
                Vec::new()
            } else {
                match record::Record::open(&session.dir, workspace)
                    .and_then(|mut r| r.prune(budget))
                {
                    Ok(said) => said.into_iter().collect(),
                    Err(e) => vec![format!("the undo record: {e}")],
                }
            };
            return (self.fresh(notes), Vec::new());
        }
        let notes = match self.store(session, workspace, limits) {
            Ok(s) => match s.record_turn(&session.id, turn) {
                Ok((_, n)) => n,
                Err(e) => vec![Note::from(format!(
                    "no checkpoint before turn {turn}: {e}; undo cannot go back past it"
                ))],
            },
            Err(e) => vec![Note::from(e)],
        };
        let notes = self.once_per_session(session, notes);
        let written = state_root_of(session)
            .map(|r| guarded(&r))
            .unwrap_or_default();
        (self.fresh(notes), written)
    }

    /// `notes` without those about a file this session was told of already ([`NOTED`]); the
    /// files of the others are written there. A failed write costs a second mention.
    fn once_per_session(&mut self, session: &Session, notes: Vec<Note>) -> Vec<String> {
        let path = session.path(NOTED);
        let noted = self.noted.get_or_insert_with(|| {
            crate::store::fsutil::read_jsonl::<Noted>(&path)
                .map(|r| r.items.into_iter().map(|n| n.over_limit).collect())
                .unwrap_or_default()
        });
        let mut out = Vec::new();
        for n in notes {
            if let Some(file) = n.file {
                if !noted.insert(file.clone()) {
                    continue;
                }
                if let Ok(line) = crate::store::fsutil::to_jsonl(&Noted { over_limit: file }) {
                    let _ = crate::store::fsutil::append_line(&path, &line);
                }
            }
            out.push(n.text);
        }
        out
    }

    /// Whether the next command records the workspace (the turn's first command): a surface
    /// shows a note meanwhile (the first snapshot of a large tree takes seconds).
    pub fn records_now(&self) -> bool {
        self.turn.is_some() && !self.recorded
    }

    /// The notes not said yet in this runtime.
    fn fresh(&mut self, notes: Vec<String>) -> Vec<String> {
        notes
            .into_iter()
            .filter(|n| self.said.insert(n.clone()))
            .collect()
    }

    /// The store of this session's state folder, opened once. Errors (said once): no state
    /// folder above the session, no git, no room.
    fn store(
        &mut self,
        session: &Session,
        workspace: &Path,
        limits: Limits,
    ) -> Result<&Store, String> {
        if let Some(why) = &self.off {
            return Err(why.clone());
        }
        if self.store.is_none() {
            let opened = state_root_of(session)
                .ok_or_else(|| "the session has no state folder above it".to_string())
                .and_then(|root| Store::open(&root, workspace, limits).map_err(|e| e.to_string()));
            match opened {
                Ok(s) => self.store = Some(s),
                Err(e) => {
                    let why = format!("checkpoints are off: {e}");
                    self.off = Some(why.clone());
                    return Err(why);
                }
            }
        }
        self.store
            .as_ref()
            .ok_or_else(|| "checkpoints are off".to_string())
    }
}

/// The store of `state`, for the verbs. Errors: no git, or checkpoints off.
pub fn open(state: &StateDir, limits: Limits) -> Result<Store, Error> {
    if !limits.enabled {
        return Err(Error::Failed(
            "checkpoints are off (TERN_CHECKPOINTS=off)".into(),
        ));
    }
    Store::open(&state.root, &state.workspace, limits).map_err(failed)
}

/// `tern undo [N] [--force]`: the workspace as it was before the last `n` turns of `session`
/// that changed files. A file the person changed after the turns ended is never lost: one the
/// undo would remove is kept; one it would overwrite refuses the undo (exit 1, files named)
/// unless `force`, which overwrites it after saving it for `tern redo`. Returns the receipt.
pub fn undo(store: &Store, session: &Session, n: u32, force: bool) -> Result<String, Error> {
    if n == 0 {
        return Err(Error::Usage(
            "undo takes a number of turns, 1 or more".into(),
        ));
    }
    let r = match door_undo(store, session, n, force)? {
        Some(r) => r,
        None => {
            // The session's turns ended when its history was last written: a file newer than
            // that is the person's, not the undone turns'.
            let ended = std::fs::metadata(session.path(crate::store::session::files::CONVERSATION))
                .and_then(|m| m.modified())
                .ok();
            store.undo(&session.id, n, ended, force).map_err(failed)?
        }
    };
    if r.turn.is_none() && r.changes.is_empty() && !r.recovered.is_empty() {
        return Ok(format!(
            "{}nothing more to undo now; `tern redo` puts back what it undid.",
            r.recovered_lines()
        ));
    }
    let turn = r
        .turn
        .map_or(String::new(), |t| format!(" before turn {t}"));
    let kept = if r.kept.is_empty() {
        String::new()
    } else {
        format!(
            " Kept {} file(s) made after the turn ended (yours, not the model's): {}.",
            r.kept.len(),
            crate::render::safe(&r.kept.join(", "))
        )
    };
    let overwritten = if r.overwritten.is_empty() {
        String::new()
    } else {
        format!(
            " Overwrote {} file(s) you changed after the turn ended (--force; saved first): {}.",
            r.overwritten.len(),
            crate::render::safe(&r.overwritten.join(", "))
        )
    };
    let index = index_note(store, &r.changes);
    Ok(format!(
        "{}the workspace is as it was{turn}: {}.{kept}{overwritten}{index} `tern redo` puts it all back, your files included.",
        r.recovered_lines(),
        r.summary()
    ))
}

/// The receipt's sentence on git's index after a restore: empty unless [`staged_apart`] names
/// paths.
fn index_note(store: &Store, changes: &[Change]) -> String {
    let staged = staged_apart(store.workspace(), changes);
    if staged.is_empty() {
        return String::new();
    }
    let shown = crate::render::safe(&staged.join(" ")).into_owned();
    format!(
        " Git's index was not touched (tern never changes what is staged): {} restored path(s) have staged content that is neither the restored file nor HEAD's, staged after the checkpoint: {shown}. `git diff --cached -- {shown}` shows it; `git restore --staged -- {shown}` unstages it.",
        staged.len()
    )
}

/// Most paths [`staged_apart`] looks at (a bigger undo is checked on its first ones).
const STAGED_CHECK_PATHS: usize = 2000;

/// The paths `changes` restored whose entry in the person's git index (when the workspace is in
/// a git repository) is neither the restored content nor HEAD's: staged after the checkpoint,
/// typically by the model's `git add`. Undo never writes that index: it may hold the person's
/// own staged work, and losing it would be worse than a stale entry they can see and fix; so
/// the paths are named instead. Read with the hermetic git of [`git`] (no hooks, no fsmonitor),
/// plumbing only (no index refresh, nothing written). Any failure: none named.
fn staged_apart(workspace: &Path, changes: &[Change]) -> Vec<String> {
    let Some((root, git_dir)) = person_repository(workspace) else {
        return Vec::new();
    };
    let Ok(prefix) = workspace.strip_prefix(&root) else {
        return Vec::new();
    };
    let Ok(git) = git::Git::new(git_dir, root) else {
        return Vec::new();
    };
    let prefix = prefix.to_string_lossy();
    let full = |p: &str| {
        if prefix.is_empty() {
            p.to_string()
        } else {
            format!("{prefix}/{p}")
        }
    };
    // A change of permission bits alone restores no content: nothing staged to compare.
    let wanted: BTreeMap<String, (&Change, Option<&str>)> = changes
        .iter()
        .filter(|c| c.status != 'P')
        .take(STAGED_CHECK_PATHS)
        .map(|c| (full(&c.path), (c, c.blob.as_deref())))
        .collect();
    if wanted.is_empty() {
        return Vec::new();
    }
    let mut index: BTreeMap<String, String> = BTreeMap::new();
    let mut head: BTreeMap<String, String> = BTreeMap::new();
    let paths: Vec<&str> = wanted.keys().map(String::as_str).collect();
    for chunk in paths.chunks(200) {
        let mut args = vec!["--literal-pathspecs", "ls-files", "-s", "-z", "--"];
        args.extend(chunk);
        let Ok(out) = git.run(&args, None) else {
            return Vec::new();
        };
        // "<mode> <sha> <stage>\t<path>"
        for rec in git::split_z(&out) {
            let rec = String::from_utf8_lossy(rec);
            if let Some((meta, path)) = rec.split_once('\t')
                && let Some(sha) = meta.split(' ').nth(1)
            {
                index.insert(path.to_string(), sha.to_string());
            }
        }
        let mut args = vec!["--literal-pathspecs", "ls-tree", "-z", "HEAD", "--"];
        args.extend(chunk);
        // No HEAD yet (a new repository): every staged entry differs from it.
        if let Ok(out) = git.run(&args, None) {
            // "<mode> <type> <sha>\t<path>"
            for rec in git::split_z(&out) {
                let rec = String::from_utf8_lossy(rec);
                if let Some((meta, path)) = rec.split_once('\t')
                    && let Some(sha) = meta.split(' ').nth(2)
                {
                    head.insert(path.to_string(), sha.to_string());
                }
            }
        }
    }
    wanted
        .iter()
        .filter(|(path, (_, restored))| match index.get(*path) {
            None => false,
            Some(staged) => Some(staged.as_str()) != *restored && head.get(*path) != Some(staged),
        })
        .map(|(_, (c, _))| c.path.clone())
        .collect()
}

/// The git repository the workspace is in: its top folder and its git folder (`.git`, or where
/// a `.git` file points, as in a linked worktree). None outside a repository.
fn person_repository(workspace: &Path) -> Option<(PathBuf, PathBuf)> {
    let mut dir = Some(workspace);
    while let Some(d) = dir {
        let dot = d.join(".git");
        match std::fs::symlink_metadata(&dot) {
            Ok(m) if m.is_dir() => return Some((d.to_path_buf(), dot)),
            Ok(m) if m.is_file() => {
                let text = std::fs::read_to_string(&dot).ok()?;
                let target = text.trim().strip_prefix("gitdir:")?.trim();
                return Some((d.to_path_buf(), d.join(target)));
            }
            _ => dir = d.parent(),
        }
    }
    None
}

/// The door's record of `session` (its top-level session's), when the door recorded anything
/// there: its turns ran on a layer, and undo, redo and diff read it (issue 42).
fn door_record(store: &Store, session: &Session) -> Result<Option<record::Record>, Error> {
    let r = record::Record::open(&session.dir, store.workspace()).map_err(failed)?;
    Ok(r.is_used().then_some(r))
}

/// The door's undo of the last `n` turns of `session` with changes, when the newest turns to
/// undo are the door's (newer than any snapshot checkpoint). None: the snapshot store's.
fn door_undo(
    store: &Store,
    session: &Session,
    n: u32,
    force: bool,
) -> Result<Option<Restored>, Error> {
    let Some(mut rec) = door_record(store, session)? else {
        return Ok(None);
    };
    let ignored = |p: &[String]| store.ignored(p);
    let recovered = rec.recover(&ignored).map_err(failed)?;
    let turns = rec.undoable(&ignored);
    let newest_snapshot = store
        .entries(&session.id)
        .ok()
        .and_then(|e| e.last().map(|e| e.turn));
    if turns.is_empty() && !recovered.is_empty() {
        // The cut-short undo was this one's work: finished, and said.
        return Ok(Some(Restored {
            turn: None,
            changes: Vec::new(),
            kept: Vec::new(),
            overwritten: Vec::new(),
            recovered,
        }));
    }
    if turns.is_empty() || newest_snapshot.is_some_and(|s| turns.first().is_some_and(|d| *d < s)) {
        return Ok(None);
    }
    let n = n as usize;
    if turns.len() < n {
        return Err(Error::Failed(format!(
            "only {} turn(s) of this session can be undone; nothing changed",
            turns.len()
        )));
    }
    let mut r = rec.undo(&turns[..n], force, &ignored).map_err(failed)?;
    r.recovered = recovered;
    Ok(Some(r))
}

/// `tern redo`: puts back what the last undo (or rewind) replaced: the door's record of
/// `session` first, else the snapshot store's.
pub fn redo(store: &Store, session: &Session) -> Result<String, Error> {
    // A rewind forks: its undo is in the record of the session it forked from.
    let origin = session
        .read_meta()
        .ok()
        .and_then(|m| m.forked_from)
        .and_then(|l| session.dir.parent().map(|p| p.join(l.session)));
    let door = match door_record(store, session)?
        .filter(record::Record::can_redo)
        .or(match origin {
            Some(dir) => record::Record::open(&dir, store.workspace())
                .ok()
                .filter(|r| r.is_used()),
            None => None,
        }) {
        Some(mut rec) => {
            let ignored = |p: &[String]| store.ignored(p);
            let recovered = rec.recover(&ignored).map_err(failed)?;
            if rec.can_redo() {
                let mut r = rec.redo().map_err(failed)?;
                r.recovered = recovered;
                Some(r)
            } else {
                None
            }
        }
        None => None,
    };
    let r = match door {
        Some(r) => r,
        None => store.redo().map_err(failed)?,
    };
    let what = match r.turn {
        Some(t) => format!("as checkpointed before turn {t}"),
        None => "as it was before the undo".into(),
    };
    Ok(format!(
        "{}the workspace is {what} again: {}.",
        r.recovered_lines(),
        r.summary()
    ))
}

/// One row of `tern checkpoints`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The turn the checkpoint was taken before.
    pub turn: u32,
    /// When (RFC 3339, UTC).
    pub time: String,
    /// Files the turn changed (to the next checkpoint, or to the workspace now for the last).
    pub files: usize,
    /// Bytes the turn changed: the size of each file it added or modified as it left it, and of
    /// each file it deleted as it was (for the last row: as the workspace is now).
    pub bytes: u64,
}

/// `tern checkpoints`: the session's checkpoints with what each turn changed (the door's
/// record's turns and the snapshot store's, by turn).
pub fn list(store: &Store, session: &Session) -> Result<Vec<Row>, Error> {
    let mut rows = snapshot_rows(store, session)?;
    if let Some(rec) = door_record(store, session)? {
        let ignored = |p: &[String]| store.ignored(p);
        let times: BTreeMap<u32, String> = turns::read(session)
            .unwrap_or_default()
            .into_iter()
            .map(|l| (l.turn, l.ts))
            .collect();
        for turn in rec.turns() {
            let (files, bytes) = rec.size_of(turn, &ignored);
            if files == 0 {
                continue;
            }
            let time = times.get(&turn).cloned().unwrap_or_default();
            rows.push(Row {
                turn,
                time: time_text_of(&time),
                files,
                bytes,
            });
        }
        rows.sort_by_key(|r| r.turn);
    }
    Ok(rows)
}

/// An RFC 3339 time as [`time_text`] writes it (to the second, UTC); unreadable: as it is.
fn time_text_of(ts: &str) -> String {
    humantime::parse_rfc3339_weak(ts)
        .map(|t| humantime::format_rfc3339_seconds(t).to_string())
        .unwrap_or_else(|_| ts.to_string())
}

/// The rows of the snapshot store's checkpoints.
fn snapshot_rows(store: &Store, session: &Session) -> Result<Vec<Row>, Error> {
    let entries = store.entries(&session.id).map_err(failed)?;
    let now = if entries.is_empty() {
        State::default()
    } else {
        store.state_now().map_err(failed)?.0
    };
    let mut rows = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let next = match entries.get(i + 1) {
            Some(n) => n.state.clone(),
            None => now.clone(),
        };
        let changes = store.changes(&e.state, &next).map_err(failed)?;
        // The blobs of the workspace now were written with its tree (`state_now`), so the last
        // row is measured like the others.
        let blobs: Vec<String> = changes
            .iter()
            .filter_map(|c| c.blob.clone().or_else(|| c.old_blob.clone()))
            .collect();
        let bytes = store.content_size(&blobs).map_err(failed)?;
        rows.push(Row {
            turn: e.turn,
            time: time_text(e.time),
            files: changes.len(),
            bytes,
        });
    }
    Ok(rows)
}

/// The text of `tern checkpoints`.
pub fn render_rows(rows: &[Row]) -> String {
    if rows.is_empty() {
        return "no checkpoints in this session yet (one is taken before each turn's first command)"
            .into();
    }
    let mut out = format!(
        "{:>5}  {:<20}  {:>6}  {:>9}\n",
        "turn", "time", "files", "size"
    );
    for r in rows {
        out.push_str(&format!(
            "{:>5}  {:<20}  {:>6}  {:>9}\n",
            r.turn,
            r.time,
            r.files,
            size_text(r.bytes)
        ));
    }
    out.push_str(
        "(files, size: what that turn changed, in bytes of the files it wrote or deleted; the last row's are counted against the workspace now)",
    );
    out
}

/// `tern diff [TURN]`: the patch of what turn `turn` (default: the last with a checkpoint)
/// changed, at most 256 kB.
pub fn diff(store: &Store, session: &Session, turn: Option<u32>) -> Result<String, Error> {
    let entries = store.entries(&session.id).map_err(failed)?;
    let last = turns::last(session).map_err(failed)?;
    if let Some(rec) = door_record(store, session)? {
        let ignored = |p: &[String]| store.ignored(p);
        let door_turns: Vec<u32> = rec
            .turns()
            .into_iter()
            .filter(|t| rec.size_of(*t, &ignored).0 > 0)
            .collect();
        let newest_snapshot = entries.last().map(|e| e.turn);
        let pick = match turn {
            Some(t) if door_turns.contains(&t) => Some(t),
            Some(_) => None,
            None => door_turns
                .last()
                .copied()
                .filter(|d| newest_snapshot.is_none_or(|s| *d > s)),
        };
        if let Some(t) = pick {
            return rec.diff(t, 256 * 1024, &ignored).map_err(failed);
        }
    }
    let turn = match turn {
        Some(t) if t == 0 || t > last => {
            return Err(Error::Usage(format!(
                "session {} has turns 1 to {last}; there is no turn {t}",
                session.id
            )));
        }
        Some(t) => t,
        None => match entries.last() {
            Some(e) => e.turn,
            None => return Ok("no turn of this session ran a command yet: nothing changed".into()),
        },
    };
    let Some(i) = entries.iter().position(|e| e.turn == turn) else {
        return Ok(format!("turn {turn} ran no command: it changed no file"));
    };
    let next = match entries.get(i + 1) {
        Some(n) => n.state.clone(),
        None => store.state_now().map_err(failed)?.0,
    };
    if entries[i].state.same(&next) {
        return Ok(format!("turn {turn} changed no recorded file"));
    }
    store
        .patch(&entries[i].state, &next, 256 * 1024)
        .map_err(failed)
}

/// `tern fork [--at TURN]`: a new session whose history, system prompt bytes, plan and ledger
/// are `from`'s at the end of turn `at` (default: its last), recorded as forked from it. It
/// becomes the current session when `mark_current`. Errors: no such turn, its history lost.
pub fn fork(
    state: &StateDir,
    from: &Session,
    at: Option<u32>,
    mark_current: bool,
) -> Result<Session, Error> {
    let last = turns::last(from).map_err(failed)?;
    let at = at.unwrap_or(last);
    let s = turns::state_at(from, at).map_err(|e| Error::Usage(e.to_string()))?;
    let meta = from.read_meta().map_err(failed)?;
    let new_meta = Meta {
        cwd: meta.cwd.clone(),
        provider: meta.provider.clone(),
        model: meta.model.clone(),
        base_url: meta.base_url.clone(),
        sandbox: meta.sandbox,
        title: meta.title.clone(),
        forked_from: Some(ForkLink {
            session: from.id.clone(),
            turn: at,
        }),
        ..Meta::default()
    };
    let mut turn_lines = String::new();
    for l in &s.lines {
        turn_lines.push_str(&crate::store::fsutil::to_jsonl(l).map_err(failed)?);
        turn_lines.push('\n');
    }
    let new = NewSession {
        meta: new_meta,
        system: s.system,
        history: s.history,
        plan: s.plan.map(|plan| {
            let locked = plan
                .get("locked")
                .and_then(|v| v.as_str())
                .map(str::to_string);
            (locked, plan)
        }),
        ledger: s.ledger,
        extra: if turn_lines.is_empty() {
            Vec::new()
        } else {
            vec![(turns::TURNS, turn_lines.into_bytes())]
        },
    };
    let session = state.write_session(Place::TopLevel, &new).map_err(failed)?;
    if mark_current {
        state.set_current(&session.id).map_err(failed)?;
    }
    Ok(session)
}

/// The checkpoint holding the workspace as it was at the end of turn `turn` of `session`: the
/// first one taken after it (by this session, or for turns before a fork point, by the session
/// it was forked from). None: no later turn ran a command, so the files are as it left them.
fn end_of_turn(store: &Store, session: &Session, turn: u32) -> Result<Option<Entry>, Error> {
    if let Ok(meta) = session.read_meta()
        && let Some(link) = meta.forked_from
        && turn < link.turn
        && let Some(e) = store
            .entries(&link.session)
            .map_err(failed)?
            .into_iter()
            .find(|e| e.turn > turn && e.turn <= link.turn)
    {
        return Ok(Some(e));
    }
    Ok(store
        .entries(&session.id)
        .map_err(failed)?
        .into_iter()
        .find(|e| e.turn > turn))
}

/// `tern rewind TURN`: the workspace restored to the end of turn `turn` (as an undo: `tern redo`
/// returns), then a fork at that turn. Returns the fork and the receipt.
pub fn rewind(
    state: &StateDir,
    store: &Store,
    from: &Session,
    turn: u32,
    mark_current: bool,
) -> Result<(Session, String), Error> {
    let last = turns::last(from).map_err(failed)?;
    if turn > last {
        return Err(Error::Usage(format!(
            "session {} has {last} turn(s); there is no turn {turn}",
            from.id
        )));
    }
    // Checked before any file changes: the history must be there to fork.
    turns::state_at(from, turn).map_err(|e| Error::Usage(e.to_string()))?;
    let mut recovered = String::new();
    // The door's turns after `turn` are taken back first (as an undo: redo returns).
    let mut door_files = None;
    if let Some(mut rec) = door_record(store, from)? {
        let ignored = |p: &[String]| store.ignored(p);
        recovered.push_str(&lines_of(&rec.recover(&ignored).map_err(failed)?));
        let later: Vec<u32> = rec
            .undoable(&ignored)
            .into_iter()
            .filter(|t| *t > turn)
            .collect();
        if !later.is_empty() {
            let r = rec.undo(&later, true, &ignored).map_err(failed)?;
            door_files = Some(r.summary());
        }
    }
    let files = match (end_of_turn(store, from, turn)?, door_files) {
        (Some(target), _) => {
            let r = store.restore(&from.id, &target).map_err(failed)?;
            recovered.push_str(&r.recovered_lines());
            format!("{}{}", r.summary(), index_note(store, &r.changes))
        }
        (None, Some(summary)) => summary,
        (None, None) => "no later turn ran a command, so the files are as it left them".into(),
    };
    let forked = fork(state, from, Some(turn), mark_current)?;
    let msg = format!(
        "{recovered}rewound to the end of turn {turn}: files: {files}; the conversation goes on in the new session {} (forked from {}; `tern redo` puts the files back)",
        forked.id, from.id
    );
    Ok((forked, msg))
}

/// Seconds since the epoch as RFC 3339 UTC.
fn time_text(secs: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Notes, each as a line.
fn lines_of(notes: &[String]) -> String {
    notes.iter().map(|n| format!("{n}\n")).collect()
}

fn failed(e: std::io::Error) -> Error {
    Error::Failed(e.to_string())
}

/// Why a checkpoint verb failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A bad argument: no such turn (exit 2).
    Usage(String),
    /// Refused or failed: nothing to undo, the store unreadable (exit 1).
    Failed(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Usage(m) | Error::Failed(m) => f.write_str(m),
        }
    }
}
