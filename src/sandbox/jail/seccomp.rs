//! The jail's seccomp filter: what namespaces leave open, refused with `EPERM` (built with the
//! `seccompiler` crate, rust-vmm's pure-Rust BPF compiler, so no hand-written BPF).
//!
//! - `ioctl(TIOCSTI)` and `ioctl(TIOCLINUX)`: typing into, or reading, a terminal;
//! - a new user namespace (`unshare` or `clone` with `CLONE_NEWUSER`): capabilities inside it
//!   would let a command re-mount what the jail made read-only in its own view, and it is the
//!   kernel surface most escapes go through; `clone3` answers `ENOSYS` (its flags sit in memory
//!   a filter cannot read), so libc falls back to `clone`, as container runtimes do;
//! - the kernel keyrings (`keyctl`, `add_key`, `request_key`): shared with the host user's
//!   session keyring, where credentials live;
//! - `socket(AF_VSOCK, …)`: vsock is not namespaced, so it reaches the host's (and a VM's
//!   hypervisor's) services whatever the network namespace;
//! - `io_uring_setup`, `io_uring_enter`, `io_uring_register`: io_uring's operations bypass
//!   seccomp's view of system calls (Codex and Docker's default profile refuse it too).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;

/// The two programs to install, in order, or why they cannot be built on this architecture.
pub(super) fn programs() -> Result<Vec<BpfProgram>, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
    let e = |e: seccompiler::BackendError| e.to_string();
    let newuser = libc::CLONE_NEWUSER as u64;
    let flag_rule = |arg: u8| {
        SeccompCondition::new(
            arg,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(newuser),
            newuser,
        )
        .and_then(|c| SeccompRule::new(vec![c]))
        .map_err(e)
    };
    let ioctl = |req: u64| {
        SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, req)
            .and_then(|c| SeccompRule::new(vec![c]))
            .map_err(e)
    };
    let mut refused: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    refused.insert(libc::SYS_ioctl, vec![ioctl(TIOCSTI)?, ioctl(TIOCLINUX)?]);
    refused.insert(libc::SYS_unshare, vec![flag_rule(0)?]);
    refused.insert(libc::SYS_clone, vec![flag_rule(0)?]);
    for nr in [
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ] {
        refused.insert(nr, vec![]);
    }
    let family = |f: libc::c_int| {
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, f as u64)
            .and_then(|c| SeccompRule::new(vec![c]))
            .map_err(e)
    };
    refused.insert(libc::SYS_socket, vec![family(libc::AF_VSOCK)?]);
    let eperm = SeccompFilter::new(
        refused,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(e)?;
    let mut clone3 = BTreeMap::new();
    clone3.insert(libc::SYS_clone3, vec![]);
    let enosys = SeccompFilter::new(
        clone3,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(e)?;
    let a: BpfProgram = eperm
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    let b: BpfProgram = enosys
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    Ok(vec![a, b])
}

/// Installs `progs` on the calling thread (sets `no_new_privs` first, as seccomp requires of an
/// unprivileged caller).
///
/// Errors: `seccomp(2)`'s, as text.
pub(super) fn install(progs: &[BpfProgram]) -> std::io::Result<()> {
    for p in progs {
        seccompiler::apply_filter(p).map_err(|e| std::io::Error::other(e.to_string()))?;
    }
    Ok(())
}
