//! `--worktree NAME` (DESIGN §18): a session of its own in a git worktree of the repository, so
//! several agents work on one repository without stepping on each other's files or undo.
//!
//! The worktree is `<repository>/.tern/worktrees/NAME` (inside the state folder, which git
//! ignores), on a new branch `tern/NAME` made from the current `HEAD`; it holds a `.tern/` of
//! its own, so it is the session's workspace: the jail's writable root, its own sessions,
//! checkpoints and undo. Its git dir lives in the main repository's `.git/worktrees/NAME`, which
//! the jail shows through (objects and refs shared), so commits inside land on the branch. tern
//! never merges or removes a worktree: the person does, with git.
//!
//! Pure core: [`plan`] (the repository's worktrees as git lists them, the branch, the folder →
//! make it, use it, or refuse with the reason); the edge runs git (its hooks off: tern's git
//! runs no repository code).

use std::path::{Path, PathBuf};

/// The worktree a session runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worktree {
    /// Its name (`NAME` of `--worktree NAME`).
    pub name: String,
    /// Its branch, `tern/NAME`.
    pub branch: String,
    /// Its folder, `<repository>/.tern/worktrees/NAME`.
    pub path: PathBuf,
    /// It was made now (rather than found).
    pub made: bool,
    /// Where the session starts: the same subfolder of the worktree tern was started in within
    /// its repository (when the worktree has it), else the worktree's root.
    pub start: PathBuf,
}

/// One worktree as `git worktree list --porcelain` gives it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listed {
    /// Its folder.
    pub path: PathBuf,
    /// Its branch (`refs/heads/…`); None when detached or bare.
    pub branch: Option<String>,
    /// git says its folder or git dir is gone (`prunable`).
    pub prunable: bool,
}

/// What to do for `--worktree NAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Make it (`git worktree add -b tern/NAME PATH HEAD`).
    Make,
    /// It exists on its branch: use it.
    Use,
    /// Neither: the one-line reason.
    Refuse(String),
}

/// Why `--worktree NAME` cannot be used (a usage error, exit 2): one line each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorktreeError {
    /// The name cannot name a folder and a branch.
    Name(String),
    /// git failed or could not run (its stderr's line).
    Git(String),
    /// The repository or the folder is not in a state tern can use (no repository, no
    /// commit, a branch taken, a folder in the way).
    Refused(String),
}

impl std::fmt::Display for WorktreeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorktreeError::Name(why) | WorktreeError::Git(why) | WorktreeError::Refused(why) => {
                f.write_str(why)
            }
        }
    }
}

impl std::error::Error for WorktreeError {}

/// A line of `enter`'s own: the repository or the folder refuses.
impl From<String> for WorktreeError {
    fn from(why: String) -> WorktreeError {
        WorktreeError::Refused(why)
    }
}

/// The line, for the surfaces' usage error.
impl From<WorktreeError> for String {
    fn from(e: WorktreeError) -> String {
        e.to_string()
    }
}

/// The branch of worktree `name`.
pub fn branch_of(name: &str) -> String {
    format!("tern/{name}")
}

/// Checks a worktree name: 1 to 64 of `[A-Za-z0-9._-]`, not starting with `.` or `-`, no `..`
/// (it names a folder and a branch). Errors: why not.
pub fn check_name(name: &str) -> Result<(), WorktreeError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(['.', '-'])
        && !name.contains("..")
        && !name.ends_with(".lock")
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(WorktreeError::Name(format!(
            "--worktree {name:?}: a name is 1 to 64 letters, digits, '.', '_' or '-' (not first: '.' or '-')"
        )))
    }
}

/// Reads `git worktree list --porcelain`.
pub fn parse_list(porcelain: &str) -> Vec<Listed> {
    let mut out = Vec::new();
    let mut cur: Option<Listed> = None;
    for line in porcelain.lines() {
        if let Some(p) = line.strip_prefix("worktree ") {
            out.extend(cur.take());
            cur = Some(Listed {
                path: PathBuf::from(p),
                ..Listed::default()
            });
        } else if let Some(c) = cur.as_mut() {
            if let Some(b) = line.strip_prefix("branch ") {
                c.branch = Some(b.to_string());
            } else if line == "prunable" || line.starts_with("prunable ") {
                c.prunable = true;
            }
        }
    }
    out.extend(cur);
    out
}

/// What to do for worktree `name` at `path`, given the repository's worktrees, whether its
/// branch exists and whether something is at `path`.
pub fn plan(
    name: &str,
    path: &Path,
    listed: &[Listed],
    branch_exists: bool,
    occupied: bool,
) -> Plan {
    let branch = branch_of(name);
    let full = format!("refs/heads/{branch}");
    if let Some(w) = listed.iter().find(|w| w.path == path) {
        if w.prunable {
            return Plan::Refuse(format!(
                "worktree {name} is registered but not whole (its folder or git dir is gone): run `git worktree prune`, then try again"
            ));
        }
        return match &w.branch {
            Some(b) if *b == full => Plan::Use,
            Some(b) => Plan::Refuse(format!(
                "worktree {name} is on {}, not {branch}: tern does not reuse it (pick another name)",
                b.trim_start_matches("refs/heads/")
            )),
            None => Plan::Refuse(format!(
                "worktree {name} has no branch checked out (detached HEAD), not {branch}: tern does not reuse it (pick another name)"
            )),
        };
    }
    if occupied {
        return Plan::Refuse(format!(
            "{} exists but is no worktree of this repository: move it away or pick another name",
            path.display()
        ));
    }
    if branch_exists {
        let at = listed
            .iter()
            .find(|w| w.branch.as_deref() == Some(full.as_str()))
            .map(|w| format!(" (checked out at {})", w.path.display()))
            .unwrap_or_default();
        return Plan::Refuse(format!(
            "branch {branch} exists already{at}: tern makes a new one for a new worktree; delete it (`git branch -D {branch}`) or pick another name"
        ));
    }
    Plan::Make
}

/// Runs git in `dir` with the repository's hooks and fsmonitor off; its stdout. Errors: git's
/// stderr (one line), or why it could not run.
fn git(dir: &Path, args: &[&str]) -> Result<String, WorktreeError> {
    let mut cmd = std::process::Command::new("git");
    cmd.current_dir(dir)
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
        ])
        .args(args);
    let out = crate::child::run(crate::child::Job {
        cmd,
        input: None,
        stderr: crate::child::Stderr::Keep,
        max_output: 1 << 20,
        limits: crate::child::Limits {
            timeout: Some(std::time::Duration::from_secs(120)),
            kill_grace: std::time::Duration::from_secs(1),
            drain_grace: std::time::Duration::from_millis(200),
            reap_limit: std::time::Duration::from_secs(5),
        },
        cancel: None,
        groups: None,
        kill_leftovers: false,
    })
    .map_err(|e| WorktreeError::Git(format!("could not run git: {e}")))?;
    if out.status.is_some_and(|s| s.success()) {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let line = err
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("failed");
        Err(WorktreeError::Git(format!(
            "git {}: {}",
            args.first().unwrap_or(&""),
            line.trim()
        )))
    }
}

/// Makes or finds worktree `name` of the repository holding `from` (see the module doc) and
/// gives it a state folder of its own.
///
/// Errors (one line): not in a git repository, a repository without a commit, a name that is
/// not valid, taken by another branch or in an unclean state, git failing.
pub fn enter(from: &Path, name: &str) -> Result<Worktree, WorktreeError> {
    check_name(name)?;
    let common = git(
        from,
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
    )
    .map_err(|_| {
        format!(
            "--worktree needs a git repository: {} is not in one",
            from.display()
        )
    })?;
    let common = PathBuf::from(common.trim());
    // The main worktree: the folder of the common git dir (`.git`); a bare repository has none.
    let root = match (common.file_name(), common.parent()) {
        (Some(n), Some(p)) if n == ".git" => p.to_path_buf(),
        _ => {
            return Err(WorktreeError::Refused(format!(
                "--worktree needs a repository with a work tree: {} is bare",
                common.display()
            )));
        }
    };
    git(
        &root,
        &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"],
    )
    .map_err(|_| {
        format!(
            "--worktree makes a branch from HEAD, and {} has no commit yet",
            root.display()
        )
    })?;
    let state = crate::store::StateDir::at(&root, &root, None);
    state.init().map_err(|e| e.to_string())?;
    let dir = root.join(".tern").join("worktrees");
    crate::store::fsutil::ensure_dir(&dir)
        .map_err(|e| WorktreeError::Refused(format!("{}: {e}", dir.display())))?;
    let path = dir.join(name);
    // One tern at a time makes worktrees of a repository: git's `worktree add` reads the other
    // worktrees' admin files and fails on one another is writing (seen with four at once).
    let _one = crate::store::lock::SessionLock::acquire(&dir.join(".lock"))
        .map_err(|e| WorktreeError::Refused(format!("{}: {e}", dir.join(".lock").display())))?;
    let listed = parse_list(&git(&root, &["worktree", "list", "--porcelain"])?);
    let branch = branch_of(name);
    let exists = git(
        &root,
        &[
            "show-ref",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}"),
        ],
    )
    .is_ok();
    let occupied = std::fs::symlink_metadata(&path).is_ok();
    // git lists canonical paths.
    let real = std::fs::canonicalize(&dir)
        .map(|d| d.join(name))
        .unwrap_or_else(|_| path.clone());
    let made = match plan(name, &real, &listed, exists, occupied) {
        Plan::Use => {
            // Parallel agents never share a tree: a worktree another tern is working in is
            // refused, with who holds it (issue 46).
            if let Some((id, pid)) = running_session(&real.join(".tern")) {
                return Err(WorktreeError::Refused(format!(
                    "worktree {name} has a session running: {id} (pid {pid}); give this agent a worktree of its own (--worktree OTHER-NAME), or to work beside it on purpose, cd {} and run tern there",
                    real.display()
                )));
            }
            false
        }
        Plan::Make => {
            let target = real.display().to_string();
            if let Err(e) = git(&root, &["worktree", "add", "-b", &branch, &target, "HEAD"]) {
                // What a failed add left (the branch it made, a half-made folder) goes, so the
                // same name works next time instead of being "taken".
                let _ = git(&root, &["worktree", "prune"]);
                let _ = git(&root, &["branch", "-D", &branch]);
                return Err(e);
            }
            true
        }
        Plan::Refuse(why) => return Err(WorktreeError::Refused(why)),
    };
    // Its own state folder: the worktree is the session's workspace.
    let own = crate::store::StateDir::at(&real, &real, None);
    own.init().map_err(|e| e.to_string())?;
    // Started in `pkg/app` of the repository: the session starts in `pkg/app` of the worktree.
    let prefix = git(from, &["rev-parse", "--show-prefix"]).unwrap_or_default();
    let prefix = prefix.trim();
    let start = Some(real.join(prefix))
        .filter(|p| !prefix.is_empty() && !prefix.starts_with("..") && p.is_dir())
        .unwrap_or_else(|| real.clone());
    Ok(Worktree {
        name: name.to_string(),
        branch,
        path: real,
        made,
        start,
    })
}

/// One of the worktrees tern made in a state folder, as `tern sessions` lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Made {
    /// Its name.
    pub name: String,
    /// Its folder.
    pub path: PathBuf,
    /// The branch checked out there (None: detached, or its git dir is gone).
    pub branch: Option<String>,
    /// Its sessions.
    pub sessions: usize,
    /// A session a live process holds there now: its id and pid.
    pub running: Option<(String, u32)>,
}

/// A session of the state folder `state_root` that a live process holds now (its id and pid):
/// a worktree with one is taken by that agent.
pub fn running_session(state_root: &Path) -> Option<(String, u32)> {
    let rd = std::fs::read_dir(state_root.join("sessions")).ok()?;
    rd.flatten().find_map(|e| {
        let id = e.file_name().into_string().ok()?;
        if id.starts_with('.') {
            return None;
        }
        let s = crate::store::Session::at(&id, e.path());
        crate::store::held_elsewhere(&s).map(|pid| (id, pid))
    })
}

/// The worktrees under `<state_root>/worktrees/` (read from files: the worktree's `.git`
/// names its git dir, whose `HEAD` names the branch), by name.
pub fn made(state_root: &Path) -> Vec<Made> {
    let Ok(rd) = std::fs::read_dir(state_root.join("worktrees")) else {
        return Vec::new();
    };
    let mut out: Vec<Made> = rd
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let path = e.path();
            let gitdir = crate::store::fsutil::read_regular(&path.join(".git"), 4096)
                .ok()
                .flatten()
                .and_then(|b| {
                    let t = String::from_utf8_lossy(&b).into_owned();
                    t.trim().strip_prefix("gitdir: ").map(PathBuf::from)
                });
            let branch = gitdir
                .and_then(|g| {
                    crate::store::fsutil::read_regular(&g.join("HEAD"), 4096)
                        .ok()
                        .flatten()
                })
                .and_then(|b| {
                    String::from_utf8_lossy(&b)
                        .trim()
                        .strip_prefix("ref: refs/heads/")
                        .map(str::to_string)
                });
            let sessions = std::fs::read_dir(path.join(".tern/sessions"))
                .map(|r| {
                    r.flatten()
                        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                        .count()
                })
                .unwrap_or(0);
            Some(Made {
                running: running_session(&path.join(".tern")),
                name,
                path,
                branch,
                sessions,
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for ok in ["job1", "fix-login", "a.b_c", "J7"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".hidden",
            "-x",
            "a/b",
            "a..b",
            "x.lock",
            "sp ace",
            &"n".repeat(65),
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_porcelain_list_is_read() {
        let l = parse_list(
            "worktree /r\nHEAD abc\nbranch refs/heads/main\n\nworktree /r/.tern/worktrees/a\nHEAD def\nbranch refs/heads/tern/a\n\nworktree /r/.tern/worktrees/b\nHEAD 123\ndetached\nprunable gitdir file points to non-existent location\n",
        );
        assert_eq!(l.len(), 3);
        assert_eq!(l[1].branch.as_deref(), Some("refs/heads/tern/a"));
        assert!(l[2].prunable && l[2].branch.is_none());
    }

    #[test]
    fn make_use_or_refuse() {
        let p = Path::new("/r/.tern/worktrees/a");
        let ours = Listed {
            path: p.into(),
            branch: Some("refs/heads/tern/a".into()),
            prunable: false,
        };
        assert_eq!(plan("a", p, &[], false, false), Plan::Make);
        assert_eq!(
            plan("a", p, std::slice::from_ref(&ours), true, true),
            Plan::Use
        );
        let other = Listed {
            branch: Some("refs/heads/main".into()),
            ..ours.clone()
        };
        assert!(
            matches!(plan("a", p, &[other], true, true), Plan::Refuse(w) if w.contains("on main"))
        );
        let broken = Listed {
            prunable: true,
            ..ours.clone()
        };
        assert!(
            matches!(plan("a", p, &[broken], true, false), Plan::Refuse(w) if w.contains("prune"))
        );
        assert!(
            matches!(plan("a", p, &[], false, true), Plan::Refuse(w) if w.contains("no worktree"))
        );
        let elsewhere = Listed {
            path: "/elsewhere".into(),
            ..ours
        };
        assert!(
            matches!(plan("a", p, &[elsewhere], true, false), Plan::Refuse(w) if w.contains("/elsewhere"))
        );
        assert!(
            matches!(plan("a", p, &[], true, false), Plan::Refuse(w) if w.contains("git branch -D tern/a"))
        );
    }
}
