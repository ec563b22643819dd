//! Processes and waiting: finding processes by command line in /proc, polling for a condition
//! or a child's exit within a bound (a hang check, never a speed claim), and reading a child's
//! pipe as it is written.
#![allow(dead_code)]

use std::io::Read;
use std::process::{Child, ExitStatus};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the waits below look again.
const POLL: Duration = Duration::from_millis(20);

/// Polls `done` until it holds (true) or `limit` has passed (false).
pub fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// Sends `sig` to `pid` and waits (up to 10 s) until it is no longer pending there: its
/// handler has run, so a second signal of the same kind is counted apart, not merged into this
/// one by the kernel (what a fixed sleep between two Ctrl-C could not promise under load).
/// False when it stayed pending.
pub fn signal_delivered(pid: u32, sig: i32) -> bool {
    let bit = 1u64 << (sig - 1);
    let pending = || {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .filter_map(|l| {
                l.strip_prefix("ShdPnd:")
                    .or_else(|| l.strip_prefix("SigPnd:"))
            })
            .filter_map(|v| u64::from_str_radix(v.trim(), 16).ok())
            .fold(0, |a, b| a | b)
    };
    // SAFETY: kill(2) with a pid and a signal number.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
    eventually(Duration::from_secs(10), || pending() & bit == 0)
}

/// Whether `pid` is blocked in `read(2)` on its standard input (`/proc/<pid>/syscall`: number
/// 0 on x86-64, 63 on aarch64; first argument 0). Where that file is closed to this user (tern
/// makes itself non-dumpable), whether it sleeps (`/proc/<pid>/stat` state `S`) at two looks
/// 50 ms apart.
pub fn reading_stdin(pid: u32) -> bool {
    let read_nr = if cfg!(target_arch = "aarch64") {
        "63"
    } else {
        "0"
    };
    match std::fs::read_to_string(format!("/proc/{pid}/syscall")) {
        Ok(s) => {
            let mut f = s.split_whitespace();
            f.next() == Some(read_nr) && f.next() == Some("0x0")
        }
        Err(_) => {
            let sleeping = || {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('S')))
            };
            sleeping() && {
                std::thread::sleep(Duration::from_millis(50));
                sleeping()
            }
        }
    }
}

/// Waits for `child` to exit within `limit`. On time-out it kills and reaps the child and
/// returns None (the caller fails the test with what it knows).
///
/// Woken by the child's pidfd (`pidfd_open(2)`, Linux 5.3) the moment it exits: the kill sweep
/// alone waits for some 9,000 runs, and a 20 ms polling step cost each of them ~10 ms of wall
/// time (issue 18, item 8). Polls as before where the kernel has no pidfd.
pub fn wait_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as libc::pid_t, 0) };
    if let Ok(fd) = i32::try_from(fd)
        && fd >= 0
    {
        // Some(true): exited; Some(false): the limit passed; None: poll failed (poll below).
        let exited = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
            // SAFETY: one valid pollfd, its count, a timeout in ms.
            let r = unsafe { libc::poll(&mut p, 1, ms) };
            if r > 0 {
                break Some(true);
            }
            if r == 0 {
                break Some(false);
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break None;
            }
        };
        // SAFETY: fd was opened above and is closed once.
        unsafe { libc::close(fd) };
        match exited {
            Some(true) => return child.wait().ok(),
            Some(false) => {
                if let Ok(Some(st)) = child.try_wait() {
                    return Some(st);
                }
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            None => {}
        }
    }
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(POLL);
    }
}

/// Pids of processes whose command line is exactly `argv`.
pub fn pids_running(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want) {
            out.push(pid);
        }
    }
    out
}

/// The processes whose command line contains `needle` (zombies have an empty one), each as
/// `"PID: command line"`.
pub fn procs_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            if c.contains(needle) {
                found.push(format!("{name}: {c}"));
            }
        }
    }
    found
}

/// The process group of `pid` (field 5 of /proc/PID/stat).
pub fn pgid_of(pid: u32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(2)?.parse().ok()
}

/// A child's pipe read by a background thread into a growing text, so a test can wait for
/// something to appear while the child keeps running.
pub struct Seen {
    text: Arc<Mutex<String>>,
    reader: JoinHandle<()>,
}

impl Seen {
    /// Starts reading `from` (lossy UTF-8) until EOF or an error.
    pub fn start(mut from: impl Read + Send + 'static) -> Seen {
        let text = Arc::new(Mutex::new(String::new()));
        let sink = text.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => sink
                        .lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n])),
                }
            }
        });
        Seen { text, reader }
    }

    /// Everything read so far.
    pub fn text(&self) -> String {
        self.text.lock().unwrap().clone()
    }

    /// Waits until the text contains `what`, failing the test (showing the text) after 20 s.
    pub fn wait_for(&self, what: &str) {
        let found = eventually(Duration::from_secs(20), || {
            self.text.lock().unwrap().contains(what)
        });
        assert!(found, "no {what:?}:\n{}", self.text());
    }

    /// Waits for EOF and returns the whole text.
    pub fn finish(self) -> String {
        self.reader.join().expect("reader thread");
        let text = self.text.lock().unwrap();
        text.clone()
    }
}

/// A TCP port on 127.0.0.1 that refuses connections for as long as the returned socket lives:
/// bound, never listening, so no other test's server can take the port meanwhile (a port
/// merely bound and closed can be reused at once by a server started in parallel).
pub fn refusing_port() -> (std::os::fd::OwnedFd, u16) {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket calls on a fresh descriptor owned by the returned OwnedFd.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let owned = std::os::fd::OwnedFd::from_raw_fd(fd);
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let rc = libc::bind(fd, (&raw const addr).cast(), len);
        assert_eq!(rc, 0, "bind: {}", std::io::Error::last_os_error());
        let mut got: libc::sockaddr_in = std::mem::zeroed();
        let mut glen = len;
        let rc = libc::getsockname(fd, (&raw mut got).cast(), &mut glen);
        assert_eq!(rc, 0, "getsockname: {}", std::io::Error::last_os_error());
        (owned, u16::from_be(got.sin_port))
    }
}
