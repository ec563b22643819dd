//! Anthropic Messages API, streaming.
//!
//! The body is compact JSON with a fixed field order and `messages` last. Prompt caching uses
//! explicit breakpoints (Anthropic Messages API, prompt caching: `cache_control` marks the end of
//! a cacheable prefix, at most 4 per request): one on the system prompt (which caches the tools
//! before it too) and one on the last block before the tail (see [`body`]).

use std::borrow::Cow;
use std::collections::HashMap;

use serde::Serialize;

use super::http::{HttpConfig, StreamDecoder, Transport, classify_error, redact, snippet};
use super::reasoning::Effort;
use super::sse::SseEvent;
use super::{Completion, ErrorKind, Provider, ProviderError, RawToolCall, Request, Usage};
use crate::message::{Message, Reasoning};

/// The Anthropic API's base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The `anthropic-version` header value sent (Anthropic API versioning).
pub const API_VERSION: &str = "2023-06-01";

/// An Anthropic Messages API server.
#[derive(Debug)]
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
        Anthropic {
            transport: Transport::new(config),
            url: super::http::endpoint(base_url, "/v1", "/v1/messages"),
            api_key,
        }
    }
}

impl Provider for Anthropic {
    fn name(&self) -> super::Wire {
        super::Wire::Anthropic
    }

    fn body(&self, req: &Request<'_>) -> Vec<u8> {
        body(req)
    }

    fn complete(
        &mut self,
        body: &[u8],
        _purpose: crate::event::Purpose,
        on_text: &mut dyn FnMut(crate::provider::Streamed<'_>),
        cancel: &crate::cancel::CancelToken,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    /// Extended thinking (`--reasoning-effort`): `{"type":"enabled","budget_tokens":N}` or
    /// `{"type":"disabled"}`; absent: the model's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<serde_json::Value>,
    stream: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<Block<'a>>,
    messages: Vec<Msg<'a>>,
    /// `{"type":"none"}` only when the runtime asks for a text answer; after `messages`, so the
    /// body keeps its byte prefix.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<serde_json::Value>,
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
    content: Vec<Part<'a>>,
}

/// One content block: one tern builds, or a stored thinking block sent back exactly as the
/// API gave it (its signature binds it to everything before it).
#[derive(Serialize)]
#[serde(untagged)]
enum Part<'a> {
    Block(Block<'a>),
    Kept(&'a serde_json::Value),
}

impl Part<'_> {
    /// Marks a cache breakpoint here (a kept thinking block is never marked: the API refuses
    /// `cache_control` on one, and it never ends a message).
    fn set_cache_control(&mut self, mark: CacheControl) {
        if let Part::Block(b) = self {
            b.set_cache_control(mark);
        }
    }
}

#[derive(Serialize, Clone, Copy)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
    /// `1h` for the one-hour cache (Anthropic, prompt caching: "1-hour cache duration");
    /// absent for the default five minutes.
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<&'static str>,
}

/// Anthropic Messages API, prompt caching: a breakpoint finds an earlier cache entry only within
/// the 20 blocks before it.
const LOOKBACK_BLOCKS: usize = 20;

const EPHEMERAL: CacheControl = CacheControl {
    kind: "ephemeral",
    ttl: None,
};

const EPHEMERAL_1H: CacheControl = CacheControl {
    kind: "ephemeral",
    ttl: Some("1h"),
};

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
    fn set_cache_control(&mut self, mark: CacheControl) {
        let (Block::Text { cache_control, .. }
        | Block::ToolUse { cache_control, .. }
        | Block::ToolResult { cache_control, .. }) = self;
        *cache_control = Some(mark);
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
/// (case C12). `cache_control` marks the system block and the last block of the last message;
/// the tail is one more `text` block after that breakpoint. Only when the latest turn added 20
/// blocks or more is the previous request's breakpoint (the last block of the user message
/// before the latest assistant message) marked as well, since the cache looks back no further:
/// three breakpoints at most, under the API's limit of four. Otherwise every earlier message
/// serializes to the same bytes in every later body.
pub fn body(req: &Request<'_>) -> Vec<u8> {
    let budget = req.reasoning.effort.and_then(Effort::anthropic_budget);
    let mut messages = alternating(req.messages, budget.is_some());
    let mark = if req.long_cache {
        EPHEMERAL_1H
    } else {
        EPHEMERAL
    };

    if let Some(last) = messages.last_mut().and_then(|m| m.content.last_mut()) {
        last.set_cache_control(mark);
    }
    // The previous request ended with the user message before the latest assistant message. The
    // cache looks back at most 20 blocks from a breakpoint for an earlier entry; when this turn
    // added more blocks than that, mark the previous end too, or the whole prefix is rewritten.
    if let Some(a) = messages.iter().rposition(|m| m.role == "assistant")
        && a > 0
        && messages[a - 1].role == "user"
        && messages[a..].iter().map(|m| m.content.len()).sum::<usize>() >= LOOKBACK_BLOCKS
        && let Some(b) = messages[a - 1].content.last_mut()
    {
        b.set_cache_control(mark);
    }
    if let Some(tail) = req.tail.filter(|t| !t.trim().is_empty()) {
        let block = Part::Block(Block::Text {
            text: Cow::Borrowed(tail),
            cache_control: None,
        });
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
            cache_control: Some(mark),
        }]
    };
    // Anthropic docs, "Extended thinking": `budget_tokens` below `max_tokens` (the answer's cap
    // is added to the budget), and no `temperature` with thinking on.
    let thinking = match (req.reasoning.effort, budget) {
        (Some(_), Some(b)) => Some(serde_json::json!({"type": "enabled", "budget_tokens": b})),
        (Some(_), None) => Some(serde_json::json!({"type": "disabled"})),
        (None, _) => None,
    };
    let body = Body {
        model: req.model,
        max_tokens: req
            .max_output_tokens
            .max(1)
            .saturating_add(budget.unwrap_or(0)),
        temperature: req.temperature.filter(|_| budget.is_none()),
        thinking,
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
        tool_choice: (!req.tools_allowed).then(|| serde_json::json!({"type": "none"})),
        system,
        messages,
    };
    // Serializing plain structs of strings and Values cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}

/// The history as the Messages API takes it: user and assistant turns alternating (consecutive
/// user-side messages, tool results included, merged into one), blank text left out, and no
/// message without a block. With `thinking` on, an assistant message's stored thinking blocks go
/// first, unchanged, in their order (Anthropic docs, "Extended thinking", "Preserving thinking
/// blocks"); with it off, never.
fn alternating(history: &[Message], thinking: bool) -> Vec<Msg<'_>> {
    let mut messages: Vec<Msg<'_>> = Vec::new();
    for m in history {
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
            Message::User { content: text, .. } => {
                if !text.trim().is_empty() {
                    content.push(Part::Block(Block::Text {
                        text: Cow::Borrowed(text),
                        cache_control: None,
                    }));
                }
            }
            Message::Tool {
                tool_call_id,
                content: text,
                is_error,
                ..
            } => content.push(Part::Block(Block::ToolResult {
                tool_use_id: tool_call_id,
                content: text,
                is_error: *is_error,
                cache_control: None,
            })),
            Message::Assistant {
                text,
                tool_calls,
                reasoning,
            } => {
                let answered = !text.trim().is_empty() || !tool_calls.is_empty();
                if let (true, true, Some(Reasoning::Anthropic { blocks })) =
                    (thinking, answered, reasoning)
                {
                    content.extend(blocks.iter().map(Part::Kept));
                }
                if !text.trim().is_empty() {
                    content.push(Part::Block(Block::Text {
                        text: Cow::Borrowed(text),
                        cache_control: None,
                    }));
                }
                for c in tool_calls {
                    content.push(Part::Block(Block::ToolUse {
                        id: &c.id,
                        name: &c.name,
                        input: &c.arguments,
                        cache_control: None,
                    }));
                }
            }
        }
    }
    messages.retain(|m| !m.content.is_empty());
    messages
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
    stop_reason: Option<super::Finish>,
    input_tokens: u64,
    cache_read: u64,
    cache_creation: u64,
    output_tokens: u64,
    /// Why a usage figure was not believed ([`super::usage_figure`]).
    usage_refused: Option<String>,
    done: bool,
    /// Thinking and redacted-thinking blocks by content index, built as they stream.
    thinking: std::collections::BTreeMap<u64, serde_json::Value>,
    /// Runaway watches of the text and of the last tool input.
    watch_text: super::runaway::Watch,
    watch_call: super::runaway::Watch,
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
        // A figure that is not a token count refuses the whole reading (see `believed`).
        let mut refused = None;
        let mut num = |k: &str| {
            super::usage_figure(u.get(k), k).unwrap_or_else(|why| {
                refused.get_or_insert(why);
                None
            })
        };
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
        if let Some(why) = refused {
            self.usage_refused.get_or_insert(why);
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
    #[expect(
        clippy::too_many_lines,
        reason = "one arm per event type of Anthropic's Messages stream (message_start, content_block_start/delta/stop, message_delta, message_stop, ping, error), read top to bottom as the docs list them"
    )]
    fn event(
        &mut self,
        ev: &SseEvent,
        on_text: &mut dyn FnMut(crate::provider::Streamed<'_>),
    ) -> Result<(), ProviderError> {
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
                            on_text(crate::provider::Streamed::Text(t));
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
                    // Kept as the API gave it; its deltas complete it (`thinking`, `signature`).
                    (Some("thinking" | "redacted_thinking"), Some(i)) => {
                        if let Some(b) = block {
                            self.thinking.insert(i, b.clone());
                        }
                    }
                    // Server tools: not part of tern's answer.
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = v.get("delta");
                let s = |k: &str| delta.and_then(|d| d.get(k)).and_then(|t| t.as_str());
                match s("type") {
                    Some("text_delta") => {
                        if let Some(t) = s("text").filter(|t| !t.is_empty()) {
                            on_text(crate::provider::Streamed::Text(t));
                            self.text.push_str(t);
                        }
                    }
                    // A thinking block's text: shown as the model's reasoning and kept with its
                    // block, as its signature is (both go back unchanged).
                    Some(kind @ ("thinking_delta" | "signature_delta")) => {
                        let key = if kind == "thinking_delta" {
                            "thinking"
                        } else {
                            "signature"
                        };
                        let piece = s(key).unwrap_or("");
                        if kind == "thinking_delta" && !piece.is_empty() {
                            on_text(crate::provider::Streamed::Thought(piece));
                        }
                        if let Some(b) = index
                            .and_then(|i| self.thinking.get_mut(&i))
                            .and_then(serde_json::Value::as_object_mut)
                        {
                            let field = b.entry(key).or_insert_with(|| serde_json::Value::from(""));
                            let joined = format!("{}{piece}", field.as_str().unwrap_or(""));
                            *field = serde_json::Value::from(joined);
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
                    self.stop_reason = Some(super::Finish::from_wire(r));
                }
                let u = v.get("usage").cloned();
                self.usage(u.as_ref());
            }
            "message_stop" => self.done = true,
            "error" => return Err(classify_error(None, data, self.secret.as_deref())),
            // `ping` and event types added later.
            _ => {}
        }
        // A runaway (the text or a tool input repeating itself) ends the answer here.
        let call_run = self
            .calls
            .last()
            .is_some_and(|c| self.watch_call.runaway(&c.arguments));
        if call_run || self.watch_text.runaway(&self.text) {
            self.stop_reason = Some(super::Finish::Repetition);
            self.done = true;
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
        let (usage, usage_refused) = super::believed(
            Usage {
                reasoning_tokens: 0,
                input_tokens: self
                    .input_tokens
                    .saturating_add(self.cache_read)
                    .saturating_add(self.cache_creation),
                cached_tokens: self.cache_read,
                cache_write_tokens: self.cache_creation,
                output_tokens: self.output_tokens,
            },
            self.usage_refused.take(),
        );
        Ok(Completion {
            text: std::mem::take(&mut self.text),
            tool_calls: std::mem::take(&mut self.calls),
            finish_reason: self.stop_reason.take(),
            usage,
            reasoning: (!self.thinking.is_empty()).then(|| Reasoning::Anthropic {
                blocks: std::mem::take(&mut self.thinking).into_values().collect(),
            }),
            usage_refused,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolCall;
    use crate::provider::http::decode_chunks;
    use crate::tools::ToolSpec;
    use serde_json::{Value, json};

    fn decode(stream: &str) -> Result<Completion, ProviderError> {
        decode_chunks(&[stream.as_bytes()], &mut Decoder::new(None), &mut |_| {})
    }

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "bash",
            description: "Run a command.".into(),
            parameters: json!({"type":"object"}),
        }]
    }

    fn req<'a>(
        tools: &'a [ToolSpec],
        messages: &'a [Message],
        tail: Option<&'a str>,
    ) -> Request<'a> {
        Request {
            model: "claude",
            system: "sys",
            tools,
            messages,
            tail,
            cache_key: Some("ignored"),
            max_output_tokens: 4096,
            temperature: None,
            official_openai: false,
            tools_allowed: true,
            long_cache: false,
            reasoning: Default::default(),
        }
    }

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "bash".into(),
            arguments: json!({"command": "ls"}),
        }
    }

    /// A history of `turns` tool rounds after one user message.
    fn history(turns: usize) -> Vec<Message> {
        let mut m = vec![Message::user("go")];
        for i in 0..turns {
            let c = call(&format!("toolu_{i}"));
            m.push(Message::Assistant {
                reasoning: None,
                text: if i % 2 == 1 {
                    "hm".into()
                } else {
                    String::new()
                },
                tool_calls: vec![c.clone()],
            });
            m.push(Message::tool(&c, format!("out {i}"), false));
        }
        m
    }

    fn count(body: &[u8], needle: &str) -> usize {
        String::from_utf8_lossy(body).matches(needle).count()
    }

    #[test]
    fn body_shape() {
        let t = tools();
        let c = call("toolu_1");
        let msgs = vec![
            Message::user("hi"),
            Message::Assistant {
                reasoning: None,
                text: "Looking.".into(),
                tool_calls: vec![c.clone()],
            },
            Message::tool(&c, "", true),
            Message::user("and?"),
        ];
        let body = String::from_utf8(body(&req(&t, &msgs, Some("<ws/>")))).unwrap();
        assert_eq!(
            body,
            concat!(
                r#"{"model":"claude","max_tokens":4096,"stream":true,"#,
                r#""tools":[{"name":"bash","description":"Run a command.","input_schema":{"type":"object"}}],"#,
                r#""system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral"}}],"#,
                r#""messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},"#,
                r#"{"role":"assistant","content":[{"type":"text","text":"Looking."},{"type":"tool_use","id":"toolu_1","name":"bash","input":{"command":"ls"}}]},"#,
                r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","is_error":true},"#,
                r#"{"type":"text","text":"and?","cache_control":{"type":"ephemeral"}},{"type":"text","text":"<ws/>"}]}]}"#
            )
        );
    }

    #[test]
    fn c12_never_an_empty_text_block() {
        let c = call("toolu_1");
        let msgs = vec![
            Message::user("hi"),
            Message::Assistant {
                reasoning: None,
                text: " \n ".into(),
                tool_calls: vec![],
            },
            Message::user("  "),
            Message::Assistant {
                reasoning: None,
                text: "\t".into(),
                tool_calls: vec![c.clone()],
            },
            Message::tool(&c, "x", false),
        ];
        let body = body(&req(&[], &msgs, Some("   ")));
        let v: Value = serde_json::from_slice(&body).unwrap();
        for m in v["messages"].as_array().unwrap() {
            let blocks = m["content"].as_array().unwrap();
            assert!(!blocks.is_empty(), "empty message in {v}");
            for b in blocks {
                if b["type"] == "text" {
                    assert!(!b["text"].as_str().unwrap().trim().is_empty(), "{v}");
                }
            }
        }
        assert_eq!(v["messages"].as_array().unwrap().len(), 3, "{v}");
    }

    #[test]
    fn at_most_four_cache_breakpoints() {
        let t = tools();
        for parallel in [1, 3, 12] {
            for turns in 0..30 {
                let mut h = vec![Message::user("go")];
                for i in 0..turns {
                    let calls: Vec<ToolCall> =
                        (0..parallel).map(|j| call(&format!("t{i}_{j}"))).collect();
                    h.push(Message::Assistant {
                        reasoning: None,
                        text: "ok".into(),
                        tool_calls: calls.clone(),
                    });
                    h.extend(calls.iter().map(|c| Message::tool(c, "out", false)));
                }
                for tail in [None, Some("<ws/>")] {
                    let b = body(&req(&t, &h, tail));
                    let n = count(&b, "cache_control");
                    assert!((2..=4).contains(&n), "{turns}x{parallel}: {n} breakpoints");
                }
            }
        }
    }

    /// The next body repeats the previous one up to its breakpoint marker: only the marker and
    /// the tail move.
    #[test]
    fn next_body_extends_the_previous_up_to_its_breakpoint() {
        let t = tools();
        for turns in 0..8 {
            let prev = body(&req(&t, &history(turns), Some("<ws>1</ws>")));
            let next = body(&req(&t, &history(turns + 1), Some("<ws>2</ws>")));
            let end = String::from_utf8_lossy(&prev)
                .rfind(
                    r#","cache_control":{"type":"ephemeral"}},{"type":"text","text":"<ws>1</ws>"}"#,
                )
                .unwrap();
            assert!(next.starts_with(&prev[..end]), "turn {turns}");
            assert_eq!(count(&next, "cache_control"), 2);
        }
    }

    #[test]
    fn a_turn_of_many_blocks_keeps_the_previous_breakpoint() {
        let mut h = history(1);
        let calls: Vec<ToolCall> = (0..10).map(|i| call(&format!("p{i}"))).collect();
        h.push(Message::Assistant {
            reasoning: None,
            text: String::new(),
            tool_calls: calls.clone(),
        });
        for c in &calls {
            h.push(Message::tool(c, "ok", false));
        }
        let b = body(&req(&tools(), &h, None));
        assert_eq!(count(&b, "cache_control"), 3);
        let v: Value = serde_json::from_slice(&b).unwrap();
        // The previous request's last block: the tool result of toolu_0.
        assert_eq!(
            v["messages"][2]["content"][0]["cache_control"]["type"],
            "ephemeral"
        );
    }

    #[test]
    fn decode_text_tools_and_usage() {
        let s = concat!(
            "event: message_start\n",
            r#"data: {"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":10,"cache_read_input_tokens":2000,"cache_creation_input_tokens":300,"output_tokens":1}}}"#,
            "\n\n",
            "event: ping\ndata: {\"type\": \"ping\"}\n\n",
            r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
            "\n\n",
            r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"secret"}}"#,
            "\n\n",
            r#"data: {"type":"content_block_stop","index":0}"#,
            "\n\n",
            r#"data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
            "\n\n",
            r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hé"}}"#,
            "\n\n",
            r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"llo"}}"#,
            "\n\n",
            r#"data: {"type":"content_block_stop","index":1}"#,
            "\n\n",
            r#"data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"bash","input":{}}}"#,
            "\n\n",
            r#"data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}"#,
            "\n\n",
            r#"data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"command\": \"l"}}"#,
            "\n\n",
            r#"data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"s\"}"}}"#,
            "\n\n",
            r#"data: {"type":"content_block_stop","index":2}"#,
            "\n\n",
            r#"data: {"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_2","name":"work_update","input":{}}}"#,
            "\n\n",
            r#"data: {"type":"content_block_stop","index":3}"#,
            "\n\n",
            r#"data: {"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":42}}"#,
            "\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        let (mut seen, mut thought) = (String::new(), String::new());
        let c = decode_chunks(&[s.as_bytes()], &mut Decoder::new(None), &mut |t| match t {
            crate::provider::Streamed::Text(t) => seen.push_str(t),
            crate::provider::Streamed::Thought(t) => thought.push_str(t),
            crate::provider::Streamed::Waiting { .. } => {}
        })
        .unwrap();
        assert_eq!(seen, "Héllo");
        // The thinking block streams as the model's reasoning, never into the answer.
        assert_eq!(thought, "secret");
        assert_eq!(c.text, "Héllo");
        assert_eq!(c.finish_reason, Some(crate::provider::Finish::ToolCalls));
        assert_eq!(
            c.tool_calls,
            vec![
                RawToolCall {
                    id: "toolu_1".into(),
                    name: "bash".into(),
                    arguments: r#"{"command": "ls"}"#.into()
                },
                RawToolCall {
                    id: "toolu_2".into(),
                    name: "work_update".into(),
                    arguments: "{}".into()
                },
            ]
        );
        assert_eq!(
            c.usage,
            Usage {
                reasoning_tokens: 0,
                input_tokens: 2310,
                cached_tokens: 2000,
                cache_write_tokens: 300,
                output_tokens: 42
            }
        );
    }

    #[test]
    fn c10_eof_before_message_stop() {
        let s = concat!(
            r#"data: {"type":"message_start","message":{"usage":{"input_tokens":1}}}"#,
            "\n\n",
            r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            "\n\n",
            r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"par"}}"#,
            "\n\n",
        );
        let e = decode(s).unwrap_err();
        assert_eq!(e.kind, ErrorKind::EarlyEnd);
        assert!(e.retryable());
    }

    #[test]
    fn c13_error_frames() {
        let s = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
        let e = decode(s).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Overloaded);
        assert!(e.retryable());
        let s = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"prompt is too long: 9 tokens > 8 maximum\"}}\n\n";
        assert_eq!(decode(s).unwrap_err().kind, ErrorKind::ContextOverflow);
    }

    /// A thinking block streams as thought and is kept whole: its text joined, its signature
    /// from the signature delta; a redacted block as it came.
    #[test]
    fn thinking_blocks_are_kept_with_their_signatures() {
        let s = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"let me \"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"see\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQB\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"redacted_thinking\",\"data\":\"opaque\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"text\",\"text\":\"ok\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":5}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        let c = decode(s).unwrap();
        assert_eq!(c.text, "ok");
        assert_eq!(
            c.reasoning,
            Some(Reasoning::Anthropic {
                blocks: vec![
                    json!({"type": "thinking", "thinking": "let me see", "signature": "EqQB"}),
                    json!({"type": "redacted_thinking", "data": "opaque"}),
                ]
            })
        );
    }

    /// With thinking on, an assistant message's blocks go first, unchanged, and thinking,
    /// the budget and the cap are in the body (no temperature); off, none of it.
    #[test]
    fn thinking_blocks_go_back_only_with_thinking_on() {
        let t = tools();
        let block = json!({"type": "thinking", "thinking": "hmm", "signature": "S"});
        let msgs = vec![
            Message::user("go"),
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![call("toolu_1")],
                reasoning: Some(Reasoning::Anthropic {
                    blocks: vec![block.clone()],
                }),
            },
            Message::tool(
                &ToolCall {
                    id: "toolu_1".into(),
                    name: "bash".into(),
                    arguments: json!({}),
                },
                "a",
                false,
            ),
        ];
        let mut r = req(&t, &msgs, None);
        r.temperature = Some(0.3);
        r.reasoning.effort = Some(Effort::Medium);
        let v: Value = serde_json::from_slice(&body(&r)).unwrap();
        assert_eq!(
            v["thinking"],
            json!({"type": "enabled", "budget_tokens": 10_000})
        );
        assert_eq!(v["max_tokens"], 4096 + 10_000);
        assert!(v.get("temperature").is_none());
        assert_eq!(v["messages"][1]["content"][0], block);
        assert_eq!(v["messages"][1]["content"][1]["type"], "tool_use");
        r.reasoning.effort = None;
        let v: Value = serde_json::from_slice(&body(&r)).unwrap();
        assert!(v.get("thinking").is_none());
        assert_eq!(v["temperature"], 0.3);
        assert_eq!(v["messages"][1]["content"][0]["type"], "tool_use");
    }
}
