//! The jail a runtime's commands run in, kept for the runtime's life: started at the first
//! command, restarted only when its private `TMPDIR` had to be made anew, refused for good when
//! the kernel refuses it. Two small rooms feed it: the **pins** ([`Pins`]: workspace files shown
//! read-only, the scripts the person's hooks and MCP servers run) and the repositories'
//! **shadows** ([`Shadows`]: where each jail's copies of git's top levels live, `jail/git.rs`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{NotRun, Rules};
use crate::policy::Mode;
use crate::procs::ProcessGroups;
use crate::sandbox::door::{Door, Report};
use crate::sandbox::jail::mounts::LAYER_STEP;
use crate::sandbox::jail::{Jail, JailError, JailPaths, JailSlot, JailSpec};
use crate::store::{Session, files};

/// The jail of a runtime and what it is built from.
#[derive(Debug, Default)]
pub(super) struct Keeper {
    slot: JailSlot,
    shadows: Shadows,
    pins: Pins,
    /// The running jail's layer and its door (workspace-write with a layer).
    layer: LayerRoom,
}

/// The workspace's layer (issue 42): where each jail's upper folder lives, the door that
/// applies it, and whether the kernel refused it (then the bind walls, said once).
#[derive(Debug, Default)]
struct LayerRoom {
    dirs: Shadows,
    /// One door per layer: the workspace's first, then each `--add-dir`'s.
    doors: Vec<Door>,
    /// The kernel refused the layer: why (said once with the next command's notes).
    refused: Option<String>,
    /// One-time notices not yet said.
    unsaid: Vec<String>,
    /// A turn ended: the next command may start the jail anew (fresh overlayfs lookups).
    refresh: bool,
    /// The next jail mounts the running layer again (its door and what it holds go on).
    reuse: bool,
}

impl Keeper {
    /// The jail for the next command: `None` in danger-full-access and with `--no-jail`
    /// (Landlock alone); the running one while it lives and uses `tmp`; else a new one (its
    /// cost is paid at the first command, not by a session that never runs one).
    ///
    /// Errors: the one line of [`crate::sandbox::jail::refusal`], for this and every later
    /// command (the kernel's answer does not change within a run).
    pub(super) fn get(
        &mut self,
        rules: &Rules,
        session: &Session,
        tmp: Option<&Path>,
        groups: &Arc<ProcessGroups>,
    ) -> Result<Option<Arc<Jail>>, NotRun> {
        if !rules.mode.is_sandboxed() || rules.reach.no_jail {
            return Ok(None);
        }
        if let JailSlot::Running(j) = &self.slot {
            // The same private TMPDIR (it is made anew only when it could not be emptied) and
            // the jail still there: keep it. Else a new one.
            let same_tmp = tmp.is_none_or(|t| {
                j.spec().writable.iter().any(|w| w == t)
                    || std::fs::canonicalize(t).is_ok_and(|t| j.spec().writable.contains(&t))
            });
            // At a turn's first command, a jail with a layer and nothing running is started
            // anew over the same layer: overlayfs keeps what it looked up, so a file the
            // person replaced (an editor's save) between turns would show stale in the jail.
            let refresh = std::mem::take(&mut self.layer.refresh)
                && !self.layer.doors.is_empty()
                && Arc::strong_count(j) == 1
                && j.idle();
            if same_tmp && j.is_alive() && !refresh {
                return Ok(Some(j.clone()));
            }
            if refresh && same_tmp {
                self.layer.reuse = true;
            }
            // What the old jail's git wrote since the last command goes back before its
            // shadows go; what its commands wrote goes through the door before its layer goes.
            j.sync_git();
            self.slot = JailSlot::Unstarted;
            if !self.layer.reuse {
                self.finish_layer();
            }
        }
        if let JailSlot::Refused(why) = &self.slot {
            return Err(NotRun::Refused(why.clone()));
        }
        let draft = session.path(files::DRAFT);
        let state = session.state_root().unwrap_or_else(|| session.dir.clone());
        // A new jail gets new shadows of the repositories (the last one's are gone).
        let shadows = self.shadows.next(session.state_root().as_deref());
        let home = std::env::var_os("HOME").map(PathBuf::from);
        // tern's own config, wherever XDG_CONFIG_HOME puts it (the keys may be there).
        let tern_config = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|x| !x.is_empty())
            .map(|x| PathBuf::from(x).join("tern"))
            .or_else(|| home.as_ref().map(|h| h.join(".config/tern")));
        let layer_dirs = if std::mem::take(&mut self.layer.reuse) {
            // The old jail (and its mount) is gone first.
            self.slot = JailSlot::Unstarted;
            self.layer.dirs.dir.clone()
        } else {
            self.layer.next(rules, session)
        };
        let mut paths = JailPaths {
            workspace: &rules.workspace,
            workspace_writable: rules.mode == Mode::WorkspaceWrite,
            state_dir: &state,
            draft: Some(&draft),
            tmpdir: tmp,
            add_dirs: &rules.reach.add_dirs,
            read_dirs: &rules.reach.read_dirs,
            home: home.as_deref(),
            tern_config: tern_config.as_deref(),
            shadows: shadows.as_deref(),
            read_only: self.pins.files(),
            no_network: rules.no_network,
            layer: layer_dirs.as_deref(),
        };
        let spec = JailSpec::new(&paths);
        let started = match start(rules, &spec, groups) {
            Err(e) if !spec.layers.is_empty() && e.reason.contains(LAYER_STEP) => {
                // The kernel refused the layer: the bind walls, said once (DESIGN §10).
                let why = format!(
                    "the kernel refused the workspace's layer ({}); commands write the workspace directly, behind the bind walls (docs/sandbox.md)",
                    e.reason
                );
                self.layer.refused = Some(why.clone());
                self.layer.unsaid.push(why);
                // A layer that ran before (a refreshed jail) goes through its door first.
                self.layer.finish();
                paths.layer = None;
                let spec = JailSpec::new(&paths);
                start(rules, &spec, groups).map(|j| (j, spec))
            }
            other => other.map(|j| (j, spec)),
        };
        match started {
            Ok((j, spec)) => {
                let pinned = |at: &Path| self.pins.relative_to(at);
                self.layer.open_doors(
                    &spec,
                    session,
                    &state,
                    &pinned,
                    rules.disk_floor,
                    rules.record,
                );
                let j = Arc::new(j);
                self.slot = JailSlot::Running(j.clone());
                Ok(Some(j))
            }
            Err(e) => {
                let why = crate::sandbox::jail::refusal(rules.mode, &e);
                self.slot = JailSlot::Refused(why.clone());
                Err(NotRun::Refused(why))
            }
        }
    }

    /// Whether the kernel refused the jail (commands then run without it, the guard watching).
    pub(super) fn refused(&self) -> bool {
        matches!(self.slot, JailSlot::Refused(_))
    }

    /// Shows `files` read-only to commands from the next jail on.
    /// The kernel refused the layer (commands write the workspace behind the bind walls).
    pub(super) fn layer_refused(&self) -> bool {
        self.layer.refused.is_some()
    }

    /// The running jail has a layer and its doors.
    pub(super) fn has_doors(&self) -> bool {
        !self.layer.doors.is_empty()
    }

    pub(super) fn pin(&mut self, files: Vec<PathBuf>) {
        self.pins.add(files);
    }

    /// Shows a program's binary (this tern's) read-only to commands from the next jail on.
    pub(super) fn pin_binary(&mut self, exe: PathBuf) {
        self.pins.1.push(exe.clone());
        self.pins.add(vec![exe]);
    }

    /// The runtime ends: the last word of git's data files, then the jail (and all it left
    /// running) goes, then the door's last pass, then its shadows and layer. Whether a jail was
    /// running.
    pub(super) fn end(&mut self) -> bool {
        let JailSlot::Running(j) = std::mem::take(&mut self.slot) else {
            return false;
        };
        j.sync_git();
        drop(j);
        self.finish_layer();
        self.shadows.remove();
        true
    }

    /// The doors' pass after a command (None: no layer), with what is to be said once.
    pub(super) fn pass(&mut self) -> Option<Report> {
        let unsaid = std::mem::take(&mut self.layer.unsaid);
        if self.layer.doors.is_empty() && unsaid.is_empty() {
            return None;
        }
        let mut r = Report::default();
        for d in &mut self.layer.doors {
            r.merge(d.pass());
        }
        r.said = unsaid;
        Some(r)
    }

    /// The doors' pass after a hook ran in the jail: applied and kept aside as always; what is
    /// to be said waits for the next command's pass.
    pub(super) fn pass_quietly(&mut self) {
        for d in &mut self.layer.doors {
            let r = d.pass();
            self.layer.unsaid.extend(
                r.failed
                    .into_iter()
                    .map(|f| format!("not applied yet: {f}")),
            );
        }
    }

    /// The listed files the doors applied since the turn began (each once). A turn ends here:
    /// the next command may refresh the jail's view.
    pub(super) fn take_listed(&mut self) -> Vec<PathBuf> {
        self.layer.refresh = true;
        self.layer
            .doors
            .iter_mut()
            .flat_map(Door::take_listed)
            .collect()
    }

    /// The layers' size in bytes and entries (None: no layer).
    pub(super) fn layer_size(&self) -> Option<(u64, u64)> {
        (!self.layer.doors.is_empty()).then(|| {
            self.layer
                .doors
                .iter()
                .map(Door::size)
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
        })
    }

    /// Each layer's (upper folder, the folder its door writes).
    pub(super) fn layer_pairs(&self) -> Vec<(PathBuf, PathBuf)> {
        self.layer
            .doors
            .iter()
            .map(|d| (d.upper().to_path_buf(), d.root().to_path_buf()))
            .collect()
    }

    /// The layer's folder (the disk and inode floors watch its file system).
    pub(super) fn layer_dir(&self) -> Option<&Path> {
        self.layer.dirs.dir.as_deref()
    }

    /// The last pass of the old layers' doors (its jail is gone), then the layers go.
    fn finish_layer(&mut self) {
        self.layer.finish();
    }
}

/// Starts the jail of `spec` (its init is [`Rules::jail_exe`], else this process's binary).
fn start(rules: &Rules, spec: &JailSpec, groups: &Arc<ProcessGroups>) -> Result<Jail, JailError> {
    // Debug builds only: a test switch that makes the kernel's refusal happen here.
    #[cfg(debug_assertions)]
    if std::env::var_os(crate::sandbox::jail::FAKE_REFUSAL_ENV).is_some() {
        return Err(JailError {
            step: "user namespace".into(),
            reason: format!(
                "Operation not permitted ({} is set, a test switch)",
                crate::sandbox::jail::FAKE_REFUSAL_ENV
            ),
        });
    }
    let exe = rules
        .jail_exe
        .clone()
        .unwrap_or_else(|| PathBuf::from("/proc/self/exe"));
    Jail::start(&exe, spec, Some(groups))
}

/// Workspace files shown read-only to commands (the scripts hooks and MCP servers run, this
/// tern's binary), each once, in the order first pinned.
#[derive(Debug, Default)]
struct Pins(Vec<PathBuf>, Vec<PathBuf>);

impl LayerRoom {
    /// The last pass of each door (its jail is gone), then the layers go. What they held back
    /// is kept aside or was said; what they could not apply is said next.
    fn finish(&mut self) {
        for mut d in std::mem::take(&mut self.doors) {
            let r = d.finish();
            self.unsaid.extend(r.failed.iter().map(|f| {
                format!("a change of the last jail could not be applied and is lost: {f}")
            }));
        }
        self.dirs.remove();
    }

    /// The doors of a jail's layers, made when the layers are new (a refreshed jail over the
    /// same layers keeps its doors and what they have seen).
    fn open_doors(
        &mut self,
        spec: &JailSpec,
        session: &Session,
        state: &Path,
        pinned: &dyn Fn(&Path) -> Vec<PathBuf>,
        floor: crate::policy::DiskFloor,
        record: Option<u64>,
    ) {
        if !self.doors.is_empty() {
            return;
        }
        self.doors = spec
            .layers
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let mut d = Door::new(&l.at, &l.upper, &session.dir, state, pinned(&l.at), floor);
                // An `--add-dir`'s changes are named by their full path.
                d.name_absolute(i > 0);
                // The workspace's door is the checkpoint (issue 42): what it applies is
                // recorded for undo, redo and diff.
                if i == 0
                    && let Some(max) = record
                {
                    d.record(crate::checkpoint::record::Recorder::new(&session.dir, max));
                }
                d
            })
            .collect();
    }

    /// The folder for the next jail's layer (`upper/` and `work/` made in it), in
    /// workspace-write unless the kernel refused layers. None: no layer.
    fn next(&mut self, rules: &Rules, session: &Session) -> Option<PathBuf> {
        if rules.mode != Mode::WorkspaceWrite || self.refused.is_some() || rules.reach.no_layer {
            return None;
        }
        self.dirs.remove();
        self.dirs.started = next_number();
        // The state folder first: on the workspace's file system (what a command writes is
        // counted where the door will write it), swept with tern's other folders, and hidden
        // in the jail (the state folder is read-only there, and overlayfs refuses to show a
        // layer through itself).
        let base = session
            .state_root()
            .map(|r| r.join("layers"))
            .filter(|b| crate::store::fsutil::ensure_dir(b).is_ok())
            .or_else(layer_base)?;
        // What a tern that ended without its door's last pass (killed) left in its layers goes
        // through a door now, before they are swept: nothing a command wrote is lost.
        self.unsaid
            .extend(recover(&base, rules.disk_floor, rules.record));
        sweep(&base);
        let d = base.join(folder_name(std::process::id(), self.dirs.started));
        // 0: the workspace's layer; 1…: each `--add-dir`'s.
        for i in 0..=rules.reach.add_dirs.len() {
            for sub in ["upper", "work"] {
                std::fs::create_dir_all(d.join(i.to_string()).join(sub)).ok()?;
            }
        }
        // Where its changes go, for a later tern to recover them if this one is killed.
        let state = session.state_root().unwrap_or_else(|| session.dir.clone());
        let origin = Origin {
            session: session.dir.clone(),
            state,
            roots: std::iter::once(&rules.workspace)
                .chain(&rules.reach.add_dirs)
                .map(|r| std::fs::canonicalize(r).unwrap_or_else(|_| r.clone()))
                .collect(),
        };
        std::fs::write(d.join(ORIGIN), serde_json::to_vec(&origin).ok()?).ok()?;
        // Debug builds only: a test switch that makes the kernel refuse the layer for real
        // (overlayfs wants its work folder on the upper folder's file system).
        #[cfg(debug_assertions)]
        if std::env::var_os(FAKE_NO_LAYER_ENV).is_some() {
            let elsewhere =
                PathBuf::from(format!("/dev/shm/tern-fake-work-{}", std::process::id()));
            let _ = std::fs::create_dir_all(&elsewhere);
            let work = d.join("0/work");
            let _ = std::fs::remove_dir(&work);
            let _ = std::os::unix::fs::symlink(&elsewhere, &work);
        }
        self.dirs.dir = Some(d.clone());
        Some(d)
    }
}

/// The file in a layer folder naming where its changes go (`Origin`).
const ORIGIN: &str = "origin.json";

/// Where a layer folder's changes go: the session (kept-aside changes), the state folder, and
/// each layer's folder (`0`: the workspace, then the `--add-dir`s).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Origin {
    session: PathBuf,
    state: PathBuf,
    roots: Vec<PathBuf>,
}

/// Passes the layers of tern processes that are gone through a door each (the person's changes
/// since their jail started win: a file changed after it is kept aside, never overwritten),
/// then leaves them to the sweep. Each is first renamed to this process's name, so two terns
/// starting at once never recover one twice. Returns what is worth saying.
fn recover(base: &Path, floor: crate::policy::DiskFloor, record: Option<u64>) -> Vec<String> {
    let mut said = Vec::new();
    let Ok(rd) = std::fs::read_dir(base) else {
        return said;
    };
    for (k, e) in rd.flatten().enumerate() {
        let Some(pid) = e.file_name().to_str().and_then(maker) else {
            continue;
        };
        if !gone(pid) {
            continue;
        }
        let mine = base.join(folder_name(
            std::process::id(),
            1_000_000 + u32::try_from(k).unwrap_or(0),
        ));
        if std::fs::rename(e.path(), &mine).is_err() {
            continue;
        }
        let Ok(text) = std::fs::read(mine.join(ORIGIN)) else {
            continue;
        };
        let Ok(origin) = serde_json::from_slice::<Origin>(&text) else {
            continue;
        };
        let started = std::fs::metadata(mine.join(ORIGIN))
            .and_then(|m| m.modified())
            .unwrap_or(std::time::UNIX_EPOCH);
        for (i, root) in origin.roots.iter().enumerate() {
            let upper = mine.join(i.to_string()).join("upper");
            if !upper.is_dir() {
                continue;
            }
            let mut d = Door::new(
                root,
                &upper,
                &origin.session,
                &origin.state,
                Vec::new(),
                floor,
            );
            d.name_absolute(i > 0);
            d.looked_at(started);
            // Recorded as the door it finishes would have: the session's turn now.
            if i == 0
                && let Some(max) = record
            {
                d.record(crate::checkpoint::record::Recorder::new(
                    &origin.session,
                    max,
                ));
            }
            let r = d.finish();
            if r.applied > 0 || !r.held.is_empty() || !r.failed.is_empty() {
                said.push(format!(
                    "an earlier tern (process {pid}) ended before applying its commands' last changes: {} applied now, {} held back{}",
                    r.applied,
                    r.held.len(),
                    if r.failed.is_empty() {
                        String::new()
                    } else {
                        format!(", not applied: {}", r.failed.join("; "))
                    }
                ));
            }
        }
        remove_tree(&mine);
    }
    said
}

/// Debug builds only: when set, the workspace's layer is set up so the kernel refuses it
/// (its work folder on another file system), so the fallback to the bind walls can be tested.
#[cfg(debug_assertions)]
pub const FAKE_NO_LAYER_ENV: &str = "TERN_SANDBOX_FAKE_NO_LAYER";

/// Where layers live when the session has no state folder: a folder of the person's own on a
/// disk file system (what `npm install` writes can be large), hidden in the jail (the home
/// folder and `/var/tmp` are covered there): `$XDG_STATE_HOME/tern/layers`, else
/// `~/.local/state/tern/layers`, else `/var/tmp/tern-layers-<uid>`; made mode 0700, and one
/// that exists must be this user's alone.
fn layer_base() -> Option<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    // SAFETY: getuid(2) cannot fail.
    let uid = unsafe { libc::getuid() };
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let candidates = [
        std::env::var_os("XDG_STATE_HOME")
            .filter(|d| !d.is_empty())
            .map(|d| PathBuf::from(d).join("tern/layers")),
        home.map(|h| h.join(".local/state/tern/layers")),
        Some(PathBuf::from(format!("/var/tmp/tern-layers-{uid}"))),
    ];
    candidates.into_iter().flatten().find(|d| {
        if let Some(p) = d.parent() {
            let _ = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(p);
        }
        let _ = std::fs::DirBuilder::new().mode(0o700).create(d);
        std::fs::symlink_metadata(d)
            .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0)
    })
}

impl Pins {
    /// The pinned files inside `root`, relative to it, and the folders holding them (not the
    /// root itself): the door lists a change there (a module beside a server's script is code
    /// the server runs as well).
    fn relative_to(&self, root: &Path) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = Vec::new();
        for f in &self.0 {
            let Ok(rel) = f.strip_prefix(root) else {
                continue;
            };
            // A program's own binary (this tern's) is shown read-only, its build folder not
            // named: it is nobody's script.
            let parent = rel
                .parent()
                .filter(|p| !p.as_os_str().is_empty() && !self.1.contains(f));
            for p in [Some(rel), parent].into_iter().flatten() {
                if !v.iter().any(|x| x == p) {
                    v.push(p.to_path_buf());
                }
            }
        }
        v
    }

    fn add(&mut self, files: Vec<PathBuf>) {
        for f in files {
            if !self.0.contains(&f) {
                self.0.push(f);
            }
        }
    }

    fn files(&self) -> &[PathBuf] {
        &self.0
    }
}

/// Where a runtime's jails write their repositories' shadows: `<base>/<pid>-<n>`, `n` counting
/// the jails of this runtime, the base a memory file system of the person's own
/// ([`shadow_base`]) or else `<state folder>/jail`.
#[derive(Debug, Default)]
struct Shadows {
    /// The number of the last folder made ([`next_number`]).
    started: u32,
    /// The running jail's folder.
    dir: Option<PathBuf>,
}

impl Shadows {
    /// The folder for the next jail's shadows (made now; the last jail's removed first, and
    /// those of tern processes that are gone swept). None: no folder could be made (no memory
    /// file system of the person's and no state folder).
    fn next(&mut self, state_root: Option<&Path>) -> Option<PathBuf> {
        self.remove();
        self.started = next_number();
        let base = shadow_base().or_else(|| Some(state_root?.join("jail")))?;
        sweep(&base);
        let d = base.join(folder_name(std::process::id(), self.started));
        crate::store::fsutil::ensure_dir(&d).ok()?;
        self.dir = Some(d.clone());
        Some(d)
    }

    /// Removes the running jail's shadows (or layers).
    fn remove(&mut self) {
        if let Some(d) = self.dir.take() {
            remove_tree(&d);
        }
    }
}

/// The next folder number of this process: one count for every keeper (the commands' jail
/// and each MCP server's), so two keepers never share a folder.
fn next_number() -> u32 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The shadow folder of the `n`th jail of process `pid` (pure).
fn folder_name(pid: u32, n: u32) -> String {
    format!("{pid}-{n}")
}

/// The process a shadow folder's name says made it (pure; None: not a shadow folder's name).
fn maker(name: &str) -> Option<i32> {
    let (pid, n) = name.split_once('-')?;
    n.parse::<u32>().ok()?;
    pid.parse::<i32>().ok().filter(|p| *p > 0)
}

/// A folder for the repositories' shadows on a memory file system, the person's alone:
/// `$XDG_RUNTIME_DIR/tern-shadows`, else `/dev/shm/tern-shadows-<uid>` (made mode 0700; one
/// that exists must be a folder of this user's that nobody else can enter). A shadow is a few
/// small files made at every jail start and looked at after every command: memory makes that
/// cheap. None: there is none (the state folder is used).
fn shadow_base() -> Option<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    // SAFETY: getuid(2) cannot fail.
    let uid = unsafe { libc::getuid() };
    let candidates = [
        std::env::var_os("XDG_RUNTIME_DIR")
            .filter(|d| !d.is_empty())
            .map(|d| PathBuf::from(d).join("tern-shadows")),
        Some(PathBuf::from(format!("/dev/shm/tern-shadows-{uid}"))),
    ];
    candidates.into_iter().flatten().find(|d| {
        let _ = std::fs::DirBuilder::new().mode(0o700).create(d);
        std::fs::symlink_metadata(d)
            .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0)
    })
}

/// Removes the folder `d` and all in it, first opening up the folders that cannot be listed
/// (overlayfs leaves its `work/work` with mode 000, which only root could remove as it is).
/// Links are not followed.
fn remove_tree(d: &Path) {
    use std::os::unix::fs::PermissionsExt;
    fn open_up(p: &Path) {
        let Ok(m) = std::fs::symlink_metadata(p) else {
            return;
        };
        if !m.is_dir() {
            return;
        }
        if m.permissions().mode() & 0o700 != 0o700 {
            let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700));
        }
        for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
            open_up(&e.path());
        }
    }
    open_up(d);
    let _ = std::fs::remove_dir_all(d);
}

/// Whether process `pid` is gone (kill(2) with signal 0 answers ESRCH).
fn gone(pid: i32) -> bool {
    // SAFETY: kill(2) with signal 0 only asks whether the process exists.
    let refused = unsafe { libc::kill(pid, 0) } != 0;
    refused && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Removes the shadow folders under `base` whose process is gone (a tern killed before it
/// could remove its own).
fn sweep(base: &Path) {
    let Ok(rd) = std::fs::read_dir(base) else {
        return;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(maker) else {
            continue;
        };
        if gone(pid) {
            remove_tree(&e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_keep_each_file_once_in_the_order_first_pinned() {
        let mut p = Pins::default();
        p.add(vec!["/w/a".into(), "/w/b".into()]);
        p.add(vec!["/w/b".into(), "/w/c".into(), "/w/a".into()]);
        assert_eq!(
            p.files(),
            [PathBuf::from("/w/a"), "/w/b".into(), "/w/c".into()]
        );
    }

    #[test]
    fn pinned_files_name_their_folders_but_never_the_root() {
        let mut p = Pins::default();
        p.add(vec![
            "/w/tools/mcp/server.py".into(),
            "/w/hook.sh".into(),
            "/elsewhere/x".into(),
        ]);
        assert_eq!(
            p.relative_to(Path::new("/w")),
            [
                PathBuf::from("tools/mcp/server.py"),
                "tools/mcp".into(),
                "hook.sh".into()
            ]
        );
    }

    #[test]
    fn a_shadow_folder_names_its_maker_and_nothing_else_is_swept() {
        assert_eq!(folder_name(412, 3), "412-3");
        assert_eq!(maker(&folder_name(412, 3)), Some(412));
        for not_ours in ["412", "412-x", "-1-2", "0-1", "abc-1", "", "412-3-4"] {
            assert_eq!(maker(not_ours), None, "{not_ours}");
        }
    }

    #[test]
    fn each_jail_gets_a_new_folder_and_the_last_one_goes() {
        let d = tempfile::tempdir().unwrap();
        let mut s = Shadows::default();
        // The base may be a memory file system of the person's; the state folder otherwise.
        let first = s.next(Some(d.path())).unwrap();
        assert!(first.is_dir());
        let second = s.next(Some(d.path())).unwrap();
        assert!(second.is_dir() && !first.exists(), "{first:?} {second:?}");
        assert!(second.ends_with(folder_name(std::process::id(), s.started)));
        assert_ne!(first, second);
        s.remove();
        assert!(!second.exists());
    }
}
