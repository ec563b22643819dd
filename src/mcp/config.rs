//! Where MCP servers come from, in Claude Code's format so existing files work:
//! `{"mcpServers": {"NAME": {"command", "args", "env"} | {"type": "http", "url", "headers"}}}`.
//!
//! - the person's `~/.config/tern/mcp.json` (`$XDG_CONFIG_HOME/tern/mcp.json`): trusted;
//! - the project's `.mcp.json` at the workspace root: a file a command can write, so its servers
//!   start only once `tern mcp trust` recorded its SHA-256 (and that of every workspace file its
//!   commands name) in the hooks' trust record, as project hooks are trusted (DESIGN §13); any
//!   change needs trust again;
//! - the servers an editor passes in ACP `session/new` / `session/load` (`mcpServers`).
//!
//! A later source's server replaces an earlier one of the same name (person, then project, then
//! editor, as Claude Code ranks project over user). `${VAR}` and `${VAR:-default}` in a command,
//! its arguments, environment values, a URL or a header are expanded from tern's environment.

use super::McpError;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::config::Env;
use crate::trust::{Record, Standing, covered, file_sha};

/// Largest configuration file read, in bytes.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// Where a server's entry came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The person's `mcp.json`.
    User(PathBuf),
    /// The project's `.mcp.json` (trusted).
    Project(PathBuf),
    /// An editor's `mcpServers` (ACP).
    Editor,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::User(p) | Source::Project(p) => write!(f, "{}", p.display()),
            Source::Editor => f.write_str("the editor"),
        }
    }
}

/// How tern reaches a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A program tern starts, speaking newline-delimited JSON-RPC on its stdin and stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to tern's environment for it.
        env: Vec<(String, String)>,
    },
    /// Streamable HTTP at a URL.
    Http {
        /// The endpoint.
        url: String,
        /// Headers sent with every request (a token, say).
        headers: Vec<(String, String)>,
    },
}

/// One configured server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// Its name (`[A-Za-z0-9_-]`, at most 64 characters): the `SERVER` of `tern mcp call`.
    pub name: String,
    /// How to reach it.
    pub transport: Transport,
    /// Where its entry came from.
    pub source: Source,
    /// Its own limits, when its entry sets them (else `MCP_TIMEOUT` / `MCP_TOOL_TIMEOUT`).
    pub timeouts: Timeouts,
    /// `"jail"` as its entry gives it (issue 42): `true` runs a stdio server in a jail of its
    /// own, `false` outside; None: in one exactly when it runs workspace code
    /// ([`Server::runs_workspace_code`]) and the session's commands have a jail.
    pub jail: Option<bool>,
}

/// A server entry's own time limits, named as Codex CLI's config names them
/// (`startup_timeout_sec`, `tool_timeout_sec`; `startup_timeout_ms` too): seconds, fractions
/// allowed, greater than 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timeouts {
    /// Starting the server and agreeing on the protocol.
    pub startup: Option<std::time::Duration>,
    /// One request.
    pub tool: Option<std::time::Duration>,
}

/// An entry's [`Timeouts`]. Errors: a value that is not a positive number (named).
fn timeouts_of(entry: &Value) -> Result<Timeouts, String> {
    let secs = |key: &str, scale: f64| -> Result<Option<std::time::Duration>, String> {
        match entry.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite() && *x > 0.0 && *x * scale <= 86_400.0)
                .map(|x| Some(std::time::Duration::from_secs_f64(x * scale)))
                .ok_or_else(|| {
                    format!(
                        "{key} is not a number of {} above 0 (at most a day)",
                        if scale < 1.0 {
                            "milliseconds"
                        } else {
                            "seconds"
                        }
                    )
                }),
        }
    };
    Ok(Timeouts {
        startup: secs("startup_timeout_sec", 1.0)?.or(secs("startup_timeout_ms", 0.001)?),
        tool: secs("tool_timeout_sec", 1.0)?,
    })
}

impl Server {
    /// Whether this stdio server runs a file the session's commands can write: its program, the
    /// script an interpreter is given, a script named by its extension, or a runner whose code
    /// tern cannot name (`npm run`, `make`: `covered::Scan::opaque`). Such a server runs in a
    /// jail by default: a command that rewrote the file (or put `json.py` beside it) gains
    /// nothing by it. An HTTP server runs nothing here.
    pub fn runs_workspace_code(&self, workspace: &Path) -> bool {
        let Transport::Stdio { command, args, .. } = &self.transport else {
            return false;
        };
        covered::scan(&command_line(command, args), workspace).runs_workspace_code(workspace)
    }

    /// `stdio` or `http`.
    pub fn kind(&self) -> &'static str {
        match self.transport {
            Transport::Stdio { .. } => "stdio",
            Transport::Http { .. } => "http",
        }
    }
}

/// A configured server tern cannot use, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    /// Its name (`*` when the whole file is unreadable).
    pub name: String,
    /// The file it is in.
    pub source: Source,
    /// Why (one line).
    pub why: String,
}

/// The project file, when it is not trusted (or changed since).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untrusted {
    /// `.mcp.json`.
    pub path: PathBuf,
    /// It was trusted before with other content (or a file its servers run changed).
    pub changed: bool,
    /// The servers it names, which do not start.
    pub names: Vec<String>,
}

/// Every server of a workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Servers {
    /// The usable servers, in name order.
    pub list: Vec<Server>,
    /// Entries tern cannot use.
    pub broken: Vec<Broken>,
    /// The project file, when it is not trusted.
    pub untrusted: Option<Untrusted>,
    /// The workspace files the trusted project servers run (read-only inside the jail).
    pub covered: Vec<PathBuf>,
}

impl Servers {
    /// The server named `name`.
    pub fn get(&self, name: &str) -> Option<&Server> {
        self.list.iter().find(|s| s.name == name)
    }

    /// Whether no server is usable.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The usable servers' names, in order.
    pub fn names(&self) -> Vec<String> {
        self.list.iter().map(|s| s.name.clone()).collect()
    }

    /// Why `name` cannot be used (unknown, broken or untrusted), one line.
    pub fn why_not(&self, name: &str) -> String {
        if let Some(b) = self.broken.iter().find(|b| b.name == name) {
            return format!("MCP server {name} ({}): {}", b.source, b.why);
        }
        if let Some(u) = self
            .untrusted
            .as_ref()
            .filter(|u| u.names.iter().any(|n| n == name))
        {
            return format!(
                "MCP server {name} is in {}, which is {}: read it, then run `tern mcp trust`",
                u.path.display(),
                if u.changed {
                    "changed since it was trusted"
                } else {
                    "not trusted"
                }
            );
        }
        let known = self.names();
        if known.is_empty() {
            format!("no MCP server is named {name}: none is configured (see `tern mcp list`)")
        } else {
            format!(
                "no MCP server is named {name} (servers: {})",
                known.join(", ")
            )
        }
    }
}

/// Where a workspace's server files are.
#[derive(Debug, Clone)]
pub struct Files {
    /// The person's `mcp.json` (None without a home folder).
    pub user: Option<PathBuf>,
    /// The project's `.mcp.json`.
    pub project: PathBuf,
    /// The trust record (the hooks'; None without a home folder).
    pub trust: Option<PathBuf>,
    /// The workspace (covered files are looked for in it).
    pub workspace: PathBuf,
}

impl Files {
    /// The files of `workspace` for the environment `env`.
    pub fn new(workspace: &Path, env: &Env) -> Files {
        let dir = crate::hooks::config_dir(env);
        let workspace =
            std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
        Files {
            user: dir.as_ref().map(|d| d.join("mcp.json")),
            project: workspace.join(".mcp.json"),
            trust: crate::trust::record_path(dir.as_deref()),
            workspace,
        }
    }

    /// Loads the servers: the person's, the trusted project's, then `editor`'s (see the module
    /// doc). Never fails: what cannot be used is in [`Servers::broken`] or
    /// [`Servers::untrusted`].
    pub fn load(&self, env: &Vars, editor: &[Server]) -> Servers {
        let mut out = Servers::default();
        let mut all: Vec<Server> = Vec::new();
        if let Some(user) = &self.user {
            let source = Source::User(user.clone());
            if let Some(bytes) = read(user, &source, &mut out.broken) {
                parse(&bytes, &source, env, &mut all, &mut out.broken);
            }
        }
        let source = Source::Project(self.project.clone());
        if let Some(bytes) = read(&self.project, &source, &mut out.broken) {
            let mut project = Vec::new();
            let mut broken = Vec::new();
            parse(&bytes, &source, env, &mut project, &mut broken);
            let now = covered_hashes(&project, &self.workspace);
            // Trusted: these bytes, and every file its servers run as it was trusted.
            let standing =
                Record::read_or_empty(self.trust.as_deref()).standing(&self.project, &bytes);
            let changed = match &standing {
                Standing::Trusted(recorded) => {
                    !now.iter().all(|(p, sha)| recorded.get(p) == sha.as_ref())
                }
                Standing::Untrusted { .. } => true,
            };
            if !changed {
                out.covered.extend(now.keys().map(PathBuf::from));
                all.extend(project);
                out.broken.extend(broken);
            } else {
                let mut names: Vec<String> = project.into_iter().map(|s| s.name).collect();
                names.extend(broken.into_iter().map(|b| b.name));
                out.untrusted = Some(Untrusted {
                    path: self.project.clone(),
                    changed: !matches!(standing, Standing::Untrusted { changed: false }),
                    names,
                });
            }
        }
        all.extend(editor.iter().cloned());
        for s in all {
            out.broken.retain(|b| b.name != s.name);
            out.list.retain(|o| o.name != s.name);
            out.list.push(s);
        }
        out.list.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

/// A file's bytes (None when absent; an unreadable one is a broken `*` entry).
fn read(path: &Path, source: &Source, broken: &mut Vec<Broken>) -> Option<Vec<u8>> {
    match crate::store::fsutil::read_regular(path, MAX_FILE_BYTES + 1) {
        Ok(Some(b)) if b.len() as u64 > MAX_FILE_BYTES => {
            broken.push(Broken {
                name: "*".into(),
                source: source.clone(),
                why: format!("larger than {MAX_FILE_BYTES} bytes"),
            });
            None
        }
        Ok(b) => b,
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => None,
        Err(e) => {
            broken.push(Broken {
                name: "*".into(),
                source: source.clone(),
                why: e.to_string(),
            });
            None
        }
    }
}

/// The workspace files the stdio servers of `servers` run, with their hashes now.
pub fn covered_hashes(
    servers: &[Server],
    workspace: &Path,
) -> std::collections::BTreeMap<String, Option<String>> {
    let mut out = std::collections::BTreeMap::new();
    for s in servers {
        if let Transport::Stdio { command, args, .. } = &s.transport {
            for p in covered::scan(&command_line(command, args), workspace).named {
                let sha = file_sha(&p);
                out.insert(p.display().to_string(), sha);
            }
        }
    }
    out
}

/// A stdio server's command and arguments as one line for the covered-file scan.
fn command_line(command: &str, args: &[String]) -> String {
    std::iter::once(command)
        .chain(args.iter().map(String::as_str))
        .map(shell_word)
        .collect::<Vec<_>>()
        .join(" ")
}

/// `w` quoted for the covered-file scan when it holds a space.
fn shell_word(w: &str) -> String {
    if w.contains(char::is_whitespace) {
        format!("'{}'", w.replace('\'', ""))
    } else {
        w.to_string()
    }
}

/// Whether `name` may name a server: 1 to 64 of `[A-Za-z0-9_-]`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Parses one file's `mcpServers` into `out` (and what cannot be used into `broken`).
pub fn parse(
    bytes: &[u8],
    source: &Source,
    env: &Vars,
    out: &mut Vec<Server>,
    broken: &mut Vec<Broken>,
) {
    let bad = |name: &str, why: String| Broken {
        name: name.to_string(),
        source: source.clone(),
        why,
    };
    let doc: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => {
            broken.push(bad("*", format!("not JSON: {e}")));
            return;
        }
    };
    let Some(map) = doc.get("mcpServers") else {
        if !doc.is_object() {
            broken.push(bad("*", "not a JSON object".into()));
        }
        return;
    };
    let Some(map) = map.as_object() else {
        broken.push(bad("*", "mcpServers is not an object".into()));
        return;
    };
    for (name, entry) in map {
        if !valid_name(name) {
            broken.push(bad(
                name,
                "a server name is 1 to 64 letters, digits, _ or -".into(),
            ));
            continue;
        }
        let jail = match entry.get("jail") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err("jail is true or false".to_string()),
        };
        match entry_of(entry, env).and_then(|t| Ok((t, timeouts_of(entry)?, jail?))) {
            Ok((transport, timeouts, jail)) => out.push(Server {
                name: name.clone(),
                transport,
                source: source.clone(),
                timeouts,
                jail,
            }),
            Err(why) => broken.push(bad(name, why)),
        }
    }
}

/// One entry's transport.
fn entry_of(entry: &Value, env: &Vars) -> Result<Transport, String> {
    let e = entry.as_object().ok_or("an entry is a JSON object")?;
    let kind = e.get("type").and_then(Value::as_str);
    let strings = |key: &str| -> Result<Vec<(String, String)>, String> {
        match e.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), expand(s, env)?)),
                    _ => Err(format!("{key}.{k} is not a string")),
                })
                .collect(),
            Some(_) => Err(format!("{key} is not an object of strings")),
        }
    };
    match kind {
        Some("http") | Some("streamable-http") | Some("streamableHttp") => {
            let url = e
                .get("url")
                .and_then(Value::as_str)
                .ok_or("an http server needs a url")?;
            let url = expand(url, env)?;
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!("url {url:?} is not http:// or https://"));
            }
            Ok(Transport::Http {
                url,
                headers: strings("headers")?,
            })
        }
        Some("sse") => Err(
            "the SSE transport (MCP 2024-11-05) is not supported: use \"type\": \"http\"".into(),
        ),
        None | Some("stdio") => {
            let command = e
                .get("command")
                .and_then(Value::as_str)
                .filter(|c| !c.trim().is_empty())
                .ok_or("a stdio server needs a command")?;
            let args = match e.get("args") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|v| {
                        v.as_str()
                            .ok_or_else(|| "args holds a value that is not a string".to_string())
                            .and_then(|s| expand(s, env).map_err(String::from))
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err("args is not an array of strings".into()),
            };
            Ok(Transport::Stdio {
                command: expand(command, env)?,
                args,
                env: strings("env")?,
            })
        }
        Some(other) => Err(format!("unknown type {other:?} (stdio or http)")),
    }
}

/// The variables `${VAR}` may name: the whole environment of a process (keys and values that
/// are not UTF-8 left out).
pub type Vars = std::collections::BTreeMap<String, String>;

/// This process's environment as [`Vars`] (the CLI and the launcher read it once).
pub fn process_vars() -> Vars {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// `${VAR}` and `${VAR:-default}` expanded from `env` (Claude Code's rule: the default also
/// stands for an empty value). Errors: a variable that is not set and has no default.
pub fn expand(s: &str, env: &Vars) -> Result<String, McpError> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[i..]);
            return Ok(out);
        };
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        match (env.get(name), default) {
            (Some(v), _) if !v.is_empty() => out.push_str(v),
            (_, Some(d)) => out.push_str(d),
            (Some(_), None) => {}
            (None, None) => return Err(McpError::Config(format!("${{{name}}} is not set"))),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `tern mcp trust`: records `.mcp.json`'s hash and those of the workspace files its servers
/// run in the trust record; returns the receipt naming each server and what it runs.
///
/// Errors: no project file, no home folder, a record that cannot be read or written.
pub fn trust(files: &Files, env: &Vars) -> Result<String, String> {
    if files.trust.is_none() {
        return Err(crate::trust::TrustError::NoHome.to_string());
    }
    let bytes = match crate::store::fsutil::read_regular(&files.project, MAX_FILE_BYTES + 1) {
        Ok(Some(b)) if b.len() as u64 <= MAX_FILE_BYTES => b,
        Ok(Some(_)) => {
            return Err(format!(
                "{}: larger than {MAX_FILE_BYTES} bytes",
                files.project.display()
            ));
        }
        Ok(None) => {
            return Err(format!(
                "{} does not exist: nothing to trust",
                files.project.display()
            ));
        }
        Err(e) => return Err(format!("{}: {e}", files.project.display())),
    };
    let source = Source::Project(files.project.clone());
    let (mut servers, mut broken) = (Vec::new(), Vec::new());
    parse(&bytes, &source, env, &mut servers, &mut broken);
    if let Some(b) = broken.iter().find(|b| b.name == "*") {
        return Err(format!(
            "{}: {}: nothing to trust (fix the file)",
            files.project.display(),
            b.why
        ));
    }
    let covered: std::collections::BTreeMap<String, String> =
        covered_hashes(&servers, &files.workspace)
            .into_iter()
            .filter_map(|(p, sha)| Some((p, sha?)))
            .collect();
    let sha = crate::trust::grant(
        files.trust.as_deref(),
        &files.project,
        &bytes,
        covered.clone(),
    )
    .map_err(|e| e.to_string())?
    .sha;
    let mut receipt = format!(
        "trusted {} (sha256 {sha}); any change to it needs `tern mcp trust` again. Its servers (a stdio server that runs workspace code starts in a jail of its own, with the model's rights, where the session's commands have one; the others run with your rights):",
        files.project.display()
    );
    for s in &servers {
        match &s.transport {
            Transport::Stdio { command, args, .. } => {
                let place = match s.jail {
                    Some(false) => {
                        " [\"jail\": false: runs outside the jail with your rights, whatever a command wrote in the workspace]"
                    }
                    Some(true) => " [\"jail\": true: always in a jail of its own]",
                    None if s.runs_workspace_code(&files.workspace) => {
                        " [runs workspace code: in a jail of its own]"
                    }
                    None => " [runs with your rights]",
                };
                receipt.push_str(&format!(
                    "\n  {} (stdio): {command} {}{place}",
                    s.name,
                    args.join(" ")
                ));
            }
            Transport::Http { url, .. } => {
                receipt.push_str(&format!(
                    "\n  {} (http): {}",
                    s.name,
                    crate::provider::http::display_url(url)
                ));
            }
        }
    }
    for b in &broken {
        receipt.push_str(&format!("\n  {}: not usable: {}", b.name, b.why));
    }
    if !covered.is_empty() {
        receipt.push_str(
            "\nWorkspace files they run (read-only to commands; a change needs trust again):",
        );
        for p in covered.keys() {
            receipt.push_str(&format!("\n  {p}"));
        }
    }
    Ok(receipt.trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Vars {
        vars.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn claude_codes_format_is_read() {
        let e = env(&[("TOKEN", "t0k")]);
        let src = Source::User(PathBuf::from("/u/mcp.json"));
        let (mut out, mut broken) = (Vec::new(), Vec::new());
        parse(
            br#"{"mcpServers":{
                "files":{"command":"npx","args":["-y","srv","${HOME:-/h}"],"env":{"K":"${TOKEN}"}},
                "gh":{"type":"http","url":"https://x/mcp","headers":{"Authorization":"Bearer ${TOKEN}"}},
                "old":{"type":"sse","url":"https://x/sse"},
                "bad name":{"command":"x"},
                "nokey":{"command":"x","env":{"K":"${MISSING}"}},
                "nocmd":{"args":[]}
            }}"#,
            &src,
            &e,
            &mut out,
            &mut broken,
        );
        assert_eq!(out.len(), 2);
        assert_eq!(
            out[0].transport,
            Transport::Stdio {
                command: "npx".into(),
                args: vec!["-y".into(), "srv".into(), "/h".into()],
                env: vec![("K".into(), "t0k".into())],
            }
        );
        assert_eq!(
            out[1].transport,
            Transport::Http {
                url: "https://x/mcp".into(),
                headers: vec![("Authorization".into(), "Bearer t0k".into())],
            }
        );
        let names: Vec<&str> = broken.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["old", "bad name", "nokey", "nocmd"]);
        assert!(broken[2].why.contains("${MISSING} is not set"));
        let (mut out, mut broken) = (Vec::new(), Vec::new());
        parse(b"not json", &src, &e, &mut out, &mut broken);
        assert_eq!(broken[0].name, "*");
        parse(b"{}", &src, &e, &mut out, &mut broken);
        assert_eq!((out.len(), broken.len()), (0, 1));
    }

    #[test]
    fn an_entry_s_own_timeouts_are_codex_s_names_and_bad_ones_are_named() {
        use std::time::Duration;
        let src = Source::User(PathBuf::from("/u/mcp.json"));
        let (mut out, mut broken) = (Vec::new(), Vec::new());
        parse(
            br#"{"mcpServers":{
                "a":{"command":"x","startup_timeout_sec":2.5,"tool_timeout_sec":60},
                "b":{"command":"x","startup_timeout_ms":1500},
                "c":{"command":"x"},
                "bad":{"command":"x","startup_timeout_sec":"ten"},
                "zero":{"command":"x","tool_timeout_sec":0}
            }}"#,
            &src,
            &env(&[]),
            &mut out,
            &mut broken,
        );
        let t: Vec<Timeouts> = out.iter().map(|s| s.timeouts).collect();
        assert_eq!(
            t,
            [
                Timeouts {
                    startup: Some(Duration::from_millis(2500)),
                    tool: Some(Duration::from_secs(60))
                },
                Timeouts {
                    startup: Some(Duration::from_millis(1500)),
                    tool: None
                },
                Timeouts::default(),
            ]
        );
        let why: Vec<(&str, &str)> = broken
            .iter()
            .map(|b| (b.name.as_str(), b.why.as_str()))
            .collect();
        assert_eq!(why.len(), 2, "{why:?}");
        assert!(why[0].1.contains("startup_timeout_sec"), "{why:?}");
        assert!(why[1].1.contains("tool_timeout_sec"), "{why:?}");
    }

    #[test]
    fn a_project_file_runs_only_once_trusted_and_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("srv.py"), "print()").unwrap();
        std::fs::write(
            ws.join(".mcp.json"),
            r#"{"mcpServers":{"p":{"command":"python3","args":["srv.py"]}}}"#,
        )
        .unwrap();
        let e = env(&[("HOME", dir.path().to_str().unwrap())]);
        let files = Files::new(&ws, &Env::of(&[("HOME", dir.path().to_str().unwrap())]));
        let s = files.load(&e, &[]);
        assert!(s.is_empty());
        let u = s.untrusted.clone().unwrap();
        assert_eq!((u.names, u.changed), (vec!["p".to_string()], false));
        assert!(s.why_not("p").contains("tern mcp trust"));
        let receipt = trust(&files, &e).unwrap();
        assert!(receipt.contains("srv.py"), "{receipt}");
        let s = files.load(&e, &[]);
        assert_eq!(s.names(), ["p"]);
        assert_eq!(s.covered, [ws.canonicalize().unwrap().join("srv.py")]);
        // A file the server runs changed: untrusted again.
        std::fs::write(ws.join("srv.py"), "import os").unwrap();
        let s = files.load(&e, &[]);
        assert!(s.is_empty() && s.untrusted.unwrap().changed);
        trust(&files, &e).unwrap();
        // The project file changed.
        std::fs::write(ws.join(".mcp.json"), r#"{"mcpServers":{}}"#).unwrap();
        assert!(files.load(&e, &[]).untrusted.unwrap().changed);
        // An editor's server of the same name replaces the person's.
        std::fs::create_dir_all(dir.path().join(".config/tern")).unwrap();
        std::fs::write(
            dir.path().join(".config/tern/mcp.json"),
            r#"{"mcpServers":{"a":{"command":"one"}}}"#,
        )
        .unwrap();
        let ed = Server {
            name: "a".into(),
            transport: Transport::Http {
                url: "http://127.0.0.1:1/".into(),
                headers: vec![],
            },
            source: Source::Editor,
            timeouts: Timeouts::default(),
            jail: None,
        };
        let s = files.load(&e, std::slice::from_ref(&ed));
        assert_eq!(s.list, vec![ed]);
        assert!(s.why_not("zz").contains("servers: a"));
    }

    #[test]
    fn expansion_follows_claude_codes_rule() {
        let e = env(&[("A", "1"), ("EMPTY", "")]);
        assert_eq!(expand("x${A}y${B:-2}z", &e).unwrap(), "x1y2z");
        assert_eq!(expand("${EMPTY:-d}", &e).unwrap(), "d");
        assert_eq!(expand("${EMPTY}", &e).unwrap(), "");
        assert!(expand("${B}", &e).is_err());
        assert_eq!(expand("${open", &e).unwrap(), "${open");
        assert!(valid_name("git-hub_2") && !valid_name("a.b") && !valid_name(""));
    }
}
