//! `tern relay` / `/relay`: the handoff for the next thread. `handoff.md` holds the goal, the
//! locked plan, the To-do body byte-identical to the work-state block, the strategy notes, the
//! latest summary and the next action. `tern relay --start` opens a new session seeded with it.

use std::path::PathBuf;

use serde_json::Value;

use crate::domain::ledger::{Ledger, Status};
use crate::launcher::{Launcher, Seed};
use crate::message::Message;
use crate::render::work_state;
use crate::runtime::{plan, system};
use crate::store::{Meta, Session, files};

/// Builds the handoff text of `session`.
pub fn handoff(session: &Session) -> Result<String, String> {
    let e = |e: std::io::Error| e.to_string();
    let ledger: Ledger = session
        .read_json(files::LEDGER)
        .map_err(e)?
        .unwrap_or_default();
    let plan = plan::plan_file(session).map_err(|e| e.to_string())?;
    let strategy: Option<Value> = session.read_json(files::STRATEGY).map_err(e)?;
    let summary = session.read_text(files::SUMMARY).map_err(e)?;

    let mut out = format!("# Handoff from tern session {}\n", session.id);
    out.push_str("\n## Goal\n");
    match &ledger.goal {
        Some(g) => out.push_str(&work_state::clean_line(&g.objective)),
        None => out.push_str("(none set)"),
    }
    out.push_str("\n\n## Locked plan\n");
    out.push_str(
        plan.locked
            .as_deref()
            .map(str::trim_end)
            .unwrap_or("(none)"),
    );
    out.push_str("\n\n## To-do\n");
    match work_state::body(&ledger) {
        Some(body) => out.push_str(&body),
        None => out.push_str("(empty)"),
    }
    out.push_str("\n\n## Strategy\n");
    match strategy.as_ref().and_then(Value::as_object) {
        Some(map) if !map.is_empty() => {
            for (k, v) in map {
                let text = match v {
                    Value::String(s) => s.clone(),
                    Value::Array(items) => items
                        .iter()
                        .map(|i| format!("\n- {}", i.as_str().unwrap_or(&i.to_string())))
                        .collect(),
                    other => other.to_string(),
                };
                let text = text.trim_end();
                if text.starts_with('\n') {
                    out.push_str(&format!("{k}:{text}\n"));
                } else {
                    out.push_str(&format!("{k}: {text}\n"));
                }
            }
            out.truncate(out.trim_end().len());
        }
        _ => out.push_str("(none)"),
    }
    out.push_str("\n\n## Latest summary\n");
    out.push_str(
        summary
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .unwrap_or("(no compaction yet)"),
    );
    out.push_str("\n\n## Next action\n");
    let next = ledger
        .items
        .iter()
        .find(|i| i.status == Status::InProgress)
        .or_else(|| ledger.items.iter().find(|i| i.status == Status::Pending));
    match next {
        Some(i) => out.push_str(&format!(
            "Continue with #{}: {}",
            work_state::clean_line(&i.id),
            work_state::clean_line(&i.content)
        )),
        None if !ledger.items.is_empty() => {
            out.push_str("Every To-do item is settled: check the result and report to the person.")
        }
        None => out.push_str("No To-do items: ask the person what to do next."),
    }
    out.push('\n');
    Ok(out)
}

/// Writes `handoff.md` (atomically) and returns its path and text.
pub fn write(session: &Session) -> Result<(PathBuf, String), String> {
    let text = handoff(session)?;
    let lock = session.lock().map_err(|e| e.to_string())?;
    session
        .write_text_locked(&lock, files::HANDOFF, &text)
        .map_err(|e| e.to_string())?;
    Ok((session.path(files::HANDOFF), text))
}

/// Opens a new session seeded with the handoff of `from`: a fork whose system prompt is `from`'s
/// exact pinned bytes (so it carries the same locked plan and reads the same cache), its ledger
/// a copy, its plan state carried, and its history the handoff in place of the conversation. It
/// becomes the current session; continue it with `tern exec --continue` or `tern chat --continue`.
pub fn start(launcher: &Launcher, from: &Session) -> Result<Session, String> {
    let e = |e: std::io::Error| e.to_string();
    let (_, text) = write(from)?;
    let old: Meta = from.read_meta().map_err(e)?;
    let plan = plan::plan_file(from).map_err(|e| e.to_string())?;
    let ledger: Option<Ledger> = from.read_json(files::LEDGER).map_err(e)?;
    let system = match from.read_text(files::SYSTEM).map_err(e)? {
        Some(s) => s,
        None => system::with_plan(
            &system::base_from(
                &launcher.lookup(),
                &system::sandbox_lines(
                    launcher.config.sandbox,
                    launcher.config.no_network,
                    &launcher.mcp_servers().names(),
                ),
                &launcher.skills(launcher.config.context_window).1.text,
            ),
            plan.locked.as_deref(),
        ),
    };
    let seed = Seed {
        system,
        history: vec![Message::user(format!(
            "[This thread continues the work of tern session {}. Handoff:]\n\n{text}",
            from.id
        ))],
        title: format!("relay from {}", from.id),
        plan: plan.locked.is_some().then(|| plan.carried()),
        ledger,
        route: (old.provider, old.model, old.base_url),
    };
    launcher.seed(&seed).map_err(|e| e.to_string())
}
