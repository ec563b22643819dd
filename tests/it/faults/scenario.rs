//! The scripted sessions the kill-point sweep replays: each a list of tern processes run in
//! sequence in one workspace, each with the fake provider's script for that process. Tool-call
//! ids are unique over a scenario, so "this result was acknowledged" names one call.
//!
//! - `exec`: two `tern exec` turns with bash calls (two in one answer, a spilled output) and
//!   `work_update` ledger updates, and an `update_plan`.
//! - `verbs`: the lifecycle through the CLI: a turn that drafts with bash, `tern plan draft`,
//!   `tern plan confirm` (a compaction), a turn that works the ledger, `tern relay`,
//!   `tern plan clear` (a compaction), a new draft and `tern plan cancel`, `tern compact`, and a
//!   last turn.
//! - `tools`: the lifecycle through the model's tools inside one turn: `plan_draft`,
//!   `plan_confirm` (its compaction keeps the calling message), work, `plan_clear`.
//! - `agents` (where the build has the `agent` tool): a turn that starts a fresh sub-agent and a
//!   forked one, each running a bash call in its own session folder under `agents/`.

use serde_json::json;

use crate::support::Reply;
use crate::support::Wire;
use crate::support::script::{bash, call, calls, text, todo, work};

const W: Wire = Wire::OpenAi;

/// A compaction summary long enough not to count as a placeholder.
const SUMMARY: &str = "The person asked for notes and two files; notes.txt, a.txt and b.txt were written and checked. Next: finish the remaining To-do items.";

/// One tern process of a scenario.
#[derive(Clone)]
pub struct Step {
    /// Shown in reports.
    pub name: &'static str,
    /// `tern ARGS`.
    pub args: Vec<&'static str>,
    /// What goes to its stdin (None: /dev/null).
    pub stdin: Option<&'static str>,
    /// The provider's script for this process (then the default answer, "Done.").
    pub replies: Vec<Reply>,
    /// It writes a new draft over the old one (so the old one may go).
    pub replaces_draft: bool,
    /// It restores the workspace from a checkpoint (undo, redo, rewind): a kill leaves the
    /// files as before it or as after it, never a mix, and a finished restore is said.
    pub restores: bool,
}

fn step(name: &'static str, args: &[&'static str], replies: Vec<Reply>) -> Step {
    Step {
        name,
        args: args.to_vec(),
        stdin: None,
        replies,
        replaces_draft: false,
        restores: false,
    }
}

/// `s`, which restores the workspace from a checkpoint.
fn restoring(s: Step) -> Step {
    Step {
        restores: true,
        ..s
    }
}

/// `s`, which writes a new draft over the old one.
fn drafting(s: Step) -> Step {
    Step {
        replaces_draft: true,
        ..s
    }
}

/// A scenario: a name and its steps.
pub struct Scenario {
    /// Shown in reports.
    pub name: &'static str,
    /// The processes, in order.
    pub steps: Vec<Step>,
}

/// Every scenario of the sweep; `agents` only in a build whose model has the `agent` tool.
pub fn all() -> Vec<Scenario> {
    let mut out = vec![exec(), verbs(), tools(), checkpoints()];
    if tern::tools::specs().iter().any(|t| t.name == "agent") {
        out.push(agents());
    }
    out
}

/// Checkpoints (issue 20): two turns change files through bash (each recording a checkpoint
/// first), then `undo`, `redo`, `undo 2`, `rewind 1` (a restore and a fork), `fork --at 1` of
/// the fork, and a turn in it.
fn checkpoints() -> Scenario {
    Scenario {
        name: "checkpoints",
        steps: vec![
            step(
                "exec: a turn writes files",
                &["exec", "--json", "Write a.txt and b.txt."],
                vec![
                    bash(
                        W,
                        "k-b1",
                        "echo one > a.txt && echo b > b.txt && mkdir -p d && echo e > d/e.txt",
                    ),
                    text(W, "Written."),
                ],
            ),
            step(
                "exec --continue: a turn changes them",
                &["exec", "--json", "--continue", "Change them."],
                vec![
                    bash(
                        W,
                        "k-b2",
                        "echo two > a.txt && rm b.txt && rm -r d && echo n > n.txt",
                    ),
                    text(W, "Changed."),
                ],
            ),
            restoring(step("undo", &["undo"], vec![])),
            restoring(step("redo", &["redo"], vec![])),
            restoring(step("undo 2", &["undo", "2"], vec![])),
            restoring(step("rewind 1", &["rewind", "1"], vec![])),
            step("fork --at 1", &["fork", "--at", "1"], vec![]),
            step(
                "exec --continue: a turn in the fork",
                &["exec", "--json", "--continue", "Go on in the fork."],
                vec![bash(W, "k-b3", "echo three > a.txt"), text(W, "Three.")],
            ),
        ],
    }
}

fn exec() -> Scenario {
    Scenario {
        name: "exec",
        steps: vec![
            step(
                "exec: bash and ledger",
                &["exec", "--json", "Write notes.txt and track the work."],
                vec![
                    work(
                        W,
                        "e-w1",
                        vec![
                            todo("1", "write notes", "in_progress"),
                            todo("2", "check them", "pending"),
                        ],
                    ),
                    bash(W, "e-b1", "echo one > notes.txt && cat notes.txt"),
                    calls(
                        W,
                        &[
                            ("e-b2", "bash", json!({"command": "echo two >> notes.txt"})),
                            ("e-b3", "bash", json!({"command": "wc -l notes.txt"})),
                        ],
                    ),
                    work(
                        W,
                        "e-w2",
                        vec![
                            todo("1", "write notes", "completed"),
                            todo("2", "check them", "in_progress"),
                        ],
                    ),
                    text(W, "Notes written."),
                ],
            ),
            step(
                "exec --continue: spill, strategy, ledger",
                &["exec", "--json", "--continue", "Check them and finish."],
                vec![
                    bash(W, "e-b4", "seq 1 20000"),
                    call(
                        W,
                        "e-u1",
                        "update_plan",
                        json!({"title": "Notes", "approach": "write, then check"}),
                    ),
                    work(
                        W,
                        "e-w3",
                        vec![
                            todo("1", "write notes", "completed"),
                            todo("2", "check them", "completed"),
                        ],
                    ),
                    text(W, "All checked."),
                ],
            ),
        ],
    }
}

fn verbs() -> Scenario {
    Scenario {
        name: "verbs",
        steps: vec![
            drafting(step(
                "exec: draft with bash",
                &["exec", "--json", "Plan two files first."],
                vec![
                    work(
                        W,
                        "v-w1",
                        vec![
                            todo("a", "write a.txt", "pending"),
                            todo("b", "write b.txt", "pending"),
                        ],
                    ),
                    bash(
                        W,
                        "v-b1",
                        r#"printf '1. write a.txt\n2. write b.txt\n' > "$PLAN_DRAFT_FILE" && echo drafted"#,
                    ),
                    text(W, "Drafted; please confirm."),
                ],
            )),
            drafting(Step {
                stdin: Some("1. write a.txt\n2. write b.txt\n3. check both\n"),
                ..step("plan draft", &["plan", "draft"], vec![])
            }),
            step("plan confirm", &["plan", "confirm"], vec![text(W, SUMMARY)]),
            step(
                "exec --continue: work the plan",
                &["exec", "--json", "--continue", "Confirmed. Go ahead."],
                vec![
                    work(
                        W,
                        "v-w2",
                        vec![
                            todo("a", "write a.txt", "in_progress"),
                            todo("b", "write b.txt", "pending"),
                        ],
                    ),
                    bash(W, "v-b2", "echo a > a.txt && cat a.txt"),
                    work(
                        W,
                        "v-w3",
                        vec![
                            todo("a", "write a.txt", "completed"),
                            todo("b", "write b.txt", "in_progress"),
                        ],
                    ),
                    bash(W, "v-b3", "echo b > b.txt && seq 1 20000"),
                    work(
                        W,
                        "v-w4",
                        vec![
                            todo("a", "write a.txt", "completed"),
                            todo("b", "write b.txt", "completed"),
                        ],
                    ),
                    text(W, "Both written."),
                ],
            ),
            step("relay", &["relay"], vec![]),
            step("plan clear", &["plan", "clear"], vec![text(W, SUMMARY)]),
            drafting(Step {
                stdin: Some("4. tidy up\n"),
                ..step("plan draft (again)", &["plan", "draft"], vec![])
            }),
            step("plan cancel", &["plan", "cancel"], vec![]),
            step("compact", &["compact"], vec![text(W, SUMMARY)]),
            step(
                "exec --continue: last turn",
                &["exec", "--json", "--continue", "Anything left?"],
                vec![bash(W, "v-b4", "cat a.txt b.txt"), text(W, "Nothing left.")],
            ),
        ],
    }
}

fn tools() -> Scenario {
    Scenario {
        name: "tools",
        steps: vec![drafting(step(
            "exec: plan tools in one turn",
            &["exec", "--json", "Plan it, confirm it, do it, clear it."],
            vec![
                call(
                    W,
                    "t-p1",
                    "plan_draft",
                    json!({"content": "1. write t.txt\n2. show it\n"}),
                ),
                call(W, "t-p2", "plan_confirm", json!({})),
                // The confirm's compaction.
                text(W, SUMMARY),
                work(
                    W,
                    "t-w1",
                    vec![
                        todo("1", "write t.txt", "in_progress"),
                        todo("2", "show it", "pending"),
                    ],
                ),
                bash(W, "t-b1", "echo t > t.txt && cat t.txt"),
                work(
                    W,
                    "t-w2",
                    vec![
                        todo("1", "write t.txt", "completed"),
                        todo("2", "show it", "completed"),
                    ],
                ),
                call(W, "t-p3", "plan_clear", json!({})),
                // The clear's compaction.
                text(W, SUMMARY),
                text(W, "Done and cleared."),
            ],
        ))],
    }
}

fn agents() -> Scenario {
    // Children run one at a time here (one call per answer), so the one script serves parent
    // and children in a fixed order.
    Scenario {
        name: "agents",
        steps: vec![step(
            "exec: two sub-agents",
            &["exec", "--json", "Delegate the two files."],
            vec![
                call(W, "g-a1", "agent", json!({"task": "Write c.txt."})),
                bash(W, "g-b1", "echo c > c.txt && cat c.txt"),
                text(W, "The child wrote c.txt."),
                call(
                    W,
                    "g-a2",
                    "agent",
                    json!({"task": "Write d.txt.", "fork": true}),
                ),
                bash(W, "g-b2", "echo d > d.txt && cat d.txt"),
                text(W, "The fork wrote d.txt."),
                text(W, "Both delegated and done."),
            ],
        )],
    }
}
