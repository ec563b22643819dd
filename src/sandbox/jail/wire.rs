//! The jail's wire: a `SOCK_SEQPACKET` socket pair between tern and the jail's init, messages in
//! a small length-prefixed binary form, and file descriptors passed with `SCM_RIGHTS`.
//!
//! Why not JSON: paths and environment values are OS strings (a workspace path need not be
//! UTF-8), and JSON has no byte strings. Why packets: message boundaries stay intact, and a
//! peer that closes its end is seen as EOF at once (that EOF is how the jail learns that tern is
//! gone). A message longer than one packet goes as a sequence of [`CHUNK`]-byte packets whose
//! first one starts with the total length.

use std::ffi::OsString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

/// Bytes per packet (a message may span several).
pub const CHUNK: usize = 32 * 1024;
/// Largest message accepted (a command line, its environment): 16 MiB.
pub const MAX_MESSAGE: usize = 16 << 20;
/// Most descriptors one message carries.
pub const MAX_FDS: usize = 6;

/// A connected pair of close-on-exec `SOCK_SEQPACKET` sockets.
///
/// Errors: `socketpair(2)`'s.
pub fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors the call writes.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Sends `payload` on `sock`, with `fds` attached to its first packet.
///
/// Errors: the payload is over [`MAX_MESSAGE`], more than [`MAX_FDS`] descriptors, or
/// `sendmsg(2)` failed (`EPIPE` when the peer is gone).
pub fn send(sock: RawFd, payload: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if payload.len() > MAX_MESSAGE {
        return Err(io::Error::other(format!(
            "message of {} bytes is over the jail's limit of {MAX_MESSAGE}",
            payload.len()
        )));
    }
    if fds.len() > MAX_FDS {
        return Err(io::Error::other("too many descriptors for one message"));
    }
    let total = u32::try_from(payload.len()).map_err(io::Error::other)?;
    let mut first = Vec::with_capacity(4 + payload.len().min(CHUNK));
    first.extend_from_slice(&total.to_le_bytes());
    let head = payload.len().min(CHUNK);
    first.extend_from_slice(&payload[..head]);
    send_packet(sock, &first, fds)?;
    for chunk in payload[head..].chunks(CHUNK) {
        send_packet(sock, chunk, &[])?;
    }
    Ok(())
}

fn send_packet(sock: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // Room for MAX_FDS descriptors, aligned as cmsghdr needs.
    let mut cbuf = [0u64; 8];
    // SAFETY: an all-zero msghdr is a valid empty header; the pointers set below stay valid for
    // the call (iov, cbuf live on this stack frame).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let bytes = std::mem::size_of_val(fds);
        // SAFETY: CMSG_SPACE is a pure size computation.
        let space = unsafe { libc::CMSG_SPACE(bytes as u32) } as usize;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space;
        // SAFETY: the control buffer is large enough for one header with `fds` (checked by
        // MAX_FDS: 4 fds need 32 bytes of space, cbuf has 64); CMSG_FIRSTHDR of it is non-null.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(bytes as u32) as usize;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr(),
                libc::CMSG_DATA(c).cast::<RawFd>(),
                fds.len(),
            );
        }
    }
    loop {
        // SAFETY: `msg` describes valid buffers (above); MSG_NOSIGNAL turns a gone peer into
        // EPIPE instead of a signal.
        let r = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if r >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// What [`recv`] got.
pub enum Received {
    /// A whole message and the descriptors of its first packet (close-on-exec).
    Message(Vec<u8>, Vec<OwnedFd>),
    /// The peer closed its end.
    Closed,
}

/// Receives one whole message from `sock` (blocking; `EAGAIN` from a non-blocking socket is
/// returned as `WouldBlock` only before the first packet).
///
/// Errors: `recvmsg(2)`'s, a packet shorter than its length prefix, a message over
/// [`MAX_MESSAGE`], or the peer closing mid-message.
pub fn recv(sock: RawFd) -> io::Result<Received> {
    let mut buf = vec![0u8; CHUNK + 4];
    let (n, fds) = match recv_packet(sock, &mut buf)? {
        Some(x) => x,
        None => return Ok(Received::Closed),
    };
    if n < 4 {
        return Err(io::Error::other("a jail message without its length"));
    }
    let total = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if total > MAX_MESSAGE {
        return Err(io::Error::other("a jail message over the limit"));
    }
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&buf[4..n]);
    while out.len() < total {
        // The rest of a message follows at once; block for it even on a non-blocking socket.
        wait_readable(sock)?;
        match recv_packet(sock, &mut buf)? {
            Some((n, _)) => out.extend_from_slice(&buf[..n]),
            None => return Err(io::Error::other("the jail closed mid-message")),
        }
    }
    if out.len() != total {
        return Err(io::Error::other("a jail message longer than its length"));
    }
    Ok(Received::Message(out, fds))
}

fn wait_readable(sock: RawFd) -> io::Result<()> {
    let mut pfd = libc::pollfd {
        fd: sock,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut pfd, 1, -1) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

fn recv_packet(sock: RawFd, buf: &mut [u8]) -> io::Result<Option<(usize, Vec<OwnedFd>)>> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cbuf = [0u64; 8];
    loop {
        // SAFETY: as in send_packet: a zeroed header pointing at live buffers.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&cbuf);
        // SAFETY: `msg` describes valid buffers; MSG_CMSG_CLOEXEC makes received fds close-on-exec.
        let r = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let mut fds = Vec::new();
        // SAFETY: the kernel filled msg_control/msg_controllen; the CMSG macros walk it within
        // those bounds, and each SCM_RIGHTS payload holds whole descriptors now owned by us.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(c).cast::<RawFd>();
                    let len = (*c).cmsg_len - libc::CMSG_LEN(0) as usize;
                    for i in 0..len / std::mem::size_of::<RawFd>() {
                        fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::other("descriptors were cut from a jail message"));
        }
        if r == 0 && fds.is_empty() {
            return Ok(None);
        }
        return Ok(Some((r as usize, fds)));
    }
}

/// Builds a message: numbers little-endian, byte strings with a `u32` length.
#[derive(Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    /// Appends one byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    /// Appends a `u32`.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends an `i32`.
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a byte string.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        // Messages are bounded by MAX_MESSAGE (16 MiB), so a length always fits.
        self.u32(u32::try_from(v.len()).unwrap_or(u32::MAX));
        self.0.extend_from_slice(v);
        self
    }
    /// Appends a path or OS string.
    pub fn os(&mut self, v: &std::ffi::OsStr) -> &mut Self {
        self.bytes(v.as_bytes())
    }
    /// Appends a list of paths.
    pub fn paths(&mut self, v: &[PathBuf]) -> &mut Self {
        self.u32(u32::try_from(v.len()).unwrap_or(u32::MAX));
        for p in v {
            self.os(p.as_os_str());
        }
        self
    }
}

/// Reads a message built by [`Writer`]; every read fails cleanly on a short message.
pub struct Reader<'a>(pub &'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> io::Result<&[u8]> {
        if self.0.len() < n {
            return Err(io::Error::other("a short jail message"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    /// One byte.
    pub fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    /// A `u32`.
    pub fn u32(&mut self) -> io::Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// An `i32`.
    pub fn i32(&mut self) -> io::Result<i32> {
        let b = self.take(4)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// A byte string.
    pub fn bytes(&mut self) -> io::Result<Vec<u8>> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    /// An OS string.
    pub fn os(&mut self) -> io::Result<OsString> {
        Ok(OsString::from_vec(self.bytes()?))
    }
    /// A list of paths.
    pub fn paths(&mut self) -> io::Result<Vec<PathBuf>> {
        let n = self.u32()? as usize;
        let mut v = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            v.push(PathBuf::from(self.os()?));
        }
        Ok(v)
    }
}
