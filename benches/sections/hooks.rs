//! Section 9: hooks.

use super::*;

/// Rounds of the hooks comparison (each arm once per round, in rotation).
pub(super) const HOOK_ROUNDS: usize = 5;

/// Section 9: the 200-turn session of section 1 with no hooks configured, by this tern and (when
/// `TERN_BENCH_BASELINE` names one) a baseline binary, side by side; and by this tern with one
/// trivial hook (`true`) on each of the eight events. Returns the Markdown subsection.
pub(super) fn bench_hooks() -> R<String> {
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
            let s = true_session(program, env, requests)?;
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
