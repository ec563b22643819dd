//! A REPL sitting idle while another pane rewrites its session (`tern plan confirm`): its next
//! request must be what the files now say (the locked plan in the system prompt, the compacted
//! history), not what it held in memory. And `.tern/current` follows the session a person works in.

use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use crate::support::body::{messages, system_of};
use crate::support::cli::{Ws, ok};
use crate::support::files::{jsonl, read};
use crate::support::procs::{Seen, wait_exit};
use crate::support::{FakeServer, openai_text};

const SUMMARY: &str = "The person said first; I answered one. Nothing else happened yet.";

#[test]
fn idle_repl_picks_up_a_plan_confirmed_from_another_pane() {
    let fake = FakeServer::start(vec![
        openai_text("one"),
        openai_text(SUMMARY),
        openai_text("other"),
        openai_text("two"),
    ]);
    let ws = Ws::new();
    let mut cmd = ws.tern(&fake);
    cmd.args(["chat", "--approval", "auto"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn tern chat");
    let mut stdin = child.stdin.take().unwrap();
    let seen = Seen::start(child.stderr.take().unwrap());

    stdin.write_all(b"first\n").unwrap();
    seen.wait_for("── ");
    let id = ws.current_id();

    // Another pane: a draft and a confirm (which compacts through the model).
    let mut draft = ws.tern(&fake);
    draft.args(["plan", "draft"]);
    ok(draft, "ALPHA plan: step one\n");
    let mut confirm = ws.tern(&fake);
    confirm.args(["plan", "confirm"]);
    ok(confirm, "");
    // Another process starts a session of its own: it becomes the latest...
    let mut other = ws.tern(&fake);
    other.args(["exec", "other"]);
    ok(other, "");
    assert_ne!(ws.current_id(), id);

    stdin.write_all(b"second\n").unwrap();
    seen.wait_for("plan confirmed");
    drop(stdin);
    let status = wait_exit(&mut child, Duration::from_secs(20)).expect("tern chat ended");
    assert!(status.success(), "{}", seen.finish());

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 4, "first, the compaction, other, second");
    let third = reqs[3].json();
    assert!(
        system_of(&third).contains("<locked_plan>\nALPHA plan: step one\n</locked_plan>"),
        "the idle REPL sent its old system prompt"
    );
    let msgs = messages(&reqs[3]);
    let texts: Vec<String> = msgs.iter().map(|m| m["content"].to_string()).collect();
    assert!(
        texts[1].contains(SUMMARY),
        "history not reloaded: {texts:?}"
    );
    assert!(
        !texts.iter().any(|t| t.contains("\"first\"")),
        "the compacted turn was sent again: {texts:?}"
    );
    let session = ws.session_dir(&id);
    let events = jsonl(&session.join("events.jsonl"));
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "warning"
                && e["message"].as_str().unwrap_or("").contains("reloaded")),
        "no reload warning"
    );
    // ...until the REPL's next turn makes its session the current one again.
    assert_eq!(read(&ws.path().join(".tern/current")).trim(), id);
}
