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

#[test]
fn a_post_tool_use_hook_receives_bash_the_command_and_the_response() {
    let ws = WireWs::new(W, vec![bash(W, "c1", "echo hello-out"), text(W, "done")]);
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
    assert_eq!(input["tool_input"]["command"], "echo hello-out");
    let resp = &input["tool_response"];
    assert!(
        resp["stdout"].as_str().unwrap().contains("hello-out"),
        "{resp}"
    );
    assert_eq!(resp["exit_code"], 0);
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
    assert!(procs::procs_with(marker).is_empty(), "the hook still runs");
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
