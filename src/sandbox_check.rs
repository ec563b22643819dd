//! `tern sandbox check`: what this machine supports, and a self-test through the real bash tool.

use std::fmt;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::policy::Mode;
use crate::sandbox::{NETWORK_ABI, Policy, Probe, Report, kernel_abi, prepare};
use crate::tools::bash;

/// One self-test: a real sandboxed `bash -c` and whether it did what the sandbox promises.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SelfTest {
    /// What was tried, e.g. "write outside the workspace (workspace-write)".
    pub name: String,
    /// The sandbox should let it succeed.
    pub should_succeed: bool,
    /// It succeeded.
    pub succeeded: bool,
    /// `should_succeed == succeeded`.
    pub passed: bool,
    /// The command's output, or why it could not run (one line).
    pub detail: String,
    /// Not tried here (no folder outside the workspace exists: it is `/`): proves nothing.
    pub skipped: bool,
}

/// What [`check`] found. `Display` is the short human report; serde gives the JSON.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    /// `std::env::consts::OS`.
    pub os: String,
    /// The kernel's Landlock ABI (0: none).
    pub landlock_abi: u8,
    /// Why there is no Landlock, when there is none.
    pub landlock_missing: Option<String>,
    /// The kernel has Landlock network rules (ABI ≥ 4), so `--no-network` can run.
    pub network_rules: bool,
    /// The effective rules of workspace-write with `--no-network` when supported (else without),
    /// as every command would get them.
    pub rules: Option<Report>,
    /// The jail's layers (user, PID, mount, IPC namespaces; seccomp), or why this machine
    /// refuses it.
    pub jail: Result<crate::sandbox::jail::Layers, String>,
    /// Which construction runs in workspace-write (DESIGN §10): `Ok` the workspace's layer
    /// (commands write a layer, tern applies it through its door), `Err` why the kernel refused
    /// it (the bind walls run instead); None: not tried (no jail).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer: Option<Result<(), String>>,
    /// The self-tests, in order.
    pub self_test: Vec<SelfTest>,
    /// Landlock is there and every self-test passed.
    pub ok: bool,
    /// Why this workspace makes a test fail (it is `/tmp`, the home folder, …): the check was
    /// run where tern refuses workspace-write; said first so a failure has its cause.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace_note: Option<String>,
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(n) = &self.workspace_note {
            writeln!(f, "note: {n}")?;
        }
        match &self.landlock_missing {
            None => writeln!(
                f,
                "Landlock: ABI {} on {}; network rules (--no-network): {}",
                self.landlock_abi,
                self.os,
                if self.network_rules { "yes" } else { "no" }
            )?,
            Some(why) => writeln!(
                f,
                "Landlock: none on {} ({why}); read-only and workspace-write refuse to run commands, --sandbox danger-full-access runs them unsandboxed",
                self.os
            )?,
        }
        match &self.jail {
            Ok(l) => writeln!(
                f,
                "jail: user namespace {}, PID namespace {}, mount namespace {}, IPC namespace {}, network namespace under --no-network {}, seccomp {}{}",
                yes(l.user_ns),
                yes(l.pid_ns),
                yes(l.mount_ns),
                yes(l.ipc_ns),
                yes(l.net_ns),
                yes(l.seccomp),
                l.notes.iter().map(|n| format!("; {n}")).collect::<String>()
            )?,
            Err(e) => writeln!(
                f,
                "jail: refused ({e}); sandboxed modes refuse commands unless --no-jail (Landlock alone) or --sandbox danger-full-access"
            )?,
        }
        match &self.layer {
            Some(Ok(())) => writeln!(
                f,
                "the workspace's layer (overlayfs): yes; commands write a layer, tern applies it to the workspace through its door"
            )?,
            Some(Err(e)) => writeln!(
                f,
                "the workspace's layer (overlayfs): refused ({e}); commands write the workspace directly behind the bind walls (shadows of git's folders)"
            )?,
            None => {}
        }
        // The rules are probed with --no-network (to test the network rules too), which the
        // person did not give: the heading says the check added it.
        if let Some(r) = &self.rules {
            let why = if r.no_network {
                " (the check adds --no-network to test the network rules)"
            } else {
                ""
            };
            writeln!(f, "rules checked{why}: {r}")?;
        }
        for t in &self.self_test {
            if t.skipped {
                writeln!(f, "  skip  {}: {}", t.name, t.detail)?;
                continue;
            }
            writeln!(
                f,
                "  {}  {}: {} (expected {}){}",
                if t.passed { "ok  " } else { "FAIL" },
                t.name,
                if t.succeeded { "allowed" } else { "denied" },
                if t.should_succeed {
                    "allowed"
                } else {
                    "denied"
                },
                if t.detail.is_empty() {
                    String::new()
                } else {
                    format!(": {}", t.detail)
                }
            )?;
        }
        write!(
            f,
            "{}",
            if self.ok && self.self_test.iter().any(|t| t.skipped) {
                "the sandbox works on this machine, but in this workspace workspace-write keeps no write out (see skip)"
            } else if self.ok {
                "the sandbox works on this machine"
            } else if self.landlock_missing.is_some() {
                "no sandbox on this machine"
            } else if self.workspace_note.is_some() {
                // The folder, not the machine (issue 46): what fails here is what this folder
                // shares with everyone (see the note).
                "a check failed because of this folder (see the note), not the machine: run `tern sandbox check` in a project folder to check the machine"
            } else {
                "the sandbox does NOT work as documented on this machine"
            }
        )
    }
}

/// Probes Landlock and runs the self-test in `workspace` (an existing folder): sandboxed `bash
/// -c` commands through [`bash::run`] that write inside the workspace (allowed in
/// workspace-write, denied in read-only), outside it (denied), to the private `TMPDIR`
/// (allowed), and, with network rules, a TCP connect to a listener on 127.0.0.1 (denied under
/// `--no-network`, allowed without). Without Landlock the test is that a sandboxed mode
/// refuses. Then the jail (started from `exe`, tern's own binary): its layers and the attacks of
/// `jail_tests`. Leaves nothing behind (its probe folders are removed). Takes some tens of ms.
pub fn check(workspace: &Path, exe: &Path) -> CheckReport {
    let probe = kernel_abi();
    let (abi, missing) = match &probe {
        Probe::Abi(n) => (*n, None),
        Probe::Missing(why) => (0, Some(why.clone())),
    };
    let network_rules = abi >= NETWORK_ABI;
    let mut report = CheckReport {
        os: std::env::consts::OS.to_string(),
        landlock_abi: abi,
        landlock_missing: missing,
        network_rules,
        rules: None,
        jail: Err("not tried".into()),
        layer: None,
        self_test: Vec::new(),
        ok: false,
        workspace_note: workspace_note(workspace),
    };
    let policy = |mode, no_network| policy_for(workspace, mode, no_network);
    if report.landlock_missing.is_some() {
        let refused = prepare(&policy(Mode::WorkspaceWrite, false));
        report.self_test.push(SelfTest {
            name: "workspace-write refuses to run commands".into(),
            should_succeed: false,
            succeeded: refused.is_ok(),
            passed: refused.is_err(),
            skipped: false,
            detail: refused.err().map(|e| e.to_string()).unwrap_or_default(),
        });
        return report;
    }
    report.rules = prepare(&policy(Mode::WorkspaceWrite, network_rules))
        .ok()
        .map(|p| p.report().clone());

    let inside = tempfile::Builder::new()
        .prefix(".tern-sandbox-check-")
        .tempdir_in(workspace);
    let outside = outside_dir(workspace);
    let spill = tempfile::Builder::new()
        .prefix("tern-sandbox-check-spill-")
        .tempdir();
    let (inside, spill) = match (inside, spill) {
        (Ok(i), Ok(s)) => (i, s),
        (Err(e), _) | (_, Err(e)) => {
            report.self_test.push(SelfTest {
                name: "create probe folders".into(),
                should_succeed: true,
                succeeded: false,
                passed: false,
                skipped: false,
                detail: e.to_string(),
            });
            return report;
        }
    };
    let ctx = Ctx {
        workspace,
        spill: spill.path(),
    };
    landlock_tests(
        &mut report,
        &ctx,
        inside.path(),
        outside.as_ref().map(|o| o.path()),
    );
    if network_rules {
        network_tests(&mut report, &ctx);
    }
    jail_tests(&mut report, workspace, exe, &ctx);
    construct_tests(&mut report, exe, spill.path());
    report.ok = report.self_test.iter().all(|t| t.passed) && report.jail.is_ok();
    report
}

/// The Landlock self-test: writes inside the workspace (allowed in workspace-write, denied in
/// read-only), outside it (denied), to the private `TMPDIR` (allowed).
fn landlock_tests(report: &mut CheckReport, ctx: &Ctx<'_>, inside: &Path, outside: Option<&Path>) {
    let write = |dir: &Path| format!("printf ok > {}", quote(&dir.join("probe")));
    let tests: Vec<(String, Policy, String, bool, Option<PathBuf>)> = {
        let mut t = vec![(
            "write inside the workspace (workspace-write)".to_string(),
            ctx.policy(Mode::WorkspaceWrite, false),
            write(inside),
            true,
            Some(inside.join("probe")),
        )];
        match outside {
            Some(o) => t.push((
                format!(
                    "write outside the workspace, in {} (workspace-write)",
                    o.display()
                ),
                ctx.policy(Mode::WorkspaceWrite, false),
                write(o),
                false,
                Some(o.join("probe")),
            )),
            None => report.self_test.push(SelfTest {
                name: "write outside the workspace".into(),
                should_succeed: false,
                succeeded: false,
                passed: true,
                skipped: true,
                detail:
                    "no folder outside the workspace to try: workspace-write protects nothing here"
                        .into(),
            }),
        }
        t.push((
            "write inside the workspace (read-only)".to_string(),
            ctx.policy(Mode::ReadOnly, false),
            format!("printf ok > {}", quote(&inside.join("ro-probe"))),
            false,
            Some(inside.join("ro-probe")),
        ));
        t.push((
            "write to the private $TMPDIR (read-only)".to_string(),
            ctx.policy(Mode::ReadOnly, false),
            "printf ok > \"$TMPDIR/probe\" && test -s \"$TMPDIR/probe\"".to_string(),
            true,
            None,
        ));
        t
    };
    for (name, p, command, should, file) in tests {
        report
            .self_test
            .push(ctx.run(name, &p, &command, should, file.as_deref()));
    }
}

/// With network rules: a TCP connect to a listener on 127.0.0.1, allowed without
/// `--no-network` and denied with it.
fn network_tests(report: &mut CheckReport, ctx: &Ctx<'_>) {
    match TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr().map(|a| (l, a))) {
        Ok((_listener, addr)) => {
            let command = format!("exec 3<>/dev/tcp/127.0.0.1/{}", addr.port());
            report.self_test.push(ctx.run(
                "TCP connect to 127.0.0.1 (workspace-write)".into(),
                &ctx.policy(Mode::WorkspaceWrite, false),
                &command,
                true,
                None,
            ));
            report.self_test.push(ctx.run(
                "TCP connect to 127.0.0.1 (workspace-write --no-network)".into(),
                &ctx.policy(Mode::WorkspaceWrite, true),
                &command,
                false,
                None,
            ));
        }
        Err(e) => report.self_test.push(SelfTest {
            name: "TCP listener on 127.0.0.1".into(),
            should_succeed: true,
            succeeded: false,
            passed: false,
            skipped: false,
            detail: e.to_string(),
        }),
    }
}

/// Why `workspace` makes the check's tests fail, when it is a folder tern refuses
/// workspace-write in (`policy::wide_root`).
fn workspace_note(workspace: &Path) -> Option<String> {
    let canon = |v: Option<std::ffi::OsString>| v.and_then(|v| std::fs::canonicalize(v).ok());
    let ws = std::fs::canonicalize(workspace).ok()?;
    let why = crate::policy::wide_root(
        &ws,
        canon(std::env::var_os("HOME")).as_deref(),
        canon(std::env::var_os("XDG_RUNTIME_DIR")).as_deref(),
    )?;
    Some(format!(
        "this workspace is {why}: tern refuses workspace-write here, and a test that writes or reaches sockets in it fails because of where it runs, not because the sandbox is broken. Run `tern sandbox check` in a project folder"
    ))
}

/// The classes of issue 29, in a scratch workspace of the check's own (a repository, a home
/// folder with credentials in a toolchain folder): what the person's tools later run or read is
/// not the model's to write; a pty opens; vsock and io_uring are refused; the jail's `/tmp` has a
/// size.
fn construct_tests(report: &mut CheckReport, exe: &Path, spill: &Path) {
    use crate::sandbox::jail::{Jail, JailPaths, JailSpec};
    let Ok(scratch) = tempfile::Builder::new()
        .prefix("tern-check-construct-")
        .tempdir_in("/var/tmp")
        .or_else(|_| tempfile::tempdir())
    else {
        return;
    };
    let Ok(root) = std::fs::canonicalize(scratch.path()) else {
        return;
    };
    let (ws, home, state) = (root.join("ws"), root.join("home"), root.join("ws/.tern"));
    let cargo = home.join(".cargo");
    let made = std::fs::create_dir_all(&state)
        .and_then(|()| std::fs::create_dir_all(cargo.join("bin")))
        .and_then(|()| std::fs::write(cargo.join("credentials.toml"), "token = \"CHECK-TOKEN\""))
        .and_then(|()| std::fs::write(cargo.join("bin/tool"), "CHECK-TOOL"));
    if made.is_err() {
        return;
    }
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(&ws)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stdin(std::process::Stdio::null())
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let has_git = git(&["init", "-q"]);
    let shadows = state.join("jail/check");
    let layers = root.join("layers");
    let _ = std::fs::create_dir_all(layers.join("0/upper"))
        .and_then(|()| std::fs::create_dir_all(layers.join("0/work")));
    let mut paths = JailPaths {
        workspace: &ws,
        workspace_writable: true,
        state_dir: &state,
        draft: None,
        tmpdir: None,
        add_dirs: &[],
        read_dirs: &[],
        home: Some(&home),
        tern_config: None,
        shadows: Some(&shadows),
        read_only: &[],
        no_network: false,
        layer: Some(&layers),
    };
    let spec = JailSpec::new(&paths);
    let (jail, spec) = match Jail::start(exe, &spec, None) {
        Ok(j) => {
            report.layer = Some(Ok(()));
            (j, spec)
        }
        Err(e) if e.reason.contains(crate::sandbox::jail::mounts::LAYER_STEP) => {
            report.layer = Some(Err(e.reason));
            paths.layer = None;
            let spec = JailSpec::new(&paths);
            let Ok(j) = Jail::start(exe, &spec, None) else {
                return;
            };
            (j, spec)
        }
        Err(_) => return,
    };
    // The door of the layer, when one runs: what a test's command wrote reaches the scratch
    // workspace only through it, as in a session.
    let door = spec.layers.first().map(|l| {
        std::cell::RefCell::new(crate::sandbox::door::Door::new(
            &l.at,
            &l.upper,
            &root,
            &state,
            Vec::new(),
            crate::policy::DiskFloor::Off,
        ))
    });
    let settle = || {
        jail.sync_git();
        if let Some(d) = &door {
            d.borrow_mut().pass();
        }
    };
    let ctx = Ctx {
        workspace: &ws,
        spill,
    };
    let mut p = policy_for(&ws, Mode::WorkspaceWrite, false);
    p.network_in_namespace = true;
    p.add_dirs = spec
        .git_shadows
        .iter()
        .map(|(_, c)| c.clone())
        .chain(spec.git_data.iter().cloned())
        .collect();
    if has_git {
        git_tests(report, &ctx, &p, (&jail, &settle), &ws);
    }
    reach_tests(report, &ctx, &p, &jail, &home);
    drop(jail);
}

/// The workspace's repository in the jail: planted configuration and hooks never reach it, a
/// commit does.
fn git_tests(
    report: &mut CheckReport,
    ctx: &Ctx<'_>,
    p: &Policy,
    (jail, settle): (&crate::sandbox::jail::Jail, &dyn Fn()),
    ws: &Path,
) {
    let config = std::fs::read(ws.join(".git/config")).unwrap_or_default();
    {
        let plant = "echo ../evil > .git/commondir; printf '[core]\\n\\tfsmonitor = touch planted\\n' >> .git/config; printf '#!/bin/sh\\ntouch planted\\n' > .git/hooks/post-checkout; true";
        let mut t = ctx.run_in(
            "plant git's configuration and hooks in the workspace's repository (jail)".into(),
            p,
            Some(jail),
            plant,
            false,
            None,
        );
        settle();
        let landed = ws.join(".git/commondir").exists()
            || ws.join(".git/hooks/post-checkout").exists()
            || std::fs::read(ws.join(".git/config")).unwrap_or_default() != config;
        t.succeeded = landed;
        t.passed = !landed;
        t.detail = if landed {
            "it reached the repository".into()
        } else {
            "nothing reached the repository (the door holds git's own files back; without a layer the jail's git works on a copy)".into()
        };
        report.self_test.push(t);
        let commit = "git -c user.name=check -c user.email=check@check -c core.fsmonitor=false commit -q --allow-empty --no-verify -m check";
        let mut t = ctx.run_in(
            "commit in the workspace's repository (jail)".into(),
            p,
            Some(jail),
            &format!("rm -f .git/commondir; {commit}"),
            true,
            None,
        );
        settle();
        let landed = std::process::Command::new("git")
            .args(["log", "--format=%s"])
            .current_dir(ws)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("check"));
        t.succeeded = t.succeeded && landed;
        t.passed = t.succeeded;
        report.self_test.push(t);
    }
}

/// What the jail shows and refuses: credentials in toolchain folders, their binaries, a
/// pseudo-terminal, a sized /tmp, vsock and io_uring.
fn reach_tests(
    report: &mut CheckReport,
    ctx: &Ctx<'_>,
    p: &Policy,
    jail: &crate::sandbox::jail::Jail,
    home: &Path,
) {
    let cat = |f: &str| format!("cat {}", home.join(f).display());
    report.self_test.push(ctx.run_in(
        "read a credential inside a toolchain folder, ~/.cargo/credentials.toml (jail)".into(),
        p,
        Some(jail),
        &format!("{} | grep -q CHECK-TOKEN", cat(".cargo/credentials.toml")),
        false,
        None,
    ));
    report.self_test.push(ctx.run_in(
        "read a toolchain's binaries, ~/.cargo/bin (jail)".into(),
        p,
        Some(jail),
        &format!("{} | grep -q CHECK-TOOL", cat(".cargo/bin/tool")),
        true,
        None,
    ));
    report.self_test.push(ctx.run_in(
        "open a pseudo-terminal (jail)".into(),
        p,
        Some(jail),
        "command -v script >/dev/null && script -qc true /dev/null",
        true,
        None,
    ));
    report.self_test.push(ctx.run_in(
        "the jail's /tmp has a size, at most 1 GiB (jail)".into(),
        p,
        Some(jail),
        "test \"$(df -k --output=size /tmp | tail -1)\" -le 1048576",
        true,
        None,
    ));
    let python = std::process::Command::new("python3")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if python {
        report.self_test.push(ctx.run_in(
            "open a vsock socket, which no namespace holds (jail, seccomp)".into(),
            p,
            Some(jail),
            "python3 -c 'import socket; socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)'",
            false,
            None,
        ));
        report.self_test.push(ctx.run_in(
            "start io_uring, which seccomp cannot see into (jail, seccomp)".into(),
            p,
            Some(jail),
            "python3 -c 'import ctypes, sys; l = ctypes.CDLL(None); b = ctypes.create_string_buffer(120); sys.exit(0 if l.syscall(425, 8, b) >= 0 else 1)'",
            false,
            None,
        ));
    }
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// Starts a jail over `workspace` (and one with `--no-network`) and runs the attacks of issue 17
/// in it: another process's environment, a host socket in the system temp folder, a write
/// outside the workspace, a new user namespace, and under `--no-network` a TCP connect to the
/// host's loopback (refused) beside a loopback connect inside (allowed).
fn jail_tests(report: &mut CheckReport, workspace: &Path, exe: &Path, ctx: &Ctx<'_>) {
    use crate::sandbox::jail::{Jail, JailPaths, JailSpec, refusal};
    let spec_for = |no_network: bool| {
        JailSpec::new(&JailPaths {
            workspace,
            workspace_writable: true,
            state_dir: &workspace.join(".tern"),
            draft: None,
            tmpdir: None,
            add_dirs: &[],
            read_dirs: &[],
            home: std::env::var_os("HOME").as_deref().map(Path::new),
            tern_config: None,
            shadows: None,
            read_only: &[],
            no_network,
            layer: None,
        })
    };
    let jail = match Jail::start(exe, &spec_for(false), None) {
        Ok(j) => j,
        Err(e) => {
            report.jail = Err(refusal(Mode::WorkspaceWrite, &e));
            return;
        }
    };
    report.jail = Ok(jail.layers().clone());
    let p = Policy {
        mode: Mode::WorkspaceWrite,
        workspace: workspace.to_path_buf(),
        no_network: false,
        network_in_namespace: true,
        add_dirs: Vec::new(),
        draft_file: None,
        tmpdir: None,
    };
    jail_attacks(report, ctx, &jail, &p, workspace);
    drop(jail);
    let Ok(jail) = Jail::start(exe, &spec_for(true), None) else {
        return;
    };
    if let Ok(l) = &mut report.jail {
        l.net_ns = jail.layers().net_ns;
    }
    let Ok((_listener, addr)) =
        TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr().map(|a| (l, a)))
    else {
        return;
    };
    let np = Policy {
        no_network: true,
        ..p.clone()
    };
    report.self_test.push(ctx.run_in(
        "TCP connect to the host's 127.0.0.1 (jail --no-network)".into(),
        &np,
        Some(&jail),
        &format!("exec 3<>/dev/tcp/127.0.0.1/{}", addr.port()),
        false,
        None,
    ));
}

/// The attacks of issue 17 in a running jail: another process's environment, a host socket in
/// the system temp folder, a write outside the workspace, a new user namespace.
fn jail_attacks(
    report: &mut CheckReport,
    ctx: &Ctx<'_>,
    jail: &crate::sandbox::jail::Jail,
    p: &Policy,
    workspace: &Path,
) {
    // Another process with a marker in its environment.
    let marker = format!("TERN_CHECK_MARKER_{}", std::process::id());
    let outside = std::process::Command::new("sleep")
        .arg("30")
        .env(&marker, "1")
        .stdout(std::process::Stdio::null())
        .spawn();
    let env_cmd =
        format!("cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -q '^{marker}='");
    report.self_test.push(ctx.run_in(
        "read another process's environment (jail)".into(),
        p,
        Some(jail),
        &env_cmd,
        false,
        None,
    ));
    if let Ok(mut c) = outside {
        let _ = c.kill();
        let _ = c.wait();
    }
    let host_tmp = tempfile::Builder::new().prefix("tern-check-").tempdir();
    if let Ok(d) = &host_tmp {
        let sock = d.path().join("host.sock");
        if let Ok(_l) = std::os::unix::net::UnixListener::bind(&sock) {
            report.self_test.push(ctx.run_in(
                format!("see a host socket in {} (jail)", d.path().display()),
                p,
                Some(jail),
                &format!("test -S {}", quote(&sock)),
                false,
                None,
            ));
        }
    }
    if let Some(o) = outside_dir(workspace) {
        report.self_test.push(ctx.run_in(
            format!(
                "write outside the workspace, in {} (jail)",
                o.path().display()
            ),
            p,
            Some(jail),
            &format!("printf ok > {}", quote(&o.path().join("probe"))),
            false,
            Some(&o.path().join("probe")),
        ));
    }
    report.self_test.push(ctx.run_in(
        "start a new user namespace (jail, seccomp)".into(),
        p,
        Some(jail),
        "command -v unshare >/dev/null || exit 1; unshare -U true",
        false,
        None,
    ));
}

/// The sandbox policy of a self-test command in `workspace` (no jail).
fn policy_for(workspace: &Path, mode: Mode, no_network: bool) -> Policy {
    Policy {
        mode,
        workspace: workspace.to_path_buf(),
        no_network,
        network_in_namespace: false,
        add_dirs: Vec::new(),
        draft_file: None,
        tmpdir: None,
    }
}

struct Ctx<'a> {
    workspace: &'a Path,
    spill: &'a Path,
}

impl Ctx<'_> {
    /// [`policy_for`] in this check's workspace.
    fn policy(&self, mode: Mode, no_network: bool) -> Policy {
        policy_for(self.workspace, mode, no_network)
    }

    /// Runs `command` under `policy`; it succeeded when it exited 0 and, if `file` is given,
    /// that file exists afterwards.
    fn run(
        &self,
        name: String,
        policy: &Policy,
        command: &str,
        should_succeed: bool,
        file: Option<&Path>,
    ) -> SelfTest {
        self.run_in(name, policy, None, command, should_succeed, file)
    }

    /// [`Ctx::run`] in `jail`, if given.
    fn run_in(
        &self,
        name: String,
        policy: &Policy,
        jail: Option<&crate::sandbox::jail::Jail>,
        command: &str,
        should_succeed: bool,
        file: Option<&Path>,
    ) -> SelfTest {
        let fail = |detail: String| SelfTest {
            name: name.clone(),
            should_succeed,
            succeeded: false,
            passed: false,
            skipped: false,
            detail,
        };
        let prepared = match prepare(policy) {
            Ok(p) => p,
            Err(e) => return fail(e.to_string()),
        };
        let cancel = crate::cancel::CancelToken::new();
        let groups = crate::procs::ProcessGroups::new();
        let req = bash::BashRequest {
            command,
            timeout: Duration::from_secs(10),
            cwd: self.workspace,
            env: &[],
            env_remove: &[],
            pass_env: &[],
            spill_dir: self.spill,
            groups: &groups,
            sandbox: Some(&prepared),
            jail,
            mcp: None,
            streams: false,
        };
        let out = match bash::run(&req, &cancel) {
            Ok(o) => o,
            Err(e) => return fail(e.to_string()),
        };
        let succeeded = out.exit_code == Some(0) && file.is_none_or(Path::exists);
        // The first line of output, not the footer or the sandbox's own note.
        let detail = out
            .content
            .lines()
            .find(|l| !l.trim().is_empty() && !l.starts_with('['))
            .unwrap_or_default()
            .to_string();
        SelfTest {
            name,
            should_succeed,
            succeeded,
            passed: succeeded == should_succeed,
            skipped: false,
            detail,
        }
    }
}

/// A fresh folder outside `workspace` to try a forbidden write in: in the system temp dir, else
/// in `$HOME`. None when both are inside the workspace (a workspace of `/`).
fn outside_dir(workspace: &Path) -> Option<tempfile::TempDir> {
    let ws = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    let candidates = [
        Some(std::env::temp_dir()),
        std::env::var_os("HOME").map(PathBuf::from),
    ];
    candidates.into_iter().flatten().find_map(|base| {
        let canon = base.canonicalize().ok()?;
        if canon.starts_with(&ws) {
            return None;
        }
        tempfile::Builder::new()
            .prefix(".tern-sandbox-check-")
            .tempdir_in(canon)
            .ok()
    })
}

/// Single-quotes a path for bash.
fn quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}
