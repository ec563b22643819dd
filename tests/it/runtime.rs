//! Turn-loop properties, in-process: a runtime opened through the launcher against the fake
//! provider (support::harness), events collected as typed values. The loop guard, compaction,
//! repair and prefix stability, without starting a process.

use serde_json::json;
use tern::event::{BoundaryKind, CompactTrigger, Event};
use tern::message::Message;
use tern::runtime::Failure;

use crate::support::Wire;
use crate::support::harness::{Collect, InProc, fast_config};
use crate::support::script::{bash, text};

/// The same call with the same result three times: the next request asks for a final answer
/// with tools off (`tool_choice` none), announced as a `tools_off` boundary, and whatever calls
/// that answer carries are not run.
#[test]
fn loop_guard_asks_once_for_a_final_answer_with_tools_off() {
    let script = vec![
        bash(Wire::OpenAi, "c1", "echo same"),
        bash(Wire::OpenAi, "c2", "echo same"),
        bash(Wire::OpenAi, "c3", "echo same"),
        text(Wire::OpenAi, "It printed same."),
    ];
    let h = InProc::new(Wire::OpenAi, script, fast_config());
    let mut ui = Collect::default();
    let mut rt = h.open(&mut ui);
    let out = rt.run_turn("print same", &mut ui).expect("the turn ends");
    assert_eq!(out, "It printed same.");
    let boundaries = ui.of("boundary");
    assert!(
        matches!(
            boundaries.as_slice(),
            [Event::Boundary {
                kind: BoundaryKind::ToolsOff,
                ..
            }]
        ),
        "{boundaries:?}"
    );
    let reqs = h.fake.requests();
    assert_eq!(reqs.len(), 4);
    assert_eq!(reqs[3].json()["tool_choice"], "none");
    for r in &reqs[..3] {
        assert!(r.json().get("tool_choice").is_none());
    }
    // The tools stay in the body, so the prefix keeps its bytes up to that field.
    assert_eq!(reqs[3].json()["tools"], reqs[2].json()["tools"]);
}

/// A request past 80 % of the context window compacts first: the history then opens with the
/// summary and the new prompt is kept word for word.
#[test]
fn auto_compaction_before_a_request_over_the_threshold() {
    let mut cfg = fast_config();
    cfg.context_window = 1024;
    let script = vec![
        text(Wire::OpenAi, "First answer, long enough to matter."),
        text(
            Wire::OpenAi,
            "Summary: the person asked twice; the first answer was given.",
        ),
        text(Wire::OpenAi, "Second answer."),
    ];
    let h = InProc::new(Wire::OpenAi, script, cfg);
    let mut ui = Collect::default();
    let mut rt = h.open(&mut ui);
    rt.run_turn("first question", &mut ui).expect("turn 1");
    rt.run_turn("second question", &mut ui).expect("turn 2");
    let compactions = ui.of("compaction");
    assert!(
        matches!(
            compactions.as_slice(),
            [Event::Compaction {
                trigger: CompactTrigger::Auto,
                archived_messages: 2,
                ..
            }]
        ),
        "{compactions:?}"
    );
    let h0 = rt.history();
    assert!(
        matches!(&h0[0], Message::User { content, .. } if content.contains("Summary: the person asked twice")),
        "{h0:?}"
    );
    // The person's first question, recalled verbatim after the summary (issue 41), then the
    // new prompt kept as it was.
    assert!(
        matches!(&h0[1], Message::User { content, by: Some(tern::message::Written::Recalled), .. } if content.ends_with("first question")),
        "{h0:?}"
    );
    assert!(matches!(&h0[2], Message::User { content, .. } if content == "second question"));
    assert!(matches!(&h0[3], Message::Assistant { text, .. } if text == "Second answer."));
}

/// A history left with a dangling tool call (a process killed mid-tool) is repaired when the
/// session is reopened, before any request: the call gets an error result, the file as it was
/// goes to archive/, and the next request is accepted by a strict provider.
#[test]
fn a_dangling_call_is_repaired_on_reopen_before_any_request() {
    let h = InProc::new(Wire::OpenAi, vec![], fast_config());
    let mut ui = Collect::default();
    let rt = h.open(&mut ui);
    let call = tern::message::ToolCall {
        id: "c1".into(),
        name: "bash".into(),
        arguments: json!({"command": "sleep 60"}),
    };
    rt.session()
        .append_messages(&[
            Message::user("run it"),
            Message::Assistant {
                reasoning: None,
                text: String::new(),
                tool_calls: vec![call],
            },
        ])
        .expect("append");
    drop(rt);

    h.fake.set_strict(true);
    h.fake.push(text(Wire::OpenAi, "done"));
    let mut ui = Collect::default();
    let mut rt = h.resume(&mut ui);
    assert!(
        matches!(ui.of("repair").as_slice(), [Event::Repair { answered_calls, archive, .. }]
            if answered_calls == &["c1".to_string()] && archive.starts_with("archive/")),
        "{:?}",
        ui.kinds()
    );
    assert!(matches!(
        rt.history().last(),
        Some(Message::Tool { is_error: true, .. })
    ));
    rt.run_turn("", &mut ui)
        .expect("a strict provider accepts it");
}

/// Between boundaries each request extends the previous one: the stored prefix (no tail) is a
/// byte prefix of every later request until a boundary, and the tools and system bytes never
/// change.
#[test]
fn the_stored_prefix_is_a_byte_prefix_of_the_next_requests() {
    let script = vec![
        bash(Wire::OpenAi, "c1", "echo one"),
        text(Wire::OpenAi, "one"),
        bash(Wire::OpenAi, "c2", "echo two"),
        text(Wire::OpenAi, "two"),
    ];
    let h = InProc::new(Wire::OpenAi, script, fast_config());
    let mut ui = Collect::default();
    let mut rt = h.open(&mut ui);
    rt.run_turn("first", &mut ui).expect("turn 1");
    let stored = rt.stored_body();
    // Without the brackets that close the messages array and the body.
    let open = &stored[..stored.len() - 2];
    rt.run_turn("second", &mut ui).expect("turn 2");
    let reqs = h.fake.requests();
    for r in &reqs[2..] {
        assert!(
            r.body.starts_with(open),
            "a request after the first turn does not extend its stored prefix"
        );
    }
    let first = reqs[0].json();
    for r in &reqs {
        let b = r.json();
        assert_eq!(b["tools"], first["tools"]);
        assert_eq!(b["messages"][0], first["messages"][0], "the system message");
    }
}

/// The cancel token stops a turn in its first request (the person's Ctrl-C through `main`'s
/// handler sets the same token): the outcome is an interrupt, and the next turn runs.
#[test]
fn a_cancelled_turn_ends_interrupted_and_the_next_one_runs() {
    let script = vec![
        text(Wire::OpenAi, "late").delay_before(std::time::Duration::from_secs(20)),
        text(Wire::OpenAi, "fine"),
    ];
    let h = InProc::new(Wire::OpenAi, script, fast_config());
    let mut ui = Collect::default();
    let mut rt = h.open(&mut ui);
    let cancel = rt.cancel_token().clone();
    let fake = &h.fake;
    std::thread::scope(|s| {
        s.spawn(|| {
            // While the request waits on the server: after the turn began, not at a fixed time.
            crate::support::procs::eventually(std::time::Duration::from_secs(20), || {
                !fake.requests().is_empty()
            });
            cancel.cancel();
        });
        let started = std::time::Instant::now();
        assert_eq!(rt.run_turn("slow", &mut ui), Err(Failure::Interrupted));
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    });
    rt.cancel_token().reset();
    assert_eq!(rt.run_turn("again", &mut ui).as_deref(), Ok("fine"));
}

/// A fork is a child session whose `system.txt` holds the parent's exact bytes and whose history
/// starts as the parent's: its first request extends the parent's stored prefix byte for byte.
/// It lives under the parent's folder, never becomes `.tern/current`, and its events name the
/// parent.
#[test]
fn a_fork_starts_from_the_parents_exact_prefix() {
    let script = vec![
        text(Wire::OpenAi, "parent answer"),
        text(Wire::OpenAi, "child answer"),
    ];
    let h = InProc::new(Wire::OpenAi, script, fast_config());
    let mut ui = Collect::default();
    let mut parent = h.open(&mut ui);
    parent
        .run_turn("parent task", &mut ui)
        .expect("parent turn");
    let stored = parent.stored_body();
    let mut history = parent.prefix().fork(parent.history().len()).history;
    history.push(Message::user("child task"));
    let spec = tern::runtime::ChildSpec {
        title: "child".into(),
        system: parent.prefix().system.clone(),
        history,
        cfg: fast_config(),
        route: None,
        parent_call: "c0".into(),
        member: None,
        fork: true,
    };
    let current_before = std::fs::read_to_string(h.dir.path().join(".tern/current")).ok();
    let mut cui = Collect::default();
    let mut child = h.launcher.child(&parent, spec, &mut cui).expect("child");
    assert!(
        child
            .session()
            .dir
            .starts_with(parent.session().dir.join("agents"))
    );
    assert_eq!(
        std::fs::read(child.session().path("system.txt")).expect("system.txt"),
        std::fs::read(parent.session().path("system.txt")).expect("parent system.txt"),
    );
    assert_eq!(child.run_turn("", &mut cui).as_deref(), Ok("child answer"));
    let reqs = h.fake.requests();
    assert!(reqs[1].body.starts_with(&stored[..stored.len() - 2]));
    assert!(
        cui.events
            .iter()
            .all(|e| e.parent.as_deref() == Some(parent.session().id.as_str()))
    );
    assert_eq!(
        std::fs::read_to_string(h.dir.path().join(".tern/current")).ok(),
        current_before,
        "a child never becomes current"
    );
    // Cancelling the parent cancels the child, not the reverse.
    child.cancel_token().cancel();
    assert!(!parent.cancelled());
    child.cancel_token().reset();
    parent.cancel_token().cancel();
    assert!(child.cancelled());
}
