//! MCP as commands (DESIGN §16): every configured MCP server's tools, used from bash with
//! `tern mcp list | schema | call`, and no tool schema in the request prefix.
//!
//! The room's parts: [`config`] (where servers come from, trust), [`rpc`] (the messages of both
//! protocol eras, pure), `transport` (stdio and streamable HTTP), `client` (one server:
//! handshake, pages, restart once), [`render`] (what a verb prints, pure), [`channel`] (how a
//! command in the jail reaches the session's tern). Its door is [`Hub::run`]: a verb in, what to
//! print and the exit code out. The runtime holds one [`Hub`] per session; outside a session
//! `tern mcp` makes its own and talks to the servers directly.
//!
//! Inside a session the servers run outside the jail, started by tern with the person's
//! environment and rights; their credentials never enter the jail. Each call passes the
//! session's [`Gate`] (the PreToolUse / PostToolUse hooks as `mcp__SERVER__TOOL`, the `mcp_call`
//! event).

pub mod channel;
mod client;
pub mod config;
pub mod link;
pub mod render;
pub mod rpc;
mod transport;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use client::{Client, McpError, Options};
pub use config::{Files, Server, Servers, Source, Transport};
pub use render::Reply;
pub use rpc::Tool;

/// Bytes the request prefix may grow by for any number of servers (issue 32).
pub const PROMPT_LINE_MAX: usize = 200;

/// One `tern mcp` verb, declared once: the command line's subcommands (clap reads these
/// variants and their docs) and the message a command's `tern mcp` sends the session's tern over
/// the channel (serde).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Subcommand)]
#[serde(tag = "verb", rename_all = "lowercase")]
pub enum Verb {
    /// The servers and their tools, one line each (exit 2 when a server cannot be listed).
    List {
        /// Only this server.
        server: Option<String>,
    },
    /// A tool's input schema, as JSON.
    Schema {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
    },
    /// Calls a tool and prints its text; other parts (images, audio, files) are saved and their
    /// paths printed. Exit 0 done, 1 the tool answered an error, 2 bad usage, an unknown server
    /// or tool, or a protocol failure.
    Call {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
        /// The arguments: a JSON object, or - to read it from stdin (default {}).
        #[arg(value_name = "ARGS", default_value = "{}", value_parser = arguments)]
        arguments: Value,
        /// Print the whole result as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// A call's arguments from the command line (clap's value parser for [`Verb::Call`]): a JSON
/// object, or `-` to read one from stdin (at most [`channel::MAX_ARGUMENT_BYTES`]).
///
/// Errors: stdin unreadable or too large, not JSON, or JSON that is not an object (one line).
fn arguments(text: &str) -> Result<Value, String> {
    let text = match text {
        "-" => {
            let limit = channel::MAX_ARGUMENT_BYTES as u64;
            let mut buf = Vec::new();
            std::io::Read::read_to_end(
                &mut std::io::Read::take(std::io::stdin(), limit + 1),
                &mut buf,
            )
            .map_err(|e| format!("could not read the arguments from stdin: {e}"))?;
            if buf.len() as u64 > limit {
                return Err(format!("the arguments are larger than {limit} bytes"));
            }
            String::from_utf8_lossy(&buf).into_owned()
        }
        t => t.to_string(),
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err("the arguments must be a JSON object, like '{\"repo\": \"x\"}'".into()),
        Err(e) => Err(format!("the arguments are not JSON: {e}")),
    }
}

/// A call that ran (or was refused), for the [`Gate`]'s `after`.
#[derive(Debug)]
pub struct Finished<'a> {
    /// The server.
    pub server: &'a str,
    /// The tool.
    pub tool: &'a str,
    /// The arguments sent.
    pub arguments: &'a Value,
    /// The result, when the server gave one.
    pub result: Option<&'a Value>,
    /// How `tern mcp call` exits.
    pub exit: i32,
    /// Why it failed, when it did.
    pub error: Option<&'a str>,
    /// How long it took.
    pub duration: Duration,
}

/// What a session puts around each call: its hooks and its record of events.
pub trait Gate: Send + Sync {
    /// Before a call. Ok(Some(args)): run with these arguments instead; Ok(None): run as is;
    /// Err(why): do not run it (exit 1, `why` on stderr).
    fn before(&self, server: &str, tool: &str, arguments: &Value) -> Result<Option<Value>, String>;
    /// After a call: lines to add for the model (on stderr).
    fn after(&self, call: &Finished<'_>) -> Vec<String>;
}

/// The name hooks see for a server's tool (Claude Code's naming): `mcp__SERVER__TOOL`.
pub fn hook_name(server: &str, tool: &str) -> String {
    format!("mcp__{server}__{tool}")
}

/// The line the system prompt carries when servers are usable: their names and the two verbs,
/// at most [`PROMPT_LINE_MAX`] bytes whatever their number (names that do not fit are counted).
/// None when there is no server. The same bytes for the same set of names.
pub fn prompt_line(names: &[String]) -> Option<String> {
    if names.is_empty() {
        return None;
    }
    let tail =
        ". Their tools run from bash: `tern mcp list`, then `tern mcp call SERVER TOOL JSON`.\n";
    let head = "MCP servers: ";
    let room = PROMPT_LINE_MAX - head.len() - tail.len();
    let mut shown = String::new();
    for (i, n) in names.iter().enumerate() {
        let more = names.len() - i - 1;
        let sep = if shown.is_empty() { "" } else { ", " };
        let rest = if more > 0 {
            format!(" +{more} more")
        } else {
            String::new()
        };
        // Room for this name and, if others follow, the count of those.
        let fits_with_count = shown.len() + sep.len() + n.len() + rest.len() <= room;
        if !fits_with_count {
            let left = names.len() - i;
            shown.push_str(&format!(
                "{}+{left} more",
                if shown.is_empty() { "" } else { " " }
            ));
            break;
        }
        shown.push_str(sep);
        shown.push_str(n);
    }
    Some(format!("{head}{shown}{tail}"))
}

/// One server's client and its tools once listed.
struct Slot {
    client: Client,
    tools: Option<Vec<Tool>>,
}

/// A session's (or one command line's) servers: their clients, opened at first use and kept
/// until [`Hub::close`] (or the hub is dropped), and the gate around calls.
pub struct Hub {
    servers: Servers,
    opts: Options,
    slots: Mutex<BTreeMap<String, Arc<Mutex<Slot>>>>,
    /// Each server's places for calls in flight.
    places: Mutex<BTreeMap<String, Arc<Places>>>,
    /// Where non-text parts are saved (`<session>/mcp/`); None: the system's temporary folder.
    saves: Option<PathBuf>,
    gate: Option<Box<dyn Gate>>,
    saved: AtomicU64,
    /// Outside a session: a temporary folder for the servers' logs, so a server that dies is
    /// named with what it said.
    _logs: Option<tempfile::TempDir>,
    /// The SHA-256 of every workspace file a stdio server's command names, as the hub was made
    /// (the session opened, the project file's checked against its trust then): a server starts
    /// only while they still match (issue 42: trust is checked when the program starts).
    pinned: BTreeMap<String, Option<String>>,
}

/// Calls in flight to one server at most (JSON-RPC lets many share one connection; a server
/// is not asked more at once).
pub const PER_SERVER: usize = 8;

/// The exit code of a call answered "busy" (sysexits' `EX_TEMPFAIL`: try again later).
pub const BUSY_EXIT: i32 = 75;

/// The places of one server's calls in flight.
#[derive(Default)]
pub struct Places {
    taken: Mutex<usize>,
    freed: std::sync::Condvar,
}

/// A place taken, given back when dropped.
pub struct Place<'a>(&'a Places);

impl Places {
    /// A place for one call, waited for up to `limit` while `gone()` is false. None: none came.
    fn take(&self, limit: std::time::Duration, gone: &dyn Fn() -> bool) -> Option<Place<'_>> {
        let until = Instant::now() + limit;
        let mut n = self.taken.lock().unwrap_or_else(|p| p.into_inner());
        while *n >= PER_SERVER {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || gone() {
                return None;
            }
            let step = left.min(std::time::Duration::from_millis(100));
            n = self
                .freed
                .wait_timeout(n, step)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        *n += 1;
        Some(Place(self))
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let mut n = self.0.taken.lock().unwrap_or_else(|p| p.into_inner());
        *n = n.saturating_sub(1);
        self.0.freed.notify_one();
    }
}

impl Hub {
    /// A hub over `servers`. `saves`: the folder for saved parts and logs (a session's `mcp/`).
    pub fn new(servers: Servers, mut opts: Options, saves: Option<PathBuf>) -> Hub {
        if opts.logs.is_none() {
            opts.logs.clone_from(&saves);
        }
        let logs = match &opts.logs {
            Some(_) => None,
            None => tempfile::Builder::new()
                .prefix("tern-mcp-logs-")
                .tempdir()
                .ok(),
        };
        if let Some(d) = &logs {
            opts.logs = Some(d.path().to_path_buf());
        }
        let pinned = config::covered_hashes(&servers.list, &opts.cwd);
        Hub {
            servers,
            opts,
            pinned,
            slots: Mutex::new(BTreeMap::new()),
            places: Mutex::new(BTreeMap::new()),
            saves,
            gate: None,
            saved: AtomicU64::new(0),
            _logs: logs,
        }
    }

    /// Puts `gate` around every call.
    pub fn with_gate(mut self, gate: Box<dyn Gate>) -> Hub {
        self.gate = Some(gate);
        self
    }

    /// The servers.
    pub fn servers(&self) -> &Servers {
        &self.servers
    }

    fn slot(&self, name: &str) -> Result<Arc<Mutex<Slot>>, Reply> {
        let Some(server) = self.servers.get(name) else {
            return Err(Reply::fail(2, &self.servers.why_not(name)));
        };
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        Ok(slots
            .entry(name.to_string())
            .or_insert_with(|| {
                Arc::new(Mutex::new(Slot {
                    client: Client::new(server.clone(), self.opts.clone())
                        .pinned(self.pinned.clone()),
                    tools: None,
                }))
            })
            .clone())
    }

    /// Runs one verb: what to print and the exit code.
    pub fn run(&self, verb: &Verb) -> Reply {
        self.run_watching(verb, &|| false)
    }

    /// [`Hub::run`] for a caller that may go away: `gone()` is asked while a call waits for
    /// its answer or its place; once it says so the server is told to cancel the call (MCP
    /// `notifications/cancelled`) and the reply says the call was cancelled (exit 2).
    pub fn run_watching(&self, verb: &Verb, gone: &dyn Fn() -> bool) -> Reply {
        match verb {
            Verb::List { server } => self.list(server.as_deref()),
            Verb::Schema { server, tool } => self.schema(server, tool),
            Verb::Call {
                server,
                tool,
                arguments,
                json,
            } => self.call(server, tool, arguments, *json, gone),
        }
    }

    /// The places of calls in flight to `server` (made at its first call).
    fn places(&self, server: &str) -> Arc<Places> {
        self.places
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(server.to_string())
            .or_default()
            .clone()
    }

    /// The tools of `slot`, listed once (again when `fresh`).
    fn tools(slot: &mut Slot, fresh: bool) -> Result<Vec<Tool>, McpError> {
        if fresh || slot.tools.is_none() {
            slot.tools = Some(slot.client.tools()?);
        }
        Ok(slot.tools.clone().unwrap_or_default())
    }

    fn list(&self, only: Option<&str>) -> Reply {
        let mut out = Reply::default();
        let names: Vec<String> = match only {
            Some(n) => vec![n.to_string()],
            None => self.servers.names(),
        };
        for name in &names {
            let slot = match self.slot(name) {
                Ok(s) => s,
                Err(r) => return r,
            };
            let mut s = slot.lock().unwrap_or_else(|p| p.into_inner());
            match Self::tools(&mut s, true) {
                Ok(tools) => {
                    out.stdout.push_str(&render::server_line(
                        s.client.server(),
                        s.client.agreed(),
                        tools.len(),
                    ));
                    out.stdout.push('\n');
                    out.stdout.push_str(&render::tool_lines(&tools));
                }
                Err(e) => {
                    out.stdout.push_str(&format!(
                        "{} ({}, from {}): not available\n",
                        name,
                        s.client.server().kind(),
                        s.client.server().source
                    ));
                    out.stderr.push_str(&format!("tern: {e}\n"));
                    out.exit = 2;
                }
            }
            for n in s.client.take_notes() {
                out.stderr.push_str(&format!("tern: {n}\n"));
            }
        }
        if only.is_none() {
            for b in &self.servers.broken {
                out.stdout.push_str(&format!(
                    "{} (from {}): not usable: {}\n",
                    b.name, b.source, b.why
                ));
            }
            if let Some(u) = &self.servers.untrusted {
                out.stdout.push_str(&format!(
                    "{} ({}): {}: its servers ({}) do not start; read it, then run `tern mcp trust`\n",
                    u.path.display(),
                    "project",
                    if u.changed { "changed since it was trusted" } else { "not trusted" },
                    u.names.join(", ")
                ));
            }
            if out.stdout.is_empty() {
                out.stdout
                    .push_str("no MCP server is configured (~/.config/tern/mcp.json, .mcp.json)\n");
            }
        }
        out
    }

    /// The tool `tool` of `server`, listing again once when it is not known (a server may add
    /// tools). Errors: the reply to print (exit 2).
    fn find(&self, server: &str, tool: &str) -> Result<(Arc<Mutex<Slot>>, Tool), Reply> {
        let slot = self.slot(server)?;
        let found = {
            let mut s = slot.lock().unwrap_or_else(|p| p.into_inner());
            let mut found = None;
            for fresh in [false, true] {
                let tools =
                    Self::tools(&mut s, fresh).map_err(|e| Reply::fail(2, &e.to_string()))?;
                if let Some(t) = tools.iter().find(|t| t.name == tool) {
                    found = Some(t.clone());
                    break;
                }
                if fresh {
                    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
                    return Err(Reply::fail(
                        2,
                        &format!(
                            "MCP server {server} has no tool {tool} (its tools: {})",
                            if names.is_empty() {
                                "none".to_string()
                            } else {
                                names.join(", ")
                            }
                        ),
                    ));
                }
            }
            found
        };
        match found {
            Some(t) => Ok((slot, t)),
            None => Err(Reply::fail(
                2,
                &format!("MCP server {server} has no tool {tool}"),
            )),
        }
    }

    fn schema(&self, server: &str, tool: &str) -> Reply {
        match self.find(server, tool) {
            Ok((_, t)) => Reply {
                stdout: format!(
                    "{}\n",
                    serde_json::to_string_pretty(&t.input_schema).unwrap_or_default()
                ),
                stderr: String::new(),
                exit: 0,
            },
            Err(r) => r,
        }
    }

    fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: &Value,
        json: bool,
        gone: &dyn Fn() -> bool,
    ) -> Reply {
        let started = Instant::now();
        let mut arguments = arguments.clone();
        if !arguments.is_object() {
            return Reply::fail(2, "the arguments must be a JSON object");
        }
        let finish = |reply: &mut Reply, args: &Value, result: Option<&Value>| {
            if let Some(g) = &self.gate {
                let error =
                    (reply.exit != 0 && result.is_none()).then(|| reply.stderr.trim().to_string());
                let added = g.after(&Finished {
                    server,
                    tool,
                    arguments: args,
                    result,
                    exit: reply.exit,
                    error: error.as_deref(),
                    duration: started.elapsed(),
                });
                for a in added {
                    reply
                        .stderr
                        .push_str(&format!("[PostToolUse hook] {}\n", a.trim_end()));
                }
            }
        };
        let (slot, found) = match self.find(server, tool) {
            Ok(x) => x,
            Err(mut r) => {
                finish(&mut r, &arguments, None);
                return r;
            }
        };
        if let Some(g) = &self.gate {
            match g.before(server, tool, &arguments) {
                Ok(Some(replaced)) => arguments = replaced,
                Ok(None) => {}
                Err(why) => {
                    let mut r = Reply::fail(1, &why);
                    finish(&mut r, &arguments, None);
                    return r;
                }
            }
        }
        // At most PER_SERVER calls in flight to one server; a call over it waits for a place
        // (while its caller is there), then is answered "busy" (BUSY_EXIT) at its time limit.
        let places = self.places(server);
        let Some(_place) = places.take(self.opts.request, gone) else {
            let mut r = if gone() {
                Reply::fail(
                    2,
                    &format!("MCP server {server}: cancelled: the caller went away"),
                )
            } else {
                Reply::fail(
                    BUSY_EXIT,
                    &format!(
                        "MCP server {server} is busy: {PER_SERVER} calls to it were in flight for {} s; try again",
                        self.opts.request.as_secs_f64().round()
                    ),
                )
            };
            finish(&mut r, &arguments, None);
            return r;
        };
        // The request is sent with the server held, and waited for without it: answers are
        // routed by their id, so calls to one server run at once.
        let sent = {
            let mut s = slot.lock().unwrap_or_else(|p| p.into_inner());
            s.client.send_call(&found, arguments.clone())
        };
        let result = match sent {
            Ok(sent) => {
                let (method, outcome) = sent.wait(gone);
                let mut s = slot.lock().unwrap_or_else(|p| p.into_inner());
                (s.client.settle(method, outcome), s.client.take_notes())
            }
            Err(e) => {
                let mut s = slot.lock().unwrap_or_else(|p| p.into_inner());
                (Err(e), s.client.take_notes())
            }
        };
        let (result, notes) = result;
        let mut reply = match &result {
            Ok(v) => {
                let mut save = |mime: &str, bytes: &[u8]| self.save(server, tool, mime, bytes);
                render::call_result(v, json, &mut save)
            }
            Err(e) => Reply::fail(2, &e.to_string()),
        };
        for n in notes {
            reply.stderr.insert_str(0, &format!("tern: {n}\n"));
        }
        // What a server in a jail of its own wrote reaches the workspace through its door now;
        // the model reads what the door held back, as after its own commands (issue 42).
        if let Some(said) = self.opts.jails.as_ref().and_then(|j| j.pass(server)) {
            reply
                .stderr
                .push_str(&format!("tern: {}\n", said.trim_end()));
        }
        finish(&mut reply, &arguments, result.as_ref().ok());
        reply
    }

    /// Saves a non-text part: in the session's `mcp/` folder, else a new file in the system's
    /// temporary folder.
    fn save(&self, server: &str, tool: &str, mime: &str, bytes: &[u8]) -> Result<PathBuf, String> {
        let ext = render::extension(mime);
        let n = self.saved.fetch_add(1, Ordering::SeqCst) + 1;
        match &self.saves {
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
                let stamp = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis())
                    .unwrap_or(0);
                let path = dir.join(format!("{server}-{}-{stamp}-{n}.{ext}", safe(tool)));
                crate::store::fsutil::atomic_write(&path, bytes).map_err(|e| e.to_string())?;
                Ok(path)
            }
            None => {
                let f = tempfile::Builder::new()
                    .prefix(&format!("tern-mcp-{server}-"))
                    .suffix(&format!(".{ext}"))
                    .tempfile()
                    .map_err(|e| e.to_string())?;
                std::fs::write(f.path(), bytes).map_err(|e| e.to_string())?;
                let (_, path) = f.keep().map_err(|e| e.to_string())?;
                Ok(path)
            }
        }
    }

    /// The files a person's tools run on their own that the doors of the servers' jails
    /// applied since the last call (a turn's end), relative to the workspace.
    pub fn take_listed(&self) -> Vec<PathBuf> {
        self.opts
            .jails
            .as_ref()
            .map(|j| j.take_listed())
            .unwrap_or_default()
    }

    /// Stops every server this hub started. A server busy with a call is not waited for: its
    /// process group is in the registry tern kills at exit, and it sees its stdin close when
    /// tern leaves.
    pub fn close(&self) {
        let slots = std::mem::take(&mut *self.slots.lock().unwrap_or_else(|p| p.into_inner()));
        for (_, s) in slots {
            let slot = match s.try_lock() {
                Ok(g) => Some(g),
                Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => None,
            };
            if let Some(mut g) = slot {
                g.client.close();
            }
        }
        // The servers' jails go, each after its door's last pass.
        if let Some(j) = &self.opts.jails {
            j.end();
        }
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.close();
    }
}

/// A tool name made safe for a file name.
fn safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_line_is_bounded_whatever_the_servers() {
        assert_eq!(prompt_line(&[]), None);
        let three: Vec<String> = ["github", "files", "db"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let l = prompt_line(&three).unwrap();
        assert!(l.starts_with("MCP servers: github, files, db. "), "{l}");
        assert!(l.len() <= PROMPT_LINE_MAX);
        for n in [1usize, 5, 20, 500] {
            let names: Vec<String> = (0..n)
                .map(|i| format!("server-with-a-long-name-{i}"))
                .collect();
            let l = prompt_line(&names).unwrap();
            assert!(l.len() <= PROMPT_LINE_MAX, "{n}: {} bytes", l.len());
            assert!(l.ends_with("JSON`.\n"));
            if n > 3 {
                assert!(l.contains("more"), "{l}");
            }
        }
        let long = vec!["x".repeat(64); 1];
        assert!(prompt_line(&long).unwrap().len() <= PROMPT_LINE_MAX);
        assert_eq!(hook_name("gh", "list"), "mcp__gh__list");
    }
}
