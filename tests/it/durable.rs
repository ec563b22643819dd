//! Durable turns: a `tern exec` killed with SIGKILL in the middle of a tool call leaves a session
//! that a later `tern exec --continue` marks interrupted, repairs (the dangling tool call gets an
//! error result) and continues against a strict provider; a torn last line of conversation.jsonl
//! is dropped and reported; `tern sessions` lists status, turns, tokens and last activity.

use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::support::body::{messages, of_type, roles};
use crate::support::cli::{Ws, ok_no_stdin, run_no_stdin};
use crate::support::files::{jsonl, read, read_json};
use crate::support::procs::{eventually, pgid_of, pids_running};
use crate::support::{FakeServer, Wire, openai_text, openai_tool_calls};
use serde_json::{Value, json};

// ---------------------------------------------------------------- helpers

fn events_of(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not an event {l:?}: {e}")))
        .collect()
}

fn meta(dir: &Path) -> Value {
    read_json(&dir.join("meta.json"))
}

/// Waits up to 20 s (a hang, not a speed check) until `done` holds.
fn wait_until(what: &str, done: impl FnMut() -> bool) {
    assert!(
        eventually(Duration::from_secs(20), done),
        "timed out: {what}"
    );
}

/// The `tern sessions` row of `id`: (mark, status, turns, tokens, last activity, title).
fn session_row(listing: &str, id: &str) -> (String, String, u64, u64, String, String) {
    let line = listing
        .lines()
        .find(|l| l.get(2..).is_some_and(|r| r.starts_with(id)))
        .unwrap_or_else(|| panic!("{id} not listed:\n{listing}"));
    let mark = line[..1].to_string();
    let mut f = line[2..].split_whitespace();
    let _id = f.next();
    let status = f.next().unwrap_or("").to_string();
    let turns = f.next().and_then(|t| t.parse().ok()).expect("turns");
    let tokens = f.next().and_then(|t| t.parse().ok()).expect("tokens");
    let _cost = f.next();
    let when = f.next().unwrap_or("").to_string();
    let title = f.collect::<Vec<_>>().join(" ");
    (mark, status, turns, tokens, when, title)
}

// ---------------------------------------------------------------- tests

/// SIGKILL mid-tool: meta.json still says running with the dead pid; `tern exec --continue`
/// against a strict server writes `turn_interrupted` and `repair`, stores an error result for the
/// dangling call, is accepted, and completes.
#[test]
fn durable_sigkill_mid_tool_then_continue_repairs_and_completes() {
    let sleep = ["sleep", "62.41"];
    let args = json!({"command": sleep.join(" ")}).to_string();
    let first = FakeServer::start(vec![
        openai_tool_calls(&[
            ("call_slow", "bash", args.as_str()),
            ("call_next", "bash", r#"{"command":"touch never.txt"}"#),
        ])
        .auto_usage(),
    ]);
    let ws = Ws::new();
    let mut cmd = ws.tern(&first);
    cmd.args(["exec", "run the slow thing"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().expect("spawn tern exec");
    let dead_pid = child.id();
    wait_until("the bash call started", || !pids_running(&sleep).is_empty());
    let id = ws.current_id();
    let dir = ws.session_dir(&id);
    let m = meta(&dir);
    assert_eq!(m["status"], "running");
    assert_eq!(m["pid"], dead_pid);

    child.kill().expect("SIGKILL tern");
    child.wait().expect("reap tern");
    // tern's death does not reach the tool's own process group (setsid): end it here.
    for pid in pids_running(&sleep) {
        if let Some(pgid) = pgid_of(pid) {
            assert_ne!(pgid, 0);
            // SAFETY: kill(2) on the process group of a sleep this test started through tern.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
    wait_until("the sleep is gone", || pids_running(&sleep).is_empty());

    // The session still says running, with the dead pid.
    let m = meta(&dir);
    assert_eq!(m["status"], "running", "{m}");
    assert_eq!(m["pid"], dead_pid, "{m}");
    let conv = jsonl(&dir.join("conversation.jsonl"));
    assert_eq!(
        conv.len(),
        2,
        "prompt and the assistant's call, no result: {conv:?}"
    );
    assert_eq!(conv[1]["tool_calls"][0]["id"], "call_slow");
    // `tern sessions` already sees that nobody runs the turn.
    let mut cmd = ws.tern(&first);
    cmd.arg("sessions");
    let listing = ok_no_stdin(cmd).stdout;
    assert_eq!(session_row(&listing, &id).1, "interrupted?", "{listing}");

    let strict = FakeServer::strict(vec![openai_text("Resumed and finished.").auto_usage()]);
    let mut cmd = ws.tern(&strict);
    cmd.args(["exec", "--json", "--continue", "go on"]);
    let out = ok_no_stdin(cmd);
    let events = events_of(&out.stdout);
    let interrupted = of_type(&events, "turn_interrupted");
    assert_eq!(interrupted.len(), 1, "{out:?}");
    assert_eq!(interrupted[0]["pid"], dead_pid);
    let repair = of_type(&events, "repair");
    assert_eq!(repair.len(), 1, "{out:?}");
    assert_eq!(
        repair[0]["answered_calls"],
        json!(["call_slow", "call_next"])
    );
    assert_eq!(repair[0]["dropped_lines"], json!([]));
    let pos = |k: &str| events.iter().position(|e| e["type"] == k).unwrap();
    assert!(pos("turn_interrupted") < pos("repair") && pos("repair") < pos("turn_start"));
    let result = events.last().unwrap();
    assert_eq!(result["type"], "result");
    assert_eq!(result["status"], "completed", "{result}");
    assert_eq!(result["text"], "Resumed and finished.");

    // The events file says the same.
    let stored = jsonl(&dir.join("events.jsonl"));
    assert_eq!(of_type(&stored, "turn_interrupted").len(), 1);
    assert_eq!(of_type(&stored, "repair").len(), 1);

    // The history now answers the dangling call, before the new prompt.
    let conv = jsonl(&dir.join("conversation.jsonl"));
    assert_eq!(
        roles(&conv),
        ["user", "assistant", "tool", "tool", "user", "assistant"]
    );
    for (i, call) in [(2, "call_slow"), (3, "call_next")] {
        assert_eq!(conv[i]["tool_call_id"], call);
        assert_eq!(conv[i]["is_error"], true);
        assert!(
            conv[i]["content"]
                .as_str()
                .unwrap()
                .contains("no result was recorded"),
            "{}",
            conv[i]
        );
    }
    assert_eq!(conv[4]["content"], "go on");
    assert!(!ws.path().join("never.txt").exists());

    // The strict server accepted the one request it got.
    let reqs = strict.requests();
    assert_eq!(reqs.len(), 1);
    crate::support::validate(Wire::OpenAi, &reqs[0].json()).expect("strict server refuses it");

    let m = meta(&dir);
    assert_eq!(m["status"], "completed", "{m}");
    assert!(m.get("pid").is_none(), "{m}");
    let mut cmd = ws.tern(&strict);
    cmd.arg("sessions");
    let listing = ok_no_stdin(cmd).stdout;
    let row = session_row(&listing, &id);
    assert_eq!(row.1, "completed", "{listing}");
    assert_eq!(row.2, m["turns"].as_u64().unwrap());
    // The killed process never reached its turn end, so only the continued turn's request is
    // counted in meta.json (its usage event is in events.jsonl all the same).
    assert!(row.2 >= 1, "{listing}");
}

/// A torn last line (a crash mid-append) is dropped, reported (event in `--json`, a line on
/// stderr in human mode), and the continued request is accepted by a strict server.
#[test]
fn durable_torn_last_line_is_dropped_and_reported() {
    let fake = FakeServer::strict(vec![
        openai_text("Hello."),
        openai_text("Next, done."),
        openai_text("And again."),
    ]);
    let ws = Ws::new();
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "hello"]);
    ok_no_stdin(cmd);
    let dir = ws.session_dir(&ws.current_id());
    let conv_path = dir.join("conversation.jsonl");
    let tear = |text: &str| {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&conv_path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    };
    tear(r#"{"role":"user","content":"half a li"#);

    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "--json", "--continue", "next"]);
    let out = ok_no_stdin(cmd);
    let events = events_of(&out.stdout);
    let repair = of_type(&events, "repair");
    assert_eq!(repair.len(), 1, "{out:?}");
    assert_eq!(repair[0]["dropped_lines"], json!([3]));
    assert_eq!(repair[0]["torn_tail"], true);
    assert_eq!(repair[0]["answered_calls"], json!([]));
    let text = read(&conv_path);
    assert!(!text.contains("half a li"), "{text}");
    assert!(text.ends_with('\n'));
    let conv = jsonl(&conv_path);
    let contents: Vec<&str> = conv
        .iter()
        .map(|m| {
            m["content"]
                .as_str()
                .or_else(|| m["text"].as_str())
                .unwrap()
        })
        .collect();
    assert_eq!(contents, ["hello", "Hello.", "next", "Next, done."]);
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    let msgs = messages(&reqs[1]);
    assert_eq!(msgs.len(), 4, "system, hello, Hello., next: {msgs:?}");

    // Human mode says so on stderr.
    tear(r#"{"role":"assistant","te"#);
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "--continue", "again"]);
    let out = ok_no_stdin(cmd);
    assert!(
        out.stderr.contains(
            "repaired the history: 1 dropped lines (a torn last line: a crash mid-write),"
        ),
        "{out:?}"
    );
    assert!(out.stdout.contains("And again."), "{out:?}");
    assert_eq!(jsonl(&conv_path).len(), 6);
}

/// A complete last line (newline included) that is not JSON, in `conversation.jsonl` and in
/// `events.jsonl`, was edited or damaged: it is repaired away as a torn line is (the file archived
/// first), but reported as not JSON, never as a torn write. A last line without its newline is.
#[test]
fn a_complete_line_that_is_not_json_is_not_called_torn() {
    let fake = FakeServer::strict(vec![
        openai_text("Hello."),
        openai_text("Next."),
        openai_text("Again."),
    ]);
    let ws = Ws::new();
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "hello"]);
    ok_no_stdin(cmd);
    let dir = ws.session_dir(&ws.current_id());
    let append = |file: &str, text: &str| {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join(file))
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    };
    let archives = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir.join("archive"))
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    };

    // Complete lines: edited or damaged.
    append("conversation.jsonl", "garbage, not JSON\n");
    append("events.jsonl", "more garbage\n");
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "--continue", "next"]);
    let out = ok_no_stdin(cmd);
    assert!(
        out.stderr.contains(
            "repaired the history: 1 dropped lines (a line that is not a JSON message: edited or damaged),"
        ),
        "{out:?}"
    );
    assert!(
        out.stderr.contains(
            "events.jsonl had a line that is not a JSON event (edited or damaged): repaired; the file as it was is archive/events-"
        ),
        "{out:?}"
    );
    assert!(!out.stderr.contains("torn"), "{out:?}");
    // The repair is as before: both files archived as they were, the bad lines gone.
    let names = archives();
    assert!(
        names.iter().any(|n| n.starts_with("events-"))
            && names.iter().any(|n| n.starts_with("conversation-")),
        "{names:?}"
    );
    let events_text = read(&dir.join("events.jsonl"));
    assert!(!events_text.contains("more garbage"));
    assert!(!read(&dir.join("conversation.jsonl")).contains("garbage"));
    let events = jsonl(&dir.join("events.jsonl"));
    let repair = of_type(&events, "repair");
    assert_eq!(repair.len(), 1, "{events:?}");
    assert!(repair[0].get("torn_tail").is_none(), "{}", repair[0]);

    // Lines cut before their newline: torn writes.
    append("conversation.jsonl", r#"{"role":"user","cont"#);
    append("events.jsonl", r#"{"type":"warn"#);
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "--continue", "again"]);
    let out = ok_no_stdin(cmd);
    assert!(
        out.stderr.contains(
            "repaired the history: 1 dropped lines (a torn last line: a crash mid-write),"
        ),
        "{out:?}"
    );
    assert!(
        out.stderr.contains(
            "events.jsonl ended in a torn line (a crash mid-write): repaired; the file as it was is archive/events-"
        ),
        "{out:?}"
    );
    assert!(!out.stderr.contains("edited or damaged"), "{out:?}");
}

/// `tern sessions`: every session with its status, turns, tokens (input + output), last activity
/// and title, newest first, the current one marked.
#[test]
fn sessions_lists_status_turns_tokens_and_last_activity() {
    let fake = FakeServer::start(vec![
        openai_text("First answer.").auto_usage(),
        openai_tool_calls(&[("c1", "bash", r#"{"command":"true"}"#)]).auto_usage(),
    ]);
    let ws = Ws::new();
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "the first session"]);
    ok_no_stdin(cmd);
    let first = ws.current_id();
    // Session ids are per second; make the second one sort after the first.
    std::thread::sleep(Duration::from_millis(1100));
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "--max-turns", "1", "the second session"]);
    let out = run_no_stdin(cmd);
    assert_eq!(out.code, Some(3), "{out:?}");
    let second = ws.current_id();
    assert_ne!(first, second);

    let mut cmd = ws.tern(&fake);
    cmd.arg("sessions");
    let listing = ok_no_stdin(cmd).stdout;
    let header = listing.lines().next().unwrap();
    for col in [
        "id",
        "status",
        "requests",
        "tokens",
        "last activity",
        "title",
    ] {
        assert!(header.contains(col), "{header}");
    }
    let pos = |id: &str| listing.find(id).unwrap();
    assert!(pos(&second) < pos(&first), "newest first:\n{listing}");
    for (id, status, title, mark) in [
        (&first, "completed", "the first session", " "),
        (&second, "max_turns", "the second session", "*"),
    ] {
        let m = meta(&ws.session_dir(id));
        let row = session_row(&listing, id);
        assert_eq!(row.0, mark, "{listing}");
        assert_eq!(row.1, status, "{listing}");
        assert_eq!(row.2, m["turns"].as_u64().unwrap());
        assert_eq!(row.2, 1);
        let tokens = m["usage"]["input_tokens"].as_u64().unwrap()
            + m["usage"]["output_tokens"].as_u64().unwrap();
        assert!(tokens > 0, "{m}");
        assert_eq!(row.3, tokens, "{listing}");
        assert_eq!(row.4, m["updated_at"].as_str().unwrap());
        assert_eq!(row.5, title);
    }
}
