//! tern's benchmarks (`cargo bench`): harness CPU time and memory of the release `tern exec`
//! against the fake provider, bash-tool drain throughput and memory, start-up time and binary
//! size, prefix-cache discipline, a 40-step session next to quoted peer figures, the sandbox's
//! cost per call, and sub-agents (a fork's cache reuse, the cost of a child, the cache key).
//!
//! Everything is measured in one run on the machine it runs on and written to BENCHMARKS.md at
//! the package root, with how each number was measured. Nothing here asserts a speed: goals are
//! reported as met or not, never enforced.

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::fmt::Write as _;
use std::fs::{self, File};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{FakeServer, Recorded, Reply};

type R<T> = Result<T, String>;

#[path = "sections/jail.rs"]
mod jail_section;

/// The release binary (`cargo bench` builds it with the bench profile, which inherits release).
const TERN: &str = env!("CARGO_BIN_EXE_tern");

/// Repetitions of the turn-cost sessions: (model requests, runs). Short sessions are repeated
/// more because the per-process CPU clock has 10 ms ticks.
const TURN_SESSIONS: [(usize, usize); 3] = [(10, 15), (100, 3), (200, 5)];
/// Runs of `tern --version`.
const VERSION_RUNS: usize = 200;
/// Bytes drained through the bash tool.
const DRAIN_BYTES: u64 = 200_000_000;
const DRAIN_COMMANDS: [&str; 3] = [
    r"head -c 200000000 /dev/zero | tr '\0' 'a'",
    "yes | head -c 200000000",
    "yes 'src/lib.rs:42:7: warning: an 80-byte line, like compiler or log output ......' | head -c 200000000",
];
/// Calls of `true` timed through the bash tool and through a plain spawn.
const OVERHEAD_CALLS: usize = 100;
/// Model requests in the cache session, and how often it calls work_update.
const CACHE_TURNS: usize = 100;
const CACHE_UPDATE_EVERY: usize = 5;
/// Tool-call steps of the peer comparison session, and its runs.
const PEER_STEPS: usize = 40;
const PEER_RUNS: usize = 3;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--drain-child") {
        return match drain_child(&args[2..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("drain child: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if args.get(1).map(String::as_str) == Some("--overhead-child") {
        return match overhead_child(&args[2..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("overhead child: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if args.get(1).map(String::as_str) == Some("--sandbox-child") {
        return match sandbox_child(&args[2..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("sandbox child: {e}");
                ExitCode::FAILURE
            }
        };
    }
    // `cargo bench -- --agents-only`: section 7 alone, printed, BENCHMARKS.md left as it is.
    if args.iter().any(|a| a == "--agents-only") {
        return match bench_agents() {
            Ok((md, goal)) => {
                println!("{goal}\n{md}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tern_bench failed: {e}");
                ExitCode::FAILURE
            }
        };
    }
    // `cargo bench -- --cancel-only`: section 9 alone, printed, BENCHMARKS.md left as it is.
    if args.iter().any(|a| a == "--cancel-only") {
        return printed(bench_cancel().map(|(md, goal)| format!("{goal}\n{md}")));
    }
    // `cargo bench -- --jail-only`: section 8 alone, printed, BENCHMARKS.md left as it is.
    if args.iter().any(|a| a == "--jail-only") {
        return printed(jail_section::bench_jail());
    }
    // `cargo bench -- --checkpoints-only`: section 9 alone, printed, BENCHMARKS.md left as it is.
    if args.iter().any(|a| a == "--checkpoints-only") {
        return match bench_checkpoints() {
            Ok((md, goal)) => {
                println!("{goal}\n{md}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tern_bench failed: {e}");
                ExitCode::FAILURE
            }
        };
    }
    // `cargo bench -- --sandbox-only`: section 6 alone, printed, BENCHMARKS.md left as it is.
    if args.iter().any(|a| a == "--sandbox-only") {
        return printed(bench_sandbox());
    }
    // `cargo bench -- --hooks-only`: section 9 alone, printed (side by side with
    // TERN_BENCH_BASELINE when it is set).
    if args.iter().any(|a| a == "--hooks-only") {
        return printed(bench_hooks());
    }
    // `TERN_BENCH_BASELINE=old/tern cargo bench -- --baseline-only`: the side-by-side part of
    // section 1 alone, printed.
    if args.iter().any(|a| a == "--baseline-only") {
        return printed(
            std::env::var(BASELINE_ENV)
                .map_err(|_| format!("--baseline-only needs {BASELINE_ENV}=<tern binary>"))
                .and_then(|b| bench_baseline(&b)),
        );
    }
    if args.get(1).map(String::as_str) == Some("--serve") {
        return match serve(&args[2..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("serve: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match run_all() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tern_bench failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs this bench binary again as a fresh process with `flag` and a scratch folder, and
/// returns the one JSON object the child prints (its figures).
fn child_figures(flag: &str) -> R<Value> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let out = Command::new(&exe)
        .arg(flag)
        .arg(tmp.path())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| e.to_string())?;
    serde_json::from_slice(&out.stdout).map_err(|e| format!("{flag} output: {e}: {:?}", out.stdout))
}

/// The numbers of the array `v[key]` (none when it is missing).
fn floats(v: &Value, key: &str) -> Vec<f64> {
    v[key]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

/// Prints one section's Markdown, or the error, as a `--…-only` run ends.
fn printed(section: R<String>) -> ExitCode {
    match section {
        Ok(md) => {
            println!("{md}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tern_bench failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Profiling aid: `tern_bench --serve REQUESTS COMMAND` serves a script of REQUESTS model
/// requests (bash calls of COMMAND, then a final answer), prints the OpenAI base URL and exits
/// once every request was answered, so `tern exec` can be run by hand under perf or strace.
fn serve(args: &[String]) -> R<()> {
    let [requests, command] = args else {
        return Err("usage: --serve REQUESTS COMMAND".into());
    };
    let requests: usize = requests.parse().map_err(|e| format!("REQUESTS: {e}"))?;
    let server = FakeServer::start(script(requests, |k| {
        bash_call(&format!("call_{k}"), command)
    }));
    println!("{}", server.openai_base());
    while server.requests().len() < requests {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Let the last answer go out before the server is dropped.
    std::thread::sleep(Duration::from_millis(200));
    Ok(())
}

fn run_all() -> R<()> {
    let started = Instant::now();
    let load_before = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut md = String::new();
    md.push_str("# tern benchmarks\n\n");
    md.push_str(
        "Written by `cargo bench` (benches/tern_bench.rs) from one run; every figure below comes \
         from that run, side by side. The machine is shared and noisy: read small differences \
         with care. Goals are reported, never asserted.\n\n",
    );

    eprintln!("[1/11] harness CPU per turn …");
    let (turns, goal_turns) = bench_turns()?;
    eprintln!("[2/11] bash tool drain …");
    let (drain, goal_drain) = bench_drain()?;
    eprintln!("[3/11] start-up and size …");
    let startup = bench_startup()?;
    eprintln!("[4/11] prefix cache …");
    let (cache, goal_cache) = bench_cache()?;
    eprintln!("[5/11] 40-step peer comparison …");
    let peers = bench_peers()?;
    eprintln!("[6/11] sandbox cost per bash call …");
    let sandbox = bench_sandbox()?;
    eprintln!("[7/11] sub-agents …");
    let (agents, goal_agents) = bench_agents()?;
    eprintln!("[8/11] the jail …");
    let jail = jail_section::bench_jail()?;
    eprintln!("[9/11] hooks …");
    let hooks = bench_hooks()?;
    eprintln!("[10/11] checkpoints …");
    let (checkpoints, goal_checkpoints) = bench_checkpoints()?;
    eprintln!("[11/11] ACP cancel latency …");
    let (cancel, goal_cancel) = bench_cancel()?;

    let load_after = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    md.push_str(&machine(&load_before, &load_after, started.elapsed()));
    md.push_str("## Goals at a glance\n\n| goal | measured in this run | |\n|---|---|---|\n");
    for row in [
        goal_turns,
        goal_drain,
        goal_cache,
        goal_agents,
        goal_checkpoints,
        goal_cancel,
    ] {
        md.push_str(&row);
    }
    md.push('\n');
    md.push_str(&turns);
    md.push_str(&drain);
    md.push_str(&startup);
    md.push_str(&cache);
    md.push_str(&peers);
    md.push_str(&sandbox);
    md.push_str(&agents);
    md.push_str(&jail);
    md.push_str(&hooks);
    md.push_str(&checkpoints);
    md.push_str(&cancel);

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("BENCHMARKS.md");
    fs::write(&path, &md).map_err(|e| format!("write {}: {e}", path.display()))?;
    println!("{md}");
    eprintln!(
        "wrote {} in {:.0} s",
        path.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Measuring a child process

/// Resource figures of one finished child process.
#[derive(Debug, Clone, Default)]
struct Measured {
    /// Spawn to exit, seen by polling every 2 ms.
    wall: Duration,
    /// Spawn until the fake server had received a whole first request.
    first_request: Option<Duration>,
    /// utime + stime of the zombie from /proc/<pid>/stat, in ms (all its threads, no children;
    /// each field truncated to a clock tick).
    own_ticks_ms: f64,
    /// cutime + cstime of the zombie (its reaped children), in ms, truncated likewise.
    children_ticks_ms: f64,
    /// wait4's ru_utime + ru_stime in µs: the process and every descendant it reaped.
    total_us: u64,
    /// wait4's ru_maxrss in KiB: the largest of the process and its reaped descendants.
    maxrss_kb: u64,
    /// The last VmHWM of /proc/<pid>/status seen while it ran, in KiB (the process alone).
    hwm_kb: u64,
    /// Most threads seen at once.
    threads: u64,
    /// Exit code (128 + signal when killed).
    code: i32,
}

fn tick_ms() -> f64 {
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    1000.0 / if hz > 0 { hz as f64 } else { 100.0 }
}

impl Measured {
    /// Bounds on the process's own CPU in ms. Each /proc tick field is truncated, so the own CPU
    /// is in [A, A + 2 ticks) with A = utime + stime, and in (B - 2 ticks, B] with B = wait4 total
    /// - (cutime + cstime). The intersection is the answer's error band.
    fn own_bounds(&self) -> (f64, f64) {
        let two = 2.0 * tick_ms();
        let a = self.own_ticks_ms;
        let b = self.total_us as f64 / 1000.0 - self.children_ticks_ms;
        let (lo, hi) = (a.max(b - two), (a + two).min(b));
        if lo <= hi {
            (lo, hi)
        } else {
            (a.min(b), a.max(b))
        }
    }

    /// The midpoint of [`Measured::own_bounds`], in ms.
    fn own_ms(&self) -> f64 {
        let (lo, hi) = self.own_bounds();
        (lo + hi) / 2.0
    }

    /// CPU of the reaped descendants (the bash children), in ms.
    fn children_ms(&self) -> f64 {
        self.total_us as f64 / 1000.0 - self.own_ms()
    }
}

/// The first number after `key` in a /proc status text.
fn status_num(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

fn vm_kb(key: &str) -> u64 {
    let s = fs::read_to_string("/proc/self/status").unwrap_or_default();
    status_num(&s, key).unwrap_or(0)
}

/// Spawns `cmd` and waits for it without reaping (waitid WNOWAIT) so its /proc entry can still
/// be read as a zombie, then reaps it with wait4 for its rusage. While it runs, samples VmHWM and
/// the thread count, and (with `server`) notes when the first request arrived.
fn measure(cmd: &mut Command, server: Option<&FakeServer>) -> R<Measured> {
    let start = Instant::now();
    let child = cmd
        .spawn()
        .map_err(|e| format!("could not start {cmd:?}: {e}"))?;
    let pid = libc::pid_t::try_from(child.id()).map_err(|e| e.to_string())?;
    let status_path = format!("/proc/{pid}/status");
    let mut m = Measured::default();
    loop {
        // SAFETY: an all-zero siginfo_t is a valid out-parameter for waitid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes only into `info`; WNOWAIT leaves the child waitable.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT | libc::WNOHANG,
            )
        };
        if r != 0 {
            return Err(format!("waitid: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: si_pid is set (non-zero) by waitid when a child changed state.
        if unsafe { info.si_pid() } != 0 {
            break;
        }
        if let Ok(s) = fs::read_to_string(&status_path) {
            m.hwm_kb = m.hwm_kb.max(status_num(&s, "VmHWM:").unwrap_or(0));
            m.threads = m.threads.max(status_num(&s, "Threads:").unwrap_or(0));
        }
        let waiting_first = server.is_some() && m.first_request.is_none();
        if waiting_first && server.is_some_and(|srv| !srv.requests().is_empty()) {
            m.first_request = Some(start.elapsed());
        }
        std::thread::sleep(if waiting_first {
            Duration::from_micros(100)
        } else {
            Duration::from_millis(2)
        });
    }
    m.wall = start.elapsed();
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| e.to_string())?;
    // Fields after the command name in parentheses: state is field 3, utime 14 … cstime 17.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    if f.len() < 15 {
        return Err(format!("unexpected /proc/{pid}/stat: {stat}"));
    }
    m.own_ticks_ms = (f[11] + f[12]) * tick_ms();
    m.children_ticks_ms = (f[13] + f[14]) * tick_ms();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 writes only into `status` and `ru`; the child is ours and not yet reaped.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    if r != pid {
        return Err(format!("wait4: {}", std::io::Error::last_os_error()));
    }
    drop(child);
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    m.total_us = us(ru.ru_utime) + us(ru.ru_stime);
    m.maxrss_kb = ru.ru_maxrss as u64;
    m.code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    Ok(m)
}

// ---------------------------------------------------------------------------------------------
// Running `tern exec` against the fake provider

/// One finished `tern exec --json` session.
struct Session {
    /// The session's scratch folder (workspace, HOME, output), alive as long as the session.
    _dir: tempfile::TempDir,
    m: Measured,
    requests: Vec<Recorded>,
    events: Vec<Value>,
    result: Value,
}

impl Session {
    fn tool_results(&self) -> impl Iterator<Item = &Value> {
        self.events.iter().filter(|e| e["type"] == "tool_result")
    }
}

/// A bash tool call reply.
fn bash_call(id: &str, command: &str) -> Reply {
    let args = json!({ "command": command }).to_string();
    support::openai_tool_calls(&[(id, "bash", &args)]).auto_usage()
}

fn final_answer() -> Reply {
    support::openai_text("Done.").auto_usage()
}

/// A script of `requests` model requests: `step(k)` answers request k (1-based) for k <
/// `requests`, the last one is a final text answer.
fn script(requests: usize, step: impl Fn(usize) -> Reply) -> Vec<Reply> {
    let mut s: Vec<Reply> = (1..requests).map(step).collect();
    s.push(final_answer());
    s
}

fn tern_command(server: &FakeServer, dir: &Path, program: &str, args: &[String]) -> R<Command> {
    let ws = dir.join("ws");
    let home = dir.join("home");
    for d in [&ws, &home] {
        fs::create_dir_all(d).map_err(|e| e.to_string())?;
    }
    let out = File::create(dir.join("out.jsonl")).map_err(|e| e.to_string())?;
    let err = File::create(dir.join("err.txt")).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .env(
            "PATH",
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
        )
        .env("HOME", &home)
        .env("OPENAI_BASE_URL", server.openai_base())
        .env("TERN_MODEL", "m")
        .current_dir(&ws)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    Ok(cmd)
}

fn exec_args(requests: usize, prompt: &str) -> Vec<String> {
    vec![
        "exec".into(),
        "--json".into(),
        "--max-turns".into(),
        requests.to_string(),
        prompt.into(),
    ]
}

/// Reads the session's events and checks it completed with `requests` model requests and no
/// tool error.
fn finish_session(
    dir: tempfile::TempDir,
    m: Measured,
    requests: Vec<Recorded>,
    want: usize,
) -> R<Session> {
    let out = fs::read_to_string(dir.path().join("out.jsonl")).unwrap_or_default();
    let events: Vec<Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let result = events.last().cloned().unwrap_or(Value::Null);
    let err = fs::read_to_string(dir.path().join("err.txt")).unwrap_or_default();
    if m.code != 0 || result["type"] != "result" || result["status"] != "completed" {
        return Err(format!(
            "tern exec did not complete (exit {}): {result}\n{err}",
            m.code
        ));
    }
    if requests.len() != want || result["turns"] != want {
        return Err(format!(
            "expected {want} requests, the server saw {} and tern reports {}",
            requests.len(),
            result["turns"]
        ));
    }
    let s = Session {
        _dir: dir,
        m,
        requests,
        events,
        result,
    };
    if let Some(bad) = s.tool_results().find(|e| e["is_error"] == true) {
        return Err(format!("a tool call failed: {bad}"));
    }
    Ok(s)
}

/// Runs `tern exec` over `script` (of `requests` replies) with a fresh fake server and
/// workspace (in the system's temp folder), measured.
fn run_session(script: Vec<Reply>, requests: usize, prompt: &str) -> R<Session> {
    run_session_in(script, requests, prompt, &std::env::temp_dir())
}

/// [`run_session`] with the workspace (and so the session folder) under `base`.
fn run_session_in(script: Vec<Reply>, requests: usize, prompt: &str, base: &Path) -> R<Session> {
    run_program(TERN, &[], script, requests, prompt, base)
}

/// [`run_session_in`] with another tern binary (`program`) and extra environment, for
/// side-by-side comparisons.
fn run_program(
    program: &str,
    env: &[(&str, &str)],
    script: Vec<Reply>,
    requests: usize,
    prompt: &str,
    base: &Path,
) -> R<Session> {
    let server = FakeServer::start(script);
    let tmp = tempfile::tempdir_in(base).map_err(|e| e.to_string())?;
    let mut cmd = tern_command(&server, tmp.path(), program, &exec_args(requests, prompt))?;
    cmd.envs(env.iter().copied());
    let m = measure(&mut cmd, Some(&server))?;
    finish_session(tmp, m, server.requests(), requests)
}

// ---------------------------------------------------------------------------------------------
// Small statistics

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// Nearest-rank percentile `p` (0..=100) of `v`.
fn percentile(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

fn mb(kb: u64) -> String {
    format!("{:.1} MB", kb as f64 / 1024.0)
}

// ---------------------------------------------------------------------------------------------
// 1. Harness CPU per turn

/// A goal's summary row: goal, what was measured, met or not.
fn goal_row(goal: &str, measured: &str, met: bool) -> String {
    format!(
        "| {goal} | {measured} | **{}** |\n",
        if met { "met" } else { "not met" }
    )
}

fn bench_turns() -> R<(String, String)> {
    struct Row {
        requests: usize,
        own: Vec<f64>,
        halfwidth: Vec<f64>,
        children: Vec<f64>,
        wall: Vec<f64>,
        hwm: Vec<f64>,
        threads: u64,
    }
    let mut last_body_kb = 0.0;
    let mut rows = Vec::new();
    for (requests, runs) in TURN_SESSIONS {
        let mut row = Row {
            requests,
            own: vec![],
            halfwidth: vec![],
            children: vec![],
            wall: vec![],
            hwm: vec![],
            threads: 0,
        };
        for run in 0..runs {
            let s = run_session(
                script(requests, |k| {
                    bash_call(&format!("call_{k}"), &format!("true {k}"))
                }),
                requests,
                "Run true until told to stop (each call numbered, so no two steps repeat).",
            )?;
            let (lo, hi) = s.m.own_bounds();
            row.own.push(s.m.own_ms());
            row.halfwidth.push((hi - lo) / 2.0);
            row.children.push(s.m.children_ms());
            row.wall.push(s.m.wall.as_secs_f64() * 1000.0);
            row.hwm.push(s.m.hwm_kb as f64);
            row.threads = row.threads.max(s.m.threads);
            last_body_kb = s.requests.last().map_or(0, |r| r.body.len()) as f64 / 1e3;
            eprintln!(
                "  {requests:>3} requests run {}: own {:.1} ms (±{:.1}), children {:.1} ms, wall {:.0} ms, VmHWM {} KiB",
                run + 1,
                s.m.own_ms(),
                (hi - lo) / 2.0,
                s.m.children_ms(),
                s.m.wall.as_secs_f64() * 1000.0,
                s.m.hwm_kb
            );
        }
        rows.push(row);
    }
    let mean_of = |n: usize| {
        rows.iter()
            .find(|r| r.requests == n)
            .map(|r| mean(&r.own))
            .unwrap_or(0.0)
    };
    let step = |from: usize, to: usize| (mean_of(to) - mean_of(from)) / (to - from) as f64;

    let mut md = String::new();
    md.push_str("## 1. Harness CPU per turn and peak memory (`tern exec`, 200-turn session)\n\n");
    md.push_str(
        "Each session: a fresh fake provider (real HTTP on 127.0.0.1, no delay, simulated prefix \
         cache usage) and a fresh workspace; `tern exec --json` with a scripted model that \
         answers every request but the last with one `bash` call of `true`, and the last with \
         text. A turn here is one model request (what `--max-turns` counts), so an N-turn \
         session is N requests and N − 1 bash calls.\n\n",
    );
    md.push_str("| session | runs | tern CPU, mean (± resolution) | CPU per turn (mean) | bash child CPU per bash call | tern / bash child CPU | wall per turn | peak RSS of tern (VmHWM) |\n");
    md.push_str("|---|---|---|---|---|---|---|---|\n");
    for r in &rows {
        let n = r.requests as f64;
        let _ = writeln!(
            md,
            "| {} turns | {} | {:.1} ms (±{:.1}) | **{:.3} ms** | {:.2} ms | {:.2} | {:.1} ms | {} |",
            r.requests,
            r.own.len(),
            mean(&r.own),
            mean(&r.halfwidth) / (r.own.len() as f64).sqrt(),
            mean(&r.own) / n,
            mean(&r.children) / (n - 1.0),
            (mean(&r.own) / n) / (mean(&r.children) / (n - 1.0)),
            mean(&r.wall) / n,
            mb(percentile(&r.hwm, 100.0) as u64),
        );
    }
    let _ = writeln!(
        md,
        "\nMarginal CPU per turn (difference of session means, so start-up and session creation \
         cancel): turns 11–100 **{:.3} ms**, turns 101–200 **{:.3} ms**. Each request re-serializes \
         the whole history (the last body of the 200-turn session is {:.1} KB), so a cost that \
         grew with the history would make the second figure the larger one.\n",
        step(10, 100),
        step(100, 200),
        last_body_kb,
    );
    let at200 = mean_of(200) / 200.0;
    let met = at200 < 1.0 && step(100, 200) < 1.0;
    let measured = format!(
        "mean {:.3} ms per turn over the 200-turn session including start-up; marginal {:.3} ms \
         over turns 101–200",
        at200,
        step(100, 200)
    );
    let _ = writeln!(
        md,
        "**Goal: under 1 ms harness CPU per turn at 200 turns — {}** ({measured}).\n",
        if met { "met" } else { "not met" },
    );
    let goal = goal_row(
        "harness CPU under 1 ms per turn at 200 turns (§1)",
        &measured,
        met,
    );
    if let Ok(baseline) = std::env::var(BASELINE_ENV) {
        md.push_str(&bench_baseline(&baseline)?);
    }
    let _ = writeln!(
        md,
        "How measured: the bench spawns tern and polls `waitid(P_PID, WEXITED | WNOWAIT | \
         WNOHANG)`, which reports the exit without reaping, so tern stays a zombie whose \
         `/proc/<pid>/stat` still holds its final counters: utime + stime are tern's own CPU \
         (every thread, including the HTTP worker threads; at most {} threads were seen), and \
         cutime + cstime are the bash children it reaped. Then `wait4` reaps it and returns \
         rusage in µs for tern plus its reaped children. /proc counts in {:.0} ms ticks, \
         truncated per field, so tern's own CPU lies both in [A, A + 2 ticks) (A = utime + stime) \
         and in (B − 2 ticks, B] (B = wait4 total − cutime − cstime); the table gives the \
         midpoint of that intersection, and the ± column the mean half-width divided by √runs. \
         The bash children's CPU is excluded from the harness figure (shown separately). Peak \
         RSS of tern is the last VmHWM read from `/proc/<pid>/status` (sampled every 2 ms; the \
         high-water mark only grows) — tern alone. wait4's ru_maxrss is not used: Linux folds \
         the pre-exec memory of the spawning process into it (the bench's own, here), so it \
         overstates a small child. Wall time per turn includes starting and reaping each \
         bash and the fake server's threads, on two shared cores.\n",
        rows.iter().map(|r| r.threads).max().unwrap_or(0),
        tick_ms(),
    );
    Ok((md, goal))
}

/// Environment variable naming another tern binary (an older commit's `target/release/tern`)
/// to measure side by side with this one in section 1.
const BASELINE_ENV: &str = "TERN_BENCH_BASELINE";
/// Interleaved pairs of 200-turn sessions in the side-by-side comparison.
const BASELINE_PAIRS: usize = 6;

/// Section 1's 200-turn session run in turn by this tern, by this tern without the sandbox
/// (`TERN_SANDBOX=danger-full-access`) and by `baseline`, so all see the same machine load;
/// returns a Markdown subsection with their own CPU and its ratios.
fn bench_baseline(baseline: &str) -> R<String> {
    const NO_SANDBOX: &[(&str, &str)] = &[("TERN_SANDBOX", "danger-full-access")];
    let requests = 200;
    type Env<'a> = &'a [(&'a str, &'a str)];
    let arms: [(&str, &str, Env); 3] = [
        ("this commit", TERN, &[]),
        (
            "this commit, `--sandbox danger-full-access`",
            TERN,
            NO_SANDBOX,
        ),
        ("baseline", baseline, &[]),
    ];
    // Per arm: own CPU per turn, bash child CPU per call.
    let mut own: [Vec<f64>; 3] = Default::default();
    let mut kids: [Vec<f64>; 3] = Default::default();
    for round in 0..BASELINE_PAIRS {
        // Rotate which goes first, so a drift in load favours none.
        for i in 0..arms.len() {
            let arm = (round + i) % arms.len();
            let (name, program, env) = arms[arm];
            let s = run_program(
                program,
                env,
                script(requests, |k| {
                    bash_call(&format!("call_{k}"), &format!("true {k}"))
                }),
                requests,
                "Run true until told to stop (each call numbered, so no two steps repeat).",
                &std::env::temp_dir(),
            )?;
            own[arm].push(s.m.own_ms() / requests as f64);
            kids[arm].push(s.m.children_ms() / (requests - 1) as f64);
            eprintln!(
                "  round {} {name}: own {:.3} ms/turn",
                round + 1,
                s.m.own_ms() / requests as f64
            );
        }
    }
    // The baseline's commit, when the binary lies in a git checkout's target folder.
    let commit = Path::new(baseline)
        .ancestors()
        .find(|d| d.join(".git").exists())
        .and_then(|d| {
            Command::new("git")
                .arg("-C")
                .arg(d)
                .args(["rev-parse", "--short", "HEAD"])
                .output()
                .ok()
        })
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|c| !c.is_empty())
        .map_or(String::new(), |c| format!(" (commit {c})"));
    let mut md = String::new();
    let _ = writeln!(
        md,
        "### Side by side with a baseline binary\n\n`{BASELINE_ENV}={baseline}`{commit}: the 200-turn \
         session above, run {BASELINE_PAIRS} times by each arm in rotation (which goes first \
         rotates too), so all see the same load.\n\n\
         | arm | tern CPU per turn (median) | mean | / baseline (medians) | bash child CPU per call (median) |\n\
         |---|---|---|---|---|"
    );
    let base = median(&own[2]).max(f64::MIN_POSITIVE);
    for (i, (name, _, _)) in arms.iter().enumerate() {
        let _ = writeln!(
            md,
            "| {name} | **{:.3} ms** | {:.3} ms | {:.2}× | {:.2} ms |",
            median(&own[i]),
            mean(&own[i]),
            median(&own[i]) / base,
            median(&kids[i]),
        );
    }
    md.push('\n');
    Ok(md)
}

// ---------------------------------------------------------------------------------------------
// 9. Hooks

/// Rounds of the hooks comparison (each arm once per round, in rotation).
const HOOK_ROUNDS: usize = 5;

/// Section 9: the 200-turn session of section 1 with no hooks configured, by this tern and (when
/// `TERN_BENCH_BASELINE` names one) a baseline binary, side by side; and by this tern with one
/// trivial hook (`true`) on each of the eight events. Returns the Markdown subsection.
fn bench_hooks() -> R<String> {
    let requests = 200;
    let cfg = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dir = cfg.path().join("tern");
    fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let events = [
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "Stop",
        "SubagentStop",
        "PreCompact",
        "SessionEnd",
    ];
    let mut hooks = serde_json::Map::new();
    for e in events {
        hooks.insert(
            e.into(),
            json!([{"matcher": "*", "hooks": [{"type": "command", "command": "true"}]}]),
        );
    }
    fs::write(
        dir.join("hooks.json"),
        json!({ "hooks": hooks }).to_string(),
    )
    .map_err(|e| e.to_string())?;
    let cfg_path = cfg.path().to_str().ok_or("config path is not UTF-8")?;
    let hooked = [("XDG_CONFIG_HOME", cfg_path)];
    let baseline = std::env::var(BASELINE_ENV).ok();
    type Env<'a> = &'a [(&'a str, &'a str)];
    let mut arms: Vec<(String, String, Env)> =
        vec![("this commit, no hooks".into(), TERN.to_string(), &[])];
    if let Some(b) = &baseline {
        arms.push(("baseline, no hooks".into(), b.clone(), &[]));
    }
    arms.push((
        "this commit, one `true` hook per event".into(),
        TERN.to_string(),
        &hooked,
    ));
    let n = arms.len();
    let (mut own, mut kids, mut wall, mut runs) = (
        vec![Vec::new(); n],
        vec![Vec::new(); n],
        vec![Vec::new(); n],
        vec![0usize; n],
    );
    for round in 0..HOOK_ROUNDS {
        for i in 0..n {
            let arm = (round + i) % n;
            let (name, program, env) = &arms[arm];
            let s = run_program(
                program,
                env,
                script(requests, |k| {
                    bash_call(&format!("call_{k}"), &format!("true {k}"))
                }),
                requests,
                "Run true until told to stop (each call numbered, so no two steps repeat).",
                &std::env::temp_dir(),
            )?;
            own[arm].push(s.m.own_ms() / requests as f64);
            kids[arm].push(s.m.children_ms() / requests as f64);
            wall[arm].push(s.m.wall.as_secs_f64() * 1000.0 / requests as f64);
            runs[arm] = s.events.iter().filter(|e| e["type"] == "hook").count();
            eprintln!(
                "  round {} {name}: own {:.3} ms/turn",
                round + 1,
                s.m.own_ms() / requests as f64
            );
        }
    }
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## 9. Hooks: cost per turn\n\n\
         Section 1's 200-turn session (199 bash calls of `true`, then a final answer), run \
         {HOOK_ROUNDS} times by each arm in rotation. No hooks: no hooks file exists (the turn \
         loop's hook door is one check of an empty list per call). One hook per event: \
         `~/.config/tern/hooks.json` holds one `true` command hook with matcher `*` on each of \
         the eight events, so each bash call runs a PreToolUse and a PostToolUse hook (two \
         `bash -c true` processes) and the session runs SessionStart, UserPromptSubmit, Stop \
         and SessionEnd once each (SubagentStop and PreCompact never fire here). Children CPU \
         is the reaped processes': the bash tool's commands and the hooks.{}\n\n\
         | arm | tern CPU per turn (median) | mean | / no hooks (medians) | children CPU per turn (median) | wall per turn (median) | hook runs per session |\n\
         |---|---|---|---|---|---|---|",
        match &baseline {
            Some(b) => format!(" The baseline binary is `{b}` (the commit before issue 19)."),
            None => format!(
                " No baseline binary this run (set `{BASELINE_ENV}` to compare side by side)."
            ),
        }
    );
    let base = median(&own[0]).max(f64::MIN_POSITIVE);
    for (i, (name, _, _)) in arms.iter().enumerate() {
        let _ = writeln!(
            md,
            "| {name} | **{:.3} ms** | {:.3} ms | {:.2}× | {:.2} ms | {:.2} ms | {} |",
            median(&own[i]),
            mean(&own[i]),
            median(&own[i]) / base,
            median(&kids[i]),
            median(&wall[i]),
            runs[i],
        );
    }
    md.push('\n');
    Ok(md)
}

// ---------------------------------------------------------------------------------------------
// 2. bash tool drain

/// In a fresh process: runs one command through `tern::tools::bash::run` and prints its figures
/// as one JSON line. Args: command, scratch folder.
fn drain_child(args: &[String]) -> R<()> {
    let [command, dir] = args else {
        return Err("usage: --drain-child COMMAND DIR".into());
    };
    let dir = Path::new(dir);
    let baseline_rss = vm_kb("VmRSS:");
    let baseline_hwm = vm_kb("VmHWM:");
    let cancel = tern::cancel::CancelToken::new();
    let groups = tern::procs::ProcessGroups::new();
    let spill = dir.join("spill");
    let req = tern::tools::bash::BashRequest {
        command,
        timeout: Duration::from_secs(600),
        cwd: dir,
        env: &[],
        env_remove: &[],
        pass_env: &[],
        spill_dir: &spill,
        groups: &groups,
        sandbox: None,
        jail: None,
    };
    let t = Instant::now();
    let out = tern::tools::bash::run(&req, &cancel)?;
    let wall = t.elapsed();
    let cpu = |who| {
        // SAFETY: an all-zero rusage is a valid out-parameter; getrusage writes only into it.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: see above.
        unsafe { libc::getrusage(who, &mut ru) };
        let us = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
        us(ru.ru_utime) + us(ru.ru_stime)
    };
    let self_ms = cpu(libc::RUSAGE_SELF);
    let children_ms = cpu(libc::RUSAGE_CHILDREN);
    let spill_bytes = out
        .spill_path
        .as_ref()
        .and_then(|p| fs::metadata(p).ok())
        .map_or(0, |m| m.len());
    println!(
        "{}",
        json!({
            "output_bytes": out.output_bytes,
            "exit_code": out.exit_code,
            "wall_ms": wall.as_secs_f64() * 1000.0,
            "self_cpu_ms": self_ms,
            "children_cpu_ms": children_ms,
            "baseline_rss_kb": baseline_rss,
            "baseline_hwm_kb": baseline_hwm,
            "hwm_kb": vm_kb("VmHWM:"),
            "content_bytes": out.content.len(),
            "spill_bytes": spill_bytes,
        })
    );
    Ok(())
}

/// In a fresh process: times OVERHEAD_CALLS calls of `true` through `tern::tools::bash::run`
/// and through a plain `bash -c true` spawn, interleaved, and prints both lists (ms) as JSON.
/// Args: scratch folder.
fn overhead_child(args: &[String]) -> R<()> {
    let [dir] = args else {
        return Err("usage: --overhead-child DIR".into());
    };
    let dir = Path::new(dir);
    let spill = dir.join("spill");
    let cancel = tern::cancel::CancelToken::new();
    let groups = tern::procs::ProcessGroups::new();
    let req = tern::tools::bash::BashRequest {
        command: "true",
        timeout: Duration::from_secs(60),
        cwd: dir,
        env: &[],
        env_remove: &[],
        pass_env: &[],
        spill_dir: &spill,
        groups: &groups,
        sandbox: None,
        jail: None,
    };
    let (mut tool, mut plain) = (Vec::new(), Vec::new());
    for _ in 0..OVERHEAD_CALLS {
        let t = Instant::now();
        let status = Command::new("bash")
            .args(["-c", "true"])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| e.to_string())?;
        plain.push(t.elapsed().as_secs_f64() * 1000.0);
        if !status.success() {
            return Err(format!("bash -c true: {status}"));
        }
        let t = Instant::now();
        let out = tern::tools::bash::run(&req, &cancel)?;
        tool.push(t.elapsed().as_secs_f64() * 1000.0);
        if out.exit_code != Some(0) {
            return Err(format!("bash tool: {}", out.content));
        }
    }
    println!("{}", json!({"tool_ms": tool, "plain_ms": plain}));
    Ok(())
}

fn bench_drain() -> R<(String, String)> {
    let mut md = String::new();
    md.push_str("## 2. bash tool: draining 200 MB of output\n\n");
    md.push_str("| path | command | drained | wall | throughput | drain CPU (tern side) | peak RSS | RSS before | model sees | spill file |\n");
    md.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut peaks = Vec::new();
    for command in DRAIN_COMMANDS {
        // A `|` inside a table cell must be escaped, even in a code span (GitHub Markdown).
        let cell = command.replace('|', "\\|");
        // Library, in a fresh copy of this bench binary.
        let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new(&exe)
            .arg("--drain-child")
            .arg(command)
            .arg(tmp.path())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("drain child output: {e}: {:?}", out.stdout))?;
        let bytes = v["output_bytes"].as_u64().unwrap_or(0);
        if bytes != DRAIN_BYTES || v["exit_code"] != 0 {
            return Err(format!("drain child drained {bytes} bytes: {v}"));
        }
        let wall = v["wall_ms"].as_f64().unwrap_or(0.0);
        let hwm = v["hwm_kb"].as_u64().unwrap_or(0);
        peaks.push(hwm);
        let _ = writeln!(
            md,
            "| library `tools::bash::run` | `{cell}` | {:.0} MB | {:.0} ms | **{:.0} MB/s** | {:.0} ms | **{}** | {} | {} bytes | {:.1} MB |",
            bytes as f64 / 1e6,
            wall,
            bytes as f64 / 1e6 / (wall / 1000.0),
            v["self_cpu_ms"].as_f64().unwrap_or(0.0),
            mb(hwm),
            mb(v["baseline_rss_kb"].as_u64().unwrap_or(0)),
            v["content_bytes"],
            v["spill_bytes"].as_u64().unwrap_or(0) as f64 / 1e6,
        );
        eprintln!("  library {command}: {v}");

        // The release binary: one bash call in a `tern exec` session.
        let s = run_session(
            vec![bash_call("call_1", command), final_answer()],
            2,
            "Drain a lot of output.",
        )?;
        let r = s
            .tool_results()
            .next()
            .cloned()
            .ok_or("no tool_result event")?;
        let bytes = r["output_bytes"].as_u64().unwrap_or(0);
        if bytes != DRAIN_BYTES {
            return Err(format!("tern exec drained {bytes} bytes: {r}"));
        }
        let dur = r["duration_ms"].as_f64().unwrap_or(0.0).max(1.0);
        peaks.push(s.m.hwm_kb);
        let _ = writeln!(
            md,
            "| release `tern exec` | `{cell}` | {:.0} MB | {:.0} ms (tool call) | **{:.0} MB/s** | {:.0} ms (whole session) | **{}** | — | {} bytes | {:.1} MB |",
            bytes as f64 / 1e6,
            dur,
            bytes as f64 / 1e6 / (dur / 1000.0),
            s.m.own_ms(),
            mb(s.m.hwm_kb),
            r["content"].as_str().map_or(0, str::len),
            r["spill"]
                .as_str()
                .and_then(|p| fs::metadata(p).ok())
                .map_or(0.0, |m| m.len() as f64 / 1e6),
        );
        eprintln!(
            "  tern exec {command}: {dur:.0} ms, VmHWM {} KiB",
            s.m.hwm_kb
        );
    }
    let v = child_figures("--overhead-child")?;
    let list = |k: &str| floats(&v, k);
    let (tool, plain) = (list("tool_ms"), list("plain_ms"));
    let worst = peaks.iter().copied().max().unwrap_or(0);
    let _ = writeln!(
        md,
        "\n**Goal: peak memory under 20 MB while draining 200 MB — {}** (worst peak {}).\n",
        if worst < 20 * 1024 { "met" } else { "not met" },
        mb(worst)
    );
    let goal = goal_row(
        "peak memory under 20 MB while the bash tool drains 200 MB (§2)",
        &format!(
            "worst peak {} over {} drains (library and `tern exec`)",
            mb(worst),
            peaks.len()
        ),
        worst < 20 * 1024,
    );
    let _ = writeln!(
        md,
        "Round trip of a trivial command ({OVERHEAD_CALLS} calls each, interleaved, in one fresh \
         process):\n\n| path | median | p90 |\n|---|---|---|\n\
         | `tools::bash::run` of `true` | **{:.2} ms** | {:.2} ms |\n\
         | plain `Command::new(\"bash\").args([\"-c\", \"true\"]).status()` | {:.2} ms | {:.2} ms |\n\
         | ratio tool / plain | **{:.2}** | {:.2} |\n",
        median(&tool),
        percentile(&tool, 90.0),
        median(&plain),
        percentile(&plain, 90.0),
        median(&tool) / median(&plain).max(1e-9),
        percentile(&tool, 90.0) / percentile(&plain, 90.0).max(1e-9),
    );
    md.push_str(
        "How measured: *library* — this bench binary re-runs itself as a fresh process that \
         calls `tern::tools::bash::run` once (timeout 600 s) and reports: wall time of the call, \
         its own CPU from `getrusage(RUSAGE_SELF)` (the draining side only; the producer \
         pipeline's CPU is its children's), VmRSS before the call and VmHWM after it (the whole \
         process's peak, the bench binary's own start-up included). *release `tern exec`* — one \
         session whose scripted model makes one bash call with the command; wall time is the \
         tool call's `duration_ms` from its `tool_result` event, CPU is tern's own CPU for the \
         whole session (as in section 1), peak RSS is tern's VmHWM sampled as in section 1. \
         Throughput = 200 MB / wall time; the producer (`head`/`tr` or `yes`) runs on the same \
         two shared cores. The model sees the capped head and tail of the output \
         (OUTPUT_CAP_BYTES = 16 000 plus notes); the spill file keeps the first 32 MiB. The third command is \
         there because the output shaper's cost is per line: `yes` gives 2-byte lines, its \
         worst case. The round-trip table times `bash::run` (fork with setsid, pipe polling, \
         shaping, footer) against a plain `std::process::Command` spawn (posix_spawn) of the \
         same `bash -c true`.\n\n",
    );
    Ok((md, goal))
}

// ---------------------------------------------------------------------------------------------
// 3. Start-up time and binary size

fn bench_startup() -> R<String> {
    let mut ms = Vec::with_capacity(VERSION_RUNS);
    let mut version = String::new();
    for i in 0..VERSION_RUNS {
        let t = Instant::now();
        let out = Command::new(TERN)
            .arg("--version")
            .env_clear()
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
        if !out.status.success() {
            return Err(format!("tern --version failed: {:?}", out.status));
        }
        if i == 0 {
            version = String::from_utf8_lossy(&out.stdout).trim().to_string();
        }
    }
    let size = fs::metadata(TERN).map_err(|e| e.to_string())?.len();
    let file_kind = Command::new("file")
        .arg("-b")
        .arg(TERN)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .map(|s| {
            let stripped = if s.contains("not stripped") {
                "not stripped (symbols kept; debuginfo stripped by the release profile's default)"
            } else {
                "stripped"
            };
            stripped.to_string()
        })
        .unwrap_or_else(|| "unknown".into());
    let mut md = String::new();
    md.push_str("## 3. Start-up time and binary size\n\n");
    md.push_str("| measure | value |\n|---|---|\n");
    let _ = writeln!(
        md,
        "| `tern --version` wall time, median ({VERSION_RUNS} runs) | **{:.2} ms** |",
        median(&ms)
    );
    let _ = writeln!(md, "| p90 | **{:.2} ms** |", percentile(&ms, 90.0));
    let _ = writeln!(
        md,
        "| min / max | {:.2} ms / {:.2} ms |",
        percentile(&ms, 0.0),
        percentile(&ms, 100.0)
    );
    let _ = writeln!(
        md,
        "| release binary size | **{:.2} MB** ({size} bytes), {file_kind} |",
        size as f64 / 1e6
    );
    let _ = writeln!(md, "| version printed | `{version}` |");
    md.push_str(
        "\nHow measured: wall clock from `spawn` to the end of `wait` of `tern --version` with an \
         empty environment, stdout captured through a pipe, run back to back; the first run is \
         included (the binary is in the page cache after the build). Size is the file size of \
         target/release/tern as `cargo bench` builds it (bench profile = release).\n\n",
    );
    Ok(md)
}

// ---------------------------------------------------------------------------------------------
// 4. The prefix cache

/// work_update arguments for a 20-item To-do with `done` items completed and the next one in
/// progress; the first call also sets the goal.
fn ledger_args(done: usize, total: usize) -> String {
    let todos: Vec<Value> = (1..=total)
        .map(|i| {
            let status = if i <= done {
                "completed"
            } else if i == done + 1 {
                "in_progress"
            } else {
                "pending"
            };
            json!({
                "id": i.to_string(),
                "content": format!("Step {i}: change module {i} and run its tests"),
                "status": status,
            })
        })
        .collect();
    let mut args = json!({ "todos": todos });
    if done == 0 {
        args["goal"] = json!({"objective": "Refactor the twenty modules and keep the tests green"});
    }
    args.to_string()
}

/// The cache session's answer to request k: a work_update every CACHE_UPDATE_EVERY requests
/// (starting with the first), otherwise a bash call printing about 600 bytes.
fn cache_step(k: usize) -> Reply {
    let id = format!("call_{k}");
    if (k - 1).is_multiple_of(CACHE_UPDATE_EVERY) {
        let done = (k - 1) / CACHE_UPDATE_EVERY;
        let args = ledger_args(done, CACHE_TURNS / CACHE_UPDATE_EVERY);
        support::openai_tool_calls(&[(&id, "work_update", &args)]).auto_usage()
    } else {
        bash_call(&id, &format!("echo turn {k}; seq {k} {}", k + 150))
    }
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The simulated cache's rounding (tests/support): whole 128-token blocks at 4 bytes a token,
/// nothing under 1024 tokens.
fn rounded_tokens(common_bytes: usize) -> u64 {
    let tokens = (common_bytes / support::BYTES_PER_TOKEN) as u64;
    let blocks = tokens / support::CACHE_BLOCK_TOKENS * support::CACHE_BLOCK_TOKENS;
    if blocks < support::CACHE_MIN_TOKENS {
        0
    } else {
        blocks
    }
}

/// Totals of one layout over a session's request bodies.
#[derive(Default)]
struct CacheTotals {
    input_tokens: u64,
    cached_tokens: u64,
    body_bytes: u64,
    reused_bytes: u64,
}

impl CacheTotals {
    fn add(&mut self, body_len: usize, common: usize) {
        self.input_tokens += (body_len / support::BYTES_PER_TOKEN) as u64;
        self.cached_tokens += rounded_tokens(common);
        self.body_bytes += body_len as u64;
        self.reused_bytes += common as u64;
    }
    fn hit(&self) -> f64 {
        self.cached_tokens as f64 / self.input_tokens.max(1) as f64
    }
    fn reuse(&self) -> f64 {
        self.reused_bytes as f64 / self.body_bytes.max(1) as f64
    }
}

/// The work-state tail of an OpenAI body (`"\n\n" + <tern:work_state>…` at the end of the last
/// message's content), if it has one.
fn tail_of(body: &Value) -> R<Option<String>> {
    let msgs = body["messages"]
        .as_array()
        .ok_or("a body without messages")?;
    let last = msgs.last().ok_or("a body with no message")?;
    let content = last["content"].as_str().unwrap_or("");
    let Some(at) = content.rfind("<tern:work_state>") else {
        return Ok(None);
    };
    if !content.ends_with("</tern:work_state>") {
        return Err(format!(
            "the tail is not at the end of the last message: {content}"
        ));
    }
    let start = if content[..at].ends_with("\n\n") {
        at - 2
    } else {
        at
    };
    Ok(Some(content[start..].to_string()))
}

/// The JSON-escaped length of `s` inside a string literal.
fn escaped_len(s: &str) -> usize {
    serde_json::to_string(s).map_or(s.len(), |q| q.len() - 2)
}

fn bench_cache() -> R<(String, String)> {
    let s = run_session(
        script(CACHE_TURNS, cache_step),
        CACHE_TURNS,
        "Refactor the modules one by one and keep the To-do current.",
    )?;
    let bodies: Vec<&[u8]> = s.requests.iter().map(|r| r.body.as_slice()).collect();
    let parsed: Vec<Value> = bodies
        .iter()
        .map(|b| serde_json::from_slice(b).map_err(|e| e.to_string()))
        .collect::<R<_>>()?;
    // The rewrite below re-serializes parsed bodies; it is only fair if that gives tern's bytes.
    let roundtrip_exact = parsed
        .iter()
        .zip(&bodies)
        .all(|(v, b)| serde_json::to_vec(v).is_ok_and(|x| x.as_slice() == *b));
    if !roundtrip_exact {
        return Err("re-serializing a recorded body does not give the same bytes".into());
    }
    let tails: Vec<Option<String>> = parsed.iter().map(tail_of).collect::<R<_>>()?;
    let distinct_tails = {
        let mut t: Vec<&String> = tails.iter().flatten().collect();
        t.dedup();
        t.len()
    };

    // tern as it is: what the simulated cache gave each request.
    let mut tern = CacheTotals::default();
    // Theoretical maximum: everything of the previous request but its tail (and the closing
    // `]}` where the new messages go) is cached.
    let mut max = CacheTotals::default();
    for i in 0..bodies.len() {
        let common = if i == 0 {
            0
        } else {
            common_prefix(bodies[i - 1], bodies[i])
        };
        tern.add(bodies[i].len(), common);
        let ideal = if i == 0 {
            0
        } else {
            let prev = bodies[i - 1];
            if !prev.ends_with(b"\"}]}") && !prev.ends_with(b"]}") {
                return Err("a body that does not end with its messages array".into());
            }
            let tail = tails[i - 1].as_deref().map_or(0, escaped_len);
            (prev.len() - tail - 2).min(bodies[i].len())
        };
        max.add(bodies[i].len(), ideal);
    }
    // The same session with the work state in the system prompt instead of the tail.
    let mut moved: Vec<Vec<u8>> = Vec::new();
    for (v, tail) in parsed.iter().zip(&tails) {
        let mut v = v.clone();
        if let Some(tail) = tail {
            let msgs = v["messages"].as_array_mut().ok_or("no messages")?;
            let n = msgs.len();
            let content = msgs[n - 1]["content"].as_str().unwrap_or("").to_string();
            let kept = content[..content.len() - tail.len()].to_string();
            // An assistant message that only carried the tail goes back to null content.
            msgs[n - 1]["content"] = if kept.is_empty() && msgs[n - 1]["role"] == "assistant" {
                Value::Null
            } else {
                Value::from(kept)
            };
            if msgs[0]["role"] != "system" {
                return Err("the first message is not the system prompt".into());
            }
            let system = msgs[0]["content"].as_str().unwrap_or("").to_string();
            msgs[0]["content"] = Value::from(format!("{system}\n\n{}", tail.trim_start()));
        }
        moved.push(serde_json::to_vec(&v).map_err(|e| e.to_string())?);
    }
    let mut sys = CacheTotals::default();
    for i in 0..moved.len() {
        let common = if i == 0 {
            0
        } else {
            common_prefix(&moved[i - 1], &moved[i])
        };
        sys.add(moved[i].len(), common);
    }
    // Cross-checks against the fake server's own usage figures and tern's result event.
    let server_cached: u64 = {
        let mut prev: Option<&[u8]> = None;
        let mut sum = 0;
        for b in &bodies {
            sum += support::simulated_usage(prev, b).1;
            prev = Some(b);
        }
        sum
    };
    if server_cached != tern.cached_tokens {
        return Err(format!(
            "recomputed cached tokens {} differ from the simulated cache's {server_cached}",
            tern.cached_tokens
        ));
    }
    let tern_reported = s.result["cache_hit_ratio"].as_f64().unwrap_or(0.0);
    let tern_reuse = s.result["prefix_reuse_ratio"].as_f64().unwrap_or(0.0);

    let pct = |x: f64| format!("{:.2} %", x * 100.0);
    let mut md = String::new();
    md.push_str("## 4. Prefix cache: tern vs the theoretical maximum vs work state in the system prompt\n\n");
    let _ = writeln!(
        md,
        "One `tern exec` session of {CACHE_TURNS} model requests against the fake provider's \
         simulated prefix cache (cached tokens = common byte prefix with the previous request, \
         4 bytes a token, whole 128-token blocks, nothing under 1024 tokens). The scripted model \
         calls `work_update` on requests 1, {}, {}, … ({} updates of a 20-item To-do, so the \
         `<tern:work_state>` tail changes {} times) and otherwise `bash` printing about 600 \
         bytes; the last request is answered with text. Total {:.0} KB of request bodies, last \
         body {:.1} KB.\n",
        1 + CACHE_UPDATE_EVERY,
        1 + 2 * CACHE_UPDATE_EVERY,
        CACHE_TURNS / CACHE_UPDATE_EVERY,
        distinct_tails.saturating_sub(1),
        tern.body_bytes as f64 / 1e3,
        bodies.last().map_or(0, |b| b.len()) as f64 / 1e3,
    );
    md.push_str("| layout | cache hit ratio (cached / input tokens, block-rounded) | byte reuse (common prefix / body bytes, unrounded) | cached tokens | input tokens |\n");
    md.push_str("|---|---|---|---|---|\n");
    for (name, t) in [
        ("**tern** (work state as the transient tail)", &tern),
        ("theoretical maximum (all but new messages and tail)", &max),
        ("work state in the system prompt (rewritten bodies)", &sys),
    ] {
        let _ = writeln!(
            md,
            "| {name} | **{}** | {} | {} | {} |",
            pct(t.hit()),
            pct(t.reuse()),
            t.cached_tokens,
            t.input_tokens
        );
    }
    let pct3 = |x: f64| format!("{:.3} %", x * 100.0);
    let ratio_hit = tern.hit() / max.hit().max(f64::MIN_POSITIVE);
    let ratio_bytes = tern.reuse() / max.reuse().max(f64::MIN_POSITIVE);
    let _ = writeln!(
        md,
        "\ntern / theoretical maximum: **{}** of the cache hit ratio (block-rounded), {} of the \
         reused bytes (unrounded). Work state in the system prompt reaches {} of the maximum's \
         hit ratio.\n",
        pct3(ratio_hit),
        pct3(ratio_bytes),
        pct(sys.hit() / max.hit().max(f64::MIN_POSITIVE)),
    );
    let _ = writeln!(
        md,
        "**Goal: tern at ≥ 99 % of the theoretical maximum — {}.**\n",
        if ratio_hit >= 0.99 { "met" } else { "not met" }
    );
    let goal = goal_row(
        "prefix-cache hit ratio ≥ 99 % of the theoretical maximum (§4)",
        &format!(
            "{} of it ({} vs {}; work state in the system prompt: {})",
            pct3(ratio_hit),
            pct(tern.hit()),
            pct(max.hit()),
            pct(sys.hit())
        ),
        ratio_hit >= 0.99,
    );
    let _ = writeln!(
        md,
        "How measured: the fake provider records every request body; all three rows are computed \
         from those {} bodies with the same rounding. *tern*: per request, the common byte prefix \
         with the previous body, rounded as the simulated cache rounds (this equals the usage the \
         fake server reported to tern; tern's own `result` event says cache_hit_ratio {tern_reported} \
         and prefix_reuse_ratio {tern_reuse}). *Theoretical maximum*: per request, cached = the \
         previous body minus its tail (the JSON-escaped `\\n\\n<tern:work_state>…` text) minus \
         the closing `]}}` where new messages are appended — everything but the new messages and \
         the tail — then the same block rounding; the unrounded column uses the bytes as they \
         are. *Work state in the system prompt*: each recorded body is parsed, the tail is cut \
         from its last message and appended (after a blank line) to the system message, the \
         body is re-serialized (re-serializing the unmodified bodies gives back the recorded \
         bytes exactly, checked) and the simulated cache is re-run over the rewritten sequence. \
         The first request has nothing cached in every layout. Input tokens are body bytes / 4, \
         as the fake server counts them.\n",
        bodies.len()
    );
    Ok((md, goal))
}

// ---------------------------------------------------------------------------------------------
// 5. 40-step session next to peer figures

/// Request bytes as sent on the wire, reconstructed from what the server recorded: request
/// line, headers, blank line, body.
fn wire_bytes(r: &Recorded) -> usize {
    let head: usize = r
        .headers
        .iter()
        .map(|(k, v)| k.len() + 2 + v.len() + 2)
        .sum();
    r.method.len() + 1 + r.path.len() + 11 + head + 2 + r.body.len()
}

/// Tasks created during one session by tern and everything it started, counted with
/// `strace -f` on clone/clone3/fork/vfork: (processes, threads). None when strace is missing or
/// cannot trace here.
fn count_tasks(steps: usize) -> R<Option<(u64, u64)>> {
    let requests = steps + 1;
    let server = FakeServer::start(script(requests, |k| {
        bash_call(&format!("call_{k}"), &format!("echo x{k}"))
    }));
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let trace = tmp.path().join("strace.txt");
    let mut args: Vec<String> = vec![
        "-f".into(),
        "-qq".into(),
        "-e".into(),
        "trace=clone,clone3,fork,vfork".into(),
        "-o".into(),
        trace.display().to_string(),
        TERN.into(),
    ];
    args.extend(exec_args(requests, "Say x, forty times."));
    let mut cmd = tern_command(&server, tmp.path(), "strace", &args)?;
    let status = match cmd.status() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("  strace not usable ({e}); no process count");
            return Ok(None);
        }
    };
    if !status.success() || server.requests().len() != requests {
        let err = fs::read_to_string(tmp.path().join("err.txt")).unwrap_or_default();
        eprintln!("  strace run failed ({status}); no process count: {err}");
        return Ok(None);
    }
    let text = fs::read_to_string(&trace).map_err(|e| e.to_string())?;
    let (mut processes, mut threads) = (0, 0);
    for line in text.lines().filter(|l| !l.contains("resumed>")) {
        let creates = ["clone(", "clone3(", "fork(", "vfork("]
            .iter()
            .any(|c| line.contains(c));
        if !creates || line.contains("= -1 ") {
            continue;
        }
        if line.contains("CLONE_THREAD") {
            threads += 1;
        } else {
            processes += 1;
        }
    }
    Ok(Some((processes, threads)))
}

/// Peak RSS of one `bash -c 'echo x'`, read by bash itself from its own status just before it
/// exits (builtins only, so nothing else runs), in KiB.
fn bash_peak_kb() -> R<u64> {
    let out = Command::new("bash")
        .args([
            "-c",
            r#"echo x >/dev/null; while read -r k v _; do [ "$k" = VmHWM: ] && echo "$v"; done < /proc/$$/status"#,
        ])
        .env_clear()
        .output()
        .map_err(|e| e.to_string())?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|e| format!("bash VmHWM: {e}"))
}

fn bench_peers() -> R<String> {
    let requests = PEER_STEPS + 1;
    let shm = Path::new("/dev/shm");
    let mut first = Vec::new();
    let mut first_shm = Vec::new();
    let mut cpu = Vec::new();
    let mut rss = Vec::new();
    let mut body_bytes = 0;
    let mut reused_bytes = 0;
    let mut wire = 0;
    let mut wall = Vec::new();
    for _ in 0..PEER_RUNS {
        let s = run_session(
            script(requests, |k| {
                bash_call(&format!("call_{k}"), &format!("echo x{k}"))
            }),
            requests,
            "Say x, forty times.",
        )?;
        first.push(s.m.first_request.map_or(0.0, |d| d.as_secs_f64() * 1000.0));
        cpu.push(s.m.own_ms() / PEER_STEPS as f64);
        rss.push(s.m.hwm_kb as f64);
        wall.push(s.m.wall.as_secs_f64() * 1000.0);
        body_bytes = s.requests.iter().map(|r| r.body.len()).sum::<usize>();
        // What a prefix cache can serve: each body's common byte prefix with the one before.
        reused_bytes = s
            .requests
            .windows(2)
            .map(|w| common_prefix(&w[0].body, &w[1].body))
            .sum::<usize>();
        wire = s.requests.iter().map(wire_bytes).sum::<usize>();
        if shm.is_dir() {
            let s = run_session_in(
                script(requests, |k| {
                    bash_call(&format!("call_{k}"), &format!("echo x{k}"))
                }),
                requests,
                "Say x, forty times.",
                shm,
            )?;
            first_shm.push(s.m.first_request.map_or(0.0, |d| d.as_secs_f64() * 1000.0));
        }
    }
    let tasks = count_tasks(PEER_STEPS)?;
    let bash_kb = bash_peak_kb()?;

    let mut md = String::new();
    md.push_str("## 5. A 40-step session next to peers\n\n");
    md.push_str(&fixed_prefix_table());
    let _ = writeln!(
        md,
        "tern: {PEER_STEPS} steps = {PEER_STEPS} model requests each answered with one bash call \
         of `echo x`, then a final request answered with text; medians of {PEER_RUNS} runs. Peer \
         figures are **quoted from the brief, not re-measured here**, and their sessions' \
         commands and outputs are not known to be the same as this script's.\n"
    );
    md.push_str(
        "| measure | **tern** (measured) | mini-swe-agent (quoted) | bash-agent (quoted) |\n",
    );
    md.push_str("|---|---|---|---|\n");
    let shm_note = if first_shm.is_empty() {
        String::new()
    } else {
        format!(
            " ({:.1} ms with the workspace on tmpfs, where fsync is free)",
            median(&first_shm)
        )
    };
    let _ = writeln!(
        md,
        "| time to first request | **{:.1} ms**{shm_note} | 2.3 s | 0.08 s |",
        median(&first)
    );
    let _ = writeln!(
        md,
        "| harness CPU per step | **{:.3} ms** | 10.7 ms | 169 ms |",
        median(&cpu)
    );
    let _ = writeln!(
        md,
        "| peak RSS | **{}** (tern process); process tree ≤ {} (tern + one bash at {}) | 225 MB | 10.7 MB |",
        mb(median(&rss) as u64),
        mb(median(&rss) as u64 + bash_kb),
        mb(bash_kb),
    );
    let _ = writeln!(
        md,
        "| total request bytes sent | **{:.1} KB** bodies ({:.1} KB with HTTP request lines and headers); **{:.2}×** mini-swe-agent's (goal ≤ 0.9×) | 431 KB | 929 KB |",
        body_bytes as f64 / 1e3,
        wire as f64 / 1e3,
        body_bytes as f64 / 431e3
    );
    // Cost-weighted: cached input is billed at about a tenth (Anthropic cache reads, OpenAI's
    // cached-token price); the peers' figures are their sent bytes (no cache breakpoint scores
    // for them, per the brief).
    let weighted = (body_bytes - reused_bytes) as f64 + 0.1 * reused_bytes as f64;
    let _ = writeln!(
        md,
        "| cost-weighted bytes (uncached + 0.1 × cached) | **{:.1} KB** ({:.1} KB cacheable as each body's common prefix with the one before); **{:.2}×** mini-swe-agent's (goal ≤ 0.8×) | 431 KB (no cache credited) | 929 KB (no cache credited) |",
        weighted / 1e3,
        reused_bytes as f64 / 1e3,
        weighted / 431e3
    );
    let (procs, threads) = match tasks {
        Some((p, t)) => (
            format!(
                "**{:.2}** ({p} processes in {PEER_STEPS} steps: one `bash` per bash call)",
                p as f64 / PEER_STEPS as f64
            ),
            format!(
                "{:.2} ({t} in {requests} requests: the HTTP reader thread is started once and reused)",
                t as f64 / requests as f64
            ),
        ),
        None => ("not measured (strace unavailable)".into(), "—".into()),
    };
    let _ = writeln!(md, "| processes spawned per step | {procs} | — | ~215 |");
    let _ = writeln!(md, "| threads started per request | {threads} | — | — |");
    let _ = writeln!(
        md,
        "| wall time of the whole session | {:.0} ms | — | — |",
        median(&wall)
    );
    md.push_str(
        "\nHow measured: time to first request = from `spawn` of `tern exec` until the fake \
         server has recorded the whole first request (polled every 0.1 ms); before it, tern \
         creates the session folder with several atomic writes, each fsync'd, so the figure \
         depends on the disk — the tmpfs run shows the share. Harness CPU per step = tern's own \
         CPU for the session (section 1's method: /proc/<pid>/stat of the zombie bounded by \
         wait4, bash children excluded, start-up included) / 40. Peak RSS = tern's VmHWM; the \
         process tree bound adds the VmHWM of one `bash -c 'echo x'`, which bash reads from its \
         own /proc status with builtins just before exiting (tern runs one bash at a time). \
         Request bytes = the sum of the recorded request bodies; the HTTP figure adds each \
         request line and header block as recorded. Processes and threads = one extra session \
         run under `strace -f -e trace=clone,clone3,fork,vfork`, counting calls with and \
         without CLONE_THREAD; `echo x` is a bash builtin, so the processes are the harness's \
         own spawning.\n\n",
    );
    Ok(md)
}

/// The fixed prefix every request carries: each tool's serialized schema and the system prompt
/// (default sandbox, no AGENTS.md), against the 3,000-byte budget.
fn fixed_prefix_table() -> String {
    let tools = tern::tools::specs();
    let mut md = String::from(
        "The fixed prefix every request carries (each tool as serialized — name, description, \
         schema — and the system prompt of a session in the default sandbox with no AGENTS.md):\n\n\
         | part | bytes |\n|---|---|\n",
    );
    let mut total = 0;
    for t in &tools {
        let n = serde_json::to_string(t).map_or(0, |s| s.len());
        total += n;
        let _ = writeln!(md, "| tool `{}` | {n} |", t.name);
    }
    let d = tempfile::tempdir().ok();
    let sys = d.as_ref().map_or(0, |d| {
        tern::runtime::system::base(
            d.path(),
            &tern::runtime::system::sandbox_lines(tern::sandbox::Mode::default(), false),
        )
        .len()
    });
    let tools_total = total;
    total += sys;
    let _ = writeln!(
        md,
        "| all {} tools | {tools_total} |\n| system prompt | {sys} |\n| **total** | **{total}** (budget 3000; the last release before the budget sent 4,731 with the `agent` tool) |\n",
        tools.len()
    );
    md
}

// ---------------------------------------------------------------------------------------------
// 6. Sandbox: cost per bash call (issue 10)

/// Interleaved calls per path in the sandbox section.
const SANDBOX_CALLS: usize = 200;

/// In a fresh process: times SANDBOX_CALLS round trips of `bash -c true` through
/// `tern::tools::bash::run` without a sandbox and with one (workspace-write: `sandbox::prepare`,
/// the call and dropping the `Prepared`, as each real call pays), interleaved; `prepare` alone;
/// and the state-folder guard (`Snapshot::take` before, `changes` after) over a session folder
/// of typical sizes. Prints the lists (ms) as one JSON line. Args: scratch folder.
fn sandbox_child(args: &[String]) -> R<()> {
    use tern::sandbox::{self, Mode, Policy, Snapshot};
    let [dir] = args else {
        return Err("usage: --sandbox-child DIR".into());
    };
    let dir = Path::new(dir);
    let ws = dir.join("ws");
    let session = ws.join(".tern/sessions/20260101-000000-abcd");
    fs::create_dir_all(&session).map_err(|e| e.to_string())?;
    let spill = dir.join("spill");
    let cancel = tern::cancel::CancelToken::new();
    let groups = tern::procs::ProcessGroups::new();
    let files: [(&str, usize); 6] = [
        ("system.txt", 8_000),
        ("plan.md", 2_000),
        ("plan.json", 3_000),
        ("ledger.json", 2_000),
        ("meta.json", 500),
        ("conversation.jsonl", 400_000),
    ];
    let protected: Vec<_> = files.iter().map(|(n, _)| session.join(n)).collect();
    for ((_, size), path) in files.iter().zip(&protected) {
        fs::write(path, "x".repeat(*size)).map_err(|e| e.to_string())?;
    }
    // As the runtime does: one private TMPDIR, given to every call and emptied after it.
    let folder = sandbox::TempFolder::new().map_err(|e| e.to_string())?;
    let policy = Policy {
        mode: Mode::WorkspaceWrite,
        workspace: ws.clone(),
        no_network: false,
        network_in_namespace: false,
        add_dirs: Vec::new(),
        draft_file: Some(session.join("plan.draft.md")),
        tmpdir: Some(folder.path().to_path_buf()),
    };
    // A folder of its own per call (tern before: a mkdir and an rmdir each time).
    let own_folder = Policy {
        tmpdir: None,
        ..policy.clone()
    };
    let run = |sb: Option<&sandbox::Prepared>| -> R<()> {
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
            jail: None,
        };
        let out = tern::tools::bash::run(&req, &cancel)?;
        if out.exit_code != Some(0) {
            return Err(format!("bash tool: {}", out.content));
        }
        Ok(())
    };
    let (mut plain, mut boxed, mut prep, mut prep_own, mut take, mut check) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1000.0;
    for i in 0..SANDBOX_CALLS {
        // ABBA order, so neither path always runs right after the other.
        for first in [i % 2 == 0, i % 2 != 0] {
            let t = Instant::now();
            if first {
                run(None)?;
                plain.push(ms(t));
            } else {
                let p = sandbox::prepare(&policy).map_err(|e| e.to_string())?;
                run(Some(&p))?;
                drop(p);
                folder.clear().map_err(|e| e.to_string())?;
                boxed.push(ms(t));
            }
        }

        let t = Instant::now();
        let p = sandbox::prepare(&policy).map_err(|e| e.to_string())?;
        drop(p);
        folder.clear().map_err(|e| e.to_string())?;
        prep.push(ms(t));

        let t = Instant::now();
        let p = sandbox::prepare(&own_folder).map_err(|e| e.to_string())?;
        drop(p);
        prep_own.push(ms(t));

        let t = Instant::now();
        let snap = Snapshot::take(&protected);
        take.push(ms(t));
        let t = Instant::now();
        let changes = snap.changes();
        check.push(ms(t));
        if !changes.is_empty() {
            return Err(format!("guard saw changes: {changes:?}"));
        }
    }
    println!(
        "{}",
        json!({
            "plain_ms": plain, "sandboxed_ms": boxed, "prepare_ms": prep,
            "prepare_own_ms": prep_own, "take_ms": take, "changes_ms": check,
            "abi": sandbox::landlock_abi().ok(),
            "guard_bytes": files.iter().map(|(_, n)| n).sum::<usize>(),
        })
    );
    Ok(())
}

fn bench_sandbox() -> R<String> {
    let mut md = String::from(
        "## 6. Sandbox: cost per bash call

",
    );
    let abi = match tern::sandbox::landlock_abi() {
        Ok(n) => n,
        Err(why) => {
            let _ = writeln!(md, "Skipped: no Landlock on this machine ({why}).\n");
            return Ok(md);
        }
    };
    let v = child_figures("--sandbox-child")?;
    let list = |k: &str| floats(&v, k);
    let row = |md: &mut String, name: &str, l: &[f64]| {
        let _ = writeln!(
            md,
            "| {name} | **{:.3} ms** | {:.3} ms |",
            median(l),
            percentile(l, 90.0)
        );
    };
    let (plain, boxed) = (list("plain_ms"), list("sandboxed_ms"));
    let _ = writeln!(
        md,
        "Round trip of `bash -c true` through `tools::bash::run`, {SANDBOX_CALLS} calls each, \
         interleaved (alternating which goes first) in one fresh process, Landlock ABI {abi}:\n\n| path | median | p90 |\n|---|---|---|"
    );
    row(&mut md, "no sandbox (`sandbox: None`)", &plain);
    row(
        &mut md,
        "workspace-write: `sandbox::prepare` + call + drop + `TempFolder::clear`",
        &boxed,
    );
    let _ = writeln!(
        md,
        "| difference of medians (the sandbox's cost per call) | **{:.3} ms** | |",
        median(&boxed) - median(&plain)
    );
    row(
        &mut md,
        "`sandbox::prepare` + drop + `TempFolder::clear` alone (the runtime's way)",
        &list("prepare_ms"),
    );
    row(
        &mut md,
        "`sandbox::prepare` + drop with a temp folder of its own (mkdir + rmdir per call)",
        &list("prepare_own_ms"),
    );
    let kb = v["guard_bytes"].as_u64().unwrap_or(0) as f64 / 1000.0;
    row(
        &mut md,
        &format!("guard: `Snapshot::take` of 6 state files ({kb:.0} kB, all copied)"),
        &list("take_ms"),
    );
    row(
        &mut md,
        "guard: `Snapshot::changes` (6 `lstat`)",
        &list("changes_ms"),
    );
    md.push_str(
        "\nHow measured: this bench binary re-runs itself as a fresh process (`--sandbox-child`) \
         and times each path with `Instant` around the call. The sandboxed path includes the \
         per-call preparation (probe, Landlock ruleset with the workspace, the private `TMPDIR` \
         folder, /dev/null and the draft file) and emptying that folder after the call (the \
         folder is made once, as the runtime makes it once per session run; the last row but \
         two shows what making and removing one per call cost, on this machine's `/tmp`); the child \
         then applies it with `prctl` + `landlock_restrict_self` before exec. The difference of \
         medians is what a call pays; `prepare` + drop timed alone can read higher, because \
         there the kernel frees the unused ruleset at once (under strace the `close` of the \
         ruleset descriptor is its slowest step), which a real call overlaps. The guard rows \
         are a separate cost the runtime adds around each call: `take` reads the small files \
         (here a 400 kB conversation is under the 1 MiB copy limit, so it is copied too), \
         `changes` is one `lstat` per file.\n\n",
    );
    Ok(md)
}

// ---------------------------------------------------------------------------------------------
// 7. Sub-agents: a fork's cache reuse, the harness cost of a child, the cache key (issue 11)

/// Parent steps before the fork in the fork-reuse sessions.
const FORK_STEPS: usize = 60;
/// Children per session and runs in the child-cost comparison.
const CHILD_COUNT: usize = 20;
const CHILD_RUNS: usize = 7;

/// The Anthropic breakpoint marker: request metadata, not prompt content.
const BREAKPOINT: &str = r#","cache_control":{"type":"ephemeral"}"#;

/// The fork-reuse session in `wire`: FORK_STEPS parent steps (bash printing about 600 bytes, a
/// work_update every CACHE_UPDATE_EVERY steps, so the parent has a ledger and a tail), then one
/// `agent` call with `fork: true`, the child's answer, the parent's answer.
fn fork_script(wire: support::Wire) -> R<Vec<Reply>> {
    use support::script::{agent, bash, call, text};
    let mut s = Vec::new();
    for k in 1..=FORK_STEPS {
        let id = format!("call_{k}");
        if (k - 1).is_multiple_of(CACHE_UPDATE_EVERY) {
            let done = (k - 1) / CACHE_UPDATE_EVERY;
            let args: Value =
                serde_json::from_str(&ledger_args(done, FORK_STEPS / CACHE_UPDATE_EVERY))
                    .map_err(|e| e.to_string())?;
            s.push(call(wire, &id, "work_update", args));
        } else {
            s.push(bash(
                wire,
                &id,
                &format!("echo turn {k}; seq {k} {}", k + 150),
            ));
        }
    }
    s.push(agent(
        wire,
        "call_fork",
        json!({"task": "check the last module's tests", "fork": true}),
    ));
    s.push(text(wire, "The fork checked the tests: they pass."));
    s.push(text(wire, "Done."));
    Ok(s)
}

/// The parent's request without its tail as the child must repeat it (tests/it/agents.rs
/// checks the same as bytes): breakpoints removed, the tail and the closing brackets of the
/// last message and body cut off. Errors: a body of another shape.
fn fork_core(wire: support::Wire, raw: &str) -> R<String> {
    let body: Value = serde_json::from_str(raw).map_err(|e| e.to_string())?;
    let mut s = match wire {
        support::Wire::OpenAi => raw.to_string(),
        support::Wire::Anthropic => raw.replace(BREAKPOINT, ""),
    };
    let last = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .ok_or("a body without messages")?;
    let tail = match wire {
        support::Wire::OpenAi => last["content"].as_str().and_then(|c| {
            c.rfind("\n\n<tern:work_state>")
                .map(|at| c[at..].to_string())
        }),
        support::Wire::Anthropic => last["content"]
            .as_array()
            .and_then(|b| b.last())
            .and_then(|b| b["text"].as_str())
            .filter(|t| t.starts_with("<tern:work_state>"))
            .map(str::to_string),
    };
    let (closing, end) = match wire {
        support::Wire::OpenAi => ("\"}]}", "]}"),
        support::Wire::Anthropic => ("]}]}", "]}]}"),
    };
    if let Some(tail) = tail {
        let quoted = serde_json::to_string(&tail).map_err(|e| e.to_string())?;
        let piece = match wire {
            support::Wire::OpenAi => quoted[1..quoted.len() - 1].to_string(),
            support::Wire::Anthropic => format!(",{{\"type\":\"text\",\"text\":{quoted}}}"),
        };
        let cut = format!("{piece}{closing}");
        if !s.ends_with(&cut) {
            return Err("the tail is not at the end of the parent's body".into());
        }
        s.truncate(s.len() - cut.len());
        s.push_str(closing);
    }
    if !s.ends_with(end) {
        return Err("a body that does not end with its messages".into());
    }
    s.truncate(s.len() - end.len());
    Ok(s)
}

/// One fork-reuse figure: parent prefix tokens, the child's first request's cached tokens
/// (the simulated cache, as the server reported them to tern), byte reuse.
struct ForkFigure {
    wire: &'static str,
    prefix_tokens: u64,
    cached_tokens: u64,
    child_input_tokens: u64,
    common_bytes: usize,
    prefix_bytes: usize,
    extension: bool,
}

fn fork_reuse(wire: support::Wire) -> R<ForkFigure> {
    let server = FakeServer::start(fork_script(wire)?);
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let parent_requests = FORK_STEPS + 2;
    let mut cmd = tern_command(
        &server,
        tmp.path(),
        TERN,
        &exec_args(parent_requests, "Refactor the modules, then fork a check."),
    )?;
    if wire == support::Wire::Anthropic {
        cmd.env_remove("OPENAI_BASE_URL")
            .env("ANTHROPIC_BASE_URL", server.base_url());
    }
    let m = measure(&mut cmd, Some(&server))?;
    let reqs = server.requests();
    if m.code != 0 || reqs.len() != parent_requests + 1 {
        let err = fs::read_to_string(tmp.path().join("err.txt")).unwrap_or_default();
        return Err(format!(
            "the fork session did not complete (exit {}, {} requests): {err}",
            m.code,
            reqs.len()
        ));
    }
    let parent = String::from_utf8(reqs[FORK_STEPS].body.clone()).map_err(|e| e.to_string())?;
    let child = String::from_utf8(reqs[FORK_STEPS + 1].body.clone()).map_err(|e| e.to_string())?;
    if !child.contains("<tern:fork_state>") {
        return Err("the request after the agent call is not the fork's".into());
    }
    let core = fork_core(wire, &parent)?;
    let strip = |s: &str| s.replace(BREAKPOINT, "");
    let stripped_child = strip(&child);
    let (_, cached) =
        support::simulated_usage(Some(&reqs[FORK_STEPS].body), &reqs[FORK_STEPS + 1].body);
    Ok(ForkFigure {
        wire: match wire {
            support::Wire::OpenAi => "OpenAI",
            support::Wire::Anthropic => "Anthropic",
        },
        prefix_tokens: (core.len() / support::BYTES_PER_TOKEN) as u64,
        cached_tokens: cached,
        child_input_tokens: (child.len() / support::BYTES_PER_TOKEN) as u64,
        // Past the prefix both bodies may go on alike for a few bytes (Anthropic: the opening
        // of the next text block); only the prefix counts.
        common_bytes: common_prefix(strip(&parent).as_bytes(), stripped_child.as_bytes())
            .min(core.len()),
        prefix_bytes: core.len(),
        extension: stripped_child.starts_with(&core),
    })
}

/// `tern exec` over `script` (`requests` replies in all, `parent` of them the parent's),
/// measured; fails unless it completed.
fn measured_run(script: Vec<Reply>, requests: usize, parent: usize) -> R<Measured> {
    let server = FakeServer::start(script);
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut cmd = tern_command(
        &server,
        tmp.path(),
        TERN,
        &exec_args(parent, "Delegate the jobs."),
    )?;
    let m = measure(&mut cmd, Some(&server))?;
    let seen = server.requests().len();
    if m.code != 0 || seen != requests {
        let err = fs::read_to_string(tmp.path().join("err.txt")).unwrap_or_default();
        return Err(format!(
            "run did not complete (exit {}, {seen} of {requests} requests): {err}",
            m.code
        ));
    }
    Ok(m)
}

/// CHILD_COUNT sequential fresh children, each answering in one request: 2 × CHILD_COUNT + 1
/// requests, CHILD_COUNT + 1 of them the parent's.
fn children_script() -> Vec<Reply> {
    let mut s = Vec::new();
    for k in 1..=CHILD_COUNT {
        let args = json!({"task": format!("job {k}: report the module's size")}).to_string();
        s.push(support::openai_tool_calls(&[(&format!("call_{k}"), "agent", &args)]).auto_usage());
        s.push(support::openai_text(&format!("Job {k}: 120 lines.")).auto_usage());
    }
    s.push(final_answer());
    s
}

/// The same number of requests, all the parent's, each a cheap tool call (update_plan: no
/// process, one small file).
fn plain_script() -> Vec<Reply> {
    let mut s = Vec::new();
    for k in 1..=2 * CHILD_COUNT {
        let args = json!({"title": format!("step {k}")}).to_string();
        s.push(
            support::openai_tool_calls(&[(&format!("call_{k}"), "update_plan", &args)])
                .auto_usage(),
        );
    }
    s.push(final_answer());
    s
}

/// What one child leaves on disk: files and bytes of an `agents/<id>/` folder after a run.
fn child_footprint() -> R<(usize, u64)> {
    let server = FakeServer::start(vec![
        support::openai_tool_calls(&[("call_1", "agent", r#"{"task":"report the size"}"#)])
            .auto_usage(),
        support::openai_text("120 lines.").auto_usage(),
        final_answer(),
    ]);
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut cmd = tern_command(&server, tmp.path(), TERN, &exec_args(2, "Delegate."))?;
    let m = measure(&mut cmd, Some(&server))?;
    if m.code != 0 {
        return Err(format!("footprint run exit {}", m.code));
    }
    let sessions = tmp.path().join("ws/.tern/sessions");
    let parent = fs::read_dir(&sessions)
        .map_err(|e| e.to_string())?
        .flatten()
        .next()
        .ok_or("no session")?
        .path();
    let child = fs::read_dir(parent.join("agents"))
        .map_err(|e| e.to_string())?
        .flatten()
        .next()
        .ok_or("no child")?
        .path();
    let mut files = 0;
    let mut bytes = 0;
    let mut stack = vec![child];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).map_err(|e| e.to_string())?.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files += 1;
                bytes += e.metadata().map_or(0, |m| m.len());
            }
        }
    }
    Ok((files, bytes))
}

// --- The cache-key simulation ---------------------------------------------------------------

/// Machines a routing key can land on.
const SIM_MACHINES: u64 = 64;
/// Requests per minute one (prefix, key) group may send to its machine before the rest
/// overflow (OpenAI's guide: "approximately 15 requests per minute").
const SIM_RATE: usize = 15;
/// Extra machines an overflowing group spreads over.
const SIM_EXTRA: u64 = 8;
/// Seconds a cache entry lives unused (OpenAI: 5 to 10 minutes; the short end).
const SIM_TTL: f64 = 300.0;

/// One simulated request: when, which conversation (lineage), its prompt length in tokens,
/// and the lineage and length it was forked from.
#[derive(Clone)]
struct SimReq {
    t: f64,
    /// The session this request belongs to (a child is a session of its own).
    session: usize,
    /// Its parent session (a child's), for the key a child sends under the session-id policy.
    parent: Option<usize>,
    /// Forked from (parent session, prompt tokens at the fork).
    forked: Option<(usize, u64)>,
    tokens: u64,
    first: bool,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Cached tokens as OpenAI counts them: whole 128-token increments from 1024 on.
fn sim_round(tokens: u64) -> u64 {
    let r = tokens / 128 * 128;
    if r < 1024 { 0 } else { r }
}

#[derive(Default, Clone, Copy)]
struct SimTotals {
    input: u64,
    cached: u64,
    first_input: u64,
    first_cached: u64,
}

/// Runs `reqs` (sorted by time) with `key_of` choosing each request's routing key; the stable
/// prefix is `stable` tokens. Every request's first 256 tokens are the tools (the same for the
/// project), so the key alone decides the group.
fn simulate(reqs: &[SimReq], stable: u64, key_of: &dyn Fn(&SimReq) -> u64) -> SimTotals {
    use std::collections::{HashMap, VecDeque};
    // Per machine: session → (cached prompt tokens, last used).
    let mut caches: HashMap<u64, HashMap<usize, (u64, f64)>> = HashMap::new();
    let mut recent: HashMap<u64, VecDeque<f64>> = HashMap::new();
    let mut rng = 0x5eed_u64;
    let mut out = SimTotals::default();
    for r in reqs {
        let key = key_of(r);
        let q = recent.entry(key).or_default();
        while q.front().is_some_and(|&t| r.t - t > 60.0) {
            q.pop_front();
        }
        let base = splitmix(key) % SIM_MACHINES;
        let machine = if q.len() < SIM_RATE {
            base
        } else {
            rng = splitmix(rng);
            (base + 1 + rng % SIM_EXTRA) % SIM_MACHINES
        };
        q.push_back(r.t);
        let cache = caches.entry(machine).or_default();
        cache.retain(|_, (_, used)| r.t - *used <= SIM_TTL);
        let mut hit = 0;
        if !cache.is_empty() {
            // Every prompt of the project starts with the same tools + system.
            hit = stable;
        }
        if let Some((len, _)) = cache.get(&r.session) {
            hit = hit.max(*len);
        }
        if let Some((from, at)) = r.forked
            && let Some((len, _)) = cache.get(&from)
        {
            hit = hit.max((*len).min(at));
        }
        let hit = sim_round(hit.min(r.tokens));
        cache.insert(r.session, (r.tokens, r.t));
        if let Some((from, _)) = r.forked
            && let Some(e) = cache.get_mut(&from)
        {
            e.1 = r.t;
        }
        out.input += r.tokens;
        out.cached += hit;
        if r.first {
            out.first_input += r.tokens;
            out.first_cached += hit;
        }
    }
    out
}

/// A scenario's requests. `stable`: tools + system tokens; `grow`: tokens each step adds.
fn sim_scenario(name: &str, stable: u64, grow: u64) -> Vec<SimReq> {
    let mut reqs = Vec::new();
    let mut next_session = 0usize;
    let mut session = |start: f64,
                       steps: usize,
                       every: f64,
                       parent: Option<usize>,
                       forked: Option<(usize, u64)>,
                       reqs: &mut Vec<SimReq>|
     -> (usize, u64, f64) {
        let id = next_session;
        next_session += 1;
        let base = forked.map_or(stable + 50, |(_, at)| at + 60);
        let mut tokens = base;
        for i in 0..steps {
            reqs.push(SimReq {
                t: start + i as f64 * every,
                session: id,
                parent,
                forked,
                tokens,
                first: i == 0,
            });
            tokens += grow;
        }
        (id, tokens, start + steps as f64 * every)
    };
    match name {
        // One person, sessions one after another: 30 sessions of 20 requests, 6 s apart
        // (10 a minute), a minute between sessions.
        "back-to-back sessions" => {
            let mut t = 0.0;
            for _ in 0..30 {
                let (_, _, end) = session(t, 20, 6.0, None, None, &mut reqs);
                t = end + 60.0;
            }
        }
        // Four people (or panes) in one project at once, each as above (10 sessions each).
        "four at once" => {
            for p in 0..4 {
                let mut t = p as f64 * 1.5;
                for _ in 0..10 {
                    let (_, _, end) = session(t, 20, 6.0, None, None, &mut reqs);
                    t = end + 60.0;
                }
            }
        }
        // A parent that fans out: 5 steps, 4 fresh children at once (10 requests each), 5 more
        // steps; 10 such sessions back to back.
        // A parent that forks one child at a time: 10 steps, one fork (10 requests) while the
        // parent waits, 5 more steps; 10 such sessions back to back.
        "one fork at a time" => {
            let mut t = 0.0;
            for _ in 0..10 {
                let (p, tokens, mid) = session(t, 10, 6.0, None, None, &mut reqs);
                let (_, _, end) = session(mid, 10, 6.0, Some(p), Some((p, tokens)), &mut reqs);
                for i in 0..5 {
                    reqs.push(SimReq {
                        t: end + i as f64 * 6.0,
                        session: p,
                        parent: None,
                        forked: None,
                        tokens: tokens + (i as u64 + 1) * grow,
                        first: false,
                    });
                }
                t = end + 5.0 * 6.0 + 60.0;
            }
        }
        "fan-out, fresh children" | "fan-out, forks" => {
            let fork = name.ends_with("forks");
            let mut t = 0.0;
            for _ in 0..10 {
                let (p, tokens, mid) = session(t, 5, 6.0, None, None, &mut reqs);
                let mut end = mid;
                for c in 0..4 {
                    let forked = fork.then_some((p, tokens));
                    let (_, _, e) =
                        session(mid + c as f64 * 0.2, 10, 6.0, Some(p), forked, &mut reqs);
                    end = end.max(e);
                }
                // The parent resumes with its own history (its session's entry).
                for i in 0..5 {
                    reqs.push(SimReq {
                        t: end + i as f64 * 6.0,
                        session: p,
                        parent: None,
                        forked: None,
                        tokens: tokens + (i as u64 + 1) * grow,
                        first: false,
                    });
                }
                t = end + 5.0 * 6.0 + 60.0;
            }
        }
        _ => {}
    }
    reqs.sort_by(|a, b| a.t.total_cmp(&b.t));
    reqs
}

fn bench_agents() -> R<(String, String)> {
    let mut md =
        String::from("## 7. Sub-agents: fork cache reuse, the cost of a child, the cache key\n\n");

    // (a) Fork reuse, both wires.
    let forks = [
        fork_reuse(support::Wire::OpenAi)?,
        fork_reuse(support::Wire::Anthropic)?,
    ];
    let _ = writeln!(
        md,
        "### Cache reuse of a fork's first request\n\nOne `tern exec` session per wire: {FORK_STEPS} parent steps (bash printing about 600 bytes; a \
         `work_update` every {CACHE_UPDATE_EVERY} steps, so the parent's requests carry a work-state tail), then one `agent` call \
         with `fork: true`. The child's first request is compared with the parent's request that made the call.\n\n\
         | wire | parent prefix (tokens) | fork's first request: cached (simulated cache) | cached / parent prefix | byte extension of the prefix | common bytes / prefix bytes | fork's first request (tokens) |\n|---|---|---|---|---|---|---|"
    );
    let mut worst: f64 = 1.0;
    for f in &forks {
        let ratio = f.cached_tokens as f64 / f.prefix_tokens.max(1) as f64;
        worst = worst.min(ratio);
        let _ = writeln!(
            md,
            "| {} | {} | {} | **{:.2} %** | {} | {:.4} % | {} |",
            f.wire,
            f.prefix_tokens,
            f.cached_tokens,
            ratio * 100.0,
            if f.extension { "yes" } else { "**no**" },
            f.common_bytes as f64 / f.prefix_bytes.max(1) as f64 * 100.0,
            f.child_input_tokens
        );
    }
    let met = worst >= 0.99 && forks.iter().all(|f| f.extension);
    let _ = writeln!(
        md,
        "\n**Goal: cached tokens of a fork's first request ≥ 99 % of the parent's prefix — {}** (worst wire {:.2} %).\n\n\
         How measured: *parent prefix* = the parent's request body with its `<tern:work_state>` tail and closing brackets \
         removed (Anthropic: also the `cache_control` markers, request metadata that moves by design), at 4 bytes a token. \
         *Cached* = what the fake provider's simulated cache reported for the child's first request: the common byte prefix \
         with the previous request (the parent's), in whole 128-token blocks, so up to 127 tokens of the last block are not \
         counted. *Byte extension*: the child's body (markers removed) starts with the parent prefix, byte for byte \
         (tests/it/agents.rs asserts it). *Common bytes*: the common prefix of the two bodies (markers removed), up to the end of the parent prefix.\n",
        if met { "met" } else { "not met" },
        worst * 100.0
    );
    let goal = goal_row(
        "a fork's first request: cached ≥ 99 % of the parent's prefix (§7)",
        &forks
            .iter()
            .map(|f| {
                format!(
                    "{} {:.2} %",
                    f.wire,
                    f.cached_tokens as f64 / f.prefix_tokens.max(1) as f64 * 100.0
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
        met,
    );

    // (b) The cost of a child.
    let requests = 2 * CHILD_COUNT + 1;
    let (mut kids, mut plain) = (Vec::new(), Vec::new());
    for i in 0..CHILD_RUNS {
        // ABBA, so neither always runs on a warmer machine.
        for first in [i % 2 == 0, i % 2 != 0] {
            if first {
                kids.push(measured_run(children_script(), requests, CHILD_COUNT + 1)?);
            } else {
                plain.push(measured_run(plain_script(), requests, requests)?);
            }
        }
    }
    let cpu = |v: &[Measured]| mean(&v.iter().map(Measured::own_ms).collect::<Vec<_>>());
    let wall = |v: &[Measured]| {
        mean(
            &v.iter()
                .map(|m| m.wall.as_secs_f64() * 1000.0)
                .collect::<Vec<_>>(),
        )
    };
    let threads = |v: &[Measured]| v.iter().map(|m| m.threads).max().unwrap_or(0);
    let hwm = |v: &[Measured]| v.iter().map(|m| m.hwm_kb).max().unwrap_or(0);
    let (files, bytes) = child_footprint()?;
    let load = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    let per_child_cpu = (cpu(&kids) - cpu(&plain)) / CHILD_COUNT as f64;
    let per_child_wall = (wall(&kids) - wall(&plain)) / CHILD_COUNT as f64;
    let _ = writeln!(
        md,
        "### The harness cost of a child\n\nTwo `tern exec` sessions of {requests} model requests each, {CHILD_RUNS} runs of each, interleaved: \
         *children*: {CHILD_COUNT} `agent` calls one after another, each child answering in one request (so {} parent requests \
         and {CHILD_COUNT} child requests); *plain*: {requests} parent requests, each a cheap tool call (`update_plan`: no \
         process, one small file).\n\n\
         | session | tern CPU, mean | wall, mean | most threads | peak RSS |\n|---|---|---|---|---|\n\
         | {CHILD_COUNT} one-request children | {:.1} ms | {:.1} ms | {} | {} |\n\
         | {requests} plain requests | {:.1} ms | {:.1} ms | {} | {} |\n\n\
         **A child costs {:.2} ms of harness CPU and {:.2} ms of wall time beyond the request it makes** (difference of the \
         means / {CHILD_COUNT}); a plain request costs {:.2} ms CPU and {:.2} ms wall (the plain session / {requests}). A \
         one-request child leaves {files} files, {:.1} KB, in `agents/<id>/` (meta.json, system.txt, conversation.jsonl, \
         events.jsonl, lock, lease, the empty draft, report.md and the folders' files).\n\n\
         Load average when it ended: {} (1, 5, 15 min), on two shared cores: the wall figures move with it.\n\n\
         How measured: as in §1 (own CPU of the zombie from /proc, wall from spawn to exit, threads and VmHWM sampled every \
         2 ms); the fake provider answers at once, so the figures are tern's own work: opening the child's session folder \
         (its meta.json written before it runs), a thread, the child's request and events, its report and result.\n",
        CHILD_COUNT + 1,
        cpu(&kids),
        wall(&kids),
        threads(&kids),
        mb(hwm(&kids)),
        cpu(&plain),
        wall(&plain),
        threads(&plain),
        mb(hwm(&plain)),
        per_child_cpu,
        per_child_wall,
        cpu(&plain) / requests as f64,
        wall(&plain) / requests as f64,
        bytes as f64 / 1000.0,
        load.join(" "),
    );

    // (c) The cache key.
    let (stable, grow) = stable_and_growth()?;
    let scenarios = [
        "back-to-back sessions",
        "four at once",
        "one fork at a time",
        "fan-out, fresh children",
        "fan-out, forks",
    ];
    let _ = writeln!(
        md,
        "### The cache key: session id or a hash of the stable prefix\n\n\
         tern sends `prompt_cache_key` only to api.openai.com; a child and a fork send their parent's. The alternative is a \
         key derived from the stable prefix (a hash of tools + system), the same for every session of a project. A \
         simulation of OpenAI's routing, with tern's sizes: tools + system = **{stable} tokens** and **{grow} tokens** added \
         per step (both measured from the OpenAI fork session above).\n\n\
         | scenario | requests | key = session id, a child sends its parent's (tern): cached / input | its first requests | key = prefix hash: cached / input | its first requests | for comparison: every session its own id, children too |\n|---|---|---|---|---|---|---|"
    );
    let (mut sum_session, mut sum_prefix, mut sum_own, mut sum_input) = (0u64, 0u64, 0u64, 0u64);
    let (mut first_session, mut first_prefix) = (0u64, 0u64);
    for name in scenarios {
        let reqs = sim_scenario(name, stable, grow);
        let by_session = simulate(&reqs, stable, &|r| {
            splitmix(1 + r.parent.unwrap_or(r.session) as u64)
        });
        let by_prefix = simulate(&reqs, stable, &|_| splitmix(0xface));
        let by_own = simulate(&reqs, stable, &|r| splitmix(1 + r.session as u64));
        let pct = |a: u64, b: u64| format!("{:.1} %", a as f64 / b.max(1) as f64 * 100.0);
        let _ = writeln!(
            md,
            "| {name} | {} | **{}** | {} | **{}** | {} | {} ({} on first requests) |",
            reqs.len(),
            pct(by_session.cached, by_session.input),
            pct(by_session.first_cached, by_session.first_input),
            pct(by_prefix.cached, by_prefix.input),
            pct(by_prefix.first_cached, by_prefix.first_input),
            pct(by_own.cached, by_own.input),
            pct(by_own.first_cached, by_own.first_input),
        );
        sum_own += by_own.cached;
        sum_session += by_session.cached;
        sum_prefix += by_prefix.cached;
        sum_input += by_session.input;
        first_session += by_session.first_cached;
        first_prefix += by_prefix.first_cached;
    }
    let choose_session = sum_session >= sum_prefix;
    let _ = writeln!(
        md,
        "\nOver the {} scenarios: key = session id caches **{:.1} %** of input tokens, key = prefix hash **{:.1} %**; \
         cross-session hits (cached tokens of every session's first request, children included): {first_session} vs \
         {first_prefix} tokens. **Choice: {}.** (Every session with its own id, children too, would cache {:.1} %: \
         a parent's key shared by children running at once overflows, while one fork at a time gains from it.)\n\n\
         What the simulation assumes (OpenAI's prompt-caching guide, no measurement of OpenAI itself): a request goes to a \
         machine chosen by a hash of its first ~256 tokens and its `prompt_cache_key` (tern's first 256 tokens are the \
         tools, the same for the whole project, so the key alone picks the machine: a prefix-hash key routes like no key \
         at all); each of {SIM_MACHINES} machines has its own cache; a (prefix, key) group that sends more than \
         {SIM_RATE} requests a minute overflows, and each further request lands on one of {SIM_EXTRA} other machines at \
         random; a request reads the longest prefix of itself cached on its machine (its own session's last prompt, a \
         fork's parent up to the fork point, or just tools + system if anything of the project is cached there), counted \
         in 128-token increments from 1024; entries live {SIM_TTL:.0} s unused. Requests come 6 s apart (10 a minute per \
         session). Scenarios: *back-to-back*: 30 sessions of 20 requests, a minute apart; *four at once*: four such \
         streams (10 sessions each) in one project; *one fork at a time*: 10 parents of 10 + 5 steps, each forking \
         one child (10 requests) while it waits; *fan-out*: 10 parents of 5 + 5 steps, each starting 4 children at \
         once (10 requests each), fresh or forked; under the session-id key a child sends its parent's id, as tern does.\n",
        scenarios.len(),
        sum_session as f64 / sum_input.max(1) as f64 * 100.0,
        sum_prefix as f64 / sum_input.max(1) as f64 * 100.0,
        if choose_session {
            "keep the session id (a child's and a fork's key is its parent's): the prefix key wins the first request of a \
             session (its tools + system), but puts the whole project on one key, which overflows as soon as sessions or \
             children run at once, and an overflowed request loses its whole history"
        } else {
            "the prefix hash caches more here: tern should derive the key from the stable prefix"
        },
        sum_own as f64 / sum_input.max(1) as f64 * 100.0,
    );
    Ok((md, goal))
}

/// Tools + system tokens and tokens added per step, from a short real `tern exec` session.
fn stable_and_growth() -> R<(u64, u64)> {
    let steps = 11;
    let server = FakeServer::start(script(steps, |k| {
        bash_call(
            &format!("call_{k}"),
            &format!("echo turn {k}; seq {k} {}", k + 150),
        )
    }));
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut cmd = tern_command(&server, tmp.path(), TERN, &exec_args(steps, "x"))?;
    let m = measure(&mut cmd, Some(&server))?;
    let reqs = server.requests();
    if m.code != 0 || reqs.len() != steps {
        return Err("the sizing session did not complete".into());
    }
    let first = reqs[0].json();
    let system = first["messages"][0].to_string().len();
    let tools = first["tools"].to_string().len();
    let stable = ((system + tools) / support::BYTES_PER_TOKEN) as u64;
    let grow = ((reqs[steps - 1].body.len() - reqs[0].body.len())
        / (steps - 1)
        / support::BYTES_PER_TOKEN) as u64;
    Ok((stable, grow))
}

// ---------------------------------------------------------------------------------------------
// The machine

fn command_line(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

fn machine(load_before: &str, load_after: &str, took: Duration) -> String {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown", |(_, v)| v.trim())
        .to_string();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| status_num(&s, "MemTotal:"))
        .unwrap_or(0);
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let load = |s: &str| s.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
    let mut md = String::new();
    md.push_str("## Machine and run\n\n");
    md.push_str("| | |\n|---|---|\n");
    let _ = writeln!(md, "| date (UTC) | {} |", tern::clock::now_rfc3339());
    let _ = writeln!(
        md,
        "| CPU | {model}, **{cores} cores, shared** with other jobs |"
    );
    let _ = writeln!(md, "| memory | {:.1} GB |", mem as f64 / 1024.0 / 1024.0);
    let _ = writeln!(md, "| kernel | Linux {} |", kernel.trim());
    let _ = writeln!(md, "| rustc | {} |", command_line("rustc", &["-V"]));
    let _ = writeln!(
        md,
        "| tern commit (`-dirty`: uncommitted changes) | {} |",
        command_line(
            "git",
            &[
                "-C",
                env!("CARGO_MANIFEST_DIR"),
                "describe",
                "--always",
                "--dirty"
            ]
        )
    );
    let _ = writeln!(
        md,
        "| load average (1, 5, 15 min) | {} before, {} after |",
        load(load_before),
        load(load_after)
    );
    let _ = writeln!(md, "| bench duration | {:.0} s |", took.as_secs_f64());
    md.push('\n');
    md
}

// ---------------------------------------------------------------------------------------------
// 10. Checkpoints

/// Files of the checkpoint workspace, changed files per turn, turns for the store size.
const CP_FILES: usize = 10_000;
const CP_CHANGED: usize = 10;
const CP_TURNS: usize = 100;

/// A small pseudo-random generator (xorshift), so runs write the same kind of content.
struct Xs(u64);
impl Xs {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A source-like file of about 1–4 kB: lines of words, some varying.
fn cp_file(rng: &mut Xs, n: usize) -> String {
    let lines = 20 + (rng.next() % 60) as usize;
    let mut s = String::new();
    for l in 0..lines {
        let _ = writeln!(
            s,
            "fn item_{n}_{l}(x: u64) -> u64 {{ x.wrapping_mul({}) ^ {} }}",
            rng.next() % 1000,
            rng.next() % 100_000
        );
    }
    s
}

fn cp_path(ws: &Path, i: usize) -> std::path::PathBuf {
    ws.join(format!("src/m{:03}/f{:04}.rs", i / 100, i))
}

/// Writes `CP_CHANGED` files chosen at random with new content.
fn cp_change(ws: &Path, rng: &mut Xs) -> R<()> {
    for _ in 0..CP_CHANGED {
        let i = (rng.next() % CP_FILES as u64) as usize;
        fs::write(cp_path(ws, i), cp_file(rng, i)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn dir_bytes(p: &Path) -> u64 {
    let mut n = 0;
    if let Ok(rd) = fs::read_dir(p) {
        for e in rd.flatten() {
            if let Ok(m) = e.metadata() {
                n += if m.is_dir() {
                    dir_bytes(&e.path())
                } else {
                    m.len()
                };
            }
        }
    }
    n
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// CPU time so far of this process and its reaped children (the git runs), user + system, ms.
fn cpu_ms() -> f64 {
    let of = |who| {
        // SAFETY: getrusage fills the struct we own; on error it stays zeroed.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(who, &mut ru) };
        let tv = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
        tv(ru.ru_utime) + tv(ru.ru_stime)
    };
    of(libc::RUSAGE_SELF) + of(libc::RUSAGE_CHILDREN)
}

/// Times `f`: (wall ms, CPU ms of this process and the git it ran).
fn timed<T>(f: impl FnOnce() -> R<T>) -> R<(T, f64, f64)> {
    let (c, t) = (cpu_ms(), Instant::now());
    let v = f()?;
    Ok((v, ms(t.elapsed()), cpu_ms() - c))
}

/// The checkpoint store in-process (the library's `Store`, what a turn runs): a 10,000-file
/// workspace, its first checkpoint, warm checkpoints with 10 changed files, an unchanged one,
/// undo of 10 files, the store's size after 100 turns, and what a turn without a command costs.
fn bench_checkpoints() -> R<(String, String)> {
    use tern::checkpoint::{Limits, Store};
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let ws = dir.path().join("ws");
    let mut rng = Xs(0x9e37_79b9_7f4a_7c15);
    for i in 0..CP_FILES {
        let p = cp_path(&ws, i);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        fs::write(&p, cp_file(&mut rng, i)).map_err(|e| e.to_string())?;
    }
    fs::write(ws.join(".gitignore"), "target/\n").map_err(|e| e.to_string())?;
    let ws_bytes = dir_bytes(&ws);
    let state = ws.join(".tern");
    fs::create_dir_all(&state).map_err(|e| e.to_string())?;
    let limits = Limits::default();
    let store = Store::open(&state, &ws, limits).map_err(|e| e.to_string())?;
    let session = "20261201-000000-bench";
    let mut turn = 1u32;
    let rec = |turn: u32| store.record_turn(session, turn).map_err(|e| e.to_string());
    let (_, first, first_cpu) = timed(|| rec(turn))?;

    // Warm: each turn changes 10 files, then the next turn's checkpoint is taken.
    let (mut warm, mut warm_cpu) = (Vec::new(), Vec::new());
    for _ in 0..30 {
        cp_change(&ws, &mut rng)?;
        turn += 1;
        let ((new, _), w, c) = timed(|| rec(turn))?;
        warm.push(w);
        warm_cpu.push(c);
        if !new {
            return Err("a changed workspace made no new checkpoint".into());
        }
    }
    let (mut same, mut same_cpu) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        turn += 1;
        let (_, w, c) = timed(|| rec(turn))?;
        same.push(w);
        same_cpu.push(c);
    }
    // Undo of 10 files: a turn changes 10, undo puts them back; redo in between so each undo
    // starts from the same kind of state.
    let (mut undo, mut undo_cpu, mut redo, mut redo_cpu) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..10 {
        turn += 1;
        rec(turn)?;
        cp_change(&ws, &mut rng)?;
        let (r, w, c) = timed(|| store.undo(session, 1, None).map_err(|e| e.to_string()))?;
        undo.push(w);
        undo_cpu.push(c);
        if r.changes.is_empty() {
            return Err("undo changed nothing".into());
        }
        let (_, w, c) = timed(|| store.redo().map_err(|e| e.to_string()))?;
        redo.push(w);
        redo_cpu.push(c);
    }
    // The store after 100 turns of 10 changed files each (the turns above count).
    while (turn as usize) < CP_TURNS + 1 {
        cp_change(&ws, &mut rng)?;
        turn += 1;
        store
            .record_turn(session, turn)
            .map_err(|e| e.to_string())?;
    }
    let store_bytes = dir_bytes(&store.folder().join("git"));

    // A turn without a command: the door writes turns.jsonl's line and takes no checkpoint.
    let sdir = state.join("sessions").join(session);
    fs::create_dir_all(&sdir).map_err(|e| e.to_string())?;
    let s = tern::store::Session::at(session, sdir);
    let (mut no_cmd, mut no_cmd_cpu) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        let (_, w, c) = timed(|| tern::checkpoint::turns::start(&s, 0).map_err(|e| e.to_string()))?;
        no_cmd.push(w);
        no_cmd_cpu.push(c);
    }

    let (wm, w90, wc) = (median(&warm), percentile(&warm, 90.0), median(&warm_cpu));
    let (um, uc) = (median(&undo), median(&undo_cpu));
    let mut md = String::new();
    md.push_str("## 10. Checkpoints: cost per turn, undo, store size\n\n");
    let _ = writeln!(
        md,
        "In-process, the library's `checkpoint::Store` (what a turn runs before its first command): a \
         workspace of {CP_FILES} source-like files ({}) in 100 folders, on this machine's temporary \
         folder; the store in its `.tern/checkpoints/git`; {}. Each warm turn first rewrites \
         {CP_CHANGED} files chosen at random, then times `record_turn` (list changed files, update the \
         store's index, write the tree, commit, one ref transaction). Undo: a checkpoint, then \
         {CP_CHANGED} files changed, then `undo` timed (snapshot of the state now, ref transaction, \
         `read-tree -u`), then `redo` timed.\n",
        tern::checkpoint::size_text(ws_bytes),
        Command::new("git")
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    );
    md.push_str(
        "| measure | wall median | wall p90 | CPU median (tern + git) | goal |\n|---|---|---|---|---|\n",
    );
    let row = |md: &mut String, name: &str, v: &[f64], c: &[f64], goal: &str| {
        let _ = writeln!(
            md,
            "| {name} | {:.1} ms | {:.1} ms | {:.1} ms | {goal} |",
            median(v),
            percentile(v, 90.0),
            median(c)
        );
    };
    row(
        &mut md,
        "first checkpoint (cold: every file hashed, then packed)",
        &[first],
        &[first_cpu],
        "",
    );
    row(
        &mut md,
        "checkpoint, 10 files changed (warm, 30 turns)",
        &warm,
        &warm_cpu,
        "< 50 ms",
    );
    row(
        &mut md,
        "checkpoint, nothing changed (10 turns)",
        &same,
        &same_cpu,
        "",
    );
    row(
        &mut md,
        "undo of 10 files (10 runs)",
        &undo,
        &undo_cpu,
        "< 100 ms",
    );
    row(&mut md, "redo of 10 files (10 runs)", &redo, &redo_cpu, "");
    row(
        &mut md,
        "a turn without a command (turns.jsonl line only, 20 runs)",
        &no_cmd,
        &no_cmd_cpu,
        "0 ms of checkpoint",
    );
    let _ = writeln!(
        md,
        "\nStore size after {CP_TURNS} turns of {CP_CHANGED} changed files each: **{}** on disk (the first \
         checkpoint packed, later ones loose objects, zlib; the workspace itself is {}). A turn without a command runs no git at all: \
         its cost is the `turns.jsonl` line in the table (a small append under the session lock), \
         which forks need.\n",
        tern::checkpoint::size_text(store_bytes),
        tern::checkpoint::size_text(ws_bytes)
    );
    let goal = goal_row(
        "checkpoint under 50 ms warm (10 of 10,000 files changed), undo of 10 files under 100 ms (§9)",
        &format!(
            "checkpoint median {wm:.1} ms wall, {wc:.1} ms CPU (p90 {w90:.1} ms); undo median {um:.1} ms wall, {uc:.1} ms CPU; store {} after {CP_TURNS} turns",
            tern::checkpoint::size_text(store_bytes)
        ),
        wm < 50.0 && um < 100.0,
    );
    Ok((md, goal))
}
// 11. ACP: how soon a cancel is answered

/// Cancels measured.
const CANCEL_RUNS: usize = 15;

/// `session/cancel` during a running command → the prompt's `cancelled` response, over raw
/// JSON-RPC on `tern acp`'s pipes. The command (`sleep …; echo`) makes bash fork a child, so the
/// kill leaves an orphan: the case where a zombie used to hold the answer for the 2 s kill grace
/// (issue 21).
fn bench_cancel() -> R<(String, String)> {
    use std::io::{BufRead, BufReader, Write};
    let mut replies = Vec::new();
    for i in 0..CANCEL_RUNS {
        // One request per prompt: each is cancelled while its command runs.
        replies.push(bash_call(
            &format!("c{i}"),
            &format!("sleep 30.{i:04}7; echo after"),
        ));
    }
    let server = FakeServer::start(replies);
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut cmd = tern_command(
        &server,
        dir.path(),
        TERN,
        &["acp".into(), "--approval".into(), "auto".into()],
    )?;
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| e.to_string())?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let out = child.stdout.take().ok_or("no stdout")?;
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str(&line)
                && tx.send(v).is_err()
            {
                break;
            }
        }
    });
    let mut send = |v: Value| -> R<()> {
        let mut line = serde_json::to_vec(&v).map_err(|e| e.to_string())?;
        line.push(b'\n');
        stdin.write_all(&line).map_err(|e| e.to_string())
    };
    let wait_for = |pred: &dyn Fn(&Value) -> bool| -> R<Value> {
        loop {
            let v = rx
                .recv_timeout(Duration::from_secs(60))
                .map_err(|_| "tern acp went quiet".to_string())?;
            if pred(&v) {
                return Ok(v);
            }
        }
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}),
    )?;
    wait_for(&|v| v["id"] == 1)?;
    let ws = dir.path().join("ws");
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": ws, "mcpServers": []}}),
    )?;
    let sid = wait_for(&|v| v["id"] == 2)?["result"]["sessionId"]
        .as_str()
        .ok_or("no session")?
        .to_string();
    let mut ms = Vec::new();
    for i in 0..CANCEL_RUNS {
        let id = 10 + i;
        send(
            json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
            "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "sleep"}]}}),
        )?;
        wait_for(&|v| v["params"]["update"]["status"] == "in_progress")?;
        // Until the shell has forked its sleep (the orphan-to-be).
        let marker = format!("30.{i:04}7");
        let started = Instant::now();
        while !sleeping(&marker) && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(2));
        }
        let t = Instant::now();
        send(json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}))?;
        let r = wait_for(&|v| v["id"] == id && v.get("method").is_none())?;
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
        if r["result"]["stopReason"] != "cancelled" {
            return Err(format!("cancel {i}: {r}"));
        }
    }
    drop(stdin);
    let _ = child.wait();
    let (med, p90, max) = (
        median(&ms),
        percentile(&ms, 90.0),
        ms.iter().cloned().fold(0.0, f64::max),
    );
    let mut md = String::new();
    md.push_str("## 11. ACP: cancel latency\n\n");
    let _ = writeln!(
        md,
        "`session/cancel` sent while a command runs (`sleep …; echo after`: bash forks the sleep, so \
         the kill leaves an orphan) → the prompt's `cancelled` response, over raw JSON-RPC on the \
         pipes of one `tern acp --approval auto`; {CANCEL_RUNS} cancels. tern is the child \
         subreaper of its commands and reaps the orphan; its liveness check does not count \
         zombies (before issue 21, a zombie PID 1 never reaped held every answer for the 2 s \
         kill grace).\n"
    );
    md.push_str("| median | p90 | max |\n|---|---|---|\n");
    let _ = writeln!(md, "| {med:.0} ms | {p90:.0} ms | {max:.0} ms |\n");
    let goal = goal_row(
        "a cancel is answered within 200 ms of the kill (ACP)",
        &format!("median {med:.0} ms, max {max:.0} ms"),
        max < 200.0,
    );
    Ok((md, goal))
}

/// True while a `sleep MARKER` process runs.
fn sleeping(marker: &str) -> bool {
    let want = format!("sleep\0{marker}\0");
    fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .any(|e| fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want.as_bytes()))
        })
        .unwrap_or(false)
}
