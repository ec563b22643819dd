//! The jail's file system view, built by its init in a fresh mount namespace (Linux 5.12 or
//! later: `open_tree`, `move_mount`, `mount_setattr`, per mount(2) and mount_setattr(2)).
//!
//! The order is what makes it work:
//! 1. propagation private, so nothing done here reaches the host;
//! 2. a detached copy (`open_tree(OPEN_TREE_CLONE)`) of everything that will be shown again:
//!    the writable roots, the read-only roots, the readable home entries, the device nodes;
//! 3. the whole host tree read-only, `nosuid`, `nodev`, in one recursive `mount_setattr`;
//! 4. covers: private tmpfs on `/tmp`, `/var/tmp`, `/run`, the home folder; a minimal `/dev`;
//!    a `/proc` of the jail's own PID namespace;
//! 5. the copies attached at their own paths, shallow first (the workspace, then the state
//!    folder read-only inside it, then the draft file writable inside that);
//! 6. credential paths covered wherever they are still visible.
//!
//! Every path in the spec is absolute and canonical (tern resolves them before it starts the
//! jail), so the jail's paths are the host's: the command's working folder, `$PLAN_DRAFT_FILE`
//! and `$TMPDIR` mean the same inside and out.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::JailSpec;

const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// The folders covered by a private tmpfs, with its options. A tmpfs is memory: each has a
/// size, so a runaway write there fails with "No space left" instead of filling the host's
/// memory (the default would be half of it).
const COVERS: [(&str, &str); 3] = [
    ("/tmp", "mode=1777,size=1g"),
    ("/var/tmp", "mode=1777,size=1g"),
    ("/run", "mode=755,size=64m"),
];

/// The tmpfs over the home folder (what a command writes there is the jail's, and goes).
const HOME_COVER: &str = "mode=755,size=256m";

/// `/dev/shm` in the jail.
const SHM_OPTIONS: &str = "mode=1777,size=256m";

/// `fsopen` / `fsconfig` / `fsmount` constants (linux/mount.h).
const FSOPEN_CLOEXEC: libc::c_uint = 1;
const FSCONFIG_SET_FLAG: libc::c_uint = 0;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const FSMOUNT_CLOEXEC: libc::c_uint = 1;

/// The device nodes a command gets (the rest of the host's `/dev` is not there).
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::other("a path with a NUL byte"))
}

fn check(r: libc::c_long, what: &str, p: &Path) -> io::Result<libc::c_long> {
    if r < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("{what} {}: {e}", p.display()),
        ));
    }
    Ok(r)
}

/// A detached copy of the mount tree at `p` (recursive), close-on-exec.
fn clone_tree(p: &Path) -> io::Result<OwnedFd> {
    let c = cstr(p)?;
    // SAFETY: a valid C path; flags per open_tree(2).
    let r = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c.as_ptr(),
            OPEN_TREE_CLONE | AT_RECURSIVE | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    let fd = check(r, "open_tree", p)?;
    // SAFETY: open_tree returned a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Sets (and clears) mount attributes on the tree at `fd` (a detached copy) or at `p`.
fn set_attr(fd: Option<RawFd>, p: &Path, set: u64, clr: u64, recursive: bool) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clr,
        propagation: 0,
        userns_fd: 0,
    };
    let mut flags = if recursive { AT_RECURSIVE } else { 0 };
    let (dirfd, path) = match fd {
        Some(fd) => {
            flags |= libc::AT_EMPTY_PATH as libc::c_uint;
            (fd, CString::default())
        }
        None => (libc::AT_FDCWD, cstr(p)?),
    };
    // SAFETY: a valid C path (possibly empty with AT_EMPTY_PATH), a live attr struct and its size.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    check(r, "mount_setattr", p).map(|_| ())
}

/// Attaches the detached tree `fd` at `target`.
fn attach(fd: &OwnedFd, target: &Path) -> io::Result<()> {
    let c = cstr(target)?;
    let empty = CString::default();
    // SAFETY: valid C strings; flags per move_mount(2).
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            fd.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            c.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    check(r, "move_mount", target).map(|_| ())
}

/// mount(2) with a file system type and data.
fn mount_fs(fstype: &str, target: &Path, flags: libc::c_ulong, data: &str) -> io::Result<()> {
    let t = cstr(target)?;
    let ty = CString::new(fstype).map_err(io::Error::other)?;
    let d = CString::new(data).map_err(io::Error::other)?;
    // SAFETY: valid C strings for source, target, type and data.
    let r = unsafe {
        libc::mount(
            ty.as_ptr(),
            t.as_ptr(),
            ty.as_ptr(),
            flags,
            d.as_ptr().cast(),
        )
    };
    check(r as libc::c_long, &format!("mount {fstype} on"), target).map(|_| ())
}

/// One step of building the jail's view, in order: the plan is data ([`plan`], pure, tested as
/// exact lists), the executor ([`build`]) runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Mount propagation private, so nothing done here reaches the host.
    Private,
    /// A detached copy of the tree at `path`, taken before the host tree turns read-only (a
    /// copy keeps the flags it had); a `read_only` copy gets `ro,nosuid,nodev`.
    Copy {
        /// What is copied (and later attached at the same path).
        path: PathBuf,
        /// Shown read-only.
        read_only: bool,
    },
    /// A detached copy of the folder `copy` (a repository's shadow, see `git.rs`), taken with
    /// the other copies and attached at `at` (the real git dir) in its place.
    Shadow {
        /// The shadow tern wrote.
        copy: PathBuf,
        /// The real git dir it stands for in the jail.
        at: PathBuf,
    },
    /// The workspace's layer (issue 42): an overlayfs mount made detached now (while `upper`
    /// and `work` are still visible) with the workspace `at` as its lower layer, and attached
    /// at `at` in the workspace's place. Commands write `upper`; tern's door applies it.
    Layer {
        /// The workspace (the lower layer, and where the mount goes).
        at: PathBuf,
        /// The upper layer tern owns.
        upper: PathBuf,
        /// overlayfs's work folder (same file system as `upper`).
        work: PathBuf,
    },
    /// A copy of the device node `/dev/NAME`, for the minimal `/dev`.
    Device(&'static str),
    /// The whole host tree read-only, `nosuid`, `nodev`, in one recursive `mount_setattr`.
    HostReadOnly,
    /// A private tmpfs over `path`, memory the jail's commands may fill up to a size.
    Cover {
        /// The covered folder.
        path: PathBuf,
        /// Its tmpfs options: permission bits and size (`mode=1777,size=1g`).
        options: &'static str,
    },
    /// The minimal `/dev` with the copied devices.
    Dev,
    /// A `/proc` of the jail's own PID namespace.
    Proc,
    /// The copy of `path` attached at `path` (`dir`: a folder; else a file).
    Attach {
        /// Where.
        path: PathBuf,
        /// A folder (else a file).
        dir: bool,
    },
    /// `path` covered wherever it is still visible (an empty folder or file, read-only).
    Hide(PathBuf),
    /// `path` is not in the jail, and why.
    Left(PathBuf, String),
}

/// What the plan needs to know of the host: `kind(path)` says whether a path exists and is a
/// folder (`Some(true)`), another entry (`Some(false)`) or is missing (`None`), not following a
/// final link; `resolv` is where `/etc/resolv.conf` leads when that is under `/run` or `/tmp`.
pub struct Host<'a> {
    /// The kind of a host path.
    pub kind: &'a dyn Fn(&Path) -> Option<bool>,
    /// The target of `/etc/resolv.conf` when a cover would hide it.
    pub resolv: Option<PathBuf>,
}

impl Host<'_> {
    /// The host as the file system says.
    pub fn real() -> Host<'static> {
        fn kind(p: &Path) -> Option<bool> {
            std::fs::symlink_metadata(p).ok().map(|m| m.is_dir())
        }
        Host {
            kind: &kind,
            // /etc/resolv.conf often links into /run (systemd-resolved): keep its target.
            resolv: std::fs::canonicalize("/etc/resolv.conf")
                .ok()
                .filter(|t| t.starts_with("/run") || t.starts_with("/tmp")),
        }
    }
}

/// Depth of a path in components, for attaching parents before children.
fn depth(p: &Path) -> usize {
    p.components().count()
}

/// The steps that build the view of `spec` on `host` (see the module docs for why this order).
pub fn plan(spec: &JailSpec, host: &Host<'_>) -> Vec<Step> {
    let mut steps = vec![Step::Private];
    // 2. Copies: writable first, then read-only (the state folder, git's files, readable home
    // entries, resolv.conf's target). A path that is not there is left out with a note.
    let mut attach: Vec<(PathBuf, bool)> = Vec::new();
    let wanted = spec
        .writable
        .iter()
        .chain(&spec.writable_files)
        .map(|p| (p.clone(), false))
        .chain(
            spec.read_only
                .iter()
                .chain(&spec.readable)
                .map(|p| (p.clone(), true)),
        )
        .chain(host.resolv.clone().map(|p| (p, true)))
        // git's data folders, read and written through the shadows (the real ones).
        .chain(spec.git_data.iter().map(|p| (p.clone(), false)));
    for (path, read_only) in wanted {
        match (host.kind)(&path) {
            Some(dir) => {
                steps.push(Step::Copy {
                    path: path.clone(),
                    read_only,
                });
                attach.push((path, dir));
            }
            None => {
                let why = "not found; not in the jail".to_string();
                steps.push(Step::Left(path, why));
            }
        }
    }
    for l in &spec.layers {
        steps.push(Step::Layer {
            at: l.at.clone(),
            upper: l.upper.clone(),
            work: l.work.clone(),
        });
        attach.push((l.at.clone(), true));
    }
    for (real, copy) in &spec.git_shadows {
        if (host.kind)(copy) == Some(true) {
            steps.push(Step::Shadow {
                copy: copy.clone(),
                at: real.clone(),
            });
            attach.push((real.clone(), true));
        }
    }
    for d in DEVICES {
        if (host.kind)(&Path::new("/dev").join(d)).is_some() {
            steps.push(Step::Device(d));
        }
    }
    // 3. The host tree read-only.
    steps.push(Step::HostReadOnly);
    // 4. Covers, a minimal /dev, the jail's /proc.
    let mut covered: Vec<PathBuf> = Vec::new();
    for (p, options) in COVERS {
        if (host.kind)(Path::new(p)) == Some(true) {
            covered.push(PathBuf::from(p));
            steps.push(Step::Cover {
                path: PathBuf::from(p),
                options,
            });
        }
    }
    let mut home_covered = false;
    if let Some(home) = &spec.home {
        // A home inside a writable root (the workspace is the home folder, or above it) stays:
        // covering it would hide the work. Its credentials are hidden in step 6. A home under a
        // cover (`/tmp/…`) is hidden already.
        let in_root = spec.writable_roots().any(|w| home.starts_with(w));
        let hidden = covered.iter().any(|c| home.starts_with(c));
        // Covered either way (its own cover, or one of a folder above it): only what is
        // attached under it shows.
        home_covered = !in_root && (hidden || (host.kind)(home) == Some(true));
        if (host.kind)(home) == Some(true) && !in_root && !hidden {
            steps.push(Step::Cover {
                path: home.clone(),
                options: HOME_COVER,
            });
        }
    }
    steps.push(Step::Dev);
    steps.push(Step::Proc);
    // 5. The copies, parents first (a stable sort keeps the writable one of equal depth first).
    attach.sort_by_key(|(p, _)| depth(p));
    steps.extend(
        attach
            .into_iter()
            .map(|(path, dir)| Step::Attach { path, dir }),
    );
    // 6. Credentials, wherever they are still visible. Under the home folder's cover only what
    // was attached shows, so a hidden folder that merely holds an attached one (tern's config
    // folder around `~/.config/tern/skills`) is left: covering it would hide what was chosen
    // to show, and nothing else of it is there.
    let hides = hides(spec, &steps, home_covered);
    steps.extend(hides);
    steps
}

/// The credentials to hide ([`JailSpec::hidden`]), but a folder under the covered home folder
/// that only holds attached paths of `steps` (see [`plan`], step 6).
fn hides(spec: &JailSpec, steps: &[Step], home_covered: bool) -> Vec<Step> {
    let attached: Vec<&PathBuf> = steps
        .iter()
        .filter_map(|s| match s {
            Step::Attach { path, .. } => Some(path),
            _ => None,
        })
        .collect();
    let under_cover =
        |h: &Path| home_covered && spec.home.as_ref().is_some_and(|home| h.starts_with(home));
    spec.hidden
        .iter()
        .filter(|h| {
            let holds_one = attached.iter().any(|a| a.starts_with(h) && *a != *h);
            let inside_one = attached.iter().any(|a| h.starts_with(a));
            !(under_cover(h) && holds_one && !inside_one)
        })
        .cloned()
        .map(Step::Hide)
        .collect()
}

/// Builds the view of `spec` (see the module docs): runs [`plan`]'s steps. Returns notes (a
/// path left out and why), or the first step that failed: the jail is then refused whole.
///
/// Errors: any mount step; the message names the step and the path.
pub(super) fn build(spec: &JailSpec) -> io::Result<Vec<String>> {
    let steps = plan(spec, &Host::real());
    let mut notes = Vec::new();
    let mut copies: Vec<(PathBuf, OwnedFd)> = Vec::new();
    let mut devices: Vec<(&str, OwnedFd)> = Vec::new();
    let ro = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    let tmpfs_flags = libc::MS_NOSUID | libc::MS_NODEV;
    for step in steps {
        match step {
            Step::Private => {
                let root = Path::new("/");
                let c = cstr(root)?;
                // SAFETY: remount of "/" with propagation flags only; no data.
                let r = unsafe {
                    libc::mount(
                        std::ptr::null(),
                        c.as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    )
                };
                check(r as libc::c_long, "make private", root)?;
            }
            Step::Copy { path, read_only } => {
                let fd = clone_tree(&path)?;
                if read_only {
                    set_attr(Some(fd.as_raw_fd()), &path, ro, 0, true)?;
                }
                copies.push((path, fd));
            }
            Step::Shadow { copy, at } => copies.push((at, clone_tree(&copy)?)),
            Step::Layer { at, upper, work } => {
                let fd = layer(&at, &upper, &work)
                    .map_err(|e| io::Error::new(e.kind(), format!("{LAYER_STEP}: {e}")))?;
                copies.push((at, fd));
            }
            Step::Device(d) => devices.push((d, clone_tree(&Path::new("/dev").join(d))?)),
            Step::HostReadOnly => set_attr(None, Path::new("/"), ro, 0, true)?,
            Step::Cover { path, options } => mount_fs("tmpfs", &path, tmpfs_flags, options)?,
            Step::Dev => build_dev(&devices)?,
            Step::Proc => mount_fs(
                "proc",
                Path::new("/proc"),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                "",
            )?,
            Step::Attach { path, dir } => {
                let Some(i) = copies.iter().position(|(p, _)| *p == path) else {
                    continue;
                };
                let (path, fd) = copies.swap_remove(i);
                if let Err(e) = make_mountpoint(&path, dir) {
                    notes.push(format!("{}: {e}; not in the jail", path.display()));
                    continue;
                }
                attach(&fd, &path)?;
            }
            Step::Hide(p) => hide(&p, &mut notes)?,
            Step::Left(p, why) => notes.push(format!("{}: {why}", p.display())),
        }
    }
    Ok(notes)
}

/// Covers `p` if it is still visible in the view: a folder with an empty read-only tmpfs, a
/// file with an empty read-only file. A link or another entry is left (covering it would
/// follow it), with a note.
/// The words a layer's failure starts with, so tern can tell it from the rest of the jail's
/// steps and fall back to the bind walls (DESIGN §10).
pub const LAYER_STEP: &str = "the workspace's layer (overlayfs)";

/// A detached overlayfs mount: `at` below, `upper` above, `work` its work folder, with
/// `userxattr` (required in a user namespace, overlayfs documentation) and `nosuid,nodev`.
/// The lower layer is given with `lowerdir+` (Linux 6.8, no escaping) or else as an escaped
/// `lowerdir`.
fn layer(at: &Path, upper: &Path, work: &Path) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated file system name; flags per fsopen(2).
    let fs = unsafe { libc::syscall(libc::SYS_fsopen, c"overlay".as_ptr(), FSOPEN_CLOEXEC) };
    let fs = check(fs, "fsopen overlay", at)?;
    // SAFETY: fsopen returned a new descriptor we own.
    let fs = unsafe { OwnedFd::from_raw_fd(fs as RawFd) };
    let set = |key: &std::ffi::CStr, value: Option<&[u8]>| -> io::Result<()> {
        let v = value
            .map(CString::new)
            .transpose()
            .map_err(io::Error::other)?;
        let (cmd, ptr) = match &v {
            Some(v) => (FSCONFIG_SET_STRING, v.as_ptr()),
            None => (FSCONFIG_SET_FLAG, std::ptr::null()),
        };
        // SAFETY: an fs context descriptor, NUL-terminated key and value (or null for a flag).
        let r = unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fs.as_raw_fd(),
                cmd,
                key.as_ptr(),
                ptr,
                0,
            )
        };
        check(r, &format!("fsconfig {}", key.to_string_lossy()), at).map(|_| ())
    };
    let escaped = |p: &Path, colon: bool| {
        let mut out = Vec::new();
        for &b in p.as_os_str().as_bytes() {
            if b == b'\\' || (colon && (b == b':' || b == b',')) {
                out.push(b'\\');
            }
            out.push(b);
        }
        out
    };
    if set(c"lowerdir+", Some(at.as_os_str().as_bytes())).is_err() {
        set(c"lowerdir", Some(&escaped(at, true)))?;
    }
    set(c"upperdir", Some(&escaped(upper, false)))?;
    set(c"workdir", Some(&escaped(work, false)))?;
    set(c"userxattr", None)?;
    // SAFETY: an fs context descriptor; no key or value for the create command.
    let r = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_char>(),
            0,
        )
    };
    check(r, "creating the overlay", at)?;
    // SAFETY: the configured context; flags and attributes per fsmount(2).
    let m = unsafe {
        libc::syscall(
            libc::SYS_fsmount,
            fs.as_raw_fd(),
            FSMOUNT_CLOEXEC,
            MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        )
    };
    let m = check(m, "fsmount overlay", at)?;
    // SAFETY: fsmount returned a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(m as RawFd) })
}

fn hide(p: &Path, notes: &mut Vec<String>) -> io::Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => mount_fs(
            "tmpfs",
            p,
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            "mode=000,size=4k",
        ),
        Ok(m) if m.is_file() => {
            let empty = Path::new("/tmp/.tern-empty");
            std::fs::write(empty, b"")?;
            let fd = clone_tree(empty)?;
            set_attr(Some(fd.as_raw_fd()), empty, MOUNT_ATTR_RDONLY, 0, false)?;
            let _ = std::fs::remove_file(empty);
            attach(&fd, p)
        }
        Ok(_) => {
            notes.push(format!(
                "{}: not a plain file or folder; not hidden",
                p.display()
            ));
            Ok(())
        }
        Err(_) => Ok(()),
    }
}

/// Creates the mount point of a copy when the path is gone under a cover (a workspace in `/tmp`
/// or in the home folder): folders for folders, an empty file for a file. Only tmpfs covers of
/// this jail can take it; on the read-only host tree it fails, and the copy is left out.
fn make_mountpoint(p: &Path, dir: bool) -> io::Result<()> {
    if std::fs::symlink_metadata(p).is_ok() {
        return Ok(());
    }
    if dir {
        std::fs::create_dir_all(p)
    } else {
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(p, b"")
    }
}

/// A minimal `/dev`: a tmpfs with the [`DEVICES`] bound from the host, the usual links, a
/// private `/dev/shm` and a `devpts` instance of the jail's own (so no terminal of the host's is
/// reachable), then read-only.
fn build_dev(devices: &[(&str, OwnedFd)]) -> io::Result<()> {
    let dev = Path::new("/dev");
    mount_fs("tmpfs", dev, libc::MS_NOSUID | libc::MS_NOEXEC, "mode=755")?;
    for (name, fd) in devices {
        let p = dev.join(name);
        std::fs::write(&p, b"")?;
        attach(fd, &p)?;
    }
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ] {
        std::os::unix::fs::symlink(target, dev.join(link))?;
    }
    let shm = dev.join("shm");
    std::fs::create_dir(&shm)?;
    mount_fs("tmpfs", &shm, libc::MS_NOSUID | libc::MS_NODEV, SHM_OPTIONS)?;
    let pts = dev.join("pts");
    std::fs::create_dir(&pts)?;
    // Best effort: a pty inside is a convenience (script, expect), not a need.
    let _ = mount_fs(
        "devpts",
        &pts,
        libc::MS_NOSUID | libc::MS_NOEXEC,
        "newinstance,ptmxmode=0666,mode=620",
    );
    set_attr(None, dev, MOUNT_ATTR_RDONLY, 0, false)
}

/// Re-attaches the writable draft file when tern replaced it since the last command (an atomic
/// rename gives it a new inode, and the old one's mount went with the old name): the current
/// file, as the read-only state folder shows it, is copied and made writable again. `last`
/// holds the inode the mount had.
pub(super) fn refresh_file(p: &Path, last: &mut Option<(u64, u64)>) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return Ok(());
    };
    if !m.is_file() {
        return Ok(());
    }
    let now = (m.dev(), m.ino());
    if *last == Some(now) {
        return Ok(());
    }
    let fd = clone_tree(p)?;
    set_attr(Some(fd.as_raw_fd()), p, 0, MOUNT_ATTR_RDONLY, false)?;
    attach(&fd, p)?;
    *last = Some(now);
    Ok(())
}

/// The inode at `p`, for [`refresh_file`].
pub(super) fn inode(p: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// Brings up the loopback interface of a new network namespace (`SIOCSIFFLAGS` with `IFF_UP`),
/// so a server and its client inside can still talk over 127.0.0.1.
pub(super) fn loopback_up() -> io::Result<()> {
    // SAFETY: a plain datagram socket for the ioctl; closed below by OwnedFd.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `s` was just created.
    let sock = unsafe { OwnedFd::from_raw_fd(s) };
    // SAFETY: an all-zero ifreq is valid; the name "lo" fits in IFNAMSIZ.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in b"lo".iter().enumerate() {
        req.ifr_name[i] = *b as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the ifreq we pass.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(io::Error::last_os_error());
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    /// A host where `dirs` are folders, `files` are files, and nothing else exists.
    fn plan_on(spec: &JailSpec, dirs: &[&str], files: &[&str], resolv: Option<&str>) -> Vec<Step> {
        let dirs: Vec<PathBuf> = dirs.iter().map(|d| p(d)).collect();
        let files: Vec<PathBuf> = files.iter().map(|f| p(f)).collect();
        let kind = move |q: &Path| {
            if dirs.iter().any(|d| d == q) {
                Some(true)
            } else if files.iter().any(|f| f == q) {
                Some(false)
            } else {
                None
            }
        };
        plan(
            spec,
            &Host {
                kind: &kind,
                resolv: resolv.map(p),
            },
        )
    }

    fn spec() -> JailSpec {
        JailSpec {
            writable: vec![p("/home/u/proj"), p("/tmp/tern-sandbox-1")],
            writable_files: vec![p("/home/u/proj/.tern/sessions/s/plan.draft.md")],
            read_only: vec![p("/home/u/proj/.tern"), p("/home/u/proj/.git/hooks")],
            readable: vec![p("/home/u/.cargo/bin")],
            home: Some(p("/home/u")),
            hidden: vec![p("/home/u/.ssh")],
            ..JailSpec::default()
        }
    }

    const HOST_DIRS: &[&str] = &[
        "/home/u",
        "/home/u/proj",
        "/tmp/tern-sandbox-1",
        "/home/u/proj/.tern",
        "/home/u/proj/.git/hooks",
        "/home/u/.cargo/bin",
        "/tmp",
        "/run",
    ];
    const HOST_FILES: &[&str] = &[
        "/home/u/proj/.tern/sessions/s/plan.draft.md",
        "/dev/null",
        "/dev/urandom",
    ];

    #[test]
    fn the_plan_copies_before_the_host_turns_read_only_and_attaches_parents_first() {
        let steps = plan_on(&spec(), HOST_DIRS, HOST_FILES, None);
        let copy = |s: &str, read_only| Step::Copy {
            path: p(s),
            read_only,
        };
        let at = |s: &str, dir| Step::Attach { path: p(s), dir };
        assert_eq!(
            steps,
            vec![
                Step::Private,
                copy("/home/u/proj", false),
                copy("/tmp/tern-sandbox-1", false),
                copy("/home/u/proj/.tern/sessions/s/plan.draft.md", false),
                copy("/home/u/proj/.tern", true),
                copy("/home/u/proj/.git/hooks", true),
                copy("/home/u/.cargo/bin", true),
                Step::Device("null"),
                Step::Device("urandom"),
                Step::HostReadOnly,
                Step::Cover {
                    path: p("/tmp"),
                    options: "mode=1777,size=1g"
                },
                Step::Cover {
                    path: p("/run"),
                    options: "mode=755,size=64m"
                },
                Step::Cover {
                    path: p("/home/u"),
                    options: HOME_COVER
                },
                Step::Dev,
                Step::Proc,
                at("/tmp/tern-sandbox-1", true),
                at("/home/u/proj", true),
                at("/home/u/proj/.tern", true),
                at("/home/u/.cargo/bin", true),
                at("/home/u/proj/.git/hooks", true),
                at("/home/u/proj/.tern/sessions/s/plan.draft.md", false),
                Step::Hide(p("/home/u/.ssh")),
            ]
        );
    }

    #[test]
    fn a_hidden_folder_that_only_holds_a_shown_one_under_the_home_cover_is_not_covered() {
        // `~/.config/tern` is hidden (keys), `~/.config/tern/skills` shown (issue 45): under
        // the home folder's cover the skills are attached and the tern folder is not covered
        // over them; `~/.ssh` is hidden as always.
        let mut s = spec();
        s.readable.push(p("/home/u/.config/tern/skills"));
        s.hidden.push(p("/home/u/.config/tern"));
        let mut dirs = HOST_DIRS.to_vec();
        dirs.push("/home/u/.config/tern/skills");
        let steps = plan_on(&s, &dirs, &[], None);
        assert!(steps.contains(&Step::Attach {
            path: p("/home/u/.config/tern/skills"),
            dir: true
        }));
        assert!(!steps.contains(&Step::Hide(p("/home/u/.config/tern"))));
        assert!(steps.contains(&Step::Hide(p("/home/u/.ssh"))));
        // Where the home folder shows (a workspace that holds it), the tern folder is hidden.
        s.writable = vec![p("/home")];
        let steps = plan_on(
            &s,
            &["/home", "/home/u", "/home/u/.config/tern/skills"],
            &[],
            None,
        );
        assert!(steps.contains(&Step::Hide(p("/home/u/.config/tern"))));
    }

    #[test]
    fn a_missing_path_is_left_out_with_a_note_and_never_attached() {
        let dirs: Vec<&str> = HOST_DIRS
            .iter()
            .copied()
            .filter(|d| *d != "/home/u/.cargo/bin")
            .collect();
        let steps = plan_on(&spec(), &dirs, HOST_FILES, None);
        assert!(steps.contains(&Step::Left(
            p("/home/u/.cargo/bin"),
            "not found; not in the jail".into()
        )));
        assert!(!steps.iter().any(|s| matches!(s,
            Step::Copy { path, .. } | Step::Attach { path, .. } if path == &p("/home/u/.cargo/bin"))));
    }

    #[test]
    fn a_home_inside_a_writable_root_is_not_covered() {
        let mut s = spec();
        s.writable[0] = p("/home");
        let steps = plan_on(&s, HOST_DIRS, HOST_FILES, None);
        assert!(!steps.contains(&Step::Cover {
            path: p("/home/u"),
            options: HOME_COVER
        }));
        // Credentials are still hidden (the view shows them otherwise).
        assert_eq!(steps.last(), Some(&Step::Hide(p("/home/u/.ssh"))));
        // A home under /tmp is hidden by /tmp's cover already: no cover of its own.
        let mut s = spec();
        s.home = Some(p("/tmp/h"));
        let mut dirs = HOST_DIRS.to_vec();
        dirs.push("/tmp/h");
        let steps = plan_on(&s, &dirs, HOST_FILES, None);
        assert!(!steps.contains(&Step::Cover {
            path: p("/tmp/h"),
            options: HOME_COVER
        }));
    }

    #[test]
    fn resolv_conf_under_a_cover_is_copied_read_only_and_put_back() {
        let mut files = HOST_FILES.to_vec();
        files.push("/run/systemd/resolve/stub-resolv.conf");
        let steps = plan_on(
            &spec(),
            HOST_DIRS,
            &files,
            Some("/run/systemd/resolve/stub-resolv.conf"),
        );
        let path = p("/run/systemd/resolve/stub-resolv.conf");
        let copied = steps.iter().position(|s| {
            *s == Step::Copy {
                path: path.clone(),
                read_only: true,
            }
        });
        let covered = steps.iter().position(|s| {
            *s == Step::Cover {
                path: p("/run"),
                options: "mode=755,size=64m",
            }
        });
        let attached = steps.iter().position(|s| {
            *s == Step::Attach {
                path: path.clone(),
                dir: false,
            }
        });
        assert!(copied < covered && covered < attached, "{steps:#?}");
    }
}
