//! Running the real binary for the fault suite: throw-away workspaces (on tmpfs when the machine
//! has one, so thousands of fsyncs cost nothing), runs bounded by a time limit that reports a hang
//! instead of panicking (a sweep records it as a violation and goes on), and the fault points a
//! run passed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::cli::tern_clean;

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

/// Copies the folder `from` to `to` (created), recursively, files with their times; symlinks
/// are copied as links.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir").flatten() {
        let t = e.file_type().expect("file type");
        let dest = to.join(e.file_name());
        if t.is_dir() {
            copy_tree(&e.path(), &dest);
        } else if t.is_file() {
            std::fs::copy(e.path(), &dest).expect("copy");
            // Undo keeps files newer than the turns it undoes: a copy keeps its times.
            let m = e.metadata().expect("metadata");
            let times = std::fs::FileTimes::new()
                .set_accessed(m.accessed().expect("atime"))
                .set_modified(m.modified().expect("mtime"));
            std::fs::File::open(&dest)
                .and_then(|f| f.set_times(times))
                .expect("set times");
        } else if t.is_symlink() {
            let target = std::fs::read_link(e.path()).expect("read_link");
            std::os::unix::fs::symlink(target, &dest).expect("symlink");
        }
    }
}

/// How a bounded run ended: the test kit's one record of a run.
pub use crate::support::cli::Out as Run;

/// Runs `cmd` with `stdin` on a pipe (None: /dev/null), killing it at `limit` (the kit's one
/// runner; a hang is reported in the result, not a panic).
pub fn run(cmd: Command, stdin: Option<&str>, limit: Duration) -> Run {
    crate::support::cli::launch(cmd, stdin, limit)
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
