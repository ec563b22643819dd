//! Section 1: harness CPU per turn, and the side-by-side run against a baseline tern binary.

use super::*;

pub(super) fn bench_turns() -> R<(String, String)> {
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
pub(super) const BASELINE_ENV: &str = "TERN_BENCH_BASELINE";
/// Interleaved pairs of 200-turn sessions in the side-by-side comparison.
pub(super) const BASELINE_PAIRS: usize = 6;

/// Section 1's 200-turn session run in turn by this tern, by this tern without the sandbox
/// (`TERN_SANDBOX=danger-full-access`) and by `baseline`, so all see the same machine load;
/// returns a Markdown subsection with their own CPU and its ratios.
pub(super) fn bench_baseline(baseline: &str) -> R<String> {
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
    let mut hwm: [Vec<f64>; 3] = Default::default();
    for round in 0..BASELINE_PAIRS {
        // Rotate which goes first, so a drift in load favours none.
        for i in 0..arms.len() {
            let arm = (round + i) % arms.len();
            let (name, program, env) = arms[arm];
            let s = true_session(program, env, requests)?;
            own[arm].push(s.m.own_ms() / requests as f64);
            kids[arm].push(s.m.children_ms() / (requests - 1) as f64);
            hwm[arm].push(s.m.hwm_kb as f64);
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
         | arm | tern CPU per turn (median) | mean | / baseline (medians) | bash child CPU per call (median) | peak RSS of tern (median VmHWM) | / baseline |\n\
         |---|---|---|---|---|---|---|"
    );
    let base = median(&own[2]).max(f64::MIN_POSITIVE);
    let base_hwm = median(&hwm[2]).max(1.0);
    for (i, (name, _, _)) in arms.iter().enumerate() {
        let _ = writeln!(
            md,
            "| {name} | **{:.3} ms** | {:.3} ms | {:.2}× | {:.2} ms | {:.1} MB | {:.2}× |",
            median(&own[i]),
            mean(&own[i]),
            median(&own[i]) / base,
            median(&kids[i]),
            median(&hwm[i]) / 1024.0,
            median(&hwm[i]) / base_hwm,
        );
    }
    md.push('\n');
    Ok(md)
}
