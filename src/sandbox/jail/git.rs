//! git by construction (issue 29, DESIGN §10): nothing that makes the person's git run a
//! program or look elsewhere can be changed from the jail — not by names that exist at start,
//! not by names a command (or a background job it left) creates later.
//!
//! **How.** For every repository the workspace uses at start (its own `.git` folder, the folder
//! a `.git` file names and that folder's common folder — a linked worktree's, a separate git
//! dir —, the submodules' git dirs under `modules/`, nested repositories near the top of the
//! workspace), the jail does not see the real git dir but a **shadow**: a copy tern makes of
//! everything in it except git's data folders (`objects`, `refs`, `logs`, `lfs`, `rr-cache`),
//! which are bound through from the real one. The jail's git works on the shadow: it reads the
//! person's config and hooks (copies), writes its `HEAD`, `index` and `packed-refs` (in the
//! shadow) and its objects and refs (through to the real ones). Whatever a command writes to
//! the shadow's `config`, `hooks/`, `info/`, `commondir`, `config.worktree` or `gitdir` stays
//! there and is gone with the jail.
//!
//! **Copy-back.** Before and after each command ([`Sync::run`]) tern copies between each real
//! git dir and its shadow only the files git writes as data ([`DATA_FILES`]), and only one way:
//! the side that changed since the last look wins; when both changed, the person's does (their
//! `git` in another pane). An index that would add a submodule entry (git reads such a
//! folder's own `.git` config at the next `git status`) is not copied back; it is said.
//!
//! The `.git` *file* of a linked worktree or submodule is shown read-only, and a
//! `core.hooksPath` that points into the workspace too. A repository a command creates during
//! the session is the model's work like any other file.
//!
//! Discovery is [`plan`] (reads, no writes); [`make`] writes the shadows; the mount plan
//! binds them (`mounts.rs`).

use std::io;
use std::path::{Path, PathBuf};

/// git's data folders: bound from the real git dir into the shadow (read and written through).
pub const DATA_DIRS: [&str; 5] = ["objects", "refs", "logs", "lfs", "rr-cache"];

/// The files git writes as data (git-repository-layout): copied between the real git dir and
/// its shadow, the side that changed winning. Nothing else of a shadow ever reaches the host.
pub const DATA_FILES: [&str; 21] = [
    "HEAD",
    "index",
    "packed-refs",
    "ORIG_HEAD",
    "FETCH_HEAD",
    "MERGE_HEAD",
    "MERGE_MSG",
    "MERGE_MODE",
    "MERGE_RR",
    "CHERRY_PICK_HEAD",
    "REVERT_HEAD",
    "AUTO_MERGE",
    "SQUASH_MSG",
    "COMMIT_EDITMSG",
    "BISECT_LOG",
    "BISECT_START",
    "BISECT_EXPECTED_REV",
    "BISECT_ANCESTORS_OK",
    "BISECT_NAMES",
    "BISECT_TERMS",
    "shallow",
];

/// Most folders looked at for nested repositories (a bounded walk of the workspace's top two
/// levels, so the jail's start stays cheap in a big tree).
const NESTED_LOOKS: usize = 256;

/// What the jail does with the repositories of a workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Top-level real git dirs to shadow (each holds its submodules' and linked worktrees' git
    /// dirs, which are shadowed with it).
    pub roots: Vec<PathBuf>,
    /// Every git dir inside those roots (the roots too), whose data folders are bound through
    /// and whose data files are synced.
    pub git_dirs: Vec<PathBuf>,
    /// Shown read-only: `.git` files (linked worktrees, submodules), a `core.hooksPath` in the
    /// workspace.
    pub read_only: Vec<PathBuf>,
}

/// The repositories `workspace` uses at start (see the module docs). Reads only; every path
/// canonical.
pub fn plan(workspace: &Path) -> Plan {
    let mut p = Plan::default();
    let mut roots: Vec<PathBuf> = Vec::new();
    let add_repo = |dot: &Path, p: &mut Plan, roots: &mut Vec<PathBuf>| {
        let Some((dirs, file)) = git_dirs_of(dot) else {
            return;
        };
        p.read_only.extend(file);
        for d in dirs {
            if !roots.iter().any(|r| d.starts_with(r)) {
                roots.retain(|r| !r.starts_with(&d));
                roots.push(d);
            }
        }
    };
    add_repo(&workspace.join(".git"), &mut p, &mut roots);
    for dot in nested_dot_gits(workspace) {
        add_repo(&dot, &mut p, &mut roots);
    }
    for r in &roots {
        for g in git_dirs_under(r) {
            // A submodule's work tree names its git dir in a `.git` file: read-only too.
            if let Some(wt) = worktree_of(&g)
                && std::fs::symlink_metadata(wt.join(".git")).is_ok_and(|m| m.is_file())
            {
                p.read_only.push(wt.join(".git"));
            }
            if let Some(h) = hooks_path(&g, workspace) {
                p.read_only.push(h);
            }
            p.git_dirs.push(g);
        }
    }
    p.roots = roots;
    p.read_only.sort();
    p.read_only.dedup();
    p
}

/// The git dirs a `.git` entry stands for: itself (a folder), or the folder a `.git` file names
/// and that folder's common folder; and the `.git` file itself (None for a folder).
fn git_dirs_of(dot: &Path) -> Option<(Vec<PathBuf>, Option<PathBuf>)> {
    let meta = std::fs::symlink_metadata(dot).ok()?;
    let (dir, file) = if meta.is_dir() {
        (std::fs::canonicalize(dot).ok()?, None)
    } else if meta.is_file() {
        let text = read_small(dot)?;
        let rel = text
            .lines()
            .next()?
            .strip_prefix("gitdir:")?
            .trim()
            .to_string();
        let base = dot.parent()?;
        (
            std::fs::canonicalize(base.join(rel)).ok()?,
            Some(dot.to_path_buf()),
        )
    } else {
        return None;
    };
    if !is_git_dir(&dir) {
        return None;
    }
    let mut dirs = vec![dir.clone()];
    if let Some(common) = read_small(&dir.join("commondir"))
        .and_then(|c| std::fs::canonicalize(dir.join(c.trim())).ok())
    {
        dirs.push(common);
    }
    let file = file.and_then(|f| std::fs::canonicalize(f).ok());
    Some((dirs, file))
}

/// Whether `d` looks like a git dir (`HEAD` and `objects`, or `HEAD` and a `commondir`), not
/// following a link at those names (git's own layout has none there). The door asks it too:
/// a folder git would take for a repository, whatever its name.
pub(crate) fn is_git_dir(d: &Path) -> bool {
    let is = |n: &str, dir: bool| {
        std::fs::symlink_metadata(d.join(n))
            .is_ok_and(|m| if dir { m.is_dir() } else { m.is_file() })
    };
    is("HEAD", false) && (is("objects", true) || is("commondir", false))
}

/// `root` and every git dir inside it (`modules/…` of submodules at any depth, `worktrees/*`
/// of linked worktrees), parents first.
fn git_dirs_under(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.to_path_buf()];
    let mut stack: Vec<PathBuf> = ["modules", "worktrees"]
        .iter()
        .map(|s| root.join(s))
        .collect();
    let mut looked = 0;
    while let Some(d) = stack.pop() {
        looked += 1;
        if looked > 4 * NESTED_LOOKS {
            break;
        }
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let p = e.path();
            if is_git_dir(&p) {
                stack.push(p.join("modules"));
                out.push(p);
            } else {
                // Submodule names may hold slashes: `modules/lib/foo`.
                stack.push(p);
            }
        }
    }
    out
}

/// Nested repositories in the workspace's top two levels (`.git` folders or files), skipping
/// hidden folders and the usual build and dependency trees; at most [`NESTED_LOOKS`] folders.
fn nested_dot_gits(ws: &Path) -> Vec<PathBuf> {
    const SKIP: [&str; 5] = ["node_modules", "target", "build", "dist", "vendor"];
    let mut out = Vec::new();
    let mut level: Vec<PathBuf> = vec![ws.to_path_buf()];
    let mut looked = 0;
    for _ in 0..2 {
        let mut next = Vec::new();
        for d in level {
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in rd.flatten() {
                looked += 1;
                if looked > NESTED_LOOKS {
                    return out;
                }
                let name = e.file_name();
                let name = name.to_string_lossy();
                if name.starts_with('.')
                    || SKIP.contains(&name.as_ref())
                    || !e.file_type().is_ok_and(|t| t.is_dir())
                {
                    continue;
                }
                let dot = e.path().join(".git");
                if std::fs::symlink_metadata(&dot).is_ok() {
                    out.push(dot);
                }
                next.push(e.path());
            }
        }
        level = next;
    }
    out
}

/// A git dir's work tree from its `core.worktree` (a submodule's git dir names it so).
fn worktree_of(git_dir: &Path) -> Option<PathBuf> {
    let v = config_value(git_dir, "core", "worktree")?;
    std::fs::canonicalize(git_dir.join(v)).ok()
}

/// A `core.hooksPath` of `git_dir` that lies inside `workspace` (then commands could write the
/// hooks the person's git runs).
fn hooks_path(git_dir: &Path, workspace: &Path) -> Option<PathBuf> {
    let v = config_value(git_dir, "core", "hookspath")?;
    let v = v.trim_matches('"');
    let p = if Path::new(v).is_absolute() {
        PathBuf::from(v)
    } else {
        // Relative to the work tree (git runs hooks from the top of the work tree).
        worktree_of(git_dir)
            .unwrap_or_else(|| git_dir.parent().unwrap_or(git_dir).to_path_buf())
            .join(v)
    };
    std::fs::canonicalize(p)
        .ok()
        .filter(|p| p.starts_with(workspace))
}

/// The value of `section.key` in `git_dir/config` (a plain scan: `[section]` lines and `key =
/// value` lines, case-insensitive names; enough for `core.worktree` and `core.hooksPath`).
fn config_value(git_dir: &Path, section: &str, key: &str) -> Option<String> {
    let text = read_small(&git_dir.join("config"))?;
    let mut inside = false;
    let mut found = None;
    for line in text.lines() {
        let l = line.trim();
        if let Some(s) = l.strip_prefix('[') {
            let name = s.split([']', ' ', '"']).next().unwrap_or("");
            inside = name.eq_ignore_ascii_case(section);
            continue;
        }
        if !inside {
            continue;
        }
        if let Some((k, v)) = l.split_once('=')
            && k.trim().eq_ignore_ascii_case(key)
        {
            found = Some(v.trim().to_string());
        }
    }
    found
}

/// A small text file of git's metadata (None when absent, not a regular file or not UTF-8),
/// read without blocking on a FIFO.
pub(super) fn read_small(path: &Path) -> Option<String> {
    let bytes = crate::store::fsutil::read_regular(path, 1 << 16).ok()??;
    String::from_utf8(bytes).ok()
}

/// Writes the shadow of `real` at `copy`: every entry of it copied (regular files, folders,
/// symbolic links as links) but git's data folders of each git dir in it, which are made as
/// empty folders (their mount points). Errors: any copy.
pub fn make(real: &Path, copy: &Path, git_dirs: &[PathBuf]) -> io::Result<()> {
    copy_tree(real, copy, &|p: &Path| {
        p.parent()
            .is_some_and(|parent| git_dirs.iter().any(|g| g == parent))
            && p.file_name()
                .is_some_and(|n| DATA_DIRS.iter().any(|d| n == *d))
    })
}

/// Copies `from` to `to` (made), skipping the contents of folders `data` says are data (made
/// empty).
fn copy_tree(from: &Path, to: &Path, data: &dyn Fn(&Path) -> bool) -> io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let t = e.file_type()?;
        if t.is_dir() {
            if data(&src) {
                std::fs::create_dir_all(&dst)?;
            } else {
                copy_tree(&src, &dst, data)?;
            }
        } else if t.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else if t.is_file() {
            // git never runs a `*.sample` hook: not worth a copy at every jail start.
            if src.extension().is_some_and(|e| e == "sample") {
                continue;
            }
            std::fs::copy(&src, &dst)?;
        }
        // FIFOs, sockets, devices: not git's; left out.
    }
    Ok(())
}

/// A file's identity for "changed since the last look": device, inode, size, modification and
/// status-change times in ns. None: absent.
type Stamp = Option<(u64, u64, u64, i64, i64)>;

fn stamp(p: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p).ok()?;
    m.is_file().then(|| {
        (
            m.dev(),
            m.ino(),
            m.size(),
            m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            m.ctime() * 1_000_000_000 + m.ctime_nsec(),
        )
    })
}

/// One data file of one git dir, as last synced: (real side, shadow side).
#[derive(Debug, Clone)]
struct Pair {
    real: PathBuf,
    shadow: PathBuf,
    last: (Stamp, Stamp),
}

/// One git dir and its shadow: their data files, and the folders' own stamps, so that a look
/// where neither folder changed (no file made, removed or renamed in it) stats only the files
/// that exist (git replaces its data files by renaming a `.lock` over them, which changes the
/// folder; the few written in place exist already).
#[derive(Debug, Clone)]
struct Dir {
    real: PathBuf,
    shadow: PathBuf,
    folders: (Stamp, Stamp),
    pairs: Vec<Pair>,
}

/// A folder's stamp (as [`stamp`], for a folder).
fn dir_stamp(p: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p).ok()?;
    m.is_dir().then(|| {
        (
            m.dev(),
            m.ino(),
            m.size(),
            m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            m.ctime() * 1_000_000_000 + m.ctime_nsec(),
        )
    })
}

/// Which way a data file goes, decided from what changed since the last look (pure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// Nothing changed, or both sides changed to the same.
    Stay,
    /// The jail wrote it: to the real git dir.
    Back,
    /// The person (or their git) changed it: to the shadow.
    In,
    /// Both changed: the person's wins (to the shadow), and it is said.
    Conflict,
}

/// The rule: the side that changed wins; both changed, the person's.
pub fn way(real_changed: bool, shadow_changed: bool) -> Way {
    match (real_changed, shadow_changed) {
        (false, false) => Way::Stay,
        (false, true) => Way::Back,
        (true, false) => Way::In,
        (true, true) => Way::Conflict,
    }
}

/// The copy-back state of a jail's shadows.
#[derive(Debug, Default)]
pub struct Sync {
    dirs: Vec<Dir>,
}

impl Sync {
    /// The pairs of `git_dirs` (real) and their shadows (real path with `root`'s prefix
    /// replaced by its copy), as they are now.
    pub fn new(shadows: &[(PathBuf, PathBuf)], git_dirs: &[PathBuf]) -> Sync {
        let mut dirs = Vec::new();
        for g in git_dirs {
            let Some((root, copy)) = shadows.iter().find(|(r, _)| g.starts_with(r)) else {
                continue;
            };
            let Ok(rel) = g.strip_prefix(root) else {
                continue;
            };
            let s = copy.join(rel);
            let pairs = DATA_FILES
                .iter()
                .map(|f| {
                    let (real, shadow) = (g.join(f), s.join(f));
                    let last = (stamp(&real), stamp(&shadow));
                    Pair { real, shadow, last }
                })
                .collect();
            dirs.push(Dir {
                folders: (dir_stamp(g), dir_stamp(&s)),
                real: g.clone(),
                shadow: s,
                pairs,
            });
        }
        Sync { dirs }
    }

    /// Copies each data file the way [`way`] says and returns what is worth saying (an index
    /// kept back because it adds a submodule; a conflict). A file whose `.lock` is held on the
    /// side it would be written to (a git running there now) waits for the next look.
    pub fn run(&mut self) -> Vec<String> {
        let mut notes = Vec::new();
        for d in &mut self.dirs {
            let folders = (dir_stamp(&d.real), dir_stamp(&d.shadow));
            let (all_real, all_shadow) = (folders.0 != d.folders.0, folders.1 != d.folders.1);

            let mut touched = false;
            for p in &mut d.pairs {
                // Unchanged folder and no file there last time: still none.
                let r = if all_real || p.last.0.is_some() {
                    stamp(&p.real)
                } else {
                    None
                };
                let s = if all_shadow || p.last.1.is_some() {
                    stamp(&p.shadow)
                } else {
                    None
                };
                let w = way(r != p.last.0, s != p.last.1);
                let done = match w {
                    // Nothing changed: the stamps already say so.
                    Way::Stay => continue,
                    Way::Back => {
                        if let Some(n) = kept_back(p) {
                            notes.push(n);
                            // Said once: this version of the shadow's file is the baseline now.
                            p.last.1 = s;
                            continue;
                        }
                        copy_over(&p.shadow, &p.real).is_ok()
                    }
                    Way::In | Way::Conflict => {
                        if w == Way::Conflict {
                            notes.push(format!(
                                "{} changed in the jail and outside it since the last command: the person's version is kept",
                                p.real.display()
                            ));
                        }
                        copy_over(&p.real, &p.shadow).is_ok()
                    }
                };
                touched = true;
                if done {
                    p.last = (stamp(&p.real), stamp(&p.shadow));
                }
            }
            // Our own copies changed the folders: their stamps are taken after them.
            d.folders = if touched {
                (dir_stamp(&d.real), dir_stamp(&d.shadow))
            } else {
                folders
            };
        }
        notes
    }
}

/// Why the jail's version of `p` is not copied back: an index that adds submodule entries.
fn kept_back(p: &Pair) -> Option<String> {
    if p.real.file_name().is_none_or(|n| n != "index") {
        return None;
    }
    let git_dir = p.real.parent()?;
    let before = gitlinks(git_dir, &p.real);
    let added: Vec<String> = gitlinks(git_dir, &p.shadow)
        .into_iter()
        .filter(|l| !before.contains(l))
        .collect();
    (!added.is_empty()).then(|| {
        format!(
            "this command added {} to the git index as a submodule: git would read that folder's own .git configuration (which the command wrote, and which can name a command to run) at the person's next git status, so this index was not copied to the repository; the jail keeps it. The person can add the submodule themselves after checking it.",
            added.join(", ")
        )
    })
}

/// Copies `from` over `to` atomically (a temporary file beside `to`, renamed), or removes `to`
/// when `from` is gone. Refused while `to.lock` exists (a git is writing it). Never follows a
/// link at `to` (the rename replaces it).
fn copy_over(from: &Path, to: &Path) -> io::Result<()> {
    let lock = to.with_file_name(format!(
        "{}.lock",
        to.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default()
    ));
    if lock.exists() {
        return Err(io::Error::other("locked"));
    }
    match std::fs::symlink_metadata(from) {
        Err(_) => match std::fs::remove_file(to) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
        Ok(m) if m.is_file() => {
            let dir = to.parent().ok_or_else(|| io::Error::other("no folder"))?;
            let tmp = dir.join(format!(
                ".tern-sync-{}-{}",
                std::process::id(),
                to.file_name()
                    .map(|n| n.to_string_lossy())
                    .unwrap_or_default()
            ));
            std::fs::copy(from, &tmp)?;
            std::fs::rename(&tmp, to).inspect_err(|_| {
                let _ = std::fs::remove_file(&tmp);
            })
        }
        // Not a plain file in the jail's copy (a link, a FIFO): never carried over.
        Ok(_) => Err(io::Error::other("not a plain file")),
    }
}

/// The paths of the gitlinks (submodule entries) in the index file `index` of `git_dir`, by
/// `git ls-files --stage` with no configuration but the repository's own and hooks off; empty
/// when git fails.
fn gitlinks(git_dir: &Path, index: &Path) -> Vec<String> {
    let mut cmd = std::process::Command::new("git");
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_DIR", git_dir)
        .env("GIT_INDEX_FILE", index)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args([
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.hooksPath=/dev/null",
        ])
        .args(["ls-files", "--stage", "-z"]);
    let out = crate::child::run(crate::child::Job {
        cmd,
        input: None,
        stderr: crate::child::Stderr::Keep,
        max_output: usize::MAX,
        limits: crate::child::Limits {
            timeout: Some(std::time::Duration::from_secs(30)),
            kill_grace: std::time::Duration::from_secs(1),
            drain_grace: std::time::Duration::from_millis(200),
            reap_limit: std::time::Duration::from_secs(5),
        },
        cancel: None,
        groups: None,
        kill_leftovers: false,
    });
    let Ok(out) = out else { return Vec::new() };
    out.stdout
        .split(|b| *b == 0)
        .filter_map(|e| {
            let e = std::str::from_utf8(e).ok()?;
            let (head, path) = e.split_once('\t')?;
            head.starts_with("160000 ").then(|| path.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    }

    #[test]
    fn the_side_that_changed_wins_and_the_person_wins_a_tie() {
        assert_eq!(way(false, false), Way::Stay);
        assert_eq!(way(false, true), Way::Back);
        assert_eq!(way(true, false), Way::In);
        assert_eq!(way(true, true), Way::Conflict);
    }

    #[test]
    fn a_plan_finds_the_repo_its_linked_worktrees_and_a_separate_git_dir() {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        let main = root.join("main");
        std::fs::create_dir(&main).unwrap();
        git(&main, &["init", "-q"]);
        git(&main, &["commit", "-q", "--allow-empty", "-m", "x"]);
        git(&main, &["worktree", "add", "-q", "../wt"]);
        // The workspace is the linked worktree: its `.git` is a file naming the main repo's
        // `worktrees/wt`, whose common dir is the main repo's `.git`.
        let p = plan(&root.join("wt"));
        assert_eq!(p.roots, [main.join(".git")]);
        assert!(p.git_dirs.contains(&main.join(".git")));
        assert!(p.git_dirs.contains(&main.join(".git/worktrees/wt")));
        assert_eq!(p.read_only, [root.join("wt/.git")]);
        // The main repository as the workspace: one root, the `.git` folder.
        let p = plan(&main);
        assert_eq!(p.roots, [main.join(".git")]);
        assert!(p.read_only.is_empty());
    }

    #[test]
    fn a_shadow_copies_all_but_the_data_folders_and_syncs_only_data_files() {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        let ws = root.join("ws");
        std::fs::create_dir(&ws).unwrap();
        git(&ws, &["init", "-q"]);
        let real = ws.join(".git");
        let copy = root.join("shadow");
        let dirs = vec![real.clone()];
        make(&real, &copy, &dirs).unwrap();
        assert!(copy.join("config").is_file() && copy.join("HEAD").is_file());
        assert!(copy.join("objects").is_dir());
        assert_eq!(std::fs::read_dir(copy.join("objects")).unwrap().count(), 0);
        let mut sync = Sync::new(&[(real.clone(), copy.clone())], &dirs);
        // The jail plants config and commondir, and moves HEAD: only HEAD comes back.
        std::fs::write(copy.join("config"), "[core]\n\tfsmonitor = evil\n").unwrap();
        std::fs::write(copy.join("commondir"), "../elsewhere\n").unwrap();
        std::fs::write(copy.join("HEAD"), "ref: refs/heads/other\n").unwrap();
        assert!(sync.run().is_empty());
        assert_eq!(
            std::fs::read_to_string(real.join("HEAD")).unwrap(),
            "ref: refs/heads/other\n"
        );
        assert!(
            !std::fs::read_to_string(real.join("config"))
                .unwrap()
                .contains("evil")
        );
        assert!(!real.join("commondir").exists());
        // The person's git changes HEAD outside: it goes into the shadow.
        std::fs::write(real.join("HEAD"), "ref: refs/heads/mine\n").unwrap();
        sync.run();
        assert_eq!(
            std::fs::read_to_string(copy.join("HEAD")).unwrap(),
            "ref: refs/heads/mine\n"
        );
        // Both change: the person's is kept, and it is said.
        std::fs::write(real.join("ORIG_HEAD"), "person\n").unwrap();
        std::fs::write(copy.join("ORIG_HEAD"), "jail\n").unwrap();
        let notes = sync.run();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(
            std::fs::read_to_string(real.join("ORIG_HEAD")).unwrap(),
            "person\n"
        );
        assert_eq!(
            std::fs::read_to_string(copy.join("ORIG_HEAD")).unwrap(),
            "person\n"
        );
    }

    #[test]
    fn config_values_are_read_by_section() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(
            t.path().join("config"),
            "[core]\n\tbare = false\n\tHooksPath = .githooks\n[remote \"o\"]\n\thookspath = no\n",
        )
        .unwrap();
        assert_eq!(
            config_value(t.path(), "core", "hookspath").as_deref(),
            Some(".githooks")
        );
        assert_eq!(config_value(t.path(), "core", "worktree"), None);
    }
}
