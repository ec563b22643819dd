//! FIFOs (and other non-plain files) planted where tern opens a file: at a lock, the lease, a
//! config or a file a person or project controls. Each case runs the real binary and checks that
//! it answers (never blocks in `open(2)`) with a message naming the file.

use std::path::Path;
use std::time::Duration;

use crate::support::Wire;
use crate::support::cli::{Out, WireWs, launch};
use crate::support::script::text;

/// A bound far above a normal run: a command still running then is hung.
const HUNG: Duration = Duration::from_secs(20);

/// Replaces `path` (if present) with a FIFO.
fn fifo_at(path: &Path) {
    let _ = std::fs::remove_file(path);
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).unwrap();
    }
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) on a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "{path:?}");
}

/// Runs `tern ARGS`; fails the test when it hangs.
fn answers(ws: &WireWs, args: &[&str]) -> Out {
    let out = launch(ws.cmd(args), None, HUNG);
    assert!(!out.hung, "tern {args:?} blocked on a FIFO: {out:?}");
    out
}

/// Exit 1 with the plain-file refusal naming `name`.
fn refused_naming(out: &Out, args: &[&str], name: &str) {
    assert_eq!(out.code, Some(1), "{args:?}: {out:?}");
    assert!(
        out.stderr.contains(&format!("{name} is not a plain file")),
        "{args:?}: {out:?}"
    );
}

/// A FIFO at the session lock: every verb that takes it answers with the plain-file refusal.
#[test]
fn a_fifo_at_the_session_lock_is_refused_not_waited_on() {
    let ws = WireWs::new(Wire::OpenAi, vec![text(Wire::OpenAi, "Done.")]);
    ws.ok(&["exec", "hello"]);
    fifo_at(&ws.session().join("lock"));
    for args in [&["exec", "--continue", "hi"][..], &["compact"]] {
        let out = answers(&ws, args);
        refused_naming(&out, args, "lock");
    }
    // Readers that need no lock may answer; those that take it refuse with the same words
    // (`undo` may also find nothing to undo first).
    for args in [&["plan", "show"][..], &["undo"], &["checkpoints"]] {
        let out = answers(&ws, args);
        assert!(matches!(out.code, Some(0 | 1)), "{args:?}: {out:?}");
        if out.stderr.contains("lock") {
            refused_naming(&out, args, "lock");
        }
    }
    // With no draft, `plan confirm` may refuse before it locks; it must answer either way.
    let out = answers(&ws, &["plan", "confirm"]);
    assert_eq!(out.code, Some(1), "{out:?}");
}

/// A FIFO at the workspace lock (`.tern/lock`).
#[test]
fn a_fifo_at_the_workspace_lock_is_refused_not_waited_on() {
    let ws = WireWs::new(Wire::OpenAi, vec![text(Wire::OpenAi, "Done.")]);
    ws.ok(&["exec", "hello"]);
    fifo_at(&ws.root().join(".tern/lock"));
    let args = &["exec", "--continue", "hi"][..];
    let out = answers(&ws, args);
    refused_naming(&out, args, ".tern/lock");
}

/// A FIFO at the lease: the same refusal, not a bare `Invalid argument`.
#[test]
fn a_fifo_at_the_lease_is_named() {
    let ws = WireWs::new(Wire::OpenAi, vec![text(Wire::OpenAi, "Done.")]);
    ws.ok(&["exec", "hello"]);
    fifo_at(&ws.session().join("lease"));
    let args = &["exec", "--continue", "hi"][..];
    let out = answers(&ws, args);
    refused_naming(&out, args, "lease");
}

/// A FIFO at the user config, the project config and the Fleet file: `exec`, `status` and
/// `fleet list` name the file and say it is not a regular file (they used to hang silently).
#[test]
fn a_fifo_at_a_config_file_is_named_not_waited_on() {
    for rel in [
        ".home/.config/tern/config.json",
        ".tern/config.json",
        ".tern/fleet.json",
        ".home/.config/tern/fleet.json",
    ] {
        let ws = WireWs::new(Wire::OpenAi, vec![text(Wire::OpenAi, "Done.")]);
        fifo_at(&ws.root().join(rel));
        let name = rel.rsplit('/').next().unwrap();
        let cmds: &[&[&str]] = if name == "fleet.json" {
            &[&["fleet", "list"]]
        } else {
            &[&["exec", "hi"], &["status"]]
        };
        for args in cmds {
            let out = answers(&ws, args);
            assert_ne!(out.code, Some(0), "{rel} {args:?}: {out:?}");
            assert!(
                out.stderr.contains(name) && out.stderr.contains("not a regular file"),
                "{rel} {args:?}: {out:?}"
            );
        }
    }
}

/// A FIFO among the inbox's steer files is not an entry: `exec --continue` still runs.
#[test]
fn a_fifo_in_the_inbox_does_not_hang_a_turn() {
    let ws = WireWs::new(
        Wire::OpenAi,
        vec![text(Wire::OpenAi, "Done."), text(Wire::OpenAi, "Again.")],
    );
    ws.ok(&["exec", "hello"]);
    fifo_at(&ws.session().join("inbox/0001.json"));
    let out = answers(&ws, &["exec", "--continue", "go on"]);
    assert_eq!(out.code, Some(0), "{out:?}");
}

/// A FIFO at AGENTS.md is skipped, never waited on.
#[test]
fn a_fifo_at_agents_md_does_not_hang_a_turn() {
    let ws = WireWs::new(Wire::OpenAi, vec![text(Wire::OpenAi, "Done.")]);
    fifo_at(&ws.root().join("AGENTS.md"));
    let out = answers(&ws, &["exec", "hello"]);
    assert_eq!(out.code, Some(0), "{out:?}");
}

/// A FIFO at the project's hooks file cannot be read, so it is not "trusted already" and
/// cannot be trusted; a FIFO at the person's hooks file is listed as unreadable, not as
/// "trusted (yours)" beside its INVALID entry.
#[test]
fn a_fifo_hooks_file_is_neither_trusted_nor_trustable() {
    let ws = WireWs::new(Wire::OpenAi, vec![text(Wire::OpenAi, "Done.")]);
    fifo_at(&ws.root().join(".tern/hooks.json"));
    let out = answers(&ws, &["hooks", "trust"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        !out.stdout.contains("trusted already") && out.stderr.contains("not a regular file"),
        "{out:?}"
    );
    assert!(
        !ws.root()
            .join(".home/.config/tern/trusted-hooks.json")
            .exists(),
        "a trust record was written"
    );
    let user = ws.root().join(".home/.config/tern/hooks.json");
    fifo_at(&user);
    let out = answers(&ws, &["hooks"]);
    let line = |p: &Path| {
        let p = p.display().to_string();
        out.stdout
            .lines()
            .find(|l| l.starts_with(&format!("{p}:")))
            .unwrap_or_default()
            .to_string()
    };
    for p in [&user, &ws.root().join(".tern/hooks.json")] {
        let l = line(p);
        assert!(
            l.contains("UNREADABLE") && !l.contains("trusted"),
            "{p:?}: {out:?}"
        );
    }
    assert!(out.stdout.contains("INVALID"), "{out:?}");
    let out = answers(&ws, &["hooks", "--json"]);
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("json");
    for f in v["files"].as_array().unwrap() {
        assert_eq!(f["trusted"], false, "{f}");
        assert_eq!(f["readable"], false, "{f}");
    }
}

/// A FIFO at the REPL's input history (`.tern/history`): the REPL starts, says the history is
/// not saved and why, and answers (its load used to wait in `open(2)` before the first prompt).
#[test]
fn a_fifo_at_the_repl_history_is_named_and_the_repl_runs_in_tmux() {
    let Some((_dir, tmux, ws)) =
        crate::tmux::setup("a_fifo_at_the_repl_history_is_named_and_the_repl_runs")
    else {
        return;
    };
    fifo_at(&ws.join(".tern/history"));
    let fake = crate::support::FakeServer::start(vec![crate::support::openai_text("Noted.")]);
    crate::tmux::start_chat_with(&tmux, &ws, &fake, "TERN_FIFO_TEST=1");
    tmux.wait_for("history is not a plain file");
    tmux.keys(&["hello", "Enter"]);
    tmux.wait_for_prompt_after("Noted.");
    tmux.keys(&["C-d"]);
    tmux.wait_for("[tern exited with 0]");
}
