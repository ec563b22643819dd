//! Linux: the Landlock ruleset (built with the `landlock` crate, in the parent) and the two
//! system calls the forked child makes.

use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
};

/// The Landlock ABI that added scoping (`LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET`, Linux 6.12).
const SCOPE_ABI: u8 = 6;

use super::{Probe, SandboxError};

/// The ABI whose rights tern asks for: the newest it was tested on (this project's kernel has
/// ABI 7). The crate's guidance is to name a tested ABI rather than "everything the kernel has",
/// because a newer ABI can restrict more: ABI 9's `resolve_unix` would cut commands off from
/// `ssh-agent` and `docker.sock`. Between ABI 5 and 7 the write-type filesystem rights are the
/// same; a kernel with an older ABI gets the subset it knows (best effort, reported).
pub(super) const TARGET_ABI: u8 = 7;

const TARGET: ABI = ABI::V7;

/// Write-type filesystem rights tern restricts: the crate's `from_write` set for [`TARGET`],
/// minus `ioctl_dev`, which is not a write (commands may `ioctl` devices they can open, e.g.
/// `isatty` on /dev/null; opening a device for writing still needs `write_file`).
fn fs_rights(abi: ABI) -> BitFlags<AccessFs> {
    AccessFs::from_write(abi) & !AccessFs::IoctlDev
}

/// Rights granted beneath a writable folder: all of [`fs_rights`] but creating device nodes.
/// tern runs as root on some servers, and root may `mknod` a block device in the workspace and
/// write the disk through it; no build needs device nodes, so they stay refused everywhere.
fn dir_rights() -> BitFlags<AccessFs> {
    fs_rights(TARGET) & !(AccessFs::MakeChar | AccessFs::MakeBlock)
}

/// The bits of [`dir_rights`] this kernel handles: what the jail's init grants beneath the
/// workspace's layer (an overlayfs mount has inodes of its own, so the rule tern adds on the
/// real workspace does not reach it; Landlock documentation, "Filesystem topology
/// modification"). 0 without Landlock.
pub(crate) fn layer_rule_bits() -> u64 {
    match probe() {
        Probe::Abi(n) => (dir_rights() & fs_rights(ABI::from(i32::from(n)))).bits(),
        Probe::Missing(_) => 0,
    }
}

/// Rights a rule on a single file may carry (the kernel refuses directory rights on a file).
fn file_rights() -> BitFlags<AccessFs> {
    fs_rights(TARGET) & AccessFs::from_file(TARGET)
}

/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`: the ABI, or why none.
/// The crate keeps its own probe private (it wants programs not to branch on the ABI); tern
/// only reports it and refuses what cannot be enforced.
pub(super) fn probe() -> Probe {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer and size 0 the kernel reads no memory; it returns
    // the ABI version or -1 with errno.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v >= 1 {
        return Probe::Abi(u8::try_from(v).unwrap_or(u8::MAX));
    }
    Probe::Missing(match io::Error::last_os_error().raw_os_error() {
        Some(libc::EOPNOTSUPP) => {
            "Landlock is built into this kernel but not enabled (add landlock to the lsm= boot parameter)".to_string()
        }
        Some(libc::ENOSYS) => "this kernel has no Landlock (Linux 5.13 or later with CONFIG_SECURITY_LANDLOCK)".to_string(),
        _ => "Landlock is not available on this kernel".to_string(),
    })
}

/// What [`build`] made.
pub(super) struct Built {
    pub fd: OwnedFd,
    pub fs_restricted: Vec<String>,
    pub fs_unrestricted: Vec<String>,
    pub net_restricted: Vec<String>,
    /// Landlock scopes applied (`abstract_unix_socket`).
    pub scoped: Vec<String>,
    /// The draft was granted (it is a regular file with one link).
    pub draft_granted: bool,
    pub notes: Vec<String>,
}

/// Builds the ruleset: when `restrict_fs`, the write rights of [`fs_rights`] are handled (denied
/// everywhere) and granted beneath each of `dirs` ([`dir_rights`]), on `/dev/null` and on the
/// `draft` file ([`file_rights`]); when `no_network`, TCP bind and connect are handled with no
/// port allowed. Reads and execution are not handled, so they stay allowed everywhere (Landlock
/// restricts only handled rights, per its docs).
///
/// A rule on a file attaches to its inode, whatever name reaches it, and opening a path follows
/// symlinks. So the draft is opened with `O_PATH | O_NOFOLLOW` and granted only when that one
/// descriptor is a regular file with a single link: a symlink or hard link planted at
/// `$PLAN_DRAFT_FILE` (e.g. to `~/.bashrc`) gets no rule and a note instead.
///
/// `kernel_abi` is what [`super::kernel_abi`] found (≥ 1); the crate probes the kernel itself
/// and drops the rights it lacks (best effort). Network rules are a hard requirement: a
/// `--no-network` that the kernel cannot enforce must fail (the caller checks the ABI first;
/// the crate's `HardRequirement` makes sure).
pub(super) fn build(
    kernel_abi: u8,
    restrict_fs: bool,
    no_network: bool,
    dirs: &[PathBuf],
    draft: Option<&Path>,
) -> Result<Built, SandboxError> {
    let err = |what: &str, e: &dyn std::fmt::Display| SandboxError::Setup(format!("{what}: {e}"));
    let mut notes = Vec::new();
    let mut scoped = Vec::new();
    let kernel = ABI::from(i32::from(kernel_abi));
    let mut ruleset = Ruleset::default().set_compatibility(CompatLevel::BestEffort);
    let (mut fs_restricted, mut fs_unrestricted) = (Vec::new(), Vec::new());
    if restrict_fs {
        ruleset = ruleset
            .handle_access(fs_rights(TARGET))
            .map_err(|e| err("Landlock filesystem rights", &e))?;
        for right in fs_rights(TARGET) {
            if fs_rights(kernel).contains(right) {
                fs_restricted.push(fs_name(right).to_string());
            } else {
                fs_unrestricted.push(fs_name(right).to_string());
            }
        }
    }
    let mut net_restricted = Vec::new();
    if no_network {
        let net = AccessNet::from_all(TARGET);
        ruleset = ruleset
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(net)
            .map_err(|e| err("Landlock network rights", &e))?
            .set_compatibility(CompatLevel::BestEffort);
        net_restricted.extend(net.iter().map(|r| net_name(r).to_string()));
    }
    if restrict_fs && kernel_abi >= SCOPE_ABI {
        // Abstract UNIX sockets outside this command's own domain (the host's D-Bus, X11,
        // anything listening in the host's network namespace) are refused: best effort, an
        // older kernel has no scoping.
        ruleset = ruleset
            .scope(Scope::AbstractUnixSocket)
            .map_err(|e| err("Landlock scope", &e))?;
        scoped.push("abstract_unix_socket".to_string());
    }
    let mut created = ruleset
        .create()
        .map_err(|e| err("landlock_create_ruleset", &e))?;
    let mut draft_granted = false;
    if restrict_fs {
        for dir in dirs {
            let fd = PathFd::new(dir).map_err(|e| err(&dir.display().to_string(), &e))?;
            created = created
                .add_rule(PathBeneath::new(fd, dir_rights()))
                .map_err(|e| err(&dir.display().to_string(), &e))?;
        }
        let null = Path::new("/dev/null");
        let (fd, meta) = open_no_follow(null).map_err(|e| err("/dev/null", &e))?;
        if !meta.file_type().is_char_device() {
            return Err(SandboxError::Setup(
                "/dev/null is not a character device".into(),
            ));
        }
        created = created
            .add_rule(PathBeneath::new(fd, file_rights()))
            .map_err(|e| err("/dev/null", &e))?;
        if let Some(draft) = draft {
            match open_no_follow(draft) {
                Ok((fd, meta)) if meta.file_type().is_file() && meta.nlink() == 1 => {
                    created = created
                        .add_rule(PathBeneath::new(fd, file_rights()))
                        .map_err(|e| err(&draft.display().to_string(), &e))?;
                    draft_granted = true;
                }
                Ok(_) => notes.push(format!(
                    "{} is not a plain file (a symlink, a hard link or a folder): not made writable",
                    draft.display()
                )),
                Err(e) => notes.push(format!(
                    "{}: {e}: not made writable",
                    draft.display()
                )),
            }
        }
    }
    let fd: Option<OwnedFd> = created.into();
    let fd = fd.ok_or_else(|| {
        SandboxError::Setup("the kernel gave no Landlock ruleset (best effort fell back to none); commands are refused".into())
    })?;
    Ok(Built {
        fd,
        fs_restricted,
        fs_unrestricted,
        net_restricted,
        scoped,
        draft_granted,
        notes,
    })
}

/// Opens `path` itself (never a symlink's target) as an `O_PATH` descriptor, for a rule, and
/// `fstat`s that same descriptor, so the check and the rule see one inode.
fn open_no_follow(path: &Path) -> io::Result<(OwnedFd, std::fs::Metadata)> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let meta = f.metadata()?;
    Ok((OwnedFd::from(f), meta))
}

/// In the forked child: `prctl(PR_SET_NO_NEW_PRIVS, 1)` (required by `landlock_restrict_self`
/// for an unprivileged caller, and it keeps set-uid programs from escaping) and then
/// `landlock_restrict_self(fd, 0)`. Both are plain system calls: async-signal-safe, no
/// allocation (`io::Error::last_os_error` only stores errno). After `fork` the child has one
/// thread, so restricting the calling thread restricts the whole command.
pub(super) fn restrict_self(fd: RawFd) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only; it touches no memory of ours.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a raw system call with an fd (kept open by the parent's `Prepared` until after the
    // spawn) and flags 0; no pointer is passed.
    if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The Landlock documentation's name of a filesystem right, without `LANDLOCK_ACCESS_FS_`.
fn fs_name(right: AccessFs) -> &'static str {
    match right {
        AccessFs::Execute => "execute",
        AccessFs::WriteFile => "write_file",
        AccessFs::ReadFile => "read_file",
        AccessFs::ReadDir => "read_dir",
        AccessFs::RemoveDir => "remove_dir",
        AccessFs::RemoveFile => "remove_file",
        AccessFs::MakeChar => "make_char",
        AccessFs::MakeDir => "make_dir",
        AccessFs::MakeReg => "make_reg",
        AccessFs::MakeSock => "make_sock",
        AccessFs::MakeFifo => "make_fifo",
        AccessFs::MakeBlock => "make_block",
        AccessFs::MakeSym => "make_sym",
        AccessFs::Refer => "refer",
        AccessFs::Truncate => "truncate",
        AccessFs::IoctlDev => "ioctl_dev",
        AccessFs::ResolveUnix => "resolve_unix",
        _ => "unknown",
    }
}

/// The Landlock documentation's name of a network right, without `LANDLOCK_ACCESS_NET_`.
fn net_name(right: AccessNet) -> &'static str {
    match right {
        AccessNet::BindTcp => "bind_tcp",
        AccessNet::ConnectTcp => "connect_tcp",
        _ => "unknown",
    }
}
