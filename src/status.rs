//! `tern status`: the sidebar view of a session (the To-do ledger in the seed's terminal format),
//! with the plan state and the cache figures below. A pure function of the session's files, so
//! `tern status`, `tern watch` and `/status` show the same thing.

use serde_json::{Value, json};

use crate::domain::ledger::Ledger;
use crate::event::Event;
use crate::render::sidebar::{self, SidebarInput};
use crate::runtime::plan::plan_file;
use crate::runtime::ratio;
use crate::stats;
use crate::store::{Session, files};

/// Everything the view is built from, read once.
pub struct Snapshot {
    /// The ledger (empty when absent; an unreadable ledger is reported in `problems`).
    pub ledger: Ledger,
    /// `meta.json`, when readable.
    pub meta: Option<crate::store::Meta>,
    /// The plan state.
    pub plan: crate::domain::plan::PlanFile,
    /// Per-request figures.
    pub requests: Vec<stats::RequestStats>,
    /// Tokens (input + output) of requests since the goal started (all requests without a goal).
    pub tokens_since_goal: u64,
    /// Files that could not be read, with the reason.
    pub problems: Vec<String>,
    /// When every To-do item is settled: the ledger's last change (Unix s), where the elapsed
    /// time stops.
    pub settled_at: Option<u64>,
    /// Sub-agents running now.
    pub children: Vec<RunningChild>,
    /// The instruction files pinned in `system.txt` (label, and whether the file reads
    /// differently now; None: not checked, the global file).
    pub instructions: Vec<(String, Option<bool>)>,
    /// The `--goal` (`goal.json`), when one is set.
    pub goal: Option<crate::hooks::goal::Goal>,
    /// Hook runs recorded (`hook` events), and the latest as its REPL line.
    pub hooks: (usize, Option<String>),
    /// The finished sub-agents' cost in USD (`agent_end` events), and how many of them had no
    /// known price.
    pub children_cost: (f64, usize),
    /// The door (DESIGN §10): what it did that the person should see.
    pub door: DoorView,
    /// The skills catalog pinned in `system.txt`: skills listed and its bytes.
    pub skills: (usize, usize),
}

/// The door as `tern status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DoorView {
    /// Files a person's tool runs on its own that the door applied since the latest turn
    /// began (`door` events), shown until the next turn.
    pub listed: Vec<String>,
    /// Changes kept aside in this session (`held.jsonl`; `tern held`).
    pub kept: usize,
    /// The running session's layers: bytes and entries (None: no layer runs).
    pub layer: Option<(u64, u64)>,
}

/// Reads a snapshot of `session`. Damaged files do not fail the view: they are listed in
/// `problems` and shown.
pub fn snapshot(session: &Session) -> Snapshot {
    let mut problems = Vec::new();
    let ledger: Ledger = match session.read_json(files::LEDGER) {
        Ok(l) => l.unwrap_or_default(),
        Err(e) => {
            problems.push(e.to_string());
            Ledger::default()
        }
    };
    let mut meta = session
        .read_meta()
        .map_err(|e| problems.push(e.to_string()))
        .ok();
    // Nobody runs it: shown as events.jsonl records it, as `tern sessions` and the next start
    // do (`Meta::settle`), so the totals here and there are one.
    if let Some(m) = meta.as_mut()
        && crate::store::held_elsewhere(session).is_none()
        && let Ok(rec) = session.recorded()
    {
        m.settle(&rec);
    }
    let plan = plan_file(session)
        .map_err(|e| problems.push(e.to_string()))
        .unwrap_or_default();
    let since = ledger.goal.as_ref().and_then(|g| g.started_at).unwrap_or(0);
    let mut requests = Vec::new();
    let mut tokens: u64 = 0;
    let mut hooks = (0, None);
    let mut children_cost = (0.0, 0);
    let mut door = DoorView::default();
    match session.read_envelopes() {
        Ok(events) => {
            for e in &events {
                if matches!(e.event, Event::TurnStart { .. }) {
                    door.listed.clear();
                }
                if let Event::Door { listed, .. } = &e.event {
                    door.listed.extend(listed.iter().cloned());
                }
                if matches!(e.event, Event::Hook { .. }) {
                    hooks = (hooks.0 + 1, crate::hooks::run_line(&e.event));
                }
                if let Event::AgentEnd { cost_usd, .. } = e.event {
                    match cost_usd {
                        Some(c) => children_cost.0 = crate::cost::add_usd(children_cost.0, c),
                        None => children_cost.1 += 1,
                    }
                }
                if let Event::Usage {
                    input_tokens,
                    output_tokens,
                    ..
                } = e.event
                {
                    let ts = crate::clock::parse_rfc3339(&e.ts).unwrap_or(0);
                    if ts >= since {
                        tokens = tokens
                            .saturating_add(input_tokens)
                            .saturating_add(output_tokens);
                    }
                }
            }
            requests = stats::requests_from(&events);
        }
        Err(e) => problems.push(e.to_string()),
    }
    let goal = crate::hooks::goal::read(session)
        .map_err(|e| problems.push(e.into()))
        .ok()
        .flatten();
    let all_settled = !ledger.items.is_empty() && ledger.settled() == ledger.items.len();
    let settled_at = all_settled
        .then(|| std::fs::metadata(session.path(files::LEDGER)).and_then(|m| m.modified()))
        .and_then(Result::ok)
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs());
    let (instructions, skills) = pinned(session, meta.as_ref());
    door.kept = crate::sandbox::door::held_in(&session.dir).len();
    door.layer = meta
        .as_ref()
        .and_then(|m| m.pid)
        .filter(|_| crate::store::held_elsewhere(session).is_some())
        .and_then(|pid| Some(crate::sandbox::door::layers_of(&session.state_root()?, pid)))
        .filter(|(_, n)| *n > 0);
    Snapshot {
        ledger,
        meta,
        plan,
        requests,
        tokens_since_goal: tokens,
        problems,
        settled_at,
        children: running_children(session),
        instructions,
        goal,
        hooks,
        children_cost,
        door,
        skills,
    }
}

/// An instruction file pinned in `system.txt`: its label, and whether it reads differently now
/// (None: not checked).
type Pinned = (String, Option<bool>);

/// What `session` pinned in `system.txt` (read once): its instruction files and its skills
/// catalog (skills listed, bytes).
fn pinned(session: &Session, meta: Option<&crate::store::Meta>) -> (Vec<Pinned>, (usize, usize)) {
    let system = session.read_text(files::SYSTEM).ok().flatten();
    let skills = system
        .as_deref()
        .map_or((0, 0), crate::runtime::system::pinned_skills);
    (pinned_instructions(system.as_deref(), meta), skills)
}

/// The instruction files `session` pinned (see [`Snapshot::instructions`]).
fn pinned_instructions(
    system_txt: Option<&str>,
    meta: Option<&crate::store::Meta>,
) -> Vec<(String, Option<bool>)> {
    use crate::runtime::system;
    let Some(text) = system_txt else {
        return Vec::new();
    };
    let ws = meta.map(|m| std::path::PathBuf::from(&m.cwd));
    system::pinned_instructions(text)
        .into_iter()
        .map(|(label, pinned)| {
            let changed = ws
                .as_deref()
                .and_then(|w| system::instruction_changed(w, &label, &pinned));
            (label, changed)
        })
        .collect()
}

/// `Instructions: AGENTS.md, pkg/AGENTS.md (read at session start; …)`, or None without any.
fn instructions_line(files: &[(String, Option<bool>)]) -> Option<String> {
    if files.is_empty() {
        return None;
    }
    let names: Vec<&str> = files.iter().map(|(l, _)| l.as_str()).collect();
    let changed: Vec<&str> = files
        .iter()
        .filter(|(_, c)| *c == Some(true))
        .map(|(l, _)| l.as_str())
        .collect();
    let why = if changed.is_empty() {
        "read at session start; an edit takes effect in a new session".to_string()
    } else {
        format!(
            "read at session start; changed since: {} (a new session reads the new text)",
            changed.join(", ")
        )
    };
    Some(format!("Instructions: {} ({why})", names.join(", ")))
}

/// `session`'s model (from `meta.json`) and its price, if tern knows one.
pub fn price_of(
    prices: &crate::cost::PriceBook,
    session: &Session,
) -> (String, Option<crate::cost::Priced>) {
    let model = session.read_meta().map(|m| m.model).unwrap_or_default();
    let price = prices.lookup(&model);
    (model, price)
}

/// Where the price of `session`'s model comes from, as `tern status` and `/status` end: the
/// person's config, the built-in table (its source and date), or none.
pub fn price_line(prices: &crate::cost::PriceBook, session: &Session) -> String {
    let (model, price) = price_of(prices, session);
    match price {
        None => format!(
            "price of {model}: unknown: set \"price\" (USD per million tokens) in ~/.config/tern/config.json to see costs"
        ),
        Some(p) => format!(
            "price of {model}: ${}/${}/${} per million tokens in/cached/out, from {}",
            p.price.input, p.price.cached_input, p.price.output, p.source
        ),
    }
}

/// The footer's cost line: this session's requests (`own`, None when no request had a known
/// price; `unpriced` requests without one) and its finished sub-agents' (`children`: USD, and
/// how many had no known price), which count into the session's cost.
fn cost_line(own: Option<f64>, unpriced: usize, children: (f64, usize)) -> String {
    let (kids, kids_unknown) = children;
    let total = match own {
        Some(c) => Some(c + kids),
        None if kids > 0.0 => Some(kids),
        None => None,
    };
    let Some(total) = total else {
        return "Cost: unknown (tern knows no price for this model)".into();
    };
    let mut line = format!("Cost: {}", crate::cost::usd_text(Some(total)));
    if kids > 0.0 {
        line.push_str(&format!(
            " (sub-agents {} of it)",
            crate::cost::usd_text(Some(kids))
        ));
    }
    let unknown = unpriced + kids_unknown;
    if unknown > 0 {
        line.push_str(&format!(
            " + {unknown} request(s) or sub-agent(s) of unknown price"
        ));
    }
    line
}

/// The footer lines: plan state, cache figures, session status, problems.
pub fn footer(session: &Session, snap: &Snapshot) -> Vec<String> {
    let mut lines = vec![String::new()];
    if let Some(g) = &snap.goal {
        lines.push(crate::hooks::goal::status_line(g));
    }
    let plan = &snap.plan;
    let mut p = format!("Plan: {}", plan.state.as_str());
    if plan.revision > 0 {
        p.push_str(&format!(" (revision {})", plan.revision));
    }
    lines.push(p);
    let t = stats::total(&snap.requests);
    if !snap.requests.is_empty() {
        let n = snap.requests.len();
        lines.push(format!(
            "Cache: {:.1}% hit, {} of {} tokens",
            ratio(t.cached_tokens, t.input_tokens) * 100.0,
            t.cached_tokens,
            t.input_tokens,
        ));
        lines.push(format!(
            "{n} request{}; prefix reuse {:.1}%",
            if n == 1 { "" } else { "s" },
            ratio(t.prefix_reuse_bytes, t.request_bytes) * 100.0
        ));
        lines.push(cost_line(
            t.cost_usd,
            stats::unpriced(&snap.requests),
            snap.children_cost,
        ));
    }
    if let Some(m) = &snap.meta {
        lines.push(format!(
            "Session {}: {}",
            session.id,
            session_state(session, m)
        ));
        if let Some(sb) = &m.sandbox {
            lines.push(format!("Sandbox: {}", sandbox_text(sb)));
        }
        if let Some(w) = &m.worktree {
            lines.push(format!(
                "Worktree: {} (branch {}) at {}",
                w.name, w.branch, m.cwd
            ));
        }
    }
    lines.extend(instructions_line(&snap.instructions));
    if snap.skills.0 > 0 {
        lines.push(format!(
            "Skills: {} in the catalog, {} bytes of the system prompt (`tern skills` lists them)",
            snap.skills.0, snap.skills.1
        ));
    }
    if let Ok((waiting, _)) = crate::runtime::steer::waiting(session)
        && !waiting.is_empty()
    {
        let n = waiting.len();
        lines.push(format!(
            "Steered: {n} message{} waiting for the model's next request",
            if n == 1 { "" } else { "s" }
        ));
    }
    lines.extend(snap.children.iter().map(RunningChild::line));
    if let (n @ 1.., Some(last)) = &snap.hooks {
        lines.push(format!(
            "Hooks: {n} run{}; last: {last}",
            if *n == 1 { "" } else { "s" }
        ));
    }
    lines.extend(door_lines(&snap.door));
    for p in &snap.problems {
        lines.push(format!("! {p}"));
    }
    lines
}

/// The door's lines: the files a person's tool runs that changed, what is kept aside, the
/// layer's size.
fn door_lines(d: &DoorView) -> Vec<String> {
    let mut lines = Vec::new();
    if !d.listed.is_empty() {
        lines.push(format!(
            "Files your tools run on their own changed: {}",
            crate::render::safe(&d.listed.join(", "))
        ));
    }
    if d.kept > 0 {
        lines.push(format!(
            "Kept aside: {} change{} (tern held)",
            d.kept,
            if d.kept == 1 { "" } else { "s" }
        ));
    }
    if let Some((bytes, n)) = d.layer {
        lines.push(format!(
            "Layer: {} in {n} entries written by commands (the door applies them)",
            crate::checkpoint::size_text(bytes)
        ));
    }
    lines
}

/// A sub-agent running now (a process really holds it), as the status views show it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RunningChild {
    /// Its session id (its folder's name under the parent's `agents/`).
    pub session: String,
    /// Its title (the task), control characters made safe.
    pub title: String,
    /// To-do items settled, of `total`.
    pub settled: usize,
    /// To-do items in its ledger.
    pub total: usize,
    /// 1 for a child of this session, 2 for a grandchild, …
    pub depth: usize,
}

impl RunningChild {
    /// `Agent 2026…-ab12: running, 2/5 settled (review the diff)`, indented two spaces per
    /// level below the first.
    pub fn line(&self) -> String {
        let progress = if self.total == 0 {
            String::new()
        } else {
            format!(", {}/{} settled", self.settled, self.total)
        };
        format!(
            "{}Agent {}: running{progress} ({})",
            "  ".repeat(self.depth.saturating_sub(1)),
            self.session,
            self.title
        )
    }
}

/// The sub-agents of `session` running now, at any depth, in folder order (a child before its
/// own children). Unreadable child folders are skipped: the view never fails on them.
pub fn running_children(session: &Session) -> Vec<RunningChild> {
    let mut out = Vec::new();
    collect_children(session, 1, &mut out);
    out
}

fn child_sessions(session: &Session) -> Vec<Session> {
    crate::store::session::child_dirs(&session.path(files::AGENTS))
        .into_iter()
        .map(|(id, dir)| Session::at(&id, dir))
        .collect()
}

fn collect_children(session: &Session, depth: usize, out: &mut Vec<RunningChild>) {
    // Children nest at most --agent-depth deep; the bound keeps a hand-made loop of folders
    // from recursing for ever.
    if depth > 16 {
        return;
    }
    for c in child_sessions(session) {
        if let Ok(m) = c.read_meta()
            && crate::store::really_running(&c, &m)
        {
            let l: Ledger = c
                .read_json(files::LEDGER)
                .ok()
                .flatten()
                .unwrap_or_default();
            out.push(RunningChild {
                session: c.id.clone(),
                title: crate::render::safe(&m.title.replace(['\n', '\r'], " ")).into_owned(),
                settled: l.settled(),
                total: l.items.len(),
                depth,
            });
        }
        collect_children(&c, depth + 1, out);
    }
}

/// Modification times of every sub-agent's `meta.json` and `ledger.json` (any depth), so
/// `tern watch` redraws when a child starts, progresses or ends.
pub fn children_stamps(session: &Session) -> Vec<Option<std::time::SystemTime>> {
    let mut out = Vec::new();
    let mut stack = child_sessions(session)
        .into_iter()
        .map(|c| (c, 1usize))
        .collect::<Vec<_>>();
    while let Some((c, depth)) = stack.pop() {
        if depth > 16 {
            continue;
        }
        {
            for f in [files::META, files::LEDGER] {
                out.push(std::fs::metadata(c.path(f)).and_then(|m| m.modified()).ok());
            }
            stack.extend(child_sessions(&c).into_iter().map(|g| (g, depth + 1)));
        }
    }
    out
}

/// A sandbox setting as the status views show it: `workspace-write (jail of namespaces +
/// Landlock ABI 7)`, `workspace-write (Landlock ABI 7 alone, --no-jail)`,
/// `read-only, no network (…)`, `danger-full-access (no sandbox)`, or a mode this machine cannot
/// enforce (`… (not enforced: commands are refused)`).
pub fn sandbox_text(sb: &crate::policy::Setting) -> String {
    let net = if sb.no_network { ", no network" } else { "" };
    let how = match (sb.mode.is_sandboxed(), sb.enforced) {
        (false, _) => "no sandbox".to_string(),
        (true, true) if sb.jail => format!("jail of namespaces + Landlock ABI {}", sb.landlock_abi),
        (true, true) => format!("Landlock ABI {} alone, --no-jail", sb.landlock_abi),
        (true, false) => "not enforced here: commands are refused".to_string(),
    };
    format!("{}{net} ({how})", sb.mode.as_str())
}

/// A session's status as shown: `running (pid N)` only while a process really holds it; a
/// running status whose process is gone shows as `interrupted (its process is gone)`.
pub fn session_state(session: &Session, m: &crate::store::Meta) -> String {
    if m.status != crate::store::Status::Running {
        return m.status.as_str().to_string();
    }
    match crate::store::held_elsewhere(session) {
        Some(pid) if pid > 0 => format!("running (pid {pid})"),
        Some(_) => "running".to_string(),
        None => "interrupted (its process is gone)".to_string(),
    }
}

/// The whole view as text, every line ending in `\n`; `height` limits the lines (windowing the
/// To-do around the item in progress).
pub fn render_text(session: &Session, height: Option<usize>) -> String {
    let snap = snapshot(session);
    render_snapshot(session, &snap, height, crate::clock::now_unix())
}

/// [`render_text`] from an already read snapshot and a given clock.
pub fn render_snapshot(
    session: &Session,
    snap: &Snapshot,
    height: Option<usize>,
    now: u64,
) -> String {
    let footer = footer(session, snap);
    // The elapsed time stops when every item is settled, or when the session stopped running
    // (its last update): a finished session's clock does not run on.
    let stopped = snap
        .meta
        .as_ref()
        .filter(|m| m.status != crate::store::Status::Running)
        .and_then(|m| crate::clock::parse_rfc3339(&m.updated_at));
    let until = match (snap.settled_at, stopped) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    sidebar::render(&SidebarInput {
        ledger: &snap.ledger,
        now_unix: until.map_or(now, |t| t.min(now)),
        tokens_used: Some(snap.tokens_since_goal),
        height,
        footer: &footer,
    })
}

/// The view as JSON for scripts: `{session, status, pid, sandbox, plan, ledger, settled, total,
/// tokens_since_goal, cache, children, problems}`; `children` are [`RunningChild`] objects.
pub fn to_json(session: &Session) -> Value {
    snapshot_json(session, &snapshot(session))
}

/// [`to_json`] from an already read snapshot.
pub fn snapshot_json(session: &Session, snap: &Snapshot) -> Value {
    let t = stats::total(&snap.requests);
    json!({
        "session": session.id,
        "status": snap.meta.as_ref().map(|m| m.status.as_str()),
        "pid": snap.meta.as_ref().and_then(|m| m.pid),
        "sandbox": snap.meta.as_ref().and_then(|m| m.sandbox),
        "plan": {"state": snap.plan.state.as_str(), "revision": snap.plan.revision, "locked": snap.plan.locked.is_some()},
        "ledger": snap.ledger,
        "settled": snap.ledger.settled(),
        "total": snap.ledger.items.len(),
        "tokens_since_goal": snap.tokens_since_goal,
        "cache": {
            "requests": snap.requests.len(),
            "input_tokens": t.input_tokens,
            "cached_tokens": t.cached_tokens,
            "cache_hit_ratio": ratio(t.cached_tokens, t.input_tokens),
            "prefix_reuse_ratio": ratio(t.prefix_reuse_bytes, t.request_bytes),
        },
        "cost": {
            "usd": t.cost_usd.map(|c| crate::cost::usd_json(c + snap.children_cost.0)),
            "sub_agents_usd": crate::cost::usd_json(snap.children_cost.0),
            "unpriced_requests": stats::unpriced(&snap.requests),
            "unpriced_sub_agents": snap.children_cost.1,
        },
        "children": snap.children,
        "instructions": snap.instructions.iter().map(|(l, c)| json!({"source": l, "changed": c})).collect::<Vec<_>>(),
        "skills": {"listed": snap.skills.0, "catalog_bytes": snap.skills.1},
        "goal": snap.goal,
        "hooks": {"runs": snap.hooks.0, "last": snap.hooks.1},
        "door": {
            "listed": snap.door.listed,
            "kept": snap.door.kept,
            "layer_bytes": snap.door.layer.map(|l| l.0),
            "layer_entries": snap.door.layer.map(|l| l.1),
        },
        "problems": snap.problems,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A finished session's elapsed time stops at its last update, however long ago that was
    /// (a new user saw it count on, 33 minutes after the session completed).
    /// Sub-agents' costs count into the session's; an unknown price is said, never guessed.
    #[test]
    fn the_cost_line_counts_sub_agents_in() {
        assert_eq!(cost_line(Some(0.01), 0, (0.0, 0)), "Cost: $0.0100");
        assert_eq!(
            cost_line(Some(0.01), 0, (0.02, 0)),
            "Cost: $0.0300 (sub-agents $0.0200 of it)"
        );
        assert!(cost_line(None, 2, (0.0, 0)).starts_with("Cost: unknown"));
        assert_eq!(
            cost_line(Some(0.5), 1, (0.0, 1)),
            "Cost: $0.5000 + 2 request(s) or sub-agent(s) of unknown price"
        );
    }

    #[test]
    fn a_finished_sessions_elapsed_time_stops() {
        let dir = tempfile::tempdir().unwrap();
        let s = Session::at("s1", dir.path().to_path_buf());
        let t = crate::clock::parse_rfc3339("2026-12-01T10:00:00Z").unwrap();
        let meta = crate::store::Meta {
            id: "s1".into(),
            status: crate::store::Status::Ended(crate::event::Ending::Completed),
            updated_at: "2026-12-01T10:00:00Z".into(),
            ..crate::store::Meta::default()
        };
        std::fs::write(
            dir.path().join(files::META),
            serde_json::to_string(&meta).unwrap(),
        )
        .unwrap();
        let ledger = serde_json::json!({"goal": {"objective": "g", "started_at": t - 120},
            "items": [{"id": "1", "content": "a", "status": "in_progress"}], "revision": 1});
        std::fs::write(dir.path().join(files::LEDGER), ledger.to_string()).unwrap();
        let snap = snapshot(&s);
        assert!(snap.meta.is_some(), "{:?}", snap.problems);
        let text = render_snapshot(&s, &snap, None, t + 3600);
        assert!(text.contains("elapsed: 2m"), "{text}");
    }
}
