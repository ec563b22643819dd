//! C17 in a real terminal: `tern chat` in a detached tmux pane (its own server socket, so a
//! person's tmux is never touched), Ctrl-C during a bash tool call, then "continue" against a
//! strict provider. Skipped with a message when tmux is not installed (`.ci/run` installs it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::support::body::{messages, roles, tool_result};
use crate::support::files::{jsonl, read, read_json};
use crate::support::procs::{eventually, pids_running};
use crate::support::{FakeServer, Recorded, Wire, openai_text, openai_tool_calls};
use serde_json::{Value, json};

/// A tmux server of our own, its socket in the test's temporary folder (`tmux -S`): it never
/// touches a person's server, and no socket file outlives the test. Killed when dropped.
pub(crate) struct Tmux {
    socket: PathBuf,
    conf: PathBuf,
}

impl Tmux {
    /// None when tmux is not installed.
    fn start(dir: &Path) -> Option<Tmux> {
        let found = Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return None;
        }
        let conf = dir.join("tmux.conf");
        // remain-on-exit keeps the pane after tern leaves, so its exit status can be read.
        std::fs::write(
            &conf,
            "set -g remain-on-exit on\nset -g history-limit 5000\n",
        )
        .unwrap();
        Some(Tmux {
            socket: dir.join("tmux.sock"),
            conf,
        })
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&self.socket).arg("-f").arg(&self.conf);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        let out = self.cmd().args(args).output().expect("run tmux");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    pub(crate) fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        self.run(&args);
    }

    pub(crate) fn capture(&self) -> String {
        let out = self.run(&["capture-pane", "-p", "-J", "-S", "-", "-t", "t"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the REPL prompt is back (a line `›` after the last occurrence of `after`):
    /// keys sent before that reach a terminal still in cooked mode, where Ctrl-D is lost.
    pub(crate) fn wait_for_prompt_after(&self, after: &str) {
        let start = Instant::now();
        loop {
            let screen = self.capture();
            if let Some(at) = screen.rfind(after)
                && screen[at..].lines().skip(1).any(|l| l.trim_end() == "›")
            {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "no prompt after {after:?}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the pane shows `text` (20 s: a hang, not a speed check).
    pub(crate) fn wait_for(&self, text: &str) -> String {
        let start = Instant::now();
        loop {
            let screen = self.capture();
            if screen.contains(text) {
                return screen;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the pane never showed {text:?}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").output();
    }
}

/// Starts `tern chat --approval auto` in pane `t`, in workspace `ws`, talking to `fake`.
fn start_chat(tmux: &Tmux, ws: &Path, fake: &FakeServer) {
    start_chat_with(tmux, ws, fake, "TERN_TEST=1");
}

/// [`start_chat`] with one more `NAME=value` in tern's environment.
pub(crate) fn start_chat_with(tmux: &Tmux, ws: &Path, fake: &FakeServer, extra_env: &str) {
    start_chat_approval(tmux, ws, fake, extra_env, "auto");
}

/// [`start_chat_with`] with `--approval approval`.
fn start_chat_approval(tmux: &Tmux, ws: &Path, fake: &FakeServer, extra_env: &str, approval: &str) {
    start_chat_args(tmux, ws, fake, extra_env, &["--approval", approval]);
}

/// [`start_chat_with`] with `args` after `tern chat` instead of `--approval auto`.
pub(crate) fn start_chat_args(
    tmux: &Tmux,
    ws: &Path,
    fake: &FakeServer,
    extra_env: &str,
    args: &[&str],
) {
    let mut all = vec!["chat"];
    all.extend_from_slice(args);
    start_tern(tmux, ws, fake, extra_env, &all);
    tmux.wait_for_prompt_after("/help for commands");
}

/// `tern ARGS` in pane `t`, in workspace `ws`, talking to `fake`; the pane says its exit status
/// when it ends (`[tern exited with N]`).
fn start_tern(tmux: &Tmux, ws: &Path, fake: &FakeServer, extra_env: &str, args: &[&str]) {
    let tern = env!("CARGO_BIN_EXE_tern");
    let path_env = format!("PATH={}", std::env::var("PATH").unwrap_or_default());
    let home = format!("HOME={}", ws.join(".home").display());
    let base = format!("OPENAI_BASE_URL={}", fake.openai_base());
    let ws_str = ws.display().to_string();
    let mut cmd = vec![
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "160",
        "-y",
        "40",
        "-c",
        &ws_str,
        "--",
        "env",
        "-i",
        &path_env,
        &home,
        "TERM=xterm-256color",
        &base,
        extra_env,
        "TERN_MODEL=m",
        // The shell reports tern's exit status in the pane: tmux's own pane_dead_status is not
        // reliable here (with two test servers at once it sometimes never reaps the pane). It
        // ignores SIGINT itself, so Ctrl-C reaches only tern (which installs its own handler).
        "sh",
        "-c",
        "trap '' INT; \"$0\" \"$@\"; echo \"[tern exited with $?]\"",
        tern,
    ];
    cmd.extend_from_slice(args);
    tmux.run(&cmd);
}

/// A temporary folder holding the tmux server's files and a workspace `ws/` with its own
/// `.tern/`; None (after saying so) when tmux is not installed.
pub(crate) fn setup(test: &str) -> Option<(tempfile::TempDir, Tmux, PathBuf)> {
    let dir = tempfile::tempdir().unwrap();
    let Some(tmux) = Tmux::start(dir.path()) else {
        crate::support::skipped(test, "tmux is not installed (.ci/run installs it)", true);
        return None;
    };
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join(".tern")).unwrap();
    Some((dir, tmux, ws))
}

/// Checks every request is one the strict server accepts; returns the messages of the second.
fn second_request_messages(reqs: &[Recorded]) -> Vec<Value> {
    for r in reqs {
        crate::support::validate(Wire::OpenAi, &r.json())
            .expect("a request the strict server refuses");
    }
    messages(&reqs[1])
}

/// C17: Ctrl-C 2 s into `sleep 61.37` kills its process group and stores an error result for the
/// call; "continue" is then accepted by a strict provider, and the final answer is shown.
#[test]
fn c17_ctrl_c_during_a_tool_call_then_continue_in_tmux() {
    let Some((_dir, tmux, ws)) = setup("c17_ctrl_c_during_a_tool_call_then_continue_in_tmux")
    else {
        return;
    };
    // A duration no other test or person uses, so the process can be found by its command line.
    let sleep = ["sleep", "61.37"];
    let args = json!({"command": sleep.join(" ")}).to_string();
    let fake = FakeServer::strict(vec![
        openai_tool_calls(&[
            ("call_sleep", "bash", args.as_str()),
            ("call_next", "bash", r#"{"command":"touch never.txt"}"#),
        ]),
        openai_text("Picked up after the interruption: all done."),
    ]);

    start_chat(&tmux, &ws, &fake);
    tmux.keys(&["run the long command", "Enter"]);
    tmux.wait_for("$ sleep 61.37");
    assert!(
        eventually(Duration::from_secs(20), || !pids_running(&sleep).is_empty()),
        "sleep never started"
    );
    std::thread::sleep(Duration::from_secs(2));
    tmux.keys(&["C-c"]);
    tmux.wait_for("(interrupted)");
    // The status line is a separate write after "(interrupted)": a capture can fall between the
    // two, so wait for it (the first turn's, so the only one) instead of expecting it at once.
    let screen = tmux.wait_for("── ");
    assert!(screen.contains("interrupted by the user after"), "{screen}");

    // The process group was killed: no sleep left behind.
    assert!(
        eventually(Duration::from_secs(10), || pids_running(&sleep).is_empty()),
        "sleep 61.37 still running after Ctrl-C: {:?}",
        pids_running(&sleep)
    );

    tmux.wait_for_prompt_after("(interrupted)");
    tmux.keys(&["continue", "Enter"]);
    let screen = tmux.wait_for("Picked up after the interruption: all done.");
    assert!(!screen.contains("provider error"), "{screen}");

    // Every request was valid for the strict provider; the second carries the stored error.
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2, "{screen}");
    let msgs = second_request_messages(&reqs);
    assert_eq!(
        roles(&msgs),
        ["system", "user", "assistant", "tool", "tool", "user"]
    );
    assert_eq!(msgs[4]["tool_call_id"], "call_next");
    assert!(
        msgs[4]["content"]
            .as_str()
            .unwrap_or("")
            .contains("not run: interrupted by the user"),
        "{}",
        msgs[4]
    );
    assert!(
        !ws.join("never.txt").exists(),
        "a call after the interrupted one ran"
    );
    let result = msgs[3]["content"].as_str().unwrap_or("");
    let after = result
        .split("interrupted by the user after ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no interruption note: {result}"));
    assert!((2..=20).contains(&after), "after {after} s: {result}");
    assert!(
        msgs[5]["content"]
            .as_str()
            .unwrap_or("")
            .starts_with("continue")
    );

    let id = read(&ws.join(".tern/current"));
    let ses = ws.join(".tern/sessions").join(id.trim());
    let conv = jsonl(&ses.join("conversation.jsonl"));
    let stored = tool_result(&conv, "call_sleep");
    assert_eq!(stored["is_error"], true);
    assert!(
        stored["content"]
            .as_str()
            .unwrap_or("")
            .contains("interrupted by the user after"),
        "{stored}"
    );
    let events = read(&ses.join("events.jsonl"));
    assert!(
        events.contains(r#""type":"turn_end","#) && events.contains(r#""status":"interrupted""#)
    );

    // Ctrl-D at the prompt leaves with exit 0.
    tmux.wait_for_prompt_after("Picked up after the interruption: all done.");
    tmux.keys(&["C-d"]);
    tmux.wait_for("[tern exited with 0]");
    let meta = read_json(&ses.join("meta.json"));
    assert_eq!(meta["status"], "completed");
    assert!(meta.get("pid").is_none(), "{meta}");
}

/// Ctrl-C while the model's answer streams stops it within seconds (not when the slow stream
/// ends), stores no partial answer, and the next prompt is accepted by a strict provider.
#[test]
fn ctrl_c_while_the_model_streams_then_continue_in_tmux() {
    let Some((_dir, tmux, ws)) = setup("ctrl_c_while_the_model_streams_then_continue_in_tmux")
    else {
        return;
    };
    let slow: String = (1..=40).map(|i| format!("word{i} ")).collect();
    // About one SSE chunk per second: the whole answer would take well over 30 s.
    let fake = FakeServer::strict(vec![
        openai_text(&slow)
            .split_every(40)
            .delay_between(Duration::from_millis(1000)),
        openai_text("A short answer this time."),
    ]);
    start_chat(&tmux, &ws, &fake);
    tmux.keys(&["tell me a long story", "Enter"]);
    tmux.wait_for("word1 ");
    let pressed = Instant::now();
    tmux.keys(&["C-c"]);
    let screen = tmux.wait_for("(interrupted)");
    assert!(
        pressed.elapsed() < Duration::from_secs(15),
        "the stream was not cut short"
    );
    assert!(!screen.contains("word40"), "{screen}");

    tmux.wait_for_prompt_after("(interrupted)");
    tmux.keys(&["continue", "Enter"]);
    tmux.wait_for("A short answer this time.");
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    let msgs = second_request_messages(&reqs);
    assert_eq!(
        roles(&msgs),
        ["system", "user", "user"],
        "no partial answer stored"
    );
    assert!(!reqs[1].body_str().contains("word1 "));
    tmux.keys(&["C-d"]);
}

/// In a real terminal: Ctrl-C with text on the line clears the line and does not count toward
/// leaving; lines typed faster than the REPL reads them (typeahead, tmux send-keys) all arrive.
#[test]
fn ctrl_c_clears_a_line_and_typeahead_is_kept_in_tmux() {
    let Some((_dir, tmux, ws)) = setup("ctrl_c_clears_a_line_and_typeahead_is_kept_in_tmux") else {
        return;
    };
    let fake = FakeServer::strict(vec![openai_text("Hello there.")]);
    start_chat(&tmux, &ws, &fake);

    tmux.keys(&["some text", "C-c"]);
    tmux.keys(&["more", "C-c"]);
    std::thread::sleep(Duration::from_millis(300));
    let screen = tmux.capture();
    assert!(
        !screen.contains("Ctrl-C again"),
        "a Ctrl-C that cleared text counted toward leaving:\n{screen}"
    );
    // Two commands and a prompt in one burst: none is lost.
    tmux.keys(&["/help", "Enter", "/sessions", "Enter", "hi", "Enter"]);
    let screen = tmux.wait_for("Hello there.");
    assert!(
        screen.contains("slash") && screen.contains("/confirm"),
        "{screen}"
    );
    assert!(
        screen.contains("no sessions in"),
        "/sessions was lost:\n{screen}"
    );
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1);
    let last = messages(&reqs[0]);
    assert_eq!(
        last.last().unwrap()["content"],
        "hi",
        "the cleared text leaked into the prompt"
    );

    // At an empty prompt, Ctrl-C twice leaves.
    tmux.wait_for_prompt_after("Hello there.");
    tmux.keys(&["C-c"]);
    tmux.wait_for("Ctrl-C again");
    tmux.keys(&["C-c"]);
    tmux.wait_for("[tern exited with 0]");
}

/// A key typed at the prompt is redacted in the input history `.tern/history`, as in every
/// other file tern writes (found by a new user: it was saved in plain text).
#[test]
fn a_key_typed_in_the_repl_is_redacted_in_its_history_file_in_tmux() {
    let Some((_dir, tmux, ws)) = setup("a_key_typed_in_the_repl_is_redacted_in_its_history_file")
    else {
        return;
    };
    let fake = FakeServer::strict(vec![openai_text("Noted.")]);
    let key = "sk-SECRETKEY1234567890abcdef";
    start_chat_with(&tmux, &ws, &fake, &format!("OPENAI_API_KEY={key}"));
    tmux.keys(&[&format!("my key is {key} ok"), "Enter"]);
    tmux.wait_for_prompt_after("Noted.");
    tmux.keys(&["C-d"]);
    tmux.wait_for("[tern exited with 0]");
    let history = read(&ws.join(".tern/history"));
    assert!(!history.contains(key), "{history}");
    assert!(history.contains("my key is [REDACTED] ok"), "{history}");
}

/// `tern setup` as a person (and an editor's terminal auth method) runs it: each question in a
/// real terminal, the key typed without echo, the test request, the file written 0600.
#[test]
fn setup_asks_in_a_terminal_tests_and_writes_the_config() {
    let Some((dir, tmux, ws)) = setup("setup_asks_in_a_terminal") else {
        return;
    };
    let fake = FakeServer::start(vec![openai_text("OK")]);
    let tern = env!("CARGO_BIN_EXE_tern");
    let path_env = format!("PATH={}", std::env::var("PATH").unwrap_or_default());
    let home_dir = dir.path().join("home");
    std::fs::create_dir_all(&home_dir).unwrap();
    let home = format!("HOME={}", home_dir.display());
    let ws_str = ws.display().to_string();
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "160",
        "-y",
        "40",
        "-c",
        &ws_str,
        "--",
        "env",
        "-i",
        &path_env,
        &home,
        "TERM=xterm-256color",
        "sh",
        "-c",
        "\"$0\" \"$@\"; echo \"[tern exited with $?]\"",
        tern,
        "setup",
    ]);
    tmux.wait_for("Provider: openai");
    tmux.keys(&["Enter"]);
    tmux.wait_for("Base URL [https://api.openai.com/v1]");
    tmux.keys(&["-l", &fake.openai_base()]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("Model [gpt-4.1-mini]");
    tmux.keys(&["-l", "tmux-model"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("API key");
    tmux.keys(&["-l", "sk-typed-in-tmux-42"]);
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("[tern exited with");
    assert!(screen.contains("[tern exited with 0]"), "{screen}");
    assert!(screen.contains("ok: the model answered"), "{screen}");
    // The key was not echoed.
    assert!(!screen.contains("sk-typed-in-tmux-42"), "{screen}");
    let path = home_dir.join(".config/tern/config.json");
    let file = read_json(&path);
    assert_eq!(file["model"], "tmux-model");
    assert_eq!(file["api_key"], "sk-typed-in-tmux-42");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(
        reqs[0].header("authorization"),
        Some("Bearer sk-typed-in-tmux-42")
    );
}

/// Issue 22: a line typed while a turn runs is queued (shown so), delivered at the model's next
/// request after the tool result, and the turn goes on.
#[test]
fn a_line_typed_during_a_turn_is_steered_into_it_in_tmux() {
    let Some((_dir, tmux, ws)) = setup("a_line_typed_during_a_turn_is_steered_into_it_in_tmux")
    else {
        return;
    };
    let args = json!({"command": "sleep 2; while [ ! -e go ]; do sleep 0.05; done"}).to_string();
    let fake = FakeServer::strict(vec![
        openai_tool_calls(&[("call_wait", "bash", args.as_str())]),
        openai_text("Switched to tabs as you asked."),
    ]);
    start_chat(&tmux, &ws, &fake);
    tmux.keys(&["reformat the code", "Enter"]);
    tmux.wait_for("$ sleep 2");
    assert!(
        eventually(Duration::from_secs(20), || fake.requests().len() == 1),
        "the first request"
    );
    tmux.keys(&["use tabs please", "Enter"]);
    let screen = tmux.wait_for("(queued for the model's next request: use tabs please)");
    // Issue 30: the typed text is not echoed onto the progress line or the model's text; it
    // is said back whole, on a line of its own.
    for l in screen.lines().filter(|l| l.contains("use tabs please")) {
        assert!(
            l.trim_start().starts_with("(queued for the model"),
            "typed text landed on another line: {l:?}\n{screen}"
        );
    }
    // A slash command is for tern: it waits for the end of the turn, it is not steered.
    tmux.keys(&["/status", "Enter"]);
    tmux.wait_for("(/status runs when the turn ends)");
    std::fs::write(ws.join("go"), "").unwrap();
    tmux.wait_for("Switched to tabs as you asked.");
    let screen = tmux.wait_for("Plan: idle");
    assert!(
        screen.find("Plan: idle") > screen.find("Switched to tabs as you asked."),
        "{screen}"
    );
    assert!(screen.contains("steered in: use tabs please"), "{screen}");
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2, "{screen}");
    let msgs = second_request_messages(&reqs);
    assert_eq!(
        roles(&msgs),
        ["system", "user", "assistant", "tool", "user"]
    );
    assert_eq!(msgs[4]["content"], "use tabs please");
    // The line was a steer, not a second prompt: the REPL is back at its prompt, nothing queued.
    tmux.wait_for_prompt_after("Switched to tabs as you asked.");
    assert_eq!(fake.requests().len(), 2);
}

/// While a turn runs, the steer watcher leaves an approval question's answer to the question.
#[test]
fn an_approval_answer_is_not_steered_in_tmux() {
    let Some((_dir, tmux, ws)) = setup("an_approval_answer_is_not_steered_in_tmux") else {
        return;
    };
    let fake = FakeServer::strict(vec![
        openai_tool_calls(&[("call_1", "bash", r#"{"command":"touch asked.txt"}"#)]),
        openai_text("Made the file."),
    ]);
    start_chat_approval(&tmux, &ws, &fake, "TERN_TEST=1", "ask");
    tmux.keys(&["make a file", "Enter"]);
    tmux.wait_for("run it?");
    tmux.keys(&["y", "Enter"]);
    let screen = tmux.wait_for("Made the file.");
    assert!(ws.join("asked.txt").exists(), "{screen}");
    assert!(!screen.contains("queued for the model"), "{screen}");
    let reqs = fake.requests();
    let msgs = second_request_messages(&reqs);
    assert_eq!(roles(&msgs), ["system", "user", "assistant", "tool"]);
}

/// Issue 46: in a terminal the approval question takes one key (no Enter).
#[test]
fn the_approval_question_takes_one_key() {
    let Some((_dir, tmux, ws)) = setup("the_approval_question_takes_one_key") else {
        return;
    };
    let fake = FakeServer::strict(vec![
        openai_tool_calls(&[("call_1", "bash", r#"{"command":"touch one-key.txt"}"#)]),
        openai_text("Made it with one key."),
    ]);
    start_chat_approval(&tmux, &ws, &fake, "TERN_TEST=1", "ask");
    tmux.keys(&["make a file", "Enter"]);
    tmux.wait_for("run it?");
    tmux.keys(&["y"]);
    let screen = tmux.wait_for("Made it with one key.");
    assert!(ws.join("one-key.txt").exists(), "{screen}");
}

/// Issue 46: `tern exec --approval ask` in a terminal asks on it, and one key answers.
#[test]
fn exec_asks_on_the_terminal_and_one_key_answers() {
    let Some((_dir, tmux, ws)) = setup("exec_asks_on_the_terminal_and_one_key_answers") else {
        return;
    };
    let fake = FakeServer::strict(vec![
        openai_tool_calls(&[("call_1", "bash", r#"{"command":"touch exec-key.txt"}"#)]),
        openai_text("Done with one key."),
    ]);
    start_tern(
        &tmux,
        &ws,
        &fake,
        "TERN_TEST=1",
        &["exec", "--approval", "ask", "make a file"],
    );
    tmux.wait_for("run it?");
    tmux.keys(&["y"]);
    let screen = tmux.wait_for("[tern exited with 0]");
    assert!(ws.join("exec-key.txt").exists(), "{screen}");
}
