//! One session folder, `.tern/sessions/<id>/` (DESIGN.md §3): paths, `meta.json`, the
//! conversation and event logs.

use crate::cost::miss::{Cause, Previous};
use std::cell::Cell;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::fsutil::{self, JsonlRead};
use super::lock::SessionLock;
use super::redact::redact;
use crate::event::{Ending, Envelope};
use crate::message::Message;
use crate::message::Usage;

/// Lifecycle status of a session's latest turn, as stored in `meta.json`: idle, running, or how
/// it ended in the one vocabulary of [`Ending`]. Written as one snake_case string, the same
/// names `turn_end`, `result` and `agent_end` use: `idle`, `running`, `completed`, `failed`,
/// `interrupted`, `max_turns`, `budget_exhausted`, `provider_unavailable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Status {
    /// Created, no turn run yet.
    #[default]
    Idle,
    /// A turn is in progress in process `meta.pid`.
    Running,
    /// The latest turn ended this way.
    Ended(Ending),
}

impl Status {
    /// The snake_case name used in files and events.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Idle => "idle",
            Status::Running => "running",
            Status::Ended(e) => e.as_str(),
        }
    }

    /// How the latest turn ended; None while idle or running.
    pub fn ending(self) -> Option<Ending> {
        match self {
            Status::Idle | Status::Running => None,
            Status::Ended(e) => Some(e),
        }
    }

    /// The status named `s` (see [`Status::as_str`]); None for any other string.
    pub fn parse(s: &str) -> Option<Status> {
        [Status::Idle, Status::Running]
            .into_iter()
            .find(|st| st.as_str() == s)
            .or_else(|| Ending::parse(s).map(Status::Ended))
    }
}

impl From<Ending> for Status {
    fn from(e: Ending) -> Status {
        Status::Ended(e)
    }
}

impl Serialize for Status {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Status {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Status::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown status {s:?} (expected idle, running or how a run ended)"
            ))
        })
    }
}

/// `meta.json`: who the session is and what its latest turn is doing. Written atomically.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Session id, `YYYYMMDD-HHMMSS-xxxx` (UTC).
    pub id: String,
    /// RFC 3339 UTC creation time.
    pub created_at: String,
    /// RFC 3339 UTC time of the last change.
    #[serde(default)]
    pub updated_at: String,
    /// The workspace root the bash tool runs in.
    pub cwd: String,
    /// `openai`, `anthropic` or `replay`.
    pub provider: String,
    /// Model name sent to the provider.
    pub model: String,
    /// Provider base URL (credentials in it are redacted), so verbs in another pane can call the
    /// same server for a compaction.
    #[serde(default)]
    pub base_url: String,
    /// Status of the latest turn.
    #[serde(default)]
    pub status: Status,
    /// Process id while `status` is running (display only: the session's `lease` decides who
    /// holds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Model requests made in this session.
    #[serde(default)]
    pub turns: u64,
    /// Usage totals over the session.
    #[serde(default)]
    pub usage: Usage,
    /// What the session's priced requests cost, USD (`crate::cost`); its sub-agents' are in
    /// `children_cost_usd`.
    #[serde(default, skip_serializing_if = "is_zero_f")]
    pub cost_usd: f64,
    /// Requests whose model had no known price (their cost is not in `cost_usd`).
    #[serde(default, skip_serializing_if = "is_zero_u")]
    pub unpriced: u64,
    /// What the session's finished sub-agents cost, USD (theirs and their own sub-agents';
    /// not in `cost_usd`): the session's bill is the sum of the two.
    #[serde(default, skip_serializing_if = "is_zero_f")]
    pub children_cost_usd: f64,
    /// The first prompt, cut to 80 characters, for `tern sessions`.
    #[serde(default)]
    pub title: String,
    /// A sub-agent's: its parent's session id and the `agent` call that started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentLink>,
    /// A fork's origin (`tern fork`, `tern rewind`): the session and the turn it was cut after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkLink>,
    /// What commands may write (absent in sessions made before the sandbox).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::policy::Setting>,
    /// The approval policy an editor chose for the session (its ACP mode: ask / auto / plan =
    /// never), restored when the session is loaded or resumed over ACP. Absent: never chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<crate::policy::Approval>,
    /// The git worktree the session works in (`--worktree NAME`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<WorktreeLink>,
}

/// `meta.json`'s `worktree`: the worktree a session was started in (`--worktree NAME`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorktreeLink {
    /// Its name.
    pub name: String,
    /// Its branch, `tern/NAME`.
    pub branch: String,
}

/// How a session's latest turn stands in `events.jsonl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastTurn {
    /// No `turn_start` on record.
    None,
    /// A `turn_start` with no `turn_end` after it.
    Open,
    /// The latest `turn_end`, after the latest `turn_start`.
    Ended(Ending),
}

/// What `events.jsonl` (the append-only record, written after `meta.json` at a turn's end)
/// says of a session: whether it ever started (`session_start`), its model requests and their
/// usage (the `usage` events: the figures `tern status` and `tern stats` read), and its latest
/// turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// A `session_start` is on record: the session's first start got past its creation.
    pub started: bool,
    /// `conversation.jsonl` holds something (a fork or a relay seed has history before its
    /// first start).
    pub history: bool,
    /// `usage` events.
    pub requests: u64,
    /// Their usage summed.
    pub usage: Usage,
    /// Their `cost_usd` summed.
    pub cost_usd: f64,
    /// `usage` events without a cost (no price known).
    pub unpriced: u64,
    /// The `cost_usd` of its `agent_end` events summed.
    pub children_cost_usd: f64,
    /// The latest turn.
    pub last_turn: LastTurn,
    /// A person's prompt is the history's last message though the latest turn on record
    /// ended: a turn stored its prompt and died before its `turn_start` (checked only then).
    pub prompt_unanswered: bool,
}

impl Meta {
    /// Brings `meta.json` in line with `rec`, for a session no live process holds (the caller
    /// checked the lease): a `running` status becomes how `events.jsonl` says the turn ended
    /// (`interrupted` when it says nothing: the process died mid-turn); an `idle` one whose
    /// turn ended on record takes that ending, and one that never reached `session_start` (a
    /// process killed while creating it) becomes `interrupted`; totals below the record (a
    /// failed `meta.json` write, e.g. a full disk) take the record's. An ended status is kept.
    /// Returns whether anything changed.
    pub fn settle(&mut self, rec: &Recorded) -> bool {
        let before = (self.status, self.turns, self.usage, self.cost_usd);
        self.take_totals(rec);
        let ended = match rec.last_turn {
            LastTurn::Ended(e) => Some(e),
            _ => None,
        };
        self.status = match self.status {
            // A new turn's prompt stored after the last turn_end: that turn died unrecorded.
            Status::Running if rec.prompt_unanswered => Status::Ended(Ending::Interrupted),
            Status::Running => Status::Ended(ended.unwrap_or(Ending::Interrupted)),
            Status::Idle => match rec.last_turn {
                LastTurn::Ended(e) => Status::Ended(e),
                LastTurn::Open => Status::Ended(Ending::Interrupted),
                // Created for a prompt and killed before its first start: no session_start,
                // no history, not a fork (forks and relay seeds wait idle for their start).
                LastTurn::None if !rec.started && !rec.history && self.forked_from.is_none() => {
                    Status::Ended(Ending::Interrupted)
                }
                LastTurn::None => Status::Idle,
            },
            ended => ended,
        };
        if self.status != Status::Running {
            self.pid = None;
        }
        before != (self.status, self.turns, self.usage, self.cost_usd)
    }

    /// Takes the record's request totals when it counts more requests than `meta.json` (which
    /// a running turn writes only when it ends, and a crash or a failed write leaves behind):
    /// every surface shows one total.
    pub fn take_totals(&mut self, rec: &Recorded) {
        if rec.requests > self.turns {
            self.turns = rec.requests;
            self.usage = rec.usage;
            self.cost_usd = rec.cost_usd;
            self.unpriced = rec.unpriced;
            self.children_cost_usd = self.children_cost_usd.max(rec.children_cost_usd);
        }
    }
}

fn is_zero_f(v: &f64) -> bool {
    *v == 0.0
}

fn is_zero_u(v: &u64) -> bool {
    *v == 0
}

/// Where a sub-agent came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ParentLink {
    /// The parent's session id.
    pub session: String,
    /// The parent's `agent` tool call id.
    pub call_id: String,
    /// The Fleet member, if one was named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// A fork of the parent's history.
    #[serde(default)]
    pub fork: bool,
}

/// Where a fork came from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkLink {
    /// The original session's id.
    pub session: String,
    /// The last turn of the original the fork's history holds (0: none).
    pub turn: u32,
}

/// What [`Session::repair_events`] dropped from `events.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsRepair {
    /// The copy of the file as it was, `archive/events-NNNN.jsonl`.
    pub archive: String,
    /// The last line had no final newline and did not parse: a torn write (a crash mid-append).
    pub torn_tail: bool,
    /// Complete lines (ending in a newline) that are not JSON events: edited or damaged.
    pub damaged: usize,
}

impl EventsRepair {
    /// The warning a resumed session shows: what was dropped, why, and where the old file is.
    pub fn note(&self) -> String {
        let damaged = match self.damaged {
            0 => None,
            1 => Some("a line that is not a JSON event (edited or damaged)".to_string()),
            n => Some(format!(
                "{n} lines that are not JSON events (edited or damaged)"
            )),
        };
        let what = match (self.torn_tail, damaged) {
            (true, None) => "ended in a torn line (a crash mid-write)".to_string(),
            (true, Some(d)) => format!("ended in a torn line (a crash mid-write) and had {d}"),
            (false, Some(d)) => format!("had {d}"),
            // Not built: a repair drops at least one line.
            (false, None) => "had nothing to drop".to_string(),
        };
        format!(
            "events.jsonl {what}: repaired; the file as it was is {}",
            self.archive
        )
    }
}

/// A handle on one session folder. Cheap; holds no open files.
#[derive(Debug)]
pub struct Session {
    /// The session id (folder name).
    pub id: String,
    /// Absolute path of the session folder.
    pub dir: PathBuf,
    /// (events.jsonl length after our last append, seq of that event): lets the next append skip
    /// re-reading the file when no other process wrote in between.
    event_seq: Cell<(u64, u64)>,
}

/// Files of a session folder, by name (DESIGN.md §3).
pub mod files {
    /// Session metadata.
    pub const META: &str = "meta.json";
    /// The pinned system prompt.
    pub const SYSTEM: &str = "system.txt";
    /// The history, one message a line.
    pub const CONVERSATION: &str = "conversation.jsonl";
    /// Every event, one a line.
    pub const EVENTS: &str = "events.jsonl";
    /// PLAN_DRAFT_FILE.
    pub const DRAFT: &str = "plan.draft.md";
    /// PLAN_FILE, the locked plan.
    pub const PLAN: &str = "plan.md";
    /// Plan lifecycle state.
    pub const PLAN_STATE: &str = "plan.json";
    /// The To-do ledger.
    pub const LEDGER: &str = "ledger.json";
    /// The strategy kept by `update_plan`.
    pub const STRATEGY: &str = "strategy.json";
    /// The latest compaction summary.
    pub const SUMMARY: &str = "summary.md";
    /// The relay handoff.
    pub const HANDOFF: &str = "handoff.md";
    /// Archived conversations and plans.
    pub const ARCHIVE: &str = "archive";
    /// Full outputs of truncated tool results.
    pub const SPILL: &str = "spill";
    /// The fs2 lock file.
    pub const LOCK: &str = "lock";
    /// Sub-agents' session folders.
    pub const AGENTS: &str = "agents";
    /// The `--goal` gate's state (`crate::hooks::goal`).
    pub const GOAL: &str = "goal.json";
}

impl Session {
    /// A handle on an existing or new session folder (nothing is read or created here).
    pub fn at(id: &str, dir: PathBuf) -> Session {
        Session {
            id: id.to_string(),
            dir,
            event_seq: Cell::new((u64::MAX, 0)),
        }
    }

    /// Path of a file in the session folder (see [`files`]).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The state folder this session lives in: the parent of the topmost `sessions` folder
    /// above it (`<root>/sessions/<id>`; a sub-agent's folder lies deeper, under its parent's
    /// `agents/`). The one way a session finds its state folder. None for a folder that is not
    /// under a `sessions` folder.
    pub fn state_root(&self) -> Option<PathBuf> {
        self.dir
            .ancestors()
            .skip(1)
            .filter(|a| a.file_name().is_some_and(|n| n == "sessions"))
            .last()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
    }

    /// Whether this is a top-level session (`<root>/sessions/<id>`), not a sub-agent's.
    pub fn is_top_level(&self) -> bool {
        self.dir
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|n| n == "sessions")
    }

    /// Takes the session lock (blocking).
    pub fn lock(&self) -> io::Result<SessionLock> {
        SessionLock::acquire(&self.path(files::LOCK))
    }

    /// Removes the tempfiles a crash left in the session folder and its `archive/`, under the
    /// session lock every atomic write there is made under. Returns how many.
    ///
    /// Its sub-agents' folders too, at any depth, each under its own lock, and the half-built
    /// ones (`agents/.tmp-*`) a killed creation left: call it only while no turn of this session
    /// runs (no child is being created then).
    pub fn remove_stray_temps(&self) -> io::Result<usize> {
        let mut n = {
            let _lock = self.lock()?;
            fsutil::remove_stray_temps(&self.dir)?
                + fsutil::remove_stray_temps(&self.path(files::ARCHIVE))?
                + fsutil::remove_stray_folders(&self.path(files::AGENTS))?
        };
        for (id, dir) in child_dirs(&self.path(files::AGENTS)) {
            n += Session::at(&id, dir).remove_stray_temps()?;
        }
        Ok(n)
    }

    /// Repairs `events.jsonl` after a crash or a full disk: lines that do not parse (a torn last
    /// line, half a line a short write left) are dropped. The file as it was goes to
    /// `archive/events-NNNN.jsonl` (a copy of its own), then the repaired copy is renamed in.
    /// Returns what was repaired, when something was.
    pub fn repair_events(&self) -> io::Result<Option<EventsRepair>> {
        let lock = self.lock()?;
        let path = self.path(files::EVENTS);
        let Some((bytes, _)) = fsutil::read_prefix(&path, usize::MAX)? else {
            return Ok(None);
        };
        let whole = |l: &[u8]| serde_json::from_slice::<Value>(l).is_ok_and(|v| v.is_object());
        let is_bad = |l: &[u8]| !l.iter().all(u8::is_ascii_whitespace) && !whole(l);
        let bad = bytes.split(|b| *b == b'\n').filter(|l| is_bad(l)).count();
        if bad == 0 {
            return Ok(None);
        }
        // Only a last line without a final newline is a torn write; `split` gives an empty
        // last piece when the file ends in one.
        let torn_tail = bytes.last() != Some(&b'\n')
            && bytes.split(|b| *b == b'\n').next_back().is_some_and(is_bad);
        let mut kept = Vec::with_capacity(bytes.len());
        for l in bytes.split(|b| *b == b'\n') {
            if whole(l) {
                kept.extend_from_slice(l);
                kept.push(b'\n');
            }
        }
        let archive = self.next_archive_path("events", "jsonl")?;
        fsutil::copy_atomic(&path, &archive)?;
        fsutil::atomic_write(&path, &kept)?;
        drop(lock);
        self.event_seq.set((u64::MAX, 0));
        let name = archive
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(Some(EventsRepair {
            archive: format!("{}/{name}", files::ARCHIVE),
            torn_tail,
            damaged: bad - usize::from(torn_tail),
        }))
    }

    /// Points `.tern/current` (two folders up) at this session, atomically.
    pub fn mark_current(&self) -> io::Result<()> {
        let root = self
            .state_root()
            .filter(|_| self.is_top_level())
            .ok_or_else(|| io::Error::other("the session folder has no state folder above it"))?;
        let current = root.join("current");
        if fsutil::read_text(&current)?.as_deref().map(str::trim) == Some(self.id.as_str()) {
            return Ok(());
        }
        let _lock = super::root_lock(&root)?;
        fsutil::atomic_write(&current, format!("{}\n", self.id).as_bytes())
    }

    /// Reads `meta.json`.
    pub fn read_meta(&self) -> io::Result<Meta> {
        fsutil::read_json(&self.path(files::META))?.ok_or_else(|| {
            io::Error::other(format!("{} is missing", self.path(files::META).display()))
        })
    }

    /// Writes `meta.json` atomically; the caller holds the lock.
    pub fn write_meta_locked(&self, _lock: &SessionLock, meta: &Meta) -> io::Result<()> {
        self.write_json_locked(_lock, files::META, meta)
    }

    /// Read-modify-write of `meta.json` under the lock; sets `updated_at`. Returns the new meta.
    pub fn update_meta(&self, f: impl FnOnce(&mut Meta)) -> io::Result<Meta> {
        let lock = self.lock()?;
        let mut meta = self.read_meta()?;
        f(&mut meta);
        meta.updated_at = crate::clock::now_rfc3339();
        self.write_meta_locked(&lock, &meta)?;
        Ok(meta)
    }

    /// Serializes `value` (pretty, newline-terminated) and writes `name` atomically; the caller
    /// holds the lock. Secrets are redacted.
    pub fn write_json_locked<T: Serialize>(
        &self,
        _lock: &SessionLock,
        name: &str,
        value: &T,
    ) -> io::Result<()> {
        let mut text = serde_json::to_string_pretty(value).map_err(io::Error::other)?;
        text.push('\n');
        fsutil::atomic_write(&self.path(name), redact(&text).as_bytes())
    }

    /// Writes a text file atomically; the caller holds the lock.
    pub fn write_text_locked(&self, _lock: &SessionLock, name: &str, text: &str) -> io::Result<()> {
        fsutil::atomic_write(&self.path(name), redact(text).as_bytes())
    }

    /// Reads a JSON state file of the session (None when absent).
    pub fn read_json<T: serde::de::DeserializeOwned>(&self, name: &str) -> io::Result<Option<T>> {
        fsutil::read_json(&self.path(name))
    }

    /// Reads a text file of the session (None when absent).
    pub fn read_text(&self, name: &str) -> io::Result<Option<String>> {
        fsutil::read_text(&self.path(name))
    }

    /// Appends messages to `conversation.jsonl` in one write under the lock, so a group (an
    /// assistant message's error results after an interrupt, case C17) lands whole or not at all.
    pub fn append_messages(&self, msgs: &[Message]) -> io::Result<()> {
        let lock = self.lock()?;
        self.append_messages_locked(&lock, msgs)
    }

    /// [`Session::append_messages`] for a caller that holds the lock.
    pub fn append_messages_locked(&self, _lock: &SessionLock, msgs: &[Message]) -> io::Result<()> {
        if msgs.is_empty() {
            return Ok(());
        }
        let mut text = String::new();
        for (i, m) in msgs.iter().enumerate() {
            if i > 0 {
                text.push('\n');
            }
            text.push_str(&fsutil::to_jsonl(m)?);
        }
        fsutil::append_line(&self.path(files::CONVERSATION), &redact(&text))
    }

    /// Replaces `conversation.jsonl` with `msgs`, the caller holding the lock: the file as it was
    /// goes to the next free `archive/conversation-NNNN.jsonl` first (a copy of its own),
    /// then the new file is renamed in atomically, so a crash leaves one or the other, and the
    /// old history is never lost. Returns the archive's name, `archive/conversation-NNNN.jsonl`.
    pub fn rewrite_conversation_locked(
        &self,
        lock: &SessionLock,
        msgs: &[Message],
    ) -> io::Result<String> {
        let mut text = String::new();
        for m in msgs {
            text.push_str(&fsutil::to_jsonl(m)?);
            text.push('\n');
        }
        let archive = self.next_archive_path("conversation", "jsonl")?;
        let conv = self.path(files::CONVERSATION);
        // A copy of its own (not a hard link): were the rewrite below cut short, later appends
        // to the live file must not change the archive.
        fsutil::copy_atomic(&conv, &archive)?;
        self.write_text_locked(lock, files::CONVERSATION, &text)?;
        let name = archive
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(format!("{}/{name}", files::ARCHIVE))
    }

    /// Writes `msgs` as the whole `conversation.jsonl` (atomically, no archive), the caller holding
    /// the lock: the sandbox guard puts back a history a command changed, from memory.
    pub fn replace_conversation_locked(
        &self,
        lock: &SessionLock,
        msgs: &[Message],
    ) -> io::Result<()> {
        let mut text = String::new();
        for m in msgs {
            text.push_str(&fsutil::to_jsonl(m)?);
            text.push('\n');
        }
        self.write_text_locked(lock, files::CONVERSATION, &text)
    }

    /// Reads the history; lines that do not parse (a torn last line) are skipped and reported.
    pub fn read_conversation(&self) -> io::Result<JsonlRead<Message>> {
        fsutil::read_jsonl(&self.path(files::CONVERSATION))
    }

    /// Appends an event to `events.jsonl` under the lock, giving it the next `seq` (set on
    /// `env`). When redaction changed the line, `env` becomes what was written.
    pub fn append_event(&self, env: &mut Envelope) -> io::Result<()> {
        let lock = self.lock()?;
        let path = self.path(files::EVENTS);
        let mut file = fsutil::open_append(&path)?;
        let len = file.metadata()?.len();
        let (known_len, known_seq) = self.event_seq.get();
        // Another process appended (the file grew), or a command removed the log: never a seq
        // this process already gave out.
        let last = if len == known_len {
            known_seq
        } else {
            last_seq(&path)?.max(known_seq)
        };
        env.seq = last + 1;
        let line = fsutil::to_jsonl(&env.to_value())?;
        let line = redact(&line);
        let new_len =
            fsutil::append_to(&mut file, len, &line).map_err(|e| fsutil::with_path(e, &path))?;
        self.event_seq.set((new_len, env.seq));
        drop(lock);
        if let std::borrow::Cow::Owned(s) = line
            && let Ok(written) = serde_json::from_str::<Value>(&s)
            && let Ok(e) = Envelope::from_value(written)
        {
            *env = e;
        }
        Ok(())
    }

    /// Reads every event line as JSON (torn lines skipped).
    pub fn read_events(&self) -> io::Result<JsonlRead<Value>> {
        fsutil::read_jsonl(&self.path(files::EVENTS))
    }

    /// What `events.jsonl` records (see [`Recorded`]); a missing file records nothing.
    pub fn recorded(&self) -> io::Result<Recorded> {
        let mut rec = Recorded {
            started: false,
            history: std::fs::symlink_metadata(self.path(files::CONVERSATION))
                .is_ok_and(|m| m.len() > 0),
            requests: 0,
            usage: Usage::default(),
            cost_usd: 0.0,
            unpriced: 0,
            children_cost_usd: 0.0,
            last_turn: LastTurn::None,
            prompt_unanswered: false,
        };
        for e in self.read_envelopes()? {
            match e.event {
                crate::event::Event::SessionStart { .. } => rec.started = true,
                crate::event::Event::AgentEnd {
                    cost_usd: Some(c), ..
                } => rec.children_cost_usd = crate::cost::add_usd(rec.children_cost_usd, c),
                crate::event::Event::TurnStart { .. } => rec.last_turn = LastTurn::Open,
                crate::event::Event::TurnEnd { status, .. } => {
                    rec.last_turn = LastTurn::Ended(status)
                }
                crate::event::Event::Usage {
                    input_tokens,
                    cached_tokens,
                    cache_write_tokens,
                    output_tokens,
                    cost_usd,
                    ..
                } => {
                    rec.requests = rec.requests.saturating_add(1);
                    match cost_usd {
                        Some(c) => rec.cost_usd = crate::cost::add_usd(rec.cost_usd, c),
                        None => rec.unpriced += 1,
                    }
                    rec.usage.add(&Usage {
                        reasoning_tokens: 0,
                        input_tokens,
                        cached_tokens,
                        cache_write_tokens,
                        output_tokens,
                    });
                }
                _ => {}
            }
        }
        if matches!(rec.last_turn, LastTurn::Ended(_)) {
            rec.prompt_unanswered = matches!(
                fsutil::last_line(&self.path(files::CONVERSATION))
                    .ok()
                    .flatten()
                    .and_then(|l| serde_json::from_slice::<Message>(&l).ok()),
                Some(Message::User { .. })
            );
        }
        Ok(rec)
    }

    /// The session's last model request on record and the change tern made to the prefix
    /// since, from the events in the last 256 KiB of `events.jsonl` (a resume reads no more):
    /// see [`recall`]. None when there is none there.
    pub fn last_request(
        &self,
    ) -> Option<(
        crate::cost::miss::Previous,
        Option<crate::cost::miss::Cause>,
    )> {
        let (bytes, _) = fsutil::read_suffix(&self.path(files::EVENTS), 256 << 10)
            .ok()
            .flatten()?;
        let events: Vec<Envelope> = bytes
            .split(|&b| b == b'\n')
            .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
            .filter_map(|v| Envelope::from_value(v).ok())
            .collect();
        recall(&events)
    }

    /// Reads every event as a typed [`Envelope`]; lines that are torn or of a kind this build
    /// does not know are skipped.
    pub fn read_envelopes(&self) -> io::Result<Vec<Envelope>> {
        Ok(self
            .read_events()?
            .items
            .into_iter()
            .filter_map(|v| Envelope::from_value(v).ok())
            .collect())
    }

    /// The next free number for `archive/<prefix>-NNNN.<ext>` (1-based).
    pub fn next_archive_number(&self, prefix: &str) -> io::Result<u32> {
        let dir = self.path(files::ARCHIVE);
        fsutil::ensure_dir(&dir)?;
        let mut max = 0u32;
        for entry in std::fs::read_dir(&dir)? {
            let name = entry?.file_name();
            let name = name.to_string_lossy();
            if let Some(rest) = name.strip_prefix(prefix).and_then(|r| r.strip_prefix('-'))
                && let Some(num) = rest.split('.').next()
                && let Ok(n) = num.parse::<u32>()
            {
                max = max.max(n);
            }
        }
        Ok(max + 1)
    }

    /// Writes `text` (redacted, atomically) to the next free `archive/<prefix>-NNNN.<ext>`; the
    /// caller holds the lock. Returns the path.
    pub fn write_archive_locked(
        &self,
        _lock: &SessionLock,
        prefix: &str,
        ext: &str,
        text: &str,
    ) -> io::Result<PathBuf> {
        let path = self.next_archive_path(prefix, ext)?;
        fsutil::atomic_write(&path, redact(text).as_bytes())?;
        Ok(path)
    }

    /// Path of `archive/<prefix>-NNNN.<ext>` for the next free number.
    pub fn next_archive_path(&self, prefix: &str, ext: &str) -> io::Result<PathBuf> {
        let n = self.next_archive_number(prefix)?;
        Ok(self
            .path(files::ARCHIVE)
            .join(format!("{prefix}-{n:04}.{ext}")))
    }
}

/// The `seq` of the last whole event line of `path` (0 when none). Reads only the file's tail.
/// The sub-agents' session folders in `agents` (a session's `agents/`), sorted by id: folders
/// only, never a half-built `.tmp-*` one (nor any dot-name).
pub fn child_dirs(agents: &Path) -> Vec<(String, PathBuf)> {
    let Ok(rd) = std::fs::read_dir(agents) else {
        return Vec::new();
    };
    let mut out: Vec<(String, PathBuf)> = rd
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .filter(|(n, _)| !n.starts_with('.'))
        .collect();
    out.sort();
    out
}

fn last_seq(path: &Path) -> io::Result<u64> {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(fsutil::with_path(e, path)),
    };
    fsutil::plain(&f, path)?;
    let len = f.metadata()?.len();
    // Events are small; 64 KiB holds the last few whole lines. If not, fall back to reading all.
    let start = len.saturating_sub(64 * 1024);
    f.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    let mut best = None;
    for line in buf.split(|b| *b == b'\n').rev() {
        if let Ok(v) = serde_json::from_slice::<Value>(line)
            && let Some(s) = v.get("seq").and_then(Value::as_u64)
        {
            best = Some(s);
            break;
        }
    }
    match best {
        Some(s) => Ok(s),
        None if start > 0 => {
            let all: JsonlRead<Value> = fsutil::read_jsonl(path)?;
            Ok(all
                .items
                .iter()
                .filter_map(|v| v.get("seq").and_then(Value::as_u64))
                .max()
                .unwrap_or(0))
        }
        None => Ok(0),
    }
}

/// The request before a process's first one, from the session's records (`events.jsonl`, in
/// order): the last `usage` event's model, time and body size, and the first change tern made to
/// the prefix after it — a compaction that archived messages (a plan confirm's is
/// [`Cause::PlanConfirm`]), a model, sandbox or MCP switch — which that first request's miss
/// then names. A `usage` event with no time tern can read is skipped. None: no request on record.
pub fn recall(events: &[Envelope]) -> Option<(Previous, Option<Cause>)> {
    use crate::event::{BoundaryKind, CompactTrigger, Event};
    let last = events.iter().rposition(|e| {
        matches!(e.event, Event::Usage { .. }) && crate::clock::parse_rfc3339_ms(&e.ts).is_some()
    })?;
    let Event::Usage {
        model,
        request_bytes,
        ..
    } = &events[last].event
    else {
        return None;
    };
    let prev = Previous {
        model: model.clone(),
        at_ms: crate::clock::parse_rfc3339_ms(&events[last].ts)?,
        request_bytes: *request_bytes,
    };
    let changed = events[last + 1..].iter().find_map(|e| match &e.event {
        Event::Compaction {
            trigger,
            archived_messages,
            ..
        } if *archived_messages > 0 => Some(match trigger {
            CompactTrigger::PlanConfirm => Cause::PlanConfirm,
            _ => Cause::Compaction,
        }),
        Event::Boundary { kind, .. } => match kind {
            BoundaryKind::ModelSwitch => Some(Cause::ModelSwitch),
            BoundaryKind::SandboxSwitch | BoundaryKind::McpServers => Some(Cause::SystemPrompt),
            BoundaryKind::ToolsOff => None,
        },
        _ => None,
    });
    Some((prev, changed))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_previous_request_and_the_change_since_are_recalled_from_the_records() {
        use crate::cost::miss::Cause;
        use crate::event::Envelope;
        let ev = |v: serde_json::Value| Envelope::from_value(v).expect("an event");
        let usage = |ts: &str, model: &str, bytes: u64| {
            ev(
                serde_json::json!({"type": "usage", "seq": 1, "ts": ts, "session": "s",
                "purpose": "turn", "model": model, "input_tokens": 10, "cached_tokens": 0,
                "cache_write_tokens": 0, "output_tokens": 1, "cache_hit_ratio": 0.0,
                "request_bytes": bytes, "prefix_reuse_bytes": 0}),
            )
        };
        let compaction = |trigger: &str, archived: u64| {
            ev(
                serde_json::json!({"type": "compaction", "seq": 2, "ts": "2026-12-06T10:00:02.000Z",
                "session": "s", "trigger": trigger, "archived_messages": archived,
                "kept_messages": 1}),
            )
        };
        assert_eq!(recall(&[]), None);
        let a = usage("2026-12-06T10:00:00.000Z", "m", 4000);
        let b = usage("2026-12-06T10:00:01.500Z", "m2", 5000);
        let (prev, changed) = recall(&[a.clone(), b.clone()]).unwrap();
        assert_eq!((prev.model.as_str(), prev.request_bytes), ("m2", 5000));
        assert_eq!(prev.at_ms % 100_000, 1_500);
        assert_eq!(changed, None);
        let (_, changed) = recall(&[a.clone(), compaction("manual", 4)]).unwrap();
        assert_eq!(changed, Some(Cause::Compaction));
        let (_, changed) = recall(&[a.clone(), compaction("plan_confirm", 4)]).unwrap();
        assert_eq!(changed, Some(Cause::PlanConfirm));
        // A compaction that archived nothing changed nothing; one before the request is old.
        assert_eq!(
            recall(&[a.clone(), compaction("manual", 0)]).unwrap().1,
            None
        );
        assert_eq!(recall(&[compaction("manual", 4), a]).unwrap().1, None);
    }

    use super::*;

    /// `meta.json`'s status is one string, the same names as before `Status` wrapped
    /// [`Ending`]: idle, running, and every ending's own name; anything else does not read.
    #[test]
    fn status_reads_and_writes_the_same_strings() {
        let mut all = vec![Status::Idle, Status::Running];
        all.extend(Ending::ALL.map(Status::Ended));
        let names: Vec<String> = all
            .iter()
            .map(|s| {
                serde_json::to_value(s)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(
            names,
            [
                "idle",
                "running",
                "completed",
                "failed",
                "interrupted",
                "max_turns",
                "budget_exhausted",
                "provider_unavailable"
            ]
        );
        for (s, n) in all.iter().zip(&names) {
            assert_eq!(
                serde_json::from_value::<Status>(Value::from(n.as_str())).unwrap(),
                *s
            );
            assert_eq!(s.as_str(), n);
        }
        assert!(serde_json::from_value::<Status>(Value::from("done")).is_err());
        assert!(serde_json::from_value::<Status>(Value::from(3)).is_err());
    }
}
