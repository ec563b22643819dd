//! The kill-point sweep (issue 9, item 7): every write, fsync, rename, link, append and remove of
//! the state folder in the scripted sessions of [`super::scenario`] is a point where the process
//! dies (SIGKILL through `TERN_FAULT_AT`, debug builds only); after each death
//! `tern exec --continue` runs twice against a strict fake provider and every invariant of
//! [`super::check`] is checked. A variant kills that resume itself at one of its own points
//! (every one of them with `TERN_FAULT_SWEEP=full`), then resumes again and checks again.
//!
//! A dry run with `TERN_FAULT_LOG` counts each step's points first; point k of a scenario is the
//! k-th over its steps, so a run starts from a copy of the workspace the dry run left after the
//! steps before the one holding k, then runs that step with `TERN_FAULT_AT` set to k's place in
//! it. Points run on a few threads (`TERN_FAULT_THREADS`, default 4: the processes mostly wait on each other and the fake
//! server), each in its own workspace (on tmpfs where there is one) with its own fake servers.
//!
//! The test writes `target/RELIABILITY.md`, and with `TERN_FAULT_REPORT=1` the committed
//! `RELIABILITY.md` at the repository root (points per scenario, violations by
//! invariant with the points that cause them, runtime, what is not reached), then fails if any
//! invariant was violated. One point alone, printing what it found:
//! `TERN_FAULT_ONLY=verbs:57 cargo test --test it faults::sweep -- --nocapture`, or one
//! scenario with `TERN_FAULT_ONLY=verbs` (then the file is not written).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::check::{self, Acked, Violation};
use super::run::{HANG, Point, Run, Site, points, run};
use super::scenario::{self, Scenario};
use crate::support::{FakeServer, Recorded, Wire, validate};

/// The prompts of the two resumes after a crash.
const RESUME: [&str; 2] = ["go on", "again"];

/// What the dry run of one scenario found: the points of each step, in order.
struct Dry {
    steps: Vec<Vec<Point>>,
    /// The workspace's files after each step.
    trees: Vec<check::Tree>,
    /// The workspace itself after each step but the last, copied (mtimes kept) to start a
    /// point of a later step: replaying the steps before it for each of its points was a fifth
    /// of the sweep's runs (issue 18, item 8). The copy is what a replay makes (nothing tern
    /// writes names the workspace's path but `meta.json`'s `cwd`, which is only shown).
    after: Vec<Site>,
}

impl Dry {
    fn total(&self) -> usize {
        self.steps.iter().map(Vec::len).sum()
    }

    /// (step, place in that step) of global point `k` (1-based).
    fn locate(&self, k: usize) -> (usize, usize) {
        let mut rest = k;
        for (s, pts) in self.steps.iter().enumerate() {
            if rest <= pts.len() {
                return (s, rest);
            }
            rest -= pts.len();
        }
        panic!("point {k} is past the last step");
    }
}

/// Runs `sc`'s steps one after the other with fault logs; each must complete and use its whole
/// script, and every request must be one a strict provider accepts (else the scenario itself is
/// broken, and the test says so).
fn dry_run(sc: &Scenario) -> Dry {
    let site = Site::new();
    let mut steps = Vec::new();
    let mut trees = Vec::new();
    let mut after = Vec::new();
    for (i, st) in sc.steps.iter().enumerate() {
        let fake = FakeServer::strict(st.replies.clone());
        let log = site.log(&format!("dry-{i}"));
        let mut cmd = site.tern(&fake.openai_base(), &st.args);
        cmd.env("TERN_FAULT_LOG", &log);
        let r = run(cmd, st.stdin, HANG);
        assert_eq!(
            r.code,
            Some(0),
            "{}: the dry run of step {i} ({}) failed: {}\n{}",
            sc.name,
            st.name,
            r.summary(),
            r.stderr
        );
        for req in fake.requests() {
            validate(Wire::OpenAi, &req.json()).expect("the scenario sends only valid requests");
        }
        assert_eq!(
            fake.remaining(),
            0,
            "{}: step {} left scripted replies unused",
            sc.name,
            st.name
        );
        steps.push(points(&log, &site.root()));
        trees.push(check::workspace(&site.root()));
        if i + 1 < sc.steps.len() {
            after.push(site.copy());
        }
    }
    Dry {
        steps,
        trees,
        after,
    }
}

/// One kill point to sweep.
#[derive(Clone)]
struct Job {
    scenario: usize,
    /// Global, 1-based.
    k: usize,
    step: usize,
    /// Place in its step, 1-based (`TERN_FAULT_AT`).
    at: usize,
    point: Point,
    /// A restoring step's workspace before and after it.
    trees: Option<(check::Tree, check::Tree)>,
}

/// One violation and what caused it.
struct Found {
    /// The point whose kill broke it: the step's, or the killed resume's.
    cause: Point,
    /// When it was seen: after the kill, after resuming, after a killed resume and another.
    phase: &'static str,
    v: Violation,
}

/// What sweeping one point found.
struct Outcome {
    job: Job,
    /// The step did not die at its point (the dry run's count did not repeat).
    unreached: bool,
    /// The point it died at when that differs from the dry run's.
    drift: Option<Point>,
    /// Points the first resume passed.
    resume_points: usize,
    /// The resume points killed in the variant.
    resume_kills: Vec<Point>,
    found: Vec<Found>,
}

/// Settings from the environment.
struct Mode {
    /// Kill the resume at every one of its points (else at one per sweep point, cycling).
    full: bool,
    threads: usize,
    /// `TERN_FAULT_ONLY=scenario[:k]`: one scenario, or one point of it.
    only: Option<(String, Option<usize>)>,
}

fn mode() -> Mode {
    let full = std::env::var("TERN_FAULT_SWEEP").is_ok_and(|v| v == "full");
    let threads = std::env::var("TERN_FAULT_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4usize)
        .max(1);
    let only = std::env::var("TERN_FAULT_ONLY")
        .ok()
        .map(|v| match v.split_once(':') {
            Some((s, k)) => (s.to_string(), k.parse().ok()),
            None => (v, None),
        });
    Mode {
        full,
        threads,
        only,
    }
}

/// What a crash left: the workspace, the faulted run, the points it passed, and the draft of
/// the current session before the faulted step (session id, text).
struct Crash {
    site: Site,
    faulted: Run,
    points: Vec<Point>,
    draft: Option<(String, String)>,
}

/// Starts from the workspace as the steps before `job.step` left it (a copy of the dry run's),
/// then runs `job.step` with the fault at `job.at`.
fn crash(sc: &Scenario, dry: &Dry, job: &Job) -> Result<Crash, String> {
    let site = match job.step {
        0 => Site::new(),
        s => dry
            .after
            .get(s - 1)
            .ok_or_else(|| format!("no workspace after step {s}"))?
            .copy(),
    };
    let draft = site.current().and_then(|id| {
        let text = std::fs::read_to_string(
            site.state()
                .join("sessions")
                .join(&id)
                .join("plan.draft.md"),
        )
        .ok()?;
        Some((id, text))
    });
    let st = &sc.steps[job.step];
    let fake = FakeServer::strict(st.replies.clone());
    let log = site.log("faulted");
    let mut cmd = site.tern(&fake.openai_base(), &st.args);
    cmd.env("TERN_FAULT_AT", job.at.to_string())
        .env("TERN_FAULT_LOG", &log);
    let faulted = run(cmd, st.stdin, HANG);
    let points = points(&log, &site.root());
    Ok(Crash {
        site,
        faulted,
        points,
        draft,
    })
}

/// `tern exec --json --continue PROMPT`, or a new `tern exec --json PROMPT` when no session was
/// made current yet (then `--continue` has nothing to continue: "no session", exit 2).
fn resume_args<'a>(site: &Site, prompt: &'a str) -> Vec<&'a str> {
    if site.current().is_some() {
        vec!["exec", "--json", "--continue", prompt]
    } else {
        vec!["exec", "--json", prompt]
    }
}

/// What a recovery found: violations (with the phase they were seen in), the points the first
/// resume passed, and the point a killed resume died at.
struct Recovery {
    found: Vec<(&'static str, Violation)>,
    resume_points: usize,
    killed_at: Option<Point>,
}

/// Resumes after a crash: `tern exec --continue` twice against a strict provider, then checks
/// every invariant. With `kill_at`, a first resume dies at that point of its own before.
fn recover(site: &Site, acked: &Acked, kill_at: Option<usize>) -> Recovery {
    let mut acked = acked.clone();
    let mut rec = Recovery {
        found: Vec::new(),
        resume_points: 0,
        killed_at: None,
    };
    let mut requests: Vec<Recorded> = Vec::new();
    let mut stdouts = Vec::new();
    if let Some(at) = kill_at {
        let fake = FakeServer::strict(vec![]);
        let log = site.log("resume-killed");
        let mut cmd = site.tern(&fake.openai_base(), &resume_args(site, RESUME[0]));
        cmd.env("TERN_FAULT_AT", at.to_string())
            .env("TERN_FAULT_LOG", &log);
        let r = run(cmd, None, HANG);
        rec.killed_at = points(&log, &site.root()).pop();
        if r.hung || !r.killed() {
            rec.found.push((
                "after the resume to be killed",
                violation(
                    "resume_failed",
                    format!("it did not die at its point {at}: {}", r.summary()),
                ),
            ));
        }
        requests.extend(fake.requests());
        stdouts.push(r.stdout);
        for x in check::at_any_moment(&site.state()) {
            rec.found.push(("after the kill", x));
        }
    }
    for (i, prompt) in RESUME.iter().enumerate() {
        let fake = FakeServer::strict(vec![]);
        let args = resume_args(site, prompt);
        let log = site.log(&format!("resume-{i}"));
        let mut cmd = site.tern(&fake.openai_base(), &args);
        cmd.env("TERN_FAULT_LOG", &log);
        let r = run(cmd, None, HANG);
        if i == 0 {
            rec.resume_points = points(&log, &site.root()).len();
        }
        requests.extend(fake.requests());
        if r.code != Some(0) {
            rec.found.push((
                "resuming",
                violation(
                    "resume_failed",
                    format!("`tern {}` {}", args.join(" "), r.summary()),
                ),
            ));
        }
        stdouts.push(r.stdout);
    }
    let refs: Vec<&str> = stdouts.iter().map(String::as_str).collect();
    acked.observe(&site.state(), &refs);
    let resumed = site.current();
    for x in check::after_recovery(&site.state(), &acked, &requests, resumed.as_deref()) {
        rec.found.push(("after resuming", x));
    }
    rec
}

fn violation(invariant: &'static str, detail: String) -> Violation {
    Violation { invariant, detail }
}

/// `detail` with session ids and numbers replaced, so the same fault reads the same at every
/// point.
fn normal_detail(detail: &str) -> String {
    // A quoted fragment («…») differs at every point: the fault is the same.
    let detail = detail.split('«').next().unwrap_or(detail);
    let mut out = String::new();
    let mut digits = false;
    for c in detail.chars() {
        if c.is_ascii_digit() {
            if !digits {
                out.push('N');
            }
            digits = true;
        } else {
            digits = false;
            out.push(c);
        }
    }
    // A session id is N-N-<4 hex digits>: after the numbers went, its hex tail may remain.
    let mut s = out;
    while let Some(i) = s.find("N-N-") {
        let tail = &s[i + 4..];
        let n = tail
            .char_indices()
            .take_while(|(_, c)| c.is_ascii_hexdigit() || *c == 'N')
            .map(|(j, c)| j + c.len_utf8())
            .last()
            .unwrap_or(0);
        s = format!("{}<id>{}", &s[..i], &tail[n..]);
    }
    s
}

/// `s` with every session id (`YYYYMMDD-HHMMSS-xxxx`) written as `<id>`.
fn hide_ids(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while !rest.is_empty() {
        if rest.len() >= 20 && rest.is_char_boundary(20) && super::run::is_session_id(&rest[..20]) {
            out.push_str("<id>");
            rest = &rest[20..];
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// Sweeps one point: crash, check, resume (twice), check; then the variant with a killed resume.
fn sweep_point(sc: &Scenario, dry: &Dry, job: &Job, full: bool) -> Outcome {
    let mut outcome = Outcome {
        job: job.clone(),
        unreached: false,
        drift: None,
        resume_points: 0,
        resume_kills: Vec::new(),
        found: Vec::new(),
    };
    let cause = job.point.clone();
    let Crash {
        site,
        faulted,
        points: pts,
        draft,
    } = match crash(sc, dry, job) {
        Ok(x) => x,
        Err(e) => {
            outcome.found.push(Found {
                cause,
                phase: "copying the workspace of the steps before",
                v: violation("sweep_error", e),
            });
            return outcome;
        }
    };
    if faulted.hung {
        outcome.found.push(Found {
            cause: cause.clone(),
            phase: "the step to be killed",
            v: violation("resume_failed", faulted.summary()),
        });
    }
    outcome.unreached = !faulted.killed();
    if let Some(last) = pts.last()
        && !outcome.unreached
        && *last != job.point
    {
        outcome.drift = Some(last.clone());
    }
    let mut acked = Acked::default();
    acked.observe(&site.state(), &[&faulted.stdout]);
    if let Some((id, text)) = draft
        && !sc.steps[job.step].replaces_draft
    {
        acked.drafts.insert(id, text);
    }
    for v in check::at_any_moment(&site.state()) {
        outcome.found.push(Found {
            cause: cause.clone(),
            phase: "after the kill",
            v,
        });
    }
    let crashed = site.copy();
    let was_pending = site
        .state()
        .join("checkpoints/git/refs/tern/pending")
        .exists();
    let rec = recover(&site, &acked, None);
    if let Some((before, after)) = &job.trees {
        for v in check::restore_whole(&site.root(), before, after, was_pending) {
            outcome.found.push(Found {
                cause: cause.clone(),
                phase: "after resuming",
                v,
            });
        }
    }
    outcome.resume_points = rec.resume_points;
    // What the first kill broke; a killed resume is blamed only for what it adds.
    let seen: BTreeSet<(&str, String)> = rec
        .found
        .iter()
        .map(|(_, v)| (v.invariant, normal_detail(&v.detail)))
        .collect();
    for (phase, v) in &rec.found {
        outcome.found.push(Found {
            cause: cause.clone(),
            phase,
            v: v.clone(),
        });
    }
    let kills: Vec<usize> = if rec.resume_points == 0 {
        Vec::new()
    } else if full {
        (1..=rec.resume_points).collect()
    } else {
        // One resume point per sweep point, cycling through them over the sweep.
        vec![(job.k * 7) % rec.resume_points + 1]
    };
    for at in kills {
        let again = crashed.copy();
        let r = recover(&again, &acked, Some(at));
        let killed = r.killed_at.clone().unwrap_or(Point {
            kind: "?".into(),
            path: format!("resume point {at}"),
        });
        outcome.resume_kills.push(killed.clone());
        for (phase, v) in r.found {
            if seen.contains(&(v.invariant, normal_detail(&v.detail))) {
                continue;
            }
            outcome.found.push(Found {
                cause: killed.clone(),
                phase: match phase {
                    "after resuming" => "after a killed resume and another",
                    p => p,
                },
                v,
            });
        }
    }
    outcome
}

#[test]
fn kill_point_sweep() {
    let m = mode();
    let started = Instant::now();
    let scenarios = scenario::all();
    let drys: Vec<Dry> = scenarios
        .iter()
        .map(|sc| match &m.only {
            Some((name, _)) if name != sc.name => Dry {
                steps: Vec::new(),
                trees: Vec::new(),
                after: Vec::new(),
            },
            _ => dry_run(sc),
        })
        .collect();
    let mut jobs = Vec::new();
    for (si, dry) in drys.iter().enumerate() {
        for k in 1..=dry.total() {
            if let Some((_, Some(only))) = &m.only
                && *only != k
            {
                continue;
            }
            let (step, at) = dry.locate(k);
            jobs.push(Job {
                scenario: si,
                k,
                step,
                at,
                point: dry.steps[step][at - 1].clone(),
                trees: scenarios[si].steps[step].restores.then(|| {
                    let before = match step {
                        0 => check::Tree::new(),
                        s => dry.trees[s - 1].clone(),
                    };
                    (before, dry.trees[step].clone())
                }),
            });
        }
    }
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..m.threads.min(jobs.len().max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(job) = jobs.get(i) else { break };
                    let o = sweep_point(&scenarios[job.scenario], &drys[job.scenario], job, m.full);
                    results.lock().unwrap_or_else(|p| p.into_inner()).push(o);
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results.sort_by_key(|o| (o.job.scenario, o.job.k));
    let elapsed = started.elapsed();

    if m.only.is_some() {
        for o in &results {
            println!(
                "{}:{} step {} ({}), its point {}: {}; the resume passes {} points",
                scenarios[o.job.scenario].name,
                o.job.k,
                o.job.step,
                scenarios[o.job.scenario].steps[o.job.step].name,
                o.job.at,
                o.job.point,
                o.resume_points
            );
            for f in &o.found {
                println!(
                    "  [{} / killed at {}] {}: {}",
                    f.phase, f.cause, f.v.invariant, f.v.detail
                );
            }
        }
    } else {
        let text = report(&scenarios, &drys, &results, &m, elapsed);
        // Every run writes the report under target/ (a test run must not dirty the checkout);
        // TERN_FAULT_REPORT=1 also writes the committed one at the repository root.
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| root.join("target"));
        let _ = std::fs::create_dir_all(&target);
        // A report beside the build, not the test's verdict: a build folder this user cannot
        // write (the suite run as another user) only loses the copy.
        if let Err(e) = std::fs::write(target.join("RELIABILITY.md"), &text) {
            eprintln!("could not write target/RELIABILITY.md: {e}");
        }
        if std::env::var("TERN_FAULT_REPORT").is_ok_and(|v| v == "1") {
            std::fs::write(root.join("RELIABILITY.md"), &text).expect("write RELIABILITY.md");
        }
    }
    let failing: Vec<&Outcome> = results.iter().filter(|o| !o.found.is_empty()).collect();
    let n: usize = failing.iter().map(|o| o.found.len()).sum();
    assert!(
        failing.is_empty(),
        "{n} violations at {} of {} kill points (RELIABILITY.md lists them); the first: {}",
        failing.len(),
        results.len(),
        failing
            .first()
            .map(|o| format!(
                "{}:{} killed at {}: {} {}",
                scenarios[o.job.scenario].name,
                o.job.k,
                o.found[0].cause,
                o.found[0].v.invariant,
                o.found[0].v.detail
            ))
            .unwrap_or_default()
    );
}

/// "a b c" of up to `n` items, then "… (N in all)".
fn some<T: AsRef<str>>(items: &[T], n: usize) -> String {
    let shown: Vec<&str> = items.iter().take(n).map(AsRef::as_ref).collect();
    if items.len() > n {
        format!("{} … ({} in all)", shown.join(" "), items.len())
    } else {
        shown.join(" ")
    }
}

/// Point labels grouped by file: `meta.json: create, write, fsync`.
fn by_file(points: &BTreeSet<(String, String)>) -> String {
    let mut files: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (kind, path) in points {
        files.entry(path).or_default().push(kind);
    }
    files
        .iter()
        .map(|(f, kinds)| format!("`{f}` ({})", kinds.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

fn report(
    scenarios: &[Scenario],
    drys: &[Dry],
    results: &[Outcome],
    m: &Mode,
    elapsed: Duration,
) -> String {
    let total_points: usize = drys.iter().map(Dry::total).sum();
    let total_v: usize = results.iter().map(|o| o.found.len()).sum();
    let failing = results.iter().filter(|o| !o.found.is_empty()).count();
    let kills: usize = results.iter().map(|o| o.resume_kills.len()).sum();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Reliability\n\nWritten by the fault-injection suite (`faults::sweep::kill_point_sweep` in tests/it/faults/sweep.rs):\nevery run writes `target/RELIABILITY.md`; `TERN_FAULT_REPORT=1 cargo test --test it faults::` writes\nthis file. Do not edit it by hand.\n"
    );
    let _ = writeln!(s, "## Kill-point sweep\n");
    let _ = writeln!(
        s,
        "**Points: {total_points} (all swept), plus {kills} kills of the resume. Violations: {total_v}**, at {failing} of the\n{} points. Runtime {:.0} s on {} threads{}.\n",
        results.len(),
        elapsed.as_secs_f64(),
        m.threads,
        if m.full {
            " (TERN_FAULT_SWEEP=full)"
        } else {
            ""
        },
    );
    let _ = writeln!(
        s,
        "Each point is one write, fsync, rename, link, append or remove of the state folder that the\nscripted sessions pass (the debug build's `TERN_FAULT_AT`; a `torn` point first writes half its\nline). For each point k: a copy of the workspace the dry run left after the steps before the one\nholding k runs that step, which dies there by SIGKILL, then `tern exec --json --continue` runs twice against a strict fake provider\nand every invariant is checked. Every point of every scenario is swept. In a second run from the\nsame crash the resume itself is killed at {}, then resumed again and checked again.\n",
        if m.full {
            "every one of its own points"
        } else {
            "one of its own points (a different one for each k, cycling through them;\n`TERN_FAULT_SWEEP=full` kills it at every one)"
        }
    );
    let _ = writeln!(
        s,
        "| scenario | steps | points (per step) | resume kills | failing points | violations |\n|---|---|---|---|---|---|"
    );
    for (si, (sc, dry)) in scenarios.iter().zip(drys).enumerate() {
        let rs: Vec<&Outcome> = results.iter().filter(|o| o.job.scenario == si).collect();
        let _ = writeln!(
            s,
            "| `{}` | {} | {} ({}) | {} | {} | {} |",
            sc.name,
            sc.steps.len(),
            dry.total(),
            dry.steps
                .iter()
                .map(|p| p.len().to_string())
                .collect::<Vec<_>>()
                .join(" + "),
            rs.iter().map(|o| o.resume_kills.len()).sum::<usize>(),
            rs.iter().filter(|o| !o.found.is_empty()).count(),
            rs.iter().map(|o| o.found.len()).sum::<usize>()
        );
    }
    let _ = writeln!(s);
    for (sc, _) in scenarios.iter().zip(drys) {
        let _ = writeln!(
            s,
            "- `{}`: {}",
            sc.name,
            sc.steps
                .iter()
                .map(|st| format!(
                    "`tern {}`",
                    st.args
                        .iter()
                        .take(3)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(" ")
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let unreached: Vec<&Outcome> = results.iter().filter(|o| o.unreached).collect();
    let drifted: Vec<&Outcome> = results.iter().filter(|o| o.drift.is_some()).collect();
    let _ = writeln!(
        s,
        "\nPoints whose step did not die there on replay: {}; that died at another point than the dry run's: {}.",
        unreached.len(),
        drifted.len()
    );
    for o in unreached.iter().chain(&drifted).take(20) {
        let _ = writeln!(
            s,
            "- `{}:{}` ({}): dry run `{}`, replay {}",
            scenarios[o.job.scenario].name,
            o.job.k,
            scenarios[o.job.scenario].steps[o.job.step].name,
            o.job.point,
            o.drift
                .as_ref()
                .map(|p| format!("`{p}`"))
                .unwrap_or_else(|| "did not die".into())
        );
    }
    let _ = writeln!(s);

    // Violations by invariant, then by fault (the normalised detail), with the points that
    // cause them.
    let mut by_inv: BTreeMap<&str, usize> = BTreeMap::new();
    type Group = (usize, BTreeSet<(String, String)>, Vec<String>, String);
    let mut groups: BTreeMap<(&str, &str, String), Group> = BTreeMap::new();
    for o in results {
        for f in &o.found {
            *by_inv.entry(f.v.invariant).or_default() += 1;
            let g = groups
                .entry((f.v.invariant, f.phase, normal_detail(&f.v.detail)))
                .or_insert_with(|| (0, BTreeSet::new(), Vec::new(), f.v.detail.clone()));
            g.0 += 1;
            g.1.insert((f.cause.kind.clone(), f.cause.path.clone()));
            let at = format!("{}:{}", scenarios[o.job.scenario].name, o.job.k);
            if g.2.last() != Some(&at) {
                g.2.push(at);
            }
        }
    }
    let _ = writeln!(s, "### Violations by invariant\n");
    let _ = writeln!(s, "| invariant | violations |\n|---|---|");
    for inv in check::INVARIANTS {
        let _ = writeln!(s, "| `{inv}` | {} |", by_inv.get(inv).copied().unwrap_or(0));
    }
    for (inv, n) in &by_inv {
        if !check::INVARIANTS.contains(inv) {
            let _ = writeln!(s, "| `{inv}` | {n} |");
        }
    }
    let _ = writeln!(s);
    if !groups.is_empty() {
        let _ = writeln!(
            s,
            "### The violations, by fault\n\nEach row is one fault (its detail with ids and numbers normalised), where it was seen, the points\nwhose kill causes it (for a killed resume: the resume's own point), and the sweep points\n(`scenario:k`) that show it. Reproduce one with\n`TERN_FAULT_ONLY=<scenario>:<k> cargo test --test it faults::sweep -- --nocapture`.\n"
        );
        let _ = writeln!(
            s,
            "| invariant | seen | detail (an example) | count | killed at | points |\n|---|---|---|---|---|---|"
        );
        for ((inv, phase, _), (n, causes, at, example)) in &groups {
            let _ = writeln!(
                s,
                "| `{inv}` | {phase} | {} | {n} | {} | {} |",
                hide_ids(example).replace('|', "\\|"),
                by_file(causes),
                some(at, 8)
            );
        }
        let _ = writeln!(s);
    }

    // What the sweep reaches: every point by kind and file, the resume's killed points too.
    let mut reached: BTreeMap<(String, String), (usize, usize)> = BTreeMap::new();
    for o in results {
        reached
            .entry((o.job.point.path.clone(), o.job.point.kind.clone()))
            .or_default()
            .0 += 1;
        for p in &o.resume_kills {
            reached
                .entry((p.path.clone(), p.kind.clone()))
                .or_default()
                .1 += 1;
        }
    }
    let _ = writeln!(
        s,
        "### Points reached, by file and kind\n\n| file | kind | killed in a step | killed in a resume |\n|---|---|---|---|"
    );
    for ((path, kind), (a, b)) in &reached {
        let _ = writeln!(s, "| `{path}` | {kind} | {a} | {b} |");
    }
    let kinds: BTreeSet<&str> = reached.keys().map(|(_, k)| k.as_str()).collect();
    let missing: Vec<&str> = ALL_KINDS
        .iter()
        .copied()
        .filter(|k| !kinds.contains(k))
        .collect();
    let _ = writeln!(
        s,
        "\nKinds of point never reached: {}.\n",
        if missing.is_empty() {
            "none".to_string()
        } else {
            missing
                .iter()
                .map(|k| format!("`{k}` ({})", why_kind(k)))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    let _ = writeln!(s, "### The state files, against state/README.md\n");
    for f in documented_files() {
        let hit = reached.keys().any(|(p, _)| matches_file(p, &f));
        let _ = writeln!(
            s,
            "- `{f}`: {}",
            if hit {
                "reached".to_string()
            } else {
                format!("**not reached** ({})", why_unreached(&f))
            }
        );
    }
    let _ = writeln!(s);
    s.push_str(OTHER_TESTS);
    s.push_str(NOT_REACHED);
    s
}

/// Every kind of fault point in `src/store/fsutil.rs` and `src/store/session.rs`.
const ALL_KINDS: [&str; 12] = [
    "mkdir", "create", "write", "fsync", "rename", "renamed", "torn", "appended", "link", "copy",
    "remove", "spill",
];

fn why_kind(k: &str) -> &'static str {
    match k {
        "copy" => "the fallback when a hard link into `archive/` fails; tmpfs and ext4 link",
        "remove" => "only while removing a stray tempfile, which this build never does",
        _ => "no scenario passes it",
    }
}

/// The session files `state/README.md` documents (its machine-read `files` block), plus the two
/// files of `.tern/` itself.
fn documented_files() -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("state/README.md"))
            .expect("state/README.md");
    let block = readme
        .split("```files\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap_or("");
    let mut out: Vec<String> = vec![".gitignore".into(), "current".into()];
    out.extend(
        block
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|l| format!("sessions/<id>/{l}")),
    );
    out
}

/// Whether a point's path `p` is the documented file `f` (`NNNN`: four digits; a spill point
/// names the spill folder).
fn matches_file(p: &str, f: &str) -> bool {
    if f.ends_with("spill/out-*.log") {
        return p == "sessions/<id>/spill" || p.ends_with("spill/out-*.log");
    }
    if let Some(folder) = f.strip_suffix("/*") {
        return p.starts_with(&format!("{folder}/"));
    }
    let (ps, fs): (Vec<&str>, Vec<&str>) = (p.split('/').collect(), f.split('/').collect());
    ps.len() == fs.len()
        && ps.iter().zip(&fs).all(|(a, b)| match b.split_once("NNNN") {
            Some((pre, post)) => {
                a.len() == b.len()
                    && a.starts_with(pre)
                    && a.ends_with(post)
                    && a[pre.len()..pre.len() + 4]
                        .bytes()
                        .all(|c| c.is_ascii_digit())
            }
            None => a == b,
        })
}

fn why_unreached(f: &str) -> &'static str {
    if f.ends_with("/lock") {
        "never written, only flocked"
    } else if f.ends_with("/lease") {
        "its `{\"pid\": N}` is a plain write without a fault point; display only, the flock decides"
    } else {
        "no scenario writes it"
    }
}

const OTHER_TESTS: &str = "## The other fault tests\n\n\
- `faults::races`: 20 tern processes on one session at once (`plan draft`, `status`, `exec --continue`,\n  `plan confirm --wait`, `compact`, `plan show`); afterwards every file parses, no event `seq` repeats, the\n  history is valid for a strict provider, turns never overlapped, and every refused one said why.\n\
- `faults::hostile`: a hostile provider (a reset mid-stream, invalid JSON in data lines, one huge event, a\n  one-byte-a-second drip, endless `: keep-alive` comments, 429/500 storms, duplicate tool-call ids, non-JSON\n  tool arguments, a refused connection, an unknown host): each ends in a clear error or a valid turn within a\n  bound, never a panic or a torn session.\n\
- `faults::enospc`: the state folder on a full 256 KiB tmpfs (needs root to mount; otherwise it prints\n  SKIPPED): a clear error, every file that exists parses, `--continue` works once space is freed.\n\
- `faults::fuzz`: proptest of the SSE decoder, the JSONL loader and history repair, the bash argument parser\n  and the output shaper.\n\n";

const NOT_REACHED: &str = "## What the suite does not reach\n\n\
- Power loss: SIGKILL keeps what the kernel already has (the page cache), so a missing fsync, or a folder\n  not fsynced after a rename, cannot show here; only a kill between two steps of one process can.\n\
- Writes that are not fault points: the `lease` file's pid (a plain write, display only), the creation of\n  the empty `lock` file and of folders other than a new session's (`mkdir`), the REPL's input history `.tern/history` (rustyline),\n  the spill file's bytes after its creation, stdout and stderr.\n\
- `tern relay --start` (a seeded new session), the REPL and `tern acp`: not in the scenarios (they write\n  through the same primitives). Sub-agents' folders (`agents/<id>/`) only where the build has the `agent`\n  tool (then the `agents` scenario sweeps them).\n\
- Two kills at once in different processes: the races test runs concurrent processes without killing them,\n  and the sweep kills one process at a time (at most two in a row).\n\
- The Anthropic wire: the sweep speaks OpenAI Chat Completions only (the state folder is the same for both).\n\
- Signals other than SIGKILL at a point (SIGTERM and Ctrl-C take the graceful paths other tests cover).\n\
- Partial writes other than half a JSONL line: an atomic write's tempfile is never read, so a short write\n  there only matters as a leftover tempfile, which is checked.\n";
