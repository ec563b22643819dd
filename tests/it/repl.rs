//! The interactive surface driven through a pipe (stdin not a terminal): approvals, slash
//! commands, status lines, EOF; and the op-table parity test: every op of `tern::ops::OPS` is
//! reachable as a CLI verb and as a slash command, and both give the same receipt for the same
//! state (DESIGN.md §1).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::body::{content, messages, tool_result};
use crate::support::cli::{Ws, ok, run};
use crate::support::files::{jsonl, read, read_json};
use crate::support::procs::{Seen, wait_exit};
use crate::support::script::openai_bash;
use crate::support::{FakeServer, openai_text};
use serde_json::Value;

// ---------------------------------------------------------------- helpers

/// A summary long enough not to count as a placeholder.
const SUMMARY: &str =
    "Summary: the person said hello and the assistant answered; nothing else happened yet.";

// ---------------------------------------------------------------- the REPL through a pipe

/// Approvals (`n`, a bad answer then `y`, `a` for the rest of the session), the slash commands
/// and their outputs, one status line on stderr after each turn, `/quit` (later lines unread).
#[test]
fn repl_approvals_slash_commands_and_status_lines() {
    let fake = FakeServer::strict(vec![
        openai_bash("c1", "touch declined.txt"),
        openai_text("Not run, then."),
        openai_bash("c2", "touch yes.txt"),
        openai_text("Made yes.txt."),
        openai_bash("c3", "touch always1.txt"),
        openai_bash("c4", "touch always2.txt"),
        openai_text("Made both."),
        openai_bash("c5", "touch always3.txt"),
        openai_text("Made always3."),
        openai_text(SUMMARY),
        openai_text("Following the locked plan."),
    ]);
    let ws = Ws::new();
    let input = "make declined.txt\nn\n\
                 make yes.txt\nmaybe\ny\n\
                 make two files\na\n\
                 one more\n\
                 /help\n/status\n/plan\n/draft some plan text\n/plan\n/confirm\n\
                 after confirm\n\
                 /stats\n/sessions\n/foo\n/quit\n\
                 should not run\n";
    let mut cmd = ws.tern(&fake);
    cmd.args(["chat", "--approval", "ask"]);
    let out = ok(cmd, input);
    let ses = ws.current_dir();
    let id = ws.current_id();

    // Approvals.
    assert!(
        !ws.path().join("declined.txt").exists(),
        "n ran the command"
    );
    for f in ["yes.txt", "always1.txt", "always2.txt", "always3.txt"] {
        assert!(ws.path().join(f).exists(), "{f} missing: {out:?}");
    }
    assert_eq!(
        out.stderr.matches("run it? [y]es").count(),
        4,
        "asked for c1, c2 (twice: `maybe` first), c3 only (a = always for the session): {out:?}"
    );
    // The question shows the command whole; the `$ touch declined.txt` line is not repeated.
    assert!(
        out.stderr
            .contains("tern wants to run:\n  touch declined.txt\n"),
        "{out:?}"
    );
    assert_eq!(
        out.stderr.matches("touch declined.txt").count(),
        1,
        "the command once: {out:?}"
    );
    assert_eq!(out.stderr.matches("answer y, n or a").count(), 1, "{out:?}");
    // /confirm compacted the history: the turns before it are in the archive.
    let conv = jsonl(&ses.join("archive/conversation-0001.jsonl"));
    let declined = tool_result(&conv, "c1");
    assert_eq!(declined["is_error"], true);
    assert!(content(&declined).contains("declined"), "{declined}");
    for id in ["c2", "c3", "c4", "c5"] {
        let r = tool_result(&conv, id);
        assert!(r.get("is_error").is_none(), "{r}");
        assert!(content(&r).contains("[exit 0]"), "{r}");
    }

    // One status line after each of the five turns, none for slash commands.
    let status_lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("── "))
        .collect();
    assert_eq!(status_lines.len(), 5, "{out:?}");
    for l in &status_lines {
        assert!(l.contains("tokens in") && l.contains("cache "), "{l}");
    }
    assert!(status_lines[3].ends_with("plan idle"), "{status_lines:?}");
    assert!(
        status_lines[4].ends_with("plan confirmed"),
        "{status_lines:?}"
    );

    // Slash commands.
    for op in tern::ops::OPS {
        assert!(
            out.stdout.contains(op.slash),
            "/help lacks {}: {out:?}",
            op.slash
        );
    }
    for (what, shown) in [
        (
            "/status",
            "To-do\nno To-do items\n\nPlan: idle\n".to_string(),
        ),
        ("/plan", "plan state: idle (revision 0)\n".into()),
        ("/draft", "Draft saved (revision 1, drafting)".into()),
        (
            "/plan",
            "# draft ($PLAN_DRAFT_FILE, not in the prompt)\nsome plan text\n".into(),
        ),
        ("/confirm", "Plan confirmed and locked".into()),
        ("/stats", format!("session {id}: 11 requests")),
        ("/sessions", format!("* {id}")),
        ("/sessions title", "make declined.txt".into()),
    ] {
        assert!(out.stdout.contains(&shown), "{what}: {out:?}");
    }
    assert!(
        out.stderr
            .contains("unknown command /foo; /help and `tern skills` list them"),
        "{out:?}"
    );

    // /confirm: a compaction request, then the plan in system.txt and in the next request.
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 11, "nothing ran after /quit");
    assert!(
        reqs.iter()
            .all(|r| !r.body_str().contains("should not run"))
    );
    let compaction = messages(&reqs[9]);
    assert!(
        content(compaction.last().unwrap()).contains("about to be replaced by your summary"),
        "request 10 is not the compaction"
    );
    let system = read(&ses.join("system.txt"));
    assert!(
        system.ends_with("\n\n<locked_plan>\nsome plan text\n</locked_plan>\n"),
        "{system}"
    );
    assert_eq!(content(&messages(&reqs[10])[0]), system);
    assert!(!content(&messages(&reqs[8])[0]).contains("<locked_plan>\nsome plan text"));
    assert_eq!(read(&ses.join("plan.md")), "some plan text");
    assert_eq!(read(&ses.join("plan.draft.md")), "");
    let plan = read_json(&ses.join("plan.json"));
    assert_eq!(plan["state"], "confirmed", "{plan}");

    // Receipts of the slash ops in events.jsonl.
    let receipts: Vec<String> = jsonl(&ses.join("events.jsonl"))
        .iter()
        .filter(|e| e["type"] == "receipt")
        .map(|e| e["op"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        receipts,
        ["plan.show", "plan.draft", "plan.show", "plan.confirm"],
        "receipt events"
    );
}

/// EOF ends the REPL with exit 0, also when it arrives as the answer to an approval question
/// (taken as no); `"""` blocks and `\` continuations make one prompt.
#[test]
fn repl_eof_ends_with_exit_0_and_multiline_input() {
    let fake = FakeServer::strict(vec![
        openai_text("Got the block."),
        openai_text("Got the continued line."),
        openai_bash("c1", "touch eof.txt"),
        openai_text("Not run."),
    ]);
    let ws = Ws::new();
    let input = "\"\"\"\nline one\nline two\n\"\"\"\nfirst \\\nsecond\nmake eof.txt\n";
    let mut cmd = ws.tern(&fake);
    cmd.arg("chat");
    let out = ok(cmd, input);
    assert!(!ws.path().join("eof.txt").exists());
    let conv = jsonl(&ws.current_dir().join("conversation.jsonl"));
    let users: Vec<String> = conv
        .iter()
        .filter(|m| m["role"] == "user")
        .map(content)
        .collect();
    assert_eq!(
        users,
        ["line one\nline two\n", "first \nsecond", "make eof.txt"]
    );
    assert_eq!(tool_result(&conv, "c1")["is_error"], true);
    assert_eq!(
        out.stderr.lines().filter(|l| l.starts_with("── ")).count(),
        3,
        "{out:?}"
    );
    assert!(out.stdout.contains("Got the block.") && out.stdout.contains("Not run."));
    assert_eq!(fake.requests().len(), 4);

    // An empty stdin: nothing happens, exit 0, no session created.
    let ws2 = Ws::new();
    let mut cmd = ws2.tern(&fake);
    cmd.arg("chat");
    let out = ok(cmd, "");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(!ws2.path().join(".tern/current").exists());
}

// ---------------------------------------------------------------- op-table parity

/// Replaces what legitimately differs between two workspaces: their paths, session ids and
/// wall-clock times.
struct Norm {
    pairs: Vec<(String, &'static str)>,
}

impl Norm {
    fn new(ws: &Ws, ids: &[String]) -> Norm {
        let mut pairs = Vec::new();
        if let Ok(c) = ws.path().canonicalize() {
            pairs.push((c.display().to_string(), "<WS>"));
        }
        pairs.push((ws.path().display().to_string(), "<WS>"));
        for id in ids {
            pairs.push((id.clone(), "<ID>"));
        }
        Norm { pairs }
    }

    fn apply(&self, s: &str) -> String {
        let mut s = s.to_string();
        for (from, to) in &self.pairs {
            s = s.replace(from.as_str(), to);
        }
        strip_times(&s)
    }
}

/// Replaces RFC 3339 times (`2026-11-30T01:21:50Z`, optional fraction) with `<TIME>`.
fn strip_times(s: &str) -> String {
    let b = s.as_bytes();
    let shape = b"dddd-dd-ddTdd:dd:dd";
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        let fits = i + shape.len() <= b.len()
            && shape.iter().zip(&b[i..]).all(|(p, c)| match p {
                b'd' => c.is_ascii_digit(),
                _ => p == c,
            });
        if !fits {
            // Copy one whole character.
            let ch = s[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
            continue;
        }
        let mut j = i + shape.len();
        if b.get(j) == Some(&b'.') {
            j += 1;
            while b.get(j).is_some_and(u8::is_ascii_digit) {
                j += 1;
            }
        }
        if b.get(j) == Some(&b'Z') {
            j += 1;
        }
        out.push_str("<TIME>");
        i = j;
    }
    out
}

/// One side of the parity test: a workspace with its own fake provider and session.
struct Side {
    ws: Ws,
    fake: FakeServer,
    editor: PathBuf,
    first: String,
}

impl Side {
    fn new() -> Side {
        let ws = Ws::new();
        let fake = FakeServer::start(vec![]);
        fake.set_default(openai_text(SUMMARY));
        let mut cmd = ws.tern(&fake);
        cmd.args(["exec", "hello"]);
        ok(cmd, "");
        let editor = ws.path().join("editor.sh");
        std::fs::write(
            &editor,
            "#!/bin/sh\nprintf 'edited draft text\\n' > \"$1\"\n",
        )
        .unwrap();
        let mut perm = std::fs::metadata(&editor).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
        std::fs::set_permissions(&editor, perm).unwrap();
        let first = ws.current_id();
        Side {
            ws,
            fake,
            editor,
            first,
        }
    }

    fn tern(&self) -> Command {
        let mut c = self.ws.tern(&self.fake);
        c.env("EDITOR", &self.editor);
        c
    }

    fn norm(&self) -> Norm {
        let ids: Vec<String> = std::fs::read_dir(self.ws.path().join(".tern/sessions"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let mut n = Norm::new(&self.ws, &ids);
        // Each side's own fake server (its URL shows in the settings of `/status`).
        n.pairs.push((self.fake.openai_base(), "<SERVER>"));
        n
    }

    /// The latest `receipt` event of the current session, if any.
    fn last_receipt(&self) -> Option<Value> {
        jsonl(&self.ws.current_dir().join("events.jsonl"))
            .into_iter()
            .rev()
            .find(|e| e["type"] == "receipt")
    }

    fn receipts(&self) -> usize {
        jsonl(&self.ws.current_dir().join("events.jsonl"))
            .iter()
            .filter(|e| e["type"] == "receipt")
            .count()
    }
}

/// How an op's CLI verb answers.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Verb {
    /// `--json` prints the receipt; the receipt event is written too.
    Receipt,
    /// Prints the same text as the slash command's receipt detail.
    Text,
    /// `tern chat --resume ID`: a REPL on that session.
    Resume,
    /// A flag of `tern exec` (`--goal`): the REPL's receipt, the flag's `result`.
    Flag,
    /// `tern fork` / `tern rewind TURN`: a receipt, and the current session moves to a new one.
    Fork,
    /// No CLI verb (`cli` is empty).
    None,
    /// No CLI verb: a flag is its CLI form (`/model` ~ `--model`); the slash names the model.
    Model,
    /// No CLI verb: `--reasoning-effort` is its CLI form; the slash names the effort and sets
    /// it for the next request.
    Effort,
}

fn verb_kind(op: &tern::ops::Op) -> Verb {
    if op.id.as_str() == "model" {
        return Verb::Model;
    }
    if op.id.as_str() == "effort" {
        return Verb::Effort;
    }
    if op.cli.is_empty() {
        return Verb::None;
    }
    match op.id.as_str() {
        "plan.show" | "plan.path" | "plan.draft" | "plan.edit" | "plan.confirm" | "plan.cancel"
        | "plan.clear" | "compact" | "relay" | "undo" | "redo" | "checkpoints" | "diff" => {
            Verb::Receipt
        }
        "fork" | "rewind" => Verb::Fork,
        "status" | "stats" | "sessions" | "help" | "mcp" => Verb::Text,
        "resume" => Verb::Resume,
        "goal" => Verb::Flag,
        other => panic!("op {other} has no parity check: add it to tests/repl.rs"),
    }
}

/// Every op of the table, as a CLI verb in workspace A and as a slash command in workspace B,
/// step by step from identical states: same op id, ok, before, after and detail (paths, session
/// ids and times aside), in the printed receipt and in the `receipt` events.
#[test]
fn ops_parity_every_op_same_receipt_from_verb_and_slash() {
    let a = Side::new();
    let b = Side::new();

    // `tern ops --json` is the table itself.
    let mut cmd = a.tern();
    cmd.args(["ops", "--json"]);
    let listed: Value = serde_json::from_str(&ok(cmd, "").stdout).expect("ops --json");
    assert_eq!(listed, serde_json::to_value(tern::ops::OPS).unwrap());
    // `tern ops` (= `/help`) is a table: each row starts with its slash command and its verb
    // (where it has one) starts in the column of the header's "verb".
    let mut cmd = a.tern();
    cmd.arg("ops");
    let table = ok(cmd, "").stdout;
    let header = table.lines().next().unwrap();
    let col = header.find("verb").unwrap();
    for (line, op) in table.lines().skip(1).zip(tern::ops::OPS) {
        assert!(
            line.starts_with(&format!("{} ", op.slash)),
            "{line}\n{table}"
        );
        if !op.cli.is_empty() {
            assert_eq!(
                line.find(&format!(" tern {} ", op.cli)).map(|i| i + 1),
                Some(col),
                "misaligned row in tern ops:\n{table}"
            );
        }
    }

    // (op id, argument). Failures are compared too: confirm with no draft, cancel with nothing
    // to cancel, clear with no locked plan, undo and redo with nothing to undo or redo.
    let steps: &[(&str, Option<&str>)] = &[
        ("plan.show", None),
        ("plan.confirm", None),
        ("plan.path", None),
        ("plan.draft", Some("first draft text")),
        ("plan.edit", None),
        ("plan.show", None),
        ("plan.cancel", None),
        ("plan.cancel", None),
        ("plan.draft", Some("the plan to confirm")),
        ("plan.confirm", None),
        ("plan.show", None),
        ("plan.clear", None),
        ("plan.clear", None),
        ("compact", None),
        ("status", None),
        ("relay", None),
        ("stats", None),
        ("sessions", None),
        ("help", None),
        ("checkpoints", None),
        ("diff", None),
        ("undo", None),
        ("redo", None),
        ("fork", None),
        ("rewind", Some("1")),
        ("model", None),
        ("effort", None),
        ("mcp", None),
        ("resume", None),
        ("goal", Some("true")),
        ("quit", None),
    ];
    let mut covered = BTreeSet::new();
    let mut failures = 0;
    for (i, (id, arg)) in steps.iter().enumerate() {
        let op = tern::ops::by_id(id).unwrap_or_else(|| panic!("no op {id}"));
        covered.insert(op.id.as_str());
        let step = format!("step {i} ({} / {})", op.cli, op.slash);
        match verb_kind(op) {
            Verb::Receipt => {
                let before_a = a.receipts();
                let mut cmd = a.tern();
                cmd.args(op.cli.split_whitespace()).arg("--json");
                let cli = run(cmd, arg.unwrap_or(""));
                let before_b = b.receipts();
                let mut cmd = b.tern();
                cmd.args(["chat", "--continue"]);
                let line = match arg {
                    Some(t) => format!("{} {t}\n", op.slash),
                    None => format!("{}\n", op.slash),
                };
                let repl = ok(cmd, &line);

                let r: Value = serde_json::from_str(cli.stdout.trim())
                    .unwrap_or_else(|e| panic!("{step}: receipt JSON: {e}\n{cli:?}"));
                let want_code = if r["ok"] == true { 0 } else { 1 };
                assert_eq!(cli.code, Some(want_code), "{step}: {cli:?}");
                if r["ok"] == false {
                    failures += 1;
                }
                assert_eq!(r["op"], op.id.as_str(), "{step}");
                assert_eq!(r["session"], a.ws.current_id(), "{step}");
                assert!(r["time"].as_str().is_some_and(|t| t.len() >= 20), "{step}");
                assert_eq!(
                    a.receipts(),
                    before_a + 1,
                    "{step}: CLI wrote no receipt event"
                );
                assert_eq!(
                    b.receipts(),
                    before_b + 1,
                    "{step}: REPL wrote no receipt event"
                );
                let (ea, eb) = (a.last_receipt().unwrap(), b.last_receipt().unwrap());
                for k in ["op", "ok", "before", "after"] {
                    assert_eq!(r[k], eb[k], "{step}: {k}: CLI {r} vs REPL event {eb}");
                    assert_eq!(ea[k], eb[k], "{step}: {k}: events {ea} vs {eb}");
                }
                let (na, nb) = (a.norm(), b.norm());
                let detail_a = na.apply(r["detail"].as_str().unwrap_or(""));
                // The REPL prints the detail on stdout when ok, `tern: detail` on stderr when not.
                let detail_b = if eb["ok"] == true {
                    nb.apply(repl.stdout.strip_suffix('\n').unwrap_or(&repl.stdout))
                } else {
                    let line = repl
                        .stderr
                        .lines()
                        .find_map(|l| l.strip_prefix("tern: "))
                        .unwrap_or_else(|| panic!("{step}: no error line: {repl:?}"));
                    nb.apply(line)
                };
                assert_eq!(detail_a, detail_b, "{step}: detail");
                assert!(!detail_a.is_empty(), "{step}");
                if ea.get("detail").is_some() || eb.get("detail").is_some() {
                    assert_eq!(
                        na.apply(ea["detail"].as_str().unwrap_or("")),
                        nb.apply(eb["detail"].as_str().unwrap_or("")),
                        "{step}: event detail"
                    );
                }
            }
            Verb::Text => {
                let mut cmd = a.tern();
                cmd.args(op.cli.split_whitespace());
                let cli = ok(cmd, "");
                let mut cmd = b.tern();
                cmd.args(["chat", "--continue"]);
                let repl = ok(cmd, &format!("{}\n", op.slash));
                assert_eq!(
                    a.norm().apply(cli.stdout.trim_end()),
                    b.norm().apply(repl.stdout.trim_end()),
                    "{step}"
                );
                assert!(!cli.stdout.trim().is_empty(), "{step}");
            }
            Verb::Fork => {
                let (from_a, from_b) = (a.ws.current_id(), b.ws.current_id());
                let mut cmd = a.tern();
                cmd.args(op.cli.split_whitespace())
                    .args(arg.iter())
                    .arg("--json");
                let cli = ok(cmd, "");
                let mut cmd = b.tern();
                cmd.args(["chat", "--continue"]);
                let line = match arg {
                    Some(t) => format!("{} {t}\n", op.slash),
                    None => format!("{}\n", op.slash),
                };
                let repl = ok(cmd, &line);
                assert_ne!(a.ws.current_id(), from_a, "{step}: the CLI moved current");
                assert_ne!(b.ws.current_id(), from_b, "{step}: the REPL moved current");
                let r: Value = serde_json::from_str(cli.stdout.trim())
                    .unwrap_or_else(|e| panic!("{step}: receipt JSON: {e}\n{cli:?}"));
                assert_eq!(r["ok"], true, "{step}: {cli:?}");
                assert_eq!(r["op"], op.id.as_str(), "{step}");
                let detail_b = repl.stdout.lines().next().unwrap_or("");
                assert_eq!(
                    a.norm().apply(r["detail"].as_str().unwrap_or("")),
                    b.norm().apply(detail_b),
                    "{step}: detail"
                );
            }
            Verb::Resume => {
                // A second session in each workspace, then back to the first one.
                for s in [&a, &b] {
                    let mut cmd = s.tern();
                    cmd.args(["exec", "a second session"]);
                    ok(cmd, "");
                    assert_ne!(s.ws.current_id(), s.first);
                }
                let mut cmd = a.tern();
                cmd.args(op.cli.split_whitespace()).arg(&a.first);
                let cli = ok(cmd, "");
                let mut cmd = b.tern();
                cmd.arg("chat");
                let repl = ok(cmd, &format!("{} {}\n", op.slash, b.first));
                assert_eq!(a.ws.current_id(), a.first, "{step}");
                assert_eq!(b.ws.current_id(), b.first, "{step}");
                assert_eq!(
                    a.norm().apply(cli.stderr.trim_end()),
                    b.norm().apply(repl.stderr.trim_end()),
                    "{step}"
                );
                assert!(cli.stderr.contains(&format!("resumed session {}", a.first)));
            }
            Verb::Flag => {
                // `/goal CMD` sets the session's goal; `tern exec --goal CMD` sets it and runs
                // it at the end of its turn: the same goal.json either way.
                let mut cmd = a.tern();
                cmd.args(["exec", "--continue", "--json", "--goal", arg.unwrap_or("")])
                    .arg("go on");
                let cli = ok(cmd, "");
                let result: Value =
                    serde_json::from_str(cli.stdout.lines().last().unwrap_or("")).unwrap();
                assert_eq!(result["goal"]["passed"], true, "{step}: {cli:?}");
                let mut cmd = b.tern();
                cmd.args(["chat", "--continue"]);
                let repl = ok(cmd, &format!("{} {}\ngo on\n", op.slash, arg.unwrap_or("")));
                assert!(repl.stdout.contains("goal set"), "{step}: {repl:?}");
                // The REPL's turn ran the goal too.
                assert!(
                    repl.stderr.contains("hook Stop `--goal true`: ok"),
                    "{step}: {repl:?}"
                );
                let goal = |s: &Side| {
                    let g: Value = serde_json::from_str(
                        &std::fs::read_to_string(s.ws.current_dir().join("goal.json")).unwrap(),
                    )
                    .unwrap();
                    (g["command"].clone(), g["max_attempts"].clone())
                };
                assert_eq!(goal(&a), goal(&b), "{step}");
                // Cleared again, so later steps see the same sessions.
                for s in [&a, &b] {
                    let mut cmd = s.tern();
                    cmd.args(["chat", "--continue"]);
                    ok(cmd, &format!("{} off\n", op.slash));
                }
            }
            Verb::Model => {
                let mut cmd = b.tern();
                cmd.args(["chat", "--continue"]);
                let repl = ok(cmd, &format!("{}\n", op.slash));
                assert!(repl.stdout.contains("model: m"), "{step}: {repl:?}");
            }
            Verb::Effort => {
                let mut cmd = b.tern();
                cmd.args(["chat", "--continue"]);
                let repl = ok(
                    cmd,
                    &format!(
                        "{}\n{} high\n{}\n{} extreme\n",
                        op.slash, op.slash, op.slash, op.slash
                    ),
                );
                assert!(
                    repl.stdout
                        .contains("reasoning effort: the model's default")
                        && repl.stdout.contains("the model's default → high")
                        && repl.stdout.contains("reasoning effort: high"),
                    "{step}: {repl:?}"
                );
                assert!(
                    repl.stderr.contains("expected none, minimal"),
                    "{step}: {repl:?}"
                );
            }
            Verb::None => {
                // /quit leaves before reading the next line.
                let mut cmd = b.tern();
                cmd.args(["chat", "--continue"]);
                let repl = ok(cmd, &format!("{}\n/plan\n", op.slash));
                assert!(repl.stdout.is_empty(), "{step}: read past /quit: {repl:?}");
            }
        }
    }
    let all: BTreeSet<&str> = tern::ops::OPS.iter().map(|o| o.id.as_str()).collect();
    assert_eq!(covered, all, "ops without a parity step");
    assert_eq!(
        failures, 5,
        "the five refused steps (confirm, cancel and clear out of order; undo and redo with nothing to do) were refused on both surfaces"
    );
    // The model ops called each side's provider the same number of times.
    assert_eq!(a.fake.requests().len(), b.fake.requests().len());
}

// ---------------------------------------------------------------- SIGTERM

/// `kill PID` (SIGTERM) ends `tern chat`: at the prompt it leaves; during a tool call it stops
/// the call (its result stored, as for Ctrl-C) and then leaves, instead of reading on.
#[test]
fn repl_sigterm_ends_the_repl() {
    let fake = FakeServer::strict(vec![
        openai_text("Hello."),
        openai_bash("c1", "sleep 63.29"),
        openai_text("unused"),
    ]);
    for during_turn in [false, true] {
        let ws = Ws::new();
        let mut cmd = ws.tern(&fake);
        cmd.args(["chat", "--approval", "auto"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn tern chat");
        // stdin stays open: the REPL is waiting for a person, not at EOF.
        let mut stdin = child.stdin.take().unwrap();
        let seen = Seen::start(child.stderr.take().unwrap());
        if during_turn {
            stdin.write_all(b"run the slow thing\n").unwrap();
            seen.wait_for("$ sleep 63.29");
        } else {
            stdin.write_all(b"hello\n").unwrap();
            seen.wait_for("── ");
        }
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let Some(status) = wait_exit(&mut child, Duration::from_secs(10)) else {
            panic!(
                "tern chat still running 10 s after SIGTERM (during a turn: {during_turn}):\n{}",
                seen.text()
            );
        };
        drop(stdin);
        // Ended by tern itself (an exit code), not by the signal's default action.
        assert!(status.code().is_some(), "{status:?}");
        let meta = read_json(&ws.current_dir().join("meta.json"));
        assert_ne!(meta["status"], "running", "{meta}");
        if during_turn {
            let conv = jsonl(&ws.current_dir().join("conversation.jsonl"));
            assert_eq!(tool_result(&conv, "c1")["is_error"], true);
        }
    }
}
