//! The jail's own process: `tern __jail`, started by [`super::Jail::start`] with the control
//! socket as descriptor 3 and nothing else (no environment, no arguments beyond its name).
//!
//! Two processes: the **outer** one makes the namespaces (`unshare`), maps the person's uid and
//! gid, forks the **init** (PID 1 of the new PID namespace) and waits for it. The init builds the
//! file system view (`mounts.rs`), says `Ready`, then serves: each `Spawn` forks a command in a
//! session of its own, with no capability, `no_new_privs`, Landlock and seccomp; it reaps every
//! process that ends in the namespace (background jobs whose shell is gone included) and reports
//! the commands' exits. When the control socket closes (tern is gone), it exits, and the kernel
//! kills everything left in the namespace.
//!
//! Both are single-threaded from `main` on (this runs before tern's main does anything else),
//! so forking and running Rust code in the child is sound.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::wire::{self, Reader, Received, Writer};
use super::{JailSpec, mounts, seccomp};

/// Most processes and threads the jail's commands may have at once (`RLIMIT_NPROC` in the jail's
/// user namespace): far above a build's, far below a host's process table.
pub const MAX_PROCESSES: libc::rlim_t = 4096;

/// The descriptor of the control socket in the jail's processes.
pub const CONTROL_FD: RawFd = 3;

fn fail(ctl: RawFd, step: &str, e: &dyn std::fmt::Display) -> i32 {
    let mut w = Writer::default();
    w.u8(b'F')
        .bytes(step.as_bytes())
        .bytes(e.to_string().as_bytes());
    let _ = wire::send(ctl, &w.0, &[]);
    1
}

/// The jail's `main` (see the module docs); returns the exit code.
pub fn main() -> i32 {
    let ctl = CONTROL_FD;
    let spec = match wire::recv(ctl) {
        Ok(Received::Message(m, _)) => match JailSpec::decode(&mut Reader(&m)) {
            Ok(s) => s,
            Err(e) => return fail(ctl, "reading the jail's spec", &e),
        },
        Ok(Received::Closed) => return 1,
        Err(_) => return 1,
    };
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut flags =
        libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC;
    if spec.no_network {
        flags |= libc::CLONE_NEWNET;
    }
    // SAFETY: unshare(2) with namespace flags; single-threaded here, as it requires.
    if unsafe { libc::unshare(flags) } != 0 {
        return fail(
            ctl,
            "user namespace",
            &unshare_reason(io::Error::last_os_error()),
        );
    }
    for (file, text) in [
        ("/proc/self/setgroups", "deny".to_string()),
        ("/proc/self/uid_map", format!("{uid} {uid} 1")),
        ("/proc/self/gid_map", format!("{gid} {gid} 1")),
    ] {
        if let Err(e) = std::fs::write(file, text) {
            return fail(ctl, "user namespace", &format!("{file}: {e}"));
        }
    }
    // SAFETY: fork(2) in a single-threaded process; the child runs `serve` and exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return fail(ctl, "PID namespace", &io::Error::last_os_error());
    }
    if pid == 0 {
        let code = serve(ctl, &spec);
        // SAFETY: leaving the init without unwinding through the fork's copy of main.
        unsafe { libc::_exit(code) };
    }
    // SAFETY: closing our copy of the control socket; the init keeps its own.
    unsafe { libc::close(ctl) };
    loop {
        let mut status = 0;
        // SAFETY: waitpid on our one child with a valid status pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                1
            };
        }
        if r < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return 1;
        }
    }
}

/// The kernel's refusal of `unshare(CLONE_NEWUSER | …)`, said as the likely cause.
fn unshare_reason(e: io::Error) -> String {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let mut why = e.to_string();
    if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        why.push_str(" (kernel.unprivileged_userns_clone = 0)");
    } else if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        why.push_str(" (user.max_user_namespaces = 0)");
    } else if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1")
    {
        why.push_str(" (AppArmor restricts unprivileged user namespaces)");
    } else if e.raw_os_error() == Some(libc::EPERM) {
        why.push_str(" (inside a container, or user namespaces disabled)");
    }
    why
}

/// One command the init started.
struct Cmd {
    pid: i32,
    sock: OwnedFd,
    exited: bool,
}

/// PID 1 of the jail: builds the view, says Ready, serves until tern is gone.
fn serve(ctl: RawFd, spec: &JailSpec) -> i32 {
    let (notes, progs, sfd) = match set_up(ctl, spec) {
        Ok(x) => x,
        Err(code) => return code,
    };
    if !announce(ctl, spec, &notes, progs.is_some()) {
        return 1;
    }
    serve_commands(ctl, sfd, spec, progs.as_deref())
}

/// What a jail that stands holds: the notes (what is missing but not fatal), seccomp's
/// programs (None: not available here), the signalfd the init waits on.
type Ready = (Vec<String>, Option<Vec<seccompiler::BpfProgram>>, RawFd);

/// Builds the jail's walls (mounts, loopback, seccomp's programs) and the signalfd. Errors:
/// the exit code, the failure sent to tern first.
fn set_up(ctl: RawFd, spec: &JailSpec) -> Result<Ready, i32> {
    // SAFETY: prctl with integer arguments. The init dies with the outer process, and no
    // command may read its memory or /proc files (it holds the control socket).
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    let notes = match mounts::build(spec) {
        Ok(n) => n,
        Err(e) => return Err(fail(ctl, "mount namespace", &e)),
    };
    if spec.no_network
        && let Err(e) = mounts::loopback_up()
    {
        return Err(fail(ctl, "network namespace", &format!("loopback: {e}")));
    }
    let mut notes = notes;
    let progs = match seccomp::programs() {
        Ok(p) => Some(p),
        Err(e) => {
            notes.push(format!("seccomp: {e}"));
            None
        }
    };
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0);
    }
    // SIGCHLD through a signalfd, so one poll waits for tern, the commands and their exits.
    // SAFETY: a sigset built with sigemptyset/sigaddset, then blocked and handed to signalfd.
    let sfd = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC)
    };
    if sfd < 0 {
        return Err(fail(ctl, "PID namespace", &io::Error::last_os_error()));
    }
    // The control socket must not reach a command.
    // SAFETY: fcntl on our own descriptor.
    unsafe { libc::fcntl(ctl, libc::F_SETFD, libc::FD_CLOEXEC) };
    Ok((notes, progs, sfd))
}

/// Tells tern the jail is ready: which walls stand (bits) and the notes. Whether tern heard it.
fn announce(ctl: RawFd, spec: &JailSpec, notes: &[String], seccomp: bool) -> bool {
    let mut bits = 1 | 2 | 4 | 8;
    if spec.no_network {
        bits |= 16;
    }
    if seccomp {
        bits |= 32;
    }
    let mut w = Writer::default();
    w.u8(b'R')
        .u8(bits)
        .u32(u32::try_from(notes.len()).unwrap_or(0));
    for n in notes {
        w.bytes(n.as_bytes());
    }
    wire::send(ctl, &w.0, &[]).is_ok()
}

/// Serves tern's spawn requests and the commands' sockets until tern goes (exit 0).
fn serve_commands(
    ctl: RawFd,
    sfd: RawFd,
    spec: &JailSpec,
    progs: Option<&[seccompiler::BpfProgram]>,
) -> i32 {
    let mut draft_inode = spec.writable_files.first().and_then(|p| mounts::inode(p));
    let mut cmds: Vec<Cmd> = Vec::new();
    loop {
        let mut pfds = vec![
            libc::pollfd {
                fd: ctl,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: sfd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        pfds.extend(cmds.iter().map(|c| libc::pollfd {
            fd: c.sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }));
        // SAFETY: a valid array of pollfds and its length.
        let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, -1) };
        if r < 0 {
            continue;
        }
        if pfds[1].revents != 0 {
            let mut buf = [0u8; 128];
            // SAFETY: reading signalfd records into a buffer of their size; drained until EAGAIN.
            while unsafe { libc::read(sfd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
            reap(&mut cmds);
        }
        let mut closed = Vec::new();
        for (i, p) in pfds.iter().enumerate().skip(2) {
            if p.revents != 0 && !serve_cmd(&mut cmds[i - 2]) {
                closed.push(i - 2);
            }
        }
        for i in closed.into_iter().rev() {
            let c = cmds.remove(i);
            if !c.exited {
                // SAFETY: kill(2) of the command's group inside the jail.
                unsafe { libc::kill(-c.pid, libc::SIGKILL) };
            }
        }
        if pfds[0].revents != 0 {
            match wire::recv(ctl) {
                Ok(Received::Message(m, fds)) => {
                    let reply = match spawn(&m, fds, spec, &mut draft_inode, progs) {
                        Ok(c) => {
                            let mut w = Writer::default();
                            w.u8(b'P').i32(c.pid);
                            cmds.push(c);
                            w
                        }
                        Err(e) => {
                            let mut w = Writer::default();
                            w.u8(b'E').bytes(e.to_string().as_bytes());
                            w
                        }
                    };
                    if wire::send(ctl, &reply.0, &[]).is_err() {
                        return 0;
                    }
                }
                // tern is gone: leaving kills the namespace.
                Ok(Received::Closed) | Err(_) => return 0,
            }
        }
    }
}

/// Reaps every process that ended (PID 1 inherits the orphans) and reports the commands'.
fn reap(cmds: &mut [Cmd]) {
    loop {
        let mut status = 0;
        // SAFETY: waitpid for any child, non-blocking, with a valid status pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
        if let Some(c) = cmds.iter_mut().find(|c| c.pid == pid) {
            c.exited = true;
            let mut w = Writer::default();
            w.u8(b'X').i32(status);
            let _ = wire::send(c.sock.as_raw_fd(), &w.0, &[]);
        }
    }
}

/// One request on a command's socket; false when tern closed it.
fn serve_cmd(c: &mut Cmd) -> bool {
    let m = match wire::recv(c.sock.as_raw_fd()) {
        Ok(Received::Message(m, _)) => m,
        _ => return false,
    };
    let mut r = Reader(&m);
    match r.u8() {
        Ok(b'K') => {
            if let Ok(sig) = r.i32() {
                // SAFETY: kill(2) of the command's process group inside the jail.
                unsafe { libc::kill(-c.pid, sig) };
            }
        }
        Ok(b'A') => {
            // SAFETY: signal 0 only checks that a member of the group exists.
            let alive = unsafe { libc::kill(-c.pid, 0) } == 0;
            let mut w = Writer::default();
            w.u8(b'a').u8(u8::from(alive));
            let _ = wire::send(c.sock.as_raw_fd(), &w.0, &[]);
        }
        _ => {}
    }
    true
}

/// Starts one command (see [`super::Jail::spawn`] for the message).
fn spawn(
    m: &[u8],
    fds: Vec<OwnedFd>,
    spec: &JailSpec,
    draft_inode: &mut Option<(u64, u64)>,
    progs: Option<&[seccompiler::BpfProgram]>,
) -> io::Result<Cmd> {
    let mut r = Reader(m);
    if r.u8()? != b'X' {
        return Err(io::Error::other("not a spawn request"));
    }
    let program = PathBuf::from(r.os()?);
    let n = r.u32()? as usize;
    let mut args: Vec<OsString> = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        args.push(r.os()?);
    }
    let n = r.u32()? as usize;
    let mut env: Vec<(OsString, OsString)> = Vec::with_capacity(n.min(256));
    for _ in 0..n {
        env.push((r.os()?, r.os()?));
    }
    let cwd = PathBuf::from(r.os()?);
    let draft = r.paths()?.into_iter().next();
    let has_ruleset = r.u8()? != 0;
    let has_mcp = r.u8()? != 0;
    let has_stdin = r.u8()? != 0;
    let mut fds = fds.into_iter();
    let (Some(sock), Some(out), Some(err)) = (fds.next(), fds.next(), fds.next()) else {
        return Err(io::Error::other("a spawn request without its descriptors"));
    };
    let ruleset = if has_ruleset { fds.next() } else { None };
    let mcp = if has_mcp { fds.next() } else { None };
    let stdin = if has_stdin { fds.next() } else { None };
    let mcp_fd = mcp.as_ref().map(AsRawFd::as_raw_fd);
    let draft = draft.map(|d| std::fs::canonicalize(&d).unwrap_or(d));
    if let Some(d) = draft.filter(|d| spec.writable_files.contains(d)) {
        mounts::refresh_file(&d, draft_inode)?;
    }
    let ruleset_fd = ruleset.as_ref().map(AsRawFd::as_raw_fd);
    if let Some(fd) = ruleset_fd {
        // The jail's own `/dev/pts` (a devpts instance tern cannot name from the host): its
        // terminals are the command's to open (`openpty`, `script`, test runners), write_file
        // only.
        allow_beneath(fd, c"/dev/pts", 1 << 1);
        let bits = crate::sandbox::layer_rule_bits();
        for l in &spec.layers {
            if let Ok(at) = std::ffi::CString::new(l.at.as_os_str().as_encoded_bytes()) {
                allow_beneath(fd, &at, bits);
            }
        }
    }
    let progs: Option<Vec<seccompiler::BpfProgram>> = progs.map(<[_]>::to_vec);
    let mut cmd = Command::new(&program);
    cmd.args(&args)
        .env_clear()
        .envs(env)
        .current_dir(&cwd)
        .stdin(stdin.map_or_else(Stdio::null, Stdio::from))
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err));
    // SAFETY: the init is single-threaded, so the child may run ordinary code before exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(fd) = mcp_fd {
                crate::child::inherit(fd, super::CHANNEL_FD)?;
            }
            drop_capabilities()?;
            // A bound on the jail's processes (threads count too): a fork bomb stops at it
            // instead of filling the host's process table. Counted per user namespace, so
            // only the jail's own processes count (Linux 5.14 and later).
            let cap = libc::rlimit {
                rlim_cur: MAX_PROCESSES,
                rlim_max: MAX_PROCESSES,
            };
            if libc::setrlimit(libc::RLIMIT_NPROC, &cap) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(fd) = ruleset_fd
                && libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0
            {
                return Err(io::Error::last_os_error());
            }
            if let Some(p) = &progs {
                seccomp::install(p)?;
            }
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .map_err(|e| io::Error::other(format!("could not start {}: {e}", program.display())))?;
    drop(ruleset);
    drop(mcp);
    Ok(Cmd {
        pid: i32::try_from(child.id()).unwrap_or(i32::MAX),
        sock,
        exited: false,
    })
}

/// Adds a Landlock rule to `ruleset` granting `rights` beneath the folder `path` as this mount
/// namespace shows it (`/dev/pts` for a pseudo-terminal; the workspace's layer, whose overlayfs
/// inodes tern's own rule on the real workspace does not reach). Best effort: a rule the kernel
/// refuses leaves the right refused.
fn allow_beneath(ruleset: RawFd, path: &std::ffi::CStr, rights: u64) {
    const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
    #[repr(C, packed)]
    struct PathBeneath {
        allowed_access: u64,
        parent_fd: i32,
    }
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let dir = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dir < 0 {
        return;
    }
    let attr = PathBeneath {
        allowed_access: rights,
        parent_fd: dir,
    };
    // SAFETY: a ruleset descriptor, the rule type, a live packed attribute struct, no flags.
    unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneath,
            0u32,
        );
        libc::close(dir);
    }
}

fn drop_capabilities() -> io::Result<()> {
    // SAFETY: prctl and capset with integer arguments and valid header/data structs.
    unsafe {
        for cap in 0..64 {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let mut h = Header {
            version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
            pid: 0,
        };
        let d = [Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        if libc::syscall(libc::SYS_capset, &mut h as *mut Header, d.as_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
