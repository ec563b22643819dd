//! The CLI verbs' glue: open the state folder, run an op from the table, print its receipt.
//! `tern status` and `tern watch` render the same view as `/status`.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use crate::launcher::{Launcher, Process, SessionRef};
use crate::ops::{self, Target as OpTarget};
use crate::runtime::Failure;
use crate::store::{Session, files};

/// The session and output choice of a verb.
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// `--session`; the current session when None.
    pub session: Option<String>,
    /// `--json`.
    pub json: bool,
}

fn session(l: &Launcher, t: &Target) -> Result<Session, Failure> {
    let r = match &t.session {
        Some(id) => SessionRef::Id(id.clone()),
        None => SessionRef::Current,
    };
    match l.find(&r) {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Err(Failure::Usage("no session".into())),
        Err(e) => Err(e),
    }
}

/// Runs op `id` as a verb and prints the receipt (JSON with `--json`). Exit 0 when ok, else the
/// failure's code (2 for a usage error such as an unknown session, 130 when interrupted, 1
/// otherwise).
pub fn verb(l: &Launcher, id: ops::OpId, arg: Option<&str>, t: &Target, wait: bool) -> i32 {
    let op = ops::get(id);
    let mut target = OpTarget {
        launcher: l,
        runtime: None,
        session: t.session.clone(),
        wait,
    };
    let mut human = crate::output::Human::new();
    let r = ops::run(op, arg, &mut target, &mut human);
    crate::output::print_receipt(&r, t.json);
    r.exit_code
}

/// `tern plan draft`: the draft from `--file` or stdin.
pub fn read_draft(file: Option<&Path>) -> Result<String, String> {
    // Read at most one byte past the limit: `--file /dev/zero` must not fill the memory.
    let limit = crate::domain::plan::MAX_PLAN_BYTES as u64 + 1;
    let text = match file {
        Some(f) => {
            let mut s = String::new();
            std::fs::File::open(f)
                .and_then(|h| h.take(limit).read_to_string(&mut s))
                .map_err(|e| format!("{}: {e}", f.display()))?;
            s
        }
        None => {
            use std::io::IsTerminal;
            if std::io::stdin().is_terminal() {
                crate::errln!(
                    "Type the draft, then Ctrl-D on an empty line (or use --file, or `tern plan edit`):"
                );
            }
            let mut s = String::new();
            std::io::stdin()
                .take(limit)
                .read_to_string(&mut s)
                .map_err(|e| format!("could not read the draft from stdin: {e}"))?;
            s
        }
    };
    if text.trim().is_empty() {
        return Err("the draft is empty (to discard a draft: tern plan cancel)".into());
    }
    if text.len() as u64 >= limit {
        return Err(format!(
            "the draft is longer than {} bytes, the most a plan may be",
            crate::domain::plan::MAX_PLAN_BYTES
        ));
    }
    Ok(text)
}

/// `tern steer [TEXT|-] [--queue]`: writes the message into the session's inbox (stdin when
/// TEXT is empty or `-`) and prints where it went. Exit 0; 2 for an empty or oversized message or
/// an unknown session; 1 when no turn is running (without `--queue`).
pub fn steer(l: &Launcher, t: &Target, text: &str, queue: bool) -> i32 {
    let s = match session(l, t) {
        Ok(s) => s,
        Err(e) => {
            crate::errln!("tern: {e}");
            return e.exit_code();
        }
    };
    let text = if text.is_empty() || text == "-" {
        use std::io::IsTerminal;
        if std::io::stdin().is_terminal() {
            crate::errln!("Type the message, then Ctrl-D on an empty line:");
        }
        let limit = crate::runtime::MAX_PROMPT_BYTES as u64 + 1;
        let mut s = String::new();
        if let Err(e) = std::io::stdin().take(limit).read_to_string(&mut s) {
            crate::errln!("tern: could not read the message from stdin: {e}");
            return 2;
        }
        s
    } else {
        text.to_string()
    };
    match crate::runtime::steer::send(&s, &text, queue) {
        Ok(sent) => {
            if t.json {
                crate::output::print_json_line(&serde_json::json!({
                    "session": s.id,
                    "id": sent.entry.id,
                    "delivered": if sent.running { "next_request" } else { "next_turn" },
                }));
            } else {
                crate::outln!("{}", sent.receipt(&s.id));
            }
            0
        }
        Err(e) => {
            crate::errln!("tern: {e}");
            e.exit_code()
        }
    }
}

/// `tern skills [--json] [show NAME]`: the skills found here (the ones that count, by name,
/// with source, size and the catalog's bytes; the invalid ones with why; the ones a nearer skill
/// hides), or one skill's `SKILL.md`. Exit 0; 1 when `show` names no valid skill.
pub fn skills(l: &Launcher, json: bool, show: Option<&str>) -> i32 {
    let (found, catalog) = l.skills(l.config.context_window);
    if let Some(name) = show {
        let Some(s) = found.get(name) else {
            let why = found
                .invalid
                .iter()
                .find(|i| i.path.file_name().is_some_and(|f| f == name))
                .map(|i| format!(": {}", i.why))
                .unwrap_or_default();
            crate::errln!("tern: no valid skill named {name:?}{why} (`tern skills` lists them)");
            return 1;
        };
        return match crate::store::fsutil::read_regular(&s.path, crate::skills::MAX_SKILL_BYTES) {
            Ok(Some(b)) => {
                crate::outln!("{}", String::from_utf8_lossy(&b).trim_end());
                0
            }
            Ok(None) => {
                crate::errln!("tern: {} is gone", s.path.display());
                1
            }
            Err(e) => {
                crate::errln!("tern: {}: {e}", s.path.display());
                1
            }
        };
    }
    let skill_json = |s: &crate::skills::Skill, listed: bool| {
        serde_json::json!({
            "name": s.name, "description": s.description, "path": s.path,
            "source": s.origin.as_str(), "bytes": s.bytes, "in_catalog": listed,
        })
    };
    if json {
        let v = serde_json::json!({
            "skills": found.skills.iter().map(|s| skill_json(s, !catalog.left_out.contains(&s.name))).collect::<Vec<_>>(),
            "invalid": found.invalid.iter().map(|i| serde_json::json!({"path": i.path, "why": i.why})).collect::<Vec<_>>(),
            "shadowed": found.shadowed.iter().map(|s| skill_json(s, false)).collect::<Vec<_>>(),
            "catalog_bytes": catalog.text.len(),
            "budget_bytes": crate::skills::budget_for(l.config.context_window),
        });
        crate::outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return 0;
    }
    if found.skills.is_empty() && found.invalid.is_empty() {
        crate::outln!(
            "no skills here. A skill is a folder with a SKILL.md (front matter: name, description) in .claude/skills/, .agents/skills/ or .tern/skills/ of the project, or in ~/.config/tern/skills/, ~/.agents/skills/, ~/.claude/skills/, ~/.codex/skills/"
        );
        return 0;
    }
    for s in &found.skills {
        let out = if catalog.left_out.contains(&s.name) {
            "  [left out of the catalog: over its budget; $name still works]"
        } else {
            ""
        };
        crate::outln!(
            "{:<24} {:<7} {:>7} B  {}{out}\n  {}",
            s.name,
            s.origin.as_str(),
            s.bytes,
            s.path.display(),
            crate::text::cut(&s.description, 160)
        );
    }
    for s in &found.shadowed {
        crate::outln!(
            "{:<24} hidden by a nearer skill of the same name: {}",
            s.name,
            s.path.display()
        );
    }
    for i in &found.invalid {
        crate::outln!("INVALID {}: {}", i.path.display(), i.why);
    }
    crate::outln!(
        "catalog: {} skill(s), {} bytes of the system prompt (budget {} bytes, about 2 % of the context window){}",
        catalog.listed,
        catalog.text.len(),
        crate::skills::budget_for(l.config.context_window),
        if catalog.shortened > 0 {
            format!("; {} description(s) shortened to fit", catalog.shortened)
        } else {
            String::new()
        }
    );
    0
}

/// `tern prices [--json]`: the person's prices (config `price`, `prices`, priced `models`
/// entries) and the built-in table, each with its source (and, for the table, the date it was
/// read). JSON: `{"configured": [{model, price, source}], "default": {model?, price, source}?,
/// "table": [{names, price, source, read}]}`. Exit 0.
pub fn prices(l: &Launcher, json: bool) -> i32 {
    let book = &l.config.prices;
    if json {
        let v = serde_json::json!({
            "configured": book.models.iter().map(|(m, p)| serde_json::json!({
                "model": m, "price": p.price, "source": p.source,
            })).collect::<Vec<_>>(),
            "default": book.default.as_ref().map(|(m, p)| serde_json::json!({
                "model": m, "price": p.price, "source": p.source,
            })),
            "table": crate::cost::table::TABLE,
        });
        crate::outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return 0;
    }
    let row = |name: &str, p: &crate::cost::Price, tail: &str| {
        format!(
            "{name:<22} {:>8} {:>8} {:>8} {:>8} {:>8}  {tail}",
            p.input, p.cached_input, p.cache_write, p.cache_write_1h, p.output
        )
    };
    crate::outln!(
        "{:<22} {:>8} {:>8} {:>8} {:>8} {:>8}  (USD per million tokens)",
        "model",
        "input",
        "cached",
        "write5m",
        "write1h",
        "output"
    );
    if !book.models.is_empty() || book.default.is_some() {
        crate::outln!("yours (they win over the table):");
        for (m, p) in &book.models {
            crate::outln!("{}", row(m, &p.price, &p.source));
        }
        if let Some((m, p)) = &book.default {
            let name = m.as_deref().unwrap_or("(every other model)");
            crate::outln!("{}", row(name, &p.price, &p.source));
        }
    }
    crate::outln!(
        "the built-in table (a name matches alone or with a date or -latest tag; any other model: cost unknown):"
    );
    for e in crate::cost::table::TABLE {
        let aliases = if e.names.len() > 1 {
            format!(" (also {})", e.names[1..].join(", "))
        } else {
            String::new()
        };
        crate::outln!(
            "{}",
            row(
                e.names[0],
                &e.price,
                &format!("{} read {}{aliases}", e.source, e.read)
            )
        );
    }
    0
}

/// `tern status [--json] [--height N]`.
pub fn status(l: &Launcher, t: &Target, height: Option<usize>) -> i32 {
    // A fresh workspace (after `tern setup`): no session at all yet (not a broken `current`),
    // but the settings a session would start with, and where each comes from.
    let fresh = l.state.check_links().is_ok()
        && std::fs::symlink_metadata(l.state.root.join("current")).is_err()
        && std::fs::read_dir(l.state.root.join("sessions"))
            .map_or(true, |mut d| d.next().is_none());
    if t.session.is_none() && !t.json && fresh {
        crate::out!(
            "no session yet in {}\n\n{}",
            l.state.root.display(),
            crate::config_file::explain(l.env.sources())
        );
        return 0;
    }
    let s = match session(l, t) {
        Ok(s) => s,
        Err(e) => {
            crate::errln!("tern: {e}");
            // No such session is a usage error (2), as for every verb; a linked state folder
            // fails (1), as in `tern exec`.
            return e.exit_code();
        }
    };
    if t.json {
        let mut v = crate::status::to_json(&s);
        // Where the session's model's price comes from (the config, the built-in table, none).
        let (_, price) = crate::status::price_of(&l.config.prices, &s);
        v["cost"]["price_source"] = serde_json::json!(price.as_ref().map(|p| &p.source));
        crate::output::print_json_line(&v);
    } else {
        crate::out!(
            "{}",
            crate::status::render_text(&s, height.or_else(terminal_height))
        );
        // Where each setting came from (issue 21), as `/status` shows it too; not in a view
        // windowed to a height (`--height`, a watching pane), which it would push out.
        if height.is_none() {
            crate::out!("\n{}", crate::config_file::explain(l.env.sources()));
            crate::out!("{}", crate::status::price_line(&l.config.prices, &s));
        }
    }
    0
}

/// `tern stats --json`, and `--why` (the misses by reason: text, or JSON with `--json`).
pub fn stats_json(l: &Launcher, t: &Target, why: bool) -> i32 {
    let s = match session(l, t) {
        Ok(s) => s,
        Err(e) => {
            crate::errln!("tern: {e}");
            return e.exit_code();
        }
    };
    match crate::stats::requests(&s) {
        Ok(r) if why && !t.json => {
            crate::out!("{}", crate::stats::render_why(&s.id, &r));
            0
        }
        Ok(r) if why => {
            crate::output::print_json_line(&serde_json::json!({
                "session": s.id,
                "why": crate::stats::why(&r),
            }));
            0
        }
        Ok(r) => {
            let mut v = crate::stats::to_json(&s.id, &r);
            let f = crate::stats::Fixed::of(&s);
            v["fixed"] = serde_json::json!({
                "system_bytes": f.system_bytes,
                "skills": f.skills,
                "skills_catalog_bytes": f.skills_bytes,
            });
            crate::output::print_json_line(&v);
            0
        }
        Err(e) => {
            crate::errln!("tern: {e}");
            1
        }
    }
}

/// `tern relay --start`: writes the handoff and opens a new session seeded with it.
pub fn relay_start(l: &Launcher, t: &Target) -> i32 {
    let from = match session(l, t) {
        Ok(s) => s,
        Err(e) => {
            crate::errln!("tern: {e}");
            return e.exit_code();
        }
    };
    let result = crate::relay::start(l, &from);
    match result {
        Ok(new) => {
            if t.json {
                crate::output::print_json_line(&serde_json::json!({"session": new.id}));
            } else {
                crate::outln!(
                    "New session {} seeded with the handoff (now the current session).\nContinue it with: tern exec --continue   or   tern chat --continue",
                    new.id
                );
            }
            0
        }
        Err(e) => {
            crate::errln!("tern: {e}");
            1
        }
    }
}

/// `tern sandbox check [--json]`: what this machine supports and the self-test, in the
/// launcher's workspace. Exit 0 when every check passed and the default mode is enforced, 1
/// otherwise.
pub fn sandbox_check(l: &Launcher, json: bool) -> i32 {
    let report =
        crate::sandbox_check::check(&l.state.workspace, std::path::Path::new("/proc/self/exe"));
    if json {
        crate::output::print_json_line(&serde_json::to_value(&report).unwrap_or_default());
    } else {
        crate::outln!("{report}");
    }
    if report.ok { 0 } else { 1 }
}

/// `tern fleet list` / `tern fleet check` (`check`: each member's route resolved here, without
/// a model call). Exit 1 when the Fleet does not load, or (check) a member cannot run here.
pub fn fleet(l: &Launcher, json: bool, check: bool) -> i32 {
    use crate::runtime::Spawner;
    let fleet = match l.fleet() {
        Ok(f) => f,
        Err(e) => {
            crate::errln!("tern: {e}");
            return 1;
        }
    };
    let mut ok = true;
    let rows: Vec<serde_json::Value> = fleet
        .members
        .iter()
        .map(|m| {
            let route = if check {
                match m.route(&l.env) {
                    Ok(Some(r)) => serde_json::json!({"ok": true, "provider": r.kind, "model": r.model,
                        "base_url": crate::provider::http::display_url(&r.base_url), "key": r.api_key.is_some()}),
                    Ok(None) => serde_json::json!({"ok": true, "route": "the parent's"}),
                    Err(e) => {
                        ok = false;
                        serde_json::json!({"ok": false, "error": e.to_string()})
                    }
                }
            } else {
                serde_json::Value::Null
            };
            serde_json::json!({"member": m, "route": route})
        })
        .collect();
    if json {
        crate::output::print_json_line(&serde_json::json!({
            "sources": fleet.sources,
            "members": rows,
            "ok": ok,
        }));
    } else if fleet.members.is_empty() {
        crate::outln!(
            "no fleet members (write {} or {})",
            l.state.root.join("fleet.json").display(),
            crate::fleet::user_file(&l.env).map_or_else(String::new, |p| p.display().to_string())
        );
    } else {
        for (m, r) in fleet.members.iter().zip(&rows) {
            let route = match (&m.provider, &m.model) {
                // The model exactly as written (model names are case-sensitive).
                (Some(p), Some(model)) => format!("{}/{model}", format!("{p:?}").to_lowercase()),
                _ => "the parent's route".into(),
            };
            let mut line = format!("{:<14} {:<12} {route}", m.id, m.role);
            if let Some(s) = m.sandbox {
                line.push_str(&format!(" · sandbox ≤ {}", s.as_str()));
            }
            if let Some(a) = m.approval {
                line.push_str(&format!(" · approval ≤ {a:?}").to_lowercase());
            }
            if let Some(t) = m.max_turns {
                line.push_str(&format!(" · max {t} turns"));
            }
            if let Some(s) = m.wall_time_s {
                line.push_str(&format!(" · wall time {s} s"));
            }
            if let Some(t) = m.token_budget {
                line.push_str(&format!(" · {t} tokens"));
            }
            if check {
                let r = &r["route"];
                if r["ok"] == true {
                    let key = if r["key"] == true { " (key)" } else { "" };
                    line.push_str(&format!("  ok{key}"));
                } else {
                    line.push_str(&format!(
                        "  CANNOT RUN: {}",
                        r["error"].as_str().unwrap_or("")
                    ));
                }
            }
            crate::outln!("{}", crate::render::safe(&line));
        }
    }
    if ok { 0 } else { 1 }
}

/// `tern ops [--json]`.
pub fn ops(json: bool) -> i32 {
    if json {
        crate::output::print_json_line(&serde_json::to_value(ops::OPS).unwrap_or_default());
    } else {
        crate::outln!("{}", ops::help());
    }
    0
}

/// The terminal's height in lines (None when stdout is not a terminal).
pub fn terminal_height() -> Option<usize> {
    terminal_size().map(|(rows, _)| rows)
}

/// The terminal's (rows, columns) (None when stdout is not a terminal).
pub fn terminal_size() -> Option<(usize, usize)> {
    // SAFETY: TIOCGWINSZ fills a winsize struct we own; on error we return None.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    (r == 0 && ws.ws_row > 0 && ws.ws_col > 0)
        .then_some((usize::from(ws.ws_row), usize::from(ws.ws_col)))
}

/// How often `tern watch` looks at the files (a few `stat` calls: cheap when idle).
pub const WATCH_POLL: Duration = Duration::from_millis(250);

/// The files whose change makes `tern watch` read the session again.
const WATCHED: [&str; 5] = [
    files::LEDGER,
    files::PLAN_STATE,
    files::META,
    files::EVENTS,
    files::DRAFT,
];

/// `tern watch`: the status view, redrawn in place (cursor home, each line cleared to its end,
/// the rest of the screen cleared: no flicker) when the session's files change, when the pane is
/// resized, and when the elapsed time ticks; lines are cut to the pane's width so nothing wraps.
/// Follows `.tern/current` when no `--session` is given. In a pipe it prints a new frame per
/// change; with `--json`, one status object per change. Ctrl-C leaves cleanly.
pub fn watch(l: &Launcher, process: &Process, t: &Target, height: Option<usize>) -> i32 {
    // A linked state folder is refused at once (no session can be written into it).
    if let Err(e) = l.state.check_links() {
        crate::errln!("tern: {e}");
        return 1;
    }
    // A named session that is not there will not appear: say so instead of waiting for it.
    if t.session.is_some()
        && let Err(e) = session(l, t)
    {
        crate::errln!("tern: {e}");
        return e.exit_code();
    }
    let stopped = || process.cancel.is_cancelled() || process.term.load(Ordering::SeqCst);
    let tty = !t.json && terminal_size().is_some();
    let mut seen: Option<(String, Vec<Option<SystemTime>>)> = None;
    let mut snap: Option<crate::status::Snapshot> = None;
    let mut drawn: Option<String> = None;
    let mut out = std::io::stdout();
    if tty {
        let _ = write!(out, "\x1b[?25l\x1b[2J");
    }
    while !stopped() {
        let size = terminal_size();
        let rows = height.or(size.map(|(r, _)| r));
        let (text, changed) = match session(l, t) {
            Ok(s) => {
                let mut stamps: Vec<Option<SystemTime>> = WATCHED
                    .iter()
                    .map(|f| std::fs::metadata(s.path(f)).and_then(|m| m.modified()).ok())
                    .collect();
                stamps.extend(crate::status::children_stamps(&s));
                let key = (s.id.clone(), stamps);
                let changed = seen.as_ref() != Some(&key);
                let sn = match snap.take() {
                    Some(sn) if !changed => snap.insert(sn),
                    _ => {
                        seen = Some(key);
                        snap.insert(crate::status::snapshot(&s))
                    }
                };
                if t.json {
                    if changed {
                        crate::output::print_json_line(&crate::status::snapshot_json(&s, sn));
                    }
                    std::thread::sleep(WATCH_POLL);
                    continue;
                }
                // One line is kept free so the cursor never scrolls the frame.
                let h = rows.map(|h| h.saturating_sub(1).max(1));
                let text = crate::status::render_snapshot(&s, sn, h, crate::clock::now_unix());
                (text, changed)
            }
            Err(e) => {
                let changed = seen.take().is_some() || drawn.is_none();
                snap = None;
                let mut text = format!(
                    "tern watch: {}\n(waiting for a session…)\n",
                    crate::render::safe_line(&e.to_string())
                );
                // A message is wrapped at words for the pane, never cut mid-word by `fit`.
                if tty && let Some((_, cols)) = size {
                    text = wrap_words(&text, cols);
                }
                if t.json {
                    // stdout carries only status objects.
                    if changed {
                        crate::errln!("{}", text.trim_end());
                        drawn = Some(text);
                    }
                    std::thread::sleep(WATCH_POLL);
                    continue;
                }
                (text, changed)
            }
        };
        draw(&mut out, tty.then_some(size), &text, changed, &mut drawn);
        std::thread::sleep(WATCH_POLL);
    }
    if tty {
        let _ = writeln!(out, "\x1b[?25h");
        let _ = out.flush();
    }
    0
}

/// Shows `text`: on a terminal (`tty`: its size) as a frame redrawn in place, only when it
/// differs from the last one drawn; else appended, only when `changed`.
fn draw(
    out: &mut std::io::Stdout,
    tty: Option<Option<(usize, usize)>>,
    text: &str,
    changed: bool,
    drawn: &mut Option<String>,
) {
    match tty {
        Some(size) => {
            let cols = size.map_or(usize::MAX, |(_, c)| c);
            let mut frame = String::from("\x1b[H");
            for line in text.lines() {
                frame.push_str(fit(line, cols));
                frame.push_str("\x1b[K\n");
            }
            frame.push_str("\x1b[J");
            let key = format!("{size:?}{frame}");
            if drawn.as_ref() != Some(&key) {
                let _ = out.write_all(frame.as_bytes());
                let _ = out.flush();
                *drawn = Some(key);
            }
        }
        None if changed => {
            let _ = out.write_all(text.as_bytes());
            let _ = out.write_all(b"\n");
            let _ = out.flush();
            *drawn = Some(text.to_string());
        }
        None => {}
    }
}

/// `text` with each line broken at spaces so that no line is wider than `cols` terminal
/// columns (a single word wider than that stays whole, for `fit` to cut). Lines end in `\n`.
pub fn wrap_words(text: &str, cols: usize) -> String {
    use unicode_width::UnicodeWidthStr;
    let cols = cols.max(1);
    let mut out = String::new();
    for line in text.lines() {
        let mut width = 0;
        for (i, word) in line.split(' ').enumerate() {
            let w = word.width();
            if i > 0 && width + 1 + w > cols {
                out.push('\n');
                width = 0;
            } else if i > 0 {
                out.push(' ');
                width += 1;
            }
            out.push_str(word);
            width += w;
        }
        out.push('\n');
    }
    out
}

/// The longest start of `line` that fits in `cols` terminal columns.
fn fit(line: &str, cols: usize) -> &str {
    use unicode_width::UnicodeWidthChar;
    let mut used = 0;
    for (i, c) in line.char_indices() {
        used += c.width().unwrap_or(0);
        if used > cols {
            return &line[..i];
        }
    }
    line
}

/// `tern held [take N]`: what the door kept aside in a session (DESIGN §10) — a new repository,
/// the model's version of a file the person changed meanwhile — listed (`--json`: one object a
/// line), or the change `n` applied to the workspace after the person has looked. Exit 0; 2 for
/// an unknown session or change; 1 when the copy failed.
pub fn held(l: &Launcher, t: &Target, take: Option<u32>) -> i32 {
    let s = match session(l, t) {
        Ok(s) => s,
        Err(e) => {
            crate::errln!("tern: {e}");
            return e.exit_code();
        }
    };
    if let Some(n) = take {
        return match crate::sandbox::door::take(&s.dir, &l.state.workspace, n) {
            Ok(p) => {
                crate::outln!("applied kept-aside change {n}: {}", p.display());
                0
            }
            Err(e) => {
                crate::errln!("tern held take: {e}");
                if e.starts_with("no kept-aside") || e.contains("was not kept") {
                    2
                } else {
                    1
                }
            }
        };
    }
    let held = crate::sandbox::door::held_in(&s.dir);
    if t.json {
        for h in &held {
            crate::output::print_json_line(&serde_json::json!(h));
        }
        return 0;
    }
    if held.is_empty() {
        crate::outln!("nothing kept aside in session {}", s.id);
        return 0;
    }
    for h in &held {
        crate::outln!(
            "{:>3}  {}  ({})\n     kept at {}",
            h.n,
            h.path.display(),
            h.reason,
            h.kept
                .as_ref()
                .map_or(String::new(), |k| k.display().to_string())
        );
    }
    crate::outln!(
        "\nLook at one, then `tern held take N` copies it into the workspace (replacing what is there)."
    );
    0
}

#[cfg(test)]
mod wrap_tests {
    use super::wrap_words;

    #[test]
    fn a_hint_is_wrapped_at_words_never_cut_inside_one() {
        let hint = "tern watch: no session in /tmp/ws/.tern yet: start one with `tern exec PROMPT` or `tern`\n(waiting for a session…)\n";
        let wrapped = wrap_words(hint, 30);
        for line in wrapped.lines() {
            assert!(line.chars().count() <= 30, "{line:?}");
        }
        let words = |t: &str| t.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        assert_eq!(words(&wrapped), words(hint), "every word whole: {wrapped}");
    }
}
