//! The sandbox of the bash tool (issue 10, DESIGN §10): what a command the model runs may write.
//!
//! **Modes** (Codex CLI's names, so habits carry over), chosen with `--sandbox` / `TERN_SANDBOX`:
//! - [`Mode::ReadOnly`]: commands read anything and write only `/dev/null`, a private temp folder
//!   (`TMPDIR`, emptied after each call; see [`TempFolder`]) and `$PLAN_DRAFT_FILE`;
//! - [`Mode::WorkspaceWrite`] (the default): the same plus the whole workspace tree;
//! - [`Mode::DangerFullAccess`]: no filesystem sandbox (tern's behaviour before issue 10).
//!
//! `--no-network` additionally blocks TCP `connect` and `bind` in every mode (Landlock network
//! rules, ABI 4 and later).
//!
//! **How.** On Linux, [`prepare`] builds a Landlock ruleset in tern (the parent) for each call;
//! the bash tool's `pre_exec` hook, in the forked child just before `exec("bash")`, sets
//! `no_new_privs` and calls `landlock_restrict_self` on that ruleset's file descriptor: two raw
//! system calls, nothing else (see [`Prepared`] for why this is async-signal-safe). tern itself is
//! never restricted. Landlock only restricts the access rights a ruleset *handles*: tern handles
//! the write-type rights only, so reading and executing stay allowed everywhere.
//!
//! **No Landlock** (a kernel without it, or another OS): a sandboxed mode, or `--no-network` on a
//! kernel without network rules, makes [`prepare`] fail with one line naming
//! `--sandbox danger-full-access`. It never runs a command unsandboxed by itself.
//!
//! **What Landlock does not restrict** (so neither does this sandbox): reading any file the user
//! can read (secrets in `~/.ssh` included); UDP and other non-TCP sockets (DNS works under
//! `--no-network`); pathname and abstract UNIX sockets (so `docker.sock`, `ssh-agent`, D-Bus
//! stay reachable); signals to other processes of the user (`kill`); `ioctl` on devices and
//! files (`chattr`); changing metadata with `chmod`, `chown`, `utime` (`touch` of an existing
//! file) and extended attributes on files outside the writable trees (ABI ≤ 7 has no rights
//! for them); processes started before or outside the sandbox (a daemon the command talks to
//! writes as itself). It does stop `mount` and `ptrace` of processes outside the sandbox, and a
//! hard link or rename that would carry a file into more rights. With `no_new_privs`, set-uid
//! programs (`sudo`, `su`) do not gain privileges inside. Also refused, which some tools need:
//! `/dev/shm` (POSIX semaphores, so Python's `multiprocessing` locks) and the real `/tmp` (the
//! command's `TMPDIR` points to its private folder instead).
//!
//! **The state folder** (`.tern/`): Landlock rules only add rights, so files inside a writable
//! workspace cannot be made read-only by Landlock; [`Snapshot`] detects changes to tern's files
//! instead and restores the small ones (see `guard.rs`).
//!
//! **Test switch** (debug builds only, `#[cfg(debug_assertions)]`): the environment variable
//! [`FAKE_ABI_ENV`] = `N` makes tern believe the kernel's Landlock ABI is at most `N` (`0`: no
//! Landlock), so the refusal paths can be tested on a machine that has Landlock. It only ever
//! lowers the ABI tern believes in; release builds ignore it.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub mod door;
mod guard;
// Linux only, like the rest of the jail's system calls (tern builds on Linux).
pub mod jail;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(not(target_os = "linux"))]
mod other;

pub use guard::{
    Change, ChangeKind, Fingerprint, Keep, Listing, RestoreOutcome, SMALL_FILE_BYTES, Snapshot,
};

pub use crate::policy::{Mode, Setting};

#[cfg(target_os = "linux")]
use linux as imp;
#[cfg(not(target_os = "linux"))]
use other as imp;

/// Debug builds only: caps the Landlock ABI tern believes the kernel has (`0` = no Landlock). For
/// tests of the refusal paths; see the module docs.
pub const FAKE_ABI_ENV: &str = "TERN_SANDBOX_FAKE_ABI";

/// The Landlock ABI that added network rules (`LANDLOCK_ACCESS_NET_BIND_TCP` and
/// `CONNECT_TCP`, Linux 6.7), per the kernel's Landlock documentation.
pub const NETWORK_ABI: u8 = 4;

/// The line appended to the system prompt when `--no-network` is on (stable bytes, no paths).
pub const NO_NETWORK_PROMPT_LINE: &str = "Commands have no network but loopback.";

/// The `--no-network` line of sessions pinned before the jail (recognised, never written).
pub const LEGACY_NO_NETWORK_PROMPT_LINE: &str =
    "Commands have no network: TCP fails with Permission denied.";

/// The setting of `mode` on this machine (probes the kernel's Landlock ABI); `jail` unless
/// `--no-jail`.
pub fn probe(mode: Mode, no_network: bool, jail: bool) -> Setting {
    let landlock_abi = landlock_abi().unwrap_or(0);
    let enforced =
        mode.is_sandboxed() && landlock_abi > 0 && (!no_network || landlock_abi >= NETWORK_ABI);
    Setting {
        mode,
        no_network,
        landlock_abi,
        enforced,
        jail: jail && mode.is_sandboxed(),
    }
}

/// What one bash call may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The mode.
    pub mode: Mode,
    /// The workspace root: writable (recursively) in workspace-write. Must exist.
    pub workspace: PathBuf,
    /// Block TCP connect and bind (`--no-network`), in any mode.
    pub no_network: bool,
    /// More folders writable in workspace-write (`--add-dir`), each must exist.
    pub add_dirs: Vec<PathBuf>,
    /// `--no-network` is enforced by the jail's empty network namespace: no Landlock network
    /// rules then (they would also refuse loopback inside the jail), and no need for their ABI.
    pub network_in_namespace: bool,
    /// `$PLAN_DRAFT_FILE`: writable in every mode (open for writing and truncating that one file;
    /// replacing it by rename needs a writable folder, so in read-only only in-place writes such
    /// as `cat > "$PLAN_DRAFT_FILE"` work). Created empty when missing, since a Landlock rule
    /// needs an existing file (an empty draft means no draft to tern).
    pub draft_file: Option<PathBuf>,
    /// The private `TMPDIR` to grant (a runtime's [`TempFolder`], made once and emptied after
    /// each call). `None`: [`prepare`] makes a fresh one that goes with the [`Prepared`].
    pub tmpdir: Option<PathBuf>,
}

/// Why a command cannot run under the asked policy. `Display` is one line for the person and
/// for the model's error tool result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxError {
    /// The kernel (or OS) has no Landlock: sandboxed modes refuse to run commands.
    Unsupported {
        /// The mode that was asked for.
        mode: Mode,
        /// Why, e.g. "Landlock is not enabled in this kernel (add lsm=landlock at boot)".
        reason: String,
    },
    /// `--no-network` on a kernel whose Landlock ABI has no network rules (before ABI 4).
    NoNetworkRules {
        /// The kernel's Landlock ABI (0: none).
        abi: u8,
    },
    /// The sandbox could not be set up (temp folder, a path of a rule, the ruleset call).
    Setup(String),
}

impl fmt::Display for SandboxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SandboxError::Unsupported { mode, reason } => write!(
                f,
                "sandbox {mode} is not available: {reason}; commands are refused, never run unsandboxed (to run them without a sandbox, start tern with --sandbox danger-full-access)"
            ),
            SandboxError::NoNetworkRules { abi } => write!(
                f,
                "--no-network needs Landlock network rules (ABI {NETWORK_ABI}, Linux 6.7), this kernel has ABI {abi}; commands are refused, never run with the network on (run tern without --no-network to allow it)"
            ),
            SandboxError::Setup(e) => write!(f, "sandbox setup failed: {e}; command not run"),
        }
    }
}

impl std::error::Error for SandboxError {}

/// The sandbox as it applies: the kernel's Landlock ABI and the rights tern restricts. Recorded
/// in `meta.json` and printed by `tern sandbox check`. Right names are the Landlock
/// documentation's (`LANDLOCK_ACCESS_FS_WRITE_FILE` → `write_file`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// The mode.
    pub mode: Mode,
    /// `--no-network`.
    pub no_network: bool,
    /// The running kernel's Landlock ABI (0: no Landlock; in debug builds possibly lowered by
    /// [`FAKE_ABI_ENV`]).
    pub kernel_abi: u8,
    /// The ABI whose rights tern asks for (the newest it was tested with); the kernel applies
    /// the part of it that it knows (the crate's best-effort handling).
    pub target_abi: u8,
    /// Whether a Landlock domain is applied to each command.
    pub enforced: bool,
    /// Filesystem rights restricted outside the writable paths, e.g. `write_file`, `make_reg`.
    pub fs_restricted: Vec<String>,
    /// Write-type rights tern asks for that this kernel cannot restrict (e.g. `truncate` before
    /// ABI 3): allowed everywhere.
    pub fs_unrestricted: Vec<String>,
    /// Network rights restricted: `bind_tcp`, `connect_tcp` under `--no-network`.
    pub net_restricted: Vec<String>,
    /// Landlock scopes (ABI 6): `abstract_unix_socket` (no abstract UNIX socket made outside
    /// the command is reachable).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scoped: Vec<String>,
    /// Paths commands may write (beneath, for folders): the workspace in workspace-write,
    /// `/dev/null`, the draft file. Stable for a session (the per-call temp folder is not
    /// listed, see `private_tmpdir`).
    pub writable: Vec<PathBuf>,
    /// Each call gets a private, writable `TMPDIR` (emptied after the call).
    pub private_tmpdir: bool,
    /// What was left out and why, one line each (e.g. a draft file that is a symlink).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sandbox {}", self.mode)?;
        if self.no_network {
            f.write_str(" --no-network")?;
        }
        if !self.enforced {
            return write!(
                f,
                ": not enforced (kernel Landlock ABI {})",
                self.kernel_abi
            );
        }
        write!(
            f,
            ": Landlock ABI {} (rules of ABI {})",
            self.kernel_abi, self.target_abi
        )?;
        if self.fs_restricted.is_empty() {
            f.write_str("; filesystem not restricted")?;
        } else {
            write!(f, "; restricted: {}", self.fs_restricted.join(", "))?;
        }
        if !self.fs_unrestricted.is_empty() {
            write!(
                f,
                "; not restrictable here: {}",
                self.fs_unrestricted.join(", ")
            )?;
        }
        if self.net_restricted.is_empty() {
            f.write_str("; network not restricted")?;
        } else {
            write!(f, "; network: {} blocked", self.net_restricted.join(", "))?;
        }
        if !self.scoped.is_empty() {
            write!(f, "; scoped: {}", self.scoped.join(", "))?;
        }
        let mut paths: Vec<String> = self
            .writable
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        if self.private_tmpdir {
            paths.insert(paths.len().min(1), "a private $TMPDIR".to_string());
        }
        if !paths.is_empty() {
            write!(f, "; writable: {}", paths.join(", "))?;
        }
        for n in &self.notes {
            write!(f, "; {n}")?;
        }
        Ok(())
    }
}

/// One call's sandbox, ready to apply in the child: the Landlock ruleset (an open file
/// descriptor, Linux) and the private temp folder. Dropping it closes the ruleset and, unless
/// the folder was given ([`Policy::tmpdir`]), removes the temp folder with whatever the command
/// left there.
///
/// One `Prepared` may also serve several calls (restricting a child does not use the ruleset
/// up), and then `TMPDIR` lives across them. But Landlock rules name inodes, opened at
/// [`prepare`]: once tern replaces the draft by an atomic rename (`tern plan draft`, a confirm),
/// a kept `Prepared` no longer covers the new draft file in read-only mode. Preparing per call
/// (the intended use) avoids that.
///
/// Why the child only makes raw system calls: between `fork` and `exec` a child of a
/// multi-threaded process may only call async-signal-safe functions (another thread may have
/// held the allocator's lock at the fork). The `landlock` crate's `RulesetCreated::restrict_self`
/// consumes the ruleset and builds status values; it does not allocate in version 0.4.8, but
/// nothing promises that it stays so. So the crate builds and checks the whole ruleset here, in
/// the parent (`Ruleset::create`, `add_rule`, with its best-effort ABI handling), and hands over
/// its file descriptor (`From<RulesetCreated> for Option<OwnedFd>`); the child then calls
/// `prctl(PR_SET_NO_NEW_PRIVS)` and `landlock_restrict_self(fd, 0)` directly: system calls,
/// async-signal-safe, no allocation, no lock. The descriptor is close-on-exec (the kernel
/// creates Landlock ruleset fds with `O_CLOEXEC`), so bash does not inherit it.
#[derive(Debug)]
pub struct Prepared {
    mode: Mode,
    no_network: bool,
    tmpdir: Option<Tmp>,
    ruleset: Option<std::os::fd::OwnedFd>,
    draft: Option<PathBuf>,
    report: Report,
}

impl Prepared {
    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// `--no-network`.
    pub fn no_network(&self) -> bool {
        self.no_network
    }

    /// The private temp folder given to the command as `TMPDIR` (none in danger-full-access,
    /// where the command keeps the user's `TMPDIR`).
    pub fn tmpdir(&self) -> Option<&Path> {
        self.tmpdir.as_ref().map(|t| match t {
            Tmp::Own(t) => t.path(),
            Tmp::Given(p) => p.as_path(),
        })
    }

    /// `$PLAN_DRAFT_FILE` when this call may write it.
    pub fn draft_file(&self) -> Option<&Path> {
        self.draft.as_deref()
    }

    /// The effective ABI and rights of this call's sandbox.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// What the forked child applies; `Copy`, so a `'static` `pre_exec` closure can hold it.
    /// Valid while `self` lives (it names the ruleset's descriptor).
    pub(crate) fn child_hook(&self) -> ChildHook {
        use std::os::fd::AsRawFd;
        ChildHook {
            ruleset_fd: self.ruleset.as_ref().map(AsRawFd::as_raw_fd),
        }
    }
}

/// The part of a [`Prepared`] the forked child needs: the raw ruleset descriptor, if any.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChildHook {
    ruleset_fd: Option<std::os::fd::RawFd>,
}

impl ChildHook {
    /// The Landlock ruleset's descriptor, for a jail to apply in its own child.
    pub(crate) fn ruleset_fd(self) -> Option<std::os::fd::RawFd> {
        self.ruleset_fd
    }

    /// In the forked child, before exec only: restricts the calling thread (and so the command)
    /// for good. Makes only async-signal-safe system calls (see [`Prepared`]).
    pub(crate) fn apply(self) -> std::io::Result<()> {
        match self.ruleset_fd {
            Some(fd) => imp::restrict_self(fd),
            None => Ok(()),
        }
    }
}

/// A [`Prepared`]'s private temp folder: its own (removed with it) or a runtime's.
#[derive(Debug)]
enum Tmp {
    Own(TempFolder),
    Given(PathBuf),
}

/// A private `TMPDIR` for the commands of one runtime: a folder `tern-sandbox-<pid>-<random>`
/// in the system temp folder, mode 0700, made once and [`TempFolder::clear`]ed before and after
/// each call, so no call sees what an earlier one (or a job it left running) left there. Removed, with whatever is in it, when
/// dropped. Why not one folder per call: `mkdir` and `rmdir` on a disk file system (ext4 `/tmp`)
/// cost about a tenth of tern's own CPU per turn (BENCHMARKS.md, section 1).
#[derive(Debug)]
pub struct TempFolder(tempfile::TempDir);

impl TempFolder {
    /// Makes the folder (and first removes those of tern processes that are gone).
    ///
    /// Errors: [`SandboxError::Setup`] when the system temp folder refuses.
    pub fn new() -> Result<TempFolder, SandboxError> {
        use std::os::unix::fs::PermissionsExt;
        remove_dead_tmpdirs();
        tempfile::Builder::new()
            .prefix(&format!("{TMPDIR_PREFIX}{}-", std::process::id()))
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .map(TempFolder)
            .map_err(|e| SandboxError::Setup(format!("private temp folder: {e}")))
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// Removes everything in the folder, keeping the folder. Never follows a link out of it.
    ///
    /// Errors: the first entry that could not be removed, or the folder itself no longer being
    /// a plain folder (a command may `chmod` it: Landlock does not restrict metadata); the
    /// caller then drops this one and makes a new one.
    pub fn clear(&self) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::symlink_metadata(self.path())?;
        if !meta.is_dir() {
            return Err(std::io::Error::other(
                "the private temp folder was replaced",
            ));
        }
        // Private again if a command changed its mode (Landlock does not restrict `chmod`).
        if meta.permissions().mode() & 0o7777 != 0o700 {
            std::fs::set_permissions(self.path(), std::fs::Permissions::from_mode(0o700))?;
        }
        for entry in std::fs::read_dir(self.path())? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                std::fs::remove_dir_all(entry.path())?;
            } else {
                std::fs::remove_file(entry.path())?;
            }
        }
        Ok(())
    }
}

/// The prefix of a call's private `TMPDIR` folder (in the system temp folder), followed by the
/// pid of the tern process that made it.
pub const TMPDIR_PREFIX: &str = "tern-sandbox-";

/// Removes the private temp folders of tern processes that are gone (killed before they could
/// remove them: a command may even `kill -9` tern itself). Once per process; errors are ignored.
fn remove_dead_tmpdirs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) else {
            return;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix(TMPDIR_PREFIX))
                .and_then(|rest| rest.split('-').next())
                .and_then(|p| p.parse::<i32>().ok())
            else {
                continue;
            };
            // kill(pid, 0): ESRCH means no such process; anything else (alive, or not ours)
            // keeps the folder.
            // SAFETY: signal 0 sends nothing; it only checks the pid.
            let gone = unsafe { libc::kill(pid, 0) } == -1
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
            if gone && e.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    });
}
/// Prepares one bash call under `policy`: probes Landlock, takes the policy's private temp folder
/// or creates one (in the system temp dir, mode 0700) and builds the ruleset. Cost: a few
/// system calls, plus one `mkdir` without a given folder (measured in BENCHMARKS.md, section 6).
///
/// Errors: [`SandboxError::Unsupported`] for a sandboxed mode without Landlock,
/// [`SandboxError::NoNetworkRules`] for `--no-network` without network rules,
/// [`SandboxError::Setup`] when a path or a system call fails (e.g. a missing workspace).
/// danger-full-access without `--no-network` never fails and applies nothing.
pub fn prepare(policy: &Policy) -> Result<Prepared, SandboxError> {
    let kernel_abi = kernel_abi();
    let landlock_net = policy.no_network && !policy.network_in_namespace;
    let needs_landlock = policy.mode.is_sandboxed() || landlock_net;
    if !needs_landlock {
        return Ok(unsandboxed(policy.mode, kernel_abi.abi()));
    }
    if let Probe::Missing(reason) = &kernel_abi {
        if policy.mode.is_sandboxed() {
            return Err(SandboxError::Unsupported {
                mode: policy.mode,
                reason: reason.clone(),
            });
        }
        return Err(SandboxError::NoNetworkRules { abi: 0 });
    }
    if landlock_net && kernel_abi.abi() < NETWORK_ABI {
        return Err(SandboxError::NoNetworkRules {
            abi: kernel_abi.abi(),
        });
    }
    let tmpdir = match &policy.tmpdir {
        _ if !policy.mode.is_sandboxed() => None,
        Some(given) => Some(Tmp::Given(given.clone())),
        None => Some(Tmp::Own(TempFolder::new()?)),
    };
    let mut writable = Vec::new();
    if policy.mode == Mode::WorkspaceWrite {
        writable.push(policy.workspace.clone());
        writable.extend(policy.add_dirs.iter().cloned());
    }
    let mut dirs = writable.clone();
    if let Some(t) = &tmpdir {
        dirs.push(match t {
            Tmp::Own(t) => t.path().to_path_buf(),
            Tmp::Given(p) => p.clone(),
        });
    }
    let draft = match &policy.draft_file {
        Some(d) if policy.mode.is_sandboxed() => {
            ensure_file(d)?;
            Some(d.as_path())
        }
        _ => None,
    };
    let built = imp::build(
        kernel_abi.abi(),
        policy.mode.is_sandboxed(),
        landlock_net,
        &dirs,
        draft,
    )?;
    if policy.mode.is_sandboxed() {
        writable.push(PathBuf::from("/dev/null"));
    }
    if let (Some(d), true) = (draft, built.draft_granted) {
        writable.push(d.to_path_buf());
    }
    let private_tmpdir = tmpdir.is_some();
    Ok(Prepared {
        mode: policy.mode,
        no_network: policy.no_network,
        tmpdir,
        ruleset: Some(built.fd),
        draft: draft.filter(|_| built.draft_granted).map(Path::to_path_buf),
        report: Report {
            mode: policy.mode,
            no_network: policy.no_network,
            kernel_abi: kernel_abi.abi(),
            target_abi: imp::TARGET_ABI,
            enforced: true,
            fs_restricted: built.fs_restricted,
            fs_unrestricted: built.fs_unrestricted,
            net_restricted: built.net_restricted,
            scoped: built.scoped,
            writable,
            private_tmpdir,
            notes: built.notes,
        },
    })
}

/// What a call without Landlock is prepared as (danger-full-access without `--no-network`, or
/// with the network held by the jail's namespace): nothing restricted.
fn unsandboxed(mode: Mode, kernel_abi: u8) -> Prepared {
    Prepared {
        mode,
        no_network: false,
        tmpdir: None,
        ruleset: None,
        draft: None,
        report: Report {
            mode,
            no_network: false,
            kernel_abi,
            target_abi: imp::TARGET_ABI,
            enforced: false,
            fs_restricted: Vec::new(),
            fs_unrestricted: Vec::new(),
            net_restricted: Vec::new(),
            scoped: Vec::new(),
            writable: Vec::new(),
            private_tmpdir: false,
            notes: Vec::new(),
        },
    }
}

/// Creates `path` empty when nothing is there (never truncates, never follows a symlink, so a
/// dangling link planted there creates nothing elsewhere), for a file-level rule. Anything that
/// is there already is left for the rule's own checks.
fn ensure_file(path: &Path) -> Result<(), SandboxError> {
    use std::os::unix::fs::OpenOptionsExt;
    if std::fs::symlink_metadata(path).is_ok() {
        return Ok(());
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(SandboxError::Setup(format!("{}: {e}", path.display()))),
    }
}

/// What the kernel offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Probe {
    /// Landlock with this ABI (≥ 1).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    Abi(u8),
    /// No Landlock, and why.
    Missing(String),
}

impl Probe {
    fn abi(&self) -> u8 {
        match self {
            Probe::Abi(n) => *n,
            Probe::Missing(_) => 0,
        }
    }
}

/// The running kernel's Landlock ABI (1 or more), or why there is none (one line). In debug
/// builds [`FAKE_ABI_ENV`] may lower it.
pub fn landlock_abi() -> Result<u8, String> {
    match kernel_abi() {
        Probe::Abi(n) => Ok(n),
        Probe::Missing(why) => Err(why),
    }
}

/// The Landlock rights (bits) the jail's init grants beneath the workspace's layer; 0 off Linux
/// or without Landlock.
pub(crate) fn layer_rule_bits() -> u64 {
    #[cfg(target_os = "linux")]
    return linux::layer_rule_bits();
    #[cfg(not(target_os = "linux"))]
    return 0;
}

/// The kernel's Landlock ABI, lowered by [`FAKE_ABI_ENV`] in debug builds.
pub(crate) fn kernel_abi() -> Probe {
    let real = imp::probe();
    #[cfg(debug_assertions)]
    if let Some(cap) = std::env::var(FAKE_ABI_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u8>().ok())
    {
        return match real {
            Probe::Abi(_) if cap == 0 => {
                Probe::Missing(format!("Landlock is off ({FAKE_ABI_ENV}=0, a test switch)"))
            }
            Probe::Abi(n) => Probe::Abi(n.min(cap)),
            missing => missing,
        };
    }
    real
}

/// Output texts that mean a denied operation (EACCES, EROFS, EPERM, and EXDEV, which Landlock
/// returns for a link or rename that would move a file into more rights), as commands print
/// them.
const DENIAL_MARKERS: [&str; 4] = [
    "Permission denied",
    "Read-only file system",
    "Operation not permitted",
    "Invalid cross-device link",
];

/// Texts of a refused connect or name lookup, checked only under `--no-network` (curl, Node,
/// Python, the resolver).
const NET_DENIAL_MARKERS: [&str; 5] = [
    "Couldn't connect to server",
    "EACCES",
    "Network is unreachable",
    "Could not resolve host",
    "Temporary failure in name resolution",
];

/// When `output` shows a denial (`Permission denied`, `Read-only file system`, `Operation not
/// permitted`, `Invalid cross-device link`, or a refused connect under `--no-network`), one line for the model naming the mode
/// and what it allows, so it can adapt or ask; `None` otherwise and in danger-full-access without
/// `--no-network`. The line is bracketed like the bash tool's footer notes.
pub fn explain_denial(mode: Mode, no_network: bool, output: &str) -> Option<String> {
    if !mode.is_sandboxed() && !no_network {
        return None;
    }
    let denied = DENIAL_MARKERS.iter().any(|m| output.contains(m))
        || (no_network && NET_DENIAL_MARKERS.iter().any(|m| output.contains(m)));
    if !denied {
        return None;
    }
    if !mode.is_sandboxed() {
        // Only the network is sandboxed: a file permission error is not ours to explain away.
        return Some(format!(
            "[sandbox {mode} --no-network: files are not restricted, but TCP connect and bind are refused. A network call denied here is the sandbox: work without the network, or ask the user]"
        ));
    }
    let net = if no_network {
        "; network off (--no-network: only loopback)"
    } else {
        ""
    };
    Some(format!(
        "[sandbox {mode}: allows {}{net}. This denial is likely the sandbox, not file permissions: work within it, or ask the user]",
        mode.allows()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_serde_and_clap() {
        use clap::ValueEnum;
        for m in [Mode::ReadOnly, Mode::WorkspaceWrite, Mode::DangerFullAccess] {
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(json, format!("\"{}\"", m.as_str()));
            assert_eq!(serde_json::from_str::<Mode>(&json).unwrap(), m);
            assert_eq!(Mode::from_str(m.as_str(), false).unwrap(), m);
        }
        assert_eq!(Mode::default(), Mode::WorkspaceWrite);
    }

    #[test]
    fn prompt_lines_are_short_stable_and_pathless() {
        let lines: Vec<&str> = [Mode::ReadOnly, Mode::WorkspaceWrite, Mode::DangerFullAccess]
            .iter()
            .map(|m| m.prompt_line())
            .collect();
        for l in &lines {
            assert!(l.len() < 140, "{l}");
            assert!(!l.contains('/'), "{l}");
            assert!(!l.contains('\n'), "{l}");
        }
        assert_ne!(lines[0], lines[1]);
        assert_ne!(lines[1], lines[2]);
        assert!(!NO_NETWORK_PROMPT_LINE.contains('/'));
    }

    #[test]
    fn explain_denial_names_the_mode_only_when_denied() {
        let out = "bash: /etc/x: Permission denied\n";
        let line = explain_denial(Mode::WorkspaceWrite, false, out).unwrap();
        assert!(line.contains("workspace-write"), "{line}");
        assert!(line.contains("the workspace"), "{line}");
        assert!(!line.contains('\n'));
        let line = explain_denial(Mode::ReadOnly, false, "touch: Read-only file system").unwrap();
        assert!(line.contains("read-only"), "{line}");
        assert!(!line.contains("the workspace"), "{line}");
        assert_eq!(explain_denial(Mode::ReadOnly, false, "all good"), None);
        assert_eq!(explain_denial(Mode::DangerFullAccess, false, out), None);
        // curl's words for a refused connect count only under --no-network.
        let curl = "curl: (7) Failed to connect to 127.0.0.1 port 80: Couldn't connect to server";
        assert_eq!(explain_denial(Mode::WorkspaceWrite, false, curl), None);
        let line = explain_denial(Mode::DangerFullAccess, true, curl).unwrap();
        assert!(line.contains("--no-network"), "{line}");
        assert!(line.contains("files are not restricted"), "{line}");
        let line = explain_denial(Mode::ReadOnly, true, curl).unwrap();
        assert!(line.contains("network off"), "{line}");
        let line = explain_denial(Mode::WorkspaceWrite, false, "ln: Invalid cross-device link");
        assert!(line.is_some());
    }

    #[test]
    fn errors_are_one_line_naming_the_way_out() {
        let e = SandboxError::Unsupported {
            mode: Mode::ReadOnly,
            reason: "Landlock is not enabled".into(),
        }
        .to_string();
        assert!(!e.contains('\n'));
        assert!(e.contains("--sandbox danger-full-access"), "{e}");
        let e = SandboxError::NoNetworkRules { abi: 3 }.to_string();
        assert!(!e.contains('\n'));
        assert!(e.contains("ABI 3"), "{e}");
    }
}
