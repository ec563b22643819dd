//! The plan lifecycle `idle → drafting → revised → confirmed → executing → cleared` (DESIGN.md §5)
//! through the model's tools and through the CLI verbs, with the real `tern` binary (and, where a
//! retry policy must be short, the library's `Runtime`) against the fake provider (tests/support).
//!
//! "Nothing changed" is checked on bytes: every file of the state folder is read before and after.
//! The one file allowed to grow is `events.jsonl`, and only by events that record the attempt
//! itself (the verb's `receipt`, the `usage` / `retry` of requests that were made): DESIGN.md §7
//! says every event lands there, a refused or failed operation included.

use std::process::{Child, Output};
use std::time::Duration;

use crate::support::body::{error_text, of_type, result_of, roles, system_of};
use crate::support::cli::{WireWs, require};
use crate::support::files::jsonl;
use crate::support::procs::{eventually, wait_exit};
use crate::support::script::{bash, call, calls, text, todo, work};
use crate::support::{Recorded, Reply, Wire};
use serde_json::{Value, json};
use tern::runtime::compact::INSTRUCTION;

// ---------------------------------------------------------------- harness

/// Waits for `child` at most `limit` (then kills it and fails): proves it did not hang.
fn wait_bounded(mut child: Child, limit: Duration) -> Output {
    if wait_exit(&mut child, limit).is_none() {
        let out = child.wait_with_output().expect("output");
        panic!(
            "still running after {limit:?}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    child.wait_with_output().expect("output")
}

/// Whether a request is a compaction (ends with the compaction instruction).
fn is_compaction(body: &Value) -> bool {
    body.to_string()
        .contains(&serde_json::to_string(INSTRUCTION.trim()).expect("str"))
}

fn position(events: &[Value], f: impl Fn(&Value) -> bool) -> usize {
    events.iter().position(f).expect("event present")
}

/// Runs `tern ARGS`, which must be refused (exit 1) with `message` and change nothing under
/// `.tern/` but events of the `allowed` types (see [`WireWs::unchanged_since`]); returns those.
fn refused_unchanged(ws: &WireWs, args: &[&str], message: &str, allowed: &[&str]) -> Vec<Value> {
    let before = ws.snapshot();
    let err = ws.refused(args);
    assert!(err.contains(message), "{args:?}: {err}");
    ws.unchanged_since(&before, allowed)
}

/// Asserts that the current session archived nothing (no compaction, no cleared plan or draft).
fn assert_nothing_archived(ws: &WireWs) {
    assert_eq!(
        std::fs::read_dir(ws.path("archive"))
            .expect("archive")
            .count(),
        0
    );
}

const LOCKED_SECTION_OPEN: &str = "\n\n<locked_plan>\n";

/// A workspace whose session exists (one finished `tern exec`).
fn started(wire: Wire) -> WireWs {
    let ws = WireWs::new(wire, vec![text(wire, "Hello.")]);
    ws.ok(&["exec", "Say hello."]);
    ws
}

// ---------------------------------------------------------------- refused transitions

/// Confirm with an empty draft, cancel with no draft, clear with no locked plan: through the CLI,
/// each is an error (exit 1, a clear message) and changes no file; no request is made.
#[test]
fn cli_refused_transitions_change_nothing() {
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let ws = started(wire);
        let requests = ws.fake.requests().len();
        let cases = [
            (vec!["plan", "confirm"], "no plan draft to confirm"),
            (vec!["plan", "cancel"], "no plan draft to cancel"),
            (vec!["plan", "clear"], "no locked plan to clear"),
        ];
        for (args, message) in cases {
            let appended = refused_unchanged(&ws, &args, message, &["receipt"]);
            assert_eq!(appended.len(), 1, "{args:?}: one receipt");
            assert_eq!(appended[0]["ok"], false);
            assert!(
                appended[0]["detail"]
                    .as_str()
                    .unwrap_or("")
                    .contains(message)
            );
        }
        // A whitespace-only draft counts as empty.
        let before = ws.snapshot();
        let out = ws.tern_in(&["plan", "draft"], "  \n\n");
        require(&out, 2, &["plan", "draft"]);
        assert!(String::from_utf8_lossy(&out.stderr).contains("the draft is empty"));
        ws.unchanged_since(&before, &[]);
        std::fs::write(ws.path("plan.draft.md"), " \n\t\n").expect("write");
        refused_unchanged(
            &ws,
            &["plan", "confirm"],
            "no plan draft to confirm",
            &["receipt"],
        );
        assert_eq!(ws.fake.requests().len(), requests, "no request was made");
    }
}

/// `n` bytes of text that never repeats itself (the runaway guard would cut a repeated one).
fn varied_text(n: usize) -> String {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut s = String::with_capacity(n + 32);
    while s.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(&format!("{x:016x} "));
    }
    s.truncate(n);
    s
}

/// The same refusals through the model's tools: error tool results, no compaction request, the
/// plan files and the system prompt untouched.
#[test]
fn tool_refused_transitions_change_nothing() {
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let ws = started(wire);
        let system = ws.read("system.txt");
        let draft = ws.read("plan.draft.md");
        ws.push(vec![
            call(wire, "t1", "plan_confirm", json!({})),
            call(wire, "t2", "plan_cancel", json!({})),
            call(wire, "t3", "plan_clear", json!({})),
            call(wire, "t4", "plan_draft", json!({"content": "   "})),
            // Over the limit a confirm would refuse: refused now, nothing saved.
            call(
                wire,
                "t5",
                "plan_draft",
                json!({"content": varied_text(tern::domain::plan::MAX_PLAN_BYTES + 1)}),
            ),
            text(wire, "Nothing to do."),
        ]);
        ws.ok(&["exec", "--continue", "Try the plan tools."]);
        let events = ws.events();
        for (id, message) in [
            ("t1", "no plan draft to confirm"),
            ("t2", "no plan draft to cancel"),
            ("t3", "no locked plan to clear"),
            ("t4", "draft content is empty"),
            ("t5", "Nothing was saved"),
        ] {
            let c = error_text(&events, id);
            assert!(c.contains(message), "{c}");
        }
        assert!(of_type(&events, "compaction").is_empty());
        assert!(of_type(&events, "plan_state").is_empty());
        let bodies = ws.bodies();
        assert_eq!(bodies.len(), 1 + 6, "no compaction request");
        assert!(bodies.iter().all(|b| !is_compaction(b)));
        assert!(bodies.iter().all(|b| system_of(b) == system));
        assert_eq!(ws.read("system.txt"), system);
        assert_eq!(ws.read("plan.draft.md"), draft);
        assert!(!ws.path("plan.md").exists());
        assert!(!ws.path("plan.json").exists());
        assert!(!ws.path("summary.md").exists());
        assert_nothing_archived(&ws);
    }
}

// ---------------------------------------------------------------- drafting

/// In a workspace whose path is not UTF-8, $PLAN_DRAFT_FILE names the draft byte for byte, so
/// the command can write it (found by a new user: the path reached bash with U+FFFD in it).
#[test]
fn a_non_utf8_workspace_path_still_gives_a_writable_draft() {
    use std::os::unix::ffi::OsStrExt;
    let wire = Wire::OpenAi;
    let ws = WireWs::new(
        wire,
        vec![
            bash(
                wire,
                "b1",
                r#"echo '1. odd path' > "$PLAN_DRAFT_FILE" && echo ok; test -d "$TERN_SESSION_DIR" && echo dir"#,
            ),
            text(wire, "Drafted."),
        ],
    );
    let odd = ws.root().join(std::ffi::OsStr::from_bytes(b"w\xff\xfe"));
    std::fs::create_dir_all(odd.join(".tern")).expect("mkdir");
    let mut cmd = ws.cmd(&["exec", "--json", "draft it"]);
    cmd.current_dir(&odd);
    let out = crate::support::cli::run(cmd, "");
    assert_eq!(out.code, Some(0), "{out:?}");
    let sessions: Vec<_> = std::fs::read_dir(odd.join(".tern/sessions"))
        .expect("sessions")
        .flatten()
        .collect();
    assert_eq!(sessions.len(), 1);
    let dir = sessions[0].path();
    let draft = std::fs::read_to_string(dir.join("plan.draft.md")).unwrap_or_default();
    assert_eq!(draft, "1. odd path\n", "{}", out.stdout);
    let events = jsonl(&dir.join("events.jsonl"));
    let r = result_of(&events, "b1");
    assert_eq!(r["is_error"], false, "{r}");
    assert!(
        r["content"].as_str().unwrap_or("").starts_with("ok\ndir"),
        "{r}"
    );
}

/// A draft written with bash through $PLAN_DRAFT_FILE is noticed before the next request
/// (plan_state drafting, then revised on the next write); its text never reaches a request;
/// `tern plan show` and `tern plan path` report it.
#[test]
fn bash_draft_noticed_before_next_request_and_never_sent() {
    let wire = Wire::OpenAi;
    let ws = WireWs::new(
        wire,
        vec![
            bash(
                wire,
                "b1",
                r#"printf '1. first [%s%s]\n' QX ONE > "$PLAN_DRAFT_FILE" && echo ok"#,
            ),
            text(wire, "Drafted."),
            bash(
                wire,
                "b2",
                r#"printf '1. first [%s%s]\n2. second\n' QX TWO > "$PLAN_DRAFT_FILE" && echo ok"#,
            ),
            // Writing the same text again is no revision.
            bash(
                wire,
                "b3",
                r#"printf '1. first [%s%s]\n2. second\n' QX TWO > "$PLAN_DRAFT_FILE" && echo ok"#,
            ),
            text(wire, "Revised."),
        ],
    );
    ws.ok(&["exec", "Draft a plan."]);
    ws.ok(&["exec", "--continue", "Revise it."]);
    let events = ws.events();
    let states: Vec<(&str, &str, u64)> = of_type(&events, "plan_state")
        .iter()
        .map(|e| {
            (
                e["from"].as_str().unwrap_or(""),
                e["to"].as_str().unwrap_or(""),
                e["revision"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        states,
        vec![("idle", "drafting", 1), ("drafting", "revised", 2)]
    );
    for id in ["b1", "b2"] {
        let r = position(&events, |e| e["type"] == "tool_call" && e["id"] == id);
        let p = r + position(&events[r..], |e| e["type"] == "plan_state");
        let u = r + position(&events[r..], |e| e["type"] == "usage");
        assert!(p < u, "{id}: the draft is noticed before the next request");
    }
    for (i, r) in ws.fake.requests().iter().enumerate() {
        let body = r.body_str();
        assert!(
            !body.contains("QXONE") && !body.contains("QXTWO"),
            "request {i}"
        );
    }
    let plan = ws.json("plan.json");
    assert_eq!(plan["state"], "revised");
    assert_eq!(plan["revision"], 2);
    assert!(plan["locked"].is_null());

    let show = String::from_utf8_lossy(&ws.ok(&["plan", "show"]).stdout).into_owned();
    assert!(show.contains("plan state: revised (revision 2)"), "{show}");
    assert!(show.contains("QXTWO"), "{show}");
    assert!(show.contains("(none)"), "no locked plan: {show}");
    let path = String::from_utf8_lossy(&ws.ok(&["plan", "path"]).stdout).into_owned();
    let session = ws.session();
    assert!(
        path.contains(&format!(
            "PLAN_DRAFT_FILE={}",
            session.join("plan.draft.md").display()
        )),
        "{path}"
    );
    assert!(
        path.contains(&format!("PLAN_FILE={}", session.join("plan.md").display())),
        "{path}"
    );
}

/// `tern plan draft` and `tern plan cancel` run by the model's own command while its turn holds
/// the session write only the draft: the running tern records the plan state itself, and its
/// guard does not take plan.json for a command's change (found by a new user: the result said
/// "refused and put back" while the draft stood).
#[test]
fn plan_verbs_inside_the_running_turn_leave_plan_json_to_it() {
    let wire = Wire::OpenAi;
    let tern = crate::support::cli::TERN;
    let ws = WireWs::new(
        wire,
        vec![
            bash(
                wire,
                "v1",
                &format!("printf '1. from the verb\\n' | {tern} plan draft"),
            ),
            bash(wire, "v2", &format!("{tern} plan cancel")),
            text(wire, "done"),
        ],
    );
    // In the jail the state folder is read-only to commands: a verb inside a command is the
    // fallback's concern (Landlock alone); the model writes $PLAN_DRAFT_FILE instead.
    ws.ok(&["exec", "--no-jail", "draft through the verb"]);
    let events = ws.events();
    for id in ["v1", "v2"] {
        let r = result_of(&events, id);
        let c = r["content"].as_str().unwrap_or("");
        assert_eq!(r["is_error"], false, "{id}: {c}");
        assert!(!c.contains("tern's own files"), "{id}: {c}");
        assert!(
            c.contains("records it before its next request"),
            "{id}: {c}"
        );
    }
    // The running tern saw the draft, then its removal, and recorded both.
    let states: Vec<_> = of_type(&events, "plan_state")
        .iter()
        .map(|e| e["to"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        states.first().map(String::as_str),
        Some("drafting"),
        "{states:?}"
    );
    assert_eq!(states.len(), 2, "{states:?}");
    assert_eq!(ws.read("plan.draft.md"), "");
    let archived = std::fs::read_dir(ws.session().join("archive"))
        .expect("archive")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("draft-"))
        .count();
    assert_eq!(archived, 1);
}

/// `tern plan draft` (stdin) then `tern plan cancel`: the draft is archived and emptied, the
/// state returns to idle; the model's plan_cancel does the same.
#[test]
fn cancel_archives_the_draft_cli_and_tool() {
    let wire = Wire::Anthropic;
    let ws = started(wire);
    ws.ok_in(&["plan", "draft"], "1. a plan to drop\n");
    assert_eq!(ws.read("plan.draft.md"), "1. a plan to drop\n");
    assert_eq!(ws.json("plan.json")["state"], "drafting");
    ws.ok(&["plan", "cancel"]);
    assert_eq!(ws.read("plan.draft.md"), "");
    assert_eq!(ws.read("archive/draft-0001.md"), "1. a plan to drop\n");
    assert_eq!(ws.json("plan.json")["state"], "idle");

    ws.push(vec![
        call(wire, "d1", "plan_draft", json!({"content": "1. another\n"})),
        call(wire, "d2", "plan_cancel", json!({})),
        text(wire, "Dropped."),
    ]);
    ws.ok(&["exec", "--continue", "Draft, then drop it."]);
    assert_eq!(ws.read("plan.draft.md"), "");
    assert_eq!(ws.read("archive/draft-0002.md"), "1. another\n");
    let events = ws.events();
    let to: Vec<(&str, &str)> = of_type(&events, "plan_state")
        .iter()
        .map(|e| {
            (
                e["to"].as_str().unwrap_or(""),
                e["trigger"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        to,
        vec![
            ("drafting", "draft"),
            ("idle", "plan_cancel"),
            ("drafting", "draft"),
            ("idle", "plan_cancel")
        ]
    );
    assert!(
        ws.bodies()
            .iter()
            .all(|b| !b.to_string().contains("a plan to drop"))
    );
}

/// Starting an item while a draft is pending is refused and leaves the ledger as it was; adding
/// pending items is fine.
#[test]
fn work_start_refused_while_draft_pending() {
    let wire = Wire::OpenAi;
    let ws = WireWs::new(
        wire,
        vec![
            work(wire, "w1", vec![todo("1", "a", "pending")]),
            bash(wire, "w2", r#"printf '1. a\n' > "$PLAN_DRAFT_FILE""#),
            work(wire, "w3", vec![todo("1", "a", "in_progress")]),
            work(wire, "w4", vec![todo("1", "a", "completed")]),
            work(
                wire,
                "w5",
                vec![todo("1", "a", "pending"), todo("2", "b", "pending")],
            ),
            text(wire, "Waiting for confirmation."),
        ],
    );
    ws.ok(&["exec", "Plan, then work."]);
    let events = ws.events();
    for id in ["w3", "w4"] {
        let c = error_text(&events, id);
        assert!(
            c.contains("plan draft is waiting") && c.contains("plan_confirm"),
            "{c}"
        );
    }
    assert_eq!(result_of(&events, "w5")["is_error"], false);
    let ledger = ws.json("ledger.json");
    assert_eq!(ledger["revision"], 2);
    assert_eq!(ledger["items"].as_array().map(Vec::len), Some(2));
    assert_eq!(ws.json("plan.json")["state"], "drafting");
}

// ---------------------------------------------------------------- confirm, execute, clear

/// The whole lifecycle through the CLI verbs, for both wires: draft → confirm (compaction first,
/// then the plan moves into plan.md and system.txt, then the event) → the next request carries
/// it → the first start moves to executing → a hand-edited plan.md is refused → clear archives
/// the plan and restores the system prompt byte for byte.
#[test]
fn cli_lifecycle_confirm_execute_clear() {
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        cli_lifecycle(wire);
    }
}

fn cli_lifecycle(wire: Wire) {
    let ws = started(wire);
    let base = ws.read("system.txt");
    let history_before = ws.read("conversation.jsonl");
    let plan = "# Plan\n1. write a.txt\n2. check it\n";
    ws.ok_in(&["plan", "draft"], plan);
    assert_eq!(ws.json("plan.json")["state"], "drafting");

    ws.fake.push(text(
        wire,
        "Summary: the person said hello; a plan for a.txt is ready.",
    ));
    let out = ws.ok(&["plan", "confirm"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Plan confirmed"));

    // The compaction request: the old prompt, the old history, and no draft.
    let bodies = ws.bodies();
    let compaction = bodies.last().expect("request");
    assert!(is_compaction(compaction));
    assert_eq!(
        system_of(compaction),
        base,
        "compaction runs before the pin"
    );
    assert!(
        !compaction.to_string().contains("write a.txt"),
        "the draft is never sent"
    );

    // Move and pin.
    let system = ws.read("system.txt");
    assert_eq!(
        system,
        format!(
            "{base}{LOCKED_SECTION_OPEN}{}\n</locked_plan>\n",
            plan.trim_end()
        )
    );
    assert_eq!(ws.read("plan.md"), plan);
    assert_eq!(ws.read("plan.draft.md"), "");
    let pj = ws.json("plan.json");
    assert_eq!(pj["state"], "confirmed");
    assert_eq!(pj["locked"], plan);
    assert!(pj["confirmed_at"].is_string());
    // The old history is archived; the new one is the summary and the person's words it
    // replaced, recalled verbatim (issue 41).
    assert_eq!(ws.read("archive/conversation-0001.jsonl"), history_before);
    let conv = ws.conversation();
    assert!(conv[1..].iter().all(|m| m["by"] == "recalled"), "{conv:?}");
    assert!(conv.len() >= 2, "{conv:?}");
    assert!(
        conv[0]["content"]
            .as_str()
            .unwrap_or("")
            .contains("a plan for a.txt is ready")
    );
    assert_eq!(
        ws.read("summary.md"),
        "Summary: the person said hello; a plan for a.txt is ready.\n"
    );
    // Order of the events: compaction, then plan_state.
    let events = ws.events();
    let c = position(&events, |e| e["type"] == "compaction");
    let p = position(&events, |e| {
        e["type"] == "plan_state" && e["trigger"] == "plan_confirm"
    });
    assert!(c < p, "compaction before plan_state");
    assert_eq!(events[c]["trigger"], "plan_confirm");
    assert_eq!(events[p]["from"], "drafting");
    assert_eq!(events[p]["to"], "confirmed");

    // Execute: the next request carries the locked plan; the first start → executing.
    ws.push(vec![
        work(wire, "e1", vec![todo("1", "write a.txt", "in_progress")]),
        bash(wire, "e2", "echo a > a.txt"),
        work(wire, "e3", vec![todo("1", "write a.txt", "completed")]),
        text(wire, "a.txt written."),
    ]);
    let n = ws.bodies().len();
    ws.ok(&["exec", "--continue", "Go."]);
    let bodies = ws.bodies();
    for b in &bodies[n..] {
        assert_eq!(system_of(b), system, "the pinned prompt is sent");
    }
    let events = ws.events();
    let executing: Vec<&Value> = of_type(&events, "plan_state")
        .into_iter()
        .filter(|e| e["to"] == "executing")
        .collect();
    assert_eq!(executing.len(), 1, "only the first start moves the state");
    assert_eq!(executing[0]["from"], "confirmed");
    assert_eq!(executing[0]["trigger"], "work_started");
    assert_eq!(ws.json("plan.json")["state"], "executing");

    // A plan.md edited by hand is refused: a warning, and the prompt keeps the locked copy.
    std::fs::write(
        ws.path("plan.md"),
        "# Plan\n1. do something else entirely\n",
    )
    .expect("edit");
    ws.fake.push(text(wire, "Still on the locked plan."));
    let n = ws.bodies().len();
    ws.ok(&["exec", "--continue", "Anything left?"]);
    let bodies = ws.bodies();
    assert_eq!(system_of(&bodies[n]), system);
    assert!(!bodies[n].to_string().contains("something else entirely"));
    let events = ws.events();
    let warnings = of_type(&events, "warning");
    assert_eq!(warnings.len(), 1, "one warning");
    assert!(
        warnings[0]["message"]
            .as_str()
            .unwrap_or("")
            .contains("plan.md was edited outside PlanConfirm"),
        "{}",
        warnings[0]
    );
    assert_eq!(ws.read("system.txt"), system);
    assert_eq!(ws.json("plan.json")["locked"], plan);
    let show = String::from_utf8_lossy(&ws.ok(&["plan", "show"]).stdout).into_owned();
    assert!(
        show.contains("plan.md was edited outside PlanConfirm"),
        "{show}"
    );

    // Clear: compaction first, then the archived plan and the base prompt, byte for byte.
    ws.fake.push(text(
        wire,
        "Summary: a.txt was written; the plan is done and being cleared.",
    ));
    ws.ok(&["plan", "clear"]);
    let bodies = ws.bodies();
    let last = bodies.last().expect("request");
    assert!(is_compaction(last));
    assert_eq!(system_of(last), system, "clear compacts before unpinning");
    assert_eq!(ws.read("archive/plan-0001.md"), plan);
    assert_eq!(
        ws.read("system.txt"),
        base,
        "the prompt without the plan, byte for byte"
    );
    assert_eq!(ws.read("plan.md"), "");
    let pj = ws.json("plan.json");
    assert_eq!(pj["state"], "cleared");
    assert!(pj["locked"].is_null());
    let events = ws.events();
    let c = events
        .iter()
        .rposition(|e| e["type"] == "compaction")
        .expect("compaction");
    let p = events
        .iter()
        .rposition(|e| e["type"] == "plan_state")
        .expect("plan_state");
    assert_eq!(events[c]["trigger"], "plan_clear");
    assert_eq!(events[p]["trigger"], "plan_clear");
    assert_eq!(events[p]["from"], "executing");
    assert_eq!(events[p]["to"], "cleared");
    assert!(c < p);
    // After the clear, clear again is refused and nothing moves.
    refused_unchanged(
        &ws,
        &["plan", "clear"],
        "no locked plan to clear",
        &["receipt"],
    );
}

/// PlanConfirm called by the model: compact → move → pin → event, and the new history is the
/// summary, then the assistant message that called plan_confirm, then its result.
#[test]
fn tool_confirm_keeps_the_calling_message_after_the_summary() {
    let wire = Wire::OpenAi;
    let ws = WireWs::new(
        wire,
        vec![
            bash(
                wire,
                "p1",
                r#"printf '1. one\n2. two\n' > "$PLAN_DRAFT_FILE""#,
            ),
            calls(
                wire,
                &[
                    ("p2", "plan_confirm", json!({})),
                    (
                        "p3",
                        "work_update",
                        json!({"todos": [todo("1", "one", "in_progress")]}),
                    ),
                ],
            ),
            text(
                wire,
                "Summary: a two-step plan was drafted and is being confirmed now.",
            ),
            text(wire, "Confirmed and started."),
        ],
    );
    ws.ok(&["exec", "Plan and start."]);
    let conv = ws.conversation();
    assert_eq!(conv.len(), 6, "{conv:#?}");
    // After the summary, the person's prompt it replaced, recalled verbatim (issue 41).
    assert_eq!(conv[1]["by"], "recalled", "{conv:#?}");
    assert!(
        conv[1]["content"]
            .as_str()
            .unwrap_or("")
            .ends_with("Plan and start.")
    );
    let conv: Vec<serde_json::Value> = std::iter::once(conv[0].clone())
        .chain(conv[2..].iter().cloned())
        .collect();
    assert_eq!(conv[0]["role"], "user");
    assert!(
        conv[0]["content"]
            .as_str()
            .unwrap_or("")
            .contains("two-step plan")
    );
    assert_eq!(conv[1]["role"], "assistant");
    assert_eq!(conv[1]["tool_calls"][0]["name"], "plan_confirm");
    assert_eq!(conv[2]["tool_call_id"], "p2");
    assert!(
        conv[2]["content"]
            .as_str()
            .unwrap_or("")
            .starts_with("Plan confirmed")
    );
    // The second call of the same message ran after the confirm: the start counts.
    assert_eq!(conv[3]["tool_call_id"], "p3");
    assert_eq!(conv[3].get("is_error"), None, "{}", conv[3]);
    assert_eq!(conv[4]["text"], "Confirmed and started.");
    let events = ws.events();
    let order: Vec<String> = events
        .iter()
        .filter(|e| matches!(e["type"].as_str(), Some("compaction" | "plan_state")))
        .map(|e| {
            format!(
                "{}:{}",
                e["type"].as_str().unwrap_or(""),
                e["to"]
                    .as_str()
                    .unwrap_or(e["trigger"].as_str().unwrap_or(""))
            )
        })
        .collect();
    assert_eq!(
        order,
        vec![
            "plan_state:drafting",
            "compaction:plan_confirm",
            "plan_state:confirmed",
            "plan_state:executing"
        ]
    );
    // The archive holds the whole history as it was when the compaction ran, the confirm's
    // assistant message included.
    let archived = jsonl(&ws.path("archive/conversation-0001.jsonl"));
    assert_eq!(
        archived.len(),
        4,
        "prompt, bash call, its result, the confirm's call"
    );
    assert_eq!(archived[2]["tool_call_id"], "p1");
    assert_eq!(archived[3]["tool_calls"][0]["name"], "plan_confirm");
    // The request after the confirm: the plan is in the system prompt, and the history is exactly
    // summary, the person's prompt recalled (issue 41), call, result (+ the second call's result).
    let bodies = ws.bodies();
    assert_eq!(bodies.len(), 4);
    let after = &bodies[3];
    assert!(system_of(after).contains("<locked_plan>\n1. one\n2. two\n</locked_plan>"));
    let msgs = after["messages"].as_array().expect("messages");
    assert_eq!(
        roles(msgs),
        vec!["system", "user", "user", "assistant", "tool", "tool"]
    );
}

// ---------------------------------------------------------------- failed compaction

/// A compaction that fails (an empty or placeholder summary twice) changes no file, and the
/// confirm / compact / clear is refused with a clear message.
#[test]
fn failed_compaction_by_empty_summary_changes_nothing() {
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let ws = started(wire);
        ws.ok_in(&["plan", "draft"], "1. keep me\n");
        let n = ws.fake.requests().len();

        ws.fake.push(text(wire, ""));
        ws.fake.push(text(wire, "   "));
        let before = ws.snapshot();
        let err = ws.refused(&["plan", "confirm"]);
        assert!(
            err.contains("plan not confirmed")
                && err.contains("nothing was changed")
                && err.contains("empty summary twice"),
            "{err}"
        );
        let appended =
            ws.unchanged_since(&before, &["usage", "receipt", "session_start", "warning"]);
        assert_eq!(of_type(&appended, "usage").len(), 2, "two summary requests");
        assert_eq!(ws.fake.requests().len(), n + 2);

        ws.fake.push(text(wire, "[summary]"));
        ws.fake.push(text(wire, "n/a"));
        refused_unchanged(
            &ws,
            &["compact"],
            "placeholder summary",
            &["usage", "receipt", "session_start", "warning"],
        );
    }
}

/// A compaction whose provider answers 500 forever (a short retry budget) changes no file: the
/// library's PlanConfirm returns the refusal, and through `tern exec` the model reads it.
#[test]
fn failed_compaction_by_server_errors_changes_nothing() {
    use crate::support::harness;
    use tern::runtime::Quiet;

    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let ws = started(wire);
        ws.ok_in(&["plan", "draft"], "1. keep me\n");
        let boom = r#"{"error":{"message":"internal error","type":"server_error"}}"#;
        ws.fake.set_default(Reply::status(500, boom));

        let launcher = harness::launcher(ws.root(), &ws.fake, wire, harness::fast_config());
        let mut rt = launcher
            .open(&tern::launcher::SessionRef::Current, &mut Quiet)
            .expect("resume");
        let before = ws.snapshot();
        let n = ws.fake.requests().len();
        let err = rt
            .plan_confirm(None, &mut Quiet)
            .expect_err("refused")
            .to_string();
        assert!(
            err.contains("plan not confirmed") && err.contains("nothing was changed"),
            "{err}"
        );
        assert!(ws.fake.requests().len() > n + 1, "it retried");
        ws.unchanged_since(&before, &["retry"]);
        let err = rt
            .compact(tern::event::CompactTrigger::Manual, None, &mut Quiet)
            .expect_err("refused");
        assert!(err.to_string().contains("nothing was changed"), "{err}");
        ws.unchanged_since(&before, &["retry"]);
        drop(rt);

        // Through `tern exec`: the model's plan_confirm gets the refusal as its tool result; the
        // turn then fails on the same dead server (exit 75); the plan files are untouched.
        let plan_files = |ws: &WireWs| {
            ["plan.json", "plan.draft.md", "system.txt"].map(|f| std::fs::read(ws.path(f)).ok())
        };
        let files = plan_files(&ws);
        ws.fake.push(call(wire, "f1", "plan_confirm", json!({})));
        let out = ws.tern(&["exec", "--continue", "--max-retry-time", "1", "Confirm it."]);
        require(&out, 75, &["exec"]);
        assert_eq!(plan_files(&ws), files);
        assert!(!ws.path("plan.md").exists());
        let c = error_text(&ws.events(), "f1");
        assert!(
            c.contains("plan not confirmed")
                && c.contains("compaction failed, nothing was changed"),
            "{c}"
        );
        assert_nothing_archived(&ws);
    }
}

// ---------------------------------------------------------------- compactions keep the plan

/// The locked plan survives three compactions byte for byte, in system.txt and plan.md, and
/// every compaction request and later request carries it unchanged.
#[test]
fn locked_plan_survives_three_compactions() {
    let wire = Wire::Anthropic;
    let ws = started(wire);
    let plan = "# Plan\n1. keep\n2. these bytes \u{2014} exactly\n";
    ws.ok_in(&["plan", "draft"], plan);
    ws.fake.push(text(
        wire,
        "Summary: hello was said, the plan is being locked.",
    ));
    ws.ok(&["plan", "confirm"]);
    let system = ws.read("system.txt");
    let plan_md = ws.read("plan.md");
    let plan_json_locked = ws.json("plan.json")["locked"].clone();
    assert_eq!(plan_md, plan);
    for k in 1..=3 {
        ws.fake.push(text(wire, "Ok, noted."));
        ws.ok(&["exec", "--continue", &format!("Message {k}.")]);
        ws.fake.push(text(
            wire,
            &format!("Summary number {k}: messages were exchanged."),
        ));
        ws.ok(&["compact"]);
        assert_eq!(ws.read("system.txt"), system, "after compaction {k}");
        assert_eq!(ws.read("plan.md"), plan_md, "after compaction {k}");
        assert_eq!(ws.json("plan.json")["locked"], plan_json_locked);
        assert_eq!(ws.json("plan.json")["state"], "confirmed");
    }
    let bodies = ws.bodies();
    let compactions = bodies.iter().filter(|b| is_compaction(b)).count();
    assert_eq!(compactions, 4, "confirm + three");
    for b in &bodies[2..] {
        assert_eq!(system_of(b), system);
    }
    for k in 2..=4 {
        assert!(
            ws.path(&format!("archive/conversation-{k:04}.jsonl"))
                .is_file()
        );
    }
    let events = ws.events();
    assert_eq!(of_type(&events, "compaction").len(), 4);
}

// ---------------------------------------------------------------- resume

/// Resume reuses system.txt: the resumed request's system prompt is byte-identical to before,
/// even after AGENTS.md changed on disk; a new session reads the new AGENTS.md. Two new sessions
/// of the same project send byte-identical tools and system prompts (C18, C19).
#[test]
fn c18_resume_reuses_system_txt_after_agents_md_changed() {
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let ws = WireWs::new(wire, Vec::new());
        std::fs::write(ws.root().join("AGENTS.md"), "Use tabs. QXRULEONE\n").expect("write");
        ws.fake.push(text(wire, "One."));
        ws.ok(&["exec", "First."]);
        let system = ws.read("system.txt");
        assert!(system.contains("QXRULEONE"));
        std::fs::write(ws.root().join("AGENTS.md"), "Use spaces. QXRULETWO\n").expect("write");
        ws.fake.push(text(wire, "Two."));
        ws.ok(&["exec", "--continue", "Second."]);
        let bodies = ws.bodies();
        assert_eq!(system_of(&bodies[1]), system_of(&bodies[0]));
        assert_eq!(system_of(&bodies[1]), system);
        assert_eq!(ws.read("system.txt"), system);
        assert_eq!(bodies[1]["tools"], bodies[0]["tools"]);

        // A new session pins the new AGENTS.md; two new sessions pin the same bytes.
        ws.fake.push(text(wire, "Three."));
        ws.ok(&["exec", "Third."]);
        ws.fake.push(text(wire, "Four."));
        ws.ok(&["exec", "Fourth."]);
        let raws: Vec<Recorded> = ws.fake.requests();
        let b3 = raws[2].json();
        let b4 = raws[3].json();
        assert!(system_of(&b3).contains("QXRULETWO") && !system_of(&b3).contains("QXRULEONE"));
        assert_eq!(
            system_of(&b3),
            system_of(&b4),
            "C18: same project, same bytes"
        );
        assert_eq!(
            serde_json::to_string(&b3["tools"]).expect("tools"),
            serde_json::to_string(&b4["tools"]).expect("tools"),
            "C19: same tool bytes"
        );
    }
}

// ---------------------------------------------------------------- context overflow

const OVERFLOWS: &[(&str, Wire, &str)] = &[
    (
        "openai",
        Wire::OpenAi,
        r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
    ),
    (
        "anthropic",
        Wire::Anthropic,
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
    ),
    (
        "deepseek",
        Wire::OpenAi,
        r#"{"error":{"message":"This model's maximum context length is 65536 tokens. However, you requested 70000 tokens (70000 in the messages, 0 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}"#,
    ),
    (
        "llama.cpp",
        Wire::OpenAi,
        r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}"#,
    ),
    (
        "vllm",
        Wire::OpenAi,
        r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens in the messages, Please reduce the length of the messages.","type":"BadRequestError","param":null,"code":400}"#,
    ),
];

/// Each provider's overflow wording, once: tern compacts once, retries once with a different
/// body, and completes.
#[test]
fn context_overflow_compacts_once_and_retries_once() {
    for (name, wire, body) in OVERFLOWS {
        let wire = *wire;
        let ws = WireWs::new(
            wire,
            vec![
                bash(wire, "o1", "echo step"),
                Reply::status(400, body),
                text(
                    wire,
                    "Summary: the person asked for a step; it printed step.",
                ),
                text(wire, "Done after compaction."),
            ],
        );
        let out = ws.tern(&["exec", "Do a step."]);
        require(&out, 0, &["exec", name]);
        let raws: Vec<Vec<u8>> = ws.fake.requests().into_iter().map(|r| r.body).collect();
        assert_eq!(raws.len(), 4, "{name}: turn, overflow, compaction, retry");
        let bodies = ws.bodies();
        assert!(is_compaction(&bodies[2]), "{name}");
        assert!(!is_compaction(&bodies[3]), "{name}");
        assert_ne!(
            raws[3], raws[1],
            "{name}: the retry is a different, shorter body"
        );
        assert!(raws[3].len() < raws[1].len(), "{name}");
        let events = ws.events();
        let compactions = of_type(&events, "compaction");
        assert_eq!(compactions.len(), 1, "{name}");
        assert_eq!(compactions[0]["trigger"], "context_overflow", "{name}");
        assert_eq!(of_type(&events, "result")[0]["status"], "completed");
        assert!(
            ws.read("conversation.jsonl")
                .contains("Done after compaction.")
        );
    }
}

/// When the retry overflows again, the turn fails clearly (exit 1) without a second compaction.
#[test]
fn context_overflow_twice_fails_without_second_compaction() {
    for (name, wire, body) in OVERFLOWS.iter().take(2) {
        let wire = *wire;
        let ws = WireWs::new(
            wire,
            vec![
                Reply::status(400, body),
                text(
                    wire,
                    "Summary: the person asked for something very long indeed.",
                ),
                Reply::status(400, body),
                text(wire, "never sent"),
            ],
        );
        let out = ws.tern(&["exec", "Do it."]);
        require(&out, 1, &["exec", name]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("still longer than the model's context window after compaction"),
            "{name}: {err}"
        );
        assert_eq!(ws.fake.requests().len(), 3, "{name}: no second compaction");
        assert_eq!(ws.fake.remaining(), 1);
        let events = ws.events();
        assert_eq!(of_type(&events, "compaction").len(), 1, "{name}");
        let result = of_type(&events, "result");
        assert_eq!(result[0]["status"], "failed");
        assert_eq!(result[0]["exit_code"], 1);
    }
}

/// A small `--context-window` makes the preflight estimate pass the threshold: the history is
/// compacted before the request is sent (trigger `auto`).
#[test]
fn automatic_compaction_at_the_threshold() {
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let ws = WireWs::new(
            wire,
            vec![
                bash(wire, "a1", "echo step one"),
                text(
                    wire,
                    "Summary: the person asked for steps; step one printed.",
                ),
                text(wire, "Done."),
            ],
        );
        ws.ok(&["exec", "--context-window", "1024", "Do the steps."]);
        let bodies = ws.bodies();
        assert_eq!(bodies.len(), 3);
        assert!(!is_compaction(&bodies[0]));
        assert!(
            is_compaction(&bodies[1]),
            "compacted before the second request"
        );
        let events = ws.events();
        let c = of_type(&events, "compaction");
        assert_eq!(c.len(), 1);
        assert_eq!(c[0]["trigger"], "auto");
        assert_eq!(c[0]["archived_messages"], 3);
        // The same session with the default window does not compact.
        let ws = WireWs::new(
            wire,
            vec![bash(wire, "a1", "echo step one"), text(wire, "Done.")],
        );
        ws.ok(&["exec", "Do the steps."]);
        assert!(of_type(&ws.events(), "compaction").is_empty());
    }
}

// ---------------------------------------------------------------- another live process

/// While a turn of the session runs in another live process, `tern plan confirm`, `tern plan
/// clear` and `tern compact` are refused with a clear message (and make no request); with
/// `--wait` the confirm waits for the turn to end, then succeeds.
#[test]
fn verbs_refused_while_a_turn_runs_elsewhere_and_wait() {
    let wire = Wire::OpenAi;
    let ws = WireWs::new(
        wire,
        vec![
            bash(
                wire,
                "s1",
                r#"printf '1. the plan\n' > "$PLAN_DRAFT_FILE" && sleep 6 && echo slept"#,
            ),
            text(wire, "Done sleeping."),
            text(
                wire,
                "Summary: the person asked for a nap; a one-step plan is drafted.",
            ),
        ],
    );
    let exec = ws.spawn(&["exec", "Sleep a while."]);
    // Wait until the bash call runs (its tool_call event is written before it starts).
    let running = || {
        std::fs::read_to_string(ws.root().join(".tern/current"))
            .ok()
            .and_then(|_| std::fs::read_to_string(ws.path("events.jsonl")).ok())
            .is_some_and(|e| e.contains("\"tool_call\""))
    };
    assert!(
        eventually(Duration::from_secs(30), running),
        "exec never started"
    );
    let meta = ws.json("meta.json");
    assert_eq!(meta["status"], "running");
    let pid = meta["pid"].as_u64().expect("pid while running");
    for args in [
        vec!["plan", "confirm"],
        vec!["plan", "clear"],
        vec!["compact"],
    ] {
        let err = ws.refused(&args);
        assert!(
            err.contains("refused")
                && err.contains(&format!("process {pid}"))
                && err.contains("--wait"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(
        ws.fake.requests().len(),
        1,
        "the refused verbs made no request"
    );

    let waiter = ws.spawn(&["plan", "confirm", "--wait"]);
    let exec = wait_bounded(exec, Duration::from_secs(60));
    assert_eq!(
        exec.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&exec.stderr)
    );
    let waited = wait_bounded(waiter, Duration::from_secs(60));
    assert_eq!(
        waited.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&waited.stderr)
    );
    // The confirm ran after the turn: its compaction is the third request, after "Done sleeping".
    let bodies = ws.bodies();
    assert_eq!(bodies.len(), 3);
    assert!(is_compaction(&bodies[2]));
    assert!(bodies[2].to_string().contains("slept"));
    assert_eq!(ws.json("plan.json")["state"], "confirmed");
    assert_eq!(ws.read("plan.md"), "1. the plan\n");
}

/// The verbs that call the model take `--model` (that model answers the compaction, over the
/// session's) and `--max-retry-time` (a failing provider is given up on in time, exit 75), as
/// the README says (found by a new user: both were refused as unexpected arguments).
#[test]
fn model_verbs_take_model_and_max_retry_time() {
    let w = Wire::OpenAi;
    let ws = WireWs::new(w, vec![text(w, "Hello.")]);
    ws.ok(&["exec", "hi"]);
    ws.fake.push(text(w, "Summary: hello was said."));
    ws.ok(&["compact", "--model", "other-model"]);
    let last = ws.bodies().last().cloned().expect("a compaction request");
    assert_eq!(last["model"], "other-model");
    // A provider that always fails: --max-retry-time 0 gives up after the first attempt
    // (counted in requests, not timed).
    for _ in 0..20 {
        ws.fake.push(Reply::status(500, "down"));
    }
    let before = ws.fake.requests().len();
    let out = crate::support::cli::run_no_stdin(ws.cmd(&["compact", "--max-retry-time", "0"]));
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("provider unavailable"), "{out:?}");
    assert_eq!(ws.fake.requests().len() - before, 1, "it retried");
    let out = crate::support::cli::run_no_stdin(ws.cmd(&[
        "plan",
        "confirm",
        "--model",
        "m",
        "--max-retry-time",
        "0",
    ]));
    assert!(out.stderr.contains("no plan draft"), "{out:?}");
}

/// A 3 GB draft (`truncate -s 3G "$PLAN_DRAFT_FILE"`, sparse) is read only up to the plan limit
/// (found by a new user: `tern plan show` took 9 s and 3.1 GB, and the running tern read it whole
/// before each request). It still counts as a draft that changes with its size, `plan show` says
/// it is over the limit instead of showing it, `plan confirm` refuses it with its real size, and
/// `plan cancel` moves it to the archive whole.
#[test]
fn a_huge_draft_is_never_read_whole() {
    let wire = Wire::OpenAi;
    let ws = WireWs::new(
        wire,
        vec![
            bash(
                wire,
                "b1",
                r#"truncate -s 3G "$PLAN_DRAFT_FILE" && echo ok"#,
            ),
            text(wire, "Drafted."),
            text(wire, "Again."),
        ],
    );
    ws.ok(&["exec", "Draft a plan."]);
    let events = ws.events();
    let r = result_of(&events, "b1");
    assert!(r["content"].as_str().unwrap_or("").starts_with("ok"), "{r}");
    let size: u64 = 3 << 30;
    assert_eq!(
        std::fs::metadata(ws.path("plan.draft.md")).unwrap().len(),
        size
    );
    let plan = ws.json("plan.json");
    assert_eq!(plan["state"], "drafting", "{plan}");
    assert_eq!(plan["revision"], 1, "{plan}");

    let show = String::from_utf8_lossy(&ws.ok(&["plan", "show"]).stdout).into_owned();
    assert!(
        show.contains(&format!(
            "(the draft is {size} bytes, over the 65536-byte limit: shorten it)"
        )),
        "{show}"
    );
    let refused = ws.refused(&["plan", "confirm"]);
    assert!(
        refused.contains(&format!("the draft is {size} bytes")),
        "{refused}"
    );

    // Same first bytes, one byte longer: a changed draft.
    std::fs::OpenOptions::new()
        .write(true)
        .open(ws.path("plan.draft.md"))
        .unwrap()
        .set_len(size + 1)
        .unwrap();
    ws.ok(&["exec", "--continue", "Again."]);
    let plan = ws.json("plan.json");
    assert_eq!(plan["state"], "revised", "{plan}");
    assert_eq!(plan["revision"], 2, "{plan}");

    ws.ok(&["plan", "cancel"]);
    assert_eq!(ws.read("plan.draft.md"), "");
    let archived = std::fs::metadata(ws.path("archive/draft-0001.md")).unwrap();
    assert_eq!(archived.len(), size + 1);
    assert_eq!(ws.json("plan.json")["state"], "idle");
}

/// A draft that is not UTF-8 (a command wrote binary to `$PLAN_DRAFT_FILE`) is a draft all the
/// same: the turn goes on, `plan show` says it is not text, `plan confirm` refuses it, and
/// `plan cancel` archives it byte for byte.
#[test]
fn a_non_utf8_draft_is_reported_not_fatal() {
    let wire = Wire::OpenAi;
    let ws = WireWs::new(
        wire,
        vec![
            bash(
                wire,
                "b1",
                r#"printf '1. step \377\376\n' > "$PLAN_DRAFT_FILE" && echo ok"#,
            ),
            text(wire, "Drafted."),
        ],
    );
    let out = ws.ok(&["exec", "Draft a plan."]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Drafted."));
    let plan = ws.json("plan.json");
    assert_eq!(plan["state"], "drafting", "{plan}");
    let show = String::from_utf8_lossy(&ws.ok(&["plan", "show"]).stdout).into_owned();
    assert!(show.contains("is not UTF-8 text"), "{show}");
    let refused = ws.refused(&["plan", "confirm"]);
    assert!(refused.contains("not UTF-8"), "{refused}");
    ws.ok(&["plan", "cancel"]);
    assert_eq!(
        std::fs::read(ws.path("archive/draft-0001.md")).unwrap(),
        b"1. step \xff\xfe\n"
    );
}

/// Issue 46: a damaged `ledger.json` is kept in the archive and the ledger goes on, said to
/// the model (in the tool's result) and the person (a warning); the next call finds a good file.
#[test]
fn a_damaged_ledger_is_kept_aside_and_started_anew() {
    let w = Wire::OpenAi;
    let ws = WireWs::new(
        w,
        vec![
            text(w, "ok"),
            call(
                w,
                "w1",
                "work_update",
                json!({"todos": [todo("1", "one", "in_progress")]}),
            ),
            text(w, "done"),
        ],
    );
    ws.ok(&["exec", "first"]);
    std::fs::write(ws.path("ledger.json"), "{not a ledger").unwrap();
    ws.ok(&["exec", "--continue", "second"]);
    let archived: Vec<_> = std::fs::read_dir(ws.path("archive"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("ledger-"))
        .collect();
    assert_eq!(archived.len(), 1);
    assert_eq!(
        std::fs::read_to_string(archived[0].path()).unwrap(),
        "{not a ledger"
    );
    let ledger: Value = serde_json::from_str(&ws.read("ledger.json")).unwrap();
    assert_eq!(ledger["items"][0]["content"], "one", "{ledger}");
    let events = ws.events();
    assert!(
        events.iter().any(|e| e["type"] == "warning"
            && e["message"]
                .as_str()
                .unwrap_or("")
                .contains("ledger.json could not be read")),
        "{events:?}"
    );
}

/// Issue 46: a damaged `ledger.json` is rebuilt from the session's history (the ledger calls
/// the model made, replayed), not lost: the next read shows the items it had.
#[test]
fn a_damaged_ledger_is_rebuilt_from_the_history() {
    let w = Wire::OpenAi;
    let ws = WireWs::new(
        w,
        vec![
            call(
                w,
                "w1",
                "work_update",
                json!({"todos": [todo("1", "first item", "completed"), todo("2", "second item", "in_progress")]}),
            ),
            text(w, "ok"),
            call(w, "r1", "todo_list", json!({})),
            text(w, "read"),
        ],
    );
    ws.ok(&["exec", "first"]);
    std::fs::write(ws.path("ledger.json"), "garbage").unwrap();
    ws.ok(&["exec", "--continue", "second"]);
    let ledger: Value = serde_json::from_str(&ws.read("ledger.json")).unwrap();
    let items = ledger["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{ledger}");
    assert_eq!(items[1]["content"], "second item");
    let events = ws.events();
    assert!(
        events.iter().any(|e| e["type"] == "warning"
            && e["message"]
                .as_str()
                .unwrap_or("")
                .contains("rebuilt from this session's history (2 items)")),
        "{events:?}"
    );
}
