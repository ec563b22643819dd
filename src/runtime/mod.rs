//! The runtime: one session, one provider, the tools, and the turn loop (`turn.rs`). Every surface
//! (`tern exec`, the REPL, the CLI verbs, the demo) drives this same type; none has a loop of its
//! own.

mod answer;
pub mod compact;
mod dispatch;
pub mod plan;
pub mod repair;
mod request;
pub mod system;
pub mod textcall;
mod turn;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde_json::{Map, Value, json};

use crate::message::Message;
use crate::provider::retry::RetryPolicy;
use crate::provider::{Provider, Usage};
use crate::store::{Meta, Session, StateDir, Status, files};
use crate::tools::ToolSpec;

pub use turn::TurnOutcome;

/// When the bash tool may run (`--approval`, `TERN_APPROVAL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Approval {
    /// Ask the person before each command (the REPL's default).
    Ask,
    /// Run every command (the default of `exec`).
    Auto,
    /// Refuse every command with an error tool result: the model can only plan.
    Never,
}

/// A person's answer to an approval question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Run this command.
    Yes,
    /// Do not run it; the model gets an error tool result.
    No,
    /// Run it and every later command of this session.
    Always,
    /// There was no one to ask (no terminal): not run, and the model is told so.
    Unavailable,
}

/// What a surface (exec output, REPL, demo) receives from the runtime. Events arrive after they
/// were written to `events.jsonl`, so what the person sees is what the file says.
pub trait Surface {
    /// One event (a JSON object with `type`, `seq`, `ts`, `session`, …).
    fn event(&mut self, ev: &Value);
    /// Assistant text as it streams; display only (the `assistant` event carries the whole text).
    fn text_delta(&mut self, _text: &str) {}
    /// Asked before a bash command runs under [`Approval::Ask`].
    fn approve(&mut self, _command: &str) -> Answer {
        Answer::Yes
    }
    /// A wait begins (`waiting for the model…`, `running…`); the next event or text ends it.
    /// Display only.
    fn progress(&mut self, _note: &str) {}
}

/// A surface that shows nothing (verbs that print their own receipt).
pub struct Quiet;

impl Surface for Quiet {
    fn event(&mut self, _ev: &Value) {}
}

/// Runtime settings, from flags and environment.
#[derive(Debug, Clone)]
pub struct Config {
    /// Model name sent to the provider.
    pub model: String,
    /// Model requests allowed in one turn before it stops with exit code 3 (`--max-turns`).
    pub max_turns: u32,
    /// The model's context window in tokens (`--context-window`).
    pub context_window: u64,
    /// Fraction of the context window at which a request triggers an automatic compaction.
    pub compact_threshold: f64,
    /// Retry policy for provider errors.
    pub retry: RetryPolicy,
    /// When bash may run.
    pub approval: Approval,
    /// `max_tokens` for providers that require it (Anthropic).
    pub max_output_tokens: u32,
    /// Send `prompt_cache_key` = session id (only where the server is OpenAI's).
    pub send_cache_key: bool,
    /// Environment variables removed from the bash tool's environment (the API keys).
    pub secret_env: Vec<String>,
    /// The provider's base URL, recorded in `meta.json` for verbs run from another pane.
    pub base_url: String,
}

impl Config {
    /// Defaults for `model`: 50 turns, a 128k window compacted at 80 %, default retries, auto
    /// approval, 8192 output tokens.
    pub fn new(model: &str) -> Config {
        Config {
            model: model.to_string(),
            max_turns: 50,
            context_window: 128_000,
            compact_threshold: 0.8,
            retry: RetryPolicy::default(),
            approval: Approval::Auto,
            max_output_tokens: 8192,
            send_cache_key: false,
            secret_env: Vec::new(),
            base_url: String::new(),
        }
    }
}

/// Running totals of this process's requests, for `usage` and `result` events.
#[derive(Debug, Clone, Default)]
pub struct Totals {
    /// Usage summed over requests.
    pub usage: Usage,
    /// Model requests sent (compactions included).
    pub requests: u64,
    /// Sum of the common byte prefix of each request body with the previous one.
    pub prefix_reuse_bytes: u64,
    /// Sum of request body sizes in bytes.
    pub request_bytes: u64,
}

impl Totals {
    /// Cached over input tokens (0 when nothing was sent).
    pub fn cache_hit_ratio(&self) -> f64 {
        ratio(self.usage.cached_tokens, self.usage.input_tokens)
    }
    /// Reused over sent request bytes.
    pub fn prefix_reuse_ratio(&self) -> f64 {
        ratio(self.prefix_reuse_bytes, self.request_bytes)
    }
}

/// `a / b` rounded to 4 decimals, 0 when `b` is 0, at most 1 (a server that reports more cached
/// than prompt tokens is not believed past 100 %).
pub fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        return 0.0;
    }
    ((a as f64 / b as f64).min(1.0) * 10_000.0).round() / 10_000.0
}

/// An error that ends a turn or an operation, with the exit code it maps to (DESIGN.md §8).
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// Ctrl-C or SIGTERM (exit 130).
    Interrupted,
    /// `--max-turns` reached (exit 3).
    MaxTurns(u32),
    /// The provider stayed unavailable after retries (exit 75).
    ProviderUnavailable(String),
    /// Anything else (exit 1).
    Failed(String),
}

impl Failure {
    /// The status name used in `result` and `error` events: `interrupted`, `max_turns`,
    /// `provider_unavailable`, `failed`.
    pub fn kind(&self) -> &'static str {
        match self {
            Failure::Interrupted => "interrupted",
            Failure::MaxTurns(_) => "max_turns",
            Failure::ProviderUnavailable(_) => "provider_unavailable",
            Failure::Failed(_) => "failed",
        }
    }

    /// The process exit code for this failure.
    pub fn exit_code(&self) -> i32 {
        match self {
            Failure::Interrupted => 130,
            Failure::MaxTurns(_) => 3,
            Failure::ProviderUnavailable(_) => 75,
            Failure::Failed(_) => 1,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Interrupted => f.write_str("interrupted"),
            Failure::MaxTurns(n) => write!(f, "stopped after --max-turns {n} model requests"),
            Failure::ProviderUnavailable(m) => write!(f, "provider unavailable: {m}"),
            Failure::Failed(m) => f.write_str(m),
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Failed(crate::store::redact::redact(&e.to_string()).into_owned())
    }
}

/// The one runtime of a session.
pub struct Runtime {
    /// The session folder.
    pub session: Session,
    /// Where bash runs and `AGENTS.md` is read.
    pub workspace: PathBuf,
    /// Settings.
    pub cfg: Config,
    /// Set by Ctrl-C / SIGTERM handlers; checked by streaming, bash and the loop.
    pub cancel: Arc<AtomicBool>,
    /// Totals of this process's requests.
    pub totals: Totals,
    provider: Box<dyn Provider>,
    history: Vec<Message>,
    system: String,
    tools: Vec<ToolSpec>,
    last_body: Vec<u8>,
    approved_always: bool,
    warned_plan_md: bool,
    /// False for the one request that asks for a final text answer after a loop.
    tools_allowed: bool,
    /// Stamps of the plan files when last observed: unchanged files are not read again.
    plan_stamps: Vec<Option<FileStamp>>,
    /// The ledger's stamp and the work-state block rendered from it.
    tail_cache: Option<(Option<FileStamp>, Option<String>)>,
    /// Stamps of `system.txt` and `conversation.jsonl` after our last read or write: anything
    /// else means another process (a verb in another pane) rewrote them.
    disk_seen: Option<(Option<FileStamp>, Option<FileStamp>)>,
    started: Instant,
}

/// The tools in their fixed order: `bash`, the plan tools, `work_update`, `update_plan`.
pub fn tool_specs() -> Vec<ToolSpec> {
    let mut tools = vec![crate::tools::bash::spec()];
    tools.extend(crate::tools::plan::specs());
    tools.push(crate::tools::work::work_update_spec());
    tools.push(crate::tools::work::update_plan_spec());
    tools
}

impl Runtime {
    /// Starts a new session in `state`: pins `system.txt` (system prompt + the project's
    /// `AGENTS.md`), writes `meta.json`, points `.tern/current` at it, emits `session_start`.
    pub fn create(
        state: &StateDir,
        provider: Box<dyn Provider>,
        cfg: Config,
        title: &str,
        ui: &mut dyn Surface,
    ) -> Result<Runtime, Failure> {
        let meta = Meta {
            cwd: state.workspace.display().to_string(),
            provider: provider.name().to_string(),
            model: cfg.model.clone(),
            base_url: crate::config::display_url(&cfg.base_url),
            title: title.chars().take(80).collect(),
            ..Meta::default()
        };
        let session = state.create_session(meta)?;
        let system = system::base(&state.workspace);
        {
            let lock = session.lock()?;
            session.write_text_locked(&lock, files::SYSTEM, &system)?;
            session.write_text_locked(&lock, files::DRAFT, "")?;
        }
        let mut rt = Runtime::new(session, state.workspace.clone(), provider, cfg, system);
        rt.note_disk();
        let model = rt.cfg.model.clone();
        let provider = rt.provider.name();
        rt.emit(
            ui,
            "session_start",
            json!({"provider": provider, "model": model, "resumed": false}),
        );
        Ok(rt)
    }

    /// Reopens `session`: reuses the pinned `system.txt`, marks a turn whose process died as
    /// interrupted, repairs the history (torn line, dangling tool calls, merged roles) and saves
    /// the repair, and records a model switch as a declared boundary.
    ///
    /// Errors: a turn of this session is running in another live process.
    pub fn resume(
        state: &StateDir,
        session: Session,
        provider: Box<dyn Provider>,
        cfg: Config,
        ui: &mut dyn Surface,
    ) -> Result<Runtime, Failure> {
        // Check, and mark a dead turn interrupted, under one lock: a process that claims the
        // session in between must not have its claim overwritten.
        let (meta, was_interrupted) = {
            let lock = session.lock()?;
            let mut meta = session.read_meta()?;
            if let Some(pid) = running_elsewhere(&meta) {
                return Err(Failure::Failed(format!(
                    "session {} is running a turn in process {pid}; wait for it to finish (or interrupt it) first",
                    session.id
                )));
            }
            let dead = meta.status == Status::Running && meta.pid != Some(std::process::id());
            if dead {
                let before = meta.clone();
                meta.status = Status::Interrupted;
                meta.pid = None;
                meta.pid_start = None;
                meta.updated_at = crate::clock::now_rfc3339();
                session.write_meta_locked(&lock, &meta)?;
                (before, true)
            } else {
                (meta, false)
            }
        };
        let system = match session.read_text(files::SYSTEM)? {
            Some(s) => s,
            None => {
                let plan: crate::tools::plan::PlanFile =
                    session.read_json(files::PLAN_STATE)?.unwrap_or_default();
                let s = system::with_plan(&system::base(&state.workspace), plan.locked.as_deref());
                let lock = session.lock()?;
                session.write_text_locked(&lock, files::SYSTEM, &s)?;
                s
            }
        };
        let mut rt = Runtime::new(session, state.workspace.clone(), provider, cfg, system);
        let (provider, model) = (rt.provider.name(), rt.cfg.model.clone());
        rt.emit(
            ui,
            "session_start",
            json!({"provider": provider, "model": model, "resumed": true}),
        );
        if was_interrupted {
            rt.emit(
                ui,
                "turn_interrupted",
                json!({"pid": meta.pid, "reason": "the process running this turn is gone"}),
            );
        }
        rt.load_history(ui)?;
        // The previous process's last request is gone; the stored prefix as it stands now is
        // what the next request repeats, so prefix reuse is measured against it.
        rt.last_body = rt.body(None);
        rt.note_disk();
        if meta.model != rt.cfg.model || meta.provider != provider {
            rt.emit(
                ui,
                "boundary",
                json!({"kind": "model_switch", "from": format!("{}/{}", meta.provider, meta.model), "to": format!("{provider}/{model}")}),
            );
            let base_url = crate::config::display_url(&rt.cfg.base_url);
            rt.session.update_meta(|m| {
                m.model = model;
                m.provider = provider.to_string();
                m.base_url = base_url;
            })?;
        }
        Ok(rt)
    }

    fn new(
        session: Session,
        workspace: PathBuf,
        provider: Box<dyn Provider>,
        cfg: Config,
        system: String,
    ) -> Runtime {
        Runtime {
            session,
            workspace,
            cfg,
            cancel: Arc::new(AtomicBool::new(false)),
            totals: Totals::default(),
            provider,
            history: Vec::new(),
            system,
            tools: tool_specs(),
            last_body: Vec::new(),
            approved_always: false,
            warned_plan_md: false,
            tools_allowed: true,
            plan_stamps: Vec::new(),
            tail_cache: None,
            disk_seen: None,
            started: Instant::now(),
        }
    }

    /// Reads `conversation.jsonl` into memory, repairing and saving it when needed.
    fn load_history(&mut self, ui: &mut dyn Surface) -> Result<(), Failure> {
        let lock = self.session.lock()?;
        let read = self.session.read_conversation()?;
        // A turn running in another process has tool calls in flight that look dangling: the
        // file is only repaired when no other process holds the session.
        let held_elsewhere = running_elsewhere(&self.session.read_meta()?).is_some();
        if held_elsewhere {
            self.history = read.items;
            return Ok(());
        }
        let (history, report) = repair::repair(read.items, &read.skipped);
        if report.changed() {
            // The file as it was goes to archive/ first: a repair drops lines, and nothing may be
            // lost for good.
            let archive = self.session.rewrite_conversation_locked(&lock, &history)?;
            drop(lock);
            let mut fields = report.to_json();
            fields["archive"] = json!(archive);
            self.emit(ui, "repair", fields);
        }
        self.history = history;
        Ok(())
    }

    /// The stored history (what the next request's messages start with).
    pub fn history(&self) -> &[Message] {
        &self.history
    }

    /// True when Ctrl-C / SIGTERM was requested.
    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }

    /// Writes an event to `events.jsonl` (adding `type`, `seq`, `ts`, `session`) and shows it to
    /// the surface. A failed write is reported on stderr but never loses the event for the surface.
    pub fn emit(&mut self, ui: &mut dyn Surface, kind: &str, fields: Value) -> Value {
        emit_to(&self.session, ui, kind, fields)
    }

    /// Appends messages to the history, on disk first, in one write.
    fn store(&mut self, msgs: Vec<Message>) -> Result<(), Failure> {
        self.session.append_messages(&msgs)?;
        self.history.extend(msgs);
        self.note_disk();
        Ok(())
    }

    fn disk_stamps(&self) -> (Option<FileStamp>, Option<FileStamp>) {
        (
            stamp(&self.session.path(files::SYSTEM)),
            stamp(&self.session.path(files::CONVERSATION)),
        )
    }

    /// Records that memory and disk agree now (after our own read or write).
    fn note_disk(&mut self) {
        self.disk_seen = Some(self.disk_stamps());
    }

    /// Claims the session for this process: `meta.json` says running, with our pid and its start
    /// time, checked and written under one lock so two processes cannot both hold it. Returns the
    /// status before (for [`Runtime::release`]). A turn claims it; so does a verb that rewrites
    /// the conversation, so no turn can start under a compaction.
    ///
    /// Errors: another live process holds the session.
    pub fn claim(&mut self, title: Option<&str>) -> Result<Status, Failure> {
        let lock = self.session.lock()?;
        let mut meta = self.session.read_meta()?;
        if let Some(pid) = running_elsewhere(&meta) {
            return Err(Failure::Failed(format!(
                "session {} is running a turn in process {pid}; wait for it to finish first",
                self.session.id
            )));
        }
        let before = meta.status;
        meta.status = Status::Running;
        meta.pid = Some(std::process::id());
        meta.pid_start = process_start(std::process::id());
        meta.updated_at = crate::clock::now_rfc3339();
        if let Some(t) = title
            && meta.title.is_empty()
        {
            meta.title = t.trim().chars().take(80).collect();
        }
        self.session.write_meta_locked(&lock, &meta)?;
        Ok(before)
    }

    /// Gives back a claim taken by a verb: the status from before, no pid.
    pub fn release(&mut self, status: Status) -> Result<(), Failure> {
        self.session.update_meta(|m| {
            m.status = status;
            m.pid = None;
            m.pid_start = None;
        })?;
        Ok(())
    }

    /// Reloads the system prompt and the history when another process rewrote them since we
    /// last looked (`tern plan confirm`, `tern plan clear` or `tern compact` in another pane while
    /// this runtime sat idle), so the next request is what the files say.
    pub fn sync_from_disk(&mut self, ui: &mut dyn Surface) -> Result<(), Failure> {
        if self.disk_seen == Some(self.disk_stamps()) {
            return Ok(());
        }
        if let Some(system) = self.session.read_text(files::SYSTEM)? {
            self.system = system;
        }
        self.load_history(ui)?;
        self.last_body = self.body(None);
        self.plan_stamps.clear();
        self.note_disk();
        self.emit(
            ui,
            "warning",
            json!({"message": "another process changed this session (a plan confirm or clear, or a compaction): reloaded the system prompt and the history"}),
        );
        Ok(())
    }

    /// The `result` fields shared by every surface: totals, ratios, duration.
    pub fn result_fields(&self) -> Value {
        json!({
            "turns": self.totals.requests,
            "usage": self.totals.usage,
            "cache_hit_ratio": self.totals.cache_hit_ratio(),
            "prefix_reuse_bytes": self.totals.prefix_reuse_bytes,
            "prefix_reuse_ratio": self.totals.prefix_reuse_ratio(),
            "duration_ms": self.started.elapsed().as_millis() as u64,
        })
    }
}

/// Writes an event of `session` to its `events.jsonl` and shows it to `ui` (see
/// [`Runtime::emit`]); for verbs that have a session but no runtime.
pub fn emit_to(session: &Session, ui: &mut dyn Surface, kind: &str, fields: Value) -> Value {
    let ev = make_event(kind, &session.id, fields);
    let ev = match session.append_event(ev.clone()) {
        Ok(ev) => ev,
        Err(e) => {
            crate::errln!("tern: could not write events.jsonl: {e}");
            ev
        }
    };
    ui.event(&ev);
    ev
}

/// A file's length and modification time: a cheap test for "changed since last read".
pub(crate) type FileStamp = (u64, std::time::SystemTime);

/// The stamp of `path` (None when absent or unreadable).
pub(crate) fn stamp(path: &std::path::Path) -> Option<FileStamp> {
    let m = std::fs::symlink_metadata(path).ok()?;
    Some((m.len(), m.modified().ok()?))
}

/// Builds an event object: `type`, `seq` (filled when written), `ts`, `session`, then `fields`.
pub fn make_event(kind: &str, session: &str, fields: Value) -> Value {
    let mut ev = Map::new();
    ev.insert("type".into(), Value::from(kind));
    ev.insert("seq".into(), Value::from(0));
    ev.insert("ts".into(), Value::from(crate::clock::now_rfc3339_millis()));
    ev.insert("session".into(), Value::from(session));
    if let Value::Object(f) = fields {
        ev.extend(f);
    }
    Value::Object(ev)
}

/// The pid of another live process running a turn of this session, if any. A pid that now
/// belongs to a process started at another time (reused after a crash) does not count.
pub fn running_elsewhere(meta: &Meta) -> Option<u32> {
    let pid = meta.pid?;
    if meta.status != Status::Running || pid == std::process::id() || !pid_alive(pid) {
        return None;
    }
    match (meta.pid_start, process_start(pid)) {
        (Some(recorded), Some(now)) if recorded != now => None,
        // No start time recorded (an older meta.json, a hand edit): a process whose command is
        // not tern's is not running this turn.
        (None, Some(_)) if !runs_tern(pid) => None,
        _ => Some(pid),
    }
}

/// Whether process `pid` runs a program named like tern (`/proc/<pid>/cmdline`'s first word);
/// true where that cannot be read, so an unknown case keeps the session held.
fn runs_tern(pid: u32) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return true;
    };
    let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    let name = argv0.rsplit(|b| *b == b'/').next().unwrap_or_default();
    name.windows(4).any(|w| w == b"tern")
}

/// A process's start time in clock ticks since boot (field 22 of `/proc/<pid>/stat`); None where
/// there is no /proc or the process is gone.
pub fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// True when a process with `pid` exists (signal 0 delivered or refused for permission).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks that the process exists; it sends nothing.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}
