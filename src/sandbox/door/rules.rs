//! The door's rules (DESIGN §10, issue 42): a pure function of (a change the layer holds, what
//! the workspace holds now) → apply, or hold back with a reason. Nothing here touches a file;
//! `walk.rs` gathers the facts and does what the verdict says.

use std::ffi::OsStr;
use std::fmt;
use std::path::{Component, Path, PathBuf};

use crate::sandbox::jail::git::{DATA_DIRS, DATA_FILES};
use crate::store::dirfd::Kind;

/// What the layer holds at a path (its upper layer's entry, never followed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A plain file with these permission bits.
    File {
        /// `st_mode & 0o1777`: the set-id bits never pass.
        mode: u32,
    },
    /// A folder with these permission bits; `opaque` when it replaced a folder of the
    /// workspace whole (overlayfs's opaque mark: `rm -rf d && mkdir d`).
    Dir {
        /// `st_mode & 0o1777`.
        mode: u32,
        /// The folder hides what the workspace has beneath it.
        opaque: bool,
    },
    /// A symbolic link to this target (as written, never resolved).
    Link(PathBuf),
    /// The path was removed (overlayfs's whiteout: a 0/0 character device).
    Whiteout,
    /// A FIFO, socket or device node.
    Special(Special),
}

/// The entries the door never applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// A named pipe.
    Fifo,
    /// A UNIX socket.
    Socket,
    /// A device node.
    Device,
}

/// One change: a path relative to the layer's root and what the layer holds there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Relative, plain components only.
    pub rel: PathBuf,
    /// What the layer holds.
    pub entry: Entry,
}

/// Where a path sits relative to the git directories of the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitPlace {
    /// The name `.git` itself.
    Entry,
    /// git's data inside a git directory: objects, refs, logs, index, packed-refs, `*_HEAD`.
    Data,
    /// Anything else inside a git directory (config, hooks, info, commondir, gitdir, …): the
    /// first component of the path beneath the git directory.
    Control(String),
}

/// What the workspace holds now at the change's path, as `walk.rs` found it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Now {
    /// The kind of entry there (not following a link); None: nothing.
    pub kind: Option<Kind>,
    /// The person changed it since the layer last looked.
    pub person_changed: bool,
    /// Its place among git directories (see [`git_place`]); None: outside every one.
    pub git: Option<GitPlace>,
    /// For a link: it resolves inside the workspace and outside every git directory.
    pub link_inside: bool,
    /// A file the person's tools run on their own ([`runs_on_its_own`]).
    pub listed: bool,
    /// At or beneath tern's state folder (shown read-only in the jail; never written from it).
    pub tern_state: bool,
}

/// Why a change is held back. `Display` is a clause for the model and the person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// A FIFO, socket or device node.
    Special(Special),
    /// A link resolving outside the workspace or into a git directory.
    LinkOutside,
    /// A link inside a git directory.
    GitLink,
    /// A git directory's own files: config, hooks, info, … (the component named).
    GitControl(String),
    /// A new repository (`.git` folder or file) where the workspace had none.
    NewRepository,
    /// A `.git` file, or a repository replaced or removed.
    GitEntry,
    /// The person changed it since the layer last looked: the person's side wins.
    PersonChanged,
    /// tern's own state folder.
    TernState,
    /// Its folder is not in the workspace (held back itself, or a link or a file there).
    NoFolder,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Special(s) => write!(
                f,
                "a {} is never applied",
                match s {
                    Special::Fifo => "FIFO",
                    Special::Socket => "socket",
                    Special::Device => "device node",
                }
            ),
            Reason::LinkOutside => {
                f.write_str("a link is applied only when it resolves inside the workspace and outside git's folders")
            }
            Reason::GitLink => f.write_str("no link is applied inside a git folder"),
            Reason::GitControl(what) => write!(
                f,
                "git's {what} is never changed from the jail (only objects, refs, logs, index and *_HEAD are)"
            ),
            Reason::NewRepository => f.write_str(
                "a new repository is never applied: it stays usable in the jail and is kept aside for the person to read and take",
            ),
            Reason::GitEntry => {
                f.write_str("a repository's .git is never replaced or removed from the jail")
            }
            Reason::PersonChanged => f.write_str(
                "the person changed it meanwhile: their version stays, yours is kept aside",
            ),
            Reason::TernState => f.write_str("tern's state folder is never written from the jail"),
            Reason::NoFolder => f.write_str(
                "its folder is not in the workspace (held back, or a link or a file there)",
            ),
        }
    }
}

/// The door's answer for one change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Applied; `listed`: one of the files a person's tool runs on its own, named at the end
    /// of the turn.
    Apply {
        /// Named at the end of the turn.
        listed: bool,
    },
    /// Not applied, and why.
    Hold(Reason),
}

/// The rules (module docs, DESIGN §10), in order: special files never; git's places (a new
/// `.git` kept aside, a git directory's control files never, its data only as files and
/// folders); links only inside; the person's concurrent change wins; the rest applies, listed
/// when a person's tool runs it on its own.
pub fn judge(c: &Change, now: &Now) -> Verdict {
    use Verdict::Hold;
    if now.tern_state {
        return Hold(Reason::TernState);
    }
    if let Entry::Special(s) = c.entry {
        return Hold(Reason::Special(s));
    }
    match &now.git {
        Some(GitPlace::Entry) => {
            return match (&c.entry, now.kind) {
                // The repository's own folder, already there: only its content counts.
                (Entry::Dir { .. }, Some(Kind::Dir)) => Verdict::Apply { listed: false },
                (Entry::Dir { .. } | Entry::File { .. } | Entry::Link(_), None) => {
                    Hold(Reason::NewRepository)
                }
                _ => Hold(Reason::GitEntry),
            };
        }
        Some(GitPlace::Control(what)) => return Hold(Reason::GitControl(what.clone())),
        Some(GitPlace::Data) if matches!(c.entry, Entry::Link(_)) => return Hold(Reason::GitLink),
        Some(GitPlace::Data) | None => {}
    }
    if matches!(c.entry, Entry::Link(_)) && !now.link_inside {
        return Hold(Reason::LinkOutside);
    }
    let replaces = matches!(now.kind, Some(Kind::File | Kind::Link | Kind::Other));
    if now.person_changed && replaces {
        return Hold(Reason::PersonChanged);
    }
    Verdict::Apply {
        listed: now.listed && !matches!(c.entry, Entry::Dir { .. }),
    }
}

/// The place of `rel` among git directories: the deepest proper ancestor that is one (named
/// `.git`, or a folder `is_git_dir` says holds a repository: `HEAD`, `objects/`, `refs/`) decides;
/// the path beneath it is data or control (git's data folders and files, a linked worktree's
/// `worktrees/NAME/` files and logs). A path whose own name is `.git` is [`GitPlace::Entry`].
pub fn git_place(rel: &Path, is_git_dir: &dyn Fn(&Path) -> bool) -> Option<GitPlace> {
    let comps: Vec<&OsStr> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let deepest = (1..comps.len())
        .rev()
        .find(|&k| comps[k - 1] == ".git" || is_git_dir(&comps[..k].iter().collect::<PathBuf>()));
    // The repository's own folder: named `.git`, or holding one by its content (a bare
    // repository made in the workspace is a new repository like a `.git`).
    if comps.last() == Some(&OsStr::new(".git")) || (!comps.is_empty() && is_git_dir(rel)) {
        return Some(GitPlace::Entry);
    }
    let k = deepest?;
    Some(inside_git_dir(&comps[k..]))
}

/// A path beneath a git directory: data or control.
fn inside_git_dir(rest: &[&OsStr]) -> GitPlace {
    let is = |c: &OsStr, set: &[&str]| c.to_str().is_some_and(|c| set.contains(&c));
    match rest {
        [first, ..] if is(first, &DATA_DIRS) => GitPlace::Data,
        [only] if is(only, &DATA_FILES) => GitPlace::Data,
        // A linked worktree's own folder: its HEAD, index, logs and refs are data.
        [w, _name] if *w == "worktrees" => GitPlace::Data,
        [w, _name, file] if *w == "worktrees" && is(file, &DATA_FILES) => GitPlace::Data,
        [w, _name, sub, ..] if *w == "worktrees" && is(sub, &["logs", "refs"]) => GitPlace::Data,
        [first, ..] => GitPlace::Control(first.to_string_lossy().into_owned()),
        [] => GitPlace::Data,
    }
}

/// Where the link at `rel` to `target` points, relative to the root, resolved by its text
/// alone (`..` applied); None when it leaves the root or is absolute outside `root`.
pub fn lexical_target(root: &Path, rel: &Path, target: &Path) -> Option<PathBuf> {
    let start: PathBuf = if target.is_absolute() {
        target.strip_prefix(root).ok()?.to_path_buf()
    } else {
        rel.parent().unwrap_or(Path::new("")).join(target)
    };
    let mut out: Vec<&OsStr> = Vec::new();
    for c in start.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop()?;
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out.iter().collect())
}

/// Files a person's tool runs on its own when the person uses it (git's hooks and husky, direnv,
/// editors' tasks, dev containers, cargo's and npm's configuration and scripts, make), plus
/// `named`: the workspace files the repository's git config, the person's trusted hooks and MCP
/// servers name. Applied like any file, and listed at the end of the turn.
pub fn runs_on_its_own(rel: &Path, named: &[PathBuf]) -> bool {
    const FIRST: [&str; 5] = [".husky", ".githooks", ".devcontainer", ".vscode", ".claude"];
    const ANY_DEPTH: [&str; 9] = [
        "Makefile",
        "makefile",
        "GNUmakefile",
        "package.json",
        ".envrc",
        ".gitattributes",
        ".gitmodules",
        ".pre-commit-config.yaml",
        ".npmrc",
    ];
    const EXACT: [&str; 5] = [
        ".cargo/config.toml",
        ".cargo/config",
        ".mcp.json",
        ".tern/hooks.json",
        "lefthook.yml",
    ];
    if named.iter().any(|n| rel.starts_with(n)) {
        return true;
    }
    let first = rel.components().next().map(|c| c.as_os_str());
    if first.is_some_and(|f| FIRST.iter().any(|x| f == *x)) {
        return true;
    }
    if rel
        .file_name()
        .is_some_and(|n| ANY_DEPTH.iter().any(|x| n == *x))
    {
        return true;
    }
    EXACT.iter().any(|e| rel == Path::new(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(rel: &str) -> Change {
        Change {
            rel: rel.into(),
            entry: Entry::File { mode: 0o644 },
        }
    }

    fn link(rel: &str, to: &str) -> Change {
        Change {
            rel: rel.into(),
            entry: Entry::Link(to.into()),
        }
    }

    fn place(rel: &str) -> Option<GitPlace> {
        // `vendor/bare` holds a repository by its content.
        git_place(Path::new(rel), &|p| p == Path::new("vendor/bare"))
    }

    fn now_for(rel: &str) -> Now {
        Now {
            git: place(rel),
            ..Now::default()
        }
    }

    #[test]
    fn git_places_at_any_depth_data_or_control() {
        let data = Some(GitPlace::Data);
        let control = |w: &str| Some(GitPlace::Control(w.into()));
        for (rel, want) in [
            ("src/main.rs", None),
            (".git", Some(GitPlace::Entry)),
            ("vendor/lib/.git", Some(GitPlace::Entry)),
            ("a/b/c/d/e/.git", Some(GitPlace::Entry)),
            (".git/objects/ab/cdef", data.clone()),
            (".git/refs/heads/main", data.clone()),
            (".git/logs/HEAD", data.clone()),
            (".git/index", data.clone()),
            (".git/HEAD", data.clone()),
            (".git/ORIG_HEAD", data.clone()),
            (".git/packed-refs", data.clone()),
            (".git/config", control("config")),
            (".git/hooks/pre-commit", control("hooks")),
            (".git/info/attributes", control("info")),
            (".git/commondir", control("commondir")),
            (".git/modules/sub/config", control("modules")),
            (".git/worktrees/wt/HEAD", data.clone()),
            (".git/worktrees/wt/logs/HEAD", data.clone()),
            (".git/worktrees/wt/gitdir", control("worktrees")),
            (".git/worktrees/wt/commondir", control("worktrees")),
            ("node_modules/x/.git/hooks/post-checkout", control("hooks")),
            ("target/deep/er/repo/.git/config", control("config")),
            (".cache/.git/config", control("config")),
            ("vendor/bare", Some(GitPlace::Entry)),
            ("vendor/bare/config", control("config")),
            ("vendor/bare/objects/pack/p.pack", data.clone()),
            ("vendor/bare/hooks/pre-receive", control("hooks")),
        ] {
            assert_eq!(place(rel), want, "{rel}");
        }
    }

    #[test]
    fn the_rules_as_data() {
        use Verdict::{Apply, Hold};
        let apply = Apply { listed: false };
        let dir = |rel: &str| Change {
            rel: rel.into(),
            entry: Entry::Dir {
                mode: 0o755,
                opaque: false,
            },
        };
        let cases: Vec<(Change, Now, Verdict)> = vec![
            (file("src/a.rs"), now_for("src/a.rs"), apply.clone()),
            (dir("src"), now_for("src"), apply.clone()),
            (
                Change {
                    rel: "p".into(),
                    entry: Entry::Special(Special::Fifo),
                },
                now_for("p"),
                Hold(Reason::Special(Special::Fifo)),
            ),
            (
                Change {
                    rel: "s".into(),
                    entry: Entry::Special(Special::Socket),
                },
                now_for("s"),
                Hold(Reason::Special(Special::Socket)),
            ),
            // Links: inside only.
            (
                link("l", "/home/u/.bashrc"),
                now_for("l"),
                Hold(Reason::LinkOutside),
            ),
            (
                link("l", "src/a.rs"),
                Now {
                    link_inside: true,
                    ..now_for("l")
                },
                apply.clone(),
            ),
        ];
        for (c, now, want) in cases {
            assert_eq!(judge(&c, &now), want, "{c:?} {now:?}");
        }
    }

    #[test]
    fn the_git_rules_as_data() {
        use Verdict::{Apply, Hold};
        let apply = Apply { listed: false };
        let dir = |rel: &str| Change {
            rel: rel.into(),
            entry: Entry::Dir {
                mode: 0o755,
                opaque: false,
            },
        };
        let existing = |mut n: Now, k| {
            n.kind = Some(k);
            n
        };
        let cases: Vec<(Change, Now, Verdict)> = vec![
            // git: a new repository anywhere is kept aside; an existing one's folder passes.
            (dir(".git"), now_for(".git"), Hold(Reason::NewRepository)),
            (
                dir("vendor/x/.git"),
                now_for("vendor/x/.git"),
                Hold(Reason::NewRepository),
            ),
            (
                file("sub/.git"),
                now_for("sub/.git"),
                Hold(Reason::NewRepository),
            ),
            (
                dir(".git"),
                existing(now_for(".git"), Kind::Dir),
                apply.clone(),
            ),
            (
                file("sub/.git"),
                existing(now_for("sub/.git"), Kind::File),
                Hold(Reason::GitEntry),
            ),
            (
                Change {
                    rel: ".git".into(),
                    entry: Entry::Whiteout,
                },
                existing(now_for(".git"), Kind::Dir),
                Hold(Reason::GitEntry),
            ),
            (
                file(".git/config"),
                now_for(".git/config"),
                Hold(Reason::GitControl("config".into())),
            ),
            (
                file(".git/hooks/pre-commit"),
                now_for(".git/hooks/pre-commit"),
                Hold(Reason::GitControl("hooks".into())),
            ),
            (
                file(".git/objects/ab/cd"),
                now_for(".git/objects/ab/cd"),
                apply.clone(),
            ),
            (
                link(".git/logs/HEAD", "/home/u/.bashrc"),
                Now {
                    link_inside: true,
                    ..now_for(".git/logs/HEAD")
                },
                Hold(Reason::GitLink),
            ),
        ];
        for (c, now, want) in cases {
            assert_eq!(judge(&c, &now), want, "{c:?} {now:?}");
        }
    }

    #[test]
    fn the_persons_change_tern_and_listed_files_as_data() {
        use Verdict::{Apply, Hold};
        let existing = |mut n: Now, k| {
            n.kind = Some(k);
            n
        };
        let cases: Vec<(Change, Now, Verdict)> = vec![
            // The person's concurrent change wins over a file, a link or a removal.
            (
                file("src/a.rs"),
                Now {
                    person_changed: true,
                    ..existing(now_for("src/a.rs"), Kind::File)
                },
                Hold(Reason::PersonChanged),
            ),
            (
                Change {
                    rel: "src/a.rs".into(),
                    entry: Entry::Whiteout,
                },
                Now {
                    person_changed: true,
                    ..existing(now_for("src/a.rs"), Kind::File)
                },
                Hold(Reason::PersonChanged),
            ),
            (
                file(".tern/sessions/s/ledger.json"),
                Now {
                    tern_state: true,
                    ..now_for(".tern/sessions/s/ledger.json")
                },
                Hold(Reason::TernState),
            ),
            // Listed: applied and named.
            (
                file(".husky/_/pre-commit"),
                Now {
                    listed: true,
                    ..now_for(".husky/_/pre-commit")
                },
                Apply { listed: true },
            ),
        ];
        for (c, now, want) in cases {
            assert_eq!(judge(&c, &now), want, "{c:?} {now:?}");
        }
    }

    #[test]
    fn a_links_text_is_resolved_against_its_folder() {
        let root = Path::new("/w");
        let t = |rel: &str, to: &str| lexical_target(root, Path::new(rel), Path::new(to));
        assert_eq!(t("a/l", "b"), Some("a/b".into()));
        assert_eq!(t("a/l", "../b"), Some("b".into()));
        assert_eq!(t("a/l", "../../b"), None);
        assert_eq!(t("l", "/w/x/y"), Some("x/y".into()));
        assert_eq!(t("l", "/etc/passwd"), None);
        assert_eq!(t("l", "/w2/x"), None);
        assert_eq!(t("a/l", "./c/./d"), Some("a/c/d".into()));
    }

    #[test]
    fn files_a_persons_tool_runs_are_listed() {
        let named = vec![PathBuf::from("scripts/hook-helper.sh"), "tools/mcp".into()];
        for rel in [
            ".husky/_/pre-commit",
            ".husky/pre-push",
            ".envrc",
            "sub/.envrc",
            ".vscode/tasks.json",
            ".devcontainer/devcontainer.json",
            ".cargo/config.toml",
            "Makefile",
            "web/package.json",
            "scripts/hook-helper.sh",
            "tools/mcp/server.py",
            "tools/mcp/json.py",
        ] {
            assert!(runs_on_its_own(Path::new(rel), &named), "{rel}");
        }
        for rel in [
            "src/main.rs",
            "README.md",
            "scripts/other.sh",
            "x/.cargo/config.toml",
        ] {
            assert!(!runs_on_its_own(Path::new(rel), &named), "{rel}");
        }
    }
}
