//! Steering a running turn (issue 22): `tern steer` from another process writes the session's
//! inbox; the running turn delivers each message at its next model request, after the last tool
//! result, without changing a byte before it; a crash between the steer and its delivery neither
//! loses nor doubles it.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::support::Wire;
use crate::support::cli::WireWs;
use crate::support::files::jsonl;
use crate::support::procs::{eventually, wait_exit};
use crate::support::script::{bash, text};

/// The model's command: `sleep 2`, then a wait for the test's go-ahead file, so the steer is
/// written while the command runs however loaded the machine is.
fn sleep_then_wait(go: &str) -> String {
    format!("sleep 2; while [ ! -e {go} ]; do sleep 0.05; done")
}

/// The stored user messages' texts.
fn users(conversation: &[Value]) -> Vec<String> {
    conversation
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Waits until the current session's events hold a `tool_call` for `id`.
fn wait_tool_call(ws: &WireWs, id: &str) {
    assert!(
        eventually(Duration::from_secs(60), || {
            // Read leniently: the files appear while the turn starts.
            let Ok(current) = std::fs::read_to_string(ws.root().join(".tern/current")) else {
                return false;
            };
            let events = ws
                .root()
                .join(".tern/sessions")
                .join(current.trim())
                .join("events.jsonl");
            std::fs::read_to_string(events).is_ok_and(|t| {
                t.lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .any(|e| e["type"] == "tool_call" && e["id"] == id)
            })
        }),
        "the turn never started the call {id}"
    );
}

fn steer(ws: &WireWs, args: &[&str]) -> std::process::Output {
    let mut a = vec!["steer"];
    a.extend_from_slice(args);
    ws.tern(&a)
}

fn steer_ok(ws: &WireWs, msg: &str) {
    let out = steer(ws, &[msg]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "tern steer: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("next request"));
}

fn steered_run(wire: Wire) {
    let ws = WireWs::new(
        wire,
        vec![
            bash(wire, "c1", &sleep_then_wait("go1")),
            bash(wire, "c2", &sleep_then_wait("go2")),
            text(wire, "done"),
        ],
    );
    let mut child = ws.spawn(&["exec", "--json", "start the build"]);
    wait_tool_call(&ws, "c1");
    steer_ok(&ws, "use tabs, not spaces");
    std::fs::write(ws.root().join("go1"), "").unwrap();
    wait_tool_call(&ws, "c2");
    steer_ok(&ws, "first: also run the tests");
    steer_ok(&ws, "second: then stop");
    std::fs::write(ws.root().join("go2"), "").unwrap();
    let st = wait_exit(&mut child, Duration::from_secs(120)).expect("tern exec ended");
    assert!(st.success(), "tern exec failed");

    let bodies = ws.bodies();
    assert_eq!(bodies.len(), 3, "three requests");
    let raws = ws.raw_bodies();
    for i in 1..3 {
        let prev = crate::prefix::core(wire, &raws[i - 1]);
        let next = match wire {
            Wire::OpenAi => raws[i].clone(),
            Wire::Anthropic => raws[i].replace(crate::prefix::BREAKPOINT, ""),
        };
        assert!(
            next.starts_with(&prev),
            "request {}: the prefix before the steered message is byte-identical",
            i + 1
        );
    }
    // Stored: prompt, call, result, steer, call, result, steer A, steer B, answer.
    let conv = ws.conversation();
    let roles: Vec<&str> = conv.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "user",
            "assistant",
            "tool",
            "user",
            "user",
            "assistant"
        ]
    );
    assert_eq!(
        users(&conv),
        [
            "start the build",
            "use tabs, not spaces",
            "first: also run the tests",
            "second: then stop"
        ]
    );
    assert!(conv[3]["steer"].is_string(), "the id is kept: {}", conv[3]);
    // Each request's last words are the messages steered since the one before, after the result.
    let tail_text = |b: &Value| b.to_string();
    assert!(!tail_text(&bodies[0]).contains("use tabs"));
    assert!(tail_text(&bodies[1]).contains("use tabs, not spaces"));
    assert!(!tail_text(&bodies[1]).contains("also run the tests"));
    let third = tail_text(&bodies[2]);
    let (a, b) = (
        third.find("first: also run the tests").expect("A sent"),
        third.find("second: then stop").expect("B sent"),
    );
    assert!(a < b, "in the order they were steered");
    let events = ws.events();
    let steers: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "steer")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        steers,
        [
            "use tabs, not spaces",
            "first: also run the tests",
            "second: then stop"
        ]
    );
    assert!(inbox_names(&ws.session()).is_empty(), "the inbox is empty");
}

fn inbox_names(session: &Path) -> Vec<String> {
    match std::fs::read_dir(session.join("inbox")) {
        Ok(rd) => rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[test]
fn a_steer_arrives_at_the_next_request_after_the_tool_result_openai() {
    steered_run(Wire::OpenAi);
}

#[test]
fn a_steer_arrives_at_the_next_request_after_the_tool_result_anthropic() {
    steered_run(Wire::Anthropic);
}

#[test]
fn a_steer_with_no_running_turn_is_refused_or_queued() {
    let wire = Wire::OpenAi;
    let ws = WireWs::new(
        wire,
        vec![text(wire, "hello"), text(wire, "noted"), text(wire, "yes")],
    );
    ws.ok(&["exec", "hi"]);
    let out = steer(&ws, &["are you there?"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no turn is running"), "{err}");
    assert!(inbox_names(&ws.session()).is_empty(), "nothing written");
    let out = steer(&ws, &[" "]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "an empty message is a usage error"
    );

    // --queue keeps it for the next turn: delivered after that turn's prompt.
    let out = steer(&ws, &["--queue", "keep this for later"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("next turn"));
    let status = String::from_utf8_lossy(&ws.ok(&["status"]).stdout).into_owned();
    assert!(
        status.contains("Steered: 1 message waiting for the model's next request"),
        "{status}"
    );
    ws.ok(&["exec", "--continue", "next"]);
    let bodies = ws.bodies();
    let last = bodies[1]["messages"].as_array().unwrap();
    let n = last.len();
    assert_eq!(last[n - 2]["content"], "next");
    assert_eq!(last[n - 1]["content"], "keep this for later");
    assert!(inbox_names(&ws.session()).is_empty());
    // Part of the history from then on: a later process resuming the session sends it again,
    // in place, and the prefix before the new prompt is the previous request's.
    ws.ok(&["exec", "--continue", "and more"]);
    let raws = ws.raw_bodies();
    assert_eq!(raws[2].matches("keep this for later").count(), 1);
    assert!(raws[2].starts_with(&crate::prefix::core(wire, &raws[1])));
}

/// The fault points one `tern exec --continue` passes, as `(n, kind, path)`.
fn points(log: &Path) -> Vec<(usize, String, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ' ');
            Some((
                it.next()?.parse().ok()?,
                it.next()?.to_string(),
                it.next()?.to_string(),
            ))
        })
        .collect()
}

/// A crash right after the steered message was stored (before its inbox entry is removed), and
/// one right before it was stored: after a restart the model reads it exactly once.
#[test]
fn a_crash_between_steer_and_delivery_neither_loses_nor_doubles_it() {
    let wire = Wire::OpenAi;
    // Dry run: count the points of the delivery.
    let probe = WireWs::new(wire, vec![text(wire, "hello"), text(wire, "ok")]);
    probe.ok(&["exec", "hi"]);
    probe.ok(&["steer", "--queue", "the steered words"]);
    let log = probe.root().join("faults.log");
    let mut cmd = probe.cmd(&["exec", "--continue", "next"]);
    cmd.env("TERN_FAULT_LOG", &log);
    let out = crate::support::cli::output(cmd);
    assert!(out.status.success());
    let pts = points(&log);
    let remove = pts
        .iter()
        .find(|(_, k, p)| k == "remove" && p.contains("/inbox/"))
        .expect("the inbox entry's removal is a fault point")
        .0;
    let store = pts
        .iter()
        .rev()
        .find(|(n, _, p)| *n < remove && p.ends_with("conversation.jsonl"))
        .expect("the steered message's append")
        .0;

    for (at, stored) in [(remove, true), (store, false)] {
        let ws = WireWs::new(
            wire,
            vec![text(wire, "hello"), text(wire, "ok"), text(wire, "ok")],
        );
        ws.ok(&["exec", "hi"]);
        ws.ok(&["steer", "--queue", "the steered words"]);
        let mut cmd = ws.cmd(&["exec", "--continue", "next"]);
        cmd.env("TERN_FAULT_AT", at.to_string());
        let out = crate::support::cli::output(cmd);
        assert_eq!(out.status.code(), None, "killed at point {at}");
        let count = |ws: &WireWs| {
            jsonl(&ws.path("conversation.jsonl"))
                .iter()
                .filter(|m| m["content"] == "the steered words")
                .count()
        };
        if stored {
            assert_eq!(count(&ws), 1, "stored before the crash");
            assert_eq!(
                inbox_names(&ws.session()).len(),
                1,
                "its entry is still there"
            );
        }
        ws.ok(&["exec", "--continue", "again"]);
        assert_eq!(count(&ws), 1, "point {at}: delivered exactly once");
        assert!(
            inbox_names(&ws.session()).is_empty(),
            "point {at}: inbox empty"
        );
        let bodies = ws.bodies();
        let last = bodies.last().unwrap().to_string();
        assert_eq!(
            last.matches("the steered words").count(),
            1,
            "point {at}: the model reads it once"
        );
    }
}

/// An inbox file that is not an entry (torn, edited) is never sent: moved aside with a warning,
/// and the turn goes on.
#[test]
fn a_damaged_inbox_entry_is_moved_aside_not_sent() {
    let wire = Wire::OpenAi;
    let ws = WireWs::new(wire, vec![text(wire, "hello"), text(wire, "fine")]);
    ws.ok(&["exec", "hi"]);
    let inbox = ws.session().join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    std::fs::write(
        inbox.join("00000000000000000001-1.json"),
        "{\"id\": \"x\", \"te",
    )
    .unwrap();
    ws.ok(&["exec", "--continue", "next"]);
    assert_eq!(inbox_names(&ws.session()), ["00000000000000000001-1.bad"]);
    let warned = ws.events().iter().any(|e| {
        e["type"] == "warning" && e["message"].as_str().unwrap().contains("could not be read")
    });
    assert!(warned);
    assert_eq!(users(&ws.conversation()), ["hi", "next"]);
}

/// A fork carries a steered message: a sub-agent forked after it starts from the parent's history
/// with the message in place.
#[test]
fn a_fork_after_a_steer_carries_it() {
    let wire = Wire::OpenAi;
    let ws = WireWs::new(
        wire,
        vec![
            bash(wire, "c1", &sleep_then_wait("go")),
            crate::support::script::call(
                wire,
                "a1",
                "agent",
                serde_json::json!({"task": "check the tabs", "fork": true}),
            ),
            text(wire, "the child saw it"),
            text(wire, "done"),
        ],
    );
    let mut child = ws.spawn(&["exec", "--json", "start"]);
    wait_tool_call(&ws, "c1");
    steer_ok(&ws, "tabs everywhere");
    std::fs::write(ws.root().join("go"), "").unwrap();
    let st = wait_exit(&mut child, Duration::from_secs(120)).expect("tern exec ended");
    assert!(st.success());
    let bodies = ws.bodies();
    assert_eq!(bodies.len(), 4, "parent, parent, child, parent");
    let child_msgs = bodies[2]["messages"].as_array().unwrap();
    let steered: Vec<&Value> = child_msgs
        .iter()
        .filter(|m| m["content"] == "tabs everywhere")
        .collect();
    assert_eq!(steered.len(), 1, "the fork starts with the steered message");
    assert!(
        child_msgs.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .contains("check the tabs")
    );
}

/// A message steered while the model writes its final answer is not left behind: the turn asks
/// the model once more, with the message after that answer.
#[test]
fn a_steer_during_the_final_answer_is_read_before_the_turn_ends() {
    let wire = Wire::OpenAi;
    let ws = WireWs::new(
        wire,
        vec![text(wire, "all done"), text(wire, "then also the tests")],
    );
    let (root, home) = (ws.root().to_path_buf(), ws.ws.home());
    let steered = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let once = steered.clone();
    // On the turn's first request, before the answer is sent: `tern steer` from another process.
    ws.fake.set_responder(move |_| {
        if !once.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let mut cmd = crate::support::cli::tern_clean(&home);
            cmd.current_dir(&root).args(["steer", "run the tests too"]);
            let out = crate::support::cli::output(cmd);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        None
    });
    ws.ok(&["exec", "finish up"]);
    assert!(steered.load(std::sync::atomic::Ordering::SeqCst));
    let bodies = ws.bodies();
    assert_eq!(bodies.len(), 2, "one more request for the steered words");
    let msgs = bodies[1]["messages"].as_array().unwrap();
    let n = msgs.len();
    assert_eq!(msgs[n - 2]["content"], "all done");
    assert_eq!(msgs[n - 1]["content"], "run the tests too");
    let conv = ws.conversation();
    let roles: Vec<&str> = conv.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
}

/// A message queued for the next turn lets `tern exec --continue` run without a prompt: the
/// model reads the queued words.
#[test]
fn a_queued_steer_is_enough_to_continue() {
    let wire = Wire::OpenAi;
    let ws = WireWs::new(wire, vec![text(wire, "hello"), text(wire, "on it")]);
    ws.ok(&["exec", "hi"]);
    let out = ws.tern(&["exec", "--continue"]);
    assert_eq!(out.status.code(), Some(2), "nothing to continue yet");
    ws.ok(&["steer", "--queue", "now the docs"]);
    ws.ok(&["exec", "--continue"]);
    assert_eq!(users(&ws.conversation()), ["hi", "now the docs"]);
}

/// Issue 34: a message steered after the last answer (here by a Stop hook, as a person in
/// another pane could while the hooks run) is answered by one more request in `tern exec`,
/// never left waiting in the inbox while the result says completed.
#[test]
fn a_steer_during_a_stop_hook_in_exec_gets_its_answer() {
    let wire = Wire::OpenAi;
    let ws = WireWs::new(
        wire,
        vec![text(wire, "all done"), text(wire, "then also the tests")],
    );
    let dir = ws.ws.home().join(".config/tern");
    std::fs::create_dir_all(&dir).unwrap();
    let steer = format!(
        "[ -e \"$TERN_PROJECT_DIR/steered\" ] || {{ touch \"$TERN_PROJECT_DIR/steered\"; '{}' steer 'run the tests too'; }}",
        crate::support::cli::TERN
    );
    std::fs::write(
        dir.join("hooks.json"),
        serde_json::json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": steer}]}]}})
            .to_string(),
    )
    .unwrap();
    let out = ws.ok(&["exec", "--json", "finish up"]);
    let bodies = ws.bodies();
    assert_eq!(bodies.len(), 2, "one more request for the steered words");
    let msgs = bodies[1]["messages"].as_array().unwrap();
    assert!(
        msgs.iter().any(|m| m["content"] == "run the tests too"),
        "{msgs:?}"
    );
    let last: serde_json::Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap();
    assert_eq!(last["type"], "result");
    assert_eq!(last["text"], "then also the tests");
}
