//! Issue 17 item 5: what reaches the terminal is shown, never interpreted. A command with a
//! carriage return, an erase-line and a cursor-up sequence and a bidi override, asked about in a
//! real terminal (tmux), is shown whole with its escapes visible; tool activity on stderr and
//! `tern status` show escapes the same way.

use crate::support::FakeServer;
use crate::support::cli::{Ws, run_no_stdin};
use crate::support::openai_text;
use crate::support::script::openai_bash;

/// Characters a terminal would act on (or that reorder text), none of which may reach it raw.
fn raw_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| (c.is_control() && c != '\n' && c != '\t') || c == '\u{202e}')
        .collect()
}

/// The approval question in the REPL on a real terminal: the command's `\r`, `\x1b[2K`,
/// `\x1b[1A` and `\u{202e}` cannot redraw it into `ls -la`; the person sees every line of what
/// would run, and `n` runs nothing.
#[test]
fn the_approval_question_shows_the_whole_command_with_its_escapes() {
    let Some((_dir, tmux, ws)) =
        crate::tmux::setup("the_approval_question_shows_the_whole_command_with_its_escapes")
    else {
        return;
    };
    let command = "touch ran.txt # \r\x1b[2K\x1b[1Als -la \u{202e}gpj.exe\necho second line";
    let fake = FakeServer::strict(vec![
        openai_bash("c1", command),
        openai_text("not run, then"),
    ]);
    crate::tmux::start_chat_args(&tmux, &ws, &fake, "TERN_TEST=1", &["--approval", "ask"]);
    tmux.keys(&["list the files", "Enter"]);
    let screen = tmux.wait_for("run it?");
    assert!(
        screen.contains(r"1│ touch ran.txt # \r\x1b[2K\x1b[1Als -la \u{202e}gpj.exe"),
        "{screen}"
    );
    assert!(screen.contains("2│ echo second line"), "{screen}");
    assert!(screen.contains("tern wants to run (2 lines):"), "{screen}");
    assert!(
        screen.contains("it holds 4 control or invisible characters"),
        "{screen}"
    );
    // Asked once, not also as a `$` activity line above the question (issue 18).
    assert_eq!(screen.matches("touch ran.txt").count(), 1, "{screen}");
    tmux.keys(&["n", "Enter"]);
    tmux.wait_for("not run, then");
    assert!(!ws.join("ran.txt").exists());
    tmux.keys(&["C-d"]);
}

/// Tool activity on stderr (`tern exec`): the command line is shown with its escapes visible,
/// and nothing on stderr or stdout is a raw control character.
#[test]
fn tool_activity_shows_escapes_visibly() {
    let command = "printf 'a\\n' # \r\x1b[2K\x1b[1A\u{202e}hidden";
    let fake = FakeServer::strict(vec![openai_bash("c1", command), openai_text("done")]);
    let ws = Ws::new();
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "--approval", "auto", "go"]);
    let out = run_no_stdin(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr
            .contains(r"$ printf 'a\n' # \r\x1b[2K\x1b[1A\u{202e}hidden"),
        "{out:?}"
    );
    assert_eq!(raw_controls(&out.stderr), Vec::<char>::new(), "{out:?}");
    assert_eq!(raw_controls(&out.stdout), Vec::<char>::new(), "{out:?}");
}

/// `tern status` with a To-do item and a goal holding escape sequences, a carriage return and a
/// bidi override: shown as escapes, none of them raw.
#[test]
fn status_shows_ledger_escapes_visibly() {
    let fake = FakeServer::strict(vec![openai_text("hello")]);
    let ws = Ws::new();
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "hi"]);
    let out = run_no_stdin(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    let ledger = serde_json::json!({
        "goal": {"objective": "ship \u{1b}]0;title\u{7} it"},
        "items": [
            {"id": "1", "content": "fix \u{1b}[2K\u{1b}[1Athe\r bug \u{202e}txt.exe", "status": "in_progress"}
        ],
        "revision": 1
    });
    std::fs::write(
        ws.current_dir().join("ledger.json"),
        serde_json::to_string(&ledger).unwrap(),
    )
    .unwrap();
    let mut cmd = ws.tern(&fake);
    cmd.arg("status");
    let out = run_no_stdin(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout
            .contains(r"#1 fix \x1b[2K\x1b[1Athe\r bug \u{202e}txt.exe"),
        "{out:?}"
    );
    assert!(out.stdout.contains(r"ship \x1b]0;title\x07 it"), "{out:?}");
    assert_eq!(raw_controls(&out.stdout), Vec::<char>::new(), "{out:?}");
}
