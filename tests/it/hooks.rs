//! Issue 19: the person's hooks (Claude Code's format), `--goal`, and `tern exec` as a worker,
//! against the real binary, the fake provider, real hook processes and real files.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::body::{content, messages};
use crate::support::cli::WireWs;
use crate::support::files::read_json;
use crate::support::script::{bash, text};
use crate::support::*;

const W: Wire = Wire::OpenAi;

/// The person's hooks file of `ws` (`$HOME/.config/tern/hooks.json`), written with `hooks`.
fn user_hooks(ws: &WireWs, hooks: Value) -> PathBuf {
    let dir = ws.ws.home().join(".config/tern");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("hooks.json");
    std::fs::write(&p, json!({ "hooks": hooks }).to_string()).unwrap();
    p
}

/// One command hook for `event` (matcher `m`).
fn one(event: &str, m: &str, command: &str) -> Value {
    json!({ event: [{"matcher": m, "hooks": [{"type": "command", "command": command}]}] })
}

fn stdout_json(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn of<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

fn last(events: &[Value]) -> &Value {
    events.last().expect("events")
}

#[test]
fn a_pre_tool_use_exit_2_keeps_the_command_from_running_and_the_model_reads_stderr() {
    let ws = WireWs::new(W, vec![bash(W, "c1", "touch ran.txt"), text(W, "done")]);
    user_hooks(
        &ws,
        one(
            "PreToolUse",
            "Bash",
            "cat > \"$TERN_PROJECT_DIR/pre.json\"; echo 'no touching allowed' >&2; exit 2",
        ),
    );
    let out = ws.ok(&["exec", "--json", "go"]);
    assert!(!ws.root().join("ran.txt").exists(), "the command ran");
    let input = read_json(&ws.root().join("pre.json"));
    assert_eq!(input["hook_event_name"], "PreToolUse");
    assert_eq!(input["tool_name"], "Bash");
    assert_eq!(input["tool_input"]["command"], "touch ran.txt");
    assert!(input["session_id"].is_string() && input["cwd"].is_string());
    // The model's next request carries the hook's stderr as the tool result.
    let reqs = ws.fake.requests();
    let msgs = messages(&reqs[1]);
    let tool = msgs.iter().find(|m| m["role"] == "tool").unwrap();
    assert!(content(tool).contains("no touching allowed"), "{tool}");
    let ev = stdout_json(&out);
    let h = of(&ev, "hook");
    assert_eq!(h.len(), 1);
    assert_eq!(h[0]["decision"], "block");
    assert_eq!(h[0]["exit_code"], 2);
}

/// Issue 34: `tool_response` carries stdout and stderr apart, as Claude Code's does (tern's
/// `exit_code` and `output`, what the model read, besides).
#[test]
fn a_post_tool_use_hook_receives_bash_the_command_and_the_response() {
    let cmd = "echo hello-out; echo hello-err >&2; echo more-out";
    let ws = WireWs::new(W, vec![bash(W, "c1", cmd), text(W, "done")]);
    user_hooks(
        &ws,
        one(
            "PostToolUse",
            "Bash",
            "cat > \"$TERN_PROJECT_DIR/post.json\"; echo '{\"hookSpecificOutput\": {\"hookEventName\": \"PostToolUse\", \"additionalContext\": \"lint: clean\"}}'",
        ),
    );
    ws.ok(&["exec", "go"]);
    let input = read_json(&ws.root().join("post.json"));
    assert_eq!(input["tool_name"], "Bash");
    assert_eq!(input["tool_input"]["command"], cmd);
    let resp = &input["tool_response"];
    assert_eq!(resp["stdout"], "hello-out\nmore-out\n", "{resp}");
    assert_eq!(resp["stderr"], "hello-err\n", "{resp}");
    assert_eq!(resp["interrupted"], false);
    assert_eq!(resp["isImage"], false);
    assert_eq!(resp["exit_code"], 0);
    let output = resp["output"].as_str().unwrap();
    assert!(
        ["hello-out", "hello-err", "more-out", "[exit 0]"]
            .iter()
            .all(|w| output.contains(w)),
        "{resp}"
    );
    // Its context went into the tool result (the newest message), never the system prompt.
    let reqs = ws.fake.requests();
    let msgs = messages(&reqs[1]);
    let tool = msgs.iter().find(|m| m["role"] == "tool").unwrap();
    assert!(content(tool).contains("lint: clean"));
    assert!(!content(&msgs[0]).contains("lint: clean"));
}

#[test]
fn what_hooks_add_never_changes_the_cached_prefix() {
    let script = vec![
        bash(W, "c1", "echo one"),
        bash(W, "c2", "echo two"),
        text(W, "done"),
    ];
    let plain = WireWs::new(W, script.clone());
    plain.ok(&["exec", "go"]);
    let hooked = WireWs::new(W, script);
    user_hooks(
        &hooked,
        json!({
            "PostToolUse": [{"hooks": [{"type": "command", "command":
                "echo '{\"hookSpecificOutput\": {\"additionalContext\": \"ctx from hook\"}}'"}]}],
            "SessionStart": [{"hooks": [{"type": "command", "command": "echo start-context"}]}],
            "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "echo prompt-context"}]}],
        }),
    );
    hooked.ok(&["exec", "go"]);
    let bodies = hooked.raw_bodies();
    let parsed: Vec<Value> = bodies
        .iter()
        .map(|b| serde_json::from_str(b).unwrap())
        .collect();
    // Tools and system prompt: byte-identical to a session without hooks.
    let plain_first: Value = serde_json::from_str(&plain.raw_bodies()[0]).unwrap();
    assert_eq!(parsed[0]["tools"], plain_first["tools"]);
    assert_eq!(
        parsed[0]["messages"][0], plain_first["messages"][0],
        "the system prompt changed"
    );
    // Every request repeats the previous one's messages byte for byte (but its tail).
    for w in parsed.windows(2) {
        let (a, b) = (
            w[0]["messages"].as_array().unwrap(),
            w[1]["messages"].as_array().unwrap(),
        );
        for i in 0..a.len() - 1 {
            assert_eq!(a[i], b[i], "message {i} changed between requests");
        }
        assert_eq!(w[0]["tools"], w[1]["tools"]);
    }
    let user = content(&parsed[0]["messages"][1]);
    assert!(
        user.starts_with("go") && user.contains("start-context") && user.contains("prompt-context"),
        "{user}"
    );
}

#[test]
fn a_stop_hook_exit_2_continues_the_turn() {
    let ws = WireWs::new(W, vec![text(W, "first"), text(W, "second")]);
    // Blocks once; lets the turn end when it already continued it (stop_hook_active).
    user_hooks(
        &ws,
        one(
            "Stop",
            "",
            "if grep -q '\"stop_hook_active\":true'; then exit 0; fi; echo 'run the tests first' >&2; exit 2",
        ),
    );
    let out = ws.ok(&["exec", "--json", "go"]);
    let ev = stdout_json(&out);
    assert_eq!(last(&ev)["status"], "completed");
    assert_eq!(last(&ev)["text"], "second");
    let reqs = ws.fake.requests();
    assert_eq!(reqs.len(), 2);
    let msgs = messages(&reqs[1]);
    let u = msgs.last().unwrap();
    assert_eq!(u["role"], "user");
    assert!(content(u).contains("run the tests first"), "{u}");
    let h = of(&ev, "hook");
    assert_eq!(h.len(), 2);
    assert_eq!(h[0]["decision"], "block");
    assert_eq!(h[1]["decision"], "none");
}

#[test]
fn a_user_prompt_submit_block_refuses_the_prompt() {
    let ws = WireWs::new(W, vec![text(W, "never")]);
    user_hooks(
        &ws,
        one(
            "UserPromptSubmit",
            "",
            "echo 'no secrets in prompts' >&2; exit 2",
        ),
    );
    let out = ws.tern(&["exec", "--json", "my password is hunter2"]);
    assert_eq!(out.status.code(), Some(1));
    let ev = stdout_json(&out);
    assert!(
        last(&ev)["error"]
            .as_str()
            .unwrap()
            .contains("no secrets in prompts")
    );
    assert!(ws.fake.requests().is_empty(), "the model was asked");
    let conv = ws.path("conversation.jsonl");
    assert!(
        !conv.exists() || std::fs::read_to_string(&conv).unwrap().is_empty(),
        "the prompt was stored"
    );
}

#[test]
fn an_untrusted_project_hook_does_not_run_and_is_named_until_trusted() {
    let ws = WireWs::new(W, vec![text(W, "a"), text(W, "b"), text(W, "c")]);
    let project = ws.root().join(".tern/hooks.json");
    let write = |cmd: &str| {
        std::fs::write(&project, json!({"hooks": one("Stop", "", cmd)}).to_string()).unwrap()
    };
    write("touch \"$TERN_PROJECT_DIR/project-hook-ran\"");
    let out = ws.ok(&["exec", "--json", "one"]);
    assert!(
        !ws.root().join("project-hook-ran").exists(),
        "an untrusted hook ran"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(".tern/hooks.json") && stderr.contains("not trusted"),
        "{stderr}"
    );
    let ev = stdout_json(&out);
    assert!(
        of(&ev, "session_start")[0]["untrusted_hooks"]
            .as_str()
            .unwrap()
            .ends_with(".tern/hooks.json")
    );
    let listed = ws.ok(&["hooks"]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains("NOT TRUSTED"));
    ws.ok(&["hooks", "trust"]);
    ws.ok(&["exec", "two"]);
    assert!(
        ws.root().join("project-hook-ran").exists(),
        "a trusted hook did not run"
    );
    // Any change needs trust again.
    std::fs::remove_file(ws.root().join("project-hook-ran")).unwrap();
    write("touch \"$TERN_PROJECT_DIR/project-hook-ran\" # changed");
    let out = ws.ok(&["exec", "three"]);
    assert!(!ws.root().join("project-hook-ran").exists());
    assert!(String::from_utf8_lossy(&out.stderr).contains("changed since it was trusted"));
}

#[test]
fn a_model_command_cannot_write_either_hooks_file_nor_the_trust_record() {
    let ws = WireWs::new(W, vec![]);
    let user = user_hooks(&ws, one("PreToolUse", "Bash", "exit 0"));
    let project = ws.root().join(".tern/hooks.json");
    std::fs::write(
        &project,
        json!({"hooks": one("Stop", "", "true")}).to_string(),
    )
    .unwrap();
    ws.ok(&["hooks", "trust"]);
    let trust = ws.ws.home().join(".config/tern/trusted-hooks.json");
    let before: Vec<Vec<u8>> = [&user, &project, &trust]
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let evil = json!({"hooks": one("PreToolUse", "", "touch /tmp/evil")}).to_string();
    let cmd = format!(
        "echo '{evil}' > .tern/hooks.json && echo '{evil}' > \"$HOME/.config/tern/hooks.json\" && echo '{{}}' > \"$HOME/.config/tern/trusted-hooks.json\""
    );
    for mode in ["workspace-write", "danger-full-access"] {
        ws.push(vec![bash(W, "c1", &cmd), text(W, "done")]);
        let out = ws.ok(&["exec", "--json", "--sandbox", mode, "rewrite the hooks"]);
        // The command failed: the jail refused the write, or the guard put the files back and
        // the result is an error saying so.
        let ev = stdout_json(&out);
        let r = of(&ev, "tool_result")[0];
        assert!(r["is_error"] == true || r["exit_code"] != 0, "{mode}: {r}");
        for (p, b) in [&user, &project, &trust].iter().zip(&before) {
            assert_eq!(
                &std::fs::read(p).unwrap(),
                b,
                "{mode}: {} changed",
                p.display()
            );
        }
        // The hooks as configured still run, unaltered.
        let listed = String::from_utf8_lossy(&ws.ok(&["hooks"]).stdout).into_owned();
        assert!(
            !listed.contains("/tmp/evil") && listed.contains("trusted"),
            "{listed}"
        );
    }
}

#[test]
fn a_hook_that_hangs_is_killed_at_its_timeout() {
    let ws = WireWs::new(W, vec![bash(W, "c1", "echo hi"), text(W, "done")]);
    let marker = "tern-hook-hang-9f3a";
    user_hooks(
        &ws,
        json!({"PreToolUse": [{"hooks": [{"type": "command", "timeout": 1,
            "command": format!("exec -a {marker} sleep 300")}]}]}),
    );
    let out = ws.ok(&["exec", "--json", "go"]);
    let ev = stdout_json(&out);
    let h = of(&ev, "hook");
    assert_eq!(h[0]["decision"], "error");
    assert!(h[0]["exit_code"].is_null());
    assert!(h[0]["message"].as_str().unwrap().contains("timed out"));
    // The call went on (a timeout warns, it does not block) and the hook is gone.
    assert_eq!(last(&ev)["status"], "completed");
    // SIGKILL is delivered at once but the process leaves when next scheduled: a loaded
    // machine can show it for a moment after tern has exited.
    assert!(
        procs::eventually(std::time::Duration::from_secs(10), || procs::procs_with(
            marker
        )
        .is_empty()),
        "the hook still runs"
    );
}

#[test]
fn a_goal_that_fails_twice_then_passes_takes_three_answers() {
    let ws = WireWs::new(W, vec![text(W, "a1"), text(W, "a2"), text(W, "a3")]);
    // Fails until its counter reaches 3.
    let goal = "n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count; echo \"run $n\"; [ $n -ge 3 ]";
    let out = ws.ok(&["exec", "--json", "--goal", goal, "work"]);
    let ev = stdout_json(&out);
    let r = last(&ev);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(
        r["goal"],
        json!({"command": goal, "passed": true, "attempts": 3})
    );
    assert_eq!(ws.fake.requests().len(), 3);
    let msgs = messages(&ws.fake.requests()[2]);
    assert!(content(msgs.last().unwrap()).contains("run 2"));
    let goal_json = ws.json("goal.json");
    let docs = crate::state_formats::docs();
    let problems = crate::state_formats::check(docs.shape("goal.json"), &goal_json, "goal.json");
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(goal_json["last"]["passed"], true);
    let status = ws.ok(&["status"]);
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("Goal gate"),
        "status"
    );
}

#[test]
fn a_goal_that_never_passes_fails_after_its_attempts() {
    let ws = WireWs::new(W, vec![text(W, "a1"), text(W, "a2"), text(W, "a3")]);
    let out = ws.tern(&[
        "exec",
        "--json",
        "--goal",
        "echo not yet; exit 1",
        "--goal-attempts",
        "2",
        "work",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let ev = stdout_json(&out);
    let r = last(&ev);
    assert_eq!(r["status"], "failed");
    assert_eq!(r["goal"]["passed"], false);
    assert_eq!(r["goal"]["attempts"], 2);
    assert!(r["goal"]["output"].as_str().unwrap().contains("not yet"));
    assert_eq!(ws.fake.requests().len(), 2);
}

#[test]
fn exec_as_a_worker_cd_output_last_message_and_max_wall_time() {
    let ws = WireWs::new(
        W,
        vec![bash(W, "c1", "pwd > where.txt"), text(W, "the answer")],
    );
    let task = ws.root().join("task");
    std::fs::create_dir_all(task.join(".tern")).unwrap();
    let out_file = ws.root().join("out/last.txt");
    // Its folder must exist: tern makes none (see output_last_message_is_checked_at_start).
    std::fs::create_dir(ws.root().join("out")).unwrap();
    ws.ok(&[
        "exec",
        "--cd",
        "task",
        "--output-last-message",
        "out/last.txt",
        "go",
    ]);
    assert_eq!(std::fs::read_to_string(&out_file).unwrap(), "the answer\n");
    let where_ = std::fs::read_to_string(task.join("where.txt")).unwrap();
    assert_eq!(Path::new(where_.trim()), task.canonicalize().unwrap());
    // A run past its wall time stops as a budget, not an interrupt.
    ws.push(vec![bash(W, "c2", "sleep 30"), text(W, "late")]);
    let out = ws.tern(&["exec", "--json", "--max-wall-time", "2", "wait"]);
    assert_eq!(out.status.code(), Some(1));
    let ev = stdout_json(&out);
    assert_eq!(last(&ev)["status"], "budget_exhausted");
    assert!(
        last(&ev)["error"]
            .as_str()
            .unwrap()
            .contains("--max-wall-time")
    );
}

#[test]
fn pre_tool_use_json_decisions_deny_and_replace_the_input() {
    let ws = WireWs::new(
        W,
        vec![
            bash(W, "c1", "echo original"),
            bash(W, "c2", "rm -rf build"),
            text(W, "done"),
        ],
    );
    // Claude's JSON answer: rewrite echo commands, deny rm with a reason the model reads.
    let hook = r#"input=$(cat); case "$input" in
  *'"rm -rf'*) echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "rm -rf is not allowed here"}}' ;;
  *) echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow", "updatedInput": {"command": "echo replaced"}}}' ;;
esac"#;
    user_hooks(&ws, one("PreToolUse", "Bash", hook));
    let out = ws.ok(&["exec", "--json", "--approval", "never", "go"]);
    let ev = stdout_json(&out);
    let results = of(&ev, "tool_result");
    // allow + updatedInput: the replaced command ran (allow does not lift --approval never).
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .contains("--approval never"),
        "{}",
        results[0]
    );
    assert!(
        results[1]["content"]
            .as_str()
            .unwrap()
            .contains("rm -rf is not allowed here")
    );
    let decisions: Vec<&str> = of(&ev, "hook")
        .iter()
        .map(|h| h["decision"].as_str().unwrap())
        .collect();
    assert_eq!(decisions, ["allow", "deny"]);
    // Under auto approval the replaced input is what runs.
    ws.push(vec![bash(W, "c3", "echo original"), text(W, "done")]);
    let out = ws.ok(&["exec", "--json", "again"]);
    let ev = stdout_json(&out);
    let r = of(&ev, "tool_result")[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(r.contains("replaced") && !r.contains("original"), "{r}");
    let status = String::from_utf8_lossy(&ws.ok(&["status"]).stdout).into_owned();
    assert!(
        status.contains("Hooks: 1 run; last: hook PreToolUse"),
        "{status}"
    );
}

/// A hooks file with one invalid entry beside a PreToolUse gate: tern does not start (exit 2)
/// rather than run without the gate; the message names the file, the entry and why. Valid
/// Claude entries tern does not run (an unknown event, a `prompt` handler) stay notes.
#[test]
fn an_invalid_hooks_file_refuses_to_start_instead_of_failing_open() {
    let ws = WireWs::new(W, vec![bash(W, "c1", "touch ran.txt"), text(W, "done")]);
    let file = user_hooks(
        &ws,
        json!({
            "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command",
                "command": "echo 'no commands today' >&2; exit 2"}]}],
            "Stop": [{"hooks": [{"type": "command", "command": "true", "timeout": "soon"}]}],
        }),
    );
    let out = ws.tern(&["exec", "go"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&file.display().to_string())
            && stderr.contains("hooks.Stop[0].hooks[0].timeout")
            && stderr.contains("seconds"),
        "{stderr}"
    );
    assert!(ws.fake.requests().is_empty(), "the model was asked");
    assert!(!ws.root().join("ran.txt").exists(), "the command ran");
    // The REPL refuses to start too.
    let repl = ws.tern_in(&["chat"], "go\n");
    assert_eq!(repl.status.code(), Some(2), "{repl:?}");
    assert!(ws.fake.requests().is_empty(), "the model was asked");
    // The JSON result says so too, and `tern hooks` lists the invalid entry.
    let out = ws.tern(&["exec", "--json", "go"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let ev = stdout_json(&out);
    assert_eq!(last(&ev)["type"], "result");
    assert!(
        last(&ev)["error"]
            .as_str()
            .unwrap_or("")
            .contains("hooks.Stop[0].hooks[0].timeout"),
        "{ev:?}"
    );
    let listed = String::from_utf8_lossy(&ws.ok(&["hooks"]).stdout).into_owned();
    assert!(
        listed.contains("INVALID") && listed.contains("hooks.Stop[0]"),
        "{listed}"
    );
    // Fixed, with valid Claude entries tern does not run: it starts, and the gate holds.
    user_hooks(
        &ws,
        json!({
            "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command",
                "command": "echo 'no commands today' >&2; exit 2"}]}],
            "Notification": [{"hooks": [{"type": "command", "command": "true"}]}],
            "Stop": [{"hooks": [{"type": "prompt", "prompt": "done?"}]}],
        }),
    );
    let out = ws.ok(&["exec", "--json", "go"]);
    assert!(!ws.root().join("ran.txt").exists(), "the gate did not hold");
    let ev = stdout_json(&out);
    assert_eq!(last(&ev)["status"], "completed");
}

/// `--goal ""` (or only blanks) is a usage error naming the flag, before anything runs; so is
/// `/goal` with no command before `--attempts`.
#[test]
fn a_blank_goal_is_a_usage_error() {
    let ws = WireWs::new(W, vec![text(W, "a1"), text(W, "a2")]);
    for blank in ["", "   "] {
        let out = ws.tern(&["exec", "--goal", blank, "work"]);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--goal"), "{stderr}");
    }
    assert!(ws.fake.requests().is_empty(), "the model was asked");
    ws.ok(&["exec", "work"]);
    let out = ws.ok_in(
        &["chat", "--continue"],
        "/goal --attempts 3\n/goal \"\"\n/goal\n",
    );
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(all.matches("/goal needs a command").count(), 2, "{all}");
    assert!(all.contains("no goal set"), "{all}");
    assert!(!ws.path("goal.json").exists(), "a blank goal was set");
}

/// A PreToolUse hook's `updatedInput` changes what runs: the person sees and approves that
/// command, never the model's original one (the `tool_call` event carries what runs; a warning
/// names what the model asked for).
#[test]
fn the_person_approves_the_command_a_hook_rewrote() {
    let ws = WireWs::new(W, vec![bash(W, "c1", "echo original"), text(W, "done")]);
    let hook = r#"cat >/dev/null; echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask", "updatedInput": {"command": "echo replaced"}}}'"#;
    user_hooks(&ws, one("PreToolUse", "Bash", hook));
    let out = ws.ok_in(&["chat", "--approval", "ask"], "go\ny\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("tern wants to run:\n  echo replaced"),
        "{stderr}"
    );
    assert!(!stderr.contains("$ echo original"), "{stderr}");
    assert!(stderr.contains("PreToolUse hook replaced"), "{stderr}");
    // What ran is what was approved.
    let reqs = ws.fake.requests();
    let msgs = messages(&reqs[1]);
    assert!(content(msgs.last().unwrap()).contains("replaced"));
    // The event stream shows the command that ran.
    ws.push(vec![bash(W, "c2", "echo original"), text(W, "done")]);
    let out = ws.ok(&["exec", "--json", "--approval", "auto", "again"]);
    let ev = stdout_json(&out);
    let calls = of(&ev, "tool_call");
    assert_eq!(calls[0]["arguments"]["command"], "echo replaced", "{ev:?}");
}

/// `--output-last-message PATH` is checked before the model is asked: a missing folder, a
/// folder named as the file, or a file where the folder should be is a usage error (exit 2)
/// naming the flag, and tern creates no folder.
#[test]
fn output_last_message_is_checked_at_start() {
    let ws = WireWs::new(W, vec![text(W, "the answer")]);
    std::fs::create_dir(ws.root().join("adir")).unwrap();
    std::fs::write(ws.root().join("afile"), "x").unwrap();
    for bad in ["missing/last.txt", "adir", "adir/", "afile/last.txt"] {
        let out = ws.tern(&["exec", "--output-last-message", bad, "go"]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--output-last-message"), "{bad}: {stderr}");
        let out = ws.tern(&["exec", "--json", "--output-last-message", bad, "go"]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {out:?}");
        let ev = stdout_json(&out);
        let error = last(&ev)["error"].as_str().unwrap_or("").to_string();
        assert!(error.contains("--output-last-message"), "{bad}: {ev:?}");
    }
    assert!(ws.fake.requests().is_empty(), "the model was asked");
    assert!(!ws.root().join("missing").exists(), "a folder was made");
    ws.ok(&["exec", "--output-last-message", "adir/last.txt", "go"]);
    assert_eq!(
        std::fs::read_to_string(ws.root().join("adir/last.txt")).unwrap(),
        "the answer\n"
    );
}

/// A Stop hook that always exits 2 (ignoring `stop_hook_active`) does not loop until
/// `--max-turns`: after STOP_HOOK_CONTINUATIONS (5) continuations the next block ends the turn
/// as failed, saying why; the later runs were told they were re-running.
#[test]
fn a_stop_hook_that_always_blocks_is_bounded() {
    let ws = WireWs::new(W, vec![]);
    user_hooks(
        &ws,
        one(
            "Stop",
            "",
            "cat >> \"$TERN_PROJECT_DIR/stop-inputs.jsonl\"; echo >> \"$TERN_PROJECT_DIR/stop-inputs.jsonl\"; echo 'not yet' >&2; exit 2",
        ),
    );
    let out = ws.tern(&["exec", "--json", "--max-turns", "40", "go"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let ev = stdout_json(&out);
    let r = last(&ev);
    assert_eq!(r["status"], "failed", "{r}");
    let err = r["error"].as_str().unwrap();
    assert!(
        err.contains("Stop hook") && err.contains("5 times") && err.contains("not yet"),
        "{err}"
    );
    // The first answer and five continuations: six requests, not forty.
    assert_eq!(ws.fake.requests().len(), 6);
    let inputs: Vec<Value> = std::fs::read_to_string(ws.root().join("stop-inputs.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(inputs.len(), 6);
    assert_eq!(inputs[0]["stop_hook_active"], false);
    assert!(inputs[1..].iter().all(|i| i["stop_hook_active"] == true));
}

/// Every invalid entry of a group is named, not only the first: a bad `matcher` does not hide a
/// bad `timeout` or a missing `command` beside it.
#[test]
fn every_invalid_entry_of_a_group_is_named() {
    let ws = WireWs::new(W, vec![text(W, "done")]);
    user_hooks(
        &ws,
        json!({
            "PreToolUse": [{"matcher": "(", "hooks": [
                {"type": "command", "command": "true", "timeout": -1},
                {"type": "command"}]}],
        }),
    );
    let out = ws.tern(&["exec", "go"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    for place in [
        "hooks.PreToolUse[0].matcher",
        "hooks.PreToolUse[0].hooks[0].timeout",
        "hooks.PreToolUse[0].hooks[1].command",
    ] {
        assert!(stderr.contains(place), "{place} not named: {stderr}");
    }
}

/// Issue 34: a Claude hooks file with `if` (≥ 2.1.85): a guard scoped to `rm` blocks `rm` alone
/// (also inside a compound command), a scoped logger logs only its commands; PreToolUse
/// `additionalContext` reaches the model; an `Edit|Write` matcher is named as never firing.
#[test]
fn claude_if_rules_scope_hooks_and_pre_tool_use_context_reaches_the_model() {
    let ws = WireWs::new(
        W,
        vec![
            bash(W, "c1", "echo safe > kept.txt"),
            bash(W, "c2", "ls && rm -f kept.txt"),
            bash(W, "c3", "git --version > /dev/null; echo logged"),
            text(W, "done"),
        ],
    );
    user_hooks(
        &ws,
        json!({
            "PreToolUse": [
                {"matcher": "Bash", "hooks": [
                    {"type": "command", "if": "Bash(rm *)",
                     "command": "echo 'no rm here' >&2; exit 2"},
                    {"type": "command", "if": "Bash(git *)",
                     "command": "echo git >> \"$TERN_PROJECT_DIR/git.log\""},
                    {"type": "command",
                     "command": "echo '{\"hookSpecificOutput\": {\"hookEventName\": \"PreToolUse\", \"additionalContext\": \"remember the style guide\"}}'"}
                ]},
                {"matcher": "Edit|Write|MultiEdit", "hooks": [
                    {"type": "command", "command": "touch \"$TERN_PROJECT_DIR/never\""}
                ]}
            ]
        }),
    );
    let out = ws.ok(&["exec", "--json", "go"]);
    // The rm guard blocked the compound command only; the file is still there.
    assert!(ws.root().join("kept.txt").exists());
    let reqs = ws.fake.requests();
    let results: Vec<String> = messages(reqs.last().unwrap())
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(content)
        .collect();
    assert!(!results[0].contains("no rm here"), "{}", results[0]);
    assert!(results[1].contains("no rm here"), "{}", results[1]);
    // The git logger ran once, for the git command.
    let log = std::fs::read_to_string(ws.root().join("git.log")).unwrap_or_default();
    assert_eq!(log, "git\n");
    // The unscoped hook's context is in every result that ran.
    assert!(
        results[0].contains("[PreToolUse hook]\nremember the style guide"),
        "{}",
        results[0]
    );
    assert!(
        results[2].contains("remember the style guide"),
        "{}",
        results[2]
    );
    // Edit|Write never fires in tern, and tern says so (tern hooks lists the note).
    assert!(!ws.root().join("never").exists());
    let listed = ws.ok(&["hooks"]);
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(text.contains("names no tool of tern's"), "{text}");
    let _ = out;
}

#[test]
fn an_unknown_handler_type_refuses_the_run_naming_the_entry() {
    let ws = WireWs::new(W, vec![text(W, "done")]);
    user_hooks(
        &ws,
        json!({"PreToolUse": [{"matcher": "Bash", "hooks": [
            {"type": "comand", "command": "exit 2"}]}]}),
    );
    let out = ws.tern(&["exec", "go"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("hooks.PreToolUse[0].hooks[0].type"), "{err}");
    assert!(ws.fake.requests().is_empty());
}

#[test]
fn an_invalid_if_refuses_the_run_naming_the_entry() {
    let ws = WireWs::new(W, vec![text(W, "done")]);
    user_hooks(
        &ws,
        json!({"PreToolUse": [{"matcher": "Bash", "hooks": [
            {"type": "command", "if": "Bash(rm *", "command": "true"}]}]}),
    );
    let out = ws.tern(&["exec", "go"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("hooks.PreToolUse[0].hooks[0].if"), "{err}");
    assert!(ws.fake.requests().is_empty());
}

/// Issue 34: `"async": true` runs in the background and decides nothing: an async PreToolUse
/// hook that exits 2 does not block the command, and it still runs.
#[test]
fn an_async_hook_runs_in_the_background_and_decides_nothing() {
    let ws = WireWs::new(W, vec![bash(W, "c1", "touch ran.txt"), text(W, "done")]);
    user_hooks(
        &ws,
        json!({"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "async": true,
            "command": "touch \"$TERN_PROJECT_DIR/hook-ran\"; echo 'would block' >&2; exit 2"}]}]}),
    );
    ws.ok(&["exec", "go"]);
    assert!(
        ws.root().join("ran.txt").exists(),
        "an async hook blocked the command"
    );
    assert!(
        crate::support::procs::eventually(std::time::Duration::from_secs(20), || {
            ws.root().join("hook-ran").exists()
        }),
        "the async hook never ran"
    );
    let reqs = ws.fake.requests();
    let tool = messages(reqs.last().unwrap())
        .into_iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert!(!content(&tool).contains("would block"));
}

/// Issue 46: `tern hooks` shows each hook's `if` and `async`; `tern hooks trust` of a file with
/// a malformed `if` prints the same INVALID lines (it used to print "Its hooks:" and nothing);
/// a repository with only Claude Code's `.claude/settings.json` is told how to use its hooks.
#[test]
fn hooks_show_if_and_async_and_trust_names_what_is_invalid() {
    let ws = WireWs::new(W, vec![]);
    std::fs::create_dir_all(ws.root().join(".claude")).unwrap();
    std::fs::write(
        ws.root().join(".claude/settings.json"),
        json!({"hooks": one("Stop", "", "echo hi")}).to_string(),
    )
    .unwrap();
    let listed = String::from_utf8_lossy(&ws.ok(&["hooks"]).stdout).into_owned();
    assert!(
        listed.contains("no hooks run here")
            && listed.contains(".claude/settings.json here has 1 hook"),
        "{listed}"
    );
    let project = ws.root().join(".tern/hooks.json");
    let hooks = json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": "echo guard", "if": "Bash(rm *)"},
        {"type": "command", "command": "echo later", "async": true},
        {"type": "command", "command": "echo broken", "if": "Bash(rm *"}
    ]}]}});
    std::fs::write(&project, hooks.to_string()).unwrap();
    let trusted = String::from_utf8_lossy(&ws.tern(&["hooks", "trust"]).stdout).into_owned();
    assert!(
        trusted.contains("INVALID") && trusted.contains(".if"),
        "{trusted}"
    );
    let hooks = json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": "echo guard", "if": "Bash(rm *)"},
        {"type": "command", "command": "echo later", "async": true}
    ]}]}});
    std::fs::write(&project, hooks.to_string()).unwrap();
    ws.ok(&["hooks", "trust"]);
    let listed = String::from_utf8_lossy(&ws.tern(&["hooks"]).stdout).into_owned();
    assert!(
        listed.contains("if Bash(rm *)") && listed.contains("async"),
        "{listed}"
    );
    assert!(!listed.contains(".claude/settings.json here"), "{listed}");
}

/// Issue 46: an async hook still running when `tern exec` ends is waited for within its own
/// timeout (its upload finishes), and one its timeout kills is named on stderr and in its
/// `hook` event, never lost without a word.
#[test]
fn async_hooks_still_running_at_the_end_are_waited_for_or_named() {
    let ws = WireWs::new(W, vec![bash(W, "c1", "echo hi"), text(W, "done")]);
    let done = ws.root().join("uploaded");
    user_hooks(
        &ws,
        json!({"PostToolUse": [{"matcher": "Bash", "hooks": [
            {"type": "command", "async": true,
             "command": format!("sleep 1.5; touch {}", done.display())},
            {"type": "command", "async": true, "timeout": 1, "command": "sleep 30"}
        ]}]}),
    );
    let out = ws.ok(&["exec", "go"]);
    assert!(done.exists(), "the async hook was cut short");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("async hook `sleep 30` was still running when the run ended and was killed at its timeout of 1 s"),
        "{err}"
    );
    let hooks: Vec<Value> = ws
        .events()
        .into_iter()
        .filter(|e| e["type"] == "hook")
        .collect();
    assert!(
        hooks.iter().any(|h| h["message"]
            .as_str()
            .unwrap_or("")
            .contains("killed at its timeout of 1 s")),
        "{hooks:?}"
    );
    assert_eq!(hooks.len(), 2, "{hooks:?}");
}
