//! The person's instruction files as Codex CLI reads them (issue 22): the global
//! `~/.config/tern/AGENTS.md`, then every `AGENTS.md` from the workspace root down to the folder
//! tern runs in, pinned at session start; `AGENTS.override.md` replaces the one beside it; a link
//! out of the workspace is refused.

use std::path::Path;

use crate::support::Wire;
use crate::support::body::system_of;
use crate::support::cli::WireWs;
use crate::support::script::text;

fn write(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// `tern ARGS` run from `dir`; requires exit 0 and returns stdout.
fn ok_in(ws: &WireWs, dir: &Path, args: &[&str]) -> String {
    let out = crate::support::cli::output({
        let mut c = ws.cmd(args);
        c.current_dir(dir);
        c
    });
    assert!(
        out.status.success(),
        "tern {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn global_root_and_subfolder_files_in_order_from_a_subfolder_start() {
    let wire = Wire::OpenAi;
    let ws = WireWs::new(
        wire,
        vec![text(wire, "a"), text(wire, "b"), text(wire, "c")],
    );
    let root = ws.root().to_path_buf();
    let sub = root.join("pkg/app");
    write(
        &ws.ws.home().join(".config/tern/AGENTS.md"),
        "Global: be brief.",
    );
    write(&root.join("AGENTS.md"), "Root: use tabs.");
    write(&root.join("pkg/app/AGENTS.md"), "App: run make test.");
    write(&root.join("other/AGENTS.md"), "Other: not on the way.");
    ok_in(&ws, &sub, &["exec", "hi"]);
    let sys = system_of(&ws.bodies()[0]);
    let at = |s: &str| {
        sys.find(s)
            .unwrap_or_else(|| panic!("{s} missing from:\n{sys}"))
    };
    let (g, r, a) = (
        at(
            "<project_instructions source=\"~/.config/tern/AGENTS.md\">\nGlobal: be brief.\n</project_instructions>",
        ),
        at("<project_instructions source=\"AGENTS.md\">\nRoot: use tabs.\n</project_instructions>"),
        at(
            "<project_instructions source=\"pkg/app/AGENTS.md\">\nApp: run make test.\n</project_instructions>",
        ),
    );
    assert!(g < r && r < a, "global, root, subfolder");
    assert!(!sys.contains("Other:"));
    assert!(!sys.contains(&*root.to_string_lossy()), "no absolute path");
    assert_eq!(ws.read("system.txt"), sys, "pinned as sent");

    // Pinned: an edit waits for a new session, and `tern status` says so.
    let status = ok_in(&ws, &sub, &["status"]);
    assert!(
        status.contains("Instructions: ~/.config/tern/AGENTS.md, AGENTS.md, pkg/app/AGENTS.md (read at session start"),
        "{status}"
    );
    write(&root.join("pkg/app/AGENTS.md"), "App: run make check.");
    ok_in(&ws, &sub, &["exec", "--continue", "again"]);
    assert_eq!(system_of(&ws.bodies()[1]), sys, "the prefix did not move");
    let status = ok_in(&ws, &sub, &["status"]);
    assert!(
        status.contains("changed since: pkg/app/AGENTS.md (a new session reads the new text)"),
        "{status}"
    );
    let json: serde_json::Value =
        serde_json::from_str(ok_in(&ws, &sub, &["status", "--json"]).trim()).unwrap();
    assert_eq!(json["instructions"][2]["source"], "pkg/app/AGENTS.md");
    assert_eq!(json["instructions"][2]["changed"], true);
    assert_eq!(json["instructions"][0]["changed"], serde_json::Value::Null);
    // A new session reads the new text.
    ok_in(&ws, &sub, &["exec", "fresh"]);
    assert!(system_of(&ws.bodies()[2]).contains("App: run make check."));
}

#[test]
fn an_override_replaces_and_a_link_out_is_refused() {
    let wire = Wire::OpenAi;
    let ws = WireWs::new(wire, vec![text(wire, "a")]);
    let root = ws.root().to_path_buf();
    write(&root.join("AGENTS.md"), "Root: old.");
    write(&root.join("AGENTS.override.md"), "Root: override.");
    let outside = tempfile::tempdir().unwrap();
    write(&outside.path().join("secret.md"), "TOP SECRET");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.md"), root.join("sub/AGENTS.md"))
        .unwrap();
    ok_in(&ws, &root.join("sub"), &["exec", "hi"]);
    let sys = system_of(&ws.bodies()[0]);
    assert!(sys.contains("<project_instructions source=\"AGENTS.override.md\">\nRoot: override."));
    assert!(!sys.contains("Root: old."));
    assert!(
        !sys.contains("TOP SECRET"),
        "a link out of the workspace is refused"
    );
}

#[test]
fn without_instruction_files_the_prompt_is_what_it_was() {
    let wire = Wire::OpenAi;
    let ws = WireWs::new(wire, vec![text(wire, "a")]);
    std::fs::create_dir_all(ws.root().join("x/y")).unwrap();
    ok_in(&ws, &ws.root().join("x/y"), &["exec", "hi"]);
    let sys = system_of(&ws.bodies()[0]);
    assert!(!sys.contains("project_instructions"));
    assert_eq!(
        sys,
        tern::runtime::system::base(
            std::path::Path::new("/nonexistent"),
            &tern::runtime::system::sandbox_lines(Default::default(), false, &[])
        ),
        "not a byte more than the bundled prompt and the sandbox line"
    );
    let status = ok_in(&ws, &ws.root().join("x/y"), &["status"]);
    assert!(!status.contains("Instructions:"));
}

/// Issue 34: Codex's global `AGENTS.override.md` replaces the global file, a folder with only
/// `CLAUDE.md` gives it (a Claude Code project works the first time), and `tern status` names
/// the files read.
#[test]
fn the_global_override_and_a_claude_md_are_read_and_named_by_status() {
    let wire = Wire::OpenAi;
    let ws = WireWs::new(wire, vec![text(wire, "a")]);
    let root = ws.root().to_path_buf();
    let config = ws.ws.home().join(".config/tern");
    write(&config.join("AGENTS.md"), "Global: not this one.");
    write(
        &config.join("AGENTS.override.md"),
        "Global override: be terse.",
    );
    write(&root.join("CLAUDE.md"), "Claude: run cargo test.");
    ok_in(&ws, &root, &["exec", "hi"]);
    let sys = system_of(&ws.bodies()[0]);
    assert!(
        sys.contains("<project_instructions source=\"~/.config/tern/AGENTS.override.md\">\nGlobal override: be terse."),
        "{sys}"
    );
    assert!(!sys.contains("Global: not this one."), "{sys}");
    assert!(
        sys.contains("<project_instructions source=\"CLAUDE.md\">\nClaude: run cargo test."),
        "{sys}"
    );
    let status = ok_in(&ws, &root, &["status"]);
    assert!(
        status.contains(
            "Instructions: ~/.config/tern/AGENTS.override.md, CLAUDE.md (read at session start"
        ),
        "{status}"
    );
}
