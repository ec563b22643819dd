//! A turn loop that does not let a weak model run away (issue: lean requests and small models),
//! in-process against the fake provider: each defect a small real model showed, as a test.

use serde_json::json;
use tern::event::{BoundaryKind, Event};
use tern::runtime::Failure;

use crate::support::Wire;
use crate::support::harness::{Collect, InProc, fast_config};
use crate::support::script::{call, text, todo, work};

/// Every request carries an output cap (OpenAI-compatible bodies had none: one answer ran to
/// 6,859 tokens), and a set temperature.
#[test]
fn every_request_carries_the_output_cap_and_the_temperature() {
    let mut cfg = fast_config();
    cfg.max_output_tokens = 1234;
    cfg.temperature = Some(0.2);
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let h = InProc::new(wire, vec![text(wire, "hi")], cfg.clone());
        let mut ui = Collect::default();
        let mut rt = h.open(&mut ui);
        rt.run_turn("hello", &mut ui).expect("turn");
        let b = h.fake.requests()[0].json();
        assert_eq!(b["max_tokens"], 1234, "{wire:?}: {b}");
        assert_eq!(b["temperature"], 0.2, "{wire:?}");
    }
}

/// The same `work_update` call again and again: each receipt names a new state, so call and
/// result never repeat, but the call does; the loop guard now ends it in the tools-off request.
#[test]
fn the_loop_guard_sees_repeated_receipt_calls() {
    let w = Wire::OpenAi;
    let same = || work(w, "w", vec![todo("1", "count the lines", "completed")]);
    let h = InProc::new(
        w,
        vec![same(), same(), same(), text(w, "There are 37 lines.")],
        fast_config(),
    );
    let mut ui = Collect::default();
    let mut rt = h.open(&mut ui);
    assert_eq!(
        rt.run_turn("count", &mut ui).as_deref(),
        Ok("There are 37 lines.")
    );
    assert!(
        ui.of("boundary").iter().any(|e| matches!(
            e,
            Event::Boundary {
                kind: BoundaryKind::ToolsOff,
                ..
            }
        )),
        "{:?}",
        ui.kinds()
    );
    assert_eq!(h.fake.requests().len(), 4);
}

/// The same bash command again and again with another `timeout_s` each time (seen with the
/// 0.5B model following the README: 50 `echo hello` with 600, 100, 200… to the turn limit): the
/// timeout asks for no other work, so the guard sees the loop.
#[test]
fn the_loop_guard_sees_a_command_repeated_with_other_timeouts() {
    let w = Wire::OpenAi;
    let with = |id: &str, t: u64| {
        call(
            w,
            id,
            "bash",
            json!({"command": "echo hello", "timeout_s": t}),
        )
    };
    let h = InProc::new(
        w,
        vec![
            with("a", 600),
            with("b", 100),
            with("c", 200),
            text(w, "It says hello."),
        ],
        fast_config(),
    );
    let mut ui = Collect::default();
    let mut rt = h.open(&mut ui);
    assert_eq!(
        rt.run_turn("say hello", &mut ui).as_deref(),
        Ok("It says hello.")
    );
    assert_eq!(h.fake.requests().len(), 4);
}

/// The same `agent` call again and again (seen with the 0.5B model: 12 identical calls with an
/// unknown member, to the turn limit): each result names a new child, or the same error, and
/// the guard judges by the call, as for receipts. A failing one and a succeeding one.
#[test]
fn the_loop_guard_sees_repeated_agent_calls() {
    let w = Wire::OpenAi;
    let failing = || {
        call(
            w,
            "a",
            "agent",
            json!({"task": "config.json", "member": "agent"}),
        )
    };
    let fine = || call(w, "a", "agent", json!({"task": "look at config.json"}));
    for (script, requests) in [
        (
            vec![failing(), failing(), failing(), text(w, "I could not.")],
            4,
        ),
        (
            vec![
                fine(),
                text(w, "child 1"),
                fine(),
                text(w, "child 2"),
                fine(),
                text(w, "child 3"),
                text(w, "I could not."),
            ],
            7,
        ),
    ] {
        let h = InProc::new(w, script, fast_config());
        let mut ui = Collect::default();
        let mut rt = h.open(&mut ui);
        assert_eq!(
            rt.run_turn("read the port", &mut ui).as_deref(),
            Ok("I could not.")
        );
        assert!(
            ui.of("boundary").iter().any(|e| matches!(
                e,
                Event::Boundary {
                    kind: BoundaryKind::ToolsOff,
                    ..
                }
            )),
            "{:?}",
            ui.kinds()
        );
        assert_eq!(h.fake.requests().len(), requests);
    }
}

/// PlanConfirm's compaction asks for text only (`tool_choice` none), keeping the tools in the
/// body; an answer made of calls is not a summary: asked again, the confirm works.
#[test]
fn the_summary_request_asks_for_text_only_and_calls_are_not_a_summary() {
    let w = Wire::OpenAi;
    let h = InProc::new(
        w,
        vec![
            call(w, "d", "plan_draft", json!({"content": "1. do it"})),
            call(w, "c", "plan_confirm", json!({})),
            // The summary request: first answered with a call, then with a summary.
            call(w, "x", "plan_draft", json!({"content": "again"})),
            text(
                w,
                "The person asked for a plan; it was drafted and is being confirmed.",
            ),
            text(w, "Confirmed."),
        ],
        fast_config(),
    );
    let mut ui = Collect::default();
    let mut rt = h.open(&mut ui);
    rt.run_turn("plan it", &mut ui).expect("turn");
    let reqs = h.fake.requests();
    let summary_reqs: Vec<_> = reqs
        .iter()
        .filter(|r| r.json()["tool_choice"] == "none")
        .collect();
    assert_eq!(summary_reqs.len(), 2, "both summary attempts are text-only");
    for r in &summary_reqs {
        assert!(r.json()["tools"].as_array().is_some_and(|t| !t.is_empty()));
    }
    assert!(
        ui.of("plan_state")
            .iter()
            .any(|e| matches!(e, Event::PlanState { trigger, .. } if *trigger == tern::domain::plan::Trigger::PlanConfirm)),
        "the confirm went through: {:?}",
        ui.kinds()
    );
}

/// An answer that is a call tern did not run (an unknown tool written as text) is not a final
/// answer: the model is told and asked once more; a second one ends the turn as failed.
#[test]
fn an_unrun_call_is_never_a_completed_turn() {
    let w = Wire::OpenAi;
    let fake_call = r#"{"name": "write_file", "arguments": {"path": "a.txt"}}"#;
    let h = InProc::new(
        w,
        vec![text(w, fake_call), text(w, "I wrote it in words instead.")],
        fast_config(),
    );
    let mut ui = Collect::default();
    let mut rt = h.open(&mut ui);
    assert_eq!(
        rt.run_turn("write a.txt", &mut ui).as_deref(),
        Ok("I wrote it in words instead.")
    );
    let second = h.fake.requests()[1].body_str();
    assert!(
        second.contains("did not run"),
        "the model was told: {second}"
    );

    let h = InProc::new(
        w,
        vec![text(w, fake_call), text(w, fake_call)],
        fast_config(),
    );
    let mut ui = Collect::default();
    let mut rt = h.open(&mut ui);
    assert!(matches!(
        rt.run_turn("write a.txt", &mut ui),
        Err(Failure::Failed(_))
    ));
}

/// The tools-off final answer after a loop, written as a call (the model's `exit 0` in a
/// ```json block), ends failed, not completed.
#[test]
fn a_call_as_the_final_answer_after_a_loop_fails() {
    let w = Wire::OpenAi;
    let same = || crate::support::script::bash(w, "b", "echo hi");
    let h = InProc::new(
        w,
        vec![
            same(),
            same(),
            same(),
            text(
                w,
                "```json\n{\"name\": \"bash\", \"arguments\": {\"command\": \"exit 0\"}}\n```",
            ),
        ],
        fast_config(),
    );
    let mut ui = Collect::default();
    let mut rt = h.open(&mut ui);
    assert!(matches!(
        rt.run_turn("say hi", &mut ui),
        Err(Failure::Failed(_))
    ));
}

/// One answer that keeps repeating the same call is stopped mid-stream: three copies run, not
/// a hundred.
#[test]
fn a_runaway_answer_runs_three_copies_at_most() {
    let w = Wire::OpenAi;
    let calls: Vec<(String, String, serde_json::Value)> = (0..40)
        .map(|i| {
            (
                format!("r{i}"),
                "bash".to_string(),
                json!({"command": "echo again"}),
            )
        })
        .collect();
    let borrowed: Vec<(&str, &str, serde_json::Value)> = calls
        .iter()
        .map(|(a, b, c)| (a.as_str(), b.as_str(), c.clone()))
        .collect();
    let h = InProc::new(
        w,
        vec![crate::support::script::calls(w, &borrowed), text(w, "done")],
        fast_config(),
    );
    let mut ui = Collect::default();
    let mut rt = h.open(&mut ui);
    rt.run_turn("go", &mut ui).expect("turn");
    assert_eq!(ui.of("tool_result").len(), 3, "{:?}", ui.kinds());
}

/// A text answer that runs away (one line repeated for thousands of bytes) is cut, and says
/// so: the stored and returned answer ends with the note, and a warning is shown (a new user
/// found it cut silently, with exit 0).
#[test]
fn a_runaway_text_answer_is_cut_and_says_so() {
    let w = Wire::OpenAi;
    let long = format!(
        "Here is the table:\n{}END OF ANSWER",
        "| a | b |\n".repeat(400)
    );
    let h = InProc::new(w, vec![text(w, &long)], fast_config());
    let mut ui = Collect::default();
    let mut rt = h.open(&mut ui);
    let answer = rt.run_turn("make a table", &mut ui).expect("turn");
    assert!(
        answer.ends_with(tern::runtime::RUNAWAY_NOTE) && !answer.contains("END OF ANSWER"),
        "{answer}"
    );
    assert!(answer.len() < long.len());
    assert!(
        ui.of("warning").iter().any(|e| matches!(
            e,
            Event::Warning { message } if message.contains("repeating itself")
        )),
        "{:?}",
        ui.kinds()
    );
    let stored = rt.history().last().cloned();
    assert!(
        matches!(&stored, Some(tern::message::Message::Assistant { text, .. }) if text == &answer),
        "{stored:?}"
    );
}

/// The usage of a runaway answer is recorded (issue 18 item 3): tern dropped the stream
/// before the usage chunk at its end, so the figures are estimated from the bytes sent and
/// received, marked `estimated`, and counted in the totals and `meta.json` like any other
/// (before, the request counted 0 tokens).
#[test]
fn a_runaway_answer_still_records_its_usage_marked_estimated() {
    let w = Wire::OpenAi;
    let long = format!("Here:\n{}END", "| a | b |\n".repeat(400));
    let h = InProc::new(w, vec![text(w, &long)], fast_config());
    let mut ui = Collect::default();
    let mut rt = h.open(&mut ui);
    rt.run_turn("make a table", &mut ui).expect("turn");
    let usage = ui.of("usage");
    assert_eq!(usage.len(), 1);
    let Event::Usage {
        input_tokens,
        output_tokens,
        request_bytes,
        estimated,
        ..
    } = usage[0].clone()
    else {
        unreachable!()
    };
    assert!(estimated, "{:?}", usage[0]);
    assert_eq!(
        input_tokens,
        request_bytes.div_ceil(4),
        "1/4 token a byte before any report"
    );
    assert!(output_tokens > 100, "{output_tokens}");
    assert_eq!(rt.totals().usage.output_tokens, output_tokens);
    let meta = rt.session().read_meta().expect("meta");
    assert_eq!((meta.turns, meta.usage.output_tokens), (1, output_tokens));
    // `tern stats` marks the estimated row.
    let reqs = tern::stats::requests(rt.session()).expect("stats");
    assert!(reqs[0].estimated);
    let table = tern::stats::render(&rt.session().id, &reqs);
    assert!(
        table.contains(" turn* ") && table.contains("* estimated: "),
        "{table}"
    );
    assert_eq!(
        tern::stats::to_json("s", &reqs)["requests"][0]["estimated"],
        true
    );
}

/// A request the server refused (HTTP 400) is a request: the turn ends `failed` after 1
/// request, a `usage` event records it (with the bytes sent and no tokens: none were
/// reported), and `meta.json` counts it (before: "failed; 0 requests").
#[test]
fn a_refused_request_counts_as_a_request() {
    let w = Wire::OpenAi;
    let body = r#"{"error": {"message": "bad request: unknown parameter", "type": "invalid_request_error"}}"#;
    let h = InProc::new(
        w,
        vec![crate::support::Reply::status(400, body)],
        fast_config(),
    );
    let mut ui = Collect::default();
    let mut rt = h.open(&mut ui);
    let err = rt.run_turn("hello", &mut ui).expect_err("refused");
    assert_eq!(err.kind(), tern::event::Ending::Failed, "{err}");
    let ends = ui.of("turn_end");
    assert!(
        matches!(ends[0], Event::TurnEnd { requests: 1, .. }),
        "{ends:?}"
    );
    let usage = ui.of("usage");
    assert_eq!(usage.len(), 1, "{:?}", ui.kinds());
    assert!(
        matches!(usage[0], Event::Usage { request_bytes, input_tokens: 0, estimated: false, .. } if *request_bytes > 0),
        "{:?}",
        usage[0]
    );
    assert_eq!(rt.session().read_meta().expect("meta").turns, 1);
}

// ---------------------------------------------------------------- the nudge (issue 23)

/// What a small model writes instead of a call: prose and the command in a ```sh block.
const SHOWN: &str = "To create it, run:\n\n```sh\necho hello > a.txt\n```\n\nThis writes the file.";

/// The request bytes up to the end of the first user message's text: tools, system prompt and
/// the prompt, as the provider's prefix cache sees them.
fn through_prompt<'a>(body: &'a [u8], prompt: &str) -> &'a [u8] {
    let at = body
        .windows(prompt.len())
        .position(|w| w == prompt.as_bytes())
        .expect("the prompt is in the body");
    &body[..at + prompt.len()]
}

/// A model that answers with a shell block is told once, after its answer, that nothing ran;
/// its next answer calls bash and the work is done by the second request. The nudge is the last
/// message of that request, after the stored answer: what came before it is byte-identical.
#[test]
fn a_command_in_a_shell_block_is_nudged_and_then_called() {
    for w in [Wire::OpenAi, Wire::Anthropic] {
        let h = InProc::new(
            w,
            vec![
                text(w, SHOWN),
                crate::support::script::bash(w, "b1", "echo hello > a.txt"),
                text(w, "Created a.txt."),
            ],
            fast_config(),
        );
        let mut ui = Collect::default();
        let mut rt = h.open(&mut ui);
        let prompt = "make a.txt saying hello";
        assert_eq!(
            rt.run_turn(prompt, &mut ui).as_deref(),
            Ok("Created a.txt.")
        );
        assert_eq!(
            std::fs::read_to_string(h.dir.path().join("a.txt")).unwrap_or_default(),
            "hello\n",
            "{w:?}: the call of the second request ran"
        );
        let nudges = ui.of("nudge");
        assert!(
            matches!(nudges.as_slice(), [Event::Nudge { command }] if command == "echo hello > a.txt"),
            "{w:?}: {:?}",
            ui.kinds()
        );
        let reqs = h.fake.requests();
        // Two requests to get the work done, and the final answer.
        assert_eq!(reqs.len(), 3, "{w:?}");
        assert_eq!(
            through_prompt(&reqs[1].body, prompt),
            through_prompt(&reqs[0].body, prompt),
            "{w:?}: tools, system prompt and prompt unchanged by the nudge"
        );
        assert_eq!(
            reqs[1].json()["tools"],
            reqs[0].json()["tools"],
            "{w:?}: no new tool"
        );
        // The nudge comes after the stored answer, as a user message: the history before it is
        // the stored prefix, byte for byte.
        let second = reqs[1].body_str();
        let at_answer = second
            .find("echo hello > a.txt")
            .expect("the answer is sent");
        let at_nudge = second
            .find("the command in your answer was not run")
            .expect("the nudge is sent");
        assert!(at_answer < at_nudge, "{w:?}: the nudge follows the answer");
        let msgs = crate::support::body::messages(&reqs[1]);
        let last = msgs.last().expect("a message");
        assert_eq!(last["role"], "user", "{w:?}");
        assert!(
            last.to_string().contains(
                &serde_json::to_string(tern::runtime::nudge::MESSAGE.trim_end()).unwrap()[1..40]
            ),
            "{w:?}: {last}"
        );
        if w == Wire::OpenAi {
            // The nudge stays in the history as sent: the request after it extends the request
            // that carried it, byte for byte (no work-state tail here: the ledger is empty).
            // (Anthropic's cache breakpoint moves by design; prefix.rs compares without it.)
            let open = &reqs[1].body[..reqs[1].body.len() - 2];
            assert!(
                reqs[2].body.starts_with(open),
                "{w:?}: the request after the call extends the one with the nudge"
            );
        }
    }
}

/// A question answered with an example block: one nudge at most, and the answer is kept as the
/// turn's answer, whether the model then says it was an example or repeats itself.
#[test]
fn an_example_in_an_answer_is_nudged_at_most_once_and_kept() {
    let w = Wire::OpenAi;
    let answer = "List hidden files with:\n\n```bash\nls -a\n```";
    for reply in ["It was only an example; nothing needs to run.", answer] {
        let h = InProc::new(w, vec![text(w, answer), text(w, reply)], fast_config());
        let mut ui = Collect::default();
        let mut rt = h.open(&mut ui);
        assert_eq!(
            rt.run_turn("how do I list hidden files?", &mut ui)
                .as_deref(),
            Ok(answer),
            "the answer asked for is the turn's answer"
        );
        assert_eq!(ui.of("nudge").len(), 1, "{:?}", ui.kinds());
        assert_eq!(h.fake.requests().len(), 2);
        // Both answers are stored and shown.
        let texts: Vec<String> = ui
            .of("assistant")
            .iter()
            .filter_map(|e| match e {
                Event::Assistant { text, .. } => Some(text.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(texts, [answer, reply]);
        // The next turn may nudge again: the nudge is per turn.
        rt.run_turn("and only the names?", &mut ui).expect("turn 2");
    }
}

/// A strong model's final answer after real work shows an example command: no nudge, no extra
/// request, the final text unchanged.
#[test]
fn an_example_after_real_work_is_not_nudged() {
    let w = Wire::OpenAi;
    let last = "Created run.sh. Run it with:\n\n```sh\n./run.sh\n```";
    let h = InProc::new(
        w,
        vec![
            crate::support::script::bash(
                w,
                "b1",
                "printf 'echo hi\\n' > run.sh && chmod +x run.sh",
            ),
            text(w, last),
        ],
        fast_config(),
    );
    let mut ui = Collect::default();
    let mut rt = h.open(&mut ui);
    assert_eq!(rt.run_turn("make run.sh", &mut ui).as_deref(), Ok(last));
    assert!(ui.of("nudge").is_empty(), "{:?}", ui.kinds());
    assert_eq!(h.fake.requests().len(), 2);
}

/// `--no-nudge` (and `--approval never`, where showing commands is the point) restores the
/// plain behaviour: the answer ends the turn after one request, nothing appended.
#[test]
fn no_nudge_ends_the_turn_on_the_answer() {
    let w = Wire::OpenAi;
    let mut off = fast_config();
    off.nudge = false;
    let mut never = fast_config();
    never.approval = tern::runtime::Approval::Never;
    for cfg in [off, never] {
        let h = InProc::new(w, vec![text(w, SHOWN)], cfg);
        let mut ui = Collect::default();
        let mut rt = h.open(&mut ui);
        assert_eq!(rt.run_turn("make a.txt", &mut ui).as_deref(), Ok(SHOWN));
        assert!(ui.of("nudge").is_empty(), "{:?}", ui.kinds());
        assert_eq!(h.fake.requests().len(), 1);
        assert!(matches!(
            rt.history().last(),
            Some(tern::message::Message::Assistant { .. })
        ));
    }
}

/// The flag on the command line: `tern exec --no-nudge` stops after the one answer; without it
/// the model is told and its call runs. The `nudge` event is in the JSON output.
#[test]
fn exec_no_nudge_flag() {
    use crate::support::cli::WireWs;
    let w = Wire::OpenAi;
    let ws = WireWs::new(w, vec![text(w, SHOWN)]);
    let out = ws.ok(&["exec", "--json", "--no-nudge", "make a.txt"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("\"type\":\"nudge\""), "{stdout}");
    assert_eq!(ws.fake.requests().len(), 1);

    let ws = WireWs::new(
        w,
        vec![
            text(w, SHOWN),
            crate::support::script::bash(w, "b1", "echo hello > a.txt"),
            text(w, "Created a.txt."),
        ],
    );
    let out = ws.ok(&["exec", "--json", "make a.txt"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("\"type\":\"nudge\""), "{stdout}");
    assert!(ws.root().join("a.txt").exists());
    // The REPL takes the flag too.
    let help = ws.ok(&["chat", "--help"]);
    assert!(String::from_utf8_lossy(&help.stdout).contains("--no-nudge"));
}
