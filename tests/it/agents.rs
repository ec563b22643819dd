//! Sub-agents and the Fleet (issue 11, DESIGN.md §9), against real parts: the real `tern` binary
//! or the library's launcher, the fake provider (one server answers the parent and its children;
//! children that run at once follow their own script through [`FakeServer::route`], keyed by
//! their task), real bash, real files, real signals.
//!
//! - the prefix: a fork's first request is a byte extension of the parent's request without its
//!   tail (both wires); fresh children share the system and tools bytes across children and
//!   sessions; the tool list is the same at every depth;
//! - results: status, session id, usage; bounded on character boundaries with the report path;
//! - limits: depth at run time, the turn, wall-time and token budgets, children at once with one
//!   hung, Ctrl-C;
//! - authority: sandbox × approval of parent and member ceiling in every combination; approval
//!   questions on the parent's surface (the REPL names the child; headless: refused, with a
//!   reason the child reads); keys only to their provider's server;
//! - durable and visible: the record before the child runs, a crash during a child then
//!   `--continue`, `tern sessions`, `tern status`, the parent's bounded event stream;
//! - the Fleet: project over user, refused files, selection by id then role, fail-closed;
//! - the cache key a child sends.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::body::{of_type, system_of};
use crate::support::cli::{WireWs, ok_no_stdin, run_no_stdin};
use crate::support::files::{jsonl, read, read_json};
use crate::support::harness::{Collect, InProc, fast_config};
use crate::support::procs::{eventually, procs_with, wait_exit};
use crate::support::script::{agent, bash, text, todo, with_text, work};
use crate::support::{FakeServer, Recorded, Wire, validate};
use tern::event::Event;
use tern::policy::Approval;
use tern::policy::Mode;
use tern::runtime::{Answer, Surface};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

const OPEN: &str = "<tern:work_state>";
const CLOSE: &str = "</tern:work_state>";
const BREAKPOINT: &str = r#","cache_control":{"type":"ephemeral"}"#;

/// The parsed JSON events of a `--json` run's stdout.
fn events_of(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not an event {l:?}: {e}")))
        .collect()
}

/// Waits up to 30 s (a hang check, never a speed claim) until `done` holds.
fn wait_until(what: &str, done: impl FnMut() -> bool) {
    assert!(
        eventually(Duration::from_secs(30), done),
        "timed out: {what}"
    );
}

/// The child session folders of the session folder `dir` (`agents/<id>/`), by name.
fn child_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir.join("agents"))
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    out.sort();
    out
}

/// The folder of the child that the parent's call `call_id` started (by its `meta.json`).
fn child_of(dir: &Path, call_id: &str) -> PathBuf {
    child_dirs(dir)
        .into_iter()
        .find(|c| read_json(&c.join("meta.json"))["parent"]["call_id"] == call_id)
        .unwrap_or_else(|| panic!("no child of call {call_id} under {}", dir.display()))
}

fn id_of(dir: &Path) -> String {
    dir.file_name().unwrap().to_string_lossy().into_owned()
}

/// The stored tool result answering `call_id` in `conversation.jsonl` of `dir`.
fn stored_result(dir: &Path, call_id: &str) -> Value {
    jsonl(&dir.join("conversation.jsonl"))
        .into_iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .unwrap_or_else(|| panic!("no stored result for {call_id}"))
}

fn content(m: &Value) -> String {
    m["content"].as_str().unwrap_or("").to_string()
}

/// The messages of a body (OpenAI: the system message included).
fn messages(body: &Value) -> &Vec<Value> {
    body["messages"].as_array().expect("messages array")
}

/// The text parts of a message (OpenAI: the content string; Anthropic: text blocks).
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

/// The work-state tail of a body: the text appended to its latest message, if any.
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

/// The part of a raw body a later body must start with (as tests/it/prefix.rs defines it):
/// Anthropic breakpoints removed (the marker moves by design: it is request metadata, not
/// prompt content), the work-state tail removed, and the brackets that close the last message
/// and the body cut off.
fn core(wire: Wire, raw: &str) -> String {
    let body: Value = serde_json::from_str(raw).expect("body is JSON");
    let mut s = match wire {
        Wire::OpenAi => raw.to_string(),
        Wire::Anthropic => raw.replace(BREAKPOINT, ""),
    };
    if let Some(tail) = tail_of(wire, &body) {
        let quoted = serde_json::to_string(&tail).expect("string");
        let escaped = &quoted[1..quoted.len() - 1];
        let (piece, closing) = match wire {
            Wire::OpenAi => (escaped.to_string(), "\"}]}"),
            Wire::Anthropic => (format!(",{{\"type\":\"text\",\"text\":{quoted}}}"), "]}]}"),
        };
        let end = format!("{piece}{closing}");
        assert!(s.ends_with(&end), "the tail ends the body");
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

/// The model a recorded request asked for.
fn model_of(r: &Recorded) -> String {
    r.json()["model"].as_str().unwrap_or("").to_string()
}

/// A fleet file with these members.
fn fleet(members: Value) -> String {
    serde_json::to_string_pretty(&json!({ "members": members })).unwrap()
}

fn write_project_fleet(root: &Path, members: Value) {
    std::fs::write(root.join(".tern/fleet.json"), fleet(members)).expect("write fleet.json");
}

/// The head line of a sub-agent result: `[sub-agent ID: STATUS; N requests; tokens in I
/// (cached C), out O]`, parsed.
fn head_of(result: &str) -> (String, String, u64, u64, u64, u64) {
    let line = result.lines().next().unwrap_or("");
    let rest = line
        .strip_prefix("[sub-agent ")
        .unwrap_or_else(|| panic!("not a sub-agent result: {result:?}"));
    let (id, rest) = rest.split_once(": ").expect("id");
    let (status, rest) = rest.split_once("; ").expect("status");
    let nums: Vec<u64> = rest
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(nums.len(), 4, "{line}");
    (
        id.to_string(),
        status.to_string(),
        nums[0],
        nums[1],
        nums[2],
        nums[3],
    )
}

// ---------------------------------------------------------------------------------------------
// 1. The prefix: forks, fresh children, the tool list
// ---------------------------------------------------------------------------------------------

/// A fork's first request = the parent's tools + pinned system + stored history up to, not
/// including, the calling assistant message, then one user message: the fork state (the
/// ledger body byte-identical to the tail's, the plan line) and the task. Checked as bytes: the
/// parent's request without its tail (and, on Anthropic, without the moving breakpoint) is a
/// prefix of the child's, and what follows is exactly the fork message.
fn fork_extends_the_parents_prefix(wire: Wire) {
    let task = "count the words in notes.txt";
    let ws = WireWs::new(
        wire,
        vec![
            work(
                wire,
                "w1",
                vec![
                    todo("1", "Read notes", "completed"),
                    todo("2", "Count the words", "in_progress"),
                    todo("3", "Report", "pending"),
                ],
            ),
            agent(wire, "a1", json!({"task": task, "fork": true})),
            text(wire, "There are 42 words."),
            text(wire, "The fork counted 42 words."),
        ],
    );
    // A long prompt: the prefix must pass the simulated cache's 1024-token minimum (tern's own
    // tools + system prompt are below it).
    let prompt = format!(
        "count the words. {}",
        "Some context for the count. ".repeat(60)
    );
    let out = ws.ok(&["exec", "--json", &prompt]);
    let events = events_of(&String::from_utf8_lossy(&out.stdout));
    let raws = ws.raw_bodies();
    assert_eq!(raws.len(), 4, "parent, parent, child, parent");
    let parent_req: Value = serde_json::from_str(&raws[1]).unwrap();
    let child_req: Value = serde_json::from_str(&raws[2]).unwrap();

    // The byte extension.
    let prefix = core(wire, &raws[1]);
    let child = match wire {
        Wire::OpenAi => raws[2].clone(),
        Wire::Anthropic => raws[2].replace(BREAKPOINT, ""),
    };
    assert!(
        child.starts_with(&prefix),
        "the fork's first request does not extend the parent's prefix:\n--- parent\n{}\n--- child\n{}",
        &prefix[prefix.len().saturating_sub(400)..],
        &child[..child.len().min(prefix.len() + 400)]
    );
    // What follows is the fork message and nothing else.
    let fork_msg = texts(messages(&child_req).last().unwrap())
        .last()
        .cloned()
        .unwrap();
    let quoted = serde_json::to_string(&fork_msg).unwrap();
    let rest = match wire {
        Wire::OpenAi => format!(",{{\"role\":\"user\",\"content\":{quoted}}}]}}"),
        // Anthropic merges consecutive user turns: the fork text is a new block of the
        // message that holds the last tool result.
        Wire::Anthropic => format!(",{{\"type\":\"text\",\"text\":{quoted}}}]}}]}}"),
    };
    assert_eq!(&child[prefix.len()..], rest);
    // Same model, same tools and system bytes (they lie inside the extended prefix; checked
    // directly too, so a reordering of the body would show here).
    assert_eq!(parent_req["model"], child_req["model"]);
    assert_eq!(
        crate::support::body::raw_value(&raws[1], "tools"),
        crate::support::body::raw_value(&raws[2], "tools")
    );
    assert_eq!(system_of(&parent_req), system_of(&child_req));

    // The fork state: the ledger body exactly as the parent's tail renders it, the plan line,
    // then the task.
    let tail = tail_of(wire, &parent_req).expect("the parent's request has a tail");
    let block = tail.trim_start_matches('\n');
    let ledger_body = block
        .strip_prefix(&format!("{OPEN}\n"))
        .and_then(|b| b.strip_suffix(&format!("\n{CLOSE}")))
        .unwrap_or_else(|| panic!("tail {tail:?}"));
    assert!(fork_msg.starts_with("<tern:fork_state>\n"), "{fork_msg}");
    assert!(
        fork_msg.contains(&format!("\n{ledger_body}\n</tern:fork_state>")),
        "the fork state carries the ledger body byte for byte:\n{fork_msg}\n--- tail body\n{ledger_body}"
    );
    assert!(fork_msg.contains("\nNo plan is locked.\n"), "{fork_msg}");
    assert!(
        fork_msg.ends_with(&format!("\n\nTask: {task}")),
        "{fork_msg}"
    );
    // The child's request has no tail of its own (it has no ledger) and only one fork state.
    assert_eq!(raws[2].matches("<tern:fork_state>").count(), 1);
    assert!(tail_of(wire, &child_req).is_none());

    if wire == Wire::Anthropic {
        // Breakpoints at the same places: the last system block, and the last block before
        // any tail (here the fork message, the child's newest block); never more than 4.
        for raw in [&raws[1], &raws[2]] {
            assert!(raw.matches("\"cache_control\"").count() <= 4);
        }
        assert!(
            child_req["system"].as_array().unwrap().last().unwrap()["cache_control"].is_object()
        );
        assert!(
            parent_req["system"].as_array().unwrap().last().unwrap()["cache_control"].is_object()
        );
        let last = messages(&child_req).last().unwrap()["content"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert!(last["cache_control"].is_object(), "{last}");
    }

    // The simulated prefix cache reads the parent's prefix for the child's first request: all
    // of it but the last partial 128-token block.
    let usage = |dir: &Path| -> Vec<Value> {
        jsonl(&dir.join("events.jsonl"))
            .into_iter()
            .filter(|e| e["type"] == "usage")
            .collect()
    };
    let session = ws.session();
    let child_dir = child_of(&session, "a1");
    let first = &usage(&child_dir)[0];
    let prefix_tokens = (prefix.len() / crate::support::BYTES_PER_TOKEN) as u64;
    let cached = first["cached_tokens"].as_u64().unwrap();
    assert!(
        cached + crate::support::CACHE_BLOCK_TOKENS > prefix_tokens && cached <= prefix_tokens,
        "cached {cached} of a {prefix_tokens}-token parent prefix"
    );
    assert_eq!(
        first["model"], "m",
        "the usage event records the effective model"
    );

    // The record: a fork, named by the parent's call; the child's events name the parent.
    let meta = read_json(&child_dir.join("meta.json"));
    assert_eq!(meta["parent"]["session"], id_of(&session));
    assert_eq!(meta["parent"]["call_id"], "a1");
    assert_eq!(meta["parent"]["fork"], true);
    assert_eq!(
        read(&child_dir.join("system.txt")),
        read(&session.join("system.txt")),
        "a fork's system.txt is the parent's exact bytes"
    );
    for e in jsonl(&child_dir.join("events.jsonl")) {
        assert_eq!(e["parent"], id_of(&session), "{e}");
    }
    let start = of_type(&events, "agent_start");
    assert_eq!(start.len(), 1);
    assert_eq!(start[0]["fork"], true);
    assert_eq!(start[0]["child"], id_of(&child_dir));
    let result = content(&stored_result(&session, "a1"));
    assert!(result.ends_with("\nThere are 42 words."), "{result}");
}

#[test]
fn fork_first_request_extends_the_parents_prefix_openai() {
    fork_extends_the_parents_prefix(Wire::OpenAi);
}

#[test]
fn fork_first_request_extends_the_parents_prefix_anthropic() {
    fork_extends_the_parents_prefix(Wire::Anthropic);
}

/// Fresh children: the same tools bytes as every other request, and the same system bytes as
/// each other, as children of another session, and as a new session of the project: the
/// parent's locked plan is not in them; the member's instructions and the task are the first
/// user message.
#[test]
fn fresh_children_share_system_and_tools_bytes_across_children_and_sessions() {
    let w = Wire::OpenAi;
    let ws = WireWs::new(w, Vec::new());
    write_project_fleet(
        ws.root(),
        json!([{"id": "rev", "role": "review", "instructions": "You review diffs. Be brief."}]),
    );
    ws.fake
        .route("Task: first look", vec![text(w, "first done")]);
    ws.fake
        .route("Task: second look", vec![text(w, "second done")]);
    // Session 1: two fresh children at once.
    ws.push(vec![
        crate::support::script::calls(
            w,
            &[
                ("a1", "agent", json!({"task": "first look"})),
                (
                    "a2",
                    "agent",
                    json!({"task": "second look", "member": "rev"}),
                ),
            ],
        ),
        text(w, "both done"),
    ]);
    ws.ok(&["exec", "look twice"]);
    let s1 = ws.session();
    // Session 2: a locked plan, then one fresh child.
    ws.push(vec![
        crate::support::script::call(
            w,
            "p1",
            "plan_draft",
            json!({"content": "# Plan\n1. look again\n"}),
        ),
        crate::support::script::call(w, "p2", "plan_confirm", json!({})),
        text(
            w,
            "Summary: a plan to look again was drafted and is being locked.",
        ),
        agent(w, "a3", json!({"task": "third look"})),
        text(w, "third done"),
        agent(
            w,
            "a4",
            json!({"task": "fork under the plan", "fork": true}),
        ),
        text(w, "fork done"),
        text(w, "all done"),
    ]);
    ws.ok(&["exec", "plan, then look"]);
    let s2 = ws.session();
    assert_ne!(s1, s2);
    assert!(read(&s2.join("system.txt")).contains("<locked_plan>"));
    // A fork, unlike a fresh child, keeps the locked plan (its system bytes are the parent's)
    // and says so in its fork state.
    let fork = child_of(&s2, "a4");
    assert_eq!(read(&fork.join("system.txt")), read(&s2.join("system.txt")));
    let fork_msg = content(
        jsonl(&fork.join("conversation.jsonl"))
            .iter()
            .rfind(|m| m["role"] == "user")
            .unwrap(),
    );
    assert!(
        fork_msg.contains("\nThe locked plan in the system prompt applies.\n"),
        "{fork_msg}"
    );
    // Session 3: a plain new session, for its pinned system bytes.
    ws.push(vec![text(w, "hello")]);
    ws.ok(&["exec", "hi"]);
    let plain = read(&ws.session().join("system.txt"));

    let kids = [
        child_of(&s1, "a1"),
        child_of(&s1, "a2"),
        child_of(&s2, "a3"),
    ];
    for k in &kids {
        assert_eq!(
            read(&k.join("system.txt")),
            plain,
            "{}: a fresh child's system bytes are the project's base bytes",
            k.display()
        );
        assert_eq!(read_json(&k.join("meta.json"))["parent"]["fork"], false);
    }
    // Every request, parent or child, carries the same tools bytes; children's requests the
    // base system bytes.
    let reqs = ws.fake.requests();
    let tools =
        crate::support::body::raw_value(&String::from_utf8(reqs[0].body.clone()).unwrap(), "tools")
            .to_string();
    assert!(tools.contains("\"name\":\"agent\""));
    for r in &reqs {
        assert_eq!(
            crate::support::body::raw_value(&r.body_str(), "tools"),
            tools
        );
    }
    let child_reqs: Vec<&Recorded> = reqs
        .iter()
        .filter(|r| {
            let b = r.json();
            let m = messages(&b);
            m.len() == 2 && content(&m[1]).contains("Task: ")
        })
        .collect();
    assert_eq!(child_reqs.len(), 3, "one request per fresh child");
    for r in &child_reqs {
        let b = r.json();
        assert_eq!(system_of(&b), plain);
        let m = messages(&b);
        assert_eq!(m.len(), 2, "system + the one first message");
    }
    // The first message: the member's instructions, then the task; or the task alone.
    let first = |k: &Path| jsonl(&k.join("conversation.jsonl"))[0]["content"].clone();
    assert_eq!(first(&kids[0]), "Task: first look");
    assert_eq!(
        first(&kids[1]),
        "You review diffs. Be brief.\n\nTask: second look"
    );
    assert_eq!(first(&kids[2]), "Task: third look");
}

/// Depth is enforced at run time, never by changing the tool list: with the default depth 2 a
/// grandchild runs and its own `agent` call is refused ("depth limit reached: do it yourself");
/// every request of every depth carries the same tools bytes. `--agent-depth 0` refuses the
/// first call and opens nothing.
#[test]
fn depth_is_enforced_at_run_time_with_the_same_tool_list() {
    let w = Wire::OpenAi;
    let ws = WireWs::new(
        w,
        vec![
            agent(w, "a1", json!({"task": "level one"})),
            agent(w, "a2", json!({"task": "level two"})),
            agent(w, "a3", json!({"task": "level three"})),
            text(w, "did level two myself"),
            text(w, "level one done"),
            text(w, "all done"),
        ],
    );
    ws.ok(&["exec", "go deep"]);
    let parent = ws.session();
    let child = child_of(&parent, "a1");
    let grandchild = child_of(&child, "a2");
    assert!(child_dirs(&grandchild).is_empty(), "no third level");
    let refused = stored_result(&grandchild, "a3");
    assert_eq!(refused["is_error"], true);
    assert!(
        content(&refused).starts_with("Error: depth limit reached: do it yourself"),
        "{refused}"
    );
    let reqs = ws.fake.requests();
    assert_eq!(reqs.len(), 6, "no request was made for the refused call");
    let tools = crate::support::body::raw_value(&reqs[0].body_str(), "tools").to_string();
    for r in &reqs {
        assert_eq!(
            crate::support::body::raw_value(&r.body_str(), "tools"),
            tools
        );
    }
    assert_eq!(
        read_json(&grandchild.join("meta.json"))["parent"]["session"],
        id_of(&child)
    );

    // Depth 0: no sub-agents at all, the same tools.
    let ws = WireWs::new(
        w,
        vec![
            agent(w, "b1", json!({"task": "anything"})),
            text(w, "fine, myself"),
        ],
    );
    ws.ok(&["exec", "--agent-depth", "0", "delegate"]);
    let r = stored_result(&ws.session(), "b1");
    assert!(
        content(&r).starts_with("Error: depth limit reached: do it yourself"),
        "{r}"
    );
    assert!(child_dirs(&ws.session()).is_empty());
    let reqs = ws.fake.requests();
    assert_eq!(
        crate::support::body::raw_value(&reqs[0].body_str(), "tools"),
        tools
    );
}

// ---------------------------------------------------------------------------------------------
// 2. Results: status, id, usage; bounded on character boundaries
// ---------------------------------------------------------------------------------------------

/// A text of `n` characters mixing 1-, 2- and 4-byte characters, with recognisable ends.
fn multibyte(n: usize) -> String {
    // Numbered words, so the text never repeats itself (a model's output that does is stopped
    // as a runaway, see tern::provider::runaway).
    let words = (0..).flat_map(|k: u32| format!("é🦀aß€{k} ").chars().collect::<Vec<_>>());
    let mut s: String = "<<START".into();
    s.extend(words.take(n - 5 - "<<START".chars().count()));
    s.push_str("END>>");
    assert_eq!(s.chars().count(), n);
    s
}

/// `tern::runtime::agent::bound` at the limit: 12,000 characters are kept whole, 12,001 are cut
/// to the first and last 4,000 characters (never inside a character), a marker saying how many
/// were cut and the report's path.
#[test]
fn bound_keeps_twelve_thousand_characters_and_cuts_on_character_boundaries() {
    use tern::runtime::agent::{KEEP_HEAD_CHARS, KEEP_TAIL_CHARS, RESULT_LIMIT_CHARS, bound};
    let report = Path::new("/x/agents/20260101-000000-ab12/report.md");
    let whole = multibyte(RESULT_LIMIT_CHARS);
    assert!(
        whole.len() > RESULT_LIMIT_CHARS,
        "multi-byte: more bytes than characters"
    );
    assert_eq!(bound(&whole, report), whole);
    for n in [RESULT_LIMIT_CHARS + 1, 20_000] {
        let long = multibyte(n);
        let cut = bound(&long, report);
        let head: String = long.chars().take(KEEP_HEAD_CHARS).collect();
        let tail: String = long.chars().skip(n - KEEP_TAIL_CHARS).collect();
        let marker = format!(
            "\n[… {} characters cut; the whole report is in {}]\n",
            n - KEEP_HEAD_CHARS - KEEP_TAIL_CHARS,
            report.display()
        );
        assert_eq!(cut, format!("{head}{marker}{tail}"));
        assert!(cut.starts_with("<<START") && cut.ends_with("END>>"));
    }
}

/// End to end: a child's 20,000-character answer reaches the parent as its head and tail with
/// the marker and the path of `report.md`, which holds the whole text; the result's first line
/// gives the status, the child's session id and its usage as its `meta.json` records it. An
/// error result (a budget that ran out with a long partial output) is bounded the same way.
#[test]
fn results_are_bounded_with_the_report_path_and_carry_status_id_and_usage() {
    let w = Wire::OpenAi;
    let long = multibyte(20_000);
    let partial = multibyte(15_000);
    let ws = WireWs::new(
        w,
        vec![
            agent(w, "a1", json!({"task": "write a long report"})),
            text(w, &long),
            agent(w, "a2", json!({"task": "write and stop", "member": "one"})),
            with_text(bash(w, "b1", "echo more"), &partial),
            text(w, "seen both"),
        ],
    );
    write_project_fleet(
        ws.root(),
        json!([{"id": "one", "role": "single", "max_turns": 1}]),
    );
    ws.ok(&["exec", "report"]);
    let parent = ws.session();

    let child = child_of(&parent, "a1");
    let report = child.join("report.md");
    assert_eq!(read(&report), format!("{long}\n"));
    let r = stored_result(&parent, "a1");
    assert!(r.get("is_error").is_none(), "{r}");
    let c = content(&r);
    let (id, status, requests, input, cached, output) = head_of(&c);
    assert_eq!(id, id_of(&child));
    assert_eq!(status, "completed");
    let meta = read_json(&child.join("meta.json"));
    assert_eq!(requests, meta["turns"].as_u64().unwrap());
    assert_eq!(requests, 1);
    assert_eq!(input, meta["usage"]["input_tokens"].as_u64().unwrap());
    assert_eq!(cached, meta["usage"]["cached_tokens"].as_u64().unwrap());
    assert_eq!(output, meta["usage"]["output_tokens"].as_u64().unwrap());
    assert!(input > 0 && output > 0, "{c}");
    let body = c.split_once('\n').unwrap().1;
    let head: String = long.chars().take(4000).collect();
    let tail: String = long.chars().skip(16_000).collect();
    assert_eq!(
        body,
        format!(
            "{head}\n[… 12000 characters cut; the whole report is in {}]\n{tail}",
            report.display()
        )
    );

    // The error result: max_turns (its turn budget; the child's own meta.json says the same),
    // bounded, the stop line kept at its end.
    let child = child_of(&parent, "a2");
    let r = stored_result(&parent, "a2");
    assert_eq!(r["is_error"], true);
    let c = content(&r);
    assert_eq!(head_of(&c).1, "max_turns");
    assert_eq!(read_json(&child.join("meta.json"))["status"], "max_turns");
    let body = c.split_once('\n').unwrap().1;
    let full = read(&child.join("report.md"));
    assert!(full.starts_with(&partial), "the partial output is kept");
    let full = full.trim_end();
    let n = full.chars().count();
    assert!(n > 12_000);
    assert!(body.starts_with(&partial.chars().take(4000).collect::<String>()));
    assert!(body.contains(&format!(
        "\n[… {} characters cut; the whole report is in {}]\n",
        n - 8000,
        child.join("report.md").display()
    )));
    assert!(
        body.ends_with("\n[stopped: its turn budget of 1 model request ran out]"),
        "{}",
        &body[body.len() - 200..]
    );
}

// ---------------------------------------------------------------------------------------------
// 3. Limits: budgets, children at once, a hung child, Ctrl-C
// ---------------------------------------------------------------------------------------------

/// The `turn_start` and `turn_end` times (RFC 3339 with ms: they sort as text) of a child.
fn turn_span(dir: &Path) -> (String, String) {
    let ev = jsonl(&dir.join("events.jsonl"));
    let at = |kind: &str| {
        ev.iter()
            .find(|e| e["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in {}", dir.display()))["ts"]
            .as_str()
            .unwrap()
            .to_string()
    };
    (at("turn_start"), at("turn_end"))
}

/// Each budget ends the child with a terminal `budget_exhausted` result that keeps its partial
/// output: the turn budget (member `max_turns`), the token budget (member `token_budget`) and
/// the wall time (member `wall_time_s`, here while its command hangs: the command is killed).
#[test]
fn each_member_budget_ends_in_a_terminal_result_with_the_partial_output() {
    let w = Wire::OpenAi;
    let sleep = "sleep 33.71";
    let ws = WireWs::new(
        w,
        vec![
            agent(w, "a1", json!({"task": "two steps", "member": "short"})),
            with_text(bash(w, "b1", "echo one"), "first part"),
            with_text(bash(w, "b2", "echo two"), "second part"),
            agent(w, "a2", json!({"task": "spend", "member": "cheap"})),
            with_text(bash(w, "b3", "echo spent"), "spent some"),
            agent(w, "a3", json!({"task": "hang", "member": "quick"})),
            with_text(bash(w, "b4", sleep), "waiting for it"),
            text(w, "three stopped"),
        ],
    );
    write_project_fleet(
        ws.root(),
        json!([
            {"id": "short", "role": "r1", "max_turns": 2},
            {"id": "cheap", "role": "r2", "token_budget": 50},
            {"id": "quick", "role": "r3", "wall_time_s": 2},
        ]),
    );
    let started = Instant::now();
    ws.ok(&["exec", "stop them"]);
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the hung command outlived its wall time"
    );
    assert!(procs_with(sleep).is_empty(), "{:?}", procs_with(sleep));
    let parent = ws.session();
    // One vocabulary (issue 18): the parent's result, `agent_end`, the child's meta.json, its
    // own `turn_end` and `tern sessions` say the same: its turn budget is `max_turns`, a wall
    // time or token budget `budget_exhausted` (never `interrupted` or `failed`).
    let want = |id: &str| {
        if id == "a1" {
            "max_turns"
        } else {
            "budget_exhausted"
        }
    };
    let body = |id: &str| {
        let r = stored_result(&parent, id);
        assert_eq!(r["is_error"], true, "{r}");
        let c = content(&r);
        assert_eq!(head_of(&c).1, want(id), "{c}");
        c.split_once('\n').unwrap().1.to_string()
    };
    assert_eq!(
        body("a1"),
        "first part\n\nsecond part\n[stopped: its turn budget of 2 model requests ran out]"
    );
    let b = body("a2");
    assert!(
        b.starts_with("spent some\n[stopped: its token budget of 50 tokens ran out ("),
        "{b}"
    );
    assert_eq!(
        body("a3"),
        "waiting for it\n[stopped: its wall time of 2 s ran out]"
    );
    // The child that hung: its command was killed and its result stored; it made 1 request.
    let hung = child_of(&parent, "a3");
    let r = stored_result(&hung, "b4");
    assert_eq!(r["is_error"], true, "{r}");
    let listing = String::from_utf8_lossy(&ws.ok(&["sessions"]).stdout).into_owned();
    for id in ["a1", "a2", "a3"] {
        let kid = child_of(&parent, id);
        assert_eq!(
            read_json(&kid.join("meta.json"))["status"],
            want(id),
            "{id}"
        );
        let events = jsonl(&kid.join("events.jsonl"));
        let ends = of_type(&events, "turn_end");
        assert_eq!(ends.last().unwrap()["status"], want(id), "{id}");
        let line = listing
            .lines()
            .find(|l| l.contains(&id_of(&kid)))
            .unwrap_or_else(|| panic!("{listing}"));
        assert!(line.contains(want(id)), "{line}");
    }
    let ends = of_type(&jsonl(&parent.join("events.jsonl")), "agent_end")
        .into_iter()
        .map(|e| {
            (
                e["call_id"].as_str().unwrap().to_string(),
                e["status"].clone(),
            )
        })
        .collect::<BTreeMap<_, _>>();
    for id in ["a1", "a2", "a3"] {
        assert_eq!(ends[id], want(id), "{ends:?}");
    }
}

/// The flags set the budgets (`--agent-max-turns`, `--agent-token-budget`,
/// `--agent-wall-time`), and a member's own field only narrows them: a member asking for more
/// turns and tokens than the flags allow gets the flags'.
#[test]
fn budget_flags_apply_and_members_only_narrow_them() {
    let w = Wire::OpenAi;
    let fleet_of = |ws: &WireWs| {
        write_project_fleet(
            ws.root(),
            json!([{"id": "greedy", "role": "r", "max_turns": 50, "token_budget": 100000000}]),
        )
    };
    let ws = WireWs::new(
        w,
        vec![
            agent(w, "a1", json!({"task": "many steps", "member": "greedy"})),
            with_text(bash(w, "b1", "echo one"), "one"),
            text(w, "done"),
        ],
    );
    fleet_of(&ws);
    ws.ok(&["exec", "--agent-max-turns", "1", "go"]);
    let c = content(&stored_result(&ws.session(), "a1"));
    assert!(
        c.ends_with("\none\n[stopped: its turn budget of 1 model request ran out]"),
        "{c}"
    );

    let ws = WireWs::new(
        w,
        vec![
            agent(w, "a1", json!({"task": "spend", "member": "greedy"})),
            with_text(bash(w, "b1", "echo two"), "two"),
            text(w, "done"),
        ],
    );
    fleet_of(&ws);
    ws.ok(&["exec", "--agent-token-budget", "40", "go"]);
    let c = content(&stored_result(&ws.session(), "a1"));
    assert!(
        c.contains("\ntwo\n[stopped: its token budget of 40 tokens ran out ("),
        "{c}"
    );
    assert_eq!(
        ws.fake.requests().len(),
        3,
        "the child stopped before a second request"
    );

    let sleep = "sleep 33.72";
    let ws = WireWs::new(
        w,
        vec![
            agent(w, "a1", json!({"task": "hang"})),
            bash(w, "b1", sleep),
            text(w, "done"),
        ],
    );
    let started = Instant::now();
    ws.ok(&["exec", "--agent-wall-time", "1", "go"]);
    assert!(started.elapsed() < Duration::from_secs(20));
    let c = content(&stored_result(&ws.session(), "a1"));
    assert!(
        c.ends_with("\n[stopped: its wall time of 1 s ran out]"),
        "{c}"
    );
    assert!(procs_with(sleep).is_empty());
}

/// Several `agent` calls in one assistant message run at once (at most `--agents-parallel`),
/// and their results are stored in call order whatever order they end in.
#[test]
fn children_of_one_message_run_at_once_and_results_keep_call_order() {
    let w = Wire::OpenAi;
    let run = |parallel: &str| -> (PathBuf, WireWs) {
        let ws = WireWs::new(
            w,
            vec![
                crate::support::script::calls(
                    w,
                    &[
                        ("a1", "agent", json!({"task": "alpha"})),
                        ("a2", "agent", json!({"task": "beta"})),
                        ("a3", "agent", json!({"task": "gamma"})),
                    ],
                ),
                text(w, "all three"),
            ],
        );
        // The first call ends last: call order is not end order.
        for (task, ms, says) in [("alpha", 1200, "A"), ("beta", 600, "B"), ("gamma", 0, "C")] {
            ws.fake.route(
                &format!("Task: {task}"),
                vec![text(w, &format!("{says} says hi")).delay_before(Duration::from_millis(ms))],
            );
        }
        ws.ok(&["exec", "--agents-parallel", parallel, "fan out"]);
        (ws.session(), ws)
    };

    let (parent, _ws) = run("4");
    let spans: Vec<(String, String)> = ["a1", "a2", "a3"]
        .iter()
        .map(|c| turn_span(&child_of(&parent, c)))
        .collect();
    let last_start = spans.iter().map(|s| &s.0).max().unwrap();
    let first_end = spans.iter().map(|s| &s.1).min().unwrap();
    assert!(last_start < first_end, "all three ran at once: {spans:?}");
    let conv = jsonl(&parent.join("conversation.jsonl"));
    let results: Vec<(String, String)> = conv
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| (m["tool_call_id"].as_str().unwrap().to_string(), content(m)))
        .collect();
    assert_eq!(results.len(), 3);
    for ((id, c), (want_id, says)) in results.iter().zip([("a1", "A"), ("a2", "B"), ("a3", "C")]) {
        assert_eq!(id, want_id);
        assert!(c.ends_with(&format!("\n{says} says hi")), "{c}");
    }

    // One at a time: the turns do not overlap, in call order.
    let (parent, _ws) = run("1");
    let spans: Vec<(String, String)> = ["a1", "a2", "a3"]
        .iter()
        .map(|c| turn_span(&child_of(&parent, c)))
        .collect();
    for pair in spans.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "one at a time: {spans:?}");
    }
    // Two at a time: the third starts only after one of the first two ended.
    let (parent, _ws) = run("2");
    let spans: Vec<(String, String)> = ["a1", "a2", "a3"]
        .iter()
        .map(|c| turn_span(&child_of(&parent, c)))
        .collect();
    assert!(
        spans[0].0 < spans[1].1 && spans[1].0 < spans[0].1,
        "{spans:?}"
    );
    assert!(
        spans[2].0 >= spans[0].1.clone().min(spans[1].1.clone()),
        "{spans:?}"
    );
}

/// A child whose command hangs is stopped at its wall time; its sibling's result does not wait
/// for the command, the sibling's `agent_end` reports its own short duration, and both results
/// are stored in call order.
#[test]
fn a_hung_child_never_holds_its_siblings_result_past_its_wall_time() {
    let w = Wire::OpenAi;
    let sleep = "sleep 34.71";
    let ws = WireWs::new(
        w,
        vec![
            crate::support::script::calls(
                w,
                &[
                    ("a1", "agent", json!({"task": "hang"})),
                    ("a2", "agent", json!({"task": "quick"})),
                ],
            ),
            text(w, "one of two"),
        ],
    );
    ws.fake.route(
        "Task: hang",
        vec![with_text(bash(w, "h1", sleep), "hanging")],
    );
    ws.fake.route("Task: quick", vec![text(w, "quick done")]);
    let started = Instant::now();
    let out = ws.ok(&["exec", "--json", "--agent-wall-time", "3", "two"]);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert!(
        took >= Duration::from_secs(3),
        "the parent waited for the wall time: {took:?}"
    );
    assert!(procs_with(sleep).is_empty());
    let parent = ws.session();
    let hung = content(&stored_result(&parent, "a1"));
    assert_eq!(head_of(&hung).1, "budget_exhausted", "{hung}");
    let quick = content(&stored_result(&parent, "a2"));
    assert_eq!(head_of(&quick).1, "completed", "{quick}");
    assert!(quick.ends_with("\nquick done"));
    let events = events_of(&String::from_utf8_lossy(&out.stdout));
    let end = |id: &str| {
        of_type(&events, "agent_end")
            .into_iter()
            .find(|e| e["call_id"] == id)
            .unwrap()
            .clone()
    };
    assert!(end("a1")["duration_ms"].as_u64().unwrap() >= 3000);
    assert!(
        end("a2")["duration_ms"].as_u64().unwrap() < 2500,
        "the quick child's own duration, not its sibling's: {}",
        end("a2")
    );
    // Results in call order.
    let ids: Vec<String> = jsonl(&parent.join("conversation.jsonl"))
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["a1", "a2"]);
}

/// A child's retries fit its wall time (issue 18 item 4): its server answers 503 with a
/// `Retry-After` of 60 s, longer than the child's 4 s wall time, under the default 300 s retry
/// time. The child gives up at once (no retry is waited for: it could not fit), ends
/// `provider_unavailable` after one request, and the parent goes on. Counts only, no timings.
#[test]
fn a_childs_retries_fit_its_wall_time() {
    let w = Wire::OpenAi;
    let ws = WireWs::new(
        w,
        vec![
            agent(w, "a1", json!({"task": "overloaded"})),
            text(w, "the child could not run"),
        ],
    );
    ws.fake.route(
        "Task: overloaded",
        vec![
            crate::support::Reply::status(503, r#"{"error": {"message": "overloaded"}}"#)
                .header("Retry-After", "60"),
        ],
    );
    let out = ws.ok(&["exec", "--json", "--agent-wall-time", "4", "go"]);
    let parent = ws.session();
    let kid = child_of(&parent, "a1");
    let kid_events = jsonl(&kid.join("events.jsonl"));
    let retries = kid_events.iter().filter(|e| e["type"] == "retry").count();
    assert_eq!(
        retries, 0,
        "a 60 s wait cannot fit a 4 s wall time: {kid_events:#?}"
    );
    let r = content(&stored_result(&parent, "a1"));
    assert_eq!(head_of(&r).1, "provider_unavailable", "{r}");
    assert!(
        r.contains("(no retry: waiting 60 s more would pass the retry time of 4 s)")
            && r.ends_with("; a sub-agent's retries stop within its wall time of 4 s]"),
        "{r}"
    );
    assert_eq!(ws.fake.routed_left("Task: overloaded"), 0);
    assert_eq!(ws.fake.requests().len(), 3, "parent, child once, parent");
    let events = events_of(&String::from_utf8_lossy(&out.stdout));
    let result = of_type(&events, "result");
    assert_eq!(result[0]["status"], "completed", "{events:#?}");
}

/// Ctrl-C (SIGINT) to `tern exec` while two children run commands: both commands are killed at
/// once, both results are stored as interrupted, the children's sessions say interrupted, the
/// run ends with `result` interrupted and exit 130.
#[test]
fn ctrl_c_cancels_every_child_and_kills_their_commands() {
    let w = Wire::OpenAi;
    let sleeps = ["sleep 35.11", "sleep 35.12"];
    let ws = WireWs::new(
        w,
        vec![crate::support::script::calls(
            w,
            &[
                ("a1", "agent", json!({"task": "first sleeper"})),
                ("a2", "agent", json!({"task": "second sleeper"})),
            ],
        )],
    );
    ws.fake.route(
        "Task: first sleeper",
        vec![bash(w, "s1", &format!("{}; echo late", sleeps[0]))],
    );
    ws.fake
        .route("Task: second sleeper", vec![bash(w, "s2", sleeps[1])]);
    let mut child = ws.spawn(&["exec", "--json", "sleep twice"]);
    let stdout = crate::support::procs::Seen::start(child.stdout.take().unwrap());
    wait_until("both commands run", || {
        sleeps.iter().all(|s| !procs_with(s).is_empty())
    });
    let sent = Instant::now();
    // SAFETY: kill(2) on the tern process this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = wait_exit(&mut child, Duration::from_secs(20)).expect("tern ended");
    assert!(
        sent.elapsed() < Duration::from_secs(10),
        "{:?}",
        sent.elapsed()
    );
    assert_eq!(status.code(), Some(130));
    wait_until("the commands are gone", || {
        sleeps.iter().all(|s| procs_with(s).is_empty())
    });
    let events = events_of(&stdout.finish());
    let last = events.last().unwrap();
    assert_eq!(last["type"], "result");
    assert_eq!(last["status"], "interrupted");
    let parent = ws.session();
    for id in ["a1", "a2"] {
        let r = stored_result(&parent, id);
        assert_eq!(r["is_error"], true);
        assert_eq!(head_of(&content(&r)).1, "interrupted", "{r}");
        let kid = child_of(&parent, id);
        assert_eq!(read_json(&kid.join("meta.json"))["status"], "interrupted");
        assert!(read(&kid.join("report.md")).contains("[interrupted]"));
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Authority: never wider than the parent's live settings and the member's ceiling
// ---------------------------------------------------------------------------------------------

const APPROVALS: [Approval; 3] = [Approval::Never, Approval::Ask, Approval::Auto];

/// Narrowest first, written out here rather than taken from tern's `Ord`, so a wrong order in
/// tern would show.
fn mode_rank(m: Mode) -> u8 {
    match m {
        Mode::ReadOnly => 0,
        Mode::WorkspaceWrite => 1,
        Mode::DangerFullAccess => 2,
    }
}

fn approval_rank(a: Approval) -> u8 {
    match a {
        Approval::Never => 0,
        Approval::Ask => 1,
        Approval::Auto => 2,
    }
}

fn approval_name(a: Approval) -> &'static str {
    match a {
        Approval::Never => "never",
        Approval::Ask => "ask",
        Approval::Auto => "auto",
    }
}

/// A surface that records the approval questions it is asked and answers `answer`.
struct Asked {
    inner: Collect,
    questions: Vec<String>,
}

impl Surface for Asked {
    fn event(&mut self, ev: &tern::event::Envelope) {
        self.inner.event(ev);
    }
    fn approve(&mut self, command: &str) -> Answer {
        self.questions.push(command.to_string());
        self.inner.answer
    }
}

/// Every combination of sandbox (read-only, workspace-write, danger-full-access) × approval
/// (never, ask, auto) for the parent and for the member's ceiling, plus a member with no
/// ceiling: the child's sandbox and approval are the narrower of the two, never wider, in its
/// `agent_start` event and its `meta.json`.
#[test]
fn authority_is_the_intersection_in_every_combination() {
    let mut members = vec![json!({"id": "free", "role": "free"})];
    let mut combos = Vec::new();
    for m in Mode::ALL {
        for a in APPROVALS {
            let id = format!("m-{}-{}", m.as_str(), approval_name(a));
            members.push(
                json!({"id": id, "role": id, "sandbox": m.as_str(), "approval": approval_name(a)}),
            );
            combos.push((id, Some((m, a))));
        }
    }
    combos.push(("free".to_string(), None));
    let calls: Vec<(String, &str, Value)> = combos
        .iter()
        .enumerate()
        .map(|(i, (id, _))| {
            (
                format!("a{i}"),
                "agent",
                json!({"task": format!("check {id}"), "member": id}),
            )
        })
        .collect();
    let calls: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(i, n, a)| (i.as_str(), *n, a.clone()))
        .collect();
    let mut checked = 0;
    for pm in Mode::ALL {
        for pa in APPROVALS {
            let mut cfg = fast_config();
            cfg.sandbox = pm;
            cfg.approval = pa;
            let h = InProc::new(
                Wire::OpenAi,
                vec![crate::support::script::calls(Wire::OpenAi, &calls)],
                cfg,
            );
            write_project_fleet(h.dir.path(), Value::Array(members.clone()));
            let mut ui = Collect::default();
            let mut rt = h.open(&mut ui);
            rt.run_turn("delegate", &mut ui).expect("the parent's turn");
            let starts: BTreeMap<String, (Mode, Approval, String)> = ui
                .of("agent_start")
                .into_iter()
                .map(|e| match e {
                    Event::AgentStart {
                        member,
                        sandbox,
                        approval,
                        child,
                        ..
                    } => (
                        member.clone().unwrap(),
                        (*sandbox, *approval, child.clone()),
                    ),
                    _ => unreachable!(),
                })
                .collect();
            assert_eq!(starts.len(), combos.len(), "every child started");
            for (id, ceiling) in &combos {
                let (want_m, want_a) = match ceiling {
                    Some((m, a)) => (
                        if mode_rank(*m) < mode_rank(pm) {
                            *m
                        } else {
                            pm
                        },
                        if approval_rank(*a) < approval_rank(pa) {
                            *a
                        } else {
                            pa
                        },
                    ),
                    None => (pm, pa),
                };
                let (got_m, got_a, child) = &starts[id];
                assert_eq!(
                    (*got_m, *got_a),
                    (want_m, want_a),
                    "parent {}/{} member {id}",
                    pm.as_str(),
                    approval_name(pa)
                );
                let kid = rt.session().dir.join("agents").join(child);
                let meta = read_json(&kid.join("meta.json"));
                assert_eq!(meta["sandbox"]["mode"], want_m.as_str(), "{meta}");
                // A fresh child's system prompt tells its model the sandbox it really has.
                let system = read(&kid.join("system.txt"));
                assert!(system.contains(want_m.prompt_line()), "{id}: {system}");
                for other in Mode::ALL.into_iter().filter(|m| *m != want_m) {
                    assert!(!system.contains(other.prompt_line()), "{id}: {system}");
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 9 * 10);
}

/// The parent's live setting counts: after the person answered "always" to one of the
/// parent's commands, a child whose member allows auto runs with auto; before it, with ask.
#[test]
fn the_parents_live_always_counts_as_auto_for_its_children() {
    let w = Wire::OpenAi;
    let mut cfg = fast_config();
    cfg.approval = Approval::Ask;
    let h = InProc::new(
        w,
        vec![
            agent(w, "a1", json!({"task": "before"})),
            text(w, "child one"),
            bash(w, "b1", "true"),
            agent(w, "a2", json!({"task": "after"})),
            text(w, "child two"),
            text(w, "done"),
        ],
        cfg,
    );
    let mut ui = Collect {
        answer: Answer::Always,
        ..Collect::default()
    };
    let mut rt = h.open(&mut ui);
    rt.run_turn("go", &mut ui).expect("turn");
    let approvals: Vec<Approval> = ui
        .of("agent_start")
        .into_iter()
        .map(|e| match e {
            Event::AgentStart { approval, .. } => *approval,
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(approvals, [Approval::Ask, Approval::Auto]);
}

/// The narrowed settings are enforced, not only recorded: a read-only child cannot write in the
/// workspace (Landlock), an approval-never child's command is refused with the reason its
/// model reads, and an ask child's question reaches the parent's surface naming the child.
#[test]
fn a_childs_narrowed_settings_are_enforced() {
    if tern::sandbox::landlock_abi().is_err() {
        crate::support::skipped(
            "agents::a_childs_narrowed_settings_are_enforced",
            "no Landlock here",
            false,
        );
        return;
    }
    let w = Wire::OpenAi;
    let mut cfg = fast_config();
    cfg.approval = Approval::Ask;
    cfg.sandbox = Mode::DangerFullAccess;
    let h = InProc::new(
        w,
        vec![
            agent(w, "a1", json!({"task": "write", "member": "ro"})),
            bash(w, "c1", "touch ro.txt"),
            text(w, "could not"),
            agent(w, "a2", json!({"task": "run", "member": "planner"})),
            bash(w, "c2", "touch never.txt"),
            text(w, "refused"),
            agent(w, "a3", json!({"task": "ask first"})),
            bash(w, "c3", "touch asked.txt"),
            text(w, "asked"),
            text(w, "done"),
        ],
        cfg,
    );
    write_project_fleet(
        h.dir.path(),
        json!([
            {"id": "ro", "role": "reader", "sandbox": "read-only"},
            {"id": "planner", "role": "plan", "approval": "never"},
        ]),
    );
    let mut ui = Asked {
        inner: Collect::default(),
        questions: Vec::new(),
    };
    let mut rt = h
        .launcher
        .open(
            &tern::launcher::SessionRef::New { title: "t".into() },
            &mut ui,
        )
        .expect("open");
    rt.run_turn("go", &mut ui).expect("turn");
    let parent = rt.session().dir.clone();
    let ws = h.dir.path();
    assert!(!ws.join("ro.txt").exists(), "a read-only child wrote");
    let r = stored_result(&child_of(&parent, "a1"), "c1");
    assert!(content(&r).contains("Permission denied"), "{r}");
    assert!(!ws.join("never.txt").exists());
    let r = stored_result(&child_of(&parent, "a2"), "c2");
    assert_eq!(r["is_error"], true);
    assert!(content(&r).contains("--approval never"), "{r}");
    // The ask children (the read-only one has no approval ceiling: ask, as its parent) asked
    // on the parent's surface, each question naming its child; the never child asked nothing.
    let reader = id_of(&child_of(&parent, "a1"));
    let asker = id_of(&child_of(&parent, "a3"));
    assert_eq!(
        ui.questions,
        [
            format!("[sub-agent {reader}] touch ro.txt"),
            format!("[sub-agent {asker}] touch asked.txt")
        ]
    );
    assert!(ws.join("asked.txt").exists());
}

/// The call's own request narrows too: `read_only: true` gives the child a read-only sandbox
/// under a parent with full access and a member with no ceiling (recorded and enforced), and
/// `read_only: false` never widens a read-only parent.
#[test]
fn the_calls_read_only_request_narrows_never_widens() {
    let w = Wire::OpenAi;
    let enforce = tern::sandbox::landlock_abi().is_ok();
    let mut cfg = fast_config();
    cfg.sandbox = Mode::DangerFullAccess;
    let h = InProc::new(
        w,
        vec![
            agent(w, "a1", json!({"task": "write", "read_only": true})),
            bash(w, "c1", "touch asked-ro.txt"),
            text(w, "could not"),
            agent(w, "a2", json!({"task": "write too", "read_only": false})),
            bash(w, "c2", "touch free.txt"),
            text(w, "wrote"),
            text(w, "done"),
        ],
        cfg,
    );
    let mut ui = Collect::default();
    let mut rt = h.open(&mut ui);
    rt.run_turn("go", &mut ui).expect("turn");
    let modes: Vec<Mode> = ui
        .of("agent_start")
        .into_iter()
        .map(|e| match e {
            Event::AgentStart { sandbox, .. } => *sandbox,
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(modes, [Mode::ReadOnly, Mode::DangerFullAccess]);
    let ws = h.dir.path();
    if enforce {
        assert!(!ws.join("asked-ro.txt").exists(), "a read-only child wrote");
    }
    assert!(ws.join("free.txt").exists());

    let mut cfg = fast_config();
    cfg.sandbox = Mode::ReadOnly;
    let h = InProc::new(
        w,
        vec![
            agent(w, "a1", json!({"task": "write", "read_only": false})),
            text(w, "child"),
            text(w, "done"),
        ],
        cfg,
    );
    let mut ui = Collect::default();
    let mut rt = h.open(&mut ui);
    rt.run_turn("go", &mut ui).expect("turn");
    assert!(matches!(
        ui.of("agent_start").as_slice(),
        [Event::AgentStart {
            sandbox: Mode::ReadOnly,
            ..
        }]
    ));
}

/// Runs `cmd` in a new session without a controlling terminal (else, run from a developer's
/// terminal, tern would ask there).
fn no_terminal(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid is async-signal-safe and touches nothing of the parent's state.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
}

/// Headless (`tern exec --approval ask`, no terminal): a child's command is not run; the
/// refusal names the child on stderr, and the child's model reads the reason in its next
/// request.
#[test]
fn a_childs_question_with_no_one_to_ask_is_refused_with_a_reason_it_reads() {
    let w = Wire::OpenAi;
    let ws = WireWs::new(
        w,
        vec![
            agent(w, "a1", json!({"task": "make the file"})),
            bash(w, "c1", "touch headless.txt"),
            text(w, "I could not run it."),
            text(w, "The child could not."),
        ],
    );
    let mut cmd = ws.cmd(&["exec", "--approval", "ask", "delegate"]);
    no_terminal(&mut cmd);
    let out = ok_no_stdin(cmd);
    assert!(!ws.root().join("headless.txt").exists(), "ran unasked");
    let child = child_of(&ws.session(), "a1");
    assert!(
        out.stderr.contains(&format!(
            "no terminal to ask on): [sub-agent {}] touch headless.txt",
            id_of(&child)
        )),
        "{out:?}"
    );
    let r = stored_result(&child, "c1");
    assert_eq!(r["is_error"], true);
    assert!(
        content(&r).contains("there is no terminal to ask on"),
        "{r}"
    );
    let reqs = ws.fake.requests();
    assert!(
        reqs[2]
            .body_str()
            .contains("there is no terminal to ask on"),
        "the child's model reads why"
    );
}

/// The REPL asks the person a child's question, naming the child; `y` runs it, `n` refuses it
/// (the child's model reads that the person declined).
#[test]
fn the_repl_asks_the_person_naming_the_child() {
    let w = Wire::OpenAi;
    let ws = WireWs::new(
        w,
        vec![
            agent(w, "a1", json!({"task": "make one"})),
            bash(w, "c1", "touch repl_yes.txt"),
            text(w, "made it"),
            text(w, "the child made it"),
            agent(w, "a2", json!({"task": "make another"})),
            bash(w, "c2", "touch repl_no.txt"),
            text(w, "declined"),
            text(w, "the child was declined"),
        ],
    );
    let mut cmd = ws.cmd(&["chat", "--approval", "ask"]);
    cmd.stdin(Stdio::piped());
    let out = crate::support::cli::run(cmd, "first\ny\nsecond\nn\n/quit\n");
    assert_eq!(out.code, Some(0), "{out:?}");
    let parent = ws.session();
    let (one, two) = (child_of(&parent, "a1"), child_of(&parent, "a2"));
    for (kid, file) in [(&one, "repl_yes.txt"), (&two, "repl_no.txt")] {
        assert!(
            out.stderr.contains(&format!(
                "tern wants to run:\n  [sub-agent {}] touch {file}\n",
                id_of(kid)
            )),
            "{out:?}"
        );
    }
    assert!(ws.root().join("repl_yes.txt").exists());
    assert!(!ws.root().join("repl_no.txt").exists());
    let r = stored_result(&two, "c2");
    assert!(content(&r).contains("the person declined"), "{r}");
}

/// Keys go only to their provider's server: a member of the parent's provider without a
/// base URL of its own gets that provider's key; one on another server gets none; an Anthropic
/// member gets no OpenAI key (none at all without ANTHROPIC_API_KEY, that key with it); an
/// Anthropic member on the default server without its key cannot run: an error result listing
/// the members, no child. Every child's usage event records the member's model.
#[test]
fn keys_go_only_to_their_providers_server_and_usage_records_the_model() {
    let w = Wire::OpenAi;
    const OKEY: &str = "sk-parent-openai-key-0123456789";
    const AKEY: &str = "sk-ant-member-key-9876543210";
    let other = FakeServer::start(vec![text(w, "other here")]);
    let ws = WireWs::new(
        w,
        vec![
            agent(w, "a1", json!({"task": "t1", "member": "same"})),
            text(w, "same here"),
            agent(w, "a2", json!({"task": "t2", "member": "other"})),
            agent(w, "a3", json!({"task": "t3", "member": "claude"})),
            text(Wire::Anthropic, "claude here"),
            agent(w, "a4", json!({"task": "t4", "member": "claude-default"})),
            text(w, "done"),
        ],
    );
    write_project_fleet(
        ws.root(),
        json!([
            {"id": "same", "role": "r1", "provider": "openai", "model": "m-same"},
            {"id": "other", "role": "r2", "provider": "openai", "model": "m-other",
             "base_url": other.openai_base()},
            {"id": "claude", "role": "r3", "provider": "anthropic", "model": "c-1",
             "base_url": ws.fake.base_url()},
            {"id": "claude-default", "role": "r4", "provider": "anthropic", "model": "c-2"},
        ]),
    );
    let mut cmd = ws.cmd(&["exec", "go"]);
    cmd.env("OPENAI_API_KEY", OKEY);
    let out = run_no_stdin(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    let parent = ws.session();

    let auth = |r: &Recorded| {
        (
            r.header("authorization").map(str::to_string),
            r.header("x-api-key").map(str::to_string),
        )
    };
    let bearer = Some(format!("Bearer {OKEY}"));
    for r in ws.fake.requests() {
        match model_of(&r).as_str() {
            "m" | "m-same" => assert_eq!(auth(&r), (bearer.clone(), None), "{}", r.path),
            "c-1" => {
                assert!(r.path.ends_with("/messages"));
                assert_eq!(auth(&r), (None, None), "no key for another provider");
            }
            other => panic!("unexpected model {other}"),
        }
    }
    let reqs = other.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(model_of(&reqs[0]), "m-other");
    assert_eq!(
        auth(&reqs[0]),
        (None, None),
        "another server never gets the key"
    );

    for (call, model) in [("a1", "m-same"), ("a2", "m-other"), ("a3", "c-1")] {
        let kid = child_of(&parent, call);
        let usage = of_type(&jsonl(&kid.join("events.jsonl")), "usage")
            .into_iter()
            .cloned()
            .collect::<Vec<_>>();
        assert_eq!(usage.len(), 1);
        assert_eq!(usage[0]["model"], model);
        assert_eq!(read_json(&kid.join("meta.json"))["model"], model);
    }
    let refused = stored_result(&parent, "a4");
    assert_eq!(refused["is_error"], true);
    let c = content(&refused);
    assert!(c.contains("ANTHROPIC_API_KEY"), "{c}");
    assert!(
        c.contains("the members are: same (r1), other (r2), claude (r3), claude-default (r4)"),
        "{c}"
    );
    assert_eq!(
        child_dirs(&parent).len(),
        3,
        "no child for the member that cannot run"
    );

    // With its own key, the Anthropic member gets that key, never the OpenAI one.
    let ws = WireWs::new(
        w,
        vec![
            agent(w, "a1", json!({"task": "t", "member": "claude-keyed"})),
            text(Wire::Anthropic, "claude here"),
            text(w, "done"),
        ],
    );
    write_project_fleet(
        ws.root(),
        json!([{"id": "claude-keyed", "role": "r", "provider": "anthropic", "model": "c-3"}]),
    );
    let mut cmd = ws.cmd(&["exec", "go"]);
    cmd.env("OPENAI_API_KEY", OKEY)
        .env("ANTHROPIC_API_KEY", AKEY)
        .env("ANTHROPIC_BASE_URL", ws.fake.base_url());
    let out = run_no_stdin(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    let reqs = ws.fake.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(model_of(&reqs[1]), "c-3");
    assert_eq!(auth(&reqs[1]), (None, Some(AKEY.to_string())));
    assert_eq!(auth(&reqs[0]), (bearer.clone(), None));
}

// ---------------------------------------------------------------------------------------------
// 5. Durable and visible
// ---------------------------------------------------------------------------------------------

/// The parent call → child record is on disk before the child's first request is answered (its
/// folder under the parent's, `meta.json` naming the call, `agent_start` in the parent's
/// events); `.tern/current` stays the parent's; `tern sessions` lists the child under its
/// parent; the parent's event stream carries `agent_start` / `agent_end` and none of the
/// child's own events, which are in the child's `events.jsonl`, each naming the parent.
#[test]
fn the_record_precedes_the_child_and_the_parents_stream_is_bounded() {
    let w = Wire::OpenAi;
    let ws = WireWs::new(
        w,
        vec![
            agent(w, "a1", json!({"task": "do the work"})),
            work(
                w,
                "w1",
                vec![
                    todo("1", "one", "completed"),
                    todo("2", "two", "in_progress"),
                ],
            ),
            bash(w, "b1", "echo working"),
            text(w, "child finished").delay_before(Duration::from_millis(3000)),
            text(w, "parent finished"),
        ],
    );
    let mut tern = ws.spawn(&["exec", "--json", "delegate"]);
    let stdout = crate::support::procs::Seen::start(tern.stdout.take().unwrap());
    wait_until("the child's last request", || ws.fake.requests().len() >= 4);
    let parent = ws.session();
    let parent_id = id_of(&parent);
    let kid = child_of(&parent, "a1");
    let kid_id = id_of(&kid);
    let meta = read_json(&kid.join("meta.json"));
    assert_eq!(meta["status"], "running", "{meta}");
    assert_eq!(meta["parent"]["session"], parent_id.as_str());
    assert_eq!(meta["parent"]["fork"], false);
    let starts = of_type(&jsonl(&parent.join("events.jsonl")), "agent_start")
        .into_iter()
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(starts.len(), 1);
    assert_eq!(starts[0]["child"], kid_id.as_str());
    assert_eq!(
        ws.ws.current_id(),
        parent_id,
        "a child never becomes current"
    );
    let listing = ok_no_stdin(ws.cmd(&["sessions"])).stdout;
    let lines: Vec<&str> = listing.lines().collect();
    let at = lines
        .iter()
        .position(|l| l[2..].starts_with(&parent_id))
        .unwrap_or_else(|| panic!("{listing}"));
    assert!(
        lines[at + 1][2..].starts_with(&format!("└ {kid_id}")),
        "the child sits under its parent:\n{listing}"
    );
    assert!(lines[at + 1].contains("running"), "{listing}");

    let status = wait_exit(&mut tern, Duration::from_secs(60)).expect("tern ended");
    assert_eq!(status.code(), Some(0));
    let events = events_of(&stdout.finish());
    assert!(
        events
            .iter()
            .all(|e| e["session"] == parent_id.as_str() && e.get("parent").is_none())
    );
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "agent_start").count(), 1);
    assert_eq!(kinds.iter().filter(|k| **k == "agent_end").count(), 1);
    assert_eq!(
        kinds.iter().filter(|k| **k == "usage").count(),
        2,
        "the parent's own two requests; the child's three are in its own file"
    );
    assert!(
        !kinds.contains(&"work_update"),
        "the child's ledger events stay in the child"
    );
    let end = events.iter().find(|e| e["type"] == "agent_end").unwrap();
    assert_eq!(end["status"], "completed");
    assert_eq!(end["requests"], 3);
    let kid_events = jsonl(&kid.join("events.jsonl"));
    assert_eq!(of_type(&kid_events, "usage").len(), 3);
    assert!(kid_events.iter().all(|e| e["parent"] == parent_id.as_str()));
    assert_eq!(ws.ws.current_id(), parent_id);
    let listing = ok_no_stdin(ws.cmd(&["sessions"])).stdout;
    assert!(listing.contains(&format!("└ {kid_id}")), "{listing}");
    assert_eq!(read_json(&kid.join("meta.json"))["status"], "completed");
}

/// SIGKILL while a child's command runs, then `tern exec --continue` against a strict server:
/// the child is marked interrupted (and said so), the parent's repaired result names the child
/// session, the request is valid, and no command of the child is left running.
#[test]
fn a_crash_during_a_child_then_continue_names_the_child_and_leaves_nothing_running() {
    let w = Wire::OpenAi;
    // A list, so bash forks the sleep: it outlives the shell and tern (an orphan the reopen
    // must kill), unlike a lone command the shell would exec.
    let sleep = "sleep 41.37";
    let ws = WireWs::new(
        w,
        vec![
            agent(w, "a1", json!({"task": "sleep a while"})),
            bash(w, "b1", &format!("{sleep}; echo late")),
        ],
    );
    let mut tern = ws.cmd(&["exec", "go"]);
    tern.stdout(Stdio::null()).stderr(Stdio::null());
    let mut tern = tern.spawn().expect("spawn tern");
    wait_until("the child's command runs", || !procs_with(sleep).is_empty());
    let parent = ws.session();
    let kid = child_of(&parent, "a1");
    let kid_id = id_of(&kid);
    assert_eq!(read_json(&kid.join("meta.json"))["status"], "running");
    tern.kill().expect("SIGKILL tern");
    tern.wait().expect("reap tern");
    let survived = !procs_with(sleep).is_empty();
    eprintln!("the child's command survived the crash: {survived}");

    let strict = FakeServer::strict(vec![text(w, "Resumed.")]);
    let mut cmd = ws.ws.tern(&strict);
    cmd.args(["exec", "--json", "--continue", "go on"]);
    let out = ok_no_stdin(cmd);
    let events = events_of(&out.stdout);
    let warned = of_type(&events, "warning").iter().any(|e| {
        e["message"]
            == format!(
                "the sub-agent session {kid_id} was running when tern stopped: marked interrupted"
            )
    });
    assert!(warned, "{out:?}");
    assert_eq!(read_json(&kid.join("meta.json"))["status"], "interrupted");
    let r = stored_result(&parent, "a1");
    assert_eq!(r["is_error"], true);
    let c = content(&r);
    assert!(
        c.contains(&format!("the sub-agent session {kid_id} was running"))
            && c.contains("marked interrupted")
            && c.contains(&kid.display().to_string()),
        "{c}"
    );
    let reqs = strict.requests();
    assert_eq!(
        reqs.len(),
        1,
        "the strict server accepted the first request"
    );
    validate(w, &reqs[0].json()).expect("a valid request");
    assert!(reqs[0].body_str().contains(&kid_id));
    wait_until(
        &format!("no sleep left (it survived the crash: {survived})"),
        || procs_with(sleep).is_empty(),
    );
    let last = events.last().unwrap();
    assert_eq!(last["status"], "completed");
}

/// `tern status` (text and `--json`) shows the running children with their To-do progress.
#[test]
fn status_shows_running_children_with_their_todo_progress() {
    let w = Wire::OpenAi;
    let ws = WireWs::new(
        w,
        vec![
            agent(w, "a1", json!({"task": "do the work"})),
            work(
                w,
                "w1",
                vec![
                    todo("1", "one", "completed"),
                    todo("2", "two", "in_progress"),
                ],
            ),
            text(w, "child finished").delay_before(Duration::from_millis(2500)),
            text(w, "parent finished"),
        ],
    );
    let mut tern = ws.spawn(&["exec", "delegate"]);
    wait_until("the child's last request", || ws.fake.requests().len() >= 3);
    let kid = id_of(&child_of(&ws.session(), "a1"));
    let shown = ok_no_stdin(ws.cmd(&["status"])).stdout;
    let json: Value =
        serde_json::from_str(&ok_no_stdin(ws.cmd(&["status", "--json"])).stdout).unwrap();
    let status = wait_exit(&mut tern, Duration::from_secs(60)).expect("tern ended");
    assert_eq!(status.code(), Some(0));
    assert!(
        shown.contains(&format!("Agent {kid}: running, 1/2 settled (do the work)")),
        "{shown}"
    );
    assert_eq!(
        json["children"],
        json!([{"session": kid, "title": "do the work", "settled": 1, "total": 2, "depth": 1}]),
        "{json}"
    );
    // Once it ended, it is no longer shown.
    let after = ok_no_stdin(ws.cmd(&["status"])).stdout;
    assert!(!after.contains("Agent "), "{after}");
}

// ---------------------------------------------------------------------------------------------
// 6. The Fleet
// ---------------------------------------------------------------------------------------------

/// `tern fleet list` / `check` with the user's file (`$XDG_CONFIG_HOME/tern/fleet.json`, else
/// `~/.config/tern/fleet.json`) under the project's: a project member replaces the user's of
/// the same id whole; `check` resolves each route here and fails (exit 1) naming the member
/// that cannot run.
#[test]
fn fleet_list_and_check_read_the_project_over_the_user_file() {
    let ws = WireWs::new(Wire::OpenAi, Vec::new());
    let xdg = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(xdg.path().join("tern")).unwrap();
    std::fs::write(
        xdg.path().join("tern/fleet.json"),
        fleet(json!([
            {"id": "exp", "role": "explore", "max_turns": 5},
            {"id": "rev", "role": "review", "approval": "never"},
        ])),
    )
    .unwrap();
    write_project_fleet(
        ws.root(),
        json!([
            {"id": "rev", "role": "review", "sandbox": "read-only"},
            {"id": "impl", "role": "implement", "provider": "openai", "model": "M-Impl",
             "wall_time_s": 90, "token_budget": 5000},
        ]),
    );
    let list = |extra: &[&str]| {
        let mut args = vec!["fleet"];
        args.extend_from_slice(extra);
        let mut cmd = ws.cmd(&args);
        cmd.env("XDG_CONFIG_HOME", xdg.path());
        run_no_stdin(cmd)
    };
    let out = list(&["list", "--json"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let members: Vec<Value> = v["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["member"].clone())
        .collect();
    assert_eq!(
        members,
        [
            json!({"id": "exp", "role": "explore", "max_turns": 5}),
            json!({"id": "rev", "role": "review", "sandbox": "read-only"}),
            json!({"id": "impl", "role": "implement", "provider": "openai", "model": "M-Impl",
                   "wall_time_s": 90, "token_budget": 5000}),
        ],
        "user members first, the project's rev replacing the user's whole"
    );
    assert_eq!(
        v["sources"],
        json!([
            xdg.path().join("tern/fleet.json"),
            ws.root().join(".tern/fleet.json")
        ])
    );
    let text_out = list(&["list"]).stdout;
    assert!(
        text_out.contains("rev") && text_out.contains("sandbox ≤ read-only"),
        "{text_out}"
    );
    // The budgets, and the model as written (model names are case-sensitive).
    assert!(
        text_out.contains("exp") && text_out.contains("max 5 turns"),
        "{text_out}"
    );
    assert!(
        text_out.contains("openai/M-Impl · wall time 90 s · 5000 tokens"),
        "{text_out}"
    );

    // check: every route resolves here (impl uses this environment's OpenAI server).
    let out = list(&["check"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    // A member that cannot run: check fails and names it.
    write_project_fleet(
        ws.root(),
        json!([{"id": "claude", "role": "r", "provider": "anthropic", "model": "c"}]),
    );
    let out = list(&["check"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stdout.contains("claude") && out.stdout.contains("CANNOT RUN"),
        "{out:?}"
    );

    // Without XDG_CONFIG_HOME the user file is under HOME (WireWs sets HOME to `.home/`).
    std::fs::remove_file(ws.root().join(".tern/fleet.json")).unwrap();
    std::fs::create_dir_all(ws.root().join(".home/.config/tern")).unwrap();
    std::fs::write(
        ws.root().join(".home/.config/tern/fleet.json"),
        fleet(json!([{"id": "home", "role": "r"}])),
    )
    .unwrap();
    let out = ok_no_stdin(ws.cmd(&["fleet", "list", "--json"]));
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["members"][0]["member"]["id"], "home");
}

/// Files that are refused (each naming the file): an unknown field, a provider without a model
/// (or a model without a provider), a duplicate role, a duplicate id within one file, a bad id,
/// a base URL without a route, JSON that does not parse. An `agent` call naming a member then
/// gets an error result, and no child runs.
#[test]
fn bad_fleet_files_are_refused_and_an_agent_call_fails_closed() {
    let bad = [
        (
            "unknown field",
            json!([{"id": "a", "role": "r", "colour": "red"}]),
        ),
        (
            "model without provider",
            json!([{"id": "a", "role": "r", "model": "m"}]),
        ),
        (
            "provider without model",
            json!([{"id": "a", "role": "r", "provider": "openai"}]),
        ),
        (
            "duplicate role",
            json!([{"id": "a", "role": "r"}, {"id": "b", "role": "r"}]),
        ),
        (
            "duplicate id",
            json!([{"id": "a", "role": "r1"}, {"id": "a", "role": "r2"}]),
        ),
        ("bad id", json!([{"id": "A b", "role": "r"}])),
        (
            "zero turns",
            json!([{"id": "a", "role": "r", "max_turns": 0}]),
        ),
        (
            "zero wall time",
            json!([{"id": "a", "role": "r", "wall_time_s": 0}]),
        ),
        (
            "zero tokens",
            json!([{"id": "a", "role": "r", "token_budget": 0}]),
        ),
        (
            "base_url alone",
            json!([{"id": "a", "role": "r", "base_url": "http://x"}]),
        ),
    ];
    for (what, members) in bad {
        let w = Wire::OpenAi;
        let ws = WireWs::new(
            w,
            vec![
                agent(w, "a1", json!({"task": "t", "member": "a"})),
                text(w, "done"),
            ],
        );
        write_project_fleet(ws.root(), members);
        let out = run_no_stdin(ws.cmd(&["fleet", "list"]));
        assert_eq!(out.code, Some(1), "{what}: {out:?}");
        assert!(out.stderr.contains("fleet.json"), "{what}: {out:?}");
        ws.ok(&["exec", "go"]);
        let r = stored_result(&ws.session(), "a1");
        assert_eq!(r["is_error"], true, "{what}");
        assert!(content(&r).contains("fleet.json"), "{what}: {r}");
        assert!(child_dirs(&ws.session()).is_empty(), "{what}");
        assert_eq!(ws.fake.requests().len(), 2, "{what}: no child request");
    }
    let ws = WireWs::new(Wire::OpenAi, Vec::new());
    std::fs::write(ws.root().join(".tern/fleet.json"), "not json").unwrap();
    let out = run_no_stdin(ws.cmd(&["fleet", "list"]));
    assert_eq!(out.code, Some(1), "{out:?}");
    // A top-level array (serde would read the struct's fields from it in order): refused.
    for text in [r#"[[{"id": "a", "role": "r"}]]"#, "[]", "null"] {
        std::fs::write(ws.root().join(".tern/fleet.json"), text).unwrap();
        let out = run_no_stdin(ws.cmd(&["fleet", "list"]));
        assert_eq!(out.code, Some(1), "{text}: {out:?}");
        assert!(
            out.stderr.contains("a Fleet file is a JSON object"),
            "{text}: {out:?}"
        );
    }
}

/// Selection is by id, then by role, exactly; an unknown name is an error result listing the
/// members, never a substitute: no child, no request. A fork naming a member of another model
/// is refused the same way; without fork it runs on that model.
#[test]
fn selection_is_by_id_then_role_and_fails_closed() {
    let w = Wire::OpenAi;
    let ws = WireWs::new(
        w,
        vec![
            agent(w, "a1", json!({"task": "by id", "member": "review"})),
            text(w, "id chosen"),
            agent(w, "a2", json!({"task": "by role", "member": "checker"})),
            text(w, "role chosen"),
            agent(w, "a3", json!({"task": "nobody", "member": "reviewer"})),
            agent(
                w,
                "a4",
                json!({"task": "fork other", "member": "big", "fork": true}),
            ),
            agent(
                w,
                "a5",
                json!({"task": "fork same", "member": "review", "fork": true}),
            ),
            text(w, "forked"),
            agent(w, "a6", json!({"task": "fresh other", "member": "big"})),
            text(w, "big here"),
            agent(
                w,
                "a7",
                json!({"task": "fork wire", "member": "anth", "fork": true}),
            ),
            agent(
                w,
                "a8",
                json!({"task": "fork url", "member": "elsewhere", "fork": true}),
            ),
            text(w, "done"),
        ],
    );
    let url = ws.fake.openai_base();
    // "review" is one member's id and the other's role: the id wins.
    write_project_fleet(
        ws.root(),
        json!([
            {"id": "review", "role": "checker"},
            {"id": "x", "role": "review"},
            {"id": "big", "role": "large", "provider": "openai", "model": "m-big"},
            // The parent's model and server, the other wire format: its cache is not the
            // parent's.
            {"id": "anth", "role": "a", "provider": "anthropic", "model": "m", "base_url": url},
            // The same model on another server.
            {"id": "elsewhere", "role": "e", "provider": "openai", "model": "m",
             "base_url": "http://127.0.0.1:9/v1"},
        ]),
    );
    ws.ok(&["exec", "pick"]);
    let parent = ws.session();
    let member = |call: &str| {
        read_json(&child_of(&parent, call).join("meta.json"))["parent"]["member"].clone()
    };
    assert_eq!(member("a1"), "review");
    assert_eq!(member("a2"), "review", "by role: checker is review's role");
    let listing =
        "the members are: review (checker), x (review), big (large), anth (a), elsewhere (e)";
    let r = content(&stored_result(&parent, "a3"));
    assert!(
        r.contains("there is no fleet member \"reviewer\"") && r.contains(listing),
        "{r}"
    );
    let r = content(&stored_result(&parent, "a4"));
    assert!(
        r.starts_with(
            "Error: a fork runs on the parent's route and reads its cache; member big differs in model m-big (the parent's: m)"
        ),
        "{r}"
    );
    // The route check compares provider, base URL and model, naming only what differs.
    let r = content(&stored_result(&parent, "a7"));
    assert!(
        r.contains(
            "member anth differs in provider anthropic (the parent's: openai). Call it without fork"
        ),
        "{r}"
    );
    let r = content(&stored_result(&parent, "a8"));
    assert!(
        r.contains("member elsewhere differs in base URL http://127.0.0.1:9/v1 (the parent's: ")
            && !r.contains("model"),
        "{r}"
    );
    assert_eq!(
        read_json(&child_of(&parent, "a5").join("meta.json"))["parent"]["fork"],
        true
    );
    let big = child_of(&parent, "a6");
    assert_eq!(read_json(&big.join("meta.json"))["model"], "m-big");
    assert_eq!(
        child_dirs(&parent).len(),
        4,
        "a3, a4, a7 and a8 opened nothing"
    );
    let models: Vec<String> = ws.fake.requests().iter().map(model_of).collect();
    assert_eq!(
        models,
        [
            "m", "m", "m", "m", "m", "m", "m", "m", "m", "m-big", "m", "m", "m"
        ],
        "no request for the refused calls; the fresh big child on its own model"
    );
}

// ---------------------------------------------------------------------------------------------
// 7. The cache key
// ---------------------------------------------------------------------------------------------

/// Where `prompt_cache_key` is sent (the launcher turns it on only for api.openai.com; here a
/// real OpenAI provider on the fake server with the setting on), a fork and a fresh child send
/// the parent's key, the parent's session id, not their own; a grandchild too.
#[test]
fn children_and_forks_send_the_parents_cache_key() {
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        crate::support::script::calls(
            w,
            &[("a1", "agent", json!({"task": "forked", "fork": true}))],
        ),
        agent(w, "a2", json!({"task": "nested"})),
        text(w, "grandchild"),
        text(w, "fork done"),
        agent(w, "a3", json!({"task": "fresh"})),
        text(w, "fresh done"),
        text(w, "done"),
    ]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".tern")).unwrap();
    let mut cfg = fast_config();
    cfg.send_cache_key = true;
    let provider = tern::provider::openai::OpenAi::new(
        tern::provider::http::HttpConfig::default(),
        &fake.openai_base(),
        None,
    );
    let launcher = crate::support::harness::launcher(dir.path(), &fake, w, cfg)
        .with_provider(Box::new(provider), "m");
    let mut ui = Collect::default();
    let mut rt = launcher
        .open(
            &tern::launcher::SessionRef::New { title: "t".into() },
            &mut ui,
        )
        .expect("open");
    rt.run_turn("go", &mut ui).expect("turn");
    let parent_id = rt.session().id.clone();
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 7);
    for r in &reqs {
        assert_eq!(
            r.json()["prompt_cache_key"],
            parent_id.as_str(),
            "{}",
            r.body_str()
        );
    }
    let fork = child_of(&rt.session().dir, "a1");
    assert!(child_of(&fork, "a2").is_dir(), "the grandchild ran");
}

/// A provider that panics on any request containing `needle`, else forwards to `inner`: a
/// fault injected at the provider boundary, to see what a child's panic does to its parent.
struct PanicsOn {
    inner: tern::provider::openai::OpenAi,
    needle: &'static str,
}

impl tern::provider::Provider for PanicsOn {
    fn name(&self) -> tern::provider::Wire {
        tern::provider::Wire::Openai
    }
    fn body(&self, req: &tern::provider::Request<'_>) -> Vec<u8> {
        self.inner.body(req)
    }
    fn complete(
        &mut self,
        body: &[u8],
        purpose: tern::event::Purpose,
        on_text: &mut dyn FnMut(tern::provider::Streamed<'_>),
        cancel: &tern::cancel::CancelToken,
    ) -> Result<tern::provider::Completion, tern::provider::ProviderError> {
        if String::from_utf8_lossy(body).contains(self.needle) {
            panic!("injected: a child's request panicked");
        }
        self.inner.complete(body, purpose, on_text, cancel)
    }
}

/// A child whose thread panics does not hang its parent: the call gets an error result naming
/// the child, its sibling's result is stored, the child's record says failed.
#[test]
fn a_panicking_child_never_hangs_its_parent() {
    let w = Wire::OpenAi;
    let fake = FakeServer::start(vec![
        crate::support::script::calls(
            w,
            &[
                ("a1", "agent", json!({"task": "explode"})),
                ("a2", "agent", json!({"task": "calm"})),
            ],
        ),
        text(w, "calm done"),
        text(w, "one of two"),
    ]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".tern")).unwrap();
    let provider = PanicsOn {
        inner: tern::provider::openai::OpenAi::new(
            tern::provider::http::HttpConfig::default(),
            &fake.openai_base(),
            None,
        ),
        needle: "Task: explode",
    };
    let launcher = crate::support::harness::launcher(dir.path(), &fake, w, fast_config())
        .with_provider(Box::new(provider), "m");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut ui = Collect::default();
        let mut rt = launcher
            .open(
                &tern::launcher::SessionRef::New { title: "t".into() },
                &mut ui,
            )
            .expect("open");
        let outcome = rt.run_turn("go", &mut ui);
        let _ = tx.send((outcome, rt.session().dir.clone()));
    });
    let (outcome, parent) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the parent's turn ended (a panicked child must not hang it)");
    assert_eq!(outcome.as_deref(), Ok("one of two"));
    let r = stored_result(&parent, "a1");
    assert_eq!(r["is_error"], true);
    let kid = child_of(&parent, "a1");
    assert!(
        content(&r).contains(&format!(
            "the sub-agent {} stopped on an internal error",
            id_of(&kid)
        )),
        "{r}"
    );
    assert_eq!(read_json(&kid.join("meta.json"))["status"], "failed");
    assert!(content(&stored_result(&parent, "a2")).ends_with("\ncalm done"));
}

/// A child whose provider refuses its request ends `failed`: an error result with the status,
/// the partial output and the error.
#[test]
fn a_child_whose_request_fails_ends_failed() {
    let w = Wire::OpenAi;
    let ws = WireWs::new(
        w,
        vec![
            agent(w, "a1", json!({"task": "doomed"})),
            with_text(bash(w, "b1", "echo started"), "started the work"),
            crate::support::Reply::status(
                400,
                r#"{"error":{"message":"bad request, not retried"}}"#,
            ),
            text(w, "the child failed"),
        ],
    );
    ws.ok(&["exec", "--max-retry-time", "0", "go"]);
    let r = stored_result(&ws.session(), "a1");
    assert_eq!(r["is_error"], true);
    let c = content(&r);
    assert_eq!(head_of(&c).1, "failed", "{c}");
    // The refused request is a request (issue 18 item 3): two, not one.
    assert_eq!(head_of(&c).2, 2, "{c}");
    let body = c.split_once('\n').unwrap().1;
    assert!(body.starts_with("started the work\n[failed: "), "{body}");
    assert!(body.contains("bad request, not retried"), "{body}");
    let kid = child_of(&ws.session(), "a1");
    assert_eq!(read_json(&kid.join("meta.json"))["status"], "failed");
    assert_eq!(read_json(&kid.join("meta.json"))["turns"], 2);
}

/// Issue 30, item 5: the README's list of the statuses a child can end with is the code's own
/// (`Ending::ALL`, the type of the `agent_end` status and the result's head), no more, no less.
#[test]
fn the_readme_lists_every_status_a_child_can_end_with() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/agents.md"))
            .expect("docs/agents.md");
    let start = readme
        .find("A child's status is one of:")
        .expect("the README lists a child's statuses");
    let list = &readme[start..];
    // The list ends at its first sentence's end: the last item's closing ").".
    let list = &list[..list.find(").").map_or(list.len(), |i| i + 2)];
    let said: std::collections::BTreeSet<String> = list
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    let code: std::collections::BTreeSet<String> = tern::event::Ending::ALL
        .iter()
        .map(|e| e.as_str().to_string())
        .collect();
    assert_eq!(said, code, "README: {list}");
}
