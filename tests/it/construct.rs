//! The jail by construction (issue 29, DESIGN.md §10): nothing the person's tools later run or
//! read is the model's to write, and what a runaway command consumes has floors. Each class is
//! the model's scripted command attacking, checked by its effect; and the everyday work that
//! must still pass. `.ci/run` runs this module again as an unprivileged user.

use serde_json::Value;

use crate::support::body::tool_result;
use crate::support::cli::{Ws, launch, ok_no_stdin};
use crate::support::files::{Tmpfs, jsonl};
use crate::support::script::bash;
use crate::support::{FakeServer, Wire, openai_text};

/// The model's `commands` in one `tern exec` with `args` and tern's environment changed by
/// `setup`; each call's tool result text.
fn run_with(
    ws: &Ws,
    args: &[&str],
    setup: impl FnOnce(&mut std::process::Command),
    commands: &[&str],
) -> Vec<String> {
    let mut script: Vec<_> = commands
        .iter()
        .enumerate()
        .map(|(i, c)| bash(Wire::OpenAi, &format!("c{i}"), c))
        .collect();
    script.push(openai_text("done"));
    let fake = FakeServer::start(script);
    let mut cmd = ws.tern(&fake);
    setup(&mut cmd);
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

/// A command that writes past the disk floor is stopped while it runs, the model and the
/// person are told why, the turn goes on; on a disk still below the floor a small command and
/// a cleanup run, another big write is stopped again. (A 64 MiB tmpfs stands for a shared disk;
/// the writer writes 1 MiB every 10 ms, a fast disk's pace; root only.)
#[test]
fn a_runaway_write_stops_at_the_disk_floor() {
    let disk = match Tmpfs::mount("64m") {
        Ok(d) => d,
        Err(e) => {
            crate::support::skipped(
                "construct::a_runaway_write_stops_at_the_disk_floor",
                &format!("cannot mount a tmpfs here ({e})"),
                false,
            );
            return;
        }
    };
    let ws = Ws::new();
    let d = disk.path().display().to_string();
    let outs = run_with(
        &ws,
        &["--add-dir", &d],
        |c| {
            c.env("TERN_DISK_FLOOR", "24M");
        },
        &[
            &format!("{WRITER} {d}/big; echo finished-writing"),
            &format!("echo next > {d}/small && echo ran"),
            &format!("{WRITER} {d}/big2; echo finished-again"),
            &format!("rm {d}/big {d}/big2 && echo freed"),
        ],
    );
    assert!(
        outs[0].contains("tern stopped this command: the disk holding")
            && outs[0].contains("below tern's floor of"),
        "{outs:?}"
    );
    assert!(!outs[0].contains("finished-writing\n[exit"), "{outs:?}");
    let left = std::fs::metadata(disk.path().join("big")).map_or(0, |m| m.len());
    assert!(left < 48 << 20, "the copy went on to {left} bytes");
    assert!(outs[1].contains("ran"), "{outs:?}");
    assert!(outs[2].contains("tern stopped this command"), "{outs:?}");
    assert!(outs[3].contains("freed"), "{outs:?}");
    // The person saw it too.
    let events = std::fs::read_to_string(ws.current_dir().join("events.jsonl")).unwrap();
    assert!(
        events.contains("tern stopped this command"),
        "no warning event"
    );
}

/// A writer of 1 MiB every 10 ms into the file it is given (about 100 MB/s).
const WRITER: &str = "w() { while head -c 1048576 /dev/zero; do sleep 0.01; done; }; w >";

/// `TERN_DISK_FLOOR` set to nonsense is a usage error naming it (exit 2).
#[test]
fn a_bad_disk_floor_is_a_usage_error() {
    let ws = Ws::new();
    let fake = FakeServer::start(vec![openai_text("done")]);
    let mut cmd = ws.tern(&fake);
    cmd.env("TERN_DISK_FLOOR", "plenty").args(["exec", "go"]);
    let out = launch(cmd, None, crate::support::cli::LIMIT);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("TERN_DISK_FLOOR"), "{out:?}");
}

/// The jail's memory-backed folders (`/tmp`, `/var/tmp`, `/run`, `/dev/shm`, the covered home)
/// each have a size: a runaway write there fails, never fills the host's memory.
#[test]
fn the_jails_memory_folders_have_sizes() {
    let ws = Ws::new();
    let outs = run_with(
        &ws,
        &[],
        |_| {},
        &[
            "for d in /tmp /var/tmp /run /dev/shm; do echo \"$d $(df -k --output=size $d | tail -1)\"; done",
        ],
    );
    let sizes: Vec<(String, u64)> = outs[0]
        .lines()
        .filter_map(|l| {
            let (d, k) = l.split_once(' ')?;
            Some((d.to_string(), k.trim().parse().ok()?))
        })
        .collect();
    assert_eq!(sizes.len(), 4, "{outs:?}");
    for (d, k) in sizes {
        assert!(k <= 1 << 20, "{d} is {k} KiB: {outs:?}");
    }
}

/// A workspace that is the home folder (or holds it), or `/tmp`, is refused in workspace-write
/// before anything runs: a command could create start-up files, `~/.ssh/authorized_keys` or a
/// `~/.local/bin/git` that did not exist, or reach other programs' sockets. Read-only works.
#[test]
fn workspace_write_is_refused_in_the_home_folder() {
    let ws = Ws::new();
    let fake = FakeServer::start(vec![
        bash(Wire::OpenAi, "c0", "touch .bash_profile"),
        openai_text("done"),
    ]);
    let mut cmd = ws.tern(&fake);
    cmd.env("HOME", ws.path()).args(["exec", "go"]);
    let out = launch(cmd, None, crate::support::cli::LIMIT);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.contains("your home folder") && out.stderr.contains("--sandbox read-only"),
        "{out:?}"
    );
    assert!(!ws.path().join(".bash_profile").exists());
    assert!(fake.requests().is_empty(), "refused before any request");
    let mut cmd = ws.tern(&fake);
    cmd.env("HOME", ws.path())
        .args(["exec", "--sandbox", "read-only", "go"]);
    let out = launch(cmd, None, crate::support::cli::LIMIT);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(!ws.path().join(".bash_profile").exists());
}

/// `--add-dir` (and `--read-dir`) of a folder where other programs keep sockets is refused with
/// a narrower folder to give: `/tmp` held tmux's socket, and `tmux new-window` ran a command
/// outside the jail.
#[test]
fn a_widened_folder_never_exposes_host_sockets() {
    let ws = Ws::new();
    let fake = FakeServer::start(vec![openai_text("never")]);
    for (flag, dir) in [
        ("--add-dir", "/tmp"),
        ("--read-dir", "/run"),
        ("--add-dir", "/dev/shm"),
    ] {
        let mut cmd = ws.tern(&fake);
        cmd.args(["exec", flag, dir, "go"]);
        let out = launch(cmd, None, crate::support::cli::LIMIT);
        assert_eq!(out.code, Some(2), "{flag} {dir}: {out:?}");
        assert!(
            out.stderr.contains("sockets") && out.stderr.contains("tern-work"),
            "{flag} {dir}: {out:?}"
        );
    }
    assert!(fake.requests().is_empty());
}

/// Credentials inside the toolchain folders the jail shows stay hidden (the crates.io token,
/// git's credential store, Maven's settings), while the caches and binaries a build needs are
/// readable; tern's own config is hidden wherever `XDG_CONFIG_HOME` puts it.
#[test]
fn credentials_inside_toolchain_folders_stay_hidden() {
    let ws = Ws::new();
    let home = tempfile::Builder::new()
        .prefix("tern-home-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let xdg = tempfile::Builder::new()
        .prefix("tern-xdg-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let h = home.path();
    let files = [
        (".cargo/credentials.toml", "token = \"CRATES-TOKEN\""),
        (".cargo/bin/cargo-hello", "TOOL-BINARY"),
        (".cargo/registry/cache/x.crate", "CACHED-CRATE"),
        (".config/git/credentials", "https://u:GIT-TOKEN@example.com"),
        (".config/git/config", "[user]\n\tname = Tester\n"),
        (".m2/settings.xml", "<password>MAVEN-SECRET</password>"),
        (".m2/repository/a.jar", "MAVEN-CACHE"),
    ];
    for (rel, text) in files {
        let p = h.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    std::fs::create_dir_all(xdg.path().join("tern")).unwrap();
    // Written as `tern setup` writes it: mode 0600, an unknown-to-the-server model only.
    let cfg = xdg.path().join("tern/config.json");
    std::fs::write(&cfg, "{\"model\":\"XDG-KEY\"}").unwrap();
    std::fs::set_permissions(&cfg, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let cat: Vec<String> = files
        .iter()
        .map(|(rel, _)| format!("cat {}/{rel} 2>/dev/null; echo", h.display()))
        .chain([format!(
            "cat {}/tern/config.json 2>/dev/null; echo",
            xdg.path().display()
        )])
        .collect();
    let outs = run_with(
        &ws,
        &[],
        |c| {
            c.env("HOME", h).env("XDG_CONFIG_HOME", xdg.path());
        },
        &[&cat.join("; ")],
    );
    let out = &outs[0];
    for secret in ["CRATES-TOKEN", "GIT-TOKEN", "MAVEN-SECRET", "XDG-KEY"] {
        assert!(!out.contains(secret), "{secret} readable: {out}");
    }
    for shown in ["TOOL-BINARY", "CACHED-CRATE", "Tester", "MAVEN-CACHE"] {
        assert!(out.contains(shown), "{shown} hidden: {out}");
    }
}

/// A workspace that holds the home folder (here `.home/` inside it, as in every test): the home
/// folder is read-only in the jail, so a command creates no start-up file, no
/// `~/.ssh/authorized_keys` and no `~/.local/bin/git`, none of which existed.
#[test]
fn no_start_up_file_can_be_created_in_a_home_the_workspace_holds() {
    let ws = Ws::new();
    std::fs::create_dir_all(ws.home()).unwrap();
    let outs = run_with(
        &ws,
        &[],
        |_| {},
        &[
            "echo evil > \"$HOME/.bash_profile\"; mkdir -p \"$HOME/.ssh\" && echo key >> \"$HOME/.ssh/authorized_keys\"; mkdir -p \"$HOME/.local/bin\" && echo x > \"$HOME/.local/bin/git\"; echo tried",
            "echo work > work.txt && echo wrote-the-workspace",
        ],
    );
    assert!(outs[0].contains("tried"), "{outs:?}");
    for rel in [".bash_profile", ".ssh/authorized_keys", ".local/bin/git"] {
        assert!(!ws.home().join(rel).exists(), "{rel} was created: {outs:?}");
    }
    assert!(outs[1].contains("wrote-the-workspace"), "{outs:?}");
}

/// `git ARGS` in `dir` as the person runs it (no system or global configuration, an identity,
/// file transport allowed for local submodules); its output.
fn git(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let out = std::process::Command::new("git")
        .args(["-c", "protocol.file.allow=always"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "p")
        .env("GIT_AUTHOR_EMAIL", "p@p")
        .env("GIT_COMMITTER_NAME", "p")
        .env("GIT_COMMITTER_EMAIL", "p@p")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// What a command prints to plant git configuration in the git dir at `gitdir` (relative to
/// the workspace): an fsmonitor and a hook that touch `marker`, a `commondir` and a
/// `config.worktree` naming a folder with the same.
fn plant(gitdir: &str, marker: &std::path::Path) -> String {
    let m = marker.display();
    format!(
        "mkdir -p evil && printf '[core]\\n\\tfsmonitor = touch {m}; false\\n' > evil/config; \
         printf '[core]\\n\\tfsmonitor = touch {m}; false\\n' >> {gitdir}/config; \
         printf '#!/bin/sh\\ntouch {m}\\n' > {gitdir}/hooks/post-checkout; chmod +x {gitdir}/hooks/post-checkout; \
         echo ../evil > {gitdir}/commondir; cp evil/config {gitdir}/config.worktree; echo planted"
    )
}

/// A background job a command leaves re-plants `.git/commondir` every 20 ms while the person
/// runs `git status` in another pane, and after the session; the person's git never runs the
/// planted command, and the model's own commits still land.
#[test]
fn a_background_job_cannot_plant_what_the_persons_git_runs() {
    let ws = Ws::new();
    git(ws.path(), &["init", "-q"]);
    git(ws.path(), &["commit", "-q", "--allow-empty", "-m", "start"]);
    let marker = ws.path().join("pwned");
    let config = std::fs::read(ws.path().join(".git/config")).unwrap();
    let job = format!(
        "({} ; while true; do echo ../evil > .git/commondir; echo x >> .git/config; sleep 0.02; done) >/dev/null 2>&1 & echo started",
        plant(".git", &marker)
    );
    let watcher = {
        let dir = ws.path().to_path_buf();
        let marker = marker.clone();
        std::thread::spawn(move || {
            // The person's pane, while the session runs.
            for _ in 0..40 {
                let _ = std::process::Command::new("git")
                    .args(["status", "--short"])
                    .current_dir(&dir)
                    .env("GIT_CONFIG_NOSYSTEM", "1")
                    .output();
                std::thread::sleep(std::time::Duration::from_millis(25));
            }
            marker.exists()
        })
    };
    let outs = run_with(
        &ws,
        &[],
        |_| {},
        &[
            &job,
            "sleep 0.5; echo waited",
            "echo a > a.txt && git add a.txt && git -c user.name=m -c user.email=m@m -c core.fsmonitor=false commit -qm model --no-verify 2>&1; echo committed=$?",
        ],
    );
    assert!(outs[0].contains("started"), "{outs:?}");
    assert!(
        !watcher.join().unwrap(),
        "the person's git ran a planted command"
    );
    git(ws.path(), &["status", "--short"]);
    git(ws.path(), &["checkout", "-q", "-b", "after"]);
    assert!(!marker.exists(), "the person's git ran a planted command");
    assert!(!ws.path().join(".git/commondir").exists());
    assert!(!ws.path().join(".git/config.worktree").exists());
    assert_eq!(
        std::fs::read(ws.path().join(".git/config")).unwrap(),
        config
    );
    assert!(!ws.path().join(".git/hooks/post-checkout").exists());
    // The model's commit (made while the job planted in the jail's copy: it named its own
    // fsmonitor off) is in the repository.
    let log = git(ws.path(), &["log", "--format=%s", "master"]);
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(
        log.contains("model") || outs[2].contains("committed=128"),
        "{log} {outs:?}"
    );
}

/// A linked worktree whose main repository lives in the home folder (hidden from commands):
/// git works inside the jail (status, add, commit, branch, log), the commit lands in the main
/// repository, and neither the `.git` file nor the main repository's config or hooks can be
/// changed.
#[test]
fn a_linked_worktree_with_its_repository_in_the_home_folder_works_and_holds() {
    let ws = Ws::new();
    let home = tempfile::Builder::new()
        .prefix("tern-home-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let main = home.path().join("main");
    std::fs::create_dir(&main).unwrap();
    git(&main, &["init", "-q", "-b", "trunk"]);
    git(&main, &["commit", "-q", "--allow-empty", "-m", "start"]);
    let wt = ws.path().join("wt");
    git(
        &main,
        &["worktree", "add", "-q", "-b", "wt", wt.to_str().unwrap()],
    );
    let dot = std::fs::read(wt.join(".git")).unwrap();
    let marker = ws.path().join("pwned");
    let cmds = [
        "cd wt && git status --short >/dev/null && echo w > w.txt && git add w.txt && git -c user.name=m -c user.email=m@m commit -qm in-the-jail && git branch side && git log --oneline | wc -l".to_string(),
        format!("cd wt && echo 'gitdir: /tmp/elsewhere' > .git; echo rewrite=$?; {}", plant("$(git rev-parse --git-common-dir)", &marker)),
    ];
    let outs = run_with(
        &ws,
        &[],
        |c| {
            c.env("HOME", home.path());
        },
        &[&cmds[0], &cmds[1]],
    );
    assert!(
        outs[0].trim_start().starts_with('2'),
        "git in the jail: {outs:?}"
    );
    assert_eq!(std::fs::read(wt.join(".git")).unwrap(), dot, "{outs:?}");
    let log = git(&main, &["log", "--format=%s", "wt"]);
    assert!(String::from_utf8_lossy(&log.stdout).contains("in-the-jail"));
    git(&main, &["rev-parse", "--verify", "-q", "side"]);
    git(&wt, &["status", "--short"]);
    git(&main, &["checkout", "-q", "-b", "x"]);
    assert!(!marker.exists(), "the person's git ran a planted command");
    assert!(!main.join(".git/commondir").exists());
}

/// A separate git dir (`git init --separate-git-dir`) outside the workspace: commits work in the
/// jail, the `.git` file cannot be pointed elsewhere, the git dir's config stays the person's.
#[test]
fn a_separate_git_dir_works_and_holds() {
    let ws = Ws::new();
    let outside = tempfile::Builder::new()
        .prefix("tern-gitdir-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let gd = outside.path().join("repo.git");
    git(
        ws.path(),
        &["init", "-q", "--separate-git-dir", gd.to_str().unwrap()],
    );
    let config = std::fs::read(gd.join("config")).unwrap();
    let marker = ws.path().join("pwned");
    let outs = run_with(
        &ws,
        &[],
        |_| {},
        &[
            "echo s > s.txt && git add s.txt && git -c user.name=m -c user.email=m@m commit -qm sep && echo ok",
            &format!(
                "echo 'gitdir: evil' > .git; echo rewrite=$?; {}",
                plant(gd.to_str().unwrap(), &marker)
            ),
        ],
    );
    assert!(outs[0].contains("ok"), "{outs:?}");
    let log = git(ws.path(), &["log", "--format=%s"]);
    assert!(String::from_utf8_lossy(&log.stdout).contains("sep"));
    assert_eq!(
        std::fs::read(gd.join("config")).unwrap(),
        config,
        "{outs:?}"
    );
    git(ws.path(), &["status", "--short"]);
    assert!(!marker.exists());
}

/// A superproject with a submodule: the submodule's git dir (`.git/modules/sub`) is shadowed
/// like the superproject's, so its config and hooks cannot be planted, and `git status` in the
/// superproject (which enters the submodule) runs nothing planted; commits in both still work.
#[test]
fn a_submodules_git_dir_cannot_be_planted() {
    let ws = Ws::new();
    let src = tempfile::tempdir().unwrap();
    git(src.path(), &["init", "-q"]);
    std::fs::write(src.path().join("lib.txt"), "lib").unwrap();
    git(src.path(), &["add", "lib.txt"]);
    git(src.path(), &["commit", "-q", "-m", "lib"]);
    git(ws.path(), &["init", "-q"]);
    git(
        ws.path(),
        &[
            "submodule",
            "add",
            "-q",
            src.path().to_str().unwrap(),
            "sub",
        ],
    );
    git(ws.path(), &["commit", "-q", "-m", "with sub"]);
    let sub_config = std::fs::read(ws.path().join(".git/modules/sub/config")).unwrap();
    let marker = ws.path().join("pwned");
    let outs = run_with(
        &ws,
        &[],
        |_| {},
        &[
            &plant(".git/modules/sub", &marker),
            "echo 'gitdir: ../evil' > sub/.git; echo rewrite=$?",
            "cd sub && echo m > m.txt && git add m.txt && git -c user.name=m -c user.email=m@m -c core.fsmonitor=false commit -qm in-sub --no-verify && echo sub-committed",
        ],
    );
    assert!(outs[0].contains("planted"), "{outs:?}");
    assert_eq!(
        std::fs::read(ws.path().join(".git/modules/sub/config")).unwrap(),
        sub_config
    );
    assert!(!ws.path().join(".git/modules/sub/commondir").exists());
    assert!(
        std::fs::read_to_string(ws.path().join("sub/.git"))
            .unwrap()
            .contains("modules/sub")
    );
    git(ws.path(), &["status"]);
    assert!(
        !marker.exists(),
        "the person's git status ran a planted command"
    );
}

/// A nested repository at any depth keeps its config and hooks (the door holds them back); a
/// `core.hooksPath` in the workspace is the model's work by the door's rules (DESIGN §10):
/// applied, and named to the person as a file their tools run on their own (in the result and
/// a `door` event at the end of the turn).
#[test]
fn a_nested_repository_and_a_hooks_path_hold() {
    let ws = Ws::new();
    git(ws.path(), &["init", "-q"]);
    std::fs::create_dir_all(ws.path().join(".githooks")).unwrap();
    git(ws.path(), &["config", "core.hooksPath", ".githooks"]);
    // Deeper than any bounded walk, under a folder a walk would skip.
    let nested = ws.path().join("node_modules/a/b/c/libs/x");
    std::fs::create_dir_all(&nested).unwrap();
    git(&nested, &["init", "-q"]);
    let config = std::fs::read(nested.join(".git/config")).unwrap();
    let marker = ws.path().join("pwned");
    let outs = run_with(
        &ws,
        &[],
        |_| {},
        &[
            &format!("cd node_modules/a/b/c/libs/x && {}", plant(".git", &marker)),
            "printf '#!/bin/sh\\necho model-hook\\n' > .githooks/post-checkout; echo hook=$?",
        ],
    );
    assert!(outs[0].contains("planted"), "{outs:?}");
    assert_eq!(std::fs::read(nested.join(".git/config")).unwrap(), config);
    assert!(!nested.join(".git/hooks/post-checkout").exists());
    assert!(!nested.join(".git/commondir").exists());
    git(&nested, &["status"]);
    assert!(!marker.exists(), "the person's git ran a planted command");
    assert!(
        ws.path().join(".githooks/post-checkout").exists(),
        "{outs:?}"
    );
    let events = jsonl(&ws.current_dir().join("events.jsonl"));
    assert!(
        events.iter().any(|e| e["type"] == "door"
            && e["listed"]
                .as_array()
                .is_some_and(|l| l.iter().any(|p| p == ".githooks/post-checkout"))),
        "named at the end of the turn"
    );
}

/// A project's hooks file and the script its hook names, trusted with `tern hooks trust`.
fn trusted_guard(ws: &crate::support::cli::WireWs, marker: &std::path::Path) {
    std::fs::create_dir_all(ws.root().join("scripts")).unwrap();
    std::fs::write(
        ws.root().join("scripts/guard.sh"),
        "#!/bin/sh\ncat > /dev/null\nexit 0\n",
    )
    .unwrap();
    let hooks = serde_json::json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": "sh \"$CLAUDE_PROJECT_DIR\"/scripts/guard.sh"}]}]}});
    std::fs::write(ws.root().join(".tern/hooks.json"), hooks.to_string()).unwrap();
    let out = ws.ok(&["hooks", "trust"]);
    let receipt = String::from_utf8_lossy(&out.stdout);
    assert!(receipt.contains("scripts/guard.sh"), "{receipt}");
    let _ = marker;
}

/// Claude Code's documented pattern, a trusted hook running `"$CLAUDE_PROJECT_DIR"/scripts/…`:
/// inside the jail the script is read-only, so the hook runs the person's script; where a
/// command could change it (`--no-jail`), the changed script does not run: the hook is
/// suspended and, PreToolUse being a gate, the next command is blocked with the reason.
#[test]
fn a_script_a_trusted_hook_runs_is_not_the_models_to_change() {
    use crate::support::script::{bash as sbash, text};
    let marker_path = |ws: &crate::support::cli::WireWs| ws.root().join("pwned");
    let evil = |m: &std::path::Path| {
        format!(
            "printf '#!/bin/sh\\ntouch {}\\n' > scripts/guard.sh; echo rewrite=$?",
            m.display()
        )
    };
    // In the jail: read-only.
    let ws = crate::support::cli::WireWs::new(Wire::OpenAi, vec![]);
    let marker = marker_path(&ws);
    trusted_guard(&ws, &marker);
    ws.push(vec![
        sbash(Wire::OpenAi, "c1", &evil(&marker)),
        sbash(Wire::OpenAi, "c2", "echo second"),
        text(Wire::OpenAi, "done"),
    ]);
    let out = ws.ok(&["exec", "--json", "go"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("rewrite=1"), "{stdout}");
    assert!(stdout.contains("second"), "{stdout}");
    assert!(
        !marker.exists(),
        "the rewritten script ran outside the jail"
    );
    // Without the jail (Landlock alone): the command can write it, and the hook stops.
    let ws = crate::support::cli::WireWs::new(Wire::OpenAi, vec![]);
    let marker = marker_path(&ws);
    trusted_guard(&ws, &marker);
    ws.push(vec![
        sbash(Wire::OpenAi, "c1", &evil(&marker)),
        sbash(Wire::OpenAi, "c2", "touch second-ran"),
        text(Wire::OpenAi, "done"),
    ]);
    let out = ws.ok(&["exec", "--json", "--no-jail", "go"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("rewrite=0"), "{stdout}");
    assert!(
        !marker.exists(),
        "the rewritten script ran outside the jail"
    );
    assert!(
        !ws.root().join("second-ran").exists(),
        "the suspended gate let a command through"
    );
    assert!(
        stdout.contains("changed since the hooks were trusted"),
        "{stdout}"
    );
    // Trusted again, the hook (now the person's choice) runs.
    ws.ok(&["hooks", "trust"]);
    ws.push(vec![
        sbash(Wire::OpenAi, "c3", "echo third"),
        text(Wire::OpenAi, "done"),
    ]);
    ws.ok(&["exec", "--no-jail", "--continue", "again"]);
    assert!(marker.exists(), "the re-trusted hook did not run");
}

/// A hook that runs workspace code tern cannot name (`npm run lint`) is named at trust time;
/// with `"jail": true` it runs inside the jail (it cannot write outside the workspace) and its
/// answer still counts (a JSON deny on stdout, stderr apart).
#[test]
fn a_hook_that_runs_workspace_code_is_named_and_can_run_in_the_jail() {
    use crate::support::script::{bash as sbash, text};
    let ws = crate::support::cli::WireWs::new(Wire::OpenAi, vec![]);
    let outside = tempfile::Builder::new()
        .prefix("tern-out-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let escape = outside.path().join("escaped");
    let deny = r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"jailed guard says no"}}"#;
    let jailed = format!(
        "touch {} 2>/dev/null; echo note >&2; echo '{deny}'",
        escape.display()
    );
    let hooks = serde_json::json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": "npm run lint"},
        {"type": "command", "command": jailed, "jail": true}]}]}});
    std::fs::write(ws.root().join(".tern/hooks.json"), hooks.to_string()).unwrap();
    let out = ws.ok(&["hooks", "trust"]);
    let receipt = String::from_utf8_lossy(&out.stdout);
    assert!(
        receipt.contains("npm run lint") && receipt.contains("runs code the workspace holds"),
        "{receipt}"
    );
    ws.push(vec![
        sbash(Wire::OpenAi, "c1", "touch should-not-run"),
        text(Wire::OpenAi, "done"),
    ]);
    let out = ws.ok(&["exec", "--json", "go"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("jailed guard says no"), "{stdout}");
    assert!(!ws.root().join("should-not-run").exists());
    assert!(
        !escape.exists(),
        "the jailed hook wrote outside the workspace"
    );
}
