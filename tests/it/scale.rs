//! docs/scale.md's recipes, run as written: GNU parallel (locally, and over ssh through a local
//! stand-in for ssh), xargs -P, and the Kubernetes Indexed Job's task script, with the real
//! `tern` binary against one fake provider serving every job at once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::support::cli::{TERN, run_within};
use crate::support::files::jsonl;
use crate::support::*;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The shell block tagged `recipe:NAME` in docs/scale.md.
fn recipe(name: &str) -> String {
    let doc = std::fs::read_to_string(Path::new(ROOT).join("docs/scale.md")).expect("scale.md");
    let tag = format!("```sh recipe:{name}");
    let start = doc.find(&tag).unwrap_or_else(|| panic!("no recipe {name}")) + tag.len();
    let end = doc[start..].find("```").expect("closing fence") + start;
    doc[start..end].trim().to_string()
}

/// A fake provider answering `job-N` with `answer to task N`, and the first request of each
/// task in `fail_first` with a 503 whose Retry-After is past the recipe's `--max-retry-time`
/// (so that tern exits 75 at once).
fn provider(fail_first: &[u32]) -> (FakeServer, Arc<Mutex<HashMap<u32, u32>>>) {
    let fake = FakeServer::start(vec![]);
    let seen: Arc<Mutex<HashMap<u32, u32>>> = Arc::default();
    let (s, fail) = (seen.clone(), fail_first.to_vec());
    fake.set_responder(move |req| {
        let body = req.body_str();
        let n: u32 = body
            .split("job-")
            .nth(1)?
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .ok()?;
        let mut seen = s.lock().unwrap();
        let count = seen.entry(n).or_insert(0);
        *count += 1;
        if *count == 1 && fail.contains(&n) {
            return Some(
                Reply::status(503, "{\"error\": {\"message\": \"overloaded\"}}")
                    .header("retry-after", "120"),
            );
        }
        Some(openai_text(&format!("answer to task {n}")).auto_usage())
    });
    (fake, seen)
}

/// A folder with `tasks.txt` (`job-1` … `job-N`, each with a word that needs quoting) and a
/// HOME.
fn workdir(n: u32) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let tasks: String = (1..=n)
        .map(|i| format!("job-{i}: say it's done\n"))
        .collect();
    std::fs::write(dir.path().join("tasks.txt"), tasks).unwrap();
    std::fs::create_dir(dir.path().join(".tern")).unwrap();
    (dir, home)
}

/// `bash -c SCRIPT` in `dir` with `tern` on PATH pointing at `fake`.
fn shell(dir: &Path, home: &Path, fake: &FakeServer, script: &str) -> Command {
    let bin = Path::new(TERN).parent().expect("bin dir");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new("bash");
    c.arg("-c")
        .arg(script)
        .current_dir(dir)
        .env_clear()
        .env("PATH", path)
        .env("HOME", home)
        // A login environment has it; GNU parallel's remote wrapper runs nothing without it.
        .env("SHELL", "/bin/bash")
        .env("TERN_MODEL", "m")
        .env("OPENAI_BASE_URL", fake.openai_base());
    c
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The last line of a JSONL log: the `result`.
fn result_of(log: &Path) -> Value {
    jsonl(log)
        .pop()
        .unwrap_or_else(|| panic!("{} is empty", log.display()))
}

#[test]
fn twenty_tasks_through_gnu_parallel_with_a_provider_failure_recovered() {
    if !have("parallel") {
        // .ci/run installs it (Debian's `parallel`).
        crate::support::skipped(
            "twenty_tasks_through_gnu_parallel_with_a_provider_failure_recovered",
            "GNU parallel is not installed",
            true,
        );
        return;
    }
    let (dir, home) = workdir(20);
    // The recipe gives each task a worktree: it runs in a repository.
    for args in [
        &["init", "-q"][..],
        &["add", "tasks.txt"],
        &[
            "-c",
            "user.name=p",
            "-c",
            "user.email=p@p",
            "commit",
            "-qm",
            "tasks",
        ],
    ] {
        let ok = Command::new("git")
            .args(args)
            .current_dir(dir.path())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "git {args:?}");
    }
    let (fake, seen) = provider(&[13]);
    let out = run_within(
        shell(dir.path(), &home, &fake, &recipe("parallel-local")),
        None,
        std::time::Duration::from_secs(300),
    );
    if out.code != Some(0) {
        // What each job said (its stderr) and how it ended, to tell why.
        let mut why = std::fs::read_to_string(dir.path().join("jobs.log")).unwrap_or_default();
        for i in 1..=20 {
            let err = std::fs::read_to_string(dir.path().join(format!("logs/{i}.jsonl.err")))
                .unwrap_or_default();
            if !err.trim().is_empty() {
                why.push_str(&format!("\njob {i}: {err}"));
            }
        }
        panic!("{out:?}\n{why}");
    }
    for i in 1..=20 {
        let answer = std::fs::read_to_string(dir.path().join(format!("answers/{i}.txt")))
            .unwrap_or_else(|e| panic!("answers/{i}.txt: {e}"));
        assert_eq!(answer, format!("answer to task {i}\n"));
        let r = result_of(&dir.path().join(format!("logs/{i}.jsonl")));
        assert_eq!(r["type"], "result");
        assert_eq!(r["status"], "completed", "task {i}: {r}");
        assert_eq!(r["text"], format!("answer to task {i}"));
    }
    // Task 13 ran twice: its first run ended 75, parallel's --retries ran it again.
    let seen = seen.lock().unwrap();
    assert_eq!(seen.get(&13), Some(&2));
    assert!(
        (1..=20)
            .filter(|i| *i != 13)
            .all(|i| seen.get(&i) == Some(&1))
    );
    let log = std::fs::read_to_string(dir.path().join("jobs.log")).unwrap();
    assert_eq!(log.lines().count(), 21, "{log}");
    // One worktree and branch per task (task 13's retry found its own again).
    let list = Command::new("git")
        .args(["worktree", "list", "--porcelain"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    for i in 1..=20 {
        assert!(
            list.contains(&format!("branch refs/heads/tern/job{i}\n")),
            "{list}"
        );
        assert!(
            dir.path()
                .join(format!(".tern/worktrees/job{i}/.tern/sessions"))
                .is_dir()
        );
    }
}

#[test]
fn gnu_parallel_over_ssh_brings_the_jsonl_back() {
    if !have("parallel") {
        crate::support::skipped(
            "gnu_parallel_over_ssh_brings_the_jsonl_back",
            "GNU parallel is not installed",
            true,
        );
        return;
    }
    let (dir, home) = workdir(4);
    std::fs::create_dir_all(home.join("work/repo/.tern")).unwrap();
    // A stand-in for ssh: drops the options and the host, runs the command here (as ssh would
    // on the host: `~` is the remote HOME).
    let ssh = dir.path().join("fake-ssh");
    std::fs::write(
        &ssh,
        "#!/bin/bash\nwhile [ $# -gt 0 ]; do case \"$1\" in -l|-p|-o) shift 2;; -*) shift;; *) break;; esac; done\nshift\n[ \"$1\" = \"--\" ] && shift\ncd \"$HOME\" && exec bash -c \"$*\"\n",
    )
    .unwrap();
    Command::new("chmod").arg("755").arg(&ssh).status().unwrap();
    let (fake, _) = provider(&[2]);
    let mut cmd = shell(dir.path(), &home, &fake, &recipe("parallel-ssh"));
    cmd.env("PARALLEL_SSH", &ssh);
    let out = run_within(cmd, None, std::time::Duration::from_secs(300));
    assert_eq!(out.code, Some(0), "{out:?}");
    for i in 1..=4 {
        let err = std::fs::read_to_string(dir.path().join(format!("logs/{i}.jsonl.err")))
            .unwrap_or_default();
        assert!(
            std::fs::metadata(dir.path().join(format!("logs/{i}.jsonl")))
                .is_ok_and(|m| m.len() > 0),
            "task {i}: {err}\n{out:?}"
        );
        let r = result_of(&dir.path().join(format!("logs/{i}.jsonl")));
        assert_eq!(r["status"], "completed", "task {i}: {r}");
        assert_eq!(r["text"], format!("answer to task {i}"));
    }
    // The sessions are on the "remote" side, in ~/work/repo.
    assert!(
        home.join("work/repo/.tern/sessions")
            .read_dir()
            .unwrap()
            .count()
            >= 4
    );
}

#[test]
fn xargs_runs_every_task() {
    let (dir, home) = workdir(5);
    let (fake, _) = provider(&[]);
    let out = run_within(
        shell(dir.path(), &home, &fake, &recipe("xargs")),
        None,
        std::time::Duration::from_secs(300),
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    for i in 1..=5 {
        let answer = std::fs::read_to_string(dir.path().join(format!("answers/{i}.txt"))).unwrap();
        assert_eq!(answer, format!("answer to task {i}\n"));
        assert_eq!(
            result_of(&dir.path().join(format!("logs/{i}.jsonl")))["status"],
            "completed"
        );
    }
}

#[test]
fn the_kubernetes_task_script_runs_the_line_of_its_index() {
    let manifest =
        std::fs::read_to_string(Path::new(ROOT).join("examples/kubernetes/tern-indexed-job.yaml"))
            .unwrap();
    for needle in [
        "completionMode: Indexed",
        "/tasks/run-task.sh",
        "values: [75]",
        "action: FailIndex",
    ] {
        assert!(manifest.contains(needle), "the manifest lost {needle:?}");
    }
    let (dir, home) = workdir(3);
    let work = dir.path().join("work");
    std::fs::create_dir_all(work.join(".tern")).unwrap();
    let (fake, _) = provider(&[]);
    let script = Path::new(ROOT).join("examples/kubernetes/run-task.sh");
    for index in 0..3 {
        let mut cmd = shell(
            dir.path(),
            &home,
            &fake,
            &format!("sh {}", script.display()),
        );
        cmd.env("JOB_COMPLETION_INDEX", index.to_string())
            .env("TERN_TASKS", dir.path().join("tasks.txt"))
            .env("TERN_WORK", &work);
        let out = run_within(cmd, None, std::time::Duration::from_secs(120));
        assert_eq!(out.code, Some(0), "{out:?}");
        let last: Value =
            serde_json::from_str(out.stdout.lines().last().expect("jsonl")).expect("json");
        assert_eq!(last["status"], "completed");
        assert_eq!(last["text"], format!("answer to task {}", index + 1));
    }
    assert_eq!(work.join(".tern/sessions").read_dir().unwrap().count(), 3);
}
