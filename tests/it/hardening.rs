//! What a newcomer attacking the CLI found, each kept fixed: approval under `exec`, a compaction
//! racing a turn, secrets in URLs and keys, a repair that drops lines, reused pids, planted links,
//! an empty EDITOR, and usage errors under `--json`.

use std::process::Stdio;
use std::time::Duration;

use crate::support::body::messages;
use crate::support::cli::{Ws, ok_no_stdin, run, run_no_stdin};
use crate::support::files::{jsonl, read};
use crate::support::{FakeServer, openai_text, openai_tool_calls};
use serde_json::Value;

fn bash(id: &str, command: &str) -> crate::support::Reply {
    let args = serde_json::json!({ "command": command }).to_string();
    openai_tool_calls(&[(id, "bash", &args)])
}

/// A workspace whose session has one finished turn ("msg 1").
fn one_turn(fake: &FakeServer) -> Ws {
    let ws = Ws::new();
    let mut cmd = ws.tern(fake);
    cmd.args(["exec", "msg 1"]);
    ok_no_stdin(cmd);
    ws
}

/// A usage error under `--json`: exit 2, a `result` object last on stdout, no request sent.
fn usage_error_with_result(out: &crate::support::cli::Out, fake: &FakeServer) {
    assert_eq!(out.code, Some(2), "{out:?}");
    let last = out.stdout.trim_end().lines().last().unwrap_or("");
    let last: Value = serde_json::from_str(last).unwrap_or_default();
    assert_eq!(last["type"], "result", "{out:?}");
    assert!(fake.requests().is_empty());
}

/// Every file under `dir` (names and contents), for "the secret appears nowhere".
fn all_text(dir: &std::path::Path) -> String {
    let mut out = String::new();
    for e in walk(dir) {
        out.push_str(&e.display().to_string());
        out.push_str(&String::from_utf8_lossy(
            &std::fs::read(&e).unwrap_or_default(),
        ));
    }
    out
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            files.extend(walk(&p));
        } else {
            files.push(p);
        }
    }
    files
}

/// Runs `cmd` in a new session, without a controlling terminal (else, run from a developer's
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

#[test]
fn exec_approval_ask_without_a_terminal_refuses_instead_of_running() {
    let fake = FakeServer::start(vec![bash("c1", "touch asked.txt"), openai_text("ok")]);
    let ws = Ws::new();
    let mut cmd = ws.tern(&fake);
    no_terminal(&mut cmd);
    cmd.args(["exec", "--approval", "ask", "make the file"]);
    let out = ok_no_stdin(cmd);
    assert!(
        !ws.path().join("asked.txt").exists(),
        "ran unasked: {out:?}"
    );
    assert!(out.stderr.contains("no terminal to ask on"), "{out:?}");
    let conv = jsonl(&ws.current_dir().join("conversation.jsonl"));
    assert!(
        conv.iter().any(|m| m["content"]
            .as_str()
            .unwrap_or("")
            .contains("no terminal to ask on")),
        "the model was not told why: {conv:?}"
    );
    let mut cmd = ws.tern(&fake);
    no_terminal(&mut cmd);
    cmd.env("TERN_APPROVAL", "ask").args(["exec", "again"]);
    fake.push(bash("c2", "touch asked2.txt"));
    fake.push(openai_text("ok"));
    ok_no_stdin(cmd);
    assert!(!ws.path().join("asked2.txt").exists());
}

#[test]
fn a_turn_cannot_start_while_another_pane_compacts() {
    let fake = FakeServer::start(vec![openai_text("one")]);
    let ws = one_turn(&fake);
    let id = ws.current_id();
    // A slow summary: the compaction holds the session while it waits.
    fake.push(
        openai_text("Summary: the person said msg 1 and got one back.")
            .delay_before(Duration::from_secs(3)),
    );
    let mut compact = ws.tern(&fake);
    compact
        .args(["compact"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let asked = fake.requests().len();
    let mut child = compact.spawn().unwrap();
    // The compaction holds the session from before its request until its summary is stored.
    assert!(
        crate::support::procs::eventually(Duration::from_secs(20), || fake.requests().len()
            > asked),
        "the compaction never asked for its summary"
    );
    let mut turn = ws.tern(&fake);
    turn.args(["exec", "--continue", "msg 3 IMPORTANT"]);
    let out = run_no_stdin(turn);
    assert_eq!(
        out.code,
        Some(1),
        "a turn started under a compaction: {out:?}"
    );
    assert!(out.stderr.contains("running"), "{out:?}");
    assert!(child.wait().unwrap().success());
    let conv = jsonl(&ws.session_dir(&id).join("conversation.jsonl"));
    // The summary, then the person's words it replaced, recalled verbatim (issue 41).
    assert_eq!(conv.len(), 2, "{conv:?}");
    assert_eq!(conv[1]["by"], "recalled", "{conv:?}");
    assert!(!conv[1].to_string().contains("IMPORTANT"), "{conv:?}");
    assert!(
        conv[0]["content"]
            .as_str()
            .unwrap()
            .contains("Summary: the person said msg 1")
    );
    let meta: Value = serde_json::from_str(&read(&ws.session_dir(&id).join("meta.json"))).unwrap();
    assert_eq!(
        meta["status"], "completed",
        "the verb gave the session back: {meta}"
    );
    assert!(meta.get("pid").is_none());
}

#[test]
fn url_credentials_and_keys_stay_out_of_files_and_bash() {
    let fake = FakeServer::start(vec![
        bash("c1", "env | grep -i -e secret -e base_url; true"),
        openai_text("ok"),
    ]);
    let ws = Ws::new();
    let base = fake
        .openai_base()
        .replace("http://", "http://alice:hunter2secret@")
        + "?k=querysecret";
    let mut cmd = ws.tern(&fake);
    cmd.env("OPENAI_BASE_URL", &base)
        .env("OPENAI_API_KEY", "sk-test-SECRET-1234567890")
        .args(["exec", "--json", "show env"]);
    let out = ok_no_stdin(cmd);
    let files = all_text(ws.path());
    for secret in ["hunter2secret", "querysecret", "sk-test-SECRET-1234567890"] {
        assert!(!files.contains(secret), "{secret} written to a file");
        assert!(
            !out.stdout.contains(secret) && !out.stderr.contains(secret),
            "{secret} printed"
        );
    }
    let meta: Value = serde_json::from_str(&read(&ws.current_dir().join("meta.json"))).unwrap();
    assert_eq!(meta["base_url"], fake.openai_base());
}

#[test]
fn verbs_send_the_key_only_to_the_environments_server() {
    let saved = FakeServer::start(vec![openai_text("one")]);
    let ws = Ws::new();
    let mut cmd = ws.tern(&saved);
    cmd.args(["exec", "hello"]);
    ok_no_stdin(cmd);
    // Later, another provider in the environment: its key must not reach the saved server.
    let now = FakeServer::start(vec![openai_text(
        "A summary of the session so far: hello, one.",
    )]);
    let mut cmd = ws.tern(&now);
    cmd.env("OPENAI_API_KEY", "sk-user-REALKEY-123456")
        .args(["compact"]);
    ok_no_stdin(cmd);
    assert_eq!(
        saved.requests().len(),
        1,
        "the saved server got the verb's request"
    );
    let reqs = now.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(
        reqs[0].header("authorization"),
        Some("Bearer sk-user-REALKEY-123456")
    );
    assert_eq!(reqs[0].json()["model"], "m");
}

#[test]
fn header_unsafe_key_is_a_usage_error_not_a_retry() {
    let fake = FakeServer::start(vec![openai_text("never")]);
    let ws = Ws::new();
    let mut cmd = ws.tern(&fake);
    cmd.env("OPENAI_API_KEY", "sk-ünïcødé")
        .args(["exec", "--json", "x"]);
    let out = run_no_stdin(cmd);
    usage_error_with_result(&out, &fake);
}

#[test]
fn huge_timeouts_and_bad_flags_are_usage_errors_with_a_result_line() {
    let fake = FakeServer::start(vec![]);
    let ws = Ws::new();
    for args in [
        vec![
            "exec",
            "--json",
            "--idle-timeout",
            "18446744073709551615",
            "hi",
        ],
        vec!["exec", "--json", "--max-turns", "0", "hi"],
        vec!["exec", "--json", "--bogus", "hi"],
    ] {
        let mut cmd = ws.tern(&fake);
        cmd.args(&args);
        let out = run_no_stdin(cmd);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        let last: Value = serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
        assert_eq!(last["type"], "result");
        assert_eq!(last["exit_code"], 2);
    }
}

/// A removed `conversation.jsonl` with turns on record: the resumed run warns that the history
/// is lost instead of going on silently from nothing (found by a new user).
#[test]
fn a_missing_conversation_is_warned_about() {
    let fake = FakeServer::start(vec![openai_text("one"), openai_text("two")]);
    let ws = one_turn(&fake);
    std::fs::remove_file(ws.current_dir().join("conversation.jsonl")).unwrap();
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "--json", "--continue", "msg 2"]);
    let out = ok_no_stdin(cmd);
    assert!(
        out.stdout.contains("\"type\":\"warning\"") && out.stdout.contains("the history is lost"),
        "{}",
        out.stdout
    );
    // A fresh session has nothing on record: no such warning.
    let fresh = one_turn(&fake);
    let mut cmd = fresh.tern(&fake);
    cmd.args(["exec", "--json", "--continue", "msg 2"]);
    assert!(!ok_no_stdin(cmd).stdout.contains("history is lost"));
}

#[test]
fn a_repair_keeps_the_damaged_file_in_the_archive() {
    let fake = FakeServer::start(vec![openai_text("one"), openai_text("two")]);
    let ws = one_turn(&fake);
    let conv = ws.current_dir().join("conversation.jsonl");
    let original = format!(
        "{}{{\"role\":\"user\",\"content\":\"msg 2\" GARBAGE\n",
        read(&conv)
    );
    std::fs::write(&conv, &original).unwrap();
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "--continue", "msg 3"]);
    ok_no_stdin(cmd);
    let archived = read(&ws.current_dir().join("archive/conversation-0001.jsonl"));
    assert_eq!(archived, original, "the repair lost the damaged file");
}

#[test]
fn a_reused_pid_does_not_hold_the_session() {
    let fake = FakeServer::start(vec![openai_text("one"), openai_text("two")]);
    let ws = one_turn(&fake);
    // As after a restart: "running" with the pid of a live process that is not that turn.
    let meta_path = ws.current_dir().join("meta.json");
    let mut meta: Value = serde_json::from_str(&read(&meta_path)).unwrap();
    meta["status"] = "running".into();
    meta["pid"] = 1.into();
    meta["pid_start"] = 123_456_789_u64.into();
    std::fs::write(&meta_path, meta.to_string()).unwrap();
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "--continue", "msg 2"]);
    let out = ok_no_stdin(cmd);
    assert!(out.stdout.contains("two"), "{out:?}");
}

#[test]
fn planted_links_in_the_session_are_not_written_through() {
    let fake = FakeServer::start(vec![openai_text("one")]);
    let ws = one_turn(&fake);
    let outside = tempfile::tempdir().unwrap();
    let spill = ws.current_dir().join("spill");
    std::fs::remove_dir_all(&spill).unwrap();
    std::os::unix::fs::symlink(outside.path(), &spill).unwrap();
    fake.push(bash("c1", "seq 1 100000"));
    fake.push(openai_text("done"));
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "--continue", "print a lot"]);
    ok_no_stdin(cmd);
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        0,
        "wrote through spill/"
    );
    let reqs = fake.requests();
    let last = messages(reqs.last().unwrap());
    assert!(
        last.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .contains("symbolic link")
    );
}

#[test]
fn an_empty_editor_never_runs_the_draft() {
    let fake = FakeServer::start(vec![openai_text("one")]);
    let ws = one_turn(&fake);
    let marker = ws.path().join("EXECUTED_DRAFT");
    let draft = ws.current_dir().join("plan.draft.md");
    // A shell builtin makes the marker, so it needs nothing on PATH.
    std::fs::write(&draft, format!("#!/bin/sh\n: > {}\n", marker.display())).unwrap();
    let mut perms = std::fs::metadata(&draft).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&draft, perms).unwrap();
    // A PATH with sh and no vi: the edit fails, and the draft is never executed.
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/bin/sh", bin.path().join("sh")).unwrap();
    let mut cmd = ws.tern(&fake);
    cmd.env("EDITOR", "")
        .env("VISUAL", " ")
        .env("PATH", bin.path())
        .args(["plan", "edit"]);
    let out = run(cmd, "");
    assert!(!marker.exists(), "the draft ran: {out:?}");
}

#[test]
fn a_compaction_at_the_start_of_a_turn_keeps_the_new_prompt() {
    let fake = FakeServer::start(vec![
        openai_text("one"),
        openai_text("Summary: the person said hello there and got one."),
        openai_text("two"),
    ]);
    let ws = Ws::new();
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "hello there"]);
    ok_no_stdin(cmd);
    let mut cmd = ws.tern(&fake);
    cmd.args([
        "exec",
        "--continue",
        "--context-window",
        "1024",
        "second one",
    ]);
    ok_no_stdin(cmd);
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3);
    let summary_request = messages(&reqs[1]);
    assert!(
        !summary_request.iter().any(|m| m["content"] == "second one"),
        "the new prompt was summarised away"
    );
    let after = messages(&reqs[2]);
    assert_eq!(after.last().unwrap()["content"], "second one", "{after:?}");
}

#[test]
fn an_endless_stdin_prompt_is_refused_not_buffered() {
    let fake = FakeServer::start(vec![openai_text("never")]);
    let ws = Ws::new();
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "--json", "-"]);
    let out = run(cmd, &"x".repeat(2 << 20));
    usage_error_with_result(&out, &fake);
}

#[test]
fn a_bad_tern_approval_only_matters_where_approval_is_used() {
    let fake = FakeServer::start(vec![]);
    let ws = Ws::new();
    for value in ["", "bogus"] {
        let mut cmd = ws.tern(&fake);
        cmd.env("TERN_APPROVAL", value)
            .env("TERN_STATE_DIR", "")
            .arg("ops");
        ok_no_stdin(cmd);
    }
    let mut cmd = ws.tern(&fake);
    cmd.env("TERN_APPROVAL", "bogus").args(["exec", "x"]);
    let out = run_no_stdin(cmd);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("TERN_APPROVAL"), "{out:?}");
}

/// Two Ctrl-C ask twice for the orderly stop; a third is the escape hatch, and even then the
/// command's whole process group goes with tern.
#[test]
fn a_third_ctrl_c_exits_at_once_and_takes_the_command_with_it() {
    let fake = FakeServer::start(vec![bash("c1", "trap '' TERM INT; sleep 64.91; true")]);
    let ws = Ws::new();
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "go"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let sleeping = || !crate::support::procs::pids_running(&["sleep", "64.91"]).is_empty();
    assert!(crate::support::procs::eventually(
        Duration::from_secs(20),
        sleeping
    ));
    for _ in 0..3 {
        // Each counted apart: the next is sent once this one's handler ran.
        crate::support::procs::signal_delivered(child.id(), libc::SIGINT);
    }
    let status =
        crate::support::procs::wait_exit(&mut child, Duration::from_secs(10)).expect("ended");
    assert_eq!(status.code(), Some(130));
    assert!(
        crate::support::procs::eventually(Duration::from_secs(5), || !sleeping()),
        "the command outlived tern"
    );
}

/// Errors that say what is wrong with the state folder (found by a new user): a sub-agent's id
/// given as `--session`, an empty or edited `.tern/current`, a file where the state folder
/// should be, and an editor that empties the draft.
#[test]
fn clear_errors_for_odd_state() {
    let w = crate::support::Wire::OpenAi;
    let ws = crate::support::cli::WireWs::new(w, vec![crate::support::script::text(w, "Hi.")]);
    ws.ok(&["exec", "hi"]);
    let id = ws.session();
    let id = id.file_name().unwrap().to_string_lossy().into_owned();
    let child = "20261201-000000-c0de";
    let child_dir = ws
        .root()
        .join(format!(".tern/sessions/{id}/agents/{child}"));
    std::fs::create_dir_all(&child_dir).unwrap();
    std::fs::write(child_dir.join("meta.json"), "{}").unwrap();
    let said = |args: &[&str]| {
        let out = run_no_stdin(ws.cmd(args));
        assert_ne!(out.code, Some(0), "{args:?}: {out:?}");
        out.stderr
    };
    // No such session is a usage error for status as for every verb (it was 1, the others 2).
    for args in [&["status", "--session", "nope"][..], &["stats", "nope"]] {
        assert_eq!(run_no_stdin(ws.cmd(args)).code, Some(2), "{args:?}");
    }
    let e = said(&["status", "--session", child]);
    assert!(e.contains("sub-agent of session") && e.contains(&id), "{e}");

    let current = ws.root().join(".tern/current");
    std::fs::write(&current, "").unwrap();
    let e = said(&["status"]);
    assert!(
        e.contains("no current session") && e.contains("--session"),
        "{e}"
    );
    std::fs::write(&current, "garbage\n").unwrap();
    let e = said(&["status"]);
    assert!(e.contains("current names \"garbage\""), "{e}");
    std::fs::write(&current, format!("{id}\n")).unwrap();

    std::fs::write(ws.root().join("afile"), "").unwrap();
    let e = said(&["exec", "--state-dir", "afile", "hi"]);
    assert!(e.contains("is not a folder"), "{e}");

    crate::support::cli::ok(ws.cmd(&["plan", "draft"]), "1. a step\n");
    let mut cmd = ws.cmd(&["plan", "edit"]);
    cmd.env("EDITOR", "truncate -s 0");
    let out = ok_no_stdin(cmd);
    assert!(out.stdout.contains("draft emptied"), "{out:?}");
}

/// `tern exec --json x` in a fresh workspace talking to `fake`, with `vars` set on top (a
/// non-UTF-8 value given as bytes) and `args` before the prompt.
fn exec_with(fake: &FakeServer, vars: &[(&str, &[u8])], args: &[&str]) -> crate::support::cli::Out {
    use std::os::unix::ffi::OsStrExt;
    let ws = Ws::new();
    let mut cmd = ws.tern(fake);
    for (k, v) in vars {
        cmd.env(k, std::ffi::OsStr::from_bytes(v));
    }
    cmd.args(["exec", "--json"]).args(args).arg("x");
    run_no_stdin(cmd)
}
/// The error a run reported: the `result` event's under `--json` (stdout), else stderr.
fn said(out: &crate::support::cli::Out) -> String {
    let last = out.stdout.trim_end().lines().last().unwrap_or("");
    let v: Value = serde_json::from_str(last).unwrap_or_default();
    match v["error"].as_str() {
        Some(e) => e.to_string(),
        None => out.stderr.clone(),
    }
}
/// A blank or non-UTF-8 TERN_MODEL is an error naming it (it silently became gpt-4.1-mini), as
/// `--model=` is; a model name with control characters is refused from either (found by a new
/// user).
#[test]
fn a_blank_non_utf8_or_control_model_name_is_a_usage_error() {
    let fake = FakeServer::start(vec![openai_text("never")]);
    for (value, says) in [
        (&b" "[..], "the model name is empty (TERN_MODEL)"),
        (b"", "the model name is empty (TERN_MODEL)"),
        (b"\xffm", "the model name in TERN_MODEL is not UTF-8"),
        (b"a\nb", "(TERN_MODEL) holds control characters"),
    ] {
        let out = exec_with(&fake, &[("TERN_MODEL", value)], &[]);
        usage_error_with_result(&out, &fake);
        assert!(said(&out).contains(says), "{value:?}: {out:?}");
    }
    for (flag, says) in [
        ("--model=", "the model name is empty (--model)"),
        ("--model=a\nb", "(--model) holds control characters"),
    ] {
        let out = exec_with(&fake, &[], &[flag]);
        usage_error_with_result(&out, &fake);
        assert!(said(&out).contains(says), "{flag:?}: {out:?}");
    }
}
/// A set-but-blank or non-UTF-8 base URL variable gives the flag's clear error naming the
/// variable (it was "no model provider configured"), for both providers' variables.
#[test]
fn a_blank_or_non_utf8_base_url_variable_is_named_in_its_error() {
    use std::os::unix::ffi::OsStrExt;
    let ws = Ws::new();
    for (var, value, says) in [
        (
            "OPENAI_BASE_URL",
            &b" "[..],
            "(OPENAI_BASE_URL) is not an http:// or https:// URL",
        ),
        (
            "OPENAI_BASE_URL",
            b"",
            "(OPENAI_BASE_URL) is not an http:// or https:// URL",
        ),
        (
            "ANTHROPIC_BASE_URL",
            b" ",
            "(ANTHROPIC_BASE_URL) is not an http:// or https:// URL",
        ),
        (
            "OPENAI_BASE_URL",
            b"http://h\xff/v1",
            "OPENAI_BASE_URL is not UTF-8",
        ),
        (
            "ANTHROPIC_BASE_URL",
            b"\xff",
            "ANTHROPIC_BASE_URL is not UTF-8",
        ),
    ] {
        let mut cmd = crate::support::cli::tern_clean(&ws.home());
        cmd.current_dir(ws.path())
            .env(var, std::ffi::OsStr::from_bytes(value))
            .args(["exec", "x"]);
        let out = run_no_stdin(cmd);
        assert_eq!(out.code, Some(2), "{var}={value:?}: {out:?}");
        assert!(out.stderr.contains(says), "{var}={value:?}: {out:?}");
        assert!(!out.stderr.contains("no model provider"), "{out:?}");
    }
    let mut cmd = crate::support::cli::tern_clean(&ws.home());
    cmd.current_dir(ws.path())
        .args(["exec", "--base-url", "", "x"]);
    let out = run_no_stdin(cmd);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.contains("(--base-url) is not an http://"),
        "{out:?}"
    );
}
/// A full endpoint pasted as the base URL (`…/v1/chat/completions`, Anthropic's
/// `…/v1/messages`) is refused with the base to give; it was accepted and every request went to
/// `…/chat/completions/chat/completions`.
#[test]
fn a_pasted_endpoint_is_refused_with_the_base_to_give() {
    let fake = FakeServer::start(vec![openai_text("never")]);
    let base = fake.openai_base();
    let endpoint = format!("{base}/chat/completions");
    let give = format!("give {base:?}");
    let out = exec_with(&fake, &[("OPENAI_BASE_URL", endpoint.as_bytes())], &[]);
    usage_error_with_result(&out, &fake);
    let e = said(&out);
    assert!(
        e.contains("(OPENAI_BASE_URL)") && e.contains(&give),
        "{out:?}"
    );
    let flag = format!("--base-url={endpoint}/");
    let out = exec_with(&fake, &[], &[&flag]);
    usage_error_with_result(&out, &fake);
    let e = said(&out);
    assert!(e.contains("(--base-url)") && e.contains(&give), "{out:?}");

    let fake = FakeServer::start(vec![crate::support::anthropic_text("never")]);
    let ws = Ws::new();
    let mut cmd = ws.tern_wire(&fake, crate::support::Wire::Anthropic);
    cmd.env(
        "ANTHROPIC_BASE_URL",
        format!("{}/v1/messages", fake.base_url()),
    )
    .args(["exec", "--json", "x"]);
    let out = run_no_stdin(cmd);
    usage_error_with_result(&out, &fake);
    let e = said(&out);
    assert!(
        e.contains("(ANTHROPIC_BASE_URL)") && e.contains(&format!("give {:?}", fake.base_url())),
        "{out:?}"
    );
}
/// A verb that calls the model (`compact`) refuses a blank TERN_MODEL too, instead of quietly
/// taking the session's model.
#[test]
fn a_blank_model_variable_is_refused_by_model_verbs_too() {
    let w = crate::support::Wire::OpenAi;
    let ws = crate::support::cli::WireWs::new(w, vec![crate::support::script::text(w, "Hi.")]);
    ws.ok(&["exec", "hi"]);
    let before = ws.fake.requests().len();
    let mut cmd = ws.cmd(&["compact"]);
    cmd.env("TERN_MODEL", " ");
    let out = run_no_stdin(cmd);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("(TERN_MODEL)"), "{out:?}");
    assert_eq!(ws.fake.requests().len(), before, "no request sent");
}

/// No such session is a usage error (exit 2) on every surface: the REPL exited 1 where `tern
/// exec` exited 2.
#[test]
fn no_such_session_exits_2_on_every_surface() {
    let fake = FakeServer::start(vec![]);
    let ws = Ws::new();
    for args in [
        &["chat", "--resume", "nope"][..],
        &["--resume", "nope"],
        &["chat", "--continue"],
        &["exec", "--resume", "nope"],
        &["exec", "--continue", "x"],
    ] {
        let mut cmd = ws.tern(&fake);
        cmd.args(args);
        let out = run_no_stdin(cmd);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains("session"), "{args:?}: {out:?}");
    }
    assert!(fake.requests().is_empty());
}

/// `.tern` a regular file: `tern sessions` said a bare "Not a directory (os error 20)"; it and
/// the other readers now name the file in the way, as a write does.
#[test]
fn a_file_where_the_state_folder_should_be_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join(".home");
    std::fs::create_dir(&home).unwrap();
    let file = dir.path().join(".tern");
    std::fs::write(&file, "").unwrap();
    let says = format!("{} exists and is not a folder", file.display());
    for args in [
        &["sessions"][..],
        &["status"],
        &["fleet", "list"],
        &["plan", "show"],
    ] {
        let mut cmd = crate::support::cli::tern_clean(&home);
        cmd.current_dir(dir.path()).args(args);
        let out = run_no_stdin(cmd);
        assert_ne!(out.code, Some(0), "{args:?}: {out:?}");
        assert!(out.stderr.contains(&says), "{args:?}: {out:?}");
        assert!(!out.stderr.contains("os error"), "{args:?}: {out:?}");
    }
}

/// A negative number after a numeric flag reaches the flag's range check (clap called it an
/// unexpected argument before: `--temperature -5` and `--temperature=-5` said different things).
#[test]
fn negative_numbers_reach_the_range_check() {
    let ws = Ws::new();
    for (args, says) in [
        (
            &["exec", "--temperature", "-5", "x"][..],
            "-5 is not between 0 and 2",
        ),
        (
            &["chat", "--temperature", "-0.5"],
            "-0.5 is not between 0 and 2",
        ),
        (&["exec", "--max-turns", "-1", "x"], "-1 is not in 1.."),
        (&["exec", "--idle-timeout", "-1", "x"], "-1 is not in 1.."),
        (&["exec", "--agent-depth", "-1", "x"], "-1 is not in 0..=8"),
        (&["status", "--height", "-3"], "-3 is not in 1.."),
        (
            &["compact", "--max-retry-time", "-1"],
            "-1 is not in 0..=86400",
        ),
    ] {
        let mut cmd = crate::support::cli::tern_clean(&ws.home());
        cmd.current_dir(ws.path()).args(args);
        let out = run_no_stdin(cmd);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains(says), "{args:?}: {out:?}");
    }
}

/// A `.tern` that is a symbolic link: `tern exec` refuses it (tern never writes through links),
/// and so does every verb that reads it, with the same words and exit code, instead of showing
/// the linked folder's sessions or saying "no session yet: start one with `tern exec`" (found
/// by a new user).
#[test]
fn a_linked_state_folder_is_refused_by_the_readers_as_by_exec() {
    let w = crate::support::Wire::OpenAi;
    // A real state folder elsewhere, with a finished session in it.
    let real = crate::support::cli::WireWs::new(w, vec![crate::support::script::text(w, "Hi.")]);
    real.ok(&["exec", "hi"]);
    let id = real.session();
    let id = id.file_name().unwrap().to_string_lossy().into_owned();
    let fake = FakeServer::start(vec![openai_text("unused")]);
    let ws = Ws::new();
    std::fs::remove_dir(ws.path().join(".tern")).unwrap();
    std::os::unix::fs::symlink(real.root().join(".tern"), ws.path().join(".tern")).unwrap();
    let run_in = |args: &[&str]| {
        let mut cmd = ws.tern(&fake);
        cmd.args(args);
        crate::support::cli::run_within(cmd, None, Duration::from_secs(20))
    };
    let exec = run_in(&["exec", "hi"]);
    let refusal = format!(
        "refusing to use {}: it is a symbolic link (tern never writes through links in its state folder)",
        ws.path().join(".tern").display()
    );
    assert!(exec.stderr.contains(&refusal), "{exec:?}");
    assert_eq!(exec.code, Some(1), "{exec:?}");
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["status", "--session", &id],
        &["stats"],
        &["stats", "--json"],
        &["sessions"],
        &["watch"],
        &["watch", "--json"],
        &["plan", "show"],
        &["relay", "--start"],
        &["exec", "--continue", "more"],
    ] {
        let out = run_in(args);
        assert_eq!(out.code, exec.code, "{args:?}: {out:?}");
        assert!(out.stderr.contains(&refusal), "{args:?}: {out:?}");
        assert!(!out.stderr.contains("start one with"), "{args:?}: {out:?}");
        assert!(!out.stdout.contains(&id), "{args:?}: {out:?}");
    }
    assert!(fake.requests().is_empty());
}

/// A sub-agent named by the short unique part `tern sessions` suggests (its last four
/// characters) gets the same help as its full id, not "no session" (found by a new user).
#[test]
fn a_sub_agents_short_part_names_it_as_its_full_id_does() {
    let w = crate::support::Wire::OpenAi;
    let ws = crate::support::cli::WireWs::new(w, vec![crate::support::script::text(w, "Hi.")]);
    ws.ok(&["exec", "hi"]);
    let id = ws.session();
    let id = id.file_name().unwrap().to_string_lossy().into_owned();
    // A part that is not in the parent's id, so it can name only the child.
    let part = if id.contains("c0de") { "beef" } else { "c0de" };
    let deep = if id.contains("face") { "f00d" } else { "face" };
    let nested_id = format!("19990101-000002-{deep}");
    let full = format!("20261201-125821-{part}");
    let twin = "19990101-000001-0123";
    let agents = ws.root().join(format!(".tern/sessions/{id}/agents"));
    // The child of a child too: the lookup goes down every level.
    let nested = agents.join(twin).join("agents").join(&nested_id);
    for dir in [agents.join(&full), agents.join(twin), nested] {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("meta.json"), "{}").unwrap();
    }
    let said = |args: &[&str]| {
        let out = run_no_stdin(ws.cmd(args));
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        out.stderr
    };
    for verb in [
        &["status", "--session"][..],
        &["stats"],
        &["stats", "--json"],
    ] {
        let by_full = said(&[verb, &[full.as_str()]].concat());
        assert!(
            by_full.contains(&format!("{full} is a sub-agent of session {id}")),
            "{by_full}"
        );
        assert_eq!(said(&[verb, &[part]].concat()), by_full, "{verb:?}");
    }
    let e = said(&["status", "--session", deep]);
    assert!(
        e.contains(&format!("{nested_id} is a sub-agent of session {id}"))
            && e.contains(&format!("{twin}/agents")),
        "{e}"
    );
    // A part that two sub-agents share names neither.
    let e = said(&["status", "--session", "19990101"]);
    assert!(e.contains("ambiguous among sub-agents"), "{e}");
    assert!(e.contains(twin) && e.contains(&nested_id), "{e}");
}

/// A set-but-blank or non-UTF-8 TERN_SANDBOX, TERN_APPROVAL or TERN_STATE_DIR is a usage error
/// naming the variable on every surface that reads it (found by a new user: they were taken for
/// unset, so a blank TERN_SANDBOX gave workspace-write while TERN_SANDBOX=bogus exited 2; someone
/// who meant read-only got write access silently). Nothing is sent to the provider.
#[test]
fn a_blank_or_non_utf8_policy_or_state_variable_is_a_usage_error() {
    use std::os::unix::ffi::OsStrExt;
    let fake = FakeServer::start(vec![openai_text("never")]);
    let surfaces: [&[&str]; 3] = [&["exec", "x"], &["chat"], &["acp"]];
    let verbs: [&[&str]; 3] = [&["plan", "show"], &["sessions"], &["status"]];
    for var in ["TERN_SANDBOX", "TERN_APPROVAL", "TERN_STATE_DIR"] {
        let args: Vec<&[&str]> = if var == "TERN_STATE_DIR" {
            surfaces.iter().chain(verbs.iter()).copied().collect()
        } else {
            surfaces.to_vec()
        };
        for value in [&b""[..], b" ", b"\xffx"] {
            for a in &args {
                let ws = Ws::new();
                let mut cmd = ws.tern(&fake);
                cmd.env(var, std::ffi::OsStr::from_bytes(value)).args(*a);
                let out = run_no_stdin(cmd);
                assert_eq!(out.code, Some(2), "{var}={value:?} {a:?}: {out:?}");
                assert!(
                    out.stderr.contains(var) && out.stderr.contains(&format!("unset {var}")),
                    "{var}={value:?} {a:?}: {out:?}"
                );
            }
        }
    }
    let out = exec_with(&fake, &[("TERN_SANDBOX", b" ")], &[]);
    usage_error_with_result(&out, &fake);
    assert!(
        said(&out).contains("TERN_SANDBOX is set but empty"),
        "{out:?}"
    );
    assert!(fake.requests().is_empty());
}

/// A TERN_STATE_DIR or --state-dir naming something that is not a folder (`/dev/null`) is a usage
/// error (exit 2, as other bad values are; it was 1).
#[test]
fn a_state_dir_that_is_not_a_folder_is_a_usage_error() {
    let fake = FakeServer::start(vec![openai_text("never")]);
    let ws = Ws::new();
    for a in [
        &["exec", "x"][..],
        &["plan", "show"],
        &["sessions"],
        &["acp"],
    ] {
        let mut cmd = ws.tern(&fake);
        cmd.env("TERN_STATE_DIR", "/dev/null").args(a);
        let out = run_no_stdin(cmd);
        assert_eq!(out.code, Some(2), "{a:?}: {out:?}");
        assert!(
            out.stderr
                .contains("/dev/null (from TERN_STATE_DIR) exists and is not a folder"),
            "{a:?}: {out:?}"
        );
    }
    let mut cmd = ws.tern(&fake);
    cmd.args(["status", "--state-dir", "/dev/null"]);
    let out = run_no_stdin(cmd);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("(from --state-dir)"), "{out:?}");
    assert!(fake.requests().is_empty());
}
