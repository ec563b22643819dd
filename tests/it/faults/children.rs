//! Sub-agents after a crash (issue 18, item 2): a parent killed at a point of its `agent` call
//! (before the child's folder was committed, while the child ran, after the child completed but
//! before its result was recorded) is resumed with `tern exec --continue`; the repaired result
//! of the call must tell what the child's own record says, every path it names must exist, and
//! nothing half-built or temporary is left in the children's folders. The sweep's `agents`
//! scenario checks the same at every point (the `agent_result_untrue` invariant).

use serde_json::{Value, json};

use super::check::{self, Acked};
use super::run::{HANG, Point, Site, points, run};
use crate::support::script::{call, text};
use crate::support::{FakeServer, Reply, Wire};

const W: Wire = Wire::OpenAi;
const ANSWER: &str = "The child's answer: the build needs 42 steps.";

fn script() -> Vec<Reply> {
    vec![
        call(
            W,
            "c-a1",
            "agent",
            json!({"task": "Count the build steps."}),
        ),
        text(W, ANSWER),
        text(W, "The child counted them."),
    ]
}

/// The points of the parent's run, in order.
fn dry() -> Vec<Point> {
    let site = Site::new();
    let fake = FakeServer::strict(script());
    let log = site.log("dry");
    let mut cmd = site.tern(&fake.openai_base(), &["exec", "--json", "Delegate it."]);
    cmd.env("TERN_FAULT_LOG", &log);
    let r = run(cmd, None, HANG);
    assert_eq!(r.code, Some(0), "{}", r.summary());
    assert_eq!(fake.remaining(), 0, "the script was used up");
    points(&log, &site.root())
}

/// Dies at point `at` (1-based), resumes, and returns the site, the parent's id and the stored
/// result of the call.
fn crash_and_resume(at: usize) -> (Site, String, Value) {
    let site = Site::new();
    let fake = FakeServer::strict(script());
    let mut cmd = site.tern(&fake.openai_base(), &["exec", "--json", "Delegate it."]);
    cmd.env("TERN_FAULT_AT", at.to_string());
    let r = run(cmd, None, HANG);
    assert!(r.killed(), "point {at}: {}", r.summary());
    let id = site.current().expect("the parent is current");
    let strict = FakeServer::strict(vec![text(W, "Resumed.")]);
    let resumed = run(
        site.tern(
            &strict.openai_base(),
            &["exec", "--json", "--continue", "go on"],
        ),
        None,
        HANG,
    );
    assert_eq!(resumed.code, Some(0), "point {at}: {}", resumed.summary());
    let found: Vec<_> = check::files(&site.state(), &Acked::default(), Some(&id))
        .into_iter()
        .chain(check::sent(&strict.requests()))
        .collect();
    assert!(found.is_empty(), "point {at}: {found:?}");
    let conv = std::fs::read_to_string(
        site.state()
            .join("sessions")
            .join(&id)
            .join("conversation.jsonl"),
    )
    .expect("conversation");
    let result = conv
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "c-a1")
        .expect("the call has a result");
    (site, id, result)
}

fn place(pts: &[Point], f: impl Fn(&Point) -> bool, what: &str) -> usize {
    pts.iter()
        .position(f)
        .unwrap_or_else(|| panic!("no point {what} in {pts:?}"))
        + 1
}

#[test]
fn a_repaired_agent_result_tells_what_the_child_did() {
    let pts = dry();
    let is_child = |p: &Point, file: &str| {
        p.path.starts_with("sessions/<id>/agents/<id>/") && p.path.ends_with(file)
    };

    // Completed, its result not recorded: the answer, not "interrupted", not an error.
    let at = place(
        &pts,
        |p| p.kind == "create" && is_child(p, "/report.md"),
        "creating report.md",
    );
    let (_site, _, r) = crash_and_resume(at);
    let c = r["content"].as_str().unwrap_or("");
    assert!(
        c.contains(ANSWER) && c.contains("tern restarted") && c.contains(": completed;"),
        "completed: {c}"
    );
    assert_ne!(
        r["is_error"], true,
        "a completed child's answer is no error: {r}"
    );

    // Never started: the folder was not committed yet.
    let at = place(
        &pts,
        |p| p.kind == "mkdir" && p.path.starts_with("sessions/<id>/agents/.tmp-"),
        "making the child's folder",
    );
    let (site, id, r) = crash_and_resume(at);
    let c = r["content"].as_str().unwrap_or("");
    assert!(
        c.contains("before the sub-agent for this call started") && !c.contains("was running"),
        "never started: {c}"
    );
    let agents = site.state().join("sessions").join(&id).join("agents");
    assert!(
        check::half_built(&agents).is_empty(),
        "{:?}",
        check::half_built(&agents)
    );

    // Killed mid-creation, before the commit: the same, and the half-built folder is swept.
    let at = place(
        &pts,
        |p| {
            p.kind == "create"
                && p.path.starts_with("sessions/<id>/agents/.tmp-")
                && p.path.ends_with("/system.txt")
        },
        "writing the child's system.txt",
    );
    let (site, id, r) = crash_and_resume(at);
    let c = r["content"].as_str().unwrap_or("");
    assert!(
        c.contains("before the sub-agent for this call started"),
        "half-built: {c}"
    );
    let agents = site.state().join("sessions").join(&id).join("agents");
    assert!(
        check::half_built(&agents).is_empty(),
        "{:?}",
        check::half_built(&agents)
    );

    // Running: its answer was being stored.
    let at = place(
        &pts,
        |p| p.kind == "appended" && is_child(p, "/conversation.jsonl"),
        "appending to the child's conversation",
    );
    let (site, id, r) = crash_and_resume(at);
    let c = r["content"].as_str().unwrap_or("");
    let kid = std::fs::read_dir(site.state().join("sessions").join(&id).join("agents"))
        .expect("agents")
        .flatten()
        .next()
        .expect("one child")
        .file_name()
        .to_string_lossy()
        .into_owned();
    assert!(
        c.contains(&format!("the sub-agent session {kid} was running"))
            && c.contains("marked interrupted"),
        "running: {c}"
    );
    assert!(
        !c.contains("report.md")
            || site
                .state()
                .join("sessions")
                .join(&id)
                .join("agents")
                .join(&kid)
                .join("report.md")
                .is_file(),
        "{c}"
    );
}
