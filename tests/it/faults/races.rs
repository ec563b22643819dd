//! Twenty tern processes on one session at once: turns (`exec --continue`, each running a bash
//! call that takes a moment), verbs that rewrite the conversation (`plan confirm --wait`,
//! `compact`, `compact --wait`), writers of the draft (`plan draft`) and readers (`status`,
//! `plan show`, `stats`). Nothing is killed; what must hold afterwards: every file parses, no
//! event `seq` repeats, every request was valid for a strict provider and the history still is,
//! at most one turn (or rewriting verb) held the session at a time, nothing was repaired or
//! marked interrupted (nobody died), and every process that was refused said why.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;
use tern::runtime::compact::INSTRUCTION;

use super::check::{self, Acked};
use super::run::{HANG, Run, Site, run};
use crate::support::script::{bash, text};
use crate::support::{FakeServer, Recorded, Wire};

const SUMMARY: &str = "Several turns ran bash commands that printed their numbers; a plan draft was written. Next: go on with the next turn.";

/// Answers by what the request is: a compaction gets a summary, a new prompt a bash call that
/// sleeps a little (so turns overlap the other processes), a tool result a final answer.
fn responder(n: Arc<AtomicUsize>) -> impl Fn(&Recorded) -> Option<crate::support::Reply> + Send {
    let instruction = INSTRUCTION.trim().to_string();
    move |req: &Recorded| {
        let body = req.json();
        let last = body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .cloned()
            .unwrap_or(Value::Null);
        let content = last["content"].as_str().unwrap_or("");
        Some(match last["role"].as_str() {
            Some("user") if content.contains(&instruction) => text(Wire::OpenAi, SUMMARY),
            Some("user") => {
                let i = n.fetch_add(1, Ordering::SeqCst);
                bash(
                    Wire::OpenAi,
                    &format!("race-{i}"),
                    &format!("sleep 0.2; echo turn {i}"),
                )
            }
            _ => text(Wire::OpenAi, "Turn done."),
        })
    }
}

fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// The 20 commands, with their stdin.
fn commands() -> Vec<(Vec<String>, Option<String>)> {
    let mut out: Vec<(Vec<String>, Option<String>)> = Vec::new();
    let s = args;
    for i in 0..6 {
        out.push((
            s(&["exec", "--json", "--continue", &format!("turn {i}")]),
            None,
        ));
    }
    for i in 0..3 {
        out.push((
            s(&["plan", "draft"]),
            Some(format!("1. step one of draft {i}\n2. step two\n")),
        ));
    }
    for _ in 0..3 {
        out.push((s(&["plan", "confirm", "--wait"]), None));
    }
    out.push((s(&["compact"]), None));
    out.push((s(&["compact", "--wait"]), None));
    for _ in 0..3 {
        out.push((s(&["status"]), None));
    }
    out.push((s(&["plan", "show"]), None));
    out.push((s(&["plan", "show"]), None));
    out.push((s(&["stats"]), None));
    assert_eq!(out.len(), 20);
    out
}

/// What a refusal may say: the session is held by another process (a turn or a rewriting verb),
/// or there is no draft left to confirm (another confirm took it).
const REASONS: [&str; 4] = [
    "is running a turn",
    "held by another process",
    "no plan draft to confirm",
    "refused",
];

/// Rounds of the race.
const ROUNDS: usize = 3;

/// Starts `cmds` at once and waits for each (bounded).
fn race(site: &Site, base: &str, cmds: &[(Vec<String>, Option<String>)]) -> Vec<(String, Run)> {
    std::thread::scope(|s| {
        let handles: Vec<_> = cmds
            .iter()
            .map(|(args, stdin)| {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let mut cmd = site.tern(base, &args);
                cmd.stdin(Stdio::null());
                let label = args.join(" ");
                let stdin = stdin.clone();
                s.spawn(move || (label, run(cmd, stdin.as_deref(), HANG)))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("runner thread"))
            .collect()
    })
}

#[test]
fn twenty_processes_on_one_session() {
    let n = Arc::new(AtomicUsize::new(0));
    let fake = FakeServer::strict(vec![]);
    fake.set_responder(responder(n.clone()));
    let site = Site::new();
    let base = fake.openai_base();
    let setup = run(
        site.tern(&base, &["exec", "--json", "Start the session."]),
        None,
        HANG,
    );
    assert_eq!(setup.code, Some(0), "{}", setup.summary());
    let draft = run(
        site.tern(&base, &["plan", "draft"]),
        Some("1. the first draft\n"),
        HANG,
    );
    assert_eq!(draft.code, Some(0), "{}", draft.summary());

    // Three rounds: each race is a different interleaving, and a rare window gets more chances.
    let mut runs: Vec<(String, Run)> = Vec::new();
    for _ in 0..ROUNDS {
        runs.extend(race(&site, &base, &commands()));
    }

    let mut problems = Vec::new();
    let mut refused = 0;
    for (label, r) in &runs {
        let panicked = r.stderr.contains("panicked");
        // `--json` says why in its `result` event, the verbs on stderr.
        let said = |w: &&str| r.stderr.contains(w) || r.stdout.contains(w);
        match r.code {
            Some(0) if !panicked => {}
            Some(1) if !panicked && REASONS.iter().any(said) => refused += 1,
            _ => problems.push(format!("`tern {label}`: {}\n{}", r.summary(), r.stderr)),
        }
    }

    let state = site.state();
    let id = site.current().expect("a current session");
    let dir = state.join("sessions").join(&id);
    let events: Vec<Value> = std::fs::read_to_string(dir.join("events.jsonl"))
        .expect("events.jsonl")
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    // One holder at a time: turns never nest or overlap, and no compaction, repair or
    // interruption lands inside a turn (nobody died, so nothing may be repaired at all).
    let mut open: Option<u64> = None;
    for ev in &events {
        let seq = ev["seq"].as_u64().unwrap_or(0);
        match ev["type"].as_str().unwrap_or("") {
            "turn_start" => {
                if let Some(s) = open {
                    problems.push(format!(
                        "turn_start at seq {seq} while the turn of seq {s} runs"
                    ));
                }
                open = Some(seq);
            }
            "turn_end" => open = None,
            "compaction" if open.is_some() && ev["trigger"] != "auto" => problems.push(format!(
                "a {} compaction at seq {seq} inside the turn of seq {}",
                ev["trigger"],
                open.unwrap_or(0)
            )),
            "repair" | "turn_interrupted" => problems.push(format!(
                "{} at seq {seq} although no process died: {ev}",
                ev["type"]
            )),
            _ => {}
        }
    }
    let mut acked = Acked::default();
    let outs: Vec<&str> = runs.iter().map(|(_, r)| r.stdout.as_str()).collect();
    acked.observe(&state, &outs);
    let requests = fake.requests();
    // Not `plan_sent`: a confirm may lock a plan after the last turn of the race.
    let mut found = check::files(&state, &acked, Some(&id));
    found.extend(check::sent(&requests));
    for v in found {
        problems.push(format!("{}: {}", v.invariant, v.detail));
    }
    // The history is still good for a strict provider.
    let after = FakeServer::strict(vec![]);
    let last = run(
        site.tern(
            &after.openai_base(),
            &["exec", "--json", "--continue", "after the race"],
        ),
        None,
        HANG,
    );
    if last.code != Some(0) {
        problems.push(format!("the turn after the race: {}", last.summary()));
    }
    for v in check::after_recovery(&state, &acked, &after.requests(), Some(&id)) {
        problems.push(format!("after the race, {}: {}", v.invariant, v.detail));
    }
    let turns = events.iter().filter(|e| e["type"] == "turn_start").count();
    println!(
        "races: {} processes, {refused} refused with a reason, {turns} turns, {} requests",
        runs.len(),
        requests.len()
    );
    assert!(
        turns >= 2,
        "the race ran at least the setup turn and one more"
    );
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// `--wait` waits for a running turn instead of refusing (README: "`--wait` waits for it
/// instead"), also when a turn takes the session between its wait and its start: here ten turns
/// and ten waiting verbs start at once, three times over. A refusal for any other reason (no
/// draft left to confirm) is fine.
#[test]
fn wait_never_refuses_for_a_running_turn() {
    let fake = FakeServer::strict(vec![]);
    fake.set_responder(responder(Arc::new(AtomicUsize::new(0))));
    let site = Site::new();
    let base = fake.openai_base();
    let setup = run(
        site.tern(&base, &["exec", "--json", "Start the session."]),
        None,
        HANG,
    );
    assert_eq!(setup.code, Some(0), "{}", setup.summary());
    let mut refused = Vec::new();
    for round in 0..ROUNDS {
        let draft = run(
            site.tern(&base, &["plan", "draft"]),
            Some(&format!("1. the draft of round {round}\n")),
            HANG,
        );
        assert_eq!(draft.code, Some(0), "{}", draft.summary());
        let mut cmds = Vec::new();
        for i in 0..10 {
            cmds.push((
                args(&["exec", "--json", "--continue", &format!("turn {i}")]),
                None,
            ));
        }
        for _ in 0..4 {
            cmds.push((args(&["plan", "confirm", "--wait"]), None));
        }
        for _ in 0..6 {
            cmds.push((args(&["compact", "--wait"]), None));
        }
        for (label, r) in race(&site, &base, &cmds) {
            if label.contains("--wait")
                && (r.stderr.contains("is running a turn") || r.code == Some(101) || r.hung)
            {
                refused.push(format!("`tern {label}` (round {round}): {}", r.summary()));
            }
        }
    }
    assert!(
        refused.is_empty(),
        "{} verbs told to wait were refused instead:\n{}",
        refused.len(),
        refused.join("\n")
    );
}
