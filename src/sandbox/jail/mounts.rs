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

fn is_dir(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
}

/// What to attach after the covers.
struct Copy {
    path: PathBuf,
    fd: OwnedFd,
    dir: bool,
}

/// Depth of a path in components, for attaching parents before children.
fn depth(p: &Path) -> usize {
    p.components().count()
}

/// True when `p` is `root` or below it.
fn within(p: &Path, root: &Path) -> bool {
    p.starts_with(root)
}

/// Builds the view (see the module docs). Returns notes (a path left out and why), or the first
/// step that failed: the jail is then refused whole.
///
/// Errors: any mount step; the message names the step and the path.
pub(super) fn build(spec: &JailSpec) -> io::Result<Vec<String>> {
    let mut notes = Vec::new();
    let root = Path::new("/");
    // 1. Nothing propagates back to the host.
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

    // 2. Copies, taken before the host tree turns read-only (a copy keeps the flags it had).
    let mut copies: Vec<Copy> = Vec::new();
    let mut take = |p: &Path, read_only: bool, notes: &mut Vec<String>| -> io::Result<()> {
        let meta = match std::fs::symlink_metadata(p) {
            Ok(m) => m,
            Err(e) => {
                notes.push(format!("{}: {e}; not in the jail", p.display()));
                return Ok(());
            }
        };
        let fd = clone_tree(p)?;
        if read_only {
            set_attr(
                Some(fd.as_raw_fd()),
                p,
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                0,
                true,
            )?;
        }
        copies.push(Copy {
            path: p.to_path_buf(),
            fd,
            dir: meta.is_dir(),
        });
        Ok(())
    };
    for p in spec.writable.iter().chain(&spec.writable_files) {
        take(p, false, &mut notes)?;
    }
    for p in spec.read_only.iter().chain(&spec.readable) {
        take(p, true, &mut notes)?;
    }
    let mut devices = Vec::new();
    for d in DEVICES {
        let p = Path::new("/dev").join(d);
        if std::fs::symlink_metadata(&p).is_ok() {
            devices.push((d, clone_tree(&p)?));
        }
    }
    // /etc/resolv.conf often links into /run (systemd-resolved): keep its target visible.
    let resolv = std::fs::canonicalize("/etc/resolv.conf")
        .ok()
        .filter(|t| t.starts_with("/run") || t.starts_with("/tmp"));
    if let Some(t) = &resolv {
        take(t, true, &mut notes)?;
    }

    // 3. The host tree: read-only, no set-uid, no devices.
    set_attr(
        None,
        root,
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        0,
        true,
    )?;

    // 4. Covers.
    let tmpfs_flags = libc::MS_NOSUID | libc::MS_NODEV;
    for (p, mode) in [("/tmp", "1777"), ("/var/tmp", "1777"), ("/run", "755")] {
        let p = Path::new(p);
        if is_dir(p) {
            mount_fs("tmpfs", p, tmpfs_flags, &format!("mode={mode}"))?;
        }
    }
    if let Some(home) = &spec.home {
        // A home that holds or is a writable root stays (its credentials are covered in step 6).
        let holds_root = spec.writable.iter().any(|w| within(home, w));
        if is_dir(home) && !holds_root {
            mount_fs("tmpfs", home, tmpfs_flags, "mode=755")?;
        }
    }
    build_dev(&devices)?;
    mount_fs(
        "proc",
        Path::new("/proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        "",
    )?;

    // 5. The copies, parents first.
    copies.sort_by_key(|c| depth(&c.path));
    for c in &copies {
        if let Err(e) = make_mountpoint(&c.path, c.dir) {
            notes.push(format!("{}: {e}; not in the jail", c.path.display()));
            continue;
        }
        attach(&c.fd, &c.path)?;
    }

    // 6. Credentials, wherever they are still visible (a workspace that is the home folder).
    let empty = Path::new("/tmp/.tern-empty");
    std::fs::write(empty, b"")?;
    for p in &spec.hidden {
        match std::fs::symlink_metadata(p) {
            Ok(m) if m.is_dir() => mount_fs(
                "tmpfs",
                p,
                libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                "mode=000,size=4k",
            )?,
            Ok(m) if m.is_file() => {
                let fd = clone_tree(empty)?;
                set_attr(Some(fd.as_raw_fd()), empty, MOUNT_ATTR_RDONLY, 0, false)?;
                attach(&fd, p)?;
            }
            // A link or something else: covering it would follow it; leave a note.
            Ok(_) => notes.push(format!(
                "{}: not a plain file or folder; not hidden",
                p.display()
            )),
            Err(_) => {}
        }
    }
    let _ = std::fs::remove_file(empty);
    Ok(notes)
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
    mount_fs("tmpfs", &shm, libc::MS_NOSUID | libc::MS_NODEV, "mode=1777")?;
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
