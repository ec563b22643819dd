//! Section 8: the jail (issue 17). Side by side in one run: the jail, Landlock alone
//! (`--no-jail`) and no sandbox (`danger-full-access`), for a whole 200-turn session (tern's own
//! CPU per turn, and tern plus every process under it: the jail's init and the commands) and for
//! one bash call (wall time of `bash -c true` through `tools::bash::run`); and the jail's start.

use super::*;

/// Rounds of the rotated 200-turn sessions per arm.
const ROUNDS: usize = 4;
/// Interleaved calls per path, and jail starts.
const CALLS: usize = 100;
const STARTS: usize = 20;

pub(super) fn bench_jail() -> R<String> {
    let mut md = String::from("## 8. The jail: cost per turn, per call, and at start\n\n");
    let requests = 200;
    type Env<'a> = &'a [(&'a str, &'a str)];
    let arms: [(&str, Env); 3] = [
        ("jail (default, workspace-write)", &[]),
        ("Landlock alone (`--no-jail`)", &[("TERN_NO_JAIL", "1")]),
        (
            "no sandbox (`danger-full-access`)",
            &[("TERN_SANDBOX", "danger-full-access")],
        ),
    ];
    let mut own: [Vec<f64>; 3] = Default::default();
    let mut total: [Vec<f64>; 3] = Default::default();
    let mut wall: [Vec<f64>; 3] = Default::default();
    let mut rss: [Vec<f64>; 3] = Default::default();
    for round in 0..ROUNDS {
        for i in 0..arms.len() {
            let arm = (round + i) % arms.len();
            let (name, env) = arms[arm];
            let s = true_session(TERN, env, requests)?;
            own[arm].push(s.m.own_ms() / requests as f64);
            total[arm].push(s.m.total_us as f64 / 1000.0 / requests as f64);
            wall[arm].push(s.m.wall.as_secs_f64() * 1000.0 / requests as f64);
            rss[arm].push(s.m.hwm_kb as f64 / 1024.0);
            eprintln!(
                "  round {} {name}: own {:.3} ms/turn",
                round + 1,
                s.m.own_ms() / requests as f64
            );
        }
    }
    let _ = writeln!(
        md,
        "The 200-turn session of section 1 (`true N` each turn), run {ROUNDS} times by each arm \
         in rotation. tern's own CPU is the harness cost the brief tracks; \"tern + all under \
         it\" adds the jail's init (which now forks the commands) and the commands themselves, so \
         work moved into the jail is not hidden.\n\n\
         | arm | tern's own CPU per turn (median) | / Landlock alone | tern + all under it, per turn | wall per turn | tern's peak RSS |\n|---|---|---|---|---|---|"
    );
    let base = median(&own[1]).max(f64::MIN_POSITIVE);
    for (i, (name, _)) in arms.iter().enumerate() {
        let _ = writeln!(
            md,
            "| {name} | **{:.3} ms** | {:.2}× | {:.3} ms | {:.3} ms | {:.1} MB |",
            median(&own[i]),
            median(&own[i]) / base,
            median(&total[i]),
            median(&wall[i]),
            median(&rss[i]),
        );
    }
    md.push('\n');
    md.push_str(&calls_and_start()?);
    match std::env::var(BASELINE_ENV) {
        Ok(b) => md.push_str(&bench_jail_baseline(&b)?),
        Err(_) => {
            let _ = writeln!(
                md,
                "No baseline binary this run for the git workspace's start and per-call cost (set `{BASELINE_ENV}` to compare side by side).\n"
            );
        }
    }
    Ok(md)
}

/// Wall time per `bash -c true` call through `tools::bash::run`: in the jail, with Landlock
/// alone, and with nothing, interleaved; and the jail's start (spawn, namespaces, mounts, Ready).
fn calls_and_start() -> R<String> {
    use tern::sandbox::jail::{Jail, JailPaths, JailSpec};
    use tern::sandbox::{self, Mode, Policy};
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let ws = dir.path().join("ws");
    let session = ws.join(".tern/sessions/20260101-000000-abcd");
    fs::create_dir_all(&session).map_err(|e| e.to_string())?;
    let spill = dir.path().join("spill");
    let folder = sandbox::TempFolder::new().map_err(|e| e.to_string())?;
    let draft = session.join("plan.draft.md");
    fs::write(&draft, "").map_err(|e| e.to_string())?;
    let spec = JailSpec::new(&JailPaths {
        workspace: &ws,
        workspace_writable: true,
        state_dir: &ws.join(".tern"),
        draft: Some(&draft),
        tmpdir: Some(folder.path()),
        add_dirs: &[],
        read_dirs: &[],
        home: std::env::var_os("HOME").as_deref().map(Path::new),
        tern_config: None,
        shadows: None,
        read_only: &[],
        no_network: false,
        layer: None,
    });
    let exe = Path::new(TERN);
    let mut starts = Vec::new();
    for _ in 0..STARTS {
        let t = Instant::now();
        let j = Jail::start(exe, &spec, None).map_err(|e| e.to_string())?;
        starts.push(t.elapsed().as_secs_f64() * 1000.0);
        drop(j);
    }
    let jail = Jail::start(exe, &spec, None).map_err(|e| e.to_string())?;
    let cancel = tern::cancel::CancelToken::new();
    let groups = tern::procs::ProcessGroups::new();
    let policy = |in_ns: bool| Policy {
        mode: Mode::WorkspaceWrite,
        workspace: ws.clone(),
        no_network: false,
        network_in_namespace: in_ns,
        add_dirs: Vec::new(),
        draft_file: Some(draft.clone()),
        tmpdir: Some(folder.path().to_path_buf()),
    };
    let run = |sb: Option<&sandbox::Prepared>, j: Option<&Jail>| -> R<f64> {
        let t = Instant::now();
        let req = tern::tools::bash::BashRequest {
            command: "true",
            timeout: Duration::from_secs(60),
            cwd: &ws,
            env: &[],
            env_remove: &[],
            pass_env: &[],
            spill_dir: &spill,
            groups: &groups,
            sandbox: sb,
            jail: j,
            mcp: None,
            streams: false,
        };
        let out = tern::tools::bash::run(&req, &cancel)?;
        if out.exit_code != Some(0) {
            return Err(format!("bash tool: {}", out.content));
        }
        Ok(t.elapsed().as_secs_f64() * 1000.0)
    };
    let (mut none, mut landlock, mut jailed) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..CALLS {
        for k in 0..3 {
            match (i + k) % 3 {
                0 => none.push(run(None, None)?),
                1 => {
                    let t = Instant::now();
                    let p = sandbox::prepare(&policy(false)).map_err(|e| e.to_string())?;
                    let prep = t.elapsed().as_secs_f64() * 1000.0;
                    landlock.push(prep + run(Some(&p), None)?);
                }
                _ => {
                    let t = Instant::now();
                    let p = sandbox::prepare(&policy(true)).map_err(|e| e.to_string())?;
                    let prep = t.elapsed().as_secs_f64() * 1000.0;
                    jailed.push(prep + run(Some(&p), Some(&jail))?);
                }
            }
        }
    }
    let mut md = String::new();
    let _ = writeln!(
        md,
        "One call of `bash -c true` through `tools::bash::run` (with `sandbox::prepare` where a \
         sandbox applies), {CALLS} calls per path, interleaved in this process:\n\n\
         | path | median | p90 |\n|---|---|---|"
    );
    for (name, l) in [
        ("no sandbox", &none),
        ("Landlock alone", &landlock),
        ("jail + Landlock", &jailed),
    ] {
        let _ = writeln!(
            md,
            "| {name} | **{:.3} ms** | {:.3} ms |",
            median(l),
            percentile(l, 90.0)
        );
    }
    let _ = writeln!(
        md,
        "| the jail's cost per call (jail − Landlock alone, medians) | **{:.3} ms** | goal ≤ 1 ms |",
        median(&jailed) - median(&landlock)
    );
    let _ = writeln!(
        md,
        "\nThe jail's start (spawn `tern __jail`, namespaces, the mount view, seccomp, Ready), \
         {STARTS} starts: median **{:.1} ms**, p90 {:.1} ms (goal ≤ 20 ms). It is paid once per \
         runtime, at its first command.\n",
        median(&starts),
        percentile(&starts, 90.0)
    );
    Ok(md)
}

/// A session like [`true_session`]'s in a workspace that is a git repository (200 files, one
/// commit): what the jail's git shadow costs at start and per call.
fn git_session(program: &str, requests: usize) -> R<Session> {
    let server = FakeServer::start(script(requests, |k| {
        bash_call(&format!("call_{k}"), &format!("true {k}"))
    }));
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let ws = tmp.path().join("ws");
    fs::create_dir_all(ws.join("src")).map_err(|e| e.to_string())?;
    for i in 0..200 {
        fs::write(ws.join(format!("src/f{i}.rs")), format!("fn f{i}() {{}}\n"))
            .map_err(|e| e.to_string())?;
    }
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(&ws)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "b")
            .env("GIT_AUTHOR_EMAIL", "b@b")
            .env("GIT_COMMITTER_NAME", "b")
            .env("GIT_COMMITTER_EMAIL", "b@b")
            .output()
            .map_err(|e| e.to_string())
            .map(|_| ())
    };
    git(&["init", "-q"])?;
    git(&["add", "."])?;
    git(&["commit", "-q", "-m", "start"])?;
    let mut cmd = tern_command(
        &server,
        tmp.path(),
        program,
        &exec_args(requests, "Run true until told to stop."),
    )?;
    let m = measure(&mut cmd, Some(&server))?;
    finish_session(tmp, m, server.requests(), requests)
}

/// `TERN_BENCH_BASELINE=old/tern cargo bench -- --jail-baseline-only`: the jail's start and
/// per-call cost in a git workspace, this commit beside the baseline, rotated: a 2-request
/// session (one command: the jail's start is most of its cost) and the 200-request one.
pub(super) fn bench_jail_baseline(baseline: &str) -> R<String> {
    let arms: [(&str, &str); 2] = [("this commit", TERN), ("baseline", baseline)];
    let mut start: [Vec<(f64, f64)>; 2] = Default::default();
    let mut per: [Vec<(f64, f64)>; 2] = Default::default();
    for round in 0..6 {
        for i in 0..arms.len() {
            let arm = (round + i) % arms.len();
            let (name, program) = arms[arm];
            for _ in 0..3 {
                let s = git_session(program, 2)?;
                start[arm].push((s.m.own_ms(), s.m.wall.as_secs_f64() * 1000.0));
            }
            let s = git_session(program, 200)?;
            per[arm].push((
                s.m.own_ms() / 200.0,
                s.m.wall.as_secs_f64() * 1000.0 / 200.0,
            ));
            eprintln!("  round {} {name}", round + 1);
        }
    }
    let col =
        |v: &[(f64, f64)], f: fn(&(f64, f64)) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
    let mut md = String::from(
        "### The jail in a git workspace, side by side with a baseline binary\n\n\
         A workspace of 200 files in a git repository (one commit), so the jail shows its shadow \
         of `.git` and copies git's data files back after each command. 6 rotated rounds; each \
         round runs a 2-request session (one `true` command: the jail's start) three times and \
         the 200-request session once per arm.\n\n\
         | arm | 2-request session: tern's own CPU | its wall | 200-request session: own CPU per turn | wall per turn |\n|---|---|---|---|---|\n",
    );
    for (i, (name, _)) in arms.iter().enumerate() {
        let _ = writeln!(
            md,
            "| {name} | **{:.2} ms** | {:.1} ms | **{:.3} ms** | {:.3} ms |",
            col(&start[i], |x| x.0),
            col(&start[i], |x| x.1),
            col(&per[i], |x| x.0),
            col(&per[i], |x| x.1),
        );
    }
    let _ = writeln!(
        md,
        "\nDifference (this commit − baseline `{baseline}`): start {:+.2} ms CPU / {:+.1} ms wall (goal ≤ +5 ms); per call {:+.3} ms CPU / {:+.3} ms wall (goal ≤ +0.2 ms).\n",
        col(&start[0], |x| x.0) - col(&start[1], |x| x.0),
        col(&start[0], |x| x.1) - col(&start[1], |x| x.1),
        col(&per[0], |x| x.0) - col(&per[1], |x| x.0),
        col(&per[0], |x| x.1) - col(&per[1], |x| x.1),
    );
    Ok(md)
}
