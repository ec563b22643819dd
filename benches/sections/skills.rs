//! Section 16: Agent Skills (issue 45): what a catalog costs. No skill folders must cost
//! nothing (the first request byte for byte the baseline's); a 20-skill catalog costs its bytes
//! in the fixed prefix (paid once, then cached) and the discovery at session start.

use super::*;

/// Rounds of the comparison (each arm once per round, in rotation).
const SKILLS_ROUNDS: usize = 9;
/// Model requests of each session.
const SKILLS_TURNS: usize = 100;
/// Skills of the catalog arm.
const SKILLS: usize = 20;

/// A config folder whose `tern/skills/` holds `n` skills with descriptions of a typical length
/// (about 150 characters).
fn skills_config(n: usize) -> R<tempfile::TempDir> {
    let cfg = tempfile::tempdir().map_err(|e| e.to_string())?;
    for i in 0..n {
        let name = format!("skill-{i:02}");
        let d = cfg.path().join("tern/skills").join(&name);
        fs::create_dir_all(&d).map_err(|e| e.to_string())?;
        fs::write(
            d.join("SKILL.md"),
            format!(
                "---\nname: {name}\ndescription: Does task {i} the way this team does it: its conventions, its commands and its checks. Use when the person asks for task {i}.\n---\n# Task {i}\n\nSteps.\n"
            ),
        )
        .map_err(|e| e.to_string())?;
    }
    Ok(cfg)
}

/// Section 16, as Markdown.
pub(super) fn bench_skills() -> R<String> {
    let none = skills_config(0)?;
    let twenty = skills_config(SKILLS)?;
    let none_path = none.path().to_str().ok_or("config path is not UTF-8")?;
    let twenty_path = twenty.path().to_str().ok_or("config path is not UTF-8")?;
    let without = [("XDG_CONFIG_HOME", none_path)];
    let with = [("XDG_CONFIG_HOME", twenty_path)];
    let baseline = std::env::var(BASELINE_ENV).ok();
    type Env<'a> = &'a [(&'a str, &'a str)];
    let mut arms: Vec<(String, String, Env)> =
        vec![("this commit, no skills".into(), TERN.to_string(), &without)];
    if let Some(b) = &baseline {
        arms.push(("baseline, no skills".into(), b.clone(), &without));
    }
    arms.push((
        format!("this commit, {SKILLS} skills"),
        TERN.to_string(),
        &with,
    ));
    let n = arms.len();
    let (mut own, mut first) = (vec![Vec::new(); n], vec![Vec::new(); n]);
    for round in 0..SKILLS_ROUNDS {
        for i in 0..n {
            let arm = (round + i) % n;
            let (name, program, env) = &arms[arm];
            let s = true_session(program, env, SKILLS_TURNS)?;
            own[arm].push(s.m.own_ms() / SKILLS_TURNS as f64);
            first[arm].push(
                s.requests
                    .first()
                    .map(|r| r.body.clone())
                    .unwrap_or_default(),
            );
            eprintln!(
                "  round {} {name}: own {:.3} ms/turn",
                round + 1,
                own[arm][round]
            );
        }
    }
    let base_own = median(&own[0]);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## 16. Agent Skills: what a catalog costs\n\n\
         Section 1's session shortened to {SKILLS_TURNS} turns (bash calls of `true`), \
         {SKILLS_ROUNDS} runs per arm in rotation; `{SKILLS} skills` means \
         `$XDG_CONFIG_HOME/tern/skills/` holds {SKILLS} valid skills with descriptions of about \
         150 characters (read at session start; the catalog pinned in the system prompt). The \
         baseline, when given (`TERN_BENCH_BASELINE`), is the release build before issue 45.\n\n\
         | arm | tern CPU per turn (median) | / no skills | first request | same bytes as no skills |\n|---|---|---|---|---|"
    );
    for (i, (name, _, _)) in arms.iter().enumerate() {
        let o = median(&own[i]);
        let bytes = first[i].last().map_or(0, Vec::len);
        // Byte for byte (the workspace and home paths differ per run: compared with them out).
        let same = first[i].last() == first[0].last()
            || strip_paths(first[i].last()) == strip_paths(first[0].last());
        let _ = writeln!(
            md,
            "| {name} | **{o:.3} ms** | {:.2}× | {bytes} bytes | {} |",
            o / base_own.max(f64::MIN_POSITIVE),
            if same { "yes" } else { "no" }
        );
    }
    Ok(md)
}

/// A request body with the run's temporary paths cut out (they differ per run).
fn strip_paths(body: Option<&Vec<u8>>) -> String {
    let text = String::from_utf8_lossy(body.map_or(&[][..], Vec::as_slice)).into_owned();
    text.split("/tmp/")
        .map(|part| part.split_once('/').map_or(part, |(_, rest)| rest))
        .collect::<Vec<_>>()
        .join("/tmp/")
}
