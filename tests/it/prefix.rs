//! Prefix-cache discipline over a real session (DESIGN.md §4): the real `tern` binary against the
//! fake provider (tests/support), for both wires.
//!
//! A scripted 30-request session (two `tern exec` runs and a `tern compact` between them) drafts a
//! plan through `$PLAN_DRAFT_FILE` and `plan_draft`, confirms it with the model's `plan_confirm`,
//! executes with `work_update`, is compacted by hand, clears the plan with the model's
//! `plan_clear`, and goes on working. Every request body the server received is then checked:
//!
//! - tools are byte-identical in every request; the system prompt is byte-identical between
//!   boundaries and changes exactly at PlanConfirm and PlanClear;
//! - the previous body with its tail removed (and its closing brackets) is a byte prefix of the
//!   next body, except right after a compaction: each boundary (confirm, clear, every
//!   compaction) breaks the prefix exactly once and leaves its event in `events.jsonl`;
//! - the work-state tail sits on the latest message only; compaction requests carry none;
//! - Anthropic: breakpoints on the system block and on the last block before the tail, never
//!   more than 4;
//! - the draft never reaches a request; the locked plan is in the system prompt from the request
//!   after confirm until the clear.

use crate::support::body::{error_text, system_of};
use crate::support::cli::WireWs;
use crate::support::script::{bash, call, calls, text, todo, work};
use crate::support::{Reply, Wire};
use serde_json::{Value, json};
use tern::runtime::compact::{INSTRUCTION, RECALL_LABEL};

const OPEN: &str = "<tern:work_state>";
const CLOSE: &str = "</tern:work_state>";

// ---------------------------------------------------------------- body anatomy

/// The messages of a body (OpenAI: the system message included).
fn messages(body: &Value) -> &Vec<Value> {
    body["messages"].as_array().expect("messages array")
}

/// The text parts of a message, in order (OpenAI: the content string; Anthropic: text blocks).
fn texts(m: &Value) -> Vec<String> {
    match &m["content"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

/// A compaction request ends with the compaction instruction as the last user text.
fn is_compaction(body: &Value) -> bool {
    let last = messages(body).last().expect("a message");
    texts(last).last().map(String::as_str) == Some(INSTRUCTION.trim())
}

/// The work-state tail of a body: the text appended to the latest message, if any.
fn tail_of(wire: Wire, body: &Value) -> Option<String> {
    let last = messages(body).last()?;
    match wire {
        Wire::OpenAi => {
            let c = last["content"].as_str()?;
            let at = c.rfind(&format!("\n\n{OPEN}"))?;
            Some(c[at..].to_string())
        }
        Wire::Anthropic => {
            let block = last["content"].as_array()?.last()?;
            let t = block["text"].as_str()?;
            t.starts_with(OPEN).then(|| t.to_string())
        }
    }
}

pub(crate) const BREAKPOINT: &str = r#","cache_control":{"type":"ephemeral"}"#;

/// The part of a raw body that the next body must start with: Anthropic breakpoints removed, the
/// tail removed, and the brackets that close the last message and the body cut off.
///
/// Anthropic: the `cache_control` markers are stripped from both bodies before comparing because
/// the breakpoint moves by design: it marks the last block before the tail, which is a different
/// block in every request. The marker is request metadata, not prompt content, so the provider's
/// cache matches the prefix up to the old breakpoint regardless (Anthropic Messages API, prompt
/// caching). Everything else must match byte for byte.
pub(crate) fn core(wire: Wire, raw: &str) -> String {
    let body: Value = serde_json::from_str(raw).expect("body is JSON");
    let mut s = match wire {
        Wire::OpenAi => raw.to_string(),
        Wire::Anthropic => raw.replace(BREAKPOINT, ""),
    };
    // A text-only request (a compaction's summary, the loop guard's final answer) ends with its
    // `tool_choice`, after the messages: what the next body extends ends before it.
    for choice in [
        r#","tool_choice":"none"}"#,
        r#","tool_choice":{"type":"none"}}"#,
    ] {
        if s.ends_with(choice) {
            s.truncate(s.len() - choice.len());
            s.push('}');
        }
    }
    if let Some(tail) = tail_of(wire, &body) {
        let quoted = serde_json::to_string(&tail).expect("string");
        let escaped = &quoted[1..quoted.len() - 1];
        let (piece, closing) = match wire {
            Wire::OpenAi => (escaped.to_string(), "\"}]}"),
            Wire::Anthropic => (format!(",{{\"type\":\"text\",\"text\":{quoted}}}"), "]}]}"),
        };
        let end = format!("{piece}{closing}");
        assert!(
            s.ends_with(&end),
            "the tail must be the very end of the latest message: …{}",
            &s[s.len().saturating_sub(300)..]
        );
        s.truncate(s.len() - end.len());
        s.push_str(closing);
    }
    let closing = match wire {
        Wire::OpenAi => "]}",
        Wire::Anthropic => "]}]}",
    };
    assert!(s.ends_with(closing), "body ends with {closing}");
    s.truncate(s.len() - closing.len());
    s
}

/// Checks where the tail sits in one request: only on the latest message, nowhere else; none in
/// a compaction request; and (Anthropic) the breakpoints.
fn check_tail_and_breakpoints(wire: Wire, i: usize, raw: &str, body: &Value, compaction: bool) {
    let msgs = messages(body);
    let tail = tail_of(wire, body);
    if compaction {
        assert!(
            tail.is_none(),
            "request {i}: a compaction request has no tail"
        );
    }
    if let Some(t) = &tail {
        assert!(t.trim_end().ends_with(CLOSE), "request {i}: tail {t:?}");
        assert_eq!(t.matches(OPEN).count(), 1, "request {i}: one block");
    }
    for (j, m) in msgs.iter().enumerate() {
        if m["role"] == "system" {
            // The system prompt names the block when it tells the model about it.
            continue;
        }
        let allowed = usize::from(j + 1 == msgs.len() && tail.is_some());
        let n: usize = texts(m).iter().map(|t| t.matches(OPEN).count()).sum();
        assert_eq!(
            n, allowed,
            "request {i}: message {j} carries {n} work-state blocks; only the latest may carry one"
        );
    }
    if wire == Wire::Anthropic {
        let count = raw.matches("\"cache_control\"").count();
        assert!(count <= 4, "request {i}: {count} breakpoints");
        let system = body["system"].as_array().expect("system");
        assert!(
            system.last().expect("system block")["cache_control"].is_object(),
            "request {i}: breakpoint on the last system block"
        );
        let blocks = msgs.last().expect("message")["content"]
            .as_array()
            .expect("blocks");
        let before_tail = if tail.is_some() {
            assert!(
                blocks.last().expect("tail block")["cache_control"].is_null(),
                "request {i}: the tail itself is never cached"
            );
            &blocks[blocks.len() - 2]
        } else {
            blocks.last().expect("block")
        };
        assert!(
            before_tail["cache_control"].is_object(),
            "request {i}: breakpoint on the last block before the tail: {before_tail}"
        );
    }
}

// ---------------------------------------------------------------- the session

/// What the scripted model writes into the draft, composed by printf so the marker never
/// appears in the command (and so never in a request unless tern itself put the draft there).
const MARK_V1: &str = "QXALPHA";
const MARK_V3: &str = "QXBRAVO";

const SUMMARY_CONFIRM: &str =
    "Summary one: the person wants count.sh with a test; a plan was drafted and is being locked.";
const SUMMARY_MANUAL: &str =
    "Summary two: count.sh was written and tested; every item is done; the plan is still locked.";
const SUMMARY_CLEAR: &str =
    "Summary three: README.md was written, every item is done, the plan is being cleared.";

/// The To-do of the scripted session: `done` completed items, then items with the statuses
/// `rest`; items 1, 2, … in the order the work comes (the plan, count.sh, its test, README.md,
/// tidying up).
fn items(done: usize, rest: &[&str]) -> Vec<Value> {
    const NAMES: [&str; 5] = [
        "Plan the work",
        "Write count.sh",
        "Test count.sh",
        "Write README.md",
        "Tidy up",
    ];
    let statuses: Vec<&str> = std::iter::repeat_n("completed", done)
        .chain(rest.iter().copied())
        .collect();
    assert!(statuses.len() <= NAMES.len());
    statuses
        .iter()
        .zip(NAMES)
        .enumerate()
        .map(|(i, (status, name))| todo(&(i + 1).to_string(), name, status))
        .collect()
}

fn script(w: Wire) -> (Vec<Reply>, Vec<Reply>) {
    let first = vec![
        // 1: a pending item is fine before any plan: from request 2 on there is a tail.
        work(w, "c01", items(0, &["pending"])),
        // 2: the draft, written with bash through $PLAN_DRAFT_FILE.
        bash(
            w,
            "c02",
            r#"printf '# Plan\n1. write count.sh [%s%s]\n' QX ALPHA > "$PLAN_DRAFT_FILE" && echo drafted"#,
        ),
        // 3: starting an item while the draft is pending is refused.
        work(w, "c03", items(0, &["in_progress"])),
        // 4: a revision through the tool.
        call(
            w,
            "c04",
            "plan_draft",
            json!({"content": "# Plan\n1. write count.sh\n2. test it\n"}),
        ),
        // 5: another revision with bash; this is the text that gets locked.
        bash(
            w,
            "c05",
            r#"printf '# Plan\n1. write count.sh\n2. test it [%s%s]\n' QX BRAVO > "$PLAN_DRAFT_FILE" && echo revised"#,
        ),
        // 6: confirm; 7: its compaction.
        call(w, "c06", "plan_confirm", json!({})),
        text(w, SUMMARY_CONFIRM),
        // 8: the first start after confirm: confirmed → executing.
        work(w, "c08", items(1, &["in_progress", "pending"])),
        bash(
            w,
            "c09",
            r#"printf 'wc -w < "$1"\n' > count.sh && echo written"#,
        ),
        work(w, "c10", items(2, &["in_progress"])),
        bash(w, "c11", "echo one two > s.txt && bash count.sh s.txt"),
        bash(w, "c12", "ls"),
        work(w, "c13", items(3, &[])),
        // 14: end of the first `tern exec`.
        text(w, "count.sh works: it printed 2."),
        // 15: `tern compact`.
        text(w, SUMMARY_MANUAL),
    ];
    let second = vec![
        work(w, "c16", items(3, &["in_progress"])),
        bash(w, "c17", "printf '# count\\n' > README.md && echo ok"),
        bash(w, "c18", "cat README.md"),
        // 19: finish the item and clear the plan in one message; 20: the clear's compaction.
        calls(
            w,
            &[
                ("c19a", "work_update", json!({"todos": items(4, &[])})),
                ("c19b", "plan_clear", json!({})),
            ],
        ),
        text(w, SUMMARY_CLEAR),
        bash(w, "c21", "ls"),
        work(w, "c22", items(4, &["in_progress"])),
        bash(w, "c23", "echo a"),
        bash(w, "c24", "echo b"),
        bash(w, "c25", "echo c"),
        bash(w, "c26", "echo d"),
        work(w, "c27", items(5, &[])),
        bash(w, "c28", "echo e"),
        bash(w, "c29", "echo f"),
        text(w, "All done."),
    ];
    (first, second)
}

fn thirty_request_session(wire: Wire) {
    let (first, second) = script(wire);
    let ws = WireWs::new(wire, first);
    ws.ok(&[
        "exec",
        "Write count.sh with a test. Plan it first, then do it.",
    ]);
    ws.ok(&["compact"]);
    ws.push(second);
    ws.ok(&[
        "exec",
        "--continue",
        "Now add a README and clear the plan when done.",
    ]);
    assert_eq!(ws.fake.remaining(), 0, "every scripted answer was used");

    let raws = ws.raw_bodies();
    assert_eq!(raws.len(), 30, "30 requests");
    let bodies: Vec<Value> = raws
        .iter()
        .map(|r| serde_json::from_str(r).expect("JSON body"))
        .collect();
    // Request numbers below are 1-based, as in the script.
    let compactions: Vec<usize> = (0..30)
        .filter(|&i| is_compaction(&bodies[i]))
        .map(|i| i + 1)
        .collect();
    assert_eq!(compactions, vec![7, 15, 20], "compaction requests");

    // Tools: identical bytes in every request.
    let tools0 = serde_json::to_string(&bodies[0]["tools"]).expect("tools");
    assert!(tools0.len() > 100, "tools are sent");
    for (i, b) in bodies.iter().enumerate() {
        assert_eq!(
            serde_json::to_string(&b["tools"]).expect("tools"),
            tools0,
            "request {}: tools changed",
            i + 1
        );
    }

    // System prompt: S0 until the confirm (compaction 7 included), S0 + plan from 8 to 20,
    // exactly S0 again after the clear.
    let sys: Vec<String> = bodies.iter().map(system_of).collect();
    let locked = ws.read("archive/plan-0001.md");
    assert!(
        locked.contains(MARK_V3),
        "the locked plan is the last draft"
    );
    for i in 1..30 {
        let n = i + 1;
        if n == 8 || n == 21 {
            assert_ne!(
                sys[i],
                sys[i - 1],
                "request {n}: the system prompt moves here"
            );
        } else {
            assert_eq!(
                sys[i],
                sys[i - 1],
                "request {n}: the system prompt moved outside a boundary"
            );
        }
    }
    assert!(!sys[0].contains("\n<locked_plan>\n"));
    assert_eq!(
        sys[7],
        format!(
            "{}\n\n<locked_plan>\n{}\n</locked_plan>\n",
            sys[0],
            locked.trim_end()
        ),
        "after confirm: the base prompt plus the locked plan"
    );
    assert_eq!(
        sys[20], sys[0],
        "after clear: the base prompt, byte for byte"
    );
    assert_eq!(
        ws.read("system.txt"),
        sys[29],
        "system.txt is what was sent"
    );

    // The prefix: holds everywhere except right after each compaction.
    let mut breaks = Vec::new();
    for i in 1..30 {
        let prev = core(wire, &raws[i - 1]);
        let next = match wire {
            Wire::OpenAi => raws[i].clone(),
            Wire::Anthropic => raws[i].replace(BREAKPOINT, ""),
        };
        if !next.starts_with(&prev) {
            breaks.push(i + 1);
        }
    }
    assert_eq!(
        breaks,
        vec![8, 16, 21],
        "the prefix breaks exactly once per boundary: after the confirm's, the manual and the \
         clear's compaction"
    );

    // The tail: from request 2 on (the ledger is not empty), only on the latest message; none in
    // compaction requests; Anthropic breakpoints.
    for (i, (raw, body)) in raws.iter().zip(&bodies).enumerate() {
        let n = i + 1;
        let compaction = compactions.contains(&n);
        check_tail_and_breakpoints(wire, n, raw, body, compaction);
        if n >= 2 && !compaction {
            assert!(tail_of(wire, body).is_some(), "request {n} has a tail");
        }
    }

    // The draft never reaches a request; the locked plan only through the system prompt.
    for (i, raw) in raws.iter().enumerate() {
        let n = i + 1;
        assert!(!raw.contains(MARK_V1), "request {n} carries a draft");
        let in_system = sys[i].contains(MARK_V3);
        assert_eq!(raw.contains(MARK_V3), in_system, "request {n}");
        assert_eq!(in_system, (8..=20).contains(&n), "request {n}");
    }

    // PlanConfirm called by the model: the new history is the summary, the person's words it
    // replaced (recalled verbatim, issue 41: separate user messages on OpenAI's wire, text
    // blocks of the same user message on Anthropic's), then the assistant message that called
    // plan_confirm, then its result.
    let after_confirm = &bodies[7];
    let m = messages(after_confirm);
    let recalled = |v: &Value| texts(v).iter().any(|t| t.starts_with(RECALL_LABEL));
    let m: Vec<Value> = match wire {
        Wire::OpenAi => std::iter::once(m[1].clone())
            .chain(m[2..].iter().filter(|v| !recalled(v)).cloned())
            .collect(),
        Wire::Anthropic => m.clone(),
    };
    assert!(texts(&m[0])[0].contains(SUMMARY_CONFIRM), "{}", m[0]);
    assert!(
        match wire {
            Wire::OpenAi => messages(after_confirm)[2..].iter().any(recalled),
            Wire::Anthropic => texts(&m[0]).iter().any(|t| t.starts_with(RECALL_LABEL)),
        },
        "the person's words follow the summary"
    );
    assert_eq!(m[1]["role"], "assistant");
    match wire {
        Wire::OpenAi => {
            assert_eq!(m.len(), 3, "summary, the call, its result");
            assert_eq!(m[1]["tool_calls"][0]["function"]["name"], "plan_confirm");
            assert_eq!(m[2]["role"], "tool");
            assert_eq!(m[2]["tool_call_id"], "c06");
            assert!(texts(&m[2])[0].starts_with("Plan confirmed"), "{}", m[2]);
        }
        Wire::Anthropic => {
            assert_eq!(m.len(), 3, "summary, the call, its result");
            assert_eq!(m[1]["content"][0]["name"], "plan_confirm");
            let result = &m[2]["content"][0];
            assert_eq!(result["type"], "tool_result");
            assert_eq!(result["tool_use_id"], "c06");
            assert!(
                result["content"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("Plan confirmed")
            );
        }
    }
    // The archived history of the manual compaction starts with exactly that.
    let archived = ws.read("archive/conversation-0002.jsonl");
    let lines: Vec<Value> = archived
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("line"))
        .filter(|l| l["by"] != "recalled")
        .collect();
    assert_eq!(lines[0]["role"], "user");
    assert!(
        lines[0]["content"]
            .as_str()
            .unwrap_or("")
            .contains(SUMMARY_CONFIRM)
    );
    assert_eq!(lines[1]["tool_calls"][0]["name"], "plan_confirm");
    assert_eq!(lines[2]["tool_call_id"], "c06");

    // Events: one compaction event per compaction request, and each plan boundary's plan_state
    // right after its compaction.
    let events = ws.events();
    let of = |t: &str| -> Vec<&Value> { events.iter().filter(|e| e["type"] == t).collect() };
    let triggers: Vec<&str> = of("compaction")
        .iter()
        .map(|e| e["trigger"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(triggers, vec!["plan_confirm", "manual", "plan_clear"]);
    let plan: Vec<(String, String)> = of("plan_state")
        .iter()
        .map(|e| {
            (
                e["to"].as_str().unwrap_or("").into(),
                e["trigger"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    let expect: Vec<(String, String)> = [
        ("drafting", "draft"),
        ("revised", "draft"),
        ("revised", "draft"),
        ("confirmed", "plan_confirm"),
        ("executing", "work_started"),
        ("cleared", "plan_clear"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(plan, expect);
    for trigger in ["plan_confirm", "plan_clear"] {
        let c = events
            .iter()
            .position(|e| e["type"] == "compaction" && e["trigger"] == trigger)
            .expect("compaction");
        let p = events
            .iter()
            .position(|e| e["type"] == "plan_state" && e["trigger"] == trigger)
            .expect("plan_state");
        assert!(c < p, "{trigger}: compaction before plan_state");
        assert!(
            events[c + 1..p].iter().all(|e| e["type"] != "usage"),
            "{trigger}: no request between the compaction and the plan move"
        );
    }
    // The refused start while the draft was pending.
    let refused = error_text(&events, "c03");
    assert!(refused.contains("plan draft is waiting"), "{refused}");
    // Each draft change was noticed before the next request.
    for id in ["c02", "c04", "c05"] {
        let r = events
            .iter()
            .position(|e| e["type"] == "tool_call" && e["id"] == id)
            .expect("call");
        let next_usage = r + events[r..]
            .iter()
            .position(|e| e["type"] == "usage")
            .expect("a later request");
        assert!(
            events[r..next_usage]
                .iter()
                .any(|e| e["type"] == "plan_state"),
            "{id}: plan_state before the next request"
        );
    }
}

#[test]
fn c18_thirty_requests_prefix_discipline_openai() {
    thirty_request_session(Wire::OpenAi);
}

#[test]
fn c18_thirty_requests_prefix_discipline_anthropic() {
    thirty_request_session(Wire::Anthropic);
}

/// The raw-byte checks above are only as good as `core`: a body that changes an earlier message
/// must be caught.
#[test]
fn prefix_check_catches_a_changed_earlier_message() {
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let (first, _) = script(wire);
        let ws = WireWs::new(wire, first.into_iter().take(3).collect());
        ws.fake.push(text(wire, "stop"));
        ws.ok(&[
            "exec",
            "Write count.sh with a test. Plan it first, then do it.",
        ]);
        let raws = ws.raw_bodies();
        assert!(raws.len() >= 3);
        let prev = core(wire, &raws[1]);
        let next = raws[2].replace(BREAKPOINT, "");
        assert!(next.starts_with(&prev), "{wire:?}: the real pair holds");
        let tampered = next.replacen(
            "Write count.sh with a test",
            "Write count.sh with a tesT",
            1,
        );
        assert!(
            !tampered.starts_with(&prev),
            "{wire:?}: a changed message breaks it"
        );
    }
}
