//! Messages that tell the truth (issue 18, item 5): each case a real run of the binary against
//! real files, checking the words and the exit code a person gets.

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::Duration;

use crate::support::cli::{run_no_stdin, run_within};
use crate::support::procs::wait_exit;
use crate::support::script::text;
use crate::support::{Wire, cli::WireWs};

/// A bound far above a normal run: a verb still running then is hung.
const HUNG: Duration = Duration::from_secs(20);

/// A FIFO in place of `events.jsonl`: every verb and `exec --continue` answers (never blocks),
/// and those that need the file name it and say it is not a plain file.
#[test]
fn a_fifo_state_file_never_hangs_a_verb() {
    let ws = WireWs::new(Wire::OpenAi, vec![text(Wire::OpenAi, "Done.")]);
    ws.ok(&["exec", "hello"]);
    let events = ws.session().join("events.jsonl");
    std::fs::remove_file(&events).unwrap();
    let c = std::ffi::CString::new(events.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) on a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for args in [
        &["stats"][..],
        &["status"],
        &["plan", "show"],
        &["sessions"],
        &["exec", "--continue", "go on"],
    ] {
        let out = run_within(ws.cmd(args), None, HUNG);
        if out.code != Some(0) {
            assert_eq!(out.code, Some(1), "{args:?}: {out:?}");
            assert!(
                out.stderr.contains("events.jsonl is not a plain file"),
                "{args:?}: {out:?}"
            );
        }
    }
    let out = run_no_stdin(ws.cmd(&["stats"]));
    assert_eq!(out.code, Some(1), "stats needs the events: {out:?}");
}

/// A verb that only reads leaves at once on SIGTERM (no handler that merely sets a flag).
#[test]
fn a_reading_verb_leaves_on_sigterm() {
    let ws = WireWs::new(Wire::OpenAi, vec![text(Wire::OpenAi, "Done.")]);
    ws.ok(&["exec", "hello"]);
    // `tern status` reading its input from a pipe nobody writes: plan draft reads stdin, so
    // use it, a writer, as the slow one: it waits for stdin until the signal.
    let mut child = ws
        .cmd(&["plan", "draft"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    // Sent while it waits for its input, the moment this test is about.
    assert!(
        crate::support::procs::eventually(HUNG, || crate::support::procs::reading_stdin(
            child.id()
        )),
        "plan draft never read its input"
    );
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let status = wait_exit(&mut child, HUNG).expect("plan draft left on SIGTERM");
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
}

/// `.tern` as a file: every command exits 1 with the same words.
#[test]
fn a_state_file_in_the_folders_place_is_exit_1_everywhere() {
    let ws = WireWs::new(Wire::OpenAi, vec![]);
    let tern = ws.root().join(".tern");
    std::fs::remove_dir_all(&tern).ok();
    std::fs::write(&tern, "not a folder").unwrap();
    for args in [
        &["exec", "hi"][..],
        &["exec", "--continue", "hi"],
        &["sessions"],
        &["status"],
        &["stats"],
        &["plan", "show"],
        &["compact"],
    ] {
        let out = run_no_stdin(ws.cmd(args));
        assert_eq!(out.code, Some(1), "{args:?}: {out:?}");
        assert!(
            out.stderr.contains("exists and is not a folder"),
            "{args:?}: {out:?}"
        );
    }
}

/// A read-only workspace: the error names the folder and `--state-dir` (not a bare
/// `os error 30`). Mounting a read-only tmpfs needs root; without it the test says SKIPPED.
#[test]
fn a_read_only_workspace_points_to_state_dir() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "ro,size=64k", "tmpfs"])
        .arg(dir.path())
        .output();
    if !out.as_ref().is_ok_and(|o| o.status.success()) {
        crate::support::skipped(
            "records::a_read_only_workspace_points_to_state_dir",
            &format!("cannot mount a read-only tmpfs here ({out:?})"),
            false,
        );
        return;
    }
    let ws = WireWs::new(Wire::OpenAi, vec![text(Wire::OpenAi, "Done.")]);
    let mut cmd = ws.cmd(&["exec", "hello"]);
    cmd.current_dir(dir.path());
    let out = run_no_stdin(cmd);
    let _ = std::process::Command::new("umount")
        .arg(dir.path())
        .status();
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("--state-dir") && out.stderr.contains("cannot write its state"),
        "{out:?}"
    );
}

/// A damaged `plan.json`: `tern plan show` rebuilds it as `exec --continue` does, with the same
/// words (before, one failed and the other quietly rebuilt it).
#[test]
fn a_damaged_plan_json_is_rebuilt_alike_by_plan_show_and_continue() {
    let ws = WireWs::new(
        Wire::OpenAi,
        vec![text(Wire::OpenAi, "Done."), text(Wire::OpenAi, "Again.")],
    );
    ws.ok(&["exec", "hello"]);
    let plan = ws.session().join("plan.json");
    let words = tern::runtime::plan::PLAN_REBUILT;
    for args in [
        &["plan", "show"][..],
        &["exec", "--json", "--continue", "go on"],
    ] {
        std::fs::write(&plan, "{\"state\":").unwrap();
        let out = run_no_stdin(ws.cmd(args));
        assert_eq!(out.code, Some(0), "{args:?}: {out:?}");
        assert!(
            out.stdout.contains(words) || out.stderr.contains(words),
            "{args:?}: {out:?}"
        );
        let fixed: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).expect("rebuilt");
        assert!(fixed.is_object());
    }
}

/// `tern sandbox check` names `--no-network` in its rules heading only as what the check added.
#[test]
fn sandbox_check_says_the_check_added_no_network() {
    let ws = WireWs::new(Wire::OpenAi, vec![]);
    let out = run_no_stdin(ws.cmd(&["sandbox", "check"]));
    for line in out
        .stdout
        .lines()
        .filter(|l| l.contains("sandbox workspace-write"))
    {
        assert!(line.starts_with("rules checked"), "{line}");
        if line.contains("--no-network:") {
            assert!(
                line.contains("(the check adds --no-network to test the network rules)"),
                "{line}"
            );
        }
    }
}

/// One token count per session: `meta.json` (what `tern sessions` shows), `tern stats` and
/// `tern status` agree after a turn and a `tern compact` (whose request the record used to
/// leave out), and a parent's `result` gives its children's total.
#[test]
fn one_token_count_per_session_everywhere() {
    use crate::support::script::agent;
    let w = Wire::OpenAi;
    let ws = WireWs::new(
        w,
        vec![
            agent(w, "a1", serde_json::json!({"task": "say hi"})),
            text(w, "hi from the child"),
            text(w, "The child said hi."),
            text(
                w,
                "The person asked for a child to say hi; it did. Next: nothing is left to do.",
            ),
        ],
    );
    let out = ws.ok(&["exec", "--json", "delegate"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let kid = std::fs::read_dir(ws.session().join("agents"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let kid_meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(kid.join("meta.json")).unwrap()).unwrap();
    assert_eq!(result["children_turns"], kid_meta["turns"], "{result}");
    assert_eq!(result["children_usage"], kid_meta["usage"], "{result}");
    assert!(result["children_usage"]["input_tokens"].as_u64().unwrap() > 0);

    let before = ws.json("meta.json");
    assert_eq!(before["turns"], 2, "{before}");
    // The run's `result` (one process made the whole session) is the session's record.
    assert_eq!(result["turns"], before["turns"], "{result}");
    assert_eq!(result["usage"], before["usage"], "{result}");
    ws.ok(&["compact"]);
    let meta = ws.json("meta.json");
    let sum = |v: &serde_json::Value| {
        v["input_tokens"].as_u64().unwrap() + v["output_tokens"].as_u64().unwrap()
    };
    let recorded = sum(&meta["usage"]);
    let usage_events: Vec<serde_json::Value> = ws
        .events()
        .into_iter()
        .filter(|e| e["type"] == "usage")
        .collect();
    assert_eq!(meta["turns"].as_u64().unwrap(), usage_events.len() as u64);
    assert!(usage_events.iter().any(|e| e["purpose"] == "compaction"));
    assert_eq!(recorded, usage_events.iter().map(sum).sum::<u64>());
    let stats: serde_json::Value =
        serde_json::from_slice(&ws.ok(&["stats", "--json"]).stdout).unwrap();
    assert_eq!(sum(&stats["total"]), recorded, "{stats}");
    let listing = String::from_utf8_lossy(&ws.ok(&["sessions"]).stdout).into_owned();
    let shown = format!("{recorded}");
    let with_commas = {
        let d: Vec<char> = shown.chars().collect();
        let mut s = String::new();
        for (i, c) in d.iter().enumerate() {
            if i > 0 && (d.len() - i).is_multiple_of(3) {
                s.push(',');
            }
            s.push(*c);
        }
        s
    };
    assert!(
        listing.contains(&shown) || listing.contains(&with_commas),
        "tern sessions shows {recorded}: {listing}"
    );
    let status: serde_json::Value =
        serde_json::from_slice(&ws.ok(&["status", "--json"]).stdout).unwrap();
    assert_eq!(
        status["cache"]["input_tokens"], meta["usage"]["input_tokens"],
        "{status}"
    );
    assert_eq!(
        status["cache"]["cached_tokens"], meta["usage"]["cached_tokens"],
        "{status}"
    );
    // The REPL's line after a turn: the session's record, the compaction included.
    ws.push(vec![text(w, "Still here.")]);
    let out = ws.ok_in(&["chat", "--continue"], "are you there?\n");
    let meta = ws.json("meta.json");
    let line = format!(
        "session: {} tokens in, {} out",
        meta["usage"]["input_tokens"], meta["usage"]["output_tokens"]
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&line), "{line}: {stderr}");
    let stats: serde_json::Value =
        serde_json::from_slice(&ws.ok(&["stats", "--json"]).stdout).unwrap();
    assert_eq!(sum(&stats["total"]), sum(&meta["usage"]), "{stats}");
}
