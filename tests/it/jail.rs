//! The jail (issue 17, DESIGN.md §10): each attack of the issue, as the model's scripted command
//! in the default `--sandbox workspace-write`, checked by its effect; and the everyday work that
//! must still pass inside. Real parts: the `tern` binary, the fake provider, real bash, this
//! kernel's namespaces and Landlock. As root here; `.ci/run` runs this module again as an
//! unprivileged user.

use std::path::Path;

use serde_json::Value;

use crate::support::body::tool_result;
use crate::support::cli::{Ws, ok_no_stdin};
use crate::support::files::jsonl;
use crate::support::script::bash;
use crate::support::{FakeServer, Wire, openai_text};

/// Runs `commands` as the model's bash calls, one per answer, in one `tern exec` with `args`,
/// and returns each call's tool result text.
fn run_cmds(ws: &Ws, args: &[&str], commands: &[&str]) -> Vec<String> {
    let mut script: Vec<_> = commands
        .iter()
        .enumerate()
        .map(|(i, c)| bash(Wire::OpenAi, &format!("c{i}"), c))
        .collect();
    script.push(openai_text("done"));
    let fake = FakeServer::start(script);
    let mut cmd = ws.tern(&fake);
    cmd.arg("exec").args(args).arg("go");
    ok_no_stdin(cmd);
    let conv: Vec<Value> = jsonl(&ws.current_dir().join("conversation.jsonl"));
    (0..commands.len())
        .map(|i| {
            tool_result(&conv, &format!("c{i}"))["content"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

fn one(ws: &Ws, command: &str) -> String {
    run_cmds(ws, &[], &[command]).remove(0)
}

#[test]
fn smoke_commands_run_in_the_jail() {
    let ws = Ws::new();
    let out = one(&ws, "echo pid=$$; id -u; ls /proc | grep -c '^[0-9]'; touch made.txt && echo made");
    eprintln!("{out}");
    assert!(out.contains("made"), "{out}");
    assert!(ws.path().join("made.txt").exists());
    let _ = Path::new("/");
}
