//! Section 2: the bash tool's drain throughput and memory, and its cost per call.

use super::*;

/// In a fresh process: runs one command through `tern::tools::bash::run` and prints its figures
/// as one JSON line. Args: command, scratch folder.
pub(super) fn drain_child(args: &[String]) -> R<()> {
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
        mcp: None,
        streams: false,
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
pub(super) fn overhead_child(args: &[String]) -> R<()> {
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
        mcp: None,
        streams: false,
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

pub(super) fn bench_drain() -> R<(String, String)> {
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
