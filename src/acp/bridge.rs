//! The seam between ACP and tern's runtime: the only file of `src/acp/` that touches it.
//!
//! What it uses of the runtime, and nothing else:
//! - opening: [`StateDir`], [`Runtime::create`] (`session/new`), [`Runtime::resume`]
//!   (`session/load`, `session/resume`), [`config::build`] for the provider;
//! - a turn: [`Runtime::run_turn`] with [`AcpSurface`] as its [`Surface`], `rt.cancel` (a fresh
//!   flag per turn) and `rt.cfg.approval`;
//! - ops: [`ops::run`] with the live runtime, so `/confirm` here is `tern plan confirm`;
//! - reading: [`Runtime::history`] (replay), `ledger.json` (plans), `events.jsonl`
//!   ([`crate::acp::protocol::EVENTS_METHOD`]), `meta.json` (`session/list`).
//!
//! Threads: the runtime is not `Send`, so each open session has a thread of its own that creates
//! the [`Runtime`], keeps it, and runs its jobs (turns, ops, replays) in order. The dispatcher
//! hands jobs over a channel and shares a small [`Slot`] (busy turn, mode) behind a mutex.
//!
//! Cancel ordering (ACP v1, prompt turn: "Cancellation"): every notification of a turn is
//! written by its session thread, synchronously, before that same thread writes the turn's one
//! response; `session/cancel` only sets the turn's flag (the model stream stops within about
//! 100 ms, the bash tool kills the process group, a pending permission question is given up as
//! cancelled). The response is written while the slot is locked and the slot is freed in the
//! same critical section, so nothing of the turn can follow its response and the next prompt
//! always finds the session free. Each turn gets a new flag, so a late cancel never reaches the
//! next turn.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError, channel};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};

use super::Backend;
use super::protocol::{
    AvailableCommand, EVENTS_PAGE, EventsParams, EventsResult, ListSessionsResult,
    NewSessionResult, OpenSessionResult, PermissionOption, PermissionOutcome, PlanEntry,
    PromptResult, RequestPermissionParams, RequestPermissionResponse, SessionInfo, SessionMode,
    SessionModeState, SessionNotification, SessionUpdate, StopReason, TextBlock, ToolCall,
    ToolCallContent, ToolCallStatus, ToolCallUpdate, ToolKind,
};
use super::rpc::{RpcError, Wire};
use crate::cancel::CancelToken;
use crate::config::{Env, ProviderFlags};
use crate::domain::ledger::{Ledger, Status as ItemStatus};
use crate::event::{Envelope, Event, Purpose};
use crate::launcher::{Launcher, Process, SessionRef};
use crate::message::Message;
use crate::ops;
use crate::runtime::{Answer, Approval, Config, Failure, Quiet, Runtime, Surface};
use crate::store::{Session, StateDir, files};

/// What every session of this connection is opened with (from `tern acp`'s flags and
/// environment).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The environment snapshot (the provider route is resolved from it per session).
    pub env: Env,
    /// `--provider`, `--base-url`, `--model`.
    pub flags: ProviderFlags,
    /// Runtime settings; `approval` sets the initial mode.
    pub config: Config,
    /// `--state-dir` / `TERN_STATE_DIR`, absolute (`tern acp` resolves a relative one against its
    /// own folder at start, as every surface does).
    pub state_dir: Option<PathBuf>,
    /// Provider idle-read timeout.
    pub idle_timeout: Duration,
    /// The process's cancel token and process-group registry.
    pub process: Process,
}

/// The session modes (ACP v1, session modes), mapped onto tern's approval policies. The mode is
/// per session and per connection (a new process starts from `--approval`). A change during a
/// turn applies to its next command (ask ↔ auto, or to plan: refused as declined); leaving plan
/// mode takes effect with the next prompt, since a plan-mode turn runs as `--approval never`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `--approval ask`: each command becomes `session/request_permission`.
    Ask,
    /// `--approval auto`: commands run without asking.
    Auto,
    /// `--approval never`: commands are refused; the model can only draft the plan.
    Plan,
}

impl Mode {
    /// Every mode, in the order offered.
    pub const ALL: [Mode; 3] = [Mode::Ask, Mode::Auto, Mode::Plan];

    /// The mode id on the wire.
    pub fn id(self) -> &'static str {
        match self {
            Mode::Ask => "ask",
            Mode::Auto => "auto",
            Mode::Plan => "plan",
        }
    }

    /// The mode with id `id`.
    pub fn parse(id: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.id() == id)
    }

    /// The mode of an approval policy.
    pub fn of(a: Approval) -> Mode {
        match a {
            Approval::Ask => Mode::Ask,
            Approval::Auto => Mode::Auto,
            Approval::Never => Mode::Plan,
        }
    }

    fn describe(self) -> SessionMode {
        let (name, description) = match self {
            Mode::Ask => ("Ask", "Ask before each command runs"),
            Mode::Auto => ("Auto", "Run every command without asking"),
            Mode::Plan => (
                "Plan",
                "Refuse every command: the model can only draft the plan",
            ),
        };
        SessionMode {
            id: self.id().into(),
            name: name.into(),
            description: description.into(),
        }
    }

    /// The mode state for a session response.
    pub fn state(current: Mode) -> SessionModeState {
        SessionModeState {
            current_mode_id: current.id().into(),
            available_modes: Mode::ALL.into_iter().map(Mode::describe).collect(),
        }
    }
}

/// The ops offered as the client's commands (ACP v1, slash commands), by slash name.
pub const COMMANDS: [&str; 7] = [
    "plan", "confirm", "cancel", "clear", "compact", "status", "relay",
];

/// The available commands: [`COMMANDS`] with their op table help.
pub fn available_commands() -> Vec<AvailableCommand> {
    COMMANDS
        .iter()
        .filter_map(|name| ops::by_slash(name))
        .map(|op| AvailableCommand {
            name: op.slash.trim_start_matches('/').to_string(),
            description: op.help.to_string(),
        })
        .collect()
}

/// The permission choices (ACP v1, tool calls: "Permission Options"). "Always" switches the
/// session's mode (auto / plan) and says so with `current_mode_update`.
const OPTIONS: [PermissionOption; 4] = [
    PermissionOption {
        option_id: "allow-once",
        name: "Run it",
        kind: "allow_once",
    },
    PermissionOption {
        option_id: "allow-always",
        name: "Always run (auto mode)",
        kind: "allow_always",
    },
    PermissionOption {
        option_id: "reject-once",
        name: "Don't run it",
        kind: "reject_once",
    },
    PermissionOption {
        option_id: "reject-always",
        name: "Never run commands (plan mode)",
        kind: "reject_always",
    },
];

/// Page size of `session/list`.
pub const LIST_PAGE: usize = 100;

/// How often a wait (a permission question) looks at the cancel flag.
const POLL: Duration = Duration::from_millis(50);

/// What the dispatcher and a session thread share.
struct Slot {
    /// The running prompt or op: its request id and cancel flag.
    busy: Option<Busy>,
    /// The current mode.
    mode: Mode,
}

struct Busy {
    request: Value,
    cancel: CancelToken,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The slot holds plain values; a panicked holder leaves nothing half-written.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Work for a session thread.
enum Job {
    /// A prompt turn; the thread answers `request`.
    Turn {
        request: Value,
        text: String,
        cancel: CancelToken,
    },
    /// A slash command; the thread answers `request` with the receipt.
    Op {
        request: Value,
        op: &'static ops::Op,
        arg: Option<String>,
        cancel: CancelToken,
    },
    /// Replay the conversation (a `session/load` of a session open already); `done` when sent.
    Replay { done: Sender<()> },
    /// Leave the thread (the runtime is dropped).
    Close,
}

/// An open session: its thread and what is shared with it.
struct Handle {
    slot: Arc<Mutex<Slot>>,
    jobs: Sender<Job>,
    thread: Option<JoinHandle<()>>,
    dir: PathBuf,
}

/// The runtime side of `tern acp`: the open sessions of this connection.
pub struct Bridge {
    wire: Arc<Wire>,
    settings: Settings,
    sessions: HashMap<String, Handle>,
}

/// How a session is opened.
enum Open {
    New,
    Existing { session: Session, replay: bool },
}

impl Bridge {
    /// A bridge writing through `wire`.
    pub fn new(wire: Arc<Wire>, settings: Settings) -> Bridge {
        Bridge {
            wire,
            settings,
            sessions: HashMap::new(),
        }
    }

    fn state_for(&self, cwd: &Path) -> StateDir {
        let root = match &self.settings.state_dir {
            Some(d) if d.is_absolute() => d.clone(),
            Some(d) => cwd.join(d),
            None => cwd.join(".tern"),
        };
        StateDir {
            root,
            workspace: cwd.to_path_buf(),
        }
    }

    fn check_cwd(cwd: &Path) -> Result<(), RpcError> {
        if cwd.is_dir() {
            Ok(())
        } else {
            Err(RpcError::params(format!(
                "cwd {} is not a folder",
                cwd.display()
            )))
        }
    }

    fn handle(&self, id: &str) -> Result<&Handle, RpcError> {
        self.sessions
            .get(id)
            .ok_or_else(|| RpcError::no_session(id))
    }

    /// Starts a session thread and waits until its runtime is open (and, for a load, the
    /// history replayed). Returns the session id.
    fn open(&mut self, cwd: &Path, how: Open, mcp_servers: usize) -> Result<String, RpcError> {
        // The same launcher every surface opens sessions with, for this session's workspace.
        let mut launcher = Launcher::new(
            self.state_for(cwd),
            self.settings.env.clone(),
            self.settings.flags.clone(),
            self.settings.config.clone(),
            &self.settings.process,
        );
        launcher.idle_timeout = self.settings.idle_timeout;
        launcher
            .ready()
            .map_err(|e| RpcError::internal(format!("tern cannot start a session: {e}")))?;
        let mode = Mode::of(self.settings.config.approval);
        let slot = Arc::new(Mutex::new(Slot { busy: None, mode }));
        let (jobs, rx) = channel();
        let (ready_tx, ready_rx) = channel();
        let ctx = Ctx {
            wire: self.wire.clone(),
            slot: slot.clone(),
            launcher,
        };
        let thread = std::thread::Builder::new()
            .name("acp-session".into())
            .spawn(move || session_thread(ctx, how, mcp_servers, rx, ready_tx))
            .map_err(|e| RpcError::internal(format!("could not start a session thread: {e}")))?;
        let (id, dir) = match ready_rx.recv() {
            Ok(Ok(opened)) => opened,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(RpcError::internal("the session thread ended while opening"));
            }
        };
        self.sessions.insert(
            id.clone(),
            Handle {
                slot,
                jobs,
                thread: Some(thread),
                dir,
            },
        );
        Ok(id)
    }

    fn open_existing(
        &mut self,
        id: &str,
        cwd: &Path,
        mcp_servers: usize,
        replay: bool,
    ) -> Result<OpenSessionResult, RpcError> {
        Bridge::check_cwd(cwd)?;
        if let Some(h) = self.sessions.get(id) {
            // Open already in this connection: a load replays it again, a resume is a no-op.
            let mode = {
                let s = lock(&h.slot);
                if s.busy.is_some() {
                    return Err(RpcError::invalid(format!(
                        "session {id} is running a turn; wait for its response or send session/cancel"
                    )));
                }
                s.mode
            };
            if replay {
                let (done, wait) = channel();
                if h.jobs.send(Job::Replay { done }).is_err() || wait.recv().is_err() {
                    return Err(RpcError::internal("the session thread is gone"));
                }
            }
            return Ok(OpenSessionResult {
                modes: Mode::state(mode),
                meta: mcp_meta(mcp_servers),
            });
        }
        let state = self.state_for(cwd);
        // A linked state folder is refused, as by `session/new` and every verb.
        state
            .check_links()
            .map_err(|e| RpcError::internal(e.to_string()))?;
        let session = state
            .open_session(id)
            .ok()
            .filter(|s| s.id == id)
            .ok_or_else(|| RpcError::no_session(id))?;
        self.open(cwd, Open::Existing { session, replay }, mcp_servers)?;
        Ok(OpenSessionResult {
            modes: Mode::state(Mode::of(self.settings.config.approval)),
            meta: mcp_meta(mcp_servers),
        })
    }

    fn session_info(state: &StateDir, id: &str) -> Option<SessionInfo> {
        let meta = state.open_session(id).ok()?.read_meta().ok()?;
        Some(SessionInfo {
            session_id: meta.id,
            cwd: meta.cwd,
            title: Some(meta.title).filter(|t| !t.is_empty()),
            updated_at: Some(meta.updated_at).filter(|t| !t.is_empty()),
            meta: json!({"tern": {"status": meta.status.as_str(), "turns": meta.turns}}),
        })
    }

    /// Starts `job` on session `id` unless a turn runs there; the job answers `request`.
    fn start(
        &mut self,
        id: &str,
        request: Value,
        job: impl FnOnce(CancelToken) -> Job,
    ) -> Result<(), RpcError> {
        let h = self.handle(id)?;
        let mut s = lock(&h.slot);
        if s.busy.is_some() {
            return Err(RpcError::invalid(format!(
                "session {id} is running a turn; wait for its response or send session/cancel"
            )));
        }
        // A fresh token per turn, a child of the process's (a signal cancels every turn), so a
        // late session/cancel never reaches the next turn.
        let cancel = self.settings.process.cancel.child();
        if h.jobs.send(job(cancel.clone())).is_err() {
            return Err(RpcError::internal("the session thread is gone"));
        }
        s.busy = Some(Busy { request, cancel });
        Ok(())
    }

    fn stop(&mut self, id: &str) -> Option<Handle> {
        let mut h = self.sessions.remove(id)?;
        if let Some(b) = &lock(&h.slot).busy {
            b.cancel.cancel();
        }
        let _ = h.jobs.send(Job::Close);
        if let Some(t) = h.thread.take() {
            let _ = t.join();
        }
        Some(h)
    }
}

fn mcp_meta(n: usize) -> Option<Value> {
    (n > 0).then(|| {
        json!({"tern": {"mcpServers": format!("unsupported: tern connects to no MCP servers; {n} ignored")}})
    })
}

impl Backend for Bridge {
    fn new_session(
        &mut self,
        cwd: &Path,
        mcp_servers: &[Value],
    ) -> Result<NewSessionResult, RpcError> {
        Bridge::check_cwd(cwd)?;
        let id = self.open(cwd, Open::New, mcp_servers.len())?;
        Ok(NewSessionResult {
            session_id: id,
            modes: Mode::state(Mode::of(self.settings.config.approval)),
            meta: mcp_meta(mcp_servers.len()),
        })
    }

    fn load_session(
        &mut self,
        id: &str,
        cwd: &Path,
        mcp_servers: &[Value],
        replay: bool,
    ) -> Result<OpenSessionResult, RpcError> {
        self.open_existing(id, cwd, mcp_servers.len(), replay)
    }

    fn list_sessions(
        &mut self,
        cwd: Option<&Path>,
        cursor: Option<&str>,
    ) -> Result<ListSessionsResult, RpcError> {
        let state = match cwd {
            Some(c) => self.state_for(c),
            None => {
                let here = std::env::current_dir()
                    .map_err(|e| RpcError::internal(format!("no current folder: {e}")))?;
                StateDir::locate(&here, self.settings.state_dir.as_deref())
            }
        };
        let ids = state
            .check_links()
            .and_then(|()| state.session_ids())
            .map_err(|e| RpcError::internal(e.to_string()))?;
        let want = cwd.map(|c| c.display().to_string());
        // Most recently active first (then the newer id), so a client shows the latest work.
        let mut all: Vec<SessionInfo> = ids
            .iter()
            .filter_map(|id| Bridge::session_info(&state, id))
            .filter(|i| want.as_ref().is_none_or(|w| *w == i.cwd))
            .collect();
        all.sort_by(|a, b| {
            (b.updated_at.as_deref(), &b.session_id).cmp(&(a.updated_at.as_deref(), &a.session_id))
        });
        let start = match cursor {
            None => 0,
            Some(c) => {
                let after = c
                    .strip_prefix("after:")
                    .ok_or_else(|| RpcError::params("invalid cursor"))?;
                all.iter()
                    .position(|i| i.session_id == after)
                    .map(|p| p + 1)
                    .ok_or_else(|| RpcError::params("invalid cursor"))?
            }
        };
        let sessions: Vec<SessionInfo> = all.into_iter().skip(start).take(LIST_PAGE + 1).collect();
        let (sessions, next_cursor) = if sessions.len() > LIST_PAGE {
            let page: Vec<SessionInfo> = sessions.into_iter().take(LIST_PAGE).collect();
            let next = page.last().map(|s| format!("after:{}", s.session_id));
            (page, next)
        } else {
            (sessions, None)
        };
        Ok(ListSessionsResult {
            sessions,
            next_cursor,
        })
    }

    fn close_session(&mut self, id: &str) -> Result<(), RpcError> {
        self.stop(id)
            .map(|_| ())
            .ok_or_else(|| RpcError::no_session(id))
    }

    fn set_mode(&mut self, id: &str, mode: &str) -> Result<(), RpcError> {
        let m = Mode::parse(mode).ok_or_else(|| {
            RpcError::params(format!("unknown mode {mode:?}: expected ask, auto or plan"))
        })?;
        lock(&self.handle(id)?.slot).mode = m;
        Ok(())
    }

    fn prompt(&mut self, request: Value, id: &str, text: String) -> Result<(), RpcError> {
        if let Some((op, arg)) = slash_op(&text) {
            return self.start(id, request.clone(), |cancel| Job::Op {
                request,
                op,
                arg,
                cancel,
            });
        }
        self.start(id, request.clone(), |cancel| Job::Turn {
            request,
            text,
            cancel,
        })
    }

    fn cancel(&mut self, id: &str) {
        if let Some(h) = self.sessions.get(id)
            && let Some(b) = &lock(&h.slot).busy
        {
            b.cancel.cancel();
        }
    }

    fn cancel_request(&mut self, request: &Value) {
        for h in self.sessions.values() {
            if let Some(b) = &lock(&h.slot).busy
                && b.request == *request
            {
                b.cancel.cancel();
            }
        }
    }

    fn events(&mut self, p: &EventsParams) -> Result<EventsResult, RpcError> {
        let h = self.handle(&p.session_id)?;
        let read = Session::at(&p.session_id, h.dir.clone())
            .read_events()
            .map_err(|e| RpcError::internal(e.to_string()))?;
        let limit = p.limit.unwrap_or(EVENTS_PAGE).clamp(1, EVENTS_PAGE);
        let mut after: Vec<Value> = read
            .items
            .into_iter()
            .filter(|e| e["seq"].as_u64().is_some_and(|s| s > p.since))
            .collect();
        let more = after.len() > limit;
        after.truncate(limit);
        let next = after
            .last()
            .and_then(|e| e["seq"].as_u64())
            .unwrap_or(p.since);
        Ok(EventsResult {
            events: after,
            next,
            more,
        })
    }

    fn steer(&mut self, p: &super::protocol::SteerParams) -> Result<Value, RpcError> {
        use crate::runtime::steer::{self, SteerError};
        let h = self.handle(&p.session_id)?;
        let session = Session::at(&p.session_id, h.dir.clone());
        match steer::send(&session, &p.text, p.queue) {
            Ok(sent) => Ok(json!({
                "id": sent.entry.id,
                "delivered": if sent.running { "next_request" } else { "next_turn" },
            })),
            Err(SteerError::Usage(m)) => Err(RpcError::params(m)),
            Err(e) => Err(RpcError::internal(e.to_string())),
        }
    }

    fn opened(&mut self, id: &str) {
        notify(
            &self.wire,
            id,
            SessionUpdate::AvailableCommandsUpdate {
                available_commands: available_commands(),
            },
        );
    }

    fn shutdown(&mut self) {
        self.wire.abandon_all();
        let ids: Vec<String> = self.sessions.keys().cloned().collect();
        // Cancel every turn first, so they wind down together, then wait for each.
        for id in &ids {
            self.cancel(id);
        }
        for id in &ids {
            self.stop(id);
        }
    }
}

/// The op a prompt names, when it is one of [`COMMANDS`] (`/confirm`, `/status`, …), with its
/// argument. Anything else (`/usr/bin is slow`) is a prompt for the model.
fn slash_op(text: &str) -> Option<(&'static ops::Op, Option<String>)> {
    let cmd = text.trim().strip_prefix('/')?;
    let (name, arg) = match cmd.split_once(char::is_whitespace) {
        Some((n, a)) => (n, Some(a.trim().to_string()).filter(|a| !a.is_empty())),
        None => (cmd, None),
    };
    if !COMMANDS.contains(&name) {
        return None;
    }
    ops::by_slash(name).map(|op| (op, arg))
}

fn notify(wire: &Wire, session: &str, update: SessionUpdate) {
    wire.notify(
        "session/update",
        SessionNotification {
            session_id: session.to_string(),
            update,
        },
    );
}

/// What a session thread is started with.
struct Ctx {
    wire: Arc<Wire>,
    slot: Arc<Mutex<Slot>>,
    launcher: Launcher,
}

/// A session thread: opens the runtime, reports (id, folder) or the error on `ready`, then runs
/// jobs until [`Job::Close`] or the dispatcher goes away.
fn session_thread(
    ctx: Ctx,
    how: Open,
    mcp_servers: usize,
    jobs: Receiver<Job>,
    ready: Sender<Result<(String, PathBuf), RpcError>>,
) {
    let (opened, replay) = match how {
        Open::New => (
            ctx.launcher.open(
                &SessionRef::New {
                    title: String::new(),
                },
                &mut Quiet,
            ),
            false,
        ),
        Open::Existing { session, replay } => (ctx.launcher.resume(session, &mut Quiet), replay),
    };
    let mut rt = match opened {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(RpcError::internal(e.to_string())));
            return;
        }
    };
    if mcp_servers > 0 {
        let message = format!(
            "the client asked for {mcp_servers} MCP server(s); tern connects to none (unsupported)"
        );
        crate::errln!("tern acp: {message}");
        rt.emit(&mut Quiet, Event::warning(message));
    }
    let mut ids = IdMap::default();
    if replay {
        replay_history(&rt, &ctx.wire, &mut ids);
    } else {
        ids.learn(rt.history());
    }
    if ready
        .send(Ok((rt.session.id.clone(), rt.session.dir.clone())))
        .is_err()
    {
        return;
    }
    while let Ok(job) = jobs.recv() {
        match job {
            Job::Turn {
                request,
                text,
                cancel,
            } => run_turn(&ctx, &mut rt, &mut ids, request, &text, cancel),
            Job::Op {
                request,
                op,
                arg,
                cancel,
            } => run_op(&ctx, &mut rt, &mut ids, request, op, arg, cancel),
            Job::Replay { done } => {
                let mut fresh = IdMap::default();
                replay_history(&rt, &ctx.wire, &mut fresh);
                ids = fresh;
                let _ = done.send(());
            }
            Job::Close => break,
        }
    }
}

/// Answers the running request and frees the slot in one critical section (see the module
/// docs: nothing of the turn can follow this line, and the next prompt finds the slot free).
fn answer(ctx: &Ctx, request: &Value, result: PromptResult) {
    let mut s = lock(&ctx.slot);
    ctx.wire.respond(request, result);
    s.busy = None;
}

fn run_turn(
    ctx: &Ctx,
    rt: &mut Runtime,
    ids: &mut IdMap,
    request: Value,
    text: &str,
    cancel: CancelToken,
) {
    rt.cancel = cancel.clone();
    let mode = lock(&ctx.slot).mode;
    // Plan mode is tern's `never` policy for the whole turn; in the other modes the surface
    // decides per command (so a mode change mid-turn applies to the next command).
    rt.cfg.approval = if mode == Mode::Plan {
        Approval::Never
    } else {
        Approval::Ask
    };
    let mut ui = AcpSurface::new(ctx, rt, ids, cancel.clone());
    let outcome = rt.run_turn(text, &mut ui);
    let (stop, status, error) = match &outcome {
        _ if cancel.is_cancelled() => (StopReason::Cancelled, "interrupted", None),
        Ok(_) => (StopReason::EndTurn, "completed", None),
        Err(Failure::Interrupted) => (StopReason::Cancelled, "interrupted", None),
        Err(f @ Failure::MaxTurns(_)) => (StopReason::MaxTurnRequests, f.kind(), None),
        Err(f) => {
            let sep = if ui.said_anything { "\n\n" } else { "" };
            ui.message(&format!("{sep}tern: {f}"));
            (StopReason::Refusal, f.kind(), Some(f.to_string()))
        }
    };
    drop(ui);
    answer(
        ctx,
        &request,
        PromptResult {
            stop_reason: stop,
            meta: Some(json!({"tern": {"status": status, "error": error}})),
        },
    );
}

#[allow(clippy::too_many_arguments)]
fn run_op(
    ctx: &Ctx,
    rt: &mut Runtime,
    ids: &mut IdMap,
    request: Value,
    op: &'static ops::Op,
    arg: Option<String>,
    cancel: CancelToken,
) {
    rt.cancel = cancel.clone();
    let mut ui = AcpSurface::new(ctx, rt, ids, cancel.clone());
    let receipt = {
        let mut target = ops::Target {
            launcher: &ctx.launcher,
            runtime: Some(rt),
            session: None,
            wait: false,
        };
        ops::run(op, arg.as_deref(), &mut target, &mut ui)
    };
    // The REPL's receipt: the detail when it worked, `tern: …` when not.
    let text = if receipt.ok {
        receipt.detail.clone()
    } else {
        format!("tern: {}", receipt.detail)
    };
    ui.message(&text);
    drop(ui);
    let stop = if cancel.is_cancelled() {
        StopReason::Cancelled
    } else {
        StopReason::EndTurn
    };
    answer(
        ctx,
        &request,
        PromptResult {
            stop_reason: stop,
            meta: Some(json!({"tern": {"receipt": receipt}})),
        },
    );
}

/// tern tool call ids → ACP `toolCallId`s, unique within the session: a provider may reuse an
/// id in a later turn (`call_1` again), which would merge two calls in the client, so a repeat
/// gets `~N` appended. Replay and live turns share one map per session.
#[derive(Default)]
struct IdMap {
    seen: HashMap<String, u32>,
    live: HashMap<String, String>,
}

impl IdMap {
    fn assign(&mut self, id: &str) -> String {
        let base = if id.is_empty() { "call" } else { id };
        let n = self.seen.entry(base.to_string()).or_insert(0);
        let acp = if *n == 0 {
            base.to_string()
        } else {
            format!("{base}~{n}")
        };
        *n += 1;
        self.live.insert(id.to_string(), acp.clone());
        acp
    }

    fn get(&self, id: &str) -> String {
        self.live.get(id).cloned().unwrap_or_else(|| id.to_string())
    }

    /// Records the calls of a history not replayed (`session/resume`), so later ids stay unique.
    fn learn(&mut self, history: &[Message]) {
        for m in history {
            if let Message::Assistant { tool_calls, .. } = m {
                for c in tool_calls {
                    self.assign(&c.id);
                }
            }
        }
    }
}

/// How a tool call is shown: bash as its command (kind execute), the plan and progress tools by
/// name (kind think), anything else by name (kind other).
fn call_look(name: &str, args: &Value) -> (String, ToolKind) {
    match name {
        "bash" => (
            args["command"]
                .as_str()
                .filter(|c| !c.trim().is_empty())
                .unwrap_or("bash")
                .to_string(),
            ToolKind::Execute,
        ),
        n if n.starts_with("plan_")
            || n == "update_plan"
            || crate::tools::work::is_work_tool(n) =>
        {
            (n.to_string(), ToolKind::Think)
        }
        n => (n.to_string(), ToolKind::Other),
    }
}

/// Whether a stored bash result reads as failed: its last `[exit N]` marker is not 0, or it was
/// killed by a signal (the footer the bash tool writes).
fn bash_result_failed(content: &str) -> bool {
    if let Some(i) = content.rfind("[exit ") {
        let rest = &content[i + 6..];
        let code = rest.split(']').next().unwrap_or("");
        return code.trim() != "0";
    }
    content.contains("[killed by signal")
}

/// The ledger as plan entries (ACP v1, agent plan). ACP has no `cancelled` status: such an item
/// is `completed` with `[cancelled]` before its content.
fn plan_entries(ledger: &Ledger) -> Vec<PlanEntry> {
    ledger
        .items
        .iter()
        .map(|i| {
            let (status, content) = match i.status {
                ItemStatus::Pending => ("pending", i.content.clone()),
                ItemStatus::InProgress => ("in_progress", i.content.clone()),
                ItemStatus::Completed => ("completed", i.content.clone()),
                ItemStatus::Cancelled => ("completed", format!("[cancelled] {}", i.content)),
            };
            PlanEntry {
                content,
                priority: "medium",
                status,
            }
        })
        .collect()
}

fn read_ledger(session: &Session) -> Option<Ledger> {
    session.read_json(files::LEDGER).ok().flatten()
}

/// `session/load`'s replay (ACP v1, session setup: "Loading Sessions"): the stored conversation
/// in order — each user message as `user_message_chunk`, each answer's text as
/// `agent_message_chunk`, each tool call as `tool_call` followed, where its result is stored,
/// by its final `tool_call_update` — then the ledger as a `plan`.
fn replay_history(rt: &Runtime, wire: &Wire, ids: &mut IdMap) {
    let sid = rt.session.id.as_str();
    let mut names: HashMap<String, String> = HashMap::new();
    for m in rt.history() {
        match m {
            Message::User { content, .. } => notify(
                wire,
                sid,
                SessionUpdate::UserMessageChunk {
                    content: TextBlock::new(content.clone()),
                },
            ),
            Message::Assistant { text, tool_calls } => {
                if !text.is_empty() {
                    notify(
                        wire,
                        sid,
                        SessionUpdate::AgentMessageChunk {
                            content: TextBlock::new(text.clone()),
                        },
                    );
                }
                for c in tool_calls {
                    let (title, kind) = call_look(&c.name, &c.arguments);
                    names.insert(c.id.clone(), c.name.clone());
                    notify(
                        wire,
                        sid,
                        SessionUpdate::ToolCall(ToolCall {
                            tool_call_id: ids.assign(&c.id),
                            title,
                            kind,
                            status: ToolCallStatus::Pending,
                            raw_input: c.arguments.clone(),
                        }),
                    );
                }
            }
            Message::Tool {
                tool_call_id,
                name,
                content,
                is_error,
            } => {
                let failed = *is_error || (name == "bash" && bash_result_failed(content.as_str()));
                notify(
                    wire,
                    sid,
                    SessionUpdate::ToolCallUpdate(ToolCallUpdate {
                        tool_call_id: ids.get(tool_call_id),
                        status: Some(if failed {
                            ToolCallStatus::Failed
                        } else {
                            ToolCallStatus::Completed
                        }),
                        content: Some(vec![ToolCallContent::text(content.clone())]),
                        ..ToolCallUpdate::default()
                    }),
                );
            }
        }
    }
    if let Some(l) = read_ledger(&rt.session).filter(|l| !l.items.is_empty()) {
        notify(
            wire,
            sid,
            SessionUpdate::Plan {
                entries: plan_entries(&l),
            },
        );
    }
}

/// The tool call in flight (between its `tool_call` and `tool_result` events).
struct Current {
    acp_id: String,
}

/// The runtime's [`Surface`] for one ACP turn: events become `session/update` notifications,
/// approval questions become `session/request_permission`.
///
/// Mapping: text deltas → `agent_message_chunk`; `tool_call` → `tool_call` (bash: pending until
/// approved, then `in_progress`; other tools: `in_progress`); `tool_result` → `tool_call_update`
/// `completed` / `failed` with the shaped output the model reads; `work_update` → `plan`;
/// `usage` → `usage_update`. Other events stay in `events.jsonl`.
pub struct AcpSurface<'a> {
    wire: &'a Wire,
    slot: &'a Mutex<Slot>,
    sid: String,
    session: Session,
    context_window: u64,
    cancel: CancelToken,
    ids: &'a mut IdMap,
    current: Option<Current>,
    /// Text streamed since the last `assistant` event.
    streamed: bool,
    /// Any agent text was sent in this turn.
    said_anything: bool,
}

impl<'a> AcpSurface<'a> {
    fn new(ctx: &'a Ctx, rt: &Runtime, ids: &'a mut IdMap, cancel: CancelToken) -> AcpSurface<'a> {
        AcpSurface {
            wire: &ctx.wire,
            slot: &ctx.slot,
            sid: rt.session.id.clone(),
            session: Session::at(&rt.session.id, rt.session.dir.clone()),
            context_window: rt.cfg.context_window,
            cancel,
            ids,
            current: None,
            streamed: false,
            said_anything: false,
        }
    }

    fn send(&self, update: SessionUpdate) {
        notify(self.wire, &self.sid, update);
    }

    /// Sends `text` as an agent message chunk (receipts, failures).
    fn message(&mut self, text: &str) {
        if !text.is_empty() {
            self.said_anything = true;
            self.send(SessionUpdate::AgentMessageChunk {
                content: TextBlock::new(text),
            });
        }
    }

    fn status(&self, status: ToolCallStatus) {
        if let Some(c) = &self.current {
            self.send(SessionUpdate::ToolCallUpdate(ToolCallUpdate {
                tool_call_id: c.acp_id.clone(),
                status: Some(status),
                ..ToolCallUpdate::default()
            }));
        }
    }

    fn set_mode(&self, mode: Mode) {
        lock(self.slot).mode = mode;
        self.send(SessionUpdate::CurrentModeUpdate {
            current_mode_id: mode.id().into(),
        });
    }

    /// Asks the client about `command`; gives up (as not run) when the turn is cancelled.
    fn ask(&mut self, command: &str) -> Answer {
        let acp_id = match &self.current {
            Some(c) => c.acp_id.clone(),
            None => self.ids.assign(""),
        };
        let (rid, rx) = self.wire.request(
            "session/request_permission",
            RequestPermissionParams {
                session_id: self.sid.clone(),
                tool_call: ToolCallUpdate {
                    tool_call_id: acp_id,
                    status: Some(ToolCallStatus::Pending),
                    title: Some(command.to_string()),
                    kind: Some(ToolKind::Execute),
                    raw_input: Some(json!({"command": command})),
                    ..ToolCallUpdate::default()
                },
                options: OPTIONS.to_vec(),
            },
        );
        let answer = loop {
            if self.cancel.is_cancelled() {
                // A hang-up cancels every turn too: its closed channel tells the two apart.
                if let Err(TryRecvError::Disconnected) = rx.try_recv() {
                    return self.disconnected();
                }
                // ACP v1, prompt turn: the client answers pending permission requests with
                // `cancelled` itself; tern stops waiting now, and drops that late answer.
                self.wire.forget(rid);
                return Answer::No;
            }
            match rx.recv_timeout(POLL) {
                Ok(a) => break a,
                Err(RecvTimeoutError::Timeout) => {}
                // stdin closed (or stdout broke) before an answer came.
                Err(RecvTimeoutError::Disconnected) => return self.disconnected(),
            }
        };
        let parsed = answer.map_err(|e| e.message).and_then(|v| {
            serde_json::from_value::<RequestPermissionResponse>(v).map_err(|e| e.to_string())
        });
        match parsed {
            Ok(r) => match r.outcome {
                PermissionOutcome::Cancelled => {
                    // The client says the turn was cancelled.
                    self.cancel.cancel();
                    Answer::No
                }
                PermissionOutcome::Selected { option_id } => match option_id.as_str() {
                    "allow-once" => Answer::Yes,
                    "allow-always" => {
                        self.set_mode(Mode::Auto);
                        Answer::Yes
                    }
                    "reject-once" => Answer::No,
                    "reject-always" => {
                        self.set_mode(Mode::Plan);
                        Answer::No
                    }
                    other => {
                        crate::errln!(
                            "tern acp: unknown permission option {other:?}; not running the command"
                        );
                        Answer::No
                    }
                },
            },
            Err(e) => {
                crate::errln!(
                    "tern acp: the permission request failed ({e}); not running the command"
                );
                Answer::No
            }
        }
    }

    /// The client went away with the question unanswered: the command does not run, the model
    /// reads that no one declined it, and the turn ends as interrupted (as a hang-up mid-command
    /// does).
    fn disconnected(&mut self) -> Answer {
        crate::errln!(
            "tern acp: the client disconnected before answering a permission request; not running the command"
        );
        self.cancel.cancel();
        Answer::Disconnected
    }
}

impl Surface for AcpSurface<'_> {
    fn event(&mut self, env: &Envelope) {
        match &env.event {
            Event::ToolCall {
                id,
                name,
                arguments,
            } => {
                let (title, kind) = call_look(name, arguments);
                let acp_id = self.ids.assign(id);
                // A bash call waits for approval; the other tools start at once.
                let status = if kind == ToolKind::Execute {
                    ToolCallStatus::Pending
                } else {
                    ToolCallStatus::InProgress
                };
                self.send(SessionUpdate::ToolCall(ToolCall {
                    tool_call_id: acp_id.clone(),
                    title,
                    kind,
                    status,
                    raw_input: arguments.clone(),
                }));
                self.current = Some(Current { acp_id });
            }
            Event::ToolResult {
                id,
                is_error,
                content,
                bash,
                ..
            } => {
                let acp_id = match self.current.take() {
                    Some(c) => c.acp_id,
                    None => self.ids.get(id),
                };
                // A bash command that ran and exited non-zero (or died of a signal: no code).
                let exit_failed = bash.as_ref().is_some_and(|b| b.exit_code != Some(0));
                let failed = *is_error || exit_failed;
                let raw_output = bash.as_ref().map(|b| {
                    json!({
                        "exitCode": b.exit_code,
                        "timedOut": b.timed_out,
                        "interrupted": b.interrupted,
                        "outputBytes": b.output_bytes,
                        "spill": b.spill,
                    })
                });
                self.send(SessionUpdate::ToolCallUpdate(ToolCallUpdate {
                    tool_call_id: acp_id,
                    status: Some(if failed {
                        ToolCallStatus::Failed
                    } else {
                        ToolCallStatus::Completed
                    }),
                    content: Some(vec![ToolCallContent::text(content.as_str())]),
                    raw_output,
                    ..ToolCallUpdate::default()
                }));
            }
            Event::Assistant { text, .. } => {
                // Text that did not stream (a provider that sent it whole) is sent now.
                if !self.streamed {
                    let t = text.clone();
                    self.message(&t);
                }
                self.streamed = false;
            }
            Event::Usage {
                purpose,
                input_tokens,
                cached_tokens,
                cache_write_tokens,
                output_tokens,
                ..
            } => {
                self.send(SessionUpdate::UsageUpdate {
                    used: input_tokens.saturating_add(*output_tokens),
                    size: self.context_window,
                    meta: json!({"tern": {
                        "purpose": match purpose { Purpose::Turn => "turn", Purpose::Compaction => "compaction" },
                        "inputTokens": input_tokens,
                        "cachedTokens": cached_tokens,
                        "cacheWriteTokens": cache_write_tokens,
                        "outputTokens": output_tokens,
                    }}),
                });
            }
            Event::Steer { text, .. } => self.send(SessionUpdate::UserMessageChunk {
                content: TextBlock::new(text.clone()),
            }),
            Event::WorkUpdate { .. } => {
                if let Some(l) = read_ledger(&self.session) {
                    self.send(SessionUpdate::Plan {
                        entries: plan_entries(&l),
                    });
                }
            }
            _ => {}
        }
    }

    fn text_delta(&mut self, text: &str) {
        if !text.is_empty() {
            self.streamed = true;
            self.said_anything = true;
            self.send(SessionUpdate::AgentMessageChunk {
                content: TextBlock::new(text),
            });
        }
    }

    fn approve(&mut self, command: &str) -> Answer {
        let mode = lock(self.slot).mode;
        let answer = match mode {
            Mode::Auto => Answer::Yes,
            Mode::Plan => Answer::No,
            Mode::Ask => self.ask(command),
        };
        if answer == Answer::Yes {
            self.status(ToolCallStatus::InProgress);
        }
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slash_ops_are_only_the_offered_commands() {
        assert_eq!(
            slash_op("/status").map(|(o, _)| o.id.as_str()),
            Some("status")
        );
        assert_eq!(
            slash_op("  /confirm  ").map(|(o, a)| (o.id.as_str(), a)),
            Some(("plan.confirm", None))
        );
        assert_eq!(
            slash_op("/plan extra").map(|(o, a)| (o.id.as_str(), a)),
            Some(("plan.show", Some("extra".to_string())))
        );
        assert!(slash_op("/usr/bin is slow, why?").is_none());
        assert!(slash_op("/quit").is_none());
        assert!(slash_op("status").is_none());
        let names: Vec<String> = available_commands().into_iter().map(|c| c.name).collect();
        assert_eq!(names, COMMANDS);
    }

    #[test]
    fn repeated_ids_stay_unique() {
        let mut m = IdMap::default();
        assert_eq!(m.assign("call_1"), "call_1");
        assert_eq!(m.get("call_1"), "call_1");
        assert_eq!(m.assign("call_1"), "call_1~1");
        assert_eq!(m.get("call_1"), "call_1~1");
        assert_eq!(m.assign(""), "call");
    }

    #[test]
    fn bash_failure_reads_the_footer() {
        assert!(!bash_result_failed("hi\n[exit 0]"));
        assert!(bash_result_failed("[no output] [exit 2]"));
        assert!(bash_result_failed("[killed by signal 9 (SIGKILL)]"));
        assert!(!bash_result_failed("[exit 1] in the output\n[exit 0]"));
    }

    #[test]
    fn cancelled_items_are_marked() {
        let l: Ledger = serde_json::from_value(json!({"items": [
            {"id": "1", "content": "a", "status": "completed"},
            {"id": "2", "content": "b", "status": "cancelled"},
            {"id": "3", "content": "c", "status": "in_progress"},
        ]}))
        .unwrap();
        let e = plan_entries(&l);
        assert_eq!(e[1].content, "[cancelled] b");
        assert_eq!(
            e.iter().map(|e| e.status).collect::<Vec<_>>(),
            ["completed", "completed", "in_progress"]
        );
    }
}
