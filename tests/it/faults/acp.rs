//! An ACP turn killed at every fault point (issue 30): `tern acp` runs `initialize`,
//! `session/new` and a `session/prompt` whose turn runs a command (so the session's creation,
//! the first checkpoint and the turn's records are all on the way), dying at point k. The next
//! start (`tern exec --resume` of that session, or a new one when none was made) leaves no temp
//! file in the state folder, its sessions, the session's folder or the checkpoint store, and a
//! turn the kill cut is said to be interrupted, never completed.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc::{Receiver, channel};

use serde_json::{Value, json};

use super::check::{half_built, temps};
use super::run::{HANG, Site, points, run};
use crate::support::procs::wait_exit;
use crate::support::script::{bash, text};
use crate::support::{FakeServer, Reply, Wire};

const W: Wire = Wire::OpenAi;

fn script() -> Vec<Reply> {
    vec![bash(W, "acp-b1", "echo one > a.txt"), text(W, "Written.")]
}

/// Drives one `tern acp` through a prompt turn as an editor would, each message sent once the
/// last one's answer came. Returns whether the turn's response came (false: the process died
/// on the way).
fn drive(mut cmd: Command, cwd: &std::path::Path) -> bool {
    cmd.arg("acp")
        .args(["--approval", "auto"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().expect("spawn tern acp");
    let mut stdin = child.stdin.take().expect("stdin");
    let out = child.stdout.take().expect("stdout");
    let (tx, rx) = channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx
                .send(serde_json::from_str(&line).unwrap_or(Value::Null))
                .is_err()
            {
                break;
            }
        }
    });
    let mut send = |id: u64, method: &str, params: Value| {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{line}").is_ok() && stdin.flush().is_ok()
    };
    // The response to request `id`; None when the process is gone (its stdout closed).
    let answer = |rx: &Receiver<Value>, id: u64| loop {
        match rx.recv_timeout(HANG) {
            Ok(v) if v["id"] == id && v.get("method").is_none() => return Some(v),
            Ok(_) => continue,
            Err(_) => return None,
        }
    };
    let init = json!({"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "kill", "version": "1"}});
    let mut done = false;
    if send(1, "initialize", init) && answer(&rx, 1).is_some() {
        let new = json!({"cwd": cwd.display().to_string(), "mcpServers": []});
        if send(2, "session/new", new)
            && let Some(r) = answer(&rx, 2)
            && let Some(sid) = r["result"]["sessionId"].as_str()
        {
            let prompt =
                json!({"sessionId": sid, "prompt": [{"type": "text", "text": "Write a.txt."}]});
            done = send(3, "session/prompt", prompt) && answer(&rx, 3).is_some();
        }
    }
    drop(stdin);
    let _ = wait_exit(&mut child, HANG);
    done
}

/// Every `.tmp-*` left where a start must have swept: the state folder, `sessions/`, the
/// checkpoint store, each session's folder and its `archive/`.
fn leftovers(state: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut left: Vec<_> = temps(state)
        .into_iter()
        .chain(half_built(&state.join("sessions")))
        .chain(temps(&state.join("checkpoints")))
        .chain(temps(&state.join("checkpoints/git/info")))
        .chain(temps(&state.join("checkpoints/git")))
        .collect();
    for e in std::fs::read_dir(state.join("sessions"))
        .into_iter()
        .flatten()
        .flatten()
    {
        left.extend(temps(&e.path()));
        left.extend(temps(&e.path().join("archive")));
    }
    left
}

#[test]
fn an_acp_turn_killed_anywhere_leaves_no_temp_and_no_misstated_turn() {
    let dry = Site::new();
    let fake = FakeServer::strict(script());
    let log = dry.log("dry");
    let mut cmd = dry.tern(&fake.openai_base(), &[]);
    cmd.env("TERN_FAULT_LOG", &log);
    assert!(drive(cmd, &dry.root()), "the dry run's turn answered");
    let n = points(&log, &dry.root()).len();
    assert!(
        n > 20,
        "a session, a checkpoint and a turn pass many points: {n}"
    );
    for k in 1..=n {
        let site = Site::new();
        let fake = FakeServer::strict(script());
        let mut cmd = site.tern(&fake.openai_base(), &[]);
        cmd.env("TERN_FAULT_AT", k.to_string());
        assert!(
            !drive(cmd, &site.root()),
            "point {k}: the turn was answered"
        );
        let state = site.state();
        let sessions: Vec<String> = std::fs::read_dir(state.join("sessions"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect();
        let next = FakeServer::strict(vec![text(W, "Resumed.")]);
        let args: Vec<&str> = match sessions.first() {
            Some(id) => vec!["exec", "--json", "--resume", id, "go on"],
            None => vec!["exec", "--json", "start again"],
        };
        let r = run(site.tern(&next.openai_base(), &args), None, HANG);
        assert_eq!(r.code, Some(0), "point {k}: {}", r.summary());
        let left = leftovers(&state);
        assert!(left.is_empty(), "point {k}: left {left:?}");
        // A turn the kill cut (its prompt stored, or its start on record) is said interrupted.
        if let Some(id) = sessions.first() {
            let dir = state.join("sessions").join(id);
            let conversation =
                std::fs::read_to_string(dir.join("conversation.jsonl")).unwrap_or_default();
            let prompted = conversation.contains("Write a.txt.");
            let answered = conversation.contains("Written.");
            if prompted && !answered {
                assert!(
                    r.stdout.contains("\"turn_interrupted\""),
                    "point {k}: a cut turn resumed without being called interrupted: {}",
                    r.stdout
                );
            }
        }
    }
}
