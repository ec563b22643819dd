//! How a command reaches its session's tern: an inherited descriptor, never a path. The runtime
//! makes a `SOCK_SEQPACKET` pair and gives one end to every command it starts, at descriptor
//! [`FD`] (named by [`ENV`]); nothing else holds it, so only the session's own commands (in the
//! jail or not) can ask. A `tern mcp` in a command makes a private pair per question, sends one
//! end over the inherited descriptor, then asks and reads the reply on its own end; a thread of
//! the session's tern answers each through the session's [`Hub`] (hooks and events included).
//!
//! The messages are the jail's wire (`sandbox::jail::wire`): a [`super::Verb`] as JSON one way,
//! a [`super::Reply`] as JSON the other.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{Hub, Reply, Verb};
use crate::sandbox::jail::wire::{self, Received};

/// The descriptor commands find the channel at (the jail's and the local spawn's
/// [`crate::sandbox::jail::CHANNEL_FD`]).
pub const FD: RawFd = crate::sandbox::jail::CHANNEL_FD;
/// The variable that tells a command the channel is there (its value: [`FD`]).
pub const ENV: &str = "TERN_MCP_FD";
/// Largest arguments `tern mcp call` takes, in bytes (they travel in one message).
pub const MAX_ARGUMENT_BYTES: usize = 8 << 20;
/// Questions read at once (one thread each); more are answered "busy" (exit
/// [`super::BUSY_EXIT`]) after their question is read, never dropped. Calls to one server wait
/// for a place among its [`super::PER_SERVER`].
const MAX_OPEN: usize = 128;
/// The greeting that carries a question's descriptor.
const HELLO: &[u8] = b"tern-mcp/1";

/// The session's end of the channel and the thread that answers on it.
pub struct Channel {
    theirs: OwnedFd,
    ours: Arc<OwnedFd>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Channel {
    /// Opens the channel and starts its thread, which answers through `hub`.
    ///
    /// Errors: the socket pair or the thread could not be made.
    pub fn open(hub: Arc<Hub>) -> io::Result<Channel> {
        let (ours, theirs) = wire::pair()?;
        let ours = Arc::new(ours);
        let listen = ours.clone();
        let open = Arc::new(AtomicUsize::new(0));
        let thread = std::thread::Builder::new()
            .name("tern-mcp".into())
            .spawn(move || {
                loop {
                    match wire::recv(listen.as_raw_fd()) {
                        Ok(Received::Message(m, fds)) if m == HELLO => {
                            for fd in fds {
                                let (hub, open, undo) = (hub.clone(), open.clone(), open.clone());
                                if open.fetch_add(1, Ordering::SeqCst) >= MAX_OPEN {
                                    open.fetch_sub(1, Ordering::SeqCst);
                                    // Its question is read first (the caller is writing it: a
                                    // reply before would meet a closed socket there).
                                    refuse_busy(&fd);
                                    continue;
                                }
                                let spawned = std::thread::Builder::new()
                                    .name("tern-mcp-call".into())
                                    .spawn(move || {
                                        answer(&hub, &fd);
                                        open.fetch_sub(1, Ordering::SeqCst);
                                    });
                                if spawned.is_err() {
                                    // The place of a thread that never ran.
                                    undo.fetch_sub(1, Ordering::SeqCst);
                                }
                            }
                        }
                        Ok(Received::Message(..)) => {}
                        Ok(Received::Closed) | Err(_) => return,
                    }
                }
            })?;
        Ok(Channel {
            theirs,
            ours,
            thread: Some(thread),
        })
    }

    /// The descriptor to give every command (at [`FD`]).
    pub fn fd(&self) -> RawFd {
        self.theirs.as_raw_fd()
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: shutdown(2) of our own socket: the thread's recv returns and it leaves.
        unsafe {
            libc::shutdown(self.ours.as_raw_fd(), libc::SHUT_RDWR);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn reply(fd: RawFd, r: &Reply) -> io::Result<()> {
    let mut bytes = serde_json::to_vec(r).map_err(io::Error::other)?;
    if bytes.len() > wire::MAX_MESSAGE {
        // Over the wire's limit: the text is cut, and says so.
        let mut cut = r.clone();
        let keep = wire::MAX_MESSAGE / 2;
        cut.stdout = format!(
            "{}\n[cut: the answer was larger than {} bytes; ask for less, or write it to a file with the tool's own options]\n",
            crate::text::cut(&r.stdout, keep),
            wire::MAX_MESSAGE
        );
        cut.stderr = crate::text::cut(&r.stderr, 4096).to_string();
        bytes = serde_json::to_vec(&cut).map_err(io::Error::other)?;
    }
    wire::send(fd, &bytes, &[])
}

/// Reads the question on `fd` (waiting a second at most) and answers it "busy".
fn refuse_busy(fd: &OwnedFd) {
    set_timeout(fd, 1);
    let _ = wire::recv(fd.as_raw_fd());
    let r = Reply::fail(
        super::BUSY_EXIT,
        &format!(
            "busy: more than {MAX_OPEN} MCP questions at once from this session's commands; try again"
        ),
    );
    let _ = reply(fd.as_raw_fd(), &r);
}

/// A receive timeout of `secs` on our own socket `fd`.
fn set_timeout(fd: &OwnedFd, secs: libc::time_t) {
    let tv = libc::timeval {
        tv_sec: secs,
        tv_usec: 0,
    };
    // SAFETY: setsockopt on our own socket with a valid timeval and its size.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
    }
}

/// Whether the asker at the other end of `fd` went away (its `tern mcp call` killed: its end
/// of the pair closed).
fn asker_gone(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: poll(2) of one valid pollfd, not waiting.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR) != 0
}

/// Answers one question on `fd`.
fn answer(hub: &Hub, fd: &OwnedFd) {
    // A question that never comes does not hold a thread for ever.
    set_timeout(fd, 30);
    let r = match wire::recv(fd.as_raw_fd()) {
        Ok(Received::Message(m, _)) => match serde_json::from_slice::<Verb>(&m) {
            Ok(verb) => hub.run_watching(&verb, &|| asker_gone(fd.as_raw_fd())),
            Err(e) => Reply::fail(2, &format!("a question tern does not understand: {e}")),
        },
        Ok(Received::Closed) | Err(_) => return,
    };
    let _ = reply(fd.as_raw_fd(), &r);
}

/// Asks the session's tern through the inherited channel `fd` (a command's `tern mcp`).
///
/// Errors: the descriptor is not the channel (closed by the command, or never given), or the
/// session's tern went away.
pub fn ask(fd: RawFd, verb: &Verb) -> io::Result<Reply> {
    let (mine, theirs) = wire::pair()?;
    wire::send(fd, HELLO, &[theirs.as_raw_fd()])?;
    drop(theirs);
    let q = serde_json::to_vec(verb).map_err(io::Error::other)?;
    wire::send(mine.as_raw_fd(), &q, &[])?;
    match wire::recv(mine.as_raw_fd())? {
        Received::Message(m, _) => serde_json::from_slice(&m).map_err(io::Error::other),
        Received::Closed => Err(io::Error::other("the session's tern closed the channel")),
    }
}

/// The channel of this process, when [`ENV`] names one and the descriptor there is a socket.
pub fn inherited(value: Option<&str>) -> Option<RawFd> {
    let fd: RawFd = value?.trim().parse().ok()?;
    if fd < 3 {
        return None;
    }
    // SAFETY: fstat on a descriptor number; a closed one fails with EBADF.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::fstat(fd, &mut st) } == 0;
    (ok && st.st_mode & libc::S_IFMT == libc::S_IFSOCK).then_some(fd)
}

/// `PATH` with the folder of `exe` (this tern) put first when the `tern` that `PATH` finds is
/// not this one (none, or another build without `tern mcp`), so a command's `tern mcp` is the
/// session's own tern. None: `PATH` finds this tern already, or `exe` is not a `tern`.
pub fn path_with_tern(exe: Option<&std::path::Path>) -> Option<std::ffi::OsString> {
    let exe = exe?;
    let dir = exe.parent()?;
    if exe.file_name() != Some(std::ffi::OsStr::new("tern")) {
        return None;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let same =
        |p: &std::path::Path| std::fs::canonicalize(p).ok() == std::fs::canonicalize(exe).ok();
    let first = std::env::split_paths(&path)
        .map(|d| d.join("tern"))
        .find(|p| p.is_file());
    if first.as_deref().is_some_and(same) {
        return None;
    }
    let mut dirs = vec![dir.to_path_buf()];
    dirs.extend(std::env::split_paths(&path));
    std::env::join_paths(dirs).ok()
}
