//! Compaction keeps what the person said (issue 41): their messages verbatim after the summary,
//! whatever the summary says; a summary that is not one (a refusal, an acknowledgement) archives
//! nothing; `tern compact` takes the run's settings. The real `tern` against the fake provider.

use serde_json::Value;

use crate::support::Wire;
use crate::support::cli::{WireWs, run};
use crate::support::script::text;

/// What the person states over a session: a rule, a limit, a fact, a goal, a preference.
const SEEDS: [&str; 5] = [
    "Rule: never run git push, whatever happens.",
    "Limit: keep the whole job under 5 dollars.",
    "Fact: the staging database is db-7 on port 5433.",
    "Goal: the CSV importer handles quoted newlines.",
    "Preference: small commits with imperative subjects.",
];

/// A summary that passes as one and says nothing of the seeds.
const BLAND: &str = "Work on the project went on; the files show the current state, and the next step is to continue where the work stopped. Nothing else is recorded here.";

/// A workspace where the person said each seed in its own turn (one answer each).
fn seeded(wire: Wire) -> WireWs {
    let ws = WireWs::new(wire, Vec::new());
    for (i, seed) in SEEDS.iter().enumerate() {
        ws.push(vec![text(wire, &format!("noted {i}"))]);
        let args: Vec<&str> = if i == 0 {
            vec!["exec", seed]
        } else {
            vec!["exec", "--continue", seed]
        };
        ws.ok(&args);
    }
    ws
}

/// The text of a request body (every message's text, tails included).
fn all_text(body: &Value) -> String {
    body["messages"].to_string()
}

/// After `tern compact` with a summary that says nothing of them, every seed the person said is
/// in the next request, verbatim; on both wires.
#[test]
fn the_persons_words_outlive_a_summary_that_drops_them() {
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let ws = seeded(wire);
        ws.push(vec![text(wire, BLAND), text(wire, "continuing")]);
        ws.ok(&["compact"]);
        ws.ok(&["exec", "--continue", "go on"]);
        let last = ws.bodies().pop().unwrap();
        let t = all_text(&last);
        for seed in SEEDS {
            assert!(t.contains(seed), "{wire:?}: {seed:?} is gone: {t}");
        }
        assert!(t.contains("[Earlier in this session the person said, verbatim:]"));
        // The conversation says who wrote what.
        let conv = ws.read("conversation.jsonl");
        assert!(conv.contains("\"by\":\"tern\"") && conv.contains("\"by\":\"recalled\""));
    }
}

/// Five rounds of compaction: the seeds survive every one, said once each (never relabelled
/// twice), and the summary does not grow with them.
#[test]
fn the_persons_words_survive_five_rounds() {
    let w = Wire::OpenAi;
    let ws = seeded(w);
    for round in 0..5 {
        ws.push(vec![text(w, BLAND), text(w, &format!("round {round}"))]);
        ws.ok(&["compact"]);
        ws.ok(&["exec", "--continue", &format!("work of round {round}")]);
    }
    let last = ws.bodies().pop().unwrap();
    let t = all_text(&last);
    for seed in SEEDS {
        assert_eq!(t.matches(seed).count(), 1, "{seed:?} in {t}");
    }
    for round in 0..4 {
        assert!(t.contains(&format!("work of round {round}")), "{t}");
    }
}

/// A refusal, then an acknowledgement, as the summary: the compaction fails and archives
/// nothing (the conversation as it was, no archive file), and says why; a refusal followed by a
/// real summary is taken on the second ask, which tells the model why the first was not.
#[test]
fn a_summary_that_is_not_one_archives_nothing() {
    let w = Wire::OpenAi;
    let ws = seeded(w);
    let before = ws.read("conversation.jsonl");
    ws.push(vec![
        text(w, "I'm sorry, but I can't assist with that request."),
        text(w, "Sure, I will write the summary."),
    ]);
    let out = ws.tern(&["compact"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing was changed"), "{err}");
    assert_eq!(ws.read("conversation.jsonl"), before);
    assert!(
        !ws.path("archive").exists()
            || std::fs::read_dir(ws.path("archive"))
                .unwrap()
                .next()
                .is_none()
    );

    ws.push(vec![
        text(w, "I'm sorry, but I can't help with that."),
        text(w, BLAND),
    ]);
    ws.ok(&["compact"]);
    let bodies = ws.bodies();
    let retry = all_text(&bodies[bodies.len() - 1]);
    assert!(retry.contains("was not taken: it was a refusal"), "{retry}");
    assert!(ws.read("conversation.jsonl").contains(BLAND));
}

/// PlanConfirm compacts too: the seeds are in the request after it, verbatim.
#[test]
fn plan_confirm_keeps_the_persons_words() {
    let w = Wire::OpenAi;
    let ws = seeded(w);
    ws.ok_in(&["plan", "draft"], "1. import\n2. test\n");
    ws.push(vec![text(w, BLAND), text(w, "executing")]);
    ws.ok(&["plan", "confirm"]);
    ws.ok(&["exec", "--continue", "start"]);
    let t = all_text(&ws.bodies().pop().unwrap());
    for seed in SEEDS {
        assert!(t.contains(seed), "{seed:?} is gone after PlanConfirm: {t}");
    }
}

/// `tern compact` takes the run's settings: `TERN_MAX_OUTPUT_TOKENS` (and the flag) is the
/// summary's output cap.
#[test]
fn compact_takes_the_output_cap_of_the_run() {
    let w = Wire::OpenAi;
    let ws = seeded(w);
    ws.push(vec![text(w, BLAND)]);
    let mut cmd = ws.cmd(&["compact", "--idle-timeout", "30"]);
    cmd.env("TERN_MAX_OUTPUT_TOKENS", "600");
    assert_eq!(run(cmd, "").code, Some(0));
    let b = ws.bodies().pop().unwrap();
    assert_eq!(b["max_tokens"], 600, "{b}");
    ws.push(vec![text(w, BLAND)]);
    ws.ok(&["compact", "--max-output-tokens", "700"]);
    assert_eq!(ws.bodies().pop().unwrap()["max_tokens"], 700);
}
