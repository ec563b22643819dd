//! Issue 45: Agent Skills (SKILL.md folders). A project skill in `.claude/skills/` and a user
//! skill in `~/.codex/skills/` are listed in the system prompt's catalog, the model `cat`s them
//! in the jail, `$name` puts one's instructions in the message, an invalid one is named by
//! `tern skills`; a skill added mid-session never changes an earlier request's prefix, and no
//! skill folders cost no byte. Real binary, fake provider, real bash in the jail.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::support::cli::{LIMIT, WireWs, run_within};
use crate::support::script::{bash, text};
use crate::support::*;

const W: Wire = Wire::OpenAi;

/// Writes skill `name` (its folder named `folder`) under `dir`.
fn put(dir: &Path, folder: &str, name: &str, description: &str, body: &str) -> PathBuf {
    let d = dir.join(folder);
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join("SKILL.md");
    std::fs::write(
        &p,
        format!("---\nname: {name}\ndescription: {description}\n---\n{body}\n"),
    )
    .unwrap();
    p
}

/// A home folder outside the workspace and outside `/tmp` (the jail covers both its own way),
/// as a person's is.
fn home() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("tern-skills-home-")
        .tempdir_in("/var/tmp")
        .unwrap()
}

/// `tern ARGS` in `ws` with `HOME` set to `home`.
fn tern(ws: &WireWs, home: &Path, args: &[&str]) -> Output {
    let mut c = ws.cmd(args);
    c.env("HOME", home);
    run_within(c, None, LIMIT).output()
}

fn ok(ws: &WireWs, home: &Path, args: &[&str]) -> String {
    let out = tern(ws, home, args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The system message of request `i`.
fn system_of(ws: &WireWs, i: usize) -> String {
    let body: Value = ws.fake.requests()[i].json();
    body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_project_skill_and_a_user_skill_work_unchanged() {
    let h = home();
    put(
        &h.path().join(".codex/skills"),
        "deploy",
        "deploy",
        "Ship the service. Use when asked to deploy.",
        "Run ./ship.sh then say SHIPPED-USER.",
    );
    put(
        &h.path().join(".config/tern/skills"),
        "notes",
        "notes",
        "Keep notes. Use for notes.",
        "Write NOTES-OWN.",
    );
    // tern's config folder around the skills stays hidden (the keys live there).
    let secret = h.path().join(".config/tern/keys.txt");
    std::fs::write(&secret, "TOPSECRET-KEY").unwrap();
    // As the catalog writes them (`~/…`, relative to the root).
    let cmd = format!(
        "cat ~/.codex/skills/deploy/SKILL.md ~/.config/tern/skills/notes/SKILL.md .claude/skills/review/SKILL.md; cat {}; ls -a {}",
        secret.display(),
        h.path().join(".config/tern").display()
    );
    let ws = WireWs::new(W, vec![bash(W, "c1", &cmd), text(W, "done")]);
    put(
        &ws.root().join(".claude/skills"),
        "review",
        "review",
        "Review a change. Use when asked for a review.",
        "Read the diff; say REVIEWED-PROJECT.",
    );
    // Invalid: its name is not its folder's.
    put(
        &ws.root().join(".claude/skills"),
        "Broken",
        "broken",
        "x",
        "never listed",
    );
    let out = tern(&ws, h.path(), &["exec", "go"]);
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Broken") && stderr.contains("tern skills"),
        "{stderr}"
    );
    let system = system_of(&ws, 0);
    assert!(
        system.contains(
            "- deploy: Ship the service. Use when asked to deploy. (~/.codex/skills/deploy/SKILL.md)"
        ),
        "{system}"
    );
    assert!(
        system.contains("- review: Review a change. Use when asked for a review. (.claude/skills/review/SKILL.md)"),
        "{system}"
    );
    assert!(
        !system.contains(&h.path().display().to_string()),
        "{system}"
    );
    assert!(system.contains("- notes: Keep notes."), "{system}");
    assert!(!system.contains("never listed") && !system.contains("broken"));
    // The model's `cat` of each SKILL.md works in the jail (user folders shown read-only).
    let reqs = ws.fake.requests();
    let last = String::from_utf8_lossy(&reqs.last().unwrap().body).into_owned();
    for want in ["SHIPPED-USER", "NOTES-OWN", "REVIEWED-PROJECT"] {
        assert!(last.contains(want), "{want} not read in the jail: {last}");
    }
    assert!(
        !last.contains("TOPSECRET"),
        "the config folder showed: {last}"
    );
    assert!(!last.contains("config.json\\n"), "{last}");
    // `tern skills` lists both, names the invalid one and why; `show` prints one.
    let list = ok(&ws, h.path(), &["skills"]);
    assert!(list.contains("deploy") && list.contains("user"), "{list}");
    assert!(
        list.contains("review") && list.contains("project"),
        "{list}"
    );
    assert!(
        list.contains("INVALID") && list.contains("is not its folder's name"),
        "{list}"
    );
    let json: Value = serde_json::from_str(&ok(&ws, h.path(), &["skills", "--json"])).unwrap();
    assert_eq!(json["skills"].as_array().unwrap().len(), 3, "{json}");
    assert_eq!(json["invalid"].as_array().unwrap().len(), 1);
    let shown = ok(&ws, h.path(), &["skills", "show", "review"]);
    assert!(shown.contains("REVIEWED-PROJECT"));
    let status = ok(&ws, h.path(), &["status"]);
    assert!(status.contains("Skills: 3 in the catalog"), "{status}");
    // `$name` puts the skill's instructions into that message.
    ws.push(vec![text(W, "reviewed")]);
    ok(
        &ws,
        h.path(),
        &["exec", "--continue", "$review the last commit"],
    );
    let body = String::from_utf8_lossy(&ws.fake.requests().last().unwrap().body).into_owned();
    assert!(
        body.contains("Read the diff; say REVIEWED-PROJECT.") && body.contains("the last commit"),
        "{body}"
    );
}

#[test]
fn a_skill_added_mid_session_never_moves_the_prefix() {
    let h = home();
    let ws = WireWs::new(W, vec![text(W, "one"), text(W, "two"), text(W, "three")]);
    put(
        &ws.root().join(".agents/skills"),
        "first",
        "first",
        "The first skill.",
        "First.",
    );
    ok(&ws, h.path(), &["exec", "hello"]);
    let pinned = ws.read("system.txt");
    assert!(pinned.contains("- first: The first skill."));
    put(
        &ws.root().join(".agents/skills"),
        "second",
        "second",
        "The second skill.",
        "Second.",
    );
    ok(&ws, h.path(), &["exec", "--continue", "again"]);
    // The second request's system prompt is the first's, byte for byte; system.txt unchanged.
    assert_eq!(system_of(&ws, 1), system_of(&ws, 0));
    assert_eq!(ws.read("system.txt"), pinned);
    let first = ws.fake.requests()[0].body.clone();
    let second = ws.fake.requests()[1].body.clone();
    let user_at = String::from_utf8_lossy(&first)
        .find("\"role\":\"user\"")
        .unwrap();
    assert_eq!(first[..user_at], second[..user_at]);
    // `$second` works at once (read when named), though the catalog waits for a boundary.
    ok(&ws, h.path(), &["exec", "--continue", "$second"]);
    let body = String::from_utf8_lossy(&ws.fake.requests().last().unwrap().body).into_owned();
    assert!(body.contains("Second.") && body.contains("Use the second skill."));
    assert!(!system_of(&ws, 2).contains("- second:"));
}

#[test]
fn no_skill_folders_cost_no_byte() {
    let h = home();
    let bare = WireWs::new(W, vec![text(W, "done")]);
    ok(&bare, h.path(), &["exec", "hello"]);
    // Folders that hold no valid skill: the same bytes.
    let empty = WireWs::new(W, vec![text(W, "done")]);
    std::fs::create_dir_all(empty.root().join(".claude/skills")).unwrap();
    std::fs::create_dir_all(h.path().join(".codex/skills/.system/x")).unwrap();
    ok(&empty, h.path(), &["exec", "hello"]);
    assert_eq!(bare.read("system.txt"), empty.read("system.txt"));
    assert!(!bare.read("system.txt").contains("<skills>"));
    assert_eq!(system_of(&bare, 0), system_of(&empty, 0));
    let none = ok(&bare, h.path(), &["skills"]);
    assert!(none.starts_with("no skills here."), "{none}");
}

/// The REPL: `/name` of a skill runs a turn with its instructions (tern's own commands keep
/// their names; an unknown one says where the names are).
#[test]
fn a_skill_named_with_a_slash_in_the_repl() {
    let h = home();
    let ws = WireWs::new(W, vec![text(W, "checked")]);
    put(
        &ws.root().join(".tern/skills"),
        "check",
        "check",
        "Check the build.",
        "Run the checks; say CHECK-BODY.",
    );
    let mut c = ws.cmd(&["chat"]);
    c.env("HOME", h.path());
    let out = run_within(c, Some("/check the parser\n/nope\n/quit\n"), LIMIT).output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown command /nope; /help and `tern skills` list them"),
        "{err}"
    );
    let body = String::from_utf8_lossy(&ws.fake.requests()[0].body).into_owned();
    assert!(
        body.contains("CHECK-BODY") && body.contains("the parser"),
        "{body}"
    );
}

/// The catalog reaches a skill added mid-session at the next deliberate boundary: PlanConfirm
/// (the compaction rewrites the prefix anyway), not before.
#[test]
fn a_plan_confirm_refreshes_the_catalog() {
    use crate::support::script::call;
    let h = home();
    let ws = WireWs::new(W, vec![text(W, "one")]);
    put(
        &ws.root().join(".agents/skills"),
        "first",
        "first",
        "The first skill.",
        "First.",
    );
    ok(&ws, h.path(), &["exec", "hello"]);
    put(
        &ws.root().join(".agents/skills"),
        "later",
        "later",
        "Added mid-session.",
        "Later.",
    );
    ws.push(vec![
        bash(
            W,
            "c0",
            "printf '1. step\\n' > \"$PLAN_DRAFT_FILE\" && echo wrote",
        ),
        call(W, "c1", "plan_confirm", serde_json::json!({})),
        text(W, "Summary: drafted."),
        text(W, "done"),
    ]);
    ok(&ws, h.path(), &["exec", "--continue", "plan it"]);
    let reqs = ws.fake.requests();
    // Before the confirm: the pinned catalog; after it: the new skill too.
    assert!(!system_of(&ws, 2).contains("- later:"));
    let last = system_of(&ws, reqs.len() - 1);
    assert!(
        last.contains("- later: Added mid-session.") && last.contains("- first:"),
        "{last}"
    );
    assert!(ws.read("system.txt").contains("- later:"));
}
