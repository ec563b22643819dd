//! The two MCP transports (MCP 2025-11-25 and 2026-07-28, "Transports"): a server process on
//! stdio (one JSON-RPC message per line each way; its stderr to a log) and streamable HTTP (each
//! message POSTed; the answer is one JSON body or one SSE stream).
//!
//! Both are a [`Link`]: send a request and wait for its response until a deadline, answering the
//! server's own requests on the way (`ping`; the rest "method not found") and skipping its
//! notifications.

use super::McpError;
use std::io::{BufRead, Read, Write};
use std::io::{PipeReader, PipeWriter};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::rpc::{self, Incoming, RpcError};

/// Largest message read from a server, in bytes (a line on stdio, a body or an SSE event).
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;
/// Times a stream that ended without its answer is resumed (SEP-1699).
const MAX_RESUMES: usize = 5;
/// Bytes of a server's log quoted when it dies.
const LOG_TAIL_BYTES: u64 = 600;

/// What the headers of an HTTP request name (MCP 2026-07-28's `Mcp-Method`, `Mcp-Name`; the
/// protocol version once agreed).
#[derive(Debug, Clone, Copy)]
pub struct Hints<'a> {
    /// The JSON-RPC method.
    pub method: &'a str,
    /// The tool's name for `tools/call`.
    pub name: Option<&'a str>,
    /// The protocol version (`MCP-Protocol-Version`), once known.
    pub version: Option<&'a str>,
    /// The arguments a tool asks to see as `Mcp-Param-*` headers (SEP-2243), with their values.
    pub params: &'a [(String, String)],
}

/// Why an exchange got no answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// No answer before the deadline.
    Timeout,
    /// The server is gone (its process exited, its output closed, the connection failed):
    /// why, with the end of its log.
    Gone(String),
    /// It answered something that is not MCP (named).
    Protocol(String),
    /// An HTTP status with no JSON-RPC body: the status and a snippet of the body.
    Http(u16, String),
    /// The caller went away (its `tern mcp call` was killed, its turn cancelled): the server
    /// was told to stop.
    Cancelled,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Timeout => f.write_str("no answer in time"),
            Fault::Cancelled => f.write_str("cancelled: the caller went away"),
            Fault::Gone(why) | Fault::Protocol(why) => f.write_str(why),
            Fault::Http(status, body) if body.is_empty() => write!(f, "HTTP {status}"),
            Fault::Http(status, body) => write!(f, "HTTP {status}: {body}"),
        }
    }
}

/// An answer, or why there is none.
pub type Outcome = Result<Result<Value, RpcError>, Fault>;

/// A request sent, its answer on its way: waited for without holding the link, so several
/// requests are in flight on one connection at once (JSON-RPC 2.0: each has its own id and the
/// answers are routed by it).
pub trait Pending: Send {
    /// Waits for the answer until `deadline`; `gone()` is asked every 100 ms whether the caller
    /// went away. On a timeout or a caller gone, the server is told to stop
    /// (`notifications/cancelled` with the request's id: MCP 2025-11-25, "Cancellation").
    ///
    /// Errors: [`Fault`] ([`Fault::Cancelled`] when the caller went away).
    fn wait(self: Box<Self>, deadline: Instant, gone: &dyn Fn() -> bool) -> Outcome;
}

/// A connection to one server.
pub trait Link: Send {
    /// Sends request `req` (whose id is `id`) and returns the server's response to it.
    ///
    /// Errors: [`Fault`].
    fn exchange(
        &mut self,
        req: &Value,
        id: u64,
        hints: &Hints<'_>,
        deadline: Instant,
    ) -> Result<Result<Value, RpcError>, Fault>;
    /// Sends request `req` (whose id is `id`) and returns its answer on its way.
    ///
    /// Errors: [`Fault`] (the server is gone).
    fn send(&mut self, req: &Value, id: u64, hints: &Hints<'_>) -> Result<Box<dyn Pending>, Fault>;
    /// Why a server that stopped answering is gone, from `what`: with its exit status and the
    /// end of its log, when it has them.
    fn why_gone(&mut self, what: &str) -> String {
        what.to_string()
    }
    /// Requests in flight now (sent, not yet answered or given up).
    fn in_flight(&self) -> usize {
        0
    }
    /// Sends a notification.
    ///
    /// Errors: [`Fault`].
    fn notify(&mut self, msg: &Value, hints: &Hints<'_>, deadline: Instant) -> Result<(), Fault>;
    /// Whether the server is still there (a stdio server's process has not exited).
    fn alive(&mut self) -> bool;
    /// Ends the connection (a stdio server: stdin closed, then TERM and KILL to its group).
    fn close(&mut self);
}

/// One line a stdio server wrote.
enum Line {
    Message(Value),
    Bad(String),
    End,
}

/// Where the answers of a stdio server go: one waiter per request in flight, by id.
#[derive(Default)]
struct Router {
    waiting: std::collections::HashMap<u64, SyncSender<Outcome>>,
    /// Why the server's output ended (nothing more will be routed).
    ended: Option<Fault>,
}

impl Router {
    /// The output ended: every waiter gets `why`, and every later request.
    fn end(&mut self, why: Fault) {
        for (_, tx) in self.waiting.drain() {
            let _ = tx.try_send(Err(why.clone()));
        }
        self.ended = Some(why);
    }
}

/// The server's stdin, shared by the requests and the thread that answers its own requests.
type Input = Arc<Mutex<Option<PipeWriter>>>;

/// A stdio server's process: tern's own child, or one started in a jail of its own.
enum Proc {
    Host { child: Child, pgid: i32 },
    Jailed(crate::commands::JailedServer),
}

impl Proc {
    /// Its exit status once it exited (never blocks).
    fn try_wait(&mut self) -> Option<ExitStatus> {
        match self {
            Proc::Host { child, .. } => child.try_wait().ok().flatten(),
            Proc::Jailed(j) => j.try_wait(),
        }
    }

    /// Sends `sig` to its process group.
    fn signal(&self, sig: i32) {
        match self {
            Proc::Host { pgid, .. } => crate::child::signal_group(*pgid, sig),
            Proc::Jailed(j) => j.signal_group(sig),
        }
    }
}

/// Where a stdio server runs: `Some((jails, server))` in a jail of its own (issue 42).
pub type Place<'a> = Option<(&'a crate::commands::ServerJails, &'a str)>;

/// A server process speaking JSON-RPC on stdio.
pub struct StdioLink {
    proc: Proc,
    stdin: Input,
    router: Arc<Mutex<Router>>,
    log: Option<PathBuf>,
    _registered: Option<crate::procs::OwnedRegistration>,
    closed: bool,
}

/// Writes `msg` as one line to `stdin`. Errors: the input is closed.
fn write_line(stdin: &Input, msg: &Value) -> std::io::Result<()> {
    let mut line = msg.to_string();
    line.push('\n');
    let mut w = stdin.lock().unwrap_or_else(|p| p.into_inner());
    match w.as_mut() {
        Some(w) => w.write_all(line.as_bytes()).and_then(|()| w.flush()),
        None => Err(std::io::Error::other("closed")),
    }
}

/// The router of a stdio server's output: each answer to its request's waiter, the server's
/// own requests answered, its notifications skipped; at the end (or a line that is not
/// JSON-RPC) every waiter is told, and every later request.
fn route(lines: &Receiver<Line>, to: &Mutex<Router>, input: &Input) {
    for line in lines {
        let end = match line {
            Line::Message(v) => match rpc::classify(v) {
                Incoming::Response { id, outcome } => {
                    let waiter = id.as_u64().and_then(|id| {
                        to.lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .waiting
                            .remove(&id)
                    });
                    if let Some(w) = waiter {
                        let _ = w.try_send(Ok(outcome));
                    }
                    None
                }
                Incoming::Request { id, method } => {
                    let _ = write_line(input, &rpc::answer(id, &method));
                    None
                }
                Incoming::Notification => None,
                Incoming::Invalid(why) => Some(Fault::Protocol(why)),
            },
            Line::Bad(why) => Some(Fault::Protocol(why)),
            Line::End => Some(Fault::Gone("its output closed".into())),
        };
        if let Some(why) = end {
            to.lock().unwrap_or_else(|p| p.into_inner()).end(why);
            return;
        }
    }
    to.lock()
        .unwrap_or_else(|p| p.into_inner())
        .end(Fault::Gone("its output closed".into()));
}

/// A stdio request in flight.
struct StdioPending {
    id: u64,
    rx: Receiver<Outcome>,
    router: Arc<Mutex<Router>>,
    stdin: Input,
}

impl Pending for StdioPending {
    fn wait(self: Box<Self>, deadline: Instant, gone: &dyn Fn() -> bool) -> Outcome {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.give_up("the client's time limit passed");
                return Err(Fault::Timeout);
            }
            match self.rx.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok(outcome) => return outcome,
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Fault::Gone("its output closed".into()));
                }
                Err(RecvTimeoutError::Timeout) if gone() => {
                    self.give_up("the caller went away");
                    return Err(Fault::Cancelled);
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }
}

impl StdioPending {
    /// Stops waiting for the answer and tells the server to stop working on it.
    fn give_up(&self, reason: &str) {
        let was = self
            .router
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .waiting
            .remove(&self.id);
        if was.is_some() {
            let _ = write_line(&self.stdin, &rpc::cancelled(self.id, reason));
        }
    }
}

impl StdioLink {
    /// Starts `command args` in `cwd` with tern's environment plus `env`, in a process group of
    /// its own (registered in `groups`, so tern's emergency exit kills it), its stderr appended
    /// to `log` (None: discarded). With `place`, in the server's own jail instead
    /// ([`crate::commands::ServerJails::spawn`]: the jail's process group is registered there).
    ///
    /// Errors: the program could not start (named).
    pub fn start(
        command: &str,
        args: &[String],
        env: &[(String, String)],
        cwd: &Path,
        log: Option<&Path>,
        groups: Option<&std::sync::Arc<crate::procs::ProcessGroups>>,
        place: Place<'_>,
    ) -> Result<StdioLink, McpError> {
        let log_file = log.and_then(|p| {
            if let Some(dir) = p.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            crate::store::fsutil::open_append(p).ok()
        });
        let cant = |e: std::io::Error| McpError::Start(format!("could not start {command}: {e}"));
        let (proc, stdin, stdout, registered) = if let Some((jails, server)) = place {
            let (in_r, in_w) = std::io::pipe().map_err(cant)?;
            let (out_r, out_w) = std::io::pipe().map_err(cant)?;
            let null;
            let err_fd = match &log_file {
                Some(f) => f.as_raw_fd(),
                None => {
                    null = std::fs::File::create("/dev/null").map_err(cant)?;
                    null.as_raw_fd()
                }
            };
            let io = crate::commands::ServerIo {
                stdin: in_r.as_raw_fd(),
                stdout: out_w.as_raw_fd(),
                stderr: err_fd,
            };
            let j = jails
                .spawn(server, command, args, env, io)
                .map_err(|e| McpError::Start(format!("could not start {command}: {e}")))?;
            // Our copies of its ends: its output ends when it does.
            drop((in_r, out_w));
            (Proc::Jailed(j), in_w, out_r, None)
        } else {
            let mut cmd = Command::new(command);
            cmd.args(args)
                .envs(env.iter().map(|(k, v)| (k, v)))
                .current_dir(cwd)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(log_file.map_or_else(Stdio::null, Stdio::from));
            // Its own process group, so closing it kills what it started too. No PDEATHSIG:
            // that fires when the *thread* that started it ends, and servers outlive the call
            // that started them; a server whose tern died sees its stdin close.
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
            let mut child = cmd.spawn().map_err(cant)?;
            let pgid = i32::try_from(child.id()).unwrap_or(i32::MAX);
            let registered = groups.map(|g| crate::procs::ProcessGroups::register_owned(g, pgid));
            let (Some(i), Some(o)) = (child.stdin.take(), child.stdout.take()) else {
                return Err(McpError::Start(format!(
                    "could not read {command}'s output"
                )));
            };
            let (i, o) = (
                PipeWriter::from(OwnedFd::from(i)),
                PipeReader::from(OwnedFd::from(o)),
            );
            (Proc::Host { child, pgid }, i, o, registered)
        };
        let stdin: Input = Arc::new(Mutex::new(Some(stdin)));
        // Bounded: a server that floods notifications waits for tern rather than fill memory.
        let (tx, lines) = sync_channel::<Line>(64);
        let router = Arc::new(Mutex::new(Router::default()));
        let (to, input) = (router.clone(), stdin.clone());
        std::thread::spawn(move || route(&lines, &to, &input));
        std::thread::spawn(move || {
            let mut r = std::io::BufReader::new(stdout);
            loop {
                let mut buf = Vec::new();
                let n = (&mut r)
                    .take(MAX_MESSAGE_BYTES as u64 + 1)
                    .read_until(b'\n', &mut buf);
                let line = match n {
                    Ok(0) | Err(_) => Line::End,
                    Ok(_) if buf.len() > MAX_MESSAGE_BYTES => {
                        Line::Bad(format!("a message longer than {MAX_MESSAGE_BYTES} bytes"))
                    }
                    Ok(_) => {
                        let text = String::from_utf8_lossy(&buf);
                        let t = text.trim();
                        if t.is_empty() {
                            continue;
                        }
                        match serde_json::from_str::<Value>(t) {
                            Ok(v) => Line::Message(v),
                            Err(_) => Line::Bad(format!(
                                "a line that is not JSON: {}",
                                crate::text::cut(t, 120)
                            )),
                        }
                    }
                };
                let end = matches!(line, Line::End | Line::Bad(_));
                if tx.send(line).is_err() || end {
                    return;
                }
            }
        });
        Ok(StdioLink {
            proc,
            stdin,
            router,
            log: log.map(Path::to_path_buf),
            _registered: registered,
            closed: false,
        })
    }

    fn write(&mut self, msg: &Value) -> Result<(), Fault> {
        write_line(&self.stdin, msg)
            .map_err(|e| Fault::Gone(self.died(&format!("its input closed ({e})"))))
    }

    /// Why the server is gone: `what`, its exit status when it has one, the end of its log.
    fn died(&mut self, what: &str) -> String {
        // A moment for the exit status to be there after the output closed.
        let until = Instant::now() + Duration::from_millis(300);
        let mut status = None;
        while Instant::now() < until {
            if let Some(s) = self.proc.try_wait() {
                status = Some(s);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut why = match status {
            Some(s) => format!("the server exited ({s}): {what}"),
            None => format!("the server stopped answering: {what}"),
        };
        if let Some(tail) = self.log.as_deref().and_then(log_tail) {
            why.push_str(&format!("; its log ends: {tail}"));
        }
        why
    }
}

/// The last lines of a log, on one line.
fn log_tail(path: &Path) -> Option<String> {
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    let from = len.saturating_sub(LOG_TAIL_BYTES);
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(from)).ok()?;
    let mut b = Vec::new();
    f.read_to_end(&mut b).ok()?;
    let t = String::from_utf8_lossy(&b);
    let t = t.split_whitespace().collect::<Vec<_>>().join(" ");
    (!t.is_empty()).then_some(t)
}

impl Link for StdioLink {
    fn exchange(
        &mut self,
        req: &Value,
        id: u64,
        hints: &Hints<'_>,
        deadline: Instant,
    ) -> Result<Result<Value, RpcError>, Fault> {
        let pending = self.send(req, id, hints)?;
        match pending.wait(deadline, &|| false) {
            Err(Fault::Gone(why)) => Err(Fault::Gone(self.died(&why))),
            other => other,
        }
    }

    fn send(
        &mut self,
        req: &Value,
        id: u64,
        _hints: &Hints<'_>,
    ) -> Result<Box<dyn Pending>, Fault> {
        let (tx, rx) = sync_channel(1);
        {
            let mut r = self.router.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(why) = r.ended.clone() {
                drop(r);
                return Err(match why {
                    Fault::Gone(w) => Fault::Gone(self.died(&w)),
                    other => other,
                });
            }
            r.waiting.insert(id, tx);
        }
        if let Err(f) = self.write(req) {
            self.router
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .waiting
                .remove(&id);
            return Err(f);
        }
        Ok(Box::new(StdioPending {
            id,
            rx,
            router: self.router.clone(),
            stdin: self.stdin.clone(),
        }))
    }

    fn why_gone(&mut self, what: &str) -> String {
        self.died(what)
    }

    fn in_flight(&self) -> usize {
        self.router
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .waiting
            .len()
    }

    fn notify(&mut self, msg: &Value, _hints: &Hints<'_>, _deadline: Instant) -> Result<(), Fault> {
        self.write(msg)
    }

    fn alive(&mut self) -> bool {
        !self.closed && self.proc.try_wait().is_none()
    }

    fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        // Closing stdin is MCP's way to ask a stdio server to leave; TERM, then KILL, make sure.
        *self.stdin.lock().unwrap_or_else(|p| p.into_inner()) = None;
        let wait = |proc: &mut Proc, d: Duration| {
            let until = Instant::now() + d;
            while Instant::now() < until {
                if proc.try_wait().is_some() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            false
        };
        if !wait(&mut self.proc, Duration::from_millis(500)) {
            self.proc.signal(libc::SIGTERM);
            if !wait(&mut self.proc, Duration::from_secs(2)) {
                self.proc.signal(libc::SIGKILL);
                if let Proc::Host { child, .. } = &mut self.proc {
                    let _ = child.wait();
                } else {
                    wait(&mut self.proc, Duration::from_secs(2));
                }
            }
        }
        // What it started in its group goes too.
        self.proc.signal(libc::SIGKILL);
    }
}

impl Drop for StdioLink {
    fn drop(&mut self) {
        self.close();
    }
}

/// An HTTP request in flight: its own POST on a copy of the link (the agent's connections are
/// shared), made when it is waited for.
struct HttpPending {
    link: HttpLink,
    req: Value,
    id: u64,
    method: String,
    name: Option<String>,
    version: Option<String>,
    params: Vec<(String, String)>,
}

impl Pending for HttpPending {
    fn wait(mut self: Box<Self>, deadline: Instant, _gone: &dyn Fn() -> bool) -> Outcome {
        let params = std::mem::take(&mut self.params);
        let hints = Hints {
            method: &self.method,
            name: self.name.as_deref(),
            version: self.version.as_deref(),
            params: &params,
        };
        let (req, id) = (self.req.clone(), self.id);
        let out = self.link.exchange(&req, id, &hints, deadline);
        if matches!(out, Err(Fault::Timeout)) {
            let h = Hints {
                method: "notifications/cancelled",
                name: None,
                version: hints.version,
                params: &[],
            };
            let left = Instant::now() + Duration::from_secs(2);
            let _ = self.link.notify(
                &rpc::cancelled(id, "the client's time limit passed"),
                &h,
                left,
            );
        }
        out
    }
}

/// A server at a URL (streamable HTTP).
#[derive(Clone)]
pub struct HttpLink {
    agent: ureq::Agent,
    url: String,
    headers: Vec<(String, String)>,
    /// `Mcp-Session-Id` a stateful server gave at `initialize`.
    session: Option<String>,
    closed: bool,
}

impl HttpLink {
    /// A link to `url` sending `headers` with every request.
    pub fn new(url: &str, headers: &[(String, String)]) -> HttpLink {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        HttpLink {
            agent,
            url: url.to_string(),
            headers: headers.to_vec(),
            session: None,
            closed: false,
        }
    }

    /// POSTs `msg`; returns the status, the content type and the body reader.
    fn post(
        &mut self,
        msg: &Value,
        hints: &Hints<'_>,
        deadline: Instant,
    ) -> Result<(u16, String, ureq::Body), Fault> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Fault::Timeout);
        }
        let mut req = self
            .agent
            .post(&self.url)
            .config()
            .timeout_global(Some(left))
            .build()
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("Mcp-Method", hints.method);
        if let Some(v) = hints.version {
            req = req.header("MCP-Protocol-Version", v);
        }
        if let Some(n) = hints.name {
            req = req.header("Mcp-Name", n);
        }
        for (k, v) in hints.params {
            req = req.header(k, v);
        }
        if let Some(s) = &self.session {
            req = req.header("Mcp-Session-Id", s);
        }
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        let resp = req.send(msg.to_string().as_bytes()).map_err(|e| match e {
            ureq::Error::Timeout(_) => Fault::Timeout,
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => Fault::Timeout,
            other => Fault::Gone(format!(
                "could not reach {}: {}",
                crate::provider::http::display_url(&self.url),
                crate::provider::http::redact(&other.to_string(), None)
            )),
        })?;
        let status = resp.status().as_u16();
        if let Some(s) = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            self.session = Some(s.to_string());
        }
        let kind = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        Ok((status, kind, resp.into_body()))
    }
    /// Reads one SSE stream until the answer to request `id` (Some) or its end (None), answering
    /// the server's requests on the way.
    fn read_stream(
        &mut self,
        body: ureq::Body,
        parser: &mut crate::provider::sse::SseParser,
        id: u64,
        hints: &Hints<'_>,
        deadline: Instant,
    ) -> Result<Option<Result<Value, RpcError>>, Fault> {
        let mut reader = body.into_reader();
        let mut events = Vec::new();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => {
                    parser.finish(&mut events);
                    0
                }
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return Err(Fault::Timeout),
                Err(e) => return Err(Fault::Gone(format!("the stream broke off: {e}"))),
            };
            if n > 0 {
                parser
                    .push(&buf[..n], &mut events)
                    .map_err(|e| Fault::Protocol(e.message))?;
            }
            for ev in events.drain(..) {
                if ev.data.trim().is_empty() {
                    continue;
                }
                let v: Value = serde_json::from_str(&ev.data).map_err(|_| {
                    Fault::Protocol(format!(
                        "an event that is not JSON: {}",
                        crate::text::cut(&ev.data, 120)
                    ))
                })?;
                match rpc::classify(v) {
                    Incoming::Response { id: got, outcome } if got.as_u64() == Some(id) => {
                        return Ok(Some(outcome));
                    }
                    Incoming::Request { id, method } => {
                        let h = Hints {
                            method: "",
                            name: None,
                            version: hints.version,
                            params: &[],
                        };
                        let _ = self.post(&rpc::answer(id, &method), &h, deadline);
                    }
                    _ => {}
                }
            }
            if n == 0 {
                return Ok(None);
            }
            if Instant::now() >= deadline {
                return Err(Fault::Timeout);
            }
        }
    }

    /// Resumes a stream with GET from the event `from` (SEP-1699).
    fn resume(
        &mut self,
        from: &str,
        hints: &Hints<'_>,
        deadline: Instant,
    ) -> Result<ureq::Body, Fault> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Fault::Timeout);
        }
        let mut req = self
            .agent
            .get(&self.url)
            .config()
            .timeout_global(Some(left))
            .build()
            .header("Accept", "text/event-stream")
            .header("Last-Event-ID", from);
        if let Some(v) = hints.version {
            req = req.header("MCP-Protocol-Version", v);
        }
        if let Some(s) = &self.session {
            req = req.header("Mcp-Session-Id", s);
        }
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        let resp = req.call().map_err(|e| match e {
            ureq::Error::Timeout(_) => Fault::Timeout,
            other => Fault::Gone(format!("could not resume the stream: {other}")),
        })?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(Fault::Http(status, "resuming the stream".into()));
        }
        Ok(resp.into_body())
    }
}

/// Reads at most [`MAX_MESSAGE_BYTES`] of a body. Errors: longer, or a read failed.
fn read_body(body: ureq::Body) -> Result<Vec<u8>, Fault> {
    let mut out = Vec::new();
    body.into_reader()
        .take(MAX_MESSAGE_BYTES as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::TimedOut => Fault::Timeout,
            _ => Fault::Gone(format!("the answer broke off: {e}")),
        })?;
    if out.len() > MAX_MESSAGE_BYTES {
        return Err(Fault::Protocol(format!(
            "an answer longer than {MAX_MESSAGE_BYTES} bytes"
        )));
    }
    Ok(out)
}

impl Link for HttpLink {
    fn send(&mut self, req: &Value, id: u64, hints: &Hints<'_>) -> Result<Box<dyn Pending>, Fault> {
        if self.closed {
            return Err(Fault::Gone("closed".into()));
        }
        Ok(Box::new(HttpPending {
            link: self.clone(),
            req: req.clone(),
            id,
            method: hints.method.to_string(),
            name: hints.name.map(str::to_string),
            version: hints.version.map(str::to_string),
            params: hints.params.to_vec(),
        }))
    }

    fn exchange(
        &mut self,
        req: &Value,
        id: u64,
        hints: &Hints<'_>,
        deadline: Instant,
    ) -> Result<Result<Value, RpcError>, Fault> {
        let (status, kind, body) = self.post(req, hints, deadline)?;
        if kind.starts_with("text/event-stream") && (200..300).contains(&status) {
            // One stream per request: the server's requests and notifications, then our answer.
            // A stream that ends without it is resumed with GET and `Last-Event-ID` after the
            // time its `retry:` asked for (MCP 2025-11-25, SEP-1699), a few times at most.
            let (mut body, mut last, mut retry) = (body, None::<String>, None::<u64>);
            for _ in 0..=MAX_RESUMES {
                let mut parser = crate::provider::sse::SseParser::with_limit(MAX_MESSAGE_BYTES);
                let answer = self.read_stream(body, &mut parser, id, hints, deadline)?;
                last = parser.last_event_id().map(str::to_string).or(last);
                retry = parser.retry_ms().or(retry);
                if let Some(outcome) = answer {
                    return Ok(outcome);
                }
                let Some(from) = last.clone() else {
                    return Err(Fault::Gone("the stream ended without an answer".into()));
                };
                let left = deadline.saturating_duration_since(Instant::now());
                std::thread::sleep(Duration::from_millis(retry.unwrap_or(1000)).min(left));
                body = self.resume(&from, hints, deadline)?;
            }
            return Err(Fault::Gone(format!(
                "the stream ended without an answer {MAX_RESUMES} times"
            )));
        }
        let bytes = read_body(body)?;
        // A JSON-RPC answer, whatever the status (MCP 2026-07-28 sends an unknown method's
        // error with 404, a version mismatch with 400).
        if let Ok(v) = serde_json::from_slice::<Value>(&bytes)
            && let Incoming::Response { outcome, .. } = rpc::classify(v)
        {
            return Ok(outcome);
        }
        let text = String::from_utf8_lossy(&bytes);
        let snippet = crate::text::cut(text.trim(), 200).to_string();
        if !(200..300).contains(&status) {
            return Err(Fault::Http(status, snippet));
        }
        Err(Fault::Protocol(format!(
            "an answer that is not JSON-RPC ({}): {snippet}",
            if kind.is_empty() {
                "no content type"
            } else {
                &kind
            }
        )))
    }

    fn notify(&mut self, msg: &Value, hints: &Hints<'_>, deadline: Instant) -> Result<(), Fault> {
        let (status, _, body) = self.post(msg, hints, deadline)?;
        let _ = read_body(body);
        if (200..300).contains(&status) {
            Ok(())
        } else {
            Err(Fault::Http(status, String::new()))
        }
    }

    fn alive(&mut self) -> bool {
        !self.closed
    }

    fn close(&mut self) {
        self.closed = true;
        // MCP 2025-11-25: a client that leaves SHOULD end its session with DELETE.
        if let Some(s) = self.session.take() {
            let mut req = self
                .agent
                .delete(&self.url)
                .config()
                .timeout_global(Some(Duration::from_secs(2)))
                .build()
                .header("Mcp-Session-Id", &s);
            for (k, v) in &self.headers {
                req = req.header(k, v);
            }
            let _ = req.call();
        }
    }
}

impl Drop for HttpLink {
    fn drop(&mut self) {
        self.close();
    }
}
