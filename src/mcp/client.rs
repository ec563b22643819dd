//! One server's client: starts the connection, agrees on the protocol (MCP 2026-07-28's
//! `server/discover` first, then 2025-11-25's `initialize`, or the other way round once a server
//! is known to speak the older one), lists tools across pages and calls them. A stdio server
//! that died is started again once per client, with a note; a second death is final.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::config::{Server, Transport};
use super::rpc::{self, Agreed, Era, Tool};
use super::transport::{Fault, Hints, HttpLink, Link, Outcome, Pending, StdioLink};

/// Pages of `tools/list` followed at most (a server whose cursors never end stops here).
const MAX_PAGES: usize = 100;

/// Why the MCP room could not do what it was asked (`tern mcp` exits 2): one line each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpError {
    /// A server failed, timed out or could not start (the line names it).
    Server(String),
    /// An answer is not what the protocol says (MCP 2025-11-25 / 2026-07-28: a missing
    /// `protocolVersion`, a `tools` that is not a list, no version both speak).
    Protocol(String),
    /// A server's entry in a config file, or a `${VAR}` in it, cannot be used.
    Config(String),
    /// The stdio server's process could not be started.
    Start(String),
}

impl std::fmt::Display for McpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            McpError::Server(why)
            | McpError::Protocol(why)
            | McpError::Config(why)
            | McpError::Start(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for McpError {}

/// The line, for a reply or a receipt.
impl From<McpError> for String {
    fn from(e: McpError) -> String {
        e.to_string()
    }
}

/// A client's settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long starting a server and agreeing on the protocol may take (`MCP_TIMEOUT`).
    pub startup: Duration,
    /// How long one request may take (`MCP_TOOL_TIMEOUT`).
    pub request: Duration,
    /// Where a stdio server runs (the workspace).
    pub cwd: PathBuf,
    /// The folder of the servers' stderr logs (`<session>/mcp/`); None: discarded.
    pub logs: Option<PathBuf>,
    /// The registry server process groups go in (killed at tern's emergency exit).
    pub groups: Option<Arc<crate::procs::ProcessGroups>>,
    /// The jails stdio servers that run workspace code start in (a session whose commands
    /// run in a jail; issue 42). None: every server runs as tern's own child, and one whose
    /// entry says `"jail": true` is refused.
    pub jails: Option<Arc<crate::commands::ServerJails>>,
}

impl Options {
    /// 30 s to start, 120 s per request, or what `MCP_TIMEOUT` and `MCP_TOOL_TIMEOUT` say (in
    /// milliseconds, Claude Code's variables).
    pub fn new(cwd: PathBuf, vars: &super::config::Vars) -> Options {
        let ms = |k: &str, d: u64| {
            vars.get(k)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|v| *v > 0)
                .map_or(Duration::from_secs(d), Duration::from_millis)
        };
        Options {
            startup: ms("MCP_TIMEOUT", 30),
            request: ms("MCP_TOOL_TIMEOUT", 120),
            cwd,
            logs: None,
            groups: None,
            jails: None,
        }
    }
}

/// A connection to one server, opened at its first request.
pub struct Client {
    server: Server,
    opts: Options,
    link: Option<Box<dyn Link>>,
    agreed: Option<Agreed>,
    /// The era to try first.
    prefer: Era,
    next_id: u64,
    /// Times the server was started again after it died.
    restarts: u32,
    /// What is worth telling the caller (a restart).
    notes: Vec<String>,
    /// The hashes of the workspace files its command names, as the session found them: checked
    /// again each time the server starts.
    pinned: std::collections::BTreeMap<String, Option<String>>,
    /// The last request timed out and the server was stopped: started again at the next one,
    /// with a note.
    after_timeout: bool,
}

/// A request sent, its answer on its way (see [`Client::send_call`]).
pub struct Sent {
    pending: Box<dyn Pending>,
    method: &'static str,
    deadline: Instant,
}

impl Sent {
    /// Waits for the answer (the client not held): until the request's time limit, or until
    /// `gone()` says the caller went away (the server is then told to cancel). Returns the
    /// method and the outcome, for [`Client::settle`].
    pub fn wait(self, gone: &dyn Fn() -> bool) -> (&'static str, Outcome) {
        (self.method, self.pending.wait(self.deadline, gone))
    }
}

impl Client {
    /// A client of `server` (nothing starts until the first request).
    pub fn new(server: Server, opts: Options) -> Client {
        Client {
            server,
            opts,
            link: None,
            agreed: None,
            prefer: Era::Stateless,
            next_id: 1,
            restarts: 0,
            notes: Vec::new(),
            pinned: std::collections::BTreeMap::new(),
            after_timeout: false,
        }
    }

    /// Starts the server only while the workspace files its command names still hash as in
    /// `pinned` (path → SHA-256; None: absent then).
    pub fn pinned(mut self, pinned: std::collections::BTreeMap<String, Option<String>>) -> Client {
        self.pinned = pinned;
        self
    }

    /// Why the server must not start now: a workspace file its command names changed since the
    /// session opened (a command may have written it). None: unchanged.
    fn changed_since_trusted(&self) -> Option<String> {
        let now = super::config::covered_hashes(std::slice::from_ref(&self.server), &self.opts.cwd);
        now.iter()
            .find(|(p, sha)| self.pinned.get(*p).is_some_and(|was| was != *sha) || !self.pinned.contains_key(*p))
            .map(|(p, _)| {
                format!(
                    "{p} changed since the session opened (a command may have written it), so the server is not started; read it, then run `tern mcp trust` (a project server) and start a new session"
                )
            })
    }

    /// The server.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// The protocol agreed with it (None before the first request).
    pub fn agreed(&self) -> Option<&Agreed> {
        self.agreed.as_ref()
    }

    /// The notes since the last call (a restart), taken.
    pub fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    /// The server's stderr log, for a stdio server in a session.
    pub fn log_path(&self) -> Option<PathBuf> {
        match self.server.transport {
            Transport::Stdio { .. } => self
                .opts
                .logs
                .as_ref()
                .map(|d| d.join(format!("{}.log", self.server.name))),
            Transport::Http { .. } => None,
        }
    }

    /// How long starting it may take: its entry's `startup_timeout_sec`, else `MCP_TIMEOUT`.
    fn startup(&self) -> Duration {
        self.server.timeouts.startup.unwrap_or(self.opts.startup)
    }

    /// How long one request may take: its entry's `tool_timeout_sec`, else `MCP_TOOL_TIMEOUT`.
    fn tool_timeout(&self) -> Duration {
        self.server.timeouts.tool.unwrap_or(self.opts.request)
    }

    fn fail(&self, what: impl std::fmt::Display) -> McpError {
        McpError::Server(format!("MCP server {}: {what}", self.server.name))
    }

    fn start_link(&self) -> Result<Box<dyn Link>, McpError> {
        if let Some(why) = self.changed_since_trusted() {
            return Err(McpError::Start(format!(
                "MCP server {}: {why}",
                self.server.name
            )));
        }
        match &self.server.transport {
            Transport::Stdio { command, args, env } => StdioLink::start(
                command,
                args,
                env,
                &self.opts.cwd,
                self.log_path().as_deref(),
                self.opts.groups.as_ref(),
                self.place()?,
            )
            .map(|l| Box::new(l) as Box<dyn Link>)
            .map_err(|e| self.fail(&e)),
            Transport::Http { url, headers } => Ok(Box::new(HttpLink::new(url, headers))),
        }
    }

    /// Where this stdio server runs: in a jail of its own when its entry asks (`"jail": true`)
    /// or, unless it says `"jail": false`, when it runs workspace code and the session has
    /// jails. Errors: it asks for a jail and there is none.
    fn place(&self) -> Result<super::transport::Place<'_>, McpError> {
        let jails = self.opts.jails.as_deref();
        let jailed = match self.server.jail {
            Some(false) => false,
            Some(true) => true,
            None => jails.is_some() && self.server.runs_workspace_code(&self.opts.cwd),
        };
        match (jailed, jails) {
            (false, _) => Ok(None),
            (true, Some(j)) => Ok(Some((j, self.server.name.as_str()))),
            (true, None) => Err(self.fail(
                "its entry asks to run in a jail (\"jail\": true) and this session has none (--sandbox danger-full-access, --no-jail, or `tern mcp` outside a session): not started",
            )),
        }
    }

    /// Opens the connection if it is not open (or the server died: started again once).
    fn open(&mut self) -> Result<(), McpError> {
        if let Some(link) = self.link.as_mut() {
            if link.alive() && self.agreed.is_some() {
                return Ok(());
            }
            link.close();
            self.link = None;
            let stdio = matches!(self.server.transport, Transport::Stdio { .. });
            if self.agreed.is_some() && stdio {
                if self.restarts >= 1 {
                    return Err(self.fail(format!(
                        "it stopped again; tern does not start it a third time in this session{}",
                        self.log_path()
                            .map(|p| format!(" (its log: {})", p.display()))
                            .unwrap_or_default()
                    )));
                }
                self.restarts += 1;
                self.notes.push(format!(
                    "MCP server {} had stopped; tern started it again (once per session)",
                    self.server.name
                ));
            }
            self.agreed = None;
        }
        if std::mem::take(&mut self.after_timeout) {
            self.notes.push(format!(
                "MCP server {} was stopped after a call it did not finish (past its time limit, or its caller went away); tern started it again",
                self.server.name
            ));
        }
        let deadline = Instant::now() + self.startup();
        self.link = Some(self.start_link()?);
        match self.handshake(deadline) {
            Ok(a) => {
                self.prefer = a.era;
                self.agreed = Some(a);
                Ok(())
            }
            Err(e) => {
                if let Some(mut l) = self.link.take() {
                    l.close();
                }
                Err(e)
            }
        }
    }

    /// Agrees on the protocol: the preferred era's handshake, then the other's when the server
    /// does not know the first.
    fn handshake(&mut self, deadline: Instant) -> Result<Agreed, McpError> {
        let first = self.prefer;
        let mut last = String::new();
        let mut gone = 0;
        let mut deadline = deadline;
        let stdio = matches!(self.server.transport, Transport::Stdio { .. });
        for era in [first, first.other()] {
            match self.try_era(era, deadline) {
                Ok(Some(a)) => return Ok(a),
                Ok(None) => {}
                // Silent to `server/discover` for the whole start timeout: a server of the
                // older era that ignores a request before `initialize` (a slow start answers
                // before the limit, so it is never asked twice on one pipe). Started again and
                // asked `initialize` first, with the limit anew.
                Err(Fault::Timeout) if stdio && era == Era::Stateless && era == first => {
                    if let Some(mut l) = self.link.take() {
                        l.close();
                    }
                    self.notes.push(format!(
                        "MCP server {} said nothing to server/discover in {} s: tern started it again and asked initialize (MCP 2025-11-25)",
                        self.server.name,
                        self.startup().as_secs_f64().round()
                    ));
                    deadline = Instant::now() + self.startup();
                    self.link = Some(self.start_link()?);
                    last = "no answer".into();
                }
                Err(Fault::Timeout) if Instant::now() >= deadline => {
                    return Err(self.fail(format!(
                        "no answer to its start-up in {} s (MCP_TIMEOUT, or its entry's startup_timeout_sec, sets the limit){}",
                        self.startup().as_secs_f64().round(),
                        self.log_path()
                            .map(|p| format!("; its log: {}", p.display()))
                            .unwrap_or_default()
                    )));
                }
                Err(Fault::Timeout) => last = "no answer".into(),
                // A server of the other era may have left at a request it did not know: start
                // it again for the other handshake.
                Err(Fault::Gone(why))
                    if matches!(self.server.transport, Transport::Stdio { .. }) =>
                {
                    last = why;
                    gone += 1;
                    if let Some(mut l) = self.link.take() {
                        l.close();
                    }
                    if era == first {
                        self.link = Some(self.start_link()?);
                    }
                }
                Err(Fault::Http(status, _)) if (400..500).contains(&status) && era == first => {
                    last = format!("HTTP {status}");
                }
                Err(f) => return Err(self.fail(f)),
            }
        }
        if gone == 2 {
            // Gone at both handshakes: it did not start, whatever it was asked.
            return Err(self.fail(format!("it did not start: {last}")));
        }
        Err(self.fail(format!(
            "it answered neither server/discover ({}) nor initialize ({}): {last}",
            rpc::STATELESS,
            rpc::STATEFUL
        )))
    }

    /// One era's handshake. Ok(None): the server does not speak it.
    fn try_era(&mut self, era: Era, deadline: Instant) -> Result<Option<Agreed>, Fault> {
        match era {
            Era::Stateless => {
                // The server's first answer is waited for up to the start timeout: a slow
                // start is not a "no" (issue 43).
                let until = deadline;
                // A server that refuses the version it is asked in may name the ones it speaks:
                // asked again once when it names ours.
                for _ in 0..2 {
                    let r = self.raw("server/discover", None, None, Some(rpc::STATELESS), until)?;
                    match r {
                        Ok(result) => {
                            return rpc::discovered(&result).map_err(|e| Fault::Protocol(e.into()));
                        }
                        Err(e)
                            if e.code == rpc::UNSUPPORTED_VERSION
                                && rpc::supported(&e).iter().any(|v| v == rpc::STATELESS) => {}
                        Err(e) if rpc::try_other(&e) => return Ok(None),
                        Err(e) => return Err(Fault::Protocol(format!("server/discover: {e}"))),
                    }
                }
                Ok(None)
            }
            Era::Stateful => {
                let r = self.raw(
                    "initialize",
                    Some(rpc::initialize_params()),
                    None,
                    None,
                    deadline,
                )?;
                let agreed = match r {
                    Ok(result) => {
                        rpc::initialized(&result).map_err(|e| Fault::Protocol(e.into()))?
                    }
                    Err(e) if rpc::try_other(&e) => return Ok(None),
                    Err(e) => return Err(Fault::Protocol(format!("initialize: {e}"))),
                };
                let hints = Hints {
                    method: "notifications/initialized",
                    name: None,
                    version: Some(&agreed.version),
                    params: &[],
                };
                if let Some(link) = self.link.as_mut() {
                    link.notify(
                        &rpc::notification("notifications/initialized"),
                        &hints,
                        deadline,
                    )?;
                }
                Ok(Some(agreed))
            }
        }
    }

    /// Sends one request on the open link, `_meta` carrying `version` (the stateless one when
    /// none is agreed yet).
    fn raw(
        &mut self,
        method: &str,
        params: Option<Value>,
        name: Option<&str>,
        header_version: Option<&str>,
        deadline: Instant,
    ) -> Result<Result<Value, rpc::RpcError>, Fault> {
        let id = self.next_id;
        self.next_id += 1;
        let meta_version = self
            .agreed
            .as_ref()
            .map_or(rpc::STATELESS, |a| a.version.as_str())
            .to_string();
        let meta_version = header_version.unwrap_or(&meta_version).to_string();
        let req = rpc::request(id, method, params, &meta_version);
        let hints = Hints {
            method,
            name,
            version: header_version,
            params: &[],
        };
        let Some(link) = self.link.as_mut() else {
            return Err(Fault::Gone("not connected".into()));
        };
        link.exchange(&req, id, &hints, deadline)
    }

    /// One request after the handshake, waited for here. Errors: the server failed to answer,
    /// answered an error, or a result tern cannot take.
    fn request(
        &mut self,
        method: &'static str,
        params: Value,
        name: Option<&str>,
    ) -> Result<Value, McpError> {
        let sent = self.send(method, params, name, &[])?;
        let outcome = sent.pending.wait(sent.deadline, &|| false);
        self.settle(method, outcome)
    }

    /// Sends one request after the handshake (the server started and agreed with first); its
    /// answer is waited for with [`Sent::wait`] without this client, so several are in flight
    /// at once, then given to [`Client::settle`].
    ///
    /// Errors: the server could not be started, or is gone.
    fn send(
        &mut self,
        method: &'static str,
        params: Value,
        name: Option<&str>,
        headers: &[(String, String)],
    ) -> Result<Sent, McpError> {
        self.open()?;
        let version = self.agreed.as_ref().map(|a| a.version.clone());
        let deadline = Instant::now() + self.tool_timeout();
        let id = self.next_id;
        self.next_id += 1;
        let version_text = version
            .clone()
            .unwrap_or_else(|| rpc::STATELESS.to_string());
        let req = rpc::request(id, method, Some(params), &version_text);
        let hints = Hints {
            method,
            name,
            version: version.as_deref(),
            params: headers,
        };
        let sent = match self.link.as_mut() {
            Some(link) => link.send(&req, id, &hints),
            None => Err(Fault::Gone("not connected".into())),
        };
        match sent {
            Ok(pending) => Ok(Sent {
                pending,
                method,
                deadline,
            }),
            Err(f) => Err(self.fault(method, f)),
        }
    }

    /// Sends `tools/call` of `tool` with `arguments` (its answer waited for with `Sent::wait`, then given to `Client::settle`); on HTTP the
    /// arguments the tool's schema marks `x-mcp-header` go as `Mcp-Param-*` headers too
    /// (SEP-2243).
    ///
    /// Errors: [`McpError`].
    pub fn send_call(&mut self, tool: &Tool, arguments: Value) -> Result<Sent, McpError> {
        let marked = rpc::param_headers(&tool.input_schema).unwrap_or_default();
        let headers = rpc::param_header_pairs(&marked, &arguments);
        self.send(
            "tools/call",
            json!({"name": tool.name, "arguments": arguments}),
            Some(&tool.name),
            &headers,
        )
    }

    /// What the answer to a request sent means: its result, or the error to say.
    ///
    /// Errors: the server answered an error, a result tern cannot take, or no answer.
    pub fn settle(&mut self, method: &str, outcome: Outcome) -> Result<Value, McpError> {
        match outcome {
            Ok(Ok(result)) => {
                rpc::complete(&result).map_err(|e| self.fail(&e))?;
                Ok(result)
            }
            Ok(Err(e)) => Err(self.fail(format!("{method}: {e}"))),
            Err(f) => Err(self.fault(method, f)),
        }
    }

    /// The error of a request that got no answer, the connection dealt with: closed after a
    /// fault (the next request starts it again), but not under requests still in flight on it;
    /// after a timeout (the server was told to cancel) it is started again at the next request
    /// with a note, never counted as a crash.
    fn fault(&mut self, method: &str, f: Fault) -> McpError {
        let why = match &f {
            Fault::Timeout => format!(
                "{method}: no answer in {} s (MCP_TOOL_TIMEOUT, or its entry's tool_timeout_sec, sets the limit); the server was told to cancel it",
                self.tool_timeout().as_secs_f64().round()
            ),
            Fault::Gone(w) => match self.link.as_mut() {
                Some(l) => format!("{method}: {}", l.why_gone(w)),
                None => format!("{method}: {w}"),
            },
            other => format!("{method}: {other}"),
        };
        let busy = self.link.as_ref().is_some_and(|l| l.in_flight() > 0);
        match f {
            Fault::Http(..) => {}
            Fault::Timeout | Fault::Cancelled if busy => {}
            // A server left working on a call nobody waits for (one that ignores the cancel)
            // would hold up the next: stopped, and started again at the next request.
            Fault::Timeout | Fault::Cancelled => {
                if let Some(mut l) = self.link.take() {
                    l.close();
                }
                self.agreed = None;
                self.after_timeout = true;
            }
            _ if busy => {}
            _ => {
                if let Some(l) = self.link.as_mut() {
                    l.close();
                }
            }
        }
        self.fail(&why)
    }

    /// Every tool the server lists, following `nextCursor` (at most 100 pages).
    ///
    /// Errors: [`McpError`].
    pub fn tools(&mut self) -> Result<Vec<Tool>, McpError> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let result = self.request("tools/list", params, None)?;
            let (tools, left_out, next) =
                rpc::tools_page_checked(&result).map_err(|e| self.fail(&e))?;
            for (name, why) in left_out {
                self.notes.push(format!(
                    "MCP server {}: tool {name} left out: {why} (MCP 2026-07-28, x-mcp-header)",
                    self.server.name
                ));
            }
            all.extend(tools);
            match next {
                Some(n) if Some(&n) != cursor.as_ref() => cursor = Some(n),
                _ => return Ok(all),
            }
        }
        Err(self.fail(format!("tools/list still had more pages after {MAX_PAGES}")))
    }

    /// Calls `tool` with `arguments`; the result as the server gave it (`isError` is the
    /// caller's to read).
    ///
    /// Errors: [`McpError`].
    pub fn call(&mut self, tool: &Tool, arguments: Value) -> Result<Value, McpError> {
        let sent = self.send_call(tool, arguments)?;
        let outcome = sent.pending.wait(sent.deadline, &|| false);
        self.settle("tools/call", outcome)
    }

    /// Ends the connection (a stdio server is stopped).
    pub fn close(&mut self) {
        if let Some(mut l) = self.link.take() {
            l.close();
        }
        self.agreed = None;
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.close();
    }
}
