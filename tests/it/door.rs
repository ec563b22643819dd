//! The door (issue 42, DESIGN §10): commands write a layer, and tern applies its changes to the
//! workspace by rules. The attacks of the last lists as data — (setup, the model's commands,
//! what the person runs afterwards, what must not happen) — run with the real binary, the fake
//! provider, real bash and git, this kernel's overlayfs; as root here, and again as a plain user
//! by `.ci/run`. A marker outside the workspace (the jail cannot write there) says whether a
//! planted program ran as the person.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::body::tool_result;
use crate::support::cli::{Ws, ok_no_stdin};
use crate::support::files::jsonl;
use crate::support::script::bash;
use crate::support::{FakeServer, Wire, openai_text};

/// The model's `commands` in one `tern exec` with `args`; each call's tool result text.
fn run(ws: &Ws, args: &[&str], commands: &[String]) -> Vec<String> {
    let mut script: Vec<_> = commands
        .iter()
        .enumerate()
        .map(|(i, c)| bash(Wire::OpenAi, &format!("c{i}"), c))
        .collect();
    script.push(openai_text("done"));
    let fake = FakeServer::start(script);
    let mut cmd = ws.tern(&fake);
    cmd.arg("exec").args(args).arg("go");
    ok_no_stdin(cmd);
    let conv: Vec<Value> = jsonl(&ws.current_dir().join("conversation.jsonl"));
    (0..commands.len())
        .map(|i| {
            tool_result(&conv, &format!("c{i}"))["content"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

/// git as the person runs it: no system config, an identity, local file transport.
fn git(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .args(["-c", "protocol.file.allow=always"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "p")
        .env("GIT_AUTHOR_EMAIL", "p@p")
        .env("GIT_COMMITTER_NAME", "p")
        .env("GIT_COMMITTER_EMAIL", "p@p")
        .output()
        .expect("git")
}

/// A repository at `dir` with one commit.
fn repo(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q"]);
    std::fs::write(dir.join("r.txt"), "r\n").unwrap();
    git(dir, &["add", "r.txt"]);
    git(dir, &["commit", "-qm", "r"]);
}

/// One attack: how the workspace is before, what the model runs (`{M}` is the marker's path),
/// what the person runs afterwards (git in these folders: `status`, then `commit`), and what
/// else must hold.
struct Attack {
    name: &'static str,
    setup: fn(&Path),
    model: &'static [&'static str],
    /// Folders (relative) where the person then runs `git status` and a commit.
    person_git: &'static [&'static str],
    check: fn(&Path, &[String]) -> Result<(), String>,
}

fn nothing(_: &Path) {}

fn fine(_: &Path, _: &[String]) -> Result<(), String> {
    Ok(())
}

fn plant(gitdir: &str) -> String {
    format!(
        "printf '[core]\\n\\tfsmonitor = touch {{M}}; false\\n' >> {gitdir}/config; \
         mkdir -p {gitdir}/hooks; printf '#!/bin/sh\\ntouch {{M}}\\n' > {gitdir}/hooks/pre-commit; \
         chmod +x {gitdir}/hooks/pre-commit; cp {gitdir}/hooks/pre-commit {gitdir}/hooks/post-checkout; echo planted"
    )
}

fn attacks() -> Vec<Attack> {
    vec![
        Attack {
            name: "a renamed nested repository, and a new .git in its place",
            setup: |ws| repo(&ws.join("sub")),
            model: &[
                "mv sub sub-old && mkdir -p sub && cd sub && git init -q && git config core.fsmonitor 'touch {M}; false' && echo x > f && echo made",
            ],
            person_git: &["sub", "."],
            check: |ws, _| {
                let ok = ws.join("sub/.git/HEAD").exists() && !ws.join("sub-old/.git").exists();
                ok.then_some(())
                    .ok_or("the person's sub/.git was replaced or moved".into())
            },
        },
        Attack {
            name: "nested repositories at any depth and under skipped folders",
            setup: |ws| {
                for d in [
                    "vendor/v",
                    "node_modules/n",
                    "build/b",
                    "dist/d",
                    "target/t",
                    ".cache/c",
                    "a/b/c/d/deep",
                ] {
                    repo(&ws.join(d));
                }
            },
            model: &[
                "for d in vendor/v node_modules/n build/b dist/d target/t .cache/c a/b/c/d/deep; do printf '[core]\\n\\tfsmonitor = touch {M}; false\\n' >> $d/.git/config; printf '#!/bin/sh\\ntouch {M}\\n' > $d/.git/hooks/pre-commit; chmod +x $d/.git/hooks/pre-commit; done; echo planted",
            ],
            person_git: &[
                "vendor/v",
                "node_modules/n",
                "build/b",
                "dist/d",
                "target/t",
                ".cache/c",
                "a/b/c/d/deep",
            ],
            check: fine,
        },
        Attack {
            name: "the workspace's own git: config, hooks, commondir, info",
            setup: |ws| repo(ws),
            model: &[
                "PLANT_ROOT",
                "echo ../evil > .git/commondir; mkdir -p .git/info && echo '* filter=x' > .git/info/attributes; echo done",
            ],
            person_git: &["."],
            check: |ws, _| {
                (!ws.join(".git/commondir").exists())
                    .then_some(())
                    .ok_or("commondir applied".into())
            },
        },
        Attack {
            name: "a link in git's logs leading out",
            setup: |ws| repo(ws),
            model: &["rm -f .git/logs/HEAD && ln -s {OUT} .git/logs/HEAD && echo linked"],
            person_git: &["."],
            check: |ws, _| {
                let m = std::fs::symlink_metadata(ws.join(".git/logs/HEAD"));
                (!m.is_ok_and(|m| m.file_type().is_symlink()))
                    .then_some(())
                    .ok_or("the link reached .git/logs".into())
            },
        },
        Attack {
            name: "a new repository and a bare one made by the model",
            setup: nothing,
            model: &[
                "git init -q mine && git -C mine config core.fsmonitor 'touch {M}; false' && git init -q --bare bare.git && printf '#!/bin/sh\\ntouch {M}\\n' > bare.git/hooks/pre-receive && echo made",
                "cd mine && echo m > m && git add m && git -c user.name=m -c user.email=m@m commit -qm m && git log --oneline | wc -l",
            ],
            person_git: &[],
            check: |ws, outs| {
                if ws.join("mine/.git").exists() || ws.join("bare.git/config").exists() {
                    return Err("a new repository reached the workspace".into());
                }
                if !outs[1].ends_with("1\n[exit 0]") {
                    return Err(format!(
                        "the model's own repository is not usable in the jail: {outs:?}"
                    ));
                }
                if !ws.join("mine/m").exists() {
                    return Err(
                        "the model's work beside its repository did not reach the workspace".into(),
                    );
                }
                Ok(())
            },
        },
        Attack {
            name: "a background job planting between commands",
            setup: |ws| repo(ws),
            model: &[
                "(for i in $(seq 200); do printf '[core]\\n\\tfsmonitor = touch {M}; false\\n' >> .git/config; printf '#!/bin/sh\\ntouch {M}\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; sleep 0.02; done) >/dev/null 2>&1 & echo started",
                "sleep 1; echo later",
                "sleep 1; echo last",
            ],
            person_git: &["."],
            check: fine,
        },
        Attack {
            name: "a removal of a folder holding a repository",
            setup: |ws| repo(&ws.join("vendor/x")),
            model: &["rm -rf vendor && echo gone"],
            person_git: &["vendor/x"],
            check: |ws, _| {
                (ws.join("vendor/x/.git/HEAD").exists() && !ws.join("vendor/x/r.txt").exists())
                    .then_some(())
                    .ok_or("the repository went with its folder, or nothing was removed".into())
            },
        },
        Attack {
            name: "a FIFO, a socket and links leading out",
            setup: nothing,
            model: &[
                "mkfifo fifo; python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.bind('sock')\" 2>/dev/null; ln -s {OUT} out-link; ln -s /etc/passwd abs-link; ln -s ../../.. up-link; echo ok > kept.txt; ln -s kept.txt in-link; echo made",
            ],
            person_git: &[],
            check: |ws, _| {
                for p in ["fifo", "sock", "out-link", "abs-link", "up-link"] {
                    if std::fs::symlink_metadata(ws.join(p)).is_ok() {
                        return Err(format!("{p} reached the workspace"));
                    }
                }
                let inside = std::fs::read_link(ws.join("in-link")).ok();
                (inside == Some(PathBuf::from("kept.txt")))
                    .then_some(())
                    .ok_or("a link inside the workspace was not applied".into())
            },
        },
        Attack {
            name: "a .git file rewritten, and git's folder removed",
            setup: |ws| {
                repo(ws);
                std::fs::create_dir_all(ws.join("wt")).unwrap();
                std::fs::write(ws.join("wt/.git"), "gitdir: ../.git\n").unwrap();
            },
            model: &["echo 'gitdir: ../evil' > wt/.git; rm -rf .git; echo gone"],
            person_git: &["."],
            check: |ws, _| {
                let file = std::fs::read_to_string(ws.join("wt/.git")).unwrap_or_default();
                (file.contains("../.git") && ws.join(".git/HEAD").exists())
                    .then_some(())
                    .ok_or(format!("the .git file or the repository changed: {file}"))
            },
        },
    ]
}

/// The model's command with its placeholders: `{M}` the marker, `{OUT}` a file outside, and
/// `PLANT_ROOT` the workspace repository's planting.
fn expand(c: &str, marker: &Path, out: &Path) -> String {
    let c = if c == "PLANT_ROOT" {
        plant(".git")
    } else {
        c.to_string()
    };
    c.replace("{M}", &marker.display().to_string())
        .replace("{OUT}", &out.display().to_string())
}

#[test]
fn no_attack_of_the_lists_reaches_the_persons_tools() {
    let mut failures = Vec::new();
    for a in attacks() {
        let ws = Ws::new();
        let outside = tempfile::tempdir().unwrap();
        let marker = outside.path().join("ran-as-the-person");
        let out_file = outside.path().join("target-file");
        std::fs::write(&out_file, "untouched\n").unwrap();
        (a.setup)(ws.path());
        let cmds: Vec<String> = a
            .model
            .iter()
            .map(|c| expand(c, &marker, &out_file))
            .collect();
        let outs = run(&ws, &[], &cmds);
        // What the model's own git ran inside the jail never reaches the marker (outside the
        // workspace, read-only there); anything that touches it now ran as the person.
        for d in a.person_git {
            let dir = ws.path().join(d);
            git(&dir, &["status"]);
            std::fs::write(dir.join("person.txt"), "p\n").unwrap();
            git(&dir, &["add", "person.txt"]);
            git(&dir, &["commit", "-qm", "person"]);
            git(&dir, &["checkout", "-q", "-b", "person-branch"]);
        }
        if marker.exists() {
            failures.push(format!(
                "{}: a planted program ran as the person: {outs:?}",
                a.name
            ));
        }
        if std::fs::read_to_string(&out_file).unwrap_or_default() != "untouched\n" {
            failures.push(format!("{}: a file outside the workspace changed", a.name));
        }
        if let Err(e) = (a.check)(ws.path(), &outs) {
            failures.push(format!("{}: {e}", a.name));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The person changes a file while the model's command rewrites it: the person's version stays,
/// the model's is kept aside (held.jsonl, `tern held`), and the model is told; `tern held take`
/// applies it when the person chooses.
#[test]
fn the_persons_concurrent_change_wins_and_the_models_is_kept() {
    let ws = Ws::new();
    std::fs::write(ws.path().join("f.txt"), "base\n").unwrap();
    let go = ws.path().join(".home/go");
    std::fs::create_dir_all(ws.home()).unwrap();
    let f = ws.path().join("f.txt");
    let person = std::thread::spawn(move || {
        // The model's command has copied the file up and waits: the person saves now.
        let ok = crate::support::procs::eventually(std::time::Duration::from_secs(30), || {
            !crate::support::procs::pids_running(&["sleep", "2.5"]).is_empty()
        });
        assert!(ok, "the command never started");
        std::thread::sleep(std::time::Duration::from_millis(300));
        std::fs::write(&f, "person\n").unwrap();
        let _ = go;
    });
    let outs = run(
        &ws,
        &[],
        &["echo model > f.txt; sleep 2.5; echo wrote".to_string()],
    );
    person.join().unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.path().join("f.txt")).unwrap(),
        "person\n"
    );
    assert!(
        outs[0].contains("f.txt") && outs[0].contains("kept at"),
        "{outs:?}"
    );
    let held = tern::sandbox::door::held_in(&ws.current_dir());
    assert_eq!(held.len(), 1, "{held:?}");
    let kept = held[0].kept.clone().unwrap();
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), "model\n");
    // `tern held` lists it; `tern held take N` applies it.
    let fake = FakeServer::start(vec![]);
    let mut c = ws.tern(&fake);
    c.args(["held"]);
    let out = ok_no_stdin(c);
    assert!(out.stdout.contains("f.txt"), "{}", out.stdout);
    let mut c = ws.tern(&fake);
    c.args(["held", "take", &held[0].n.to_string()]);
    ok_no_stdin(c);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("f.txt")).unwrap(),
        "model\n"
    );
    let mut c = ws.tern(&fake);
    c.args(["held", "take", "99"]);
    let o = crate::support::cli::output(c);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
}

/// Everyday work through the door: files, folders, modes, removals, renames of folders that came
/// from the workspace (overlayfs answers EXDEV; `mv` copies), `git mv` of a file, a local
/// `git clone --no-hardlinks` (its repository is the model's, kept aside), and the model's commits in the
/// workspace's repository reaching the person's git.
#[test]
fn everyday_work_passes_the_door() {
    let ws = Ws::new();
    repo(ws.path());
    std::fs::create_dir_all(ws.path().join("dir/sub")).unwrap();
    std::fs::write(ws.path().join("dir/sub/a.txt"), "a\n").unwrap();
    std::fs::write(ws.path().join("gone.txt"), "g\n").unwrap();
    std::fs::write(ws.path().join("run.sh"), "#!/bin/sh\n").unwrap();
    git(ws.path(), &["add", "-A"]);
    git(ws.path(), &["commit", "-qm", "base"]);
    let outs = run(
        &ws,
        &[],
        &[
            "mkdir -p new/deep && echo n > new/deep/n.txt && rm gone.txt && chmod +x run.sh && mv dir dir2 && echo x > suid.sh && chmod 6755 suid.sh && echo moved".into(),
            "git mv r.txt r2.txt && git -c user.name=m -c user.email=m@m commit -qm model && echo committed".into(),
            // A local clone hard-links objects by default, and overlayfs shows a hard link to a
            // workspace file under two inode numbers, which git's check refuses (README).
            "git clone -q --no-hardlinks . clone && ls clone/r2.txt".into(),
        ],
    );
    assert!(outs[0].contains("moved"), "{outs:?}");
    let p = ws.path();
    assert_eq!(
        std::fs::read_to_string(p.join("new/deep/n.txt")).unwrap(),
        "n\n"
    );
    assert!(!p.join("gone.txt").exists());
    assert!(
        p.join("dir2/sub/a.txt").exists() && !p.join("dir").exists(),
        "{outs:?}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(p.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert!(mode & 0o100 != 0, "{mode:o}");
    // Set-id bits never pass (the jail is nosuid, the workspace is not).
    let suid = std::fs::metadata(p.join("suid.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(suid & 0o6000, 0, "{suid:o}");
    assert!(outs[1].contains("committed"), "{outs:?}");
    let log = git(p, &["log", "--format=%s"]);
    assert!(
        String::from_utf8_lossy(&log.stdout).starts_with("model"),
        "{log:?}"
    );
    let st = git(p, &["status", "--short"]);
    assert!(st.status.success(), "{st:?}");
    assert!(outs[2].contains("clone/r2.txt"), "{outs:?}");
    assert!(p.join("clone/r2.txt").exists() && !p.join("clone/.git").exists());
    // The door made its new files in the layer's staging folder, never beside their names: no
    // temporary name is left in the workspace.
    let found = Command::new("find")
        .arg(p)
        .args(["-name", ".tern-door-*"])
        .output()
        .unwrap();
    assert!(
        found.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&found.stdout)
    );
}

/// Where the kernel refuses the layer (here `--no-layer`, the person's own choice), commands
/// write the workspace directly behind the bind walls, as before the door.
#[test]
fn without_the_layer_commands_write_the_workspace_directly() {
    let ws = Ws::new();
    let outs = run(
        &ws,
        &["--no-layer"],
        &["echo direct > d.txt && mkfifo p && echo ok".into()],
    );
    assert!(outs[0].contains("ok"), "{outs:?}");
    assert!(ws.path().join("d.txt").exists());
    assert!(
        ws.path().join("p").exists(),
        "without the door a FIFO lands directly"
    );
}

/// A trusted hook's script calls a helper the hooks file does not name; a command rewrites the
/// helper. The hook names workspace code, so it runs inside the jail by default: the rewritten
/// helper runs with the model's authority (it cannot write outside the workspace), never as
/// the person. `"jail": false` is the person's explicit choice to run it outside.
#[test]
fn a_rewritten_helper_of_a_trusted_hook_runs_in_the_jail() {
    let ws = Ws::new();
    let outside = tempfile::Builder::new()
        .prefix("tern-door-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let marker = outside.path().join("helper-ran-as-the-person");
    std::fs::create_dir_all(ws.path().join("scripts")).unwrap();
    std::fs::write(
        ws.path().join("scripts/guard.sh"),
        "#!/bin/sh\ncat >/dev/null\nsh \"$(dirname \"$0\")/helper.sh\"\nexit 0\n",
    )
    .unwrap();
    std::fs::write(ws.path().join("scripts/helper.sh"), "true\n").unwrap();
    let dir = ws.home().join(".config/tern");
    std::fs::create_dir_all(&dir).unwrap();
    let hooks = serde_json::json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": "sh \"$TERN_PROJECT_DIR/scripts/guard.sh\""}]}]}});
    std::fs::write(dir.join("hooks.json"), hooks.to_string()).unwrap();
    let outs = run(
        &ws,
        &[],
        &[
            format!(
                "printf 'touch {}\\n' > scripts/helper.sh && echo rewrote",
                marker.display()
            ),
            "echo next".into(),
        ],
    );
    assert!(
        outs[0].contains("rewrote") && outs[1].contains("next"),
        "{outs:?}"
    );
    assert!(
        std::fs::read_to_string(ws.path().join("scripts/helper.sh"))
            .unwrap()
            .contains("touch"),
        "the model's helper reached the workspace (it is the model's work)"
    );
    assert!(!marker.exists(), "the rewritten helper ran as the person");
}

/// The disk floor holds between commands: a job a command left running keeps writing after it
/// ended; below the floor tern stops every process left in the jail, and the next command's
/// result says so. The door never copies a file that would take the workspace below it.
#[test]
fn the_disk_floor_holds_between_commands() {
    let ws = Ws::new();
    let Some(space) = tern::store::fsutil::space(ws.path()) else {
        return;
    };
    // A floor 40 MB under what is free now: 200 MB written in the background passes it.
    let floor = space.free.saturating_sub(40 << 20);
    let cmds = [
        "(sleep 0.5; for i in $(seq 200); do head -c 1048576 /dev/zero >> big.bin || break; sleep 0.01; done; echo finished > bg-done) >/dev/null 2>&1 & echo started",
        "ls",
    ];
    let mut script: Vec<_> = cmds
        .iter()
        .enumerate()
        .map(|(i, c)| bash(Wire::OpenAi, &format!("c{i}"), c))
        .collect();
    // The model thinks for 6 s before the second command: the job writes meanwhile.
    script[1] = script[1]
        .clone()
        .delay_before(std::time::Duration::from_secs(6));
    script.push(openai_text("done"));
    let fake = FakeServer::start(script);
    let mut cmd = ws.tern(&fake);
    cmd.env("TERN_DISK_FLOOR", floor.to_string())
        .args(["exec", "go"]);
    ok_no_stdin(cmd);
    let conv: Vec<Value> = jsonl(&ws.current_dir().join("conversation.jsonl"));
    let second = tool_result(&conv, "c1")["content"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        second.contains("between commands") && second.contains("below tern's floor"),
        "{second}"
    );
    assert!(
        !ws.path().join("bg-done").exists(),
        "the job was not stopped: {second}"
    );
    let big = std::fs::metadata(ws.path().join("big.bin")).map_or(0, |m| m.len());
    assert!(big < 200 << 20, "{big}");
}

/// `--add-dir` is a layer too: what commands write there reaches the folder through the door,
/// and no socket in it — there at start, or made by the person's program later — can be
/// connected to from the jail (overlayfs serves a socket of the layer below as a name with no
/// listener behind it), whatever the folder's name.
#[test]
fn an_added_folders_sockets_are_out_of_reach_present_or_later() {
    if std::process::Command::new("python3")
        .arg("-V")
        .output()
        .is_err()
    {
        return;
    }
    let ws = Ws::new();
    let extra = tempfile::Builder::new()
        .prefix("tern-add-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let dir = extra.path().to_path_buf();
    std::fs::create_dir_all(dir.join("deep/er")).unwrap();
    // A listener at start, two levels down; another made after the jail started.
    let listen = |path: PathBuf| {
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        l.set_nonblocking(true).unwrap();
        l
    };
    let early = listen(dir.join("deep/er/early.sock"));
    let later_path = dir.join("later.sock");
    let connect = |p: &str| {
        format!(
            "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('{p}'); print('CONNECTED')\" 2>&1 | tail -1"
        )
    };
    let later_sock = later_path.clone();
    let maker = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(1500));
        listen(later_sock)
    });
    let outs = run(
        &ws,
        &["--add-dir", dir.to_str().unwrap()],
        &[
            format!(
                "{}; echo added > {}/made.txt",
                connect(&format!("{}/deep/er/early.sock", dir.display())),
                dir.display()
            ),
            format!("sleep 2.5; {}", connect(&later_path.display().to_string())),
        ],
    );
    let later = maker.join().unwrap();
    assert!(
        !outs[0].contains("CONNECTED") && !outs[1].contains("CONNECTED"),
        "{outs:?}"
    );
    assert!(
        early.accept().is_err() && later.accept().is_err(),
        "a connection arrived"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("made.txt")).unwrap(),
        "added\n",
        "{outs:?}"
    );
}

/// Files a person's tool runs on its own are applied and named to the person: in a `door` event
/// at the end of the turn, and by `tern status` until the next turn (the model's result stays
/// as the command left it).
#[test]
fn files_your_tools_run_are_named_until_the_next_turn() {
    let ws = Ws::new();
    let outs = run(
        &ws,
        &[],
        &["echo 'export X=1' > .envrc && mkdir -p .husky/_ && echo 'echo hi' > .husky/_/pre-commit && echo ok > plain.txt && echo done".into()],
    );
    // Named to the person (the event, `tern status`), not to the model: no tokens for it.
    assert_eq!(outs[0], "done\n[exit 0]", "{outs:?}");
    assert!(ws.path().join(".envrc").exists());
    let events = jsonl(&ws.current_dir().join("events.jsonl"));
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "door" && e["listed"].as_array().map(Vec::len) == Some(2)),
        "{events:?}"
    );
    let fake = FakeServer::start(vec![]);
    let mut c = ws.tern(&fake);
    c.arg("status");
    let out = ok_no_stdin(c);
    assert!(
        out.stdout
            .contains("Files your tools run on their own changed: .envrc, .husky/_/pre-commit"),
        "{}",
        out.stdout
    );
    let mut c = ws.tern(&fake);
    c.args(["status", "--json"]);
    let v: Value = serde_json::from_str(ok_no_stdin(c).stdout.trim()).unwrap();
    assert_eq!(v["door"]["listed"].as_array().map(Vec::len), Some(2), "{v}");
}

/// Where the kernel refuses the layer (here made to, for real: its work folder on another file
/// system, a debug-build switch), tern says so once — to the model and as a warning — and runs
/// the commands behind the bind walls; nothing is refused.
#[test]
fn a_refused_layer_is_said_once_and_the_bind_walls_run() {
    if !Path::new("/dev/shm").is_dir() {
        return;
    }
    let ws = Ws::new();
    let script = vec![
        bash(Wire::OpenAi, "c0", "echo one > one.txt && echo ran"),
        bash(Wire::OpenAi, "c1", "echo two > two.txt && echo ran"),
        openai_text("done"),
    ];
    let fake = FakeServer::start(script);
    let mut cmd = ws.tern(&fake);
    cmd.env("TERN_SANDBOX_FAKE_NO_LAYER", "1")
        .args(["exec", "go"]);
    ok_no_stdin(cmd);
    let conv: Vec<Value> = jsonl(&ws.current_dir().join("conversation.jsonl"));
    let first = tool_result(&conv, "c0")["content"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let second = tool_result(&conv, "c1")["content"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        first.contains("refused the workspace's layer") && first.contains("ran"),
        "{first}"
    );
    assert!(
        !second.contains("refused the workspace's layer"),
        "said once: {second}"
    );
    assert!(ws.path().join("one.txt").exists() && ws.path().join("two.txt").exists());
    let events = jsonl(&ws.current_dir().join("events.jsonl"));
    let warned = events
        .iter()
        .filter(|e| {
            e["type"] == "warning"
                && e["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("refused the workspace's layer")
        })
        .count();
    assert_eq!(warned, 1);
}

/// A name that is not UTF-8 on a change the door holds back (a FIFO) or keeps aside: said and
/// recorded without breaking the event log or the run.
#[test]
fn a_held_name_that_is_not_utf8_is_said() {
    let ws = Ws::new();
    let outs = run(
        &ws,
        &[],
        &["mkfifo \"$(printf 'p\\377')\" && mkdir -p \"$(printf 'd\\376')\" && cd \"$(printf 'd\\376')\" && git init -q && echo made".into()],
    );
    assert!(outs[0].contains("made"), "{outs:?}");
    assert!(
        outs[0].contains("FIFO") && outs[0].contains("new repository"),
        "{outs:?}"
    );
    let events = jsonl(&ws.current_dir().join("events.jsonl"));
    assert!(events.iter().any(|e| e["type"] == "door"), "{events:?}");
    let held = tern::sandbox::door::held_in(&ws.current_dir());
    assert_eq!(held.len(), 1, "{held:?}");
    // Taken by its real bytes.
    let got = tern::sandbox::door::take(&ws.current_dir(), ws.path(), held[0].n).unwrap();
    use std::os::unix::ffi::OsStrExt;
    let dir = ws.path().join(std::ffi::OsStr::from_bytes(b"d\xfe"));
    assert_eq!(got, dir.join(".git"));
    assert!(dir.join(".git/HEAD").exists());
}

/// A new repository made in an `--add-dir` is kept aside under its full path and taken back
/// there.
#[test]
fn a_repository_made_in_an_added_folder_is_kept_and_taken_by_its_full_path() {
    let ws = Ws::new();
    let extra = tempfile::Builder::new()
        .prefix("tern-add-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let dir = extra.path().to_path_buf();
    let outs = run(
        &ws,
        &["--add-dir", dir.to_str().unwrap()],
        &[format!(
            "cd {} && git init -q r && echo made",
            dir.display()
        )],
    );
    assert!(outs[0].contains("made"), "{outs:?}");
    assert!(!dir.join("r/.git").exists(), "{outs:?}");
    let held = tern::sandbox::door::held_in(&ws.current_dir());
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].path, dir.join("r/.git"));
    let got = tern::sandbox::door::take(&ws.current_dir(), ws.path(), held[0].n).unwrap();
    assert_eq!(got, dir.join("r/.git"));
    assert!(dir.join("r/.git/HEAD").exists());
}

/// tern is killed while a command runs (SIGKILL: no last pass): what the command had written
/// in its layer is not lost — the next tern passes the dead one's layer through a door before
/// sweeping it, and says so.
#[test]
fn a_killed_terns_layer_is_applied_by_the_next_one() {
    let ws = Ws::new();
    let marker = format!("{}.{}", 41, std::process::id());
    let fake = FakeServer::start(vec![bash(
        Wire::OpenAi,
        "c0",
        &format!("echo data > crash.txt && mkdir -p d && echo deep > d/f && sleep {marker}"),
    )]);
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "go"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let started = crate::support::procs::eventually(std::time::Duration::from_secs(30), || {
        !crate::support::procs::pids_running(&["sleep", &marker]).is_empty()
    });
    child.kill().unwrap();
    let _ = child.wait();
    assert!(started, "the command never started");
    assert!(
        !ws.path().join("crash.txt").exists(),
        "applied before the command ended"
    );
    // The next tern, a new session.
    let outs = run(&ws, &[], &["echo next".into()]);
    assert!(outs[0].contains("an earlier tern"), "{outs:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("crash.txt")).unwrap(),
        "data\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("d/f")).unwrap(),
        "deep\n"
    );
    // Every layer folder gone (the doors' lock file, `.door.lock`, stays).
    let layers: Vec<_> = std::fs::read_dir(ws.path().join(".tern/layers"))
        .unwrap()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(
        layers.is_empty(),
        "the dead tern's layer was swept: {layers:?}"
    );
}
