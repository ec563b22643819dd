//! Section 12: MCP as commands (issue 32): what configured servers cost a turn, and what one
//! `tern mcp call` costs through the session's tern and straight from a shell.

use super::*;

/// Rounds of the per-turn comparison (each arm once per round, in rotation).
const MCP_ROUNDS: usize = 5;
/// Model requests of the per-turn sessions.
const MCP_TURNS: usize = 100;
/// Calls of the per-call comparison.
const MCP_CALLS: usize = 40;

const SERVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/mcp_server.py");

/// A config folder whose `tern/mcp.json` names `n` stdio servers of the test kit.
fn config(n: usize) -> R<tempfile::TempDir> {
    config_with(n, None)
}

/// [`config`] with each entry's `"jail"` set (None: not given).
fn config_with(n: usize, jail: Option<bool>) -> R<tempfile::TempDir> {
    let cfg = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dir = cfg.path().join("tern");
    fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut servers = serde_json::Map::new();
    for i in 0..n {
        let mut entry = json!({"command": "python3", "args": [SERVER, "--era", "2026"]});
        if let Some(j) = jail {
            entry["jail"] = json!(j);
        }
        servers.insert(format!("srv{i}"), entry);
    }
    fs::write(
        dir.join("mcp.json"),
        json!({ "mcpServers": servers }).to_string(),
    )
    .map_err(|e| e.to_string())?;
    Ok(cfg)
}

/// Section 12, as Markdown.
pub(super) fn bench_mcp() -> R<String> {
    let three = config(3)?;
    let three_path = three.path().to_str().ok_or("config path is not UTF-8")?;
    let with = [("XDG_CONFIG_HOME", three_path)];
    let baseline = std::env::var(BASELINE_ENV).ok();
    type Env<'a> = &'a [(&'a str, &'a str)];
    let mut arms: Vec<(String, String, Env)> =
        vec![("this commit, no MCP server".into(), TERN.to_string(), &[])];
    if let Some(b) = &baseline {
        arms.push(("baseline, no MCP server".into(), b.clone(), &[]));
    }
    arms.push((
        "this commit, three servers configured, none called".into(),
        TERN.to_string(),
        &with,
    ));
    let n = arms.len();
    let (mut own, mut wall, mut first) = (vec![Vec::new(); n], vec![Vec::new(); n], vec![0; n]);
    for round in 0..MCP_ROUNDS {
        for i in 0..n {
            let arm = (round + i) % n;
            let (name, program, env) = &arms[arm];
            let s = true_session(program, env, MCP_TURNS)?;
            own[arm].push(s.m.own_ms() / MCP_TURNS as f64);
            wall[arm].push(s.m.wall.as_secs_f64() * 1000.0 / MCP_TURNS as f64);
            first[arm] = s.requests.first().map_or(0, |r| r.body.len());
            eprintln!(
                "  round {} {name}: own {:.3} ms/turn",
                round + 1,
                own[arm][round]
            );
        }
    }
    // One call per turn through the session's tern (the server started once, kept): a server
    // as tern's own child, and one in a jail of its own (`"jail": true`, issue 42: its door
    // passed after each call).
    let one = config(1)?;
    let one_path = one.path().to_str().ok_or("config path is not UTF-8")?;
    let (ok, call_ms, session_wall) = per_call(one_path)?;
    let jailed = config_with(1, Some(true))?;
    let jailed_path = jailed.path().to_str().ok_or("config path is not UTF-8")?;
    let (ok_j, call_ms_j, session_wall_j) = per_call(jailed_path)?;
    // The same call from a shell: a new server each time.
    let ws = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut direct = Vec::new();
    for k in 0..MCP_CALLS / 4 {
        let t = Instant::now();
        let out = Command::new(TERN)
            .args([
                "mcp",
                "call",
                "srv0",
                "echo",
                &format!("{{\"text\": \"{k}\"}}"),
            ])
            .current_dir(ws.path())
            .env("XDG_CONFIG_HOME", one_path)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "tern mcp call: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        direct.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## 12. MCP as commands: cost per turn and per call\n\n\
         Per turn: section 1's session shortened to {MCP_TURNS} turns (bash calls of `true`), \
         {MCP_ROUNDS} runs per arm in rotation; three servers configured means \
         `~/.config/tern/mcp.json` names three stdio servers of the test kit \
         (`tests/support/mcp_server.py`), none called: the config is read at open, the \
         channel opened at the first command, and each command gets one more variable and \
         descriptor. The first request grows by the system prompt's one MCP line.\n"
    );
    let _ = writeln!(
        md,
        "| arm | tern CPU per turn (median) | / no server | wall per turn (median) | first request |\n|---|---|---|---|---|"
    );
    let base = median(&own[0]);
    for (i, (name, _, _)) in arms.iter().enumerate() {
        let _ = writeln!(
            md,
            "| {name} | **{:.3} ms** | {:.2}× | {:.2} ms | {} bytes |",
            median(&own[i]),
            median(&own[i]) / base.max(1e-9),
            median(&wall[i]),
            first[i]
        );
    }
    let _ = writeln!(
        md,
        "\nPer call: {MCP_CALLS} turns each running `tern mcp call srv0 echo …` in the jail \
         ({ok} answered): the call as the `mcp_call` event times it, in whole milliseconds \
         (the session's tern: the hooks door, the server's answer) median **{:.0} ms** (p90 \
         {:.0} ms; 0 means under 1 ms); the whole turn \
         (model request, bash in the jail, the `tern mcp` client process, the call) {:.1} ms. \
         The same call from a shell, outside a session, starts the server each time: median \
         **{:.1} ms** over {} calls (python start-up and the handshake dominate).\n",
        median(&call_ms),
        percentile(&call_ms, 90.0),
        session_wall,
        median(&direct),
        direct.len()
    );
    let _ = writeln!(
        md,
        "The same {MCP_CALLS} turns with the server in a jail of its own (`\"jail\": true`, as a \
         server that runs workspace code gets by default; issue 42) ({ok_j} answered): the call \
         median **{:.0} ms** (p90 {:.0} ms), the whole turn {:.1} ms (as tern's child: {:.1} ms), \
         the door's pass after each call included.\n",
        median(&call_ms_j),
        percentile(&call_ms_j, 90.0),
        session_wall_j,
        session_wall
    );
    Ok(md)
}

/// [`MCP_CALLS`] turns each calling `srv0` of the config folder `cfg` through the session's
/// tern: how many answered, each call's time (the `mcp_call` event's), the wall per turn.
fn per_call(cfg: &str) -> R<(usize, Vec<f64>, f64)> {
    let s = run_program(
        TERN,
        &[("XDG_CONFIG_HOME", cfg)],
        script(MCP_CALLS + 1, |k| {
            bash_call(
                &format!("call_{k}"),
                &format!("tern mcp call srv0 echo '{{\"text\": \"{k}\"}}'"),
            )
        }),
        MCP_CALLS + 1,
        "Call the echo tool until told to stop.",
        &std::env::temp_dir(),
    )?;
    let ok = s
        .events
        .iter()
        .filter(|e| e["type"] == "mcp_call" && e["exit_code"] == 0)
        .count();
    if ok < MCP_CALLS {
        let first = s
            .tool_results()
            .next()
            .map(|r| r["content"].to_string())
            .unwrap_or_default();
        return Err(format!(
            "only {ok} of {MCP_CALLS} MCP calls answered; the first result: {first}"
        ));
    }
    let call_ms: Vec<f64> = s
        .events
        .iter()
        .filter(|e| e["type"] == "mcp_call")
        .filter_map(|e| e["duration_ms"].as_f64())
        .collect();
    let session_wall = s.m.wall.as_secs_f64() * 1000.0 / (MCP_CALLS + 1) as f64;
    Ok((ok, call_ms, session_wall))
}
