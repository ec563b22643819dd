//! The MCP messages tern sends and reads, as pure functions over JSON (no I/O): JSON-RPC 2.0
//! framing, the two protocol eras' handshakes, `_meta`, tool listings and what a result means.
//!
//! Two eras (MCP specification revisions):
//! - **2026-07-28**, stateless: no handshake; `server/discover` answers `supportedVersions` and
//!   `capabilities`; every request carries the protocol version, the client's capabilities and
//!   its name in `params._meta` (`io.modelcontextprotocol/…` keys, SEP-2575); a result may say
//!   `resultType` (`complete` when absent).
//! - **2025-11-25** and earlier dated revisions, stateful: `initialize` (protocol version,
//!   capabilities, client info), then the `notifications/initialized` notification.

use super::McpError;
use serde_json::{Map, Value, json};

/// The stateless revision tern speaks first.
pub const STATELESS: &str = "2026-07-28";
/// The stateful revision tern offers in `initialize`.
pub const STATEFUL: &str = "2025-11-25";
/// Dated revisions of the stateful era whose answers tern accepts (their tool listing and
/// calling did not change in ways tern uses).
pub const STATEFUL_KNOWN: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", STATEFUL];

/// `_meta` key: the protocol version of this request (2026-07-28).
pub const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key: the client's capabilities (2026-07-28).
pub const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key: the client's name and version (2026-07-28).
pub const META_CLIENT: &str = "io.modelcontextprotocol/clientInfo";

/// JSON-RPC: the method is unknown.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// MCP 2026-07-28: the protocol version of the request is not one the server speaks
/// (`data.supported` lists those it does).
pub const UNSUPPORTED_VERSION: i64 = -32022;

/// Which handshake a server answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// 2026-07-28: `server/discover`, `_meta` on every request.
    Stateless,
    /// 2025-11-25 and before: `initialize`.
    Stateful,
}

impl Era {
    /// The other era (tried when this one's handshake is not understood).
    pub fn other(self) -> Era {
        match self {
            Era::Stateless => Era::Stateful,
            Era::Stateful => Era::Stateless,
        }
    }
}

/// The protocol a server and tern agreed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agreed {
    /// The era of its handshake.
    pub era: Era,
    /// The protocol version every later request names.
    pub version: String,
    /// The server's name and version, as it gave them (`serverInfo`).
    pub server: String,
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// Its code (JSON-RPC 2.0 §5.1; MCP's own codes).
    pub code: i64,
    /// Its message.
    pub message: String,
    /// Its data, if any.
    pub data: Option<Value>,
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (code {})", self.message.trim(), self.code)
    }
}

/// One message a server sent, classified.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// The answer to request `id`.
    Response {
        /// The request id it answers.
        id: Value,
        /// Its result or error.
        outcome: Result<Value, RpcError>,
    },
    /// A request of the server's (it expects an answer).
    Request {
        /// Its id.
        id: Value,
        /// Its method.
        method: String,
    },
    /// A notification (no answer).
    Notification,
    /// Not a JSON-RPC message (named why).
    Invalid(String),
}

/// Classifies one JSON value a server sent.
pub fn classify(v: Value) -> Incoming {
    let Value::Object(mut m) = v else {
        return Incoming::Invalid("not a JSON object".into());
    };
    let method = m.get("method").and_then(Value::as_str).map(str::to_string);
    let id = m.remove("id");
    match (method, id) {
        (Some(method), Some(id)) if !id.is_null() => Incoming::Request { id, method },
        (Some(_), _) => Incoming::Notification,
        (None, Some(id)) => {
            if let Some(e) = m.remove("error") {
                let code = e.get("code").and_then(Value::as_i64).unwrap_or(0);
                let message = e
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("(no message)")
                    .to_string();
                let data = e.get("data").cloned();
                Incoming::Response {
                    id,
                    outcome: Err(RpcError {
                        code,
                        message,
                        data,
                    }),
                }
            } else if let Some(r) = m.remove("result") {
                Incoming::Response { id, outcome: Ok(r) }
            } else {
                Incoming::Invalid("a response with neither result nor error".into())
            }
        }
        (None, None) => Incoming::Invalid("neither a method nor an id".into()),
    }
}

/// tern's name and version as MCP's `clientInfo`.
pub fn client_info() -> Value {
    json!({"name": "tern", "version": env!("CARGO_PKG_VERSION")})
}

/// The `_meta` every request carries (SEP-2575's keys; harmless to a stateful server, which
/// ignores keys it does not know).
pub fn meta(version: &str) -> Value {
    json!({
        META_VERSION: version,
        META_CAPABILITIES: {},
        META_CLIENT: client_info(),
    })
}

/// A request: `params` (an object, or nothing) with `_meta` for `version` added.
pub fn request(id: u64, method: &str, params: Option<Value>, version: &str) -> Value {
    let mut p = match params {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    let mut meta = match p.remove("_meta") {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    if let Value::Object(ours) = self::meta(version) {
        for (k, v) in ours {
            meta.entry(k).or_insert(v);
        }
    }
    p.insert("_meta".into(), Value::Object(meta));
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": p})
}

/// A notification (no id).
pub fn notification(method: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": method})
}

/// `notifications/cancelled` for request `id`: the client no longer wants its answer (MCP
/// 2025-11-25, "Cancellation": the server should stop the work and send no response).
pub fn cancelled(id: u64, reason: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
           "params": {"requestId": id, "reason": reason}})
}

/// tern's answer to a server's request: `ping` is answered with an empty result, anything else
/// (sampling, elicitation, roots: capabilities tern does not declare) with "method not found".
pub fn answer(id: Value, method: &str) -> Value {
    if method == "ping" {
        json!({"jsonrpc": "2.0", "id": id, "result": {}})
    } else {
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": METHOD_NOT_FOUND,
               "message": format!("tern does not support {method}")}})
    }
}

/// The `initialize` parameters (stateful era).
pub fn initialize_params() -> Value {
    json!({"protocolVersion": STATEFUL, "capabilities": {}, "clientInfo": client_info()})
}

fn server_name(result: &Value) -> String {
    let info = result.get("serverInfo").or_else(|| {
        result
            .get("_meta")
            .and_then(|m| m.get("io.modelcontextprotocol/serverInfo"))
    });
    let name = info
        .and_then(|i| i.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let version = info
        .and_then(|i| i.get("version"))
        .and_then(Value::as_str)
        .unwrap_or("");
    format!("{name} {version}").trim().to_string()
}

/// What a `server/discover` result means: the stateless era when it lists [`STATELESS`];
/// `Ok(None)` when it lists only versions of the stateful era, or has no `supportedVersions`
/// (a stateful server that answers unknown methods with an empty result): `initialize` next.
///
/// Errors: it lists only versions tern does not speak.
pub fn discovered(result: &Value) -> Result<Option<Agreed>, McpError> {
    // A lenient stateful server answers any method it does not know with an empty result:
    // without `supportedVersions` this is no stateless server, so `initialize` is next.
    let Some(versions) = result.get("supportedVersions").and_then(Value::as_array) else {
        return Ok(None);
    };
    let versions: Vec<&str> = versions.iter().filter_map(Value::as_str).collect();
    if versions.contains(&STATELESS) {
        return Ok(Some(Agreed {
            era: Era::Stateless,
            version: STATELESS.to_string(),
            server: server_name(result),
        }));
    }
    if versions.iter().any(|v| STATEFUL_KNOWN.contains(v)) {
        return Ok(None);
    }
    Err(McpError::Protocol(format!(
        "the server speaks MCP {}; tern speaks {STATELESS} and {STATEFUL}",
        versions.join(", ")
    )))
}

/// What an `initialize` result means.
///
/// Errors: no `protocolVersion`, or one tern does not speak.
pub fn initialized(result: &Value) -> Result<Agreed, McpError> {
    let v = result
        .get("protocolVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| McpError::Protocol("initialize answered without protocolVersion".into()))?;
    if !STATEFUL_KNOWN.contains(&v) {
        return Err(McpError::Protocol(format!(
            "the server chose MCP {v}; tern speaks {STATELESS} and {STATEFUL}"
        )));
    }
    Ok(Agreed {
        era: Era::Stateful,
        version: v.to_string(),
        server: server_name(result),
    })
}

/// Whether a failed handshake means "try the other era": the method is unknown, the request
/// was refused as malformed or premature (a stateful server asked `server/discover` before
/// `initialize`), or the version is not one the server speaks.
pub fn try_other(e: &RpcError) -> bool {
    matches!(
        e.code,
        METHOD_NOT_FOUND | UNSUPPORTED_VERSION | -32600 | -32602 | -32000 | -32002
    )
}

/// The versions a [`UNSUPPORTED_VERSION`] error says the server speaks.
pub fn supported(e: &RpcError) -> Vec<String> {
    e.data
        .as_ref()
        .and_then(|d| d.get("supported"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The arguments a tool asks to see mirrored as HTTP headers (MCP 2026-07-28, SEP-2243,
/// "x-mcp-header"): (property, header name) for each property of its input schema that has
/// `x-mcp-header`. Errors (the tool is then left out: "clients MUST reject such tools"): a name
/// that is empty or not an HTTP token (ASCII letters, digits and ``!#$%&'*+-.^_`|~``: no space,
/// colon or control character), a property that is not a string, integer or boolean, or a
/// name used twice (case-insensitively).
pub fn param_headers(schema: &Value) -> Result<Vec<(String, String)>, String> {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(Vec::new());
    };
    let mut out: Vec<(String, String)> = Vec::new();
    for (prop, def) in props {
        let Some(h) = def.get("x-mcp-header") else {
            continue;
        };
        let name = h
            .as_str()
            .ok_or_else(|| format!("{prop}: x-mcp-header is not a string"))?;
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if name.is_empty() || !name.chars().all(token) {
            return Err(format!(
                "{prop}: x-mcp-header {name:?} is not a header name"
            ));
        }
        let kind = def.get("type").and_then(Value::as_str).unwrap_or("");
        if !matches!(kind, "string" | "integer" | "boolean") {
            return Err(format!(
                "{prop}: x-mcp-header on a {} (only a string, integer or boolean)",
                if kind.is_empty() {
                    "value of no type"
                } else {
                    kind
                }
            ));
        }
        if out.iter().any(|(_, n)| n.eq_ignore_ascii_case(name)) {
            return Err(format!("x-mcp-header {name:?} is used twice"));
        }
        out.push((prop.clone(), name.to_string()));
    }
    Ok(out)
}

/// The `Mcp-Param-NAME` header value of an argument (SEP-2243, "Value encoding"): an integer
/// or a boolean as its JSON text; a string as it is when every character is printable ASCII
/// and it neither starts nor ends with whitespace, else `=?base64?…?=` of its UTF-8 bytes.
/// None: null or another type (no header).
pub fn param_header_value(v: &Value) -> Option<String> {
    match v {
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => {
            let plain = s.chars().all(|c| (' '..='~').contains(&c)) && s.trim() == s;
            Some(if plain {
                s.clone()
            } else {
                format!("=?base64?{}?=", base64(s.as_bytes()))
            })
        }
        _ => None,
    }
}

/// The `Mcp-Param-*` headers of a call of a tool with `headers` (from [`param_headers`]).
pub fn param_header_pairs(
    headers: &[(String, String)],
    arguments: &Value,
) -> Vec<(String, String)> {
    headers
        .iter()
        .filter_map(|(prop, name)| {
            let v = param_header_value(arguments.get(prop)?)?;
            Some((format!("Mcp-Param-{name}"), v))
        })
        .collect()
}

/// Standard base64 with padding (RFC 4648 §4).
fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// One tool as `tools/list` gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// Its name (what `tools/call` takes).
    pub name: String,
    /// Its description (may be several lines, or empty).
    pub description: String,
    /// Its input schema (a JSON Schema object).
    pub input_schema: Value,
}

impl Tool {
    /// The first line of the description, at most `max` bytes (a cut one ends in `…`).
    pub fn one_line(&self, max: usize) -> String {
        let line = self.description.trim().lines().next().unwrap_or("").trim();
        let cut = crate::text::cut(line, max.saturating_sub(1));
        if cut.len() < line.len() {
            format!("{}…", cut.trim_end())
        } else {
            line.to_string()
        }
    }
}

/// One page of `tools/list`: the tools, and the cursor of the next page.
///
/// Errors: no `tools` array. A tool without a name is skipped.
pub fn tools_page(result: &Value) -> Result<(Vec<Tool>, Option<String>), McpError> {
    tools_page_checked(result).map(|(tools, _, next)| (tools, next))
}

/// One page of `tools/list`: the usable tools, those left out because their `x-mcp-header` is
/// invalid ((name, why) each; SEP-2243: the others stay usable), the next cursor.
pub type Page = (Vec<Tool>, Vec<(String, String)>, Option<String>);

/// [`tools_page`], with the tools left out (see [`Page`]).
///
/// Errors: no `tools` array.
pub fn tools_page_checked(result: &Value) -> Result<Page, McpError> {
    let all: Vec<Tool> = result
        .get("tools")
        .and_then(Value::as_array)
        .ok_or_else(|| McpError::Protocol("tools/list answered without a tools array".into()))?
        .iter()
        .filter_map(|t| {
            Some(Tool {
                name: t.get("name")?.as_str()?.to_string(),
                description: t
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                input_schema: t
                    .get("inputSchema")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"})),
            })
        })
        .collect();
    let mut tools = Vec::new();
    let mut left_out = Vec::new();
    for t in all {
        match param_headers(&t.input_schema) {
            Ok(_) => tools.push(t),
            Err(why) => left_out.push((t.name, why)),
        }
    }
    let next = result
        .get("nextCursor")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .map(str::to_string);
    Ok((tools, left_out, next))
}

/// Checks a result's `resultType` (2026-07-28): absent or `complete` is a result; anything
/// else (`input_required`: the server asks the client for input) is an error tern names.
pub fn complete(result: &Value) -> Result<(), McpError> {
    match result.get("resultType").and_then(Value::as_str) {
        None | Some("complete") => Ok(()),
        Some("input_required") => Err(McpError::Protocol(
            "the server asks for input (elicitation, sampling or roots), which tern does not offer"
                .into(),
        )),
        Some(other) => Err(McpError::Protocol(format!(
            "a result of type {other:?}, which tern does not know"
        ))),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn x_mcp_header_names_types_and_values_follow_sep_2243() {
        use super::*;
        let schema = |props: Value| json!({"type": "object", "properties": props});
        let ok = param_headers(&schema(json!({
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "integer", "x-mcp-header": "N"},
            "plain": {"type": "string"}
        })))
        .unwrap();
        assert_eq!(ok.len(), 2);
        for bad in [
            json!({"v": {"type": "string", "x-mcp-header": ""}}),
            json!({"v": {"type": "string", "x-mcp-header": "My Region"}}),
            json!({"v": {"type": "string", "x-mcp-header": "Region:1"}}),
            json!({"v": {"type": "string", "x-mcp-header": "Région"}}),
            json!({"v": {"type": "string", "x-mcp-header": "Tab\there"}}),
            json!({"v": {"type": "number", "x-mcp-header": "V"}}),
            json!({"v": {"type": "object", "x-mcp-header": "V"}}),
            json!({"a": {"type": "string", "x-mcp-header": "K"}, "b": {"type": "string", "x-mcp-header": "k"}}),
        ] {
            assert!(param_headers(&schema(bad.clone())).is_err(), "{bad}");
        }
        let v = |x: Value| param_header_value(&x);
        assert_eq!(v(json!("us-west1")).as_deref(), Some("us-west1"));
        assert_eq!(v(json!("us west 1")).as_deref(), Some("us west 1"));
        assert_eq!(v(json!("")).as_deref(), Some(""));
        assert_eq!(v(json!(42)).as_deref(), Some("42"));
        assert_eq!(v(json!(false)).as_deref(), Some("false"));
        assert_eq!(
            v(json!(" padded ")).as_deref(),
            Some("=?base64?IHBhZGRlZCA=?=")
        );
        assert_eq!(
            v(json!("Hello, 世界")).as_deref(),
            Some("=?base64?SGVsbG8sIOS4lueVjA==?=")
        );
        assert_eq!(v(json!("a\nb")).as_deref(), Some("=?base64?YQpi?="));
        assert_eq!(v(Value::Null), None);
        let pairs = param_header_pairs(&ok, &json!({"region": "eu", "n": null, "plain": "x"}));
        assert_eq!(pairs, [("Mcp-Param-Region".to_string(), "eu".to_string())]);
    }

    use super::*;

    #[test]
    fn requests_carry_meta_and_keep_the_callers() {
        let r = request(
            7,
            "tools/call",
            Some(json!({"name": "x", "_meta": {"progressToken": 1}})),
            STATELESS,
        );
        assert_eq!(r["id"], 7);
        assert_eq!(r["params"]["name"], "x");
        assert_eq!(r["params"]["_meta"]["progressToken"], 1);
        assert_eq!(r["params"]["_meta"][META_VERSION], STATELESS);
        assert!(r["params"]["_meta"][META_CAPABILITIES].is_object());
        assert_eq!(r["params"]["_meta"][META_CLIENT]["name"], "tern");
        let r = request(1, "tools/list", None, STATEFUL);
        assert_eq!(r["params"]["_meta"][META_VERSION], STATEFUL);
    }

    #[test]
    fn messages_are_classified() {
        assert_eq!(
            classify(json!({"jsonrpc":"2.0","id":1,"result":{"a":1}})),
            Incoming::Response {
                id: json!(1),
                outcome: Ok(json!({"a":1}))
            }
        );
        let Incoming::Response {
            outcome: Err(e), ..
        } = classify(json!({"id":"x","error":{"code":-32601,"message":"nope"}}))
        else {
            panic!()
        };
        assert_eq!(e.code, METHOD_NOT_FOUND);
        assert!(try_other(&e));
        assert_eq!(
            classify(json!({"id":3,"method":"ping"})),
            Incoming::Request {
                id: json!(3),
                method: "ping".into()
            }
        );
        assert_eq!(
            classify(json!({"method":"notifications/message"})),
            Incoming::Notification
        );
        assert!(matches!(classify(json!([1])), Incoming::Invalid(_)));
        assert!(matches!(classify(json!({"id":1})), Incoming::Invalid(_)));
        assert_eq!(answer(json!(3), "ping")["result"], json!({}));
        assert_eq!(
            answer(json!(4), "sampling/createMessage")["error"]["code"],
            METHOD_NOT_FOUND
        );
    }

    #[test]
    fn both_handshakes_are_read() {
        let d = discovered(&json!({"supportedVersions":[STATELESS],"capabilities":{},
            "serverInfo":{"name":"s","version":"1"}}))
        .unwrap()
        .unwrap();
        assert_eq!(
            (d.era, d.version.as_str(), d.server.as_str()),
            (Era::Stateless, STATELESS, "s 1")
        );
        assert_eq!(
            discovered(&json!({"supportedVersions":["2025-06-18"]})).unwrap(),
            None
        );
        assert!(discovered(&json!({"supportedVersions":["1999-01-01"]})).is_err());
        assert_eq!(discovered(&json!({})).unwrap(), None);
        let i = initialized(&json!({"protocolVersion":"2025-06-18","serverInfo":{"name":"old"}}))
            .unwrap();
        assert_eq!((i.era, i.version.as_str()), (Era::Stateful, "2025-06-18"));
        assert!(initialized(&json!({"protocolVersion":"2030-01-01"})).is_err());
        let e = RpcError {
            code: UNSUPPORTED_VERSION,
            message: "no".into(),
            data: Some(json!({"supported":[STATELESS]})),
        };
        assert_eq!(supported(&e), vec![STATELESS.to_string()]);
    }

    #[test]
    fn tool_pages_and_result_types() {
        let (tools, next) = tools_page(&json!({"tools":[
            {"name":"a","description":"First line.\nSecond.","inputSchema":{"type":"object"}},
            {"description":"no name"},
            {"name":"b"}],"nextCursor":"p2"}))
        .unwrap();
        assert_eq!(tools.len(), 2);
        assert_eq!(tools[0].one_line(80), "First line.");
        assert_eq!(tools[0].one_line(6), "First…");
        assert_eq!(tools[1].input_schema, json!({"type":"object"}));
        assert_eq!(next.as_deref(), Some("p2"));
        assert_eq!(
            tools_page(&json!({"tools":[],"nextCursor":""})).unwrap().1,
            None
        );
        assert!(tools_page(&json!({})).is_err());
        assert!(complete(&json!({"content":[]})).is_ok());
        assert!(complete(&json!({"resultType":"complete"})).is_ok());
        assert!(complete(&json!({"resultType":"input_required"})).is_err());
    }
}
