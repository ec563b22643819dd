//! Anthropic Messages API, streaming.
//!
//! The body is compact JSON with a fixed field order and `messages` last. Prompt caching uses
//! explicit breakpoints (Anthropic Messages API, prompt caching: `cache_control` marks the end of
//! a cacheable prefix, at most 4 per request): one on the system prompt (which caches the tools
//! before it too), one on the last block before the tail, and one where the previous request's
//! last breakpoint was, so the next request hits the cache exactly even when a turn added more
//! than the 20 blocks the cache looks back over.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;

use serde::Serialize;

use super::http::{HttpConfig, StreamDecoder, Transport, classify_error, redact, snippet};
use super::sse::SseEvent;
use super::{Completion, ErrorKind, Provider, ProviderError, RawToolCall, Request, Usage};
use crate::message::Message;

/// The Anthropic API's base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The `anthropic-version` header value sent (Anthropic API versioning).
pub const API_VERSION: &str = "2023-06-01";

/// An Anthropic Messages API server.
#[derive(Debug, Clone)]
pub struct Anthropic {
    transport: Transport,
    url: String,
    api_key: Option<String>,
}

impl Anthropic {
    /// A client for the server at `base_url` (normally [`DEFAULT_BASE_URL`]; a trailing slash or
    /// a trailing `/v1` is fine): requests go to `{base_url}/v1/messages`. `api_key` is sent as
    /// `x-api-key` and left out when None.
    pub fn new(config: HttpConfig, base_url: &str, api_key: Option<String>) -> Self {
        let base = base_url.trim_end_matches('/');
        let base = base.strip_suffix("/v1").unwrap_or(base);
        Anthropic {
            transport: Transport::new(config),
            url: format!("{base}/v1/messages"),
            api_key,
        }
    }
}

impl Provider for Anthropic {
    fn name(&self) -> &'static str {
        "anthropic"
    }

    fn body(&self, req: &Request<'_>) -> Vec<u8> {
        body(req)
    }

    fn complete(
        &mut self,
        body: &[u8],
        on_text: &mut dyn FnMut(&str),
        cancel: &AtomicBool,
    ) -> Result<Completion, ProviderError> {
        let mut headers = vec![
            ("content-type", "application/json"),
            ("accept", "text/event-stream"),
            ("anthropic-version", API_VERSION),
        ];
        if let Some(k) = &self.api_key {
            headers.push(("x-api-key", k.as_str()));
        }
        let secret = self.api_key.as_deref();
        let mut decoder = Decoder::new(secret);
        self.transport.post_sse(
            &self.url,
            &headers,
            body,
            secret,
            &mut decoder,
            on_text,
            cancel,
        )
    }
}

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    max_tokens: u32,
    stream: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<Block<'a>>,
    messages: Vec<Msg<'a>>,
}

#[derive(Serialize)]
struct Tool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a serde_json::Value,
}

#[derive(Serialize)]
struct Msg<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

#[derive(Serialize, Clone, Copy)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
}

const EPHEMERAL: CacheControl = CacheControl { kind: "ephemeral" };

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: Cow<'a, str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: &'a serde_json::Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolResult {
        tool_use_id: &'a str,
        #[serde(skip_serializing_if = "str::is_empty")]
        content: &'a str,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
}

impl Block<'_> {
    fn set_cache_control(&mut self) {
        let (Block::Text { cache_control, .. }
        | Block::ToolUse { cache_control, .. }
        | Block::ToolResult { cache_control, .. }) = self;
        *cache_control = Some(EPHEMERAL);
    }
}

/// The Messages API body for `req` (compact JSON): `model`, `max_tokens`
/// (`req.max_output_tokens`, at least 1), `stream`, `tools` (`{name, description,
/// input_schema}`, omitted when empty), `system` (one text block with `cache_control`),
/// `messages`.
///
/// Consecutive user and tool messages merge into one user message whose blocks keep their order
/// (`tool_result` {tool_use_id, content, is_error only when true}, `text`); an assistant message
/// is a `text` block (when its text is not blank) then its `tool_use` blocks. No empty or
/// whitespace-only text block is ever sent, and a message left with no block is dropped
/// (case C12). `cache_control` marks the last block of the last message and the last block of
/// the user message before the latest assistant message (where the previous request's
/// breakpoint was): three breakpoints at most, under the API's limit of four. The tail is one
/// more `text` block after the last message's breakpoint.
pub fn body(req: &Request<'_>) -> Vec<u8> {
    let mut messages: Vec<Msg<'_>> = Vec::new();
    for m in req.messages {
        let role = if matches!(m, Message::Assistant { .. }) {
            "assistant"
        } else {
            "user"
        };
        let merge = role == "user" && messages.last().is_some_and(|l| l.role == "user");
        if !merge {
            messages.push(Msg {
                role,
                content: Vec::new(),
            });
        }
        // The push above guarantees a last message.
        let Some(content) = messages.last_mut().map(|l| &mut l.content) else {
            continue;
        };
        match m {
            Message::User { content: text } => {
                if !text.trim().is_empty() {
                    content.push(Block::Text {
                        text: Cow::Borrowed(text),
                        cache_control: None,
                    });
                }
            }
            Message::Tool {
                tool_call_id,
                content: text,
                is_error,
                ..
            } => content.push(Block::ToolResult {
                tool_use_id: tool_call_id,
                content: text,
                is_error: *is_error,
                cache_control: None,
            }),
            Message::Assistant { text, tool_calls } => {
                if !text.trim().is_empty() {
                    content.push(Block::Text {
                        text: Cow::Borrowed(text),
                        cache_control: None,
                    });
                }
                for c in tool_calls {
                    content.push(Block::ToolUse {
                        id: &c.id,
                        name: &c.name,
                        input: &c.arguments,
                        cache_control: None,
                    });
                }
            }
        }
    }
    messages.retain(|m| !m.content.is_empty());

    if let Some(last) = messages.last_mut().and_then(|m| m.content.last_mut()) {
        last.set_cache_control();
    }
    if let Some(a) = messages.iter().rposition(|m| m.role == "assistant")
        && a > 0
        && messages[a - 1].role == "user"
        && let Some(b) = messages[a - 1].content.last_mut()
    {
        b.set_cache_control();
    }
    if let Some(tail) = req.tail.filter(|t| !t.trim().is_empty()) {
        let block = Block::Text {
            text: Cow::Borrowed(tail),
            cache_control: None,
        };
        match messages.last_mut() {
            Some(m) => m.content.push(block),
            None => messages.push(Msg {
                role: "user",
                content: vec![block],
            }),
        }
    }

    let system = if req.system.trim().is_empty() {
        Vec::new()
    } else {
        vec![Block::Text {
            text: Cow::Borrowed(req.system),
            cache_control: Some(EPHEMERAL),
        }]
    };
    let body = Body {
        model: req.model,
        max_tokens: req.max_output_tokens.max(1),
        stream: true,
        tools: req
            .tools
            .iter()
            .map(|t| Tool {
                name: t.name,
                description: &t.description,
                input_schema: &t.parameters,
            })
            .collect(),
        system,
        messages,
    };
    // Serializing plain structs of strings and Values cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}

/// Decoder of a Messages API stream (Anthropic Messages API, streaming): `message_start`
/// (usage), `content_block_start` / `_delta` / `_stop` (text, `tool_use` with
/// `input_json_delta.partial_json` joined; thinking blocks ignored), `message_delta`
/// (`stop_reason`, output tokens), `message_stop` (complete), `ping` (ignored), `error`
/// (classified: `overloaded_error` / `rate_limit_error` → [`ErrorKind::Overloaded`]).
///
/// Usage: input = `input_tokens + cache_read_input_tokens + cache_creation_input_tokens`,
/// cached = `cache_read_input_tokens`, cache write = `cache_creation_input_tokens`.
/// End of stream before `message_stop` → [`ErrorKind::EarlyEnd`] (case C10).
#[derive(Debug, Default)]
pub struct Decoder {
    secret: Option<String>,
    text: String,
    calls: Vec<RawToolCall>,
    /// Content block index → position in `calls`, for `tool_use` blocks only.
    tool_blocks: HashMap<u64, usize>,
    /// A tool_use block's `input` from its start event, used when no `partial_json` came.
    start_inputs: HashMap<u64, String>,
    stop_reason: Option<String>,
    input_tokens: u64,
    cache_read: u64,
    cache_creation: u64,
    output_tokens: u64,
    done: bool,
}

impl Decoder {
    /// A decoder; `secret` (the API key) is redacted from error frames it quotes.
    pub fn new(secret: Option<&str>) -> Self {
        Decoder {
            secret: secret.map(str::to_string),
            ..Decoder::default()
        }
    }

    fn usage(&mut self, u: Option<&serde_json::Value>) {
        let Some(u) = u else { return };
        let num = |k: &str| u.get(k).and_then(serde_json::Value::as_u64);
        if let Some(n) = num("input_tokens") {
            self.input_tokens = n;
        }
        if let Some(n) = num("cache_read_input_tokens") {
            self.cache_read = n;
        }
        if let Some(n) = num("cache_creation_input_tokens") {
            self.cache_creation = n;
        }
        if let Some(n) = num("output_tokens") {
            self.output_tokens = n;
        }
    }

    fn bad(&self, what: &str, data: &str) -> ProviderError {
        ProviderError::new(
            ErrorKind::BadResponse,
            format!(
                "{what}: {}",
                snippet(&redact(data, self.secret.as_deref()), 200)
            ),
        )
    }
}

impl StreamDecoder for Decoder {
    fn event(&mut self, ev: &SseEvent, on_text: &mut dyn FnMut(&str)) -> Result<(), ProviderError> {
        let data = ev.data.trim();
        if ev.event.as_deref() == Some("error") {
            return Err(classify_error(None, data, self.secret.as_deref()));
        }
        if data.is_empty() {
            return Ok(());
        }
        let v: serde_json::Value = serde_json::from_str(data)
            .map_err(|e| self.bad(&format!("a stream event is not valid JSON ({e})"), data))?;
        let ty = v
            .get("type")
            .and_then(|t| t.as_str())
            .or(ev.event.as_deref())
            .unwrap_or("");
        let index = v.get("index").and_then(serde_json::Value::as_u64);
        match ty {
            "message_start" => {
                let u = v.pointer("/message/usage").cloned();
                self.usage(u.as_ref());
            }
            "content_block_start" => {
                let block = v.get("content_block");
                let kind = block.and_then(|b| b.get("type")).and_then(|t| t.as_str());
                match (kind, index) {
                    (Some("text"), _) => {
                        let t = block.and_then(|b| b.get("text")).and_then(|t| t.as_str());
                        if let Some(t) = t.filter(|t| !t.is_empty()) {
                            on_text(t);
                            self.text.push_str(t);
                        }
                    }
                    (Some("tool_use"), Some(i)) => {
                        let s = |k: &str| {
                            block
                                .and_then(|b| b.get(k))
                                .and_then(|t| t.as_str())
                                .unwrap_or("")
                                .to_string()
                        };
                        self.tool_blocks.insert(i, self.calls.len());
                        self.calls.push(RawToolCall {
                            id: s("id"),
                            name: s("name"),
                            arguments: String::new(),
                        });
                        if let Some(input) = block.and_then(|b| b.get("input")) {
                            self.start_inputs.insert(i, input.to_string());
                        }
                    }
                    (Some("tool_use"), None) => {
                        return Err(self.bad("a tool_use block without an index", data));
                    }
                    // thinking, redacted_thinking, server tools: not part of tern's answer.
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = v.get("delta");
                let s = |k: &str| delta.and_then(|d| d.get(k)).and_then(|t| t.as_str());
                match s("type") {
                    Some("text_delta") => {
                        if let Some(t) = s("text").filter(|t| !t.is_empty()) {
                            on_text(t);
                            self.text.push_str(t);
                        }
                    }
                    Some("input_json_delta") => {
                        let pos = index.and_then(|i| self.tool_blocks.get(&i).copied());
                        let Some(pos) = pos else {
                            return Err(self.bad("input_json_delta for no tool_use block", data));
                        };
                        if let Some(p) = s("partial_json") {
                            self.calls[pos].arguments.push_str(p);
                        }
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(i) = index
                    && let Some(&pos) = self.tool_blocks.get(&i)
                    && self.calls[pos].arguments.trim().is_empty()
                {
                    // A tool without parameters streams no partial_json at all.
                    self.calls[pos].arguments =
                        self.start_inputs.remove(&i).unwrap_or_else(|| "{}".into());
                }
            }
            "message_delta" => {
                if let Some(r) = v.pointer("/delta/stop_reason").and_then(|r| r.as_str()) {
                    self.stop_reason = Some(r.to_string());
                }
                let u = v.get("usage").cloned();
                self.usage(u.as_ref());
            }
            "message_stop" => self.done = true,
            "error" => return Err(classify_error(None, data, self.secret.as_deref())),
            // `ping` and event types added later.
            _ => {}
        }
        Ok(())
    }

    fn done(&self) -> bool {
        self.done
    }

    fn finish(&mut self) -> Result<Completion, ProviderError> {
        if !self.done {
            return Err(ProviderError::new(
                ErrorKind::EarlyEnd,
                format!(
                    "the stream ended before message_stop after {} bytes of text and {} tool call(s)",
                    self.text.len(),
                    self.calls.len()
                ),
            ));
        }
        Ok(Completion {
            text: std::mem::take(&mut self.text),
            tool_calls: std::mem::take(&mut self.calls),
            finish_reason: self.stop_reason.take(),
            usage: Usage {
                input_tokens: self
                    .input_tokens
                    .saturating_add(self.cache_read)
                    .saturating_add(self.cache_creation),
                cached_tokens: self.cache_read,
                cache_write_tokens: self.cache_creation,
                output_tokens: self.output_tokens,
            },
        })
    }
}
