//! The policy values: when the bash tool may run ([`Approval`]) and what its commands may write
//! ([`Mode`], recorded as a [`Setting`]). Plain types in a leaf module, shared by the runtime, the
//! events, the store and the Fleet; the sandbox enforces them.

use serde::{Deserialize, Serialize};

/// When the bash tool may run (`--approval`, `TERN_APPROVAL`). Ordered from the narrowest
/// (`never`) to the widest (`auto`): a sub-agent gets the narrowest of its parent's and its
/// member's.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Approval {
    /// Refuse every command with an error tool result: the model can only plan.
    Never,
    /// Ask the person before each command (the REPL's default).
    Ask,
    /// Run every command (the default of `exec`).
    Auto,
}

impl Approval {
    /// Its name as a flag, a config file and the settings table write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Approval::Never => "never",
            Approval::Ask => "ask",
            Approval::Auto => "auto",
        }
    }
}

/// A session's sandbox as `meta.json` and the `session_start` event record it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Setting {
    /// The mode.
    pub mode: Mode,
    /// `--no-network`.
    pub no_network: bool,
    /// The kernel's Landlock ABI (0: none).
    pub landlock_abi: u8,
    /// Whether commands really run inside a Landlock domain (false for `danger-full-access`, and
    /// for a sandboxed mode this kernel cannot enforce: such a session refuses to run commands).
    pub enforced: bool,
    /// Whether commands run in the jail of namespaces and seccomp (a sandboxed mode without
    /// `--no-jail`); its layers are in `tern sandbox check`, and a machine that refuses them
    /// refuses commands. Absent in sessions older than the jail.
    #[serde(default)]
    pub jail: bool,
}

/// What commands may write (`--sandbox`, `TERN_SANDBOX`); kebab-case names in flags, JSON and
/// events: `read-only`, `workspace-write`, `danger-full-access`. Ordered from the narrowest to
/// the widest: a sub-agent gets the narrowest of its parent's and its member's.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
#[value(rename_all = "kebab-case")]
pub enum Mode {
    /// Read anything; write only `/dev/null`, the private `TMPDIR` and `$PLAN_DRAFT_FILE`.
    ReadOnly,
    /// As read-only, plus the workspace tree (the default).
    #[default]
    WorkspaceWrite,
    /// No filesystem sandbox: commands write anywhere the user may.
    DangerFullAccess,
}

impl Mode {
    /// Every mode.
    pub const ALL: [Mode; 3] = [Mode::ReadOnly, Mode::WorkspaceWrite, Mode::DangerFullAccess];

    /// The kebab-case name, as in `--sandbox NAME`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read-only",
            Mode::WorkspaceWrite => "workspace-write",
            Mode::DangerFullAccess => "danger-full-access",
        }
    }

    /// One short sentence for the system prompt: the same bytes for every session in this mode
    /// (no path, no time), so a provider's prompt cache holds across sessions.
    pub fn prompt_line(self) -> &'static str {
        match self {
            Mode::ReadOnly => {
                "Commands can write only $TMPDIR and $PLAN_DRAFT_FILE (read-only sandbox)."
            }
            Mode::WorkspaceWrite => {
                "Commands can write only the workspace, $TMPDIR and $PLAN_DRAFT_FILE (sandbox)."
            }
            Mode::DangerFullAccess => "Commands run without a sandbox.",
        }
    }

    /// True for the modes that restrict the filesystem (all but danger-full-access).
    pub fn is_sandboxed(self) -> bool {
        self != Mode::DangerFullAccess
    }

    /// What the mode lets a command write, for one-line messages.
    pub(crate) fn allows(self) -> &'static str {
        match self {
            Mode::ReadOnly => {
                "reading everything and writing only $TMPDIR, $PLAN_DRAFT_FILE and /dev/null"
            }
            Mode::WorkspaceWrite => {
                "reading everything and writing only the workspace, $TMPDIR, $PLAN_DRAFT_FILE and /dev/null"
            }
            Mode::DangerFullAccess => "writing anywhere the user can",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How much free space a command must leave on the file systems it writes (the workspace's,
/// `--add-dir`s', the private `TMPDIR`'s): below it the command is stopped, so a runaway copy
/// cannot fill a disk others (and tern's own records) need (`TERN_DISK_FLOOR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DiskFloor {
    /// The smaller of 1 GiB and 5 % of the file system (at least 64 MiB).
    #[default]
    Auto,
    /// Exactly this many bytes.
    Bytes(u64),
    /// No floor (`TERN_DISK_FLOOR=0`).
    Off,
}

impl DiskFloor {
    /// The floor in bytes on a file system of `total` bytes (0: none).
    pub fn bytes(self, total: u64) -> u64 {
        match self {
            DiskFloor::Auto => (total / 20).clamp(64 << 20, 1 << 30).min(total / 2),
            DiskFloor::Bytes(b) => b,
            DiskFloor::Off => 0,
        }
    }
}

/// Folders where other programs keep sockets (tmux, ssh-agent, D-Bus, Docker): a writable root
/// that is or holds one would expose them to commands.
pub const SOCKET_FOLDERS: [&str; 6] = ["/tmp", "/var/tmp", "/run", "/var/run", "/dev/shm", "/dev"];

/// Folders of the system itself.
const SYSTEM_FOLDERS: [&str; 12] = [
    "/usr", "/etc", "/var", "/opt", "/boot", "/bin", "/sbin", "/lib", "/lib64", "/proc", "/sys",
    "/srv",
];

/// Why `path` may not be a writable root of the model's commands (the workspace in
/// workspace-write, an `--add-dir`), in words ("the whole file system", "your home folder", …);
/// None when it may. `home` is `$HOME`, `runtime` is `$XDG_RUNTIME_DIR`. All paths absolute and
/// canonical. The home folder itself would let a command create start-up files
/// (`.bash_profile`), `~/.ssh/authorized_keys` or `~/.local/bin/git` that did not exist (a root
/// that holds the home folder deeper down is fine: the jail shows the home folder read-only
/// inside it); a socket folder would expose other programs' sockets (tmux's runs commands
/// outside the jail).
pub fn wide_root(
    path: &std::path::Path,
    home: Option<&std::path::Path>,
    runtime: Option<&std::path::Path>,
) -> Option<String> {
    use std::path::Path;
    if path.parent().is_none() {
        return Some("the whole file system".into());
    }
    if home == Some(path) {
        return Some("your home folder".into());
    }
    let sockets = SOCKET_FOLDERS
        .iter()
        .map(Path::new)
        .chain(runtime)
        .find(|s| s.starts_with(path));
    if let Some(s) = sockets {
        return Some(if s == path {
            format!(
                "{}, a shared folder where other programs keep their sockets",
                s.display()
            )
        } else {
            format!(
                "{} (it holds {}, where other programs keep their sockets)",
                path.display(),
                s.display()
            )
        });
    }
    SYSTEM_FOLDERS
        .iter()
        .any(|s| Path::new(s) == path)
        .then(|| format!("{}, a folder of the system", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_roots_are_named_and_project_folders_pass() {
        use std::path::Path;
        let home = Some(Path::new("/home/u"));
        let run = Some(Path::new("/run/user/1000"));
        let w = |p: &str| wide_root(Path::new(p), home, run);
        assert_eq!(w("/").as_deref(), Some("the whole file system"));
        assert_eq!(w("/home/u").as_deref(), Some("your home folder"));
        assert_eq!(
            w("/home"),
            None,
            "the jail shows the home folder in it read-only"
        );
        assert!(w("/tmp").unwrap().contains("sockets"));
        assert!(w("/dev/shm").unwrap().contains("sockets"));
        assert!(w("/run/user/1000").unwrap().contains("sockets"));
        assert!(w("/var").unwrap().contains("holds /var/tmp"));
        assert!(w("/usr").unwrap().contains("system"));
        for ok in [
            "/home/u/proj",
            "/tmp/build",
            "/work/main",
            "/srv/app",
            "/var/lib/x",
        ] {
            assert_eq!(w(ok), None, "{ok}");
        }
    }

    #[test]
    fn the_automatic_floor_is_five_percent_between_64_mib_and_1_gib() {
        let g = 1u64 << 30;
        assert_eq!(DiskFloor::Auto.bytes(100 * g), g);
        assert_eq!(DiskFloor::Auto.bytes(10 * g), g / 2);
        assert_eq!(DiskFloor::Auto.bytes(g), 64 << 20);
        // A tiny file system keeps half of itself at most.
        assert_eq!(DiskFloor::Auto.bytes(64 << 20), 32 << 20);
        assert_eq!(DiskFloor::Off.bytes(g), 0);
        assert_eq!(DiskFloor::Bytes(5).bytes(g), 5);
    }
}
