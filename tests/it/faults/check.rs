//! The invariants a crash must not break, checked on what tern left on disk and on what the strict
//! fake provider received (DESIGN.md §3 and §12, state/README.md). Each violation names its
//! invariant by a stable key, so the sweep can count them by kind:
//!
//! - `resume_failed`: the run after the crash did not complete (exit other than 0, a panic, a
//!   hang; "no session yet" is fine only when no session was ever made current);
//! - `request_invalid`: a request after the crash that a strict provider refuses (400);
//! - `unparseable`: a JSON state file that does not parse, a JSONL line that is not one JSON
//!   object, a JSONL file not ending in a newline (a torn tail may only survive in an archive
//!   copy, as its last line);
//! - `result_lost`: a `tool_result` that was acknowledged (in `events.jsonl` or on `--json`
//!   stdout) before the crash, whose result is not in the history (or was replaced by the
//!   repair's "no result was recorded");
//! - `plan_disagree`: `plan.md`, `plan.json`'s `locked` and `system.txt`'s `<locked_plan>` section
//!   (and the system prompt of the next request) do not say the same, or there are two sections;
//! - `message_lost`: an acknowledged prompt (`turn_start`) or assistant message (`assistant`)
//!   that is in no history (the conversation or an archived one);
//! - `draft_lost`: the draft as it stood before a step that does not replace it is nowhere
//!   (not the draft, nor `plan.md`, nor the locked plan, nor an archived draft or plan);
//! - `archive_changed`: an `archive/` file that is the live `conversation.jsonl` or another
//!   archive file (a hard link a crash left between linking and renaming: later appends
//!   change an archive, which must never change);
//! - `ledger_regressed`: the ledger revision is lower than one already written or announced;
//! - `seq_repeated`: an event `seq` that does not increase over `events.jsonl`;
//! - `temp_left`: a `.tmp-*` file left in the resumed session's folder, its `archive/`, or `.tern/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;
use tern::runtime::repair::LOST_RESULT;

use crate::support::{Recorded, Wire, validate};

/// Every invariant's key, in the order the report lists them.
pub const INVARIANTS: [&str; 14] = [
    "resume_failed",
    "request_invalid",
    "unparseable",
    "result_lost",
    "message_lost",
    "draft_lost",
    "archive_changed",
    "plan_disagree",
    "ledger_regressed",
    "seq_repeated",
    "temp_left",
    "agent_result_untrue",
    "workspace_mixed",
    "restore_unsaid",
];

/// The workspace's files (not `.tern/`, `.home/`), by relative path: a restore's before and
/// after.
pub type Tree = BTreeMap<String, Vec<u8>>;

/// The files of the workspace `root` (see [`Tree`]).
pub fn workspace(root: &Path) -> Tree {
    fn walk(root: &Path, dir: &Path, out: &mut Tree) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p
                .strip_prefix(root)
                .map(|r| r.to_string_lossy().into_owned());
            let Ok(rel) = rel else { continue };
            if rel == ".tern" || rel == ".home" {
                continue;
            }
            match e.file_type() {
                Ok(t) if t.is_dir() => walk(root, &p, out),
                Ok(_) => {
                    out.insert(rel, std::fs::read(&p).unwrap_or_default());
                }
                Err(_) => {}
            }
        }
    }
    let mut out = Tree::new();
    walk(root, root, &mut out);
    out
}

/// After a killed restore and the resume: the files are as before the step or as after it
/// (`workspace_mixed`), and a restore the kill cut short (`refs/tern/pending` left) was finished
/// and said in some session's events (`restore_unsaid`).
pub fn restore_whole(
    root: &Path,
    before: &Tree,
    after: &Tree,
    was_pending: bool,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let now = workspace(root);
    if now != *before && now != *after {
        let names = |t: &Tree| t.keys().cloned().collect::<Vec<_>>().join(" ");
        out.push(v(
            "workspace_mixed",
            format!(
                "the files are neither as before the step ({}) nor as after it ({}): {}",
                names(before),
                names(after),
                names(&now)
            ),
        ));
    }
    let state = root.join(".tern");
    if state.join("checkpoints/git/refs/tern/pending").exists() {
        out.push(v(
            "restore_unsaid",
            "refs/tern/pending is still there after the resume",
        ));
    }
    if was_pending {
        let said = sessions(&state).iter().any(|(_, dir)| {
            std::fs::read_to_string(dir.join("events.jsonl"))
                .unwrap_or_default()
                .contains("cut short")
        });
        if !said {
            out.push(v(
                "restore_unsaid",
                "a restore was in flight at the kill, and no session's events say it was finished",
            ));
        }
    }
    out
}

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    /// The invariant's key (see the module doc).
    pub invariant: &'static str,
    /// What exactly, with file names.
    pub detail: String,
}

fn v(invariant: &'static str, detail: impl Into<String>) -> Violation {
    Violation {
        invariant,
        detail: detail.into(),
    }
}

/// What was acknowledged so far: what a person or a script could already have seen.
#[derive(Debug, Default, Clone)]
pub struct Acked {
    /// Per session: the ids of tool calls whose `tool_result` was written or printed.
    pub results: BTreeMap<String, BTreeSet<String>>,
    /// Per session: the highest ledger revision written (`ledger.json`) or announced
    /// (`work_update`).
    pub ledger: BTreeMap<String, u64>,
    /// Per session: acknowledged messages, as (role, text, tool-call ids).
    pub messages: BTreeMap<String, BTreeSet<(String, String, Vec<String>)>>,
    /// Per session: a draft that must survive (the draft before a step that does not replace
    /// it).
    pub drafts: BTreeMap<String, String>,
}

impl Acked {
    fn event(&mut self, ev: &Value) {
        let Some(session) = ev["session"].as_str() else {
            return;
        };
        match ev["type"].as_str() {
            Some("tool_result") => {
                if let Some(id) = ev["id"].as_str() {
                    self.results
                        .entry(session.to_string())
                        .or_default()
                        .insert(id.to_string());
                }
            }
            Some("work_update") => {
                if let Some(r) = ev["revision"].as_u64() {
                    self.rev(session, r);
                }
            }
            Some("turn_start") => {
                let prompt = ev["prompt"].as_str().unwrap_or("").trim();
                if !prompt.is_empty() {
                    self.message(session, "user", prompt, Vec::new());
                }
            }
            Some("assistant") => {
                let ids = ev["tool_calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c["id"].as_str().map(str::to_string))
                    .collect();
                let text = ev["text"].as_str().unwrap_or("").trim();
                self.message(session, "assistant", text, ids);
            }
            _ => {}
        }
    }

    fn message(&mut self, session: &str, role: &str, text: &str, ids: Vec<String>) {
        self.messages
            .entry(session.to_string())
            .or_default()
            .insert((role.to_string(), text.to_string(), ids));
    }

    fn rev(&mut self, session: &str, r: u64) {
        let e = self.ledger.entry(session.to_string()).or_default();
        *e = (*e).max(r);
    }

    /// Adds what `state` (a `.tern/` folder) and the `--json` stdout texts show now.
    pub fn observe(&mut self, state: &Path, stdouts: &[&str]) {
        for out in stdouts {
            for line in out.lines() {
                if let Ok(ev) = serde_json::from_str::<Value>(line) {
                    self.event(&ev);
                }
            }
        }
        for (id, dir) in sessions(state) {
            for ev in lines(&dir.join("events.jsonl")).into_iter().flatten() {
                self.event(&ev);
            }
            if let Some(r) = json(&dir.join("ledger.json"))
                .and_then(Result::ok)
                .and_then(|l| l["revision"].as_u64())
            {
                self.rev(&id, r);
            }
        }
    }
}

/// Session folders of `state` that hold a `meta.json` (a folder without one is a session whose
/// creation was cut short: nothing in it was ever acknowledged), by id; sub-agents' folders
/// (`<session>/agents/<id>/`, at any depth) too.
pub fn sessions(state: &Path) -> Vec<(String, std::path::PathBuf)> {
    fn walk(dir: &Path, out: &mut Vec<(String, std::path::PathBuf)>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let d = e.path();
            if d.join("meta.json").exists() {
                out.push((e.file_name().to_string_lossy().into_owned(), d.clone()));
                walk(&d.join("agents"), out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&state.join("sessions"), &mut out);
    out.sort();
    out
}

/// The JSON file at `p`: None when absent, Some(Err) when it does not parse.
fn json(p: &Path) -> Option<Result<Value, String>> {
    let bytes = std::fs::read(p).ok()?;
    Some(serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
}

/// Each line of the JSONL file at `p` (absent: none): Ok(value) or Err(the line).
fn lines(p: &Path) -> Vec<Result<Value, String>> {
    numbered(p).into_iter().map(|(_, l)| l).collect()
}

/// [`lines`] with each line's 1-based number in the file (blank lines are skipped, as tern's
/// reader skips them).
fn numbered(p: &Path) -> Vec<(usize, Result<Value, String>)> {
    let bytes = std::fs::read(p).unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let r = serde_json::from_str::<Value>(l)
                .ok()
                .filter(Value::is_object)
                .ok_or_else(|| l.chars().take(120).collect());
            (i + 1, r)
        })
        .collect()
}

/// Whole-file JSON state files (atomic writes: they parse at every moment, crash or not).
const JSON_FILES: [&str; 4] = ["meta.json", "plan.json", "ledger.json", "strategy.json"];

/// Checks what must hold at every moment, also right after a kill: the JSON state files parse
/// (atomic writes), `.tern/current` names a session that exists.
pub fn at_any_moment(state: &Path) -> Vec<Violation> {
    let mut out = Vec::new();
    for (id, dir) in sessions(state) {
        for name in JSON_FILES {
            if let Some(Err(e)) = json(&dir.join(name)) {
                out.push(v("unparseable", format!("sessions/{id}/{name}: {e}")));
            }
        }
    }
    if let Ok(cur) = std::fs::read_to_string(state.join("current")) {
        let id = cur.trim();
        if !state.join("sessions").join(id).join("meta.json").is_file() {
            out.push(v(
                "unparseable",
                format!(".tern/current names {id:?}, which has no meta.json"),
            ));
        }
    }
    out
}

/// Checks every invariant after recovery. `acked`: what was acknowledged before (and during)
/// recovery; `requests`: what the strict provider received after the crash; `resumed`: the
/// session the recovery continued (its folder and `.tern/` must hold no tempfile).
pub fn after_recovery(
    state: &Path,
    acked: &Acked,
    requests: &[Recorded],
    resumed: Option<&str>,
) -> Vec<Violation> {
    let mut out = files(state, acked, resumed);
    out.extend(sent(requests));
    out.extend(plan_sent(state, requests, resumed));
    out.sort();
    out.dedup();
    out
}

/// The files: what [`at_any_moment`] checks, and every JSONL line, the acknowledged results,
/// the plan files' agreement, the ledger revision, event `seq`s, and no tempfile in the
/// `resumed` session's folder, its `archive/` or `.tern/`.
pub fn files(state: &Path, acked: &Acked, resumed: Option<&str>) -> Vec<Violation> {
    let mut out = at_any_moment(state);
    for (id, dir) in sessions(state) {
        let rel = |n: &str| format!("sessions/{id}/{n}");
        // JSONL files: every line one object, ending in a newline. A session nobody reopened
        // (a sub-agent under the resumed one, an orphan) may keep a torn last line: readers
        // skip it, and no one appends after it.
        let reopened = resumed == Some(id.as_str());
        for name in ["conversation.jsonl", "events.jsonl"] {
            let p = dir.join(name);
            let bytes = std::fs::read(&p).unwrap_or_default();
            let torn_tail = bytes.last().is_some_and(|b| *b != b'\n');
            let ls = numbered(&p);
            let last = ls.last().map(|(n, _)| *n);
            for (n, l) in ls {
                if let Err(l) = l
                    && (reopened || !torn_tail || Some(n) != last)
                {
                    out.push(v(
                        "unparseable",
                        format!("{} line {n} is not one JSON object: «{l}»", rel(name)),
                    ));
                }
            }
            if torn_tail && reopened {
                out.push(v(
                    "unparseable",
                    format!("{} does not end in a newline", rel(name)),
                ));
            }
        }
        // Archive copies keep the file as it was: a torn last line at most.
        for a in archive_conversations(&dir) {
            let ls = numbered(&a);
            let last = ls.last().map(|(n, _)| *n);
            let ends_clean = std::fs::read(&a)
                .unwrap_or_default()
                .last()
                .is_none_or(|b| *b == b'\n');
            for (n, l) in &ls {
                if let Err(l) = l
                    && (ends_clean || Some(*n) != last)
                {
                    out.push(v(
                        "unparseable",
                        format!(
                            "sessions/{id}/archive/{} line {n} is not one JSON object: «{l}»",
                            a.file_name().unwrap_or_default().to_string_lossy(),
                        ),
                    ));
                }
            }
        }
        out.extend(seq_increases(&id, &dir));
        out.extend(results_kept(&id, &dir, acked));
        out.extend(agent_results_true(&id, &dir));
        out.extend(messages_kept(&id, &dir, acked));
        out.extend(draft_kept(&id, &dir, acked));
        out.extend(archives_unchanged(&id, &dir));
        out.extend(plan_agrees(&id, &dir));
        let want = acked.ledger.get(&id).copied().unwrap_or(0);
        let have = json(&dir.join("ledger.json"))
            .and_then(Result::ok)
            .and_then(|l| l["revision"].as_u64());
        if want > 0 && have.unwrap_or(0) < want {
            out.push(v(
                "ledger_regressed",
                format!(
                    "{}: revision {have:?}, but {want} was written or announced",
                    rel("ledger.json")
                ),
            ));
        }
    }
    // A killed creation: every start sweeps what it left, so after recovery no half-built
    // session folder is left (nor, from older builds, a folder without meta.json).
    for t in half_built(&state.join("sessions")) {
        out.push(v("temp_left", normal(&t, state)));
    }
    // The state folder's own temps (`current`, `.gitignore`) and the checkpoint store's (a
    // creation or an exclude write cut short): every start sweeps them, even one that refuses.
    for t in temps(state)
        .into_iter()
        .chain(temps(&state.join("checkpoints")))
        .chain(temps(&state.join("checkpoints/git/info")))
        .chain(temps(&state.join("checkpoints/git")))
    {
        out.push(v("temp_left", normal(&t, state)));
    }
    if let Some(id) = resumed {
        let dir = state.join("sessions").join(id);
        // The resumed session and its sub-agents at any depth (their temps and half-built
        // children are swept when the parent is reopened).
        let mut stack = vec![dir];
        while let Some(d) = stack.pop() {
            for t in temps(&d).into_iter().chain(temps(&d.join("archive"))) {
                out.push(v("temp_left", normal(&t, state)));
            }
            for t in half_built(&d.join("agents")) {
                out.push(v("temp_left", normal(&t, state)));
            }
            if let Ok(rd) = std::fs::read_dir(d.join("agents")) {
                stack.extend(
                    rd.flatten()
                        .map(|e| e.path())
                        .filter(|p| p.join("meta.json").is_file()),
                );
            }
        }
    }
    out
}

/// What a killed creation left in `dir` (`sessions/` or an `agents/`): a `.tmp-*` entry, or a
/// folder without `meta.json`.
pub fn half_built(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if e.file_name().to_string_lossy().starts_with(".tmp-")
                || (p.is_dir() && !p.join("meta.json").is_file())
            {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The requests: each valid for a strict provider, with one `<locked_plan>` section at most.
pub fn sent(requests: &[Recorded]) -> Vec<Violation> {
    let mut out = Vec::new();
    for (i, r) in requests.iter().enumerate() {
        let body = r.json();
        if let Err(e) = validate(Wire::OpenAi, &body) {
            out.push(v(
                "request_invalid",
                format!("request {} after the crash: {e}", i + 1),
            ));
        }
        let system = body["messages"][0]["content"].as_str().unwrap_or("");
        let n = sections(system);
        if n > 1 {
            out.push(v(
                "plan_disagree",
                format!(
                    "request {} after the crash has {n} <locked_plan> sections",
                    i + 1
                ),
            ));
        }
    }
    out
}

/// The last turn request (a compaction's summary request comes before the plan it leads to is
/// locked) carries the plan `plan.json` of the `resumed` session locks. Only meaningful when
/// nothing changed the plan after that request.
pub fn plan_sent(state: &Path, requests: &[Recorded], resumed: Option<&str>) -> Vec<Violation> {
    let mut out = Vec::new();
    let quoted =
        serde_json::to_string(tern::runtime::compact::INSTRUCTION.trim()).unwrap_or_default();
    let instruction = quoted.trim_matches('"');
    let last_turn = requests
        .iter()
        .rev()
        .find(|r| !r.body_str().contains(instruction));
    if let (Some(last), Some(id)) = (last_turn, resumed) {
        let dir = state.join("sessions").join(id);
        let system = last.json()["messages"][0]["content"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let locked = locked_of(&dir);
        let sent = section(&system).map(str::to_string);
        if sent.as_deref().map(str::trim_end) != locked.as_deref().map(str::trim_end) {
            out.push(v(
                "plan_disagree",
                format!(
                    "the last turn request's <locked_plan> is {:?}, plan.json locks {:?}",
                    sent.map(|s| short(&s)),
                    locked.map(|s| short(&s))
                ),
            ));
        }
    }
    out
}

fn short(s: &str) -> String {
    let s = s.replace('\n', "⏎");
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s
    }
}

fn normal(p: &Path, state: &Path) -> String {
    crate::faults::run::normalise(&p.display().to_string(), state.parent().unwrap_or(state))
}

/// `.tmp-*` files directly in `dir`.
pub fn temps(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with(".tmp-") {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

fn archive_conversations(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(dir.join("archive"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().unwrap_or_default().to_string_lossy();
            n.starts_with("conversation-") && n.ends_with(".jsonl")
        })
        .collect();
    out.sort();
    out
}

fn seq_increases(id: &str, dir: &Path) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut last = 0u64;
    for ev in lines(&dir.join("events.jsonl")).into_iter().flatten() {
        let Some(seq) = ev["seq"].as_u64() else {
            out.push(v(
                "seq_repeated",
                format!("sessions/{id}/events.jsonl: an event without seq: {ev}"),
            ));
            continue;
        };
        if seq <= last {
            out.push(v(
                "seq_repeated",
                format!(
                    "sessions/{id}/events.jsonl: seq {seq} after {last} ({})",
                    ev["type"]
                ),
            ));
        }
        last = last.max(seq);
    }
    out
}

/// Every acknowledged result of session `id` is in its history (the conversation or, after a
/// compaction, an archived one) with its real content, and none is the repair's placeholder.
fn results_kept(id: &str, dir: &Path, acked: &Acked) -> Vec<Violation> {
    let Some(ids) = acked.results.get(id) else {
        return Vec::new();
    };
    let current: Vec<Value> = lines(&dir.join("conversation.jsonl"))
        .into_iter()
        .flatten()
        .collect();
    let mut all = current.clone();
    for a in archive_conversations(dir) {
        all.extend(lines(&a).into_iter().flatten());
    }
    let is_result = |m: &Value, call: &str| m["role"] == "tool" && m["tool_call_id"] == call;
    let lost = |m: &Value| m["content"].as_str() == Some(LOST_RESULT);
    let mut out = Vec::new();
    for call in ids {
        if current.iter().any(|m| is_result(m, call) && lost(m)) {
            out.push(v(
                "result_lost",
                format!("sessions/{id}: the acknowledged result of {call} was replaced by \"no result was recorded\""),
            ));
        } else if !all.iter().any(|m| is_result(m, call) && !lost(m)) {
            out.push(v(
                "result_lost",
                format!("sessions/{id}: the acknowledged result of {call} is in no history"),
            ));
        }
    }
    out
}

/// Each `agent` call's result that a repair wrote (tern stopped before recording it) tells the
/// truth about the child's own record: a completed child's answer is given (not an error, not
/// "interrupted"), a call with no child says it never started, and every path it names exists.
fn agent_results_true(id: &str, dir: &Path) -> Vec<Violation> {
    let msgs = all_messages(dir);
    let agent_calls: BTreeSet<String> = msgs
        .iter()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["name"] == "agent")
        .filter_map(|c| c["id"].as_str().map(str::to_string))
        .collect();
    let children: Vec<(Value, std::path::PathBuf)> = std::fs::read_dir(dir.join("agents"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((json(&e.path().join("meta.json"))?.ok()?, e.path())))
        .collect();
    let mut out = Vec::new();
    for m in &msgs {
        let Some(call) = m["tool_call_id"].as_str() else {
            continue;
        };
        let c = m["content"].as_str().unwrap_or("");
        let repaired = c.contains("no result was recorded") || c.contains("tern restarted");
        if m["role"] != "tool" || !agent_calls.contains(call) || !repaired {
            continue;
        }
        let child = children
            .iter()
            .find(|(meta, _)| meta["parent"]["call_id"] == call);
        let bad = match child {
            Some((meta, _)) if meta["status"] == "completed" => {
                (!c.contains("tern restarted") || m["is_error"] == true).then(|| {
                    "the child completed, but the result does not give its answer".to_string()
                })
            }
            Some((meta, _)) => (!c.contains(meta["id"].as_str().unwrap_or("?")))
                .then(|| "the result does not name the child".to_string()),
            None => (c.contains("was running"))
                .then(|| "no child was made, but the result says one was running".to_string()),
        };
        let missing: Vec<&str> = c
            .split(|ch: char| {
                ch.is_whitespace() || ch == ')' || ch == '(' || ch == ']' || ch == ';'
            })
            .map(|w| w.trim_end_matches(['.', ',']))
            .filter(|w| w.starts_with('/') && !Path::new(w).exists())
            .collect();
        for d in bad.into_iter().chain(
            missing
                .iter()
                .map(|p| format!("it names {p}, which does not exist")),
        ) {
            out.push(v(
                "agent_result_untrue",
                format!(
                    "sessions/{id}: the repaired result of {call}: {d} «{}»",
                    short(c)
                ),
            ));
        }
    }
    out
}

/// How many `<locked_plan>` sections `system` holds (an opening tag on a line of its own: the
/// bundled prompt mentions the tag in prose).
pub fn sections(system: &str) -> usize {
    system.matches("\n<locked_plan>\n").count()
}

/// Every message of conversation.jsonl and the archived ones.
fn all_messages(dir: &Path) -> Vec<Value> {
    let mut all: Vec<Value> = lines(&dir.join("conversation.jsonl"))
        .into_iter()
        .flatten()
        .collect();
    for a in archive_conversations(dir) {
        all.extend(lines(&a).into_iter().flatten());
    }
    all
}

/// Every acknowledged prompt and assistant message of session `id` is in a history (a repair
/// may have merged it with a neighbour: its text is contained, its calls kept).
fn messages_kept(id: &str, dir: &Path, acked: &Acked) -> Vec<Violation> {
    let Some(msgs) = acked.messages.get(id) else {
        return Vec::new();
    };
    let all = all_messages(dir);
    let mut out = Vec::new();
    for (role, text, ids) in msgs {
        let found = all.iter().any(|m| {
            let body = match role.as_str() {
                "user" => m["content"].as_str(),
                _ => m["text"].as_str(),
            }
            .unwrap_or("");
            let calls: Vec<&str> = m["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["id"].as_str())
                .collect();
            m["role"] == role.as_str()
                && body.contains(text.as_str())
                && ids.iter().all(|i| calls.contains(&i.as_str()))
        });
        if !found {
            out.push(v(
                "message_lost",
                format!(
                    "sessions/{id}: the acknowledged {role} message {:?} (calls {ids:?}) is in no history",
                    short(text)
                ),
            ));
        }
    }
    out
}

/// The draft that must survive is somewhere: the draft, `plan.md`, the locked plan, or an
/// archived draft or plan.
fn draft_kept(id: &str, dir: &Path, acked: &Acked) -> Vec<Violation> {
    let Some(draft) = acked
        .drafts
        .get(id)
        .map(|d| d.trim())
        .filter(|d| !d.is_empty())
    else {
        return Vec::new();
    };
    let mut places: Vec<String> = ["plan.draft.md", "plan.md"]
        .iter()
        .filter_map(|n| std::fs::read_to_string(dir.join(n)).ok())
        .collect();
    places.extend(locked_of(dir));
    for e in std::fs::read_dir(dir.join("archive"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with("draft-") || n.starts_with("plan-") {
            places.extend(std::fs::read_to_string(e.path()).ok());
        }
    }
    if places.iter().any(|p| p.trim() == draft) {
        return Vec::new();
    }
    vec![v(
        "draft_lost",
        format!("sessions/{id}: the draft {:?} is nowhere", short(draft)),
    )]
}

/// No archive file is the live conversation or another archive file (one inode).
fn archives_unchanged(id: &str, dir: &Path) -> Vec<Violation> {
    use std::os::unix::fs::MetadataExt;
    let ino = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let live = ino(&dir.join("conversation.jsonl"));
    let mut seen: BTreeMap<(u64, u64), String> = BTreeMap::new();
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir.join("archive"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    for f in files {
        let name = f
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let Some(i) = ino(&f) else { continue };
        if Some(i) == live {
            out.push(v(
                "archive_changed",
                format!("sessions/{id}/archive/{name} is the live conversation.jsonl (one inode): appends change it"),
            ));
        }
        if let Some(other) = seen.insert(i, name.clone()) {
            out.push(v(
                "archive_changed",
                format!("sessions/{id}/archive/{name} and {other} are one file"),
            ));
        }
    }
    out
}

/// The content of the `<locked_plan>` section ending `system` (None without one).
pub fn section(system: &str) -> Option<&str> {
    const OPEN: &str = "\n\n<locked_plan>\n";
    const CLOSE: &str = "\n</locked_plan>\n";
    let start = system.find(OPEN)? + OPEN.len();
    let rest = &system[start..];
    Some(rest.strip_suffix(CLOSE).unwrap_or(rest))
}

fn locked_of(dir: &Path) -> Option<String> {
    json(&dir.join("plan.json"))
        .and_then(Result::ok)
        .and_then(|p| p["locked"].as_str().map(str::to_string))
}

fn plan_agrees(id: &str, dir: &Path) -> Vec<Violation> {
    let mut out = Vec::new();
    let system = std::fs::read_to_string(dir.join("system.txt")).unwrap_or_default();
    let n = sections(&system);
    if n > 1 {
        out.push(v(
            "plan_disagree",
            format!("sessions/{id}/system.txt has {n} <locked_plan> sections"),
        ));
    }
    let locked = locked_of(dir);
    let plan_md = std::fs::read_to_string(dir.join("plan.md")).ok();
    let md = plan_md.as_deref().filter(|s| !s.is_empty());
    let sect = section(&system);
    let t = |s: Option<&str>| s.map(str::trim_end).map(str::to_string);
    let (l, m, s) = (t(locked.as_deref()), t(md), t(sect));
    if l != m || l != s {
        out.push(v(
            "plan_disagree",
            format!(
                "sessions/{id}: plan.json locks {:?}, plan.md holds {:?}, system.txt's section holds {:?}",
                l.map(|x| short(&x)),
                m.map(|x| short(&x)),
                s.map(|x| short(&x))
            ),
        ));
    }
    out
}

/// Each check can fail: a real session (a turn with a bash call and a ledger update, a confirmed
/// plan) passes them all, and each kind of damage is reported under its own invariant.
#[test]
fn every_invariant_can_fail() {
    use crate::faults::run::{HANG, Site, run};
    use crate::support::script::{bash, text, todo, work};
    use crate::support::{FakeServer, Wire};

    let w = Wire::OpenAi;
    let fake = FakeServer::strict(vec![
        work(w, "k-w1", vec![todo("1", "check", "in_progress")]),
        bash(w, "k-b1", "echo checked"),
        text(w, "Checked."),
        text(
            w,
            "The person asked for a check; it ran and printed checked. Next: nothing.",
        ),
        text(w, "Nothing left."),
    ]);
    let site = Site::new();
    let base = fake.openai_base();
    let r = run(
        site.tern(&base, &["exec", "--json", "Check it."]),
        None,
        HANG,
    );
    assert_eq!(r.code, Some(0), "{}", r.summary());
    let r2 = run(
        site.tern(&base, &["plan", "draft"]),
        Some("1. check\n"),
        HANG,
    );
    assert_eq!(r2.code, Some(0), "{}", r2.summary());
    let r3 = run(site.tern(&base, &["plan", "confirm"]), None, HANG);
    assert_eq!(r3.code, Some(0), "{}", r3.summary());
    let r4 = run(
        site.tern(&base, &["exec", "--json", "--continue", "Go on."]),
        None,
        HANG,
    );
    assert_eq!(r4.code, Some(0), "{}", r4.summary());
    let id = site.current().expect("current");
    let mut acked = Acked::default();
    acked.observe(&site.state(), &[&r.stdout]);
    assert!(acked.results[&id].contains("k-b1"));
    let requests = fake.requests();
    let clean = after_recovery(&site.state(), &acked, &requests, Some(&id));
    assert!(clean.is_empty(), "a sound session: {clean:?}");

    type Damage = Box<dyn Fn(&Path)>;
    let mut damage: Vec<(&str, Damage)> = vec![
        (
            "unparseable",
            Box::new(|d: &Path| append(&d.join("events.jsonl"), "{\"type\":\"tor\n")),
        ),
        (
            "unparseable",
            Box::new(|d: &Path| std::fs::write(d.join("plan.json"), "{\"state\":").unwrap()),
        ),
        (
            "result_lost",
            Box::new(|d: &Path| {
                let p = d.join("archive/conversation-0001.jsonl");
                let t = std::fs::read_to_string(&p).unwrap();
                let t: String = t
                    .lines()
                    .map(|l| {
                        let mut m: Value = serde_json::from_str(l).unwrap();
                        if m["tool_call_id"] == "k-b1" {
                            m["content"] = Value::String(LOST_RESULT.into());
                        }
                        format!("{m}\n")
                    })
                    .collect();
                std::fs::write(p, t).unwrap();
            }),
        ),
        (
            "plan_disagree",
            Box::new(|d: &Path| std::fs::write(d.join("plan.md"), "1. something else\n").unwrap()),
        ),
        (
            "plan_disagree",
            Box::new(|d: &Path| {
                append(
                    &d.join("system.txt"),
                    "\n\n<locked_plan>\n1. check\n</locked_plan>\n",
                )
            }),
        ),
        (
            "ledger_regressed",
            Box::new(|d: &Path| {
                let p = d.join("ledger.json");
                let mut l: Value =
                    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
                l["revision"] = Value::from(0);
                std::fs::write(p, l.to_string()).unwrap();
            }),
        ),
        (
            "seq_repeated",
            Box::new(|d: &Path| {
                let p = d.join("events.jsonl");
                let t = std::fs::read_to_string(&p).unwrap();
                let last = t.lines().last().unwrap().to_string();
                append(&p, &format!("{last}\n"));
            }),
        ),
        (
            "temp_left",
            Box::new(|d: &Path| std::fs::write(d.join(".tmp-AbCdEf"), "half").unwrap()),
        ),
    ];
    damage.push((
        "temp_left",
        Box::new(|d: &Path| {
            // A creation killed before its rename (the folder's temporary name).
            std::fs::create_dir_all(d.parent().unwrap().join(".tmp-20260101-000000-abcd/spill"))
                .unwrap()
        }),
    ));
    damage.push((
        "temp_left",
        Box::new(|d: &Path| {
            // An older build's half-made session: a folder without meta.json.
            std::fs::create_dir_all(d.parent().unwrap().join("20260101-000000-abcd/spill")).unwrap()
        }),
    ));
    damage.push((
        "temp_left",
        Box::new(|d: &Path| {
            // A tempfile in a sub-agent's folder.
            let c = d.join("agents/20260101-000000-beef");
            std::fs::create_dir_all(&c).unwrap();
            std::fs::copy(d.join("meta.json"), c.join("meta.json")).unwrap();
            std::fs::write(c.join(".tmp-XyZ"), "half").unwrap();
        }),
    ));
    damage.push((
        "message_lost",
        Box::new(|d: &Path| {
            let p = d.join("conversation.jsonl");
            let t = std::fs::read_to_string(&p).unwrap();
            let kept: String = t
                .lines()
                .filter(|l| !l.contains("Go on."))
                .map(|l| format!("{l}\n"))
                .collect();
            std::fs::write(p, kept).unwrap();
        }),
    ));
    damage.push((
        "archive_changed",
        Box::new(|d: &Path| {
            std::fs::hard_link(
                d.join("conversation.jsonl"),
                d.join("archive/conversation-0009.jsonl"),
            )
            .unwrap()
        }),
    ));
    for (invariant, f) in &damage {
        let copy = site.copy();
        f(&copy.state().join("sessions").join(&id));
        let found = after_recovery(&copy.state(), &acked, &requests, Some(&id));
        assert!(
            found.iter().any(|v| v.invariant == *invariant),
            "{invariant} not reported: {found:?}"
        );
    }
    // A draft that was acknowledged and then vanished.
    let mut with_draft = acked.clone();
    with_draft
        .drafts
        .insert(id.clone(), "1. a draft nobody kept\n".into());
    let found = files(&site.state(), &with_draft, Some(&id));
    assert!(
        found.iter().any(|v| v.invariant == "draft_lost"),
        "{found:?}"
    );
    let mut kept = acked.clone();
    kept.drafts.insert(id.clone(), "1. check\n".into());
    assert!(
        files(&site.state(), &kept, Some(&id)).is_empty(),
        "the confirmed draft is the locked plan"
    );
    // A request a strict provider refuses: a tool call without its result.
    let mut bad = requests[2].clone();
    let mut body = bad.json();
    body["messages"]
        .as_array_mut()
        .unwrap()
        .retain(|m| m["role"] != "tool");
    bad.body = body.to_string().into_bytes();
    assert!(
        sent(&[bad])
            .iter()
            .any(|v| v.invariant == "request_invalid")
    );
}

#[cfg(test)]
fn append(p: &Path, text: &str) {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(p)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}
