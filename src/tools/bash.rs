//! The `bash` tool: runs one command line in a fresh `bash -c` and returns what the model reads.
//!
//! Each call gets its own session and process group (`setsid`), so it has no controlling terminal
//! (editors, pagers and password prompts fail fast instead of hanging) and the whole tree can be
//! signalled at once. stdin is /dev/null (case C02); stdout and stderr share one pipe so they
//! interleave in the order written, unless the request asks for them apart ([`BashRequest::
//! streams`]: a PostToolUse hook reads them so): then each has its pipe, and the model reads
//! them in the order they arrive. One thread polls the pipe(s) in short slices: the call ends when the shell
//! exits, after a short drain grace even if a background child still holds the pipe (case C01);
//! a timeout or a cancel sends SIGTERM to the group, then SIGKILL after a grace (case C03).
//! Output goes through [`Shaper`] (cases C04–C08).

use std::io::{self, Read};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::output::{Limits, Shaper};
use super::{ToolError, ToolSpec};
use crate::cancel::CancelToken;
use crate::child::Stop;
use crate::procs::ProcessGroups;

/// Timeout of a call that gives no `timeout_s`, in seconds.
pub const DEFAULT_TIMEOUT_S: u64 = 120;
/// Largest `timeout_s` accepted, in seconds.
pub const MAX_TIMEOUT_S: u64 = 600;
/// Bytes of cleaned output the model sees at most: half from the head, half from the tail. The
/// truncation marker and the footer line come on top (a few hundred bytes).
pub const OUTPUT_CAP_BYTES: usize = 16_000;
/// Raw output held in memory before it streams into a spill file.
pub const RAW_MEMORY_BYTES: usize = 64 * 1024;
/// Most bytes the spill files of one session keep (256 MiB): past it the oldest are removed.
pub const SPILL_BUDGET_BYTES: u64 = 256 * 1024 * 1024;
/// Largest spill file (32 MiB); output past it is not saved and the marker says so.
pub const SPILL_CAP_BYTES: u64 = 32 * 1024 * 1024;
/// How long output is still read after the shell exits, for its last writes.
pub const DRAIN_GRACE: Duration = Duration::from_millis(200);
/// Time between SIGTERM and SIGKILL to the process group on a timeout or cancel.
pub const KILL_GRACE: Duration = Duration::from_secs(2);
/// Longest wait on the pipe before checking the shell, the deadline and the cancel flag.
pub const POLL_SLICE: Duration = crate::child::POLL_SLICE;
/// How long the shell may stay unreaped after SIGKILL (a process stuck in the kernel) before the
/// call returns anyway and a thread waits for it.
pub const REAP_LIMIT: Duration = Duration::from_secs(5);

const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Editors fail fast with a message: there is no terminal to edit in. Git runs `$GIT_EDITOR` via
/// `sh -c '<editor> "$@"'`, so the file name lands on `false`.
const NO_EDITOR: &str = "echo 'no editor here: pass the text inline (git commit -m)' >&2; false";

/// Environment every command gets, before the request's own additions.
const FIXED_ENV: [(&str, &str); 8] = [
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("EDITOR", NO_EDITOR),
    ("VISUAL", NO_EDITOR),
    ("GIT_EDITOR", NO_EDITOR),
];

/// Variables a command inherits from tern's environment, by name (issue 17): the usual ones
/// and toolchains' homes; with [`ENV_PREFIXES`]. Everything else is left out unless the person
/// names it (`--env NAME`): an allow-list, so a variable that grants access to something (a
/// terminal multiplexer, an agent socket, a token) never reaches a command by accident.
pub const ENV_ALLOWED: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "ftp_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "FTP_PROXY",
    "ALL_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOPATH",
    "GOROOT",
    "JAVA_HOME",
    "PYENV_ROOT",
    "VIRTUAL_ENV",
    "NVM_DIR",
];

/// Prefixes of inherited variable names: the locale's `LC_*`.
pub const ENV_PREFIXES: &[&str] = &["LC_"];

/// Variables never passed, even when named with `--env`: each is a door out of the sandbox (a
/// host service's socket or display) or a provider's key.
pub const ENV_NEVER: &[&str] = &[
    "TMUX",
    "TMUX_PANE",
    "STY",
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "GPG_AGENT_INFO",
    "DBUS_SESSION_BUS_ADDRESS",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XAUTHORITY",
    "XDG_RUNTIME_DIR",
    "KRB5CCNAME",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_BASE_URL",
];

/// Whether `name` may be passed with `--env` (not in [`ENV_NEVER`], a plain variable name);
/// `source` (`--env` or `TERN_ENV`) is where it came from.
///
/// Errors: one line saying why not, naming `source`.
pub fn check_pass_env(name: &str, source: &str) -> Result<(), String> {
    // A shell's name (POSIX: letters, digits and `_`, not starting with a digit): a name
    // with a space or a `=` is a typo, never a variable anyone exports.
    let shell_name = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !shell_name {
        return Err(format!(
            "{source} {name:?}: not a variable name (letters, digits and _, not starting with a digit)"
        ));
    }
    if ENV_NEVER.contains(&name) {
        return Err(format!(
            "{source} {name}: never passed to commands (a way out of the sandbox, or a provider key)"
        ));
    }
    Ok(())
}

/// The whole environment of a command: the allowed part of tern's own ([`ENV_ALLOWED`],
/// [`ENV_PREFIXES`], `pass_env` names; never [`ENV_NEVER`] or a value that is a registered
/// secret), then tern's fixed variables, the terminal stand-ins, the request's own, the private
/// `TMPDIR`, minus `env_remove`.
fn command_env(req: &BashRequest<'_>) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    use std::ffi::OsString;
    let secrets = crate::store::redact::registered();
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, v)| {
            let Some(k) = k.to_str() else { return false };
            let allowed = ENV_ALLOWED.contains(&k)
                || ENV_PREFIXES.iter().any(|p| k.starts_with(p))
                || req.pass_env.iter().any(|n| n == k);
            allowed
                && !ENV_NEVER.contains(&k)
                && !v
                    .to_str()
                    .is_some_and(|v| !v.is_empty() && secrets.iter().any(|s| s == v))
        })
        .collect();
    let mut set = |k: &str, v: OsString| {
        env.retain(|(x, _)| x != k);
        env.push((k.into(), v));
    };
    for (k, v) in FIXED_ENV {
        set(k, v.into());
    }
    for name in NEEDS_TERMINAL {
        let (k, v) = no_terminal_function(name);
        set(&k, v.into());
    }
    for (k, v) in req.env {
        set(k, v.clone());
    }
    // The sandbox's private temp folder wins over a TMPDIR of the request: it is the only temp
    // folder the command can write.
    if let Some(tmp) = req.sandbox.and_then(|s| s.tmpdir()) {
        set("TMPDIR", tmp.into());
    }
    env.retain(|(k, _)| !req.env_remove.iter().any(|r| k == r));
    env
}

/// The program `bash` as the command's `PATH` finds it (absolute), for the jail's exec.
pub(crate) fn find_bash(env: &[(std::ffi::OsString, std::ffi::OsString)]) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join("bash"))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .unwrap_or_else(|| PathBuf::from("/bin/bash"))
}

/// A running command: tern's own child, or one the jail's init started.
enum Proc<'g> {
    Local(crate::child::Local<'g>),
    Jailed(crate::sandbox::jail::JailedChild),
}

impl crate::child::Process for Proc<'_> {
    fn try_wait(&mut self) -> Option<Result<ExitStatus, String>> {
        match self {
            Proc::Local(c) => c.try_wait(),
            Proc::Jailed(c) => c.try_wait().map(Ok),
        }
    }

    fn signal_group(&mut self, sig: libc::c_int) {
        match self {
            Proc::Local(c) => c.signal_group(sig),
            Proc::Jailed(c) => c.signal_group(sig),
        }
    }

    fn group_alive(&mut self) -> bool {
        match self {
            Proc::Local(c) => c.group_alive(),
            Proc::Jailed(c) => c.group_alive(),
        }
    }
}

/// Full-screen programs that wait for a terminal (there is none): each is replaced, for bash and
/// every bash it starts, by a function (imported from the environment, `BASH_FUNC_name%%`) that
/// says so at once and fails, instead of hanging until the timeout.
pub const NEEDS_TERMINAL: [&str; 14] = [
    "vi", "vim", "nvim", "view", "vimdiff", "nano", "pico", "emacs", "micro", "joe", "top", "htop",
    "btop", "watch",
];

/// The `BASH_FUNC_name%%` variable of one [`NEEDS_TERMINAL`] program.
fn no_terminal_function(name: &str) -> (String, String) {
    (
        format!("BASH_FUNC_{name}%%"),
        format!(
            "() {{ echo \"{name}: not run: it needs a terminal and commands run without one; use a non-interactive form (sed -i or cat <<'EOF' > file to edit, ps for processes, a loop for watch)\" >&2; return 1; }}"
        ),
    )
}

/// The `bash` tool as advertised to the model. The description is `prompts/tools/bash.md` with
/// its `{DEFAULT_TIMEOUT_S}`, `{MAX_TIMEOUT_S}` and `{OUTPUT_CAP_BYTES}` placeholders filled from
/// the constants; the schema takes `command` (string, required) and `timeout_s` (integer,
/// optional, 1..=[`MAX_TIMEOUT_S`]).
pub fn spec() -> ToolSpec {
    let description = include_str!("../../prompts/tools/bash.md")
        .trim_end()
        .replace("{DEFAULT_TIMEOUT_S}", &DEFAULT_TIMEOUT_S.to_string())
        .replace("{MAX_TIMEOUT_S}", &MAX_TIMEOUT_S.to_string())
        .replace("{OUTPUT_CAP_BYTES}", &OUTPUT_CAP_BYTES.to_string());
    ToolSpec {
        name: "bash",
        description,
        parameters: json!({
            "type": "object",
            "properties": {
                "command": {"type": "string"},
                "timeout_s": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_S},
            },
            "required": ["command"],
        }),
    }
}

/// Validated arguments of one `bash` tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BashArgs {
    /// The command line, non-empty, without NUL bytes.
    pub command: String,
    /// From `timeout_s`, 1..=[`MAX_TIMEOUT_S`] s; [`DEFAULT_TIMEOUT_S`] when absent or null.
    pub timeout: Duration,
}

/// Parses the arguments object of a `bash` tool call: `command` must be a non-empty string
/// without NUL bytes (case C07); `timeout_s` is optional, an integer (or integral number or
/// numeric string) from 1 to [`MAX_TIMEOUT_S`]; out of range is an error, not clamped. Unknown
/// fields are ignored. The error is plain text for an error tool result.
pub fn parse_args(args: &Value) -> Result<BashArgs, ToolError> {
    let Some(obj) = args.as_object() else {
        return Err(ToolError::Arguments(format!(
            "bash arguments must be a JSON object like {{\"command\": \"ls\"}}, got {}",
            crate::domain::json_kind(args)
        )));
    };
    let command = match obj.get("command") {
        Some(Value::String(s)) => s,
        None | Some(Value::Null) => {
            return Err(ToolError::Arguments(
                "missing \"command\": the bash command line, as a string".to_string(),
            ));
        }
        Some(other) => {
            return Err(ToolError::Arguments(format!(
                "\"command\" must be a string, got {}",
                crate::domain::json_kind(other)
            )));
        }
    };
    if command.contains('\0') {
        return Err(ToolError::Arguments(
            "command contains a NUL byte; not run (to produce one, write \\0 in printf)"
                .to_string(),
        ));
    }
    if command.trim().is_empty() {
        return Err(ToolError::Arguments(
            "\"command\" is empty; not run".to_string(),
        ));
    }
    let timeout_s = match obj.get("timeout_s") {
        None | Some(Value::Null) => DEFAULT_TIMEOUT_S,
        Some(v) => parse_timeout(v)?,
    };
    Ok(BashArgs {
        command: command.clone(),
        timeout: Duration::from_secs(timeout_s),
    })
}

fn parse_timeout(v: &Value) -> Result<u64, ToolError> {
    let n: Option<i128> = match v {
        Value::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
            // Bounded and integral, so the cast is exact.
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 1e15)
                    .map(|f| f as i128)
            }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    match n {
        Some(n) if (1..=i128::from(MAX_TIMEOUT_S)).contains(&n) => Ok(n as u64),
        Some(n) => Err(ToolError::Arguments(format!(
            "timeout_s must be from 1 to {MAX_TIMEOUT_S} seconds, got {n}; not run (an error, not clamped)"
        ))),
        None => Err(ToolError::Arguments(format!(
            "timeout_s must be a whole number of seconds from 1 to {MAX_TIMEOUT_S}, got {v}; not run"
        ))),
    }
}

/// One command to run.
#[derive(Debug, Clone, Copy)]
pub struct BashRequest<'a> {
    /// The command line, passed to `bash -c`.
    pub command: &'a str,
    /// Wall-clock limit from spawn; then the process group gets SIGTERM, SIGKILL after
    /// [`KILL_GRACE`].
    pub timeout: Duration,
    /// Working directory of the shell.
    pub cwd: &'a Path,
    /// Variables added to the environment (after tern's fixed ones, so they may override them).
    /// Values are OS strings: a path need not be UTF-8.
    pub env: &'a [(&'a str, std::ffi::OsString)],
    /// Variables removed from the environment (e.g. API keys); applied last.
    pub env_remove: &'a [&'a str],
    /// Names of variables of tern's environment the command also gets, beyond
    /// [`ENV_ALLOWED`] (`--env NAME`); [`ENV_NEVER`] names and values that are configured
    /// secrets are still left out.
    pub pass_env: &'a [String],
    /// Folder for the spill file of a truncated output; created on demand.
    pub spill_dir: &'a Path,
    /// Where the command's process group is registered while it runs (the emergency exit kills
    /// every registered group).
    pub groups: &'a ProcessGroups,
    /// The call's sandbox ([`crate::sandbox::prepare`]), applied in the child just before exec,
    /// with its private `TMPDIR`; a denial in the output gets one line naming the mode. `None`:
    /// no sandbox.
    pub sandbox: Option<&'a crate::sandbox::Prepared>,
    /// The runtime's jail: the command runs inside it (its init forks it) instead of as tern's
    /// own child. `None`: a plain child of tern.
    pub jail: Option<&'a crate::sandbox::jail::Jail>,
    /// The session's MCP channel ([`crate::mcp::channel`]): the command gets it at
    /// descriptor [`crate::mcp::channel::FD`]. `None`: no server is configured.
    pub mcp: Option<std::os::fd::RawFd>,
    /// stdout and stderr read apart too ([`BashOutcome::streams`]), each from its own pipe:
    /// what the model reads is then in the order the bytes arrive, which for a program that
    /// writes both at once may differ from the order written (one shared pipe keeps that
    /// order, which is why this is asked for only when something reads the streams apart).
    pub streams: bool,
}

/// A command's stdout and stderr apart (Claude Code's `tool_response` for Bash), each as text
/// (lossy UTF-8), at most [`STREAM_BYTES`] bytes kept (the head; a line says what was cut).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Streams {
    /// What the command wrote to stdout.
    pub stdout: String,
    /// What it wrote to stderr.
    pub stderr: String,
}

/// Bytes of each stream [`Streams`] keeps.
pub const STREAM_BYTES: usize = RAW_MEMORY_BYTES;

/// The result of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BashOutcome {
    /// Exactly what the model reads: the shaped output, then one footer line of bracketed notes
    /// ending with the exit status, e.g. `[exit 0]`, `[killed by signal 9 (SIGKILL)]`,
    /// `[no output] [exit 0]`, `[timed out after 2 s; process group killed] [killed by signal 15
    /// (SIGTERM)]`.
    pub content: String,
    /// The shell's exit code; `None` when it died of a signal or its status is unknown.
    pub exit_code: Option<i32>,
    /// The signal that killed the shell, if one did.
    pub signal: Option<i32>,
    /// The timeout passed and the process group was killed.
    pub timed_out: bool,
    /// The cancel flag was set and the process group was killed.
    pub interrupted: bool,
    /// The call returned while some process (a background child) still held the output pipe.
    pub background_held_output: bool,
    /// Wall-clock time from spawn to return.
    pub duration: Duration,
    /// File holding the full raw output when the content left part of it out.
    pub spill_path: Option<PathBuf>,
    /// Raw bytes read from the output pipe(s).
    pub output_bytes: u64,
    /// stdout and stderr apart, when the request asked for them (boxed: most calls have
    /// none).
    pub streams: Option<Box<Streams>>,
}

/// Runs `req.command` with `bash -c` and waits for the shell (see the module docs). `cancel` is
/// checked every [`POLL_SLICE`]; once set the process group is killed and the outcome is
/// `interrupted`. Background children are left running when the shell exits normally.
///
/// Errors: only when the shell could not be started (missing `cwd`, no `bash`, bad environment
/// name), as plain text for an error tool result.
pub fn run(req: &BashRequest<'_>, cancel: &CancelToken) -> Result<BashOutcome, ToolError> {
    let start = Instant::now();
    let (reader, writer) = io::pipe()
        .map_err(|e| ToolError::Failed(format!("could not create the output pipe: {e}")))?;
    // stderr: the same pipe (the order written kept), or one of its own.
    let (err_reader, writer2) = if req.streams {
        let (r, w) = io::pipe()
            .map_err(|e| ToolError::Failed(format!("could not create the stderr pipe: {e}")))?;
        (Some(r), w)
    } else {
        let w = writer
            .try_clone()
            .map_err(|e| ToolError::Failed(format!("could not create the output pipe: {e}")))?;
        (None, w)
    };
    let readers = Readers {
        out: reader,
        err: err_reader,
    };

    let env = command_env(req);
    if let Some(jail) = req.jail {
        use std::os::fd::AsRawFd;
        let bash = find_bash(&env);
        let args = [
            std::ffi::OsStr::new("-c"),
            std::ffi::OsStr::new(req.command),
        ];
        let spawned = jail.spawn(&crate::sandbox::jail::Spawn {
            stdin: None,
            program: &bash,
            args: &args,
            env: &env,
            cwd: req.cwd,
            draft: req.sandbox.and_then(|s| s.draft_file()),
            ruleset: req.sandbox.and_then(|s| s.child_hook().ruleset_fd()),
            stdout: writer.as_raw_fd(),
            stderr: writer2.as_raw_fd(),
            mcp: req.mcp,
        });
        // Our copies of the pipe's write end: EOF needs them closed.
        drop(writer);
        drop(writer2);
        let child = spawned
            .map_err(|e| ToolError::Failed(format!("could not start bash in the jail: {e}")))?;
        return finish(req, cancel, start, readers, Proc::Jailed(child));
    }
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(req.command)
        .current_dir(req.cwd)
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer2);
    // Copy: the 'static closure holds the ruleset's raw fd, which `req.sandbox` keeps open until
    // this function returns (after the spawn).
    let hook = req.sandbox.map(|s| s.child_hook());
    let mcp = req.mcp;
    // The shell dies with tern, even when tern is killed with SIGKILL (its children are found
    // and killed when the session is next opened: `kill_orphans`); a root shell loses
    // CAP_SYS_PTRACE, so nothing it runs can read tern's memory through /proc. The sandbox's
    // last step (see `sandbox::Prepared`) is async-signal-safe.
    let spawned = crate::child::spawn(
        &mut cmd,
        crate::child::Harden { no_ptrace: true },
        Some(req.groups),
        move || {
            if let Some(fd) = mcp {
                crate::child::inherit(fd, crate::sandbox::jail::CHANNEL_FD)?;
            }
            match hook {
                Some(h) => h.apply(),
                None => Ok(()),
            }
        },
    );
    // The Command holds our copies of the pipe's write end; EOF needs them closed.
    drop(cmd);
    let child = spawned.map_err(|e| {
        ToolError::Failed(format!(
            "could not start bash in {}: {e}",
            req.cwd.display()
        ))
    })?;
    finish(req, cancel, start, readers, Proc::Local(child))
}

/// The read ends of a command's output: one shared pipe, or stdout's and stderr's apart.
struct Readers {
    out: io::PipeReader,
    err: Option<io::PipeReader>,
}

/// The bytes of stdout and stderr kept apart, each up to `cap`, and whether any was cut.
struct Kept {
    cap: usize,
    bytes: [Vec<u8>; 2],
    cut: [bool; 2],
}

impl Kept {
    fn new(cap: usize) -> Kept {
        Kept {
            cap,
            bytes: [Vec::new(), Vec::new()],
            cut: [false; 2],
        }
    }

    fn push(&mut self, stream: usize, data: &[u8]) {
        let into = &mut self.bytes[stream];
        let room = self.cap.saturating_sub(into.len());
        into.extend_from_slice(&data[..data.len().min(room)]);
        self.cut[stream] |= data.len() > room;
    }

    fn streams(self) -> Streams {
        let text = |i: usize| {
            let mut t = String::from_utf8_lossy(&self.bytes[i]).into_owned();
            if self.cut[i] {
                t.push_str(&format!("\n[cut at {} bytes]", self.cap));
            }
            t
        };
        Streams {
            stdout: text(0),
            stderr: text(1),
        }
    }
}

/// Reads the output of the started `proc` and waits for it (see [`run`]).
fn finish(
    req: &BashRequest<'_>,
    cancel: &CancelToken,
    start: Instant,
    readers: Readers,
    mut proc: Proc<'_>,
) -> Result<BashOutcome, ToolError> {
    let mut shaper = Shaper::new(
        req.spill_dir,
        Limits {
            head_bytes: OUTPUT_CAP_BYTES / 2,
            tail_bytes: OUTPUT_CAP_BYTES - OUTPUT_CAP_BYTES / 2,
            memory_bytes: RAW_MEMORY_BYTES,
            spill_bytes: SPILL_CAP_BYTES,
        },
    );
    let mut buf = vec![0u8; READ_CHUNK_BYTES];
    let split = readers.err.is_some();
    let mut pipes: Vec<(io::PipeReader, bool)> = std::iter::once(readers.out)
        .chain(readers.err)
        .map(|r| (r, true))
        .collect();
    let mut kept = Kept::new(STREAM_BYTES);
    // The output streams into the shaper as it comes (from either pipe, as it arrives); the
    // supervisor decides the rest.
    let mut pump = |wait: Duration| {
        pump_pipes(&mut pipes, &mut buf, wait, &mut |i, data| {
            shaper.push(data);
            if split {
                kept.push(i, data);
            }
        })
    };
    let limits = crate::child::Limits {
        timeout: Some(req.timeout),
        kill_grace: KILL_GRACE,
        drain_grace: DRAIN_GRACE,
        reap_limit: REAP_LIMIT,
    };
    let watched = crate::child::supervise(&mut proc, start, &limits, Some(cancel), &mut pump);
    let (pipe_open, stop) = (watched.output_open, watched.stop);
    let exited = watched.status;
    let unreaped = exited.is_none();
    let shaped = shaper.finish();
    let mut content = shaped.text;
    if !content.is_empty() && !content.ends_with('\n') {
        content.push('\n');
    }
    // A denial under a sandbox gets one line saying what the mode allows, above the footer so
    // the exit status stays last.
    if let Some(line) = req
        .sandbox
        .and_then(|s| crate::sandbox::explain_denial(s.mode(), s.no_network(), &content))
    {
        content.push_str(&line);
        content.push('\n');
    }
    let mut footer: Vec<String> = Vec::new();
    if content.is_empty() {
        footer.push("[no output]".to_string());
    }
    footer.extend(shaped.notes);
    footer.extend(stop_notes(req, cancel, pipe_open, stop));
    let (mut exit_code, mut signal) = (None, None);
    match exited {
        Some(Ok(status)) => {
            exit_code = status.code();
            signal = status.signal();
            footer.push(status_note(status));
        }
        Some(Err(e)) => footer.push(format!("[exit status unknown: {e}]")),
        None => footer.push("[exit status unknown: the shell did not exit after SIGKILL]".into()),
    }
    if unreaped && let Proc::Local(child) = proc {
        // Reap it whenever the kernel lets it go, so it does not stay a zombie.
        child.reap_later();
    }
    content.push_str(&footer.join(" "));

    Ok(BashOutcome {
        content,
        exit_code,
        signal,
        timed_out: stop == Some(Stop::Timeout),
        interrupted: matches!(stop, Some(Stop::Interrupt(_))),
        background_held_output: pipe_open,
        duration: start.elapsed(),
        spill_path: shaped.spill_path,
        output_bytes: shaped.raw_bytes,
        streams: split.then(|| Box::new(kept.streams())),
    })
}

/// The footer's notes on how the command was stopped and who still held its output.
fn stop_notes(
    req: &BashRequest<'_>,
    cancel: &CancelToken,
    pipe_open: bool,
    stop: Option<Stop>,
) -> Vec<String> {
    let mut notes = Vec::new();
    if pipe_open {
        notes.push(
            match stop {
                None => {
                    "[a background process still holds the output; returned when the shell exited]"
                }
                Some(_) => "[a process outside the killed group still holds the output]",
            }
            .to_string(),
        );
    }
    match stop {
        Some(Stop::Timeout) => notes.push(format!(
            "[timed out after {} s; process group killed]",
            req.timeout.as_secs()
        )),
        // A budget's cancel (`--max-wall-time`, a sub-agent's wall time) says which budget: no
        // person interrupted anything.
        Some(Stop::Interrupt(after)) => notes.push(match cancel.budget() {
            Some(why) => format!(
                "[stopped: {why} after {} s; process group killed]",
                after.as_secs_f64().round()
            ),
            None => format!(
                "[{} after {} s; process group killed]",
                crate::cancel::who_stopped(),
                after.as_secs_f64().round()
            ),
        }),
        None => {}
    }
    notes
}

/// What a program run with [`run_split`] left: how it ended, its stdout and stderr apart.
#[derive(Debug)]
pub struct Split {
    /// Its exit status (None: never reaped).
    pub status: Option<ExitStatus>,
    /// Why it was stopped, if it was.
    pub stop: Option<Stop>,
    /// Its stdout, up to the cap.
    pub stdout: Vec<u8>,
    /// Its stderr, up to the cap.
    pub stderr: Vec<u8>,
}

/// Runs `req.command` in the request's jail (which it needs) with its stdin from the file
/// `input` and its stdout and stderr read apart, each kept up to `max` bytes: a hook that runs
/// inside the jail (`"jail": true`), whose answer is its exit code, stdout and stderr apart.
/// The environment, sandbox and supervision are the bash tool's.
///
/// Errors: no jail in the request, or the program could not start.
pub fn run_split(
    req: &BashRequest<'_>,
    input: &Path,
    max: usize,
    cancel: &CancelToken,
) -> Result<Split, ToolError> {
    use std::os::fd::AsRawFd;
    let jail = req
        .jail
        .ok_or_else(|| ToolError::Failed("no jail to run in".into()))?;
    let start = Instant::now();
    let pipe =
        || io::pipe().map_err(|e| ToolError::Failed(format!("could not create a pipe: {e}")));
    let ((out_r, out_w), (err_r, err_w)) = (pipe()?, pipe()?);
    let env = command_env(req);
    let bash = find_bash(&env);
    let script = format!("exec < {}\n{}", shell_quote(input), req.command);
    let args = [std::ffi::OsStr::new("-c"), std::ffi::OsStr::new(&script)];
    let spawned = jail.spawn(&crate::sandbox::jail::Spawn {
        stdin: None,
        program: &bash,
        args: &args,
        env: &env,
        cwd: req.cwd,
        draft: req.sandbox.and_then(|s| s.draft_file()),
        ruleset: req.sandbox.and_then(|s| s.child_hook().ruleset_fd()),
        stdout: out_w.as_raw_fd(),
        stderr: err_w.as_raw_fd(),
        mcp: None,
    });
    drop(out_w);
    drop(err_w);
    let mut proc = Proc::Jailed(
        spawned.map_err(|e| ToolError::Failed(format!("could not start bash in the jail: {e}")))?,
    );
    let mut kept = Kept::new(max);
    let mut readers = [(out_r, true), (err_r, true)];
    let mut buf = vec![0u8; READ_CHUNK_BYTES];
    let mut pump = |wait: Duration| {
        pump_pipes(&mut readers, &mut buf, wait, &mut |i, data| {
            kept.push(i, data)
        })
    };
    let limits = crate::child::Limits {
        timeout: Some(req.timeout),
        kill_grace: KILL_GRACE,
        drain_grace: DRAIN_GRACE,
        reap_limit: REAP_LIMIT,
    };
    let watched = crate::child::supervise(&mut proc, start, &limits, Some(cancel), &mut pump);
    if watched.stop.is_some() {
        crate::child::Process::signal_group(&mut proc, libc::SIGKILL);
    }
    let [stdout, stderr] = kept.bytes;
    Ok(Split {
        status: watched.status.and_then(Result::ok),
        stop: watched.stop,
        stdout,
        stderr,
    })
}

/// `p` quoted for bash (single quotes).
fn shell_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// Kills what is left of the commands of the session folder `session_dir` after the process
/// that ran them died (SIGKILL, a crash): every process whose environment names the folder
/// or one of its sub-agents' (`TERN_SESSION_DIR`, set for every command) and its process group. Called when a session whose
/// turn died is reopened, so a command does not outlive tern and change the workspace behind the
/// next turn. Reads `/proc`; does nothing where there is none.
pub fn kill_orphans(session_dir: &Path) -> usize {
    // The bytes of the path, as the command's environment holds them (not lossy: a non-UTF-8
    // path must still match).
    let marker = {
        use std::os::unix::ffi::OsStrExt;
        let mut m = b"TERN_SESSION_DIR=".to_vec();
        m.extend_from_slice(session_dir.as_os_str().as_bytes());
        m
    };
    let me = std::process::id();
    // SAFETY: getpgrp(2) has no arguments and cannot fail.
    let my_group = unsafe { libc::getpgrp() };
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut killed = 0;
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        // The session's own commands and its sub-agents' (their folders are under it).
        let ours = |v: &[u8]| {
            v.strip_prefix(marker.as_slice())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(b"/"))
        };
        if !env.split(|b| *b == 0).any(ours) {
            continue;
        }
        let group = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|st| {
                let rest = &st[st.rfind(')')? + 1..];
                rest.split_whitespace().nth(2)?.parse::<libc::pid_t>().ok()
            });
        let Ok(p) = libc::pid_t::try_from(pid) else {
            continue;
        };
        // SAFETY: kill(2) on a pid (and its group) found above; no memory is involved.
        unsafe {
            if let Some(g) = group
                && g > 1
                && g != my_group
            {
                libc::kill(-g, libc::SIGKILL);
            }
            libc::kill(p, libc::SIGKILL);
        }
        killed += 1;
    }
    killed
}

/// Waits up to `timeout` for the pipe to be readable (data, EOF or error); false on timeout or
/// when a signal interrupted the wait.
/// One slice of reading a command's output pipes (one shared pipe, or stdout's and stderr's):
/// waits up to `wait` for either, reads once from each that is ready and hands the bytes to
/// `take` (the pipe's index: 0 stdout or shared, 1 stderr). An end of file or an error closes a
/// pipe. Returns whether any is still open. The one reader of the bash tool and of jail hooks.
fn pump_pipes(
    pipes: &mut [(io::PipeReader, bool)],
    buf: &mut [u8],
    wait: Duration,
    take: &mut dyn FnMut(usize, &[u8]),
) -> bool {
    // No allocation per slice: the drain of a big output runs this for every read.
    let mut fds: [RawFd; 2] = [-1, -1];
    for (fd, (r, open)) in fds.iter_mut().zip(pipes.iter()) {
        if *open {
            *fd = r.as_raw_fd();
        }
    }
    match wait_readable_any(fds, wait) {
        Ok(ready) => {
            for (i, (r, open)) in pipes.iter_mut().enumerate() {
                if !ready.get(i).copied().unwrap_or(false) {
                    continue;
                }
                match r.read(buf) {
                    Ok(0) => *open = false,
                    Ok(n) => take(i, &buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => *open = false,
                }
            }
        }
        Err(_) => pipes.iter_mut().for_each(|(_, open)| *open = false),
    }
    pipes.iter().any(|(_, open)| *open)
}

/// Waits up to `timeout` for either of `fds` (-1: none) to be readable (or closed); returns
/// which are. Interrupted: neither.
fn wait_readable_any(fds: [RawFd; 2], timeout: Duration) -> io::Result<[bool; 2]> {
    let mut pfds = fds.map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    });
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `pfds` is a valid array of 2 pollfds for the duration of the call (poll ignores
    // an entry whose fd is negative).
    let r = unsafe { libc::poll(pfds.as_mut_ptr(), 2, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok([false; 2])
        } else {
            Err(e)
        };
    }
    Ok(pfds.map(|p| p.fd >= 0 && p.revents != 0))
}

fn status_note(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("[exit {code}]");
    }
    match status.signal() {
        Some(sig) => match signal_name(sig) {
            Some(name) => format!("[killed by signal {sig} ({name})]"),
            None => format!("[killed by signal {sig}]"),
        },
        None => format!("[{status}]"),
    }
}

fn signal_name(sig: libc::c_int) -> Option<&'static str> {
    Some(match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_fills_every_placeholder() {
        let s = spec();
        assert_eq!(s.name, "bash");
        assert!(!s.description.contains('{'), "{}", s.description);
        assert!(s.description.contains(&format!("{DEFAULT_TIMEOUT_S} s")));
        assert!(s.description.contains(&MAX_TIMEOUT_S.to_string()));
        assert!(s.description.contains(&OUTPUT_CAP_BYTES.to_string()));
        assert_eq!(s.parameters["required"], json!(["command"]));
        assert_eq!(
            s.parameters["properties"]["timeout_s"]["maximum"],
            json!(MAX_TIMEOUT_S)
        );
        // Deterministic bytes: the same serialization every time.
        let a = serde_json::to_string(&spec()).unwrap();
        assert_eq!(a, serde_json::to_string(&s).unwrap());
    }

    #[test]
    fn parse_args_accepts_and_defaults() {
        let a = parse_args(&json!({"command": "ls", "extra": 1})).unwrap();
        assert_eq!(a.command, "ls");
        assert_eq!(a.timeout, Duration::from_secs(DEFAULT_TIMEOUT_S));
        for t in [json!(30), json!(30.0), json!("30")] {
            let a = parse_args(&json!({"command": "ls", "timeout_s": t})).unwrap();
            assert_eq!(a.timeout, Duration::from_secs(30));
        }
        let a = parse_args(&json!({"command": "ls", "timeout_s": null})).unwrap();
        assert_eq!(a.timeout, Duration::from_secs(DEFAULT_TIMEOUT_S));
    }

    #[test]
    fn parse_args_rejects_bad_input() {
        let cases = [
            (json!("ls"), "must be a JSON object"),
            (json!({}), "missing \"command\""),
            (json!({"command": 3}), "must be a string, got a number"),
            (json!({"command": "  "}), "is empty"),
            (
                json!({"command": "echo a\u{0}b"}),
                "command contains a NUL byte",
            ),
            (
                json!({"command": "ls", "timeout_s": 0}),
                "from 1 to 600 seconds, got 0",
            ),
            (json!({"command": "ls", "timeout_s": 601}), "not clamped"),
            (json!({"command": "ls", "timeout_s": -5}), "got -5"),
            (json!({"command": "ls", "timeout_s": 1.5}), "whole number"),
            (json!({"command": "ls", "timeout_s": true}), "whole number"),
            (json!({"command": "ls", "timeout_s": 1e300}), "whole number"),
        ];
        for (args, want) in cases {
            let err = parse_args(&args).unwrap_err().to_string();
            assert!(err.contains(want), "{args}: {err}");
        }
    }
}
