//! `turns.jsonl`: where each turn of a session began, so a fork can cut the history at the end of
//! any turn and carry the system prompt, plan and ledger as they were then.
//!
//! One line per turn, appended as the turn starts (before its prompt is stored):
//! `{"turn", "at", "archive", "ts", "system"?, "plan"?, "ledger"?}`. `at` is the number of stored
//! messages before the turn's prompt; `archive` the number `archive/conversation-NNNN.jsonl` would
//! take next (while it is still the next number, the live conversation holds those messages;
//! after a compaction or repair rewrote it, that archive does). `system`, `plan` (plan.json) and
//! `ledger` (ledger.json) are written only when they differ from the last line that has them:
//! the state at the start of turn N+1 (= at the end of turn N) is the newest one at or before
//! its line.

use std::io;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::Message;
use crate::store::{Session, files, fsutil};

/// The file's name in the session folder.
pub const TURNS: &str = "turns.jsonl";

/// One line of `turns.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnStart {
    /// The turn's number in the session (1-based).
    pub turn: u32,
    /// Stored messages before the turn's prompt.
    pub at: usize,
    /// The next free number of `archive/conversation-NNNN.jsonl` then.
    pub archive: u32,
    /// RFC 3339 time the turn began.
    pub ts: String,
    /// `system.txt`, when it differs from the last line that has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// `plan.json`, when it differs from the last line that has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Value>,
    /// `ledger.json`, when it differs from the last line that has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<Value>,
}

/// The session's turn lines (a torn last line skipped).
pub fn read(session: &Session) -> io::Result<Vec<TurnStart>> {
    Ok(fsutil::read_jsonl(&session.path(TURNS))?.items)
}

/// The state a fork at the end of a turn starts from.
#[derive(Debug, Clone, Default)]
pub struct StateAt {
    /// The history up to the end of the turn.
    pub history: Vec<Message>,
    /// `system.txt`'s bytes then.
    pub system: String,
    /// `plan.json` then.
    pub plan: Option<Value>,
    /// `ledger.json` then.
    pub ledger: Option<Value>,
    /// The turn lines up to and with that turn (each `archive` made 1: the fork's own
    /// conversation holds their messages).
    pub lines: Vec<TurnStart>,
}

/// Appends the line of the turn starting now; `history_len` messages are stored. Returns the
/// turn's number. The caller holds the session (its lease).
pub fn start(session: &Session, history_len: usize) -> io::Result<u32> {
    let lock = session.lock()?;
    let lines = read(session)?;
    let turn = lines.last().map_or(1, |l| l.turn.saturating_add(1));
    let last_system = lines.iter().rev().find_map(|l| l.system.clone());
    let last_plan = lines.iter().rev().find_map(|l| l.plan.clone());
    let last_ledger = lines.iter().rev().find_map(|l| l.ledger.clone());
    let system = session.read_text(files::SYSTEM)?;
    let plan: Option<Value> = session.read_json(files::PLAN_STATE).ok().flatten();
    let ledger: Option<Value> = session.read_json(files::LEDGER).ok().flatten();
    let line = TurnStart {
        turn,
        at: history_len,
        archive: session.next_archive_number("conversation")?,
        ts: crate::clock::now_rfc3339(),
        system: system.filter(|s| Some(s) != last_system.as_ref()),
        plan: plan.filter(|p| Some(p) != last_plan.as_ref()),
        ledger: ledger.filter(|l| Some(l) != last_ledger.as_ref()),
    };
    let text = fsutil::to_jsonl(&line)?;
    fsutil::append_line(&session.path(TURNS), &text)?;
    drop(lock);
    Ok(turn)
}

/// The number of the session's last turn (0 before the first).
pub fn last(session: &Session) -> io::Result<u32> {
    Ok(read(session)?.last().map_or(0, |l| l.turn))
}

/// The session's state at the end of turn `turn` (0: before the first turn). Errors: no such
/// turn, or the archive that holds it is gone.
pub fn state_at(session: &Session, turn: u32) -> io::Result<StateAt> {
    let lines = read(session)?;
    let last = lines.last().map_or(0, |l| l.turn);
    if turn > last {
        return Err(io::Error::other(format!(
            "session {} has {last} turn(s); there is no turn {turn}",
            session.id
        )));
    }
    let keep: Vec<TurnStart> = lines
        .iter()
        .filter(|l| l.turn <= turn)
        .cloned()
        .map(|mut l| {
            l.archive = 1;
            l
        })
        .collect();
    if turn == last {
        // The end of the newest turn is the session as it is.
        return Ok(StateAt {
            history: session.read_conversation()?.items,
            system: session.read_text(files::SYSTEM)?.unwrap_or_default(),
            plan: session.read_json(files::PLAN_STATE).ok().flatten(),
            ledger: session.read_json(files::LEDGER).ok().flatten(),
            lines: keep,
        });
    }
    // The next turn's line: what was stored, and the state files, as it began.
    let Some(idx) = lines.iter().position(|l| l.turn == turn + 1) else {
        return Err(io::Error::other(format!(
            "turns.jsonl of session {} has no line for turn {}",
            session.id,
            turn + 1
        )));
    };
    let next = &lines[idx];
    let upto = &lines[..=idx];
    let conversation = if next.archive == session.next_archive_number("conversation")? {
        session.path(files::CONVERSATION)
    } else {
        session
            .path(files::ARCHIVE)
            .join(format!("conversation-{:04}.jsonl", next.archive))
    };
    let read = fsutil::read_jsonl::<Message>(&conversation)?;
    if read.items.len() < next.at {
        return Err(io::Error::other(format!(
            "{} holds {} messages, fewer than the {} of turn {turn}: the history of that turn is lost",
            conversation.display(),
            read.items.len(),
            next.at
        )));
    }
    let mut history = read.items;
    history.truncate(next.at);
    Ok(StateAt {
        history,
        system: upto
            .iter()
            .rev()
            .find_map(|l| l.system.clone())
            .unwrap_or_default(),
        plan: upto.iter().rev().find_map(|l| l.plan.clone()),
        ledger: upto.iter().rev().find_map(|l| l.ledger.clone()),
        lines: keep,
    })
}
