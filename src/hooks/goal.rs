//! `--goal CMD`: a built-in Stop gate. When the model ends its answer, CMD runs through the same
//! bash tool path as the model's commands (the same sandbox, environment and output shaping; no
//! approval question: the person set it). Exit 0 ends the turn `completed`; otherwise its output,
//! shaped like a tool result, is the next user message and the turn goes on, until it passes or
//! its attempts (`--goal-attempts`, default 5) or another budget run out: then `failed`, with the
//! last output.
//!
//! The goal is session state, `goal.json` in the session folder, written by `tern exec --goal`,
//! `/goal CMD` (REPL, ACP: the op table) and read by the runtime at each final answer (the gate
//! itself is in the runtime's hook door, `runtime::hooks`) and by `tern status`. It stays set
//! for later turns until `/goal off`.

use super::HookError;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::store::Session;

/// The goal's file in the session folder.
pub const FILE: &str = crate::store::files::GOAL;
/// Attempts when `--goal-attempts` is not given.
pub const DEFAULT_ATTEMPTS: u32 = 5;
/// A goal command's timeout when `--goal-timeout` is not given: the bash tool's default (a
/// goal is a command like the model's, and must not hold a run forever: `--goal "sleep 1000"`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(crate::tools::bash::DEFAULT_TIMEOUT_S);
/// The longest `--goal-timeout` in seconds (the bash tool's longest).
pub const MAX_TIMEOUT_S: u64 = crate::tools::bash::MAX_TIMEOUT_S;
/// Bytes of the last output kept in `goal.json` and the `result` event.
pub const KEPT_OUTPUT_BYTES: usize = 4000;

/// `goal.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Goal {
    /// The command, run with `bash -c` in the workspace.
    pub command: String,
    /// Runs allowed per turn before the turn fails.
    pub max_attempts: u32,
    /// Seconds one run may take before its process group is killed and the run counts as a
    /// failed attempt (`--goal-timeout`, 1..=[`MAX_TIMEOUT_S`]); absent: [`DEFAULT_TIMEOUT`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<u64>,
    /// When it was set (RFC 3339).
    pub set_at: String,
    /// Its latest run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<LastRun>,
}

/// The latest run of a goal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastRun {
    /// Runs in that turn so far.
    pub attempts: u32,
    /// It exited 0.
    pub passed: bool,
    /// Its output as the model read it (cut to 4,000 bytes).
    pub output: String,
    /// When (RFC 3339).
    pub at: String,
}

/// The goal of `session`, if one is set. Errors: a `goal.json` that cannot be read.
pub fn read(session: &Session) -> Result<Option<Goal>, HookError> {
    session
        .read_json::<Goal>(FILE)
        .map_err(|e| HookError::Goal(format!("{}: {e}", session.path(FILE).display())))
}

impl Goal {
    /// How long one run may take (see [`Goal::timeout_s`]).
    pub fn timeout(&self) -> Duration {
        self.timeout_s.map_or(DEFAULT_TIMEOUT, |s| {
            Duration::from_secs(s.clamp(1, MAX_TIMEOUT_S))
        })
    }
}

/// Sets (or with None clears) the goal of `session`, atomically under its lock, with the
/// default timeout.
pub fn set(session: &Session, goal: Option<(&str, u32)>) -> std::io::Result<()> {
    set_timed(session, goal.map(|(c, n)| (c, n, None)))
}

/// [`set`] with a timeout in seconds per run (None: [`DEFAULT_TIMEOUT`]).
pub fn set_timed(session: &Session, goal: Option<(&str, u32, Option<u64>)>) -> std::io::Result<()> {
    let lock = session.lock()?;
    match goal {
        Some((command, max_attempts, timeout_s)) => session.write_json_locked(
            &lock,
            FILE,
            &Goal {
                command: command.to_string(),
                max_attempts: max_attempts.max(1),
                timeout_s,
                set_at: crate::clock::now_rfc3339(),
                last: None,
            },
        ),
        None => match std::fs::remove_file(session.path(FILE)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
    }
}

/// One line for `tern status` and the sidebar: `Goal gate: CMD — passed (2 of 5 attempts)`.
pub fn status_line(g: &Goal) -> String {
    let state = match &g.last {
        None => "not run yet".to_string(),
        Some(l) if l.passed => format!("passed ({} of {} attempts)", l.attempts, g.max_attempts),
        Some(l) => format!("failing ({} of {} attempts)", l.attempts, g.max_attempts),
    };
    let cmd: String = g
        .command
        .replace(['\n', '\r'], " ")
        .chars()
        .take(60)
        .collect();
    format!("Goal gate: `{cmd}` — {state}")
}
