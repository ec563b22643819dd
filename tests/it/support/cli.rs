//! Running the real `tern` binary from integration tests: a temporary workspace with its own
//! `.tern/`, a clean environment pointed at the fake provider, runs bounded by a time limit that
//! catches a hang (never a speed check), and what the runs leave.
//!
//! Two workspace shapes: [`Ws`] is only the folder (each test holds its own [`FakeServer`] and
//! builds commands with [`Ws::tern`], then runs them with [`run`] / [`ok`]); [`WireWs`] owns a
//! fake provider speaking one wire and runs `tern ARGS` itself ([`WireWs::ok`] and friends).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::files::{jsonl, read, read_json, snapshot};
use super::procs::wait_exit;
use super::{FakeServer, Reply, Wire};

/// The `tern` binary under test.
pub const TERN: &str = env!("CARGO_BIN_EXE_tern");

/// How long one run may take before the test calls it hung (far above a normal run).
pub const LIMIT: Duration = Duration::from_secs(60);

/// `tern` with a clean environment: PATH, HOME = `home` and nothing else (no provider keys, no
/// `TERN_STATE_DIR` from this machine); stdin is /dev/null.
pub fn tern_clean(home: &Path) -> Command {
    let mut c = Command::new(TERN);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .stdin(Stdio::null());
    c
}

/// A temporary workspace holding its own `.tern/`, so the state folder never leaks out of it
/// whatever lies above. Removed when dropped.
pub struct Ws {
    dir: tempfile::TempDir,
}

impl Ws {
    /// A new empty workspace with an empty `.tern/`.
    pub fn new() -> Ws {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join(".tern")).expect("mkdir .tern");
        Ws { dir }
    }

    /// The workspace folder.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// HOME of the commands built here: `.home/` in the workspace (not the workspace itself, which
    /// tern would warn about as a workspace that is the home folder).
    pub fn home(&self) -> PathBuf {
        self.dir.path().join(".home")
    }

    /// `tern` in this workspace ([`tern_clean`]) talking OpenAI Chat Completions to `fake`,
    /// model `m`.
    pub fn tern(&self, fake: &FakeServer) -> Command {
        self.tern_wire(fake, Wire::OpenAi)
    }

    /// `tern` in this workspace ([`tern_clean`]) talking `wire` to `fake`, model `m`.
    pub fn tern_wire(&self, fake: &FakeServer, wire: Wire) -> Command {
        let mut c = tern_clean(&self.home());
        c.current_dir(self.path()).env("TERN_MODEL", "m");
        match wire {
            Wire::OpenAi => c.env("OPENAI_BASE_URL", fake.openai_base()),
            Wire::Anthropic => c.env("ANTHROPIC_BASE_URL", fake.base_url()),
        };
        c
    }

    /// The session id named by `.tern/current`.
    pub fn current_id(&self) -> String {
        std::fs::read_to_string(self.path().join(".tern/current"))
            .expect("read .tern/current")
            .trim()
            .to_string()
    }

    /// The folder of session `id`.
    pub fn session_dir(&self, id: &str) -> PathBuf {
        self.path().join(".tern/sessions").join(id)
    }

    /// The folder of the current session.
    pub fn current_dir(&self) -> PathBuf {
        self.session_dir(&self.current_id())
    }
}

/// What a run left: how it ended and its output as text. The one record of a run for every
/// test that drives the binary (the fault suite's included).
pub struct Out {
    /// The command line that ran (program and arguments), for failure messages.
    pub command: String,
    /// The folder it ran in (None: the test's own).
    pub dir: Option<PathBuf>,
    /// The exit code (None when a signal ended it or it hung).
    pub code: Option<i32>,
    /// The signal that ended it.
    pub signal: Option<i32>,
    /// Still running at its limit (then killed and reaped).
    pub hung: bool,
    /// Everything written to stdout (lossy UTF-8).
    pub stdout: String,
    /// Everything written to stdout, as bytes.
    pub stdout_bytes: Vec<u8>,
    /// Everything written to stderr (lossy UTF-8).
    pub stderr: String,
    /// Wall time from spawn to exit (a report, never a speed check).
    pub elapsed: Duration,
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` in {}: {}\n--- stdout\n{}\n--- stderr\n{}",
            self.command,
            self.dir.as_ref().map_or_else(
                || "the test's folder".to_string(),
                |d| d.display().to_string()
            ),
            self.how(),
            self.stdout,
            self.stderr
        )
    }
}

impl Out {
    /// The exit code a shell would report: the code, else 128 + the signal.
    pub fn status(&self) -> i32 {
        self.code
            .unwrap_or_else(|| 128 + self.signal.unwrap_or(libc::SIGKILL))
    }

    /// Requires exit `code` (128 + N for signal N), showing the command and its output if not.
    pub fn expect_code(&self, code: i32) -> &Out {
        assert_eq!(self.status(), code, "exit code of {self:?}");
        self
    }

    /// Killed by SIGKILL (the fault injection's own), not by the hang limit.
    pub fn killed(&self) -> bool {
        self.signal == Some(libc::SIGKILL) && !self.hung
    }

    /// `exit N`, `signal N` or `hung`.
    fn how(&self) -> String {
        if self.hung {
            "hung (killed at its limit)".to_string()
        } else if let Some(s) = self.signal {
            format!("signal {s}")
        } else {
            format!("exit {:?}", self.code)
        }
    }

    /// One line saying how it ended and why (`--json`'s last `result` error, else stderr's
    /// last line), for reports.
    pub fn summary(&self) -> String {
        let result = self
            .stdout
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str::<Value>(l).ok())
            .and_then(|e| e["error"].as_str().map(str::to_string));
        let last = result.unwrap_or_else(|| {
            self.stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .to_string()
        });
        format!(
            "{}: {}",
            self.how(),
            last.chars().take(300).collect::<String>()
        )
    }

    /// As a [`std::process::Output`], for the tests that read bytes and `status`.
    pub fn output(self) -> Output {
        use std::os::unix::process::ExitStatusExt;
        let raw = match (self.code, self.signal) {
            (Some(c), _) => (c & 0xff) << 8,
            (None, Some(sig)) => sig & 0x7f,
            (None, None) => libc::SIGKILL,
        };
        Output {
            status: std::process::ExitStatus::from_raw(raw),
            stdout: self.stdout.into_bytes(),
            stderr: self.stderr.into_bytes(),
        }
    }
}

/// Runs `cmd` with `stdin` written to a pipe (then EOF), failing the test if it has not ended
/// within [`LIMIT`].
pub fn run(cmd: Command, stdin: &str) -> Out {
    run_within(cmd, Some(stdin), LIMIT)
}

/// [`run`], then requires exit 0.
pub fn ok(cmd: Command, stdin: &str) -> Out {
    exit_0(run(cmd, stdin))
}

/// Runs `cmd` with stdin /dev/null, failing the test if it has not ended within [`LIMIT`].
pub fn run_no_stdin(cmd: Command) -> Out {
    run_within(cmd, None, LIMIT)
}

/// [`run_no_stdin`], then requires exit 0.
pub fn ok_no_stdin(cmd: Command) -> Out {
    exit_0(run_no_stdin(cmd))
}

fn exit_0(out: Out) -> Out {
    assert_eq!(out.code, Some(0), "{out:?}");
    out
}

/// Runs `cmd` as it is set up (its stdin as given, /dev/null for [`tern_clean`]) within
/// [`LIMIT`], as a [`std::process::Output`]: the kit's bounded stand-in for `Command::output`.
pub fn output(mut cmd: Command) -> Output {
    cmd.stdin(Stdio::null());
    run_within(cmd, None, LIMIT).output()
}

/// [`launch`], failing the test (showing what it wrote) if the run hung.
pub fn run_within(cmd: Command, stdin: Option<&str>, limit: Duration) -> Out {
    let out = launch(cmd, stdin, limit);
    assert!(!out.hung, "tern did not finish within {limit:?}\n{out:?}");
    out
}

/// Runs `cmd` with `stdin` on a pipe (None: /dev/null) and collects its output; at `limit` it
/// is killed and reaped and the run says `hung` (never a panic: the fault suite records a hang
/// as a finding and goes on).
pub fn launch(cmd: Command, stdin: Option<&str>, limit: Duration) -> Out {
    start(cmd, stdin.map(str::as_bytes)).finish_within(limit)
}

/// A running `tern` whose stdout lines arrive as they are written: the one way tests start the
/// binary ([`launch`] runs one to its end).
pub struct Running {
    child: Child,
    lines: std::sync::mpsc::Receiver<Vec<u8>>,
    seen: Vec<Vec<u8>>,
    stderr: Option<std::thread::JoinHandle<Vec<u8>>>,
    started: std::time::Instant,
    command: String,
    dir: Option<PathBuf>,
}

/// Starts `cmd` with `stdin` on a pipe (written from a thread: a large input must not block on a
/// pipe the child has not read yet; None: /dev/null), stdout and stderr read as they come.
pub fn start(mut cmd: Command, stdin: Option<&[u8]>) -> Running {
    let command = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let dir = cmd.get_current_dir().map(Path::to_path_buf);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("could not start `{command}`: {e}"));
    if let (Some(input), Some(mut w)) = (stdin, child.stdin.take()) {
        let input = input.to_vec();
        std::thread::spawn(move || {
            let _ = w.write_all(&input);
        });
    }
    let out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut r = std::io::BufReader::new(out);
        loop {
            let mut line = Vec::new();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let stderr = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    Running {
        child,
        lines: rx,
        seen: Vec::new(),
        stderr: Some(stderr),
        started: std::time::Instant::now(),
        command,
        dir,
    }
}

impl Running {
    /// Its pid.
    pub fn pid(&self) -> libc::pid_t {
        self.child.id() as libc::pid_t
    }

    /// Waits (up to `within`) for a stdout line for which `pred` holds; returns it. Panics,
    /// showing the command and what it wrote, when none comes.
    pub fn wait_line(&mut self, within: Duration, pred: impl Fn(&str) -> bool) -> String {
        let end = std::time::Instant::now() + within;
        loop {
            if let Some(l) = self
                .seen
                .iter()
                .map(|l| String::from_utf8_lossy(l).into_owned())
                .find(|l| pred(l))
            {
                return l;
            }
            let left = end.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => {
                    let _ = self.child.kill();
                    let seen: Vec<String> = self
                        .seen
                        .iter()
                        .map(|l| String::from_utf8_lossy(l).into_owned())
                        .collect();
                    panic!(
                        "the awaited stdout line of `{}` never came; stdout so far:\n{seen:#?}",
                        self.command
                    );
                }
            }
        }
    }

    /// Sends `signal` and waits (up to `within`) for the exit; returns everything and how long
    /// the stop took after the signal.
    pub fn stop(mut self, signal: libc::c_int, within: Duration) -> (Out, Duration) {
        // SAFETY: signals the child we spawned (its pid is live: not yet waited for).
        let r = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(r, 0, "kill({signal}) failed");
        let signalled = std::time::Instant::now();
        let out = self.finish_within(within);
        assert!(
            !out.hung,
            "no exit within {within:?} after signal {signal}: {out:?}"
        );
        (out, signalled.elapsed())
    }

    /// Waits up to `limit` for the exit and collects everything; past it the process is killed
    /// and reaped and the run says `hung`.
    pub fn finish_within(&mut self, limit: Duration) -> Out {
        use std::os::unix::process::ExitStatusExt;
        let status = wait_exit(&mut self.child, limit);
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let elapsed = self.started.elapsed();
        // The reader thread ends at EOF; take every line it read.
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(10)) {
            self.seen.push(l);
        }
        let stderr = self
            .stderr
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        let stdout_bytes = self.seen.concat();
        Out {
            command: self.command.clone(),
            dir: self.dir.clone(),
            code: status.and_then(|s| s.code()),
            signal: status.and_then(|s| s.signal()),
            hung: status.is_none(),
            stdout: String::from_utf8_lossy(&stdout_bytes).into_owned(),
            stdout_bytes,
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
            elapsed,
        }
    }
}

/// Asserts that `tern ARGS` (a finished [`Output`]) exited with `code`, showing its output if not.
pub fn require(out: &Output, code: i32, args: &[&str]) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "tern {args:?}\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A temporary workspace ([`Ws`]) with its own fake provider speaking `wire`; runs `tern ARGS` in
/// it with stdin /dev/null unless said otherwise.
pub struct WireWs {
    /// The workspace.
    pub ws: Ws,
    /// The fake provider every command talks to.
    pub fake: FakeServer,
    /// The wire the commands speak.
    pub wire: Wire,
}

impl WireWs {
    /// A new workspace whose provider answers with `script`, then with its default answer.
    pub fn new(wire: Wire, script: Vec<Reply>) -> WireWs {
        WireWs {
            ws: Ws::new(),
            fake: FakeServer::start(script),
            wire,
        }
    }

    /// The workspace folder.
    pub fn root(&self) -> &Path {
        self.ws.path()
    }

    /// Appends `replies` to the provider's script.
    pub fn push(&self, replies: Vec<Reply>) {
        for r in replies {
            self.fake.push(r);
        }
    }

    /// `tern ARGS` in the workspace with a clean environment pointing at the fake server.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.ws.tern_wire(&self.fake, self.wire);
        c.args(args);
        c
    }

    /// Runs `tern ARGS` to its end (stdin /dev/null), failing the test if it hangs.
    pub fn tern(&self, args: &[&str]) -> Output {
        run_within(self.cmd(args), None, LIMIT).output()
    }

    /// Runs `tern ARGS` with `input` on stdin, failing the test if it hangs.
    pub fn tern_in(&self, args: &[&str], input: &str) -> Output {
        run_within(self.cmd(args), Some(input), LIMIT).output()
    }

    /// Starts `tern ARGS` with stdout and stderr piped.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.cmd(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tern")
    }

    /// Runs `tern ARGS` and requires exit 0.
    pub fn ok(&self, args: &[&str]) -> Output {
        let out = self.tern(args);
        require(&out, 0, args);
        out
    }

    /// Runs `tern ARGS` with `input` on stdin and requires exit 0.
    pub fn ok_in(&self, args: &[&str], input: &str) -> Output {
        let out = self.tern_in(args, input);
        require(&out, 0, args);
        out
    }

    /// Runs `tern ARGS` and requires exit 1; returns stderr.
    pub fn refused(&self, args: &[&str]) -> String {
        let out = self.tern(args);
        require(&out, 1, args);
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// The current session's folder.
    pub fn session(&self) -> PathBuf {
        self.ws.current_dir()
    }

    /// The file `name` of the current session.
    pub fn path(&self, name: &str) -> PathBuf {
        self.session().join(name)
    }

    /// The text of the current session's file `name`.
    pub fn read(&self, name: &str) -> String {
        read(&self.path(name))
    }

    /// The current session's file `name`, parsed as JSON.
    pub fn json(&self, name: &str) -> Value {
        read_json(&self.path(name))
    }

    /// The current session's events (`events.jsonl`).
    pub fn events(&self) -> Vec<Value> {
        jsonl(&self.path("events.jsonl"))
    }

    /// The current session's stored messages (`conversation.jsonl`).
    pub fn conversation(&self) -> Vec<Value> {
        jsonl(&self.path("conversation.jsonl"))
    }

    /// Every request body received so far, parsed.
    pub fn bodies(&self) -> Vec<Value> {
        self.fake.requests().iter().map(|r| r.json()).collect()
    }

    /// Every request body received so far, as sent (UTF-8 required).
    pub fn raw_bodies(&self) -> Vec<String> {
        self.fake
            .requests()
            .iter()
            .map(|r| String::from_utf8(r.body.clone()).expect("body is UTF-8"))
            .collect()
    }

    /// Every file under `.tern/`, by relative path.
    pub fn snapshot(&self) -> BTreeMap<String, Vec<u8>> {
        snapshot(&self.root().join(".tern"))
    }

    /// Asserts that nothing under `.tern/` changed since `before`, except events appended to
    /// `events.jsonl` whose types are all in `allowed`. Returns the appended events.
    pub fn unchanged_since(
        &self,
        before: &BTreeMap<String, Vec<u8>>,
        allowed: &[&str],
    ) -> Vec<Value> {
        let after = self.snapshot();
        let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
        assert_eq!(names(&after), names(before), "no file appeared or vanished");
        let mut appended = Vec::new();
        for (name, old) in before {
            let new = &after[name];
            if name.ends_with("events.jsonl") {
                assert!(new.starts_with(old), "events.jsonl is append-only");
                for line in String::from_utf8_lossy(&new[old.len()..]).lines() {
                    let ev: Value = serde_json::from_str(line).expect("event");
                    let t = ev["type"].as_str().unwrap_or("");
                    assert!(allowed.contains(&t), "unexpected event {ev}");
                    appended.push(ev);
                }
            } else if name.ends_with("meta.json") && allowed.contains(&"usage") && new != old {
                // A request that got usage is counted in meta.json whatever happened next
                // (issue 18): only `turns`, `usage`, what they cost and `updated_at` may move.
                let strip = |b: &[u8]| {
                    let mut v: Value = serde_json::from_slice(b).expect("meta.json parses");
                    for k in ["turns", "usage", "cost_usd", "unpriced", "updated_at"] {
                        v.as_object_mut().map(|o| o.remove(k));
                    }
                    v
                };
                assert_eq!(strip(new), strip(old), "{name} changed beyond its counts");
            } else {
                assert!(
                    new == old,
                    "{name} changed:\n--- before\n{}\n--- after\n{}",
                    String::from_utf8_lossy(old),
                    String::from_utf8_lossy(new)
                );
            }
        }
        appended
    }
}
