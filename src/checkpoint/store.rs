//! The shadow store: `<state folder>/checkpoints/git` is a git repository of tern's own whose
//! work tree is the workspace (the person's `.git`, index and refs are never read or written).
//!
//! Refs, the only mutable state (each change one `git update-ref --stdin` transaction, after the
//! objects it names are written — the commit point):
//! - `refs/tern/s/<session>/t<turn>`: the workspace before turn `<turn>`'s first command. A turn
//!   that changed nothing points at the same commit as the one before it (no new object).
//! - `refs/tern/latest`: the newest snapshot (what the next one is compared with).
//! - `refs/tern/redo/<n>`: the states an undo left, newest highest (`tern redo` pops one).
//! - `refs/tern/at`: the checkpoint the last undo or redo restored (a second undo goes further
//!   back from there).
//! - `refs/tern/after`: the workspace as the last undo, redo or rewind left it, files it kept
//!   included (what `tern redo` and a second undo compare the workspace with).
//! - `refs/tern/pending`: a restore in flight; found at the next start, it is finished.
//!
//! A checkpoint commit's message is one JSON line (`{"kind","session","turn"}`); its only parent
//! (none in a store from before issue 34) is the record of its files' permission bits
//! ([`super::modes`]): a commit of one file, `modes`, made with a fixed date so that equal
//! records are one object. No checkpoint is another's parent, so the oldest can be pruned
//! alone, and a record lives exactly as long as a checkpoint names it.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use std::collections::BTreeSet;

use super::git::{Git, split_z};
use super::modes::{self, Modes, Tracked};
use super::{Limits, Restored};
use crate::store::fsutil;
use crate::store::lock::SessionLock;

/// A recorded state of the workspace: its files and their permission bits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    /// The files: a git tree.
    pub tree: String,
    /// The record of their permission bits (a commit, see the module docs); empty for a
    /// checkpoint from before records existed.
    pub modes: String,
}

impl State {
    /// The same files with the same bits. A state without a record agrees with any bits (it
    /// cannot tell them apart).
    pub fn same(&self, other: &State) -> bool {
        self.tree == other.tree
            && (self.modes.is_empty() || other.modes.is_empty() || self.modes == other.modes)
    }
}

/// One turn's checkpoint of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The turn it was taken before (1-based).
    pub turn: u32,
    /// Its commit.
    pub commit: String,
    /// Its files and their bits.
    pub state: State,
    /// When its ref was written (seconds since the epoch).
    pub time: i64,
}

/// A ref and what it points at.
#[derive(Debug, Clone)]
struct Ref {
    name: String,
    commit: String,
    state: State,
}

/// What one file change between two states is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// `A` added, `M` modified (or its type changed), `D` deleted, `P` only its permission bits
    /// changed.
    pub status: char,
    /// Workspace-relative path (lossy UTF-8).
    pub path: String,
    /// The new blob (None for a deletion).
    pub blob: Option<String>,
    /// The old blob (None for an addition).
    pub old_blob: Option<String>,
    /// For `P`: the permission bits before and after.
    pub bits: Option<(u32, u32)>,
}

/// What a checkpoint says: a file it left out, a restore it finished, what it pruned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The sentence.
    pub text: String,
    /// The file it is about, when it is said once per session however its size changes (a
    /// file over the size limit).
    pub file: Option<String>,
}

impl From<String> for Note {
    fn from(text: String) -> Note {
        Note { text, file: None }
    }
}

/// Where the workspace stands after a restore (see `Store::standing`).
struct Standing {
    /// `refs/tern/at`: the checkpoint the restore went to.
    at: Ref,
    /// `refs/tern/after`: the state it left.
    after: Ref,
    /// The paths it kept (in `after`, not in `at`).
    kept: std::collections::BTreeSet<String>,
}

/// Up to 8 paths, shown safely, then how many more.
pub(super) fn names(paths: &[String]) -> String {
    let mut out: Vec<String> = paths
        .iter()
        .take(8)
        .map(|p| crate::render::safe(p).into_owned())
        .collect();
    if paths.len() > 8 {
        out.push(format!("… and {} more", paths.len() - 8));
    }
    out.join(", ")
}

/// What a snapshot made of git's listings (see `Store::sort_listed`).
#[derive(Debug, Default)]
struct Sorted {
    /// Paths looked at already.
    seen: std::collections::BTreeSet<Vec<u8>>,
    /// Paths for the index (NUL-separated).
    keep: Vec<u8>,
    /// Tracked paths to drop from it (NUL-separated).
    drop_tracked: Vec<u8>,
    /// What the person is told.
    notes: Vec<Note>,
    /// The regular files whose bits were read, with their change time (seconds).
    read: Vec<(Vec<u8>, i64)>,
}

/// The shadow store of one state folder.
pub struct Store {
    git: Git,
    folder: PathBuf,
    limits: Limits,
}

const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

impl Store {
    /// The store of the state folder `state_root` over `workspace`, made when absent. Errors: no
    /// git, or the folder cannot be made.
    pub fn open(state_root: &Path, workspace: &Path, limits: Limits) -> io::Result<Store> {
        let folder = state_root.join("checkpoints");
        // Checkpoints never fill a disk: no store is made below the floor.
        if !folder.join("git").join("HEAD").is_file()
            && let Some(free) = free_space(state_root)
            && free < MIN_FREE_BYTES
        {
            return Err(io::Error::other(format!(
                "the disk holding the state folder has only {} free (checkpoints need {})",
                size_text(free),
                size_text(MIN_FREE_BYTES)
            )));
        }
        fsutil::ensure_dir(&folder)?;
        let git = Git::new(folder.join("git"), workspace.to_path_buf())?;
        let store = Store {
            git,
            folder,
            limits,
        };
        if !store.git.dir.join("HEAD").is_file() {
            let _lock = store.lock()?;
            store.git.init(&store.excludes(""))?;
        }
        Ok(store)
    }

    /// The folder holding the store (`<state folder>/checkpoints`).
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// The workspace the store records.
    pub fn workspace(&self) -> &Path {
        &self.git.work
    }

    /// The exclude file: the state folder itself (when it lies in the workspace), then the
    /// workspace's `.ternignore`.
    fn excludes(&self, ternignore: &str) -> String {
        let mut out = String::from("# written by tern: the state folder, then .ternignore\n");
        if let Some(state) = self.folder.parent()
            && let Ok(rel) = state.strip_prefix(&self.git.work)
            && !rel.as_os_str().is_empty()
        {
            out.push('/');
            out.push_str(&glob_escape(&rel.to_string_lossy()));
            out.push_str("/\n");
        }
        out.push_str(ternignore);
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out
    }

    /// Copies the workspace's `.ternignore` (a regular file, at most 1 MB, never through a
    /// link) into the store's exclude file when it changed.
    fn sync_excludes(&self) -> io::Result<()> {
        let path = self.git.work.join(".ternignore");
        let text = match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() && m.len() <= 1 << 20 => {
                fsutil::read_text(&path).ok().flatten().unwrap_or_default()
            }
            _ => String::new(),
        };
        let want = self.excludes(&text);
        let file = self.git.dir.join("info").join("exclude");
        if fsutil::read_text(&file)?.as_deref() != Some(want.as_str()) {
            fsutil::atomic_write(&file, want.as_bytes())?;
        }
        Ok(())
    }

    /// Which of `paths` (workspace-relative) `.gitignore`, `.ternignore` and git's excludes
    /// leave out, by their patterns alone (`check-ignore --no-index`): the door's record honours
    /// them as the snapshots do. Any failure: none.
    pub fn ignored(&self, paths: &[String]) -> BTreeSet<String> {
        if paths.is_empty() || self.sync_excludes().is_err() {
            return BTreeSet::new();
        }
        let mut input = Vec::new();
        for p in paths {
            input.extend_from_slice(p.as_bytes());
            input.push(0);
        }
        self.git
            .run_ok(
                &["check-ignore", "--no-index", "--stdin", "-z"],
                Some(&input),
                &[0, 1],
            )
            .map(|out| {
                split_z(&out)
                    .map(|p| String::from_utf8_lossy(p).into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Removes what a killed creation or exclude write left in the store of the state folder
    /// `state_root` (a `.tmp-*` folder beside it, a `.tmp-*` file in its `info/`), under its
    /// lock, taken only when there is something to remove: a start that never checkpoints still
    /// leaves no temp behind.
    pub fn sweep(state_root: &Path) -> io::Result<()> {
        let folder = state_root.join("checkpoints");
        let strays = |d: &Path| {
            std::fs::read_dir(d).is_ok_and(|rd| {
                rd.flatten().any(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(fsutil::TEMP_PREFIX)
                })
            })
        };
        let git = folder.join("git");
        let info = git.join("info");
        if !strays(&folder) && !strays(&info) && !strays(&git) {
            return Ok(());
        }
        let _lock = SessionLock::acquire(&folder.join("lock"))?;
        fsutil::remove_stray_folders(&folder)?;
        fsutil::remove_stray_temps(&info)?;
        fsutil::remove_stray_temps(&git)?;
        Ok(())
    }

    /// Takes the store's lock (blocking) and removes what a killed git left: its lock files
    /// (`index.lock`, `HEAD.lock`, `packed-refs.lock`, `config.lock`, and any `<ref>.lock`).
    /// Every git of tern's that writes runs under this lock, and dies with its tern (see
    /// [`Git`]), so a lock file found here is stale.
    /// What a killed creation or exclude write left goes too: a `.tmp-*` folder beside the
    /// store and a `.tmp-*` file in its `info/` or its git folder (all only made under this
    /// lock).
    pub fn lock(&self) -> io::Result<SessionLock> {
        let lock = SessionLock::acquire(&self.folder.join("lock"))?;
        fsutil::remove_stray_folders(&self.folder)?;
        fsutil::remove_stray_temps(&self.git.dir.join("info"))?;
        fsutil::remove_stray_temps(&self.git.dir)?;
        for name in ["index.lock", "packed-refs.lock", "HEAD.lock", "config.lock"] {
            let _ = std::fs::remove_file(self.git.dir.join(name));
        }
        remove_lock_files(&self.git.dir.join("refs"), 0);
        Ok(lock)
    }

    /// Brings the store's index to the workspace as it is now and writes its tree, and the
    /// record of the files' permission bits: changed, new and removed files (ignored ones
    /// never), links as links, files over the size limit left out. Returns the state and what
    /// was left out, said once per path by the caller. The caller holds the lock.
    pub fn snapshot(&self) -> io::Result<(State, Vec<Note>)> {
        self.snapshot_since(None)
    }

    /// [`Store::snapshot`], knowing (`index_tree`) the tree of the store's index when it is the
    /// one the last checkpoint wrote: when nothing changed since (git lists nothing), that
    /// tree is the answer, and no `update-index` or `write-tree` runs.
    ///
    /// git lists the files whose content or index stat changed (`diff-files`: a `chmod`
    /// changes the change time) and the new ones (`ls-files -o`); their bits, and those of the
    /// files the record of the index names as racy ([`Tracked`]), update the record. Without a
    /// record of this index (a new store, an undo's `read-tree`, a kill), every file's bits
    /// are read.
    fn snapshot_since(&self, index_tree: Option<&str>) -> io::Result<(State, Vec<Note>)> {
        self.sync_excludes()?;
        let (untracked, dirty) = self.listings()?;
        // The file is read once: what is written back is compared with it.
        let prior = self.tracked_any();
        let stamp = index_stamp(&self.git.dir).unwrap_or_else(|| NO_INDEX.into());
        let (mut modes, before, reread) = match prior.as_ref().filter(|t| t.stamp == stamp) {
            Some(t) => (
                t.modes.clone(),
                Some((t.modes.clone(), t.record.clone())),
                t.racy.iter().cloned().collect(),
            ),
            None => {
                // The plain bits of the store stay what they were: records stay comparable.
                let fresh = prior
                    .as_ref()
                    .map_or_else(|| Modes::new(modes::umask()), |t| t.modes.cleared());
                (fresh, None, self.every_tracked()?)
            }
        };
        let listed = split_z(&dirty)
            .map(|p| (true, p))
            .chain(split_z(&untracked).map(|p| (false, p)));
        let mut sorted = Sorted::default();
        for (tracked, path) in listed {
            self.sort_listed(&mut sorted, &mut modes, tracked, path);
        }
        // Files git lists nothing about whose bits may have changed unseen (racy), or every
        // tracked file when there is no record of this index.
        let reread: Vec<&Vec<u8>> = reread
            .iter()
            .filter(|p| !sorted.seen.contains(*p))
            .collect();
        for path in reread {
            use std::os::unix::fs::MetadataExt;
            match std::fs::symlink_metadata(super::git::join(&self.git.work, path)) {
                Ok(m) if m.is_file() && m.len() <= self.limits.max_file_bytes => {
                    modes.note(path, Some(m.mode()));
                    sorted.read.push((path.clone(), m.ctime()));
                }
                _ => modes.note(path, None),
            }
        }
        let tree = if untracked.is_empty()
            && dirty.is_empty()
            && let Some(tree) = index_tree
        {
            tree.to_string()
        } else {
            self.write_tree(&sorted.keep, &sorted.drop_tracked)?
        };
        let record = match before {
            Some((old, Some(record))) if old == modes => record,
            _ => self.write_record(&modes)?,
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let racy = sorted
            .read
            .into_iter()
            .filter(|(_, ctime)| *ctime >= now - 1)
            .map(|(p, _)| p)
            .collect();
        self.keep_tracked(
            prior.as_ref(),
            Tracked {
                stamp: index_stamp(&self.git.dir).unwrap_or_else(|| NO_INDEX.into()),
                record: Some(record.clone()),
                racy,
                modes,
            },
        );
        Ok((
            State {
                tree,
                modes: record,
            },
            sorted.notes,
        ))
    }

    /// git's two listings of the workspace, at once (a turn waits for the slower, not for
    /// both): the untracked files (`ls-files -o`) and the changed tracked ones (`diff-files`).
    fn listings(&self) -> io::Result<(Vec<u8>, Vec<u8>)> {
        let (untracked, dirty) = std::thread::scope(|s| {
            let dirty = s.spawn(|| self.git.run(&["diff-files", "-z", "--name-only"], None));
            let untracked = self
                .git
                .run(&["ls-files", "-z", "-o", "--exclude-standard"], None);
            (
                untracked,
                dirty.join().unwrap_or_else(|_| {
                    Err(super::git::GitError("git diff-files: no answer".into()))
                }),
            )
        });
        Ok((untracked?, dirty?))
    }

    /// Every file the store's index tracks (none, and no git asked, for a new store).
    fn every_tracked(&self) -> io::Result<Vec<Vec<u8>>> {
        if !self.git.dir.join("index").exists() {
            return Ok(Vec::new());
        }
        let all = self.git.run(&["ls-files", "-z"], None)?;
        Ok(split_z(&all).map(<[u8]>::to_vec).collect())
    }

    /// Sorts one listed path: kept for the index (its bits read), dropped from it (beyond a
    /// link, over the size limit), or only noted (a nested repository, a socket).
    fn sort_listed(&self, sorted: &mut Sorted, modes: &mut Modes, tracked: bool, path: &[u8]) {
        if !sorted.seen.insert(path.to_vec()) {
            return;
        }
        let shown = String::from_utf8_lossy(path).into_owned();
        if path.ends_with(b"/") {
            sorted.notes.push(Note::from(format!(
                "{shown} is a git repository of its own inside the workspace: checkpoints do not record it"
            )));
            return;
        }
        let drop = |sorted: &mut Sorted| {
            if tracked {
                sorted.drop_tracked.extend_from_slice(path);
                sorted.drop_tracked.push(0);
            }
        };
        // A folder of its path replaced by a symbolic link (`rm -rf d; ln -s X d`): git
        // refuses `d/f` as "beyond a symbolic link" and every later checkpoint failed with
        // it (found by a new user). The entry is dropped; the link itself is recorded.
        if beyond_link(&self.git.work, path) {
            drop(sorted);
            modes.note(path, None);
            return;
        }
        let full = super::git::join(&self.git.work, path);
        match std::fs::symlink_metadata(&full) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => modes.note(path, None),
            Err(_) => return,
            Ok(m) if m.file_type().is_symlink() => modes.note(path, None),
            Ok(m) if m.is_file() && m.len() > self.limits.max_file_bytes => {
                sorted.notes.push(Note {
                    text: format!(
                        "{shown} ({}) is over the checkpoint size limit of {}: it is not recorded, and undo leaves it as it is",
                        size_text(m.len()),
                        size_text(self.limits.max_file_bytes)
                    ),
                    file: Some(shown.clone()),
                });
                drop(sorted);
                modes.note(path, None);
                return;
            }
            Ok(m) if m.is_file() => {
                use std::os::unix::fs::MetadataExt;
                modes.note(path, Some(m.mode()));
                sorted.read.push((path.to_vec(), m.ctime()));
            }
            // Sockets, fifos, devices: nothing a checkpoint can hold.
            Ok(_) => {
                modes.note(path, None);
                return;
            }
        }
        sorted.keep.extend_from_slice(path);
        sorted.keep.push(0);
    }

    /// Updates the store's index (`keep` added or replaced, `drop_tracked` removed, both
    /// NUL-separated) and writes its tree; the tree's id.
    fn write_tree(&self, keep: &[u8], drop_tracked: &[u8]) -> io::Result<String> {
        fsutil::fault::point("git update-index", &self.git.dir);
        if !keep.is_empty() {
            // --replace: a folder that became a file (or a file that became a folder)
            // replaces the old entries instead of failing every later checkpoint.
            self.git.run(
                &[
                    "update-index",
                    "-z",
                    "--add",
                    "--remove",
                    "--replace",
                    "--stdin",
                ],
                Some(keep),
            )?;
        }
        if !drop_tracked.is_empty() {
            self.git.run(
                &["update-index", "-z", "--force-remove", "--stdin"],
                Some(drop_tracked),
            )?;
        }
        Ok(self.git.text(&["write-tree"], None)?)
    }

    /// The record of the store's index ([`TRACKED`]), when it is this index's (what the
    /// tests look at; a snapshot reads the file once and checks the same).
    #[cfg(test)]
    fn tracked(&self) -> Option<Tracked> {
        let t = self.tracked_any()?;
        let stamp = index_stamp(&self.git.dir).unwrap_or_else(|| NO_INDEX.into());
        (t.stamp == stamp).then_some(t)
    }

    /// The record [`TRACKED`] holds, of whichever index.
    fn tracked_any(&self) -> Option<Tracked> {
        Tracked::decode(&std::fs::read(self.git.dir.join(TRACKED)).ok()?)
    }

    /// Writes `t` as the record of the index, unless the file holds that already (`prior`, as
    /// read). A cache: a failed or lost write only costs the next snapshot a read of every
    /// file's bits.
    fn keep_tracked(&self, prior: Option<&Tracked>, t: Tracked) {
        if prior == Some(&t) {
            return;
        }
        let _ = fsutil::replace_cache(&self.git.dir.join(TRACKED), &t.encode());
    }

    /// Stores `modes` as a record: a blob `modes` in a tree in a commit with a fixed date (equal
    /// records are one object). Returns the commit.
    fn write_record(&self, modes: &Modes) -> io::Result<String> {
        fsutil::fault::point("git hash-object", &self.git.dir);
        let blob = self
            .git
            .text(&["hash-object", "-w", "--stdin"], Some(&modes.encode()))?;
        let tree = self.git.text(
            &["mktree"],
            Some(format!("100644 blob {blob}\tmodes\n").as_bytes()),
        )?;
        Ok(self.git.text_dated(
            &["commit-tree", &tree, "-m", "tern: permission bits"],
            "@0 +0000",
        )?)
    }

    /// The record `id` names (a commit [`Store::write_record`] made). None for no record or
    /// one that cannot be read.
    fn read_modes(&self, id: &str) -> Option<Modes> {
        if id.is_empty() {
            return None;
        }
        let bytes = self
            .git
            .run(&["cat-file", "blob", &format!("{id}:modes")], None)
            .ok()?;
        Modes::decode(&bytes)
    }

    /// The last checkpoint `record_turn` wrote, from [`REMEMBERED`], when it still holds: the
    /// latest ref (a loose file: tern never packs refs) names its commit, and the index file
    /// is the one that commit's tree was written from (an undo's `read-tree` replaces it). None
    /// otherwise: the caller asks git.
    fn remembered(&self) -> Option<Remembered> {
        if self.git.dir.join("packed-refs").exists() {
            return None;
        }
        // A store with no checkpoint yet, no ref and no index: the tree of nothing, no git
        // asked (a fresh session's first checkpoint in a new workspace).
        let fresh = |p: &str| !self.git.dir.join(p).exists();
        if fresh("refs/tern") && fresh("index") && fresh(REMEMBERED) {
            return Some(Remembered {
                commit: String::new(),
                state: State {
                    tree: EMPTY_TREE.to_string(),
                    modes: String::new(),
                },
            });
        }
        let text = std::fs::read_to_string(self.git.dir.join(REMEMBERED)).ok()?;
        let mut f = text.split_whitespace();
        let (commit, tree, stamp, modes) = (f.next()?, f.next()?, f.next()?, f.next()?);
        let latest = std::fs::read_to_string(self.git.dir.join("refs/tern/latest")).ok()?;
        (latest.trim() == commit && index_stamp(&self.git.dir).as_deref() == Some(stamp)).then(
            || Remembered {
                commit: commit.to_string(),
                state: State {
                    tree: tree.to_string(),
                    modes: modes.to_string(),
                },
            },
        )
    }

    /// Notes `commit` (of `state`, its tree written from the index as it is now) as the last
    /// checkpoint. A failed write only costs the next turn the git runs it saves.
    fn remember(&self, commit: &str, state: &State) {
        let path = self.git.dir.join(REMEMBERED);
        match index_stamp(&self.git.dir) {
            Some(stamp) if !state.modes.is_empty() => {
                let line = format!("{commit} {} {stamp} {}\n", state.tree, state.modes);
                let _ = fsutil::replace_cache(&path, line.as_bytes());
            }
            _ => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }

    /// The refs under `patterns` read from their loose files (what `for-each-ref` would say,
    /// without running it): `known` gives the latest's state; other refs' states are not read
    /// (left empty). Only for [`Store::record_turn`], which needs their names.
    fn loose_refs(&self, patterns: &[&str], known: &Remembered) -> io::Result<Vec<Ref>> {
        let mut out = Vec::new();
        for p in patterns {
            let path = self.git.dir.join(p);
            let mut files = Vec::new();
            if p.ends_with('/') {
                loose_files(&path, p.trim_end_matches('/'), &mut files);
            } else if path.is_file() {
                files.push((p.to_string(), path));
            }
            for (name, path) in files {
                let commit = std::fs::read_to_string(&path)?.trim().to_string();
                let state = if name == "refs/tern/latest" && commit == known.commit {
                    known.state.clone()
                } else {
                    State::default()
                };
                out.push(Ref {
                    name,
                    commit,
                    state,
                });
            }
        }
        Ok(out)
    }

    /// The refs under each of `patterns` (`for-each-ref` prefixes), with their states (a
    /// checkpoint's parent is its record of permission bits).
    fn refs(&self, patterns: &[&str]) -> io::Result<Vec<Ref>> {
        let mut args = vec![
            "for-each-ref",
            "--format=%(refname)%00%(objectname)%00%(tree)%00%(parent)",
        ];
        args.extend_from_slice(patterns);
        let out = self.git.text(&args, None)?;
        Ok(out
            .lines()
            .filter_map(|l| {
                let mut p = l.split('\0');
                Some(Ref {
                    name: p.next()?.to_string(),
                    commit: p.next()?.to_string(),
                    state: State {
                        tree: p.next()?.to_string(),
                        modes: p.next().unwrap_or("").to_string(),
                    },
                })
            })
            .collect())
    }

    fn commit(&self, state: &State, kind: &str, session: &str, turn: u32) -> io::Result<String> {
        let msg = serde_json::json!({"kind": kind, "session": session, "turn": turn}).to_string();
        self.commit_message(state, &msg)
    }

    /// A commit of `state` (its tree; its record of bits as its parent) whose message is `msg`
    /// (one JSON line).
    fn commit_message(&self, state: &State, msg: &str) -> io::Result<String> {
        // git knows the empty tree without storing it, and `git fsck` then calls a commit of it
        // broken ("missing tree"): a snapshot of an empty workspace stores it for real.
        if state.tree == EMPTY_TREE {
            self.git
                .text(&["hash-object", "-w", "-t", "tree", "--stdin"], Some(b""))?;
        }
        fsutil::fault::point("git commit-tree", &self.git.dir);
        let mut args = vec!["commit-tree", state.tree.as_str(), "-m", msg];
        if !state.modes.is_empty() {
            args.extend(["-p", state.modes.as_str()]);
        }
        Ok(self.git.text(&args, None)?)
    }

    /// One ref transaction (the commit point of every change).
    fn update_refs(&self, lines: &str) -> io::Result<()> {
        fsutil::fault::point("git update-ref", &self.git.dir);
        match self
            .git
            .run(&["update-ref", "--stdin"], Some(lines.as_bytes()))
        {
            Ok(_) => Ok(()),
            // A `<ref>.lock` a killed git left (we hold the store's lock: no git of ours runs):
            // removed, then once more.
            Err(e) if e.0.contains(".lock") => {
                remove_lock_files(&self.git.dir.join("refs"), 0);
                self.git
                    .run(&["update-ref", "--stdin"], Some(lines.as_bytes()))?;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Records the workspace before turn `turn` of `session`: a new commit when it differs from
    /// the latest snapshot, else the same commit again. Any redo is dropped (new work follows
    /// the undo). Returns whether a new commit was made and the notes (files left out, a
    /// finished restore, pruning).
    pub fn record_turn(&self, session: &str, turn: u32) -> io::Result<(bool, Vec<Note>)> {
        let _lock = self.lock()?;
        let mut notes: Vec<Note> = self.recover_locked()?.into_iter().map(Note::from).collect();
        // Checkpoints never fill a disk: below the floor, none is taken (and the turn goes on).
        if let Some(free) = free_space(&self.folder)
            && free < MIN_FREE_BYTES
        {
            return Err(io::Error::other(format!(
                "the disk holding the checkpoint store has only {} free (checkpoints need {})",
                size_text(free),
                size_text(MIN_FREE_BYTES)
            )));
        }
        // The last checkpoint as remembered, when the refs and the index still say so: no
        // `for-each-ref`, and no `write-tree` when nothing changed (issue 31: a turn's
        // checkpoint was 5 to 6 git runs).
        let known = self.remembered();
        let (state, skipped) =
            self.snapshot_since(known.as_ref().map(|k| k.state.tree.as_str()))?;
        notes.extend(skipped);
        let wanted = [
            "refs/tern/latest",
            "refs/tern/at",
            "refs/tern/after",
            "refs/tern/redo/",
        ];
        let refs = match &known {
            Some(k) => self.loose_refs(&wanted, k)?,
            None => self.refs(&wanted)?,
        };
        let latest = refs.iter().find(|r| r.name == "refs/tern/latest");
        // Exactly the same (a checkpoint without a record of bits is not reused: this one has
        // one).
        let (commit, new) = match latest {
            Some(l) if l.state == state => (l.commit.clone(), false),
            _ => (self.commit(&state, "turn", session, turn)?, true),
        };
        let mut tx = format!(
            "update {} {commit}\nupdate refs/tern/latest {commit}\n",
            turn_ref(session, turn)
        );
        for r in refs.iter().filter(|r| r.name != "refs/tern/latest") {
            tx.push_str(&format!("delete {}\n", r.name));
        }
        self.update_refs(&tx)?;
        self.remember(&commit, &state);
        if new {
            let size = self.pack_locked()?;
            notes.extend(self.prune_locked(size)?.into_iter().map(Note::from));
        }
        Ok((new, notes))
    }

    /// The checkpoints of `session`, oldest first.
    pub fn entries(&self, session: &str) -> io::Result<Vec<Entry>> {
        let prefix = format!("refs/tern/s/{session}/");
        let mut out: Vec<Entry> = self
            .refs(&[&prefix])?
            .into_iter()
            .filter_map(|r| {
                let turn = r
                    .name
                    .strip_prefix(&prefix)?
                    .strip_prefix('t')?
                    .parse()
                    .ok()?;
                let time = std::fs::symlink_metadata(self.git.dir.join(&r.name))
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_secs() as i64);
                Some(Entry {
                    turn,
                    commit: r.commit,
                    state: r.state,
                    time,
                })
            })
            .collect();
        out.sort_by_key(|e| e.turn);
        Ok(out)
    }

    /// The state of the workspace now (the store's index brought up to date; the blobs
    /// written for it are kept only if a checkpoint takes them).
    pub fn state_now(&self) -> io::Result<(State, Vec<Note>)> {
        let _lock = self.lock()?;
        self.snapshot()
    }

    /// The file changes from state `a` to state `b`: those of the trees, then the files whose
    /// permission bits alone changed (`P`; none when either has no record).
    pub fn changes(&self, a: &State, b: &State) -> io::Result<Vec<Change>> {
        let mut changes = self.tree_changes(&a.tree, &b.tree)?;
        if a.modes == b.modes || a.modes.is_empty() || b.modes.is_empty() {
            return Ok(changes);
        }
        let (Some(x), Some(y)) = (self.read_modes(&a.modes), self.read_modes(&b.modes)) else {
            return Ok(changes);
        };
        let changed: std::collections::BTreeSet<String> =
            changes.iter().map(|c| c.path.clone()).collect();
        for (path, from, to) in modes::differ(&x, &y) {
            let path = String::from_utf8_lossy(&path).into_owned();
            if !changed.contains(&path) {
                changes.push(Change {
                    status: 'P',
                    path,
                    blob: None,
                    old_blob: None,
                    bits: Some((from, to)),
                });
            }
        }
        Ok(changes)
    }

    /// The file changes from tree `a` to tree `b`.
    fn tree_changes(&self, a: &str, b: &str) -> io::Result<Vec<Change>> {
        if a == b {
            return Ok(Vec::new());
        }
        let out = self
            .git
            .run(&["diff-tree", "-r", "-z", "--no-renames", a, b], None)?;
        let mut parts = split_z(&out);
        let mut changes = Vec::new();
        while let Some(meta) = parts.next() {
            let Some(path) = parts.next() else { break };
            // ":<mode> <mode> <old> <new> <status>"
            let meta = String::from_utf8_lossy(meta);
            let f: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
            let status = f.get(4).and_then(|s| s.chars().next()).unwrap_or('M');
            let status = match status {
                'A' | 'D' => status,
                _ => 'M',
            };
            changes.push(Change {
                status,
                path: String::from_utf8_lossy(path).into_owned(),
                blob: (status != 'D').then(|| f.get(3).unwrap_or(&"").to_string()),
                old_blob: (status != 'A').then(|| f.get(2).unwrap_or(&"").to_string()),
                bits: None,
            });
        }
        Ok(changes)
    }

    /// The content size in bytes of each blob in `ids` (as the files hold it, not as stored;
    /// missing ones count 0), summed.
    pub fn content_size(&self, ids: &[String]) -> io::Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        let input = ids.join("\n") + "\n";
        let out = self.git.text(
            &["cat-file", "--batch-check=%(objectsize)"],
            Some(input.as_bytes()),
        )?;
        Ok(out
            .lines()
            .filter_map(|l| l.trim().parse::<u64>().ok())
            .sum())
    }

    /// The patch from state `a` to state `b` (text; binary files named; then a line for each
    /// file whose permission bits alone changed), at most `max` bytes.
    pub fn patch(&self, a: &State, b: &State, max: usize) -> io::Result<String> {
        let out = self.git.run(
            &[
                "diff-tree",
                "-p",
                "-r",
                "--no-renames",
                "--stat",
                &a.tree,
                &b.tree,
            ],
            None,
        )?;
        let mut text = String::from_utf8_lossy(&out).into_owned();
        for c in self.changes(a, b)? {
            if let Some((from, to)) = c.bits {
                text.push_str(&format!(
                    "permissions of {}: {from:04o} -> {to:04o}\n",
                    crate::render::safe(&c.path)
                ));
            }
        }
        if text.len() > max {
            let mut cut = max;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push_str(&format!(
                "\n… (cut at {} of the patch)",
                size_text(max as u64)
            ));
        }
        Ok(text)
    }

    /// Where the workspace stands when it is still exactly what the last undo, redo or rewind
    /// left (`refs/tern/after`; a store from before that ref: `refs/tern/at`). None: no restore
    /// since the last checkpoint, or the workspace changed since.
    fn standing(&self, now: &State) -> io::Result<Option<Standing>> {
        let refs = self.refs(&["refs/tern/at", "refs/tern/after"])?;
        let at = refs.iter().find(|r| r.name == "refs/tern/at");
        let after = refs.iter().find(|r| r.name == "refs/tern/after").or(at);
        let (Some(at), Some(after)) = (at, after) else {
            return Ok(None);
        };
        if !after.state.same(now) {
            return Ok(None);
        }
        let mut kept: std::collections::BTreeSet<String> = self
            .tree_changes(&at.state.tree, &after.state.tree)?
            .into_iter()
            .filter(|c| c.status == 'A')
            .map(|c| c.path)
            .collect();
        // After a redo, `at` is the state an undo saved: its message names the person's files
        // then (file times cannot tell them apart from what the redo wrote).
        kept.extend(self.yours(&at.commit));
        Ok(Some(Standing {
            at: at.clone(),
            after: after.clone(),
            kept,
        }))
    }

    /// The person's files named in the message of `commit` (`"yours"`; none when absent).
    fn yours(&self, commit: &str) -> Vec<String> {
        let Ok(text) = self.git.run(&["cat-file", "commit", commit], None) else {
            return Vec::new();
        };
        let text = String::from_utf8_lossy(&text);
        let Some((_, msg)) = text.split_once("\n\n") else {
            return Vec::new();
        };
        serde_json::from_str::<serde_json::Value>(msg.trim())
            .ok()
            .and_then(|v| {
                v.get("yours")?.as_array().map(|a| {
                    a.iter()
                        .filter_map(|p| p.as_str().map(str::to_string))
                        .collect()
                })
            })
            .unwrap_or_default()
    }

    /// When the last restore ended (`refs/tern/after` was written): the files it wrote are
    /// tern's, not the person's.
    fn last_restore_time(&self) -> Option<std::time::SystemTime> {
        std::fs::symlink_metadata(self.git.dir.join("refs/tern/after"))
            .and_then(|m| m.modified())
            .ok()
    }

    /// Puts the workspace back to checkpoint `target` as an undo: the state now is kept first
    /// (a redo goes back to it); `standing` is where a chain of undos stands. A file the restore
    /// would remove that is the person's (newer than `made_after`, or kept by the undo before
    /// in the chain) is kept; one it would overwrite refuses the whole restore unless `force`
    /// (then it is overwritten, and the redo state holds it). See [`Store::undo`].
    fn restore_as_undo(
        &self,
        session: &str,
        now: &State,
        target: &Entry,
        standing: Option<&Standing>,
        made_after: Option<std::time::SystemTime>,
        force: bool,
    ) -> io::Result<Restored> {
        let refs = self.refs(&["refs/tern/latest", "refs/tern/redo/"])?;
        let latest = refs.iter().find(|r| r.name == "refs/tern/latest");
        let next = refs
            .iter()
            .filter_map(|r| r.name.strip_prefix("refs/tern/redo/")?.parse::<u32>().ok())
            .max()
            .unwrap_or(0)
            + 1;
        let mut changes = self.changes(now, &target.state)?;
        let (kept, overwritten) = sort_yours(&self.git.work, &changes, standing, made_after);
        if !overwritten.is_empty() && !force {
            return Err(io::Error::other(format!(
                "refused: {} file(s) that undo would put back were changed after the turn ended (your edits, not the model's): {}. Nothing was changed. `tern undo --force` undoes anyway; your versions are saved first, and `tern redo` brings them back.",
                overwritten.len(),
                names(&overwritten)
            )));
        }
        // What a redo returns to: the state we stand on, else the state now. When the person
        // has files in it, a commit of its own names them, so an undo after the redo keeps them.
        let yours: Vec<&String> = kept.iter().chain(&overwritten).collect();
        let back = match (standing, latest) {
            _ if !yours.is_empty() => {
                let msg = serde_json::json!({"kind": "undo", "session": session, "turn": target.turn, "yours": yours});
                self.commit_message(now, &msg.to_string())?
            }
            (Some(s), _) => s.after.commit.clone(),
            (_, Some(l)) if l.state == *now => l.commit.clone(),
            _ => self.commit(now, "undo", session, target.turn)?,
        };
        if !kept.is_empty() {
            // Out of the store's index, a kept file is one the checkout never touches (not
            // rewritten, its times kept). Done before `pending`, so a kill leaves it alone too.
            let mut input = Vec::new();
            for k in &kept {
                input.extend_from_slice(k.as_bytes());
                input.push(0);
            }
            self.git.run(
                &["update-index", "-z", "--force-remove", "--stdin"],
                Some(&input),
            )?;
            changes.retain(|c| !(c.status == 'D' && kept.contains(&c.path)));
        }
        self.update_refs(&format!(
            "update refs/tern/redo/{next:06} {back}\nupdate refs/tern/at {c}\nupdate refs/tern/latest {c}\nupdate refs/tern/pending {c}\n",
            c = target.commit
        ))?;
        self.checkout_locked(&target.commit, &target.state)?;
        Ok(Restored {
            turn: Some(target.turn),
            changes,
            kept,
            overwritten,
            recovered: Vec::new(),
        })
    }

    /// Makes the workspace `target`, the state of `commit`: changed files rewritten, files it
    /// lacks removed, permission bits as its record says, ignored and unrecorded files (and
    /// those out of the store's index: kept) untouched. Then records the state it left as
    /// `refs/tern/after` and clears `pending`, in one transaction. The caller set `pending`
    /// first, so a kill in between is finished at the next start.
    fn checkout_locked(&self, commit: &str, target: &State) -> io::Result<()> {
        // git stores only 644 or 755: a checkout alone would make a private file (`chmod 600
        // .env`) readable by everyone. The files it rewrites and those either record lists
        // get the record's bits after it.
        let rewritten = self.rewritten_by(commit);
        let wanted = self.read_modes(&target.modes);
        let legacy = match &wanted {
            Some(_) => Vec::new(),
            None => current_modes(&self.git.work, &rewritten),
        };
        let mut candidates: std::collections::BTreeSet<Vec<u8>> = rewritten.into_iter().collect();
        let prior = self.tracked_any();
        if let Some(w) = &wanted {
            candidates.extend(w.listed().map(<[u8]>::to_vec));
            if let Some(t) = &prior {
                candidates.extend(t.modes.listed().map(<[u8]>::to_vec));
            }
        }
        fsutil::fault::point("git read-tree", &self.git.dir);
        self.git
            .run(&["read-tree", "--reset", "-u", commit], None)?;
        match wanted {
            Some(w) => {
                let paths: Vec<Vec<u8>> = candidates.into_iter().collect();
                let now = current_modes(&self.git.work, &paths);
                for (path, bits) in modes::plan(&w, &now) {
                    set_bits(&super::git::join(&self.git.work, &path), bits);
                }
                // The record of the new index: the target's, each file it touched read again.
                self.keep_tracked(
                    prior.as_ref(),
                    Tracked {
                        stamp: index_stamp(&self.git.dir).unwrap_or_else(|| NO_INDEX.into()),
                        record: Some(target.modes.clone()),
                        racy: paths.into_iter().collect(),
                        modes: w,
                    },
                );
            }
            // A checkpoint from before records: never wider than git's nor than the person's
            // bits (the exec bit follows the checkpoint).
            None => {
                for (path, old) in legacy {
                    let full = super::git::join(&self.git.work, &path);
                    if let Ok(m) = std::fs::symlink_metadata(&full)
                        && m.is_file()
                    {
                        use std::os::unix::fs::PermissionsExt;
                        let now = m.permissions().mode() & 0o777;
                        let want = now & (old | ((old & 0o444) >> 2));
                        if want != now {
                            set_bits(&full, want);
                        }
                    }
                }
            }
        }
        let (after_state, _) = self.snapshot()?;
        let after = if after_state == *target {
            commit.to_string()
        } else {
            self.commit(&after_state, "after", "", 0)?
        };
        self.update_refs(&format!(
            "delete refs/tern/pending\nupdate refs/tern/after {after}\n"
        ))
    }

    /// The files whose index entries differ from `commit` (what a checkout of it rewrites).
    /// Empty when git fails (the checkout then leaves their bits as it makes them).
    fn rewritten_by(&self, commit: &str) -> Vec<Vec<u8>> {
        let Ok(out) = self.git.run(
            &[
                "diff-index",
                "--cached",
                "-z",
                "--name-only",
                "--no-renames",
                commit,
            ],
            None,
        ) else {
            return Vec::new();
        };
        split_z(&out).map(<[u8]>::to_vec).collect()
    }

    /// Finishes a restore a kill cut short. Returns what it says (nothing when none was in
    /// flight).
    pub fn recover(&self) -> io::Result<Vec<String>> {
        if !self.git.dir.join("refs/tern/pending").exists()
            && !self.git.dir.join("packed-refs").exists()
        {
            return Ok(Vec::new());
        }
        let _lock = self.lock()?;
        self.recover_locked()
    }

    fn recover_locked(&self) -> io::Result<Vec<String>> {
        // Refs are loose files (tern never packs them): a missing file is no restore in flight,
        // and costs no git run.
        if !self.git.dir.join("refs/tern/pending").exists()
            && !self.git.dir.join("packed-refs").exists()
        {
            return Ok(Vec::new());
        }
        let pending = self.refs(&["refs/tern/pending"])?;
        let Some(p) = pending.first() else {
            return Ok(Vec::new());
        };
        self.checkout_locked(&p.commit, &p.state)?;
        let short: String = p.commit.chars().take(10).collect();
        Ok(vec![format!(
            "an undo, redo or rewind was cut short (tern was stopped while it restored files); tern finished it first: the files are those of the checkpoint it was restoring ({short})"
        )])
    }

    /// Undoes the last `n` turns of `session` that changed files: the workspace goes back to
    /// the checkpoint before the oldest of them. The state now is kept first, so `tern redo`
    /// returns to it. The person's work is never lost silently: a file changed after the turns
    /// ended (modified later than `made_after`, or after the last restore) that the undo would
    /// remove is kept; one it would overwrite refuses the undo (naming it) unless `force`.
    /// Errors: nothing (or fewer than `n` turns) to undo; the refusal.
    pub fn undo(
        &self,
        session: &str,
        n: u32,
        made_after: Option<std::time::SystemTime>,
        force: bool,
    ) -> io::Result<Restored> {
        let _lock = self.lock()?;
        let recovered = self.recover_locked()?;
        let (now, _) = self.snapshot()?;
        let entries = self.entries(session)?;
        let standing = self.standing(&now)?;
        // In a chain of undos (the workspace is still what the last one left), go on from the
        // checkpoint it restored; otherwise start from the newest turn.
        let base = standing
            .as_ref()
            .and_then(|s| {
                entries
                    .iter()
                    .filter(|e| e.commit == s.at.commit)
                    .map(|e| e.turn)
                    .max()
            })
            .unwrap_or(u32::MAX);
        let mut cur = now.clone();
        let mut count = 0;
        let mut target = None;
        for e in entries.iter().rev().filter(|e| e.turn < base) {
            if !e.state.same(&cur) {
                count += 1;
                cur = e.state.clone();
                if count == n {
                    target = Some(e.clone());
                    break;
                }
            }
        }
        let Some(target) = target else {
            return Err(io::Error::other(if count == 0 {
                "nothing to undo: no turn of this session changed a recorded file since its checkpoint (checkpoints are taken before a turn's first command)".to_string()
            } else {
                format!("only {count} turn(s) of this session can be undone; nothing changed")
            }));
        };
        // In a chain the workspace is what the last undo wrote plus what it kept (nothing of
        // the person's since): the kept files stay kept. Otherwise a file is the person's when
        // it changed after both the turns' end and the last restore (whose files are tern's).
        let made_after = match standing {
            Some(_) => None,
            None => match (made_after, self.last_restore_time()) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            },
        };
        let mut r =
            self.restore_as_undo(session, &now, &target, standing.as_ref(), made_after, force)?;
        r.recovered = recovered;
        Ok(r)
    }

    /// Puts back what the last undo (or rewind) replaced: the workspace as it was before it,
    /// the person's files included. Errors: nothing to redo, or the workspace changed since the
    /// undo left it (redo would overwrite those changes; the changed paths are named).
    pub fn redo(&self) -> io::Result<Restored> {
        let _lock = self.lock()?;
        let recovered = self.recover_locked()?;
        let refs = self.refs(&["refs/tern/redo/"])?;
        let top = refs
            .iter()
            .max_by(|a, b| a.name.cmp(&b.name))
            .cloned()
            .ok_or_else(|| io::Error::other("nothing to redo"))?;
        let (now, _) = self.snapshot()?;
        if self.standing(&now)?.is_none() {
            let left = self
                .refs(&["refs/tern/after", "refs/tern/at"])?
                .into_iter()
                .min_by(|a, b| a.name.cmp(&b.name));
            let changed: Vec<String> = match left {
                Some(l) => self
                    .changes(&l.state, &now)?
                    .into_iter()
                    .map(|c| c.path)
                    .collect(),
                None => Vec::new(),
            };
            return Err(io::Error::other(format!(
                "refused: the workspace changed since the undo ({}), and redo would overwrite those changes; nothing was changed. Put those files back as the undo left them (move new ones aside), then `tern redo` works",
                if changed.is_empty() {
                    "files changed".to_string()
                } else {
                    names(&changed)
                }
            )));
        }
        let changes = self.changes(&now, &top.state)?;
        self.update_refs(&format!(
            "delete {}\nupdate refs/tern/at {c}\nupdate refs/tern/latest {c}\nupdate refs/tern/pending {c}\n",
            top.name,
            c = top.commit
        ))?;
        self.checkout_locked(&top.commit, &top.state)?;
        Ok(Restored {
            turn: None,
            changes,
            kept: Vec::new(),
            overwritten: Vec::new(),
            recovered,
        })
    }

    /// Puts the workspace back to checkpoint `target` (of `session`) as an undo, so `tern redo`
    /// returns (files the undo before it kept stay kept). Nothing changes when the workspace
    /// already is that checkpoint.
    pub fn restore(&self, session: &str, target: &Entry) -> io::Result<Restored> {
        let _lock = self.lock()?;
        let recovered = self.recover_locked()?;
        let (now, _) = self.snapshot()?;
        if now.same(&target.state) {
            return Ok(Restored {
                turn: Some(target.turn),
                changes: Vec::new(),
                kept: Vec::new(),
                overwritten: Vec::new(),
                recovered,
            });
        }
        let standing = self.standing(&now)?;
        let mut r = self.restore_as_undo(session, &now, target, standing.as_ref(), None, true)?;
        r.recovered = recovered;
        Ok(r)
    }

    /// Bytes the store takes on disk (its objects).
    pub fn size(&self) -> u64 {
        dir_size(&self.git.dir.join("objects"), 0)
    }

    /// Packs the loose objects once there are many (the first checkpoint of a large workspace
    /// leaves one per file): fewer files to walk and to read. Returns the store's size.
    fn pack_locked(&self) -> io::Result<u64> {
        let (loose, size) = objects_stats(&self.git.dir.join("objects"));
        if loose > LOOSE_LIMIT {
            fsutil::fault::point("git repack", &self.git.dir);
            self.git.run(&["repack", "-d", "-q"], None)?;
            return Ok(self.size());
        }
        Ok(size)
    }

    /// The budget in bytes: the configured one, else 1 GiB or a tenth of the free space of the
    /// store's file system, whichever is smaller.
    pub fn budget(&self) -> u64 {
        budget_of(self.limits, &self.folder)
    }

    /// Removes the oldest checkpoints while the store is over its budget (never the newest,
    /// nor what an undo or redo needs). Returns what it says.
    fn prune_locked(&self, before: u64) -> io::Result<Vec<String>> {
        let budget = self.budget();
        if before <= budget {
            return Ok(Vec::new());
        }
        let all = self.refs(&["refs/tern/"])?;
        let keep: std::collections::BTreeSet<&str> = all
            .iter()
            .filter(|r| !r.name.starts_with("refs/tern/s/"))
            .map(|r| r.commit.as_str())
            .collect();
        // Oldest first: by ref time (refs are loose files, never packed).
        let mut by_commit: BTreeMap<String, (i64, Vec<String>)> = BTreeMap::new();
        for r in all.iter().filter(|r| r.name.starts_with("refs/tern/s/")) {
            let t = std::fs::symlink_metadata(self.git.dir.join(&r.name))
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos() as i64);
            let e = by_commit
                .entry(r.commit.clone())
                .or_insert((i64::MAX, Vec::new()));
            e.0 = e.0.min(t);
            e.1.push(r.name.clone());
        }
        let mut order: Vec<(i64, String, Vec<String>)> = by_commit
            .into_iter()
            .filter(|(c, _)| !keep.contains(c.as_str()))
            .map(|(c, (t, names))| (t, c, names))
            .collect();
        order.sort();
        let mut removed = 0usize;
        let mut size = before;
        while size > budget && !order.is_empty() {
            // A quarter at a time: each round rewrites the refs and walks the objects once.
            let take = (order.len() / 4).max(1);
            let batch: Vec<_> = order.drain(..take).collect();
            let tx: String = batch
                .iter()
                .flat_map(|(_, _, names)| names.iter().map(|n| format!("delete {n}\n")))
                .collect();
            self.update_refs(&tx)?;
            removed += batch.iter().map(|(_, _, n)| n.len()).sum::<usize>();
            // Packs keep only what is still reachable; then the loose leftovers go.
            fsutil::fault::point("git repack", &self.git.dir);
            self.git.run(&["repack", "-a", "-d", "-q"], None)?;
            self.git.run(&["prune", "--expire=now"], None)?;
            size = self.size();
        }
        if removed == 0 {
            return Ok(vec![format!(
                "the checkpoint store ({}) is over its budget of {}, and holds nothing old enough to remove",
                size_text(before),
                size_text(budget)
            )]);
        }
        Ok(vec![format!(
            "the checkpoint store was over its budget of {} ({}): removed the {removed} oldest checkpoint(s); it now takes {}",
            size_text(budget),
            size_text(before),
            size_text(size)
        )])
    }

    /// The empty tree's id (the state before any file).
    pub fn empty_tree() -> &'static str {
        EMPTY_TREE
    }
}

/// Free space below which no checkpoint is taken.
pub const MIN_FREE_BYTES: u64 = 64_000_000;

/// Loose objects past which a checkpoint packs them.
const LOOSE_LIMIT: usize = 1000;

/// (loose objects, bytes) of `objects/`, in one walk.
fn objects_stats(objects: &Path) -> (usize, u64) {
    let Ok(rd) = std::fs::read_dir(objects) else {
        return (0, 0);
    };
    let (mut loose, mut bytes) = (0, 0);
    for e in rd.flatten() {
        let n = e.file_name().len();
        let Ok(inner) = std::fs::read_dir(e.path()) else {
            continue;
        };
        for f in inner.flatten() {
            if let Ok(m) = f.metadata()
                && m.is_file()
            {
                bytes += m.len();
                loose += usize::from(n == 2);
            }
        }
    }
    (loose, bytes)
}

/// The person's files among `changes` (an undo's): kept (the undo would remove them) and
/// overwritten (it would put back another version). A file is the person's when an undo before
/// kept it (`standing`) or it changed after `made_after` (its content: the modification time; a
/// change of its bits alone: the change time). A kept file where the restore puts a
/// file on a folder of its path (the turn made folder `A`, the person added `A/mine`, the
/// checkpoint has file `A`), or a folder over it, cannot stay: the checkout would remove it
/// while the receipt said "kept" (found by a new user); it counts as overwritten.
fn sort_yours(
    work: &Path,
    changes: &[Change],
    standing: Option<&Standing>,
    made_after: Option<std::time::SystemTime>,
) -> (Vec<String>, Vec<String>) {
    // A change of content moves the modification time; a `chmod` only the change time.
    let newer = |path: &str, bits_only: bool| {
        made_after.is_some_and(|cutoff| {
            std::fs::symlink_metadata(super::git::join(work, path.as_bytes())).is_ok_and(|m| {
                use std::os::unix::fs::MetadataExt;
                let changed = if bits_only {
                    let ctime = std::time::Duration::new(
                        m.ctime().max(0) as u64,
                        m.ctime_nsec().clamp(0, 999_999_999) as u32,
                    );
                    Some(std::time::UNIX_EPOCH + ctime)
                } else {
                    m.modified().ok()
                };
                changed.is_some_and(|t| t > cutoff)
            })
        })
    };
    let yours = |c: &Change| {
        standing.is_some_and(|s| s.kept.contains(&c.path)) || newer(&c.path, c.status == 'P')
    };
    let kept: Vec<String> = changes
        .iter()
        .filter(|c| c.status == 'D' && yours(c))
        .map(|c| c.path.clone())
        .collect();
    let mut overwritten: Vec<String> = changes
        .iter()
        .filter(|c| matches!(c.status, 'M' | 'P') && yours(c))
        .map(|c| c.path.clone())
        .collect();
    let under = |a: &str, b: &str| a.strip_prefix(b).is_some_and(|rest| rest.starts_with('/'));
    let clashes = |k: &String| {
        changes
            .iter()
            .any(|c| c.status != 'D' && (under(k, &c.path) || under(&c.path, k)))
    };
    let (clashing, free): (Vec<String>, Vec<String>) = kept.into_iter().partition(clashes);
    overwritten.extend(clashing);
    (free, overwritten)
}

/// The ref of turn `turn` of `session`.
/// The file in the store that remembers the last checkpoint: `<commit> <tree> <index stamp>
/// <record of bits>`.
const REMEMBERED: &str = "tern-latest";

/// The file in the store holding the record of bits of its index ([`Tracked`]).
const TRACKED: &str = "tern-modes";

/// [`Tracked::stamp`] when the store has no index yet.
const NO_INDEX: &str = "none";

/// The last checkpoint as [`REMEMBERED`] holds it.
struct Remembered {
    commit: String,
    state: State,
}

/// The store's index file as a word: inode, size and change time in nanoseconds (git
/// replaces the file on every write). None without an index.
fn index_stamp(git_dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(git_dir.join("index")).ok()?;
    Some(format!(
        "{}:{}:{}.{}",
        m.ino(),
        m.size(),
        m.ctime(),
        m.ctime_nsec()
    ))
}

/// The loose ref files below `dir` (named `prefix/…`), `.lock` files left out.
fn loose_files(dir: &Path, prefix: &str, out: &mut Vec<(String, PathBuf)>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = format!("{prefix}/{}", e.file_name().to_string_lossy());
        match e.file_type() {
            Ok(t) if t.is_dir() => loose_files(&e.path(), &name, out),
            Ok(t) if t.is_file() && !name.ends_with(".lock") => out.push((name, e.path())),
            _ => {}
        }
    }
}

fn turn_ref(session: &str, turn: u32) -> String {
    format!("refs/tern/s/{session}/t{turn:06}")
}

/// Escapes gitignore pattern characters in a literal path.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\' | '!' | '#') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `12.3 MB` style sizes (decimal units).
pub fn size_text(bytes: u64) -> String {
    let b = bytes as f64;
    if bytes >= 1_000_000_000 {
        format!("{:.1} GB", b / 1e9)
    } else if bytes >= 1_000_000 {
        format!("{:.1} MB", b / 1e6)
    } else if bytes >= 1_000 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{bytes} B")
    }
}

/// Removes `*.lock` files under `dir` (what a killed `git update-ref` leaves).
fn remove_lock_files(dir: &Path, depth: usize) {
    if depth > 8 {
        return;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let Ok(t) = e.file_type() else { continue };
        if t.is_dir() {
            remove_lock_files(&e.path(), depth + 1);
        } else if e.file_name().to_string_lossy().ends_with(".lock") {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Bytes of the regular files under `dir` (links not followed).
fn dir_size(dir: &Path, depth: usize) -> u64 {
    if depth > 8 {
        return 0;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut total = 0;
    for e in rd.flatten() {
        let Ok(m) = e.metadata() else { continue };
        if m.is_dir() {
            total += dir_size(&e.path(), depth + 1);
        } else if m.is_file() {
            total += m.len();
        }
    }
    total
}

/// The budget of checkpoints kept on the file system of `path`: the configured one, else 1 GiB
/// or a tenth of the free space there, whichever is smaller (the snapshot store's and the door
/// record's alike).
pub fn budget_of(limits: Limits, path: &Path) -> u64 {
    if let Some(b) = limits.budget_bytes {
        return b;
    }
    let gib = 1u64 << 30;
    free_space(path).map_or(gib, |f| gib.min(f / 10))
}

/// Free bytes of the file system holding `path`.
pub fn free_space(path: &Path) -> Option<u64> {
    fsutil::space(path).map(|s| s.free)
}

/// The permission bits of each of `paths` (workspace-relative) under `work` that is a regular
/// file now, reached through no link (a restore sets bits only inside the workspace).
fn current_modes(work: &Path, paths: &[Vec<u8>]) -> Vec<(Vec<u8>, u32)> {
    use std::os::unix::fs::PermissionsExt;
    paths
        .iter()
        .filter(|p| modes::plain_path(p) && !beyond_link(work, p))
        .filter_map(|p| {
            let m = std::fs::symlink_metadata(super::git::join(work, p)).ok()?;
            m.is_file()
                .then(|| (p.clone(), m.permissions().mode() & modes::BITS))
        })
        .collect()
}

/// Sets the permission bits of `path`; a failure leaves them (the restore goes on).
fn set_bits(path: &Path, bits: u32) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(bits));
}

/// Whether a folder on the way to `path` (workspace-relative bytes) is a symbolic link now.
fn beyond_link(work: &Path, path: &[u8]) -> bool {
    path.iter()
        .enumerate()
        .filter(|(_, b)| **b == b'/')
        .any(|(i, _)| {
            std::fs::symlink_metadata(super::git::join(work, &path[..i]))
                .is_ok_and(|m| m.file_type().is_symlink())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A workspace with a state folder in it, and its store.
    fn store() -> (tempfile::TempDir, Store) {
        let ws = tempfile::tempdir().unwrap();
        let state = ws.path().join(".tern");
        std::fs::create_dir_all(&state).unwrap();
        let s = Store::open(&state, ws.path(), super::super::Limits::default()).unwrap();
        (ws, s)
    }

    fn refs(s: &Store) -> Vec<String> {
        s.refs(&["refs/tern/"])
            .unwrap()
            .into_iter()
            .map(|r| r.name)
            .collect()
    }

    #[test]
    fn a_turn_is_recorded_once_per_tree_under_its_own_ref() {
        let (ws, s) = store();
        std::fs::write(ws.path().join("a.txt"), "1").unwrap();
        let (new, _) = s.record_turn("S1", 1).unwrap();
        assert!(new);
        // The same tree again: the same commit under the next turn's ref, nothing new.
        let (new, _) = s.record_turn("S1", 2).unwrap();
        assert!(!new);
        let e = s.entries("S1").unwrap();
        assert_eq!(e.iter().map(|e| e.turn).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(e[0].commit, e[1].commit);
        assert_eq!(
            refs(&s),
            [
                "refs/tern/latest",
                "refs/tern/s/S1/t000001",
                "refs/tern/s/S1/t000002"
            ]
        );
        // The state folder is never recorded.
        let (now, _) = s.state_now().unwrap();
        let listed = s
            .git
            .text(&["ls-tree", "-r", "--name-only", &now.tree], None)
            .unwrap();
        assert_eq!(listed, "a.txt");
        assert!(s.entries("other").unwrap().is_empty());
    }

    /// A turn that changed nothing reuses the remembered checkpoint (no `for-each-ref`, no
    /// `write-tree`); anything that moves the index or the latest ref (an undo, another write)
    /// makes the next turn ask git again, and each turn's ref names the tree of its files.
    #[test]
    fn the_remembered_checkpoint_is_used_only_while_it_holds() {
        let (ws, s) = store();
        let a = ws.path().join("a.txt");
        std::fs::write(&a, "1").unwrap();
        let fresh = s
            .remembered()
            .expect("a fresh store knows its tree: nothing");
        assert_eq!(
            (fresh.commit.as_str(), fresh.state.tree.as_str()),
            ("", EMPTY_TREE)
        );
        s.record_turn("S1", 1).unwrap();
        let k = s.remembered().expect("remembered after a turn");
        assert_eq!(k.commit, s.refs(&["refs/tern/latest"]).unwrap()[0].commit);
        // Nothing changed: the same commit under turn 2.
        let (new, _) = s.record_turn("S1", 2).unwrap();
        assert!(!new);
        // A change: a new tree, and it is remembered.
        std::fs::write(&a, "2").unwrap();
        let (new, _) = s.record_turn("S1", 3).unwrap();
        assert!(new);
        let k3 = s.remembered().unwrap();
        assert_ne!(k3.state.tree, k.state.tree);
        // An undo replaces the index and moves the refs: not remembered any more.
        std::fs::write(&a, "3").unwrap();
        s.undo("S1", 1, None, true).unwrap();
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "2");
        assert!(s.remembered().is_none());
        s.record_turn("S1", 4).unwrap();
        let e = s.entries("S1").unwrap();
        let last = e.last().unwrap();
        assert_eq!(last.turn, 4);
        assert_eq!(
            last.state,
            s.state_now().unwrap().0,
            "turn 4 names the files now"
        );
        // A forged memory (its commit is not the latest ref's) is not believed.
        std::fs::write(
            s.git.dir.join(REMEMBERED),
            format!("{} {} x\n", "0".repeat(40), EMPTY_TREE),
        )
        .unwrap();
        assert!(s.remembered().is_none());
    }

    /// A `chmod` in the same second as the checkpoint before it (git's index keeps change
    /// times in seconds, so `diff-files` cannot see it) is still a change: the record of the
    /// index names the file racy and its bits are read again.
    #[test]
    fn a_chmod_in_the_second_of_the_last_checkpoint_is_seen() {
        use std::os::unix::fs::PermissionsExt;
        let (ws, s) = store();
        let a = ws.path().join("a.txt");
        std::fs::write(&a, "1").unwrap();
        std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o644)).unwrap();
        let (new, _) = s.record_turn("S1", 1).unwrap();
        assert!(new);
        assert!(s.tracked().unwrap().racy.contains(b"a.txt".as_slice()));
        std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o600)).unwrap();
        let (new, _) = s.record_turn("S1", 2).unwrap();
        assert!(new, "the chmod made a new checkpoint");
        let e = s.entries("S1").unwrap();
        assert_eq!(e[0].state.tree, e[1].state.tree);
        assert_ne!(e[0].state.modes, e[1].state.modes);
        let changes = s.changes(&e[0].state, &e[1].state).unwrap();
        assert_eq!(changes.len(), 1);
        assert_eq!(
            (changes[0].status, changes[0].bits),
            ('P', Some((0o644, 0o600)))
        );
        // Equal records are one object: back to 644, the first record again.
        std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o644)).unwrap();
        s.record_turn("S1", 3).unwrap();
        let e = s.entries("S1").unwrap();
        assert_eq!(e[2].state.modes, e[0].state.modes);
        // Undo of turn 3's change (644) goes back to 600, undo again to 644.
        std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o640)).unwrap();
        s.undo("S1", 1, None, true).unwrap();
        let bits = || std::fs::metadata(&a).unwrap().permissions().mode() & 0o777;
        assert_eq!(bits(), 0o644);
        s.undo("S1", 1, None, true).unwrap();
        assert_eq!(bits(), 0o600);
    }

    /// Names git quotes or cannot show as text (a newline, a space, bytes that are not UTF-8)
    /// keep their bits through an undo.
    #[test]
    fn odd_names_keep_their_bits() {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::PermissionsExt;
        let (ws, s) = store();
        let names: [&[u8]; 3] = [b"new\nline", b"with space", b"caf\xe9"];
        let path = |n: &[u8]| ws.path().join(std::ffi::OsStr::from_bytes(n));
        for n in names {
            std::fs::write(path(n), "x").unwrap();
            std::fs::set_permissions(path(n), std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        s.record_turn("S1", 1).unwrap();
        for n in names {
            std::fs::set_permissions(path(n), std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        s.undo("S1", 1, None, true).unwrap();
        for n in names {
            let bits = std::fs::metadata(path(n)).unwrap().permissions().mode() & 0o777;
            assert_eq!(bits, 0o600, "{}", String::from_utf8_lossy(n));
        }
    }

    /// Without a record of the index (lost, or of another index), every file's bits are read.
    #[test]
    fn a_lost_record_of_the_index_reads_every_file() {
        use std::os::unix::fs::PermissionsExt;
        let (ws, s) = store();
        for n in ["a", "b", "c"] {
            std::fs::write(ws.path().join(n), n).unwrap();
        }
        s.record_turn("S1", 1).unwrap();
        std::fs::remove_file(s.git.dir.join(TRACKED)).unwrap();
        std::fs::set_permissions(ws.path().join("b"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        let (new, _) = s.record_turn("S1", 2).unwrap();
        assert!(new);
        let t = s.tracked().unwrap();
        assert_eq!(t.modes.listed().collect::<Vec<_>>(), [&b"b"[..]]);
        // A record that cannot be read is no record either.
        std::fs::write(s.git.dir.join(TRACKED), b"tern-modes-state 1 x").unwrap();
        assert!(s.tracked().is_none());
        s.record_turn("S1", 3).unwrap();
        assert_eq!(s.tracked().unwrap().modes.listed().count(), 1);
    }

    #[test]
    fn an_undo_and_its_redo_are_ref_transactions_that_round_trip_the_files() {
        let (ws, s) = store();
        let a = ws.path().join("a.txt");
        std::fs::write(&a, "before").unwrap();
        s.record_turn("S1", 1).unwrap();
        std::fs::write(&a, "after").unwrap();
        std::fs::write(ws.path().join("new.txt"), "made").unwrap();
        let r = s.undo("S1", 1, None, false).unwrap();
        assert_eq!(r.turn, Some(1));
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "before");
        assert!(!ws.path().join("new.txt").exists());
        assert!(refs(&s).iter().any(|r| r.starts_with("refs/tern/redo/")));
        s.redo().unwrap();
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "after");
        assert_eq!(
            std::fs::read_to_string(ws.path().join("new.txt")).unwrap(),
            "made"
        );
        assert!(!refs(&s).iter().any(|r| r.starts_with("refs/tern/redo/")));
        // Nothing left to redo, and a new turn drops nothing it should keep.
        assert!(s.redo().is_err());
    }

    #[test]
    fn a_failed_ref_transaction_changes_no_ref() {
        let (ws, s) = store();
        std::fs::write(ws.path().join("a.txt"), "1").unwrap();
        s.record_turn("S1", 1).unwrap();
        let before = refs(&s);
        let latest = s.entries("S1").unwrap()[0].commit.clone();
        let tx = format!(
            "update refs/tern/s/S1/t000009 {latest}\nupdate refs/tern/latest {}\n",
            "0".repeat(39) + "1"
        );
        assert!(s.update_refs(&tx).is_err());
        assert_eq!(refs(&s), before, "all or nothing");
        // A stale lock a killed git left is removed and the transaction goes through.
        let lock = s.git.dir.join("refs/tern/latest.lock");
        std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
        std::fs::write(&lock, "").unwrap();
        s.update_refs(&format!(
            "update refs/tern/s/S1/t000009 {latest}\nupdate refs/tern/latest {latest}\n"
        ))
        .unwrap();
        assert!(!lock.exists());
        assert!(refs(&s).contains(&"refs/tern/s/S1/t000009".to_string()));
    }

    #[test]
    fn a_kept_file_where_the_restore_puts_a_file_on_its_folder_counts_as_overwritten() {
        let ch = |status, path: &str| Change {
            status,
            path: path.into(),
            blob: None,
            old_blob: None,
            bits: None,
        };
        let r = |name: &str| Ref {
            name: name.into(),
            commit: String::new(),
            state: State::default(),
        };
        let standing = Standing {
            at: r("refs/tern/at"),
            after: r("refs/tern/after"),
            kept: [
                "A/mine".to_string(),
                "notes.txt".to_string(),
                "x.txt".to_string(),
            ]
            .into_iter()
            .collect(),
        };
        let changes = [
            ch('D', "A/mine"),
            ch('A', "A"),
            ch('D', "notes.txt"),
            ch('M', "x.txt"),
        ];
        let (kept, overwritten) =
            sort_yours(Path::new("/nonexistent"), &changes, Some(&standing), None);
        assert_eq!(kept, ["notes.txt"]);
        assert_eq!(overwritten, ["x.txt", "A/mine"]);
        // Nothing is the person's without a standing undo or a later change.
        let (kept, overwritten) = sort_yours(Path::new("/nonexistent"), &changes, None, None);
        assert!(kept.is_empty() && overwritten.is_empty());
    }

    #[test]
    fn names_and_sizes_are_plain_data() {
        assert_eq!(turn_ref("S", 7), "refs/tern/s/S/t000007");
        assert_eq!(glob_escape("a*b[1]#!"), "a\\*b\\[1\\]\\#\\!");
        assert_eq!(size_text(999), "999 B");
        assert_eq!(size_text(12_345_678), "12.3 MB");
    }
}
