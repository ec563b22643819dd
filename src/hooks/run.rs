//! Running one hook: `bash -c COMMAND` in the workspace, outside the command sandbox (a hook is
//! the person's code, as in Claude Code), with the event's JSON on stdin, stdout and stderr read
//! apart (each kept up to [`MAX_OUTPUT_BYTES`], the rest read and dropped), in its own process
//! group, killed (SIGTERM, then SIGKILL after [`KILL_GRACE`]) at its timeout or when the turn is
//! cancelled. The environment is tern's (API keys were removed from it at start-up) plus
//! `CLAUDE_PROJECT_DIR` and `TERN_PROJECT_DIR`, the workspace, which Claude Code's scripts use.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::cancel::CancelToken;
use crate::child;
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

/// Runs `command` with `input` on stdin (see the module docs) through the one supervised-child
/// runner ([`crate::child::run`]). Never fails: a hook that cannot start is a [`Ran`] with
/// `spawn_error`.
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
        .env("TERN_PROJECT_DIR", cwd);
    let job = child::Job {
        cmd,
        input: Some(input),
        stderr: child::Stderr::Keep,
        max_output: MAX_OUTPUT_BYTES,
        limits: child::Limits {
            timeout: Some(timeout),
            kill_grace: KILL_GRACE,
            drain_grace: DRAIN_GRACE,
            reap_limit: KILL_GRACE,
        },
        cancel: Some(cancel),
        groups: Some(groups),
        kill_leftovers: false,
    };
    let out = match child::run(job) {
        Ok(o) => o,
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
    let timed_out = out.stop == Some(child::Stop::Timeout);
    let interrupted = matches!(out.stop, Some(child::Stop::Interrupt(_)));
    Ran {
        exit_code: if out.stop.is_some() {
            None
        } else {
            out.status.and_then(|s| s.code())
        },
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        timed_out,
        interrupted,
        spawn_error: match out.status {
            Some(s) if s.code().is_none() && out.stop.is_none() => {
                Some(format!("killed by signal {}", s.signal().unwrap_or(0)))
            }
            None if out.stop.is_none() => Some("never exited after SIGKILL".into()),
            _ => None,
        },
        duration: out.duration,
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
