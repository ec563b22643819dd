//! The jail (issue 17, DESIGN.md §10): each attack of the issue, as the model's scripted command
//! in the default `--sandbox workspace-write`, checked by its effect; and the everyday work that
//! must still pass inside. Real parts: the `tern` binary, the fake provider, real bash, this
//! kernel's namespaces and Landlock. As root here; `.ci/run` runs this module again as an
//! unprivileged user.

use std::path::Path;

use serde_json::Value;

use crate::support::body::tool_result;
use crate::support::cli::{Ws, ok_no_stdin};
use crate::support::files::jsonl;
use crate::support::script::bash;
use crate::support::{FakeServer, Wire, openai_text};

/// Runs `commands` as the model's bash calls, one per answer, in one `tern exec` with `args`,
/// and returns each call's tool result text.
fn run_cmds(ws: &Ws, args: &[&str], commands: &[&str]) -> Vec<String> {
    run_with(ws, args, |_| {}, commands)
}

fn one(ws: &Ws, command: &str) -> String {
    run_cmds(ws, &[], &[command]).remove(0)
}

/// The model's `commands` in one `tern exec` with `args`, tern's environment changed by `setup`
/// (HOME, host-service variables); each call's tool result text.
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

/// `git ARGS` in `dir`, with no system configuration.
fn git_in(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git")
}

fn has_python() -> bool {
    std::process::Command::new("python3")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A process outside the jail with a secret in its environment: no command can read it (its own
/// `/proc` shows only the jail's processes).
#[test]
fn another_process_environment_is_out_of_reach() {
    let ws = Ws::new();
    let secret = "sk-outside-7f3a9c";
    let mut outside = std::process::Command::new("sleep")
        .arg("60")
        .env("SOME_API_KEY", secret)
        .spawn()
        .expect("sleep");
    let pid = outside.id();
    let out = one(
        &ws,
        &format!(
            "cat /proc/{pid}/environ 2>&1 | tr '\\0' '\\n' | rev; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null | rev; ls /proc | grep -c '^[0-9]'"
        ),
    );
    let _ = outside.kill();
    let _ = outside.wait();
    let reversed: String = secret.chars().rev().collect();
    assert!(!out.contains(&reversed) && !out.contains(secret), "{out}");
}

/// Host sockets (tmux's, ssh-agent's, D-Bus's live under /tmp and /run) are not there, and the
/// variables that name them are not passed, even when set for tern.
#[test]
fn host_sockets_and_their_variables_are_out_of_reach() {
    if !has_python() {
        crate::support::skipped(
            "host_sockets_and_their_variables_are_out_of_reach",
            "no python3",
            false,
        );
        return;
    }
    let ws = Ws::new();
    let dir = tempfile::Builder::new()
        .prefix("tern-host-")
        .tempdir_in("/tmp")
        .unwrap();
    let sock = dir.path().join("agent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    listener.set_nonblocking(true).unwrap();
    let sock_s = sock.display().to_string();
    let outs = run_with(
        &ws,
        &[],
        |c| {
            c.env("TMUX", format!("{sock_s},1,0"))
                .env("TMUX_PANE", "%1")
                .env("SSH_AUTH_SOCK", &sock_s)
                .env("DBUS_SESSION_BUS_ADDRESS", format!("unix:path={sock_s}"))
                .env("DISPLAY", ":0");
        },
        &[&format!(
            "env | grep -E '^(TMUX|SSH_AUTH_SOCK|DBUS|DISPLAY)' ; echo vars-done; python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('{sock_s}'); s.send(b'x'); print('CONNECTED')\" 2>&1 | tail -1"
        )],
    );
    let out = &outs[0];
    assert!(out.contains("vars-done"), "{out}");
    for v in ["TMUX", "SSH_AUTH_SOCK", "DBUS", "DISPLAY="] {
        assert!(!out.contains(v), "{v} reached the command: {out}");
    }
    assert!(!out.contains("CONNECTED"), "{out}");
    assert!(
        listener.accept().is_err(),
        "the command reached the host socket: {out}"
    );
}

/// `.git/hooks` and `.git/config` are read-only inside the writable workspace, and `.git` cannot
/// be swapped; `git add` and `git commit` still work.
#[test]
fn git_hooks_and_config_cannot_be_planted_but_commits_work() {
    let ws = Ws::new();
    let git = |args: &[&str]| git_in(ws.path(), args);
    git(&["init", "-q"]);
    let config = std::fs::read(ws.path().join(".git/config")).unwrap();
    let outs = run_cmds(
        &ws,
        &[],
        &[
            "printf '#!/bin/sh\\ntouch /tmp/pwned-hook\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; echo rc=$?",
            "git config core.fsmonitor 'touch /tmp/pwned-fsmonitor'; echo rc=$?; git config core.hooksPath /tmp; echo rc=$?",
            "mv .git .git-old; echo rc=$?; rm -rf .git/hooks; echo rc=$?",
        ],
    );
    assert!(
        !ws.path().join(".git/hooks/pre-commit").exists(),
        "{outs:?}"
    );
    assert_eq!(
        std::fs::read(ws.path().join(".git/config")).unwrap(),
        config,
        "{outs:?}"
    );
    // The door holds each back and says why (the model's own view keeps what it did).
    assert!(outs[0].contains(".git/hooks/pre-commit"), "{outs:?}");
    assert!(outs[1].contains(".git/config"), "{outs:?}");
    assert!(
        ws.path().join(".git/hooks").is_dir() && !ws.path().join(".git-old").exists(),
        "{outs:?}"
    );
    // The next session's jail sees the repository as the person has it, and commits reach it.
    let outs = run_cmds(
        &ws,
        &[],
        &[
            "echo hi > a.txt && git add a.txt && git -c user.name=t -c user.email=t@t commit -qm first && git log --oneline | wc -l",
        ],
    );
    assert!(outs[0].starts_with('1'), "commit failed: {outs:?}");
    let log = git(&["log", "--format=%s"]);
    assert_eq!(String::from_utf8_lossy(&log.stdout).trim(), "first");
    assert!(git(&["status", "--short"]).status.success());
}

/// Under `--no-network` no socket family reaches the host: TCP (IPv4 and IPv6), UDP, and
/// multipath TCP (protocol 262) to listeners on the host's loopback all fail; loopback inside the
/// jail still works.
#[test]
fn no_network_leaves_no_family_to_the_host() {
    if !has_python() {
        crate::support::skipped(
            "no_network_leaves_no_family_to_the_host",
            "no python3",
            false,
        );
        return;
    }
    let ws = Ws::new();
    let tcp4 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    tcp4.set_nonblocking(true).unwrap();
    let tcp6 = std::net::TcpListener::bind("[::1]:0").ok();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let p4 = tcp4.local_addr().unwrap().port();
    let p6 = tcp6
        .as_ref()
        .map(|l| l.local_addr().unwrap().port())
        .unwrap_or(1);
    let pu = udp.local_addr().unwrap().port();
    let script = format!(
        r#"python3 - <<'EOF'
import socket
def tryit(name, fam, typ, proto, addr):
    try:
        s = socket.socket(fam, typ, proto)
        s.settimeout(2)
        s.connect(addr)
        s.send(b'x')
        print(name, 'SENT')
    except Exception as e:
        print(name, 'refused', type(e).__name__)
tryit('tcp4', socket.AF_INET, socket.SOCK_STREAM, 0, ('127.0.0.1', {p4}))
tryit('tcp6', socket.AF_INET6, socket.SOCK_STREAM, 0, ('::1', {p6}))
tryit('mptcp', socket.AF_INET, socket.SOCK_STREAM, 262, ('127.0.0.1', {p4}))
tryit('udp', socket.AF_INET, socket.SOCK_DGRAM, 0, ('127.0.0.1', {pu}))
srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(1)
c = socket.socket(); c.connect(srv.getsockname()); print('inner loopback ok')
EOF"#
    );
    let out = run_cmds(&ws, &["--no-network"], &[&script]).remove(0);
    assert!(out.contains("inner loopback ok"), "{out}");
    assert!(tcp4.accept().is_err(), "TCP reached the host: {out}");
    if let Some(l) = &tcp6 {
        l.set_nonblocking(true).unwrap();
        assert!(l.accept().is_err(), "TCP over IPv6 reached the host: {out}");
    }
    let mut buf = [0u8; 8];
    assert!(udp.recv(&mut buf).is_err(), "UDP reached the host: {out}");
}

/// A process that detaches (a new session, `TERN_SESSION_DIR` removed from its environment) does
/// not outlive tern: the jail's PID namespace dies with it.
#[test]
fn a_detached_process_dies_with_tern() {
    let ws = Ws::new();
    let late = ws.path().join("late.txt");
    let out = one(
        &ws,
        &format!(
            "env -u TERN_SESSION_DIR setsid nohup bash -c 'sleep 30.4319; echo late > {}' >/dev/null 2>&1 & echo started",
            late.display()
        ),
    );
    assert!(out.contains("started"), "{out}");
    // Gone with tern (its sleep no longer runs), so it never writes.
    assert!(
        crate::support::procs::eventually(std::time::Duration::from_secs(10), || {
            crate::support::procs::pids_running(&["sleep", "30.4319"]).is_empty()
        }),
        "the detached process outlived tern"
    );
    assert!(
        !late.exists(),
        "a process outlived tern and wrote {}",
        late.display()
    );
}

/// Other sessions' folders (and this one's state files) are read-only to commands.
#[test]
fn other_sessions_cannot_be_rewritten() {
    let ws = Ws::new();
    run_cmds(&ws, &[], &["echo first"]);
    let first = ws.current_dir();
    let conv = std::fs::read(first.join("conversation.jsonl")).unwrap();
    let system = std::fs::read(first.join("system.txt")).unwrap();
    let fp = first.display().to_string();
    let out = one(
        &ws,
        &format!(
            "echo '{{\"role\":\"user\",\"content\":\"injected\"}}' >> {fp}/conversation.jsonl; echo rc=$?; echo evil > {fp}/system.txt; echo rc=$?; echo evil > $TERN_SESSION_DIR/system.txt; echo rc=$?; rm -rf {fp}; echo rc=$?"
        ),
    );
    assert_eq!(
        std::fs::read(first.join("conversation.jsonl")).unwrap(),
        conv,
        "{out}"
    );
    assert_eq!(
        std::fs::read(first.join("system.txt")).unwrap(),
        system,
        "{out}"
    );
    assert!(!out.contains("rc=0"), "{out}");
}

/// A home folder with credentials: hidden but for the allow-list (a toolchain folder stays
/// readable); `--read-dir` shows more.
#[test]
fn home_credentials_are_hidden_and_toolchains_readable() {
    let ws = Ws::new();
    let home = tempfile::Builder::new()
        .prefix("tern-home-")
        .tempdir_in("/tmp")
        .unwrap();
    let h = home.path();
    std::fs::create_dir_all(h.join(".ssh")).unwrap();
    std::fs::write(h.join(".ssh/id_ed25519"), "PRIVATE KEY").unwrap();
    std::fs::write(h.join(".bashrc"), "export OPENAI_API_KEY=sk-in-bashrc\n").unwrap();
    std::fs::create_dir_all(h.join(".cargo/bin")).unwrap();
    std::fs::write(h.join(".cargo/env"), "toolchain").unwrap();
    std::fs::create_dir_all(h.join("notes")).unwrap();
    std::fs::write(h.join("notes/todo.txt"), "private notes").unwrap();
    std::fs::create_dir_all(h.join(".config/tern")).unwrap();
    std::fs::write(
        h.join(".config/tern/config.json"),
        "{\"api_key\":\"sk-config\"}",
    )
    .unwrap();
    // As `tern setup` writes it: mode 0600 (tern refuses a key file others can read).
    std::fs::set_permissions(
        h.join(".config/tern/config.json"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let hs = h.display().to_string();
    let outs = run_with(
        &ws,
        &[],
        |c| {
            c.env("HOME", h);
        },
        &[&format!(
            "cat {hs}/.ssh/id_ed25519; cat {hs}/.bashrc; cat {hs}/notes/todo.txt; cat {hs}/.config/tern/config.json; cat {hs}/.cargo/env; echo; echo \"home=$HOME\""
        )],
    );
    let out = &outs[0];
    assert!(!out.contains("PRIVATE KEY"), "{out}");
    assert!(!out.contains("sk-in-bashrc"), "{out}");
    assert!(!out.contains("private notes"), "{out}");
    assert!(!out.contains("sk-config"), "{out}");
    assert!(out.contains("toolchain"), "{out}");
    let read_dir = h.join("notes").display().to_string();
    let outs = run_with(
        &ws,
        &["--read-dir", &read_dir],
        |c| {
            c.env("HOME", h);
        },
        &[&format!(
            "cat {hs}/notes/todo.txt; echo > {hs}/notes/x; echo rc=$?"
        )],
    );
    assert!(outs[0].contains("private notes"), "{outs:?}");
    assert!(
        !h.join("notes/x").exists(),
        "--read-dir is read-only: {outs:?}"
    );
}

/// What namespaces leave open is closed by seccomp: a new user namespace, `TIOCSTI` on a
/// terminal, the keyrings.
#[test]
fn seccomp_closes_what_namespaces_leave_open() {
    let ws = Ws::new();
    let mut cmds = vec![
        "unshare -U true; echo unshare=$?",
        "keyctl show 2>&1 | head -1; echo",
    ];
    let tiocsti = "python3 -c \"import os, fcntl, termios; fd = os.open('/dev/ptmx', os.O_RDWR | os.O_NOCTTY); fcntl.ioctl(fd, termios.TIOCSTI, b'x'); print('TYPED')\" 2>&1 | tail -1";
    if has_python() {
        cmds.push(tiocsti);
    }
    let vsock = "python3 -c \"import socket; socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM); print('VSOCK OPEN')\" 2>&1 | tail -1";
    let uring = "python3 -c \"import ctypes; libc = ctypes.CDLL(None, use_errno=True); p = ctypes.create_string_buffer(120); print('uring', libc.syscall(425, 8, p), ctypes.get_errno())\"";
    if has_python() {
        cmds.extend([vsock, uring]);
    }
    let outs = run_cmds(&ws, &[], &cmds);
    assert!(outs[0].contains("unshare=1"), "{outs:?}");
    if has_python() {
        assert!(!outs[2].contains("TYPED"), "{outs:?}");
        // Issue 29: vsock is not namespaced, io_uring bypasses seccomp's view: both refused.
        assert!(!outs[3].contains("VSOCK OPEN"), "{outs:?}");
        assert!(outs[4].contains("uring -1 1"), "EPERM: {outs:?}");
    }
}

/// A pseudo-terminal opens inside the jail (issue 29: test runners and REPL tools need one): the
/// jail's own devpts, never the host's terminals.
#[test]
fn a_pty_opens_inside_the_jail() {
    let ws = Ws::new();
    let mut cmds = vec!["script -qc 'echo inside-a-pty' /dev/null"];
    if has_python() {
        cmds.push("python3 -c \"import os; m, s = os.openpty(); print('pty', os.ttyname(s))\"");
    }
    let outs = run_cmds(&ws, &[], &cmds);
    assert!(outs[0].contains("inside-a-pty"), "{outs:?}");
    if has_python() {
        assert!(outs[1].contains("pty /dev/pts/"), "{outs:?}");
    }
}

/// Everyday work inside: a background server reached by a later command, and files in the
/// workspace.
#[test]
fn a_background_server_serves_later_commands() {
    if !has_python() {
        crate::support::skipped(
            "a_background_server_serves_later_commands",
            "no python3",
            false,
        );
        return;
    }
    let ws = Ws::new();
    std::fs::write(ws.path().join("index.txt"), "served-content").unwrap();
    let outs = run_cmds(
        &ws,
        &["--no-network"],
        &[
            "python3 -m http.server 18765 --bind 127.0.0.1 >/dev/null 2>&1 & sleep 1; echo started",
            "python3 -c \"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:18765/index.txt').read().decode())\"",
        ],
    );
    assert!(outs[1].contains("served-content"), "{outs:?}");
}

#[test]
fn smoke_commands_run_in_the_jail() {
    let ws = Ws::new();
    let out = one(&ws, "echo pid=$$; id -u; touch made.txt && echo made");
    assert!(out.contains("pid=2\n"), "{out}");
    assert!(ws.path().join("made.txt").exists());
    let _ = Path::new("/");
}

/// Where the kernel refuses the jail (a test switch stands in for it), a sandboxed mode refuses
/// every command in one line naming both choices, and never runs it with fewer layers.
#[test]
fn a_refused_jail_refuses_commands_and_names_the_choices() {
    let ws = Ws::new();
    let outs = run_with(
        &ws,
        &[],
        |c| {
            c.env(tern::sandbox::jail::FAKE_REFUSAL_ENV, "1");
        },
        &["touch ran.txt", "touch ran2.txt"],
    );
    assert!(!ws.path().join("ran.txt").exists() && !ws.path().join("ran2.txt").exists());
    for o in &outs {
        assert!(
            o.contains("--no-jail") && o.contains("--sandbox danger-full-access"),
            "{o}"
        );
        assert!(!o.contains('\n'), "one line: {o}");
    }
    // --no-jail: Landlock alone runs it.
    let outs = run_with(
        &ws,
        &["--no-jail"],
        |c| {
            c.env(tern::sandbox::jail::FAKE_REFUSAL_ENV, "1");
        },
        &["touch ran.txt && echo ok"],
    );
    assert!(outs[0].contains("ok"), "{outs:?}");
}

/// `--env NAME` passes one more variable; a door out of the sandbox cannot be passed.
#[test]
fn env_allow_list_and_its_refusals() {
    let ws = Ws::new();
    let outs = run_with(
        &ws,
        &["--env", "MY_SETTING"],
        |c| {
            c.env("MY_SETTING", "visible")
                .env("OTHER_SETTING", "hidden");
        },
        &["echo \"[$MY_SETTING][$OTHER_SETTING]\""],
    );
    assert!(outs[0].contains("[visible][]"), "{outs:?}");
    let fake = FakeServer::start(vec![openai_text("never")]);
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "--env", "SSH_AUTH_SOCK", "go"]);
    let out = crate::support::cli::run_no_stdin(cmd);
    assert_eq!(out.code, Some(2), "{:?}", out.stderr);
    assert!(out.stderr.contains("SSH_AUTH_SOCK"), "{}", out.stderr);
}

/// Normal work with the network on: a virtual environment in the workspace and a package
/// installed into it (from the package index, as a person would; skipped without python3's venv
/// or the index).
#[test]
fn venv_and_pip_install_work_inside() {
    if std::process::Command::new("python3")
        .args(["-c", "import ensurepip"])
        .output()
        .map_or(true, |o| !o.status.success())
    {
        crate::support::skipped("venv_and_pip_install_work_inside", "no python3 venv", false);
        return;
    }
    let ws = Ws::new();
    let outs = run_cmds(
        &ws,
        &[],
        &[
            "python3 -m venv .venv && .venv/bin/pip install --quiet --disable-pip-version-check six==1.16.0 2>&1 | tail -2; .venv/bin/python -c 'import six; print(\"six\", six.__version__)'",
        ],
    );
    if outs[0].contains("Could not find a version")
        || outs[0].contains("Network is unreachable")
        || outs[0].contains("Temporary failure in name resolution")
    {
        crate::support::skipped(
            "venv_and_pip_install_work_inside",
            &format!("no package index here: {}", outs[0]),
            false,
        );
        return;
    }
    assert!(outs[0].contains("six 1.16.0"), "{outs:?}");
}

/// `cargo build` of a small crate: with the toolchain folders shown as they are (read-only:
/// cargo's binaries and caches), and with `--add-dir` for cargo's home (its registry cache and
/// lock live there); skipped where this user has no cargo.
#[test]
fn cargo_build_works_with_the_toolchain_folders_shown() {
    let Some(cargo_home) = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .filter(|p| p.join("bin/cargo").exists())
    else {
        crate::support::skipped(
            "cargo_build_works_with_the_toolchain_folders_shown",
            "no cargo home",
            false,
        );
        return;
    };
    let home = cargo_home.parent().unwrap_or(Path::new("/")).to_path_buf();
    let add = cargo_home.display().to_string();
    for extra in [&[][..], &["--add-dir", add.as_str()][..]] {
        let ws = Ws::new();
        let outs = run_with(
            &ws,
            extra,
            |c| {
                c.env("HOME", &home);
                for v in ["RUSTUP_HOME", "CARGO_HOME"] {
                    if let Some(x) = std::env::var_os(v) {
                        c.env(v, x);
                    }
                }
            },
            &[
                "cargo new -q --vcs none hello && cd hello && cargo build -q --offline 2>&1 | tail -3; ./target/debug/hello",
            ],
        );
        assert!(outs[0].contains("Hello, world!"), "{extra:?}: {outs:?}");
    }
}

/// `$PLAN_DRAFT_FILE` stays writable in the jail after tern replaces it (PlanConfirm moves the
/// draft away and makes a new, empty one): the next command of the same turn writes the new file.
#[test]
fn the_draft_stays_writable_after_a_confirm() {
    use crate::support::script::call;
    let ws = Ws::new();
    let fake = FakeServer::start(vec![
        bash(
            Wire::OpenAi,
            "c0",
            "printf '1. first step\\n' > \"$PLAN_DRAFT_FILE\" && echo wrote",
        ),
        call(Wire::OpenAi, "c1", "plan_confirm", serde_json::json!({})),
        openai_text("Summary: the plan was drafted."),
        bash(
            Wire::OpenAi,
            "c2",
            "printf '1. next plan\\n' > \"$PLAN_DRAFT_FILE\" && echo again=$?",
        ),
        openai_text("done"),
    ]);
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "plan it"]);
    ok_no_stdin(cmd);
    let dir = ws.current_dir();
    let conv: Vec<Value> = jsonl(&dir.join("conversation.jsonl"));
    let c2 = tool_result(&conv, "c2")["content"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(c2.contains("again=0"), "{c2}");
    assert_eq!(
        std::fs::read_to_string(dir.join("plan.draft.md")).unwrap(),
        "1. next plan\n"
    );
    assert!(
        std::fs::read_to_string(dir.join("plan.md"))
            .unwrap()
            .contains("first step")
    );
}

/// The fallback without a jail (`--no-jail`) guards other sessions too: a command that rewrites
/// another session's history is named in its result (never silently), as tern cannot put it back.
#[test]
fn without_the_jail_the_guard_names_other_sessions_rewritten() {
    let ws = Ws::new();
    run_cmds(&ws, &[], &["echo first"]);
    let first = ws.current_dir();
    let id = ws.current_id();
    let fp = first.display().to_string();
    let outs = run_cmds(
        &ws,
        &["--no-jail"],
        &[&format!(
            "echo '{{\"role\":\"user\",\"content\":\"injected\"}}' >> {fp}/conversation.jsonl; echo wrote"
        )],
    );
    assert!(
        outs[0].contains(&id) && outs[0].contains("conversation.jsonl"),
        "{outs:?}"
    );
    assert!(outs[0].contains("other sessions"), "{outs:?}");
}

/// A jail killed from outside (the OOM killer, a person's `kill`) is replaced at the next
/// command: the killed command ends, the next one runs in a new jail.
#[test]
fn a_killed_jail_is_replaced_at_the_next_command() {
    let ws = Ws::new();
    let ready = ws.path().join("ready");
    let marker = format!("{}.{}", 30, std::process::id());
    let killer = {
        let ready = ready.clone();
        let marker = marker.clone();
        std::thread::spawn(move || {
            // Wait for the sleep itself (a loaded machine can take a while). `ready` is written
            // in the command's layer: it reaches the workspace only through the door, after
            // the command, so it is not waited for here.
            let _ = &ready;
            let ok = crate::support::procs::eventually(std::time::Duration::from_secs(30), || {
                !crate::support::procs::pids_running(&["sleep", &marker]).is_empty()
            });
            assert!(ok, "the first command never started");
            // The sleep's parent chain on the host: sleep → bash → the jail's init.
            let sleep = crate::support::procs::pids_running(&["sleep", &marker]);
            let ppid = |pid: u32| -> Option<u32> {
                let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                st[st.rfind(')')? + 1..]
                    .split_whitespace()
                    .nth(1)?
                    .parse()
                    .ok()
            };
            let init = sleep.first().and_then(|p| ppid(*p)).and_then(ppid);
            let init = init.expect("the jail's init");
            // SAFETY: kill(2) of the jail's init, found above.
            unsafe { libc::kill(init as i32, libc::SIGKILL) };
        })
    };
    let outs = run_cmds(
        &ws,
        &[],
        &[
            &format!("touch {}; sleep {marker}; echo slept", ready.display()),
            "echo second-ran",
        ],
    );
    killer.join().unwrap();
    assert!(!outs[0].contains("slept"), "{outs:?}");
    assert!(outs[1].contains("second-ran"), "{outs:?}");
}

/// Found by a new user: `.git/commondir` (and `config.worktree`) redirect git to another folder's
/// config and hooks. Since issue 29 the jail's git works on a shadow of `.git`: what a command
/// plants there never reaches the repository, so the person's next `git status` runs nothing.
#[test]
fn a_planted_git_commondir_never_reaches_the_repository() {
    let ws = Ws::new();
    let git = |args: &[&str]| git_in(ws.path(), args);
    git(&["init", "-q"]);
    let marker = ws.path().join("pwned-commondir");
    let outs = run_cmds(
        &ws,
        &[],
        &[&format!(
            "cp -r .git evilc && git config -f evilc/config core.fsmonitor 'touch {}; false' && echo ../evilc > .git/commondir && echo planted",
            marker.display()
        )],
    );
    assert!(outs[0].contains("planted"), "{outs:?}");
    assert!(!ws.path().join(".git/commondir").exists());
    git(&["status", "--short"]);
    assert!(
        !marker.exists(),
        "the person's git status ran a planted command"
    );
}

/// Found by a new user: an abstract UNIX socket of the host (D-Bus, X11 use them) is not
/// reachable from a command (Landlock's scoping, ABI 6), even with the network on.
#[test]
fn a_host_abstract_socket_is_out_of_reach() {
    if !has_python() || tern::sandbox::landlock_abi().unwrap_or(0) < 6 {
        crate::support::skipped(
            "a_host_abstract_socket_is_out_of_reach",
            "needs python3 and Landlock ABI 6",
            false,
        );
        return;
    }
    use std::os::linux::net::SocketAddrExt;
    let name = format!("tern-test-abstract-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    let ws = Ws::new();
    let out = one(
        &ws,
        &format!(
            "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('\\0{name}'); print('CONNECTED')\" 2>&1 | tail -1"
        ),
    );
    assert!(!out.contains("CONNECTED"), "{out}");
    assert!(
        listener.accept().is_err(),
        "the command reached the host's abstract socket: {out}"
    );
}

/// Found by a new user: a fork bomb stops at the jail's process limit instead of filling the
/// host's process table; the command ends and the next one runs.
#[test]
fn a_fork_bomb_stops_at_the_process_limit() {
    let ws = Ws::new();
    let outs = run_cmds(
        &ws,
        &[],
        &[
            "ulimit -u",
            // Bounded twice over: the limit, and a loop that stops by itself.
            "for i in $(seq 1 6000); do sleep 5 & done 2>&1 | grep -c -i 'resource temporarily unavailable\\|fork'; echo forked",
            "echo next-ran",
        ],
    );
    assert!(
        outs[0].starts_with(&tern::sandbox::jail::init::MAX_PROCESSES.to_string()),
        "{outs:?}"
    );
    assert!(outs[2].contains("next-ran"), "{outs:?}");
}

/// Found by a new user: a nested repository the command registers as a submodule carries its own
/// `.git/config` (a `core.fsmonitor`) into the person's next `git status`. With the door, the
/// nested repository's `.git` is a new repository: kept aside, never applied, said to the model
/// and to the person (a `door` event naming it); the person's `git status` runs nothing.
#[test]
fn a_submodule_added_by_a_command_is_named() {
    let ws = Ws::new();
    git_in(ws.path(), &["init", "-q"]);
    let marker = ws.path().join("pwned-submodule");
    let outs = run_cmds(
        &ws,
        &[],
        &[
            "echo first",
            &format!(
                "git init -q sub && cd sub && git config core.fsmonitor 'touch {}; false' && echo x > f && git add f && git -c user.email=a@b -c user.name=a commit -qm s && cd .. && git add sub && echo added",
                marker.display()
            ),
        ],
    );
    assert!(!outs[0].contains("sub"), "{outs:?}");
    assert!(outs[1].contains("added"), "{outs:?}");
    assert!(
        outs[1].contains("sub/.git") && outs[1].contains("new repository"),
        "{outs:?}"
    );
    assert!(!ws.path().join("sub/.git").exists());
    let events = jsonl(&ws.current_dir().join("events.jsonl"));
    assert!(
        events.iter().any(|e| e["type"] == "door"
            && e["held"][0]["path"] == "sub/.git"
            && e["held"][0]["n"].as_u64() > Some(0)),
        "the person is told"
    );
    // The model's own git ran its fsmonitor in the jail (its marker is the model's work);
    // the person's must not.
    let _ = std::fs::remove_file(&marker);
    let st = git_in(ws.path(), &["status", "--short"]);
    assert!(st.status.success());
    assert!(!marker.exists(), "the model's fsmonitor ran as the person");
}

/// Found by a new user: `--add-dir DIR` makes DIR writable (the jail's view and Landlock's
/// rules both), `--no-jail` too; `--add-dir /` is refused.
#[test]
fn add_dir_is_writable_and_the_root_is_refused() {
    let ws = Ws::new();
    let extra = tempfile::Builder::new()
        .prefix("tern-add-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let x = extra.path().display().to_string();
    for args in [
        vec!["--add-dir", x.as_str()],
        vec!["--add-dir", x.as_str(), "--no-jail"],
    ] {
        let outs = run_cmds(&ws, &args, &[&format!("echo hi > {x}/made && echo wrote")]);
        assert!(outs[0].contains("wrote"), "{args:?}: {outs:?}");
        assert!(extra.path().join("made").exists());
        std::fs::remove_file(extra.path().join("made")).unwrap();
    }
    let fake = FakeServer::start(vec![openai_text("never")]);
    let mut cmd = ws.tern(&fake);
    cmd.args(["exec", "--add-dir", "/", "go"]);
    let out = crate::support::cli::run_no_stdin(cmd);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
}

/// Found by a new user: a project's `.tern/config.json` (a cloned repository can ship one) may
/// not turn the sandbox off or decide approvals.
#[test]
fn a_project_config_cannot_widen_the_sandbox_or_approval() {
    for body in [
        r#"{"sandbox": "danger-full-access"}"#,
        r#"{"approval": "auto"}"#,
    ] {
        let ws = Ws::new();
        std::fs::write(ws.path().join(".tern/config.json"), body).unwrap();
        let fake = FakeServer::start(vec![
            bash(Wire::OpenAi, "c0", "touch /var/tmp/tern-escaped-$PPID"),
            openai_text("done"),
        ]);
        let mut cmd = ws.tern(&fake);
        cmd.args(["exec", "go"]);
        let out = crate::support::cli::run_no_stdin(cmd);
        assert_ne!(out.code, Some(0), "{body}: {}", out.stderr);
        assert!(
            out.stderr.contains("project's config"),
            "{body}: {}",
            out.stderr
        );
        assert!(fake.requests().is_empty(), "{body}: ran anyway");
    }
}
