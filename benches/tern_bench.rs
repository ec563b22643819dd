//! tern's benchmarks (`cargo bench`): harness CPU time and memory of the release `tern exec`
//! against the fake provider, bash-tool drain throughput and memory, start-up time and binary
//! size, prefix-cache discipline, a 40-step session next to quoted peer figures, the sandbox's
//! cost per call, and sub-agents (a fork's cache reuse, the cost of a child, the cache key).
//!
//! Everything is measured in one run on the machine it runs on and written to BENCHMARKS.md at
//! the package root, with how each number was measured. Nothing here asserts a speed: goals are
//! reported as met or not, never enforced.
//!
//! Each section lives in `benches/sections/<name>.rs` (a child module that reads this file's
//! shared parts through `use super::*`); this file keeps `main`, `run_all` and what several
//! sections share: running and measuring `tern exec` against the fake provider, small
//! statistics, and the machine's description.

// A section reads best as one list of measurements: the 100-line rule (Cargo.toml [lints],
// issue 39) holds for the crate, not for its benchmarks.
#![allow(clippy::too_many_lines)]

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

#[path = "sections/agents.rs"]
mod agents_section;
#[path = "sections/bill.rs"]
mod bill;
#[path = "sections/cache.rs"]
mod cache_section;
#[path = "sections/cancel.rs"]
mod cancel_section;
#[path = "sections/checkpoints.rs"]
mod checkpoints_section;
#[path = "sections/compaction.rs"]
mod compaction_section;
#[path = "sections/door.rs"]
mod door_section;
#[path = "sections/drain.rs"]
mod drain_section;
#[path = "sections/hooks.rs"]
mod hooks_section;
#[path = "sections/jail.rs"]
mod jail_section;
#[path = "sections/mcp.rs"]
mod mcp_section;
#[path = "sections/peers.rs"]
mod peers_section;
#[path = "sections/responses.rs"]
mod responses_section;
#[path = "sections/sandbox.rs"]
mod sandbox_section;
#[path = "sections/skills.rs"]
mod skills_section;
#[path = "sections/startup.rs"]
mod startup_section;
#[path = "sections/turns.rs"]
mod turns_section;

use agents_section::bench_agents;
use cache_section::{bench_cache, common_prefix, ledger_args};
use cancel_section::bench_cancel;
use checkpoints_section::bench_checkpoints;
use drain_section::{bench_drain, drain_child, overhead_child};
use hooks_section::bench_hooks;
use peers_section::bench_peers;
use sandbox_section::{bench_sandbox, sandbox_child};
use startup_section::bench_startup;
use turns_section::{BASELINE_ENV, bench_baseline, bench_turns};

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
    // `cargo bench -- --peers-only`: section 5 alone, printed, BENCHMARKS.md left as it is;
    // `--bill-only`: its bill table alone.
    if args.iter().any(|a| a == "--peers-only") {
        return printed(bench_peers().map(|(md, goal)| format!("{goal}\n{md}")));
    }
    if args.iter().any(|a| a == "--bill-only") {
        return printed(
            peers_section::bench_bill()
                .map(|(md, summary, goal)| format!("{goal}\n{summary}\n\n{md}")),
        );
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
    // `cargo bench -- --mcp-only`: section 12 alone, printed (side by side with
    // TERN_BENCH_BASELINE when it is set).
    if args.iter().any(|a| a == "--mcp-only") {
        return printed(mcp_section::bench_mcp());
    }
    // `cargo bench -- --compaction-only`: section 14 alone, printed, BENCHMARKS.md left as it is.
    if args.iter().any(|a| a == "--compaction-only") {
        return printed(compaction_section::bench_compaction());
    }
    // `cargo bench -- --skills-only`: section 16 alone, printed (side by side with
    // TERN_BENCH_BASELINE when it is set), BENCHMARKS.md left as it is.
    if args.iter().any(|a| a == "--skills-only") {
        return printed(skills_section::bench_skills());
    }
    // `cargo bench -- --door-only`: section 15 alone, printed, BENCHMARKS.md left as it is.
    if args.iter().any(|a| a == "--door-only") {
        return printed(door_section::bench_door());
    }
    // `cargo bench -- --responses-only`: section 13 alone, printed, BENCHMARKS.md left as it is.
    if args.iter().any(|a| a == "--responses-only") {
        return printed(responses_section::bench_responses());
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
    // `TERN_BENCH_BASELINE=old/tern cargo bench -- --jail-baseline-only`: the jail's start and
    // per-call cost in a git workspace, side by side with the baseline, printed.
    if args.iter().any(|a| a == "--jail-baseline-only") {
        return printed(
            std::env::var(BASELINE_ENV)
                .map_err(|_| format!("--jail-baseline-only needs {BASELINE_ENV}=<tern binary>"))
                .and_then(|b| jail_section::bench_jail_baseline(&b)),
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
    let (peers, goal_peers) = bench_peers()?;
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
    eprintln!("[12/12] MCP …");
    let mcp = mcp_section::bench_mcp()?;
    eprintln!("[13/13] the Responses wire …");
    let responses = responses_section::bench_responses()?;
    eprintln!("[14/14] what a compaction keeps …");
    let compaction = compaction_section::bench_compaction()?;
    eprintln!("[15/15] the door …");
    let door = door_section::bench_door()?;

    let load_after = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    md.push_str(&machine(&load_before, &load_after, started.elapsed()));
    md.push_str("## Goals at a glance\n\n| goal | measured in this run | |\n|---|---|---|\n");
    for row in [
        goal_turns,
        goal_drain,
        goal_cache,
        goal_peers,
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
    md.push_str(&mcp);
    md.push_str(&responses);
    md.push_str(&compaction);
    md.push_str(&door);

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

/// The sessions sections 1, 8 and 9 compare: `requests` model requests, each answered with
/// one `bash` call of `true N` (numbered, so no two steps repeat), the last with text; `program`
/// with `env` added, in the system's temporary folder.
fn true_session(program: &str, env: &[(&str, &str)], requests: usize) -> R<Session> {
    run_program(
        program,
        env,
        script(requests, |k| {
            bash_call(&format!("call_{k}"), &format!("true {k}"))
        }),
        requests,
        "Run true until told to stop (each call numbered, so no two steps repeat).",
        &std::env::temp_dir(),
    )
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn mb(kb: u64) -> String {
    format!("{:.1} MB", kb as f64 / 1024.0)
}

/// A goal's summary row: goal, what was measured, met or not.
fn goal_row(goal: &str, measured: &str, met: bool) -> String {
    format!(
        "| {goal} | {measured} | **{}** |\n",
        if met { "met" } else { "not met" }
    )
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
