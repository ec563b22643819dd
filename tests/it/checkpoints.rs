//! Checkpoints and forks (issue 20): two turns change files through bash; undo, redo, rewind and
//! fork put files and history back; a big file is left out and said so; the budget prunes;
//! the verbs are refused while a turn runs. Real tern, real bash, real git, the fake provider.

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::Path;

use serde_json::Value;

use crate::support::Wire;
use crate::support::cli::WireWs;
use crate::support::files::jsonl;
use crate::support::script::{bash, text};

const W: Wire = Wire::OpenAi;

/// What a path of the workspace holds: a file's bytes, or a link's target.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    File(Vec<u8>),
    Link(String),
}

/// Every file and link of the workspace but `.tern/` and `.home/` (folders by their files).
fn tree(root: &Path) -> BTreeMap<String, Node> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Node>) {
        for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
            let p = e.path();
            let rel = p
                .strip_prefix(root)
                .expect("under root")
                .to_string_lossy()
                .into_owned();
            if rel == ".tern" || rel == ".home" {
                continue;
            }
            let m = std::fs::symlink_metadata(&p).expect("lstat");
            if m.file_type().is_symlink() {
                let t = std::fs::read_link(&p).expect("readlink");
                out.insert(rel, Node::Link(t.to_string_lossy().into_owned()));
            } else if m.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(rel, Node::File(std::fs::read(&p).expect("read")));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// The workspace before turn 1: a file to change, one to delete, a link, an ignored file.
fn seed(root: &Path) {
    std::fs::write(root.join("a.txt"), "zero\n").unwrap();
    std::fs::write(root.join("c.txt"), "gone soon\n").unwrap();
    std::fs::write(root.join(".gitignore"), "*.log\n").unwrap();
    std::fs::write(root.join("ign.log"), "i0\n").unwrap();
    symlink("a.txt", root.join("link")).unwrap();
}

const TURN1: &str = "echo one > a.txt; echo made > b.txt; rm c.txt; echo i1 > ign.log; \
    rm link; ln -s b.txt link; mkdir -p d && echo deep > d/e.txt; chmod +x b.txt";
const TURN2: &str = "echo two > a.txt; echo changed > b.txt; echo new > n.txt; echo i2 > ign.log; \
    rm link; rm -r d; ln -s /etc/passwd out";

/// A workspace where two turns ran: returns it and the trees before turn 1, after turn 1 and
/// after turn 2 (ignored file left out of the comparison).
fn two_turns() -> (WireWs, [BTreeMap<String, Node>; 3]) {
    let ws = WireWs::new(
        W,
        vec![
            bash(W, "c1", TURN1),
            text(W, "done1"),
            bash(W, "c2", TURN2),
            text(W, "done2"),
        ],
    );
    seed(ws.root());
    let s0 = tree(ws.root());
    ws.ok(&["exec", "first prompt"]);
    let s1 = tree(ws.root());
    ws.ok(&["exec", "--continue", "second prompt"]);
    let s2 = tree(ws.root());
    assert_ne!(s0, s1);
    assert_ne!(s1, s2);
    (ws, [s0, s1, s2])
}

/// The trees without the ignored file (undo leaves it as it is).
fn tracked(t: &BTreeMap<String, Node>) -> BTreeMap<String, Node> {
    t.iter()
        .filter(|(k, _)| !k.ends_with(".log"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn undo_and_redo_restore_each_turn_exactly() {
    let (ws, [s0, s1, s2]) = two_turns();
    let ign = || std::fs::read_to_string(ws.root().join("ign.log")).unwrap();
    assert_eq!(ign(), "i2\n");

    let out = ws.ok(&["undo"]);
    assert!(stdout(&out).contains("before turn 2"), "{}", stdout(&out));
    assert_eq!(
        tracked(&tree(ws.root())),
        tracked(&s1),
        "undo: the state after turn 1"
    );
    assert_eq!(ign(), "i2\n", "an ignored file is untouched");
    // b.txt's mode came back too.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(ws.root().join("b.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o111,
        0o111,
        "b.txt is executable again, as turn 1 left it"
    );

    ws.ok(&["undo"]);
    assert_eq!(
        tracked(&tree(ws.root())),
        tracked(&s0),
        "a second undo: before turn 1"
    );
    let err = ws.refused(&["undo"]);
    assert!(err.contains("nothing to undo"), "{err}");

    ws.ok(&["redo"]);
    assert_eq!(
        tracked(&tree(ws.root())),
        tracked(&s1),
        "redo: after turn 1"
    );
    ws.ok(&["redo"]);
    assert_eq!(
        tracked(&tree(ws.root())),
        tracked(&s2),
        "redo again: after turn 2"
    );
    let err = ws.refused(&["redo"]);
    assert!(err.contains("nothing to redo"), "{err}");

    // Undo 2 goes back over both turns at once, and redo returns in one step.
    ws.ok(&["undo", "2"]);
    assert_eq!(tracked(&tree(ws.root())), tracked(&s0));
    ws.ok(&["redo"]);
    assert_eq!(tracked(&tree(ws.root())), tracked(&s2));

    // The list and the diff.
    let list = stdout(&ws.ok(&["checkpoints"]));
    assert!(list.contains("turn"), "{list}");
    let rows: Vec<&str> = list
        .lines()
        .filter(|l| l.trim_start().starts_with(['1', '2']))
        .collect();
    assert_eq!(rows.len(), 2, "{list}");
    let diff = stdout(&ws.ok(&["diff", "1"]));
    assert!(diff.contains("+one") && diff.contains("-zero"), "{diff}");
    assert!(diff.contains("c.txt"), "{diff}");
    assert!(
        !diff.contains("ign.log"),
        "ignored files are not shown: {diff}"
    );
    let diff2 = stdout(&ws.ok(&["diff"]));
    assert!(diff2.contains("+two") && diff2.contains("n.txt"), "{diff2}");

    // The person's state is in .tern/checkpoints; the workspace has no .git of tern's.
    assert!(!ws.root().join(".git").exists());
    assert!(ws.root().join(".tern/checkpoints/git/HEAD").is_file());
}

#[test]
fn undo_in_a_git_repository_leaves_its_git_alone() {
    let ws = WireWs::new(
        W,
        vec![
            bash(W, "c1", "echo changed > a.txt; echo new > n.txt"),
            text(W, "ok"),
        ],
    );
    let root = ws.root();
    std::fs::write(root.join("a.txt"), "orig\n").unwrap();
    let git = |args: &[&str]| crate::support::files::person_git(root, args);
    git(&["init", "-q"]);
    std::fs::write(root.join(".gitignore"), ".tern/\n.home/\n").unwrap();
    git(&["add", "a.txt", ".gitignore"]);
    git(&["commit", "-qm", "base"]);
    let snap = |p: &str| std::fs::read(root.join(".git").join(p)).unwrap();
    let (index, head) = (snap("index"), git(&["rev-parse", "HEAD"]));
    ws.ok(&["exec", "change it"]);
    ws.ok(&["undo"]);
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "orig\n"
    );
    assert!(!root.join("n.txt").exists());
    assert_eq!(snap("index"), index, "the person's index is untouched");
    assert_eq!(git(&["rev-parse", "HEAD"]), head);
    assert_eq!(
        git(&["status", "--porcelain"]),
        "",
        "the work tree is as committed"
    );
}

#[test]
fn rewind_restores_files_and_history() {
    let (ws, [_, s1, _]) = two_turns();
    let original = ws.ws.current_id();
    let before = ws.conversation();
    let out = ws.ok(&["rewind", "1"]);
    assert!(stdout(&out).contains("rewound"), "{}", stdout(&out));
    assert_eq!(tracked(&tree(ws.root())), tracked(&s1));
    let fork = ws.ws.current_id();
    assert_ne!(fork, original, "current moved to the fork");
    let conv = ws.conversation();
    let second = before
        .iter()
        .position(|m| m["content"].as_str() == Some("second prompt"))
        .expect("turn 2's prompt");
    assert_eq!(
        conv,
        before[..second].to_vec(),
        "the history up to the end of turn 1"
    );
    let meta = ws.json("meta.json");
    assert_eq!(meta["forked_from"]["session"], original.as_str());
    assert_eq!(meta["forked_from"]["turn"], 1);
    // The rewind is an undo: redo puts the files of turn 2 back.
    ws.ok(&["redo"]);
    assert!(ws.root().join("n.txt").exists());
}

#[test]
fn fork_at_a_turn_repeats_the_original_bytes() {
    let (ws, _) = two_turns();
    let original = ws.ws.current_id();
    let orig_system = ws.read("system.txt");
    let raws = ws.raw_bodies();
    assert_eq!(raws.len(), 4);
    ws.ok(&["fork", "--at", "1"]);
    let fork = ws.ws.current_id();
    assert_ne!(fork, original);
    assert_eq!(ws.read("system.txt"), orig_system, "the same pinned bytes");
    let conv = ws.conversation();
    let all = jsonl(&ws.ws.session_dir(&original).join("conversation.jsonl"));
    assert!(conv.iter().any(|m| m["content"] == "first prompt"));
    assert!(
        !conv.iter().any(|m| m["content"] == "second prompt"),
        "no turn 2"
    );
    assert!(all.starts_with(&conv));
    let turns = jsonl(&ws.path("turns.jsonl"));
    assert_eq!(turns.len(), 1, "the fork carries turn 1's line");

    ws.push(vec![text(W, "forked answer")]);
    ws.ok(&["exec", "--continue", "third prompt"]);
    let raws = ws.raw_bodies();
    let forked = &raws[4];
    let turn2 = &raws[2];
    let start = turn2
        .find("{\"role\":\"user\",\"content\":\"second prompt")
        .expect("turn 2's prompt in its first request");
    assert_eq!(
        &forked.as_bytes()[..start],
        &turn2.as_bytes()[..start],
        "the fork's first request repeats the original's bytes up to the end of turn 1"
    );
    assert!(forked[start..].starts_with("{\"role\":\"user\",\"content\":\"third prompt"));
    // The fork numbers its turns on from the original's.
    let turns = jsonl(&ws.path("turns.jsonl"));
    assert_eq!(turns.last().unwrap()["turn"], 2);
}

#[test]
fn fork_default_takes_everything_and_bad_turns_are_usage_errors() {
    let (ws, _) = two_turns();
    let original = ws.ws.current_id();
    let all = ws.conversation();
    let out = ws.tern(&["fork", "--at", "7"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(ws.ws.current_id(), original, "nothing changed");
    ws.ok(&["fork"]);
    assert_ne!(ws.ws.current_id(), original);
    assert_eq!(ws.conversation(), all);
    let out = ws.tern(&["diff", "9"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

fn warnings(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "warning")
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect()
}

/// (The snapshot store's case: `--no-layer`, commands write the workspace directly.)
#[test]
fn a_big_file_is_left_out_and_said_so() {
    let ws = WireWs::new(
        W,
        vec![
            bash(W, "c1", "echo small > s.txt; echo more >> big.bin"),
            text(W, "ok"),
        ],
    );
    let big = ws.root().join("big.bin");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(20_000_000)
        .unwrap();
    ws.ok(&["exec", "--no-layer", "go"]);
    let w = warnings(&ws.events());
    assert!(
        w.iter()
            .any(|m| m.contains("big.bin") && m.contains("size limit")),
        "{w:?}"
    );
    let size = std::fs::metadata(&big).unwrap().len();
    assert_eq!(size, 20_000_005);
    ws.ok(&["undo"]);
    assert!(
        !ws.root().join("s.txt").exists(),
        "the small file was undone"
    );
    assert_eq!(
        std::fs::metadata(&big).unwrap().len(),
        size,
        "the big file is left as it is"
    );
    let objects = dir_size(&ws.root().join(".tern/checkpoints/git/objects"));
    assert!(
        objects < 1_000_000,
        "the store holds no copy of it ({objects} bytes)"
    );
}

/// Issue 34: a file over the size limit is named once per session: not again at the next turn,
/// nor by the next process that resumes the session, however it grows (its size is in the
/// sentence, so it was said again every turn it grew and once per process).
/// (The snapshot store's case: `--no-layer`, commands write the workspace directly.)
#[test]
fn a_big_file_is_named_once_per_session() {
    let ws = WireWs::new(
        W,
        vec![
            bash(W, "c1", "echo more >> big.bin"),
            text(W, "ok"),
            bash(W, "c2", "echo more >> big.bin"),
            text(W, "ok"),
            bash(W, "c3", "echo more >> big.bin"),
            text(W, "ok"),
        ],
    );
    std::fs::File::create(ws.root().join("big.bin"))
        .unwrap()
        .set_len(20_000_000)
        .unwrap();
    ws.ok(&["exec", "--no-layer", "one"]);
    ws.ok(&["exec", "--no-layer", "--continue", "two"]);
    ws.ok(&["exec", "--no-layer", "--continue", "three"]);
    let said: Vec<String> = warnings(&ws.events())
        .into_iter()
        .filter(|m| m.contains("big.bin"))
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert_eq!(
        jsonl(&ws.path("checkpoint-notes.jsonl")),
        [serde_json::json!({"over_limit": "big.bin"})]
    );
}

fn dir_size(p: &Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(p).unwrap().flatten() {
        let m = e.metadata().unwrap();
        n += if m.is_dir() {
            dir_size(&e.path())
        } else {
            m.len()
        };
    }
    n
}

/// (The snapshot store's case: `--no-layer`, commands write the workspace directly.)
#[test]
fn the_budget_prunes_the_oldest_checkpoints() {
    let mut script = Vec::new();
    for i in 0..4 {
        script.push(bash(
            W,
            &format!("c{i}"),
            "head -c 200000 /dev/urandom > f.bin",
        ));
        script.push(text(W, "ok"));
    }
    let ws = WireWs::new(W, script);
    let run = |args: &[&str]| {
        let mut c = ws.cmd(args);
        c.env("TERN_CHECKPOINT_BUDGET", "500000");
        let o = crate::support::cli::output(c);
        assert_eq!(o.status.code(), Some(0), "{o:?}");
        o
    };
    run(&["exec", "--no-layer", "t1"]);
    for t in ["t2", "t3", "t4"] {
        run(&["exec", "--no-layer", "--continue", t]);
    }
    let w = warnings(&ws.events());
    assert!(
        w.iter()
            .any(|m| m.contains("over its budget") && m.contains("oldest")),
        "{w:?}"
    );
    // Each checkpoint holds one 200 kB file of its own: the newest two fit in the budget.
    let size = dir_size(&ws.root().join(".tern/checkpoints/git/objects"));
    assert!(size <= 500_000, "the store is within its budget: {size}");
    let list = stdout(&run(&["checkpoints"]));
    let rows = list
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .count();
    assert!(rows < 4, "some checkpoints were pruned:\n{list}");
}

#[test]
fn a_turn_without_a_command_records_nothing() {
    let ws = WireWs::new(W, vec![text(W, "just words")]);
    std::fs::write(ws.root().join("a.txt"), "x").unwrap();
    ws.ok(&["exec", "talk"]);
    assert!(
        !ws.root().join(".tern/checkpoints").exists(),
        "no store is made for a turn that ran no command"
    );
    assert_eq!(jsonl(&ws.path("turns.jsonl")).len(), 1);
    let err = ws.refused(&["undo"]);
    assert!(err.contains("nothing to undo"), "{err}");
}

#[test]
fn the_verbs_are_refused_while_a_turn_runs() {
    let ws = WireWs::new(
        W,
        vec![
            bash(W, "c1", "echo x > a.txt"),
            text(W, "one"),
            bash(W, "c2", "sleep 4"),
            text(W, "two"),
        ],
    );
    ws.ok(&["exec", "first"]);
    let mut child = ws.spawn(&["exec", "--continue", "second"]);
    // Wait until the turn holds the session.
    let meta = ws.path("meta.json");
    let t0 = std::time::Instant::now();
    while !std::fs::read_to_string(&meta)
        .unwrap_or_default()
        .contains("\"running\"")
    {
        assert!(t0.elapsed().as_secs() < 30, "the turn never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for verb in [&["undo"][..], &["redo"], &["rewind", "1"], &["fork"]] {
        let out = ws.tern(verb);
        assert_eq!(out.status.code(), Some(1), "{verb:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("refused"), "{verb:?}: {err}");
    }
    assert!(child.wait().unwrap().success());
    assert_eq!(
        std::fs::read_to_string(ws.root().join("a.txt")).unwrap(),
        "x\n"
    );
}

/// The store is tern's (item 5). Where no jail makes the state folder read-only (`--no-jail`:
/// Landlock alone), the guard puts back what steers tern's git and the newest snapshot's ref,
/// and the command's result says so.
#[test]
fn a_command_cannot_change_what_steers_the_store() {
    let evil = "printf '[core]\\n\\thooksPath = /tmp/evil\\n[filter \"x\"]\\n\\tclean = touch /tmp/pwned\\n' >> .tern/checkpoints/git/config; \
        echo '* filter=x' > .tern/checkpoints/git/info/attributes; \
        echo 0000000000000000000000000000000000000000 > .tern/checkpoints/git/refs/tern/latest";
    let ws = WireWs::new(
        W,
        vec![
            bash(W, "c1", "echo a > a.txt"),
            text(W, "one"),
            bash(W, "c2", evil),
            text(W, "two"),
        ],
    );
    ws.ok(&["exec", "--no-jail", "first"]);
    let git = ws.root().join(".tern/checkpoints/git");
    let read = |p: &str| std::fs::read(git.join(p)).unwrap();
    ws.ok(&["exec", "--no-jail", "--continue", "second"]);
    let (config, attrs, latest) = (
        read("config"),
        read("info/attributes"),
        read("refs/tern/latest"),
    );
    assert!(
        !String::from_utf8_lossy(&config).contains("evil"),
        "config put back"
    );
    assert!(
        !String::from_utf8_lossy(&attrs).contains("filter=x"),
        "attributes put back"
    );
    // The refs are every session's to rewrite (a session beside this one checkpoints too), so
    // the guard leaves them (issue 33); the store reads a `latest` that names no snapshot as
    // none, and works on.
    let _ = latest;
    let conv = ws.conversation();
    let result = conv
        .iter()
        .find(|m| m["tool_call_id"] == "c2")
        .map(|m| m.to_string())
        .unwrap_or_default();
    assert!(result.contains("Error"), "the command is told: {result}");
    // And the store still works: the next turn checkpoints, undo puts it back.
    ws.push(vec![bash(W, "c3", "echo b > a.txt"), text(W, "three")]);
    ws.ok(&["exec", "--no-jail", "--continue", "third"]);
    ws.ok(&["undo"]);
    assert_eq!(
        std::fs::read_to_string(ws.root().join("a.txt")).unwrap(),
        "a\n"
    );
    let fsck = std::process::Command::new("git")
        .args(["--git-dir", git.to_str().unwrap(), "fsck", "--no-dangling"])
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "{}{}",
        String::from_utf8_lossy(&fsck.stdout),
        String::from_utf8_lossy(&fsck.stderr)
    );
}

/// Item 5 in full: in the jail (the default: the state folder is read-only to commands) every
/// part of the store, refs and objects, is out of the commands' reach. (With `--no-jail` only
/// the files of the test above are put back.)
/// (The snapshot store's case: `--no-layer`, commands write the workspace directly.)
#[test]
fn a_command_cannot_change_the_store() {
    let ws = WireWs::new(
        W,
        vec![
            bash(W, "c1", "echo a > a.txt"),
            text(W, "one"),
            bash(
                W,
                "c2",
                "rm -rf .tern/checkpoints/git/refs/tern/s .tern/checkpoints/git/objects/*",
            ),
            text(W, "two"),
        ],
    );
    ws.ok(&["exec", "--no-layer", "first"]);
    let store = ws.root().join(".tern/checkpoints");
    let before = crate::support::files::snapshot(&store);
    ws.ok(&["exec", "--no-layer", "--continue", "second"]);
    let after = crate::support::files::snapshot(&store);
    let gone: Vec<&String> = before.keys().filter(|k| !after.contains_key(*k)).collect();
    assert!(gone.is_empty(), "removed by a command: {gone:?}");
    let c2 = ws
        .conversation()
        .iter()
        .find(|m| m["tool_call_id"] == "c2")
        .map(|m| m.to_string())
        .unwrap_or_default();
    assert!(c2.contains("Read-only") || c2.contains("not run"), "{c2}");
    ws.ok(&["undo"]);
    assert!(!ws.root().join("a.txt").exists(), "the store still undoes");
}

/// Found by a new user: a file the person makes after the turn ended is theirs, not the model's:
/// `tern undo` keeps it (and says so) instead of removing it with the turn's own new files.
/// (The snapshot store's case: `--no-layer`, commands write the workspace directly.)
#[test]
fn undo_keeps_a_file_made_after_the_turn() {
    let w = Wire::OpenAi;
    let ws = WireWs::new(
        w,
        vec![
            bash(w, "c1", "echo v1 > a.txt && echo model > m.txt"),
            text(w, "done"),
        ],
    );
    std::fs::write(ws.root().join("a.txt"), "v0\n").unwrap();
    ws.ok(&["exec", "--no-layer", "change a"]);
    // A moment later the person writes their own file.
    std::thread::sleep(std::time::Duration::from_millis(50));
    std::fs::write(ws.root().join("mine.txt"), "my work\n").unwrap();
    let out = ws.ok(&["undo"]);
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        std::fs::read_to_string(ws.root().join("a.txt")).unwrap(),
        "v0\n"
    );
    assert!(
        !ws.root().join("m.txt").exists(),
        "the model's new file goes: {said}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.root().join("mine.txt")).unwrap(),
        "my work\n",
        "{said}"
    );
    assert!(
        said.contains("Kept 1 file") && said.contains("mine.txt"),
        "{said}"
    );
}

/// Found by a new user: a folder replaced by a file (and a file by a folder, as `foo.rs` →
/// `foo/mod.rs`) is recorded, and undo brings the old shape back.
#[test]
fn a_folder_that_becomes_a_file_and_back_is_recorded() {
    let w = Wire::OpenAi;
    let ws = WireWs::new(
        w,
        vec![
            bash(
                w,
                "c1",
                "rm -rf d && echo now-a-file > d && rm f && mkdir f && echo in > f/g",
            ),
            text(w, "done"),
        ],
    );
    std::fs::create_dir_all(ws.root().join("d")).unwrap();
    std::fs::write(ws.root().join("d/x"), "x\n").unwrap();
    std::fs::write(ws.root().join("f"), "file\n").unwrap();
    ws.ok(&["exec", "reshape"]);
    ws.ok(&["checkpoints"]);
    ws.ok(&["undo"]);
    assert_eq!(
        std::fs::read_to_string(ws.root().join("d/x")).unwrap(),
        "x\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.root().join("f")).unwrap(),
        "file\n"
    );
    ws.ok(&["redo"]);
    assert_eq!(
        std::fs::read_to_string(ws.root().join("d")).unwrap(),
        "now-a-file\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.root().join("f/g")).unwrap(),
        "in\n"
    );
}

/// `tern checkpoints` shows what each turn changed in bytes (files written at their new size,
/// files deleted at their old one), the last row against the workspace now: never "0 B" for a
/// turn that wrote 5 kB.
#[test]
fn checkpoints_show_the_bytes_each_turn_changed() {
    let ws = WireWs::new(
        W,
        vec![
            bash(W, "c1", "head -c 5000 /dev/zero > big.bin; rm old.txt"),
            text(W, "done1"),
            bash(W, "c2", "head -c 2500 /dev/zero > b2.bin"),
            text(W, "done2"),
        ],
    );
    std::fs::write(ws.root().join("old.txt"), vec![b'x'; 1000]).unwrap();
    ws.ok(&["exec", "first"]);
    let row = |list: &str, turn: &str| -> String {
        list.lines()
            .find(|l| l.split_whitespace().next() == Some(turn))
            .unwrap_or_else(|| panic!("no row {turn}: {list}"))
            .to_string()
    };
    // One turn: its row is counted against the workspace now.
    let list = stdout(&ws.ok(&["checkpoints"]));
    assert!(row(&list, "1").ends_with("6.0 kB"), "{list}");
    ws.ok(&["exec", "--continue", "second"]);
    let list = stdout(&ws.ok(&["checkpoints"]));
    assert!(row(&list, "1").ends_with("6.0 kB"), "{list}");
    assert!(row(&list, "2").ends_with("2.5 kB"), "{list}");
}

/// `tern undo` in a git repository restores the files and never writes git's index (the
/// person's staged work stays staged); a path the turn staged (`git add`) and undo restored is
/// named, with the commands to see and unstage it.
#[test]
fn undo_names_paths_the_turn_staged_and_keeps_the_persons_index() {
    let ws = WireWs::new(
        W,
        vec![
            bash(
                W,
                "c1",
                "echo changed > a.txt && git -c safe.directory='*' add a.txt && echo staged",
            ),
            text(W, "ok"),
        ],
    );
    let root = ws.root();
    let git = |args: &[&str]| crate::support::files::person_git(root, args);
    std::fs::write(root.join("a.txt"), "orig\n").unwrap();
    git(&["init", "-q"]);
    std::fs::write(root.join(".gitignore"), ".tern/\n.home/\n").unwrap();
    git(&["add", "a.txt", ".gitignore"]);
    git(&["commit", "-qm", "base"]);
    // The person's own staged work, which the turn does not touch.
    std::fs::write(root.join("mine.txt"), "my staged work\n").unwrap();
    git(&["add", "mine.txt"]);
    ws.ok(&["exec", "change it"]);
    let staged = git(&["diff", "--cached", "--name-only"]);
    if !staged.contains("a.txt") {
        crate::support::skipped(
            "undo_names_paths_the_turn_staged_and_keeps_the_persons_index",
            "the sandbox kept the command from writing git's index here",
            false,
        );
        return;
    }
    let index = std::fs::read(root.join(".git/index")).unwrap();
    let out = stdout(&ws.ok(&["undo"]));
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "orig\n"
    );
    assert!(
        out.contains("index was not touched") && out.contains("a.txt"),
        "{out}"
    );
    assert!(out.contains("git restore --staged -- a.txt"), "{out}");
    assert!(!out.contains("mine.txt"), "{out}");
    assert_eq!(
        std::fs::read(root.join(".git/index")).unwrap(),
        index,
        "undo wrote git's index"
    );
    assert!(git(&["diff", "--cached", "--name-only"]).contains("mine.txt"));
}

/// A workspace where one turn ran `echo model >> a.txt` (a.txt was "orig"), then the person
/// appended to a.txt and made c.txt: the new user's report.
fn persons_edits_after_the_turn() -> WireWs {
    let ws = WireWs::new(
        W,
        vec![bash(W, "c1", "echo model >> a.txt"), text(W, "edited")],
    );
    std::fs::write(ws.root().join("a.txt"), "orig\n").unwrap();
    ws.ok(&["exec", "edit"]);
    // A moment later (file times are compared with the turn's end) the person works.
    std::thread::sleep(std::time::Duration::from_millis(50));
    let mut a = std::fs::OpenOptions::new()
        .append(true)
        .open(ws.root().join("a.txt"))
        .unwrap();
    std::io::Write::write_all(&mut a, b"USER WORK\n").unwrap();
    std::fs::write(ws.root().join("c.txt"), "mine\n").unwrap();
    ws
}

/// Found by a new user: undo silently overwrote a file the person edited after the turn, and
/// the promised redo was refused because of the file undo itself kept. Now the undo is refused
/// (nothing changed, the file named, `--force` said); a forced undo saves the edits first, and
/// redo right after it returns the workspace byte for byte.
#[test]
fn undo_never_loses_edits_made_after_the_turn_and_redo_returns_them() {
    let ws = persons_edits_after_the_turn();
    let before = tree(ws.root());
    assert_eq!(
        std::fs::read_to_string(ws.root().join("a.txt")).unwrap(),
        "orig\nmodel\nUSER WORK\n"
    );

    let err = ws.refused(&["undo"]);
    assert!(
        err.contains("refused") && err.contains("a.txt") && err.contains("tern undo --force"),
        "{err}"
    );
    assert_eq!(tree(ws.root()), before, "a refused undo changes nothing");

    let out = ws.ok(&["undo", "--force"]);
    let said = stdout(&out);
    assert_eq!(
        std::fs::read_to_string(ws.root().join("a.txt")).unwrap(),
        "orig\n",
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.root().join("c.txt")).unwrap(),
        "mine\n",
        "the person's new file is kept: {said}"
    );
    assert!(
        said.contains("Overwrote 1 file") && said.contains("a.txt"),
        "{said}"
    );

    // Nothing changed since the undo: redo works, and the kept file does not block it.
    let out = ws.ok(&["redo"]);
    assert_eq!(
        tree(ws.root()),
        before,
        "redo: byte-identical, the person's edits included: {}",
        stdout(&out)
    );
}

/// Found by a new user: the turn turned file `A` into a folder, the person then added
/// `A/mine`; undo (which puts file `A` back) said "Kept A/mine" and removed it. Now it is
/// refused like an overwrite, and `--force` saves it first so `tern redo` brings it back.
#[test]
fn undo_never_removes_a_file_it_says_it_keeps_across_a_file_folder_change() {
    let ws = WireWs::new(
        W,
        vec![
            bash(W, "c1", "rm A && mkdir A && echo m > A/m"),
            text(W, "ok"),
        ],
    );
    std::fs::write(ws.root().join("A"), "fileA\n").unwrap();
    ws.ok(&["exec", "go"]);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(ws.root().join("A/mine"), "mine\n").unwrap();
    let before = tree(ws.root());
    let err = ws.refused(&["undo"]);
    assert!(err.contains("A/mine") && err.contains("--force"), "{err}");
    assert_eq!(tree(ws.root()), before, "a refused undo changes nothing");
    let out = ws.ok(&["undo", "--force"]);
    assert_eq!(
        std::fs::read_to_string(ws.root().join("A")).unwrap(),
        "fileA\n",
        "{}",
        stdout(&out)
    );
    assert!(!stdout(&out).contains("Kept"), "{}", stdout(&out));
    ws.ok(&["redo"]);
    assert_eq!(
        tree(ws.root()),
        before,
        "redo brings the person's file back"
    );
}

/// Found by a new user: git stores only 644 or 755, so undo made a private `.env` (600)
/// readable by everyone. A file undo or redo rewrites keeps the person's permission bits.
#[test]
fn undo_and_redo_keep_a_private_file_private() {
    use std::os::unix::fs::PermissionsExt;
    let ws = WireWs::new(W, vec![bash(W, "c1", "echo S=2 > .env"), text(W, "ok")]);
    let env = ws.root().join(".env");
    std::fs::write(&env, "S=1\n").unwrap();
    std::fs::set_permissions(&env, std::fs::Permissions::from_mode(0o600)).unwrap();
    ws.ok(&["exec", "go"]);
    let mode = || std::fs::metadata(&env).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(), 0o600, "the model's write kept the mode");
    ws.ok(&["undo"]);
    assert_eq!(std::fs::read_to_string(&env).unwrap(), "S=1\n");
    assert_eq!(mode(), 0o600, "undo widened a private file");
    ws.ok(&["redo"]);
    assert_eq!(std::fs::read_to_string(&env).unwrap(), "S=2\n");
    assert_eq!(mode(), 0o600, "redo widened a private file");
}

/// Issue 34: undo puts back the permission bits a turn changed, which git does not keep: a
/// file made private (a `chmod` alone), one opened to all (`640` made `777`), and a private key
/// replaced by a link come back exactly as they were; redo goes forth again; `tern diff` names
/// a change of bits.
#[test]
fn undo_puts_back_the_permission_bits_a_turn_changed() {
    use std::os::unix::fs::PermissionsExt;
    let cmd = "chmod 600 notes.txt; chmod 777 shared.txt; rm key.pem; ln -s notes.txt key.pem";
    let ws = WireWs::new(W, vec![bash(W, "c1", cmd), text(W, "ok")]);
    let root = ws.root();
    let set = |name: &str, body: &str, bits: u32| {
        std::fs::write(root.join(name), body).unwrap();
        std::fs::set_permissions(root.join(name), std::fs::Permissions::from_mode(bits)).unwrap();
    };
    set("notes.txt", "notes\n", 0o644);
    set("shared.txt", "shared\n", 0o640);
    set("key.pem", "KEY\n", 0o600);
    let bits = |name: &str| {
        std::fs::symlink_metadata(root.join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    let is_link = |name: &str| {
        std::fs::symlink_metadata(root.join(name))
            .unwrap()
            .file_type()
            .is_symlink()
    };
    ws.ok(&["exec", "go"]);
    assert_eq!((bits("notes.txt"), bits("shared.txt")), (0o600, 0o777));
    assert!(is_link("key.pem"));
    let diff = stdout(&ws.ok(&["diff"]));
    assert!(
        diff.contains("permissions of notes.txt: 0644 -> 0600"),
        "{diff}"
    );
    let out = stdout(&ws.ok(&["undo"]));
    assert!(out.contains("with their permission bits put back"), "{out}");
    assert_eq!(bits("notes.txt"), 0o644, "{out}");
    assert_eq!(bits("shared.txt"), 0o640, "{out}");
    assert!(!is_link("key.pem"));
    assert_eq!(
        std::fs::read_to_string(root.join("key.pem")).unwrap(),
        "KEY\n"
    );
    assert_eq!(
        bits("key.pem"),
        0o600,
        "a private key came back readable: {out}"
    );
    ws.ok(&["redo"]);
    assert_eq!((bits("notes.txt"), bits("shared.txt")), (0o600, 0o777));
    assert!(is_link("key.pem"));
}

/// Issue 34: a turn that only ran `chmod` changed something: `tern checkpoints` counts the file,
/// and undo puts its bits back (it said "nothing to undo" and left them).
#[test]
fn a_turn_that_only_ran_chmod_is_undone() {
    use std::os::unix::fs::PermissionsExt;
    let ws = WireWs::new(W, vec![bash(W, "c1", "chmod 600 notes.txt"), text(W, "ok")]);
    let notes = ws.root().join("notes.txt");
    std::fs::write(&notes, "notes\n").unwrap();
    std::fs::set_permissions(&notes, std::fs::Permissions::from_mode(0o644)).unwrap();
    let bits = || std::fs::metadata(&notes).unwrap().permissions().mode() & 0o777;
    ws.ok(&["exec", "go"]);
    assert_eq!(bits(), 0o600);
    let rows = stdout(&ws.ok(&["checkpoints"]));
    let row = rows.lines().nth(1).unwrap_or_default();
    assert_eq!(
        row.split_whitespace().nth(2),
        Some("1"),
        "the chmod turn changed one file: {rows}"
    );
    let out = stdout(&ws.ok(&["undo"]));
    assert!(
        out.contains("1 with their permission bits put back"),
        "{out}"
    );
    assert!(out.contains("P notes.txt"), "{out}");
    assert_eq!(bits(), 0o644);
}

/// Found by a new user: a turn that replaced folder `d` by a symbolic link made git refuse
/// `d/f` ("beyond a symbolic link") at every later checkpoint: undo, checkpoints and diff
/// failed for good. The link is recorded, undo puts the folder back.
#[test]
fn a_folder_replaced_by_a_link_does_not_wedge_checkpoints() {
    let ws = WireWs::new(
        W,
        vec![
            // A link inside the workspace (the door holds back one that leads out).
            bash(W, "c1", "rm -rf d && mkdir other && ln -s other d"),
            text(W, "ok"),
            bash(W, "c2", "echo later > l.txt"),
            text(W, "ok"),
        ],
    );
    std::fs::create_dir(ws.root().join("d")).unwrap();
    std::fs::write(ws.root().join("d/f"), "x\n").unwrap();
    ws.ok(&["exec", "go"]);
    let out = ws.ok(&["exec", "--continue", "again"]);
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("no checkpoint"),
        "{out:?}"
    );
    ws.ok(&["checkpoints"]);
    ws.ok(&["diff"]);
    ws.ok(&["undo", "2"]);
    assert_eq!(
        std::fs::read_to_string(ws.root().join("d/f")).unwrap(),
        "x\n",
        "undo puts the folder back"
    );
    assert!(!ws.root().join("l.txt").exists());
}

/// The file an undo kept (made after the turn) never blocks the redo right after it, and a
/// second undo in the chain keeps it too.
/// (The snapshot store's case: `--no-layer`, commands write the workspace directly.)
#[test]
fn a_kept_file_never_blocks_redo_nor_a_chained_undo() {
    let ws = WireWs::new(
        W,
        vec![
            bash(W, "c1", "echo one > a.txt"),
            text(W, "done1"),
            bash(W, "c2", "echo two > a.txt && echo model > m.txt"),
            text(W, "done2"),
        ],
    );
    std::fs::write(ws.root().join("a.txt"), "zero\n").unwrap();
    ws.ok(&["exec", "--no-layer", "first"]);
    ws.ok(&["exec", "--no-layer", "--continue", "second"]);
    std::thread::sleep(std::time::Duration::from_millis(50));
    std::fs::write(ws.root().join("mine.txt"), "my work\n").unwrap();
    let before = tree(ws.root());

    let said = stdout(&ws.ok(&["undo"]));
    assert!(
        said.contains("Kept 1 file") && said.contains("mine.txt"),
        "{said}"
    );
    ws.ok(&["redo"]);
    assert_eq!(
        tree(ws.root()),
        before,
        "redo after an undo that kept a file"
    );

    ws.ok(&["undo"]);
    ws.ok(&["undo"]);
    assert_eq!(
        std::fs::read_to_string(ws.root().join("a.txt")).unwrap(),
        "zero\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.root().join("mine.txt")).unwrap(),
        "my work\n",
        "the second undo of the chain keeps it too"
    );
    ws.ok(&["redo"]);
    ws.ok(&["redo"]);
    assert_eq!(
        tree(ws.root()),
        before,
        "two redos: back where the chain began"
    );
}

/// Found by a new user: an undo killed midway (here at the fault point before git's
/// `read-tree`, with the `index.lock` a killed git leaves) was finished silently by the next
/// `tern redo`, which then failed on the stale lock. Now the redo says the undo was finished,
/// the stale lock is removed under the store's lock, and the redo runs: the workspace is as
/// before the undo.
/// (The snapshot store's case: `--no-layer`, commands write the workspace directly.)
#[test]
fn a_killed_undo_is_finished_and_said_and_a_stale_index_lock_does_not_stop_redo() {
    let make = || {
        let ws = WireWs::new(
            W,
            vec![
                bash(
                    W,
                    "c1",
                    "for i in $(seq 1 40); do echo model$i > f$i.txt; done; echo model >> a.txt",
                ),
                text(W, "done"),
            ],
        );
        std::fs::write(ws.root().join("a.txt"), "orig\n").unwrap();
        ws.ok(&["exec", "--no-layer", "many files"]);
        ws
    };
    // A dry run on a twin workspace finds the fault point's number.
    let dry = make();
    let log = dry.root().join("fault.log");
    let mut cmd = dry.cmd(&["undo"]);
    cmd.env("TERN_FAULT_LOG", &log);
    assert_eq!(crate::support::cli::output(cmd).status.code(), Some(0));
    let at = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .find(|l| l.contains(" git read-tree "))
        .and_then(|l| l.split(' ').next()?.parse::<u64>().ok())
        .expect("the undo passes the read-tree point");

    let ws = make();
    let before = tree(ws.root());
    let mut cmd = ws.cmd(&["undo"]);
    cmd.env("TERN_FAULT_AT", at.to_string());
    let out = crate::support::cli::output(cmd);
    assert_eq!(out.status.code(), None, "killed at point {at}");
    let git = ws.root().join(".tern/checkpoints/git");
    assert!(
        git.join("refs/tern/pending").is_file(),
        "the undo was in flight"
    );
    // What a git killed while writing the index leaves.
    std::fs::write(git.join("index.lock"), "half").unwrap();

    let out = ws.ok(&["redo"]);
    let said = stdout(&out);
    assert!(
        said.contains("cut short") && said.contains("finished"),
        "{said}"
    );
    assert!(!git.join("index.lock").exists());
    assert!(!git.join("refs/tern/pending").exists());
    assert_eq!(
        tree(ws.root()),
        before,
        "the redo returned to before the undo: {said}"
    );
}

/// Issue 34: bits the person changed after the turn ended are theirs, as their edits are: an
/// undo that would put other bits back refuses and names the file; `--force` puts them back,
/// and redo returns the person's.
#[test]
fn undo_never_overwrites_bits_the_person_changed_after_the_turn() {
    use std::os::unix::fs::PermissionsExt;
    let ws = WireWs::new(W, vec![bash(W, "c1", "chmod 600 notes.txt"), text(W, "ok")]);
    let notes = ws.root().join("notes.txt");
    std::fs::write(&notes, "notes\n").unwrap();
    std::fs::set_permissions(&notes, std::fs::Permissions::from_mode(0o644)).unwrap();
    let bits = || std::fs::metadata(&notes).unwrap().permissions().mode() & 0o777;
    ws.ok(&["exec", "go"]);
    // The person's own chmod, after the turn ended (change times in a later instant).
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::set_permissions(&notes, std::fs::Permissions::from_mode(0o640)).unwrap();
    let err = ws.refused(&["undo"]);
    assert!(
        err.contains("notes.txt") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(bits(), 0o640, "a refused undo changes nothing");
    ws.ok(&["undo", "--force"]);
    assert_eq!(bits(), 0o644);
    ws.ok(&["redo"]);
    assert_eq!(bits(), 0o640, "redo brings the person's bits back");
}

/// Issue 34: killed at every point of the store's writes while the turn after a `chmod` turn
/// records it, and while the `chmod` turn is undone, the next `tern undo` ends with the bits as
/// they were before the turn
/// (a record of bits is written before the commit that names it, and a cut-short restore is
/// finished with its record).
/// (The snapshot store's case: `--no-layer`, commands write the workspace directly.)
#[test]
fn a_kill_at_any_point_of_a_chmod_turn_or_its_undo_loses_no_bits() {
    use std::os::unix::fs::PermissionsExt;
    let make = || {
        let ws = WireWs::new(
            W,
            vec![
                bash(W, "c1", "chmod 600 notes.txt; chmod 755 run.txt"),
                text(W, "done"),
                bash(W, "c2", "true"),
                text(W, "done"),
            ],
        );
        for (name, bits) in [("notes.txt", 0o644), ("run.txt", 0o640)] {
            std::fs::write(ws.root().join(name), "x\n").unwrap();
            std::fs::set_permissions(ws.root().join(name), std::fs::Permissions::from_mode(bits))
                .unwrap();
        }
        ws
    };
    let bits = |ws: &WireWs| {
        ["notes.txt", "run.txt"].map(|n| {
            std::fs::metadata(ws.root().join(n))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        })
    };
    let points = |ws: &WireWs, args: &[&str]| {
        // In the state folder: a file of the workspace would be the person's, to undo.
        let log = ws.root().join(".tern/fault.log");
        let _ = std::fs::remove_file(&log);
        let mut cmd = ws.cmd(args);
        cmd.env("TERN_FAULT_LOG", &log);
        let out = crate::support::cli::output(cmd);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines = std::fs::read_to_string(&log).unwrap();
        let found: Vec<u64> = lines
            .lines()
            .filter(|l| l.contains("/checkpoints/"))
            .filter_map(|l| l.split(' ').next()?.parse().ok())
            .collect();
        assert!(!found.is_empty(), "{lines}");
        found
    };
    let next = ["exec", "--no-layer", "--continue", "again"];
    let dry = make();
    dry.ok(&["exec", "--no-layer", "go"]);
    let in_turn = points(&dry, &next);
    let in_undo = points(&dry, &["undo"]);
    assert_eq!(bits(&dry), [0o644, 0o640]);
    for (phase, list) in [("next turn", in_turn), ("undo", in_undo)] {
        for k in list {
            let ws = make();
            ws.ok(&["exec", "--no-layer", "go"]);
            assert_eq!(bits(&ws), [0o600, 0o755]);
            let args: &[&str] = if phase == "undo" {
                ws.ok(&next);
                &["undo"]
            } else {
                &next
            };
            let mut cmd = ws.cmd(args);
            cmd.env("TERN_FAULT_AT", k.to_string());
            // Killed there, or (the record of the index is rewritten only when it changed, and
            // which files are read again depends on the second they changed in) that run had
            // fewer points and ended well.
            let code = crate::support::cli::output(cmd).status.code();
            assert!(
                matches!(code, None | Some(0)),
                "{phase}: point {k}: exit {code:?}"
            );
            // Whatever turn 2 recorded, undoing turn 1 (the newest that changed anything, or
            // the rest of a cut-short undo) puts the bits back.
            let out = crate::support::cli::output(ws.cmd(&["undo"]));
            assert_eq!(
                bits(&ws),
                [0o644, 0o640],
                "{phase}: killed at point {k}; then undo said {}{}",
                stdout(&out),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// Issue 30, item 1: the store is made the way a session is (built under `.tmp-git-*` and
/// renamed into place). Killed at every point of the first checkpoint's store creation, the
/// next start leaves no temp in the store, and the store, when there is one, is whole (its
/// `info/attributes` written), so the next command's checkpoint works.
/// (The snapshot store's case: `--no-layer`, commands write the workspace directly.)
#[test]
fn a_killed_store_creation_leaves_no_temp_and_no_half_store() {
    let make = || {
        WireWs::new(
            W,
            vec![
                bash(W, "c1", "echo one > a.txt"),
                // A killed run has asked once: its resume runs this command.
                bash(W, "c2", "echo two >> a.txt"),
                text(W, "done"),
            ],
        )
    };
    let dry = make();
    let log = dry.root().join("fault.log");
    let mut cmd = dry.cmd(&["exec", "--no-layer", "write"]);
    cmd.env("TERN_FAULT_LOG", &log);
    assert_eq!(crate::support::cli::output(cmd).status.code(), Some(0));
    let lines = std::fs::read_to_string(&log).unwrap();
    let at = |l: &str| l.split(' ').next().and_then(|n| n.parse::<u64>().ok());
    let points: Vec<u64> = lines
        .lines()
        .filter(|l| l.contains("/checkpoints/"))
        // Up to the rename that commits the store (after it, the store is whole).
        .take_while(|l| !(l.contains(" renamed ") && l.ends_with("/checkpoints/git")))
        .filter_map(at)
        .collect();
    assert!(
        points.len() >= 4,
        "git init, the two info files and the rename are points: {lines}"
    );
    for k in points {
        let ws = make();
        let mut cmd = ws.cmd(&["exec", "--no-layer", "write"]);
        cmd.env("TERN_FAULT_AT", k.to_string());
        assert_eq!(
            crate::support::cli::output(cmd).status.code(),
            None,
            "killed at point {k}"
        );
        // The next start, which runs a command (so checkpoints again).
        ws.ok(&["exec", "--no-layer", "--continue", "go on"]);
        let store = ws.root().join(".tern/checkpoints");
        for d in [store.clone(), store.join("git/info")] {
            let left: Vec<_> = std::fs::read_dir(&d)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".tmp-"))
                .collect();
            assert!(left.is_empty(), "point {k}: {} holds {left:?}", d.display());
        }
        assert!(
            std::fs::read_to_string(store.join("git/info/attributes"))
                .unwrap_or_default()
                .contains("-filter"),
            "point {k}: the store is whole"
        );
    }
}

// The door's record is the checkpoint (issue 42, part 2): where commands run on a layer (the
// default in workspace-write here), the door records each change as it applies it; no snapshot
// is taken before a turn's first command, and undo, redo, diff and rewind read the record.

/// Whether the snapshot store holds a checkpoint of any turn of a session.
fn snapshot_refs(root: &Path) -> Vec<String> {
    let dir = root.join(".tern/checkpoints/git/refs/tern/s");
    let mut out = Vec::new();
    for s in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        for t in std::fs::read_dir(s.path()).into_iter().flatten().flatten() {
            out.push(t.path().display().to_string());
        }
    }
    out
}

#[test]
fn through_the_door_no_snapshot_is_taken_and_undo_touches_only_the_turns_paths() {
    let ws = WireWs::new(
        W,
        vec![
            bash(
                W,
                "c1",
                "echo one > a.txt; rm c.txt; mkdir -p d && echo deep > d/e.txt; ln -s a.txt l; chmod 600 p.txt",
            ),
            text(W, "done1"),
            bash(W, "c2", "echo two > a.txt; echo new > n.txt"),
            text(W, "done2"),
        ],
    );
    let root = ws.root();
    std::fs::write(root.join("a.txt"), "zero\n").unwrap();
    std::fs::write(root.join("c.txt"), "gone soon\n").unwrap();
    std::fs::write(root.join("keep.txt"), "the person's\n").unwrap();
    std::fs::write(root.join("p.txt"), "bits\n").unwrap();
    let s0 = tree(root);
    ws.ok(&["exec", "first"]);
    let s1 = tree(root);
    // Between the turns the person edits a file the model never touched.
    std::fs::write(root.join("keep.txt"), "mine now\n").unwrap();
    ws.ok(&["exec", "--continue", "second"]);
    let s2 = tree(root);
    assert!(
        snapshot_refs(root).is_empty(),
        "no snapshot before a turn's first command: {:?}",
        snapshot_refs(root)
    );
    let record = ws.read("door-record.jsonl");
    assert!(
        record.contains("\"kind\":\"change\"") && record.contains("\"turn\":2"),
        "{record}"
    );

    let diff = stdout(&ws.ok(&["diff", "1"]));
    for want in [
        "-zero",
        "+one",
        "c.txt",
        "d/e.txt",
        "+deep",
        "permissions of p.txt: 0644 -> 0600",
    ] {
        assert!(diff.contains(want), "{want} in {diff}");
    }
    assert!(!diff.contains("keep.txt"), "{diff}");
    let list = stdout(&ws.ok(&["checkpoints"]));
    let rows = list
        .lines()
        .filter(|l| l.trim_start().starts_with(['1', '2']))
        .count();
    assert_eq!(rows, 2, "{list}");

    let said = stdout(&ws.ok(&["undo", "2"]));
    let mut want = s0.clone();
    want.insert("keep.txt".into(), Node::File(b"mine now\n".to_vec()));
    assert_eq!(tree(root), want, "{said}");
    assert!(
        !said.contains("keep.txt"),
        "never the undo's business: {said}"
    );
    use std::os::unix::fs::PermissionsExt;
    let bits = |p: &str| {
        std::fs::metadata(root.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(bits("p.txt"), 0o644, "{said}");
    ws.ok(&["redo"]);
    assert_eq!(tree(root), s2);
    assert_eq!(bits("p.txt"), 0o600);
    ws.ok(&["undo"]);
    let mut want = s1.clone();
    want.insert("keep.txt".into(), Node::File(b"mine now\n".to_vec()));
    assert_eq!(tree(root), want, "one turn back");
}

#[test]
fn through_the_door_a_persons_later_edit_refuses_the_undo_and_force_keeps_it_for_redo() {
    let ws = WireWs::new(
        W,
        vec![
            bash(W, "c1", "echo one > a.txt; echo made > m.txt"),
            text(W, "done"),
        ],
    );
    let root = ws.root();
    std::fs::write(root.join("a.txt"), "zero\n").unwrap();
    ws.ok(&["exec", "go"]);
    std::fs::write(root.join("a.txt"), "my edit\n").unwrap();
    std::fs::write(root.join("m.txt"), "mine too\n").unwrap();
    let before = tree(root);
    let err = ws.refused(&["undo"]);
    assert!(err.contains("a.txt") && err.contains("--force"), "{err}");
    assert_eq!(tree(root), before, "a refused undo changes nothing");
    let said = stdout(&ws.ok(&["undo", "--force"]));
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "zero\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("m.txt")).unwrap(),
        "mine too\n",
        "a file the undo would remove that the person changed is kept: {said}"
    );
    assert!(
        said.contains("Kept 1 file") && said.contains("m.txt"),
        "{said}"
    );
    ws.ok(&["redo"]);
    assert_eq!(tree(root), before, "redo brings the person's edit back");
}

#[test]
fn through_the_door_a_big_file_is_undone_exactly_without_a_copy() {
    let ws = WireWs::new(
        W,
        vec![
            bash(W, "c1", "head -c 12000000 /dev/zero | tr '\\0' b > big.bin"),
            text(W, "done"),
        ],
    );
    let root = ws.root();
    let old: Vec<u8> = (0..12_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(root.join("big.bin"), &old).unwrap();
    let out = ws.ok(&["exec", "rewrite it"]);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("left out"),
        "no size limit: the replaced file is linked, not copied"
    );
    assert_eq!(
        std::fs::read(root.join("big.bin")).unwrap().len(),
        12_000_000
    );
    let objects = ws.path("door-record");
    let kept: u64 = std::fs::read_dir(&objects)
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert_eq!(kept, 12_000_000, "the old bytes, once");
    ws.ok(&["undo"]);
    assert!(std::fs::read(root.join("big.bin")).unwrap() == old);
}

/// Killed at every point of the door's record writes while a turn's changes are applied, and
/// at every point of an undo's: nothing is lost — undoing every turn gives the workspace as it
/// was before the first, and a cut-short undo is finished by the next verb (then redo returns).
#[test]
fn a_kill_at_any_point_of_the_door_s_record_loses_nothing() {
    let cmd1 = "echo one > a.txt; rm c.txt; mkdir d && echo e > d/e.txt; chmod 600 b.txt";
    let make = || {
        let ws = WireWs::new(
            W,
            vec![
                bash(W, "c1", cmd1),
                text(W, "done"),
                bash(W, "c2", "true"),
                text(W, "done"),
            ],
        );
        std::fs::write(ws.root().join("a.txt"), "zero\n").unwrap();
        std::fs::write(ws.root().join("b.txt"), "b\n").unwrap();
        std::fs::write(ws.root().join("c.txt"), "c\n").unwrap();
        ws
    };
    let bits = |ws: &WireWs| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(ws.root().join("b.txt"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    let points = |ws: &WireWs, args: &[&str]| {
        let log = ws.root().join(".tern/fault.log");
        let _ = std::fs::remove_file(&log);
        let mut cmd = ws.cmd(args);
        cmd.env("TERN_FAULT_LOG", &log);
        let out = crate::support::cli::output(cmd);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines = std::fs::read_to_string(&log).unwrap();
        let found: Vec<(u64, String)> = lines
            .lines()
            .filter(|l| l.contains("door-record"))
            .filter_map(|l| Some((l.split(' ').next()?.parse().ok()?, l.to_string())))
            .collect();
        assert!(!found.is_empty(), "{lines}");
        found
    };
    let dry = make();
    let s0 = tree(dry.root());
    let in_turn = points(&dry, &["exec", "go"]);
    let s1 = tree(dry.root());
    let in_undo = points(&dry, &["undo"]);
    assert_eq!(tree(dry.root()), s0);
    for (k, point) in in_turn {
        let ws = make();
        let mut cmd = ws.cmd(&["exec", "go"]);
        cmd.env("TERN_FAULT_AT", k.to_string());
        let code = crate::support::cli::output(cmd).status.code();
        assert!(
            matches!(code, None | Some(0)),
            "turn: point {k}: exit {code:?}"
        );
        // The next runs finish the killed door's pass (its layer) in a turn of their own (the
        // first may take the killed turn's last answer, and run no command).
        ws.ok(&["exec", "--continue", "again"]);
        ws.ok(&["exec", "--continue", "again"]);
        assert_eq!(
            tree(ws.root()),
            s1,
            "turn: killed at {point}, then recovered"
        );
        // Undo every turn with a change, one at a time, until nothing is left to undo.
        let mut said = String::new();
        for _ in 0..5 {
            let out = crate::support::cli::output(ws.cmd(&["undo"]));
            said.push_str(&stdout(&out));
            said.push_str(&String::from_utf8_lossy(&out.stderr));
            if out.status.code() != Some(0) {
                break;
            }
        }
        assert_eq!(
            (tree(ws.root()), bits(&ws)),
            (s0.clone(), 0o644),
            "turn: killed at {point}; then undo said {said}"
        );
    }
    for (k, point) in in_undo {
        let ws = make();
        ws.ok(&["exec", "go"]);
        let mut cmd = ws.cmd(&["undo"]);
        cmd.env("TERN_FAULT_AT", k.to_string());
        let code = crate::support::cli::output(cmd).status.code();
        assert!(
            matches!(code, None | Some(0)),
            "undo: point {k}: exit {code:?}"
        );
        // The next verb finishes what was cut short (and says so); nothing more to undo.
        let out = crate::support::cli::output(ws.cmd(&["undo"]));
        assert_eq!(
            (tree(ws.root()), bits(&ws)),
            (s0.clone(), 0o644),
            "undo: killed at {point}; then undo said {}{}",
            stdout(&out),
            String::from_utf8_lossy(&out.stderr)
        );
        ws.ok(&["redo"]);
        assert_eq!(tree(ws.root()), s1, "undo: killed at {point}, redo");
    }
}

#[test]
fn through_the_door_the_record_keeps_to_its_budget_by_pruning_the_oldest_turns() {
    let rewrite = |id: &str| bash(W, id, "head -c 300000 /dev/urandom > big.bin");
    let ws = WireWs::new(
        W,
        vec![
            rewrite("c1"),
            text(W, "1"),
            rewrite("c2"),
            text(W, "2"),
            rewrite("c3"),
            text(W, "3"),
            rewrite("c4"),
            text(W, "4"),
        ],
    );
    std::fs::write(ws.root().join("big.bin"), vec![7u8; 300_000]).unwrap();
    let run = |args: &[&str]| {
        let mut c = ws.cmd(args);
        c.env("TERN_CHECKPOINT_BUDGET", "700000");
        crate::support::cli::output(c)
    };
    let mut said = String::new();
    for (i, t) in ["one", "two", "three", "four"].iter().enumerate() {
        let args: Vec<&str> = if i == 0 {
            vec!["exec", t]
        } else {
            vec!["exec", "--continue", t]
        };
        let out = run(&args);
        assert_eq!(out.status.code(), Some(0));
        said.push_str(&String::from_utf8_lossy(&out.stderr));
        said.push_str(&stdout(&out));
    }
    let objects = ws.path("door-record");
    let kept: u64 = std::fs::read_dir(&objects)
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(kept <= 700_000 + 300_000, "kept {kept} bytes");
    assert!(said.contains("can no longer be undone"), "{said}");
    assert!(ws.read("door-record.jsonl").contains("\"kind\":\"pruned\""));
    // The newest turns still undo; the pruned ones are said to be out of reach.
    ws.ok(&["undo"]);
    let err = ws.refused(&["undo", "4"]);
    assert!(err.contains("can be undone"), "{err}");
}

/// The door's record damaged (a line that is not JSON, a change of a kind this build does not
/// know, a kept entry gone, a torn last line): the verbs answer with a clear line or still work
/// on what is whole, never a panic.
#[test]
fn a_damaged_door_record_is_read_around_and_said() {
    let ws = WireWs::new(
        W,
        vec![
            bash(W, "c1", "echo one > a.txt; echo two > b.txt"),
            text(W, "done"),
        ],
    );
    std::fs::write(ws.root().join("a.txt"), "zero\n").unwrap();
    std::fs::write(ws.root().join("b.txt"), "bee\n").unwrap();
    ws.ok(&["exec", "go"]);
    let log = ws.path("door-record.jsonl");
    let mut text = std::fs::read_to_string(&log).unwrap();
    text.push_str("not json at all\n{\"kind\":\"teleport\",\"turn\":1}\n");
    std::fs::write(&log, format!("{text}{{\"kind\":\"change\",\"tu")).unwrap();
    // The kept bytes of b.txt are gone.
    let objects = ws.path("door-record");
    let lines: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let b_obj = lines
        .iter()
        .find(|l| l["path"] == "b.txt")
        .and_then(|l| l["before"]["file"]["obj"].as_str())
        .unwrap()
        .to_string();
    std::fs::remove_file(objects.join(b_obj)).unwrap();
    for verb in [&["checkpoints"][..], &["diff"], &["diff", "1"]] {
        let out = ws.tern(verb);
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{verb:?}: {out:?}"
        );
    }
    let out = ws.tern(&["undo"]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("b.txt") && said.contains("not kept"),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.root().join("a.txt")).unwrap(),
        "one\n",
        "a refused undo changes nothing"
    );
    let out = ws.tern(&["undo"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "still refused, never half done: {out:?}"
    );
}
