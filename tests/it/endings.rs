//! How a run's ending is recorded and shown: one ending in meta.json, `tern sessions`, the
//! `result` event and the tool results' words; a goal command's timeout; a full disk's turn
//! end; a killed creation. Against the real binary, the fake provider and real processes.

use serde_json::Value;

use crate::support::cli::WireWs;
use crate::support::script::{bash, text};
use crate::support::*;

const W: Wire = Wire::OpenAi;

fn stdout_json(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn of<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

fn meta(ws: &WireWs) -> Value {
    serde_json::from_str(&ws.read("meta.json")).unwrap()
}

fn sessions(ws: &WireWs) -> String {
    String::from_utf8_lossy(&ws.ok(&["sessions"]).stdout).into_owned()
}

#[test]
fn a_wall_time_stop_is_one_budget_ending_everywhere() {
    let ws = WireWs::new(W, vec![bash(W, "c1", "sleep 60"), text(W, "late")]);
    let out = ws.tern(&["exec", "--json", "--max-wall-time", "2", "wait"]);
    assert_eq!(out.status.code(), Some(1));
    let ev = stdout_json(&out);
    let result = ev.last().unwrap();
    assert_eq!(result["status"], "budget_exhausted");
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("the run's wall time (--max-wall-time 2 s) ran out"),
        "{result}"
    );
    let tr = of(&ev, "tool_result");
    let content = tr[0]["content"].as_str().unwrap();
    assert!(
        content.contains("stopped: the run's wall time (--max-wall-time 2 s) ran out"),
        "{content}"
    );
    assert!(!content.contains("interrupted by the user"), "{content}");
    let ends = of(&ev, "turn_end");
    assert_eq!(ends[0]["status"], "budget_exhausted");
    assert_eq!(meta(&ws)["status"], "budget_exhausted");
    let list = sessions(&ws);
    assert!(list.contains("budget_exhausted"), "{list}");
    assert!(!list.contains("interrupted"), "{list}");
}

#[test]
fn a_goal_command_that_never_ends_times_out_as_a_failed_attempt() {
    let ws = WireWs::new(W, vec![text(W, "done")]);
    let out = ws.tern(&[
        "exec",
        "--json",
        "--goal",
        "sleep 1000",
        "--goal-timeout",
        "1",
        "--goal-attempts",
        "1",
        "hi",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ev = stdout_json(&out);
    let result = ev.last().unwrap();
    assert_eq!(result["status"], "failed", "{result}");
    assert_eq!(result["goal"]["passed"], false);
    let error = result["error"].as_str().unwrap();
    assert!(error.contains("timed out after 1 s"), "{error}");
    assert!(!error.contains("interrupted"), "{error}");
    let goal: Value = serde_json::from_str(&ws.read("goal.json")).unwrap();
    assert_eq!(goal["timeout_s"], 1);
    assert_eq!(goal["last"]["passed"], false);
    assert_eq!(meta(&ws)["status"], "failed");
    // A timeout outside 1..=600 is a usage error.
    let out = ws.tern(&["exec", "--goal", "true", "--goal-timeout", "0", "hi"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_call_with_no_tool_name_and_bad_arguments_reads_without_a_gap() {
    use crate::support::script::calls;
    let ws = WireWs::new(
        W,
        vec![
            calls(W, &[("c1", "", Value::String("{oops".into()))]),
            text(W, "ok"),
        ],
    );
    let out = ws.ok(&["exec", "--json", "go"]);
    let ev = stdout_json(&out);
    let tr = of(&ev, "tool_result");
    let content = tr[0]["content"].as_str().unwrap();
    assert!(
        content.contains("this call (it names no tool)"),
        "{content}"
    );
    assert!(!content.contains("this  call"), "{content}");
}

#[test]
fn a_blank_base_url_is_shown_as_given() {
    let ws = WireWs::new(W, vec![]);
    let out = ws.tern(&["exec", "--base-url", " ", "hi"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\" \""), "{err}");
    assert!(!err.contains("\"\""), "{err}");
}

#[test]
fn the_sessions_column_counts_what_it_says_model_requests() {
    // One turn (one prompt) of two model requests: a bash call, then the answer.
    let ws = WireWs::new(W, vec![bash(W, "c1", "true"), text(W, "done")]);
    let out = ws.ok(&["exec", "--json", "go"]);
    let result = stdout_json(&out).pop().unwrap();
    let list = sessions(&ws);
    let mut lines = list.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert!(header.contains(&"requests"), "{list}");
    assert!(
        !header.contains(&"turns"),
        "a turns column must count turns: {list}"
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    // `* id status requests tokens …`
    assert_eq!(row[3], "2", "{list}");
    assert_eq!(
        result["turns"], 2,
        "the result's turns are its requests too: {result}"
    );
    assert_eq!(meta(&ws)["turns"], 2);
}

/// `meta.json` as a failed write at a turn's end leaves it (a full disk): still `running`,
/// a request's usage missing, while `events.jsonl` holds both usage events and the turn_end.
fn lose_the_meta_write(ws: &WireWs) {
    let mut m = meta(ws);
    m["status"] = "running".into();
    m["pid"] = 999_999_999u64.into();
    m["turns"] = 1.into();
    m["usage"]["input_tokens"] = 10.into();
    m["usage"]["output_tokens"] = 1.into();
    std::fs::write(ws.path("meta.json"), m.to_string()).unwrap();
}

#[test]
fn a_turn_end_on_record_is_never_called_interrupted_and_totals_agree() {
    let ws = WireWs::new(W, vec![bash(W, "c1", "true"), text(W, "done")]);
    let out = ws.ok(&["exec", "--json", "fill"]);
    let result = stdout_json(&out).pop().unwrap();
    let tokens = result["usage"]["input_tokens"].as_u64().unwrap()
        + result["usage"]["output_tokens"].as_u64().unwrap();
    lose_the_meta_write(&ws);
    // `tern sessions` and `tern status` read the same ending and totals, before any start.
    let list = sessions(&ws);
    let row: Vec<&str> = list.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[2], "completed", "{list}");
    assert_eq!(row[3], "2", "{list}");
    assert_eq!(row[4], tokens.to_string(), "{list}");
    let status: Value = serde_json::from_slice(&ws.ok(&["status", "--json"]).stdout).unwrap();
    assert_eq!(status["status"], "completed", "{status}");
    assert_eq!(status["cache"]["requests"], 2, "{status}");
    // The next start settles meta.json from the record and says nothing of an interrupt.
    ws.push(vec![text(W, "again")]);
    let out = ws.ok(&["exec", "--continue", "more"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("interrupted"), "{err}");
    let m = meta(&ws);
    assert_eq!(m["status"], "completed");
    assert_eq!(m["turns"], 3, "{m}");
    let ev = ws.read("events.jsonl");
    assert!(!ev.contains("turn_interrupted"), "{ev}");
}

#[test]
fn a_session_killed_while_being_created_is_not_left_idle() {
    let ws = WireWs::new(W, vec![text(W, "done")]);
    // What a kill -9 during creation leaves: meta.json (idle, 0 requests), no session_start.
    ws.ok(&["exec", "first"]);
    let dir = ws.session();
    std::fs::remove_file(dir.join("events.jsonl")).unwrap();
    std::fs::remove_file(dir.join("conversation.jsonl")).unwrap();
    let mut m = meta(&ws);
    m["status"] = "idle".into();
    m["turns"] = 0.into();
    std::fs::write(dir.join("meta.json"), m.to_string()).unwrap();
    let list = sessions(&ws);
    assert!(list.contains("interrupted?"), "{list}");
    assert!(!list.contains(" idle "), "{list}");
    // The next start writes it.
    ws.push(vec![text(W, "again")]);
    let out = ws.ok(&["exec", "--json", "--continue", "more"]);
    let ev = stdout_json(&out);
    assert_eq!(ev.last().unwrap()["status"], "completed");
    // A fork waits idle for its first start: it is no killed creation.
    let fork = ws.ok(&["fork"]);
    let _ = fork;
    let list = sessions(&ws);
    assert!(list.contains(" idle "), "{list}");
}

/// A real kill between a session's creation and its `session_start`, at each fault point
/// there (not a kill after a sleep, which landed anywhere under load): `tern sessions` lists the
/// session interrupted, never idle.
#[test]
fn a_real_kill_during_creation_is_marked_interrupted() {
    let dry = WireWs::new(W, vec![text(W, "done")]);
    let log = dry.root().join("fault.log");
    let mut cmd = dry.cmd(&["exec", "k"]);
    cmd.env("TERN_FAULT_LOG", &log);
    assert_eq!(crate::support::cli::output(cmd).status.code(), Some(0));
    let lines = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = lines.lines().collect();
    let made = lines
        .iter()
        .position(|l| {
            l.contains(" renamed ")
                && l.rsplit_once("/.tern/sessions/")
                    .is_some_and(|(_, id)| !id.contains('/') && !id.starts_with(".tmp-"))
        })
        .expect("the session folder is committed by a rename");
    let started = made
        + lines[made..]
            .iter()
            .position(|l| l.contains(" appended ") && l.ends_with("/events.jsonl"))
            .expect("session_start follows");
    let at = |l: &str| l.split(' ').next().and_then(|n| n.parse::<u64>().ok());
    let points: Vec<u64> = lines[made + 1..started]
        .iter()
        .filter_map(|l| at(l))
        .collect();
    assert!(!points.is_empty(), "{lines:?}");
    for k in points {
        let ws = WireWs::new(W, vec![text(W, "done")]);
        let mut cmd = ws.cmd(&["exec", "k"]);
        cmd.env("TERN_FAULT_AT", k.to_string());
        assert_eq!(
            crate::support::cli::output(cmd).status.code(),
            None,
            "killed at point {k}"
        );
        let list = sessions(&ws);
        assert!(!list.contains(" idle "), "point {k}: {list}");
        assert!(list.contains("interrupted"), "point {k}: {list}");
    }
}

/// `--output-last-message FILE`: a symbolic link is written through (as a shell's `>`), the
/// link kept; a FIFO, a device or a folder tern cannot create a file in is refused at start
/// (exit 2, naming the flag, never talking of the state folder), before the model is asked.
#[test]
fn output_last_message_follows_links_and_refuses_what_is_no_file() {
    use std::os::unix::fs::FileTypeExt;
    let ws = WireWs::new(W, vec![text(W, "the answer")]);
    let root = ws.root().to_path_buf();
    std::fs::write(root.join("target.txt"), "old\n").unwrap();
    std::os::unix::fs::symlink("target.txt", root.join("link.txt")).unwrap();
    let fifo = root.join("pipe");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    std::os::unix::fs::symlink("nowhere.txt", root.join("dangling.txt")).unwrap();
    for bad in ["pipe", "/dev/null", "/proc/self/status", "dangling.txt"] {
        let out = ws.tern(&["exec", "--output-last-message", bad, "go"]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--output-last-message"), "{bad}: {err}");
        assert!(!err.contains("state folder"), "{bad}: {err}");
    }
    assert!(ws.fake.requests().is_empty(), "the model was asked");
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo(),
        "the FIFO was replaced"
    );
    ws.ok(&["exec", "--output-last-message", "link.txt", "go"]);
    assert!(
        std::fs::symlink_metadata(root.join("link.txt"))
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link was replaced by a file"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("target.txt")).unwrap(),
        "the answer\n"
    );
}

/// Found by a new user: the folder of `--output-last-message d/victim` is checked at start, but
/// the model's commands run before the answer is written; `rm -rf d; ln -s OUTSIDE d` must not
/// carry tern's (unsandboxed) write outside the workspace. The folder is held open from the
/// start: the write fails, saying so, and nothing appears outside. tern's own state folder is
/// refused as a target at start.
#[test]
fn output_last_message_is_not_carried_out_by_a_folder_swapped_during_the_run() {
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().to_path_buf();
    let ws = WireWs::new(
        W,
        vec![
            bash(
                W,
                "c1",
                &format!("rm -rf d && ln -s {} d && echo swapped", target.display()),
            ),
            text(W, "EVIL"),
        ],
    );
    std::fs::create_dir(ws.root().join("d")).unwrap();
    // Without the layer: with it, the door never applies a link that leads out, so the swap
    // would not happen at all (tests/it/door.rs).
    let out = ws.tern(&[
        "exec",
        "--no-layer",
        "--output-last-message",
        "d/victim",
        "go",
    ]);
    assert!(
        !target.join("victim").exists(),
        "the answer was written outside the workspace through a swapped folder: {out:?}"
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("removed or replaced during the run"), "{err}");

    let out = ws.tern(&["exec", "--output-last-message", ".tern/current", "go"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("inside tern's state folder"),
        "{out:?}"
    );
}

/// Unmounts a test's tmpfs when dropped (lazily: a process may still hold a folder of it).
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// The user's full disk: the workspace (and its `.tern/`) on a 2 MB tmpfs, the model fills it.
/// Whatever write failed, the record must not call the turn interrupted afterwards, and
/// `tern sessions` and `tern status` must show one total.
#[test]
fn a_full_disk_turn_is_not_called_interrupted_later() {
    let ws = WireWs::new(
        W,
        vec![
            bash(W, "c1", "head -c 3000000 /dev/zero > big"),
            text(W, "filled"),
        ],
    );
    let root = ws.root().to_path_buf();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
        .arg(&root)
        .output();
    if !mounted.as_ref().is_ok_and(|o| o.status.success()) {
        crate::support::skipped(
            "endings::a_full_disk_turn_is_not_called_interrupted_later",
            "cannot mount a tmpfs here (needs root)",
            false,
        );
        return;
    }
    let _guard = Mounted(root.clone());
    std::fs::create_dir(root.join(".tern")).unwrap();
    std::fs::create_dir_all(ws.ws.home()).unwrap();
    let out = ws.tern(&["exec", "fill"]);
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!said.contains("panicked"), "{said}");
    let events = ws.read("events.jsonl");
    let ended = events.contains("\"turn_end\"");
    let list = sessions(&ws);
    let row: Vec<&str> = list.lines().nth(1).unwrap().split_whitespace().collect();
    if ended {
        assert!(!row[2].starts_with("interrupted"), "{said}\n{list}");
    }
    let status: Value = serde_json::from_slice(&ws.ok(&["status", "--json"]).stdout).unwrap();
    assert_eq!(
        row[3],
        status["cache"]["requests"].to_string(),
        "{list}\n{status}"
    );
    // Space again: the next start says nothing of an interrupt when the end was recorded.
    // With the door, `big` may never have reached the workspace (the layer filled first).
    let _ = std::fs::remove_file(root.join("big"));
    ws.push(vec![text(W, "again")]);
    let out = ws.ok(&["exec", "--continue", "more"]);
    let err = String::from_utf8_lossy(&out.stderr);
    if ended {
        assert!(!err.contains("interrupted"), "{said}\n{err}");
    }
    assert_eq!(meta(&ws)["status"], "completed");
}

/// Issue 46: when a session's records cannot be written (a disk that refuses `events.jsonl`
/// and `meta.json`, injected in debug builds) the run does not exit 0 with `meta.json` saying
/// running: it fails, names the record, and says the session is kept for `--continue`.
#[test]
fn records_that_cannot_be_written_fail_the_run() {
    if !cfg!(debug_assertions) {
        return;
    }
    let ws = crate::support::cli::WireWs::new(
        Wire::OpenAi,
        vec![
            openai_text("first"),
            openai_text("second"),
            openai_text("third"),
        ],
    );
    ws.ok(&["exec", "one"]);
    let mut c = ws.cmd(&["exec", "--continue", "two"]);
    c.env("TERN_FAULT_FULL", "events.jsonl");
    let out = crate::support::cli::run_within(c, None, crate::support::cli::LIMIT).output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("records could not all be written")
            && err.contains("events.jsonl")
            && err.contains("--continue"),
        "{err}"
    );
    // A disk that refuses the history too: the error says the session is kept.
    let mut c = ws.cmd(&["exec", "--continue", "three"]);
    c.env("TERN_FAULT_FULL", "conversation.jsonl,meta.json");
    let out = crate::support::cli::run_within(c, None, crate::support::cli::LIMIT).output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the disk is full: the session is kept") && err.contains("--continue"),
        "{err}"
    );
    // Once the disk takes them again, --continue goes on.
    ws.ok(&["exec", "--continue", "three"]);
}
