//! The shadow repository's `git`, run hermetically. The workspace is written by the model, so
//! nothing in it (nor in the person's git configuration) may make tern's git run code or change
//! bytes: no system or global config (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`, a
//! `HOME` that does not exist), no hooks (`core.hooksPath` names nothing), no fsmonitor, no
//! attributes file, and the store's own `info/attributes` (which outranks every in-tree
//! `.gitattributes`) turns off filters, end-of-line conversion, `ident` and encodings. A fixed
//! identity, `LC_ALL=C`, and an environment holding nothing else.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The `info/attributes` of the store: every path is taken as bytes, whatever the workspace's
/// `.gitattributes` ask for (filter drivers would run commands; `text`/`eol`/`ident`/encodings
/// would change the bytes restored).
pub const ATTRIBUTES: &str = "* -text !eol -ident -filter -working-tree-encoding !diff !merge\n";

/// A git command line bound to one store (`GIT_DIR`) and one work tree.
#[derive(Debug, Clone)]
pub struct Git {
    /// The `git` program (found on `PATH` when the store was opened).
    program: PathBuf,
    /// The shadow repository (`GIT_DIR`).
    pub dir: PathBuf,
    /// The workspace (`GIT_WORK_TREE`).
    pub work: PathBuf,
}

/// Why a git command failed: its arguments and what it printed on stderr.
#[derive(Debug)]
pub struct GitError(pub String);

impl std::fmt::Display for GitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<GitError> for io::Error {
    fn from(e: GitError) -> Self {
        io::Error::other(e.0)
    }
}

impl Git {
    /// The git of `dir` (a shadow repository) over `work`. Errors: no `git` on `PATH`.
    pub fn new(dir: PathBuf, work: PathBuf) -> io::Result<Git> {
        let program = find_program("git")
            .ok_or_else(|| io::Error::other("checkpoints need git, and there is no git on PATH"))?;
        Ok(Git { program, dir, work })
    }

    /// A command for `args`, hermetic as the module says.
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.program);
        c.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", "/nonexistent/tern-checkpoints")
            .env("XDG_CONFIG_HOME", "/nonexistent/tern-checkpoints")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_ATTR_NOSYSTEM", "1")
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_DIR", &self.dir)
            .env("GIT_WORK_TREE", &self.work)
            .env("GIT_INDEX_FILE", self.dir.join("index"))
            .env("GIT_AUTHOR_NAME", "tern")
            .env("GIT_AUTHOR_EMAIL", "tern@localhost")
            .env("GIT_COMMITTER_NAME", "tern")
            .env("GIT_COMMITTER_EMAIL", "tern@localhost")
            .env("LC_ALL", "C")
            .current_dir(&self.work);
        for kv in [
            "core.hooksPath=/nonexistent/tern-no-hooks",
            "core.fsmonitor=false",
            "core.attributesFile=/dev/null",
            "core.excludesFile=/dev/null",
            "core.autocrlf=false",
            "core.safecrlf=false",
            "core.symlinks=true",
            "core.fileMode=true",
            "core.quotePath=false",
            "core.bare=false",
            "core.untrackedCache=false",
            "core.splitIndex=false",
            "core.sparseCheckout=false",
            "gc.auto=0",
            "maintenance.auto=false",
            "commit.gpgSign=false",
            "diff.external=",
            "diff.noprefix=false",
            "submodule.recurse=false",
        ] {
            c.arg("-c").arg(kv);
        }
        c.args(args);
        c
    }

    /// Runs `args` with `input` on stdin; returns stdout. Errors: git could not start, or exited
    /// non-zero (its stderr in the message).
    pub fn run(&self, args: &[&str], input: Option<&[u8]>) -> Result<Vec<u8>, GitError> {
        finish(args, supervised(self.command(args), input))
    }

    /// [`Git::run`] where the exit codes `ok` count as success too (`check-ignore` exits 1
    /// when no path is ignored).
    pub fn run_ok(
        &self,
        args: &[&str],
        input: Option<&[u8]>,
        ok: &[i32],
    ) -> Result<Vec<u8>, GitError> {
        let out = supervised(self.command(args), input)
            .map_err(|e| GitError(format!("could not run git: {e}")))?;
        match out.status.and_then(|s| s.code()) {
            Some(c) if ok.contains(&c) => Ok(out.stdout),
            _ => finish(args, Ok(out)),
        }
    }

    /// [`Git::run`] returning stdout as trimmed text (ids, single lines).
    pub fn text(&self, args: &[&str], input: Option<&[u8]>) -> Result<String, GitError> {
        self.run(args, input)
            .map(|o| String::from_utf8_lossy(&o).trim().to_string())
    }

    /// [`Git::text`] with the author and committer date `date` (git's date format, e.g.
    /// `@0 +0000`): a commit made this way is the same object whenever its tree and message
    /// are the same.
    pub fn text_dated(&self, args: &[&str], date: &str) -> Result<String, GitError> {
        let mut c = self.command(args);
        c.env("GIT_AUTHOR_DATE", date)
            .env("GIT_COMMITTER_DATE", date);
        finish(args, supervised(c, None)).map(|o| String::from_utf8_lossy(&o).trim().to_string())
    }

    /// Creates the shadow repository at [`Git::dir`] when absent, the way a session is made:
    /// built whole under a temporary name beside it (`.tmp-git-*`: bare, no template so no
    /// sample hooks, the attributes that keep bytes as they are, an exclude of the state folder)
    /// and renamed into place, so a kill at any point leaves either no store or a whole one, and
    /// at most a `.tmp-*` folder that the store's lock sweeps ([`crate::checkpoint::store::Store::lock`]).
    /// The caller holds that lock. A store another process finished meanwhile wins; a folder
    /// without `HEAD` (a half-made store of an older tern) is made again.
    pub fn init(&self, exclude: &str) -> io::Result<()> {
        use crate::store::fsutil;
        if self.dir.join("HEAD").is_file() {
            return Ok(());
        }
        let parent = self
            .dir
            .parent()
            .ok_or_else(|| io::Error::other("the checkpoint store has no parent folder"))?;
        if std::fs::symlink_metadata(&self.dir).is_ok() {
            std::fs::remove_dir_all(&self.dir)?;
        }
        let building = tempfile::Builder::new()
            .prefix(&format!("{}git-", fsutil::TEMP_PREFIX))
            .tempdir_in(parent)?;
        let mut c = Command::new(&self.program);
        c.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", "/nonexistent/tern-checkpoints")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("LC_ALL", "C")
            .args(["init", "-q", "--bare", "--template="])
            .arg(building.path());
        fsutil::fault::point("git init", building.path());
        let out = supervised(c, None)?;
        if !out.status.is_some_and(|s| s.success()) {
            return Err(io::Error::other(format!(
                "git init of the checkpoint store failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let info = building.path().join("info");
        fsutil::ensure_dir(&info)?;
        fsutil::atomic_write(&info.join("attributes"), ATTRIBUTES.as_bytes())?;
        fsutil::atomic_write(&info.join("exclude"), exclude.as_bytes())?;
        // The commit point: the whole store appears at once.
        match fsutil::rename_folder(building.path(), &self.dir) {
            Ok(()) => {
                // Renamed away: nothing left for the guard to remove.
                let _ = building.keep();
                Ok(())
            }
            Err(_) if self.dir.join("HEAD").is_file() => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// stdout of a git run of `args` that exited 0; else why not (its stderr in the message).
fn finish(args: &[&str], out: io::Result<crate::child::Output>) -> Result<Vec<u8>, GitError> {
    let out = out.map_err(|e| GitError(format!("could not run git: {e}")))?;
    match out.status {
        Some(status) if status.success() => Ok(out.stdout),
        status => Err(GitError(format!(
            "git {} failed ({}): {}",
            args.first().copied().unwrap_or(""),
            status.map_or("not reaped".to_string(), |s| s.to_string()),
            String::from_utf8_lossy(&out.stderr).trim()
        ))),
    }
}

/// Runs git through the one supervised-child runner: its own process group, killed by the
/// kernel with tern (a tern killed mid-restore must not leave its git running: an orphaned
/// `read-tree` would go on writing the workspace and renaming the store's `index.lock` under the
/// next tern's git), all of its output kept, no time limit (a checkpoint waits for its git).
fn supervised(cmd: Command, input: Option<&[u8]>) -> io::Result<crate::child::Output> {
    crate::child::run(crate::child::Job {
        cmd,
        input,
        stderr: crate::child::Stderr::Keep,
        max_output: usize::MAX,
        limits: crate::child::Limits {
            timeout: None,
            kill_grace: Duration::from_secs(2),
            drain_grace: Duration::from_millis(200),
            reap_limit: Duration::from_secs(5),
        },
        cancel: None,
        groups: None,
        kill_leftovers: false,
    })
}

/// `name` on `PATH` (an executable regular file), else in the usual places.
fn find_program(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.extend(["/usr/bin", "/bin", "/usr/local/bin"].map(PathBuf::from));
    dirs.into_iter()
        .filter(|d| d.is_absolute())
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Splits NUL-separated git output (`-z`) into paths.
pub fn split_z(out: &[u8]) -> impl Iterator<Item = &[u8]> {
    out.split(|b| *b == 0).filter(|s| !s.is_empty())
}

/// A repository-relative path as git prints it (bytes) under `work`.
pub fn join(work: &Path, rel: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    work.join(std::ffi::OsStr::from_bytes(rel))
}
