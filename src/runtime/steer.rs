//! Steering: the person's words delivered into a running turn without stopping it.
//!
//! `tern steer`, a line typed in the REPL while a turn runs, and ACP's `_tern/steer` all write one
//! entry into the session's inbox (`inbox/<id>.json`, one atomic write each: its rename is the
//! commit point). The runtime holding the session delivers every waiting entry, in order, before
//! its next model request: each becomes a user message appended after the last tool result
//! (nothing before it changes, so the prefix cache holds), with a `steer` event.
//!
//! Delivery is idempotent: the stored message carries the entry's id, and an entry is removed only
//! after its message is durably in `conversation.jsonl`; an entry whose id the history already
//! holds (a crash between the two) is removed without a second delivery.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Failure, Runtime, Surface};
use crate::event::Event;
use crate::message::Message;
use crate::store::{Session, fsutil};

/// The inbox folder of a session.
pub const INBOX: &str = "inbox";

/// One waiting message: `inbox/<id>.json` = `{"id", "text", "at"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// `<20-digit ns since the epoch>-<pid>`: unique, and the file names sort in send order.
    pub id: String,
    /// What the model reads, as typed (never blank, at most [`super::MAX_PROMPT_BYTES`]).
    pub text: String,
    /// RFC 3339 UTC time it was written (display only).
    pub at: String,
}

/// Why a steer was not written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SteerError {
    /// Blank, or longer than a prompt may be (exit 2).
    Usage(String),
    /// No turn is running in the session, and `--queue` was not given (exit 1).
    NotRunning(String),
    /// The inbox could not be written (exit 1).
    Failed(String),
}

impl std::fmt::Display for SteerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SteerError::Usage(m) | SteerError::NotRunning(m) | SteerError::Failed(m) => {
                f.write_str(m)
            }
        }
    }
}

impl SteerError {
    /// The process exit code (DESIGN.md §8).
    pub fn exit_code(&self) -> i32 {
        match self {
            SteerError::Usage(_) => 2,
            _ => 1,
        }
    }
}

/// Where a steer went.
#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    /// The entry as written.
    pub entry: Entry,
    /// True: a turn was running and gets it at its next model request; false: kept for the
    /// session's next turn (`--queue`).
    pub running: bool,
}

impl Sent {
    /// The receipt line every surface prints.
    pub fn receipt(&self, session: &str) -> String {
        if self.running {
            format!(
                "steered into session {session}'s running turn: the model reads it at its next request"
            )
        } else {
            format!("queued for session {session}: delivered at its next turn")
        }
    }
}

/// Writes `text` to `session`'s inbox under the session lock (one commit point: the rename of
/// the entry's file). Refused when no turn is running there unless `queue`.
///
/// Errors: [`SteerError::Usage`] for a blank or oversized text, [`SteerError::NotRunning`],
/// [`SteerError::Failed`] for an I/O error.
pub fn send(session: &Session, text: &str, queue: bool) -> Result<Sent, SteerError> {
    if text.trim().is_empty() {
        return Err(SteerError::Usage(
            "nothing to steer with: the message is empty".into(),
        ));
    }
    if text.len() > super::MAX_PROMPT_BYTES {
        return Err(SteerError::Usage(format!(
            "the message is longer than {} bytes, the most a prompt may be",
            super::MAX_PROMPT_BYTES
        )));
    }
    let failed = |e: std::io::Error| SteerError::Failed(e.to_string());
    let lock = session.lock().map_err(failed)?;
    let running = session
        .read_meta()
        .is_ok_and(|m| crate::store::really_running(session, &m));
    if !running && !queue {
        return Err(SteerError::NotRunning(format!(
            "no turn is running in session {}: nothing to steer (give it as a prompt: tern exec --continue \"…\", or keep it for the next turn with --queue)",
            session.id
        )));
    }
    let dir = session.path(INBOX);
    fsutil::ensure_dir(&dir).map_err(failed)?;
    // Names sort in send order: the clock, moved past the newest waiting entry if it went back.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let newest = list(&dir)
        .map_err(failed)?
        .last()
        .and_then(|p| {
            p.file_stem()?
                .to_str()?
                .split('-')
                .next()?
                .parse::<u128>()
                .ok()
        })
        .unwrap_or(0);
    let id = format!(
        "{:020}-{}",
        now.max(newest.saturating_add(1)),
        std::process::id()
    );
    let entry = Entry {
        id: id.clone(),
        text: text.to_string(),
        at: crate::clock::now_rfc3339(),
    };
    let bytes = serde_json::to_vec(&entry).map_err(|e| SteerError::Failed(e.to_string()))?;
    fsutil::atomic_write(&dir.join(format!("{id}.json")), &bytes).map_err(failed)?;
    drop(lock);
    Ok(Sent { entry, running })
}

/// The waiting entries' files, oldest first (tempfiles, links and other names skipped; an inbox
/// that is itself a link is refused: tern never reads or writes through links in its folders).
fn list(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    fsutil::refuse_symlink(dir)?;
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(fsutil::with_path(e, dir)),
    };
    let mut v: Vec<PathBuf> = rd
        .flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            !n.starts_with(fsutil::TEMP_PREFIX)
                && n.ends_with(".json")
                && e.file_type().is_ok_and(|t| t.is_file())
        })
        .map(|e| e.path())
        .collect();
    v.sort();
    Ok(v)
}

/// Whether `session` has messages waiting (one `readdir`).
pub fn pending(session: &Session) -> bool {
    list(&session.path(INBOX)).is_ok_and(|v| !v.is_empty())
}

/// What the inbox holds: the entries with their files, oldest first, and the files that are not
/// an entry (torn or edited).
pub type Waiting = (Vec<(PathBuf, Entry)>, Vec<PathBuf>);

/// The waiting messages (see [`Waiting`]).
pub fn waiting(session: &Session) -> std::io::Result<Waiting> {
    let mut good = Vec::new();
    let mut bad = Vec::new();
    for p in list(&session.path(INBOX))? {
        // A FIFO or a huge file in the inbox is not an entry (and must not hang the turn).
        let entry = crate::store::fsutil::read_regular(&p, 1 << 20)
            .ok()
            .flatten()
            .and_then(|b| serde_json::from_slice::<Entry>(&b).ok())
            .filter(|e| !e.text.trim().is_empty() && !e.id.is_empty());
        match entry {
            Some(e) => good.push((p, e)),
            None => bad.push(p),
        }
    }
    Ok((good, bad))
}

/// The steer ids the history holds.
fn delivered(history: &[Message]) -> HashSet<&str> {
    history
        .iter()
        .filter_map(|m| match m {
            Message::User {
                steer: Some(id), ..
            } => Some(id.as_str()),
            _ => None,
        })
        .collect()
}

/// Removes the entries `history` already holds (a crash after delivery, before the removal).
/// The caller holds the session. Returns how many.
pub(super) fn sweep(session: &Session, history: &[Message]) -> std::io::Result<usize> {
    let (good, _) = waiting(session)?;
    let done = delivered(history);
    let _lock = session.lock()?;
    let mut n = 0;
    for (p, _) in good.iter().filter(|(_, e)| done.contains(e.id.as_str())) {
        remove(p)?;
        n += 1;
    }
    Ok(n)
}

fn remove(p: &Path) -> std::io::Result<()> {
    fsutil::fault::point("remove", p);
    // Never through a link at the inbox or a folder above it (issue 17).
    match fsutil::remove_file(p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

impl Runtime {
    /// Delivers the waiting steered messages before a model request: appended to the history in
    /// one write (the commit point), then their entries removed, then a `steer` event each. An
    /// entry that is not one (torn, edited) is renamed `*.bad` with a warning, never sent.
    pub(super) fn deliver_steers(&mut self, ui: &mut dyn Surface) -> Result<(), Failure> {
        if !pending(&self.session) {
            return Ok(());
        }
        let (good, bad) = waiting(&self.session)?;
        for p in bad {
            // Moved aside (or, failing that, removed): an entry left in place would be "waiting"
            // for ever and keep the turn asking the model.
            let to = p.with_extension("bad");
            let kept = fsutil::rename(&p, &to).is_ok();
            if !kept {
                remove(&p)?;
            }
            self.emit(
                ui,
                Event::warning(format!(
                    "a steered message in {} could not be read; it was not delivered ({})",
                    p.display(),
                    if kept {
                        format!("kept as {}", to.display())
                    } else {
                        "removed".to_string()
                    }
                )),
            );
        }
        let done = delivered(&self.prefix.history);
        let fresh: Vec<Entry> = good
            .iter()
            .filter(|(_, e)| !done.contains(e.id.as_str()))
            .map(|(_, e)| e.clone())
            .collect();
        if !fresh.is_empty() {
            self.store(
                fresh
                    .iter()
                    .map(|e| Message::User {
                        by: None,
                        content: e.text.clone(),
                        steer: Some(e.id.clone()),
                    })
                    .collect(),
            )?;
        }
        {
            let _lock = self.session.lock()?;
            for (p, _) in &good {
                remove(p)?;
            }
        }
        for e in fresh {
            self.emit(
                ui,
                Event::Steer {
                    id: e.id,
                    text: e.text,
                },
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> (tempfile::TempDir, Session) {
        let d = tempfile::tempdir().unwrap();
        let s = Session::at("s", d.path().to_path_buf());
        (d, s)
    }

    #[test]
    fn entries_keep_their_order_even_after_a_name_from_the_future() {
        let (_d, s) = session();
        std::fs::create_dir(s.path(INBOX)).unwrap();
        // A name no clock reaches (edited by hand): the next ones still sort after it, no panic.
        let far = format!("{}-1", u128::MAX);
        let e = Entry {
            id: far.clone(),
            text: "far".into(),
            at: String::new(),
        };
        std::fs::write(
            s.path(INBOX).join(format!("{far}.json")),
            serde_json::to_vec(&e).unwrap(),
        )
        .unwrap();
        send(&s, "one", true).unwrap();
        let (good, bad) = waiting(&s).unwrap();
        assert!(bad.is_empty());
        assert_eq!(good.len(), 2);
    }

    #[test]
    fn links_in_the_inbox_are_never_followed() {
        let (d, s) = session();
        let elsewhere = d.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, s.path(INBOX)).unwrap();
        assert!(send(&s, "x", true).is_err(), "never written through a link");
        assert!(!pending(&s));
        std::fs::remove_file(s.path(INBOX)).unwrap();
        std::fs::create_dir(s.path(INBOX)).unwrap();
        let secret = d.path().join("secret.json");
        std::fs::write(&secret, r#"{"id":"1-1","text":"secret","at":""}"#).unwrap();
        std::os::unix::fs::symlink(&secret, s.path(INBOX).join("1-1.json")).unwrap();
        assert!(!pending(&s), "a link entry is not an entry");
    }

    #[test]
    fn blank_or_oversized_messages_are_refused_and_a_session_without_a_turn_too() {
        let (_d, s) = session();
        assert!(matches!(send(&s, " \n", true), Err(SteerError::Usage(_))));
        let big = "x".repeat(crate::runtime::MAX_PROMPT_BYTES + 1);
        assert!(matches!(send(&s, &big, true), Err(SteerError::Usage(_))));
        assert!(matches!(
            send(&s, "hi", false),
            Err(SteerError::NotRunning(_))
        ));
        assert!(!pending(&s));
    }
}
