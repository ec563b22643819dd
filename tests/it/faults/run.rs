//! Running the real binary for the fault suite: throw-away workspaces (on tmpfs when the machine
//! has one, so thousands of fsyncs cost nothing), runs bounded by a time limit that reports a hang
//! instead of panicking (a sweep records it as a violation and goes on), and the fault points a
//! run passed.

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::cli::tern_clean;
use crate::support::procs::wait_exit;

/// How long one tern process may run before the suite calls it hung: far above a normal run
/// (a few hundred ms), far below the 300 s defaults that a hang would otherwise sit out.
pub const HANG: Duration = Duration::from_secs(30);

/// Where throw-away workspaces go: `/dev/shm` when it is a writable folder (tmpfs: the sweep's
/// fsyncs are free there), else the usual temp folder.
pub fn scratch_base() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && tempfile::Builder::new()
            .prefix("tern-probe-")
            .tempfile_in(shm)
            .is_ok()
    {
        return shm.to_path_buf();
    }
    std::env::temp_dir()
}

/// A throw-away workspace holding its own `.tern/`, plus a folder beside it (outside the state
/// folder) for fault logs. Removed when dropped.
pub struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    /// A new workspace (`ws/` with an empty `.tern/`) and a `logs/` folder.
    pub fn new() -> Site {
        let dir = tempfile::Builder::new()
            .prefix("tern-faults-")
            .tempdir_in(scratch_base())
            .expect("tempdir");
        std::fs::create_dir_all(dir.path().join("ws/.tern")).expect("mkdir .tern");
        std::fs::create_dir_all(dir.path().join("logs")).expect("mkdir logs");
        Site { dir }
    }

    /// A new site whose workspace is a copy of this one's (files, folders; not the logs).
    pub fn copy(&self) -> Site {
        let s = Site::new();
        std::fs::remove_dir_all(s.root()).expect("clear the new workspace");
        copy_tree(&self.root(), &s.root());
        s
    }

    /// The workspace folder (current folder and HOME of every run).
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    /// `.tern/` of the workspace.
    pub fn state(&self) -> PathBuf {
        self.root().join(".tern")
    }

    /// A fresh fault-log path outside the workspace.
    pub fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join("logs").join(name)
    }

    /// The session `.tern/current` names, if any.
    pub fn current(&self) -> Option<String> {
        std::fs::read_to_string(self.state().join("current"))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }

    /// `tern ARGS` here, talking OpenAI Chat Completions to `base` (the fake server's `/v1`).
    pub fn tern(&self, base: &str, args: &[&str]) -> Command {
        let mut c = tern_clean(&self.root().join(".home"));
        c.current_dir(self.root())
            .env("TERN_MODEL", "m")
            .env("OPENAI_BASE_URL", base)
            .args(args);
        c
    }
}

/// Copies the folder `from` to `to` (created), recursively; symlinks are not followed.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir").flatten() {
        let t = e.file_type().expect("file type");
        let dest = to.join(e.file_name());
        if t.is_dir() {
            copy_tree(&e.path(), &dest);
        } else if t.is_file() {
            std::fs::copy(e.path(), &dest).expect("copy");
        }
    }
}

/// How a bounded run ended.
#[derive(Debug, Clone)]
pub struct Run {
    /// Exit code (None when a signal ended it).
    pub code: Option<i32>,
    /// The signal that ended it.
    pub signal: Option<i32>,
    /// Still running at the limit (then killed).
    pub hung: bool,
    /// Everything on stdout (lossy UTF-8).
    pub stdout: String,
    /// Everything on stderr (lossy UTF-8).
    pub stderr: String,
    /// Wall time.
    pub elapsed: Duration,
}

impl Run {
    /// Killed by the fault injection (SIGKILL from itself).
    pub fn killed(&self) -> bool {
        self.signal == Some(libc::SIGKILL) && !self.hung
    }

    /// One line saying how it ended, for reports.
    pub fn summary(&self) -> String {
        let how = if self.hung {
            format!("hung (killed after {:?})", HANG)
        } else if let Some(s) = self.signal {
            format!("signal {s}")
        } else {
            format!("exit {}", self.code.unwrap_or(-1))
        };
        // `--json` says why in its last `result` event; other runs on stderr.
        let result = self
            .stdout
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .and_then(|e| e["error"].as_str().map(str::to_string));
        let last = result.unwrap_or_else(|| {
            self.stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .to_string()
        });
        format!("{how}: {}", last.chars().take(300).collect::<String>())
    }
}

/// Runs `cmd` with `stdin` on a pipe (None: /dev/null), killing it at `limit`.
pub fn run(mut cmd: Command, stdin: Option<&str>, limit: Duration) -> Run {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd.spawn().expect("spawn tern");
    let writer = stdin.map(|text| {
        let mut input = child.stdin.take().expect("stdin");
        let text = text.to_string();
        std::thread::spawn(move || {
            let _ = input.write_all(text.as_bytes());
        })
    });
    let mut so = child.stdout.take().expect("stdout");
    let mut se = child.stderr.take().expect("stderr");
    let t1 = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = so.read_to_end(&mut b);
        b
    });
    let t2 = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = se.read_to_end(&mut b);
        b
    });
    let status = wait_exit(&mut child, limit);
    if let Some(w) = writer {
        let _ = w.join();
    }
    let stdout = String::from_utf8_lossy(&t1.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&t2.join().unwrap_or_default()).into_owned();
    Run {
        code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        hung: status.is_none(),
        stdout,
        stderr,
        elapsed: started.elapsed(),
    }
}

/// One fault point a run passed, from its `TERN_FAULT_LOG`: its kind (`create`, `write`,
/// `fsync`, `rename`, `renamed`, `torn`, `appended`, `link`, `copy`, `remove`, `spill`) and its
/// path with the volatile parts normalised (see [`normalise`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    /// The kind of point.
    pub kind: String,
    /// The path, relative to the workspace, normalised.
    pub path: String,
}

impl std::fmt::Display for Point {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.path)
    }
}

/// The points logged in `log` (empty when the file is absent), paths relative to `root`.
pub fn points(log: &Path, root: &Path) -> Vec<Point> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ' ');
            let _n = f.next()?;
            let kind = f.next()?.to_string();
            let path = normalise(f.next().unwrap_or(""), root);
            Some(Point { kind, path })
        })
        .collect()
}

/// `path` relative to the workspace `root` (`/…/ws/.tern/sessions/20260102-…/meta.json` →
/// `sessions/<id>/meta.json`), with session ids, tempfile and spill names replaced by
/// placeholders, so the same point reads the same in every run.
pub fn normalise(path: &str, root: &Path) -> String {
    let state = format!("{}/", root.join(".tern").display());
    let p = path.strip_prefix(state.as_str()).unwrap_or(path);
    p.split('/')
        .map(|seg| {
            if is_session_id(seg) {
                "<id>".to_string()
            } else if seg.starts_with(".tmp-") {
                ".tmp-*".to_string()
            } else if seg.starts_with("out-") && seg.ends_with(".log") {
                "out-*.log".to_string()
            } else {
                seg.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// `YYYYMMDD-HHMMSS-xxxx`.
pub fn is_session_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 20
        && b[8] == b'-'
        && b[15] == b'-'
        && b[..8].iter().all(u8::is_ascii_digit)
        && b[9..15].iter().all(u8::is_ascii_digit)
        && b[16..].iter().all(u8::is_ascii_hexdigit)
}
