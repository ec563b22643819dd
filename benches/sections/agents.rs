//! Section 7: sub-agents: a fork's cache reuse, the harness cost of a child, the cache key
//! (issue 11).

use super::*;

/// Parent steps before the fork in the fork-reuse sessions.
pub(super) const FORK_STEPS: usize = 60;
/// Children per session and runs in the child-cost comparison.
pub(super) const CHILD_COUNT: usize = 20;
pub(super) const CHILD_RUNS: usize = 7;

/// The Anthropic breakpoint marker: request metadata, not prompt content.
pub(super) const BREAKPOINT: &str = r#","cache_control":{"type":"ephemeral"}"#;

/// The fork-reuse session in `wire`: FORK_STEPS parent steps (bash printing about 600 bytes, a
/// work_update every CACHE_UPDATE_EVERY steps, so the parent has a ledger and a tail), then one
/// `agent` call with `fork: true`, the child's answer, the parent's answer.
pub(super) fn fork_script(wire: support::Wire) -> R<Vec<Reply>> {
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
pub(super) fn fork_core(wire: support::Wire, raw: &str) -> R<String> {
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
pub(super) struct ForkFigure {
    wire: &'static str,
    prefix_tokens: u64,
    cached_tokens: u64,
    child_input_tokens: u64,
    common_bytes: usize,
    prefix_bytes: usize,
    extension: bool,
}

pub(super) fn fork_reuse(wire: support::Wire) -> R<ForkFigure> {
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
pub(super) fn measured_run(script: Vec<Reply>, requests: usize, parent: usize) -> R<Measured> {
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
pub(super) fn children_script() -> Vec<Reply> {
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
pub(super) fn plain_script() -> Vec<Reply> {
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
pub(super) fn child_footprint() -> R<(usize, u64)> {
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
pub(super) const SIM_MACHINES: u64 = 64;
/// Requests per minute one (prefix, key) group may send to its machine before the rest
/// overflow (OpenAI's guide: "approximately 15 requests per minute").
pub(super) const SIM_RATE: usize = 15;
/// Extra machines an overflowing group spreads over.
pub(super) const SIM_EXTRA: u64 = 8;
/// Seconds a cache entry lives unused (OpenAI: 5 to 10 minutes; the short end).
pub(super) const SIM_TTL: f64 = 300.0;

/// One simulated request: when, which conversation (lineage), its prompt length in tokens,
/// and the lineage and length it was forked from.
#[derive(Clone)]
pub(super) struct SimReq {
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

pub(super) fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Cached tokens as OpenAI counts them: whole 128-token increments from 1024 on.
pub(super) fn sim_round(tokens: u64) -> u64 {
    let r = tokens / 128 * 128;
    if r < 1024 { 0 } else { r }
}

#[derive(Default, Clone, Copy)]
pub(super) struct SimTotals {
    input: u64,
    cached: u64,
    first_input: u64,
    first_cached: u64,
}

/// Runs `reqs` (sorted by time) with `key_of` choosing each request's routing key; the stable
/// prefix is `stable` tokens. Every request's first 256 tokens are the tools (the same for the
/// project), so the key alone decides the group.
pub(super) fn simulate(reqs: &[SimReq], stable: u64, key_of: &dyn Fn(&SimReq) -> u64) -> SimTotals {
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
pub(super) fn sim_scenario(name: &str, stable: u64, grow: u64) -> Vec<SimReq> {
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

pub(super) fn bench_agents() -> R<(String, String)> {
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
pub(super) fn stable_and_growth() -> R<(u64, u64)> {
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
