//! The ACP v1 messages tern reads and writes, as serde types of its own (no ACP crate: the
//! official one is async). Field names are camelCase on the wire, discriminator values
//! snake_case (ACP v1, overview: "Conventions"). Only what tern uses is modelled; unknown fields in
//! what a client sends are ignored, as the schema allows (`_meta` and future fields).
//!
//! Source: the ACP v1 schema (`schema/v1/schema.json`, tag `schema-v1.19.0`, the version the
//! Python SDK 0.12.1 is generated from) and the v1 protocol pages cited on each type.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The one protocol version tern speaks (ACP v1, initialization: "Protocol version" is a single
/// integer, the MAJOR version).
pub const PROTOCOL_VERSION: u16 = 1;

/// The extension method that returns a session's events since a `seq` (ACP v1, extensibility:
/// custom methods start with `_`). Params [`EventsParams`], result [`EventsResult`].
pub const EVENTS_METHOD: &str = "_tern/events";

// ---------------------------------------------------------------------------------------------
// Client → agent: params.

/// `initialize` params (ACP v1, initialization). `protocolVersion` is required. Of the client's
/// capabilities tern reads only `auth.terminal` ([`InitializeParams::terminal_auth`]); it calls
/// no `fs/*` or `terminal/*` method.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    /// The latest version the client supports.
    pub protocol_version: u16,
    /// What the client offers (only `auth.terminal` is read).
    #[serde(default)]
    pub client_capabilities: Option<Value>,
    /// Who the client is (logged to stderr).
    #[serde(default)]
    pub client_info: Option<Implementation>,
}

impl InitializeParams {
    /// The client can run a `terminal` auth method: `clientCapabilities.auth.terminal` is
    /// `true` (ACP v1, authentication: "Terminal Authentication": clients opt in so; an agent
    /// offers terminal methods only to those), or the older form the ACP registry's validator
    /// and some clients send, `clientCapabilities._meta["terminal-auth"]: true`.
    pub fn terminal_auth(&self) -> bool {
        let caps = self.client_capabilities.as_ref();
        let flag = |v: Option<&Value>| v.and_then(Value::as_bool).unwrap_or(false);
        flag(
            caps.and_then(|c| c.get("auth"))
                .and_then(|a| a.get("terminal")),
        ) || flag(
            caps.and_then(|c| c.get("_meta"))
                .and_then(|m| m.get("terminal-auth")),
        )
    }
}

/// `clientInfo` / `agentInfo` (ACP v1, initialization: "Implementation Information").
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Implementation {
    /// Programmatic name.
    pub name: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Version string.
    #[serde(default)]
    pub version: String,
}

/// A list read as the schema reads it (`x-deserialize-default-on-error`,
/// `x-deserialize-skip-invalid-items`): anything but an array is empty, and items of the wrong
/// shape are dropped. A client that sends `{}` for an empty list (Lua's JSON does) still works.
fn lenient_list<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    Ok(match Value::deserialize(d)? {
        Value::Array(items) => items
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect(),
        _ => Vec::new(),
    })
}

/// `session/new` params (ACP v1, session setup: "Creating a Session"). `cwd` must be absolute;
/// `mcpServers` is required by the schema but a missing or malformed list is read as empty.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSessionParams {
    /// The workspace: where bash runs and `.tern/` lives.
    pub cwd: String,
    /// MCP servers the client wants its commands to reach ([`mcp_servers`] reads them).
    #[serde(default, deserialize_with = "lenient_list")]
    pub mcp_servers: Vec<Value>,
    /// Extra roots; not offered (`sessionCapabilities.additionalDirectories` absent), so a
    /// non-empty list is refused.
    #[serde(default, deserialize_with = "lenient_list")]
    pub additional_directories: Vec<String>,
}

/// `session/load` and `session/resume` params (ACP v1, session setup: "Loading Sessions",
/// "Resuming Sessions").
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenSessionParams {
    /// A session id returned by `session/new` or `session/list`.
    pub session_id: String,
    /// The workspace, absolute.
    pub cwd: String,
    /// As for `session/new`.
    #[serde(default, deserialize_with = "lenient_list")]
    pub mcp_servers: Vec<Value>,
    /// As for `session/new`.
    #[serde(default, deserialize_with = "lenient_list")]
    pub additional_directories: Vec<String>,
}

/// `session/list` params (ACP v1, session list): both optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListSessionsParams {
    /// Only sessions whose workspace is this absolute path.
    #[serde(default)]
    pub cwd: Option<String>,
    /// The `nextCursor` of a previous page.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// Params naming one session: `session/close`, `session/cancel`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRef {
    /// The session.
    pub session_id: String,
}

/// `session/set_mode` params (ACP v1, session modes: "Setting the current mode").
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetModeParams {
    /// The session.
    pub session_id: String,
    /// One of the ids in `availableModes`.
    pub mode_id: String,
}

/// `session/prompt` params (ACP v1, prompt turn: "1. User Message").
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptParams {
    /// The session.
    pub session_id: String,
    /// The user message.
    pub prompt: Vec<ContentBlock>,
}

/// `$/cancel_request` params (ACP v1, cancellation).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelRequestParams {
    /// The id of the request to cancel.
    pub request_id: Value,
}

/// [`EVENTS_METHOD`] params: the events of `sessionId` with `seq > since`, at most `limit`
/// (default and cap [`EVENTS_PAGE`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventsParams {
    /// An open session of this connection.
    pub session_id: String,
    /// The last `seq` the client has (0: from the start).
    #[serde(default)]
    pub since: u64,
    /// Most events returned.
    #[serde(default)]
    pub limit: Option<usize>,
}

/// tern's extension method that steers a running turn (see `crate::runtime::steer`).
pub const STEER_METHOD: &str = "_tern/steer";

/// [`STEER_METHOD`] params: `text` for the running turn of `sessionId`; with `queue`, kept for
/// its next turn when none is running (else refused).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SteerParams {
    /// An open session of this connection.
    pub session_id: String,
    /// The message, as the model will read it.
    pub text: String,
    /// Keep it for the next turn when no turn is running.
    #[serde(default)]
    pub queue: bool,
}

/// Default and largest page of [`EVENTS_METHOD`].
pub const EVENTS_PAGE: usize = 1000;

/// [`EVENTS_METHOD`] result: `events` in `seq` order (the objects of `events.jsonl`); `next` is
/// the `since` of the next call; `more` says whether events past this page exist.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventsResult {
    /// The events, oldest first.
    pub events: Vec<Value>,
    /// The highest `seq` returned (or `since` when none).
    pub next: u64,
    /// More events follow.
    pub more: bool,
}

/// A content block of a prompt (ACP v1, content). tern accepts text, resource links and
/// embedded resources (`promptCapabilities.embeddedContext`); images and audio are not
/// offered and are refused.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image (not offered).
    Image(Map<String, Value>),
    /// Audio (not offered).
    Audio(Map<String, Value>),
    /// A reference to a resource the model can read itself.
    #[serde(rename_all = "camelCase")]
    ResourceLink {
        /// The URI, e.g. `file:///home/u/p/src/main.rs`.
        uri: String,
        /// Display name.
        name: String,
        /// Optional title.
        #[serde(default)]
        title: Option<String>,
        /// Optional MIME type.
        #[serde(default)]
        mime_type: Option<String>,
    },
    /// A resource whose contents the client embedded.
    Resource {
        /// Text or blob contents.
        resource: EmbeddedResource,
    },
}

/// The contents of an embedded resource: text, or a base64 blob (ACP v1, content:
/// "Embedded Resource").
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum EmbeddedResource {
    /// Text contents.
    #[serde(rename_all = "camelCase")]
    Text {
        /// The resource's URI.
        uri: String,
        /// Its text.
        text: String,
        /// Optional MIME type.
        #[serde(default)]
        mime_type: Option<String>,
    },
    /// Binary contents (base64).
    #[serde(rename_all = "camelCase")]
    Blob {
        /// The resource's URI.
        uri: String,
        /// Base64 data.
        blob: String,
        /// Optional MIME type.
        #[serde(default)]
        mime_type: Option<String>,
    },
}

/// Largest prompt accepted after its blocks are joined, in bytes (the same cap as
/// `tern exec`'s prompt: it is sent again in every later request).
pub const MAX_PROMPT_BYTES: usize = crate::runtime::MAX_PROMPT_BYTES;

/// Joins a prompt's blocks into the one user message tern stores: text as is, a resource link
/// as a line naming it (a `file://` URI as its path), an embedded text resource inside
/// `<resource uri="…">…</resource>`, a binary one as a line saying it was left out.
///
/// Errors (for a `-32602` answer): an image or audio block, an empty prompt, or one longer than
/// [`MAX_PROMPT_BYTES`].
pub fn prompt_text(blocks: &[ContentBlock]) -> Result<String, String> {
    let mut parts: Vec<String> = Vec::new();
    for b in blocks {
        match b {
            ContentBlock::Text { text } => parts.push(text.clone()),
            ContentBlock::Image(_) | ContentBlock::Audio(_) => {
                return Err(
                    "tern accepts text, resource links and embedded text resources; image and audio blocks are not offered (promptCapabilities)".into(),
                );
            }
            ContentBlock::ResourceLink {
                uri,
                name,
                title,
                mime_type,
            } => {
                let label = title.as_deref().unwrap_or(name);
                let mime = mime_type
                    .as_deref()
                    .map(|m| format!(", {m}"))
                    .unwrap_or_default();
                parts.push(format!("[resource: {label}{mime}] {}", uri_display(uri)));
            }
            ContentBlock::Resource { resource } => match resource {
                EmbeddedResource::Text { uri, text, .. } => {
                    let mut t = text.clone();
                    if !t.ends_with('\n') {
                        t.push('\n');
                    }
                    parts.push(format!(
                        "<resource uri=\"{}\">\n{t}</resource>",
                        uri_display(uri).replace('"', "%22")
                    ));
                }
                EmbeddedResource::Blob {
                    uri,
                    blob,
                    mime_type,
                } => parts.push(format!(
                    "[binary resource left out: {} ({}, {} base64 bytes)]",
                    uri_display(uri),
                    mime_type.as_deref().unwrap_or("no type"),
                    blob.len()
                )),
            },
        }
    }
    let text = parts.join("\n\n");
    if text.trim().is_empty() {
        return Err("the prompt is empty".into());
    }
    if text.len() > MAX_PROMPT_BYTES {
        return Err(format!(
            "the prompt is longer than {} KiB; put the material in a file and point the model at it",
            MAX_PROMPT_BYTES >> 10
        ));
    }
    Ok(text)
}

/// A `file://` URI as its (percent-decoded) path; any other URI as given.
pub fn uri_display(uri: &str) -> String {
    let Some(rest) = uri.strip_prefix("file://") else {
        return uri.to_string();
    };
    // `file://host/path`: only an empty host or localhost names this machine.
    let path = match rest.strip_prefix("localhost") {
        Some(p) if p.starts_with('/') => p,
        _ => rest,
    };
    if !path.starts_with('/') {
        return uri.to_string();
    }
    percent_decode(path).unwrap_or_else(|| uri.to_string())
}

/// Decodes `%XX` escapes; None when an escape is malformed or the bytes are not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

// ---------------------------------------------------------------------------------------------
// Agent → client: results.

/// `initialize` result (ACP v1, initialization).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    /// The version chosen: the client's when tern supports it, else tern's latest
    /// ("Version Negotiation").
    pub protocol_version: u16,
    /// What tern offers; anything not listed is not offered.
    pub agent_capabilities: AgentCapabilities,
    /// `[{"type": "terminal", "id": "tern-setup", "args": ["setup"], …}]` when the client
    /// declared `auth.terminal`, else `[]`: `tern setup` run by the client in a terminal writes
    /// the provider config (ACP v1, authentication: "Terminal Authentication").
    pub auth_methods: Vec<AuthMethod>,
    /// tern's name and version.
    pub agent_info: Implementation,
}

/// One authentication method (ACP v1 schema `AuthMethodTerminal`): the client runs tern's own
/// binary with `args` in an interactive terminal; exit status 0 means it is set up.
#[derive(Debug, Clone, Serialize)]
pub struct AuthMethod {
    /// Always `terminal`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The method id ([`SETUP_METHOD`]).
    pub id: &'static str,
    /// Shown to the person.
    pub name: &'static str,
    /// One sentence.
    pub description: &'static str,
    /// Appended to the agent's command line: `["setup"]`.
    pub args: Vec<&'static str>,
    /// Extra environment (none).
    pub env: serde_json::Map<String, Value>,
}

/// The id of the `tern setup` auth method.
pub const SETUP_METHOD: &str = "tern-setup";

/// The auth methods tern offers: `tern setup` in a terminal, to a client that can run one
/// (`terminal`: it declared `clientCapabilities.auth.terminal: true`); none to others, which
/// could not run it (the person runs `tern setup` themselves; errors say so).
pub fn auth_methods(terminal: bool) -> Vec<AuthMethod> {
    if !terminal {
        return Vec::new();
    }
    vec![AuthMethod {
        kind: "terminal",
        id: SETUP_METHOD,
        name: "Set up a model provider",
        description: "Runs `tern setup`: choose the provider, base URL, model and key; tern tests them with one small request and saves ~/.config/tern/config.json",
        args: vec!["setup"],
        env: serde_json::Map::new(),
    }]
}

/// `authenticate` params (ACP v1, initialization).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthenticateParams {
    /// One of the offered `authMethods` ids.
    pub method_id: String,
}

/// `session/set_model` params (ACP unstable "session models"; the schema's
/// `SetSessionModelRequest`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetModelParams {
    /// The session.
    pub session_id: String,
    /// The model name to send requests to (any name the server accepts).
    pub model_id: String,
}

/// `session/set_config_option` params (ACP v1, session config options:
/// `SetSessionConfigOptionRequest`): the option's id and the id of its new value.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetConfigOptionParams {
    /// The session.
    pub session_id: String,
    /// The option ([`EFFORT_OPTION`]).
    pub config_id: String,
    /// The new value's id (a `select`'s option value).
    pub value: Value,
}

/// The id of tern's config option: how much a reasoning model thinks (`--reasoning-effort`).
pub const EFFORT_OPTION: &str = "reasoning_effort";

/// The values [`EFFORT_OPTION`] offers, `default` first (unset: the model's own, nothing sent).
pub const EFFORT_VALUES: [&str; 7] = ["default", "none", "minimal", "low", "medium", "high", "max"];

/// A session's config options (ACP v1, session config options: `SessionConfigOption`, a
/// `select` with the `thought_level` category): the reasoning effort, `current` its value's id.
pub fn config_options(current: &str) -> Vec<Value> {
    let options: Vec<Value> = EFFORT_VALUES
        .iter()
        .map(|v| serde_json::json!({"value": v, "name": v}))
        .collect();
    vec![serde_json::json!({
        "id": EFFORT_OPTION,
        "name": "Reasoning effort",
        "description": "How much a reasoning model thinks (--reasoning-effort); default sends nothing",
        "category": "thought_level",
        "type": "select",
        "currentValue": current,
        "options": options,
    })]
}

/// `SessionModelState` (ACP unstable "session models"): the models a client may offer and the
/// current one.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionModelState {
    /// The model the next request goes to.
    pub current_model_id: String,
    /// The config's `models` list plus the current one.
    pub available_models: Vec<ModelInfo>,
}

/// One model of [`SessionModelState`].
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelInfo {
    /// The name sent to the provider.
    pub model_id: String,
    /// Shown to the person (the same name).
    pub name: String,
}

/// `agentCapabilities` (ACP v1, initialization: "Agent Capabilities").
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCapabilities {
    /// `session/load` is available.
    pub load_session: bool,
    /// Which content blocks a prompt may hold.
    pub prompt_capabilities: PromptCapabilities,
    /// MCP transports beyond stdio (none).
    pub mcp_capabilities: McpCapabilities,
    /// Optional session methods: list, resume, close.
    pub session_capabilities: SessionCapabilities,
    /// Custom capabilities: `{"tern": {"events": "_tern/events", "steer": "_tern/steer"}}`.
    #[serde(rename = "_meta")]
    pub meta: Value,
}

/// `promptCapabilities`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptCapabilities {
    /// Image blocks.
    pub image: bool,
    /// Audio blocks.
    pub audio: bool,
    /// Embedded resources.
    pub embedded_context: bool,
}

/// `mcpCapabilities`.
#[derive(Debug, Clone, Serialize)]
pub struct McpCapabilities {
    /// MCP over HTTP.
    pub http: bool,
    /// MCP over SSE.
    pub sse: bool,
}

/// `sessionCapabilities`: each present key (an empty object) offers one method; absent keys
/// (`delete`, `additionalDirectories`) are not offered.
#[derive(Debug, Clone, Serialize)]
pub struct SessionCapabilities {
    /// `session/list`.
    pub list: Value,
    /// `session/resume`.
    pub resume: Value,
    /// `session/close`.
    pub close: Value,
    /// `session/fork` (UNSTABLE in the SDK 0.12.1 schema).
    pub fork: Value,
}

/// The servers of a `session/new` / `session/load` `mcpServers` list (ACP v1, session setup:
/// "MCP Servers"): stdio `{name, command, args, env: [{name, value}]}` and, as offered by
/// `mcpCapabilities.http`, `{type: "http", name, url, headers: [{name, value}]}`. What cannot
/// be used (SSE, which tern does not offer; a bad name; a missing field) comes back as one line
/// each.
pub fn mcp_servers(list: &[Value]) -> (Vec<crate::mcp::Server>, Vec<String>) {
    use crate::mcp::{Server, Source, Transport};
    let pairs = |v: Option<&Value>| -> Vec<(String, String)> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|p| {
                        Some((
                            p.get("name")?.as_str()?.to_string(),
                            p.get("value")?.as_str()?.to_string(),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let (mut ok, mut refused) = (Vec::new(), Vec::new());
    for s in list {
        let name = s.get("name").and_then(Value::as_str).unwrap_or("");
        if !crate::mcp::config::valid_name(name) {
            refused.push(format!(
                "{name:?}: a server name is 1 to 64 letters, digits, _ or -"
            ));
            continue;
        }
        let transport = match s.get("type").and_then(Value::as_str) {
            None | Some("stdio") => match s.get("command").and_then(Value::as_str) {
                Some(c) if !c.trim().is_empty() => Transport::Stdio {
                    command: c.to_string(),
                    args: s
                        .get("args")
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(Value::as_str)
                                .map(str::to_string)
                                .collect()
                        })
                        .unwrap_or_default(),
                    env: pairs(s.get("env")),
                },
                _ => {
                    refused.push(format!("{name}: a stdio server needs a command"));
                    continue;
                }
            },
            Some("http") => match s.get("url").and_then(Value::as_str) {
                Some(u) if u.starts_with("http://") || u.starts_with("https://") => {
                    Transport::Http {
                        url: u.to_string(),
                        headers: pairs(s.get("headers")),
                    }
                }
                _ => {
                    refused.push(format!("{name}: an http server needs an http(s) url"));
                    continue;
                }
            },
            Some(other) => {
                refused.push(format!(
                    "{name}: the {other} transport is not offered (mcpCapabilities: stdio and http)"
                ));
                continue;
            }
        };
        ok.push(Server {
            name: name.to_string(),
            transport,
            source: Source::Editor,
            timeouts: Default::default(),
            jail: None,
        });
    }
    (ok, refused)
}

/// The capabilities tern states: load, list, resume, close; text, resource links and embedded
/// resources in prompts; MCP servers over stdio and HTTP (reached by the session's commands
/// through `tern mcp`); the events extension under `_meta`.
pub fn agent_capabilities() -> AgentCapabilities {
    AgentCapabilities {
        load_session: true,
        prompt_capabilities: PromptCapabilities {
            image: false,
            audio: false,
            embedded_context: true,
        },
        mcp_capabilities: McpCapabilities {
            http: true,
            sse: false,
        },
        session_capabilities: SessionCapabilities {
            list: Value::Object(Map::new()),
            resume: Value::Object(Map::new()),
            close: Value::Object(Map::new()),
            fork: Value::Object(Map::new()),
        },
        meta: serde_json::json!({"tern": {"events": EVENTS_METHOD, "steer": STEER_METHOD}}),
    }
}

/// `session/new` result (ACP v1, session setup; modes: session modes "Initial state").
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSessionResult {
    /// The tern session id (`YYYYMMDD-HHMMSS-xxxx`).
    pub session_id: String,
    /// The modes and the current one.
    pub modes: SessionModeState,
    /// The models and the current one (for `session/set_model`).
    pub models: SessionModelState,
    /// The config options and their values (for `session/set_config_option`).
    pub config_options: Vec<Value>,
    /// `{"tern": {"mcpServers": "…"}}` when MCP servers were given and ignored.
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

/// `session/load` and `session/resume` result.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenSessionResult {
    /// The modes and the current one.
    pub modes: SessionModeState,
    /// The models and the current one.
    pub models: SessionModelState,
    /// The config options and their values.
    pub config_options: Vec<Value>,
    /// As for [`NewSessionResult::meta`].
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

/// `SessionModeState` (ACP v1, session modes).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionModeState {
    /// The active mode.
    pub current_mode_id: String,
    /// Every mode.
    pub available_modes: Vec<SessionMode>,
}

/// One `SessionMode`.
#[derive(Debug, Clone, Serialize)]
pub struct SessionMode {
    /// Mode id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// What it does.
    pub description: String,
}

/// `session/list` result (ACP v1, session list).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListSessionsResult {
    /// One page, newest first.
    pub sessions: Vec<SessionInfo>,
    /// Present when another page follows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// One `SessionInfo`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    /// The session id.
    pub session_id: String,
    /// Its workspace (absolute).
    pub cwd: String,
    /// Its first prompt, cut to 80 characters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// ISO 8601 time of the last change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    /// `{"tern": {"status", "requests"}}` (`requests`: model requests, meta.json's `turns`).
    #[serde(rename = "_meta")]
    pub meta: Value,
}

/// Why a prompt turn stopped (ACP v1, prompt turn: "Stop Reasons"). tern never answers
/// `refusal` (the model did not refuse): a turn tern could not finish (the provider failed) is an
/// error response carrying tern's reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model answered without asking for more tools.
    EndTurn,
    /// The model's final answer was cut at the output cap (`finish_reason` `length`,
    /// Anthropic's `stop_reason` `max_tokens`).
    MaxTokens,
    /// `--max-turns` model requests were made.
    MaxTurnRequests,
    /// The model refused (never sent by tern; kept so the type names the whole spec list).
    Refusal,
    /// The client cancelled the turn.
    Cancelled,
}

/// `session/prompt` result.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptResult {
    /// Why the turn stopped.
    pub stop_reason: StopReason,
    /// The turn's tokens, its sub-agents' included (absent for an op or a turn that never
    /// ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<TurnUsage>,
    /// `{"tern": {…}}`: the turn's status and error (a turn's `costUsd` too), or an op's
    /// receipt.
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

// ---------------------------------------------------------------------------------------------
// Agent → client: notifications and requests.

/// `session/update` params (ACP v1, prompt turn: "3. Agent Reports Output").
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionNotification {
    /// The session.
    pub session_id: String,
    /// What changed.
    pub update: SessionUpdate,
}

/// One session update, tagged by `sessionUpdate`.
#[derive(Debug, Clone, Serialize)]
#[serde(
    tag = "sessionUpdate",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum SessionUpdate {
    /// Part of a user message (replayed by `session/load`).
    UserMessageChunk {
        /// The text.
        content: TextBlock,
    },
    /// Part of the agent's answer.
    AgentMessageChunk {
        /// The text.
        content: TextBlock,
    },
    /// The agent's own notes (ACP v1, prompt turn: `agent_thought_chunk`): tern sends each
    /// `hook` run here.
    AgentThoughtChunk {
        /// The text.
        content: TextBlock,
    },
    /// A new tool call (ACP v1, tool calls: "Creating").
    ToolCall(ToolCall),
    /// A change to a tool call (ACP v1, tool calls: "Updating").
    ToolCallUpdate(ToolCallUpdate),
    /// The whole To-do ledger as a plan (ACP v1, agent plan: every update lists every entry).
    Plan {
        /// All entries.
        entries: Vec<PlanEntry>,
    },
    /// The commands a client may offer (ACP v1, slash commands).
    AvailableCommandsUpdate {
        /// Every command.
        available_commands: Vec<AvailableCommand>,
    },
    /// The agent changed its own mode (ACP v1, session modes: "From the Agent").
    CurrentModeUpdate {
        /// The new mode.
        current_mode_id: String,
    },
    /// Context use after a model request (ACP v1, prompt turn: "Session Usage Updates").
    UsageUpdate {
        /// Tokens in the context now (the last request's input + output).
        used: u64,
        /// The context window in tokens (`--context-window`).
        size: u64,
        /// The session's cost so far (ACP v1, session usage: "Cumulative session cost"),
        /// absent when tern knows no price for the model.
        #[serde(skip_serializing_if = "Option::is_none")]
        cost: Option<Cost>,
        /// `{"tern": {input, cached, cache_write, output tokens, purpose, costUsd, miss}}`.
        #[serde(rename = "_meta")]
        meta: Value,
    },
}

/// An amount of money (ACP v1, session usage: `cost`), always in US dollars here.
#[derive(Debug, Clone, Serialize)]
pub struct Cost {
    /// The amount.
    pub amount: f64,
    /// ISO 4217 code: `USD`.
    pub currency: &'static str,
}

impl Cost {
    /// `usd` dollars, rounded to a millionth.
    pub fn usd(usd: f64) -> Cost {
        Cost {
            amount: crate::cost::usd_json(usd),
            currency: "USD",
        }
    }
}

/// A turn's token usage (ACP v1, `PromptResponse.usage`, unstable: token counts of this turn).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnUsage {
    /// Input plus output tokens.
    pub total_tokens: u64,
    /// Prompt tokens, cached ones included.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// Prompt tokens read from the provider's cache.
    pub cached_read_tokens: u64,
    /// Prompt tokens written to it.
    pub cached_write_tokens: u64,
}

impl TurnUsage {
    /// The ACP shape of tern's usage figures.
    pub fn of(u: &crate::message::Usage) -> TurnUsage {
        TurnUsage {
            total_tokens: u.input_tokens.saturating_add(u.output_tokens),
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cached_read_tokens: u.cached_tokens,
            cached_write_tokens: u.cache_write_tokens,
        }
    }
}

/// A text content block `{"type": "text", "text": …}`.
#[derive(Debug, Clone, Serialize)]
pub struct TextBlock {
    /// Always `text`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The text.
    pub text: String,
}

impl TextBlock {
    /// A text block.
    pub fn new(text: impl Into<String>) -> TextBlock {
        TextBlock {
            kind: "text",
            text: text.into(),
        }
    }
}

/// Tool kinds tern uses (ACP v1, tool calls: `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// A bash command.
    Execute,
    /// The plan and progress tools (`work_update`, `update_plan`, `plan_*`).
    Think,
    /// Anything else (an unknown tool name the model made up).
    Other,
}

/// Tool call statuses (ACP v1, tool calls: "Status").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallStatus {
    /// Not started (awaiting approval).
    Pending,
    /// Running.
    InProgress,
    /// Finished.
    Completed,
    /// Refused, failed, timed out, interrupted, or exited non-zero.
    Failed,
}

/// A `tool_call` update.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    /// Unique within the session.
    pub tool_call_id: String,
    /// For bash: the command.
    pub title: String,
    /// The category.
    pub kind: ToolKind,
    /// The status.
    pub status: ToolCallStatus,
    /// The tool's arguments.
    pub raw_input: Value,
}

/// A `tool_call_update` (also the `toolCall` of a permission request): only the fields that
/// change.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallUpdate {
    /// Which call.
    pub tool_call_id: String,
    /// New status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<ToolCallStatus>,
    /// New title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The category.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<ToolKind>,
    /// What the tool produced: the result the model reads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<ToolCallContent>>,
    /// The tool's arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<Value>,
    /// Process details of a bash call (exit code, timed out, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_output: Option<Value>,
}

/// Tool call content `{"type": "content", "content": {text block}}`.
#[derive(Debug, Clone, Serialize)]
pub struct ToolCallContent {
    /// Always `content`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The text.
    pub content: TextBlock,
}

impl ToolCallContent {
    /// Text content.
    pub fn text(text: impl Into<String>) -> ToolCallContent {
        ToolCallContent {
            kind: "content",
            content: TextBlock::new(text),
        }
    }
}

/// A plan entry (ACP v1, agent plan: "Plan Entries").
#[derive(Debug, Clone, Serialize)]
pub struct PlanEntry {
    /// What the item is.
    pub content: String,
    /// `high`, `medium` or `low`: tern's ledger has no priority, so always `medium`.
    pub priority: &'static str,
    /// `pending`, `in_progress` or `completed` (a cancelled item is `completed`, its content
    /// marked `[cancelled]`).
    pub status: &'static str,
}

/// One available command (ACP v1, slash commands: "AvailableCommand").
#[derive(Debug, Clone, Serialize)]
pub struct AvailableCommand {
    /// The name without `/`.
    pub name: String,
    /// What it does.
    pub description: String,
}

/// `session/request_permission` params (ACP v1, tool calls: "Requesting Permission").
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestPermissionParams {
    /// The session.
    pub session_id: String,
    /// The call waiting for an answer.
    pub tool_call: ToolCallUpdate,
    /// The choices.
    pub options: Vec<PermissionOption>,
}

/// One permission option.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionOption {
    /// What the client answers with.
    pub option_id: &'static str,
    /// Label.
    pub name: &'static str,
    /// `allow_once`, `allow_always`, `reject_once`, `reject_always`.
    pub kind: &'static str,
}

/// The client's answer to a permission request.
#[derive(Debug, Clone, Deserialize)]
pub struct RequestPermissionResponse {
    /// Cancelled, or the option chosen.
    pub outcome: PermissionOutcome,
}

/// `RequestPermissionOutcome`, tagged by `outcome`.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum PermissionOutcome {
    /// The prompt turn was cancelled.
    Cancelled,
    /// An option was chosen.
    #[serde(rename_all = "camelCase")]
    Selected {
        /// Its id.
        option_id: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn blocks_join_into_one_message() {
        let blocks: Vec<ContentBlock> = serde_json::from_value(json!([
            {"type": "text", "text": "Look at this"},
            {"type": "resource_link", "uri": "file:///home/u/p/a%20b.rs", "name": "a b.rs"},
            {"type": "resource", "resource": {"uri": "file:///home/u/p/x.py", "text": "print(1)", "mimeType": "text/x-python"}},
            {"type": "resource", "resource": {"uri": "file:///img.png", "blob": "AAAA", "mimeType": "image/png"}}
        ]))
        .unwrap();
        let text = prompt_text(&blocks).unwrap();
        assert_eq!(
            text,
            "Look at this\n\n[resource: a b.rs] /home/u/p/a b.rs\n\n<resource uri=\"/home/u/p/x.py\">\nprint(1)\n</resource>\n\n[binary resource left out: /img.png (image/png, 4 base64 bytes)]"
        );
    }

    #[test]
    fn images_empty_and_huge_prompts_are_refused() {
        let img: Vec<ContentBlock> = serde_json::from_value(
            json!([{"type": "image", "data": "AAAA", "mimeType": "image/png"}]),
        )
        .unwrap();
        assert!(prompt_text(&img).unwrap_err().contains("image"));
        let empty: Vec<ContentBlock> =
            serde_json::from_value(json!([{"type": "text", "text": "  "}])).unwrap();
        assert!(prompt_text(&empty).is_err());
        let huge = vec![ContentBlock::Text {
            text: "x".repeat(MAX_PROMPT_BYTES + 1),
        }];
        assert!(prompt_text(&huge).unwrap_err().contains("KiB"));
        let unknown: Result<Vec<ContentBlock>, _> =
            serde_json::from_value(json!([{"type": "video"}]));
        assert!(unknown.is_err());
    }

    #[test]
    fn lists_are_read_leniently() {
        let p: NewSessionParams =
            serde_json::from_value(json!({"cwd": "/w", "mcpServers": {}})).unwrap();
        assert!(p.mcp_servers.is_empty());
        let p: NewSessionParams = serde_json::from_value(
            json!({"cwd": "/w", "mcpServers": [{"name": "a"}], "additionalDirectories": [1, "/x"]}),
        )
        .unwrap();
        assert_eq!(p.mcp_servers.len(), 1);
        assert_eq!(p.additional_directories, ["/x"]);
        let p: NewSessionParams = serde_json::from_value(json!({"cwd": "/w"})).unwrap();
        assert!(p.mcp_servers.is_empty());
    }

    #[test]
    fn uris() {
        assert_eq!(uri_display("file:///a/b"), "/a/b");
        assert_eq!(uri_display("file://localhost/a/%41"), "/a/A");
        assert_eq!(uri_display("file://host/a"), "file://host/a");
        assert_eq!(uri_display("https://x/y"), "https://x/y");
        assert_eq!(uri_display("file:///a%zz"), "file:///a%zz");
    }

    #[test]
    fn updates_serialize_as_the_schema_says() {
        let n = SessionNotification {
            session_id: "s".into(),
            update: SessionUpdate::ToolCall(ToolCall {
                tool_call_id: "c".into(),
                title: "ls".into(),
                kind: ToolKind::Execute,
                status: ToolCallStatus::Pending,
                raw_input: json!({"command": "ls"}),
            }),
        };
        assert_eq!(
            serde_json::to_value(&n).unwrap(),
            json!({"sessionId": "s", "update": {"sessionUpdate": "tool_call", "toolCallId": "c", "title": "ls", "kind": "execute", "status": "pending", "rawInput": {"command": "ls"}}})
        );
        let u = SessionUpdate::AvailableCommandsUpdate {
            available_commands: vec![AvailableCommand {
                name: "plan".into(),
                description: "d".into(),
            }],
        };
        assert_eq!(
            serde_json::to_value(&u).unwrap(),
            json!({"sessionUpdate": "available_commands_update", "availableCommands": [{"name": "plan", "description": "d"}]})
        );
        let m = SessionUpdate::CurrentModeUpdate {
            current_mode_id: "auto".into(),
        };
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            json!({"sessionUpdate": "current_mode_update", "currentModeId": "auto"})
        );
        let r: RequestPermissionResponse =
            serde_json::from_value(json!({"outcome": {"outcome": "selected", "optionId": "x"}}))
                .unwrap();
        assert!(matches!(r.outcome, PermissionOutcome::Selected { option_id } if option_id == "x"));
    }
}
