//! `tern acp`: an Agent Client Protocol (ACP) v1 agent on stdin/stdout, for editors (Zed,
//! JetBrains, Neovim's CodeCompanion and avante.nvim, Emacs) and ACP command-line clients.
//!
//! Sources: the ACP v1 protocol pages and schema (`agentclientprotocol/agent-client-protocol`,
//! schema tag `schema-v1.19.0`), which the Python SDK `agent-client-protocol` 0.12.1 is
//! generated from; the rules below cite the page ("ACP v1, prompt turn: …").
//!
//! # Transport
//! Newline-delimited JSON-RPC 2.0 (ACP v1, transports: stdio). stdout carries only protocol
//! lines: at start the real stdout moves to a private descriptor owned by [`rpc::Wire`], and
//! descriptor 1 then points at stderr, so a stray print anywhere lands in the log, never in the
//! protocol. Logs go to stderr. A reader thread reads stdin (lines over
//! [`rpc::MAX_LINE_BYTES`] are refused and skipped); the dispatcher (this module) answers; each
//! open session has a worker thread (`session.rs`); one locked writer sends every line.
//!
//! Files: `rpc.rs` (JSON-RPC lines, the writer, the [`rpc::Responder`] that answers a request),
//! `protocol.rs` (the message shapes), this file (dispatch), `bridge.rs` (the open sessions),
//! `session.rs` (a session's thread: turns, ops, the order of answers), `slot.rs` (what the
//! dispatcher and that thread share), `surface.rs` (a turn's
//! events out, permission questions), `updates.rs` (the one mapping of events to updates),
//! `mode.rs` (modes, permission options, commands).
//!
//! # Methods (client → agent)
//! | method | params → result | notes |
//! |---|---|---|
//! | `initialize` | `{protocolVersion, clientCapabilities?, clientInfo?}` → `{protocolVersion: 1, agentCapabilities, authMethods, agentInfo}` | ACP v1, initialization: the client's version if supported, else tern's latest (1). `authMethods` offers `tern setup` as a `terminal` method to a client that declared `clientCapabilities.auth.terminal: true` (ACP v1, "Terminal Authentication") or `clientCapabilities._meta["terminal-auth"]: true` (the ACP registry's validator), none to others. Before it, every other request is `-32600`. |
//! | `authenticate` | `{methodId}` → `{}` | `tern-setup`: `{}` when a provider is configured, else `-32000` (auth required) naming `tern setup`. |
//! | `session/new` | `{cwd, mcpServers}` → `{sessionId, modes, models}` | ACP v1, session setup. `cwd` absolute = the workspace; `.tern/` in it (or `--state-dir`). `mcpServers` (stdio and HTTP, as `mcpCapabilities` says) are the session's MCP servers, reached by its commands through `tern mcp` (their names in the system prompt); one tern cannot use (SSE) is named in `_meta.tern.mcpServers.refused`, on stderr and in a `warning` event. |
//! | `session/load` | `{sessionId, cwd, mcpServers}` → `{modes, models}` | replays the conversation as `session/update` (user chunks, agent chunks, each tool call then its final update, the plan), then answers. The mode is the one stored with the session. |
//! | `session/resume` | same → `{modes, models}` | no replay (ACP v1, session setup: "Resuming Sessions"). |
//! | `session/list` | `{cwd?, cursor?}` → `{sessions: [{sessionId, cwd, title?, updatedAt?}], nextCursor?}` | newest first, 100 a page (ACP v1, session list); a session whose `meta.json` is damaged is listed with `_meta.tern.status` `damaged` and the reason. |
//! | `session/close` | `{sessionId}` → `{}` | cancels a running turn as `session/cancel` would, waits for it, frees the session. |
//! | `session/set_mode` | `{sessionId, modeId}` → `{}` | `ask`, `auto`, `plan` = `--approval ask / auto / never`; stored with the session. |
//! | `session/set_config_option` | `{sessionId, configId, value}` → `{configOptions}` | `reasoning_effort` (category `thought_level`): `default`, `none` … `max`, as `/effort`; the options are in every session's answer. `-32600` while a turn runs. |
//! | `session/set_model` | `{sessionId, modelId}` → `{}` | any model name (the config's `models` are offered); a declared boundary; the next request goes to it. `-32600` while a turn runs. |
//! | `session/prompt` | `{sessionId, prompt: ContentBlock[]}` → `{stopReason}` | text, resource links, embedded text resources. One response per prompt: `end_turn`, `max_tokens` (the final answer was cut at the output cap), `max_turn_requests` or `cancelled`; a turn tern could not finish (provider down) is an error response (`-32603`, `tern: REASON`, `data.tern.status`). A prompt while a turn runs cancels that turn (answered `cancelled` first) and runs next. `/plan`, `/confirm`, `/discard` (the draft; `/cancel` is its hidden old name), `/clear`, `/compact`, `/status`, `/relay`, `/model` run tern's op and answer with its receipt as Markdown. |
//! | `session/cancel` (notification) | `{sessionId}` | stops the turn: the response `cancelled` comes after its last update. |
//! | `$/cancel_request` (notification) | `{requestId}` | for a running prompt: as `session/cancel` (ACP v1, cancellation). |
//! | `_tern/events` | `{sessionId, since?, limit?}` → `{events, next, more}` | the session's `events.jsonl` after `seq` `since`, so a reconnecting client misses nothing. |
//! | `session/fork` | `{sessionId, cwd, mcpServers?}` → `{sessionId, modes}` | UNSTABLE in the SDK 0.12.1 schema (`sessionCapabilities.fork`): `tern fork` of the stored session at its end (a turn running in it is `-32600`), opened without a replay; its first request repeats the original's bytes. |
//! | `_tern/steer` | `{sessionId, text, queue?}` → `{id, delivered}` | the person's words for the running turn, read by the model at its next request (`delivered`: `next_request`; with `queue` and no turn running, `next_turn`); no turn running and no `queue`: `-32603`. The delivery shows as a `user_message_chunk`. |
//!
//! `logout`, `session/delete` and `session/set_config_option` are not offered (`-32601`).
//!
//! # Agent → client
//! `session/update` (`agent_message_chunk`, `user_message_chunk` in replays, `tool_call` /
//! `tool_call_update` with kind `execute` and the command as title, `plan`, warnings as agent
//! chunks,
//! `available_commands_update` after a session opens, `current_mode_update` when an "always"
//! answer switches the mode, `usage_update` after each model request) and
//! `session/request_permission` under mode `ask`.
//!
//! # Errors
//! `-32700` a line that is not JSON (under the request's id when it can still be read) · `-32600` not a request object, a line over the cap, a
//! request before `initialize`, a model switch while a turn runs · `-32601` unknown method · `-32602`
//! wrong params · `-32603` tern could not do it (no provider configured, a session held by
//! another process) · `-32002` unknown session. Never a panic; a client that closes stdin
//! mid-turn cancels the turn, which stores its results and marks the session interrupted; a
//! permission question it left unanswered is not run, and its result says the client
//! disconnected (not that anyone declined).

pub mod bridge;
pub mod mode;
pub mod protocol;
pub mod rpc;
pub mod session;
pub mod slot;
pub mod surface;
pub mod updates;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::config::ProviderFlags;
use crate::runtime::Config;
use protocol::{
    AuthenticateParams, CancelRequestParams, EVENTS_METHOD, EventsParams, EventsResult,
    Implementation, InitializeParams, InitializeResult, ListSessionsParams, ListSessionsResult,
    NewSessionParams, NewSessionResult, OpenSessionParams, OpenSessionResult, PROTOCOL_VERSION,
    PromptParams, SessionRef, SetModeParams, SetModelParams,
};
use rpc::{Incoming, Responder, RpcError, Ticket, Wire};

/// What the dispatcher needs from the runtime side; `bridge::Bridge` is the one implementation.
/// Every method returns quickly except [`Backend::load_session`] (it replays) and
/// [`Backend::close_session`] / [`Backend::shutdown`] (they wait for a cancelled turn).
pub trait Backend {
    /// Opens a new session in workspace `cwd` (absolute, checked by the caller).
    fn new_session(
        &mut self,
        cwd: &Path,
        mcp_servers: &[Value],
    ) -> Result<NewSessionResult, RpcError>;
    /// Opens stored session `id`; with `replay` its conversation is sent as updates first.
    fn load_session(
        &mut self,
        id: &str,
        cwd: &Path,
        mcp_servers: &[Value],
        replay: bool,
    ) -> Result<OpenSessionResult, RpcError>;
    /// One page of stored sessions.
    fn list_sessions(
        &mut self,
        cwd: Option<&Path>,
        cursor: Option<&str>,
    ) -> Result<ListSessionsResult, RpcError>;
    /// Cancels a running turn, waits for its response, frees the session.
    fn close_session(&mut self, id: &str) -> Result<(), RpcError>;
    /// Sets the session's mode (and stores it with the session).
    fn set_mode(&mut self, id: &str, mode: &str) -> Result<(), RpcError>;
    /// Switches the session's model (a declared boundary); waits until it is recorded.
    fn set_model(&mut self, id: &str, model: &str) -> Result<(), RpcError>;
    /// Sets a config option (the reasoning effort) of the session; the options as they are now.
    fn set_config_option(
        &mut self,
        id: &str,
        config_id: &str,
        value: &str,
    ) -> Result<Vec<Value>, RpcError>;
    /// Starts a turn (or a slash op) for `text`, cancelling one that runs; Ok means the backend
    /// answers through `reply`, exactly once, after the turn's last update.
    fn prompt(&mut self, reply: Responder, id: &str, text: String) -> Result<(), RpcError>;
    /// Cancels the running turn of session `id` and the prompts waiting behind it (nothing
    /// when idle).
    fn cancel(&mut self, id: &str);
    /// Ok when a provider is configured (flags, environment or config file), else why not.
    fn provider_ready(&mut self) -> Result<(), String>;
    /// The events of a session after a `seq`.
    fn events(&mut self, p: &EventsParams) -> Result<EventsResult, RpcError>;
    /// Forks stored session `id` at its end (`tern fork`) and opens the fork without a
    /// replay; returns its id and open result. Not offered by default.
    fn fork_session(
        &mut self,
        _id: &str,
        _cwd: &Path,
        _mcp_servers: &[Value],
    ) -> Result<(String, OpenSessionResult), RpcError> {
        Err(RpcError::new(
            rpc::METHOD_NOT_FOUND,
            "method not found: session/fork".to_string(),
        ))
    }
    /// Steers `text` into the running turn of a session (`_tern/steer`).
    fn steer(&mut self, p: &protocol::SteerParams) -> Result<Value, RpcError>;
    /// Called after the response that opened session `id` was sent.
    fn opened(&mut self, id: &str);
    /// stdin closed or a signal came: cancel every turn and wait for them.
    fn shutdown(&mut self);
}

/// `tern acp`'s settings, from its flags.
#[derive(Debug, Clone)]
pub struct AcpOptions {
    /// The environment snapshot `main` took.
    pub env: crate::config::Env,
    /// Provider flags.
    pub flags: ProviderFlags,
    /// Runtime settings; `approval` is the initial mode.
    pub config: Config,
    /// `--state-dir` / TERN_STATE_DIR, absolute.
    pub state_dir: Option<PathBuf>,
    /// Provider idle-read timeout.
    pub idle_timeout: Duration,
    /// The process's cancel token, process groups and leave flag (set by `main`'s handlers).
    pub process: crate::launcher::Process,
    /// The config file's `models` list, offered by `session/set_model`.
    pub models: Vec<String>,
}

/// Runs `tern acp` until stdin closes or SIGTERM / SIGINT / SIGHUP; returns the exit code (0, or
/// 1 when the protocol stdout could not be set up).
pub fn run(opts: AcpOptions) -> i32 {
    let out = match protocol_stdout() {
        Ok(f) => f,
        Err(e) => {
            crate::errln!("tern acp: could not set up stdout: {e}");
            return 1;
        }
    };
    let wire = Arc::new(Wire::new(Box::new(out)));
    let rx = rpc::spawn_reader(
        std::io::BufReader::with_capacity(64 * 1024, std::io::stdin()),
        rpc::MAX_LINE_BYTES,
    );
    let term = opts.process.term.clone();
    let mut backend = bridge::Bridge::new(
        wire.clone(),
        bridge::Settings {
            env: opts.env,
            flags: opts.flags,
            config: opts.config,
            state_dir: opts.state_dir,
            idle_timeout: opts.idle_timeout,
            process: opts.process,
            models: opts.models,
        },
    );
    serve(&wire, &rx, &mut backend, &term);
    0
}

/// Moves the process's stdout to a new close-on-exec descriptor (returned, for the protocol) and
/// points descriptor 1 at stderr, so nothing but protocol lines can reach the client: not a
/// stray print, not a child process (the bash tool's commands get pipes of their own).
fn protocol_stdout() -> std::io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    // SAFETY: F_DUPFD_CLOEXEC duplicates descriptor 1 onto a fresh descriptor ≥ 3; no memory is
    // involved.
    let fd = unsafe { libc::fcntl(libc::STDOUT_FILENO, libc::F_DUPFD_CLOEXEC, 3) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created above and is owned by nothing else.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    // SAFETY: dup2 replaces descriptor 1 with a copy of descriptor 2; both are open.
    if unsafe { libc::dup2(libc::STDERR_FILENO, libc::STDOUT_FILENO) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

/// Reads messages from `rx` and answers them until EOF or `term`, then shuts `backend` down.
pub fn serve(
    wire: &Arc<Wire>,
    rx: &Receiver<Incoming>,
    backend: &mut dyn Backend,
    term: &AtomicBool,
) {
    let mut d = Dispatcher {
        initialized: false,
        prompts: Vec::new(),
    };
    loop {
        if term.load(Ordering::SeqCst) {
            crate::errln!("tern acp: signal received; cancelling running turns");
            break;
        }
        let msg = match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        match msg {
            Incoming::Eof => break,
            Incoming::Request { id, method, params } => {
                match d.request(wire, &id, &method, params, backend) {
                    Reply::Now(result, opened) => {
                        wire.respond(&id, result);
                        if let Some(sid) = opened {
                            backend.opened(&sid);
                        }
                    }
                    Reply::Later => {}
                    Reply::Error(e) => {
                        wire.respond_error(&id, &e);
                    }
                }
            }
            Incoming::Notification { method, params } => d.notification(&method, params, backend),
            Incoming::Response { id, outcome } => {
                if !wire.resolve(&id, outcome) {
                    crate::errln!("tern acp: an answer to no pending request (id {id}); ignored");
                }
            }
            Incoming::Invalid { id, error } => {
                wire.respond_error(&id, &error);
            }
            Incoming::TooLong(n) => {
                wire.respond_error(
                    &Value::Null,
                    &RpcError::invalid(format!(
                        "a message of {n} bytes is longer than the {} MiB limit; it was skipped",
                        rpc::MAX_LINE_BYTES >> 20
                    )),
                );
            }
        }
    }
    backend.shutdown();
}

/// How a request is answered.
enum Reply {
    /// Now, with this result; `Some(id)` when it opened session `id`.
    Now(Value, Option<String>),
    /// By the backend, later (a prompt).
    Later,
    /// Now, with this error.
    Error(RpcError),
}

struct Dispatcher {
    initialized: bool,
    /// The prompts answered later: their tickets and sessions (for `$/cancel_request`).
    prompts: Vec<(Ticket, String)>,
}

/// `params` as `T`; a missing `params` reads as `{}` (every field then needs a default).
fn parse<T: DeserializeOwned>(method: &str, params: Value) -> Result<T, RpcError> {
    let params = if params.is_null() { json!({}) } else { params };
    serde_json::from_value(params).map_err(|e| RpcError {
        code: rpc::INVALID_PARAMS,
        message: format!("invalid params for {method}"),
        data: Some(json!(e.to_string())),
    })
}

/// `cwd` as an absolute path (ACP v1, session setup: "Working Directory" MUST be absolute).
fn absolute(cwd: &str) -> Result<&Path, RpcError> {
    let p = Path::new(cwd);
    if p.is_absolute() {
        Ok(p)
    } else {
        Err(RpcError::params(format!(
            "cwd must be an absolute path, not {cwd:?}"
        )))
    }
}

fn no_extra_roots(dirs: &[String]) -> Result<(), RpcError> {
    if dirs.is_empty() {
        Ok(())
    } else {
        Err(RpcError::params(
            "additionalDirectories is not offered (sessionCapabilities.additionalDirectories is absent)",
        ))
    }
}

fn value(r: impl serde::Serialize) -> Value {
    serde_json::to_value(r).unwrap_or(Value::Null)
}

/// `session/new`, `session/load`, `session/resume`, `session/fork`: a cwd that is absolute and
/// no other roots; the session the reply names.
fn open_session(method: &str, params: Value, backend: &mut dyn Backend) -> Result<Reply, RpcError> {
    if method == "session/new" {
        let p: NewSessionParams = parse(method, params)?;
        let cwd = absolute(&p.cwd)?;
        no_extra_roots(&p.additional_directories)?;
        let r = backend.new_session(cwd, &p.mcp_servers)?;
        let sid = r.session_id.clone();
        return Ok(Reply::Now(value(r), Some(sid)));
    }
    let p: OpenSessionParams = parse(method, params)?;
    let cwd = absolute(&p.cwd)?;
    no_extra_roots(&p.additional_directories)?;
    if method == "session/fork" {
        let (sid, r) = backend.fork_session(&p.session_id, cwd, &p.mcp_servers)?;
        let mut v = value(r);
        if let Value::Object(m) = &mut v {
            m.insert("sessionId".into(), Value::String(sid.clone()));
        }
        return Ok(Reply::Now(v, Some(sid)));
    }
    let replay = method == "session/load";
    let r = backend.load_session(&p.session_id, cwd, &p.mcp_servers, replay)?;
    Ok(Reply::Now(value(r), Some(p.session_id)))
}

/// `authenticate`: the method runs in the client's terminal (`tern setup`); here it only says
/// whether that was done.
fn authenticate(params: Value, backend: &mut dyn Backend) -> Result<Reply, RpcError> {
    let p: AuthenticateParams = parse("authenticate", params)?;
    if p.method_id != protocol::SETUP_METHOD {
        return Err(RpcError::params(format!(
            "unknown auth method {:?}: tern offers {:?}",
            p.method_id,
            protocol::SETUP_METHOD
        )));
    }
    backend.provider_ready().map_err(|why| RpcError {
        code: rpc::AUTH_REQUIRED,
        message: format!("no model provider is set up: run `tern setup` in a terminal ({why})"),
        data: None,
    })?;
    Ok(Reply::Now(json!({}), None))
}

impl Dispatcher {
    fn request(
        &mut self,
        wire: &Arc<Wire>,
        id: &Value,
        method: &str,
        params: Value,
        backend: &mut dyn Backend,
    ) -> Reply {
        match self.try_request(wire, id, method, params, backend) {
            Ok(r) => r,
            Err(e) => Reply::Error(e),
        }
    }

    fn try_request(
        &mut self,
        wire: &Arc<Wire>,
        id: &Value,
        method: &str,
        params: Value,
        backend: &mut dyn Backend,
    ) -> Result<Reply, RpcError> {
        if method == "initialize" {
            return self.initialize(params);
        }
        if !self.initialized {
            return Err(RpcError::invalid(
                "the connection is not initialized: call initialize first",
            ));
        }
        match method {
            "session/new" | "session/load" | "session/resume" | "session/fork" => {
                open_session(method, params, backend)
            }
            "session/list" => {
                let p: ListSessionsParams = parse(method, params)?;
                let cwd = p.cwd.as_deref().map(absolute).transpose()?;
                Ok(Reply::Now(
                    value(backend.list_sessions(cwd, p.cursor.as_deref())?),
                    None,
                ))
            }
            "session/close" => {
                let p: SessionRef = parse(method, params)?;
                backend.close_session(&p.session_id)?;
                Ok(Reply::Now(json!({}), None))
            }
            "session/set_mode" => {
                let p: SetModeParams = parse(method, params)?;
                backend.set_mode(&p.session_id, &p.mode_id)?;
                Ok(Reply::Now(json!({}), None))
            }
            "session/set_model" => {
                let p: SetModelParams = parse(method, params)?;
                backend.set_model(&p.session_id, &p.model_id)?;
                Ok(Reply::Now(json!({}), None))
            }
            "session/set_config_option" => {
                let p: protocol::SetConfigOptionParams = parse(method, params)?;
                let Some(v) = p.value.as_str() else {
                    return Err(RpcError::params(format!(
                        "{}: the value is a select option's id (a string), got {}",
                        p.config_id, p.value
                    )));
                };
                let options = backend.set_config_option(&p.session_id, &p.config_id, v)?;
                Ok(Reply::Now(json!({"configOptions": options}), None))
            }
            "session/prompt" => {
                let p: PromptParams = parse(method, params)?;
                let text = protocol::prompt_text(&p.prompt).map_err(RpcError::params)?;
                let reply = Responder::new(wire.clone(), id.clone());
                let ticket = reply.ticket();
                backend.prompt(reply, &p.session_id, text)?;
                self.prompts.retain(|(t, _)| t.is_open());
                self.prompts.push((ticket, p.session_id));
                Ok(Reply::Later)
            }
            // A notification sent as a request: do it, and answer, as JSON-RPC requires.
            "session/cancel" => {
                let p: SessionRef = parse(method, params)?;
                backend.cancel(&p.session_id);
                Ok(Reply::Now(Value::Null, None))
            }
            m if m == EVENTS_METHOD => {
                let p: EventsParams = parse(method, params)?;
                Ok(Reply::Now(value(backend.events(&p)?), None))
            }
            m if m == protocol::STEER_METHOD => {
                let p: protocol::SteerParams = parse(method, params)?;
                Ok(Reply::Now(backend.steer(&p)?, None))
            }
            "authenticate" => authenticate(params, backend),
            _ => Err(RpcError::new(
                rpc::METHOD_NOT_FOUND,
                format!("method not found: {method}"),
            )),
        }
    }

    /// `initialize`: tern's capabilities, and its auth method for clients that can run it.
    fn initialize(&mut self, params: Value) -> Result<Reply, RpcError> {
        let p: InitializeParams = parse("initialize", params)?;
        if let Some(c) = &p.client_info {
            crate::errln!(
                "tern acp: client {} {} (protocol version {})",
                c.name,
                c.version,
                p.protocol_version
            );
        }
        self.initialized = true;
        // ACP v1, initialization: "If the Agent supports the requested version, it MUST
        // respond with the same version. Otherwise, […] the latest version it supports."
        // tern supports exactly one.
        Ok(Reply::Now(
            value(InitializeResult {
                protocol_version: PROTOCOL_VERSION,
                agent_capabilities: protocol::agent_capabilities(),
                auth_methods: protocol::auth_methods(p.terminal_auth()),
                agent_info: Implementation {
                    name: "tern".into(),
                    title: Some("tern".into()),
                    version: env!("CARGO_PKG_VERSION").into(),
                },
            }),
            None,
        ))
    }

    fn notification(&mut self, method: &str, params: Value, backend: &mut dyn Backend) {
        match method {
            "session/cancel" => match parse::<SessionRef>(method, params) {
                Ok(p) => backend.cancel(&p.session_id),
                Err(e) => crate::errln!("tern acp: session/cancel ignored: {}", e.message),
            },
            "$/cancel_request" => match parse::<CancelRequestParams>(method, params) {
                Ok(p) => {
                    let found = self
                        .prompts
                        .iter()
                        .find(|(t, _)| t.is_open_for(&p.request_id))
                        .map(|(_, sid)| sid.clone());
                    if let Some(sid) = found {
                        backend.cancel(&sid);
                    }
                }
                Err(e) => crate::errln!("tern acp: $/cancel_request ignored: {}", e.message),
            },
            // ACP v1, extensibility: unrecognized notifications SHOULD be ignored.
            other => crate::errln!("tern acp: notification {other} ignored"),
        }
    }
}
