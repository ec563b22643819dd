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
