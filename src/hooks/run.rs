//! Running one hook: `bash -c COMMAND` in the workspace, outside the command sandbox (a hook is
//! the person's code, as in Claude Code), with the event's JSON on stdin, stdout and stderr read
//! apart (each kept up to [`MAX_OUTPUT_BYTES`], the rest read and dropped), in its own process
//! group, killed (SIGTERM, then SIGKILL after [`KILL_GRACE`]) at its timeout or when the turn is
//! cancelled. The environment is tern's (API keys were removed from it at start-up) plus
//! `CLAUDE_PROJECT_DIR` and `TERN_PROJECT_DIR`, the workspace, which Claude Code's scripts use.

use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::cancel::CancelToken;
use crate::procs::ProcessGroups;

/// Bytes of stdout and of stderr kept from one hook (64 KiB each).
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// Time between SIGTERM and SIGKILL to a hook's process group.
pub const KILL_GRACE: Duration = Duration::from_secs(2);
/// How long output is still read after the hook exited (a background child may hold the pipes).
const DRAIN_GRACE: Duration = Duration::from_millis(200);

/// How one hook ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    /// Its exit code; None when it died of a signal, timed out or could not start.
    pub exit_code: Option<i32>,
    /// Its stdout (lossy UTF-8, cut to [`MAX_OUTPUT_BYTES`]).
    pub stdout: String,
    /// Its stderr (the same).
    pub stderr: String,
    /// Its timeout passed and its group was killed.
    pub timed_out: bool,
    /// The turn was cancelled while it ran, and its group was killed.
    pub interrupted: bool,
    /// Why it could not start (bash missing, the workspace gone).
    pub spawn_error: Option<String>,
    /// Wall time.
    pub duration: Duration,
}

/// Runs `command` with `input` on stdin (see the module docs). Never fails: a hook that cannot
/// start is a [`Ran`] with `spawn_error`.
pub fn run(
    command: &str,
    input: &[u8],
    cwd: &Path,
    timeout: Duration,
    cancel: &CancelToken,
    groups: &ProcessGroups,
) -> Ran {
    let start = Instant::now();
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(command)
        .current_dir(cwd)
        .env("CLAUDE_PROJECT_DIR", cwd)
        .env("TERN_PROJECT_DIR", cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setsid(2) and prctl(2) are async-signal-safe; nothing is allocated.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            #[cfg(target_os = "linux")]
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Ran {
                exit_code: None,
                stdout: String::new(),
                stderr: String::new(),
                timed_out: false,
                interrupted: false,
                spawn_error: Some(format!("could not start bash in {}: {e}", cwd.display())),
                duration: start.elapsed(),
            };
        }
    };
    let pgid = libc::pid_t::try_from(child.id()).unwrap_or(libc::pid_t::MAX);
    let _registered = groups.register(pgid);
    // Written from a thread: a hook that never reads its stdin must not block tern.
    if let Some(mut stdin) = child.stdin.take() {
        let input = input.to_vec();
        std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
    }
    let (tx, rx) = mpsc::channel::<(bool, Vec<u8>)>();
    for (is_err, pipe) in [
        (
            false,
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ),
        (
            true,
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ),
    ] {
        let Some(mut pipe) = pipe else { continue };
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            let mut buf = [0u8; 8192];
            loop {
                match pipe.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let room = MAX_OUTPUT_BYTES.saturating_sub(kept.len());
                        kept.extend_from_slice(&buf[..n.min(room)]);
                    }
                }
            }
            let _ = tx.send((is_err, kept));
        });
    }
    drop(tx);
    let deadline = start + timeout;
    let mut status = None;
    let (mut timed_out, mut interrupted) = (false, false);
    let mut killed_at: Option<Instant> = None;
    let mut nap = Duration::from_micros(200);
    loop {
        match child.try_wait() {
            Ok(Some(s)) => {
                status = Some(s);
                break;
            }
            Ok(None) => {}
            Err(_) => break,
        }
        let now = Instant::now();
        match killed_at {
            None if now >= deadline || cancel.is_cancelled() => {
                timed_out = now >= deadline;
                interrupted = !timed_out;
                signal_group(pgid, libc::SIGTERM);
                killed_at = Some(now);
            }
            Some(at) if now.duration_since(at) >= KILL_GRACE => {
                signal_group(pgid, libc::SIGKILL);
                // Once: then wait for the reap.
                killed_at = Some(now + Duration::from_secs(3600));
            }
            _ => {}
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(10));
    }
    if timed_out || interrupted {
        // What the hook started dies with it.
        signal_group(pgid, libc::SIGKILL);
    }
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let until = Instant::now() + DRAIN_GRACE;
    for _ in 0..2 {
        let left = until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((false, b)) => stdout = b,
            Ok((true, b)) => stderr = b,
            Err(_) => break,
        }
    }
    Ran {
        exit_code: if timed_out || interrupted {
            None
        } else {
            status.and_then(|s| s.code())
        },
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        timed_out,
        interrupted,
        spawn_error: match status {
            Some(s) if s.code().is_none() && !timed_out && !interrupted => {
                Some(format!("killed by signal {}", s.signal().unwrap_or(0)))
            }
            _ => None,
        },
        duration: start.elapsed(),
    }
}

fn signal_group(pgid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill(2) on the hook's own process group; ESRCH (already gone) needs no action.
    unsafe {
        libc::kill(-pgid, sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn go(cmd: &str, input: &str, timeout: Duration) -> Ran {
        let dir = tempfile::tempdir().unwrap();
        run(
            cmd,
            input.as_bytes(),
            dir.path(),
            timeout,
            &CancelToken::new(),
            &ProcessGroups::new(),
        )
    }

    #[test]
    fn reads_stdin_and_keeps_the_streams_apart() {
        let r = go(
            "cat; echo oops >&2; exit 2",
            "{\"a\":1}",
            Duration::from_secs(30),
        );
        assert_eq!(r.exit_code, Some(2));
        assert_eq!(r.stdout, "{\"a\":1}");
        assert_eq!(r.stderr, "oops\n");
    }

    #[test]
    fn output_is_bounded() {
        let r = go(
            "head -c 1000000 /dev/zero | tr '\\0' a",
            "",
            Duration::from_secs(30),
        );
        assert_eq!(r.stdout.len(), MAX_OUTPUT_BYTES);
        assert_eq!(r.exit_code, Some(0));
    }
}
