//! Issue 17 item 4: tern's own writes never follow a link a command planted under its folders.
//! The model's scripted command plants the link (in `--sandbox danger-full-access`, where it
//! can), then tern does what it does; each test checks the effect: the link's target outside the
//! workspace is untouched (nothing written there, nothing removed), whatever tern says about it.

use std::collections::BTreeMap;
use std::path::Path;

use crate::support::FakeServer;
use crate::support::cli::{Ws, run, run_no_stdin};
use crate::support::files::{jsonl, snapshot};
use crate::support::openai_text;
use crate::support::script::openai_bash;

/// Every file below `dir` with its size (sparse files are not read).
fn sizes(dir: &Path) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let m = std::fs::symlink_metadata(e.path()).unwrap();
        out.insert(e.file_name().to_string_lossy().into_owned(), m.len());
    }
    out
}

/// `tern exec` in `ws` with danger-full-access (so the command can plant links in the state
/// folder) and automatic approval.
fn exec(ws: &Ws, fake: &FakeServer, prompt: &str) -> crate::support::cli::Out {
    let mut cmd = ws.tern(fake);
    cmd.args([
        "exec",
        "--sandbox",
        "danger-full-access",
        "--approval",
        "auto",
        prompt,
    ]);
    run_no_stdin(cmd)
}

/// `spill/` swapped for a link to an outside folder during a command that then prints more than
/// fits in memory: no spill file lands in the outside folder, and the spill budget removes none
/// of its files (an old 300 MiB file there would be the first to go on a budget of 256 MiB).
#[test]
fn a_swapped_spill_folder_gets_no_spill_file_and_the_budget_removes_nothing() {
    let outside = tempfile::tempdir().unwrap();
    let old = outside.path().join("old.log");
    // Sparse: its size counts toward the budget without taking the disk.
    std::fs::File::create(&old)
        .unwrap()
        .set_len(300 << 20)
        .unwrap();
    let aged = std::process::Command::new("touch")
        .args(["-d", "2001-01-01"])
        .arg(&old)
        .status()
        .unwrap();
    assert!(aged.success());
    std::fs::write(outside.path().join("keep.txt"), b"keep").unwrap();
    let before = sizes(outside.path());

    let command = format!(
        "rm -rf \"$TERN_SESSION_DIR/spill\" && ln -s '{}' \"$TERN_SESSION_DIR/spill\" && seq 1 400000",
        outside.path().display()
    );
    let fake = FakeServer::strict(vec![openai_bash("c1", &command), openai_text("printed it")]);
    let ws = Ws::new();
    let out = exec(&ws, &fake, "print a lot");
    assert_eq!(out.code, Some(0), "{out:?}");

    assert_eq!(sizes(outside.path()), before, "{out:?}");
    assert_eq!(
        std::fs::read(outside.path().join("keep.txt")).unwrap(),
        b"keep"
    );
    // The model read that the full output was not saved, and why (the link is named).
    let conv = jsonl(&ws.current_dir().join("conversation.jsonl"));
    let result = crate::support::body::tool_result(&conv, "c1");
    let text = result["content"].as_str().unwrap_or_default().to_string();
    assert!(text.contains("full output not saved"), "{text}");
    assert!(text.contains("spill: it is a symbolic link"), "{text}");
}

/// `archive/` swapped for a link to an outside folder, and a link planted at an archive file's
/// path: cancelling the draft archives it, and nothing lands in (or is changed through)
/// either link.
#[test]
fn archives_are_never_written_through_a_planted_link() {
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("target.md");
    std::fs::write(&target, b"outside, keep").unwrap();
    let ws = Ws::new();

    // First a link at the next draft archive's path, inside a real archive/.
    let command = format!(
        "ln -s '{}' \"$TERN_SESSION_DIR/archive/draft-0001.md\"",
        target.display()
    );
    let fake = FakeServer::strict(vec![openai_bash("c1", &command), openai_text("planted")]);
    let out = exec(&ws, &fake, "plant");
    assert_eq!(out.code, Some(0), "{out:?}");
    let verb = |args: &[&str], stdin: &str| {
        let mut cmd = ws.tern(&fake);
        cmd.args(args);
        run(cmd, stdin)
    };
    let out = verb(&["plan", "draft"], "a draft to archive\n");
    assert_eq!(out.code, Some(0), "{out:?}");
    let _ = verb(&["plan", "cancel"], "");
    assert_eq!(std::fs::read(&target).unwrap(), b"outside, keep");
    assert_eq!(sizes(outside.path()).len(), 1);

    // Then archive/ itself swapped for a link to the outside folder.
    let command = format!(
        "rm -rf \"$TERN_SESSION_DIR/archive\" && ln -s '{}' \"$TERN_SESSION_DIR/archive\"",
        outside.path().display()
    );
    fake.push(openai_bash("c2", &command));
    fake.push(openai_text("swapped"));
    let mut cmd = ws.tern(&fake);
    cmd.args([
        "exec",
        "--continue",
        "--sandbox",
        "danger-full-access",
        "--approval",
        "auto",
        "swap",
    ]);
    let out = run_no_stdin(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    let out = verb(&["plan", "draft"], "another draft to archive\n");
    assert_eq!(out.code, Some(0), "{out:?}");
    let cleared = verb(&["plan", "cancel"], "");
    assert_eq!(std::fs::read(&target).unwrap(), b"outside, keep");
    assert_eq!(
        sizes(outside.path()).into_keys().collect::<Vec<_>>(),
        ["target.md"],
        "{cleared:?}"
    );
    // Refused, naming the link.
    assert!(
        cleared.stderr.contains("archive: it is a symbolic link")
            || cleared.stdout.contains("archive: it is a symbolic link"),
        "{cleared:?}"
    );
}

/// Links planted where tern keeps its tempfiles (named like the tempfiles of its atomic writes,
/// in the session folder and in archive/): the removal of stray tempfiles at the next start and
/// the atomic writes after it leave the targets as they were.
#[test]
fn links_at_tempfile_paths_are_not_followed() {
    let outside = tempfile::tempdir().unwrap();
    let file = outside.path().join("file.txt");
    std::fs::write(&file, b"keep").unwrap();
    let dir = outside.path().join("dir");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("inner.txt"), b"keep too").unwrap();
    let command = format!(
        "ln -s '{f}' \"$TERN_SESSION_DIR/.tmp-planted\" && ln -s '{d}' \"$TERN_SESSION_DIR/.tmp-dir\" && ln -s '{f}' \"$TERN_SESSION_DIR/archive/.tmp-planted\"",
        f = file.display(),
        d = dir.display()
    );
    let fake = FakeServer::strict(vec![
        openai_bash("c1", &command),
        openai_text("planted"),
        openai_text("continued"),
    ]);
    let ws = Ws::new();
    let out = exec(&ws, &fake, "plant");
    assert_eq!(out.code, Some(0), "{out:?}");
    let before = snapshot(outside.path());
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "--continue", "again"]);
    let out = run(cmd, "");
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(snapshot(outside.path()), before);
    assert_eq!(std::fs::read(&file).unwrap(), b"keep");
}

/// `.tern/history` swapped for a link to a file outside the workspace while the REPL runs (the
/// model's command plants it): the next input line is not written through it, the outside file
/// keeps its bytes, and the REPL says the history is not saved.
#[test]
fn a_planted_history_link_makes_the_repl_write_nothing_outside() {
    let Some((dir, tmux, ws)) =
        crate::tmux::setup("a_planted_history_link_makes_the_repl_write_nothing_outside")
    else {
        return;
    };
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, "outside, keep\n").unwrap();
    let command = format!(
        "rm -f .tern/history && ln -s '{}' .tern/history",
        outside.display()
    );
    let fake = FakeServer::strict(vec![
        openai_bash("c1", &command),
        openai_text("planted it"),
        openai_text("second answer"),
    ]);
    crate::tmux::start_chat_args(
        &tmux,
        &ws,
        &fake,
        "TERN_TEST=1",
        &["--approval", "auto", "--sandbox", "danger-full-access"],
    );
    tmux.keys(&["plant the link", "Enter"]);
    tmux.wait_for("planted it");
    tmux.wait_for_prompt_after("planted it");
    tmux.keys(&["a second line", "Enter"]);
    tmux.wait_for("second answer");
    let screen = tmux.wait_for("input history not saved");
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "outside, keep\n",
        "{screen}"
    );
    let history = ws.join(".tern/history");
    assert!(
        std::fs::symlink_metadata(&history)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(
        screen.contains("history: it is a symbolic link"),
        "{screen}"
    );
    tmux.keys(&["C-d"]);
}

/// `.tern/sessions` swapped for a link to a copy outside the workspace between two runs (as a
/// process an earlier command left behind would): a verb writing the draft and the next
/// `--continue` (which removes stray tempfiles when it takes the session) change nothing in the
/// copy, a tempfile-named file there included; the refusal names the link.
#[test]
fn a_swapped_sessions_folder_is_never_written_through() {
    let fake = FakeServer::strict(vec![openai_text("hello"), openai_text("again")]);
    let ws = Ws::new();
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "hi"]);
    let out = run_no_stdin(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    let id = ws.current_id();

    let outside = tempfile::tempdir().unwrap();
    let copy = outside.path().join("sessions");
    let sessions = ws.path().join(".tern/sessions");
    let cp = std::process::Command::new("cp")
        .arg("-a")
        .arg(&sessions)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(cp.success());
    std::fs::write(
        copy.join(&id).join(".tmp-keep"),
        b"not a tempfile of tern's",
    )
    .unwrap();
    std::fs::remove_dir_all(&sessions).unwrap();
    std::os::unix::fs::symlink(&copy, &sessions).unwrap();
    let before = snapshot(outside.path());

    let mut cmd = ws.tern(&fake);
    cmd.args(["plan", "draft"]);
    let draft = run(cmd, "a plan written through the link\n");
    assert_eq!(snapshot(outside.path()), before, "{draft:?}");
    assert_ne!(draft.code, Some(0), "{draft:?}");
    assert!(
        draft.stderr.contains("sessions: it is a symbolic link"),
        "{draft:?}"
    );

    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "--continue", "again"]);
    let cont = run_no_stdin(cmd);
    assert_eq!(snapshot(outside.path()), before, "{cont:?}");
}
