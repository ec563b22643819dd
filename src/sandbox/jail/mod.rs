//! The jail (issue 17, DESIGN §10): the model's commands run in Linux namespaces of their own,
//! set up by a small init process that tern starts once per runtime and asks to run each
//! command. tern itself is never confined.
//!
//! **Layers**, each set up before any command runs:
//! - a **user namespace** mapping only the person's own uid and gid, so nothing inside holds a
//!   capability on the host (this also ends `TIOCSTI` into other terminals and `ptrace` of
//!   outside processes); commands additionally lose every capability inside it;
//! - a **PID namespace** with its own `/proc`: a command sees only the jail's processes (no other
//!   process's environment), and when the init exits the kernel kills everything in it, so
//!   nothing outlives the runtime;
//! - a **mount namespace** (see `mounts.rs`): the host tree read-only; writable only the
//!   workspace (workspace-write), `--add-dir` folders, the private `TMPDIR` and
//!   `$PLAN_DRAFT_FILE`; read-only inside the workspace the state folder and git's `hooks` and
//!   `config`; private `/tmp`, `/var/tmp`, `/run`, `/dev/shm` and a minimal `/dev`, so host
//!   sockets (tmux, ssh-agent, D-Bus, Docker) are not there; the home folder hidden but for an
//!   allow-list of what tools read ([`HOME_READABLE`]), or read-only when a writable root holds
//!   it; credential paths ([`CREDENTIALS`]) hidden wherever they would still show;
//! - an **IPC namespace** (no System V shared memory of the host's);
//! - under `--no-network`, a **network namespace** with only loopback: no socket family reaches
//!   the host;
//! - a **seccomp** filter for what namespaces leave open (`seccomp.rs`);
//! - and Landlock, as before, applied to each command as a second layer.
//!
//! **Background jobs** live on: the init reaps them, and a later command of the same runtime
//! reaches them (a dev server and its `curl`). They die with the jail.
//!
//! **How tern talks to it**: `wire.rs` (a `SOCK_SEQPACKET` pair). The init's end of the control
//! socket is its only tie to tern: when tern exits, however it exits, the socket closes, the init
//! leaves, and the kernel kills the rest of the namespace.
//!
//! Linux only; needs unprivileged user namespaces (or root) and Linux 5.12's mount API. Where
//! the kernel refuses, [`Jail::start`] fails with [`JailError`], one line naming why; the
//! caller refuses the command and names the choices, never running it with fewer layers.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub(crate) mod git;
pub mod init;
pub(crate) mod mounts;
mod seccomp;
pub(crate) mod wire;

use wire::{Reader, Received, Writer};

/// Debug builds only: when set, a sandboxed runtime acts as if the kernel refused the jail's
/// user namespace, so the refusal can be tested on a machine that has them.
pub const FAKE_REFUSAL_ENV: &str = "TERN_SANDBOX_FAKE_NO_USERNS";

/// The hidden first argument that makes `tern` the jail's process ([`init::main`]).
pub const JAIL_ARG: &str = "__jail";

/// Entries of the home folder a command may read: toolchains' binaries and package caches,
/// git's identity and ignore files (issue 29: caches and binaries, never a whole tool folder,
/// whose config and credential files — `~/.cargo/credentials.toml`, `~/.m2/settings.xml`,
/// `~/.config/git/credentials` — stay hidden). The rest of the home folder is hidden. Extend with
/// `--read-dir` (read) or `--add-dir` (write).
pub const HOME_READABLE: [&str; 41] = [
    ".cargo/bin",
    ".cargo/env",
    ".cargo/registry",
    ".cargo/git",
    ".rustup",
    ".gitconfig",
    ".config/git/config",
    ".config/git/ignore",
    ".config/git/attributes",
    ".pyenv",
    ".local/bin",
    ".local/lib",
    ".local/share/uv",
    ".cache/uv",
    ".cache/pip",
    ".nvm",
    ".npm/_cacache",
    ".volta",
    ".bun/bin",
    ".bun/install/cache",
    ".deno",
    "go/bin",
    "go/pkg",
    ".m2/repository",
    ".gradle/caches",
    ".gradle/wrapper",
    ".sdkman/candidates",
    ".rbenv",
    ".ghcup/bin",
    ".ghcup/ghc",
    ".cabal/bin",
    ".cabal/packages",
    ".cabal/store",
    ".stack/programs",
    ".stack/snapshots",
    ".opam",
    ".elan",
    // Agent Skills (issue 45): the model `cat`s a SKILL.md the catalog names. Only the skills
    // folders: `~/.codex/auth.json` and `~/.claude/.credentials.json` stay hidden.
    ".agents/skills",
    ".claude/skills",
    ".codex/skills",
    ".config/tern/skills",
];

/// Credential paths in the home folder, hidden from commands even where the home folder is
/// visible (a workspace that is the home folder): folders show empty, files show empty.
pub const CREDENTIALS: [&str; 36] = [
    ".ssh",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".config/tern",
    ".kube",
    ".docker",
    ".gnupg",
    ".password-store",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".bashrc",
    ".bash_profile",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".env",
    ".bash_history",
    ".zsh_history",
    ".python_history",
    ".psql_history",
    ".mysql_history",
    ".node_repl_history",
    ".lesshst",
    ".config/hub",
    ".local/share/keyrings",
    ".cargo/credentials.toml",
    ".cargo/credentials",
    ".config/git/credentials",
    ".m2/settings.xml",
    ".m2/settings-security.xml",
    ".gradle/gradle.properties",
    ".cabal/config",
];

/// What the jail shows and hides: absolute, canonical paths (see `mounts.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JailSpec {
    /// `--no-network`: an empty network namespace.
    pub no_network: bool,
    /// Folders commands may write (the workspace in workspace-write, `--add-dir`s, `TMPDIR`).
    pub writable: Vec<PathBuf>,
    /// Single files commands may write (`$PLAN_DRAFT_FILE`); kept current when tern replaces
    /// them.
    pub writable_files: Vec<PathBuf>,
    /// Shown read-only even inside a writable folder: the state folder, git's `.git` files and
    /// a `core.hooksPath` in the workspace.
    pub read_only: Vec<PathBuf>,
    /// Shown read-only under the covered home folder: [`HOME_READABLE`] entries that exist and
    /// `--read-dir`s.
    pub readable: Vec<PathBuf>,
    /// The home folder, covered unless a writable folder holds it.
    pub home: Option<PathBuf>,
    /// Hidden wherever visible: [`CREDENTIALS`].
    pub hidden: Vec<PathBuf>,
    /// The repositories' shadows (see `git.rs`): each real git dir the jail shows, and the
    /// copy tern made of it, shown in its place.
    pub git_shadows: Vec<(PathBuf, PathBuf)>,
    /// git's data folders of those repositories, bound through from the real ones.
    pub git_data: Vec<PathBuf>,
    /// Every git dir with a shadow, for the copy-back of its data files. Kept by tern; not
    /// sent to the jail.
    pub git_dirs: Vec<PathBuf>,
    /// The layers (issue 42): the workspace's first, then each `--add-dir`'s. Commands see
    /// those folders through them and write their upper folders; tern's door applies the
    /// changes. Empty: the folders are bound writable (the bind walls: shadows of git's top
    /// levels).
    pub layers: Vec<Layer>,
}

/// Where a workspace's layer lives (all absolute; `upper` and `work` on one file system,
/// outside the workspace and hidden from commands).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// The workspace.
    pub at: PathBuf,
    /// The upper folder: what commands wrote.
    pub upper: PathBuf,
    /// overlayfs's work folder.
    pub work: PathBuf,
}

/// What the jail's own paths come from.
#[derive(Debug, Clone)]
pub struct JailPaths<'a> {
    /// The workspace (writable when `workspace_writable`).
    pub workspace: &'a Path,
    /// Whether the mode is workspace-write.
    pub workspace_writable: bool,
    /// The state folder (`.tern` or `--state-dir`).
    pub state_dir: &'a Path,
    /// `$PLAN_DRAFT_FILE`.
    pub draft: Option<&'a Path>,
    /// The private `TMPDIR`.
    pub tmpdir: Option<&'a Path>,
    /// `--add-dir` folders (writable in workspace-write).
    pub add_dirs: &'a [PathBuf],
    /// `--read-dir` folders (readable).
    pub read_dirs: &'a [PathBuf],
    /// The home folder (`$HOME`).
    pub home: Option<&'a Path>,
    /// tern's own configuration folder (`$XDG_CONFIG_HOME/tern`, which may lie outside the
    /// home folder): hidden wherever it shows.
    pub tern_config: Option<&'a Path>,
    /// Where the repositories' shadows are written (a folder of the state folder's, for this
    /// jail alone); None: no shadows, the repositories are shown read-only.
    pub shadows: Option<&'a Path>,
    /// More files shown read-only (the workspace scripts the person's hooks run).
    pub read_only: &'a [PathBuf],
    /// `--no-network`.
    pub no_network: bool,
    /// The layers' folder in workspace-write (tern made `N/upper` and `N/work` in it: 0 for
    /// the workspace, 1… for the `--add-dir`s in order). None: the folders are bound writable
    /// behind the bind walls.
    pub layer: Option<&'a Path>,
}

impl JailSpec {
    /// The spec for `p`: every path made canonical (one that does not exist is left out, but for
    /// git's hooks folder, made empty so nothing can be planted there), git's folders found from
    /// the workspace's `.git` (a folder, or a file naming one, and its common folder).
    pub fn new(p: &JailPaths<'_>) -> JailSpec {
        let canon = |p: &Path| std::fs::canonicalize(p).ok();
        let mut s = JailSpec {
            no_network: p.no_network,
            ..JailSpec::default()
        };
        let workspace = canon(p.workspace);
        let layer_at = |i: usize, at: &Path| -> Option<Layer> {
            let base = p.layer?.join(i.to_string());
            Some(Layer {
                at: at.to_path_buf(),
                upper: canon(&base.join("upper"))?,
                work: canon(&base.join("work"))?,
            })
        };
        if p.workspace_writable {
            let roots = workspace
                .iter()
                .cloned()
                .chain(p.add_dirs.iter().filter_map(|d| canon(d)));
            for (i, root) in roots.enumerate() {
                match layer_at(i, &root) {
                    Some(l) => s.layers.push(l),
                    None => s.writable.push(root),
                }
            }
        }
        // The workspace's own layer (the first, when it has one).
        let ws_layered = workspace
            .as_ref()
            .is_some_and(|w| s.layers.first().is_some_and(|l| l.at == *w));
        s.writable.extend(p.tmpdir.and_then(canon));
        s.writable_files.extend(p.draft.and_then(canon));
        s.read_only.extend(canon(p.state_dir));
        s.read_only
            .extend(p.read_only.iter().filter_map(|f| canon(f)));
        if let Some(ws) = &workspace {
            s.add_git(ws, p.workspace_writable, p.shadows, ws_layered);
        }
        if let Some(home) = p.home.and_then(canon) {
            for e in HOME_READABLE {
                // Canonical, so a link to elsewhere shows its target (read-only).
                if let Some(c) = canon(&home.join(e)) {
                    s.readable.push(c);
                }
            }
            for e in CREDENTIALS {
                let c = home.join(e);
                if std::fs::symlink_metadata(&c).is_ok() {
                    s.hidden.push(c);
                }
            }
            // A writable root that holds the home folder (a workspace of `/home`): the home
            // folder itself is shown read-only in it, so no command creates a start-up file,
            // `~/.ssh/authorized_keys` or `~/.local/bin/git`, existing or not (a workspace
            // that *is* the home folder is refused before this: `policy::wide_root`).
            if s.writable_roots()
                .any(|w| home.starts_with(w) && *w != home)
            {
                s.read_only.push(home.clone());
            }
            s.home = Some(home);
        }
        s.readable
            .extend(p.read_dirs.iter().filter_map(|d| canon(d)));
        if let Some(c) = p.tern_config.and_then(canon)
            && !s.hidden.contains(&c)
        {
            s.hidden.push(c);
        }
        s
    }

    /// The folders commands may write: [`JailSpec::writable`] and the workspace's layer.
    pub fn writable_roots(&self) -> impl Iterator<Item = &PathBuf> {
        self.writable
            .iter()
            .chain(self.layers.iter().map(|l| &l.at))
    }

    /// The repositories of `ws` (see `git.rs`): in workspace-write, each shown as a shadow
    /// written under `shadows`, its data folders bound through; otherwise (or when a shadow
    /// cannot be written) shown read-only, so git reads them and writes nothing.
    ///
    /// With a layer, the repositories inside the workspace need neither: the door applies only
    /// git's data from the layer (DESIGN §10); those outside it (a linked worktree's main
    /// repository) still get their shadows.
    fn add_git(&mut self, ws: &Path, writable: bool, shadows: Option<&Path>, layer: bool) {
        let plan = git::plan(ws);
        let walled = |p: &PathBuf| !layer || !p.starts_with(ws);
        self.read_only
            .extend(plan.read_only.iter().filter(|p| walled(p)).cloned());
        for (i, root) in plan.roots.iter().enumerate() {
            if !walled(root) {
                continue;
            }
            let inside: Vec<PathBuf> = plan
                .git_dirs
                .iter()
                .filter(|g| g.starts_with(root))
                .cloned()
                .collect();
            let made = match (writable, shadows) {
                (true, Some(dir)) => {
                    let copy = dir.join(format!("git-{i}"));
                    git::make(root, &copy, &inside).map(|()| copy).ok()
                }
                _ => None,
            };
            let Some(copy) = made else {
                // Read-only: inside the workspace the copy of it already is, outside it (a
                // linked worktree's main repository) it is shown so git can read it.
                self.readable.push(root.clone());
                self.read_only.push(root.clone());
                continue;
            };
            self.git_shadows.push((root.clone(), copy));
            for g in &inside {
                for d in git::DATA_DIRS {
                    let p = g.join(d);
                    if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
                        self.git_data.push(p);
                    }
                }
            }
            self.git_dirs.extend(inside);
        }
    }

    fn encode(&self, w: &mut Writer) {
        w.u8(u8::from(self.no_network))
            .paths(&self.writable)
            .paths(&self.writable_files)
            .paths(&self.read_only)
            .paths(&self.readable)
            .paths(&self.home.iter().cloned().collect::<Vec<_>>())
            .paths(&self.hidden);
        let (real, copies): (Vec<PathBuf>, Vec<PathBuf>) = self.git_shadows.iter().cloned().unzip();
        w.paths(&real).paths(&copies).paths(&self.git_data);
        let layers: Vec<PathBuf> = self
            .layers
            .iter()
            .flat_map(|l| [l.at.clone(), l.upper.clone(), l.work.clone()])
            .collect();
        w.paths(&layers);
    }

    fn decode(r: &mut Reader<'_>) -> io::Result<JailSpec> {
        Ok(JailSpec {
            no_network: r.u8()? != 0,
            writable: r.paths()?,
            writable_files: r.paths()?,
            read_only: r.paths()?,
            readable: r.paths()?,
            home: r.paths()?.into_iter().next(),
            hidden: r.paths()?,
            git_shadows: {
                let real = r.paths()?;
                let copies = r.paths()?;
                real.into_iter().zip(copies).collect()
            },
            git_data: r.paths()?,
            git_dirs: Vec::new(),
            layers: r
                .paths()?
                .chunks_exact(3)
                .map(|c| Layer {
                    at: c[0].clone(),
                    upper: c[1].clone(),
                    work: c[2].clone(),
                })
                .collect(),
        })
    }
}

/// The layers a running jail has, as `session_start`, `meta.json` and `tern sandbox check`
/// report them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layers {
    /// A user namespace (no host capability inside).
    pub user_ns: bool,
    /// A PID namespace with its own `/proc`.
    pub pid_ns: bool,
    /// A mount namespace (read-only host tree, private `/tmp`, hidden home).
    pub mount_ns: bool,
    /// An IPC namespace.
    pub ipc_ns: bool,
    /// An empty network namespace (`--no-network`).
    pub net_ns: bool,
    /// The seccomp filter.
    pub seccomp: bool,
    /// Paths left out and why, one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Why the jail could not start: one line naming the step and the kernel's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JailError {
    /// The step, e.g. "user namespace".
    pub step: String,
    /// The error.
    pub reason: String,
}

impl std::fmt::Display for JailError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.step, self.reason)
    }
}

/// A runtime's jail: not started yet, running (shared with sub-agents of the same spec), or
/// refused by the kernel (every command is then refused with the reason).
#[derive(Debug, Default)]
pub enum JailSlot {
    /// No command ran yet.
    #[default]
    Unstarted,
    /// Running.
    Running(std::sync::Arc<Jail>),
    /// The kernel refused it: the one-line reason.
    Refused(String),
}

/// What commands may reach beyond the mode's defaults, and whether the jail is used (the
/// person's flags: `--add-dir`, `--read-dir`, `--env`, `--no-jail`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reach {
    /// `--no-jail`: Landlock alone in the sandboxed modes (the holes are in the README).
    pub no_jail: bool,
    /// `--no-layer`: in workspace-write, commands write the workspace directly (behind the
    /// bind walls) instead of a layer tern applies through its door (DESIGN §10).
    pub no_layer: bool,
    /// `--add-dir`: more writable folders (workspace-write), absolute.
    pub add_dirs: Vec<PathBuf>,
    /// `--read-dir`: more readable folders under the hidden home folder, absolute.
    pub read_dirs: Vec<PathBuf>,
    /// `--env NAME`: more variables passed to commands.
    pub pass_env: Vec<String>,
}

/// The one line a sandboxed mode gives when its jail cannot start: what the kernel said and the
/// two choices (never a silent downgrade).
pub fn refusal(mode: super::Mode, e: &JailError) -> String {
    format!(
        "sandbox {mode} runs commands in a jail of Linux namespaces and this machine refuses it ({e}); commands are refused, never run with fewer layers. Choose --no-jail (Landlock alone: commands can then read your home folder, reach host sockets such as tmux's and see other processes; docs/sandbox.md) or --sandbox danger-full-access"
    )
}

/// The descriptor a command finds the session's channel at (`crate::mcp::channel`): high,
/// so a script's own `exec 3>…` redirections leave it alone.
pub const CHANNEL_FD: RawFd = 63;

/// How long the jail may take to start before tern gives up on it.
const START_LIMIT: Duration = Duration::from_secs(10);

/// A running jail: its init's control socket and the outer process tern waits for.
#[derive(Debug)]
pub struct Jail {
    /// In the emergency exit's registry while the jail lives.
    _registered: Option<crate::procs::OwnedRegistration>,
    ctl: Mutex<OwnedFd>,
    outer: Mutex<Child>,
    pgid: i32,
    layers: Layers,
    spec: JailSpec,
    /// The copy-back state of the repositories' shadows.
    git_sync: Mutex<git::Sync>,
}

impl Jail {
    /// Starts a jail for `spec` by running `exe` (tern's own binary) with [`JAIL_ARG`], with an
    /// empty environment (nothing in the init's `/proc/1/environ`), in a process group of its
    /// own (so the emergency exit can kill it whole: [`Jail::pgid`]).
    ///
    /// Errors: [`JailError`] naming the step the kernel refused (user namespace, mount, …), or
    /// the process that could not start.
    pub fn start(
        exe: &Path,
        spec: &JailSpec,
        groups: Option<&std::sync::Arc<crate::procs::ProcessGroups>>,
    ) -> Result<Jail, JailError> {
        let fail = |step: &str, e: &dyn std::fmt::Display| JailError {
            step: step.into(),
            reason: e.to_string(),
        };
        let (mine, theirs) = wire::pair().map_err(|e| fail("control socket", &e))?;
        let theirs_fd = theirs.as_raw_fd();
        let mut cmd = std::process::Command::new(exe);
        cmd.arg(JAIL_ARG)
            .env_clear()
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        // SAFETY: dup2, fcntl and setsid are async-signal-safe system calls; nothing allocates.
        unsafe {
            cmd.pre_exec(move || {
                if theirs_fd == init::CONTROL_FD {
                    if libc::fcntl(theirs_fd, libc::F_SETFD, 0) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                } else if libc::dup2(theirs_fd, init::CONTROL_FD) < 0 {
                    return Err(io::Error::last_os_error());
                }
                if libc::setsid() < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| fail("starting the jail", &e))?;
        drop(theirs);
        let pgid = i32::try_from(child.id()).unwrap_or(i32::MAX);
        let mut w = Writer::default();
        spec.encode(&mut w);
        let jail_died = |mut child: Child| {
            // SAFETY: kill(2) of the group we just made; no memory involved.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
            let _ = child.wait();
        };
        if let Err(e) = wire::send(mine.as_raw_fd(), &w.0, &[]) {
            jail_died(child);
            return Err(fail("starting the jail", &e));
        }
        let answer = match poll_in(mine.as_raw_fd(), START_LIMIT) {
            Ok(true) => wire::recv(mine.as_raw_fd()),
            Ok(false) => Err(io::Error::other(format!(
                "no answer in {} s",
                START_LIMIT.as_secs()
            ))),
            Err(e) => Err(e),
        };
        let layers = match answer {
            Ok(Received::Message(m, _)) => match decode_ready(&m) {
                Ok(Ok(layers)) => layers,
                Ok(Err(e)) => {
                    jail_died(child);
                    return Err(e);
                }
                Err(e) => {
                    jail_died(child);
                    return Err(fail("starting the jail", &e));
                }
            },
            Ok(Received::Closed) => {
                let mut child = child;
                let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
                return Err(fail(
                    "starting the jail",
                    &format!("the jail process exited ({status})"),
                ));
            }
            Err(e) => {
                jail_died(child);
                return Err(fail("starting the jail", &e));
            }
        };
        let git_sync = Mutex::new(git::Sync::new(&spec.git_shadows, &spec.git_dirs));
        Ok(Jail {
            git_sync,
            _registered: groups.map(|g| crate::procs::ProcessGroups::register_owned(g, pgid)),
            ctl: Mutex::new(mine),
            outer: Mutex::new(child),
            pgid,
            layers,
            spec: spec.clone(),
        })
    }

    /// Whether the jail's processes are still there (the init could be killed from outside,
    /// e.g. by the OOM killer); a runtime starts a new jail when not.
    ///
    /// The control socket is asked first: a killed init's end closes as it exits, before the
    /// outer process outside the namespaces has seen it and left, so the outer process alone
    /// said "alive" for a moment and the next command met a closed socket (`EPIPE`).
    pub fn is_alive(&self) -> bool {
        {
            let ctl = self.ctl.lock().unwrap_or_else(|p| p.into_inner());
            let mut p = libc::pollfd {
                fd: ctl.as_raw_fd(),
                events: libc::POLLRDHUP,
                revents: 0,
            };
            // SAFETY: one valid pollfd, its count, no wait.
            let r = unsafe { libc::poll(&mut p, 1, 0) };
            if r > 0 && p.revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR) != 0 {
                return false;
            }
        }
        let mut outer = self.outer.lock().unwrap_or_else(|p| p.into_inner());
        matches!(outer.try_wait(), Ok(None))
    }

    /// Whether nothing runs in the jail but its init (no command, no background job): the
    /// init's children on the host, from `/proc/PID/task/PID/children` (every process of the
    /// jail descends from its init, orphans included). A jail whose processes cannot be listed
    /// counts as busy.
    pub fn idle(&self) -> bool {
        let children = |pid: u32| -> Option<Vec<u32>> {
            let s = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
            Some(
                s.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect(),
            )
        };
        let outer = {
            let o = self.outer.lock().unwrap_or_else(|p| p.into_inner());
            o.id()
        };
        let Some(init) = children(outer).and_then(|c| c.first().copied()) else {
            return false;
        };
        children(init).is_some_and(|c| c.is_empty())
    }

    /// Copies git's data files between each repository and its shadow (see `git.rs`), the
    /// side that changed winning; returns what is worth saying (an index kept back because it
    /// adds a submodule, a conflict). Called before and after each command and when the jail
    /// ends.
    pub fn sync_git(&self) -> Vec<String> {
        let mut s = self.git_sync.lock().unwrap_or_else(|p| p.into_inner());
        s.run()
    }

    /// The layers this jail has.
    pub fn layers(&self) -> &Layers {
        &self.layers
    }

    /// The spec it was started with (a sub-agent with an equal spec shares this jail).
    pub fn spec(&self) -> &JailSpec {
        &self.spec
    }

    /// The process group of the jail's processes on the host (kill it and everything inside
    /// dies).
    pub fn pgid(&self) -> i32 {
        self.pgid
    }

    /// Runs `s` in the jail: the init forks it in a session of its own, with no capability,
    /// `no_new_privs`, the Landlock ruleset `s.ruleset` and the seccomp filter, then execs it.
    ///
    /// Errors: the jail is gone (`EPIPE`), or the init could not start the program (its
    /// message).
    pub fn spawn(&self, s: &Spawn<'_>) -> io::Result<JailedChild> {
        let (mine, theirs) = wire::pair()?;
        let mut w = Writer::default();
        w.u8(b'X').os(s.program.as_os_str());
        w.u32(u32::try_from(s.args.len()).unwrap_or(u32::MAX));
        for a in s.args {
            w.os(a);
        }
        w.u32(u32::try_from(s.env.len()).unwrap_or(u32::MAX));
        for (k, v) in s.env {
            w.os(k).os(v);
        }
        w.os(s.cwd.as_os_str());
        w.paths(&s.draft.iter().map(|d| d.to_path_buf()).collect::<Vec<_>>());
        w.u8(u8::from(s.ruleset.is_some()));
        w.u8(u8::from(s.mcp.is_some()));
        w.u8(u8::from(s.stdin.is_some()));
        let mut fds = vec![theirs.as_raw_fd(), s.stdout, s.stderr];
        fds.extend(s.ruleset);
        fds.extend(s.mcp);
        fds.extend(s.stdin);
        let ctl = self.ctl.lock().unwrap_or_else(|p| p.into_inner());
        wire::send(ctl.as_raw_fd(), &w.0, &fds)?;
        drop(theirs);
        let reply = match wire::recv(ctl.as_raw_fd())? {
            Received::Message(m, _) => m,
            Received::Closed => return Err(io::Error::other("the jail is gone")),
        };
        let mut r = Reader(&reply);
        match r.u8()? {
            b'P' => Ok(JailedChild {
                sock: mine,
                pid: r.i32()?,
                status: None,
                gone: false,
            }),
            b'E' => Err(io::Error::other(
                String::from_utf8_lossy(&r.bytes()?).into_owned(),
            )),
            _ => Err(io::Error::other("a jail answer tern does not know")),
        }
    }
}

impl Drop for Jail {
    fn drop(&mut self) {
        // Closing the control socket makes the init leave, which kills the namespace; the kill
        // makes sure, and the wait reaps the outer process.
        // SAFETY: kill(2) of the jail's own group.
        unsafe {
            libc::kill(-self.pgid, libc::SIGKILL);
        }
        let mut outer = self.outer.lock().unwrap_or_else(|p| p.into_inner());
        let _ = outer.wait();
    }
}

/// One program for [`Jail::spawn`].
#[derive(Debug)]
pub struct Spawn<'a> {
    /// The program (absolute).
    pub program: &'a Path,
    /// Its arguments (without argv\[0\]).
    pub args: &'a [&'a OsStr],
    /// Its whole environment.
    pub env: &'a [(OsString, OsString)],
    /// Its working folder.
    pub cwd: &'a Path,
    /// The writable draft file to keep current.
    pub draft: Option<&'a Path>,
    /// A Landlock ruleset descriptor to restrict it with.
    pub ruleset: Option<RawFd>,
    /// Its stdout.
    pub stdout: RawFd,
    /// Its stderr.
    pub stderr: RawFd,
    /// Its stdin (None: `/dev/null`): an MCP server's requests (issue 42).
    pub stdin: Option<RawFd>,
    /// The session's MCP channel, given to it at [`crate::mcp::channel::FD`].
    pub mcp: Option<RawFd>,
}

/// A program running in the jail, as tern sees it: its exit comes as a message, and its process
/// group is signalled through the init.
#[derive(Debug)]
pub struct JailedChild {
    sock: OwnedFd,
    pid: i32,
    status: Option<ExitStatus>,
    gone: bool,
}

impl JailedChild {
    /// Its pid inside the jail (the leader of its process group there).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Its exit status once it exited (never blocks). A jail that died counts as SIGKILL.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        while self.status.is_none() && !self.gone {
            match poll_in(self.sock.as_raw_fd(), Duration::ZERO) {
                Ok(true) => {
                    self.read_one();
                }
                _ => break,
            }
        }
        self.status
    }

    fn read_one(&mut self) -> Option<bool> {
        match wire::recv(self.sock.as_raw_fd()) {
            Ok(Received::Message(m, _)) => {
                let mut r = Reader(&m);
                match r.u8() {
                    Ok(b'X') => {
                        self.status = r.i32().ok().map(ExitStatus::from_raw);
                        None
                    }
                    Ok(b'a') => r.u8().ok().map(|b| b != 0),
                    _ => None,
                }
            }
            Ok(Received::Closed) | Err(_) => {
                self.gone = true;
                if self.status.is_none() {
                    self.status = Some(ExitStatus::from_raw(libc::SIGKILL));
                }
                None
            }
        }
    }

    /// Sends `sig` to its process group (in the jail).
    pub fn signal_group(&self, sig: i32) {
        let mut w = Writer::default();
        w.u8(b'K').i32(sig);
        let _ = wire::send(self.sock.as_raw_fd(), &w.0, &[]);
    }

    /// True while any process of its group is alive in the jail (zombies are reaped by the init
    /// at once). A jail that does not answer within a second counts as alive.
    pub fn group_alive(&mut self) -> bool {
        if self.gone {
            return false;
        }
        let mut w = Writer::default();
        w.u8(b'A');
        if wire::send(self.sock.as_raw_fd(), &w.0, &[]).is_err() {
            return false;
        }
        loop {
            match poll_in(self.sock.as_raw_fd(), Duration::from_secs(1)) {
                Ok(true) => {
                    if let Some(alive) = self.read_one() {
                        return alive;
                    }
                    if self.gone {
                        return false;
                    }
                }
                _ => return true,
            }
        }
    }
}

/// Waits up to `limit` for `fd` to be readable (or closed).
fn poll_in(fd: RawFd, limit: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(limit.as_millis()).unwrap_or(libc::c_int::MAX);
    loop {
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r >= 0 {
            return Ok(r > 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn decode_ready(m: &[u8]) -> io::Result<Result<Layers, JailError>> {
    let mut r = Reader(m);
    match r.u8()? {
        b'R' => {
            let bits = r.u8()?;
            let n = r.u32()? as usize;
            let mut notes = Vec::with_capacity(n.min(64));
            for _ in 0..n {
                notes.push(String::from_utf8_lossy(&r.bytes()?).into_owned());
            }
            Ok(Ok(Layers {
                user_ns: bits & 1 != 0,
                pid_ns: bits & 2 != 0,
                mount_ns: bits & 4 != 0,
                ipc_ns: bits & 8 != 0,
                net_ns: bits & 16 != 0,
                seccomp: bits & 32 != 0,
                notes,
            }))
        }
        b'F' => Ok(Err(JailError {
            step: String::from_utf8_lossy(&r.bytes()?).into_owned(),
            reason: String::from_utf8_lossy(&r.bytes()?).into_owned(),
        })),
        _ => Err(io::Error::other("a jail answer tern does not know")),
    }
}
