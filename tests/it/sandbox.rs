//! The bash tool's sandbox (issue 10) with real processes, real files and the real Landlock of
//! this kernel: every case spawns `bash -c` through `tern::tools::bash::run` with a
//! `sandbox::Prepared`. On a kernel without Landlock the sandboxed cases print SKIPPED and pass;
//! the refusal path is tested on any Linux through the debug-build switch `TERN_SANDBOX_FAKE_ABI`
//! in a child process (so no test changes the environment of the others).

use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use tern::sandbox::{self, ChangeKind, Mode, Policy, Prepared, RestoreOutcome, Snapshot};
use tern::tools::bash::{self, BashOutcome, BashRequest};

const MODES: [Mode; 3] = [Mode::ReadOnly, Mode::WorkspaceWrite, Mode::DangerFullAccess];

/// The state files the guard protects (all but the draft), as in a real session folder.
const STATE_FILES: [&str; 6] = [
    "plan.md",
    "plan.json",
    "ledger.json",
    "conversation.jsonl",
    "system.txt",
    "meta.json",
];

/// True when the kernel has Landlock; else prints SKIPPED for `test`.
fn landlock(test: &str) -> bool {
    match sandbox::landlock_abi() {
        Ok(_) => true,
        Err(why) => {
            crate::support::skipped(test, &format!("no Landlock on this kernel ({why})"), false);
            false
        }
    }
}

/// A scratch world: `root/ws` is the workspace with a session folder in `.tern/`, `root/home`
/// the HOME of the commands, `root/outside` a folder outside the workspace.
struct World {
    _root: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    home: PathBuf,
    outside: PathBuf,
    session: PathBuf,
    spill: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let root = tempfile::tempdir().unwrap();
        let r = root.path().canonicalize().unwrap();
        let ws = r.join("ws");
        let session = ws.join(".tern/sessions/20260101-000000-abcd");
        let home = r.join("home");
        let outside = r.join("outside");
        for d in [&session, &home, &outside] {
            fs::create_dir_all(d).unwrap();
        }
        fs::write(ws.join(".tern/.gitignore"), "*\n").unwrap();
        for name in STATE_FILES {
            let body = if name == "conversation.jsonl" {
                // Over the guard's 1 MiB copy limit: detected only, restored by the runtime.
                "{\"role\":\"user\",\"content\":\"hi\"}\n".repeat(40_000)
            } else {
                format!("{name} as tern wrote it\n")
            };
            fs::write(session.join(name), body).unwrap();
        }
        fs::write(outside.join("keep.txt"), "outside\n").unwrap();
        World {
            _root: root,
            root: r,
            ws,
            home,
            outside,
            session,
            spill: tempfile::tempdir().unwrap(),
        }
    }

    fn draft(&self) -> PathBuf {
        self.session.join("plan.draft.md")
    }

    fn policy(&self, mode: Mode, no_network: bool) -> Policy {
        Policy {
            mode,
            workspace: self.ws.clone(),
            no_network,
            network_in_namespace: false,
            add_dirs: Vec::new(),
            draft_file: Some(self.draft()),
            tmpdir: None,
        }
    }

    fn prepare(&self, mode: Mode, no_network: bool) -> Prepared {
        sandbox::prepare(&self.policy(mode, no_network))
            .unwrap_or_else(|e| panic!("prepare {mode}: {e}"))
    }

    /// Runs `command` in the workspace under `prepared` (or none), with HOME, PLAN_DRAFT_FILE,
    /// ROOT and WS set.
    fn run_in(&self, prepared: Option<&Prepared>, command: &str) -> BashOutcome {
        let env = [
            ("HOME", self.home.clone().into()),
            ("PLAN_DRAFT_FILE", self.draft().into()),
            ("ROOT", self.root.clone().into()),
            ("WS", self.ws.clone().into()),
            ("SESSION", self.session.clone().into()),
        ];
        let req = BashRequest {
            command,
            timeout: Duration::from_secs(60),
            cwd: &self.ws,
            env: &env,
            env_remove: &[],
            pass_env: &[],
            spill_dir: self.spill.path(),
            groups: &tern::procs::ProcessGroups::new(),
            sandbox: prepared,
            jail: None,
            mcp: None,
            streams: false,
        };
        bash::run(&req, &tern::cancel::CancelToken::new()).expect("bash starts")
    }

    fn run(&self, mode: Mode, no_network: bool, command: &str) -> BashOutcome {
        let p = self.prepare(mode, no_network);
        self.run_in(Some(&p), command)
    }
}

fn allowed_in(mode: Mode, ro: bool, ww: bool, dfa: bool) -> bool {
    match mode {
        Mode::ReadOnly => ro,
        Mode::WorkspaceWrite => ww,
        Mode::DangerFullAccess => dfa,
    }
}

/// Asserts that `out` succeeded or was denied by the sandbox (exit non-zero, "Permission
/// denied" and the mode's line in the content).
fn assert_outcome(case: &str, mode: Mode, out: &BashOutcome, allowed: bool) {
    if allowed {
        assert_eq!(out.exit_code, Some(0), "{case} in {mode}: {}", out.content);
    } else {
        assert_ne!(out.exit_code, Some(0), "{case} in {mode}: {}", out.content);
        assert!(
            out.content.contains("Permission denied"),
            "{case} in {mode}: {}",
            out.content
        );
        assert!(
            out.content
                .contains(&format!("[sandbox {mode}: allows reading everything")),
            "{case} in {mode}: {}",
            out.content
        );
        assert!(
            out.content.trim_end().ends_with(']') && out.content.contains("[exit "),
            "{}",
            out.content
        );
    }
}

#[test]
fn writes_inside_and_outside_per_mode() {
    if !landlock("writes_inside_and_outside_per_mode") {
        return;
    }
    let w = World::new();
    // (case, command, file it creates, allowed in read-only, workspace-write, danger-full-access)
    let real_tmp = std::env::temp_dir().join(format!("tern-sandbox-test-{}", std::process::id()));
    let cases: Vec<(&str, String, PathBuf, [bool; 3])> = vec![
        (
            "write inside the workspace",
            "echo x > \"$WS/src.txt\"".into(),
            w.ws.join("src.txt"),
            [false, true, true],
        ),
        (
            "mkdir inside the workspace",
            "mkdir -p \"$WS/a/b\" && echo x > \"$WS/a/b/c\"".into(),
            w.ws.join("a/b/c"),
            [false, true, true],
        ),
        (
            "write outside the workspace",
            "echo x > \"$ROOT/outside/new.txt\"".into(),
            w.outside.join("new.txt"),
            [false, false, true],
        ),
        (
            "write under $HOME",
            "echo x > \"$HOME/.bashrc\"".into(),
            w.home.join(".bashrc"),
            [false, false, true],
        ),
        (
            "write to the real /tmp",
            format!("echo x > {}", real_tmp.display()),
            real_tmp.clone(),
            [false, false, true],
        ),
    ];
    for mode in MODES {
        for (case, command, file, allowed) in &cases {
            let _ = fs::remove_file(file);
            let out = w.run(mode, false, command);
            let ok = allowed_in(mode, allowed[0], allowed[1], allowed[2]);
            assert_outcome(case, mode, &out, ok);
            assert_eq!(file.exists(), ok, "{case} in {mode}: {}", out.content);
        }
        let _ = fs::remove_file(&real_tmp);
        // Changing what exists outside: truncate, append, remove, rename, link.
        for (case, command) in [
            ("truncate outside", ": > \"$ROOT/outside/keep.txt\""),
            ("append outside", "echo more >> \"$ROOT/outside/keep.txt\""),
            ("remove outside", "rm \"$ROOT/outside/keep.txt\""),
            (
                "rename outside",
                "mv \"$ROOT/outside/keep.txt\" \"$ROOT/outside/moved.txt\"",
            ),
            (
                "symlink outside",
                "ln -s /etc/passwd \"$ROOT/outside/link\"",
            ),
            // A hard link into the workspace would make an outside file writable: refused
            // (Landlock's refer right; EXDEV, "Invalid cross-device link").
            (
                "hard link an outside file into the workspace",
                "ln \"$ROOT/outside/keep.txt\" \"$WS/hardlink\" && echo x >> \"$WS/hardlink\"",
            ),
            (
                "move out of the workspace",
                "echo x > \"$WS/m\" && mv \"$WS/m\" \"$ROOT/outside/m\" || { rm -f \"$WS/m\"; false; }",
            ),
        ] {
            let out = w.run(mode, false, command);
            let ok = mode == Mode::DangerFullAccess;
            if ok {
                assert_eq!(out.exit_code, Some(0), "{case} in {mode}: {}", out.content);
            } else {
                assert_ne!(out.exit_code, Some(0), "{case} in {mode}: {}", out.content);
                assert!(out.content.contains("[sandbox "), "{case}: {}", out.content);
            }
            // Put the outside folder back as it was for the next case.
            let _ = fs::remove_file(w.outside.join("moved.txt"));
            let _ = fs::remove_file(w.outside.join("link"));
            let _ = fs::remove_file(w.outside.join("m"));
            let _ = fs::remove_file(w.ws.join("hardlink"));
            fs::write(w.outside.join("keep.txt"), "outside\n").unwrap();
        }
        // Reading and running stay allowed everywhere.
        let out = w.run(
            mode,
            false,
            "cat \"$ROOT/outside/keep.txt\" /etc/hostname >/dev/null && ls / >/dev/null && /bin/true",
        );
        assert_eq!(out.exit_code, Some(0), "read in {mode}: {}", out.content);
    }
}

#[test]
fn private_tmpdir_and_dev_null() {
    if !landlock("private_tmpdir_and_dev_null") {
        return;
    }
    let w = World::new();
    for mode in [Mode::ReadOnly, Mode::WorkspaceWrite] {
        let p = w.prepare(mode, false);
        let tmp = p.tmpdir().expect("a private TMPDIR").to_path_buf();
        assert!(
            tmp.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("tern-sandbox-"),
            "{}",
            tmp.display()
        );
        let out = w.run_in(
            Some(&p),
            "echo \"$TMPDIR\"; echo data > \"$TMPDIR/f\" && mkdir \"$TMPDIR/d\" && cat \"$TMPDIR/f\" \
             && mktemp >/dev/null && cat <<EOF >/dev/null\n$(head -c 100000 /dev/zero | tr '\\0' x)\nEOF\n\
             echo to-null > /dev/null && echo err >&2 && echo out > /dev/stdout \
             && echo err2 > /dev/stderr",
        );
        assert_eq!(out.exit_code, Some(0), "{mode}: {}", out.content);
        assert!(
            out.content
                .starts_with(&format!("{}\ndata\nerr\nout\nerr2\n", tmp.display())),
            "{mode}: {}",
            out.content
        );
        // What the command left there goes with the Prepared.
        assert!(tmp.join("f").exists());
        drop(p);
        assert!(!tmp.exists(), "{} left behind", tmp.display());
    }
    // danger-full-access keeps the user's TMPDIR: no private folder.
    let p = w.prepare(Mode::DangerFullAccess, false);
    assert!(p.tmpdir().is_none());
    assert!(!p.report().enforced);
}

#[test]
fn the_draft_is_writable_in_every_mode() {
    if !landlock("the_draft_is_writable_in_every_mode") {
        return;
    }
    let w = World::new();
    for mode in MODES {
        let _ = fs::remove_file(w.draft());
        let p = w.prepare(mode, false);
        // A missing draft is created empty for the rule (an empty draft is no draft).
        if mode.is_sandboxed() {
            assert_eq!(fs::read_to_string(w.draft()).unwrap(), "");
        }
        let out = w.run_in(
            Some(&p),
            &format!(
                "printf '# plan ({mode})\\n' > \"$PLAN_DRAFT_FILE\" && echo step >> \"$PLAN_DRAFT_FILE\" && cat \"$PLAN_DRAFT_FILE\""
            ),
        );
        assert_eq!(out.exit_code, Some(0), "{mode}: {}", out.content);
        assert_eq!(
            fs::read_to_string(w.draft()).unwrap(),
            format!("# plan ({mode})\nstep\n")
        );
        // Only that one file: its neighbours in the session folder are not opened up.
        let out = w.run_in(Some(&p), "echo x > \"$SESSION/plan.draft.md.tmp\"");
        let ok = mode != Mode::ReadOnly;
        assert_eq!(out.exit_code == Some(0), ok, "{mode}: {}", out.content);
        let _ = fs::remove_file(w.session.join("plan.draft.md.tmp"));
    }
}

#[test]
fn state_files_are_guarded_in_every_mode() {
    if !landlock("state_files_are_guarded_in_every_mode") {
        return;
    }
    let w = World::new();
    let protected: Vec<PathBuf> = STATE_FILES.iter().map(|n| w.session.join(n)).collect();
    let originals: Vec<Vec<u8>> = protected.iter().map(|p| fs::read(p).unwrap()).collect();
    for mode in MODES {
        for (i, file) in protected.iter().enumerate() {
            let name = STATE_FILES[i];
            for (how, command) in [
                ("overwrite", format!("echo tampered > \"$SESSION/{name}\"")),
                ("append", format!("echo tampered >> \"$SESSION/{name}\"")),
                ("remove", format!("rm \"$SESSION/{name}\"")),
                (
                    "replace by rename",
                    format!("echo new > \"$SESSION/x\" && mv \"$SESSION/x\" \"$SESSION/{name}\""),
                ),
            ] {
                let mut snap = Snapshot::take(&protected);
                let out = w.run(mode, false, &command);
                let changes = snap.changes();
                if mode == Mode::ReadOnly {
                    // Impossible: Landlock refuses the write.
                    assert_ne!(out.exit_code, Some(0), "{how} {name}: {}", out.content);
                    assert!(changes.is_empty(), "{how} {name}: {changes:?}");
                    assert_eq!(fs::read(file).unwrap(), originals[i]);
                    continue;
                }
                // Possible: detected, named, and put back (the large conversation by the runtime).
                assert_eq!(
                    out.exit_code,
                    Some(0),
                    "{how} {name} in {mode}: {}",
                    out.content
                );
                assert_eq!(changes.len(), 1, "{how} {name} in {mode}: {changes:?}");
                assert_eq!(&changes[0].path, file);
                let want = if how == "remove" {
                    ChangeKind::Removed
                } else {
                    ChangeKind::Modified
                };
                assert_eq!(changes[0].kind, want, "{how} {name}");
                let msg = tern::commands::GuardReport {
                    changed: changes.clone(),
                    ..Default::default()
                }
                .to_string();
                assert!(msg.contains(name) && msg.contains("tern's"), "{msg}");
                let outcome = snap.restore(&changes);
                if name == "conversation.jsonl" {
                    assert!(!changes[0].restorable);
                    assert_eq!(outcome[0].1, RestoreOutcome::NeedsRuntime);
                    // The runtime rewrites it from memory, then accepts it.
                    fs::write(file, &originals[i]).unwrap();
                    snap.refresh();
                } else {
                    assert_eq!(outcome[0].1, RestoreOutcome::Restored, "{how} {name}");
                }
                assert_eq!(fs::read(file).unwrap(), originals[i], "{how} {name}");
                assert!(snap.changes().is_empty(), "{how} {name}");
            }
        }
        // A state file created where none was (no plan.md before a confirm) is removed again.
        let extra = w.session.join("plan.md");
        fs::remove_file(&extra).unwrap();
        let mut snap = Snapshot::take(&protected);
        let out = w.run(mode, false, "echo sneaky > \"$SESSION/plan.md\"");
        let changes = snap.changes();
        if mode == Mode::ReadOnly {
            assert_ne!(out.exit_code, Some(0));
            assert!(changes.is_empty());
        } else {
            assert_eq!(changes.len(), 1);
            assert_eq!(changes[0].kind, ChangeKind::Created);
            snap.restore(&changes);
        }
        assert!(!extra.exists());
        fs::write(&extra, &originals[0]).unwrap();
    }
}

#[test]
fn a_background_writer_is_still_sandboxed_and_still_caught() {
    if !landlock("a_background_writer_is_still_sandboxed_and_still_caught") {
        return;
    }
    let w = World::new();
    let ledger = w.session.join("ledger.json");
    let snap = Snapshot::take([&ledger]);
    let out = w.run(
        Mode::WorkspaceWrite,
        false,
        "(sleep 0.3; echo x > \"$ROOT/outside/late\"; echo x >> \"$SESSION/ledger.json\") >/dev/null 2>&1 &",
    );
    assert_eq!(out.exit_code, Some(0), "{}", out.content);
    // Right after the call nothing changed yet: a check after the call alone would miss it.
    assert!(snap.changes().is_empty());
    // The late write inside is caught by a check before the next request (waited for as it
    // lands, after the write outside was tried)...
    assert!(
        crate::support::procs::eventually(Duration::from_secs(20), || snap.changes().len() == 1),
        "the background job never wrote the ledger"
    );
    // ...and the domain outlives the call: the late write outside was still refused.
    assert!(!w.outside.join("late").exists());
}

/// A real listener on 127.0.0.1; the command tries a connect (bash's /dev/tcp) and a bind.
#[test]
fn no_network_blocks_tcp_connect_and_bind() {
    if !landlock("no_network_blocks_tcp_connect_and_bind") {
        return;
    }
    if sandbox::landlock_abi().unwrap_or(0) < sandbox::NETWORK_ABI {
        crate::support::skipped(
            "sandbox::no_network_blocks_tcp_connect_and_bind",
            "no Landlock network rules",
            false,
        );
        return;
    }
    let w = World::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let bind = "exec python3 -c 'import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); print(\"bound\")'";
    let has_python = Command::new("python3").arg("-V").output().is_ok();
    for mode in MODES {
        let out = w.run(mode, false, &connect);
        assert_eq!(out.exit_code, Some(0), "{mode}: {}", out.content);
        assert!(out.content.starts_with("connected"), "{}", out.content);
        // The listener really saw it.
        let mut got = None;
        crate::support::procs::eventually(Duration::from_secs(10), || {
            got = listener.accept().ok();
            got.is_some()
        });
        let (mut s, _) = got.expect("the connect arrived");
        let _ = s.read(&mut [0u8; 1]);

        let out = w.run(mode, true, &connect);
        assert_ne!(
            out.exit_code,
            Some(0),
            "{mode} --no-network: {}",
            out.content
        );
        assert!(out.content.contains("Permission denied"), "{}", out.content);
        assert!(out.content.contains("--no-network"), "{}", out.content);
        assert!(
            listener.accept().is_err(),
            "a connect got through in {mode}"
        );

        if has_python {
            let out = w.run(mode, false, bind);
            assert_eq!(out.exit_code, Some(0), "{mode}: {}", out.content);
            let out = w.run(mode, true, bind);
            assert_ne!(
                out.exit_code,
                Some(0),
                "{mode} --no-network: {}",
                out.content
            );
            assert!(out.content.contains("PermissionError"), "{}", out.content);
        }
        // The network rules do not restrict the filesystem beyond the mode.
        let out = w.run(mode, true, "echo x > \"$WS/net-off.txt\"");
        assert_eq!(
            out.exit_code == Some(0),
            mode != Mode::ReadOnly,
            "{mode}: {}",
            out.content
        );
    }
}

#[test]
fn everyday_tools_still_work_inside() {
    if !landlock("everyday_tools_still_work_inside") {
        return;
    }
    let w = World::new();
    for mode in [Mode::WorkspaceWrite, Mode::DangerFullAccess] {
        let p = w.prepare(mode, false);
        let proj = format!("proj-{}", mode.as_str());
        let out = w.run_in(
            Some(&p),
            &format!(
                "mkdir {proj} && cd {proj} && git init -q && echo hi > a.txt && git add a.txt \
                 && git -c user.name=t -c user.email=t@example.com commit -qm first \
                 && git log --oneline | wc -l && git status --short"
            ),
        );
        assert_eq!(out.exit_code, Some(0), "git in {mode}: {}", out.content);
        assert!(out.content.starts_with("1\n"), "{}", out.content);
    }
    // Read-only still reads a repository.
    let out = w.run(
        Mode::ReadOnly,
        false,
        "cd proj-workspace-write && git log --oneline | wc -l && git diff --stat",
    );
    assert_eq!(out.exit_code, Some(0), "git in read-only: {}", out.content);

    let has = |tool: &str| {
        Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    for mode in MODES {
        if has("python3") {
            let out = w.run(
                mode,
                false,
                "python3 -c 'import json, sys; print(json.dumps([1, 2]))'",
            );
            assert_eq!(out.exit_code, Some(0), "python3 in {mode}: {}", out.content);
            assert!(out.content.starts_with("[1, 2]"), "{}", out.content);
        } else {
            crate::support::skipped(&format!("sandbox: python3 in {mode}"), "no python3", false);
        }
        if !has("cargo") {
            crate::support::skipped(&format!("cargo in {mode}"), "no cargo for this user", false);
            continue;
        }
        // cargo through rustup's proxy needs the real HOME to find its toolchain.
        let real_home = std::env::var("HOME").unwrap_or_default();
        let out = w.run(mode, false, &format!("HOME={real_home:?} cargo --version"));
        assert_eq!(out.exit_code, Some(0), "cargo in {mode}: {}", out.content);
        assert!(out.content.starts_with("cargo "), "{}", out.content);
    }
    // A cargo build in the workspace (offline, no dependencies): target/ is in the workspace.
    let real_home = std::env::var("HOME").unwrap_or_default();
    let out = if !has("cargo") {
        crate::support::skipped("cargo build", "no cargo for this user", false);
        None
    } else {
        Some(w.run(
            Mode::WorkspaceWrite,
            false,
            &format!(
                "export HOME={real_home:?}; cargo new -q --vcs none crate1 && cd crate1 \
             && cargo build -q --offline && ./target/debug/crate1"
            ),
        ))
    };
    if let Some(out) = out {
        assert_eq!(out.exit_code, Some(0), "cargo build: {}", out.content);
        assert!(out.content.starts_with("Hello, world!"), "{}", out.content);
    }
    if has("cc") && has("make") {
        for mode in [Mode::WorkspaceWrite, Mode::DangerFullAccess] {
            let dir = w.ws.join(format!("c-{}", mode.as_str()));
            fs::create_dir_all(&dir).unwrap();
            fs::write(
                dir.join("hello.c"),
                "#include <stdio.h>\nint main(void) { puts(\"hello from c\"); return 0; }\n",
            )
            .unwrap();
            fs::write(
                dir.join("Makefile"),
                "hello: hello.c\n\tcc -O1 -o hello hello.c\n",
            )
            .unwrap();
            let out = w.run(
                mode,
                false,
                &format!("cd {} && make -s && ./hello", dir.display()),
            );
            assert_eq!(out.exit_code, Some(0), "make in {mode}: {}", out.content);
            assert!(out.content.starts_with("hello from c"), "{}", out.content);
        }
        // Read-only: the build cannot write its output.
        let out = w.run(
            Mode::ReadOnly,
            false,
            "cd c-workspace-write && rm -f hello || make -s -B",
        );
        assert_ne!(out.exit_code, Some(0), "{}", out.content);
    } else {
        crate::support::skipped("sandbox: the cc/make build", "no cc or make", false);
    }
}

#[test]
fn report_names_the_abi_and_rights() {
    if !landlock("report_names_the_abi_and_rights") {
        return;
    }
    let abi = sandbox::landlock_abi().unwrap();
    let w = World::new();
    let p = w.prepare(Mode::WorkspaceWrite, abi >= sandbox::NETWORK_ABI);
    let r = p.report();
    assert!(r.enforced);
    assert_eq!(r.kernel_abi, abi);
    for right in [
        "write_file",
        "make_reg",
        "make_dir",
        "remove_file",
        "remove_dir",
        "make_sym",
    ] {
        assert!(r.fs_restricted.iter().any(|x| x == right), "{r:?}");
    }
    assert!(
        !r.fs_restricted
            .iter()
            .any(|x| x == "read_file" || x == "execute"),
        "{r:?}"
    );
    if abi >= 3 {
        assert!(r.fs_restricted.iter().any(|x| x == "truncate"), "{r:?}");
        assert!(r.fs_unrestricted.is_empty(), "{r:?}");
    }
    if abi >= sandbox::NETWORK_ABI {
        assert_eq!(r.net_restricted, ["bind_tcp", "connect_tcp"]);
    }
    assert!(r.writable.contains(&w.ws));
    assert!(r.writable.contains(&PathBuf::from("/dev/null")));
    assert!(r.writable.contains(&w.draft()));
    assert!(r.private_tmpdir);
    let tmp = p.tmpdir().unwrap();
    assert!(!r.writable.iter().any(|x| x == tmp), "{r:?}");
    let text = r.to_string();
    assert!(text.contains(&format!("Landlock ABI {abi}")), "{text}");
    assert!(text.contains("write_file"), "{text}");
    let json = serde_json::to_value(r).unwrap();
    assert_eq!(json["mode"], "workspace-write");
    let back: sandbox::Report = serde_json::from_value(json).unwrap();
    assert_eq!(&back, r);
}

#[test]
fn check_reports_support_and_passes_its_self_test() {
    if !landlock("check_reports_support_and_passes_its_self_test") {
        return;
    }
    let w = World::new();
    let before: Vec<_> = fs::read_dir(&w.ws)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let report = tern::sandbox_check::check(&w.ws, std::path::Path::new(crate::support::cli::TERN));
    let text = report.to_string();
    assert!(report.ok, "{text}");
    assert!(report.self_test.len() >= 4, "{text}");
    assert!(report.self_test.iter().any(|t| !t.should_succeed), "{text}");
    assert!(report.self_test.iter().any(|t| t.should_succeed), "{text}");
    // Issue 42: which construction runs is said (the layer here; the kernel allows it).
    assert_eq!(report.layer, Some(Ok(())), "{text}");
    assert!(
        text.contains("the workspace's layer (overlayfs): yes"),
        "{text}"
    );
    // Issue 29: a test per class of "by construction", each passing here.
    for class in [
        "read a credential inside a toolchain folder",
        "open a pseudo-terminal",
        "the jail's /tmp has a size",
    ] {
        assert!(
            report
                .self_test
                .iter()
                .any(|t| t.name.starts_with(class) && t.passed),
            "{class}: {text}"
        );
    }
    assert!(
        text.contains(&format!("Landlock: ABI {}", report.landlock_abi)),
        "{text}"
    );
    assert!(text.contains("ok  "), "{text}");
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["ok"], true);
    // It leaves nothing behind in the workspace.
    let after: Vec<_> = fs::read_dir(&w.ws)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(before, after);
    println!("{text}");
}

/// The parent half of the refusal tests: reruns this test binary with the debug-build switch
/// set, so only the child process believes Landlock is missing (or has no network rules).
#[test]
fn refuses_without_landlock() {
    if !cfg!(debug_assertions) {
        crate::support::skipped(
            "sandbox::refuses_without_landlock",
            "the test switch exists in debug builds only",
            false,
        );
        return;
    }
    let exe = std::env::current_exe().unwrap();
    for abi in ["0", "3"] {
        let out = Command::new(&exe)
            .args([
                "--exact",
                "sandbox::refusal_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(sandbox::FAKE_ABI_ENV, abi)
            .env("TERN_SANDBOX_REFUSAL_CHILD", abi)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "fake ABI {abi}: {text}");
        assert!(text.contains("refusal child ran"), "fake ABI {abi}: {text}");
    }
}

/// The child half of `refuses_without_landlock`; does nothing unless run by it.
#[test]
fn refusal_child() {
    let Ok(abi) = std::env::var("TERN_SANDBOX_REFUSAL_CHILD") else {
        return;
    };
    let w = World::new();
    if abi == "0" {
        for mode in [Mode::ReadOnly, Mode::WorkspaceWrite] {
            let e = sandbox::prepare(&w.policy(mode, false))
                .unwrap_err()
                .to_string();
            assert!(e.contains("--sandbox danger-full-access"), "{e}");
            assert!(e.contains(mode.as_str()), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
        // --no-network cannot be honoured either, even without a filesystem sandbox.
        let e = sandbox::prepare(&w.policy(Mode::DangerFullAccess, true)).unwrap_err();
        assert!(e.to_string().contains("--no-network"), "{e}");
        // danger-full-access alone runs, unsandboxed (and says so).
        let p = w.prepare(Mode::DangerFullAccess, false);
        assert!(!p.report().enforced);
        let out = w.run_in(Some(&p), "echo x > \"$ROOT/outside/f\"");
        assert_eq!(out.exit_code, Some(0), "{}", out.content);
        let report =
            tern::sandbox_check::check(&w.ws, std::path::Path::new(crate::support::cli::TERN));
        assert!(!report.ok);
        assert!(report.self_test.iter().all(|t| t.passed), "{report}");
        assert!(
            report.to_string().contains("danger-full-access"),
            "{report}"
        );
    } else {
        // ABI 3: files yes, network rules no.
        let e = sandbox::prepare(&w.policy(Mode::WorkspaceWrite, true)).unwrap_err();
        assert!(
            matches!(e, sandbox::SandboxError::NoNetworkRules { abi: 3 }),
            "{e}"
        );
        assert!(!e.to_string().contains('\n'));
        let p = w.prepare(Mode::WorkspaceWrite, false);
        assert_eq!(p.report().kernel_abi, 3);
        let out = w.run_in(Some(&p), "echo x > \"$ROOT/outside/f\"");
        assert_ne!(out.exit_code, Some(0), "{}", out.content);
    }
    println!("refusal child ran (fake ABI {abi})");
}

/// One `Prepared` may serve several calls (the ruleset descriptor is not used up by a
/// restriction): the private TMPDIR then lives as long as it, and every call is restricted.
#[test]
fn one_prepared_serves_several_calls() {
    if !landlock("one_prepared_serves_several_calls") {
        return;
    }
    let w = World::new();
    let p = w.prepare(Mode::WorkspaceWrite, false);
    for round in 0..3 {
        let out = w.run_in(
            Some(&p),
            &format!(
                "echo {round} >> \"$TMPDIR/log\"; wc -l < \"$TMPDIR/log\"; echo x > \"$HOME/f\""
            ),
        );
        assert!(
            out.content.starts_with(&format!("{}\n", round + 1)),
            "round {round}: {}",
            out.content
        );
        assert_ne!(out.exit_code, Some(0), "round {round}: {}", out.content);
        assert!(!w.home.join("f").exists());
    }
}

/// A symlink or hard link planted at `$PLAN_DRAFT_FILE` (say by an earlier unsandboxed session)
/// must not turn the draft's file rule into a way to write `~/.bashrc`.
#[test]
fn a_planted_draft_link_opens_nothing() {
    if !landlock("a_planted_draft_link_opens_nothing") {
        return;
    }
    let w = World::new();
    let bashrc = w.home.join(".bashrc");
    fs::write(&bashrc, "# mine\n").unwrap();
    let dangling = w.home.join("not-yet");
    let keep = w.outside.join("keep.txt");
    for (case, target) in [
        ("symlink", &bashrc),
        ("dangling symlink", &dangling),
        ("hard link", &keep),
    ] {
        let _ = fs::remove_file(w.draft());
        if case == "hard link" {
            fs::hard_link(target, w.draft()).unwrap();
        } else {
            std::os::unix::fs::symlink(target, w.draft()).unwrap();
        }
        let p = w.prepare(Mode::ReadOnly, false);
        let r = p.report();
        assert!(!r.writable.contains(&w.draft()), "{case}: {r:?}");
        assert_eq!(r.notes.len(), 1, "{case}: {r:?}");
        assert!(r.to_string().contains("not made writable"), "{r}");
        // Preparing created nothing at the link's target.
        assert!(!dangling.exists(), "{case}");
        let out = w.run_in(Some(&p), "echo pwned >> \"$PLAN_DRAFT_FILE\"");
        assert_ne!(out.exit_code, Some(0), "{case}: {}", out.content);
        assert!(out.content.contains("Permission denied"), "{}", out.content);
        assert!(!dangling.exists(), "{case}");
    }
    assert_eq!(fs::read_to_string(&bashrc).unwrap(), "# mine\n");
    assert_eq!(fs::read_to_string(&keep).unwrap(), "outside\n");
}

/// Creating device nodes is refused even inside the workspace: as root, a block device node in
/// the workspace would be a way to write the disk.
#[test]
fn device_nodes_are_refused_even_in_the_workspace() {
    if !landlock("device_nodes_are_refused_even_in_the_workspace") {
        return;
    }
    let w = World::new();
    for mode in [Mode::ReadOnly, Mode::WorkspaceWrite] {
        let out = w.run(
            mode,
            false,
            "mknod \"$WS/null2\" c 1 3 && mkfifo \"$WS/fifo\"",
        );
        assert_ne!(out.exit_code, Some(0), "{mode}: {}", out.content);
        assert!(!w.ws.join("null2").exists(), "{mode}");
    }
    // Other special files the workspace may need still work: FIFOs and sockets.
    let out = w.run(
        Mode::WorkspaceWrite,
        false,
        "mkfifo \"$WS/fifo\" && { ! command -v python3 >/dev/null \
         || python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"s.sock\")'; }",
    );
    assert_eq!(out.exit_code, Some(0), "{}", out.content);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let out = w.run(Mode::DangerFullAccess, false, "mknod \"$WS/null2\" c 1 3");
        assert_eq!(
            out.exit_code,
            Some(0),
            "root without a sandbox: {}",
            out.content
        );
    }
}

// ---------------------------------------------------------------- through `tern exec`

/// The guard of the fallback without a jail (`--no-jail`: Landlock alone), where a command can
/// still reach the state folder; in the jail these writes fail (tests/it/jail.rs).
mod through_exec {
    use crate::support::Wire;
    use crate::support::body::result_of;
    use crate::support::cli::WireWs;
    use crate::support::script::{bash, text};

    fn landlock() -> bool {
        let ok = tern::sandbox::landlock_abi().is_ok_and(|a| a > 0);
        if !ok {
            crate::support::skipped(
                "sandbox: a Landlock case",
                "this kernel has no Landlock",
                false,
            );
        }
        ok
    }

    /// A workspace whose session ran one turn, then one more turn in which the model runs
    /// `command` (call id `id`); returns the workspace and that call's tool result.
    fn after_one_command(id: &str, command: &str) -> (WireWs, serde_json::Value) {
        let w = Wire::OpenAi;
        let ws = WireWs::new(w, vec![]);
        ws.ok(&["exec", "--no-jail", "hi"]);
        ws.push(vec![bash(w, id, command), text(w, "done")]);
        ws.ok(&["exec", "--no-jail", "--continue", "run it"]);
        let r = result_of(&ws.events(), id).clone();
        (ws, r)
    }

    /// The model writes each of tern's state files directly with bash: every change is refused
    /// with an error result saying the file is tern's, the file is put back, and the next
    /// request is a valid continuation; writing $PLAN_DRAFT_FILE is fine.
    #[test]
    fn the_model_writing_each_state_file_is_refused_and_undone() {
        if !landlock() {
            return;
        }
        let files = [
            "plan.md",
            "plan.json",
            "ledger.json",
            "conversation.jsonl",
            "system.txt",
            "meta.json",
        ];
        let mut script = vec![];
        for (i, f) in files.iter().enumerate() {
            script.push(bash(
                Wire::OpenAi,
                &format!("w{i}"),
                &format!("echo '{{\"forged\": true}}' > \"$TERN_SESSION_DIR/{f}\"; echo wrote"),
            ));
        }
        script.push(bash(
            Wire::OpenAi,
            "d",
            "echo '1. my plan' > \"$PLAN_DRAFT_FILE\" && echo drafted",
        ));
        script.push(text(Wire::OpenAi, "done"));
        let ws = WireWs::new(Wire::OpenAi, vec![]);
        ws.fake.set_strict(true);
        ws.ok(&["exec", "--no-jail", "hi"]);
        let system = ws.read("system.txt");
        let meta_before = ws.json("meta.json");
        ws.push(script);
        ws.ok(&[
            "exec",
            "--no-jail",
            "--continue",
            "try to change tern's files",
        ]);
        let events = ws.events();
        for (i, f) in files.iter().enumerate() {
            let r = result_of(&events, &format!("w{i}"));
            let c = r["content"].as_str().unwrap_or("");
            assert_eq!(r["is_error"], true, "{f}: {c}");
            assert!(
                c.contains(f) && c.contains("tern's"),
                "{f}: the result names the file: {c}"
            );
        }
        assert_eq!(ws.read("system.txt"), system, "system.txt put back");
        assert_eq!(ws.json("meta.json")["id"], meta_before["id"]);
        // (The commands themselves, quoting the forged text, are in the history, as they should.)
        for line in ws.read("conversation.jsonl").lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("a message line");
            assert!(v["role"].is_string(), "not a message: {line}");
        }
        assert!(!ws.read("plan.json").contains("forged"));
        let d = result_of(&events, "d");
        assert_eq!(d["is_error"], false, "{d}");
        assert_eq!(ws.read("plan.draft.md"), "1. my plan\n");
        // The session is still valid for a strict provider: one more turn runs.
        ws.push(vec![text(Wire::OpenAi, "still fine")]);
        ws.ok(&["exec", "--no-jail", "--continue", "again"]);
    }

    /// With the workspace at the home folder (or `/`), workspace-write keeps nothing out: it is
    /// refused before anything runs (issue 29; it was a warning, found by a new user running
    /// tern in `/`), with `--no-jail` too, and a `--json` run still ends with `result`.
    #[test]
    fn a_home_folder_workspace_is_refused() {
        let w = Wire::OpenAi;
        let ws = WireWs::new(w, vec![text(w, "hi")]);
        let mut cmd = ws.cmd(&["exec", "--no-jail", "--json", "go"]);
        cmd.env("HOME", ws.root());
        let out = crate::support::cli::run(cmd, "");
        assert_eq!(out.code, Some(2), "{out:?}");
        assert!(
            out.stdout.contains("\"type\":\"result\"") && out.stdout.contains("your home folder"),
            "{out:?}"
        );
        // In a project folder, nothing of the kind.
        let ws = WireWs::new(w, vec![text(w, "hi")]);
        let out = crate::support::cli::run(ws.cmd(&["exec", "--no-jail", "--json", "go"]), "");
        assert_eq!(out.code, Some(0), "{out:?}");
        assert!(!out.stdout.contains("your home folder"), "{}", out.stdout);
    }

    /// The private temp folder of a tern that was killed (a command may `kill -9 $PPID`) is
    /// removed by the next tern that prepares a sandbox; a live process's folder is kept.
    #[test]
    fn a_dead_terns_private_tmpdir_is_removed() {
        if !landlock() {
            return;
        }
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let tmp = std::env::temp_dir();
        let stale = tmp.join(format!("{}{dead}-test", tern::sandbox::TMPDIR_PREFIX));
        let live = tmp.join(format!(
            "{}{}-test",
            tern::sandbox::TMPDIR_PREFIX,
            std::process::id()
        ));
        for d in [&stale, &live] {
            std::fs::create_dir_all(d).unwrap();
            std::fs::write(d.join("f"), "x").unwrap();
        }
        let w = Wire::OpenAi;
        let ws = WireWs::new(w, vec![bash(w, "c", "true"), text(w, "done")]);
        ws.ok(&["exec", "--no-jail", "go"]);
        let stale_left = stale.exists();
        let live_left = live.exists();
        let _ = std::fs::remove_dir_all(&live);
        let _ = std::fs::remove_dir_all(&stale);
        assert!(!stale_left, "the dead process's folder is still there");
        assert!(live_left, "a live process's folder was removed");
    }

    /// One session's calls share one private TMPDIR (made once: a `mkdir` per call on a disk
    /// `/tmp` was a tenth of tern's CPU per turn), emptied after each call, so nothing one call
    /// leaves there reaches the next; a folder a command made unusable (`chmod 0`) is replaced;
    /// the folder is gone when tern exits.
    #[test]
    fn the_private_tmpdir_is_emptied_after_each_call() {
        if !landlock() {
            return;
        }
        let w = Wire::OpenAi;
        let ws = WireWs::new(
            w,
            vec![
                bash(
                    w,
                    "a",
                    "echo \"$TMPDIR\"; echo x > \"$TMPDIR/f\"; mkdir \"$TMPDIR/d\"; touch \"$TMPDIR/d/g\"",
                ),
                bash(
                    w,
                    "b",
                    "echo \"$TMPDIR\"; ls -A \"$TMPDIR\" | wc -l; chmod 0 \"$TMPDIR\"",
                ),
                bash(
                    w,
                    "c",
                    "echo \"$TMPDIR\"; ls -A \"$TMPDIR\" | wc -l; echo y > \"$TMPDIR/h\" && echo wrote",
                ),
                text(w, "done"),
            ],
        );
        ws.ok(&["exec", "--no-jail", "go"]);
        let events = ws.events();
        let lines = |id: &str| -> Vec<String> {
            let r = result_of(&events, id);
            assert_eq!(r["is_error"], false, "{id}: {r}");
            r["content"]
                .as_str()
                .unwrap_or("")
                .lines()
                .map(|l| l.trim().to_string())
                .collect()
        };
        let (a, b, c) = (lines("a"), lines("b"), lines("c"));
        assert_eq!(a[0], b[0], "one folder for the session's calls");
        assert_eq!(b[1], "0", "emptied after the first call: {b:?}");
        assert!(a[0].contains(tern::sandbox::TMPDIR_PREFIX), "{a:?}");
        // As root, chmod 0 does not stop tern emptying it; as a user, it is replaced: either
        // way the third call starts empty and can write.
        assert_eq!(c[1], "0", "{c:?}");
        assert_eq!(c[2], "wrote", "{c:?}");
        for dir in [&a[0], &c[0]] {
            assert!(
                !std::path::Path::new(dir).exists(),
                "{dir} is left after tern exited"
            );
        }
    }

    /// A command replaces `$PLAN_DRAFT_FILE` with a symbolic link (found by a new user: every
    /// later turn then failed on "refusing to use plan.draft.md"), or with a folder: tern takes
    /// it away with a warning, never touching the link's target, and the turns go on.
    #[test]
    fn a_draft_replaced_by_a_link_or_folder_is_taken_away() {
        let w = Wire::OpenAi;
        for (label, cmd) in [
            (
                "link",
                "rm -f \"$PLAN_DRAFT_FILE\"; ln -s \"$PWD/target.txt\" \"$PLAN_DRAFT_FILE\"",
            ),
            (
                "folder",
                "rm -f \"$PLAN_DRAFT_FILE\"; mkdir \"$PLAN_DRAFT_FILE\"; echo x > \"$PLAN_DRAFT_FILE/a\"",
            ),
        ] {
            let ws = WireWs::new(w, vec![]);
            std::fs::write(ws.root().join("target.txt"), "keep me\n").unwrap();
            ws.fake.set_strict(true);
            ws.push(vec![bash(w, "l", cmd), text(w, "done")]);
            ws.ok(&["exec", "--no-jail", "--sandbox", "danger-full-access", "go"]);
            let warned = ws.events().iter().any(|e| {
                e["type"] == "warning"
                    && e["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("$PLAN_DRAFT_FILE"))
            });
            assert!(warned, "{label}: no warning");
            ws.push(vec![text(w, "fine")]);
            ws.ok(&["exec", "--no-jail", "--continue", "hi"]);
            ws.ok(&["status"]);
            assert_eq!(
                std::fs::read_to_string(ws.root().join("target.txt")).unwrap(),
                "keep me\n",
                "{label}"
            );
        }
    }

    /// The model removes the whole state folder (`rm -rf .tern`, found by a new user): the
    /// session files are put back, and so are the state folder's `.gitignore` (else git sees the
    /// conversation), `current` and the lease; the result says the event log before it is lost;
    /// `tern status` and the next turn work.
    #[test]
    fn the_model_removing_the_state_folder_is_undone() {
        if !landlock() {
            return;
        }
        let w = Wire::OpenAi;
        let ws = WireWs::new(w, vec![]);
        ws.fake.set_strict(true);
        ws.ok(&["exec", "--no-jail", "hi"]);
        let system = ws.read("system.txt");
        // What cannot be put back is named: an archived file, another session.
        std::fs::write(ws.session().join("archive/conversation-0001.jsonl"), "{}\n").unwrap();
        let other = ws.root().join(".tern/sessions/20200101-000000-0ther");
        std::fs::create_dir_all(&other).unwrap();
        ws.push(vec![
            bash(w, "rm", "rm -rf .tern; echo gone"),
            text(w, "done"),
        ]);
        ws.ok(&["exec", "--no-jail", "--continue", "clean up"]);
        let events = ws.events();
        let r = result_of(&events, "rm");
        let c = r["content"].as_str().unwrap_or("").to_string();
        assert_eq!(r["is_error"], true, "{c}");
        assert!(c.contains("events.jsonl") && c.contains("lost"), "{c}");
        assert!(
            c.contains(
                "cannot put back: archive/conversation-0001.jsonl, sessions/20200101-000000-0ther."
            ),
            "{c}"
        );
        assert!(
            c.contains("tern also recreated") && c.contains(".gitignore") && c.contains("current"),
            "{c}"
        );
        let state = ws.root().join(".tern");
        assert_eq!(
            std::fs::read_to_string(state.join(".gitignore")).unwrap(),
            "*\n"
        );
        let current = std::fs::read_to_string(state.join("current")).unwrap();
        assert_eq!(current.trim(), ws.json("meta.json")["id"].as_str().unwrap());
        assert_eq!(ws.read("system.txt"), system);
        ws.ok(&["status"]);
        ws.push(vec![text(w, "still fine")]);
        ws.ok(&["exec", "--no-jail", "--continue", "again"]);
        // The event log went on without reusing a seq it had given out.
        let seqs: Vec<u64> = ws
            .events()
            .iter()
            .filter_map(|e| e["seq"].as_u64())
            .collect();
        assert!(seqs.windows(2).all(|p| p[0] < p[1]), "{seqs:?}");
    }

    /// A command that swaps a folder on the way to the session for a symbolic link (`.tern/
    /// sessions`, the session's own) gets an error result, and the link is undone: the folder
    /// is back in place and the turn and the verbs go on (found by a new user: tern wrote the
    /// rest of the turn through the link, and every later verb refused the workspace).
    #[test]
    fn a_state_folder_swapped_for_a_link_is_put_back() {
        if !landlock() {
            return;
        }
        let w = Wire::OpenAi;
        let ws = WireWs::new(w, vec![]);
        ws.ok(&["exec", "--no-jail", "hi"]);
        ws.push(vec![
            bash(
                w,
                "ln1",
                "mv .tern/sessions .tern/s2 && ln -s s2 .tern/sessions && echo swapped",
            ),
            bash(
                w,
                "ln2",
                "d=\"$TERN_SESSION_DIR\"; mv \"$d\" \"$d.x\" && ln -s \"$d.x\" \"$d\" && echo swapped",
            ),
            bash(w, "after", "echo next"),
            text(w, "done"),
        ]);
        ws.ok(&["exec", "--no-jail", "--continue", "swap"]);
        let events = ws.events();
        for (id, name) in [("ln1", "sessions (a link)"), ("ln2", " (a link)")] {
            let r = result_of(&events, id);
            let c = r["content"].as_str().unwrap_or("");
            assert_eq!(r["is_error"], true, "{id}: {c}");
            assert!(c.contains(name), "{id}: {c}");
        }
        assert_eq!(result_of(&events, "after")["is_error"], false);
        let state = ws.root().join(".tern");
        for dir in [state.join("sessions"), ws.session()] {
            let m = std::fs::symlink_metadata(&dir).unwrap();
            assert!(
                m.is_dir() && !m.file_type().is_symlink(),
                "{}",
                dir.display()
            );
        }
        assert!(!state.join("s2").exists());
        ws.ok(&["status"]);
        ws.push(vec![text(w, "still fine")]);
        ws.ok(&["exec", "--no-jail", "--continue", "again"]);
    }

    /// Removing the event log alone: the result says it cannot be put back, and never that
    /// tern put it back (found by a new user: the result said both).
    #[test]
    fn a_removed_event_log_is_not_said_to_be_put_back() {
        if !landlock() {
            return;
        }
        let (_ws, r) = after_one_command("ev", "rm \"$TERN_SESSION_DIR/events.jsonl\"");
        let c = r["content"].as_str().unwrap_or("");
        assert_eq!(r["is_error"], true, "{c}");
        assert!(
            c.contains("cannot put it back") && c.contains("earlier events are lost"),
            "{c}"
        );
        assert!(!c.contains("put them back"), "{c}");
    }

    /// A command that writes garbage into `.tern/current` gets an error result and `current`
    /// names the session again (found by a new user: every later verb failed on "current
    /// names \"bogus\"").
    #[test]
    fn a_garbage_current_is_pointed_back() {
        if !landlock() {
            return;
        }
        let (ws, r) = after_one_command("cur", "rm -f .tern/current; echo bogus > .tern/current");
        let c = r["content"].as_str().unwrap_or("");
        assert_eq!(r["is_error"], true, "{c}");
        assert!(c.contains("current"), "{c}");
        let id = ws.json("meta.json")["id"].as_str().unwrap().to_string();
        let current = std::fs::read_to_string(ws.root().join(".tern/current")).unwrap();
        assert_eq!(current.trim(), id);
        ws.ok(&["status"]);
    }

    /// A command that removes only what tern cannot put back (another session, an archived
    /// conversation, a sub-agent's folder) is still caught: its result is an error naming each
    /// (found by a new user: such removals went unsaid).
    #[test]
    fn removing_other_sessions_or_the_archive_is_named() {
        if !landlock() {
            return;
        }
        let w = Wire::OpenAi;
        let ws = WireWs::new(w, vec![]);
        ws.ok(&["exec", "--no-jail", "hi"]);
        let dir = ws.session();
        std::fs::write(dir.join("archive/conversation-0001.jsonl"), "{}\n").unwrap();
        std::fs::create_dir_all(dir.join("agents/20200101-000000-kid1")).unwrap();
        let other = ws.root().join(".tern/sessions/20200101-000000-0ther");
        std::fs::create_dir_all(&other).unwrap();
        ws.push(vec![
            bash(w, "ok", "echo fine > notes.txt; echo x > \"$TMPDIR/t\""),
            bash(
                w,
                "rm",
                "rm -rf .tern/sessions/20200101-000000-0ther \"$TERN_SESSION_DIR\"/archive/* \"$TERN_SESSION_DIR\"/agents/*",
            ),
            text(w, "done"),
        ]);
        ws.ok(&["exec", "--no-jail", "--continue", "clean up"]);
        let events = ws.events();
        let ok = result_of(&events, "ok");
        assert_eq!(ok["is_error"], false, "{ok}");
        let r = result_of(&events, "rm");
        let c = r["content"].as_str().unwrap_or("");
        assert_eq!(r["is_error"], true, "{c}");
        for name in [
            "archive/conversation-0001.jsonl",
            "agents/20200101-000000-kid1",
            "sessions/20200101-000000-0ther",
        ] {
            assert!(c.contains(name), "{name}: {c}");
        }
        assert!(c.contains("They are lost"), "{c}");
    }

    /// read-only: a write in the workspace fails with Permission denied and a line naming the
    /// mode; the mode is in meta.json, in session_start and in the system prompt's one line.
    #[test]
    fn read_only_refuses_workspace_writes_and_says_why() {
        if !landlock() {
            return;
        }
        let ws = WireWs::new(
            Wire::OpenAi,
            vec![
                bash(Wire::OpenAi, "c1", "echo x > made.txt"),
                text(Wire::OpenAi, "done"),
            ],
        );
        ws.ok(&["exec", "--no-jail", "--sandbox", "read-only", "make a file"]);
        assert!(!ws.root().join("made.txt").exists());
        let events = ws.events();
        let c = result_of(&events, "c1")["content"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert!(
            c.contains("Permission denied") && c.contains("read-only"),
            "{c}"
        );
        let start = events
            .iter()
            .find(|e| e["type"] == "session_start")
            .unwrap();
        assert_eq!(start["sandbox"]["mode"], "read-only");
        assert_eq!(ws.json("meta.json")["sandbox"]["mode"], "read-only");
        assert!(
            ws.read("system.txt")
                .contains(tern::policy::Mode::ReadOnly.prompt_line())
        );
        // `tern status` names the mode in its text too (the README says so; only --json did).
        let status = String::from_utf8_lossy(&ws.ok(&["status"]).stdout).into_owned();
        assert!(status.contains("Sandbox: read-only"), "{status}");
        // Resumed with another mode: a declared boundary replaces the line.
        ws.push(vec![text(Wire::OpenAi, "ok")]);
        ws.ok(&[
            "exec",
            "--continue",
            "--sandbox",
            "workspace-write",
            "go on",
        ]);
        let events = ws.events();
        assert!(
            events
                .iter()
                .any(|e| e["type"] == "boundary" && e["kind"] == "sandbox_switch"),
            "no sandbox_switch boundary"
        );
        let sys = ws.read("system.txt");
        assert!(sys.contains(tern::policy::Mode::WorkspaceWrite.prompt_line()));
        assert!(!sys.contains(tern::policy::Mode::ReadOnly.prompt_line()));
    }

    /// A kernel without Landlock: the default mode refuses every command with one line naming
    /// --sandbox danger-full-access; it never runs unsandboxed.
    #[test]
    fn no_landlock_refuses_commands_naming_danger_full_access() {
        if !cfg!(debug_assertions) {
            crate::support::skipped(
                "sandbox::no_landlock_refuses_commands_naming_danger_full_access",
                "the test switch exists in debug builds only",
                false,
            );
            return;
        }
        let ws = WireWs::new(
            Wire::OpenAi,
            vec![
                bash(Wire::OpenAi, "c1", "echo x > made.txt"),
                text(Wire::OpenAi, "done"),
            ],
        );
        let mut cmd = ws.cmd(&["exec", "--no-jail", "make a file"]);
        cmd.env(tern::sandbox::FAKE_ABI_ENV, "0");
        let out = crate::support::cli::run(cmd, "");
        assert_eq!(out.code, Some(0), "{out:?}");
        assert!(!ws.root().join("made.txt").exists());
        let c = result_of(&ws.events(), "c1")["content"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert!(c.contains("--sandbox danger-full-access"), "{c}");
        assert_eq!(ws.json("meta.json")["sandbox"]["enforced"], false);
    }
}

/// Issue 46: `tern sandbox check` run in `/tmp` (a folder shared with every program) fails a
/// test because of the folder, and says so instead of blaming the machine.
#[test]
fn the_check_in_a_shared_folder_blames_the_folder_not_the_machine() {
    let home = tempfile::tempdir().unwrap();
    let mut c = crate::support::cli::tern_clean(home.path());
    c.current_dir("/tmp").args(["sandbox", "check"]);
    let out = crate::support::cli::run_within(c, None, Duration::from_secs(120)).output();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("this workspace is /tmp"), "{text}");
    let last = text.lines().last().unwrap_or("");
    assert!(
        !last.contains("does NOT work as documented on this machine"),
        "{last}"
    );
}
