//! Not Linux: no Landlock. [`probe`] always says so, so every sandboxed mode (and
//! `--no-network`) is refused by `prepare` before [`build`] could be reached.

use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use super::{Probe, SandboxError};

/// The ABI tern would ask for on Linux (reported for symmetry).
pub(super) const TARGET_ABI: u8 = 7;

/// No Landlock outside Linux.
pub(super) fn probe() -> Probe {
    Probe::Missing(format!(
        "Landlock is Linux only and this is {}",
        std::env::consts::OS
    ))
}

/// Never reached (see the module docs); refuses all the same.
pub(super) struct Built {
    pub fd: OwnedFd,
    pub fs_restricted: Vec<String>,
    pub fs_unrestricted: Vec<String>,
    pub net_restricted: Vec<String>,
    pub scoped: Vec<String>,
    pub draft_granted: bool,
    pub notes: Vec<String>,
}

/// Refuses: there is nothing to build a sandbox with.
pub(super) fn build(
    _kernel_abi: u8,
    _restrict_fs: bool,
    _no_network: bool,
    _dirs: &[PathBuf],
    _draft: Option<&Path>,
) -> Result<Built, SandboxError> {
    Err(SandboxError::Setup(format!(
        "no sandbox on {}",
        std::env::consts::OS
    )))
}

/// Never called with a ruleset (none can be built); refuses the spawn if it were.
pub(super) fn restrict_self(_fd: RawFd) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}
