//! Issue 33: `--worktree NAME`: a session in a git worktree of the repository, on its own branch,
//! with its own checkpoints and undo; refused with one line where it cannot be made or reused.

use std::path::Path;

use serde_json::Value;

use crate::support::cli::{LIMIT, WireWs, run_within};
use crate::support::script::{bash, text};
use crate::support::*;

const W: Wire = Wire::OpenAi;

/// `git ARGS` in `dir` as the person runs it (no system or global configuration, an identity);
/// its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "p")
        .env("GIT_AUTHOR_EMAIL", "p@p")
        .env("GIT_COMMITTER_NAME", "p")
        .env("GIT_COMMITTER_EMAIL", "p@p")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A workspace that is a git repository with one commit holding `f.txt`.
fn repo(script: Vec<Reply>) -> WireWs {
    let ws = WireWs::new(W, script);
    git(ws.root(), &["init", "-q", "-b", "main"]);
    std::fs::write(ws.root().join("f.txt"), "original\n").unwrap();
    git(ws.root(), &["add", "f.txt"]);
    git(ws.root(), &["commit", "-qm", "first"]);
    ws
}

fn code_and_err(ws: &WireWs, args: &[&str]) -> (i32, String) {
    let out = ws.tern(args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const COMMIT: &str = "echo work > new.txt && git add new.txt && \
    git -c user.name=m -c user.email=m@m commit -qm 'from the jail' && git branch --show-current";

#[test]
fn a_worktree_session_works_and_commits_on_its_branch_inside_the_jail_and_undoes_its_own_turn() {
    let ws = repo(vec![
        bash(W, "c1", COMMIT),
        text(W, "committed"),
        bash(W, "c2", "echo changed > f.txt"),
        text(W, "changed"),
    ]);
    let out = ws.ok(&["exec", "--worktree", "job1", "commit something"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("worktree job1 at ") && err.contains("made from HEAD"),
        "{err}"
    );
    let wt = ws.root().join(".tern/worktrees/job1");
    // The command ran in the worktree, in the jail, and its commit is on tern/job1 only.
    let reqs = ws.fake.requests();
    let body = String::from_utf8_lossy(&reqs[1].body);
    assert!(body.contains("tern/job1"), "{body}");
    assert!(wt.join("new.txt").exists());
    assert!(
        !ws.root().join("new.txt").exists(),
        "the main tree was written"
    );
    assert_eq!(
        git(ws.root(), &["log", "-1", "--format=%s", "tern/job1"]).trim(),
        "from the jail"
    );
    assert_eq!(
        git(ws.root(), &["log", "-1", "--format=%s", "main"]).trim(),
        "first"
    );
    assert_eq!(
        git(ws.root(), &["status", "--porcelain"]).trim(),
        "",
        "main tree changed"
    );
    // The session is the worktree's own, and says so.
    let sessions = wt.join(".tern/sessions");
    let id = std::fs::read_dir(&sessions)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .file_name();
    let meta: Value = serde_json::from_str(
        &std::fs::read_to_string(sessions.join(&id).join("meta.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(meta["worktree"]["name"], "job1");
    assert_eq!(meta["worktree"]["branch"], "tern/job1");
    assert!(
        !ws.root()
            .join(".tern/sessions")
            .read_dir()
            .unwrap()
            .any(|_| true)
    );
    // Reused on the next run (not made again); its turn changes f.txt there only.
    let out = ws.ok(&["exec", "--worktree", "job1", "--continue", "change f"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("made from HEAD"));
    assert_eq!(
        std::fs::read_to_string(wt.join("f.txt")).unwrap(),
        "changed\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.root().join("f.txt")).unwrap(),
        "original\n"
    );
    // tern status in the worktree names it; undo there puts back its own turn only.
    let mut status = ws.cmd(&["status"]);
    status.current_dir(&wt);
    let out = run_within(status, None, LIMIT).output();
    let text_out = String::from_utf8_lossy(&out.stdout);
    assert!(
        text_out.contains("Worktree: job1 (branch tern/job1)"),
        "{text_out}"
    );
    let mut undo = ws.cmd(&["undo"]);
    undo.current_dir(&wt);
    let out = run_within(undo, None, LIMIT).output();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(wt.join("f.txt")).unwrap(),
        "original\n"
    );
    assert!(wt.join("new.txt").exists(), "undo went back too far");
    assert_eq!(
        std::fs::read_to_string(ws.root().join("f.txt")).unwrap(),
        "original\n"
    );
}

#[test]
fn a_worktree_that_cannot_be_made_or_reused_is_refused_with_one_line() {
    let ws = repo(vec![]);
    // A branch of that name exists already (no silent reuse).
    git(ws.root(), &["branch", "tern/taken"]);
    let (code, err) = code_and_err(&ws, &["exec", "--worktree", "taken", "x"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("branch tern/taken exists already"), "{err}");
    // A worktree of that name on another branch.
    let other = ws.root().join(".tern/worktrees/other");
    git(
        ws.root(),
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "elsewhere",
            other.to_str().unwrap(),
        ],
    );
    let (code, err) = code_and_err(&ws, &["exec", "--worktree", "other", "x"]);
    assert_eq!(code, 2);
    assert!(err.contains("is on elsewhere, not tern/other"), "{err}");
    // A folder in its place that is no worktree.
    std::fs::create_dir_all(ws.root().join(".tern/worktrees/squat")).unwrap();
    let (code, err) = code_and_err(&ws, &["exec", "--worktree", "squat", "x"]);
    assert_eq!(code, 2);
    assert!(err.contains("is no worktree of this repository"), "{err}");
    // A registered worktree whose folder is gone (an unclean state).
    let gone = ws.root().join(".tern/worktrees/gone");
    git(
        ws.root(),
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "tern/gone",
            gone.to_str().unwrap(),
        ],
    );
    std::fs::remove_dir_all(&gone).unwrap();
    let (code, err) = code_and_err(&ws, &["exec", "--worktree", "gone", "x"]);
    assert_eq!(code, 2);
    assert!(err.contains("git worktree prune"), "{err}");
    // A bad name.
    let (code, err) = code_and_err(&ws, &["exec", "--worktree", "../up", "x"]);
    assert_eq!(code, 2);
    assert!(err.contains("a name is 1 to 64"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // Outside a git repository.
    let plain = WireWs::new(W, vec![]);
    let (code, err) = code_and_err(&plain, &["exec", "--worktree", "a", "x"]);
    assert_eq!(code, 2);
    assert!(err.contains("--worktree needs a git repository"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn four_worktree_jobs_at_once_all_finish_on_their_own_branches() {
    let ws = repo(vec![]);
    ws.fake.set_default(text(W, "done"));
    let mut kids = Vec::new();
    for i in 0..4 {
        let name = format!("job{i}");
        kids.push((
            name.clone(),
            ws.spawn(&["exec", "--worktree", &name, "hello"]),
        ));
    }
    for (name, kid) in kids {
        let out = kid.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let list = git(ws.root(), &["worktree", "list", "--porcelain"]);
    for i in 0..4 {
        assert!(
            list.contains(&format!("branch refs/heads/tern/job{i}")),
            "{list}"
        );
    }
}

/// Six `tern exec` jobs at once in one workspace (the shared-workspace recipe), each running a
/// command that writes the workspace for about a second, with `extra` flags; every job ends
/// with exit 0 and no request tells the model it changed tern's or other sessions' files.
fn six_jobs_in_one_workspace(extra: &[&str]) {
    let ws = repo(vec![]);
    ws.fake.set_responder(|r| {
        if r.body_str().contains("\"role\":\"tool\"") {
            Some(text(W, "done"))
        } else {
            Some(bash(
                W,
                "c1",
                // Each job's own line (two random numbers: no two jobs write the same bytes).
                "echo job $RANDOM$RANDOM >> shared.log; touch f_$RANDOM$RANDOM; sleep 1",
            ))
        }
    });
    let mut kids = Vec::new();
    for i in 0..6 {
        let mut args = vec!["exec"];
        args.extend_from_slice(extra);
        let prompt = format!("job {i}");
        args.push(&prompt);
        kids.push(ws.spawn(&args));
    }
    for (i, kid) in kids.into_iter().enumerate() {
        let out = kid.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "job {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let reqs = ws.fake.requests();
    assert_eq!(reqs.len(), 12);
    for r in &reqs {
        let body = r.body_str();
        for false_claim in [
            "changed tern's own files",
            "other sessions' files",
            "put them back",
        ] {
            assert!(
                !body.contains(false_claim),
                "a request says {false_claim:?}: {body}"
            );
        }
    }
    let log = std::fs::read_to_string(ws.root().join("shared.log")).unwrap();
    let made = std::fs::read_dir(ws.root())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("f_"))
        })
        .count();
    if extra.is_empty() {
        // In the jail each job writes a layer of its own: the door applies the first job's
        // `shared.log`, and keeps each later job's version aside unless it already held the
        // lines applied before it (another writer changed the file meanwhile: never
        // overwritten), said in its `door` events. Every job's line is in the file or kept.
        let sessions = std::fs::read_dir(ws.root().join(".tern/sessions")).unwrap();
        let held: usize = sessions
            .flatten()
            .map(|s| tern::sandbox::door::held_in(&s.path()).len())
            .sum();
        assert_eq!(log.lines().count() + held, 6, "{log}");
        assert!(log.lines().count() >= 1);
    } else {
        assert_eq!(log.lines().count(), 6);
    }
    assert_eq!(made, 6, "each job's own new file reaches the workspace");
}

#[test]
fn six_jobs_in_one_shared_workspace_in_the_jail_accuse_no_one() {
    six_jobs_in_one_workspace(&[]);
}

#[test]
fn six_jobs_in_one_shared_workspace_without_the_jail_accuse_no_one() {
    six_jobs_in_one_workspace(&["--sandbox", "danger-full-access"]);
}

#[test]
fn checkpoints_and_undo_of_two_sessions_at_once_leave_the_store_whole() {
    let ws = repo(vec![]);
    ws.fake.set_responder(|r| {
        let body = r.body_str();
        if body.contains("\"role\":\"tool\"") {
            return Some(text(W, "done"));
        }
        let file = if body.contains("session A") {
            "a.txt"
        } else {
            "b.txt"
        };
        Some(bash(W, "c1", &format!("echo $RANDOM >> {file}; sleep 0.2")))
    });
    // Two sessions of one workspace, each with a turn to undo.
    let mut ids = Vec::new();
    for who in ["A", "B"] {
        ws.ok(&["exec", &format!("session {who}")]);
        ids.push(ws.ws.current_id());
    }
    for round in 0..3 {
        // A turn of A and an undo then a redo of B, at the same time.
        let a = ws.spawn(&["exec", "--resume", &ids[0], "session A again"]);
        let undo = ws.tern(&["undo", "--session", &ids[1]]);
        let redo = ws.tern(&["redo", "--session", &ids[1]]);
        let out = a.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "round {round}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for (what, o) in [("undo", undo), ("redo", redo)] {
            // Refused while A's turn runs (it shares the workspace) or done: never broken.
            let code = o.status.code();
            assert!(
                matches!(code, Some(0) | Some(1)),
                "round {round} {what}: {o:?}"
            );
        }
    }
    let store = ws.root().join(".tern/checkpoints/git");
    let fsck = std::process::Command::new("git")
        .args([
            "--git-dir",
            store.to_str().unwrap(),
            "fsck",
            "--strict",
            "--no-dangling",
        ])
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "{}{}",
        String::from_utf8_lossy(&fsck.stdout),
        String::from_utf8_lossy(&fsck.stderr)
    );
}

/// Issue 46: a worktree another session is running in is refused to a second one, with the
/// session's id and pid; `tern sessions` marks it; the JSONL names the worktree and its branch;
/// started from a subfolder, the session starts in the same subfolder of the worktree.
#[test]
fn a_busy_worktree_is_refused_and_the_jsonl_names_the_worktree() {
    let ws = repo(vec![
        text(W, "first").delay_before(std::time::Duration::from_secs(4)),
        text(W, "sub"),
    ]);
    std::fs::create_dir_all(ws.root().join("pkg")).unwrap();
    std::fs::write(ws.root().join("pkg/AGENTS.md"), "Use tabs in pkg.\n").unwrap();
    git(ws.root(), &["add", "pkg/AGENTS.md"]);
    git(ws.root(), &["commit", "-qm", "pkg"]);
    let first = ws.spawn(&["exec", "--json", "--worktree", "busy", "slow one"]);
    // Wait until its session holds the worktree.
    let wt = ws.root().join(".tern/worktrees/busy");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while ws.fake.requests().is_empty() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (code, err) = code_and_err(&ws, &["exec", "--worktree", "busy", "second"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("worktree busy has a session running: ") && err.contains("(pid "),
        "{err}"
    );
    let listed = String::from_utf8_lossy(&ws.ok(&["sessions"]).stdout).into_owned();
    assert!(listed.contains("RUNNING"), "{listed}");
    let out = first.wait_with_output().unwrap();
    assert!(out.status.success());
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let start = lines.iter().find(|e| e["type"] == "session_start").unwrap();
    let result = lines.iter().find(|e| e["type"] == "result").unwrap();
    for e in [start, result] {
        assert_eq!(e["worktree"], "busy", "{e}");
        assert_eq!(e["branch"], "tern/busy", "{e}");
    }
    // From `pkg/`: the session starts in `pkg/` of the worktree (its AGENTS.md is read).
    let mut c = ws.cmd(&["exec", "--worktree", "sub", "from pkg"]);
    c.current_dir(ws.root().join("pkg"));
    let out = run_within(c, None, LIMIT).output();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body = String::from_utf8_lossy(&ws.fake.requests().last().unwrap().body).into_owned();
    assert!(body.contains("Use tabs in pkg."), "{body}");
    assert!(wt.exists());
}
