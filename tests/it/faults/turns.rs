//! A continued turn killed between storing its prompt and recording its start (issue 30, item
//! 3): `tern exec --continue` killed at each point from the prompt's append to
//! `conversation.jsonl` up to its `turn_start` in `events.jsonl`. Before the next start, `tern
//! status` and `tern sessions` say the last turn was interrupted (a prompt is stored and not
//! answered); the next start says so (`turn_interrupted`) and answers it.

use super::run::{HANG, Site, points, run};
use crate::support::FakeServer;

#[test]
fn a_prompt_stored_without_its_start_is_an_interrupted_turn() {
    let fake = FakeServer::strict(vec![]);
    let base = fake.openai_base();
    let site = Site::new();
    let r = run(site.tern(&base, &["exec", "--json", "first"]), None, HANG);
    assert_eq!(r.code, Some(0), "{}", r.summary());

    // A dry run on a copy: the points of a continued turn.
    let dry = site.copy();
    let log = dry.log("dry");
    let mut cmd = dry.tern(&base, &["exec", "--json", "--continue", "second"]);
    cmd.env("TERN_FAULT_LOG", &log);
    let r = run(cmd, None, HANG);
    assert_eq!(r.code, Some(0), "{}", r.summary());
    let pts = points(&log, &dry.root());
    let stored = pts
        .iter()
        .position(|p| p.kind == "appended" && p.path.ends_with("/conversation.jsonl"))
        .expect("the prompt is appended to the conversation");
    let started = stored
        + pts[stored..]
            .iter()
            .position(|p| p.kind == "appended" && p.path.ends_with("/events.jsonl"))
            .expect("turn_start follows");
    // Points are 1-based: from the prompt's append up to the start's (not included: once
    // appended, the turn is on record as started).
    assert!(started > stored, "{pts:?}");
    for k in stored + 1..=started {
        let s = site.copy();
        let mut cmd = s.tern(&base, &["exec", "--json", "--continue", "second"]);
        cmd.env("TERN_FAULT_AT", k.to_string());
        let r = run(cmd, None, HANG);
        assert!(r.killed(), "point {k} ({}): {}", pts[k - 1], r.summary());

        let status = run(s.tern(&base, &["status"]), None, HANG);
        assert_eq!(status.code, Some(0), "{}", status.summary());
        assert!(
            status.stdout.contains("interrupted"),
            "point {k} ({}): tern status: {}",
            pts[k - 1],
            status.stdout
        );
        let list = run(s.tern(&base, &["sessions"]), None, HANG);
        assert!(
            list.stdout.contains("interrupted"),
            "point {k}: tern sessions: {}",
            list.stdout
        );
        let resumed = run(
            s.tern(&base, &["exec", "--json", "--continue", "third"]),
            None,
            HANG,
        );
        assert_eq!(resumed.code, Some(0), "{}", resumed.summary());
        assert!(
            resumed.stdout.contains("\"turn_interrupted\""),
            "point {k}: the resume says the turn was interrupted: {}",
            resumed.stdout
        );
    }
}
