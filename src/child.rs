//! The one supervised-child runner (DESIGN §1, §12): a program in a process group of its own
//! that dies with tern (`PR_SET_PDEATHSIG`), registered for the emergency exit while it runs,
//! stopped at its time limit or when its cancel token fires (SIGTERM to the group, SIGKILL after
//! a grace), and whose output is read without ever blocking on a pipe that a background job
//! still holds.
//!
//! Two levels:
//! - [`run`]: the whole thing for a program whose output is kept in memory (hooks,
//!   `api_key_command`, git): stdin from bytes (written from a thread) or `/dev/null`, stdout
//!   and stderr read apart on threads, each kept up to a cap (the rest read and dropped).
//! - [`spawn`] + [`supervise`]: for a caller that streams the output itself (the bash tool
//!   shapes and spills it); `supervise`'s `pump` reads whatever is ready.
//!
//! The time decisions are the pure [`Phase`] machine ([`step`]), unit-tested as data.

use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use crate::cancel::CancelToken;
use crate::procs::{ProcessGroups, Registered};

/// How long [`supervise`] waits for output in one `pump` call while the child runs: also how
/// often the time limit and the cancel token are checked.
pub const POLL_SLICE: Duration = Duration::from_millis(50);

/// A supervised process: a local child, or one a jail's init started for tern.
pub trait Process {
    /// Its exit status once it has exited (reaped); an error when it cannot be waited for.
    fn try_wait(&mut self) -> Option<Result<ExitStatus, String>>;
    /// Signals its whole process group.
    fn signal_group(&mut self, sig: libc::c_int);
    /// Whether a live process is still in its group (asked only after it exited).
    fn group_alive(&mut self) -> bool;
}

/// A child of tern, leader of its own process group (see [`spawn`]).
#[derive(Debug)]
pub struct Local<'g> {
    child: Child,
    pgid: libc::pid_t,
    _registered: Option<Registered<'g>>,
}

impl Local<'_> {
    /// The child (its pipes, its pid).
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Its process group id (its pid).
    pub fn pgid(&self) -> libc::pid_t {
        self.pgid
    }

    /// Reaps it on a thread of its own whenever the kernel lets it go (a child that did not
    /// die after SIGKILL within the reap limit must not stay a zombie).
    pub fn reap_later(self) {
        let mut child = self.child;
        std::thread::spawn(move || child.wait());
    }
}

impl Process for Local<'_> {
    fn try_wait(&mut self) -> Option<Result<ExitStatus, String>> {
        match self.child.try_wait() {
            Ok(Some(s)) => Some(Ok(s)),
            Ok(None) => None,
            Err(e) => Some(Err(e.to_string())),
        }
    }

    fn signal_group(&mut self, sig: libc::c_int) {
        signal_group(self.pgid, sig);
    }

    fn group_alive(&mut self) -> bool {
        group_alive(self.pgid)
    }
}

/// What [`spawn`] sets up in the child besides its own process group.
#[derive(Debug, Clone, Copy, Default)]
pub struct Harden {
    /// Drop `CAP_SYS_PTRACE` from the bounding set, so neither the child nor anything it execs
    /// can read tern's memory through `/proc` (the model's commands).
    pub no_ptrace: bool,
}

/// Starts `cmd` as the leader of a new session and process group (`setsid`), killed by the
/// kernel when tern dies (`PR_SET_PDEATHSIG`; a child forked just as tern died refuses to run),
/// then runs `extra` (a sandbox's last step) just before exec. The group is registered in
/// `groups` until the returned value drops.
///
/// `extra` runs in the forked child: it must only make async-signal-safe system calls.
///
/// Errors: the program could not start (as `Command::spawn`).
pub fn spawn<'g, F>(
    cmd: &mut Command,
    harden: Harden,
    groups: Option<&'g ProcessGroups>,
    mut extra: F,
) -> io::Result<Local<'g>>
where
    F: FnMut() -> io::Result<()> + Send + Sync + 'static,
{
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec and only makes system calls that
    // are async-signal-safe: setsid(2), prctl(2), getppid(2), then `extra` (whose contract says
    // the same); it allocates nothing and touches no lock.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() == -1 {
                return Err(io::Error::last_os_error());
            }
            #[cfg(target_os = "linux")]
            {
                if harden.no_ptrace {
                    // CAP_SYS_PTRACE is 19 (capability(7)); fails harmlessly without CAP_SETPCAP.
                    libc::prctl(libc::PR_CAPBSET_DROP, 19, 0, 0, 0);
                }
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                // tern died between the fork and the prctl: do not run orphaned.
                if libc::getppid() as u32 != parent {
                    return Err(io::Error::other("tern exited"));
                }
            }
            #[cfg(not(target_os = "linux"))]
            let _ = (parent, harden);
            extra()
        });
    }
    let child = cmd.spawn()?;
    // setsid made the child the leader of a new process group whose id is its pid. Linux pids
    // fit in pid_t; the fallback names no group, so signals to it would do nothing.
    let pgid = libc::pid_t::try_from(child.id()).unwrap_or(libc::pid_t::MAX);
    Ok(Local {
        child,
        pgid,
        _registered: groups.map(|g| g.register(pgid)),
    })
}

/// The time rules of one supervision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall time from the start; None: no limit.
    pub timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL to the group.
    pub kill_grace: Duration,
    /// How long output is still read after the child exited while a background process holds
    /// the pipe (and after SIGKILL while the group's last processes go).
    pub drain_grace: Duration,
    /// How long a child that does not exit after SIGKILL is waited for.
    pub reap_limit: Duration,
}

/// Why a supervision stopped the child.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    /// Its time limit passed.
    Timeout,
    /// Its cancel token fired, this long after the start.
    Interrupt(Duration),
}

/// Where a supervision stands.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Phase {
    /// Running untouched.
    Running,
    /// SIGTERM sent at this moment.
    Terminating(Instant),
    /// SIGKILL sent at this moment.
    Killed(Instant),
}

/// What the supervisor sees at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seen {
    /// Now.
    pub now: Instant,
    /// When the child was seen to exit, if it was.
    pub exited_at: Option<Instant>,
    /// The output pipe is still open.
    pub output_open: bool,
    /// The deadline passed.
    pub timed_out: bool,
    /// The cancel token fired.
    pub cancelled: bool,
    /// A live process is left in the group (asked only when it matters).
    pub group_alive: bool,
}

/// One decision of the supervisor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    /// Nothing to do yet.
    Wait,
    /// Send this signal to the group and move to this phase.
    Signal(libc::c_int, Phase, Option<Stop>),
    /// Move to this phase without a signal (the group is gone).
    Enter(Phase),
    /// Done: return.
    Finish,
    /// The child did not exit after SIGKILL within the reap limit: return without it.
    GiveUp,
}

/// The supervisor's rule, pure: given the phase and what is seen, what to do. `start` is when
/// the child started.
pub fn step(phase: Phase, seen: &Seen, start: Instant, limits: &Limits) -> Action {
    match phase {
        Phase::Running => match seen.exited_at {
            Some(at) => {
                if !seen.output_open || seen.now.duration_since(at) >= limits.drain_grace {
                    Action::Finish
                } else {
                    Action::Wait
                }
            }
            None if seen.cancelled => Action::Signal(
                libc::SIGTERM,
                Phase::Terminating(seen.now),
                Some(Stop::Interrupt(seen.now.duration_since(start))),
            ),
            None if seen.timed_out => Action::Signal(
                libc::SIGTERM,
                Phase::Terminating(seen.now),
                Some(Stop::Timeout),
            ),
            None => Action::Wait,
        },
        Phase::Terminating(since) => {
            if seen.exited_at.is_some() && !seen.group_alive {
                Action::Enter(Phase::Killed(seen.now))
            } else if seen.now.duration_since(since) >= limits.kill_grace {
                Action::Signal(libc::SIGKILL, Phase::Killed(seen.now), None)
            } else {
                Action::Wait
            }
        }
        Phase::Killed(since) => {
            let waited = seen.now.duration_since(since);
            if seen.exited_at.is_some() {
                if (!seen.output_open && !seen.group_alive) || waited >= limits.drain_grace {
                    Action::Finish
                } else {
                    Action::Wait
                }
            } else if waited >= limits.reap_limit {
                Action::GiveUp
            } else {
                Action::Wait
            }
        }
    }
}

/// How a supervision ended.
#[derive(Debug)]
pub struct Watched {
    /// The exit status (None: it did not exit after SIGKILL within the reap limit).
    pub status: Option<Result<ExitStatus, String>>,
    /// Why tern stopped it, if it did.
    pub stop: Option<Stop>,
    /// The output pipe was still open at the end (a background process holds it).
    pub output_open: bool,
}

/// Supervises `proc` (started at `start`) until it exited and its output closed (or the drain
/// grace passed), stopping its group at the time limit or when `cancel` fires. `pump(wait)`
/// reads whatever output is ready, waiting at most `wait`, and says whether the output is
/// still open; it is called while it is.
pub fn supervise(
    proc: &mut dyn Process,
    start: Instant,
    limits: &Limits,
    cancel: Option<&CancelToken>,
    pump: &mut dyn FnMut(Duration) -> bool,
) -> Watched {
    let deadline = limits.timeout.map(|t| start + t);
    let mut output_open = true;
    let mut exited: Option<(Instant, Result<ExitStatus, String>)> = None;
    let mut stop = None;
    let mut phase = Phase::Running;
    // Sleep between checks once the pipe is closed. The kernel closes a dying child's files a
    // moment before it can be reaped, so the first checks come quickly, then back off.
    let mut closed_wait = Duration::from_micros(100);
    loop {
        if output_open {
            output_open = pump(POLL_SLICE);
        } else {
            std::thread::sleep(closed_wait);
            closed_wait = (closed_wait * 2).min(POLL_SLICE / 5);
        }
        if exited.is_none()
            && let Some(status) = proc.try_wait()
        {
            exited = Some((Instant::now(), status));
        }
        let now = Instant::now();
        // The group is asked about only where the rule reads it (each look reads /proc).
        let asks_group = !matches!(phase, Phase::Running) && exited.is_some();
        let seen = Seen {
            now,
            exited_at: exited.as_ref().map(|(at, _)| *at),
            output_open,
            timed_out: deadline.is_some_and(|d| now >= d),
            cancelled: cancel.is_some_and(CancelToken::is_cancelled),
            group_alive: asks_group && proc.group_alive(),
        };
        match step(phase, &seen, start, limits) {
            Action::Wait => {}
            Action::Signal(sig, next, why) => {
                proc.signal_group(sig);
                phase = next;
                stop = stop.or(why);
            }
            Action::Enter(next) => phase = next,
            Action::Finish => break,
            Action::GiveUp => {
                return Watched {
                    status: None,
                    stop,
                    output_open,
                };
            }
        }
    }
    Watched {
        status: exited.map(|(_, s)| s),
        stop,
        output_open,
    }
}

/// Where a [`run`] child's stderr goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stderr {
    /// Read and kept apart from stdout.
    Keep,
    /// tern's own stderr (the person sees it).
    Inherit,
}

/// One program to run to its end with [`run`].
pub struct Job<'a> {
    /// The program, its arguments, environment and folder (stdin and the pipes are set here).
    pub cmd: Command,
    /// Bytes written to its stdin (from a thread: a child that never reads must not block
    /// tern); None: `/dev/null`.
    pub input: Option<&'a [u8]>,
    /// Where its stderr goes.
    pub stderr: Stderr,
    /// Bytes kept of stdout and of stderr each (the rest is read and dropped).
    pub max_output: usize,
    /// Its time rules.
    pub limits: Limits,
    /// Stops it early.
    pub cancel: Option<&'a CancelToken>,
    /// Where its group is registered while it runs.
    pub groups: Option<&'a ProcessGroups>,
    /// Kill what it left running in its group once it exited (a key command's background
    /// job); a stopped child's group is always killed.
    pub kill_leftovers: bool,
}

/// How a [`run`] ended.
#[derive(Debug)]
pub struct Output {
    /// The exit status (None: never reaped).
    pub status: Option<ExitStatus>,
    /// Its stdout, up to the cap.
    pub stdout: Vec<u8>,
    /// Its stderr, up to the cap (empty when inherited).
    pub stderr: Vec<u8>,
    /// Why tern stopped it, if it did.
    pub stop: Option<Stop>,
    /// Wall time.
    pub duration: Duration,
}

/// Runs `job` to its end (see the module docs).
///
/// Errors: the program could not start, or could not be waited for.
pub fn run(job: Job<'_>) -> io::Result<Output> {
    let start = Instant::now();
    let Job {
        mut cmd,
        input,
        stderr,
        max_output,
        limits,
        cancel,
        groups,
        kill_leftovers,
    } = job;
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(match stderr {
        Stderr::Keep => Stdio::piped(),
        Stderr::Inherit => Stdio::inherit(),
    });
    let mut local = spawn(&mut cmd, Harden::default(), groups, || Ok(()))?;
    drop(cmd);
    let child = local.child_mut();
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        let bytes = bytes.to_vec();
        std::thread::spawn(move || {
            let _ = stdin.write_all(&bytes);
        });
    }
    // Each pipe is read on a thread into a shared buffer (so what came before a background job
    // took over the pipe is kept when the child's end is not waited for), which says when it
    // reached the end.
    let (tx, rx) = mpsc::channel::<()>();
    let kept = [
        Arc::new(Mutex::new(Vec::new())),
        Arc::new(Mutex::new(Vec::new())),
    ];
    let mut readers = 0;
    let pipes: [Option<Box<dyn Read + Send>>; 2] = [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    ];
    for (pipe, into) in pipes.into_iter().zip(&kept) {
        let Some(pipe) = pipe else { continue };
        readers += 1;
        let (tx, into) = (tx.clone(), into.clone());
        std::thread::spawn(move || {
            read_capped(pipe, max_output, &into);
            let _ = tx.send(());
        });
    }
    drop(tx);
    let mut pump = |wait: Duration| {
        if readers == 0 {
            return false;
        }
        match rx.recv_timeout(wait) {
            Ok(()) => readers -= 1,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => readers = 0,
        }
        readers > 0
    };
    let watched = supervise(&mut local, start, &limits, cancel, &mut pump);
    if watched.stop.is_some() || kill_leftovers {
        // What it started dies with it.
        local.signal_group(libc::SIGKILL);
    }
    let status = match watched.status {
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => return Err(io::Error::other(e)),
        None => {
            local.reap_later();
            None
        }
    };
    let take =
        |k: &Arc<Mutex<Vec<u8>>>| std::mem::take(&mut *k.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(Output {
        status,
        stdout: take(&kept[0]),
        stderr: take(&kept[1]),
        stop: watched.stop,
        duration: start.elapsed(),
    })
}

/// Reads `pipe` to its end, keeping the first `max` bytes in `into`.
fn read_capped(mut pipe: Box<dyn Read + Send>, max: usize, into: &Mutex<Vec<u8>>) {
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let mut kept = into.lock().unwrap_or_else(|p| p.into_inner());
                let room = max.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
}

/// Signals the process group `pgid`.
pub fn signal_group(pgid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill(2) with a negative pid signals that process group; no memory is involved.
    // ESRCH (the group is already gone) is the only expected failure and needs no action.
    unsafe {
        libc::kill(-pgid, sig);
    }
}

/// True while a live process is in the group. Called only once the leader was reaped: the
/// group's orphans that tern (the subreaper) inherited and that died are reaped first, and a
/// zombie left to another parent does not count, so a cancel answers as soon as the group is
/// dead (issue 21: it waited out the kill grace for a zombie PID 1 never reaped).
pub fn group_alive(pgid: libc::pid_t) -> bool {
    crate::procs::reap_group(pgid);
    crate::procs::group_alive(pgid)
}

/// Makes `fd` the descriptor `at` of a forked child before exec, inherited by what it runs (the
/// session's channel, `crate::mcp::channel`). Async-signal-safe: dup2(2) and fcntl(2) only.
///
/// Errors: the system call's.
pub fn inherit(fd: std::os::fd::RawFd, at: std::os::fd::RawFd) -> io::Result<()> {
    // SAFETY: dup2 / fcntl on descriptors this process holds; nothing allocates.
    unsafe {
        if fd == at {
            // Already there: only its close-on-exec flag goes.
            if libc::fcntl(at, libc::F_SETFD, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
        } else if libc::dup2(fd, at) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Limits = Limits {
        timeout: Some(Duration::from_secs(10)),
        kill_grace: Duration::from_secs(2),
        drain_grace: Duration::from_millis(200),
        reap_limit: Duration::from_secs(5),
    };

    fn seen(now: Instant) -> Seen {
        Seen {
            now,
            exited_at: None,
            output_open: true,
            timed_out: false,
            cancelled: false,
            group_alive: true,
        }
    }

    #[test]
    fn a_running_child_is_stopped_by_its_deadline_or_its_cancel() {
        let t0 = Instant::now();
        let now = t0 + Duration::from_secs(3);
        assert_eq!(step(Phase::Running, &seen(now), t0, &L), Action::Wait);
        let late = Seen {
            timed_out: true,
            ..seen(now)
        };
        assert_eq!(
            step(Phase::Running, &late, t0, &L),
            Action::Signal(libc::SIGTERM, Phase::Terminating(now), Some(Stop::Timeout))
        );
        let cancelled = Seen {
            cancelled: true,
            timed_out: true,
            ..seen(now)
        };
        assert_eq!(
            step(Phase::Running, &cancelled, t0, &L),
            Action::Signal(
                libc::SIGTERM,
                Phase::Terminating(now),
                Some(Stop::Interrupt(Duration::from_secs(3)))
            ),
            "a cancel is the person's, even past the deadline"
        );
    }

    #[test]
    fn an_exited_child_waits_for_its_output_only_the_drain_grace() {
        let t0 = Instant::now();
        let exit = t0 + Duration::from_secs(1);
        let held = Seen {
            exited_at: Some(exit),
            ..seen(exit + Duration::from_millis(100))
        };
        assert_eq!(step(Phase::Running, &held, t0, &L), Action::Wait);
        let past = Seen {
            now: exit + Duration::from_millis(200),
            ..held
        };
        assert_eq!(step(Phase::Running, &past, t0, &L), Action::Finish);
        let closed = Seen {
            output_open: false,
            ..held
        };
        assert_eq!(step(Phase::Running, &closed, t0, &L), Action::Finish);
    }

    #[test]
    fn sigkill_follows_the_grace_unless_the_group_is_gone() {
        let t0 = Instant::now();
        let term = t0 + Duration::from_secs(10);
        let still = seen(term + Duration::from_secs(1));
        assert_eq!(step(Phase::Terminating(term), &still, t0, &L), Action::Wait);
        let graced = seen(term + Duration::from_secs(2));
        assert_eq!(
            step(Phase::Terminating(term), &graced, t0, &L),
            Action::Signal(libc::SIGKILL, Phase::Killed(graced.now), None)
        );
        let gone = Seen {
            exited_at: Some(term),
            group_alive: false,
            ..still
        };
        assert_eq!(
            step(Phase::Terminating(term), &gone, t0, &L),
            Action::Enter(Phase::Killed(gone.now))
        );
        let never = seen(term + Duration::from_secs(5));
        assert_eq!(step(Phase::Killed(term), &never, t0, &L), Action::GiveUp);
    }

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    fn job<'a>(cmd: Command, input: Option<&'a [u8]>, timeout: u64) -> Job<'a> {
        Job {
            cmd,
            input,
            stderr: Stderr::Keep,
            max_output: 16,
            limits: Limits {
                timeout: Some(Duration::from_secs(timeout)),
                ..L
            },
            cancel: None,
            groups: None,
            kill_leftovers: false,
        }
    }

    #[test]
    fn run_keeps_the_streams_apart_and_bounded() {
        let o = run(job(
            sh("cat; echo oops >&2; head -c 100000 /dev/zero; exit 3"),
            Some(b"in"),
            30,
        ))
        .unwrap();
        assert_eq!(o.status.and_then(|s| s.code()), Some(3));
        assert_eq!(&o.stdout[..2], b"in");
        assert_eq!(o.stdout.len(), 16);
        assert_eq!(o.stderr, b"oops\n");
        assert_eq!(o.stop, None);
    }

    #[test]
    fn run_stops_a_child_at_its_time_limit_and_a_background_job_does_not_hold_it() {
        let o = run(job(sh("trap '' TERM; sleep 30"), None, 1)).unwrap();
        assert_eq!(o.stop, Some(Stop::Timeout));
        assert!(o.duration < Duration::from_secs(20), "{:?}", o.duration);
        let o = run(job(sh("sleep 30 & echo started"), None, 30)).unwrap();
        assert_eq!(o.stdout, b"started\n");
        assert!(o.duration < Duration::from_secs(20), "{:?}", o.duration);
    }
}
