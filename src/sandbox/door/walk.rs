//! The door's hands: walks the layer's upper folder, gathers what the workspace holds now for
//! each change (the facts [`rules::judge`] needs), and does what the verdict says. Both trees
//! are walked with folder descriptors that never follow a link.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::rules::{self, Change, Entry, Now, Reason, Special, Verdict};
use super::{Door, Fp, HELD_DIR, HELD_LOG, Held, Report, Seen};
use crate::checkpoint::record::{self, Node, Recorder};
use crate::sandbox::jail::git::is_git_dir;
use crate::store::dirfd::{Dir, Kind};

/// overlayfs's mark of a folder that hides the lower one's entries, in a user namespace mount
/// (`userxattr`: the `user.overlay.` prefix; overlayfs documentation, "User xattr").
const OPAQUE: &std::ffi::CStr = c"user.overlay.opaque";

/// Temporary names the door writes before its rename (never left behind on success).
const TEMP: &str = ".tern-door-";

pub(super) fn pass(door: &mut Door, report: &mut Report) {
    let (up, ws) = match (Dir::hold(&door.upper), Dir::hold(&door.root)) {
        (Ok(u), Ok(w)) => (u, w),
        (Err(e), _) | (_, Err(e)) => {
            report
                .failed
                .push(format!("the layer or the workspace: {e}"));
            return;
        }
    };
    let staging = staging(&door.upper, &door.root);
    let mut w = Walker {
        door,
        ws_root: ws,
        report,
        parent: None,
        repos: std::cell::RefCell::new(std::collections::HashMap::new()),
        room: None,
        staging,
        turn: None,
    };
    w.folder(&up, Path::new(""));
}

/// The layer's staging folder beside its upper folder, when it is on the workspace's file
/// system (a rename cannot cross file systems).
fn staging(upper: &Path, root: &Path) -> Option<Dir> {
    use std::os::unix::fs::MetadataExt;
    let d = upper.parent()?.join("staging");
    let _ = std::fs::create_dir(&d);
    let same = std::fs::symlink_metadata(&d).ok()?.dev() == std::fs::metadata(root).ok()?.dev();
    same.then(|| Dir::hold(&d).ok()).flatten()
}

struct Walker<'a> {
    door: &'a mut Door,
    ws_root: Dir,
    report: &'a mut Report,
    /// The workspace folder last opened (changes come folder by folder), None inside when a
    /// link or a file is on the way.
    parent: Option<(PathBuf, Option<std::rc::Rc<Dir>>)>,
    /// Whether a folder holds a repository by its content, per path, for this pass.
    repos: std::cell::RefCell<std::collections::HashMap<PathBuf, bool>>,
    /// The workspace file system's free bytes and floor, read once a pass and counted down.
    room: Option<(u64, u64)>,
    /// Where new files are made before their rename (see [`put`]).
    staging: Option<Dir>,
    /// The top-level session's turn, read at this pass's first recorded change.
    turn: Option<u32>,
}

/// Where one applied change is recorded (the workspace's door), and under which turn.
#[derive(Clone, Copy)]
struct Log<'a> {
    rec: &'a Recorder,
    turn: u32,
}

impl Log<'_> {
    /// Records the change at `rel`. A failed line fails the change (it is tried again at the
    /// next pass): nothing is applied that undo would not know of.
    fn change(&self, rel: &Path, before: Node, after: Node) -> io::Result<()> {
        self.rec.change(self.turn, rel, before, after)
    }
}

impl Walker<'_> {
    /// Every entry of the upper folder `up` (at `rel`), folders after their own verdict.
    fn folder(&mut self, up: &Dir, rel: &Path) {
        let Ok(mut names) = up.names() else {
            return;
        };
        names.sort();
        for name in names {
            let Ok(st) = up.lstat(&name) else { continue };
            let rel = rel.join(&name);
            let fp = Fp::of(&st);
            let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
            let unchanged = self.door.seen.get(&rel).is_some_and(|s| s.upper == fp);
            let go_in = if unchanged {
                // A folder's own stat does not change when a file inside is rewritten.
                is_dir && !self.held_here(&rel)
            } else {
                self.one(up, &name, &st, &rel, fp)
            };
            if go_in && let Ok(sub) = up.beneath(Path::new(&name)) {
                self.folder(&sub, &rel);
            }
        }
    }

    /// Whether `rel` was held back whole (a new repository): its content is not walked.
    fn held_here(&self, rel: &Path) -> bool {
        self.door.seen.get(rel).is_some_and(|s| s.whole)
    }

    /// Judges and handles one changed entry; true when it is a folder to walk into.
    fn one(&mut self, up: &Dir, name: &OsStr, st: &libc::stat, rel: &Path, fp: Fp) -> bool {
        if self.held_here(rel) {
            // A new repository held back before: said once; its kept copy is refreshed when
            // the jail ends ([`super::Door::finish`]).
            if let Some(s) = self.door.seen.get_mut(rel) {
                s.upper = fp;
            }
            return false;
        }
        let entry = entry_of(up, name, st);
        let change = Change {
            rel: rel.to_path_buf(),
            entry,
        };
        let (parent, ws_st) = self.ws_at(rel);
        if let (
            Entry::Dir {
                mode,
                opaque: false,
            },
            Some(ws),
        ) = (&change.entry, &ws_st)
            && kind_of(ws) == Kind::Dir
            && ws.st_mode & 0o1777 == *mode
        {
            // A folder the workspace has already, copied up because something beneath it
            // changed: not a change itself; what is beneath is judged.
            self.door.seen.insert(
                rel.to_path_buf(),
                Seen {
                    upper: fp,
                    ws: Some(Fp::of(ws)),
                    whole: false,
                },
            );
            return true;
        }
        if let (Entry::File { mode }, Some(ws), Some(parent)) = (&change.entry, &ws_st, &parent)
            && kind_of(ws) == Kind::File
            && ws.st_mode & 0o1777 == *mode
            && ws.st_size == st.st_size
            && same_bytes(up, parent, name)
        {
            // The workspace holds these very bytes already (the door wrote them before a
            // crash, or the person wrote the same): nothing to apply, nothing to say.
            let seen = Seen {
                upper: fp,
                ws: Some(Fp::of(ws)),
                whole: false,
            };
            self.door.seen.insert(rel.to_path_buf(), seen);
            return false;
        }
        let now = self.now_for(&change, ws_st.as_ref());
        let verdict = match &parent {
            Some(_) => rules::judge(&change, &now),
            // Held back itself, or a link or a file on the way in the workspace: nothing is
            // written through it.
            None => Verdict::Hold(Reason::NoFolder),
        };
        match verdict {
            Verdict::Apply { listed } => match parent {
                Some(parent) => self.apply_one(up, &parent, &change, ws_st.as_ref(), fp, listed),
                None => false,
            },
            Verdict::Hold(reason) => {
                self.hold_one(
                    up,
                    parent.as_deref(),
                    &change.rel,
                    ws_st.as_ref(),
                    fp,
                    reason,
                );
                false
            }
        }
    }

    /// Applies one change; true when it is a folder to walk into.
    fn apply_one(
        &mut self,
        up: &Dir,
        parent: &Dir,
        change: &Change,
        ws_st: Option<&libc::stat>,
        fp: Fp,
        listed: bool,
    ) -> bool {
        let rel = &change.rel;
        let name = rel.file_name().unwrap_or_default();
        if let Entry::File { .. } = change.entry
            && let Err(e) = self.room_for(up, name)
        {
            self.report.failed.push(format!("{}: {e}", rel.display()));
            return false;
        }
        // What git writes in a repository's own folder is the person's repository's data,
        // never part of a turn's undo: not recorded.
        let in_git = rel.components().any(|c| c.as_os_str() == ".git");
        let log = match &self.door.record {
            Some(rec) if !in_git => Some(Log {
                rec,
                turn: *self.turn.get_or_insert_with(|| rec.turn()),
            }),
            _ => None,
        };
        match apply(
            up,
            parent,
            self.staging.as_ref(),
            rel,
            &change.entry,
            ws_st,
            log,
        ) {
            Ok(()) => {
                let ws = parent.lstat(name).ok().map(|s| Fp::of(&s));
                let seen = Seen {
                    upper: fp,
                    ws,
                    whole: false,
                };
                self.door.seen.insert(rel.clone(), seen);
                if !matches!(change.entry, Entry::Dir { .. }) || ws_st.is_none() {
                    self.report.applied += 1;
                }
                if listed {
                    self.report.listed.push(rel.clone());
                }
                matches!(change.entry, Entry::Dir { .. })
            }
            Err(e) => {
                self.report.failed.push(format!("{}: {e}", rel.display()));
                false
            }
        }
    }

    /// Whether the workspace's file system keeps its floor after taking the layer's file
    /// `name` (the door never fills the disk a command was stopped from filling).
    fn room_for(&mut self, up: &Dir, name: &OsStr) -> io::Result<()> {
        let len = up
            .lstat(name)
            .map(|s| u64::try_from(s.st_size).unwrap_or(0))?;
        if self.room.is_none() {
            self.room = crate::store::fsutil::space(&self.door.root)
                .map(|s| (s.free, self.door.floor.bytes(s.total)));
        }
        let Some((free, floor)) = self.room.as_mut() else {
            return Ok(());
        };
        if *floor > 0 && free.saturating_sub(len) < *floor {
            return Err(io::Error::other(format!(
                "the disk holding the workspace would fall below tern's floor ({} free, the file is {})",
                crate::checkpoint::size_text(*free),
                crate::checkpoint::size_text(len)
            )));
        }
        *free = free.saturating_sub(len);
        Ok(())
    }

    /// Holds one change back: kept aside when it is a new repository or a file the person
    /// changed meanwhile (then the jail is shown the person's version), said always.
    fn hold_one(
        &mut self,
        up: &Dir,
        parent: Option<&Dir>,
        rel: &Path,
        ws_st: Option<&libc::stat>,
        fp: Fp,
        reason: Reason,
    ) {
        let name = rel.file_name().unwrap_or_default();
        let keep = matches!(reason, Reason::NewRepository | Reason::PersonChanged);
        let kept = if keep {
            self.keep(up, name, rel, &reason)
        } else {
            None
        };
        let whole = reason == Reason::NewRepository;
        let ws = if whole { None } else { ws_st.map(Fp::of) };
        let mut seen = Seen {
            upper: fp,
            ws,
            whole,
        };
        if reason == Reason::PersonChanged
            && let (Some(parent), Some(_)) = (parent, &kept)
        {
            // The jail sees the person's version from now on (written into the layer's own
            // file, in place, so overlayfs serves the new bytes).
            let _ = refresh_upper(up, name, parent);
            if let Ok(s) = up.lstat(name) {
                seen.upper = Fp::of(&s);
                seen.ws = parent.lstat(name).ok().map(|s| Fp::of(&s));
            }
        }
        self.door.seen.insert(rel.to_path_buf(), seen);
        self.report.held.push(Held::new(
            kept.as_ref().map_or(0, |(n, _)| *n),
            rel.to_path_buf(),
            reason.to_string(),
            kept.map(|(_, p)| p),
        ));
    }

    /// The workspace folder holding `rel` (None: a link or a file on the way) and what is at
    /// `rel` there now.
    fn ws_at(&mut self, rel: &Path) -> (Option<std::rc::Rc<Dir>>, Option<libc::stat>) {
        let parent = rel.parent().unwrap_or(Path::new(""));
        let dir = match &self.parent {
            Some((p, d)) if p == parent => d.clone(),
            _ => {
                let d = self.ws_root.beneath(parent).ok().map(std::rc::Rc::new);
                self.parent = Some((parent.to_path_buf(), d.clone()));
                d
            }
        };
        let Some(dir) = dir else {
            return (None, None);
        };
        let name = rel.file_name().unwrap_or_default();
        let st = dir.lstat(name).ok();
        (Some(dir), st)
    }

    fn now_for(&self, c: &Change, ws: Option<&libc::stat>) -> Now {
        let kind = ws.map(kind_of);
        let person_changed = match (self.door.seen.get(&c.rel).and_then(|s| s.ws), ws) {
            (Some(was), Some(st)) => was != Fp::of(st),
            (None, Some(st)) => {
                time_of(st.st_ctime, st.st_ctime_nsec) > self.door.last_look
                    // A door killed mid-change had linked this very file into its record
                    // (which changed its change time): not the person's.
                    && !(st.st_nlink > 1
                        && self
                            .door
                            .record
                            .as_ref()
                            .is_some_and(|r| r.holds(st.st_ino)))
            }
            (_, None) => false,
        };
        let root = &self.door.root;
        let upper = &self.door.upper;
        let is_repo = |p: &Path| {
            if let Some(known) = self.repos.borrow().get(p) {
                return *known;
            }
            let is = is_git_dir(&root.join(p)) || is_git_dir(&upper.join(p));
            self.repos.borrow_mut().insert(p.to_path_buf(), is);
            is
        };
        let link_inside = match &c.entry {
            Entry::Link(t) => rules::lexical_target(root, &c.rel, t).is_some_and(|to| {
                rules::git_place(&to.join("x"), &is_repo).is_none()
                    && to.components().all(|c| c.as_os_str() != ".git")
                    && resolves_inside(root, &to)
            }),
            _ => false,
        };
        Now {
            kind,
            person_changed,
            git: rules::git_place(&c.rel, &is_repo),
            link_inside,
            listed: rules::runs_on_its_own(&c.rel, &self.door.named),
            tern_state: self
                .door
                .state
                .as_ref()
                .is_some_and(|s| c.rel.starts_with(s)),
        }
    }

    /// Copies the layer's entry aside into `held/N/<rel>` and records it in `held.jsonl`.
    fn keep(
        &mut self,
        up: &Dir,
        name: &OsStr,
        rel: &Path,
        reason: &Reason,
    ) -> Option<(u32, PathBuf)> {
        let n = self.door.kept + 1;
        // Kept under the path it is said by (an `--add-dir`'s full path, less its root).
        let shown = self.door.shown(rel);
        let dest = self
            .door
            .session
            .join(HELD_DIR)
            .join(n.to_string())
            .join(shown.strip_prefix("/").unwrap_or(&shown));
        if let Some(p) = dest.parent() {
            std::fs::create_dir_all(p).ok()?;
        }
        copy_out(up, name, &dest).ok()?;
        let h = Held::new(
            n,
            self.door.shown(rel),
            reason.to_string(),
            Some(dest.clone()),
        );
        let line = serde_json::to_string(&h).ok()?;
        crate::store::fsutil::append_line(&self.door.session.join(HELD_LOG), &line).ok()?;
        self.door.kept = n;
        if *reason == Reason::NewRepository {
            self.door.repos.push((rel.to_path_buf(), dest.clone()));
        }
        Some((n, dest))
    }
}

/// What the layer holds at `name` (never followed).
fn entry_of(up: &Dir, name: &OsStr, st: &libc::stat) -> Entry {
    // Set-user-ID and set-group-ID never pass the door: the jail mounts with nosuid, the
    // workspace does not, and a set-id file a command made (as root: owned by root) would run
    // with its owner's rights for whoever starts it.
    let mode = st.st_mode & 0o1777;
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => Entry::File { mode },
        libc::S_IFDIR => Entry::Dir {
            mode,
            opaque: up
                .beneath(Path::new(name))
                .ok()
                .and_then(|d| d.xattr(OPAQUE))
                .is_some_and(|v| v == b"y"),
        },
        libc::S_IFLNK => up
            .read_link(name)
            .map_or(Entry::Special(Special::Device), Entry::Link),
        libc::S_IFCHR if st.st_rdev == 0 => Entry::Whiteout,
        libc::S_IFIFO => Entry::Special(Special::Fifo),
        libc::S_IFSOCK => Entry::Special(Special::Socket),
        _ => Entry::Special(Special::Device),
    }
}

fn kind_of(st: &libc::stat) -> Kind {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => Kind::File,
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFLNK => Kind::Link,
        _ => Kind::Other,
    }
}

fn time_of(secs: i64, nanos: i64) -> SystemTime {
    let d = Duration::new(
        u64::try_from(secs).unwrap_or(0),
        u32::try_from(nanos).unwrap_or(0).min(999_999_999),
    );
    UNIX_EPOCH + d
}

/// Whether the workspace path `to` (relative), as far as it exists, resolves inside `root`
/// (a link already in the workspace could lead elsewhere).
fn resolves_inside(root: &Path, to: &Path) -> bool {
    let Ok(root) = std::fs::canonicalize(root) else {
        return false;
    };
    let mut p = root.join(to);
    loop {
        if let Ok(c) = std::fs::canonicalize(&p) {
            return c.starts_with(&root);
        }
        if !p.pop() {
            return false;
        }
    }
}

/// Whether the layer's file `name` and the workspace's hold the same bytes (both read in
/// blocks; any error counts as different).
fn same_bytes(up: &Dir, ws: &Dir, name: &OsStr) -> bool {
    match (
        up.open_file(name, libc::O_RDONLY, 0),
        ws.open_file(name, libc::O_RDONLY, 0),
    ) {
        (Ok(a), Ok(b)) => crate::store::fsutil::same_content(a, b),
        _ => false,
    }
}

/// Does what an applied change says in the workspace folder `ws` at `rel`'s name, recording
/// it in `log` (each replaced entry kept first, its line written before the rename).
fn apply(
    up: &Dir,
    ws: &Dir,
    staging: Option<&Dir>,
    rel: &Path,
    entry: &Entry,
    now: Option<&libc::stat>,
    log: Option<Log<'_>>,
) -> io::Result<()> {
    let name = rel.file_name().unwrap_or_default();
    let now_kind = now.map(kind_of);
    match entry {
        Entry::Whiteout => remove_keeping_git(ws, name, rel, log).map(|_| ()),
        Entry::Dir { mode, opaque } => {
            if now_kind.is_some_and(|k| k != Kind::Dir) {
                remove_keeping_git(ws, name, rel, log)?;
            }
            let before = match now {
                Some(st) if now_kind == Some(Kind::Dir) => Node::Dir {
                    mode: st.st_mode & 0o7777,
                },
                _ => Node::Absent,
            };
            ws.make_dir(name, 0o700)?;
            ws.set_mode(name, *mode)?;
            let after = Node::Dir { mode: *mode };
            if let Some(l) = log
                && before != after
            {
                l.change(rel, before, after)?;
            }
            if *opaque && now_kind == Some(Kind::Dir) {
                // Replaced whole: what the workspace has beneath and the layer does not goes.
                let (u, w) = (up.beneath(Path::new(name))?, ws.beneath(Path::new(name))?);
                let keep: Vec<OsString> = u.names()?;
                for n in w.names()? {
                    if !keep.contains(&n) {
                        remove_keeping_git(&w, &n, &rel.join(&n), log)?;
                    }
                }
            }
            Ok(())
        }
        Entry::File { mode } => {
            if now_kind == Some(Kind::Dir) {
                remove_keeping_git(ws, name, rel, log)?;
            }
            let mut src = up.open_file(name, libc::O_RDONLY, 0)?;
            if !src.metadata()?.is_file() {
                return Err(io::Error::other("not a plain file"));
            }
            put(ws, name, &mut src, *mode, staging, &mut |made| match log {
                Some(l) => {
                    let before = l.rec.keep(ws, name)?;
                    l.change(rel, before, Node::File(record::file_node(made, None)))
                }
                None => Ok(()),
            })
        }
        Entry::Link(target) => {
            if now_kind == Some(Kind::Dir) {
                remove_keeping_git(ws, name, rel, log)?;
            }
            let at = staging.unwrap_or(ws);
            let tmp = OsString::from(format!("{TEMP}{}", std::process::id()));
            let _ = at.remove_file(&tmp);
            at.symlink(target, &tmp)?;
            if let Some(l) = log {
                let before = l.rec.keep(ws, name)?;
                let t = target.to_string_lossy().into_owned();
                let target_bytes = target
                    .to_str()
                    .is_none()
                    .then(|| target.as_os_str().as_encoded_bytes().to_vec());
                let after = Node::Link {
                    target: t,
                    target_bytes,
                };
                if let Err(e) = l.change(rel, before, after) {
                    let _ = at.remove_file(&tmp);
                    return Err(e);
                }
            }
            at.rename(&tmp, ws, name)
        }
        Entry::Special(_) => Err(io::Error::other("never applied")),
    }
}

/// Removes the entry `name` of `ws` (at `rel`) and everything beneath it but any repository
/// (`.git`) there, which stays with the folders holding it: a removal never takes a
/// repository the checkpoints cannot bring back (they do not record nested repositories).
/// Each entry removed is recorded in `log` (a file moved into the record). True when all went.
fn remove_keeping_git(
    ws: &Dir,
    name: &OsStr,
    rel: &Path,
    log: Option<Log<'_>>,
) -> io::Result<bool> {
    if name == ".git" {
        return Ok(false);
    }
    let st = match ws.lstat(name) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
        other => other?,
    };
    if kind_of(&st) != Kind::Dir {
        match log {
            Some(l) => {
                let (before, obj) = l.rec.plan_removal(ws, name)?;
                l.change(rel, before, Node::Absent)?;
                l.rec.remove(ws, name, obj.as_deref())?;
            }
            None => ws.remove_file(name)?,
        }
        return Ok(true);
    }
    let sub = ws.beneath(Path::new(name))?;
    let mut all = true;
    for n in sub.names()? {
        all &= remove_keeping_git(&sub, &n, &rel.join(&n), log)?;
    }
    if all {
        if let Some(l) = log {
            let before = Node::Dir {
                mode: st.st_mode & 0o7777,
            };
            l.change(rel, before, Node::Absent)?;
        }
        ws.remove_dir(name)?;
    }
    Ok(all)
}

/// Writes `src` as `name` in `ws` with `mode`: a new file there, then a rename over the name
/// (a link at the name is replaced, never followed).
///
/// The new file is made in `staging` (the layer's own folder, on the workspace's file system)
/// when there is one, so a tern killed between the copy and the rename leaves nothing in the
/// workspace (the layer's folder is removed or recovered whole); else beside the name.
fn put(
    ws: &Dir,
    name: &OsStr,
    src: &mut impl Read,
    mode: u32,
    staging: Option<&Dir>,
    before_rename: &mut dyn FnMut(&libc::stat) -> io::Result<()>,
) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let at = staging.unwrap_or(ws);
    let (mut tmp, tmp_name) = at.create_unique_mode(TEMP, "", 0o600)?;
    let done = (|| {
        io::copy(src, &mut tmp)?;
        tmp.set_permissions(std::fs::Permissions::from_mode(mode))?;
        tmp.flush()?;
        before_rename(&at.lstat(&tmp_name)?)?;
        at.rename(&tmp_name, ws, name)
    })();
    if done.is_err() {
        let _ = at.remove_file(&tmp_name);
    }
    done
}

/// Rewrites the layer's file `name` in place with the workspace's bytes (same inode, so the
/// jail's open view follows).
fn refresh_upper(up: &Dir, name: &OsStr, ws: &Dir) -> io::Result<()> {
    let mut src = ws.open_file(name, libc::O_RDONLY, 0)?;
    if !src.metadata()?.is_file() {
        return Ok(());
    }
    let mut dst = up.open_file(name, libc::O_WRONLY | libc::O_TRUNC, 0)?;
    io::copy(&mut src, &mut dst)?;
    Ok(())
}

/// Copies the layer's entry `name` (a file, a link as a link, a folder whole) to `dest`.
fn copy_out(up: &Dir, name: &OsStr, dest: &Path) -> io::Result<()> {
    let st = up.lstat(name)?;
    match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => {
            std::fs::create_dir_all(dest)?;
            let sub = up.beneath(Path::new(name))?;
            for n in sub.names()? {
                copy_out(&sub, &n, &dest.join(&n))?;
            }
            Ok(())
        }
        libc::S_IFREG => {
            let mut src = up.open_file(name, libc::O_RDONLY, 0)?;
            let mut out = std::fs::File::create(dest)?;
            io::copy(&mut src, &mut out).map(|_| ())
        }
        libc::S_IFLNK => std::os::unix::fs::symlink(up.read_link(name)?, dest),
        _ => Ok(()),
    }
}

/// Copies kept-aside content at `kept` to `dest` (files, folders, links as links), for
/// `tern held take`.
pub(super) fn take(kept: &Path, dest: &Path) -> io::Result<()> {
    let parent = kept.parent().ok_or_else(|| io::Error::other("no parent"))?;
    let name = kept
        .file_name()
        .ok_or_else(|| io::Error::other("no name"))?;
    let up = Dir::hold(parent)?;
    if let Some(p) = dest.parent() {
        std::fs::create_dir_all(p)?;
    }
    if std::fs::symlink_metadata(dest).is_ok_and(|m| m.is_dir()) {
        std::fs::remove_dir_all(dest)?;
    } else if std::fs::symlink_metadata(dest).is_ok() {
        std::fs::remove_file(dest)?;
    }
    copy_out(&up, name, dest)
}

/// Copies the layer's `rel` (a new repository) over its kept copy `dest` again (reached from
/// the layer's root without following a link).
pub(super) fn refresh_kept(upper: &Path, rel: &Path, dest: &Path) -> io::Result<()> {
    let parent = rel.parent().unwrap_or(Path::new(""));
    let name = rel.file_name().ok_or_else(|| io::Error::other("no name"))?;
    let up = Dir::hold(upper)?.beneath(parent)?;
    if dest.exists() {
        std::fs::remove_dir_all(dest)?;
    }
    copy_out(&up, name, dest)
}

/// The highest `n` in a `held.jsonl` (0: none).
pub(super) fn last_kept(log: &Path) -> u32 {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Held>(l).ok())
        .map(|h| h.n)
        .max()
        .unwrap_or(0)
}

/// Bytes and entries under `upper` (links not followed).
pub(super) fn size(upper: &Path) -> (u64, u64) {
    fn walk(d: &Dir, acc: &mut (u64, u64)) {
        for n in d.names().unwrap_or_default() {
            let Ok(st) = d.lstat(&n) else { continue };
            acc.1 += 1;
            acc.0 += u64::try_from(st.st_blocks).unwrap_or(0) * 512;
            if st.st_mode & libc::S_IFMT == libc::S_IFDIR
                && let Ok(sub) = d.beneath(Path::new(&n))
            {
                walk(&sub, acc);
            }
        }
    }
    let mut acc = (0, 0);
    if let Ok(d) = Dir::hold(upper) {
        walk(&d, &mut acc);
    }
    acc
}

/// Workspace paths (relative) the repository's git config names as programs or hook folders
/// (`core.hooksPath`, `core.fsmonitor`, filters, textconv, …): listed when changed.
pub(super) fn named_by_git_config(root: &Path) -> Vec<PathBuf> {
    const KEYS: [&str; 9] = [
        "hookspath",
        "fsmonitor",
        "textconv",
        "clean",
        "smudge",
        "process",
        "sshcommand",
        "editor",
        "askpass",
    ];
    let text = std::fs::read_to_string(root.join(".git/config")).unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        if !KEYS.contains(&k.trim().to_ascii_lowercase().as_str()) {
            continue;
        }
        let v = v.trim().trim_matches('"');
        let first = v.split_whitespace().next().unwrap_or("");
        let p = Path::new(first);
        let rel = if p.is_absolute() {
            p.strip_prefix(root).ok().map(Path::to_path_buf)
        } else {
            rules::lexical_target(root, Path::new("x"), p)
        };
        if let Some(r) = rel.filter(|r| !r.as_os_str().is_empty()) {
            out.push(r);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_config_names_programs_and_hook_folders_in_the_workspace() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join(".git")).unwrap();
        let root = d.path();
        std::fs::write(
            root.join(".git/config"),
            format!(
                "[core]\n\thooksPath = .githooks2\n\tfsmonitor = \"tools/mon.sh\"\n[diff \"x\"]\n\ttextconv = {}/bin/conv --flag\n\teditor = vim\n",
                root.display()
            ),
        )
        .unwrap();
        let got = named_by_git_config(root);
        assert_eq!(
            got,
            vec![
                PathBuf::from(".githooks2"),
                "tools/mon.sh".into(),
                "bin/conv".into(),
                "vim".into()
            ]
        );
    }
}
