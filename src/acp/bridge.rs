//! The seam between ACP and tern's runtime: the open sessions of one connection.
//!
//! What it uses of the runtime, and nothing else:
//! - opening: [`StateDir`], the [`Launcher`] every surface opens sessions with (`session/new`,
//!   `session/load`, `session/resume`);
//! - turns, ops, replays and model switches: handed to the session's thread
//!   ([`super::session`]), which owns the runtime;
//! - reading: `events.jsonl` ([`crate::acp::protocol::EVENTS_METHOD`]) and `meta.json`
//!   (`session/list`).
//!
//! It never sees a JSON-RPC id: a prompt comes with the [`Responder`] that answers it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};

use super::Backend;
use super::mode::{Mode, slash_op};
use super::protocol::{
    EVENTS_PAGE, EventsParams, EventsResult, ListSessionsResult, ModelInfo, NewSessionResult,
    OpenSessionResult, SessionInfo, SessionModelState,
};
use super::rpc::{Responder, RpcError, Wire};
use super::session::{self, Ctx, Job, Open};
use super::slot::{Pending, Slot, lock};
use crate::config::{Env, ProviderFlags};
use crate::launcher::{Launcher, Process};
use crate::runtime::Config;
use crate::store::{Session, StateDir};

/// What every session of this connection is opened with (from `tern acp`'s flags, environment
/// and config file).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The environment snapshot (the provider route is resolved from it per session).
    pub env: Env,
    /// `--provider`, `--base-url`, `--model`.
    pub flags: ProviderFlags,
    /// Runtime settings; `approval` sets the mode of a session that stored none.
    pub config: Config,
    /// `--state-dir` / `TERN_STATE_DIR`, absolute (`tern acp` resolves a relative one against its
    /// own folder at start, as every surface does).
    pub state_dir: Option<PathBuf>,
    /// Provider idle-read timeout.
    pub idle_timeout: Duration,
    /// The process's cancel token and process-group registry.
    pub process: Process,
    /// The config file's `models` list, offered by `session/set_model` (any name is accepted).
    pub models: Vec<String>,
}

/// Page size of `session/list`.
pub const LIST_PAGE: usize = 100;

/// An open session: its thread and what is shared with it.
struct Handle {
    slot: Arc<Mutex<Slot>>,
    jobs: Sender<Job>,
    thread: Option<JoinHandle<()>>,
    dir: PathBuf,
    next: u64,
    /// The skills of its workspace when it opened, offered as commands (`/name`).
    skills: Vec<crate::skills::Skill>,
}

/// The runtime side of `tern acp`: the open sessions of this connection.
pub struct Bridge {
    wire: Arc<Wire>,
    settings: Settings,
    sessions: HashMap<String, Handle>,
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
        StateDir::at(cwd, cwd, self.settings.state_dir.as_deref())
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

    /// The config options of a session as it opens (the effort of the run's settings).
    fn config_options(&self) -> Vec<Value> {
        let e = self.settings.config.reasoning.effort;
        super::protocol::config_options(e.map_or("default", |e| e.as_str()))
    }

    /// The models offered, the current one first among the config's.
    fn models(&self, current: &str) -> SessionModelState {
        let mut names: Vec<String> = vec![current.to_string()];
        for m in &self.settings.models {
            if !names.contains(m) {
                names.push(m.clone());
            }
        }
        SessionModelState {
            current_model_id: current.to_string(),
            available_models: names
                .into_iter()
                .map(|n| ModelInfo {
                    model_id: n.clone(),
                    name: n,
                })
                .collect(),
        }
    }

    /// Starts a session thread and waits until its runtime is open (and, for a load, the
    /// history replayed). Returns the session id, mode and model.
    fn open(
        &mut self,
        cwd: &Path,
        how: Open,
        mcp_servers: &[Value],
    ) -> Result<(String, Mode, String), RpcError> {
        // The same launcher every surface opens sessions with, for this session's workspace.
        let mut launcher = Launcher::new(
            self.state_for(cwd),
            self.settings.env.clone(),
            self.settings.flags.clone(),
            self.settings.config.clone(),
            &self.settings.process,
        );
        launcher.idle_timeout = self.settings.idle_timeout;
        let skills = crate::skills::discover(&launcher.skill_roots()).skills;
        let (servers, refused) = super::protocol::mcp_servers(mcp_servers);
        launcher.mcp_editor = servers;
        launcher
            .ready()
            .map_err(|e| RpcError::internal(format!("tern cannot start a session: {e}")))?;
        let default_mode = Mode::of(self.settings.config.approval);
        let slot = Arc::new(Mutex::new(Slot {
            pending: Vec::new(),
            mode: default_mode,
            model: String::new(),
        }));
        let (jobs, rx) = channel();
        let (ready_tx, ready_rx) = channel();
        let ctx = Ctx {
            wire: self.wire.clone(),
            slot: slot.clone(),
            launcher,
            default_mode,
        };
        let thread = std::thread::Builder::new()
            .name("acp-session".into())
            .spawn(move || session::run(ctx, how, refused, rx, ready_tx))
            .map_err(|e| RpcError::internal(format!("could not start a session thread: {e}")))?;
        let (id, dir, mode, model) = match ready_rx.recv() {
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
                next: 0,
                skills,
            },
        );
        Ok((id, mode, model))
    }

    fn open_existing(
        &mut self,
        id: &str,
        cwd: &Path,
        mcp_servers: &[Value],
        replay: bool,
    ) -> Result<OpenSessionResult, RpcError> {
        Bridge::check_cwd(cwd)?;
        if let Some(h) = self.sessions.get(id) {
            // Open already in this connection: a load replays it again, a resume is a no-op.
            let (mode, model) = {
                let s = lock(&h.slot);
                if !s.pending.is_empty() {
                    return Err(RpcError::invalid(format!(
                        "session {id} is running a turn; wait for its response or send session/cancel"
                    )));
                }
                (s.mode, s.model.clone())
            };
            if replay {
                let (done, wait) = channel();
                if h.jobs.send(Job::Replay { done }).is_err() || wait.recv().is_err() {
                    return Err(RpcError::internal("the session thread is gone"));
                }
            }
            return Ok(OpenSessionResult {
                modes: Mode::state(mode),
                models: self.models(&model),
                config_options: self.config_options(),
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
        let (_, mode, model) = self.open(cwd, Open::Existing { session, replay }, mcp_servers)?;
        Ok(OpenSessionResult {
            modes: Mode::state(mode),
            models: self.models(&model),
            config_options: self.config_options(),
            meta: mcp_meta(mcp_servers),
        })
    }

    /// The list entry of session `id`; one whose `meta.json` cannot be read is listed too, with
    /// its state (`damaged`) and why, so it does not vanish from the client.
    fn session_info(state: &StateDir, id: &str) -> SessionInfo {
        let read = state
            .open_session(id)
            .map_err(|e| e.to_string())
            .and_then(|s| s.read_meta().map_err(|e| e.to_string()));
        match read {
            Ok(meta) => SessionInfo {
                session_id: meta.id,
                cwd: meta.cwd,
                title: Some(meta.title).filter(|t| !t.is_empty()),
                updated_at: Some(meta.updated_at).filter(|t| !t.is_empty()),
                meta: json!({"tern": {"status": meta.status.as_str(), "requests": meta.turns}}),
            },
            Err(why) => SessionInfo {
                session_id: id.to_string(),
                cwd: state.workspace.display().to_string(),
                title: Some(format!("(damaged: {why})")),
                updated_at: None,
                meta: json!({"tern": {"status": "damaged", "error": why}}),
            },
        }
    }

    fn stop(&mut self, id: &str) -> Option<Handle> {
        let mut h = self.sessions.remove(id)?;
        for p in &lock(&h.slot).pending {
            p.cancel.cancel();
        }
        let _ = h.jobs.send(Job::Close);
        if let Some(t) = h.thread.take() {
            let _ = t.join();
        }
        Some(h)
    }
}

/// `_meta.tern.mcpServers` of a session's answer: the servers of the client's list tern cannot
/// use, one line each (None when it can use them all).
fn mcp_meta(list: &[Value]) -> Option<Value> {
    let (_, refused) = super::protocol::mcp_servers(list);
    (!refused.is_empty()).then(|| json!({"tern": {"mcpServers": {"refused": refused}}}))
}

impl Backend for Bridge {
    fn new_session(
        &mut self,
        cwd: &Path,
        mcp_servers: &[Value],
    ) -> Result<NewSessionResult, RpcError> {
        Bridge::check_cwd(cwd)?;
        let (id, mode, model) = self.open(cwd, Open::New, mcp_servers)?;
        Ok(NewSessionResult {
            session_id: id,
            modes: Mode::state(mode),
            models: self.models(&model),
            config_options: self.config_options(),
            meta: mcp_meta(mcp_servers),
        })
    }

    fn load_session(
        &mut self,
        id: &str,
        cwd: &Path,
        mcp_servers: &[Value],
        replay: bool,
    ) -> Result<OpenSessionResult, RpcError> {
        self.open_existing(id, cwd, mcp_servers, replay)
    }

    fn fork_session(
        &mut self,
        id: &str,
        cwd: &Path,
        mcp_servers: &[Value],
    ) -> Result<(String, OpenSessionResult), RpcError> {
        Bridge::check_cwd(cwd)?;
        let state = self.state_for(cwd);
        let from = state
            .check_links()
            .and_then(|()| state.open_session(id))
            .map_err(|e| RpcError::params(e.to_string()))?;
        if crate::store::held_elsewhere(&from).is_some() {
            return Err(RpcError::invalid(format!(
                "a turn of session {id} is running: fork it once the turn ends"
            )));
        }
        let fork = crate::checkpoint::fork(&state, &from, None, true)
            .map_err(|e| RpcError::internal(e.to_string()))?;
        let r = self.open_existing(&fork.id, cwd, mcp_servers, false)?;
        Ok((fork.id, r))
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
            .map(|id| Bridge::session_info(&state, id))
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
        let h = self.handle(id)?;
        lock(&h.slot).mode = m;
        super::slot::persist_mode(&Session::at(id, h.dir.clone()), m);
        Ok(())
    }

    fn set_model(&mut self, id: &str, model: &str) -> Result<(), RpcError> {
        let h = self.handle(id)?;
        if !lock(&h.slot).pending.is_empty() {
            // The runtime is the turn's until it ends; the switch would land mid-turn.
            return Err(RpcError::invalid(format!(
                "session {id} is running a turn; set the model after its response"
            )));
        }
        let (done, wait) = channel();
        if h.jobs
            .send(Job::SetModel {
                model: model.to_string(),
                done,
            })
            .is_err()
        {
            return Err(RpcError::internal("the session thread is gone"));
        }
        match wait.recv() {
            Ok(r) => r.map(|_| ()),
            Err(_) => Err(RpcError::internal("the session thread is gone")),
        }
    }

    fn set_config_option(
        &mut self,
        id: &str,
        config_id: &str,
        value: &str,
    ) -> Result<Vec<Value>, RpcError> {
        if config_id != super::protocol::EFFORT_OPTION {
            return Err(RpcError::params(format!(
                "unknown config option {config_id:?}: tern offers {:?}",
                super::protocol::EFFORT_OPTION
            )));
        }
        if !super::protocol::EFFORT_VALUES.contains(&value) {
            return Err(RpcError::params(format!(
                "{value:?} is not a value of {config_id}: {}",
                super::protocol::EFFORT_VALUES.join(", ")
            )));
        }
        let h = self.handle(id)?;
        if !lock(&h.slot).pending.is_empty() {
            return Err(RpcError::invalid(format!(
                "session {id} is running a turn; set the option after its response"
            )));
        }
        let (done, wait) = channel();
        if h.jobs
            .send(Job::SetEffort {
                value: value.to_string(),
                done,
            })
            .is_err()
        {
            return Err(RpcError::internal("the session thread is gone"));
        }
        match wait.recv() {
            Ok(r) => r.map(|current| super::protocol::config_options(&current)),
            Err(_) => Err(RpcError::internal("the session thread is gone")),
        }
    }

    fn prompt(&mut self, reply: Responder, id: &str, text: String) -> Result<(), RpcError> {
        let Some(h) = self.sessions.get_mut(id) else {
            return Err(RpcError::no_session(id));
        };
        h.next += 1;
        let seq = h.next;
        let mut s = lock(&h.slot);
        // A prompt while another runs: that one is cancelled (or was already) and this one
        // waits behind it (see `session`'s module docs). Never an error.
        for p in &s.pending {
            p.cancel.cancel();
        }
        // A fresh token per prompt, a child of the process's (a signal cancels every turn), so
        // a late session/cancel never reaches a later prompt.
        let cancel = self.settings.process.cancel.child();
        let job = match slash_op(&text) {
            Some((op, arg)) => Job::Op {
                seq,
                reply,
                op,
                arg,
                cancel: cancel.clone(),
            },
            None => Job::Turn {
                seq,
                reply,
                text,
                cancel: cancel.clone(),
            },
        };
        if let Err(std::sync::mpsc::SendError(job)) = h.jobs.send(job) {
            let reply = match job {
                Job::Turn { reply, .. } | Job::Op { reply, .. } => reply,
                _ => return Err(RpcError::internal("the session thread is gone")),
            };
            reply.fail(&RpcError::internal("the session thread is gone"));
            return Ok(());
        }
        s.pending.push(Pending { seq, cancel });
        Ok(())
    }

    fn cancel(&mut self, id: &str) {
        if let Some(h) = self.sessions.get(id) {
            for p in &lock(&h.slot).pending {
                p.cancel.cancel();
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

    fn provider_ready(&mut self) -> Result<(), String> {
        let here = std::env::current_dir().map_err(|e| e.to_string())?;
        Launcher::new(
            StateDir::locate(&here, self.settings.state_dir.as_deref()),
            self.settings.env.clone(),
            self.settings.flags.clone(),
            self.settings.config.clone(),
            &self.settings.process,
        )
        .ready()
        .map_err(|e| e.to_string())
    }

    fn opened(&mut self, id: &str) {
        let skills = self
            .sessions
            .get(id)
            .map(|h| h.skills.as_slice())
            .unwrap_or_default();
        session::send_commands(&self.wire, id, skills);
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
