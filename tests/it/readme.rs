//! Issue 46: the README is the first ten minutes on one screen (at most 250 lines), its links
//! lead somewhere, every `tern` line of its shell blocks parses as the binary's own command
//! line, and its walk-through runs: setup, status, a task, diff, undo, redo, checkpoints, the
//! plan, steer — against the fake provider, in a real workspace.

use std::path::Path;

use crate::support::cli::{LIMIT, WireWs, run_within};
use crate::support::script::{bash, text};
use crate::support::*;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn readme() -> String {
    std::fs::read_to_string(Path::new(ROOT).join("README.md")).expect("README.md")
}

/// The command lines of the README's `sh` blocks (comments cut).
fn shell_lines(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for l in md.lines() {
        if l.starts_with("```") {
            inside = l == "```sh";
            continue;
        }
        if inside {
            let cmd = l.split("  #").next().unwrap_or("").trim();
            if !cmd.is_empty() {
                out.push(cmd.to_string());
            }
        }
    }
    out
}

#[test]
fn the_readme_is_one_screen_of_start_and_its_links_lead_somewhere() {
    let md = readme();
    let lines = md.lines().count();
    assert!(lines <= 250, "README.md has {lines} lines (at most 250)");
    let first: Vec<&str> = md.lines().skip(3).take(2).collect();
    assert!(
        first[0].starts_with("cargo run --release -- demo"),
        "{first:?}"
    );
    assert!(first[1].starts_with("cargo test --locked"), "{first:?}");
    // Every relative link names a file that exists.
    for part in md.split("](").skip(1) {
        let target = part.split(')').next().unwrap_or("");
        if target.starts_with("http") || target.starts_with('#') {
            continue;
        }
        assert!(
            Path::new(ROOT).join(target).exists(),
            "README.md links to {target}, which does not exist"
        );
    }
}

#[test]
fn every_tern_line_of_the_readme_is_a_command_line_tern_takes() {
    let lines: Vec<String> = shell_lines(&readme())
        .into_iter()
        .filter(|l| l == "tern" || l.starts_with("tern "))
        .collect();
    assert!(lines.len() >= 8, "{lines:?}");
    for line in lines {
        // The words as the shell splits them (the README quotes with "…" only).
        let mut words: Vec<String> = Vec::new();
        for (i, chunk) in line.split('"').enumerate() {
            if i % 2 == 1 {
                words.push(chunk.to_string());
            } else {
                words.extend(chunk.split_whitespace().map(str::to_string));
            }
        }
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_tern"));
        c.args(&words[1..]).arg("--help").env_clear();
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "README line `{line}` is not a command line tern takes: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The walk-through of the README's first screen, in order.
#[test]
fn the_readme_walk_through_runs() {
    let ws = WireWs::new(
        Wire::OpenAi,
        vec![
            // `tern setup` tests the settings with one tiny request.
            text(Wire::OpenAi, "ok"),
            bash(Wire::OpenAi, "c1", "echo fixed > f.txt && echo done"),
            text(Wire::OpenAi, "Fixed it."),
        ],
    );
    std::fs::write(ws.root().join("f.txt"), "broken\n").unwrap();
    let run = |args: &[&str]| {
        let mut c = ws.cmd(args);
        // As a person: the settings come from `tern setup`'s file, not the environment.
        c.env_remove("OPENAI_BASE_URL").env_remove("TERN_MODEL");
        let out = run_within(c, None, LIMIT).output();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let base = ws.fake.openai_base();
    let (code, _, err) = run(&[
        "setup",
        "--provider",
        "openai",
        "--base-url",
        &base,
        "--model",
        "m",
        "--no-api-key",
        "--yes",
    ]);
    assert_eq!(code, Some(0), "setup: {err}");
    let (code, out, err) = run(&["status"]);
    assert_eq!(code, Some(0), "status: {err}");
    assert!(
        out.contains("config.json") || err.contains("config.json"),
        "{out}{err}"
    );
    let (code, out, err) = run(&["exec", "make the failing test pass"]);
    assert_eq!(code, Some(0), "exec: {err}");
    assert!(out.contains("Fixed it."), "{out}");
    assert_eq!(
        std::fs::read_to_string(ws.root().join("f.txt")).unwrap(),
        "fixed\n"
    );
    let (code, out, err) = run(&["diff"]);
    assert_eq!(code, Some(0), "diff: {err}");
    assert!(out.contains("+fixed"), "{out}");
    let (code, _, err) = run(&["checkpoints"]);
    assert_eq!(code, Some(0), "checkpoints: {err}");
    let (code, _, err) = run(&["undo"]);
    assert_eq!(code, Some(0), "undo: {err}");
    assert_eq!(
        std::fs::read_to_string(ws.root().join("f.txt")).unwrap(),
        "broken\n"
    );
    let (code, _, err) = run(&["redo"]);
    assert_eq!(code, Some(0), "redo: {err}");
    assert_eq!(
        std::fs::read_to_string(ws.root().join("f.txt")).unwrap(),
        "fixed\n"
    );
    let (code, _, err) = run(&["plan", "show"]);
    assert_eq!(code, Some(0), "plan show: {err}");
    // With no turn running, steer says so and how to keep it for the next one.
    let (code, _, err) = run(&["steer", "use tabs, not spaces"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--queue"), "{err}");
}
